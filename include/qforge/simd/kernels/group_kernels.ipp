// Group kernels, written once over one ISA's primitives.
//
// No include guard on purpose: simd/group_kernels.hpp has simd/detail/instantiate.ipp compile
// it inside each ISA's namespace, over that ISA's primitives (vf, lanes, acc8, vload, vmul...),
// with QFORGE_KFN the ISA's target attribute + inline. The same text thus becomes one set of
// kernels per ISA, and the scalar instance is the reference the others must reproduce.
//
// Two rules keep the ISAs bit-identical:
//  * vmul never fuses with a following add (each primitive launders its product), so FMA
//    contraction cannot change a result, whatever -ffp-contract the consumer uses;
//  * error sums use exactly 8 partial sums (element i -> partial i % 8) whatever the lane
//    count, and padding lanes contribute +0.

// k_round_quotient: round_half_even(fl(x / s)), the IEEE quotient rounded, computed without
// a division in almost every lane. Only |quotient| <= 512 matters: every caller clamps the
// result into -255..255, so a larger (even infinite) t gives the same clamped value whatever
// it rounds to, and the fast path does not clamp t itself (two operations per vector less;
// the fallback division still clamps, its result is equally clamped away). t = x * (1/s) is
// within |t| 2^-22 of fl(x / s) (two roundings of 2^-24 each, and fl(x / s)'s own), so the
// fast rounding can only be wrong where t lies within |t| 2^-22 of a half-integer h; the test
// uses |t| 2^-20, a 4x margin, so that a group's extreme value (|t| near 2^(b-1) - 0.5 by
// construction of the scale) only rarely takes the slow path. There,
// a true tie x == h * s (a product exact in float: h has <= 11 significant bits, s <= 11) is
// resolved to even directly; anything else near a tie (rare) redoes the vector with the
// true division.
QFORGE_KFN vf k_near(vf t) noexcept { return vsub(vset(0.5f), vmul(vabs(t), vset(0x1p-20f))); }

// k_settle_ties: round_half_even(fl(x / s)) from rr = round(t), t = x * (1/s), and a window
// `near` (k_near's per lane, or the encode's per grid): a lane within it of a half-integer
// and on a true tie x == h * s takes round(h); if any lane is near a tie without being on
// one, the whole step takes the true division. Lanes that are not near keep rr.
QFORGE_KFN vf k_settle_ties(vf x, vf s, vf t, vf rr, vf near) noexcept {
    const vf d = vabs(vsub(t, rr));
    if (!vany_gt(d, near)) return rr;
    const vf zero = vset(0.0f);
    const vf h = vadd(rr, vsel_ge(t, rr, vset(0.5f), vset(-0.5f)));
    const vf miss = vabs(vsub(x, vmul(h, s)));  // exactly 0 on a true tie
    if (vany_gt(vsel_ge(zero, miss, zero, d), near)) return vround(vmin(vmax(vdiv(x, s), vset(-512.0f)), vset(512.0f)));
    return vsel_ge(zero, miss, vround(h), rr);
}

QFORGE_KFN vf k_round_quotient(vf x, vf s, vf r) noexcept {
    const vf t = vmul(x, r);  // x, r finite: t is a number or +-infinity, never NaN
    return k_settle_ties(x, s, t, vround(t), k_near(t));
}

// k_code: clamp(round_half_even(fl(x / s)) + z, 0, maxq).
QFORGE_KFN vf k_code(vf x, vf s, vf r, vf z, vf hi) noexcept {
    return vmin(vmax(vadd(k_round_quotient(x, s, r), z), vset(0.0f)), hi);
}

// k_log2: log2 x for a normal x > 0, by a fixed polynomial (least-squares fit on Chebyshev
// nodes: log2(1+t) on [-0.25, 0.5) to 2.2e-6). Garbage, but no trap, for any other x.
QFORGE_KFN vf k_log2(vf x) noexcept {
    vf m;
    const vf ex = vsplit_exponent(x, m);  // x = 2^ex m, m in [0.75, 1.5)
    const vf t = vsub(m, vset(1.0f));
    // Estrin's scheme (pairs, then pairs of pairs): the same polynomials as a Horner chain,
    // with a third of its dependent steps, so candidates' chains overlap in the pipeline.
    const vf t2 = vmul(t, t), t4 = vmul(t2, t2);
    const vf l01 = vadd(vset(-1.4833508663331683e-06f), vmul(vset(1.4426727976638458f), t));
    const vf l23 = vadd(vset(-0.7210326554055629f), vmul(vset(0.4819118501255701f), t));
    const vf l45 = vadd(vset(-0.3718790857330163f), vmul(vset(0.2909838493372046f), t));
    const vf l456 = vadd(l45, vmul(t2, vset(-0.14115863058674366f)));
    const vf l = vadd(vadd(l01, vmul(t2, l23)), vmul(t4, l456));
    return vadd(ex, l);
}

// k_pow_abs: |e|^p as 2^(p log2|e|), by k_log2 and a fixed polynomial for 2^f on [-0.5, 0.5]
// (to 8e-8 relative), no division; |e| < 2^-40 counts as 0. Exact to the bit across ISAs, not
// to the last bit of pow().
QFORGE_KFN vf k_pow_abs(vf e, vf p) noexcept {
    const vf x = vabs(e);
    const vf y = vmin(vmax(vmul(k_log2(x), p), vset(-126.0f)), vset(127.0f));
    const vf n = vround(y);
    const vf f = vsub(y, n);  // [-0.5, 0.5]
    const vf f2 = vmul(f, f), f4 = vmul(f2, f2);
    const vf q01 = vadd(vset(1.0000000754953529f), vmul(vset(0.6931472067106389f), f));
    const vf q23 = vadd(vset(0.2402210735581668f), vmul(vset(0.05550327214170959f), f));
    const vf q45 = vadd(vset(0.0096760370984104f), vmul(vset(0.00134004321786214f), f));
    const vf q = vadd(vadd(q01, vmul(f2, q23)), vmul(f4, q45));
    // q * 2^n is a normal float for every lane kept (y >= -126 and q >= 1 at n = -126; q < 1.5
    // at n = 127), so adding n to q's exponent field is exactly the product.
    return vsel_ge(x, vset(0x1p-40f), vscale_pow2(q, n), vset(0.0f));
}

// k_elem_error: (code - z) * s - x with code - z = clamp(rq, -z, maxq - z), the same integer
// as clamp(rq + z, 0, maxq) - z, without the two shifts.
template <bool Squared>
QFORGE_KFN vf k_elem_error(vf x, vf s, vf r, vf qlo, vf qhi, vf p) noexcept {
    const vf q = vmin(vmax(k_round_quotient(x, s, r), qlo), qhi);
    const vf e = vsub(vmul(q, s), x);  // q * s is exact in float
    if constexpr (Squared) {
        return vmul(e, e);
    } else {
        return k_pow_abs(e, p);
    }
}

template <bool Weighted, bool Squared>
QFORGE_KFN float k_error_exact(const float* w, const float* imp, std::size_t n, const grid_params& gp) noexcept;

// k_error_fast: the error with each quotient rounded as round(x * (1/s)), and a check that no
// lane came near a tie. The code of a lane can then differ from k_round_quotient's only where
// |t| >= 256, and there both are clamped to the same end of the code range (every code is
// within -255..255 after the shift), since t is within |t| 2^-22 < 2^-12 of fl(x / s) below
// 256. The largest distance to the rounded value is kept with vmax_magnitude, where the NaN
// of an infinite t (a clamped lane) sticks and hides the lane's other distances, so a NaN
// sends the group to the check of k_only_exact_ties, which skips lanes at |t| >= 256.
// Returns false (and no error) when some lane was within 2^-12 of a half-integer: the caller
// then takes the exact path.
// k_only_exact_ties: whether every lane of w[0..n) whose x * (1/s) lies within 2^-12 of a
// half-integer h (below 256 in magnitude) is an exact tie x == h * s. At an exact tie both
// neighbouring codes are s / 2 away from x (and a clamped neighbour is the other one), so
// the error term is the same whichever way the quotient rounds: the fast error stands.
// Exact ties are common (bf16 weights over f16 scales of few significant bits).
QFORGE_KFN bool k_only_exact_ties(const float* w, std::size_t n, const grid_params& gp) noexcept {
    const vf s = vset(gp.scale), r = vset(gp.rinv), near = vset(0.5f - 0x1p-12f), half = vset(0.5f);
    const vf big = vset(256.0f), zero = vset(0.0f);
    for (std::size_t i = 0; i < n; i += lanes) {
        alignas(64) float wb[lanes] = {};
        const vf x = i + lanes <= n ? vload(w + i) : (std::memcpy(wb, w + i, (n - i) * sizeof(float)), vload(wb));
        const vf t = vmul(x, r), rr = vround(t);
        const vf d = vabs(vsub(t, rr));
        const vf h = vadd(rr, vsel_ge(t, rr, half, vsub(zero, half)));
        const vf miss = vabs(vsub(x, vmul(h, s)));  // exactly 0 on a true tie
        // A lane counts when it is near a tie, below 256 in magnitude and not an exact tie.
        const vf counted = vsel_ge(vabs(t), big, zero, vsel_ge(zero, miss, zero, d));
        if (vany_gt(counted, near)) return false;
    }
    return true;
}

