// Least-squares kernels, written once over one ISA's primitives (simd/arch/<isa>.hpp); the
// contract is simd/lsq_kernels.hpp.
//
// No include guard on purpose: simd/lsq_kernels.hpp has simd/detail/instantiate.ipp compile it
// inside each ISA's namespace (after the group kernels, whose k_elem_error errors2 reuses),
// with QFORGE_KFN the ISA's target attribute + inline. The rules of
// simd/kernels/group_kernels.ipp hold here too: products never fuse into adds (vmul launders
// them) and every sum has a fixed order, so every ISA returns the same floats as the scalar
// instance.

namespace lsq_family {

// ---- The seed scan: candidates in lanes --------------------------------------------------
// Lane c of a pass (lsq_pass_lanes of them) codes the group with its own multiplier
// r_c = m f_c and zero z_c = z0 + d_c: k_ci = round_half_even(clamp(x_i r_c, -z_c, maxq - z_c)),
// a_c = sum w k x, b_c = sum w k k, and gain_c = a_c^2 / b_c (the error the refit s = a/b
// removes) when a_c r_c > 0, else 0; with the refit's |s| as stored (F16 or BF16, vround_scale
// of simd/arch), its pattern and 1/|s|. A lane whose zero lies outside 0..maxq (or whose f_c is
// 0) codes everything as 0 and gains 0. Each lane is a scalar computation of its own (element i
// goes to partial i % 2 of its lane, a = p0 + p1), so no sum is ever reduced across lanes and
// the vector width cannot change a result. The kernels are templates on the lane count L, so
// only ISAs whose vector is one pass (L == lsq_pass_lanes) instantiate them; AVX-512 takes
// the AVX2 instance (lanes_entry below).
template <bool Weighted>
QFORGE_KFN void k_lane_step(float xi, float wi, vf r, vf lo, vf hi, vf& a, vf& b) noexcept {
    const vf xv = vset(xi);
    const vf k = vround(vmin(vmax(vmul(xv, r), lo), hi));
    const vf wk = Weighted ? vmul(vset(wi), k) : k;
    a = vadd(a, vmul(wk, xv));
    b = vadd(b, vmul(wk, k));
}

template <bool Weighted, std::size_t L>
QFORGE_KFN void k_lanes_t(const float* x, const float* imp, std::size_t n, const float* f, const float* d, float m,
                              float z0, float maxq, bool bf16, lsq_lane_fits& out) noexcept {
    static_assert(L == lsq_pass_lanes, "one vector per pass");
    const vf zero = vset(0.0f), one = vset(1.0f);
    const vf z = vadd(vset(z0), vload(d));  // small integers: exact
    const vf top = vsub(vset(maxq), z);
    const vf live = vmin(z, top);  // >= 0 exactly when 0 <= z <= maxq
    const vf r = vsel_ge(live, zero, vmul(vset(m), vload(f)), zero);
    const vf lo = vsel_ge(live, zero, vsub(zero, z), zero);
    const vf hi = vsel_ge(live, zero, top, zero);
    vf a0 = zero, a1 = zero, b0 = zero, b1 = zero;
    std::size_t i = 0;
    for (; i + 2 <= n; i += 2) {
        k_lane_step<Weighted>(x[i], Weighted ? imp[i] : 1.0f, r, lo, hi, a0, b0);
        k_lane_step<Weighted>(x[i + 1], Weighted ? imp[i + 1] : 1.0f, r, lo, hi, a1, b1);
    }
    if (i < n) k_lane_step<Weighted>(x[i], Weighted ? imp[i] : 1.0f, r, lo, hi, a0, b0);
    const vf av = vadd(a0, a1), bv = vadd(b0, b1);
    // b = 0 only where every k is 0, so a = 0 too and the quotient is 0 / tiny = 0.
    const vf bs = vmax(bv, vset(0x1p-126f));
    const vf gain = vsel_ge(zero, vmul(av, r), zero, vdiv(vmul(av, av), bs));
    // Every lane's refit scale |a|/b as stored, its pattern and its reciprocal, computed here
    // in parallel rather than for the winner after the pick (a chain of two divisions and a
    // rounding); lanes that gain nothing get 1, a harmless value.
    const vf mag = vround_scale(vsel_ge(zero, gain, one, vdiv(vabs(av), bs)), bf16, out.bits);
    vstore(out.a, av);
    vstore(out.b, bv);
    vstore(out.gain, gain);
    vstore(out.scale, mag);
    vstore(out.rinv, vdiv(one, mag));
}

template <std::size_t L>
QFORGE_KFN void k_lanes(const float* x, const float* imp, std::size_t n, const float* f, const float* d, float m,
                        float z0, float maxq, bool bf16, lsq_lane_fits& out) noexcept {
    if (imp) k_lanes_t<true, L>(x, imp, n, f, d, m, z0, maxq, bf16, out);
    else k_lanes_t<false, L>(x, imp, n, f, d, m, z0, maxq, bf16, out);
}

// The table's lanes(): this ISA's own instance where one vector is one pass, else (AVX-512,
// 16 lanes) the AVX2 instance, which that CPU also runs. A template so that the branch not
// taken is never instantiated (no AVX2 namespace exists on other targets).
template <std::size_t L = lanes, class Avx2 = ::qforge::simd::avx2_tag>
inline auto lanes_entry() noexcept {
    if constexpr (L == lsq_pass_lanes) return &k_lanes<L>;
    else return ::qforge::simd::arch_of<Avx2>::template table<::qforge::simd::lsq_kernels>().lanes;
}

// ---- The refit of one grid: values in lanes ----------------------------------------------
// k_i = round_half_even(clamp(x_i r, -z, maxq - z)), out = {sum w k x, sum w k k}. Element i
// goes to partial i % 16: one vadd per vector on 16-lane ISAs, two alternating registers on
// 8-lane ones; partial j + 8 is then added to partial j as (0 + p_j) + p_{j+8} on every ISA and
// the 8 are finished as ((0+1)+(2+3))+((4+5)+(6+7)); padding lanes hold x = 0, so k = 0 adds +0.
inline constexpr std::size_t k_nacc = 16 / lanes;
static_assert(lanes * k_nacc == 16, "lsq kernels need 8 or 16 float lanes");

QFORGE_KFN float k_total(const vf* acc) noexcept {
    acc8 f = acc_zero();
    for (std::size_t j = 0; j < k_nacc; ++j) f = acc_add(f, acc[j]);
    alignas(32) float p[8];
    acc_store(p, f);
    return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
}

template <bool Weighted>
QFORGE_KFN void k_refit_step(vf xv, vf wv, vf r, vf lo, vf hi, vf& a, vf& b) noexcept {
    const vf k = vround(vmin(vmax(vmul(xv, r), lo), hi));
    const vf wk = Weighted ? vmul(wv, k) : k;
    a = vadd(a, vmul(wk, xv));
    b = vadd(b, vmul(wk, k));
}

template <bool Weighted>
QFORGE_KFN void k_refit_t(const float* x, const float* imp, std::size_t n, float rinv, int z, int maxq,
                              float* out) noexcept {
    const vf r = vset(rinv), lo = vset(static_cast<float>(-z)), hi = vset(static_cast<float>(maxq - z));
    vf a[k_nacc], b[k_nacc];
    for (std::size_t j = 0; j < k_nacc; ++j) a[j] = b[j] = vset(0.0f);
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        k_refit_step<Weighted>(vload(x + i), Weighted ? vload(imp + i) : r, r, lo, hi, a[0], b[0]);
        if constexpr (k_nacc == 2)
            k_refit_step<Weighted>(vload(x + i + 8), Weighted ? vload(imp + i + 8) : r, r, lo, hi,
                                       a[k_nacc - 1], b[k_nacc - 1]);
    }
    for (std::size_t slot = 0; i < n; i += lanes, ++slot) {  // at most two vectors, the last padded
        alignas(64) float xb[lanes] = {};
        alignas(64) float wb[lanes] = {};
        const std::size_t m = n - i < lanes ? n - i : lanes;
        std::memcpy(xb, x + i, m * sizeof(float));
        if (Weighted) std::memcpy(wb, imp + i, m * sizeof(float));
        k_refit_step<Weighted>(vload(xb), vload(wb), r, lo, hi, a[slot], b[slot]);
    }
    out[0] = k_total(a);
    out[1] = k_total(b);
}

