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

#include <algorithm>
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
#define QFORGE_GGUF_AVX2_OP __attribute__((target("avx2,f16c"), always_inline))

namespace qforge::gguf::detail::avx2 {

// ---- W-lane float / int32 vectors as W/8 __m256 parts ----------------------------------------
// Several independent parts per operation hide the latency of the sequential sums.
template <int W>
struct vfw {
    __m256 r[W / 8];
};
template <int W>
struct viw {
    __m256i r[W / 8];
};
#define QFORGE_GGUF_EACH(expr)                                   \
    for (int k_ = 0; k_ < W / 8; ++k_) { expr; }

template <int W>
QFORGE_GGUF_AVX2_OP inline vfw<W> loadw(const float* p) { vfw<W> v; QFORGE_GGUF_EACH(v.r[k_] = _mm256_loadu_ps(p + 8 * k_)) return v; }
template <int W>
QFORGE_GGUF_AVX2_OP inline void store(float* p, vfw<W> v) { QFORGE_GGUF_EACH(_mm256_storeu_ps(p + 8 * k_, v.r[k_])) }
template <int W>
QFORGE_GGUF_AVX2_OP inline void store(std::int32_t* p, viw<W> v) {
    QFORGE_GGUF_EACH(_mm256_storeu_si256(reinterpret_cast<__m256i*>(p + 8 * k_), v.r[k_]))
}
template <int W>
QFORGE_GGUF_AVX2_OP inline vfw<W> set1w(float x) { vfw<W> v; QFORGE_GGUF_EACH(v.r[k_] = _mm256_set1_ps(x)) return v; }
#define QFORGE_GGUF_BINOP(name, intrin)                                                    \
    template <int W>                                                                       \
    QFORGE_GGUF_AVX2_OP inline vfw<W> name(vfw<W> x, vfw<W> y) {                              \
        vfw<W> v;                                                                          \
        QFORGE_GGUF_EACH(v.r[k_] = intrin(x.r[k_], y.r[k_]))                               \
        return v;                                                                          \
    }
QFORGE_GGUF_BINOP(operator+, _mm256_add_ps)
QFORGE_GGUF_BINOP(operator-, _mm256_sub_ps)
QFORGE_GGUF_BINOP(operator*, _mm256_mul_ps)
QFORGE_GGUF_BINOP(operator/, _mm256_div_ps)
/// x < y ? x : y (and x > y ? x : y): the scalar `if (x < m) m = x` exactly, NaN included.
QFORGE_GGUF_BINOP(vmin, _mm256_min_ps)
QFORGE_GGUF_BINOP(vmax, _mm256_max_ps)
QFORGE_GGUF_BINOP(mask_and, _mm256_and_ps)
#undef QFORGE_GGUF_BINOP
template <int W>
QFORGE_GGUF_AVX2_OP inline vfw<W> vabs(vfw<W> x) {
    const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    QFORGE_GGUF_EACH(x.r[k_] = _mm256_and_ps(x.r[k_], m))
    return x;
}
template <int W>
QFORGE_GGUF_AVX2_OP inline vfw<W> vneg(vfw<W> x) {
    QFORGE_GGUF_EACH(x.r[k_] = _mm256_xor_ps(x.r[k_], _mm256_set1_ps(-0.0f)))
    return x;
}
template <int W>
QFORGE_GGUF_AVX2_OP inline vfw<W> vsqrt(vfw<W> x) { QFORGE_GGUF_EACH(x.r[k_] = _mm256_sqrt_ps(x.r[k_])) return x; }
template <int Cmp, int W>
QFORGE_GGUF_AVX2_OP inline vfw<W> cmp(vfw<W> x, vfw<W> y) { QFORGE_GGUF_EACH(x.r[k_] = _mm256_cmp_ps(x.r[k_], y.r[k_], Cmp)) return x; }
/// mask ? t : f
template <int W>
QFORGE_GGUF_AVX2_OP inline vfw<W> blend(vfw<W> mask, vfw<W> t, vfw<W> f) {
    QFORGE_GGUF_EACH(f.r[k_] = _mm256_blendv_ps(f.r[k_], t.r[k_], mask.r[k_]))
    return f;
}
template <int W>
QFORGE_GGUF_AVX2_OP inline bool any(vfw<W> mask) {
    int m = 0;
    QFORGE_GGUF_EACH(m |= _mm256_movemask_ps(mask.r[k_]))
    return m != 0;
}
template <int W>
QFORGE_GGUF_AVX2_OP inline viw<W> to_int(vfw<W> x) {
    viw<W> v;
    QFORGE_GGUF_EACH(v.r[k_] = _mm256_cvtps_epi32(x.r[k_]))
    return v;
}
/// nearest_int(f) clamped to [lo, hi], as a float. nearest_int is round-half-even of f for
/// |f| <= 2^22 (which ggml asserts), i.e. vroundps in nearest mode: the codes never leave the
/// float domain, and float max/min clamp like the integer MAX/MIN. Lo/Hi false: the caller knows
/// that bound cannot be crossed.
template <bool Lo = true, bool Hi = true, int W>
QFORGE_GGUF_AVX2_OP inline vfw<W> round_clamp(vfw<W> f, float lo, float hi) {
    const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
    for (int k_ = 0; k_ < W / 8; ++k_) {
        __m256 r = _mm256_round_ps(f.r[k_], _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        if constexpr (Lo) r = _mm256_max_ps(r, vlo);
        if constexpr (Hi) r = _mm256_min_ps(r, vhi);
        f.r[k_] = r;
    }
    return f;
}
#undef QFORGE_GGUF_EACH

using vf = vfw<16>;
QFORGE_GGUF_AVX2_OP inline vf load(const float* p) { return loadw<16>(p); }
QFORGE_GGUF_AVX2_OP inline vf set1(float x) { return set1w<16>(x); }

/// dst[c][r] = src[r][c] for an 8x8 block: src rows are `src + r*src_stride`, dst rows
/// `dst + c*dst_stride` (floats).
QFORGE_GGUF_AVX2_OP inline void transpose8(const float* src, std::size_t src_stride, float* dst, std::size_t dst_stride) {
    __m256 r[8], t[8];
    for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
    for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4) {
        r[i] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], _MM_SHUFFLE(3, 2, 3, 2));
        r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(1, 0, 1, 0));
        r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int i = 0; i < 4; ++i) {
        _mm256_storeu_ps(dst + i * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
        _mm256_storeu_ps(dst + (i + 4) * dst_stride, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
    }
}

/// 16 integral floats (within int8/uint8 range) as 16 bytes, in order.
QFORGE_GGUF_AVX2_OP inline void store_codes16(vfw<16> l, std::uint8_t* out) {
    const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_cvtps_epi32(l.r[0]), _mm256_cvtps_epi32(l.r[1])),
                                               _MM_SHUFFLE(3, 1, 2, 0));
    const __m128i b = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), b);
}

