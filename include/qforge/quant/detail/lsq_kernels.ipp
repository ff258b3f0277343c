// Least-squares kernels, written once over one ISA's primitives (simd/arch/<isa>.hpp).
//
// No include guard on purpose: quant/detail/lsq_simd.hpp includes this file once per ISA,
// inside a namespace that sees that ISA's primitives, with QFORGE_KFN defined as the ISA's
// target attribute + inline. The rules of simd/kernels/group_kernels.ipp hold here too:
// products never fuse into adds (vmul launders them) and every sum has a fixed set of partial
// sums (lsq_k_base: element i -> partial i % 8; the candidate kernel: i % 16, folded to 8;
// padding contributes +0), finished as ((0+1)+(2+3))+((4+5)+(6+7)), so every ISA returns the
// same floats as the scalar instance.

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

// Sums of the candidate kernel use 16 partial sums (element i -> partial i % 16): one vadd per
// vector on 16-lane ISAs, two alternating registers on 8-lane ones. lsq_k_fold then adds
// partial j + 8 to partial j as (0 + p_j) + p_{j+8} on every ISA, and lsq_k_total finishes.
inline constexpr std::size_t lsq_nacc = 16 / lanes;
static_assert(lanes * lsq_nacc == 16, "lsq kernels need 8 or 16 float lanes");

QFORGE_KFN acc8 lsq_k_fold(const vf* acc) noexcept {
    acc8 f = acc_zero();
    for (std::size_t j = 0; j < lsq_nacc; ++j) f = acc_add(f, acc[j]);
    return f;
}

// One vector of lsq_k_cand_t for Z zeros (a helper, not a lambda: a lambda would not carry the
// ISA's target attribute); Slot is the vector's index mod lsq_nacc, a constant so that the
// accumulators stay in registers. The codes are rounded
// once, then clamped per zero: rounding commutes with clamping to integer bounds, so each
// zero's codes are exactly clamp(round(x r), -z, maxq - z).
template <bool Weighted, bool WithK, int J, std::size_t Slot>
QFORGE_KFN void lsq_k_cand_zone(vf t, vf xv, vf wv, const vf* zlo, const vf* zhi, vf (*acc)[lsq_nacc]) noexcept {
    const vf k = vmin(vmax(t, zlo[J]), zhi[J]);
    const vf wk = Weighted ? vmul(wv, k) : k;
    acc[3 * J][Slot] = vadd(acc[3 * J][Slot], vmul(wk, xv));
    acc[3 * J + 1][Slot] = vadd(acc[3 * J + 1][Slot], vmul(wk, k));
    if constexpr (WithK) acc[3 * J + 2][Slot] = vadd(acc[3 * J + 2][Slot], wk);
}

// Zones are unrolled by hand (constant indices keep every accumulator in a register).
template <bool Weighted, bool WithK, int Z, std::size_t Slot>
QFORGE_KFN void lsq_k_cand_step(vf xv, vf wv, vf vr, vf vlo, vf vhi, const vf* zlo, const vf* zhi,
                                vf (*acc)[lsq_nacc]) noexcept {
    const vf t = vround(vmin(vmax(vmul(xv, vr), vlo), vhi));
    lsq_k_cand_zone<Weighted, WithK, 0, Slot>(t, xv, wv, zlo, zhi, acc);
    if constexpr (Z > 1) lsq_k_cand_zone<Weighted, WithK, 1, Slot>(t, xv, wv, zlo, zhi, acc);
    if constexpr (Z > 2) lsq_k_cand_zone<Weighted, WithK, 2, Slot>(t, xv, wv, zlo, zhi, acc);
}

