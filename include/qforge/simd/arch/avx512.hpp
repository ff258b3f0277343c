// AVX-512 F/BW/VL primitives (16 float lanes), compiled with a function-level target
// attribute. Error sums still use 8 partials: each 16-lane vector is added as its low then
// its high 8 lanes, which is the scalar order.
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
#include "qforge/simd/arch/avx2.hpp"  // gg_transpose8
#include "qforge/simd/arch/avx2.hpp"  // the integer primitives it reuses
#include "qforge/simd/arch/detail/x86_block_bits.hpp"
#include "qforge/simd/arch/detail/x86_snr.hpp"
#include "qforge/simd/kernel_table.hpp"

// GCC 12 reports its own AVX-512 intrinsics (`__m512 __Y = __Y;` placeholders) as
// uninitialized when AVX-512 comes from a target attribute rather than -mavx512f.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace qforge::simd::detail::avx512_isa {

inline constexpr std::size_t lanes = 16;
using vf = __m512;
using acc8 = __m256;

#define QFORGE_P QFORGE_TARGET_AVX512 inline

QFORGE_P vf vload(const float* p) noexcept { return _mm512_loadu_ps(p); }
QFORGE_P void vstore(float* p, vf a) noexcept { _mm512_storeu_ps(p, a); }
QFORGE_P vf vset(float x) noexcept { return _mm512_set1_ps(x); }
QFORGE_P vf vadd(vf a, vf b) noexcept { return _mm512_add_ps(a, b); }
QFORGE_P vf vsub(vf a, vf b) noexcept { return _mm512_sub_ps(a, b); }
QFORGE_P vf vmul(vf a, vf b) noexcept {
    vf r = _mm512_mul_ps(a, b);
    __asm__("" : "+v"(r));  // never fused into a later add (see simd/no_contract.hpp)
    return r;
}
QFORGE_P vf vdiv(vf a, vf b) noexcept { return _mm512_div_ps(a, b); }
QFORGE_P vf vmin(vf a, vf b) noexcept { return _mm512_min_ps(a, b); }
QFORGE_P vf vmax(vf a, vf b) noexcept { return _mm512_max_ps(a, b); }
QFORGE_P vf vabs(vf a) noexcept {
    return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7FFFFFFF)));
}
QFORGE_P vf vmax_magnitude(vf a, vf m) noexcept {  // see scalar.hpp
    return _mm512_castsi512_ps(_mm512_max_epu32(_mm512_castps_si512(vabs(a)), _mm512_castps_si512(m)));
}
QFORGE_P vf vround(vf a) noexcept { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
// See scalar.hpp. The round instruction, not AVX2's two adds: 512-bit adds run on the ports
// of the multiplies, and the adds measured 3-5% slower in the square-error search here.
QFORGE_P vf vround_small(vf a) noexcept { return vround(a); }
QFORGE_P vf vsel_ge(vf x, vf t, vf a, vf b) noexcept {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, t, _CMP_GE_OQ), b, a);
}
QFORGE_P vf vsplit_exponent(vf a, vf& m) noexcept {  // see scalar.hpp
    const __m512i bits = _mm512_castps_si512(a);
    const __m512i k = _mm512_srai_epi32(_mm512_sub_epi32(bits, _mm512_set1_epi32(0x3F400000)), 23);
    m = _mm512_castsi512_ps(_mm512_sub_epi32(bits, _mm512_slli_epi32(k, 23)));
    return _mm512_cvtepi32_ps(k);
}
QFORGE_P vf vscale_pow2(vf q, vf n) noexcept {  // see scalar.hpp
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(q), _mm512_slli_epi32(_mm512_cvttps_epi32(n), 23)));
}
QFORGE_P bool vany_gt(vf a, vf b) noexcept { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ) != 0; }
QFORGE_P bool vany_gt4(vf a, vf b, vf c, vf d, vf t) noexcept {  // see scalar.hpp
    return (_mm512_cmp_ps_mask(a, t, _CMP_GT_OQ) | _mm512_cmp_ps_mask(b, t, _CMP_GT_OQ) |
            _mm512_cmp_ps_mask(c, t, _CMP_GT_OQ) | _mm512_cmp_ps_mask(d, t, _CMP_GT_OQ)) != 0;
}
QFORGE_P bool vany_nonfinite(vf a) noexcept {
    return _mm512_cmp_ps_mask(vabs(a), _mm512_set1_ps(3.40282347e38f), _CMP_NLE_UQ) != 0;
}
QFORGE_P float vhmin(vf a) noexcept { return _mm512_reduce_min_ps(a); }
QFORGE_P float vhmax(vf a) noexcept { return _mm512_reduce_max_ps(a); }
QFORGE_P void vstore_codes(std::uint8_t* out, vf q) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q)));
}
QFORGE_P void vstore_codes4(std::uint8_t* out, vf a, vf b, vf c, vf d) noexcept {
    vstore_codes(out, a);
    vstore_codes(out + lanes, b);
    vstore_codes(out + 2 * lanes, c);
    vstore_codes(out + 3 * lanes, d);
}
// See scalar.hpp and avx2.hpp (the same packs; four 128-bit lanes to put back in order).
struct code_clamp {
    __m512i zero, top;
};
QFORGE_P code_clamp make_code_clamp(float zero, float top) noexcept {
    return {_mm512_set1_epi16(static_cast<std::int16_t>(zero)),
            _mm512_set1_epi8(static_cast<char>(static_cast<std::int32_t>(top)))};
}
QFORGE_P __m512i codes_i32(vf r) noexcept { return _mm512_cvttps_epi32(_mm512_min_ps(_mm512_set1_ps(65536.0f), r)); }
QFORGE_P void vstore_codes4_clamped(std::uint8_t* out, vf a, vf b, vf c, vf d, code_clamp cc) noexcept {
    const __m512i ab = _mm512_adds_epi16(_mm512_packs_epi32(codes_i32(a), codes_i32(b)), cc.zero);
    const __m512i cd = _mm512_adds_epi16(_mm512_packs_epi32(codes_i32(c), codes_i32(d)), cc.zero);
    const __m512i x = _mm512_min_epu8(_mm512_packus_epi16(ab, cd), cc.top);
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_si512(out, _mm512_permutexvar_epi32(order, x));
}
QFORGE_P vf vload_f32_bytes(const std::byte* p) noexcept { return _mm512_loadu_ps(reinterpret_cast<const float*>(p)); }
QFORGE_P vf vload_f16_bytes(const std::byte* p) noexcept {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
QFORGE_P vf vload_u8(const std::uint8_t* p) noexcept {  // see scalar.hpp
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
QFORGE_P vf vload_bf16_bytes(const std::byte* p) noexcept {
    const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
/// Lanes 8..15 of v (lanes 0..7 are _mm512_castps512_ps256).
QFORGE_P __m256 upper_floats(vf v) noexcept { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)); }
QFORGE_P acc8 acc_zero() noexcept { return _mm256_setzero_ps(); }
QFORGE_P acc8 acc_add(acc8 acc, vf e) noexcept {
    acc = _mm256_add_ps(acc, _mm512_castps512_ps256(e));
    return _mm256_add_ps(acc, upper_floats(e));
}
// see scalar.hpp: sixteen lanes, one 512-bit multiply-add a step where acc8's fold took an
// extract and two dependent 256-bit ones.
using acc_free = vf;
QFORGE_P acc_free acc_free_zero() noexcept { return _mm512_setzero_ps(); }
QFORGE_P acc_free acc_add_square(acc_free acc, vf e) noexcept { return _mm512_fmadd_ps(e, e, acc); }
QFORGE_P vf vmul_exact_sub(vf a, vf b, vf c) noexcept { return _mm512_fmsub_ps(a, b, c); }  // see scalar.hpp
QFORGE_P void acc_store(float* out, acc8 acc) noexcept { _mm256_storeu_ps(out, acc); }
// acc_sum4: four accumulators' sums in k_sum8's order ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)):
// hadd pairs neighbours within each 128-bit half, twice, and the halves add last.
QFORGE_P void acc_sum4(acc8 a, acc8 b, acc8 c, acc8 d, float* out) noexcept {
    const __m256 q = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)));
}
QFORGE_P __m256 add_halves(vf v) noexcept { return _mm256_add_ps(_mm512_castps512_ps256(v), upper_floats(v)); }
// acc_free_sum4: each sum's halves added, then acc_sum4's tree.
QFORGE_P void acc_free_sum4(acc_free a, acc_free b, acc_free c, acc_free d, float* out) noexcept {
    acc_sum4(add_halves(a), add_halves(b), add_halves(c), add_halves(d), out);
}

