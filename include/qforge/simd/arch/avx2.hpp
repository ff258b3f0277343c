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
#include "qforge/simd/arch/detail/x86_block_bits.hpp"
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
QFORGE_P vf vmax_magnitude(vf a, vf m) noexcept {  // see scalar.hpp
    return _mm256_castsi256_ps(_mm256_max_epu32(_mm256_castps_si256(vabs(a)), _mm256_castps_si256(m)));
}
QFORGE_P vf vround(vf a) noexcept { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
QFORGE_P vf vround_small(vf a) noexcept {  // see scalar.hpp
    const __m256 shift = _mm256_set1_ps(12582912.0f);  // 1.5 * 2^23
    return _mm256_sub_ps(_mm256_add_ps(a, shift), shift);
}
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
QFORGE_P bool vany_gt4(vf a, vf b, vf c, vf d, vf t) noexcept {  // see scalar.hpp
    const __m256 ab = _mm256_or_ps(_mm256_cmp_ps(a, t, _CMP_GT_OQ), _mm256_cmp_ps(b, t, _CMP_GT_OQ));
    const __m256 cd = _mm256_or_ps(_mm256_cmp_ps(c, t, _CMP_GT_OQ), _mm256_cmp_ps(d, t, _CMP_GT_OQ));
    return _mm256_movemask_ps(_mm256_or_ps(ab, cd)) != 0;
}
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
QFORGE_P __m256i codes_bytes32(vf a, vf b, vf c, vf d) noexcept {
    const __m256i ab = _mm256_packus_epi32(_mm256_cvttps_epi32(a), _mm256_cvttps_epi32(b));
    const __m256i cd = _mm256_packus_epi32(_mm256_cvttps_epi32(c), _mm256_cvttps_epi32(d));
    return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
QFORGE_P void vstore_codes4(std::uint8_t* out, vf a, vf b, vf c, vf d) noexcept {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), codes_bytes32(a, b, c, d));
}
// See scalar.hpp. The zero as 16-bit lanes and the top as bytes, for the saturating packs.
struct code_clamp {
    __m256i zero, top;
};
QFORGE_P code_clamp make_code_clamp(float zero, float top) noexcept {
    return {_mm256_set1_epi16(static_cast<std::int16_t>(zero)),
            _mm256_set1_epi8(static_cast<char>(static_cast<std::int32_t>(top)))};
}
// r above 2^16 (+inf too) becomes 2^16, which the signed pack saturates to 32767 and the
// unsigned one to 255 before the min with top; cvtt turns -inf, NaN (min keeps its second
// operand) and r below -2^31 into INT_MIN, which both packs take to 0 whatever z adds.
QFORGE_P __m256i codes_i32(vf r) noexcept { return _mm256_cvttps_epi32(_mm256_min_ps(_mm256_set1_ps(65536.0f), r)); }
QFORGE_P void vstore_codes4_clamped(std::uint8_t* out, vf a, vf b, vf c, vf d, code_clamp cc) noexcept {
    const __m256i ab = _mm256_adds_epi16(_mm256_packs_epi32(codes_i32(a), codes_i32(b)), cc.zero);
    const __m256i cd = _mm256_adds_epi16(_mm256_packs_epi32(codes_i32(c), codes_i32(d)), cc.zero);
    const __m256i x = _mm256_min_epu8(_mm256_packus_epi16(ab, cd), cc.top);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        _mm256_permutevar8x32_epi32(x, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}
QFORGE_P vf vload_f32_bytes(const std::byte* p) noexcept { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
QFORGE_P vf vload_f16_bytes(const std::byte* p) noexcept {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
QFORGE_P vf vload_u8(const std::uint8_t* p) noexcept {  // see scalar.hpp
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
QFORGE_P vf vload_bf16_bytes(const std::byte* p) noexcept {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
QFORGE_P acc8 acc_zero() noexcept { return _mm256_setzero_ps(); }
QFORGE_P acc8 acc_add(acc8 acc, vf e) noexcept { return _mm256_add_ps(acc, e); }
using acc_free = vf;  // see scalar.hpp
QFORGE_P acc_free acc_free_zero() noexcept { return _mm256_setzero_ps(); }
QFORGE_P acc_free acc_add_square(acc_free acc, vf e) noexcept { return _mm256_fmadd_ps(e, e, acc); }  // see scalar.hpp
QFORGE_P vf vmul_exact_sub(vf a, vf b, vf c) noexcept { return _mm256_fmsub_ps(a, b, c); }     // see scalar.hpp
QFORGE_P void acc_store(float* out, acc8 acc) noexcept { _mm256_storeu_ps(out, acc); }
// acc_sum4: four accumulators' sums in k_sum8's order ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)):
// hadd pairs neighbours within each 128-bit half, twice, and the halves add last.
QFORGE_P void acc_sum4(acc8 a, acc8 b, acc8 c, acc8 d, float* out) noexcept {
    const __m256 q = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)));
}
QFORGE_P void acc_free_sum4(acc_free a, acc_free b, acc_free c, acc_free d, float* out) noexcept {
    acc_sum4(a, b, c, d, out);
}

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
[[gnu::always_inline]] QFORGE_P snr_acc snr_add(snr_acc a, vf w, vf dq) noexcept {
    a = snr_add4(a, _mm256_castps256_ps128(w), _mm256_castps256_ps128(dq));
    return snr_add4(a, _mm256_extractf128_ps(w, 1), _mm256_extractf128_ps(dq, 1));
}

// ---- shared integer primitives ----
// (semantics: simd/arch/scalar.hpp)
using vi128 = __m128i;
QFORGE_P void transpose4x4_u32(vi128& a, vi128& b, vi128& c, vi128& d) noexcept {
    const __m128i t0 = _mm_unpacklo_epi32(a, b), t1 = _mm_unpacklo_epi32(c, d);
    const __m128i t2 = _mm_unpackhi_epi32(a, b), t3 = _mm_unpackhi_epi32(c, d);
    a = _mm_unpacklo_epi64(t0, t1);
    b = _mm_unpackhi_epi64(t0, t1);
    c = _mm_unpacklo_epi64(t2, t3);
    d = _mm_unpackhi_epi64(t2, t3);
}
QFORGE_P void prefetch_read(const void* p, std::size_t ahead = 0) noexcept {
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) + ahead), _MM_HINT_T0);
}
// ---- end shared integer primitives ----