// Whether the largest distances (k_error_step's dmax) leave a lane maybe near a tie.
QFORGE_KFN bool k_came_near(vf dmax) noexcept {
    return vany_gt(dmax, vset(0.5f - 0x1p-12f)) || vany_nonfinite(dmax);
}

// k_sum8: an error's 8 partial sums added in the one order every ISA uses,
// ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)).
QFORGE_KFN float k_sum8(acc8 acc) noexcept {
    alignas(32) float part[8];
    acc_store(part, acc);
    return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// One step of an error in the defined order, keeping each lane's largest distance to its
// rounded quotient in dmax (the near-tie watch).
template <bool Weighted, bool Squared>
QFORGE_KFN void k_error_step(vf x, vf iw, vf s, vf r, vf z, vf hi, vf p, acc8& acc, vf& dmax) noexcept {
    const vf t = vmul(x, r), rr = vround(t);
    dmax = vmax_magnitude(vsub(t, rr), dmax);
    const vf e = vsub(vmul(vmin(vmax(rr, z), hi), s), x);
    vf term;
    if constexpr (Squared) term = vmul(e, e);
    else term = k_pow_abs(e, p);
    if constexpr (Weighted) term = vmul(term, iw);
    acc = acc_add(acc, term);
}

// The unweighted square without the near-tie watch: nothing says whether a lane came near a
// tie, and the sum takes fused multiply-adds where the ISA has them, in acc_free's order
// (k_square_best_proven bounds it; its slack covers both): a third fewer operations on AVX2.
// The clamp comes first: the same codes, by vround_small, or with ByInstruction by vround
// (simd/tuning.hpp, detail::avx2_round_by_instruction).
template <bool ByInstruction>
QFORGE_KFN void k_square_step_free(vf x, vf s, vf r, vf z, vf hi, acc_free& acc) noexcept {
    const vf t = vmin(vmax(vmul(x, r), z), hi);
    acc = acc_add_square(acc, vmul_exact_sub(ByInstruction ? vround(t) : vround_small(t), s, x));
}

template <bool Weighted, bool Squared>
QFORGE_KFN bool k_error_fast(const float* w, const float* imp, std::size_t n, const grid_params& gp, float& out) noexcept {
    const vf s = vset(gp.scale), r = vset(gp.rinv), p = vset(gp.norm);
    const vf z = vset(-gp.zero), hi = vset(gp.maxq - gp.zero);
    acc8 acc = acc_zero();
    vf dmax = vset(0.0f);
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes)
        k_error_step<Weighted, Squared>(vload(w + i), Weighted ? vload(imp + i) : s, s, r, z, hi, p, acc, dmax);
    if (i < n) {
        alignas(64) float wb[lanes] = {};
        alignas(64) float ib[lanes] = {};
        std::memcpy(wb, w + i, (n - i) * sizeof(float));
        if constexpr (Weighted) std::memcpy(ib, imp + i, (n - i) * sizeof(float));
        k_error_step<Weighted, Squared>(vload(wb), vload(ib), s, r, z, hi, p, acc, dmax);
    }
    if (k_came_near(dmax) && !k_only_exact_ties(w, n, gp)) return false;
    out = k_sum8(acc);
    return true;
}

template <bool Weighted, bool Squared>
QFORGE_KFN float k_error_t(const float* w, const float* imp, std::size_t n, const grid_params& gp) noexcept {
    float e;
    if (k_error_fast<Weighted, Squared>(w, imp, n, gp, e)) return e;
    return k_error_exact<Weighted, Squared>(w, imp, n, gp);
}

template <bool Weighted, bool Squared>
QFORGE_KFN float k_error_exact(const float* w, const float* imp, std::size_t n, const grid_params& gp) noexcept {
    const vf s = vset(gp.scale), r = vset(gp.rinv), p = vset(gp.norm);
    const vf z = vset(-gp.zero), hi = vset(gp.maxq - gp.zero);
    acc8 acc = acc_zero();
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) {
        vf e = k_elem_error<Squared>(vload(w + i), s, r, z, hi, p);
        if constexpr (Weighted) e = vmul(e, vload(imp + i));
        acc = acc_add(acc, e);
    }
    if (i < n) {
        alignas(64) float wb[lanes] = {};
        alignas(64) float ib[lanes] = {};
        std::memcpy(wb, w + i, (n - i) * sizeof(float));
        vf e = k_elem_error<Squared>(vload(wb), s, r, z, hi, p);
        if constexpr (Weighted) {
            std::memcpy(ib, imp + i, (n - i) * sizeof(float));
            e = vmul(e, vload(ib));
        }
        acc = acc_add(acc, e);
    }
    return k_sum8(acc);
}

QFORGE_KFN float k_error(const float* w, const float* imp, std::size_t n, const grid_params& gp) noexcept {
    const bool sq = gp.norm == 2.0f;
    if (imp) return sq ? k_error_t<true, true>(w, imp, n, gp) : k_error_t<true, false>(w, imp, n, gp);
    return sq ? k_error_t<false, true>(w, imp, n, gp) : k_error_t<false, false>(w, imp, n, gp);
}

// Candidates as columns: k_search_groups has them so from make_grids' vectors, and calls
// with grid_params gather them.
struct candidate_columns {
    const float *scale, *rinv, *neg_zero, *top;  ///< s, 1 / s, -zero, maxq - zero
    float norm;
    /// Candidate c's grid_params; maxq = top + zero exactly (both small integers).
    grid_params params(std::size_t c) const noexcept {
        return {scale[c], rinv[c], -neg_zero[c], top[c] - neg_zero[c], norm};
    }
};

// k_errors_c: C candidates in one pass over the group. Each candidate keeps its own
// accumulator, fed in the same element order as k_error_fast, so each result is k_error's to
// the bit; the C independent add chains hide the add latency that bounds a single candidate
// on a short group, and four of them are summed at once (acc_sum4, k_sum8's order). A
// candidate that came near a tie is redone by k_error_exact.
template <bool Weighted, bool Squared, std::size_t C>
QFORGE_KFN void k_errors_c(const float* w, const float* imp, std::size_t n, const candidate_columns& k, float* out) noexcept {
    const float *sc = k.scale, *rc = k.rinv, *zc = k.neg_zero, *hc = k.top;
    const vf norm = vset(k.norm);
    acc8 acc[C];
    vf dmax[C];
#pragma GCC unroll 8
    for (std::size_t c = 0; c < C; ++c) acc[c] = acc_zero(), dmax[c] = vset(0.0f);
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) {
        const vf x = vload(w + i), iw = Weighted ? vload(imp + i) : x;
#pragma GCC unroll 8
        for (std::size_t c = 0; c < C; ++c)
            k_error_step<Weighted, Squared>(x, iw, vset(sc[c]), vset(rc[c]), vset(zc[c]), vset(hc[c]), norm, acc[c],
                                            dmax[c]);
    }
    if (i < n) {
        alignas(64) float wb[lanes] = {};
        alignas(64) float ib[lanes] = {};
        std::memcpy(wb, w + i, (n - i) * sizeof(float));
        if constexpr (Weighted) std::memcpy(ib, imp + i, (n - i) * sizeof(float));
        const vf x = vload(wb), iw = vload(ib);
#pragma GCC unroll 8
        for (std::size_t c = 0; c < C; ++c)
            k_error_step<Weighted, Squared>(x, iw, vset(sc[c]), vset(rc[c]), vset(zc[c]), vset(hc[c]), norm, acc[c],
                                            dmax[c]);
    }
    if constexpr (C == 4) acc_sum4(acc[0], acc[1], acc[2], acc[3], out);
    for (std::size_t c = 0; c < C; ++c) {
        if (k_came_near(dmax[c])) {
            const grid_params gp = k.params(c);
            if (!k_only_exact_ties(w, n, gp)) {
                out[c] = k_error_exact<Weighted, Squared>(w, imp, n, gp);
                continue;
            }
        }
        if constexpr (C != 4) out[c] = k_sum8(acc[c]);
    }
}

