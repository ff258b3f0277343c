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
#include "qforge/simd/kernel_table.hpp"

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
inline vf vround(vf x) noexcept { return {vrndnq_f32(x.a), vrndnq_f32(x.b)}; }
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
inline vf vload_f32_bytes(const std::byte* p) noexcept {
    const auto* u = reinterpret_cast<const std::uint8_t*>(p);
    return {vreinterpretq_f32_u8(vld1q_u8(u)), vreinterpretq_f32_u8(vld1q_u8(u + 16))};
}
inline vf vload_f16_bytes(const std::byte* p) noexcept {
    const uint16x8_t h = vreinterpretq_u16_u8(vld1q_u8(reinterpret_cast<const std::uint8_t*>(p)));
    return {vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h))), vcvt_f32_f16(vreinterpret_f16_u16(vget_high_u16(h)))};
}
inline vf vload_bf16_bytes(const std::byte* p) noexcept {
    const uint16x8_t h = vreinterpretq_u16_u8(vld1q_u8(reinterpret_cast<const std::uint8_t*>(p)));
    return {vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16)),
            vreinterpretq_f32_u32(vshll_n_u16(vget_high_u16(h), 16))};
}
inline acc8 acc_zero() noexcept { return vset(0.0f); }
inline acc8 acc_add(acc8 acc, vf e) noexcept { return vadd(acc, e); }
inline void acc_store(float* out, acc8 acc) noexcept { vstore(out, acc); }

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
