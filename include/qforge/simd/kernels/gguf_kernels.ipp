// GGUF quantizer kernels, written once over one ISA's primitives (contract: simd/gguf_kernels.hpp).
//
// No include guard on purpose: simd/gguf_kernels.hpp has simd/detail/instantiate.ipp compile it
// inside each ISA's namespace. How the results stay ggml's bytes on every ISA:
//  * the searches put one sub-block in each lane: W lanes (several vectors, whose sequential
//    sums interleave to hide their latency) hold W sub-blocks, transposed so that row i holds
//    element i of each. Each lane then runs ggml's scalar sequence for its sub-block, the same
//    operations with every sum in element order, so each lane's result is the scalar one;
//  * vmul launders its product (simd/arch/<isa>.hpp), so no product fuses into a later add;
//    scalar products here go through no_contract;
//  * elementwise steps (requantization, the 32-element types' codes) are exact in any lane order,
//    and the reductions in them (max |x|, min and max, eight blocks' at once in the batched
//    scales) are order-free but for a zero's sign, which batch_min_max settles as ggml does.

namespace gguf_family {

// ---- W-lane vectors: K vf ------------------------------------------------------------------
template <std::size_t K>
struct wvec {
    vf p[K];
};
template <std::size_t K>
struct wmask {
    gg_mask p[K];
};

// Each operation applies one primitive to every part. A macro, not a lambda: a lambda would
// not carry the ISA's target attribute, and the primitives inside it would not inline.
#define QFORGE_W_EACH(R, expr)                                                      \
    R r;                                                                            \
    _Pragma("GCC unroll 4") for (std::size_t k = 0; k < K; ++k) r.p[k] = (expr);    \
    return r

template <std::size_t K>
QFORGE_KFN wvec<K> wload(const float* p) noexcept { QFORGE_W_EACH(wvec<K>, vload(p + lanes * k)); }
template <std::size_t K>
QFORGE_KFN wvec<K> wset(float x) noexcept { QFORGE_W_EACH(wvec<K>, vset(x)); }
template <std::size_t K>
QFORGE_KFN void wstore(float* p, wvec<K> v) noexcept {
#pragma GCC unroll 4
    for (std::size_t k = 0; k < K; ++k) vstore(p + lanes * k, v.p[k]);
}
template <std::size_t K>
QFORGE_KFN wvec<K> operator+(wvec<K> x, wvec<K> y) noexcept { QFORGE_W_EACH(wvec<K>, vadd(x.p[k], y.p[k])); }
template <std::size_t K>
QFORGE_KFN wvec<K> operator-(wvec<K> x, wvec<K> y) noexcept { QFORGE_W_EACH(wvec<K>, vsub(x.p[k], y.p[k])); }
template <std::size_t K>
QFORGE_KFN wvec<K> operator*(wvec<K> x, wvec<K> y) noexcept { QFORGE_W_EACH(wvec<K>, vmul(x.p[k], y.p[k])); }
template <std::size_t K>
QFORGE_KFN wvec<K> operator/(wvec<K> x, wvec<K> y) noexcept { QFORGE_W_EACH(wvec<K>, vdiv(x.p[k], y.p[k])); }
/// x < y ? x : y and x > y ? x : y: ggml's `if (x < m) m = x` exactly.
template <std::size_t K>
QFORGE_KFN wvec<K> wmin(wvec<K> x, wvec<K> y) noexcept { QFORGE_W_EACH(wvec<K>, vmin(x.p[k], y.p[k])); }
template <std::size_t K>
QFORGE_KFN wvec<K> wmax(wvec<K> x, wvec<K> y) noexcept { QFORGE_W_EACH(wvec<K>, vmax(x.p[k], y.p[k])); }
template <std::size_t K>
QFORGE_KFN wvec<K> wabs(wvec<K> x) noexcept { QFORGE_W_EACH(wvec<K>, vabs(x.p[k])); }
template <std::size_t K>
QFORGE_KFN wvec<K> wsqrt(wvec<K> x) noexcept { QFORGE_W_EACH(wvec<K>, gg_sqrt(x.p[k])); }
template <std::size_t K>
QFORGE_KFN wvec<K> wnearest_int(wvec<K> x) noexcept { QFORGE_W_EACH(wvec<K>, g3_nearest_int(x.p[k])); }
template <std::size_t K>
QFORGE_KFN wmask<K> wlt(wvec<K> x, wvec<K> y) noexcept { QFORGE_W_EACH(wmask<K>, gg_lt(x.p[k], y.p[k])); }
template <std::size_t K>
QFORGE_KFN wmask<K> wgt(wvec<K> x, wvec<K> y) noexcept { QFORGE_W_EACH(wmask<K>, gg_gt(x.p[k], y.p[k])); }
template <std::size_t K>
QFORGE_KFN wmask<K> weq(wvec<K> x, wvec<K> y) noexcept { QFORGE_W_EACH(wmask<K>, gg_eq(x.p[k], y.p[k])); }
template <std::size_t K>
QFORGE_KFN wmask<K> wne(wvec<K> x, wvec<K> y) noexcept { QFORGE_W_EACH(wmask<K>, gg_ne(x.p[k], y.p[k])); }
template <std::size_t K>
QFORGE_KFN wmask<K> wand(wmask<K> x, wmask<K> y) noexcept { QFORGE_W_EACH(wmask<K>, gg_and(x.p[k], y.p[k])); }
template <std::size_t K>
QFORGE_KFN wmask<K> wor(wmask<K> x, wmask<K> y) noexcept { QFORGE_W_EACH(wmask<K>, gg_or(x.p[k], y.p[k])); }
/// m ? t : f
template <std::size_t K>
QFORGE_KFN wvec<K> wblend(wmask<K> m, wvec<K> t, wvec<K> f) noexcept {
    QFORGE_W_EACH(wvec<K>, gg_blend(m.p[k], t.p[k], f.p[k]));
}
template <std::size_t K>
QFORGE_KFN bool wany(wmask<K> m) noexcept {
    bool any = false;
#pragma GCC unroll 4
    for (std::size_t k = 0; k < K; ++k) any |= gg_any(m.p[k]);
    return any;
}

/// nearest_int(f) clamped to [lo, hi] (small integers), as a float. Lo/Hi false: the caller
/// knows that the rounded code cannot cross that bound. Clamped before it is rounded (the same
/// codes: the bounds are integers), so that f is small where it is rounded, as vround_small
/// needs (on AVX2, two adds beside the searches' multiplies instead of the round instruction),
/// or with ByInstruction by vround (detail::avx2_round_by_instruction: AMD's choice).
template <bool Lo = true, bool Hi = true, bool ByInstruction = false>
QFORGE_KFN vf round_clamp(vf f, vf lo, vf hi) noexcept {
    if constexpr (Lo) f = vmax(f, lo);
    if constexpr (Hi) f = vmin(f, hi);
    if constexpr (ByInstruction) return vround(f);
    return vround_small(f);
}
template <bool Lo = true, bool Hi = true, bool ByInstruction = false, std::size_t K>
QFORGE_KFN wvec<K> wround_clamp(wvec<K> f, wvec<K> lo, wvec<K> hi) noexcept {
    QFORGE_W_EACH(wvec<K>, (round_clamp<Lo, Hi, ByInstruction>(f.p[k], lo.p[k], hi.p[k])));
}
#undef QFORGE_W_EACH

/// Loads `Lanes` sub-blocks of `len` floats starting at sub-block `first` of x (count in all,
/// a multiple of 8) transposed: xt[i][lane] = element i of sub-block first + lane. Lanes past
/// the end repeat the last 8 sub-blocks.
template <std::size_t Lanes>
QFORGE_KFN void load_lanes(const float* x, std::size_t count, std::size_t first, std::size_t len, float* xt) noexcept {
    for (std::size_t h = 0; h < Lanes; h += 8) {
        const std::size_t sb = first + h < count ? first + h : count - 8;
        for (std::size_t e = 0; e < len; e += 8) gg_transpose8(x + len * sb + e, len, xt + e * Lanes + h, Lanes);
    }
}

/// ggml's max |x| of each lane and the first x at it (`if (ax > amax)` from 0: NaN and zero
/// never win; make_q3_quants and make_qx_quants), from the lane's largest and smallest x taken
/// from 0: the one larger in magnitude, unless +a and -a tie, where the lane looks for the
/// first. Two ops an element where the running compare and its two blends took eight, in a
/// chain.
template <std::size_t K>
QFORGE_KFN void lane_signed_max(const float (*xt)[K * lanes], wvec<K>& amax, wvec<K>& max) noexcept {
    constexpr std::size_t W = K * lanes;
    const wvec<K> zero = wset<K>(0.f);
    wvec<K> top[2] = {zero, zero}, bottom[2] = {zero, zero};  // even and odd elements: two chains
    for (int i = 0; i < 16; ++i) {
        const wvec<K> x = wload<K>(xt[i]);
        top[i % 2] = wmax(x, top[i % 2]);
        bottom[i % 2] = wmin(x, bottom[i % 2]);
    }
    const wvec<K> t = wmax(top[0], top[1]), minus_b = zero - wmin(bottom[0], bottom[1]);
    const wmask<K> below = wgt(minus_b, t);
    amax = wblend(below, minus_b, t);
    max = wblend(below, zero - minus_b, t);
    const wmask<K> tie = wand(weq(t, minus_b), wgt(t, zero));
    if (!wany(tie)) return;
    alignas(64) float m[W], a[W], tied[W];
    wstore(m, max);
    wstore(a, amax);
    wstore(tied, wblend(tie, wset<K>(1.f), zero));
    for (std::size_t l = 0; l < W; ++l) {
        if (tied[l] == 0) continue;
        for (int i = 0; i < 16; ++i) {
            if (std::fabs(xt[i][l]) != a[l]) continue;
            m[l] = xt[i][l];
            break;
        }
    }
    max = wload<K>(m);
}

// ---- the searches: one sub-block per lane, W lanes --------------------------------------------
/// Each lane's sums are sequential (ggml's order) and its steps wait on each other's accepts,
/// so a step takes the same chain of dependent adds at any width; only more lanes per chain
/// spread it, and more lanes hold more registers. W is two vectors: 32 lanes on AVX-512, 16 on
/// NEON (no ARM machine here to measure it on) and on the scalar ISA (whose vectors are arrays:
/// four there only lengthened the compile, 15 s more for the base TU); AVX2 takes 16 or 32 by
/// the CPU (simd/tuning.hpp, detail::avx2_search_vectors). The K-quant searches take two
/// such groups of lanes a step where a call has them (qkx2_groups). ByInstruction: the codes
/// are rounded by vround (round_clamp).
template <std::size_t W, bool ByInstruction>
struct lane_searches {
    static_assert(W % lanes == 0 && W % 8 == 0);
    using wv = wvec<W / lanes>;
    using wm = wmask<W / lanes>;
    // W-lane loads and constants: these hide the family's templates of any width.
    static QFORGE_KFN wv wload(const float* p) noexcept { return gguf_family::wload<W / lanes>(p); }
    static QFORGE_KFN wv wset(float x) noexcept { return gguf_family::wset<W / lanes>(x); }
    template <bool Lo = true, bool Hi = true>
    static QFORGE_KFN wv round_codes(wv f, wv lo, wv hi) noexcept {
        return wround_clamp<Lo, Hi, ByInstruction>(f, lo, hi);
    }