// ---- pack kernels (simd/kernels/pack_kernels.ipp): integer primitives ----
// (semantics: simd/arch/scalar.hpp; AVX2's 256-bit packs and unpacks already work per block)
using pk_u8x32 = __m256i;
QFORGE_P vi128 pk_load16(const void* p) noexcept { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }
QFORGE_P void pk_store16(void* p, vi128 a) noexcept { _mm_storeu_si128(static_cast<__m128i*>(p), a); }
QFORGE_P vi128 pk_splat8(std::uint8_t x) noexcept { return _mm_set1_epi8(static_cast<char>(x)); }
QFORGE_P vi128 pk_and(vi128 a, vi128 b) noexcept { return _mm_and_si128(a, b); }
QFORGE_P vi128 pk_or(vi128 a, vi128 b) noexcept { return _mm_or_si128(a, b); }
template <int N>
QFORGE_P vi128 pk_shl16(vi128 a) noexcept { return _mm_slli_epi16(a, N); }
QFORGE_P vi128 pk_join_nibbles16(vi128 a) noexcept { return _mm_maddubs_epi16(a, _mm_set1_epi16(0x1001)); }
QFORGE_P vi128 pk_packus16(vi128 a, vi128 b) noexcept { return _mm_packus_epi16(a, b); }
QFORGE_P vi128 pk_zip8_lo(vi128 a, vi128 b) noexcept { return _mm_unpacklo_epi8(a, b); }
QFORGE_P vi128 pk_zip8_hi(vi128 a, vi128 b) noexcept { return _mm_unpackhi_epi8(a, b); }
QFORGE_P vi128 pk_zip16_lo(vi128 a, vi128 b) noexcept { return _mm_unpacklo_epi16(a, b); }
QFORGE_P vi128 pk_zip16_hi(vi128 a, vi128 b) noexcept { return _mm_unpackhi_epi16(a, b); }
QFORGE_P vi128 pk_zip32_lo(vi128 a, vi128 b) noexcept { return _mm_unpacklo_epi32(a, b); }
QFORGE_P vi128 pk_zip32_hi(vi128 a, vi128 b) noexcept { return _mm_unpackhi_epi32(a, b); }

