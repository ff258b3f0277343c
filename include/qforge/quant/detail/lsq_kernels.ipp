// Least-squares kernels, written once over one ISA's primitives (simd/arch/<isa>.hpp).
//
// No include guard on purpose: quant/detail/lsq_simd.hpp includes this file once per ISA,
// inside a namespace that sees that ISA's primitives, with QFORGE_KFN defined as the ISA's
// target attribute + inline. The rules of simd/kernels/group_kernels.ipp hold here too:
// products never fuse into adds (vmul launders them) and every sum has exactly 8 partials
// (element i -> partial i % 8, padding contributes +0), added as ((0+1)+(2+3))+((4+5)+(6+7)),
// so every ISA returns the same floats as the scalar instance.

QFORGE_KFN float lsq_k_total(acc8 a) noexcept {
    alignas(32) float p[8];
    acc_store(p, a);
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

// out[0] = sum w, out[1] = sum w x (w = imp, or 1 when imp is null).
QFORGE_KFN void lsq_k_base(const float* x, const float* imp, std::size_t n, float* out) noexcept {
    acc8 sw = acc_zero(), sx = acc_zero();
    const vf one = vset(1.0f);
    std::size_t i = 0;
    for (; i < n; i += lanes) {
        alignas(64) float xb[lanes] = {};
        alignas(64) float wb[lanes] = {};
        const bool full = i + lanes <= n;
        if (!full) {
            std::memcpy(xb, x + i, (n - i) * sizeof(float));
            if (imp) {
                std::memcpy(wb, imp + i, (n - i) * sizeof(float));
            } else {
                for (std::size_t j = 0; j < n - i; ++j) wb[j] = 1.0f;
            }
        }
        const vf xv = full ? vload(x + i) : vload(xb);
        const vf wv = full ? (imp ? vload(imp + i) : one) : vload(wb);
        sw = acc_add(sw, wv);
        sx = acc_add(sx, vmul(wv, xv));
    }
    out[0] = lsq_k_total(sw);
    out[1] = lsq_k_total(sx);
}

// One vector of lsq_k_cand_t (a helper, not a lambda: a lambda would not carry the target).
template <bool Weighted>
QFORGE_KFN void lsq_k_cand_step(vf xv, vf wv, vf vr, vf vlo, vf vhi, acc8& a, acc8& b, acc8& s) noexcept {
    const vf k = vround(vmin(vmax(vmul(xv, vr), vlo), vhi));
    const vf wk = Weighted ? vmul(wv, k) : k;
    a = acc_add(a, vmul(wk, xv));
    b = acc_add(b, vmul(wk, k));
    s = acc_add(s, wk);
}

// For each candidate c: k_i = clamp(round_half_even(x_i * r[c]), lo, hi) and
// out[3c] = sum w k x, out[3c+1] = sum w k k, out[3c+2] = sum w k.
template <bool Weighted>
QFORGE_KFN void lsq_k_cand_t(const float* x, const float* imp, std::size_t n, const float* r, std::size_t count,
                             float lo, float hi, float* out) noexcept {
    const vf vlo = vset(lo), vhi = vset(hi);
    for (std::size_t c = 0; c < count; ++c) {
        const vf vr = vset(r[c]);
        acc8 a = acc_zero(), b = acc_zero(), s = acc_zero();
        std::size_t i = 0;
        for (; i + lanes <= n; i += lanes)
            lsq_k_cand_step<Weighted>(vload(x + i), Weighted ? vload(imp + i) : vr, vr, vlo, vhi, a, b, s);
        if (i < n) {  // zero padding: x = 0 gives k = 0, so it adds +0 everywhere
            alignas(64) float xb[lanes] = {};
            alignas(64) float wb[lanes] = {};
            std::memcpy(xb, x + i, (n - i) * sizeof(float));
            if (Weighted) std::memcpy(wb, imp + i, (n - i) * sizeof(float));
            lsq_k_cand_step<Weighted>(vload(xb), vload(wb), vr, vlo, vhi, a, b, s);
        }
        out[3 * c] = lsq_k_total(a);
        out[3 * c + 1] = lsq_k_total(b);
        out[3 * c + 2] = lsq_k_total(s);
    }
}

QFORGE_KFN void lsq_k_cand(const float* x, const float* imp, std::size_t n, const float* r, std::size_t count,
                           float lo, float hi, float* out) noexcept {
    if (imp) {
        lsq_k_cand_t<true>(x, imp, n, r, count, lo, hi, out);
    } else {
        lsq_k_cand_t<false>(x, imp, n, r, count, lo, hi, out);
    }
}

inline const lsq_kernel_table& lsq_table() noexcept {
    static constexpr lsq_kernel_table table{&lsq_k_base, &lsq_k_cand};
    return table;
}
