// AVX2 kernels for the GGUF quantizers, byte-identical to the scalar reference (kquants.hpp,
// legacy.hpp) by construction:
// - the searches (make_qkx2_quants for Q4_K/Q5_K, make_qx_quants for Q6_K) put one sub-block
//   per lane: 16 lanes = the 8 sub-blocks of two Q4_K/Q5_K super-blocks, or the 16 sub-blocks
//   of one Q6_K super-block. Each lane runs the reference's scalar sequence (same operations,
//   same order of every sum), so the result per lane is the scalar result. Two 8-lane halves
//   are interleaved to hide the latency of the sequential sums.
// - elementwise steps (requantization, Q8_0/Q4_0 codes) are exact in any lane order.
// - the functions are compiled for "avx2,f16c" WITHOUT "fma": the compiler has no fused
//   multiply-add to contract `a*b + c` into, whatever -ffp-contract says.
#pragma once

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define QFORGE_GGUF_HAVE_AVX2 1

#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "qforge/core/half.hpp"
#include "qforge/layout/gguf/blocks.hpp"
#include "qforge/layout/gguf/detail/fp.hpp"
#include "qforge/layout/gguf/detail/search.hpp"
#include "qforge/layout/gguf/kquants.hpp"
#include "qforge/layout/gguf/legacy.hpp"

#define QFORGE_GGUF_AVX2 __attribute__((target("avx2,f16c")))

namespace qforge::gguf::detail::avx2 {

// ---- 16-lane float / int32 vectors as two __m256 halves --------------------------------------
struct vf {
    __m256 a, b;
};
struct vi {
    __m256i a, b;
};

QFORGE_GGUF_AVX2 inline vf load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
QFORGE_GGUF_AVX2 inline void store(float* p, vf v) {
    _mm256_storeu_ps(p, v.a);
    _mm256_storeu_ps(p + 8, v.b);
}
QFORGE_GGUF_AVX2 inline void store(std::int32_t* p, vi v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v.a);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 8), v.b);
}
QFORGE_GGUF_AVX2 inline vi loadi(const std::int32_t* p) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 8))};
}
QFORGE_GGUF_AVX2 inline vf set1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
QFORGE_GGUF_AVX2 inline vf operator+(vf x, vf y) { return {_mm256_add_ps(x.a, y.a), _mm256_add_ps(x.b, y.b)}; }
QFORGE_GGUF_AVX2 inline vf operator-(vf x, vf y) { return {_mm256_sub_ps(x.a, y.a), _mm256_sub_ps(x.b, y.b)}; }
QFORGE_GGUF_AVX2 inline vf operator*(vf x, vf y) { return {_mm256_mul_ps(x.a, y.a), _mm256_mul_ps(x.b, y.b)}; }
QFORGE_GGUF_AVX2 inline vf operator/(vf x, vf y) { return {_mm256_div_ps(x.a, y.a), _mm256_div_ps(x.b, y.b)}; }
/// x < y ? x : y (and x > y ? x : y): the scalar `if (x < m) m = x` exactly, NaN included.
QFORGE_GGUF_AVX2 inline vf vmin(vf x, vf y) { return {_mm256_min_ps(x.a, y.a), _mm256_min_ps(x.b, y.b)}; }
QFORGE_GGUF_AVX2 inline vf vmax(vf x, vf y) { return {_mm256_max_ps(x.a, y.a), _mm256_max_ps(x.b, y.b)}; }
QFORGE_GGUF_AVX2 inline vf vabs(vf x) {
    const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    return {_mm256_and_ps(x.a, m), _mm256_and_ps(x.b, m)};
}
QFORGE_GGUF_AVX2 inline vf vsqrt(vf x) { return {_mm256_sqrt_ps(x.a), _mm256_sqrt_ps(x.b)}; }
template <int Cmp>
QFORGE_GGUF_AVX2 inline vf cmp(vf x, vf y) { return {_mm256_cmp_ps(x.a, y.a, Cmp), _mm256_cmp_ps(x.b, y.b, Cmp)}; }
QFORGE_GGUF_AVX2 inline vf mask_and(vf x, vf y) { return {_mm256_and_ps(x.a, y.a), _mm256_and_ps(x.b, y.b)}; }
/// mask ? t : f
QFORGE_GGUF_AVX2 inline vf blend(vf mask, vf t, vf f) { return {_mm256_blendv_ps(f.a, t.a, mask.a), _mm256_blendv_ps(f.b, t.b, mask.b)}; }
QFORGE_GGUF_AVX2 inline vi blend(vf mask, vi t, vi f) {
    return {_mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(f.a), _mm256_castsi256_ps(t.a), mask.a)),
            _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(f.b), _mm256_castsi256_ps(t.b), mask.b))};
}
QFORGE_GGUF_AVX2 inline bool any(vf mask) { return (_mm256_movemask_ps(mask.a) | _mm256_movemask_ps(mask.b)) != 0; }
QFORGE_GGUF_AVX2 inline vf to_float(vi x) { return {_mm256_cvtepi32_ps(x.a), _mm256_cvtepi32_ps(x.b)}; }