// vround_scale: see scalar.hpp (F16 through the hardware conversion, BF16 by integer RNE).
QFORGE_P vf vround_scale(vf x, bool bf16, std::uint16_t* bits) noexcept {
    __m256i h;
    if (bf16) {
        const __m512i u = _mm512_castps_si512(x);
        const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
        const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
        h = _mm512_cvtepi32_epi16(r);
        h = _mm256_max_epu16(h, _mm256_set1_epi16(0x0080));
    } else {
        h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        h = _mm256_max_epu16(h, _mm256_set1_epi16(0x0001));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bits), h);
    if (bf16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    return _mm512_cvtph_ps(h);
}

// SNR partial sums in double, lane j = partial j (see quant/snr.hpp): a step adds its four
// quarters in order, which is the scalar order. The terms are made eight at a time in 512-bit
// doubles (the same products: each is one IEEE operation either way) and only the adds go by
// quarters: the quarter-wise conversions, subtractions and products took a third more
// operations on the two ports that 512-bit code leaves to vectors.
using x86_snr::snr_acc;  // the shared double partial sums: simd/arch/detail/x86_snr.hpp
using x86_snr::snr_load;
using x86_snr::snr_store;
QFORGE_P __m512d dmul8(__m512d a, __m512d b) noexcept {
    __m512d r = _mm512_mul_pd(a, b);
    __asm__("" : "+v"(r));  // never fused into a later add (see simd/no_contract.hpp)
    return r;
}
QFORGE_P __m256d upper_half(__m512d v) noexcept { return _mm512_extractf64x4_pd(v, 1); }
// Eight floats' terms (w^2, (w - dq)^2) into the partials in order: four, then four.
[[gnu::always_inline]] QFORGE_P snr_acc snr_add8(snr_acc a, __m256 w, __m256 dq) noexcept {
    const __m512d x = _mm512_cvtps_pd(w), e = _mm512_sub_pd(x, _mm512_cvtps_pd(dq));
    const __m512d xx = dmul8(x, x), ee = dmul8(e, e);
    a.sig = _mm256_add_pd(_mm256_add_pd(a.sig, _mm512_castpd512_pd256(xx)), upper_half(xx));
    a.err = _mm256_add_pd(_mm256_add_pd(a.err, _mm512_castpd512_pd256(ee)), upper_half(ee));
    return a;
}
[[gnu::always_inline]] QFORGE_P snr_acc snr_add(snr_acc a, vf w, vf dq) noexcept {
    a = snr_add8(a, _mm512_castps512_ps256(w), _mm512_castps512_ps256(dq));
    return snr_add8(a, upper_floats(w), upper_floats(dq));
}

