// Scalar primitives: the reference definition of every kernel.
//
// A "vector" is eight floats processed one by one, so the scalar tag walks the data in the
// same 8-element steps as AVX2 and accumulates into the same 8 partial sums.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qforge/core/dtype.hpp"
#include "qforge/core/half.hpp"
#include "qforge/simd/arch/detail/byte_bits.hpp"
#include "qforge/simd/no_contract.hpp"
#include "qforge/simd/kernel_table.hpp"
#include "qforge/simd/prefetch.hpp"
#include "qforge/simd/rounding.hpp"

namespace qforge::simd::detail::scalar_isa {

inline constexpr std::size_t lanes = 8;
struct vf {
    float v[8];
};
using acc8 = vf;

using ::qforge::simd::round_half_even;  // simd/rounding.hpp: the one definition
using ::qforge::simd::trunc_to_i32;     // the same

#define QFORGE_SCALAR_MAP(expr)       \
    vf r;                             \
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = (expr); \
    return r

inline vf vload(const float* p) noexcept {
    vf r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
}
inline void vstore(float* p, vf a) noexcept { std::memcpy(p, a.v, sizeof a.v); }
inline vf vset(float x) noexcept { QFORGE_SCALAR_MAP(x); }
inline vf vadd(vf a, vf b) noexcept { QFORGE_SCALAR_MAP(a.v[j] + b.v[j]); }
inline vf vsub(vf a, vf b) noexcept { QFORGE_SCALAR_MAP(a.v[j] - b.v[j]); }
inline vf vmul(vf a, vf b) noexcept { QFORGE_SCALAR_MAP(no_contract(a.v[j] * b.v[j])); }
inline vf vdiv(vf a, vf b) noexcept { QFORGE_SCALAR_MAP(a.v[j] / b.v[j]); }
// min/max as x86 defines them (second operand when unordered); inputs here are never NaN.
inline vf vmin(vf a, vf b) noexcept { QFORGE_SCALAR_MAP(a.v[j] < b.v[j] ? a.v[j] : b.v[j]); }
inline vf vmax(vf a, vf b) noexcept { QFORGE_SCALAR_MAP(a.v[j] > b.v[j] ? a.v[j] : b.v[j]); }
inline vf vabs(vf a) noexcept { QFORGE_SCALAR_MAP(std::fabs(a.v[j])); }
// vmax_magnitude(a, m): per lane, |a| or m (a non-negative float), whichever has the larger bit
// pattern as an unsigned integer. For numbers that is the larger; a NaN ranks above them all,
// so it sticks (a float max drops a NaN in one operand order or the other). Integer max: on
// x86 it leaves the multiply pipes to the multiplies.
inline vf vmax_magnitude(vf a, vf m) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) {
        std::uint32_t x, y;
        const float ax = std::fabs(a.v[j]);
        std::memcpy(&x, &ax, 4);
        std::memcpy(&y, &m.v[j], 4);
        r.v[j] = x > y ? ax : m.v[j];
    }
    return r;
}
inline vf vround(vf a) noexcept { QFORGE_SCALAR_MAP(round_half_even(a.v[j])); }
// vround_small: vround for |a| <= 2^22 (the callers' codes, clamped to a grid first), and for
// infinities and NaN; a zero may come out +0 where vround gives -0, and past 2^22 the result
// is unspecified. On AVX2 it is a + 1.5 * 2^23 - 1.5 * 2^23, exact there: the two adds run
// beside the multiplies where the round instruction (two micro-ops on Intel) shared their
// ports (the unweighted square error of the scale searches: 7 -> 5 operations on them; Intel
// Xeon, seed search 0.44-0.45 -> 0.49-0.50 G weights/s).
inline vf vround_small(vf a) noexcept { return vround(a); }
inline vf vsel_ge(vf x, vf t, vf a, vf b) noexcept { QFORGE_SCALAR_MAP(x.v[j] >= t.v[j] ? a.v[j] : b.v[j]); }
// x = 2^e * m with m in [0.75, 1.5) for a normal x > 0: one integer subtraction of 0.75's
// pattern moves the exponent up exactly when the mantissa is >= 1.5. Returns e, sets m.
inline vf vsplit_exponent(vf a, vf& m) noexcept {
    vf e;
    for (std::size_t j = 0; j < lanes; ++j) {
        const std::uint32_t bits = std::bit_cast<std::uint32_t>(a.v[j]);
        const std::int32_t k = static_cast<std::int32_t>(bits - 0x3F400000u) >> 23;
        m.v[j] = std::bit_cast<float>(bits - (static_cast<std::uint32_t>(k) << 23));
        e.v[j] = static_cast<float>(k);
    }
    return e;
}
// q * 2^n for integral n, where the product is a normal float: n is added to q's exponent
// field, which is the (exact) product without a multiplication.
inline vf vscale_pow2(vf q, vf n) noexcept {
    vf r;
    for (std::size_t j = 0; j < lanes; ++j)
        r.v[j] = std::bit_cast<float>(std::bit_cast<std::uint32_t>(q.v[j]) +
                                      (static_cast<std::uint32_t>(static_cast<std::int32_t>(n.v[j])) << 23));
    return r;
}
#undef QFORGE_SCALAR_MAP