/// nearest_int of every lane (the same magic-number add as the scalar one).
QFORGE_GGUF_AVX2 inline __m256i nearest8(__m256 f) {
    const __m256i i = _mm256_castps_si256(_mm256_add_ps(f, _mm256_set1_ps(12582912.f)));
    return _mm256_sub_epi32(_mm256_and_si256(i, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
}
QFORGE_GGUF_AVX2 inline __m256i clamp8(__m256i v, int lo, int hi) {
    return _mm256_max_epi32(_mm256_set1_epi32(lo), _mm256_min_epi32(_mm256_set1_epi32(hi), v));
}
QFORGE_GGUF_AVX2 inline vi nearest_clamp(vf f, int lo, int hi) {
    return {clamp8(nearest8(f.a), lo, hi), clamp8(nearest8(f.b), lo, hi)};
}

// ---- make_qkx2_quants, one 32-element sub-block per lane ------------------------------------
// xt[i][lane] is element i of the lane's sub-block. On return: scale[lane], the_min[lane] and
// Lt[i][lane] as the scalar make_qkx_quants<false> with av_x + |x| weights would produce.
template <int Nmax>
QFORGE_GGUF_AVX2 inline void qkx2_lanes(const float (*xt)[16], float rmin, float rdelta, int nstep, float* scale_out,
                                         float* the_min_out, std::int32_t (*Lt)[16]) {
    alignas(32) float wt[32][16];
    alignas(32) std::int32_t Laux[32][16];
    // weights: av_x + |x|, av_x = sqrt(sum x^2 / 32) summed in element order
    vf sum_x2 = load(xt[0]) * load(xt[0]);
    for (int i = 1; i < 32; ++i) sum_x2 = sum_x2 + load(xt[i]) * load(xt[i]);
    const vf av_x = vsqrt(sum_x2 / set1(32.f));
    for (int i = 0; i < 32; ++i) store(wt[i], av_x + vabs(load(xt[i])));

    vf min = load(xt[0]), max = min;
    vf sum_w = load(wt[0]);
    vf sum_x = sum_w * load(xt[0]);
    for (int i = 1; i < 32; ++i) {
        const vf x = load(xt[i]), w = load(wt[i]);
        min = vmin(x, min);
        max = vmax(x, max);
        sum_w = sum_w + w;
        sum_x = sum_x + w * x;
    }
    min = vmin(set1(0.f), min);
    const vf min0 = min;
    const vf degenerate = cmp<_CMP_EQ_OQ>(max, min);
    vf iscale = set1(static_cast<float>(Nmax)) / (max - min);
    vf scale = set1(1.f) / iscale;
    vf best_error = set1(0.f);
    for (int i = 0; i < 32; ++i) {
        const vf x = load(xt[i]);
        const vi l = nearest_clamp(iscale * (x - min), 0, Nmax);
        store(Lt[i], l);
        const vf diff = scale * to_float(l) + min - x;
        best_error = best_error + load(wt[i]) * (diff * diff);
    }
    for (int is = 0; is <= nstep; ++is) {
        const float c = rmin + detail::mul(rdelta, static_cast<float>(is)) + static_cast<float>(Nmax);
        iscale = set1(c) / (max - min);  // min moves when a step is accepted, as in ggml
        vf sum_l = set1(0.f), sum_l2 = set1(0.f), sum_xl = set1(0.f);
        for (int i = 0; i < 32; ++i) {
            const vf x = load(xt[i]), w = load(wt[i]);
            const vi l = nearest_clamp(iscale * (x - min), 0, Nmax);
            store(Laux[i], l);
            const vf lf = to_float(l);
            const vf wl = w * lf;
            sum_l = sum_l + wl;
            sum_l2 = sum_l2 + wl * lf;
            sum_xl = sum_xl + wl * x;
        }
        const vf D = sum_w * sum_l2 - sum_l * sum_l;
        const vf d_pos = cmp<_CMP_GT_OQ>(D, set1(0.f));
        if (!any(d_pos)) continue;
        vf this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        vf this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        const vf min_pos = cmp<_CMP_GT_OQ>(this_min, set1(0.f));
        this_min = blend(min_pos, set1(0.f), this_min);
        this_scale = blend(min_pos, sum_xl / sum_l2, this_scale);
        vf cur_error = set1(0.f);
        for (int i = 0; i < 32; ++i) {
            const vf diff = this_scale * to_float(loadi(Laux[i])) + this_min - load(xt[i]);
            cur_error = cur_error + load(wt[i]) * (diff * diff);
        }
        const vf accept = mask_and(d_pos, cmp<_CMP_LT_OQ>(cur_error, best_error));
        if (!any(accept)) continue;
        for (int i = 0; i < 32; ++i) store(Lt[i], blend(accept, loadi(Laux[i]), loadi(Lt[i])));
        best_error = blend(accept, cur_error, best_error);
        scale = blend(accept, this_scale, scale);
        min = blend(accept, this_min, min);
    }
    if (any(degenerate)) {
        const vi zero{_mm256_setzero_si256(), _mm256_setzero_si256()};
        for (int i = 0; i < 32; ++i) store(Lt[i], blend(degenerate, zero, loadi(Lt[i])));
        scale = blend(degenerate, set1(0.f), scale);
        min = blend(degenerate, min0, min);
    }
    store(scale_out, scale);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    store(the_min_out, vf{_mm256_xor_ps(min.a, sign), _mm256_xor_ps(min.b, sign)});  // -min, exactly
}

/// Requantize one super-block of Q4_K/Q5_K against its stored scales (qk45_requantize).
template <int Nmax>
QFORGE_GGUF_AVX2 inline void qk45_requantize(const float* x, const std::uint8_t* scales, std::uint16_t d16,
                                              std::uint16_t dmin16, std::uint8_t* L) {
    const float dd = fp16_to_float(d16), dmin = fp16_to_float(dmin16);
    for (int j = 0; j < 8; ++j) {
        std::uint8_t sc, m;
        get_scale_min_k4(j, scales, sc, m);
        const float d = dd * static_cast<float>(sc);
        if (d == 0) continue;
        const float dm = dmin * static_cast<float>(m);
        const vf vd = set1(d), vdm = set1(dm);
        for (int i = 0; i < 32; i += 16) {
            const vi l = nearest_clamp((load(x + 32 * j + i) + vdm) / vd, 0, Nmax);
            alignas(32) std::int32_t tmp[16];
            store(tmp, l);
            for (int k = 0; k < 16; ++k) L[32 * j + i + k] = static_cast<std::uint8_t>(tmp[k]);
        }
    }
}

/// Q4_K (Nmax 15) / Q5_K (Nmax 31) reference quantization of nb super-blocks.
template <int Nmax, class Block>
QFORGE_GGUF_AVX2 inline void quantize_qk45_ref(const float* x, Block* y, std::int64_t nb) {
    constexpr float rmin = Nmax == 15 ? -1.f : -0.5f;
    constexpr int nstep = Nmax == 15 ? 20 : 15;
    alignas(32) float xt[32][16];
    alignas(32) std::int32_t Lt[32][16];
    alignas(32) float scales[16], mins[16];
    std::uint8_t L[256];
    for (std::int64_t i = 0; i < nb; i += 2) {
        const float* x0 = x + 256 * i;
        const float* x1 = i + 1 < nb ? x0 + 256 : x0;  // odd count: the second half repeats the first
        for (int lane = 0; lane < 16; ++lane) {
            const float* src = (lane < 8 ? x0 : x1) + 32 * (lane % 8);
            for (int e = 0; e < 32; ++e) xt[e][lane] = src[e];
        }
        qkx2_lanes<Nmax>(xt, rmin, 0.1f, nstep, scales, mins, Lt);
        for (int h = 0; h < 2 && i + h < nb; ++h) {
            Block& b = y[i + h];
            const float* xb = x0 + 256 * h;
            for (int j = 0; j < 8; ++j)
                for (int e = 0; e < 32; ++e) L[32 * j + e] = static_cast<std::uint8_t>(Lt[e][8 * h + j]);
            qk45_ref_scales(scales + 8 * h, mins + 8 * h, b.scales, b.d, b.dmin);
            qk45_requantize<Nmax>(xb, b.scales, b.d, b.dmin, L);
            if constexpr (Nmax == 15) q4k_pack(L, b.qs);
            else q5k_pack(L, b.qh, b.qs);
        }
    }
}

// ---- make_qx_quants(16, 32, x, L, 1, NULL), one 16-element sub-block per lane (Q6_K) --------
QFORGE_GGUF_AVX2 inline void qx32_lanes(const float (*xt)[16], float* scale_out, std::int32_t (*Lt)[16]) {
    constexpr int nmax = 32;
    alignas(32) std::int32_t Laux[16][16];
    vf amax = set1(0.f), max = set1(0.f);
    for (int i = 0; i < 16; ++i) {
        const vf x = load(xt[i]);
        const vf ax = vabs(x);
        const vf gt = cmp<_CMP_GT_OQ>(ax, amax);
        amax = blend(gt, ax, amax);
        max = blend(gt, x, max);
    }
    const vf zero_lane = cmp<_CMP_LT_OQ>(amax, set1(group_max_eps));
    vf iscale = set1(static_cast<float>(-nmax)) / max;
    vf sumlx = set1(0.f), suml2 = set1(0.f);
    for (int i = 0; i < 16; ++i) {
        const vf x = load(xt[i]);
        const vi l = nearest_clamp(iscale * x, -nmax, nmax - 1);
        store(Lt[i], l);
        const vf w = x * x, lf = to_float(l);
        sumlx = sumlx + (w * x) * lf;
        suml2 = suml2 + (w * lf) * lf;
    }
    const vf suml2_nz = cmp<_CMP_NEQ_UQ>(suml2, set1(0.f));
    vf scale = blend(suml2_nz, sumlx / suml2, set1(0.f));
    vf best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        const float c = -(static_cast<float>(nmax) + detail::mul(0.1f, static_cast<float>(is)));
        iscale = set1(c) / max;
        sumlx = suml2 = set1(0.f);
        for (int i = 0; i < 16; ++i) {
            const vf x = load(xt[i]);
            const vi l = nearest_clamp(iscale * x, -nmax, nmax - 1);
            store(Laux[i], l);
            const vf w = x * x, lf = to_float(l);
            sumlx = sumlx + (w * x) * lf;
            suml2 = suml2 + (w * lf) * lf;
        }
        const vf accept = mask_and(cmp<_CMP_GT_OQ>(suml2, set1(0.f)), cmp<_CMP_GT_OQ>(sumlx * sumlx, best * suml2));
        if (!any(accept)) continue;
        for (int i = 0; i < 16; ++i) store(Lt[i], blend(accept, loadi(Laux[i]), loadi(Lt[i])));
        scale = blend(accept, sumlx / suml2, scale);
        best = blend(accept, scale * sumlx, best);
    }
    const vi zero{_mm256_setzero_si256(), _mm256_setzero_si256()};
    const vi offset{_mm256_set1_epi32(nmax), _mm256_set1_epi32(nmax)};
    for (int i = 0; i < 16; ++i) {
        vi l = loadi(Lt[i]);
        l = {_mm256_add_epi32(l.a, offset.a), _mm256_add_epi32(l.b, offset.b)};
        store(Lt[i], blend(zero_lane, zero, l));
    }
    store(scale_out, blend(zero_lane, set1(0.f), scale));
}

QFORGE_GGUF_AVX2 inline void quantize_q6k_ref(const float* x, block_q6_k* y, std::int64_t nb) {
    alignas(32) float xt[16][16];
    alignas(32) std::int32_t Lt[16][16];
    alignas(32) float scales[16];
    std::int8_t L[256];
    for (std::int64_t i = 0; i < nb; ++i, x += 256) {
        for (int lane = 0; lane < 16; ++lane)
            for (int e = 0; e < 16; ++e) xt[e][lane] = x[16 * lane + e];
        qx32_lanes(xt, scales, Lt);
        for (int lane = 0; lane < 16; ++lane)
            for (int e = 0; e < 16; ++e) L[16 * lane + e] = static_cast<std::int8_t>(Lt[e][lane]);
        // q6k_finish with the requantization vectorised
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ++ib) {
            const float a = std::fabs(scales[ib]);
            if (a > max_abs_scale) {
                max_abs_scale = a;
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < group_max_eps) {
            std::memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = float_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ++ib) {
            const int v = nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = static_cast<std::int8_t>(v < 127 ? v : 127);
        }
        const float dd = fp16_to_float(y[i].d);
        for (int j = 0; j < 16; ++j) {
            const float d = dd * static_cast<float>(y[i].scales[j]);
            if (d == 0) continue;
            const vi l = nearest_clamp(load(x + 16 * j) / set1(d), -32, 31);
            alignas(32) std::int32_t tmp[16];
            store(tmp, l);
            for (int k = 0; k < 16; ++k) L[16 * j + k] = static_cast<std::int8_t>(tmp[k] + 32);
        }
        q6k_pack(L, y[i]);
    }
}

// ---- Q8_0 / Q4_0: elementwise within a block ----------------------------------------------
QFORGE_GGUF_AVX2 inline void quantize_q8_0_ref(const float* x, block_q8_0* y, std::int64_t nb) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (std::int64_t i = 0; i < nb; ++i, x += 32) {
        __m256 v[4], amax = _mm256_setzero_ps();
        for (int k = 0; k < 4; ++k) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
        }
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
        const float a = _mm_cvtss_f32(m);
        const float d = a / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = float_to_fp16(d);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i q[4];
        for (int k = 0; k < 4; ++k) {
            // roundf: truncate, then step away from zero when the dropped part is >= 0.5 (exact)
            const __m256 p = _mm256_mul_ps(v[k], vid);
            const __m256 t = _mm256_round_ps(p, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(p, t));
            const __m256 step = _mm256_and_ps(_mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                                              _mm256_or_ps(_mm256_and_ps(p, sign), _mm256_set1_ps(1.0f)));
            q[k] = _mm256_cvttps_epi32(_mm256_add_ps(t, step));
        }
        const __m256i s01 = _mm256_packs_epi32(q[0], q[1]), s23 = _mm256_packs_epi32(q[2], q[3]);
        __m256i b = _mm256_packs_epi16(s01, s23);
        b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), b);
    }
}