QFORGE_KFN void k_refit(const float* x, const float* imp, std::size_t n, float rinv, int z, int maxq,
                            float* out) noexcept {
    if (imp) k_refit_t<true>(x, imp, n, rinv, z, maxq, out);
    else k_refit_t<false>(x, imp, n, rinv, z, maxq, out);
}

// ---- The exact errors of two grids --------------------------------------------------------
// out[j] = simd error() of grid g[j] (norm 2) to the bit: the same element arithmetic
// (k_elem_error of simd/kernels/group_kernels.ipp, the ISA's own instance) and the same
// partial sums, finished the same way. The two grids share one loop so that their latencies
// overlap; error() called twice left both chains exposed.
// One vector of both grids (a helper, not a lambda: a lambda would not carry the ISA's target
// attribute). v = {s0, r0, -z0, maxq - z0, s1, r1, -z1, maxq - z1}.
template <bool Weighted>
QFORGE_KFN void k_errors2_step(vf xv, vf wv, const vf* v, acc8& acc0, acc8& acc1) noexcept {
    const vf p = vset(2.0f);
    vf e0 = k_elem_error<true>(xv, v[0], v[1], v[2], v[3], p);
    vf e1 = k_elem_error<true>(xv, v[4], v[5], v[6], v[7], p);
    if constexpr (Weighted) {
        e0 = vmul(e0, wv);
        e1 = vmul(e1, wv);
    }
    acc0 = acc_add(acc0, e0);
    acc1 = acc_add(acc1, e1);
}