// ---- make_qkx2_quants, one 32-element sub-block per lane ------------------------------------
// xt[i][lane] is element i of the lane's sub-block. On return: scale[lane], the_min[lane] and
// Lt[i][lane] as the scalar make_qkx_quants<false> with av_x + |x| weights would produce.
/// One search step of make_qkx2_quants: the codes for this iscale and their weighted sums.
template <bool Lo, bool Hi, int W>
QFORGE_GGUF_AVX2_OP inline void qkx2_search(const float (*xm)[W], const float (*wt)[W], const float (*xt)[W],
                                             float (*Laux)[W], vfw<W> iscale, float fmax, vfw<W>& sum_l,
                                             vfw<W>& sum_l2, vfw<W>& sum_xl) {
    for (int i = 0; i < 32; ++i) {
        const vfw<W> l = round_clamp<Lo, Hi>(iscale * loadw<W>(xm[i]), 0.f, fmax);
        store(Laux[i], l);
        const vfw<W> wl = loadw<W>(wt[i]) * l;
        sum_l = sum_l + wl;
        sum_l2 = sum_l2 + wl * l;
        sum_xl = sum_xl + wl * loadw<W>(xt[i]);
    }
}

template <int Nmax, int W>
QFORGE_GGUF_AVX2 inline void qkx2_lanes(const float (*xt)[W], float rmin, float rdelta, int nstep, float* scale_out,
                                         float* the_min_out, std::int32_t (*Lt)[W]) {
    using v = vfw<W>;
    alignas(32) float wt[32][W];
    alignas(32) float xm[32][W];    // x - min for the current min
    alignas(32) float Lf[32][W];    // best codes (as floats)
    alignas(32) float Laux[32][W];  // this step's codes
    constexpr float fmax = static_cast<float>(Nmax);
    // weights: av_x + |x|, av_x = sqrt(sum x^2 / 32) summed in element order
    v sum_x2 = loadw<W>(xt[0]) * loadw<W>(xt[0]);
    for (int i = 1; i < 32; ++i) sum_x2 = sum_x2 + loadw<W>(xt[i]) * loadw<W>(xt[i]);
    const v av_x = vsqrt(sum_x2 / set1w<W>(32.f));
    for (int i = 0; i < 32; ++i) store(wt[i], av_x + vabs(loadw<W>(xt[i])));

    v min = loadw<W>(xt[0]), max = min;
    v sum_w = loadw<W>(wt[0]);
    v sum_x = sum_w * loadw<W>(xt[0]);
    for (int i = 1; i < 32; ++i) {
        const v x = loadw<W>(xt[i]), w = loadw<W>(wt[i]);
        min = vmin(x, min);
        max = vmax(x, max);
        sum_w = sum_w + w;
        sum_x = sum_x + w * x;
    }
    min = vmin(set1w<W>(0.f), min);
    const v min0 = min;
    const v degenerate = cmp<_CMP_EQ_OQ>(max, min);
    v iscale = set1w<W>(fmax) / (max - min);
    v scale = set1w<W>(1.f) / iscale;
    v best_error = set1w<W>(0.f);
    for (int i = 0; i < 32; ++i) {
        const v x = loadw<W>(xt[i]);
        const v d = x - min;
        store(xm[i], d);
        const v l = round_clamp(iscale * d, 0.f, fmax);
        store(Lf[i], l);
        const v diff = scale * l + min - x;
        best_error = best_error + loadw<W>(wt[i]) * (diff * diff);
    }
    bool below_min = false;  // some x - min < 0 (never before a min is accepted)
    for (int is = 0; is <= nstep; ++is) {
        const float c = rmin + detail::mul(rdelta, static_cast<float>(is)) + fmax;
        iscale = set1w<W>(c) / (max - min);  // min moves when a step is accepted, as in ggml
        v sum_l = set1w<W>(0.f), sum_l2 = set1w<W>(0.f), sum_xl = set1w<W>(0.f);
        // t = iscale*(x - min) <= c (to a few ulp), so the upper clamp only matters when c can
        // round above Nmax, and the lower one only once an accepted min left some x below it.
        const bool hi = c >= fmax + 0.499f;
        if (below_min) {
            if (hi) qkx2_search<true, true>(xm, wt, xt, Laux, iscale, fmax, sum_l, sum_l2, sum_xl);
            else qkx2_search<true, false>(xm, wt, xt, Laux, iscale, fmax, sum_l, sum_l2, sum_xl);
        } else {
            if (hi) qkx2_search<false, true>(xm, wt, xt, Laux, iscale, fmax, sum_l, sum_l2, sum_xl);
            else qkx2_search<false, false>(xm, wt, xt, Laux, iscale, fmax, sum_l, sum_l2, sum_xl);
        }
        const v D = sum_w * sum_l2 - sum_l * sum_l;
        const v d_pos = cmp<_CMP_GT_OQ>(D, set1w<W>(0.f));
        if (!any(d_pos)) continue;
        v this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
        v this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        const v min_pos = cmp<_CMP_GT_OQ>(this_min, set1w<W>(0.f));
        this_min = blend(min_pos, set1w<W>(0.f), this_min);
        this_scale = blend(min_pos, sum_xl / sum_l2, this_scale);
        v cur_error = set1w<W>(0.f);
        for (int i = 0; i < 32; ++i) {
            const v diff = this_scale * loadw<W>(Laux[i]) + this_min - loadw<W>(xt[i]);
            cur_error = cur_error + loadw<W>(wt[i]) * (diff * diff);
        }
        const v accept = mask_and(d_pos, cmp<_CMP_LT_OQ>(cur_error, best_error));
        if (!any(accept)) continue;
        best_error = blend(accept, cur_error, best_error);
        scale = blend(accept, this_scale, scale);
        min = blend(accept, this_min, min);
        v lowest = set1w<W>(0.f);
        for (int i = 0; i < 32; ++i) {
            store(Lf[i], blend(accept, loadw<W>(Laux[i]), loadw<W>(Lf[i])));
            const v d = loadw<W>(xt[i]) - min;
            store(xm[i], d);
            lowest = vmin(d, lowest);
        }
        below_min = any(cmp<_CMP_LT_OQ>(lowest, set1w<W>(0.f)));
    }
    const v zero = set1w<W>(0.f);
    for (int i = 0; i < 32; ++i) store(Lt[i], to_int(blend(degenerate, zero, loadw<W>(Lf[i]))));
    scale = blend(degenerate, zero, scale);
    min = blend(degenerate, min0, min);
    store(scale_out, scale);
    store(the_min_out, vneg(min));  // -min, exactly
}