    // ---- make_qkx2_quants, one sub-block per lane (Q4_K, Q5_K: 32 elements; Q2_K: 16) -----
    /// One search step: this iscale's codes round(iscale * (x - min)) and their weighted sums.
    /// Inlined, and the sums returned by value: out of line, behind references that the code
    /// stores may alias, every add went through memory.
    struct qkx2_sums {
        wv l, l2, xl;
    };
    template <int N, bool Lo, bool Hi>
    [[gnu::always_inline]] static QFORGE_KFN qkx2_sums qkx2_step(const float (*xt)[W], const float (*wt)[W],
                                                                 float (*laux)[W], wv iscale, wv min,
                                                                 wv fmax) noexcept {
        const wv zero = wset(0.f);
        qkx2_sums s{zero, zero, zero};
        for (int i = 0; i < N; ++i) {
            const wv x = wload(xt[i]);
            const wv l = round_codes<Lo, Hi>(iscale * (x - min), zero, fmax);
            wstore(laux[i], l);
            const wv wl = wload(wt[i]) * l;
            s.l = s.l + wl;
            s.l2 = s.l2 + wl * l;
            s.xl = s.xl + wl * x;
        }
        return s;
    }

    /// ggml's weights (Q4_K/Q5_K: av_x + |x|, av_x = sqrt(sum x^2 / N); Q2_K: |x|) and the sums
    /// before the search: min (at most 0), the lowest x, max, sum_w, sum_x.
    template <int N, bool AvX>
    [[gnu::always_inline]] static QFORGE_KFN void qkx2_setup(const float (*xt)[W], float (*wt)[W], wv& min,
                                                             wv& lowest, wv& max, wv& sum_w, wv& sum_x) noexcept {
        if constexpr (AvX) {
            wv sum_x2 = wload(xt[0]) * wload(xt[0]);
            for (int i = 1; i < N; ++i) sum_x2 = sum_x2 + wload(xt[i]) * wload(xt[i]);
            const wv av_x = wsqrt(sum_x2 / wset(static_cast<float>(N)));
            for (int i = 0; i < N; ++i) wstore(wt[i], av_x + wabs(wload(xt[i])));
        } else {
            for (int i = 0; i < N; ++i) wstore(wt[i], wabs(wload(xt[i])));
        }
        min = wload(xt[0]);
        max = min;
        sum_w = wload(wt[0]);
        sum_x = sum_w * wload(xt[0]);
        for (int i = 1; i < N; ++i) {
            const wv x = wload(xt[i]), w = wload(wt[i]);
            min = wmin(x, min);
            max = wmax(x, max);
            sum_w = sum_w + w;
            sum_x = sum_x + w * x;
        }
        lowest = min;
        min = wmin(wset(0.f), min);
    }

    /// The error of one element: squared, or absolute (ggml's use_mad, Q2_K).
    template <bool Mad>
    static QFORGE_KFN wv qkx2_err(wv diff) noexcept {
        if constexpr (Mad) return wabs(diff);
        else return diff * diff;
    }

    /// One group of W sub-blocks' search between the phases of its steps (see qkx2_groups).
    struct qkx2_group {
        alignas(64) float wt[32][W], laux[32][W];  // weights, this step's codes
        const float (*xt)[W];
        wv min, lowest, max, sum_w, sum_x, min0, scale, best_error, this_scale, this_min;
        wm degenerate, d_pos;
        bool below_min, live;  // below_min: some x < min; live: some lane's D > 0 this step
    };

    /// The weights, the sums and ggml's first grid (iscale nmax / (max - min)) with its error.
    template <int N, bool AvX, bool Mad>
    static QFORGE_KFN void qkx2_start(qkx2_group& g, float fmax) noexcept {
        qkx2_setup<N, AvX>(g.xt, g.wt, g.min, g.lowest, g.max, g.sum_w, g.sum_x);
        const wv top = wset(fmax), zero = wset(0.f);
        g.min0 = g.min;
        g.degenerate = weq(g.max, g.min);
        const wv iscale = top / (g.max - g.min);
        g.scale = wset(1.f) / iscale;
        wv best_error = zero;
        for (int i = 0; i < N; ++i) {
            const wv x = wload(g.xt[i]);
            const wv l = round_codes(iscale * (x - g.min), zero, top);
            const wv diff = g.scale * l + g.min - x;
            best_error = best_error + wload(g.wt[i]) * qkx2_err<Mad>(diff);
        }
        g.best_error = best_error;
        g.below_min = false;  // never before a min is accepted
    }

    /// A step's first phase: its codes, their sums and the least-squares scale and min.
    template <int N>
    static QFORGE_KFN void qkx2_fit(qkx2_group& g, float c, float fmax) noexcept {
        const wv top = wset(fmax), zero = wset(0.f);
        const wv iscale = wset(c) / (g.max - g.min);  // min moves when a step is accepted, as in ggml
        // t = iscale*(x - min) <= c (to a few ulp), so the upper clamp only matters when c can
        // round above fmax, and the lower one only once an accepted min left some x below it.
        const bool hi = c >= fmax + 0.499f;
        const qkx2_sums sums =
            g.below_min ? (hi ? qkx2_step<N, true, true>(g.xt, g.wt, g.laux, iscale, g.min, top)
                              : qkx2_step<N, true, false>(g.xt, g.wt, g.laux, iscale, g.min, top))
                        : (hi ? qkx2_step<N, false, true>(g.xt, g.wt, g.laux, iscale, g.min, top)
                              : qkx2_step<N, false, false>(g.xt, g.wt, g.laux, iscale, g.min, top));
        const wv D = g.sum_w * sums.l2 - sums.l * sums.l;
        g.d_pos = wgt(D, zero);
        g.live = wany(g.d_pos);
        if (!g.live) return;
        g.this_scale = (g.sum_w * sums.xl - g.sum_x * sums.l) / D;
        g.this_min = (sums.l2 * g.sum_x - sums.l * sums.xl) / D;
        const wm min_pos = wgt(g.this_min, zero);
        if (wany(min_pos)) {  // rare: the division below is a tenth of a step's time
            g.this_min = wblend(min_pos, zero, g.this_min);
            g.this_scale = wblend(min_pos, sums.xl / sums.l2, g.this_scale);
        }
    }

    /// A step's second phase: the fit's error, and the fit taken where it is lower.
    template <int N, bool Mad>
    static QFORGE_KFN void qkx2_judge(qkx2_group& g) noexcept {
        if (!g.live) return;
        wv cur_error = wset(0.f);
        for (int i = 0; i < N; ++i) {
            const wv diff = g.this_scale * wload(g.laux[i]) + g.this_min - wload(g.xt[i]);
            cur_error = cur_error + wload(g.wt[i]) * qkx2_err<Mad>(diff);
        }
        const wm accept = wand(g.d_pos, wlt(cur_error, g.best_error));
        if (!wany(accept)) return;
        g.best_error = wblend(accept, cur_error, g.best_error);
        g.scale = wblend(accept, g.this_scale, g.scale);
        g.min = wblend(accept, g.this_min, g.min);
        g.below_min = wany(wlt(g.lowest, g.min));  // x - min < 0 exactly where x < min
    }

    /// The searches of G groups of W sub-blocks of N elements (xt[g] transposed): scale and
    /// min. Their codes are not kept (see simd/gguf_kernels.hpp): with W lanes some lane
    /// accepts at most steps, and copying its N codes each time cost a quarter of the search.
    /// A step is a chain (its divisions wait on its sums, its error on its fit, the next step's
    /// codes on the min it accepts), so two groups go step by step together, phase by phase:
    /// one group's work fills the other's waits. Measured on an Intel Xeon (256 x 11008 rows,
    /// alternated medians of 11): Q2_K's 16-element passes 2% faster on AVX2 and 9% on
    /// AVX-512; Q4_K and Q5_K, whose 32-element passes cover the chain already, level (also
    /// with AVX-512's pairs of 32-lane groups); four groups no better than two.
    template <int N, bool AvX, bool Mad, std::size_t G>
    static QFORGE_KFN void qkx2_groups(const float (*xt)[N][W], float fmax, float rmin, int nstep, wv* scale_out,
                                       wv* min_out) noexcept {
        qkx2_group g[G];
        for (std::size_t k = 0; k < G; ++k) {
            g[k].xt = xt[k];
            qkx2_start<N, AvX, Mad>(g[k], fmax);
        }
        for (int is = 0; is <= nstep; ++is) {
            const float c = rmin + detail::no_contract(0.1f * static_cast<float>(is)) + fmax;
            for (std::size_t k = 0; k < G; ++k) qkx2_fit<N>(g[k], c, fmax);
            for (std::size_t k = 0; k < G; ++k) qkx2_judge<N, Mad>(g[k]);
        }
        // ggml returns early for max == min: scale 0, min untouched.
        for (std::size_t k = 0; k < G; ++k) {
            scale_out[k] = wblend(g[k].degenerate, wset(0.f), g[k].scale);
            min_out[k] = wblend(g[k].degenerate, g[k].min0, g[k].min);
        }
    }

    template <int N, bool AvX, bool Mad>
    static QFORGE_KFN void qkx_search_t(const float* x, std::size_t count, float nmax, float rmin, int nstep,
                                        float* scale, float* neg_min) noexcept {
        // Two groups a call where it has them. AVX2's wide lanes (four vectors) already
        // interleave two groups' work element by element; pairs of them ran 6-10% slower
        // (Intel Xeon, bench_gguf's other width), so they go one group at a time.
        constexpr std::size_t most = W == 2 * lanes ? 2 : 1;
        alignas(64) float xt[most][N][W], s[W], m[W];
        for (std::size_t first = 0; first < count;) {
            const std::size_t ng = count - first > W ? most : 1;
            for (std::size_t k = 0; k < ng; ++k) load_lanes<W>(x, count, first + k * W, N, &xt[k][0][0]);
            wv vs[most], vm[most];
            if (ng == 2) qkx2_groups<N, AvX, Mad, most>(xt, nmax, rmin, nstep, vs, vm);
            else qkx2_groups<N, AvX, Mad, 1>(xt, nmax, rmin, nstep, vs, vm);
            for (std::size_t k = 0; k < ng; ++k, first += W) {
                wstore(s, vs[k]);
                wstore(m, wset(-0.f) - vm[k]);  // -min, exactly
                for (std::size_t l = 0; l < W && first + l < count; ++l) {
                    scale[first + l] = s[l];
                    neg_min[first + l] = m[l];
                }
            }
        }
    }