// k_errors over candidates as columns. Four candidates at once for the square. The power is
// bound by its polynomials, not by the add chain, and gains nothing from sharing a pass
// (measured), so it and the leftover candidates go one at a time: fewer instances keep every
// including TU quicker to build.
template <bool Weighted>
QFORGE_KFN void k_column_errors(const float* w, const float* imp, std::size_t n, const candidate_columns& k,
                                std::size_t count, float* out) noexcept {
    std::size_t c = 0;
    if (k.norm == 2.0f) {
        for (; c + 4 <= count; c += 4)
            k_errors_c<Weighted, true, 4>(w, imp, n, {k.scale + c, k.rinv + c, k.neg_zero + c, k.top + c, k.norm}, out + c);
        for (; c < count; ++c) out[c] = k_error_t<Weighted, true>(w, imp, n, k.params(c));
        return;
    }
    for (; c < count; ++c) out[c] = k_error_t<Weighted, false>(w, imp, n, k.params(c));
}

// The unweighted square's errors as k_square_best_proven bounds them: four candidates a pass
// without the near-tie watch, their sums in acc_free's order (k_square_step_free); the
// leftover candidates exact.
template <bool ByInstruction>
QFORGE_KFN void k_square_errors_free_t(const float* w, std::size_t n, const candidate_columns& k, std::size_t count,
                                       float* out) noexcept {
    std::size_t c = 0;
    for (; c + 4 <= count; c += 4) {
        const float *sc = k.scale + c, *rc = k.rinv + c, *zc = k.neg_zero + c, *hc = k.top + c;
        acc_free acc[4] = {acc_free_zero(), acc_free_zero(), acc_free_zero(), acc_free_zero()};
        std::size_t i = 0;
        for (; i + lanes <= n; i += lanes) {
            const vf x = vload(w + i);
#pragma GCC unroll 4
            for (std::size_t j = 0; j < 4; ++j)
                k_square_step_free<ByInstruction>(x, vset(sc[j]), vset(rc[j]), vset(zc[j]), vset(hc[j]), acc[j]);
        }
        if (i < n) {  // padding lanes: x = 0 codes to 0 exactly
            alignas(64) float wb[lanes] = {};
            std::memcpy(wb, w + i, (n - i) * sizeof(float));
            const vf x = vload(wb);
#pragma GCC unroll 4
            for (std::size_t j = 0; j < 4; ++j)
                k_square_step_free<ByInstruction>(x, vset(sc[j]), vset(rc[j]), vset(zc[j]), vset(hc[j]), acc[j]);
        }
        acc_free_sum4(acc[0], acc[1], acc[2], acc[3], out + c);
    }
    for (; c < count; ++c) out[c] = k_error_t<false, true>(w, nullptr, n, k.params(c));
}
QFORGE_KFN void k_square_errors_free(const float* w, std::size_t n, const candidate_columns& k, std::size_t count,
                                     float* out) noexcept {
    constexpr bool rounding_differs = ::qforge::simd::detail::has_rounding_forms(QFORGE_KERNEL_ISA);
    if (rounding_differs && ::qforge::simd::detail::avx2_round_by_instruction().load(std::memory_order_relaxed))
        return k_square_errors_free_t<rounding_differs>(w, n, k, count, out);
    k_square_errors_free_t<false>(w, n, k, count, out);
}

QFORGE_KFN void k_errors(const float* w, const float* imp, std::size_t n, const grid_params* p, std::size_t count,
                         float* out) noexcept {
    // Candidates share one norm in every caller; a batch that mixes norms is split. Their
    // columns are gathered a chunk at a time.
    constexpr std::size_t chunk = 32;
    alignas(64) float sc[chunk], rc[chunk], zc[chunk], hc[chunk];
    std::size_t c = 0;
    while (c < count) {
        std::size_t e = c + 1;
        while (e < count && e - c < chunk && p[e].norm == p[c].norm) ++e;
        for (std::size_t j = c; j < e; ++j)
            sc[j - c] = p[j].scale, rc[j - c] = p[j].rinv, zc[j - c] = -p[j].zero, hc[j - c] = p[j].maxq - p[j].zero;
        const candidate_columns k{sc, rc, zc, hc, p[c].norm};
        if (imp) k_column_errors<true>(w, imp, n, k, e - c, out + c);
        else k_column_errors<false>(w, nullptr, n, k, e - c, out + c);
        c = e;
    }
}

// k_settle_ties4: k_settle_ties for the four steps of k_encode_t at w, from scratch. Out of
// line and cold: inlined, its values (the quotients, their distances) stayed live across the
// hot loop and crowded AVX2's sixteen registers, which spilled them on every step.
// The steps that reach it are nearly all true ties (BF16 weights, g64: every one of 4.4% of
// the chunks), so they are settled without a branch: a lane on a true tie takes round(h),
// as in k_settle_ties, which does so only in a step with a lane near a tie. The two agree:
// x / s = h puts t within |h| 2^-23 of h, inside the window wherever |h| < 8 (maxq + 1), and
// past maxq + 1 both roundings clamp to the same code. Only a lane near a tie but off one
// sends the four steps to k_settle_ties itself. A branch per step mispredicted at about one
// step in four and cost a tenth of RTN + pack.
[[gnu::noinline, gnu::cold]] QFORGE_KFN void k_settle_ties4(const float* w, float scale, float rinv, float near,
                                                            vf* rr) noexcept {
    const vf s = vset(scale), r = vset(rinv), nr = vset(near), zero = vset(0.0f);
    vf off_tie = zero;  // the largest distance to a half-integer among lanes not on a true tie
    for (std::size_t k = 0; k < 4; ++k) {
        const vf x = vload(w + k * lanes), t = vmul(x, r), rd = vround(t);
        const vf d = vabs(vsub(t, rd));
        const vf h = vadd(rd, vsel_ge(t, rd, vset(0.5f), vset(-0.5f)));
        const vf miss = vabs(vsub(x, vmul(h, s)));  // exactly 0 on a true tie
        rr[k] = vsel_ge(zero, miss, vround(h), rd);
        off_tie = vmax(off_tie, vsel_ge(zero, miss, zero, d));
    }
    if (!vany_gt(off_tie, nr)) return;
    for (std::size_t k = 0; k < 4; ++k) {
        const vf x = vload(w + k * lanes), t = vmul(x, r);
        rr[k] = k_settle_ties(x, s, t, vround(t), nr);
    }
}

