// AArch64 Advanced SIMD primitives. A "vector" is a pair of float32x4_t (8 lanes), which is
// the scalar reference's step, so partial sums line up without reshuffling.
#pragma once

#include "qforge/simd/tags.hpp"

#if QFORGE_SIMD_NEON
#include <arm_neon.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qforge/core/dtype.hpp"
#include "qforge/core/half.hpp"
#include "qforge/simd/arch/detail/byte_bits.hpp"
#include "qforge/simd/kernel_table.hpp"
#include "qforge/simd/prefetch.hpp"

namespace qforge::simd::detail::neon_isa {

inline constexpr std::size_t lanes = 8;
struct vf {
    float32x4_t a, b;
};
using acc8 = vf;

inline vf vload(const float* p) noexcept { return {vld1q_f32(p), vld1q_f32(p + 4)}; }
inline void vstore(float* p, vf x) noexcept {
    vst1q_f32(p, x.a);
    vst1q_f32(p + 4, x.b);
}
inline vf vset(float x) noexcept { return {vdupq_n_f32(x), vdupq_n_f32(x)}; }
inline vf vadd(vf x, vf y) noexcept { return {vaddq_f32(x.a, y.a), vaddq_f32(x.b, y.b)}; }
inline vf vsub(vf x, vf y) noexcept { return {vsubq_f32(x.a, y.a), vsubq_f32(x.b, y.b)}; }
inline vf vmul(vf x, vf y) noexcept {
    vf r{vmulq_f32(x.a, y.a), vmulq_f32(x.b, y.b)};
    __asm__("" : "+w"(r.a), "+w"(r.b));  // never fused into a later add (see simd/no_contract.hpp)
    return r;
}
inline vf vdiv(vf x, vf y) noexcept { return {vdivq_f32(x.a, y.a), vdivq_f32(x.b, y.b)}; }
// x86 semantics (a < b ? a : b) so that -0/+0 ties resolve as on the other ISAs.
inline vf vmin(vf x, vf y) noexcept {
    return {vbslq_f32(vcltq_f32(x.a, y.a), x.a, y.a), vbslq_f32(vcltq_f32(x.b, y.b), x.b, y.b)};
}
inline vf vmax(vf x, vf y) noexcept {
    return {vbslq_f32(vcgtq_f32(x.a, y.a), x.a, y.a), vbslq_f32(vcgtq_f32(x.b, y.b), x.b, y.b)};
}
inline vf vabs(vf x) noexcept { return {vabsq_f32(x.a), vabsq_f32(x.b)}; }
inline vf vmax_magnitude(vf x, vf m) noexcept {  // see scalar.hpp
    const auto mag = [](float32x4_t a, float32x4_t b) {
        return vreinterpretq_f32_u32(vmaxq_u32(vreinterpretq_u32_f32(vabsq_f32(a)), vreinterpretq_u32_f32(b)));
    };
    return {mag(x.a, m.a), mag(x.b, m.b)};
}
inline vf vround(vf x) noexcept { return {vrndnq_f32(x.a), vrndnq_f32(x.b)}; }
inline vf vround_small(vf x) noexcept { return vround(x); }  // FRINTN is one operation: see scalar.hpp
inline vf vsel_ge(vf x, vf t, vf p, vf q) noexcept {
    return {vbslq_f32(vcgeq_f32(x.a, t.a), p.a, q.a), vbslq_f32(vcgeq_f32(x.b, t.b), p.b, q.b)};
}
inline float32x4_t split_exponent4(float32x4_t x, float32x4_t& m) noexcept {  // see scalar.hpp
    const int32x4_t bits = vreinterpretq_s32_f32(x);
    const int32x4_t k = vshrq_n_s32(vsubq_s32(bits, vdupq_n_s32(0x3F400000)), 23);
    m = vreinterpretq_f32_s32(vsubq_s32(bits, vshlq_n_s32(k, 23)));
    return vcvtq_f32_s32(k);
}
inline vf vsplit_exponent(vf x, vf& m) noexcept { return {split_exponent4(x.a, m.a), split_exponent4(x.b, m.b)}; }
inline float32x4_t scale_pow2_4(float32x4_t q, float32x4_t n) noexcept {  // see scalar.hpp
    return vreinterpretq_f32_s32(vaddq_s32(vreinterpretq_s32_f32(q), vshlq_n_s32(vcvtq_s32_f32(n), 23)));
}
inline vf vscale_pow2(vf q, vf n) noexcept { return {scale_pow2_4(q.a, n.a), scale_pow2_4(q.b, n.b)}; }
inline bool vany_gt(vf x, vf y) noexcept {
    return vmaxvq_u32(vorrq_u32(vcgtq_f32(x.a, y.a), vcgtq_f32(x.b, y.b))) != 0;
}
inline bool vany_gt4(vf a, vf b, vf c, vf d, vf t) noexcept {  // see scalar.hpp
    const uint32x4_t ab = vorrq_u32(vorrq_u32(vcgtq_f32(a.a, t.a), vcgtq_f32(a.b, t.b)),
                                    vorrq_u32(vcgtq_f32(b.a, t.a), vcgtq_f32(b.b, t.b)));
    const uint32x4_t cd = vorrq_u32(vorrq_u32(vcgtq_f32(c.a, t.a), vcgtq_f32(c.b, t.b)),
                                    vorrq_u32(vcgtq_f32(d.a, t.a), vcgtq_f32(d.b, t.b)));
    return vmaxvq_u32(vorrq_u32(ab, cd)) != 0;
}
inline bool vany_nonfinite(vf x) noexcept {
    const float32x4_t big = vdupq_n_f32(3.40282347e38f);
    const uint32x4_t ok = vandq_u32(vcleq_f32(vabsq_f32(x.a), big), vcleq_f32(vabsq_f32(x.b), big));
    return vminvq_u32(ok) == 0;
}
inline float vhmin(vf x) noexcept {
    alignas(16) float t[8];
    vstore(t, x);
    float m = t[0];
    for (int j = 1; j < 8; ++j) m = t[j] < m ? t[j] : m;
    return m;
}
inline float vhmax(vf x) noexcept {
    alignas(16) float t[8];
    vstore(t, x);
    float m = t[0];
    for (int j = 1; j < 8; ++j) m = t[j] > m ? t[j] : m;
    return m;
}
inline void vstore_codes(std::uint8_t* out, vf q) noexcept {
    const uint16x8_t w = vcombine_u16(vmovn_u32(vcvtq_u32_f32(q.a)), vmovn_u32(vcvtq_u32_f32(q.b)));
    vst1_u8(out, vmovn_u16(w));
}
inline void vstore_codes4(std::uint8_t* out, vf a, vf b, vf c, vf d) noexcept {
    vstore_codes(out, a);
    vstore_codes(out + lanes, b);
    vstore_codes(out + 2 * lanes, c);
    vstore_codes(out + 3 * lanes, d);
}
// See scalar.hpp: here the float clamp of its definition.
struct code_clamp {
    vf zero, top;
};
inline code_clamp make_code_clamp(float zero, float top) noexcept { return {vset(zero), vset(top)}; }
inline void vstore_codes4_clamped(std::uint8_t* out, vf a, vf b, vf c, vf d, code_clamp cc) noexcept {
    const vf lo = vset(0.0f);
    auto q = [&](vf r) { return vmin(vmax(vadd(r, cc.zero), lo), cc.top); };
    vstore_codes4(out, q(a), q(b), q(c), q(d));
}
inline vf vload_f32_bytes(const std::byte* p) noexcept {
    const auto* u = reinterpret_cast<const std::uint8_t*>(p);
    return {vreinterpretq_f32_u8(vld1q_u8(u)), vreinterpretq_f32_u8(vld1q_u8(u + 16))};
}
inline vf vload_f16_bytes(const std::byte* p) noexcept {
    const uint16x8_t h = vreinterpretq_u16_u8(vld1q_u8(reinterpret_cast<const std::uint8_t*>(p)));
    return {vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))), vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h)))};
}
inline vf vload_u8(const std::uint8_t* p) noexcept {  // see scalar.hpp
    const uint16x8_t w = vmovl_u8(vld1_u8(p));
    return {vcvtq_f32_u32(vmovl_u16(vget_low_u16(w))), vcvtq_f32_u32(vmovl_u16(vget_high_u16(w)))};
}
inline vf vload_bf16_bytes(const std::byte* p) noexcept {
    const uint16x8_t h = vreinterpretq_u16_u8(vld1q_u8(reinterpret_cast<const std::uint8_t*>(p)));
    return {vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)),
            vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(h), 16))};
}
inline acc8 acc_zero() noexcept { return vset(0.0f); }
inline acc8 acc_add(acc8 acc, vf e) noexcept { return vadd(acc, e); }
using acc_free = vf;  // see scalar.hpp
inline acc_free acc_free_zero() noexcept { return vset(0.0f); }
inline acc_free acc_add_square(acc_free acc, vf e) noexcept {  // see scalar.hpp: fused here
    return {vfmaq_f32(acc.a, e.a, e.a), vfmaq_f32(acc.b, e.b, e.b)};
}
inline vf vmul_exact_sub(vf a, vf b, vf c) noexcept { return vsub(vmul(a, b), c); }  // see scalar.hpp
inline void acc_store(float* out, acc8 acc) noexcept { vstore(out, acc); }
/// Four accumulators' sums in k_sum8's order: pairwise adds of neighbours, twice, per half
/// (p0..p3, p4..p7), and the halves add last.
inline void acc_sum4(acc8 a, acc8 b, acc8 c, acc8 d, float* out) noexcept {
    const float32x4_t lo = vpaddq_f32(vpaddq_f32(a.a, b.a), vpaddq_f32(c.a, d.a));
    const float32x4_t hi = vpaddq_f32(vpaddq_f32(a.b, b.b), vpaddq_f32(c.b, d.b));
    vst1q_f32(out, vaddq_f32(lo, hi));
}
inline void acc_free_sum4(acc_free a, acc_free b, acc_free c, acc_free d, float* out) noexcept {
    acc_sum4(a, b, c, d, out);
}

