// Group kernels, written once over one ISA's primitives.
//
// No include guard on purpose: each simd/arch/<isa>.hpp includes this file inside its own
// namespace, after defining that ISA's primitives (vf, lanes, acc8, vload, vmul...) and
// QFORGE_KFN (the ISA's target attribute + inline). The same text thus becomes one set of
// kernels per ISA, and the scalar instance is the reference the others must reproduce.
//
// Two rules keep the ISAs bit-identical:
//  * vmul never fuses with a following add (each primitive launders its product), so FMA
//    contraction cannot change a result, whatever -ffp-contract the consumer uses;
//  * error sums use exactly 8 partial sums (element i -> partial i % 8) whatever the lane
//    count, and padding lanes contribute +0.

// k_code: clamp(round_half_even(x / s) + z, 0, maxq). The quotient is first taken as x * (1/s);
// that differs from the IEEE quotient by under 2^-11 while |x/s| < 4096, so rounding can
// differ only when the fractional part is within 2^-10 of one half: then (rarely) the whole
// vector is redone with the true division. Quotients are clamped to +-4096 first, which no
// code in 0..255 can tell apart from the unclamped value.
QFORGE_KFN vf k_code(vf x, vf s, vf r, vf z, vf hi) noexcept {
    const vf lim = vset(4096.0f), nlim = vset(-4096.0f);
    vf t = vmin(vmax(vmul(x, r), nlim), lim);
    vf rr = vround(t);
    if (vany_gt(vabs(vsub(t, rr)), vset(0.4990234375f))) {
        t = vmin(vmax(vdiv(x, s), nlim), lim);
        rr = vround(t);
    }
    return vmin(vmax(vadd(rr, z), vset(0.0f)), hi);
}

// k_pow_abs: |e|^p as 2^(p log2|e|), by fixed polynomials (relative error below 1e-6);
// |e| < 2^-40 counts as 0. Exact to the bit across ISAs, not to the last bit of pow().
QFORGE_KFN vf k_pow_abs(vf e, vf p) noexcept {
    const vf x = vabs(e);
    const vf one = vset(1.0f);
    const vf m = vmantissa(x);                    // [1, 2)
    const vf t = vdiv(vsub(m, one), vadd(m, one));  // ln m = 2 atanh t, t in [0, 1/3)
    const vf u = vmul(t, t);
    vf s = vset(1.0f / 11.0f);
    s = vadd(vmul(s, u), vset(1.0f / 9.0f));
    s = vadd(vmul(s, u), vset(1.0f / 7.0f));
    s = vadd(vmul(s, u), vset(1.0f / 5.0f));
    s = vadd(vmul(s, u), vset(1.0f / 3.0f));
    s = vadd(vmul(s, u), one);
    const vf log2m = vmul(vmul(t, s), vset(2.8853900817779268f));  // 2 / ln 2
    const vf y = vmin(vmax(vmul(vadd(vexponent(x), log2m), p), vset(-126.0f)), vset(127.0f));
    const vf n = vround(y);
    const vf g = vmul(vsub(y, n), vset(0.6931471805599453f));  // |g| <= ln2 / 2
    vf q = vset(1.0f / 5040.0f);
    q = vadd(vmul(q, g), vset(1.0f / 720.0f));
    q = vadd(vmul(q, g), vset(1.0f / 120.0f));
    q = vadd(vmul(q, g), vset(1.0f / 24.0f));
    q = vadd(vmul(q, g), vset(1.0f / 6.0f));
    q = vadd(vmul(q, g), vset(0.5f));
    q = vadd(vmul(q, g), one);
    q = vadd(vmul(q, g), one);
    return vsel_ge(x, vset(0x1p-40f), vmul(q, vpow2i(n)), vset(0.0f));
}

template <bool Squared>
QFORGE_KFN vf k_elem_error(vf x, vf s, vf r, vf z, vf hi, vf p) noexcept {
    const vf q = k_code(x, s, r, z, hi);
    const vf e = vsub(vmul(vsub(q, z), s), x);  // (q - z) * s is exact in float
    if constexpr (Squared) {
        return vmul(e, e);
    } else {
        return k_pow_abs(e, p);
    }
}

template <bool Weighted, bool Squared>
QFORGE_KFN float k_error_t(const float* w, const float* imp, std::size_t n, const grid_params& gp) noexcept {
    const vf s = vset(gp.scale), r = vset(gp.rinv), z = vset(gp.zero), hi = vset(gp.maxq), p = vset(gp.norm);
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
    alignas(32) float part[8];
    acc_store(part, acc);
    return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

QFORGE_KFN float k_error(const float* w, const float* imp, std::size_t n, const grid_params& gp) noexcept {
    const bool sq = gp.norm == 2.0f;
    if (imp) return sq ? k_error_t<true, true>(w, imp, n, gp) : k_error_t<true, false>(w, imp, n, gp);
    return sq ? k_error_t<false, true>(w, imp, n, gp) : k_error_t<false, false>(w, imp, n, gp);
}

QFORGE_KFN void k_encode(const float* w, std::size_t n, const grid_params& gp, std::uint8_t* codes) noexcept {
    const vf s = vset(gp.scale), r = vset(gp.rinv), z = vset(gp.zero), hi = vset(gp.maxq);
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) vstore_codes(codes + i, k_code(vload(w + i), s, r, z, hi));
    if (i < n) {
        alignas(64) float wb[lanes] = {};
        std::uint8_t cb[lanes];
        std::memcpy(wb, w + i, (n - i) * sizeof(float));
        vstore_codes(cb, k_code(vload(wb), s, r, z, hi));
        std::memcpy(codes + i, cb, n - i);
    }
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

inline const group_kernels& kernel_table() noexcept {
    static constexpr group_kernels table{QFORGE_KERNEL_ISA, &k_to_f32, &k_min_max, &k_error, &k_encode};
    return table;
}