/// Requantize one super-block of Q4_K/Q5_K against its stored scales (qk45_requantize); a
/// sub-block whose scale is 0 keeps the search's codes, taken from lane `lane0 + j` of Lt.
template <int Nmax, int W>
QFORGE_GGUF_AVX2 inline void qk45_requantize(const float* x, const std::uint8_t* scales, std::uint16_t d16,
                                              std::uint16_t dmin16, const std::int32_t (*Lt)[W], int lane0,
                                              std::uint8_t* L) {
    const float dd = fp16_to_float(d16), dmin = fp16_to_float(dmin16);
    for (int j = 0; j < 8; ++j) {
        std::uint8_t sc, m;
        get_scale_min_k4(j, scales, sc, m);
        const float d = dd * static_cast<float>(sc);
        if (d == 0) {
            for (int e = 0; e < 32; ++e) L[32 * j + e] = static_cast<std::uint8_t>(Lt[e][lane0 + j]);
            continue;
        }
        const float dm = dmin * static_cast<float>(m);
        const vf vd = set1(d), vdm = set1(dm);
        for (int i = 0; i < 32; i += 16)
            store_codes16(round_clamp((load(x + 32 * j + i) + vdm) / vd, 0.f, static_cast<float>(Nmax)), L + 32 * j + i);
    }
}