    // ---- make_qx_quants(16, 32, x, L, 1, NULL), one 16-element sub-block per lane (Q6_K) ----
    /// One step's sums for codes round(iscale * x) clamped to [-32, 31]. Lo/Hi false: no lane's
    /// code can cross that bound at this step, so the clamp is left out (min and max share the
    /// multiplier's ports, and the step has eight multiplies already).
    struct qx32_sums_t {
        wv lx, l2;  ///< sumlx, suml2
    };
    template <bool Lo, bool Hi>
    [[gnu::always_inline]] static QFORGE_KFN qx32_sums_t qx32_step(const float (*xt)[W], const float (*w)[W],
                                                                   const float (*wx)[W], wv iscale) noexcept {
        const wv lo = wset(-32.f), hi = wset(31.f);
        wv sumlx = wset(0.f), suml2 = sumlx;
        for (int i = 0; i < 16; ++i) {
            const wv l = round_codes<Lo, Hi>(iscale * wload(xt[i]), lo, hi);
            sumlx = sumlx + wload(wx[i]) * l;
            suml2 = suml2 + (wload(w[i]) * l) * l;
        }
        return {sumlx, suml2};
    }

    /// qx32_step with only the clamps some lane needs. A product iscale * x is monotonic in x, so
    /// a lane's lowest code comes from its signed max (`low_x`) and its highest from its extreme of
    /// the other sign (`high_x`); the bounds test below is looser than rounding's half.
    [[gnu::always_inline]] static QFORGE_KFN qx32_sums_t qx32_sums(const float (*xt)[W], const float (*w)[W],
                                                                   const float (*wx)[W], wv iscale, wv low_x,
                                                                   wv high_x) noexcept {
        const bool lo = wany(wlt(iscale * low_x, wset(-32.25f))) || wany(wne(low_x, low_x));
        const bool hi = wany(wgt(iscale * high_x, wset(31.25f))) || wany(wne(high_x, high_x));
        if (lo && hi) return qx32_step<true, true>(xt, w, wx, iscale);
        if (lo) return qx32_step<true, false>(xt, w, wx, iscale);
        if (hi) return qx32_step<false, true>(xt, w, wx, iscale);
        return qx32_step<false, false>(xt, w, wx, iscale);
    }

    /// The scales of W sub-blocks (xt transposed); as in qkx2_groups, their codes are not kept.
    static QFORGE_KFN void qx32_lanes(const float (*xt)[W], wv& scale_out) noexcept {
        constexpr float nmax = 32;
        alignas(64) float w[16][W], wx[16][W];  // x*x and (x*x)*x: the same every step
        const wv zero = wset(0.f);
        wv amax, max, xmin = wload(xt[0]), xmax = xmin;
        lane_signed_max<W / lanes>(xt, amax, max);
        for (int i = 0; i < 16; ++i) {
            const wv x = wload(xt[i]);
            xmin = wmin(x, xmin);
            xmax = wmax(x, xmax);
            const wv xx = x * x;
            wstore(w[i], xx);
            wstore(wx[i], xx * x);
        }
        const wm zero_lane = wlt(amax, wset(1e-15f));  // GROUP_MAX_EPS
        // iscale has the sign of -max: the highest code comes from the extreme of the other sign
        const wv high_x = wblend(wgt(max, zero), xmin, xmax);
        // ggml's first try (iscale -nmax / max, taken as it is), then is = -9..9 but 0 (the same
        // iscale), each taken where it raises sumlx^2 / suml2. Every try's iscale is divided out
        // first, so no try waits on a division's latency before its multiplies, and a try's result
        // is blended in, not branched on: whether some lane accepts is a coin toss that the branch
        // predictor loses (together +5-7% on AVX2, +16% on AVX-512, measured on Zen 5).
        constexpr int tries = 19;
        wv iscale[tries];
        for (int t = 0; t < tries; ++t) {
            const int is = t < 10 ? t - 10 : t - 9;  // -10 stands for the first try
            iscale[t] = wset(t == 0 ? -nmax : -(nmax + detail::no_contract(0.1f * static_cast<float>(is)))) / max;
        }
        wv scale = zero, best = zero;
        for (int t = 0; t < tries; ++t) {  // one call site keeps the step inline
            const auto [sumlx, suml2] = qx32_sums(xt, w, wx, iscale[t], max, high_x);
            if (t == 0) {
                scale = wblend(wne(suml2, zero), sumlx / suml2, zero);
                best = scale * sumlx;
                continue;
            }
            const wm accept = wand(wgt(suml2, zero), wgt(sumlx * sumlx, best * suml2));
            scale = wblend(accept, sumlx / suml2, scale);
            best = wblend(accept, scale * sumlx, best);
        }
        scale_out = wblend(zero_lane, zero, scale);
    }