// ---- shared integer primitives ----
// AVX-512 reuses AVX2's (a subset of its target, so they inline into AVX-512 kernels).
using avx2_isa::transpose4x4_u32;
using avx2_isa::vi128;
using avx2_isa::prefetch_read;
// ---- end shared integer primitives ----

// ---- pack kernels (simd/kernels/pack_kernels.ipp): integer primitives ----
// The packers are bound by memory and shuffles at 256 bits: AVX-512 runs AVX2's primitives.
using avx2_isa::pk_and;
using avx2_isa::pk_join_nibbles16;
using avx2_isa::pk_load16;
using avx2_isa::pk_load32;
using avx2_isa::pk_low_blocks;
using avx2_isa::pk_high_blocks;
using avx2_isa::pk_or;
using avx2_isa::pk_or_reduce;
using avx2_isa::pk_packus16;
using avx2_isa::pk_shift16;
using avx2_isa::pk_shl16;
using avx2_isa::pk_splat8;
using avx2_isa::pk_splat8x32;
using avx2_isa::pk_store16;
using avx2_isa::pk_store32;
using avx2_isa::pk_u8x32;
using avx2_isa::pk_zip16_hi;
using avx2_isa::pk_zip16_lo;
using avx2_isa::pk_zip32_hi;
using avx2_isa::pk_zip32_lo;
using avx2_isa::pk_zip8_hi;
using avx2_isa::pk_zip8_lo;
// ---- end pack kernels primitives ----