// k_encode_t: the codes of one group; with Snr, also the group's SNR terms (the input and
// its decoded value (code - z) * s, exact in float) added to `acc` in stream order. A tail's
// padding lanes hold 0, which code z decodes to exactly, so they add +0.
template <bool Snr>
[[gnu::always_inline]] QFORGE_KFN void k_encode_t(const float* w, std::size_t n, const grid_params& gp,
                                                  std::uint8_t* codes, snr_acc& acc) noexcept {
    const vf s = vset(gp.scale), r = vset(gp.rinv), z = vset(gp.zero), hi = vset(gp.maxq);
    std::size_t i = 0;
    // Four steps at a time with one near-tie branch for all four; when it fires, each step
    // takes k_round_quotient's exact path, so the codes are those of the loop below. The
    // window is one constant per group: only lanes with |t| <= maxq + 1 can get a code that
    // depends on the rounding (beyond, both roundings clamp to the same end of 0..maxq), and
    // there t is within (maxq + 1) 2^-22 of fl(x / s); the window is 4x that.
    const float near_tie = 0.5f - (gp.maxq + 1.0f) * 0x1p-20f;
    const vf lo = vset(0.0f), near = vset(near_tie);
    const code_clamp clamp = make_code_clamp(gp.zero, gp.maxq);
    for (; i + 4 * lanes <= n; i += 4 * lanes) {
        const vf t0 = vmul(vload(w + i), r), t1 = vmul(vload(w + i + lanes), r), t2 = vmul(vload(w + i + 2 * lanes), r),
                 t3 = vmul(vload(w + i + 3 * lanes), r);
        vf r0 = vround(t0), r1 = vround(t1), r2 = vround(t2), r3 = vround(t3);
        // One test and branch for the four steps; rarely taken.
        if (vany_gt4(vabs(vsub(t0, r0)), vabs(vsub(t1, r1)), vabs(vsub(t2, r2)), vabs(vsub(t3, r3)), near)) {
            vf settled[4];
            k_settle_ties4(w + i, gp.scale, gp.rinv, near_tie, settled);
            r0 = settled[0], r1 = settled[1], r2 = settled[2], r3 = settled[3];
        }
        if constexpr (Snr) {  // the decoded values need the codes as floats
            const vf x0 = vload(w + i), x1 = vload(w + i + lanes), x2 = vload(w + i + 2 * lanes),
                     x3 = vload(w + i + 3 * lanes);
            const vf q0 = vmin(vmax(vadd(r0, z), lo), hi), q1 = vmin(vmax(vadd(r1, z), lo), hi);
            const vf q2 = vmin(vmax(vadd(r2, z), lo), hi), q3 = vmin(vmax(vadd(r3, z), lo), hi);
            vstore_codes4(codes + i, q0, q1, q2, q3);
            acc = snr_add(acc, x0, vmul(vsub(q0, z), s));
            acc = snr_add(acc, x1, vmul(vsub(q1, z), s));
            acc = snr_add(acc, x2, vmul(vsub(q2, z), s));
            acc = snr_add(acc, x3, vmul(vsub(q3, z), s));
        } else {
            vstore_codes4_clamped(codes + i, r0, r1, r2, r3, clamp);
        }
    }
    for (; i + lanes <= n; i += lanes) {
        const vf x = vload(w + i), q = k_code(x, s, r, z, hi);
        vstore_codes(codes + i, q);
        if constexpr (Snr) acc = snr_add(acc, x, vmul(vsub(q, z), s));
    }
    if (i < n) {
        alignas(64) float wb[lanes] = {};
        std::uint8_t cb[lanes];
        std::memcpy(wb, w + i, (n - i) * sizeof(float));
        const vf x = vload(wb), q = k_code(x, s, r, z, hi);
        vstore_codes(cb, q);
        std::memcpy(codes + i, cb, n - i);
        if constexpr (Snr) acc = snr_add(acc, x, vmul(vsub(q, z), s));
    }
}

QFORGE_KFN void k_encode(const float* w, std::size_t n, const grid_params& gp, std::uint8_t* codes) noexcept {
    snr_acc unused{};
    k_encode_t<false>(w, n, gp, codes, unused);
}

QFORGE_KFN void k_min_max(const float* w, std::size_t n, float* mn, float* mx) noexcept {
    vf lo = vset(w[0]), hi = lo;
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) {
        const vf x = vload(w + i);
        lo = vmin(lo, x);
        hi = vmax(hi, x);
    }
    if (i < n) {
        alignas(64) float wb[lanes];
        for (float& v : wb) v = w[0];  // padding that cannot move the extremes
        std::memcpy(wb, w + i, (n - i) * sizeof(float));
        const vf x = vload(wb);
        lo = vmin(lo, x);
        hi = vmax(hi, x);
    }
    *mn = vhmin(lo);
    *mx = vhmax(hi);
}

// Many groups per call: groups of gsize consecutive values, the last one shorter when n is
// not a multiple. Each group is exactly the single-group kernel's work (same results), but
// the loop over groups runs inside one target function, with the kernels inlined, instead of
// one indirect call per group.
QFORGE_KFN void k_min_max_groups(const float* w, std::size_t n, std::size_t gsize, float* mn, float* mx) noexcept {
    for (std::size_t c = 0, j = 0; c < n; c += gsize, ++j) k_min_max(w + c, n - c < gsize ? n - c : gsize, mn + j, mx + j);
}

QFORGE_KFN void k_encode_groups(const float* w, std::size_t n, std::size_t gsize, const grid_params* p,
                                std::uint8_t* codes, double* snr) noexcept {
    if (!snr) {
        snr_acc unused{};
        for (std::size_t c = 0, j = 0; c < n; c += gsize, ++j)
            k_encode_t<false>(w + c, n - c < gsize ? n - c : gsize, p[j], codes + c, unused);
        return;
    }
    // Each group restarts the 8-element steps at its first value, so with gsize % 4 == 0 (the
    // callers' promise when snr is given) every step starts on partial 0, the stream order.
    snr_acc acc = snr_load(snr);
    for (std::size_t c = 0, j = 0; c < n; c += gsize, ++j)
        k_encode_t<true>(w + c, n - c < gsize ? n - c : gsize, p[j], codes + c, acc);
    snr_store(snr, acc);
}

// A power-of-two divisor is a multiplication by its exact reciprocal: both are the correctly
// rounded a / div, subnormal results included.
QFORGE_KFN bool k_div_is_pow2(float div) noexcept {
    std::uint32_t div_bits;
    std::memcpy(&div_bits, &div, sizeof div_bits);
    const std::uint32_t div_exp = (div_bits >> 23) & 0xFFu;  // a normal power of two whose reciprocal is normal too
    return (div_bits & 0x807FFFFFu) == 0 && div_exp > 1 && div_exp < 253;
}

// One vector of candidates' grids from their inputs a (and b): the stored scale (its bits to
// hb), 1 / s and the zero.
struct grid_vectors {
    vf scale, rinv, zero;
};
QFORGE_KFN grid_vectors k_grid_vectors(vf va, vf vb, const grid_recipe& rc, bool div_is_pow2, std::uint16_t* hb) noexcept {
    const vf vmaxq = vset(static_cast<float>((1 << rc.bits) - 1)), zero = vset(0.0f);
    vf raw;
    if (rc.rule == grid_rule::symmetric) {
        raw = div_is_pow2 ? vmul(va, vset(1.0f / rc.div)) : vdiv(va, vset(rc.div));
    } else {
        vf range = vsub(vb, va);
        if (rc.rule == grid_rule::awq_range) range = vsel_ge(vset(1e-5f), range, vset(1e-5f), range);
        raw = vdiv(range, vmaxq);
    }
    const vf s = vround_scale(raw, rc.bf16, hb);
    const vf z = rc.rule == grid_rule::symmetric ? vset(static_cast<float>(1 << (rc.bits - 1)))
                                                  : vmin(vmax(vround(vdiv(vsub(zero, va), s)), zero), vmaxq);
    return {s, vdiv(vset(1.0f), s), z};
}

// The first candidate whose stored scale overflowed (its bits an infinity or NaN), or -1.
QFORGE_KFN std::int64_t k_first_overflow(const std::uint16_t* hb, std::size_t m, std::size_t j0, bool bf16) noexcept {
    const std::uint16_t limit = bf16 ? 0x7F80 : 0x7C00;
    for (std::size_t j = 0; j < m; ++j)
        if ((hb[j] & 0x7FFFu) >= limit) return static_cast<std::int64_t>(j0 + j);
    return -1;
}

QFORGE_KFN std::int64_t k_make_grids_t(const float* a, const float* b, std::size_t count, const grid_recipe& rc,
                                       std::uint16_t* scale_bits, grid_params* grids) noexcept {
    const float maxq = static_cast<float>((1 << rc.bits) - 1);
    const bool div_is_pow2 = k_div_is_pow2(rc.div);
    std::int64_t overflow = -1;
    for (std::size_t j0 = 0; j0 < count; j0 += lanes) {
        const std::size_t m = count - j0 < lanes ? count - j0 : lanes;
        alignas(64) float ab[lanes] = {}, bb[lanes] = {}, sv[lanes], rv[lanes], zv[lanes];
        std::uint16_t hb[lanes];
        // Whole vectors are loaded in place: a copy through a stack buffer stalled every
        // load on store forwarding (a quarter of this kernel's time).
        vf va, vb = vset(0.0f);
        if (m == lanes) {
            va = vload(a + j0);
            if (b) vb = vload(b + j0);
        } else {
            std::memcpy(ab, a + j0, m * sizeof(float));
            if (b) std::memcpy(bb, b + j0, m * sizeof(float));
            va = vload(ab), vb = vload(bb);
        }
        const grid_vectors g = k_grid_vectors(va, vb, rc, div_is_pow2, hb);
        vstore(sv, g.scale);
        vstore(rv, g.rinv);
        vstore(zv, g.zero);
        for (std::size_t j = 0; j < m; ++j) {
            scale_bits[j0 + j] = hb[j];
            grids[j0 + j] = {sv[j], rv[j], zv[j], maxq, rc.norm};
        }
        if (overflow < 0) overflow = k_first_overflow(hb, m, j0, rc.bf16);
    }
    return overflow;
}