/// q4k_pack / q5k_pack without branches: per 64-element chunk, low nibbles of L[j] and
/// L[j+32] share byte j; Q5_K's fifth bits go to qh[j] bits 2c and 2c+1.
template <bool Five>
QFORGE_GGUF_AVX2 inline void pack_k45(const std::uint8_t* L, std::uint8_t* qh, std::uint8_t* qs) {
    const __m256i lo4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256i h = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
        const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(L + 64 * c));
        const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(L + 64 * c + 32));
        // masked to 4 bits first, so the 16-bit shift cannot carry into the next byte
        const __m256i q = _mm256_or_si256(_mm256_and_si256(a, lo4), _mm256_slli_epi16(_mm256_and_si256(b, lo4), 4));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs + 32 * c), q);
        if constexpr (Five) {
            const __m256i ha = _mm256_and_si256(_mm256_srli_epi16(a, 4), one);
            const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(b, 4), one);
            h = _mm256_or_si256(h, _mm256_sll_epi16(ha, _mm_cvtsi32_si128(2 * c)));
            h = _mm256_or_si256(h, _mm256_sll_epi16(hb, _mm_cvtsi32_si128(2 * c + 1)));
        }
    }
    if constexpr (Five) _mm256_storeu_si256(reinterpret_cast<__m256i*>(qh), h);
}

/// Q4_K (Nmax 15) / Q5_K (Nmax 31) reference quantization of nb super-blocks, W/8 at a time.
template <int Nmax, class Block, int W = 16>
QFORGE_GGUF_AVX2 inline void quantize_qk45_ref(const float* x, Block* y, std::int64_t nb) {
    constexpr float rmin = Nmax == 15 ? -1.f : -0.5f;
    constexpr int nstep = Nmax == 15 ? 20 : 15;
    constexpr int per = W / 8;  // super-blocks per call
    alignas(32) float xt[32][W];
    alignas(32) std::int32_t Lt[32][W];
    alignas(32) float scales[W], mins[W];
    std::uint8_t L[256];
    for (std::int64_t i = 0; i < nb; i += per) {
        // a short tail repeats its last super-block in the unused lanes
        for (int h = 0; h < per; ++h) {
            const float* sb = x + 256 * std::min<std::int64_t>(i + h, nb - 1);
            for (int e = 0; e < 32; e += 8) transpose8(sb + e, 32, &xt[e][8 * h], W);
        }
        qkx2_lanes<Nmax, W>(xt, rmin, 0.1f, nstep, scales, mins, Lt);
        for (int h = 0; h < per && i + h < nb; ++h) {
            Block& b = y[i + h];
            qk45_ref_scales(scales + 8 * h, mins + 8 * h, b.scales, b.d, b.dmin);
            qk45_requantize<Nmax, W>(x + 256 * (i + h), b.scales, b.d, b.dmin, Lt, 8 * h, L);
            if constexpr (Nmax == 15) pack_k45<false>(L, nullptr, b.qs);
            else pack_k45<true>(L, b.qh, b.qs);
        }
    }
}