inline bool vany_gt(vf a, vf b) noexcept {
    bool any = false;
    for (std::size_t j = 0; j < 8; ++j) any = any || a.v[j] > b.v[j];
    return any;
}
// vany_gt4: whether any lane of a, b, c or d is > t (one test for four steps).
inline bool vany_gt4(vf a, vf b, vf c, vf d, vf t) noexcept {
    return vany_gt(a, t) || vany_gt(b, t) || vany_gt(c, t) || vany_gt(d, t);
}
inline bool vany_nonfinite(vf a) noexcept {
    bool any = false;
    for (std::size_t j = 0; j < 8; ++j) any = any || !(std::fabs(a.v[j]) <= 3.40282347e38f);
    return any;
}
inline float vhmin(vf a) noexcept {
    float m = a.v[0];
    for (std::size_t j = 1; j < 8; ++j) m = a.v[j] < m ? a.v[j] : m;
    return m;
}
inline float vhmax(vf a) noexcept {
    float m = a.v[0];
    for (std::size_t j = 1; j < 8; ++j) m = a.v[j] > m ? a.v[j] : m;
    return m;
}
inline void vstore_codes(std::uint8_t* out, vf q) noexcept {
    for (std::size_t j = 0; j < 8; ++j) out[j] = static_cast<std::uint8_t>(trunc_to_i32(q.v[j]) & 0xFF);
}
inline void vstore_codes4(std::uint8_t* out, vf a, vf b, vf c, vf d) noexcept {
    vstore_codes(out, a);
    vstore_codes(out + lanes, b);
    vstore_codes(out + 2 * lanes, c);
    vstore_codes(out + 3 * lanes, d);
}
// code_clamp and vstore_codes4_clamped: four steps' codes clamp(r + z, 0, top) as 32 bytes,
// for r rounded quotients (integers, or +-inf or NaN, which go to top, 0 and 0) and z, top
// integers in 0..255: the same bytes as vstore_codes4 of vmin(vmax(vadd(r, z), 0), top).
// The x86 ports clamp in saturating integer packs instead of an add, a max and a min a vector.
struct code_clamp {
    float zero, top;
};
inline code_clamp make_code_clamp(float zero, float top) noexcept { return {zero, top}; }
inline void vstore_codes4_clamped(std::uint8_t* out, vf a, vf b, vf c, vf d, code_clamp cc) noexcept {
    const vf z = vset(cc.zero), lo = vset(0.0f), hi = vset(cc.top);
    auto q = [&](vf r) { return vmin(vmax(vadd(r, z), lo), hi); };
    vstore_codes4(out, q(a), q(b), q(c), q(d));
}
inline vf vload_f32_bytes(const std::byte* p) noexcept {
    vf r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
}
inline vf vload_f16_bytes(const std::byte* p) noexcept {
    std::uint16_t h[8];
    std::memcpy(h, p, sizeof h);
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = fp16_to_float(h[j]);
    return r;
}
// vload_u8: eight bytes, each widened to the float of its unsigned value.
inline vf vload_u8(const std::uint8_t* p) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = static_cast<float>(p[j]);
    return r;
}
inline vf vload_bf16_bytes(const std::byte* p) noexcept {
    std::uint16_t h[8];
    std::memcpy(h, p, sizeof h);
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = bf16_to_float(h[j]);
    return r;
}
inline acc8 acc_zero() noexcept { return vset(0.0f); }
inline acc8 acc_add(acc8 acc, vf e) noexcept { return vadd(acc, e); }
// acc_free: a sum kept lane by lane, its terms and lanes added in whatever order suits the
// ISA (a vector of the ISA's width, where acc8 folds every step into k_sum8's eight): only
// for sums that a bound allows for, never for a defined error (k_square_best_proven's
// unwatched sums, the bounded search's moments).
using acc_free = vf;
inline acc_free acc_free_zero() noexcept { return vset(0.0f); }
// acc_add_square: acc + e * e, fused where the ISA has a fused multiply-add (x86, NEON) and
// with the product rounded first here: the two differ in the last bit.
inline acc_free acc_add_square(acc_free acc, vf e) noexcept { return vadd(acc, vmul(e, e)); }
// vmul_exact_sub: a * b - c for a product a * b that is exact in float (a code times its
// scale), so fusing changes nothing: one operation where the ISA has fms, the same value.
inline vf vmul_exact_sub(vf a, vf b, vf c) noexcept { return vsub(vmul(a, b), c); }
inline void acc_store(float* out, acc8 acc) noexcept { vstore(out, acc); }
/// Four accumulators' sums, each ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)) (k_sum8's order).
inline void acc_sum4(acc8 a, acc8 b, acc8 c, acc8 d, float* out) noexcept {
    const acc8* acc[4] = {&a, &b, &c, &d};
    for (int i = 0; i < 4; ++i) {
        const float* p = acc[i]->v;
        out[i] = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
    }
}
/// Four acc_free sums' totals, in any order: at most log2(lanes) adds on any lane's way.
inline void acc_free_sum4(acc_free a, acc_free b, acc_free c, acc_free d, float* out) noexcept {
    acc_sum4(a, b, c, d, out);
}