QFORGE_GGUF_AVX2 inline void quantize_q4_0_ref(const float* x, block_q4_0* y, std::int64_t nb) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (std::int64_t i = 0; i < nb; ++i, x += 32) {
        __m256 v[4], amax = _mm256_setzero_ps();
        for (int k = 0; k < 4; ++k) {
            v[k] = _mm256_loadu_ps(x + 8 * k);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[k]));
        }
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
        const float a = _mm_cvtss_f32(m);
        // the first element whose |x| is the maximum gives the signed max (ties: first wins)
        float max = 0.0f;
        if (a > 0) {
            const __m256 va = _mm256_set1_ps(a);
            for (int k = 0; k < 4; ++k) {
                const int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, v[k]), va, _CMP_EQ_OQ));
                if (bits) {
                    max = x[8 * k + __builtin_ctz(static_cast<unsigned>(bits))];
                    break;
                }
            }
        }
        const float d = max / -8;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = float_to_fp16(d);
        const __m256 vid = _mm256_set1_ps(id), half = _mm256_set1_ps(8.5f);
        __m256i q[4];
        for (int k = 0; k < 4; ++k)
            q[k] = _mm256_min_epi32(_mm256_cvttps_epi32(_mm256_add_ps(_mm256_mul_ps(v[k], vid), half)), _mm256_set1_epi32(15));
        // qs[j] = q[j] | q[j+16] << 4
        const __m256i lo = _mm256_packs_epi32(q[0], q[1]);  // elements 0..15 (lane-interleaved)
        const __m256i hi = _mm256_packs_epi32(q[2], q[3]);  // elements 16..31
        const __m256i both = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
        __m128i packed = _mm_packus_epi16(_mm256_castsi256_si128(both), _mm256_extracti128_si256(both, 1));
        // undo the 128-bit-lane interleave of packs_epi32: order is 0-3,8-11,4-7,12-15
        packed = _mm_shuffle_epi32(packed, _MM_SHUFFLE(3, 1, 2, 0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs), packed);
    }
}

}  // namespace qforge::gguf::detail::avx2

#else
#define QFORGE_GGUF_HAVE_AVX2 0
#endif
