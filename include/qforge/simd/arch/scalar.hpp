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
#include "qforge/simd/no_contract.hpp"
#include "qforge/simd/kernel_table.hpp"

namespace qforge::simd::detail::scalar_isa {

inline constexpr std::size_t lanes = 8;
struct vf {
    float v[8];
};
using acc8 = vf;

// round_half_even: adding and removing 2^23 leaves the nearest integer (ties to even) for
// |x| < 2^23; larger floats are integers already.
inline float round_half_even(float x) noexcept {
    if (!(std::fabs(x) < 0x1p23f)) return x;
    const float big = x < 0 ? -0x1p23f : 0x1p23f;
    return no_contract(x + big) - big;
}

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
inline vf vround(vf a) noexcept { QFORGE_SCALAR_MAP(round_half_even(a.v[j])); }
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
    for (std::size_t j = 0; j < 8; ++j) out[j] = static_cast<std::uint8_t>(static_cast<std::int32_t>(q.v[j]));
}
inline void vstore_codes4(std::uint8_t* out, vf a, vf b, vf c, vf d) noexcept {
    vstore_codes(out, a);
    vstore_codes(out + lanes, b);
    vstore_codes(out + 2 * lanes, c);
    vstore_codes(out + 3 * lanes, d);
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
inline vf vload_bf16_bytes(const std::byte* p) noexcept {
    std::uint16_t h[8];
    std::memcpy(h, p, sizeof h);
    vf r;
    for (std::size_t j = 0; j < 8; ++j) r.v[j] = bf16_to_float(h[j]);
    return r;
}
inline acc8 acc_zero() noexcept { return vset(0.0f); }
inline acc8 acc_add(acc8 acc, vf e) noexcept { return vadd(acc, e); }
inline void acc_store(float* out, acc8 acc) noexcept { vstore(out, acc); }

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