// vround_scale: each lane rounded to its F16/BF16 storage pattern (RNE; patterns below the
// smallest positive one raised to it: quant/scale_policy.hpp's store_scale), the patterns
// written to `bits`, the stored values returned. Lanes are positive and finite.
inline vf vround_scale(vf x, bool bf16, std::uint16_t* bits) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) {
        std::uint16_t b = bf16 ? float_to_bf16(x.v[j]) : float_to_fp16(x.v[j]);
        const std::uint16_t smallest = bf16 ? 0x0080 : 0x0001;
        if ((b & 0x7FFFu) < smallest) b = smallest;
        bits[j] = b;
        r.v[j] = bf16 ? bf16_to_float(b) : fp16_to_float(b);
    }
    return r;
}

// SNR partial sums in double: element j of a step goes to partial j % 4 (see quant/snr.hpp).
struct snr_acc {
    double sig[4], err[4];
};
inline snr_acc snr_load(const double* p) noexcept {
    snr_acc a;
    std::memcpy(a.sig, p, sizeof a.sig);
    std::memcpy(a.err, p + 4, sizeof a.err);
    return a;
}
inline void snr_store(double* p, const snr_acc& a) noexcept {
    std::memcpy(p, a.sig, sizeof a.sig);
    std::memcpy(p + 4, a.err, sizeof a.err);
}
inline snr_acc snr_add(snr_acc a, vf w, vf dq) noexcept {
    for (std::size_t j = 0; j < 8; ++j) {
        const double x = w.v[j], e = x - static_cast<double>(dq.v[j]);
        a.sig[j & 3] += no_contract(x * x);
        a.err[j & 3] += no_contract(e * e);
    }
    return a;
}

// ---- shared integer primitives ----
// A 128-bit integer vector as sixteen bytes (byte j = the lowest-addressed byte j, as on every
// little-endian ISA qforge runs). Lanes of 16, 32 or 64 bits are read little-endian from it.
struct vi128 {
    std::uint8_t b[16];
};
// transpose4x4_u32: rows a..d of a 4x4 matrix of u32 lanes become its columns (a = lanes 0 of
// a, b, c, d; b = lanes 1; ...).
inline void transpose4x4_u32(vi128& a, vi128& b, vi128& c, vi128& d) noexcept {
    std::uint32_t m[4][4];
    std::memcpy(m[0], a.b, 16);
    std::memcpy(m[1], b.b, 16);
    std::memcpy(m[2], c.b, 16);
    std::memcpy(m[3], d.b, 16);
    std::uint32_t t[4][4];
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) t[i][j] = m[j][i];
    std::memcpy(a.b, t[0], 16);
    std::memcpy(b.b, t[1], 16);
    std::memcpy(c.b, t[2], 16);
    std::memcpy(d.b, t[3], 16);
}
// prefetch_read: asks for the cache line holding the byte `ahead` bytes past p, to be read
// soon. The address is formed as an integer, and a prefetch never faults, so it may lie past
// the end of the caller's data (the streaming kernels ask a fixed distance ahead).
inline void prefetch_read(const void* p, std::size_t ahead = 0) noexcept {
    prefetch_lines(p, ahead, 1);
}
// ---- end shared integer primitives ----