QFORGE_P pk_u8x32 pk_load32(const void* p) noexcept { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
QFORGE_P void pk_store32(void* p, pk_u8x32 a) noexcept { _mm256_storeu_si256(static_cast<__m256i*>(p), a); }
QFORGE_P pk_u8x32 pk_splat8x32(std::uint8_t x) noexcept { return _mm256_set1_epi8(static_cast<char>(x)); }
QFORGE_P pk_u8x32 pk_and(pk_u8x32 a, pk_u8x32 b) noexcept { return _mm256_and_si256(a, b); }
QFORGE_P pk_u8x32 pk_or(pk_u8x32 a, pk_u8x32 b) noexcept { return _mm256_or_si256(a, b); }
template <int N>
QFORGE_P pk_u8x32 pk_shift16(pk_u8x32 a) noexcept {
    if constexpr (N > 0) return _mm256_slli_epi16(a, N);
    else if constexpr (N < 0) return _mm256_srli_epi16(a, -N);
    else return a;
}
// bytes (lo, hi) times (1, 16), pairs added: lo + 16 hi, never saturating.
QFORGE_P pk_u8x32 pk_join_nibbles16(pk_u8x32 a) noexcept { return _mm256_maddubs_epi16(a, _mm256_set1_epi16(0x1001)); }
QFORGE_P pk_u8x32 pk_packus16(pk_u8x32 a, pk_u8x32 b) noexcept { return _mm256_packus_epi16(a, b); }
QFORGE_P pk_u8x32 pk_zip32_lo(pk_u8x32 a, pk_u8x32 b) noexcept { return _mm256_unpacklo_epi32(a, b); }
QFORGE_P pk_u8x32 pk_zip32_hi(pk_u8x32 a, pk_u8x32 b) noexcept { return _mm256_unpackhi_epi32(a, b); }
QFORGE_P pk_u8x32 pk_low_blocks(pk_u8x32 a, pk_u8x32 b) noexcept { return _mm256_permute2x128_si256(a, b, 0x20); }
QFORGE_P pk_u8x32 pk_high_blocks(pk_u8x32 a, pk_u8x32 b) noexcept { return _mm256_permute2x128_si256(a, b, 0x31); }
QFORGE_P std::uint8_t pk_or_reduce(pk_u8x32 a) noexcept {
    __m128i x = _mm_or_si128(_mm256_castsi256_si128(a), _mm256_extracti128_si256(a, 1));
    x = _mm_or_si128(x, _mm_srli_si128(x, 8));
    x = _mm_or_si128(x, _mm_srli_si128(x, 4));
    x = _mm_or_si128(x, _mm_srli_si128(x, 2));
    x = _mm_or_si128(x, _mm_srli_si128(x, 1));
    return static_cast<std::uint8_t>(_mm_cvtsi128_si32(x));
}
// ---- end pack kernels primitives ----

#undef QFORGE_P

// ---- gguf_kernels primitives (simd/kernels/gguf_kernels.ipp; see scalar.hpp) --------------
#define QFORGE_GG QFORGE_TARGET_AVX2 inline
using gg_mask = __m256;
QFORGE_GG gg_mask gg_lt(vf a, vf b) noexcept { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
QFORGE_GG gg_mask gg_gt(vf a, vf b) noexcept { return _mm256_cmp_ps(a, b, _CMP_GT_OQ); }
QFORGE_GG gg_mask gg_eq(vf a, vf b) noexcept { return _mm256_cmp_ps(a, b, _CMP_EQ_OQ); }
QFORGE_GG gg_mask gg_ne(vf a, vf b) noexcept { return _mm256_cmp_ps(a, b, _CMP_NEQ_UQ); }
QFORGE_GG gg_mask gg_and(gg_mask a, gg_mask b) noexcept { return _mm256_and_ps(a, b); }
QFORGE_GG gg_mask gg_or(gg_mask a, gg_mask b) noexcept { return _mm256_or_ps(a, b); }
QFORGE_GG bool gg_any(gg_mask a) noexcept { return _mm256_movemask_ps(a) != 0; }
QFORGE_GG int gg_first(gg_mask a) noexcept {
    const int bits = _mm256_movemask_ps(a);
    return bits == 0 ? -1 : __builtin_ctz(static_cast<unsigned>(bits));
}
QFORGE_GG vf gg_blend(gg_mask m, vf t, vf f) noexcept { return _mm256_blendv_ps(f, t, m); }
QFORGE_GG vf gg_sqrt(vf a) noexcept { return _mm256_sqrt_ps(a); }
QFORGE_GG vf gg_trunc(vf a) noexcept { return _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
QFORGE_GG void gg_transpose8(const float* src, std::size_t src_stride, float* dst, std::size_t dst_stride) noexcept {
    // Unrolled in full so that r and t live in registers (rolled, gcc -O2 kept them on the stack).
    __m256 r[8], t[8];
#pragma GCC unroll 8
    for (std::size_t i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
#pragma GCC unroll 4
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 2
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
#pragma GCC unroll 4
    for (std::size_t i = 0; i < 4; ++i) {
        _mm256_storeu_ps(dst + i * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
}
// F16C's conversion with round-to-nearest-even is IEEE's, as float_to_fp16 is (subnormals and
// overflow to infinity included); only NaN payloads could differ, so a NaN takes the definition.
QFORGE_GG std::uint16_t gg_fp16(float f) noexcept {
    if (f != f) return float_to_fp16(f);
    return static_cast<std::uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT), 0));
}
template <bool Max>
QFORGE_GG vf gg_min_or_max(vf a, vf b) noexcept {
    if constexpr (Max) {
        return _mm256_max_ps(a, b);
    } else {
        return _mm256_min_ps(a, b);
    }
}
// Eight reductions by vhmin's (vhmax's) own tree and operand order, sharing its shuffles: the
// 128-bit halves, then lanes i and i + 2, then i and i + 1, each round over every vector.
template <bool Max>
QFORGE_GG vf gg_reduce_each(const vf* v) noexcept {
    vf half[4], quarter[2];  // half[i]: v[2i]'s four partial results, then v[2i + 1]'s
#pragma GCC unroll 4
    for (int i = 0; i < 4; ++i)
        half[i] = gg_min_or_max<Max>(_mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x20),
                                     _mm256_permute2f128_ps(v[2 * i], v[2 * i + 1], 0x31));
#pragma GCC unroll 2
    for (int i = 0; i < 2; ++i)  // quarter[0]: v0 v0 v2 v2 | v1 v1 v3 v3; quarter[1] the same of v4..v7
        quarter[i] = gg_min_or_max<Max>(_mm256_shuffle_ps(half[2 * i], half[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                                        _mm256_shuffle_ps(half[2 * i], half[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    const vf r = gg_min_or_max<Max>(_mm256_shuffle_ps(quarter[0], quarter[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm256_shuffle_ps(quarter[0], quarter[1], _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));  // from v0 v2 v4 v6 | v1 v3 v5 v7
}
QFORGE_GG vf gg_hmin_each(const vf* v) noexcept { return gg_reduce_each<false>(v); }
QFORGE_GG vf gg_hmax_each(const vf* v) noexcept { return gg_reduce_each<true>(v); }
QFORGE_GG void gg_fp16_pairs(vf a, vf b, std::uint16_t* out) noexcept {
    const __m128i ha = _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m128i hb = _mm256_cvtps_ph(b, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi16(ha, hb));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 8), _mm_unpackhi_epi16(ha, hb));
    const vf nan = _mm256_or_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q), _mm256_cmp_ps(b, b, _CMP_UNORD_Q));
    if (_mm256_movemask_ps(nan) == 0) return;
    alignas(32) float ta[8], tb[8];
    _mm256_store_ps(ta, a);
    _mm256_store_ps(tb, b);
    for (int j = 0; j < 8; ++j) out[2 * j] = gg_fp16(ta[j]), out[2 * j + 1] = gg_fp16(tb[j]);
}
QFORGE_GG void gg_store_i8(std::uint8_t* out, vf q) noexcept {
    const __m256i i = _mm256_cvttps_epi32(q);
    const __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packs_epi16(w, w));
}
using x86_block_bits::gg_store_nibbles32;  // the shared definition: simd/arch/detail/x86_block_bits.hpp
// The nibbles and fifth bits from the codes' bytes in a register, not stored and read back
// (256 x 11008 rows, Intel Xeon, alternated medians of 7: Q5_1 4.49 -> 5.15 G weights/s, Q4_1
// 5.14 -> 5.37, Q5_0 4.51 -> 4.55). Codes j and j + 16 are the two 128-bit halves.
QFORGE_GG __m128i gg_nibbles_of(__m256i bytes) noexcept {  // codes <= 15 in the upper half: no carry
    return _mm_or_si128(_mm256_castsi256_si128(bytes), _mm_slli_epi16(_mm256_extracti128_si256(bytes, 1), 4));
}
QFORGE_GG void gg_store_code_nibbles(std::byte* qs, const vf* c) noexcept {  // see scalar.hpp
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), gg_nibbles_of(codes_bytes32(c[0], c[1], c[2], c[3])));
}
QFORGE_GG void gg_store_code_fields5(std::byte* qh, std::byte* qs, const vf* c) noexcept {  // see scalar.hpp
    const __m256i bytes = _mm256_min_epu8(codes_bytes32(c[0], c[1], c[2], c[3]), _mm256_set1_epi8(31));
    // shifting the 16-bit words left by 3 puts each byte's bit 4 in its bit 7, which movemask reads
    const auto bits = static_cast<std::uint32_t>(_mm256_movemask_epi8(_mm256_slli_epi16(bytes, 3)));
    std::memcpy(qh, &bits, 4);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), gg_nibbles_of(_mm256_and_si256(bytes, _mm256_set1_epi8(0x0F))));
}
// The saturating packs interleave the 128-bit halves; one dword permute puts them in order.
QFORGE_GG void gg_store_i8x4(std::uint8_t* out, vf a, vf b, vf c, vf d) noexcept {
    const __m256i ab = _mm256_packs_epi32(_mm256_cvttps_epi32(a), _mm256_cvttps_epi32(b));
    const __m256i cd = _mm256_packs_epi32(_mm256_cvttps_epi32(c), _mm256_cvttps_epi32(d));
    const __m256i x = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), x);
}
// ---- end of gguf_kernels primitives ---------------------------------------------------------
#undef QFORGE_GG
// ---- shared integer primitives (transposes) ----
// Four 32-bit words: the shared 128-bit integer vector; transpose4x4_u32 is the shared one above.
using u32x4 = vi128;
QFORGE_TARGET_AVX2 inline u32x4 u32x4_load(const std::uint32_t* p) noexcept {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
QFORGE_TARGET_AVX2 inline void u32x4_store(std::uint32_t* p, u32x4 a) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), a);
}
// ---- end of shared integer primitives (transposes) ----