// vround_scale: see scalar.hpp (F16 by the FPCR's round to nearest even, BF16 by integer RNE).
inline uint16x4_t round_scale4(float32x4_t x, bool bf16) noexcept {
    if (bf16) {
        const uint32x4_t u = vreinterpretq_u32_f32(x);
        const uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
        return vmax_u16(vshrn_n_u32(vaddq_u32(u, vaddq_u32(odd, vdupq_n_u32(0x7FFF))), 16), vdup_n_u16(0x0080));
    }
    return vmax_u16(vreinterpret_u16_f16(vcvt_f16_f32(x)), vdup_n_u16(0x0001));
}
inline float32x4_t scale_value4(uint16x4_t h, bool bf16) noexcept {
    if (bf16) return vreinterpretq_f32_u32(vshll_n_u16(h, 16));
    return vcvt_f32_f16(vreinterpret_f16_u16(h));
}
inline vf vround_scale(vf x, bool bf16, std::uint16_t* bits) noexcept {
    const uint16x4_t lo = round_scale4(x.a, bf16), hi = round_scale4(x.b, bf16);
    vst1_u16(bits, lo);
    vst1_u16(bits + 4, hi);
    return {scale_value4(lo, bf16), scale_value4(hi, bf16)};
}

// SNR partial sums in double (see quant/snr.hpp): each float32x4 of a step feeds partials
// 0,1 (low half) and 2,3 (high half), in the scalar order.
struct snr_acc {
    float64x2_t s01, s23, e01, e23;
};
inline snr_acc snr_load(const double* p) noexcept {
    return {vld1q_f64(p), vld1q_f64(p + 2), vld1q_f64(p + 4), vld1q_f64(p + 6)};
}
inline void snr_store(double* p, const snr_acc& a) noexcept {
    vst1q_f64(p, a.s01);
    vst1q_f64(p + 2, a.s23);
    vst1q_f64(p + 4, a.e01);
    vst1q_f64(p + 6, a.e23);
}
inline float64x2_t dsq(float64x2_t a) noexcept {
    float64x2_t r = vmulq_f64(a, a);
    __asm__("" : "+w"(r));  // never fused into the add
    return r;
}
inline snr_acc snr_add4(snr_acc a, float32x4_t w, float32x4_t dq) noexcept {
    const float64x2_t xl = vcvt_f64_f32(vget_low_f32(w)), xh = vcvt_high_f64_f32(w);
    const float64x2_t el = vsubq_f64(xl, vcvt_f64_f32(vget_low_f32(dq))), eh = vsubq_f64(xh, vcvt_high_f64_f32(dq));
    return {vaddq_f64(a.s01, dsq(xl)), vaddq_f64(a.s23, dsq(xh)), vaddq_f64(a.e01, dsq(el)), vaddq_f64(a.e23, dsq(eh))};
}
inline snr_acc snr_add(snr_acc a, vf w, vf dq) noexcept { return snr_add4(snr_add4(a, w.a, dq.a), w.b, dq.b); }