// ---- pack kernels (simd/kernels/pack_kernels.ipp): integer primitives ----
// vi128 as above; pk_u8x32 is two 128-bit blocks, and every lane-crossing operation on it
// (packs, interleaves) works within each block, as AVX2's do. Shifts are per u16 lane.
struct pk_u8x32 {
    vi128 lo, hi;
};
inline vi128 pk_load16(const void* p) noexcept {
    vi128 r;
    std::memcpy(r.b, p, 16);
    return r;
}
inline void pk_store16(void* p, vi128 a) noexcept { std::memcpy(p, a.b, 16); }
inline vi128 pk_splat8(std::uint8_t x) noexcept {
    vi128 r;
    for (auto& v : r.b) v = x;
    return r;
}
inline vi128 pk_and(vi128 a, vi128 b) noexcept {
    for (int j = 0; j < 16; ++j) a.b[j] &= b.b[j];
    return a;
}
inline vi128 pk_or(vi128 a, vi128 b) noexcept {
    for (int j = 0; j < 16; ++j) a.b[j] |= b.b[j];
    return a;
}
// pk_shl16<n>: each u16 lane shifted left by n (zeros in).
template <int N>
inline vi128 pk_shl16(vi128 a) noexcept {
    std::uint16_t u[8];
    std::memcpy(u, a.b, 16);
    for (auto& v : u) v = static_cast<std::uint16_t>(v << N);
    std::memcpy(a.b, u, 16);
    return a;
}
// pk_join_nibbles16: each u16 lane (bytes lo, hi) -> lo + 16 * hi (exact: at most 4335).
inline vi128 pk_join_nibbles16(vi128 a) noexcept {
    std::uint16_t u[8];
    std::memcpy(u, a.b, 16);
    for (auto& v : u) v = static_cast<std::uint16_t>((v & 0xFFu) + 16u * (v >> 8));
    std::memcpy(a.b, u, 16);
    return a;
}
// pk_packus16: the i16 lanes of a then b, each saturated to 0..255, as 16 bytes.
inline vi128 pk_packus16(vi128 a, vi128 b) noexcept {
    std::int16_t s[16];
    std::memcpy(s, a.b, 16);
    std::memcpy(s + 8, b.b, 16);
    vi128 r;
    for (int j = 0; j < 16; ++j) r.b[j] = static_cast<std::uint8_t>(s[j] < 0 ? 0 : s[j] > 255 ? 255 : s[j]);
    return r;
}
// pk_zip<W>_lo / _hi: the W-byte lanes of the low (high) halves of a and b, interleaved
// a0 b0 a1 b1 ... (x86 unpacklo/unpackhi, NEON zip1/zip2).
template <int W>
inline vi128 pk_zip(vi128 a, vi128 b, int half) noexcept {
    vi128 r;
    for (int i = 0; i < 8 / W; ++i) {
        std::memcpy(r.b + 2 * i * W, a.b + half * 8 + i * W, W);
        std::memcpy(r.b + (2 * i + 1) * W, b.b + half * 8 + i * W, W);
    }
    return r;
}
inline vi128 pk_zip8_lo(vi128 a, vi128 b) noexcept { return pk_zip<1>(a, b, 0); }
inline vi128 pk_zip8_hi(vi128 a, vi128 b) noexcept { return pk_zip<1>(a, b, 1); }
inline vi128 pk_zip16_lo(vi128 a, vi128 b) noexcept { return pk_zip<2>(a, b, 0); }
inline vi128 pk_zip16_hi(vi128 a, vi128 b) noexcept { return pk_zip<2>(a, b, 1); }
inline vi128 pk_zip32_lo(vi128 a, vi128 b) noexcept { return pk_zip<4>(a, b, 0); }
inline vi128 pk_zip32_hi(vi128 a, vi128 b) noexcept { return pk_zip<4>(a, b, 1); }