// ---- make_qx_quants(16, 32, x, L, 1, NULL), one 16-element sub-block per lane (Q6_K) --------
QFORGE_GGUF_AVX2 inline void qx32_lanes(const float (*xt)[16], float* scale_out, std::int32_t (*Lt)[16]) {
    constexpr int nmax = 32;
    alignas(32) float w[16][16], wx[16][16];  // x*x and (x*x)*x: the same products every step
    alignas(32) float Lf[16][16], Laux[16][16];
    vf amax = set1(0.f), max = set1(0.f);
    for (int i = 0; i < 16; ++i) {
        const vf x = load(xt[i]);
        const vf ax = vabs(x);
        const vf gt = cmp<_CMP_GT_OQ>(ax, amax);
        amax = blend(gt, ax, amax);
        max = blend(gt, x, max);
        const vf xx = x * x;
        store(w[i], xx);
        store(wx[i], xx * x);
    }
    const vf zero_lane = cmp<_CMP_LT_OQ>(amax, set1(group_max_eps));
    vf iscale = set1(static_cast<float>(-nmax)) / max;
    vf sumlx = set1(0.f), suml2 = set1(0.f);
    for (int i = 0; i < 16; ++i) {
        const vf l = round_clamp(iscale * load(xt[i]), -nmax, nmax - 1);
        store(Lf[i], l);
        sumlx = sumlx + load(wx[i]) * l;
        suml2 = suml2 + (load(w[i]) * l) * l;
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
            const vf l = round_clamp(iscale * load(xt[i]), -nmax, nmax - 1);
            store(Laux[i], l);
            sumlx = sumlx + load(wx[i]) * l;
            suml2 = suml2 + (load(w[i]) * l) * l;
        }
        const vf accept = mask_and(cmp<_CMP_GT_OQ>(suml2, set1(0.f)), cmp<_CMP_GT_OQ>(sumlx * sumlx, best * suml2));
        if (!any(accept)) continue;
        for (int i = 0; i < 16; ++i) store(Lf[i], blend(accept, load(Laux[i]), load(Lf[i])));
        scale = blend(accept, sumlx / suml2, scale);
        best = blend(accept, scale * sumlx, best);
    }
    for (int i = 0; i < 16; ++i)
        store(Lt[i], to_int(blend(zero_lane, set1(0.f), load(Lf[i]) + set1(static_cast<float>(nmax)))));
    store(scale_out, blend(zero_lane, set1(0.f), scale));
}

QFORGE_GGUF_AVX2 inline void quantize_q6k_ref(const float* x, block_q6_k* y, std::int64_t nb) {
    alignas(32) float xt[16][16];
    alignas(32) std::int32_t Lt[16][16];
    alignas(32) float scales[16];
    std::int8_t L[256];
    for (std::int64_t i = 0; i < nb; ++i, x += 256) {
        for (int r = 0; r < 16; r += 8)
            for (int c = 0; c < 16; c += 8) transpose8(x + 16 * r + c, 16, &xt[c][r], 16);
        qx32_lanes(xt, scales, Lt);
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
            if (d == 0) {  // keeps the search's codes
                for (int e = 0; e < 16; ++e) L[16 * j + e] = static_cast<std::int8_t>(Lt[e][j]);
                continue;
            }
            store_codes16(round_clamp(load(x + 16 * j) / set1(d), -32.f, 31.f) + set1(32.f),
                          reinterpret_cast<std::uint8_t*>(L + 16 * j));
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