// For each candidate c and zero z = z0 + j (j < Z): k_i = clamp(round_half_even(x_i r[c]),
// -z, maxq - z) and out[(c Z + j) 3 + 0/1/2] = sum w k x, sum w k k, sum w k (0 unless WithK).
template <bool Weighted, bool WithK, int Z>
QFORGE_KFN void lsq_k_cand_t(const float* x, const float* imp, std::size_t n, const float* r, std::size_t count,
                             int z0, int maxq, float* out) noexcept {
    vf zlo[Z], zhi[Z];
    for (int j = 0; j < Z; ++j) {
        zlo[j] = vset(static_cast<float>(-(z0 + j)));
        zhi[j] = vset(static_cast<float>(maxq - (z0 + j)));
    }
    const vf vlo = zlo[Z - 1], vhi = zhi[0];
    for (std::size_t c = 0; c < count; ++c) {
        const vf vr = vset(r[c]);
        vf acc[3 * Z][lsq_nacc];
        for (auto& a : acc)
            for (auto& v : a) v = vset(0.0f);
        std::size_t i = 0;
        constexpr std::size_t second = lsq_nacc - 1;  // slot of a block's second vector (0 at 16 lanes)
        for (; i + lanes * lsq_nacc <= n; i += lanes * lsq_nacc) {
            lsq_k_cand_step<Weighted, WithK, Z, 0>(vload(x + i), Weighted ? vload(imp + i) : vr, vr, vlo, vhi, zlo, zhi, acc);
            if constexpr (lsq_nacc == 2)
                lsq_k_cand_step<Weighted, WithK, Z, second>(vload(x + i + lanes), Weighted ? vload(imp + i + lanes) : vr, vr,
                                                            vlo, vhi, zlo, zhi, acc);
        }
        bool odd = false;  // one full vector left over (8 lanes only) took slot 0
        if (lsq_nacc == 2 && i + lanes <= n) {
            lsq_k_cand_step<Weighted, WithK, Z, 0>(vload(x + i), Weighted ? vload(imp + i) : vr, vr, vlo, vhi, zlo, zhi, acc);
            i += lanes;
            odd = true;
        }
        if (i < n) {  // zero padding: x = 0 gives k = 0, so it adds +0 everywhere
            alignas(64) float xb[lanes] = {};
            alignas(64) float wb[lanes] = {};
            std::memcpy(xb, x + i, (n - i) * sizeof(float));
            if (Weighted) std::memcpy(wb, imp + i, (n - i) * sizeof(float));
            if (odd) {
                lsq_k_cand_step<Weighted, WithK, Z, second>(vload(xb), vload(wb), vr, vlo, vhi, zlo, zhi, acc);
            } else {
                lsq_k_cand_step<Weighted, WithK, Z, 0>(vload(xb), vload(wb), vr, vlo, vhi, zlo, zhi, acc);
            }
        }
        for (int j = 0; j < Z; ++j) {
            float* o = out + (c * Z + static_cast<std::size_t>(j)) * 3;
            o[0] = lsq_k_total(lsq_k_fold(acc[3 * j]));
            o[1] = lsq_k_total(lsq_k_fold(acc[3 * j + 1]));
            o[2] = WithK ? lsq_k_total(lsq_k_fold(acc[3 * j + 2])) : 0.0f;
        }
    }
}

template <bool Weighted, bool WithK>
QFORGE_KFN void lsq_k_cand_z(const float* x, const float* imp, std::size_t n, const float* r, std::size_t count, int z0,
                             int nz, int maxq, float* out) noexcept {
    if (nz == 3) lsq_k_cand_t<Weighted, WithK, 3>(x, imp, n, r, count, z0, maxq, out);
    else if (nz == 2) lsq_k_cand_t<Weighted, WithK, 2>(x, imp, n, r, count, z0, maxq, out);
    else lsq_k_cand_t<Weighted, WithK, 1>(x, imp, n, r, count, z0, maxq, out);
}

// nz consecutive zeros from z0 (1..3) for `count` candidate multipliers r; sum w k only when
// with_k (the refits that move the zero need it).
QFORGE_KFN void lsq_k_cand(const float* x, const float* imp, std::size_t n, const float* r, std::size_t count, int z0,
                           int nz, int maxq, bool with_k, float* out) noexcept {
    if (imp) {
        if (with_k) lsq_k_cand_z<true, true>(x, imp, n, r, count, z0, nz, maxq, out);
        else lsq_k_cand_z<true, false>(x, imp, n, r, count, z0, nz, maxq, out);
    } else {
        if (with_k) lsq_k_cand_z<false, true>(x, imp, n, r, count, z0, nz, maxq, out);
        else lsq_k_cand_z<false, false>(x, imp, n, r, count, z0, nz, maxq, out);
    }
}

inline const lsq_kernel_table& lsq_table() noexcept {
    static constexpr lsq_kernel_table table{&lsq_k_base, &lsq_k_cand};
    return table;
}