QFORGE_KFN std::int64_t k_make_grids(const float* a, const float* b, std::size_t count, const grid_recipe& rc,
                                     std::uint16_t* scale_bits, grid_params* grids) noexcept {
    return k_make_grids_t(a, b, count, rc, scale_bits, grids);
}

template <int Kind>  // 0: F32, 1: F16, 2: BF16
QFORGE_KFN bool k_convert_t(const std::byte* src, std::size_t n, float* dst) noexcept {
    constexpr std::size_t es = Kind == 0 ? 4 : 2;
    bool bad = false;
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) {
        vf x;
        if constexpr (Kind == 0) x = vload_f32_bytes(src + i * es);
        else if constexpr (Kind == 1) x = vload_f16_bytes(src + i * es);
        else x = vload_bf16_bytes(src + i * es);
        bad = bad || vany_nonfinite(x);
        vstore(dst + i, x);
    }
    for (; i < n; ++i) {
        float v;
        if constexpr (Kind == 0) {
            std::memcpy(&v, src + i * es, 4);
        } else {
            std::uint16_t h;
            std::memcpy(&h, src + i * es, 2);
            v = Kind == 1 ? fp16_to_float(h) : bf16_to_float(h);
        }
        bad = bad || !(std::fabs(v) <= 3.40282347e38f);
        dst[i] = v;
    }
    return bad;
}

QFORGE_KFN std::int64_t k_to_f32(const std::byte* src, dtype type, std::size_t n, float* dst) noexcept {
    bool bad = false;
    if (type == dtype::F32) bad = k_convert_t<0>(src, n, dst);
    else if (type == dtype::F16) bad = k_convert_t<1>(src, n, dst);
    else bad = k_convert_t<2>(src, n, dst);
    if (!bad) return -1;
    for (std::size_t i = 0; i < n; ++i)
        if (!(std::fabs(dst[i]) <= 3.40282347e38f)) return static_cast<std::int64_t>(i);
    return -1;
}

// The moments of k_best_by_bound's candidates (k_moments_c), padded to whole vectors.
struct candidate_moments {
    float s1[max_search_candidates], s2[max_search_candidates], s3[max_search_candidates];
};

// k_moments_c: for C candidates in one pass, S1 = sum v |e|, S2 = sum v e^2 and S3 = sum v |e|^3
// (v the importance, or 1), with e the error k_error_fast would see. They
// only feed k_best_by_bound's bounds, which allow for the way they differ from the exact
// sums: the quotient is rounded without the near-tie check (a code can then differ where
// x / s is within |t| 2^-22 of a half-integer, changing that |e| by at most 2^-20 |t| < 2.5e-4
// of it), and the sums are in any order.
// The candidates are the search's columns, as in k_errors_c. Each candidate's four vectors
// are set once per call: set from a grid_params per step, with the sums in arrays, the
// candidate loop stayed rolled and went through memory (half the norm-2.4 search's time).
template <bool Weighted, std::size_t C>
[[gnu::always_inline]] QFORGE_KFN void k_moments_step(vf x, vf iw, const vf* sc, const vf* rc, const vf* zc, const vf* hc,
                                                      vf* a1, vf* a2, vf* a3) noexcept {
#pragma GCC unroll 8
    for (std::size_t c = 0; c < C; ++c) {
        const vf q = vmin(vmax(vround(vmul(x, rc[c])), zc[c]), hc[c]);
        const vf e = vabs(vsub(vmul(q, sc[c]), x));
        const vf ev = Weighted ? vmul(e, iw) : e;
        const vf e2v = vmul(ev, e);
        a1[c] = vadd(a1[c], ev);
        a2[c] = vadd(a2[c], e2v);
        a3[c] = vadd(a3[c], vmul(e2v, e));
    }
}

template <bool Weighted, std::size_t C>
QFORGE_KFN void k_moments_c(const float* w, const float* imp, std::size_t n, const candidate_columns& k,
                            candidate_moments& out, std::size_t first) noexcept {
    vf a1[C], a2[C], a3[C], sc[C], rc[C], zc[C], hc[C];
#pragma GCC unroll 8
    for (std::size_t c = 0; c < C; ++c) {
        a1[c] = vset(0.0f), a2[c] = vset(0.0f), a3[c] = vset(0.0f);
        const std::size_t j = first + c;
        sc[c] = vset(k.scale[j]), rc[c] = vset(k.rinv[j]), zc[c] = vset(k.neg_zero[j]), hc[c] = vset(k.top[j]);
    }
    const vf x1 = vset(1.0f);
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes)
        k_moments_step<Weighted, C>(vload(w + i), Weighted ? vload(imp + i) : x1, sc, rc, zc, hc, a1, a2, a3);
    if (i < n) {  // padding lanes: x = 0 codes to 0 exactly, and weight 0
        alignas(64) float wb[lanes] = {}, ib[lanes] = {};
        std::memcpy(wb, w + i, (n - i) * sizeof(float));
        if constexpr (Weighted) std::memcpy(ib, imp + i, (n - i) * sizeof(float));
        k_moments_step<Weighted, C>(vload(wb), vload(ib), sc, rc, zc, hc, a1, a2, a3);
    }
    if constexpr (C == 4) {  // the lanes' sums of four candidates at once: scalar, they were a tenth of the search
        acc_free_sum4(a1[0], a1[1], a1[2], a1[3], out.s1 + first);
        acc_free_sum4(a2[0], a2[1], a2[2], a2[3], out.s2 + first);
        acc_free_sum4(a3[0], a3[1], a3[2], a3[3], out.s3 + first);
    } else {
        for (std::size_t c = 0; c < C; ++c) {
            alignas(64) float l1[lanes], l2[lanes], l3[lanes];
            vstore(l1, a1[c]);
            vstore(l2, a2[c]);
            vstore(l3, a3[c]);
            float t1 = 0, t2 = 0, t3 = 0;
            for (std::size_t k = 0; k < lanes; ++k) t1 += l1[k], t2 += l2[k], t3 += l3[k];
            out.s1[first + c] = t1, out.s2[first + c] = t2, out.s3[first + c] = t3;
        }
    }
}

// The cubic lower bounds of k_best_by_bound for a norm p in [2, 3]: for each contact point
// xi, P(u) = c1 u + c2 u^2 + c3 u^3 meets g(u) = u^p at 0, at xi with g's slope, and at 1, so
// that u^p >= P(u) on [0, 1] (see k_best_by_bound). xi = 1/2 fits rounding errors spread
// evenly up to the largest one; xi = 1/4 fits groups where a clamped outlier's error is the
// largest. The coefficients in closed form, from P(xi) = xi^p, P'(xi) = p xi^(p-1), P(1) = 1:
//   r1 = (xi^p - xi) / (xi (xi - 1)),  c3 = (p xi^(p-1) - 1 - r1 (2 xi - 1)) / (xi (xi - 1)),
//   c2 = r1 - c3 (xi + 1),  c1 = 1 - c2 - c3;
// computed in double, within 1e-15 of the exact ones (k_moment_bounds allows 2^-30).
struct cubic_bounds {
    static constexpr std::size_t count = 2;
    float c1[count] = {}, c2[count] = {}, c3[count] = {};
    cubic_bounds() noexcept = default;
    explicit cubic_bounds(float norm) noexcept {
        const double p = norm, contact[count] = {0.5, 0.25};
        for (std::size_t j = 0; j < count; ++j) {
            const double x = contact[j], d = x * (x - 1);
            const double r1 = (std::pow(x, p) - x) / d;
            const double k3 = (p * std::pow(x, p - 1) - 1 - r1 * (2 * x - 1)) / d, k2 = r1 - k3 * (x + 1);
            c1[j] = static_cast<float>(1 - k2 - k3), c2[j] = static_cast<float>(k2), c3[j] = static_cast<float>(k3);
        }
    }
};