// ---- shared integer primitives ----
// (semantics: simd/arch/scalar.hpp; bytes, u16 and u32 lanes are little-endian as on x86)
using vi128 = uint8x16_t;
inline void transpose4x4_u32(vi128& a, vi128& b, vi128& c, vi128& d) noexcept {
    const uint32x4_t t0 = vzip1q_u32(vreinterpretq_u32_u8(a), vreinterpretq_u32_u8(b));
    const uint32x4_t t1 = vzip1q_u32(vreinterpretq_u32_u8(c), vreinterpretq_u32_u8(d));
    const uint32x4_t t2 = vzip2q_u32(vreinterpretq_u32_u8(a), vreinterpretq_u32_u8(b));
    const uint32x4_t t3 = vzip2q_u32(vreinterpretq_u32_u8(c), vreinterpretq_u32_u8(d));
    a = vreinterpretq_u8_u64(vzip1q_u64(vreinterpretq_u64_u32(t0), vreinterpretq_u64_u32(t1)));
    b = vreinterpretq_u8_u64(vzip2q_u64(vreinterpretq_u64_u32(t0), vreinterpretq_u64_u32(t1)));
    c = vreinterpretq_u8_u64(vzip1q_u64(vreinterpretq_u64_u32(t2), vreinterpretq_u64_u32(t3)));
    d = vreinterpretq_u8_u64(vzip2q_u64(vreinterpretq_u64_u32(t2), vreinterpretq_u64_u32(t3)));
}
inline void prefetch_read(const void* p, std::size_t ahead = 0) noexcept {
    prefetch_lines(p, ahead, 1);
}
// ---- end shared integer primitives ----