#undef QFORGE_P

// ---- gguf_kernels primitives (simd/kernels/gguf_kernels.ipp; see scalar.hpp) --------------
#define QFORGE_GG QFORGE_TARGET_AVX512 inline
using gg_mask = __mmask16;
QFORGE_GG gg_mask gg_lt(vf a, vf b) noexcept { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
QFORGE_GG gg_mask gg_gt(vf a, vf b) noexcept { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
QFORGE_GG gg_mask gg_eq(vf a, vf b) noexcept { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
QFORGE_GG gg_mask gg_ne(vf a, vf b) noexcept { return _mm512_cmp_ps_mask(a, b, _CMP_NEQ_UQ); }
QFORGE_GG gg_mask gg_and(gg_mask a, gg_mask b) noexcept { return static_cast<gg_mask>(a & b); }
QFORGE_GG gg_mask gg_or(gg_mask a, gg_mask b) noexcept { return static_cast<gg_mask>(a | b); }
QFORGE_GG bool gg_any(gg_mask a) noexcept { return a != 0; }
QFORGE_GG int gg_first(gg_mask a) noexcept { return a == 0 ? -1 : __builtin_ctz(static_cast<unsigned>(a)); }
QFORGE_GG vf gg_blend(gg_mask m, vf t, vf f) noexcept { return _mm512_mask_blend_ps(m, f, t); }
QFORGE_GG vf gg_sqrt(vf a) noexcept { return _mm512_sqrt_ps(a); }
QFORGE_GG vf gg_trunc(vf a) noexcept { return _mm512_roundscale_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC); }
// An 8x8 block is two 256-bit halves wide at most: the AVX2 shuffles are the right width.
QFORGE_GG void gg_transpose8(const float* src, std::size_t src_stride, float* dst, std::size_t dst_stride) noexcept {
    avx2_isa::gg_transpose8(src, src_stride, dst, dst_stride);
}
QFORGE_GG std::uint16_t gg_fp16(float f) noexcept { return avx2_isa::gg_fp16(f); }
// Eight reductions: each vector's 256-bit halves first, then the AVX2 reductions of all eight
// at once; the result in both halves. The order differs from vhmin's, which changes no min or
// max but a zero's sign (or a NaN's pick).
template <bool Max>
QFORGE_GG vf gg_reduce_each(const vf* v) noexcept {
    __m256 half[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j)
        half[j] = avx2_isa::gg_min_or_max<Max>(_mm512_castps512_ps256(v[j]), upper_floats(v[j]));
    const __m256d r = _mm256_castps_pd(avx2_isa::gg_reduce_each<Max>(half));
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castpd256_pd512(r), r, 1));
}
QFORGE_GG vf gg_hmin_each(const vf* v) noexcept { return gg_reduce_each<false>(v); }
QFORGE_GG vf gg_hmax_each(const vf* v) noexcept { return gg_reduce_each<true>(v); }
QFORGE_GG void gg_fp16_pairs(vf a, vf b, std::uint16_t* out) noexcept {
    avx2_isa::gg_fp16_pairs(_mm512_castps512_ps256(a), _mm512_castps512_ps256(b), out);
    avx2_isa::gg_fp16_pairs(upper_floats(a), upper_floats(b), out + 16);
}
QFORGE_GG void gg_store_i8(std::uint8_t* out, vf q) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q)));
}
using x86_block_bits::gg_store_nibbles32;  // the shared definition: simd/arch/detail/x86_block_bits.hpp
// see scalar.hpp: a block is two vectors here, codes j and j + 16 in the same lane, so the
// nibbles are one shift and one or before the narrowing store (no bytes in between).
QFORGE_GG void gg_store_code_nibbles(std::byte* qs, const vf* c) noexcept {
    const __m512i lo = _mm512_cvttps_epi32(c[0]), hi = _mm512_cvttps_epi32(c[1]);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtepi32_epi8(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4))));
}
// The same for codes 0..31, bit 4 read by a test mask per vector: through bytes, the two 16-byte
// code stores and their reloads made Q5_0 slower here than on AVX2 (256 x 11008 rows, Intel
// Xeon, alternated medians of 7: 3.80 -> 4.53 G weights/s, AVX2 4.55).
QFORGE_GG void gg_store_code_fields5(std::byte* qh, std::byte* qs, const vf* c) noexcept {
    const __m512i top = _mm512_set1_epi32(31), fifth = _mm512_set1_epi32(16);  // 32 is stored as 31 (scalar.hpp)
    const __m512i lo = _mm512_min_epi32(_mm512_cvttps_epi32(c[0]), top);
    const __m512i hi = _mm512_min_epi32(_mm512_cvttps_epi32(c[1]), top);
    const std::uint32_t bits = static_cast<std::uint32_t>(_mm512_test_epi32_mask(lo, fifth)) |
                               static_cast<std::uint32_t>(_mm512_test_epi32_mask(hi, fifth)) << 16;
    std::memcpy(qh, &bits, 4);
    // the narrowing store keeps each lane's low byte, so hi's bit 4, shifted to bit 8, drops out
    const __m512i nibbles = _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi32(0x0F)), _mm512_slli_epi32(hi, 4));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm512_cvtepi32_epi8(nibbles));
}
QFORGE_GG void gg_store_i8x4(std::uint8_t* out, vf a, vf b, vf c, vf d) noexcept {
    gg_store_i8(out, a);
    gg_store_i8(out + 16, b);
    gg_store_i8(out + 32, c);
    gg_store_i8(out + 48, d);
}
// ---- end of gguf_kernels primitives ---------------------------------------------------------
#undef QFORGE_GG
// ---- shared integer primitives ----
// The AVX2 ones (simd/arch/avx2.hpp), which inline here (their target is a subset of this one).
using ::qforge::simd::detail::avx2_isa::u32x4;
using ::qforge::simd::detail::avx2_isa::u32x4_load;
using ::qforge::simd::detail::avx2_isa::u32x4_store;
// ---- end of shared integer primitives ----