// k_largest_errors: for the `lanes` candidates from `first` (whole vectors of columns), a
// value at least every |e| that k_moments_c or the power error sees over values in [lo, hi]
// (0 among them: the moments' padding lanes). Taken from the grid, not measured: a max per
// element and candidate was one of the nine operations of k_moments_step on the two ports
// that multiply. Codes q in [z, h] (z = -zero, h = maxq - zero) scale by s:
//  * a value the clamp moves lies past h s (or z s) and its error is at most hi - h s (or
//    z s - lo);
//  * any other's code is within 0.5 + |x / s| 2^-23 of x / s (the quotient's roundings,
//    either rounding of it), |x / s| <= max(|z|, |h|) + 1;
// and the error's own roundings (q s, the difference) are within |q s| 2^-24 and 2^-24 of it:
// all under the slack s (|z| + |h| + 2) 2^-21 and the factor 1 + 2^-20, which also hold this
// function's own roundings.
QFORGE_KFN vf k_largest_errors(const candidate_columns& k, std::size_t first, float lo, float hi) noexcept {
    const vf s = vload(k.scale + first), z = vload(k.neg_zero + first), h = vload(k.top + first);
    const vf clamped = vmax(vsub(vset(hi), vmul(h, s)), vsub(vmul(z, s), vset(lo)));
    const vf slack = vmul(s, vmul(vadd(vadd(vabs(z), vabs(h)), vset(2.0f)), vset(0x1p-21f)));
    return vmul(vadd(vmax(vmul(s, vset(0.5f)), clamped), slack), vset(1 + 0x1p-20f));
}

// k_moment_bounds: for the `lanes` candidates from `first` (a multiple of lanes), a lower
// bound of their power errors (see k_best_by_bound), the largest of the cubic_bounds'
// b^p sum v P(|e| / b) = c1 b^(p-1) S1 + c2 b^(p-2) S2 + c3 b^(p-3) S3; -inf where it cannot
// be computed. b is `largest` (k_largest_errors). Each term is moved against the bound by
// `margin` (k_bound_margin) of itself and 2^-30 of the terms' sum (the
// coefficients' rounding); then what the terms the power counts as 0 (|e| < 2^-40) may add
// to the sum is taken off: with u <= 1, at most c1 b^(p-1) `tiny1` + (c2 + c3) b^(p-2) `tiny2`
// for positive c, tiny1 and tiny2 at least the weights' sum times 2^-40 and 2^-80. b^(p-1) is
// k_pow_abs's. In linear terms, not logs: no power of the moments is needed.
QFORGE_KFN void k_moment_bounds(const candidate_moments& cm, std::size_t first, vf top, float p, const cubic_bounds& cb,
                                float margin, float tiny1, float tiny2, float* out) noexcept {
    const vf bp1 = k_pow_abs(top, vset(p - 1)), inv = vdiv(vset(1.0f), top);
    const vf bp2 = vmul(bp1, inv);
    const vf t1 = vmul(bp1, vload(cm.s1 + first)), t2 = vmul(bp2, vload(cm.s2 + first));
    const vf t3 = vmul(vmul(bp2, inv), vload(cm.s3 + first));
    const vf rounding = vmul(vadd(vadd(t1, t2), t3), vset(0x1p-30f)), m_ = vset(margin);
    vf best = vset(-INFINITY);
    for (std::size_t j = 0; j < cubic_bounds::count; ++j) {
        const vf u1 = vmul(vset(cb.c1[j]), t1), u2 = vmul(vset(cb.c2[j]), t2), u3 = vmul(vset(cb.c3[j]), t3);
        const vf spread = vadd(vadd(vabs(u1), vabs(u2)), vabs(u3));
        const float z1 = cb.c1[j] > 0 ? cb.c1[j] * tiny1 : 0.0f;
        const float z2 = (cb.c2[j] > 0 ? cb.c2[j] : 0.0f) + (cb.c3[j] > 0 ? cb.c3[j] : 0.0f);
        vf bound = vsub(vsub(vadd(vadd(u1, u2), u3), vmul(spread, m_)), rounding);
        bound = vsub(bound, vadd(vmul(bp1, vset(z1)), vmul(bp2, vset(z2 * tiny2))));
        best = vmax(best, bound);
    }
    // Tiny errors: a term the power counts as 0 could then be a large u. Past 2^120 (or NaN):
    // a sum may have overflowed.
    const vf ninf = vset(-INFINITY), big = vset(0x1p120f);
    best = vsel_ge(top, vset(0x1p-30f), best, ninf);
    best = vsel_ge(big, t1, best, ninf);
    best = vsel_ge(big, t2, best, ninf);
    best = vsel_ge(big, t3, best, ninf);
    vstore(out, best);
}

// k_bound_margin: the relative margin of k_best_by_bound's comparisons for a group of n
// values on grids of maxq, twice the most by which a computed value (a moment, b^(p-k), a
// power error) can stray from the exact one, relative to itself or each of its terms:
//  * a power term (k_pow_abs) is within 1.1e-5 of |e|^p (measured over |e| in 2^-38..2^22,
//    p 2.4, 2.7, 3), b^(p-1) likewise: 2e-5 each;
//  * sums of positive terms: each lane's or accumulator's chain holds at most n / 8 terms,
//    then at most 16 adds across lanes, and each term a few products: (n / 8 + 16) 2^-24,
//    once for the moments and once for the power error;
//  * the moments' codes skip the near-tie watch: where one differs, |e| moves by at most
//    2^-20 |t| of itself with |t| <= maxq + 2 (beyond, both codes clamp), |e|^3 by three
//    times that.
// At 4 bits and 64 values: 1.8e-4 (a fixed 2e-3 left 26% more power errors to compute).
QFORGE_KFN float k_bound_margin(std::size_t n, float maxq) noexcept {
    const float sums = static_cast<float>(n / 8 + 16) * 0x1p-24f, ties = 3 * (maxq + 2) * 0x1p-20f;
    return 2 * (4e-5f + 2 * sums + ties);
}

// What a skipped candidate's bound must exceed: best / (1 - margin) plus what underflowing
// terms may lose (n 2^-126).
QFORGE_KFN float k_bound_limit(float best, float margin, std::size_t n) noexcept {
    if (!(best < 0x1p120f)) return INFINITY;
    return best / (1 - margin) + static_cast<float>(n) * 0x1p-126f;
}