inline pk_u8x32 pk_load32(const void* p) noexcept {
    return {pk_load16(p), pk_load16(static_cast<const std::uint8_t*>(p) + 16)};
}
inline void pk_store32(void* p, pk_u8x32 a) noexcept {
    pk_store16(p, a.lo);
    pk_store16(static_cast<std::uint8_t*>(p) + 16, a.hi);
}
inline pk_u8x32 pk_splat8x32(std::uint8_t x) noexcept { return {pk_splat8(x), pk_splat8(x)}; }
inline pk_u8x32 pk_and(pk_u8x32 a, pk_u8x32 b) noexcept { return {pk_and(a.lo, b.lo), pk_and(a.hi, b.hi)}; }
inline pk_u8x32 pk_or(pk_u8x32 a, pk_u8x32 b) noexcept { return {pk_or(a.lo, b.lo), pk_or(a.hi, b.hi)}; }
// pk_shift16<n>: each u16 lane shifted left by n, or right by -n where n < 0 (zeros in). The
// GGUF packers mask each field first, so no bit crosses into the other byte of its lane.
template <int N>
inline pk_u8x32 pk_shift16(pk_u8x32 a) noexcept {
    for (vi128* h : {&a.lo, &a.hi}) {
        std::uint16_t u[8];
        std::memcpy(u, h->b, 16);
        for (auto& v : u) {
            if constexpr (N >= 0) v = static_cast<std::uint16_t>(v << N);
            else v = static_cast<std::uint16_t>(v >> -N);
        }
        std::memcpy(h->b, u, 16);
    }
    return a;
}
inline pk_u8x32 pk_join_nibbles16(pk_u8x32 a) noexcept { return {pk_join_nibbles16(a.lo), pk_join_nibbles16(a.hi)}; }
inline pk_u8x32 pk_packus16(pk_u8x32 a, pk_u8x32 b) noexcept {
    return {pk_packus16(a.lo, b.lo), pk_packus16(a.hi, b.hi)};
}
inline pk_u8x32 pk_zip32_lo(pk_u8x32 a, pk_u8x32 b) noexcept { return {pk_zip32_lo(a.lo, b.lo), pk_zip32_lo(a.hi, b.hi)}; }
inline pk_u8x32 pk_zip32_hi(pk_u8x32 a, pk_u8x32 b) noexcept { return {pk_zip32_hi(a.lo, b.lo), pk_zip32_hi(a.hi, b.hi)}; }
// pk_low_blocks(a, b) = [a.lo, b.lo], pk_high_blocks(a, b) = [a.hi, b.hi].
inline pk_u8x32 pk_low_blocks(pk_u8x32 a, pk_u8x32 b) noexcept { return {a.lo, b.lo}; }
inline pk_u8x32 pk_high_blocks(pk_u8x32 a, pk_u8x32 b) noexcept { return {a.hi, b.hi}; }
// pk_or_reduce: the OR of all 32 bytes.
inline std::uint8_t pk_or_reduce(pk_u8x32 a) noexcept {
    std::uint8_t r = 0;
    for (int j = 0; j < 16; ++j) r = static_cast<std::uint8_t>(r | a.lo.b[j] | a.hi.b[j]);
    return r;
}
// ---- end pack kernels primitives ----
// ---- gguf_kernels primitives (simd/kernels/gguf_kernels.ipp) ---------------------------
// A lane mask, comparisons as x86's ordered predicates (false on NaN) except gg_ne (true on
// NaN, as C's !=), a blend, and the float steps the GGUF searches need beyond the group
// kernels': IEEE square root, truncation toward zero, and an 8x8 transpose through memory.
struct gg_mask {
    bool m[8];
};
#define QFORGE_GG_MASK(expr)                              \
    gg_mask r;                                            \
    for (std::size_t j = 0; j < 8; ++j) r.m[j] = (expr);  \
    return r