// ---- transpose_kernels primitives (simd/kernels/transpose_kernels.ipp) ----
// The AVX2 ones, so that the family's text compiles here; its table is the AVX2 instance's
// (see the end of transpose_kernels.ipp).
using ::qforge::simd::detail::avx2_isa::tp_load8;
using ::qforge::simd::detail::avx2_isa::tp_stream8;
using ::qforge::simd::detail::avx2_isa::tp_stream_fence;
using ::qforge::simd::detail::avx2_isa::tp_transpose8x8;
using ::qforge::simd::detail::avx2_isa::tp_transpose8x8_load;
using ::qforge::simd::detail::avx2_isa::tp_transpose8x8_u16;
using ::qforge::simd::detail::avx2_isa::tp_u32x8;
// ---- end of transpose_kernels primitives ----

// ---- minifloat_kernels primitives (simd/kernels/minifloat_kernels.ipp; scalar.hpp defines them) ----
QFORGE_TARGET_AVX512 inline vf mf_gt01(vf a, vf t) noexcept {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, t, _CMP_GT_OQ), _mm512_set1_ps(1.0f));
}
QFORGE_TARGET_AVX512 inline vf mf_ge01(vf a, vf t) noexcept {
    return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, t, _CMP_GE_OQ), _mm512_set1_ps(1.0f));
}
QFORGE_TARGET_AVX512 inline vf mf_sign_as(vf x, vf v) noexcept {
    return _mm512_maskz_mov_ps(_mm512_cmplt_epi32_mask(_mm512_castps_si512(x), _mm512_setzero_si512()), v);
}
QFORGE_TARGET_AVX512 inline vf mf_exponent(vf a) noexcept {
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_srli_epi32(_mm512_castps_si512(a), 23), _mm512_set1_epi32(127)));
}
QFORGE_TARGET_AVX512 inline vf mf_pow2(vf e) noexcept {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(e), _mm512_set1_epi32(127)), 23));
}
// 32 codes: each u64 pair c0 | c1 << 32 folded to c0 | c1 << 4 in its low byte, which vpmovqb keeps.
QFORGE_TARGET_AVX512 inline void mf_store_nibbles(std::uint8_t* out, vf lo, vf hi) noexcept {
    const __m512i a = _mm512_cvtps_epi32(lo), b = _mm512_cvtps_epi32(hi);
    const __m128i pa = _mm512_cvtepi64_epi8(_mm512_or_si512(a, _mm512_srli_epi64(a, 28)));
    const __m128i pb = _mm512_cvtepi64_epi8(_mm512_or_si512(b, _mm512_srli_epi64(b, 28)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi64(pa, pb));
}
QFORGE_TARGET_AVX512 inline vf mf_round_bf16(vf a) noexcept {
    const __m512i u = _mm512_castps_si512(a);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
    return _mm512_castsi512_ps(_mm512_and_si512(r, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}
QFORGE_TARGET_AVX512 inline __m512i mb_i(vf a) noexcept { return _mm512_castps_si512(a); }
QFORGE_TARGET_AVX512 inline vf mb_f(__m512i a) noexcept { return _mm512_castsi512_ps(a); }
QFORGE_TARGET_AVX512 inline vf mb_set(std::uint32_t bits) noexcept { return mb_f(_mm512_set1_epi32(static_cast<int>(bits))); }
QFORGE_TARGET_AVX512 inline vf mb_and(vf a, vf b) noexcept { return mb_f(_mm512_and_si512(mb_i(a), mb_i(b))); }
QFORGE_TARGET_AVX512 inline vf mb_or(vf a, vf b) noexcept { return mb_f(_mm512_or_si512(mb_i(a), mb_i(b))); }
QFORGE_TARGET_AVX512 inline vf mb_add(vf a, vf b) noexcept { return mb_f(_mm512_add_epi32(mb_i(a), mb_i(b))); }
QFORGE_TARGET_AVX512 inline vf mb_sub(vf a, vf b) noexcept { return mb_f(_mm512_sub_epi32(mb_i(a), mb_i(b))); }
QFORGE_TARGET_AVX512 inline vf mb_min(vf a, vf b) noexcept { return mb_f(_mm512_min_epu32(mb_i(a), mb_i(b))); }
template <int N>
QFORGE_TARGET_AVX512 inline vf mb_srl(vf a) noexcept {
    return mb_f(_mm512_srli_epi32(mb_i(a), N));
}
QFORGE_TARGET_AVX512 inline void mb_store_bytes(std::uint8_t* out, vf a) noexcept {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm512_cvtepi32_epi8(mb_i(a)));
}
// ---- end of minifloat_kernels primitives ----

// ---- gguf_kernels Q3_K primitives (simd/kernels/gguf_kernels.ipp; see scalar.hpp) ----
QFORGE_TARGET_AVX512 inline vf g3_nearest_int(vf a) noexcept {
    const __m512i bits = _mm512_castps_si512(_mm512_add_ps(a, _mm512_set1_ps(12582912.f)));
    const __m512i i = _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x007FFFFF)), _mm512_set1_epi32(0x00400000));
    return _mm512_cvtepi32_ps(i);
}
// ---- end of gguf_kernels Q3_K primitives ----

/// The kernel tables of this ISA: each family's .ipp, compiled here by
/// simd/detail/instantiate.ipp, specializes this for its table.
template <class Table>
const Table& family_table() noexcept;

}  // namespace qforge::simd::detail::avx512_isa

namespace qforge::simd {
template <>
struct arch_of<avx512_tag> {
    template <class Table>
    static const Table& table() noexcept {
        return detail::avx512_isa::family_table<Table>();
    }
};
}  // namespace qforge::simd

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // QFORGE_SIMD_X86