template <bool Weighted>
QFORGE_KFN void k_errors2_t(const float* x, const float* imp, std::size_t n, const grid_params* g,
                                float* out) noexcept {
    const vf v[8] = {vset(g[0].scale), vset(g[0].rinv), vset(-g[0].zero), vset(g[0].maxq - g[0].zero),
                     vset(g[1].scale), vset(g[1].rinv), vset(-g[1].zero), vset(g[1].maxq - g[1].zero)};
    acc8 acc0 = acc_zero(), acc1 = acc_zero();
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) k_errors2_step<Weighted>(vload(x + i), Weighted ? vload(imp + i) : v[0], v, acc0, acc1);
    if (i < n) {
        alignas(64) float xb[lanes] = {};
        alignas(64) float wb[lanes] = {};
        std::memcpy(xb, x + i, (n - i) * sizeof(float));
        if (Weighted) std::memcpy(wb, imp + i, (n - i) * sizeof(float));
        k_errors2_step<Weighted>(vload(xb), vload(wb), v, acc0, acc1);
    }
    alignas(32) float part[8];
    acc_store(part, acc0);
    out[0] = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    acc_store(part, acc1);
    out[1] = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

QFORGE_KFN void k_errors2(const float* x, const float* imp, std::size_t n, const grid_params* g,
                              float* out) noexcept {
    if (imp) k_errors2_t<true>(x, imp, n, g, out);
    else k_errors2_t<false>(x, imp, n, g, out);
}

}  // namespace lsq_family

template <>
QFORGE_DECL const lsq_kernels& family_table<lsq_kernels>() noexcept {
    static const lsq_kernels t{QFORGE_KERNEL_ISA, lsq_family::lanes_entry(), &lsq_family::k_refit, &lsq_family::k_errors2};
    return t;
}