    static QFORGE_KFN void qx32_search_t(const float* x, std::size_t count, float* scale) noexcept {
        alignas(64) float xt[16][W], s[W];
        for (std::size_t first = 0; first < count; first += W) {
            load_lanes<W>(x, count, first, 16, &xt[0][0]);
            wv vs;
            qx32_lanes(xt, vs);
            wstore(s, vs);
            for (std::size_t l = 0; l < W && first + l < count; ++l) scale[first + l] = s[l];
        }
    }
};

/// The searches' lanes: two vectors, or on AVX2 four where the CPU takes them (see
/// lane_searches). wide_lanes is narrow_lanes on every other ISA, and rounding by the
/// instruction is vround_small's own rounding there: each compiles one form.
inline constexpr std::size_t narrow_lanes = 2 * lanes,
                             wide_lanes = (QFORGE_KERNEL_ISA == ::qforge::simd::isa::avx2 ? 4 : 2) * lanes;
inline constexpr bool rounding_differs = ::qforge::simd::detail::has_rounding_forms(QFORGE_KERNEL_ISA);

/// The lane_searches this CPU takes (simd/tuning.hpp): two vectors rounding by two adds, the
/// same rounding by the instruction, or four vectors. Every ISA but AVX2 has only the first.
enum class search_form { narrow, narrow_by_instruction, wide };
QFORGE_KFN search_form this_search_form() noexcept {
    if (!rounding_differs) return search_form::narrow;
    if (::qforge::simd::detail::avx2_search_vectors().load(std::memory_order_relaxed) == 4) return search_form::wide;
    if (::qforge::simd::detail::avx2_round_by_instruction().load(std::memory_order_relaxed))
        return search_form::narrow_by_instruction;
    return search_form::narrow;
}
using narrow_searches = lane_searches<narrow_lanes, false>;
using rounding_searches = lane_searches<narrow_lanes, rounding_differs>;
using wide_searches = lane_searches<wide_lanes, false>;

QFORGE_KFN void k_qkx2_search(const float* x, std::size_t count, int nmax, float rmin, int nstep, float* scale,
                              float* neg_min) noexcept {
    const float fmax = static_cast<float>(nmax);
    switch (this_search_form()) {
        case search_form::wide:
            return wide_searches::qkx_search_t<32, true, false>(x, count, fmax, rmin, nstep, scale, neg_min);
        case search_form::narrow_by_instruction:
            return rounding_searches::qkx_search_t<32, true, false>(x, count, fmax, rmin, nstep, scale, neg_min);
        case search_form::narrow:
            return narrow_searches::qkx_search_t<32, true, false>(x, count, fmax, rmin, nstep, scale, neg_min);
    }
}

QFORGE_KFN void k_q2k_search(const float* x, std::size_t count, float* scale, float* neg_min) noexcept {
    switch (this_search_form()) {
        case search_form::wide:
            return wide_searches::qkx_search_t<16, false, true>(x, count, 3.f, -0.5f, 15, scale, neg_min);
        case search_form::narrow_by_instruction:
            return rounding_searches::qkx_search_t<16, false, true>(x, count, 3.f, -0.5f, 15, scale, neg_min);
        case search_form::narrow:
            return narrow_searches::qkx_search_t<16, false, true>(x, count, 3.f, -0.5f, 15, scale, neg_min);
    }
}

QFORGE_KFN void k_qx32_search(const float* x, std::size_t count, float* scale) noexcept {
    switch (this_search_form()) {
        case search_form::wide: return wide_searches::qx32_search_t(x, count, scale);
        case search_form::narrow_by_instruction: return rounding_searches::qx32_search_t(x, count, scale);
        case search_form::narrow: return narrow_searches::qx32_search_t(x, count, scale);
    }
}

// ---- the super-block scale step of Q3_K and Q6_K ---------------------------------------------
/// A super-block's largest |scale| of its 16 into amax, and the first scale at it: ggml's
/// `if (ax > amax)` from amax 0, so NaN and zero never win. The lanes take the magnitudes NaN
/// to 0, so that every ISA's max and min see the same values.
QFORGE_KFN float largest_scale(const float* scale, float& amax) noexcept {
    constexpr std::size_t steps = 16 / lanes;
    alignas(64) static constexpr float index[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    const vf zero = vset(0.f);
    vf a[steps], m = zero;
    for (std::size_t k = 0; k < steps; ++k) {
        const vf v = vabs(vload(scale + lanes * k));
        a[k] = gg_blend(gg_gt(v, zero), v, zero);
        m = vmax(m, a[k]);
    }
    amax = vhmax(m);
    if (!(amax > 0)) return 0.f;
    const vf at = vset(amax), past = vset(16.f);
    vf first = past;
    for (std::size_t k = 0; k < steps; ++k)
        first = vmin(first, gg_blend(gg_eq(a[k], at), vload(index + lanes * k), past));
    return scale[static_cast<std::size_t>(vhmin(first))];
}

/// See simd/gguf_kernels.hpp. The divisions and fp16 conversions of a call's super-blocks go
/// one lane each: ggml's scalar chain of them was most of the step.
QFORGE_KFN void k_super_block_scales(const float* scale, std::size_t count, float nmax, std::uint16_t* d16,
                                     float* dd, float* q, float* amax) noexcept {
    for (std::size_t b0 = 0; b0 < count; b0 += lanes) {
        const std::size_t m = count - b0 < lanes ? count - b0 : lanes;
        alignas(64) float largest[lanes] = {}, iscale[lanes];
        for (std::size_t j = 0; j < m; ++j) largest[j] = largest_scale(scale + 16 * (b0 + j), amax[b0 + j]);
        const vf is = vdiv(vset(-nmax), vload(largest));  // lanes past m: unused
        vstore(iscale, is);
        alignas(64) std::uint16_t pairs[2 * lanes], h[lanes];
        gg_fp16_pairs(vdiv(vset(1.f), is), is, pairs);
        for (std::size_t j = 0; j < lanes; ++j) h[j] = pairs[2 * j];
        alignas(64) float d[lanes];
        vstore(d, vload_f16_bytes(reinterpret_cast<const std::byte*>(h)));
        for (std::size_t j = 0; j < m; ++j) {
            d16[b0 + j] = h[j];
            dd[b0 + j] = d[j];
            const vf vi = vset(iscale[j]);
            for (std::size_t k = 0; k < 16 / lanes; ++k) {
                const std::size_t at = 16 * (b0 + j) + lanes * k;
                vstore(q + at, g3_nearest_int(vmul(vi, vload(scale + at))));
            }
        }
    }
}

// ---- the super-block step of Q2_K ---------------------------------------------------------
/// ggml's `if (v > max) max = v` from 0 over 16 values: the largest one above 0, or 0 (NaN
/// and values <= 0 never win).
QFORGE_KFN float largest_positive16(const float* v) noexcept {
    const vf zero = vset(0.f);
    vf m = zero;
    for (std::size_t k = 0; k < 16 / lanes; ++k) {
        const vf a = vload(v + lanes * k);
        m = vmax(m, gg_blend(gg_gt(a, zero), a, zero));
    }
    return vhmax(m);
}

/// What a super-block's bytes and sub-block scales are made from.
struct q2k_factors {
    float is, im;                 ///< 15 / the largest scale, 15 / the largest min
    bool scale_codes, min_codes;  ///< whether that largest value is above 0
    float d, dmin;                ///< the values of the fp16 factors the block stores
};

/// A vector of a super-block's scale or min codes: ggml's nearest_int(factor * value) (its bit
/// trick), or 0 where the super-block's largest value is 0 (ggml leaves them 0 there; a product
/// with a NaN would not be 0).
QFORGE_KFN vf q2k_codes(const float* v, float factor, bool codes) noexcept {
    return codes ? g3_nearest_int(vmul(vset(factor), vload(v))) : vset(0.f);
}

/// One super-block's scale bytes and sub-block scales. Codes 0..15 (every search's) combine
/// as floats; any other (a negative, infinite or NaN-payload scale or min) takes ggml's
/// (uint8_t) casts of the ints, the min's shifted left by four and or-ed in.
QFORGE_KFN void q2k_sub_block_scales(const float* scale, const float* mins, const q2k_factors& f, std::uint8_t* sc,
                                     float* dj, float* dmj) noexcept {
    const vf zero = vset(0.f), fifteen = vset(15.f);
    vf c[16 / lanes], l[16 / lanes];
    bool inside = true;
    for (std::size_t k = 0; k < 16 / lanes; ++k) {
        c[k] = q2k_codes(scale + lanes * k, f.is, f.scale_codes);
        l[k] = q2k_codes(mins + lanes * k, f.im, f.min_codes);
        inside = inside && !gg_any(gg_or(gg_or(gg_lt(c[k], zero), gg_gt(c[k], fifteen)),
                                         gg_or(gg_lt(l[k], zero), gg_gt(l[k], fifteen))));
    }
    if (inside) {
        const vf vd = vset(f.d), vdmin = vset(f.dmin), sixteen = vset(16.f);
        for (std::size_t k = 0; k < 16 / lanes; ++k) {
            vstore_codes(sc + lanes * k, vadd(c[k], vmul(l[k], sixteen)));  // exact: whole numbers below 256
            vstore(dj + lanes * k, vmul(vd, c[k]));
            vstore(dmj + lanes * k, vmul(vdmin, l[k]));
        }
        return;
    }
    alignas(64) float cs[16], ls[16];
    for (std::size_t k = 0; k < 16 / lanes; ++k) {
        vstore(cs + lanes * k, c[k]);
        vstore(ls + lanes * k, l[k]);
    }
    for (std::size_t j = 0; j < 16; ++j) {
        const auto lo = static_cast<std::uint8_t>(static_cast<std::int32_t>(cs[j]));
        const auto hi = static_cast<std::uint32_t>(static_cast<std::int32_t>(ls[j])) << 4;
        sc[j] = static_cast<std::uint8_t>(lo | hi);
        dj[j] = f.d * static_cast<float>(sc[j] & 0xF);
        dmj[j] = f.dmin * static_cast<float>(sc[j] >> 4);
    }
}

/// See simd/gguf_kernels.hpp. The divisions and fp16 conversions of a call's super-blocks go
/// one lane each, as in k_super_block_scales.
QFORGE_KFN void k_q2k_scales(const float* scale, const float* mins, std::size_t count, std::uint8_t* sc,
                             std::uint16_t* dm16, float* d, float* dm) noexcept {
    for (std::size_t b0 = 0; b0 < count; b0 += lanes) {
        const std::size_t m = count - b0 < lanes ? count - b0 : lanes;
        alignas(64) float top_scale[lanes] = {}, top_min[lanes] = {};  // each super-block's largest scale and min
        for (std::size_t j = 0; j < m; ++j) {
            top_scale[j] = largest_positive16(scale + 16 * (b0 + j));
            top_min[j] = largest_positive16(mins + 16 * (b0 + j));
        }
        const vf fifteen = vset(15.f), ls = vload(top_scale), lm = vload(top_min);
        alignas(64) float is[lanes], im[lanes], back[2 * lanes];
        vstore(is, vdiv(fifteen, ls));  // inf where the largest is 0: unused
        vstore(im, vdiv(fifteen, lm));
        alignas(64) std::uint16_t pairs[2 * lanes];
        gg_fp16_pairs(vdiv(ls, fifteen), vdiv(lm, fifteen), pairs);  // ggml: max / 15, 0 / 15 = 0 where max is 0
        vstore(back, vload_f16_bytes(reinterpret_cast<const std::byte*>(pairs)));
        vstore(back + lanes, vload_f16_bytes(reinterpret_cast<const std::byte*>(pairs + lanes)));
        for (std::size_t j = 0; j < m; ++j) {
            const std::size_t b = b0 + j;
            dm16[2 * b] = pairs[2 * j];
            dm16[2 * b + 1] = pairs[2 * j + 1];
            const q2k_factors f{is[j], im[j], top_scale[j] > 0, top_min[j] > 0, back[2 * j], back[2 * j + 1]};
            q2k_sub_block_scales(scale + 16 * b, mins + 16 * b, f, sc + 16 * b, d + 16 * b, dm + 16 * b);
        }
    }
}

// ---- make_q3_quants(16, 4, x, L, true), one 16-element sub-block per lane (Q3_K) ----------
/// Groups of two vectors of sub-blocks here, not W lanes: about 2% of elements change per try,
/// so a lone group's try branches on whether any of its lanes accepts (q3_try_one), and with
/// 32 lanes some lane accepts at nearly twice as many elements as with 16 (measured on AVX2:
/// 13% slower with 32).
inline constexpr std::size_t W3 = 2 * lanes;
using wv3 = wvec<2>;
using wm3 = wmask<2>;

/// Element i's proposal in every lane: the sums without it, and the code they call for.
struct q3_proposal {
    wv3 slx, sl2, nl;
};
[[gnu::always_inline]] QFORGE_KFN q3_proposal q3_propose_code(wv3 x, wv3 wi, wv3 wxi, wv3 li, wv3 sumlx,
                                                              wv3 suml2) noexcept {
    const wv3 slx = sumlx - wxi * li, sl2 = suml2 - (wi * li) * li;
    const wv3 q = x * sl2 / slx;  // (x * sl2) / slx, as ggml's x[i] * sl2 / slx
    return {slx, sl2, wmin(wmax(wnearest_int(q), wset<2>(-4.f)), wset<2>(3.f))};
}

/// Element i's move in every lane: the proposed code, the sums it gives, and whether it is
/// taken: slx > 0, a code other than the current one, and a higher sumlx^2 / suml2 (the masks
/// are ggml's branches).
struct q3_move {
    wv3 nl, slx, sl2;
    wm3 accept;
};
[[gnu::always_inline]] QFORGE_KFN q3_move q3_propose(wv3 x, wv3 wi, wv3 wxi, wv3 li, wv3 sumlx, wv3 suml2) noexcept {
    const wv3 zero = wset<2>(0.f);
    const q3_proposal p = q3_propose_code(x, wi, wxi, li, sumlx, suml2);
    const wm3 positive = wgt(p.slx, zero);
    const wv3 slx = p.slx + wxi * p.nl, sl2 = p.sl2 + (wi * p.nl) * p.nl;
    const wm3 better = wand(wgt(sl2, zero), wgt(slx * slx * suml2, sumlx * sumlx * sl2));
    return {p.nl, slx, sl2, wand(wand(positive, wne(p.nl, li)), better)};
}

/// The weights x^2 and (x^2) x of W3 lanes (ggml recomputes them each use; the same products).
QFORGE_KFN void q3_weights(const float (*xt)[W3], float (*w)[W3], float (*wx)[W3]) noexcept {
    for (int i = 0; i < 16; ++i) {
        const wv3 x = wload<2>(xt[i]);
        const wv3 xx = x * x;
        wstore(w[i], xx);
        wstore(wx[i], xx * x);
    }
}

/// make_q3_quants up to its descent for one group: the weights, max |x| (returned: the lanes
/// below GROUP_MAX_EPS take ggml's early return at the end), the first codes and their sums,
/// each element's terms added as it is coded (ggml's order; a chain of two adds a step that the
/// step's other work covers).
QFORGE_KFN wv3 q3_setup(const float (*xt)[W3], float (*w)[W3], float (*wx)[W3], float (*lf)[W3], float* sumlx,
                        float* suml2) noexcept {
    const wv3 lo = wset<2>(-4.f), hi = wset<2>(3.f);
    wv3 amax, max;
    lane_signed_max<2>(xt, amax, max);
    // |iscale * x| <= 4 (to an ulp) on the lanes kept: vround is nearest_int there
    const wv3 iscale = wset<2>(-4.f) / max;
    wv3 lx = wset<2>(0.f), l2 = lx;
    for (int i = 0; i < 16; ++i) {
        const wv3 x = wload<2>(xt[i]);
        const wv3 xx = x * x, xxx = xx * x;
        const wv3 l = wround_clamp(iscale * x, lo, hi);
        wstore(w[i], xx);
        wstore(wx[i], xxx);
        wstore(lf[i], l);
        lx = lx + xxx * l;
        l2 = l2 + (xx * l) * l;
    }
    wstore(sumlx, lx);
    wstore(suml2, l2);
    return amax;
}

/// The sub-blocks of one k_q3_search step: q3_step of them (two Q3_K super-blocks on AVX2,
/// four on AVX-512), as q3_groups groups of W3 lanes, transposed (xt[g][i][lane]). Two groups,
/// whose chains q3_try interleaves: with one, a try waits on each accept's chain (Q3_K 15%
/// slower on AVX2); with four, a step's state and the retries' (64 KB on AVX-512) outgrew the
/// 48 KB L1 and Q3_K ran 2-4% (AVX2) and 6% (AVX-512) slower (Intel Xeon VM, 256 x 11008
/// rows, medians of 9 alternated).
inline constexpr std::size_t q3_groups = 2, q3_step = q3_groups * W3;
struct q3_state {
    alignas(64) float xt[q3_groups][16][W3], w[q3_groups][16][W3], wx[q3_groups][16][W3], lf[q3_groups][16][W3];
    alignas(64) float sumlx[q3_groups][W3], suml2[q3_groups][W3], amax[q3_groups][W3];
    wm3 moved[q3_groups];
};

/// A mask of no lane.
QFORGE_KFN wm3 no_lanes() noexcept { return wlt(wset<2>(0.f), wset<2>(0.f)); }

/// One coordinate-descent try of the first ng groups: element by element, the move
/// q3_propose finds replaces the current code where it is accepted, each lane's updates its
/// sequence; `moved` gains the lanes that changed. A lane that did not would change
/// nothing in a further try (its state is the same), which is what lets lanes run tries they
/// do not need.
///
/// The groups go element by element together, without a branch: about 2% of elements change
/// (Student-t weights), so with 16 lanes some lane accepts at about one element in four, and
/// a branch on that mispredicted there and waited on the accept's ~50-cycle chain of divide,
/// round and compare. The groups' chains are independent, and interleaved they fill each
/// other's wait.
QFORGE_KFN void q3_try(q3_state& st, std::size_t ng) noexcept {
    for (int i = 0; i < 16; ++i) {
        for (std::size_t g = 0; g < ng; ++g) {
            const wv3 li = wload<2>(st.lf[g][i]), sumlx = wload<2>(st.sumlx[g]), suml2 = wload<2>(st.suml2[g]);
            const q3_move m = q3_propose(wload<2>(st.xt[g][i]), wload<2>(st.w[g][i]), wload<2>(st.wx[g][i]), li, sumlx,
                                         suml2);
            wstore(st.lf[g][i], wblend(m.accept, m.nl, li));
            wstore(st.sumlx[g], wblend(m.accept, m.slx, sumlx));
            wstore(st.suml2[g], wblend(m.accept, m.sl2, suml2));
            st.moved[g] = wor(st.moved[g], m.accept);
        }
    }
}

/// Whether try 0 of the first ng groups may change a code in each lane (`moved`), without
/// running it: until a lane accepts a move its sums stay the first ones, so each element's
/// proposal can come from them, and a lane where no element proposes a code other than its own
/// (ggml's first conditions of an accept) changes nothing in the try. Those (83% of Student-t
/// sub-blocks) are done; the others (95% of which do move) take the try itself from the same
/// state in the retries. The check is about half a try's operations, with no blends: every
/// ISA takes it (on AVX-512, with its one-operation blends, it cost 1-3% more than the tries
/// until the retries kept their slots; since, 4% less, Q3_K end to end).
QFORGE_KFN void q3_first_moves(q3_state& st, std::size_t ng) noexcept {
    const wv3 zero = wset<2>(0.f);
    for (std::size_t g = 0; g < ng; ++g) {
        const wv3 sumlx = wload<2>(st.sumlx[g]), suml2 = wload<2>(st.suml2[g]);
        wm3 may = no_lanes();
        for (int i = 0; i < 16; ++i) {
            const wv3 li = wload<2>(st.lf[g][i]);
            const q3_proposal p = q3_propose_code(wload<2>(st.xt[g][i]), wload<2>(st.w[g][i]), wload<2>(st.wx[g][i]),
                                                  li, sumlx, suml2);
            may = wor(may, wand(wgt(p.slx, zero), wne(p.nl, li)));
        }
        st.moved[g] = may;
    }
}

/// q3_try of group 0 alone, with the state update a branch: a pass with one group has nothing
/// to interleave, and while no lane accepts, the next element's sums are the ones already
/// known, so the elements overlap.
QFORGE_KFN void q3_try_one(q3_state& st) noexcept {
    wv3 sumlx = wload<2>(st.sumlx[0]), suml2 = wload<2>(st.suml2[0]);
    wm3 moved = st.moved[0];
    for (int i = 0; i < 16; ++i) {
        const wv3 li = wload<2>(st.lf[0][i]);
        const q3_move m = q3_propose(wload<2>(st.xt[0][i]), wload<2>(st.w[0][i]), wload<2>(st.wx[0][i]), li, sumlx, suml2);
        if (!wany(m.accept)) continue;
        wstore(st.lf[0][i], wblend(m.accept, m.nl, li));
        sumlx = wblend(m.accept, m.slx, sumlx);
        suml2 = wblend(m.accept, m.sl2, suml2);
        moved = wor(moved, m.accept);
    }
    wstore(st.sumlx[0], sumlx);
    wstore(st.suml2[0], suml2);
    st.moved[0] = moved;
}

/// The scale suml2 > 0 ? sumlx / suml2 : 0, or ggml's early return (scale 0) where max |x| <
/// GROUP_MAX_EPS.
QFORGE_KFN wv3 q3_finish(const float* amax, const float* sumlx, const float* suml2) noexcept {
    const wv3 zero = wset<2>(0.f);
    const wm3 zero_lane = wlt(wload<2>(amax), wset<2>(1e-15f));
    const wv3 sx = wload<2>(sumlx), s2 = wload<2>(suml2);
    return wblend(zero_lane, zero, wblend(wgt(s2, zero), sx / s2, zero));
}

/// Sub-block l of group g of `from` into lane tl of group tg of `to`: its values, codes, sums
/// and max |x|, not its weights (q3_weights recomputes a group's with four multiplies a
/// vector, where copying them takes 32 scalar moves a lane).
QFORGE_KFN void q3_copy_lane(const q3_state& from, std::size_t g, std::size_t l, q3_state& to, std::size_t tg,
                             std::size_t tl) noexcept {
    for (int i = 0; i < 16; ++i) {
        to.xt[tg][i][tl] = from.xt[g][i][l];
        to.lf[tg][i][tl] = from.lf[g][i][l];
    }
    to.sumlx[tg][tl] = from.sumlx[g][l];
    to.suml2[tg][tl] = from.suml2[g][l];
    to.amax[tg][tl] = from.amax[g][l];
}

/// The sub-blocks that moved in try 0 (about one in six) wait here for tries 1..4, and for
/// try 0 itself, which a step only checked (q3_first_moves). A pass gives each of them one
/// more try, the groups together (q3_try interleaves them); one that did not change, or has had
/// its five tries, leaves with its scale and frees its slot, and the others stay where they are
/// for the next pass: a newcomer takes a free slot, so a sub-block is copied once on its way in
/// (a lane copy is 35 scalar moves) rather than again each pass that packs the others down.
/// Passes run when every slot is held and at the end of a call, so a try runs for the
/// sub-blocks that need it rather than for every lane of a group with one such sub-block.
struct q3_retries {
    q3_state st;
    std::size_t dest[q3_step];           ///< each slot's sub-block: its index in the call
    int tries[q3_step];                  ///< the tries it has had
    std::uint32_t held[q3_groups] = {};  ///< bit l of held[g]: slot g W3 + l holds a sub-block
    std::size_t count = 0;               ///< the slots held
};

inline constexpr std::uint32_t q3_all_held = W3 == 32 ? ~0u : (1u << W3) - 1;

/// The first slot not held (the caller knows one is free), as g W3 + lane.
QFORGE_KFN std::size_t q3_free_slot(const q3_retries& r) noexcept {
    std::size_t g = 0;
    while (r.held[g] == q3_all_held) ++g;
    return g * W3 + static_cast<std::size_t>(__builtin_ctz(~r.held[g]));
}

/// Sub-block l of group g of `from` into free slot k of the retries, with its index and tries.
QFORGE_KFN void q3_hold(const q3_state& from, std::size_t g, std::size_t l, std::size_t dest, int tries, q3_retries& r,
                        std::size_t k) noexcept {
    q3_copy_lane(from, g, l, r.st, k / W3, k % W3);
    r.dest[k] = dest;
    r.tries[k] = tries;
    r.held[k / W3] |= 1u << (k % W3);
}

/// The lanes of `mask` among the first `count`, lane l at bit l.
QFORGE_KFN std::uint32_t moved_bits(wm3 mask, std::size_t count) noexcept {
    static_assert(W3 <= 32, "a group's lanes fit the 32 bits");
    alignas(64) float moved[W3];
    wstore(moved, wblend(mask, wset<2>(1.f), wset<2>(0.f)));
    std::uint32_t bits = 0;
    for (std::size_t l = 0; l < count; ++l) bits |= static_cast<std::uint32_t>(moved[l] != 0) << l;
    return bits;
}

/// One pass over the first ng groups: each held sub-block's next try; the ones done write
/// their scale and free their slot. The lanes of free slots run the try too, on whatever they
/// hold (a sub-block that left, or zeros), and nothing reads their results.
QFORGE_KFN void q3_retry_pass(q3_retries& r, std::size_t ng, float* scale) noexcept {
    for (std::size_t g = 0; g < ng; ++g) {
        q3_weights(r.st.xt[g], r.st.w[g], r.st.wx[g]);
        r.st.moved[g] = no_lanes();
    }
    if (ng == 1) q3_try_one(r.st);
    else q3_try(r.st, ng);
    alignas(64) float s[W3];
    for (std::size_t g = 0; g < ng; ++g) {
        wstore(s, q3_finish(r.st.amax[g], r.st.sumlx[g], r.st.suml2[g]));
        const std::uint32_t moved = moved_bits(r.st.moved[g], W3);
        std::uint32_t done = r.held[g] & ~moved;
        for (std::uint32_t bits = r.held[g] & moved; bits != 0; bits &= bits - 1) {
            const auto k = g * W3 + static_cast<std::size_t>(__builtin_ctz(bits));
            if (++r.tries[k] == 5) done |= bits & -bits;
        }
        for (std::uint32_t bits = done; bits != 0; bits &= bits - 1) {
            const auto l = static_cast<std::size_t>(__builtin_ctz(bits));
            scale[r.dest[g * W3 + l]] = s[l];
        }
        r.held[g] &= ~done;
        r.count -= static_cast<std::size_t>(__builtin_popcount(done));
    }
}

/// Sub-block l of group g of `st` into a free slot of the retries; a pass when that fills them.
QFORGE_KFN void q3_enter_retries(const q3_state& st, std::size_t g, std::size_t l, std::size_t dest, int tries,
                                 q3_retries& r, float* scale) noexcept {
    q3_hold(st, g, l, dest, tries, r, q3_free_slot(r));
    // a pass may keep every sub-block (each changed again): then they are all held still
    ++r.count;
    while (r.count == q3_step) q3_retry_pass(r, q3_groups, scale);
}

/// The end of a call: the held sub-blocks packed into the first slots, so that the last passes
/// try only the groups they fill, then passes until every one is done.
QFORGE_KFN void q3_drain_retries(q3_retries& r, float* scale) noexcept {
    while (r.count > 0) {
        const std::size_t ng = (r.count + W3 - 1) / W3;
        for (std::size_t g = ng; g < q3_groups; ++g) {
            const std::uint32_t held = r.held[g];
            r.held[g] = 0;
            for (std::uint32_t bits = held; bits != 0; bits &= bits - 1) {
                const std::size_t from = g * W3 + static_cast<std::size_t>(__builtin_ctz(bits));
                q3_hold(r.st, g, from % W3, r.dest[from], r.tries[from], r, q3_free_slot(r));
            }
        }
        q3_retry_pass(r, ng, scale);
    }
}

QFORGE_KFN void k_q3_search(const float* x, std::size_t count, float* scale) noexcept {
    q3_state st;
    q3_retries retries;
    std::memset(&retries.st, 0, sizeof retries.st);  // slots never held: zeros, not denormals, in their lanes
    alignas(64) float s[W3];
    for (std::size_t first = 0; first < count; first += q3_step) {
        const std::size_t n = count - first < q3_step ? count - first : q3_step, ng = (n + W3 - 1) / W3;
        for (std::size_t g = 0; g < ng; ++g) {
            load_lanes<W3>(x, count, first + g * W3, 16, &st.xt[g][0][0]);
            wstore(st.amax[g], q3_setup(st.xt[g], st.w[g], st.wx[g], st.lf[g], st.sumlx[g], st.suml2[g]));
            st.moved[g] = no_lanes();
        }
        q3_first_moves(st, ng);
        for (std::size_t g = 0; g < ng; ++g) {
            wstore(s, q3_finish(st.amax[g], st.sumlx[g], st.suml2[g]));
            const std::size_t lanes_here = n - g * W3 < W3 ? n - g * W3 : W3;
            for (std::size_t l = 0; l < lanes_here; ++l)
                scale[first + g * W3 + l] = s[l];  // a moved sub-block's is replaced by its retries
            // the moved lanes by their bits: a branch per lane mispredicted on each of them
            for (std::uint32_t bits = moved_bits(st.moved[g], lanes_here); bits != 0; bits &= bits - 1) {
                const auto l = static_cast<std::size_t>(__builtin_ctz(bits));
                q3_enter_retries(st, g, l, first + g * W3 + l, 0, retries, scale);
            }
        }
    }
    q3_drain_retries(retries, scale);
}

// ---- requantization against the stored scales ----------------------------------------------
/// nearest_int's bit trick rather than vround: d can be inf or NaN (an fp16 d that overflowed,
/// times a 0 scale), where ggml's trick reads 0 from the NaN quotient and clamps that.
template <bool WithMin>
QFORGE_KFN vf requantize_step(const float* x, vf d, vf dm, vf lo, vf hi, vf offset) noexcept {
    vf t = vload(x);
    if constexpr (WithMin) t = vadd(t, dm);
    return vadd(vmin(vmax(g3_nearest_int(vdiv(t, d)), lo), hi), offset);
}

template <bool WithMin>
QFORGE_KFN void requantize_t(const float* x, std::size_t count, std::size_t len, const float* d, const float* dm,
                             float lo, float hi, float offset, std::uint8_t* codes) noexcept {
    const vf vlo = vset(lo), vhi = vset(hi), voff = vset(offset);
    for (std::size_t j = 0; j < count; ++j) {
        if (d[j] == 0) continue;  // ggml keeps the search's codes
        const vf vd = vset(d[j]), vdm = vset(WithMin ? dm[j] : 0.f);
        std::size_t i = len * j;
        for (; i + 4 * lanes <= len * (j + 1); i += 4 * lanes)
            vstore_codes4(codes + i, requantize_step<WithMin>(x + i, vd, vdm, vlo, vhi, voff),
                          requantize_step<WithMin>(x + i + lanes, vd, vdm, vlo, vhi, voff),
                          requantize_step<WithMin>(x + i + 2 * lanes, vd, vdm, vlo, vhi, voff),
                          requantize_step<WithMin>(x + i + 3 * lanes, vd, vdm, vlo, vhi, voff));
        for (; i < len * (j + 1); i += lanes)
            vstore_codes(codes + i, requantize_step<WithMin>(x + i, vd, vdm, vlo, vhi, voff));
    }
}

QFORGE_KFN void k_requantize(const float* x, std::size_t count, std::size_t len, const float* d, const float* dm,
                             float lo, float hi, float offset, std::uint8_t* codes) noexcept {
    if (dm != nullptr) requantize_t<true>(x, count, len, d, dm, lo, hi, offset, codes);
    else requantize_t<false>(x, count, len, d, dm, lo, hi, offset, codes);
}

// ---- packing: 32 codes a step, each field masked and then shifted into place ---------------
// A field is masked before its shift, so pk_shift16's u16 lanes never carry a bit into the
// other byte: every ISA gives the same bytes as the layout's scalar packers.

/// `codes` & `mask`, moved left by Shift bits (right by -Shift).
template <int Shift>
QFORGE_KFN pk_u8x32 code_field(const std::uint8_t* codes, std::uint8_t mask) noexcept {
    return pk_shift16<Shift>(pk_and(pk_load32(codes), pk_splat8x32(mask)));
}

/// Bytes of two rows of codes: the low nibble of `lo`'s | the low nibble of `hi`'s << 4.
QFORGE_KFN pk_u8x32 nibble_pairs(const std::uint8_t* lo, const std::uint8_t* hi) noexcept {
    return pk_or(code_field<0>(lo, 0x0F), code_field<4>(hi, 0x0F));
}

/// Bytes of four rows of codes 32 apart: bits Bit and Bit + 1 of row r's at bits 2 r, 2 r + 1.
template <int Bit>
QFORGE_KFN pk_u8x32 two_bit_fields(const std::uint8_t* p) noexcept {
    constexpr std::uint8_t mask = 3 << Bit;
    return pk_or(pk_or(code_field<-Bit>(p, mask), code_field<2 - Bit>(p + 32, mask)),
                 pk_or(code_field<4 - Bit>(p + 64, mask), code_field<6 - Bit>(p + 96, mask)));
}

/// Q4_K / Q5_K: codes 64 c + l and 64 c + 32 + l share qs byte 32 c + l (low, high nibble);
/// bit 4 of each is bit 2 c (2 c + 1) of qh[l].
template <int C>
QFORGE_KFN pk_u8x32 pack_q45k_chunk(const std::uint8_t* codes, std::uint8_t* qs) noexcept {
    const std::uint8_t* p = codes + 64 * C;
    pk_store32(qs + 32 * C, nibble_pairs(p, p + 32));
    return pk_or(code_field<2 * C - 4>(p, 0x10), code_field<2 * C - 3>(p + 32, 0x10));
}

QFORGE_KFN void k_pack_q45k(const std::uint8_t* codes, bool five, std::uint8_t* qh, std::uint8_t* qs) noexcept {
    const pk_u8x32 h = pk_or(pk_or(pack_q45k_chunk<0>(codes, qs), pack_q45k_chunk<1>(codes, qs)),
                             pk_or(pack_q45k_chunk<2>(codes, qs), pack_q45k_chunk<3>(codes, qs)));
    if (five) pk_store32(qh, h);
}

/// Q6_K, per 128-code half: codes l and l + 64 share ql byte l, codes l + 32 and l + 96 byte
/// l + 32 (low, high nibble); bits 4-5 of the four go to qh[l] as bits 0-1, 2-3, 4-5, 6-7.
QFORGE_KFN void k_pack_q6k(const std::uint8_t* codes, std::uint8_t* ql, std::uint8_t* qh) noexcept {
    for (unsigned h = 0; h < 2; ++h) {
        const std::uint8_t* p = codes + 128 * h;
        pk_store32(ql + 64 * h, nibble_pairs(p, p + 64));
        pk_store32(ql + 64 * h + 32, nibble_pairs(p + 32, p + 96));
        pk_store32(qh + 32 * h, two_bit_fields<4>(p));
    }
}

/// Q3_K's packing of 256 codes 0..7: bit 2 of code 32 b + l is bit b of hmask[l]; bits 0-1 go
/// to qs as Q2_K's (per 128-code half, byte l holds codes l, l + 32, l + 64, l + 96).
template <int B>
QFORGE_KFN pk_u8x32 q3k_high_bits(const std::uint8_t* codes) noexcept {
    if constexpr (B == 8) {
        return pk_splat8x32(0);
    } else {
        return pk_or(code_field<B - 2>(codes + 32 * B, 0x04), q3k_high_bits<B + 1>(codes));
    }
}

QFORGE_KFN void k_pack_q3k(const std::uint8_t* codes, std::uint8_t* hmask, std::uint8_t* qs) noexcept {
    pk_store32(hmask, q3k_high_bits<0>(codes));
    for (unsigned half = 0; half < 2; ++half) pk_store32(qs + 32 * half, two_bit_fields<0>(codes + 128 * half));
}

// ---- Q8_0 / Q4_0: elementwise within a 32-element block -----------------------------------
inline constexpr std::size_t block_steps = 32 / lanes;

/// One block's 32 codes (integral floats 0..255, block_steps vectors) as 32 bytes.
QFORGE_KFN void store_block_codes(std::byte* out, const vf* c) noexcept {
    auto* p = reinterpret_cast<std::uint8_t*>(out);
    if constexpr (block_steps == 4) {
        vstore_codes4(p, c[0], c[1], c[2], c[3]);
    } else {
        for (std::size_t k = 0; k < block_steps; ++k) vstore_codes(p + lanes * k, c[k]);
    }
}

/// ggml's signed max of a block: the first element whose |x| is the block's max |x|, or 0
/// where every |x| is 0. The block's max and min hold the answer without a search unless they
/// are +a and -a: only then do elements of both signs share max |x|, and the first of them is
/// looked for. (Finite input: the converter refuses NaN and infinity before quantizing.)
QFORGE_KFN float block_signed_max(const float* x) noexcept {
    vf hi = vset(-3.40282347e38f), lo = vset(3.40282347e38f);
#pragma GCC unroll 4
    for (std::size_t k = 0; k < block_steps; ++k) {
        const vf v = vload(x + lanes * k);
        hi = vmax(v, hi);
        lo = vmin(v, lo);
    }
    const float h = vhmax(hi), l = vhmin(lo);
    if (h != -l) {
        // a select by mask, not a branch: which sign holds max |x| is a coin toss per block
        const std::uint32_t pick_h = 0u - static_cast<std::uint32_t>(h > -l);
        return std::bit_cast<float>((std::bit_cast<std::uint32_t>(h) & pick_h) |
                                    (std::bit_cast<std::uint32_t>(l) & ~pick_h));
    }
    if (!(h > 0)) return 0.0f;
    for (std::size_t k = 0; k < block_steps; ++k) {
        const int at = gg_first(gg_eq(vabs(vload(x + lanes * k)), vset(h)));
        if (at >= 0) return x[lanes * k + static_cast<std::size_t>(at)];
    }
    return 0.0f;
}

/// ggml's min_max: `if (x < min) min = x`, and so for max (the first of equal extremes).
QFORGE_KFN void ggml_min_max(const float* x, float& mn, float& mx) noexcept {
    mn = 3.40282347e38f;
    mx = -3.40282347e38f;
    for (std::size_t j = 0; j < 32; ++j) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
}

/// A block's lane-wise min and max over its vectors (the order every reduction below takes).
QFORGE_KFN void block_lane_min_max(const float* x, vf& lo, vf& hi) noexcept {
    vf l = vload(x), h = l;  // locals: a vector type may alias x, so stores through lo would reload x
#pragma GCC unroll 4
    for (std::size_t k = 1; k < block_steps; ++k) {
        const vf v = vload(x + lanes * k);
        l = vmin(l, v);
        h = vmax(h, v);
    }
    lo = l;
    hi = h;
}

/// Whether a block's 1 / d (Q4_0, Q5_0, Q8_0) gives it codes: with 1 / d infinite (d
/// subnormal) every product is +-inf or NaN, which ggml's (int8_t) cast (x86 cvttss2si) turns
/// into code 0, and the block takes zero codes instead.
QFORGE_KFN bool signed_codes_defined(float id) noexcept { return std::fabs(id) <= 3.40282347e38f; }

/// Whether a Q8_0 block's 1 / d gives it codes other than zeros: finite and not 0. With 1 / d
/// zero (d infinite, from an infinite x; or d zero, a block of zeros) every product is 0 or
/// NaN, and ggml's (int8_t) of NaN (x86 cvttss2si) is code 0 too, where the vector stores'
/// saturating packs would make it -128.
QFORGE_KFN bool absmax_codes_defined(float id) noexcept { return id != 0 && signed_codes_defined(id); }

/// Q4_0 / Q5_0's codes MIN(levels - 1, (int8_t)(x / d + levels / 2 + 0.5f)), >= 0, as the
/// floats whose truncations they are (the clamp before the truncating conversion: the same,
/// levels - 1 being whole), where 1 / d is finite (signed_codes_defined). The top goes first
/// in the minimum, which keeps a NaN (an infinite x makes d infinite and 1 / d zero): every
/// ISA converts it to ggml's code 0, the (int8_t) of NaN on x86. Clamped false: the MIN is
/// left to the store (gg_store_code_fields5 keeps 32 as 31), since x / d is at most levels / 2
/// in magnitude (d is the signed max over -levels / 2) and the code at most levels: one byte
/// minimum for four float ones, which a Zen 3's adds and conversions share ports with (Q5_0
/// 4.61 -> 4.75 G weights/s there).
template <bool Clamped>
QFORGE_KFN void signed_code_vectors(const float* x, float levels, float id, vf* c) noexcept {
    const vf vid = vset(id), bias = vset(levels / 2 + 0.5f), top = vset(levels - 1);
#pragma GCC unroll 4
    for (std::size_t k = 0; k < block_steps; ++k) {
        c[k] = vadd(vmul(vload(x + lanes * k), vid), bias);
        if constexpr (Clamped) c[k] = vmin(top, c[k]);
    }
}

/// Q4_1 / Q5_1's codes (int8_t)((x - min) / d + 0.5f) as the floats whose truncations they
/// are (the cast truncates), where 1 / d is finite and positive. They need no clamp: ggml
/// clamps Q4_1's to 15, but x - min <= max - min (rounding is monotonic) and (max - min) / d
/// is levels - 1 within three roundings (2^-21 relative where d is subnormal), so no code
/// reaches levels - 1 + 0.5.
QFORGE_KFN void offset_code_vectors(const float* x, float mn, float id, vf* c) noexcept {
    const vf vmn = vset(mn), vid = vset(id), half = vset(0.5f);
#pragma GCC unroll 4
    for (std::size_t k = 0; k < block_steps; ++k) c[k] = vadd(vmul(vsub(vload(x + lanes * k), vmn), vid), half);
}

/// Whether a block's 1 / d gives it codes; without, every code is ggml's (int8_t) cast of
/// 0.5f, +-inf or NaN: 0 (1 / d infinite: d subnormal; 0: d 0 or infinite).
QFORGE_KFN bool offset_codes_defined(float id) noexcept { return id > 0 && id <= 3.40282347e38f; }

/// The 32-element types take their blocks in batches of eight, and the scales of a batch
/// in the lanes of one vector (block j in lane j, and j + 8 where a vector has 16), every
/// block's min and max reduced into one vector: the divisions and fp16 conversions then take
/// one vector operation for the batch. dm16: each block's fp16 d and (Q4_1 / Q5_1) min.
inline constexpr std::size_t scale_batch = 8;
struct batch_scales {
    alignas(64) float mn[lanes], id[lanes];  // mn: Q4_1 / Q5_1 only
    std::uint16_t dm16[2 * lanes];
    bool all_defined;  ///< every lane's 1 / d gives codes (no lane takes the all-zero codes)
};

/// Whether every lane of m is set.
QFORGE_KFN bool every_lane(gg_mask m) noexcept {
    const vf one = vset(1.f);
    return !gg_any(gg_eq(gg_blend(m, vset(0.f), one), one));
}

/// Whether every lane's 1 / d gives codes by its type's rule: finite (signed_codes_defined;
/// NaN is not), and positive too for the offset types (offset_codes_defined), not 0 for Q8_0
/// (absmax_codes_defined).
enum class code_rule { signed_codes, offset_codes, absmax_codes };
QFORGE_KFN bool all_codes_defined(vf id, code_rule rule) noexcept {
    const vf inf = vset(std::numeric_limits<float>::infinity()), zero = vset(0.f);
    if (rule == code_rule::offset_codes) return every_lane(gg_and(gg_gt(id, zero), gg_lt(id, inf)));
    if (rule == code_rule::absmax_codes) return every_lane(gg_and(gg_ne(id, zero), gg_lt(vabs(id), inf)));
    return every_lane(gg_lt(vabs(id), inf));
}

/// The first stage of a batch's scales: each block's lane-wise min and max.
struct lane_extremes {
    vf lo[scale_batch], hi[scale_batch];
};

/// The second stage: the blocks' ggml min_max. Only a zero's sign tells equal values apart,
/// so a block whose min or max is zero takes ggml's loop. Inlined: out of line, its results
/// went back through memory (AVX-512's Q8_0 and Q5_1 8-14% slower on Zen 5; AVX2 no change).
[[gnu::always_inline]] QFORGE_KFN void batch_min_max(const float* x, const lane_extremes& e, vf& mn, vf& mx) noexcept {
    mn = gg_hmin_each(e.lo);
    mx = gg_hmax_each(e.hi);
    const vf zero = vset(0.f);
    if (!gg_any(gg_or(gg_eq(mn, zero), gg_eq(mx, zero)))) return;
    alignas(64) float a[lanes], b[lanes];
    vstore(a, mn);
    vstore(b, mx);
    for (std::size_t j = 0; j < lanes; ++j)
        if (a[j] == 0 || b[j] == 0) ggml_min_max(x + 32 * (j % scale_batch), a[j], b[j]);
    mn = vload(a);
    mx = vload(b);
}

/// The last stage for Q4_1 / Q5_1 (levels 16 / 32): ggml's d = (max - min) / (levels - 1)
/// and 1 / d.
struct offset_scales {
    float levels;
    QFORGE_KFN void operator()(const float*, vf mn, vf mx, batch_scales& s) const noexcept {
        const vf zero = vset(0.f);
        const vf d = vdiv(vsub(mx, mn), vset(levels - 1));
        const vf id = gg_blend(gg_ne(d, zero), vdiv(vset(1.f), d), zero);  // ggml: d ? 1 / d : 0
        vstore(s.id, id);
        vstore(s.mn, mn);
        gg_fp16_pairs(d, mn, s.dm16);
        s.all_defined = all_codes_defined(id, code_rule::offset_codes);
    }
};

/// The last stage for Q4_0 / Q5_0 (levels 16 / 32): ggml's d = signed max / -(levels / 2) and
/// 1 / d. The signed max by block_signed_max's rule: the max or the min, whichever is larger
/// in magnitude; 0 where both are 0; where they are +a and -a, the first element at a
/// (block_signed_max's search).
struct signed_scales {
    float levels;
    QFORGE_KFN void operator()(const float* x, vf mn, vf mx, batch_scales& s) const noexcept {
        const vf zero = vset(0.f), minus_mn = vsub(zero, mn);
        const gg_mask tie = gg_eq(mx, minus_mn);
        vf sm = gg_blend(tie, zero, gg_blend(gg_gt(mx, minus_mn), mx, mn));
        if (gg_any(gg_and(tie, gg_gt(mx, zero)))) {
            alignas(64) float m[lanes], h[lanes], l[lanes];
            vstore(m, sm);
            vstore(h, mx);
            vstore(l, mn);
            for (std::size_t j = 0; j < lanes; ++j)
                if (h[j] == -l[j] && h[j] > 0) m[j] = block_signed_max(x + 32 * (j % scale_batch));
            sm = vload(m);
        }
        const vf d = vdiv(sm, vset(-(levels / 2)));
        const vf id = gg_blend(gg_ne(d, zero), vdiv(vset(1.f), d), zero);  // ggml: d ? 1 / d : 0
        vstore(s.id, id);
        gg_fp16_pairs(d, d, s.dm16);
        s.all_defined = all_codes_defined(id, code_rule::signed_codes);
    }
};

/// The last stage for Q8_0: d = max |x| / 127 and 1 / d (max |x| is the max or minus the min;
/// its absolute value, so that a block of zeros of either sign gets ggml's +0).
struct absmax_scales {
    QFORGE_KFN void operator()(const float*, vf mn, vf mx, batch_scales& s) const noexcept {
        const vf zero = vset(0.f);
        const vf d = vdiv(vabs(vmax(mx, vsub(zero, mn))), vset(127.f));
        const vf id = gg_blend(gg_ne(d, zero), vdiv(vset(1.f), d), zero);  // ggml: d ? 1 / d : 0
        vstore(s.id, id);
        gg_fp16_pairs(d, d, s.dm16);
        s.all_defined = all_codes_defined(id, code_rule::absmax_codes);
    }
};

// How far ahead of a block's first read (its lane extremes, two batches ahead of its codes)
// batched_blocks asks for the lines of the rows it streams through: the hardware prefetchers
// alone left it waiting (128 x 11008 rows, Intel Xeon AVX2, alternated best of 5: Q4_1 4.6 ->
// 5.4 G weights/s, Q4_0 4.4 -> 4.8, Q5_0 4.2 -> 4.9, Q5_1 4.5 -> 4.8, AVX-512 Q4_1 4.5 -> 5.1;
// Q8_0, bound by its stores, unchanged; 1 KB and 4 KB ahead no better).
inline constexpr std::size_t block_prefetch_distance = 2048;

/// The rows of a batched type, a batch at a time: each block's codes (`emit(x, s, j, block)`
/// for lane j of the batch's scales), the last nb % scale_batch blocks as one padded batch. A batch's
/// scales are a long chain (reductions, then two divisions: ~60 cycles), and the out-of-order
/// window stalls on a chain longer than the work behind it. So the stages of the next batches'
/// scales go between this batch's codes: every block's lane-wise extremes for the batch after
/// next, the next batch's min and max before the first half of the codes, its last stage
/// (`scales`) before the second.
template <std::int64_t Bytes, class Scales, class Emit>
QFORGE_KFN void batched_blocks(const float* x, std::int64_t nb, std::byte* blocks, Scales scales, Emit emit) noexcept {
    const auto batch = static_cast<std::int64_t>(scale_batch);
    const std::int64_t batches = nb / batch;
    lane_extremes e[2];  // e[n % 2]: batch n's
    batch_scales s[2];   // s[n % 2]: batch n's
    for (std::int64_t n = 0; n < 2 && n < batches; ++n)
        for (std::size_t j = 0; j < scale_batch; ++j)
            block_lane_min_max(x + 32 * (n * batch + static_cast<std::int64_t>(j)), e[n].lo[j], e[n].hi[j]);
    vf mn, mx;
    if (batches > 0) {
        batch_min_max(x, e[0], mn, mx);
        scales(x, mn, mx, s[0]);
    }
    for (std::int64_t n = 0; n < batches; ++n) {
        const float* now = x + 32 * n * batch;
        const bool next = n + 1 < batches, more = n + 2 < batches;
        if (next) batch_min_max(now + 32 * batch, e[(n + 1) % 2], mn, mx);
        lane_extremes& after = e[n % 2];  // batch n + 2's, in the place of batch n's
        for (std::size_t j = 0; j < scale_batch; ++j) {
            const auto at = static_cast<std::int64_t>(j);
            if (j == scale_batch / 2 && next) scales(now + 32 * batch, mn, mx, s[(n + 1) % 2]);
            if (more) {
                const float* first_read = now + 32 * (2 * batch + at);
                prefetch_read(first_read, block_prefetch_distance);
                prefetch_read(first_read + 16, block_prefetch_distance);
                block_lane_min_max(first_read, after.lo[j], after.hi[j]);
            }
            emit(now + 32 * at, s[n % 2], j, blocks + Bytes * (n * batch + at));
        }
    }
    const std::int64_t done = batches * batch;
    if (done == nb) return;
    // The last nb % scale_batch blocks as one batch, padded with blocks of zeros (their lanes'
    // scales are computed and not used), so that they take the same stages as every other.
    alignas(64) float tail[32 * scale_batch] = {};
    std::memcpy(tail, x + 32 * done, static_cast<std::size_t>(32 * (nb - done)) * sizeof(float));
    for (std::size_t j = 0; j < scale_batch; ++j) block_lane_min_max(tail + 32 * j, e[0].lo[j], e[0].hi[j]);
    batch_min_max(tail, e[0], mn, mx);
    scales(tail, mn, mx, s[0]);
    for (std::int64_t i = done; i < nb; ++i) {
        const auto j = static_cast<std::size_t>(i - done);
        emit(tail + 32 * j, s[0], j, blocks + Bytes * i);
    }
}

struct q8_0_emit {
    QFORGE_KFN void operator()(const float* x, const batch_scales& s, std::size_t j, std::byte* block) const noexcept {
        std::memcpy(block, &s.dm16[2 * j], 2);
        if (!s.all_defined && !absmax_codes_defined(s.id[j])) {
            std::memset(block + 2, 0, 32);
            return;
        }
        const vf vid = vset(s.id[j]), half = vset(0.5f), zero = vset(0.f), one = vset(1.f), minus_one = vset(-1.f);
        vf c[block_steps];
#pragma GCC unroll 4
        for (std::size_t k = 0; k < block_steps; ++k) {
            // roundf: truncate, then step away from zero when the dropped part is >= 0.5 (exact)
            const vf p = vmul(vload(x + lanes * k), vid);
            const vf t = gg_trunc(p);
            c[k] = vadd(t, vsel_ge(vabs(vsub(p, t)), half, vsel_ge(p, zero, one, minus_one), zero));
        }
        auto* q = reinterpret_cast<std::uint8_t*>(block + 2);
        if constexpr (block_steps == 4) {
            gg_store_i8x4(q, c[0], c[1], c[2], c[3]);
        } else {
            for (std::size_t k = 0; k < block_steps; ++k) gg_store_i8(q + lanes * k, c[k]);
        }
    }
};
QFORGE_KFN void k_q8_0(const float* x, std::int64_t nb, std::byte* blocks) noexcept {
    batched_blocks<34>(x, nb, blocks, absmax_scales{}, q8_0_emit{});
}

/// Lane j's block of a signed type (Q4_0 / Q5_0): its fp16 d. Returns whether its 1 / d gives
/// codes, and then its code vectors in c (signed_code_vectors<Clamped>); without, every code
/// is 0.
template <bool Clamped>
QFORGE_KFN bool signed_block(const float* x, float levels, const batch_scales& s, std::size_t j, std::byte* block,
                             vf* c) noexcept {
    std::memcpy(block, &s.dm16[2 * j], 2);
    if (!s.all_defined && !signed_codes_defined(s.id[j])) return false;
    signed_code_vectors<Clamped>(x, levels, s.id[j], c);
    return true;
}
struct q4_0_emit {
    QFORGE_KFN void operator()(const float* x, const batch_scales& s, std::size_t j, std::byte* block) const noexcept {
        alignas(32) std::uint8_t q[32];
        vf c[block_steps];
        if (signed_block<true>(x, 16, s, j, block, c)) store_block_codes(reinterpret_cast<std::byte*>(q), c);
        else std::memset(q, 0, 32);
        gg_store_nibbles32(block + 2, q);
    }
};
QFORGE_KFN void k_q4_0(const float* x, std::int64_t nb, std::byte* blocks) noexcept {
    batched_blocks<18>(x, nb, blocks, signed_scales{16}, q4_0_emit{});
}

/// Lane j's block: its fp16 d and min (Q4_1 / Q5_1's first four bytes). Returns whether its
/// 1 / d gives codes, and then its code vectors in c; without, every code is 0.
QFORGE_KFN bool offset_block(const float* x, const batch_scales& s, std::size_t j, std::byte* block, vf* c) noexcept {
    std::memcpy(block, &s.dm16[2 * j], 4);
    if (!s.all_defined && !offset_codes_defined(s.id[j])) return false;
    offset_code_vectors(x, s.mn[j], s.id[j], c);
    return true;
}
// Q4_1, Q5_0 and Q5_1 store their fields straight from the code vectors (gg_store_code_nibbles,
// gg_store_code_fields5), so that AVX-512 and AVX2 do without the code bytes in memory in
// between (AVX-512 Q4_1, 128 x 11008 rows, alternated, medians of 5 in two runs: 4.99-5.40 ->
// 5.34-5.64 G weights/s; the others' figures are at the primitives). Q4_0 measured slower that
// way on AVX-512 (4.89 -> 4.57) and keeps its bytes.
struct q4_1_emit {
    QFORGE_KFN void operator()(const float* x, const batch_scales& s, std::size_t j, std::byte* block) const noexcept {
        vf c[block_steps];
        if (offset_block(x, s, j, block, c)) gg_store_code_nibbles(block + 4, c);
        else std::memset(block + 4, 0, 16);
    }
};
QFORGE_KFN void k_q4_1(const float* x, std::int64_t nb, std::byte* blocks) noexcept {
    batched_blocks<20>(x, nb, blocks, offset_scales{16}, q4_1_emit{});
}

struct q5_0_emit {
    QFORGE_KFN void operator()(const float* x, const batch_scales& s, std::size_t j, std::byte* block) const noexcept {
        vf c[block_steps];
        if (signed_block<false>(x, 32, s, j, block, c)) gg_store_code_fields5(block + 2, block + 6, c);
        else std::memset(block + 2, 0, 20);
    }
};
QFORGE_KFN void k_q5_0(const float* x, std::int64_t nb, std::byte* blocks) noexcept {
    batched_blocks<22>(x, nb, blocks, signed_scales{32}, q5_0_emit{});
}

struct q5_1_emit {
    QFORGE_KFN void operator()(const float* x, const batch_scales& s, std::size_t j, std::byte* block) const noexcept {
        vf c[block_steps];
        if (offset_block(x, s, j, block, c)) gg_store_code_fields5(block + 4, block + 8, c);
        else std::memset(block + 4, 0, 20);
    }
};
QFORGE_KFN void k_q5_1(const float* x, std::int64_t nb, std::byte* blocks) noexcept {
    batched_blocks<24>(x, nb, blocks, offset_scales{32}, q5_1_emit{});
}

// ---- the blocks the vector paths leave to the scalar port --------------------------------
/// Whether the 16 values at x are all below 2^-60 in magnitude and not all zero.
QFORGE_KFN bool tiny16(const float* x) noexcept {
    vf m = vabs(vload(x));
    for (std::size_t k = 1; k < 16 / lanes; ++k) m = vmax(m, vabs(vload(x + lanes * k)));
    return !gg_any(gg_gt(m, vset(0x1.fffffep-61f))) && gg_any(gg_gt(m, vset(0.f)));
}

QFORGE_KFN std::int64_t k_first_tiny_block(const float* x, std::int64_t nb, std::int64_t elems) noexcept {
    for (std::int64_t b = 0; b < nb; ++b)
        for (std::int64_t s = 0; s < elems; s += 16)
            if (tiny16(x + b * elems + s)) return b;
    return nb;
}

/// vmul launders its product, so the subtraction never fuses with it (the scalar port's mul).
QFORGE_KFN void k_dequantize_codes(const std::uint8_t* codes, std::size_t count, std::size_t len, const float* d,
                                   const float* m, float offset, float* y) noexcept {
    const vf off = vset(offset);
    for (std::size_t j = 0; j < count; ++j) {
        const std::uint8_t* c = codes + len * j;
        float* out = y + len * j;
        const vf dj = vset(d[j]);
        if (m) {
            const vf mj = vset(m[j]);
            for (std::size_t i = 0; i < len; i += lanes) vstore(out + i, vsub(vmul(dj, vsub(vload_u8(c + i), off)), mj));
        } else {
            for (std::size_t i = 0; i < len; i += lanes) vstore(out + i, vmul(dj, vsub(vload_u8(c + i), off)));
        }
    }
}

}  // namespace gguf_family

template <>
QFORGE_DECL const gguf_kernels& family_table<gguf_kernels>() noexcept {
    static constexpr gguf_kernels table{QFORGE_KERNEL_ISA,          &gguf_family::k_qkx2_search, &gguf_family::k_q2k_search,
                                        &gguf_family::k_qx32_search, &gguf_family::k_requantize,
                                        &gguf_family::k_pack_q45k,   &gguf_family::k_pack_q6k,
                                        &gguf_family::k_q8_0,
                                        &gguf_family::k_q4_0,        &gguf_family::k_q3_search,
                                        &gguf_family::k_pack_q3k,    &gguf_family::k_q4_1,
                                        &gguf_family::k_q5_0,        &gguf_family::k_q5_1,
                                        &gguf_family::k_first_tiny_block, &gguf_family::k_dequantize_codes,
                                        &gguf_family::k_super_block_scales, &gguf_family::k_q2k_scales};
    return table;
}