// ---- pack kernels (simd/kernels/pack_kernels.ipp): integer primitives ----
// (semantics: simd/arch/scalar.hpp) pk_u8x32 is a pair of q registers, one per block.
struct pk_u8x32 {
    uint8x16_t lo, hi;
};
inline vi128 pk_load16(const void* p) noexcept { return vld1q_u8(static_cast<const std::uint8_t*>(p)); }
inline void pk_store16(void* p, vi128 a) noexcept { vst1q_u8(static_cast<std::uint8_t*>(p), a); }
inline vi128 pk_splat8(std::uint8_t x) noexcept { return vdupq_n_u8(x); }
inline vi128 pk_and(vi128 a, vi128 b) noexcept { return vandq_u8(a, b); }
inline vi128 pk_or(vi128 a, vi128 b) noexcept { return vorrq_u8(a, b); }
template <int N>
inline vi128 pk_shl16(vi128 a) noexcept { return vreinterpretq_u8_u16(vshlq_n_u16(vreinterpretq_u16_u8(a), N)); }
inline vi128 pk_join_nibbles16(vi128 a) noexcept {
    const uint16x8_t u = vreinterpretq_u16_u8(a);
    return vreinterpretq_u8_u16(vaddq_u16(vandq_u16(u, vdupq_n_u16(0xFF)), vshlq_n_u16(vshrq_n_u16(u, 8), 4)));
}
inline vi128 pk_packus16(vi128 a, vi128 b) noexcept {
    return vcombine_u8(vqmovun_s16(vreinterpretq_s16_u8(a)), vqmovun_s16(vreinterpretq_s16_u8(b)));
}
inline vi128 pk_zip8_lo(vi128 a, vi128 b) noexcept { return vzip1q_u8(a, b); }
inline vi128 pk_zip8_hi(vi128 a, vi128 b) noexcept { return vzip2q_u8(a, b); }
inline vi128 pk_zip16_lo(vi128 a, vi128 b) noexcept {
    return vreinterpretq_u8_u16(vzip1q_u16(vreinterpretq_u16_u8(a), vreinterpretq_u16_u8(b)));
}
inline vi128 pk_zip16_hi(vi128 a, vi128 b) noexcept {
    return vreinterpretq_u8_u16(vzip2q_u16(vreinterpretq_u16_u8(a), vreinterpretq_u16_u8(b)));
}
inline vi128 pk_zip32_lo(vi128 a, vi128 b) noexcept {
    return vreinterpretq_u8_u32(vzip1q_u32(vreinterpretq_u32_u8(a), vreinterpretq_u32_u8(b)));
}
inline vi128 pk_zip32_hi(vi128 a, vi128 b) noexcept {
    return vreinterpretq_u8_u32(vzip2q_u32(vreinterpretq_u32_u8(a), vreinterpretq_u32_u8(b)));
}