inline gg_mask gg_lt(vf a, vf b) noexcept { QFORGE_GG_MASK(a.v[j] < b.v[j]); }
inline gg_mask gg_gt(vf a, vf b) noexcept { QFORGE_GG_MASK(a.v[j] > b.v[j]); }
inline gg_mask gg_eq(vf a, vf b) noexcept { QFORGE_GG_MASK(a.v[j] == b.v[j]); }
inline gg_mask gg_ne(vf a, vf b) noexcept { QFORGE_GG_MASK(a.v[j] != b.v[j]); }
inline gg_mask gg_and(gg_mask a, gg_mask b) noexcept { QFORGE_GG_MASK(a.m[j] && b.m[j]); }
inline gg_mask gg_or(gg_mask a, gg_mask b) noexcept { QFORGE_GG_MASK(a.m[j] || b.m[j]); }
#undef QFORGE_GG_MASK
inline bool gg_any(gg_mask a) noexcept {
    bool any = false;
    for (std::size_t j = 0; j < 8; ++j) any = any || a.m[j];
    return any;
}
/// The first lane set in `a`, or -1.
inline int gg_first(gg_mask a) noexcept {
    for (int j = 0; j < 8; ++j)
        if (a.m[j]) return j;
    return -1;
}
/// m ? t : f, lane by lane.
inline vf gg_blend(gg_mask m, vf t, vf f) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = m.m[j] ? t.v[j] : f.v[j];
    return r;
}
inline vf gg_sqrt(vf a) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = std::sqrt(a.v[j]);
    return r;
}
inline vf gg_trunc(vf a) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = std::trunc(a.v[j]);
    return r;
}
/// dst[c * dst_stride + r] = src[r * src_stride + c] for r, c < 8.
inline void gg_transpose8(const float* src, std::size_t src_stride, float* dst, std::size_t dst_stride) noexcept {
    for (std::size_t r = 0; r < 8; ++r)
        for (std::size_t c = 0; c < 8; ++c) dst[c * dst_stride + r] = src[r * src_stride + c];
}
/// The fp16 bits of f, round to nearest even (core/half.hpp's definition, which the vector ISAs'
/// conversion instructions give too; a NaN goes through the definition everywhere).
inline std::uint16_t gg_fp16(float f) noexcept { return float_to_fp16(f); }
/// Lane j: vhmin(v[j]) (vhmax), for the eight vectors v[0..8) (lane j + 8 too where a vector
/// has 16 lanes): one horizontal reduction per lane (the vector ISAs share their shuffles).
inline vf gg_hmin_each(const vf* v) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = vhmin(v[j]);
    return r;
}
inline vf gg_hmax_each(const vf* v) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = vhmax(v[j]);
    return r;
}
/// out[2j] = gg_fp16(lane j of a), out[2j + 1] = gg_fp16(lane j of b): fp16 pairs as blocks store them.
inline void gg_fp16_pairs(vf a, vf b, std::uint16_t* out) noexcept {
    for (std::size_t j = 0; j < 8; ++j) out[2 * j] = gg_fp16(a.v[j]), out[2 * j + 1] = gg_fp16(b.v[j]);
}
/// Integral floats in -128..127 as their int8 bytes (lanes of them; x4: four vectors in order).
inline void gg_store_i8(std::uint8_t* out, vf q) noexcept {
    for (std::size_t j = 0; j < 8; ++j) out[j] = static_cast<std::uint8_t>(trunc_to_i32(q.v[j]) & 0xFF);
}
/// A block's 32 codes (bytes q[0..32)) as ggml stores them: the 16 bytes of nibbles (code j
/// low, code j + 16 high; codes >= 16 keep their low four bits).
inline void gg_store_nibbles32(std::byte* qs, const std::uint8_t* q) noexcept { byte_bits::nibbles32(qs, q); }
/// A block's 32 codes as gg_store_nibbles32 stores them, from the codes as vectors (floats
/// whose truncations are the codes 0..15, code j in lane j % lanes of c[j / lanes]), where an
/// ISA can do without the bytes in between.
inline void gg_store_code_nibbles(std::byte* qs, const vf* c) noexcept {
    alignas(32) std::uint8_t q[32];
    vstore_codes4(q, c[0], c[1], c[2], c[3]);
    gg_store_nibbles32(qs, q);
}
/// The same for codes 0..31 (Q5_0 / Q5_1's fields): the nibbles into qs, and bit 4 of code j as
/// bit j of the 32-bit qh, little-endian. A code of 32 (a float in [32, 33)) is stored as 31:
/// Q5_0's MIN(31, ...) made in the bytes, where it is one integer operation for 32 codes.
inline void gg_store_code_fields5(std::byte* qh, std::byte* qs, const vf* c) noexcept {
    alignas(32) std::uint8_t q[32];
    vstore_codes4(q, c[0], c[1], c[2], c[3]);
    for (std::uint8_t& b : q) b = b < 31 ? b : 31;
    const std::uint32_t bits = byte_bits::fifth_bits32(q);
    std::memcpy(qh, &bits, 4);
    gg_store_nibbles32(qs, q);
}
inline void gg_store_i8x4(std::uint8_t* out, vf a, vf b, vf c, vf d) noexcept {
    gg_store_i8(out, a);
    gg_store_i8(out + 8, b);
    gg_store_i8(out + 16, c);
    gg_store_i8(out + 24, d);
}
// ---- end of gguf_kernels primitives ---------------------------------------------------------
// Four 32-bit words, the unit of the integer transposes (a 128-bit register elsewhere).
struct u32x4 {
    std::uint32_t v[4];
};
inline u32x4 u32x4_load(const std::uint32_t* p) noexcept {  // any 4-byte alignment
    u32x4 r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
}
inline void u32x4_store(std::uint32_t* p, u32x4 a) noexcept { std::memcpy(p, a.v, sizeof a.v); }
// The shared transpose (above), on word-typed vectors.
inline void transpose4x4_u32(u32x4& a, u32x4& b, u32x4& c, u32x4& d) noexcept {
    vi128 x, y, z, w;
    std::memcpy(x.b, a.v, 16), std::memcpy(y.b, b.v, 16), std::memcpy(z.b, c.v, 16), std::memcpy(w.b, d.v, 16);
    transpose4x4_u32(x, y, z, w);
    std::memcpy(a.v, x.b, 16), std::memcpy(b.v, y.b, 16), std::memcpy(c.v, z.b, 16), std::memcpy(d.v, w.b, 16);
}
// ---- end of shared integer primitives ----