// ---- transpose_kernels primitives (simd/kernels/transpose_kernels.ipp; see scalar.hpp) ----
using tp_u32x8 = __m256i;
QFORGE_TARGET_AVX2 inline tp_u32x8 tp_load8(const std::uint32_t* p) noexcept {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// p 32-byte aligned: a non-temporal store (no read-for-ownership of the line).
QFORGE_TARGET_AVX2 inline void tp_stream8(std::uint32_t* p, tp_u32x8 a) noexcept {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), a);
}
QFORGE_TARGET_AVX2 inline void tp_stream_fence() noexcept { _mm_sfence(); }
QFORGE_TARGET_AVX2 inline void tp_transpose8x8(const tp_u32x8 a[8], tp_u32x8 o[8]) noexcept {
    const __m256i b0 = _mm256_unpacklo_epi32(a[0], a[1]), b1 = _mm256_unpackhi_epi32(a[0], a[1]);
    const __m256i b2 = _mm256_unpacklo_epi32(a[2], a[3]), b3 = _mm256_unpackhi_epi32(a[2], a[3]);
    const __m256i b4 = _mm256_unpacklo_epi32(a[4], a[5]), b5 = _mm256_unpackhi_epi32(a[4], a[5]);
    const __m256i b6 = _mm256_unpacklo_epi32(a[6], a[7]), b7 = _mm256_unpackhi_epi32(a[6], a[7]);
    const __m256i c0 = _mm256_unpacklo_epi64(b0, b2), c1 = _mm256_unpackhi_epi64(b0, b2);
    const __m256i c2 = _mm256_unpacklo_epi64(b1, b3), c3 = _mm256_unpackhi_epi64(b1, b3);
    const __m256i c4 = _mm256_unpacklo_epi64(b4, b6), c5 = _mm256_unpackhi_epi64(b4, b6);
    const __m256i c6 = _mm256_unpacklo_epi64(b5, b7), c7 = _mm256_unpackhi_epi64(b5, b7);
    o[0] = _mm256_permute2x128_si256(c0, c4, 0x20);
    o[1] = _mm256_permute2x128_si256(c1, c5, 0x20);
    o[2] = _mm256_permute2x128_si256(c2, c6, 0x20);
    o[3] = _mm256_permute2x128_si256(c3, c7, 0x20);
    o[4] = _mm256_permute2x128_si256(c0, c4, 0x31);
    o[5] = _mm256_permute2x128_si256(c1, c5, 0x31);
    o[6] = _mm256_permute2x128_si256(c2, c6, 0x31);
    o[7] = _mm256_permute2x128_si256(c3, c7, 0x31);
}
// From memory, the step across 128-bit lanes is done by the loads (row i's and row i + 4's
// 4-word halves into one register, a load-insert), which leaves 16 in-lane shuffles instead of
// 24 on the shuffle ports (measured on Zen 4: the compressed-tensors -> GPTQ transpose 6-12%
// faster, the other direction 2-6%).
QFORGE_TARGET_AVX2 inline __m256i tp_load_lanes(const std::uint32_t* lane0, const std::uint32_t* lane1) noexcept {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lane0));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), _mm_loadu_si128(reinterpret_cast<const __m128i*>(lane1)), 1);
}
QFORGE_TARGET_AVX2 inline void tp_transpose8x8_load(const std::uint32_t* s, std::int64_t ss, tp_u32x8 o[8]) noexcept {
    for (int half = 0; half < 2; ++half) {  // columns 0-3, then 4-7; lane 0 holds row i, lane 1 row i + 4
        const std::uint32_t* p = s + 4 * half;
        const __m256i a0 = tp_load_lanes(p, p + 4 * ss), a1 = tp_load_lanes(p + ss, p + 5 * ss);
        const __m256i a2 = tp_load_lanes(p + 2 * ss, p + 6 * ss), a3 = tp_load_lanes(p + 3 * ss, p + 7 * ss);
        const __m256i t0 = _mm256_unpacklo_epi32(a0, a1), t1 = _mm256_unpackhi_epi32(a0, a1);
        const __m256i t2 = _mm256_unpacklo_epi32(a2, a3), t3 = _mm256_unpackhi_epi32(a2, a3);
        o[4 * half + 0] = _mm256_unpacklo_epi64(t0, t2);
        o[4 * half + 1] = _mm256_unpackhi_epi64(t0, t2);
        o[4 * half + 2] = _mm256_unpacklo_epi64(t1, t3);
        o[4 * half + 3] = _mm256_unpackhi_epi64(t1, t3);
    }
}
QFORGE_TARGET_AVX2 inline void tp_transpose8x8_u16(const std::byte* s, std::int64_t ss, std::uint16_t* d, std::int64_t ds) noexcept {
    __m128i a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * ss));
    const __m128i b0 = _mm_unpacklo_epi16(a[0], a[1]), b1 = _mm_unpackhi_epi16(a[0], a[1]);
    const __m128i b2 = _mm_unpacklo_epi16(a[2], a[3]), b3 = _mm_unpackhi_epi16(a[2], a[3]);
    const __m128i b4 = _mm_unpacklo_epi16(a[4], a[5]), b5 = _mm_unpackhi_epi16(a[4], a[5]);
    const __m128i b6 = _mm_unpacklo_epi16(a[6], a[7]), b7 = _mm_unpackhi_epi16(a[6], a[7]);
    const __m128i c0 = _mm_unpacklo_epi32(b0, b2), c1 = _mm_unpackhi_epi32(b0, b2);  // columns 0-1, 2-3 of rows 0-3
    const __m128i c2 = _mm_unpacklo_epi32(b1, b3), c3 = _mm_unpackhi_epi32(b1, b3);  // columns 4-5, 6-7
    const __m128i c4 = _mm_unpacklo_epi32(b4, b6), c5 = _mm_unpackhi_epi32(b4, b6);  // the same of rows 4-7
    const __m128i c6 = _mm_unpacklo_epi32(b5, b7), c7 = _mm_unpackhi_epi32(b5, b7);
    const __m128i o[8] = {_mm_unpacklo_epi64(c0, c4), _mm_unpackhi_epi64(c0, c4), _mm_unpacklo_epi64(c1, c5),
                          _mm_unpackhi_epi64(c1, c5), _mm_unpacklo_epi64(c2, c6), _mm_unpackhi_epi64(c2, c6),
                          _mm_unpacklo_epi64(c3, c7), _mm_unpackhi_epi64(c3, c7)};
    for (int j = 0; j < 8; ++j) _mm_storeu_si128(reinterpret_cast<__m128i*>(d + j * ds), o[j]);
}
// ---- end of transpose_kernels primitives ----