inline pk_u8x32 pk_load32(const void* p) noexcept {
    const auto* u = static_cast<const std::uint8_t*>(p);
    return {vld1q_u8(u), vld1q_u8(u + 16)};
}
inline void pk_store32(void* p, pk_u8x32 a) noexcept {
    auto* u = static_cast<std::uint8_t*>(p);
    vst1q_u8(u, a.lo);
    vst1q_u8(u + 16, a.hi);
}
inline pk_u8x32 pk_splat8x32(std::uint8_t x) noexcept { return {vdupq_n_u8(x), vdupq_n_u8(x)}; }
inline pk_u8x32 pk_and(pk_u8x32 a, pk_u8x32 b) noexcept { return {vandq_u8(a.lo, b.lo), vandq_u8(a.hi, b.hi)}; }
inline pk_u8x32 pk_or(pk_u8x32 a, pk_u8x32 b) noexcept { return {vorrq_u8(a.lo, b.lo), vorrq_u8(a.hi, b.hi)}; }
template <int N>
inline vi128 pk_shift16(vi128 a) noexcept {
    const uint16x8_t u = vreinterpretq_u16_u8(a);
    if constexpr (N > 0) return vreinterpretq_u8_u16(vshlq_n_u16(u, N));
    else if constexpr (N < 0) return vreinterpretq_u8_u16(vshrq_n_u16(u, -N));
    else return a;
}
template <int N>
inline pk_u8x32 pk_shift16(pk_u8x32 a) noexcept { return {pk_shift16<N>(a.lo), pk_shift16<N>(a.hi)}; }
inline pk_u8x32 pk_join_nibbles16(pk_u8x32 a) noexcept { return {pk_join_nibbles16(a.lo), pk_join_nibbles16(a.hi)}; }
inline pk_u8x32 pk_packus16(pk_u8x32 a, pk_u8x32 b) noexcept {
    return {pk_packus16(a.lo, b.lo), pk_packus16(a.hi, b.hi)};
}
inline pk_u8x32 pk_zip32_lo(pk_u8x32 a, pk_u8x32 b) noexcept { return {pk_zip32_lo(a.lo, b.lo), pk_zip32_lo(a.hi, b.hi)}; }
inline pk_u8x32 pk_zip32_hi(pk_u8x32 a, pk_u8x32 b) noexcept { return {pk_zip32_hi(a.lo, b.lo), pk_zip32_hi(a.hi, b.hi)}; }
inline pk_u8x32 pk_low_blocks(pk_u8x32 a, pk_u8x32 b) noexcept { return {a.lo, b.lo}; }
inline pk_u8x32 pk_high_blocks(pk_u8x32 a, pk_u8x32 b) noexcept { return {a.hi, b.hi}; }
inline std::uint8_t pk_or_reduce(pk_u8x32 a) noexcept {
    const uint64x2_t x = vreinterpretq_u64_u8(vorrq_u8(a.lo, a.hi));
    std::uint64_t v = vgetq_lane_u64(x, 0) | vgetq_lane_u64(x, 1);
    v |= v >> 32;
    v |= v >> 16;
    v |= v >> 8;
    return static_cast<std::uint8_t>(v);
}
// ---- end pack kernels primitives ----
// ---- gguf_kernels primitives (simd/kernels/gguf_kernels.ipp; see scalar.hpp) --------------
struct gg_mask {
    uint32x4_t a, b;
};
inline gg_mask gg_lt(vf x, vf y) noexcept { return {vcltq_f32(x.a, y.a), vcltq_f32(x.b, y.b)}; }
inline gg_mask gg_gt(vf x, vf y) noexcept { return {vcgtq_f32(x.a, y.a), vcgtq_f32(x.b, y.b)}; }
inline gg_mask gg_eq(vf x, vf y) noexcept { return {vceqq_f32(x.a, y.a), vceqq_f32(x.b, y.b)}; }
inline gg_mask gg_ne(vf x, vf y) noexcept { return {vmvnq_u32(vceqq_f32(x.a, y.a)), vmvnq_u32(vceqq_f32(x.b, y.b))}; }
inline gg_mask gg_and(gg_mask x, gg_mask y) noexcept { return {vandq_u32(x.a, y.a), vandq_u32(x.b, y.b)}; }
inline gg_mask gg_or(gg_mask x, gg_mask y) noexcept { return {vorrq_u32(x.a, y.a), vorrq_u32(x.b, y.b)}; }
inline bool gg_any(gg_mask m) noexcept { return vmaxvq_u32(vorrq_u32(m.a, m.b)) != 0; }
inline int gg_first(gg_mask m) noexcept {
    // lane j's bit j, then the lowest set bit (vaddv of disjoint bits is their OR)
    static constexpr std::uint32_t bit_lo[4] = {1, 2, 4, 8}, bit_hi[4] = {16, 32, 64, 128};
    const std::uint32_t bits = vaddvq_u32(vandq_u32(m.a, vld1q_u32(bit_lo))) | vaddvq_u32(vandq_u32(m.b, vld1q_u32(bit_hi)));
    return bits == 0 ? -1 : __builtin_ctz(bits);
}
inline vf gg_blend(gg_mask m, vf t, vf f) noexcept { return {vbslq_f32(m.a, t.a, f.a), vbslq_f32(m.b, t.b, f.b)}; }
inline vf gg_sqrt(vf x) noexcept { return {vsqrtq_f32(x.a), vsqrtq_f32(x.b)}; }
inline vf gg_trunc(vf x) noexcept { return {vrndq_f32(x.a), vrndq_f32(x.b)}; }
// 4x4 transposes of the four quadrants (zip of 32-bit, then of 64-bit lanes), the off-diagonal
// quadrants swapped.
inline void gg_transpose4(const float* src, std::size_t ss, float* dst, std::size_t ds) noexcept {
    const float32x4_t r0 = vld1q_f32(src), r1 = vld1q_f32(src + ss), r2 = vld1q_f32(src + 2 * ss),
                      r3 = vld1q_f32(src + 3 * ss);
    const float32x4_t t0 = vzip1q_f32(r0, r1), t1 = vzip2q_f32(r0, r1), t2 = vzip1q_f32(r2, r3),
                      t3 = vzip2q_f32(r2, r3);
    auto lo = [](float32x4_t a, float32x4_t b) {
        return vreinterpretq_f32_f64(vzip1q_f64(vreinterpretq_f64_f32(a), vreinterpretq_f64_f32(b)));
    };
    auto hi = [](float32x4_t a, float32x4_t b) {
        return vreinterpretq_f32_f64(vzip2q_f64(vreinterpretq_f64_f32(a), vreinterpretq_f64_f32(b)));
    };
    vst1q_f32(dst, lo(t0, t2));
    vst1q_f32(dst + ds, hi(t0, t2));
    vst1q_f32(dst + 2 * ds, lo(t1, t3));
    vst1q_f32(dst + 3 * ds, hi(t1, t3));
}
inline void gg_transpose8(const float* src, std::size_t src_stride, float* dst, std::size_t dst_stride) noexcept {
    for (std::size_t r = 0; r < 8; r += 4)
        for (std::size_t c = 0; c < 8; c += 4) gg_transpose4(src + r * src_stride + c, src_stride, dst + c * dst_stride + r, dst_stride);
}
// FCVT to half rounds as FPCR says: nearest even, subnormals kept (FZ16 is 0 by default), as
// float_to_fp16; only NaN payloads could differ, so a NaN takes the definition.
inline std::uint16_t gg_fp16(float f) noexcept {
    if (f != f) return float_to_fp16(f);
    return vget_lane_u16(vreinterpret_u16_f16(vcvt_f16_f32(vdupq_n_f32(f))), 0);
}
inline vf gg_hmin_each(const vf* v) noexcept {
    alignas(16) float t[8];
    for (std::size_t j = 0; j < 8; ++j) t[j] = vhmin(v[j]);
    return vload(t);
}
inline vf gg_hmax_each(const vf* v) noexcept {
    alignas(16) float t[8];
    for (std::size_t j = 0; j < 8; ++j) t[j] = vhmax(v[j]);
    return vload(t);
}
inline void gg_fp16_pairs(vf a, vf b, std::uint16_t* out) noexcept {
    alignas(16) float ta[8], tb[8];
    vstore(ta, a);
    vstore(tb, b);
    for (std::size_t j = 0; j < 8; ++j) out[2 * j] = gg_fp16(ta[j]), out[2 * j + 1] = gg_fp16(tb[j]);
}
inline void gg_store_i8(std::uint8_t* out, vf q) noexcept {
    const int16x8_t w = vcombine_s16(vmovn_s32(vcvtq_s32_f32(q.a)), vmovn_s32(vcvtq_s32_f32(q.b)));
    vst1_s8(reinterpret_cast<std::int8_t*>(out), vmovn_s16(w));
}
inline void gg_store_nibbles32(std::byte* qs, const std::uint8_t* q) noexcept {
    const uint8x16_t low = vdupq_n_u8(0x0F);
    const uint8x16_t lo = vandq_u8(vld1q_u8(q), low), hi = vandq_u8(vld1q_u8(q + 16), low);
    vst1q_u8(reinterpret_cast<std::uint8_t*>(qs), vorrq_u8(lo, vshlq_n_u8(hi, 4)));
}
inline void gg_store_code_nibbles(std::byte* qs, const vf* c) noexcept {  // see scalar.hpp
    alignas(32) std::uint8_t q[32];
    vstore_codes4(q, c[0], c[1], c[2], c[3]);
    gg_store_nibbles32(qs, q);
}
inline void gg_store_code_fields5(std::byte* qh, std::byte* qs, const vf* c) noexcept {  // see scalar.hpp
    alignas(32) std::uint8_t q[32];
    vstore_codes4(q, c[0], c[1], c[2], c[3]);
    const uint8x16_t top = vdupq_n_u8(31);
    vst1q_u8(q, vminq_u8(vld1q_u8(q), top));
    vst1q_u8(q + 16, vminq_u8(vld1q_u8(q + 16), top));
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
// Four 32-bit words in one register (see scalar.hpp).
using u32x4 = uint32x4_t;
inline u32x4 u32x4_load(const std::uint32_t* p) noexcept { return vld1q_u32(p); }
inline void u32x4_store(std::uint32_t* p, u32x4 a) noexcept { vst1q_u32(p, a); }
// The shared transpose (above), on word-typed registers.
inline void transpose4x4_u32(u32x4& a, u32x4& b, u32x4& c, u32x4& d) noexcept {
    vi128 x = vreinterpretq_u8_u32(a), y = vreinterpretq_u8_u32(b), z = vreinterpretq_u8_u32(c), w = vreinterpretq_u8_u32(d);
    transpose4x4_u32(x, y, z, w);
    a = vreinterpretq_u32_u8(x), b = vreinterpretq_u32_u8(y), c = vreinterpretq_u32_u8(z), d = vreinterpretq_u32_u8(w);
}
// ---- end of shared integer primitives ----

// ---- transpose_kernels primitives (simd/kernels/transpose_kernels.ipp; see scalar.hpp) ----
// Eight words as two registers. Stores are plain (ACLE has no non-temporal vector store), so
// the fence has nothing to order.
struct tp_u32x8 {
    uint32x4_t lo, hi;
};
inline tp_u32x8 tp_load8(const std::uint32_t* p) noexcept { return {vld1q_u32(p), vld1q_u32(p + 4)}; }
inline void tp_stream8(std::uint32_t* p, tp_u32x8 a) noexcept {
    vst1q_u32(p, a.lo);
    vst1q_u32(p + 4, a.hi);
}
inline void tp_stream_fence() noexcept {}
// Four 4 x 4 blocks: rows 0-3 / 4-7 of columns 0-3 become the low / high halves of o[0..4),
// those of columns 4-7 the halves of o[4..8).
inline void tp_transpose8x8(const tp_u32x8 a[8], tp_u32x8 o[8]) noexcept {
    for (int q = 0; q < 2; ++q) {  // q = 0: columns 0-3, q = 1: columns 4-7
        u32x4 r[8];
        for (int i = 0; i < 8; ++i) r[i] = q == 0 ? a[i].lo : a[i].hi;
        transpose4x4_u32(r[0], r[1], r[2], r[3]);
        transpose4x4_u32(r[4], r[5], r[6], r[7]);
        for (int j = 0; j < 4; ++j) o[4 * q + j] = {r[j], r[4 + j]};
    }
}
inline void tp_transpose8x8_load(const std::uint32_t* s, std::int64_t ss, tp_u32x8 o[8]) noexcept {
    tp_u32x8 a[8];
    for (int i = 0; i < 8; ++i) a[i] = tp_load8(s + i * ss);
    tp_transpose8x8(a, o);
}
// 8 x 8 16-bit patterns (any byte alignment): pairs of patterns, of words, of doublewords.
inline void tp_transpose8x8_u16(const std::byte* s, std::int64_t ss, std::uint16_t* d, std::int64_t ds) noexcept {
    const auto* b = reinterpret_cast<const std::uint8_t*>(s);
    uint16x8_t a[8];
    for (int i = 0; i < 8; ++i) a[i] = vreinterpretq_u16_u8(vld1q_u8(b + i * ss));
    uint32x4_t t[8];  // t[2k] = columns 0,2,4,6 of rows 2k, 2k+1 as pairs; t[2k+1] = columns 1,3,5,7
    for (int k = 0; k < 4; ++k) {
        t[2 * k] = vreinterpretq_u32_u16(vtrn1q_u16(a[2 * k], a[2 * k + 1]));
        t[2 * k + 1] = vreinterpretq_u32_u16(vtrn2q_u16(a[2 * k], a[2 * k + 1]));
    }
    // u[h][j]: rows 4h..4h+3 of columns j and j + 4 (j < 4) as two 64-bit halves.
    uint64x2_t u[2][4];
    for (int h = 0; h < 2; ++h) {
        const uint32x4_t* p = t + 4 * h;  // rows 4h, 4h+1 (p[0], p[1]) and 4h+2, 4h+3 (p[2], p[3])
        u[h][0] = vreinterpretq_u64_u32(vtrn1q_u32(p[0], p[2]));
        u[h][1] = vreinterpretq_u64_u32(vtrn1q_u32(p[1], p[3]));
        u[h][2] = vreinterpretq_u64_u32(vtrn2q_u32(p[0], p[2]));
        u[h][3] = vreinterpretq_u64_u32(vtrn2q_u32(p[1], p[3]));
    }
    for (int j = 0; j < 4; ++j) {
        vst1q_u16(d + j * ds, vreinterpretq_u16_u64(vtrn1q_u64(u[0][j], u[1][j])));
        vst1q_u16(d + (j + 4) * ds, vreinterpretq_u16_u64(vtrn2q_u64(u[0][j], u[1][j])));
    }
}
// ---- end of transpose_kernels primitives ----

// ---- minifloat_kernels primitives (simd/kernels/minifloat_kernels.ipp; scalar.hpp defines them) ----
inline float32x4_t mf_and_one(uint32x4_t m) noexcept {
    return vreinterpretq_f32_u32(vandq_u32(m, vreinterpretq_u32_f32(vdupq_n_f32(1.0f))));
}
inline vf mf_gt01(vf a, vf t) noexcept { return {mf_and_one(vcgtq_f32(a.a, t.a)), mf_and_one(vcgtq_f32(a.b, t.b))}; }
inline vf mf_ge01(vf a, vf t) noexcept { return {mf_and_one(vcgeq_f32(a.a, t.a)), mf_and_one(vcgeq_f32(a.b, t.b))}; }
inline float32x4_t mf_sign_as4(float32x4_t x, float32x4_t v) noexcept {
    const uint32x4_t m = vreinterpretq_u32_s32(vshrq_n_s32(vreinterpretq_s32_f32(x), 31));
    return vreinterpretq_f32_u32(vandq_u32(m, vreinterpretq_u32_f32(v)));
}
inline vf mf_sign_as(vf x, vf v) noexcept { return {mf_sign_as4(x.a, v.a), mf_sign_as4(x.b, v.b)}; }
inline float32x4_t mf_exponent4(float32x4_t a) noexcept {
    return vcvtq_f32_s32(vsubq_s32(vreinterpretq_s32_u32(vshrq_n_u32(vreinterpretq_u32_f32(a), 23)), vdupq_n_s32(127)));
}
inline vf mf_exponent(vf a) noexcept { return {mf_exponent4(a.a), mf_exponent4(a.b)}; }
inline float32x4_t mf_pow2_4(float32x4_t e) noexcept {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(e), vdupq_n_s32(127)), 23));
}
inline vf mf_pow2(vf e) noexcept { return {mf_pow2_4(e.a), mf_pow2_4(e.b)}; }
// 16 codes narrowed to bytes in order, even and odd ones split (uzp), joined low nibble first.
inline void mf_store_nibbles(std::uint8_t* out, vf lo, vf hi) noexcept {
    const uint16x8_t l = vcombine_u16(vmovn_u32(vcvtq_u32_f32(lo.a)), vmovn_u32(vcvtq_u32_f32(lo.b)));
    const uint16x8_t h = vcombine_u16(vmovn_u32(vcvtq_u32_f32(hi.a)), vmovn_u32(vcvtq_u32_f32(hi.b)));
    const uint8x16_t c = vcombine_u8(vmovn_u16(l), vmovn_u16(h));
    const uint8x16_t j = vorrq_u8(vuzp1q_u8(c, c), vshlq_n_u8(vuzp2q_u8(c, c), 4));
    vst1_u8(out, vget_low_u8(j));
}
inline float32x4_t mf_round_bf16_4(float32x4_t a) noexcept {
    const uint32x4_t u = vreinterpretq_u32_f32(a);
    const uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vaddq_u32(u, vaddq_u32(odd, vdupq_n_u32(0x7FFF)));
    return vreinterpretq_f32_u32(vandq_u32(r, vdupq_n_u32(0xFFFF0000u)));
}
inline vf mf_round_bf16(vf a) noexcept { return {mf_round_bf16_4(a.a), mf_round_bf16_4(a.b)}; }
inline uint32x4_t mb_u(float32x4_t a) noexcept { return vreinterpretq_u32_f32(a); }
inline float32x4_t mb_f(uint32x4_t a) noexcept { return vreinterpretq_f32_u32(a); }
inline vf mb_set(std::uint32_t bits) noexcept {
    const float32x4_t v = mb_f(vdupq_n_u32(bits));
    return {v, v};
}
inline vf mb_and(vf a, vf b) noexcept { return {mb_f(vandq_u32(mb_u(a.a), mb_u(b.a))), mb_f(vandq_u32(mb_u(a.b), mb_u(b.b)))}; }
inline vf mb_or(vf a, vf b) noexcept { return {mb_f(vorrq_u32(mb_u(a.a), mb_u(b.a))), mb_f(vorrq_u32(mb_u(a.b), mb_u(b.b)))}; }
inline vf mb_add(vf a, vf b) noexcept { return {mb_f(vaddq_u32(mb_u(a.a), mb_u(b.a))), mb_f(vaddq_u32(mb_u(a.b), mb_u(b.b)))}; }
inline vf mb_sub(vf a, vf b) noexcept { return {mb_f(vsubq_u32(mb_u(a.a), mb_u(b.a))), mb_f(vsubq_u32(mb_u(a.b), mb_u(b.b)))}; }
inline vf mb_min(vf a, vf b) noexcept { return {mb_f(vminq_u32(mb_u(a.a), mb_u(b.a))), mb_f(vminq_u32(mb_u(a.b), mb_u(b.b)))}; }
template <int N>
inline vf mb_srl(vf a) noexcept {
    return {mb_f(vshrq_n_u32(mb_u(a.a), N)), mb_f(vshrq_n_u32(mb_u(a.b), N))};
}
inline void mb_store_bytes(std::uint8_t* out, vf a) noexcept {
    const uint16x8_t w = vcombine_u16(vmovn_u32(mb_u(a.a)), vmovn_u32(mb_u(a.b)));
    vst1_u8(out, vmovn_u16(w));
}
// ---- end of minifloat_kernels primitives ----