// ---- transpose_kernels primitives (simd/kernels/transpose_kernels.ipp) ----
// Eight 32-bit words; a "stream" is a plain store here (portable C++ has no non-temporal
// store), so the fence has nothing to order.
struct tp_u32x8 {
    std::uint32_t v[8];
};
inline tp_u32x8 tp_load8(const std::uint32_t* p) noexcept {
    tp_u32x8 r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
}
inline void tp_stream8(std::uint32_t* p, tp_u32x8 a) noexcept { std::memcpy(p, a.v, sizeof a.v); }
inline void tp_stream_fence() noexcept {}
// o[j] = column j of the 8 x 8 words whose rows are a[0..8).
inline void tp_transpose8x8(const tp_u32x8 a[8], tp_u32x8 o[8]) noexcept {
    for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 8; ++i) o[j].v[i] = a[i].v[j];
}
// The same of the 8 x 8 words at s, rows ss words apart.
inline void tp_transpose8x8_load(const std::uint32_t* s, std::int64_t ss, tp_u32x8 o[8]) noexcept {
    tp_u32x8 a[8];
    for (int i = 0; i < 8; ++i) a[i] = tp_load8(s + i * ss);
    tp_transpose8x8(a, o);
}
// 8 x 8 16-bit patterns: rows s, s + ss bytes, ... (any alignment) -> rows d + j * ds.
inline void tp_transpose8x8_u16(const std::byte* s, std::int64_t ss, std::uint16_t* d, std::int64_t ds) noexcept {
    std::uint16_t a[8][8];
    for (int i = 0; i < 8; ++i) std::memcpy(a[i], s + i * ss, sizeof a[i]);
    for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 8; ++i) d[j * ds + i] = a[i][j];
}
// ---- end of transpose_kernels primitives ----