// ---- minifloat_kernels primitives (simd/kernels/minifloat_kernels.ipp; scalar.hpp defines them) ----
QFORGE_TARGET_AVX2 inline vf mf_gt01(vf a, vf t) noexcept {
    return _mm256_and_ps(_mm256_cmp_ps(a, t, _CMP_GT_OQ), _mm256_set1_ps(1.0f));
}
QFORGE_TARGET_AVX2 inline vf mf_ge01(vf a, vf t) noexcept {
    return _mm256_and_ps(_mm256_cmp_ps(a, t, _CMP_GE_OQ), _mm256_set1_ps(1.0f));
}
QFORGE_TARGET_AVX2 inline vf mf_sign_as(vf x, vf v) noexcept {
    return _mm256_and_ps(_mm256_castsi256_ps(_mm256_srai_epi32(_mm256_castps_si256(x), 31)), v);
}
QFORGE_TARGET_AVX2 inline vf mf_exponent(vf a) noexcept {
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(_mm256_castps_si256(a), 23), _mm256_set1_epi32(127)));
}
QFORGE_TARGET_AVX2 inline vf mf_pow2(vf e) noexcept {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(e), _mm256_set1_epi32(127)), 23));
}
// 16 codes as i16 in order (packs works per 128-bit half, the permute restores the order),
// each u32 pair c0 | c1 << 16 folded to c0 | c1 << 4 in its low byte, the low bytes gathered.
QFORGE_TARGET_AVX2 inline void mf_store_nibbles(std::uint8_t* out, vf lo, vf hi) noexcept {
    const __m256i c16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_cvtps_epi32(lo), _mm256_cvtps_epi32(hi)), 0xD8);
    const __m256i t = _mm256_or_si256(c16, _mm256_srli_epi32(c16, 12));
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1,
                                          -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(t, pick), _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(b));
}
QFORGE_TARGET_AVX2 inline vf mf_round_bf16(vf a) noexcept {
    const __m256i u = _mm256_castps_si256(a);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF)));
    return _mm256_castsi256_ps(_mm256_and_si256(r, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
QFORGE_TARGET_AVX2 inline __m256i mb_i(vf a) noexcept { return _mm256_castps_si256(a); }
QFORGE_TARGET_AVX2 inline vf mb_f(__m256i a) noexcept { return _mm256_castsi256_ps(a); }
QFORGE_TARGET_AVX2 inline vf mb_set(std::uint32_t bits) noexcept { return mb_f(_mm256_set1_epi32(static_cast<int>(bits))); }
QFORGE_TARGET_AVX2 inline vf mb_and(vf a, vf b) noexcept { return _mm256_and_ps(a, b); }
QFORGE_TARGET_AVX2 inline vf mb_or(vf a, vf b) noexcept { return _mm256_or_ps(a, b); }
QFORGE_TARGET_AVX2 inline vf mb_add(vf a, vf b) noexcept { return mb_f(_mm256_add_epi32(mb_i(a), mb_i(b))); }
QFORGE_TARGET_AVX2 inline vf mb_sub(vf a, vf b) noexcept { return mb_f(_mm256_sub_epi32(mb_i(a), mb_i(b))); }
QFORGE_TARGET_AVX2 inline vf mb_min(vf a, vf b) noexcept { return mb_f(_mm256_min_epu32(mb_i(a), mb_i(b))); }
template <int N>
QFORGE_TARGET_AVX2 inline vf mb_srl(vf a) noexcept {
    return mb_f(_mm256_srli_epi32(mb_i(a), N));
}
QFORGE_TARGET_AVX2 inline void mb_store_bytes(std::uint8_t* out, vf a) noexcept {
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1, -1,
                                          -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    const __m256i b = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(mb_i(a), pick), _mm256_setr_epi32(0, 4, 1, 1, 1, 1, 1, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(b));
}
// ---- end of minifloat_kernels primitives ----

// ---- gguf_kernels Q3_K primitives (simd/kernels/gguf_kernels.ipp; see scalar.hpp) ----
QFORGE_TARGET_AVX2 inline vf g3_nearest_int(vf a) noexcept {
    const __m256i bits = _mm256_castps_si256(_mm256_add_ps(a, _mm256_set1_ps(12582912.f)));
    const __m256i i = _mm256_sub_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x007FFFFF)), _mm256_set1_epi32(0x00400000));
    return _mm256_cvtepi32_ps(i);
}
// ---- end of gguf_kernels Q3_K primitives ----

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