// ---- gguf_kernels Q3_K primitives (simd/kernels/gguf_kernels.ipp; see scalar.hpp) ----
inline float32x4_t g3_nearest_int4(float32x4_t a) noexcept {
    const uint32x4_t bits = vreinterpretq_u32_f32(vaddq_f32(a, vdupq_n_f32(12582912.f)));
    const int32x4_t i = vsubq_s32(vreinterpretq_s32_u32(vandq_u32(bits, vdupq_n_u32(0x007FFFFFu))), vdupq_n_s32(0x00400000));
    return vcvtq_f32_s32(i);
}
inline vf g3_nearest_int(vf a) noexcept { return {g3_nearest_int4(a.a), g3_nearest_int4(a.b)}; }
// ---- end of gguf_kernels Q3_K primitives ----

/// The kernel tables of this ISA: each family's .ipp, compiled here by
/// simd/detail/instantiate.ipp, specializes this for its table.
template <class Table>
const Table& family_table() noexcept;

}  // namespace qforge::simd::detail::neon_isa

namespace qforge::simd {
template <>
struct arch_of<neon_tag> {
    template <class Table>
    static const Table& table() noexcept {
        return detail::neon_isa::family_table<Table>();
    }
};
}  // namespace qforge::simd

#endif  // QFORGE_SIMD_NEON