// k_best_by_bound: for a norm p in (2, 3], the candidate that k_errors and a strict-< scan
// would pick (the lowest power error, earliest on ties), computing the power error only for
// candidates that can still win: the power costs five times the moments below, and most
// candidates of a shrink grid cannot win. The bound on sum v |e|^p comes from the moments
// (k_moments_c): with b at least every |e|, u^p >= P(u) on [0, 1] for each of cubic_bounds'
// cubics, because h = u^p - P has h(0) = h(xi) = h'(xi) = h(1) = 0 and a fourth derivative
// p (p-1) (p-2) (p-3) u^(p-4) <= 0 for p in [2, 3] (Rolle: h(u) = h''''(eta) / 24 u (u - xi)^2
// (u - 1) >= 0). So the sum is at least b^p sum v P(|e| / b), a sum of S1, S2 and S3: within
// 0.5% for errors spread evenly up to b. (Hoelder's S2^(p-1) / S1^(p-2), the least sum that S1
// and S2 allow, is 3-4% under there and left twice as many candidates to the power error.)
// b comes from the grid and the group's extremes (k_largest_errors). The candidates' power
// errors are computed lowest bound first, each while its bound does not exceed the best
// error so far: the lowest bounds are the likeliest winners, and an early low error lets the
// rest be skipped (Student-t weights, g64, grid 100 / 0.2: 2.5 power errors a group against
// 3.3 with the least S2 first and the rest in list order, at the same margin). The bound is
// made safe against every way the computed values differ from exact ones: relative margins
// on the moments and the power error (k_bound_margin), and absolute ones for terms the power
// counts as 0 (|e| < 2^-40) or that underflow. The caller guarantees that no power term is
// clamped (|e| well below 2^42), that k's columns run to whole vectors and that mn and mx
// are the group's smallest and largest values (b is taken from them).
template <bool Weighted>
QFORGE_KFN std::size_t k_best_by_bound(const float* w, const float* imp, std::size_t n, float mn, float mx,
                                       const candidate_columns& k, std::size_t count, const cubic_bounds& cb) noexcept {
    alignas(64) candidate_moments cm;
    alignas(64) float bound[max_search_candidates];
    double v = static_cast<double>(n);
    if constexpr (Weighted) {
        v = 0;
        for (std::size_t i = 0; i < n; ++i) v += imp[i];
        v *= 1 + 1e-6;  // at least the exact sum
    }
    std::size_t c = 0;
    for (; c + 4 <= count; c += 4) k_moments_c<Weighted, 4>(w, imp, n, k, cm, c);
    for (; c < count; ++c) k_moments_c<Weighted, 1>(w, imp, n, k, cm, c);
    for (; c % lanes; ++c) cm.s1[c] = cm.s2[c] = cm.s3[c] = 0.0f;  // whole vectors of bounds
    const float lo = mn < 0.0f ? mn : 0.0f, hi = mx > 0.0f ? mx : 0.0f;
    const float margin = k_bound_margin(n, k.top[0] - k.neg_zero[0]);
    for (c = 0; c < count; c += lanes)
        k_moment_bounds(cm, c, k_largest_errors(k, c, lo, hi), k.norm, cb, margin, static_cast<float>(v * 0x1p-40),
                        static_cast<float>(v * 0x1p-80), bound + c);
    for (c = 0; c < count; ++c)  // an uncomputed bound proves nothing
        if (!(bound[c] == bound[c])) bound[c] = -INFINITY;
    bool tried[max_search_candidates] = {};
    std::size_t best = count;
    float best_err = 0.0f, limit = INFINITY;
    for (;;) {
        std::size_t next = count;
        for (c = 0; c < count; ++c)
            if (!tried[c] && bound[c] <= limit && (next == count || bound[c] < bound[next])) next = c;
        if (next == count) break;
        tried[next] = true;
        const float e = k_error_t<Weighted, false>(w, imp, n, k.params(next));
        if (best == count || e < best_err || (e == best_err && next < best)) {
            best = next;
            best_err = e;
            limit = k_bound_limit(best_err, margin, n);
        }
    }
    return best;
}

// k_square_best_proven: the unweighted square error's winner (the lowest error, the earliest
// on ties) from the fast sums without the near-tie watch, when their margins prove it; else
// -1, and the caller decides on the watched errors. The proof, per candidate of stored scale
// s and maxq (<= 255), over n elements:
//  * the fast code of x can differ from the defined one (rounding fl(x / s)) only where both
//    quotients lie within |x / s| 2^-23 (1 + 2^-20) of one half-integer h, and only for
//    |x / s| <= maxq + 2 (beyond, both clamp to the same end); the codes are then
//    neighbours, x lies within (maxq + 2) 2^-23 s of h s, and the two squared errors
//    (s / 2 +- d)^2 differ by 2 s |d| <= (maxq + 2) 2^-22 s^2, plus their roundings (each
//    term within 3 2^-24 of s^2 / 4 + ...): at most (maxq + 4) 2^-22 s^2 a lane;
//  * each sum is within k 2^-24 (1 + 2^-20) of the exact sum of its own terms, with at most
//    k = n / 8 + 5 roundings on any term's way: the defined sum's product, its chain of at
//    most n / 8 adds and the three of the final tree; the fast sum's product fused into its
//    add (acc_add_square), its lane's chain of at most ceil(n / lanes) adds and at most
//    log2(lanes) adds of acc_free_sum4 (AVX-512: ceil(n / 16) + 4 <= n / 8 + 5), so the
//    two sums differ by at most 2k 2^-24 of them on top of their terms' differences.
// So |fast - defined| <= a + b fast with a = n (maxq + 4) 2^-22 s^2 and b = (n / 8 + 5)
// 2^-22; twice that is the slack here, with the largest s and maxq of the candidates for
// all. When the runner-up's fast error less its slack stays above the winner's plus its own,
// every other candidate's defined error is above the winner's: the pick stands, strictly.
// (Student-t weights, g64, the seed factors: 0.5% of groups are left to the watched errors.)
// Importance-weighted errors keep the watch: with the importances' sum in the slack the
// pick was 7% faster on AVX2 but 3% slower on AVX-512 (measured), so it stayed out.
QFORGE_KFN std::ptrdiff_t k_square_best_proven(const float* w, std::size_t n, const candidate_columns& k,
                                               std::size_t count, float* err) noexcept {
    k_square_errors_free(w, n, k, count, err);
    std::size_t best = 0;
    float first = err[0], second = 3.40282347e38f, top_scale = k.scale[0], top_maxq = k.top[0] - k.neg_zero[0];
    for (std::size_t c = 1; c < count; ++c) {
        const float e = err[c], maxq = k.top[c] - k.neg_zero[c];
        top_scale = k.scale[c] > top_scale ? k.scale[c] : top_scale;
        top_maxq = maxq > top_maxq ? maxq : top_maxq;
        if (e < first) second = first, first = e, best = c;
        else if (e < second) second = e;  // a tie with the winner lands here: too close
    }
    const auto nd = static_cast<double>(n), s = static_cast<double>(top_scale);
    const auto maxq = static_cast<double>(top_maxq);
    const double a = nd * (maxq + 4) * 0x1p-21 * s * s, b = (nd / 8 + 5) * 0x1p-21;
    const double low = static_cast<double>(second) * (1 - b) - a, high = static_cast<double>(first) * (1 + b) + a;
    // An infinite runner-up (a sum past the float range) proves nothing: its defined sum may
    // be finite. NaN compares false.
    return low > high && low < 0x1p1023 ? static_cast<std::ptrdiff_t>(best) : -1;
}

/// The candidates of k_search_groups as columns, padded to whole vectors.
struct search_columns {
    static constexpr std::size_t cap = max_search_candidates + lanes;
    alignas(64) float scale[cap], rinv[cap], neg_zero[cap], top[cap];
    std::uint16_t bits[cap];
    candidate_columns view(float norm) const noexcept { return {scale, rinv, neg_zero, top, norm}; }
};

/// make_grids into columns: a (and b) hold whole vectors past `count`. Returns whether a
/// stored scale overflowed: its bits an infinity or NaN are the value's, and the padding's
/// inputs of 0 store the smallest scale, so whole vectors are tested at once.
QFORGE_KFN bool k_grid_columns(const float* a, const float* b, std::size_t count, const grid_recipe& rc,
                               search_columns& out) noexcept {
    const bool div_is_pow2 = k_div_is_pow2(rc.div);
    const vf vmaxq = vset(static_cast<float>((1 << rc.bits) - 1)), neg0 = vset(-0.0f);
    for (std::size_t c = 0; c < count; c += lanes) {
        const grid_vectors g = k_grid_vectors(vload(a + c), b ? vload(b + c) : vset(0.0f), rc, div_is_pow2, out.bits + c);
        vstore(out.scale + c, g.scale);
        vstore(out.rinv + c, g.rinv);
        vstore(out.neg_zero + c, vsub(neg0, g.zero));  // -zero, as -p.zero
        vstore(out.top + c, vsub(vmaxq, g.zero));
        if (vany_nonfinite(g.scale)) return true;
    }
    return false;
}

