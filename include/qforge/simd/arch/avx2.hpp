// AVX2 + FMA + F16C primitives (8 float lanes), compiled with a function-level target
// attribute so that a baseline x86-64 build still contains them.
#pragma once

#include "qforge/simd/tags.hpp"

#if QFORGE_SIMD_X86
#include <immintrin.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qforge/core/dtype.hpp"
#include "qforge/core/half.hpp"
#include "qforge/simd/arch/detail/x86_snr.hpp"
#include "qforge/simd/kernel_table.hpp"

namespace qforge::simd::detail::avx2_isa {

inline constexpr std::size_t lanes = 8;
using vf = __m256;
using acc8 = __m256;

#define QFORGE_P QFORGE_TARGET_AVX2 inline

QFORGE_P vf vload(const float* p) noexcept { return _mm256_loadu_ps(p); }
QFORGE_P void vstore(float* p, vf a) noexcept { _mm256_storeu_ps(p, a); }
QFORGE_P vf vset(float x) noexcept { return _mm256_set1_ps(x); }
QFORGE_P vf vadd(vf a, vf b) noexcept { return _mm256_add_ps(a, b); }
QFORGE_P vf vsub(vf a, vf b) noexcept { return _mm256_sub_ps(a, b); }
QFORGE_P vf vmul(vf a, vf b) noexcept {
    vf r = _mm256_mul_ps(a, b);
    __asm__("" : "+x"(r));  // never fused into a later add (see simd/no_contract.hpp)
    return r;
}
QFORGE_P vf vdiv(vf a, vf b) noexcept { return _mm256_div_ps(a, b); }
QFORGE_P vf vmin(vf a, vf b) noexcept { return _mm256_min_ps(a, b); }
QFORGE_P vf vmax(vf a, vf b) noexcept { return _mm256_max_ps(a, b); }
QFORGE_P vf vabs(vf a) noexcept { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
QFORGE_P vf vround(vf a) noexcept { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
QFORGE_P vf vsel_ge(vf x, vf t, vf a, vf b) noexcept { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, t, _CMP_GE_OQ)); }
QFORGE_P vf vsplit_exponent(vf a, vf& m) noexcept {  // see scalar.hpp
    const __m256i bits = _mm256_castps_si256(a);
    const __m256i k = _mm256_srai_epi32(_mm256_sub_epi32(bits, _mm256_set1_epi32(0x3F400000)), 23);
    m = _mm256_castsi256_ps(_mm256_sub_epi32(bits, _mm256_slli_epi32(k, 23)));
    return _mm256_cvtepi32_ps(k);
}
QFORGE_P vf vscale_pow2(vf q, vf n) noexcept {  // see scalar.hpp
    return _mm256_castsi256_ps(_mm256_add_epi32(_mm256_castps_si256(q), _mm256_slli_epi32(_mm256_cvttps_epi32(n), 23)));
}
QFORGE_P bool vany_gt(vf a, vf b) noexcept { return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_GT_OQ)) != 0; }
QFORGE_P bool vany_nonfinite(vf a) noexcept {
    return _mm256_movemask_ps(_mm256_cmp_ps(vabs(a), _mm256_set1_ps(3.40282347e38f), _CMP_NLE_UQ)) != 0;
}
QFORGE_P float vhmin(vf a) noexcept {
    __m128 m = _mm_min_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_min_ps(m, _mm_movehl_ps(m, m));
    m = _mm_min_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}
QFORGE_P float vhmax(vf a) noexcept {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}
QFORGE_P void vstore_codes(std::uint8_t* out, vf q) noexcept {
    const __m256i i = _mm256_cvttps_epi32(q);
    const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(w, w));
}
// Four steps' codes (0..255) as 32 consecutive bytes: the two saturating packs interleave the
// 128-bit halves, one dword permute puts them back in order.
QFORGE_P void vstore_codes4(std::uint8_t* out, vf a, vf b, vf c, vf d) noexcept {
    const __m256i ab = _mm256_packus_epi32(_mm256_cvttps_epi32(a), _mm256_cvttps_epi32(b));
    const __m256i cd = _mm256_packus_epi32(_mm256_cvttps_epi32(c), _mm256_cvttps_epi32(d));
    const __m256i x = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), x);
}
QFORGE_P vf vload_f32_bytes(const std::byte* p) noexcept { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
QFORGE_P vf vload_f16_bytes(const std::byte* p) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
QFORGE_P vf vload_bf16_bytes(const std::byte* p) noexcept {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
QFORGE_P acc8 acc_zero() noexcept { return _mm256_setzero_ps(); }
QFORGE_P acc8 acc_add(acc8 acc, vf e) noexcept { return _mm256_add_ps(acc, e); }
QFORGE_P void acc_store(float* out, acc8 acc) noexcept { _mm256_storeu_ps(out, acc); }

// vround_scale: see scalar.hpp. F16 through F16C (IEEE round to nearest even, subnormals
// kept), BF16 by the integer rounding of core/half.hpp.
QFORGE_P vf vround_scale(vf x, bool bf16, std::uint16_t* bits) noexcept {
    __m128i h;
    if (bf16) {
        const __m256i u = _mm256_castps_si256(x);
        const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
        h = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        h = _mm_max_epu16(h, _mm_set1_epi16(0x0080));
    } else {
        h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        h = _mm_max_epu16(h, _mm_set1_epi16(0x0001));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bits), h);
    if (bf16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    return _mm256_cvtph_ps(h);
}

// SNR partial sums in double, lane j = partial j (see quant/snr.hpp): a step adds its low
// then its high four floats, which is the scalar order.
using x86_snr::snr_acc;  // the shared double partial sums: simd/arch/detail/x86_snr.hpp
using x86_snr::snr_add4;
using x86_snr::snr_load;
using x86_snr::snr_store;
QFORGE_P snr_acc snr_add(snr_acc a, vf w, vf dq) noexcept {
    a = snr_add4(a, _mm256_castps256_ps128(w), _mm256_castps256_ps128(dq));
    return snr_add4(a, _mm256_extractf128_ps(w, 1), _mm256_extractf128_ps(dq, 1));
}

#undef QFORGE_P

/// The kernel tables of this ISA: each family's .ipp, compiled here by
/// simd/detail/instantiate.ipp, specializes this for its table.
template <class Table>
const Table& family_table() noexcept;

}  // namespace qforge::simd::detail::avx2_isa

namespace qforge::simd {
template <>
struct arch_of<avx2_tag> {
    template <class Table>
    static const Table& table() noexcept {
        return detail::avx2_isa::family_table<Table>();
    }
};
}  // namespace qforge::simd

#endif  // QFORGE_SIMD_X86