// ---- minifloat_kernels primitives (simd/kernels/minifloat_kernels.ipp) ----
// Float-lane steps of the E2M1 / E4M3 encoders: 0/1 indicators of ordered comparisons (false
// on NaN), a value where the sign bit is set, the unbiased exponent field and its inverse, and
// the store of 2 * lanes integral codes 0..15 as nibble pairs.
inline vf mf_gt01(vf a, vf t) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = a.v[j] > t.v[j] ? 1.0f : 0.0f;
    return r;
}
inline vf mf_ge01(vf a, vf t) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = a.v[j] >= t.v[j] ? 1.0f : 0.0f;
    return r;
}
/// v where x's sign bit is set (also -0 and a negative NaN), else +0.
inline vf mf_sign_as(vf x, vf v) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = std::bit_cast<std::uint32_t>(x.v[j]) >> 31 ? v.v[j] : 0.0f;
    return r;
}
/// (bits >> 23) - 127 of a non-negative float, as a float: floor(log2 a) for a normal a,
/// -127 for zero and subnormals, 128 for infinity and NaN.
inline vf mf_exponent(vf a) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j)
        r.v[j] = static_cast<float>(static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(a.v[j]) >> 23) - 127);
    return r;
}
/// 2^e for integral e in [-126, 127], exactly.
inline vf mf_pow2(vf e) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j)
        r.v[j] = std::bit_cast<float>(static_cast<std::uint32_t>(static_cast<std::int32_t>(e.v[j]) + 127) << 23);
    return r;
}
/// Codes c[0..16) = the lanes of lo then hi (integral floats 0..15): out[j] = c[2j] | c[2j+1] << 4.
inline void mf_store_nibbles(std::uint8_t* out, vf lo, vf hi) noexcept {
    float c[16];
    std::memcpy(c, lo.v, sizeof lo.v);
    std::memcpy(c + 8, hi.v, sizeof hi.v);
    for (int j = 0; j < 8; ++j)
        out[j] = static_cast<std::uint8_t>(static_cast<std::uint32_t>(c[2 * j]) | (static_cast<std::uint32_t>(c[2 * j + 1]) << 4));
}
/// Each lane rounded to bfloat16 and back (RNE: float_to_bf16's carry trick); lanes are not NaN.
inline vf mf_round_bf16(vf a) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) {
        const std::uint32_t u = std::bit_cast<std::uint32_t>(a.v[j]);
        r.v[j] = std::bit_cast<float>((u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u);
    }
    return r;
}
// Lanes as their u32 bit patterns (the integer-domain E4M3 rounding): bitwise and / or, wrapping
// add and subtract, logical right shift, unsigned minimum, a broadcast pattern, and the store of
// each lane's low byte. vsel_ge selects such lanes whole, by a float comparison of its first two.
#define QFORGE_SCALAR_BITS(expr)                              \
    vf r;                                                     \
    for (std::size_t j = 0; j < 8; ++j) {                     \
        const std::uint32_t x = std::bit_cast<std::uint32_t>(a.v[j]); \
        const std::uint32_t y = std::bit_cast<std::uint32_t>(b.v[j]); \
        (void)y;                                              \
        r.v[j] = std::bit_cast<float>(static_cast<std::uint32_t>(expr)); \
    }                                                         \
    return r
inline vf mb_set(std::uint32_t bits) noexcept { return vset(std::bit_cast<float>(bits)); }
inline vf mb_and(vf a, vf b) noexcept { QFORGE_SCALAR_BITS(x & y); }
inline vf mb_or(vf a, vf b) noexcept { QFORGE_SCALAR_BITS(x | y); }
inline vf mb_add(vf a, vf b) noexcept { QFORGE_SCALAR_BITS(x + y); }
inline vf mb_sub(vf a, vf b) noexcept { QFORGE_SCALAR_BITS(x - y); }
inline vf mb_min(vf a, vf b) noexcept { QFORGE_SCALAR_BITS(x < y ? x : y); }
template <int N>
inline vf mb_srl(vf a) noexcept {
    const vf b = a;
    QFORGE_SCALAR_BITS(x >> N);
}
#undef QFORGE_SCALAR_BITS
inline void mb_store_bytes(std::uint8_t* out, vf a) noexcept {
    for (std::size_t j = 0; j < 8; ++j) out[j] = static_cast<std::uint8_t>(std::bit_cast<std::uint32_t>(a.v[j]));
}
// ---- end of minifloat_kernels primitives ----

// ---- gguf_kernels Q3_K primitives (simd/kernels/gguf_kernels.ipp, make_q3_quants) ----
/// ggml's nearest_int bit trick lane by lane, as a float: (bits(a + 1.5 * 2^23) & 0x7FFFFF) -
/// 0x400000. Round half to even for |a| <= 4194303 (vround's value); outside that range it is
/// the trick's wrapped result, which a release build of ggml uses where its quotient is huge.
inline vf g3_nearest_int(vf a) noexcept {
    vf r;
    for (std::size_t j = 0; j < 8; ++j) {
        const float v = no_contract(a.v[j]) + 12582912.f;
        const auto bits = static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(v) & 0x007FFFFFu);
        r.v[j] = static_cast<float>(bits - 0x00400000);
    }
    return r;
}
// ---- end of gguf_kernels Q3_K primitives ----

/// The kernel tables of this ISA: each family's .ipp, compiled here by
/// simd/detail/instantiate.ipp, specializes this for its table.
template <class Table>
const Table& family_table() noexcept;

}  // namespace qforge::simd::detail::scalar_isa

namespace qforge::simd {
template <>
struct arch_of<scalar_tag> {
    template <class Table>
    static const Table& table() noexcept {
        return detail::scalar_isa::family_table<Table>();
    }
};
}  // namespace qforge::simd