// k_search_groups: a whole block's scale searches in one call (see kernel_table.hpp). Each
// group's candidates go through the same grid rounding (k_grid_vectors) and error passes
// (k_errors_c, k_error_t) as one-group calls, so the choice is theirs to the bit (the
// unweighted square error's pick from its unwatched sums only where k_square_best_proven
// proves it the same); what is saved is the per-group indirect calls, the setup, and the
// candidates' trips between columns and grid_params.
QFORGE_KFN std::int64_t k_search_groups(const float* w, const float* imp, std::size_t n, std::size_t gsize,
                                        const float* mn, const float* mx, const float* factors, std::size_t count,
                                        const grid_recipe& rc, std::uint16_t* scale_bits, grid_params* grids) noexcept {
    constexpr std::size_t cap = search_columns::cap;
    alignas(64) float a[cap], b[cap], err[max_search_candidates], f[cap] = {};
    search_columns k;
    const bool symmetric = rc.rule == grid_rule::symmetric;
    std::memcpy(f, factors, count * sizeof(float));  // padded to whole vectors with 0
    const bool bounded_norm = rc.norm > 2.0f && rc.norm <= 3.0f;  // the norms k_best_by_bound takes
    cubic_bounds cubic;  // four pow calls: only for those norms
    if (bounded_norm) cubic = cubic_bounds(rc.norm);
    for (std::size_t c0 = 0, j = 0; c0 < n; c0 += gsize, ++j) {
        const std::size_t len = n - c0 < gsize ? n - c0 : gsize;
        // The candidates' inputs factor * amax (or * lo, * hi), a vector at a time: written
        // one float at a time, make_grids' vector loads of them stalled on store forwarding.
        if (symmetric) {
            const float amax = group_amax(mn[j], mx[j]);
            for (std::size_t c = 0; c < count; c += lanes) vstore(a + c, vmul(vload(f + c), vset(amax)));
        } else {
            float lo, hi;
            group_range(mn[j], mx[j], lo, hi);
            for (std::size_t c = 0; c < count; c += lanes) {
                vstore(a + c, vmul(vload(f + c), vset(lo)));
                vstore(b + c, vmul(vload(f + c), vset(hi)));
            }
        }
        if (k_grid_columns(a, symmetric ? nullptr : b, count, rc, k)) return static_cast<std::int64_t>(j);
        // The bound needs every power term unclamped: |e| <= amax (1 + 2 maxq) < 2^42.
        const float amax = group_abs_max(mn[j], mx[j]);
        const bool bounded = bounded_norm && count > 1 && len <= 65536 && amax < 0x1p32f;
        std::size_t best = 0;
        if (bounded) {
            best = imp ? k_best_by_bound<true>(w + c0, imp + c0, len, mn[j], mx[j], k.view(rc.norm), count, cubic)
                       : k_best_by_bound<false>(w + c0, nullptr, len, mn[j], mx[j], k.view(rc.norm), count, cubic);
        } else {
            const std::ptrdiff_t proven =
                !imp && rc.norm == 2.0f ? k_square_best_proven(w + c0, len, k.view(rc.norm), count, err) : -1;
            if (proven >= 0) {
                best = static_cast<std::size_t>(proven);
            } else {
                if (imp) k_column_errors<true>(w + c0, imp + c0, len, k.view(rc.norm), count, err);
                else k_column_errors<false>(w + c0, nullptr, len, k.view(rc.norm), count, err);
                // The best error is kept in a register: reloading err[best] put a load on the
                // chain of every comparison.
                float best_err = err[0];
                for (std::size_t c = 1; c < count; ++c)
                    if (err[c] < best_err) best = c, best_err = err[c];
            }
        }
        scale_bits[j] = k.bits[best];
        grids[j] = k.view(rc.norm).params(best);
    }
    return -1;
}

template <int Kind>
QFORGE_KFN float k_convert_one(const std::byte* p) noexcept {
    if constexpr (Kind == 0) {
        float v;
        std::memcpy(&v, p, 4);
        return v;
    } else {
        std::uint16_t h;
        std::memcpy(&h, p, 2);
        return Kind == 1 ? fp16_to_float(h) : bf16_to_float(h);
    }
}

// How far ahead of its loads the convert pass asks for the source: it is the first touch of
// the weight, which streams from memory, and the hardware prefetchers alone left it waiting
// (4096 x 11008 BF16, RTN 4-bit g64 + GPTQ pack, Intel Xeon: AVX2 1.09-1.15 -> 1.31-1.37 G
// weights/s, AVX-512 1.10-1.21 -> 1.38-1.50; 1 KB and 8-16 KB ahead were slower than 2-4
// KB). The requests go out four lines at a time, each chunk's before its steps: a whole
// block's in one burst filled the line-fill buffers and stalled on them, and a request
// tested for at every step was slower by the test.
inline constexpr std::size_t convert_prefetch_distance = 2048, convert_prefetch_chunk = 256;

// The lines convert_prefetch_distance past bytes [from, to) of src.
QFORGE_KFN void prefetch_ahead(const std::byte* src, std::size_t from, std::size_t to) noexcept {
    for (std::size_t off = from; off < to; off += 64) prefetch_read(src + off, convert_prefetch_distance);
}

// k_convert_min_max_t: k_convert_t and k_min_max_groups in one pass, each group's extremes
// taken over the same steps and padding as k_min_max. Non-finite values are caught by the
// largest magnitude's bit pattern (an infinity or NaN ranks above every finite value), kept
// with an integer max off the pipes the min and max take, instead of a branch per step.
// Returns true when a non-finite value was seen.
template <int Kind>
QFORGE_KFN bool k_convert_min_max_t(const std::byte* src, std::size_t n, std::size_t gsize, float* dst, float* mn,
                                    float* mx) noexcept {
    constexpr std::size_t es = Kind == 0 ? 4 : 2;
    vf check = vset(0.0f);
    for (std::size_t c = 0, j = 0; c < n; c += gsize, ++j) {
        const std::size_t m = n - c < gsize ? n - c : gsize;
        const float first = k_convert_one<Kind>(src + c * es);
        vf lo = vset(first), hi = lo;
        const std::size_t whole = m - m % lanes, chunk = convert_prefetch_chunk / es;
        for (std::size_t i0 = 0; i0 < whole; i0 += chunk) {
            const std::size_t i1 = i0 + chunk < whole ? i0 + chunk : whole;
            prefetch_ahead(src, (c + i0) * es, (c + i1) * es);
            for (std::size_t i = i0; i < i1; i += lanes) {
                vf x;
                if constexpr (Kind == 0) x = vload_f32_bytes(src + (c + i) * es);
                else if constexpr (Kind == 1) x = vload_f16_bytes(src + (c + i) * es);
                else x = vload_bf16_bytes(src + (c + i) * es);
                check = vmax_magnitude(x, check);
                vstore(dst + c + i, x);
                lo = vmin(lo, x);
                hi = vmax(hi, x);
            }
        }
        const std::size_t i = whole;
        if (i < m) {
            alignas(64) float wb[lanes];
            for (float& v : wb) v = first;  // padding that cannot move the extremes
            for (std::size_t t = i; t < m; ++t) wb[t - i] = dst[c + t] = k_convert_one<Kind>(src + (c + t) * es);
            const vf x = vload(wb);
            check = vmax_magnitude(x, check);
            lo = vmin(lo, x);
            hi = vmax(hi, x);
        }
        mn[j] = vhmin(lo);
        mx[j] = vhmax(hi);
    }
    return vany_nonfinite(check);
}

QFORGE_KFN std::int64_t k_to_f32_min_max_groups(const std::byte* src, dtype type, std::size_t n, std::size_t gsize,
                                                float* dst, float* mn, float* mx) noexcept {
    bool bad = false;
    if (type == dtype::F32) bad = k_convert_min_max_t<0>(src, n, gsize, dst, mn, mx);
    else if (type == dtype::F16) bad = k_convert_min_max_t<1>(src, n, gsize, dst, mn, mx);
    else bad = k_convert_min_max_t<2>(src, n, gsize, dst, mn, mx);
    return bad ? k_to_f32(src, type, n, dst) : -1;
}

// Each vector starts at a multiple of lanes (a multiple of 4), so lane j feeds partial j % 4
// as snr_add requires; a tail's padding lanes hold 0 in both, adding +0.
QFORGE_KFN void k_snr_sums(const float* x, const float* y, std::size_t n, double* snr) noexcept {
    snr_acc acc = snr_load(snr);
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) acc = snr_add(acc, vload(x + i), vload(y + i));
    if (i < n) {
        alignas(64) float xb[lanes] = {}, yb[lanes] = {};
        std::memcpy(xb, x + i, (n - i) * sizeof(float));
        std::memcpy(yb, y + i, (n - i) * sizeof(float));
        acc = snr_add(acc, vload(xb), vload(yb));
    }
    snr_store(snr, acc);
}

template <>
QFORGE_DECL const group_kernels& family_table<group_kernels>() noexcept {
    static constexpr group_kernels table{QFORGE_KERNEL_ISA, &k_to_f32, &k_min_max, &k_error, &k_encode, &k_errors,
                                             &k_min_max_groups, &k_make_grids, &k_encode_groups,
                                             &k_to_f32_min_max_groups, &k_search_groups, &k_snr_sums};
    return table;
}
