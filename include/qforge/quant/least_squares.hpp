// Least-squares scale/zero policies: one scale and one integer zero per group, fitted to the
// group's values instead of taken from its min/max.
//
// Min/max spends grid steps on a group's one or two extreme values; a shrink search fixes
// that by trying many scales and keeping the one with the lowest error. The fit here tries
// few scales but gets far more out of each: for the codes a candidate scale assigns, the
// best scale is closed form (A = sum w k x, B = sum w k^2 over the codes k relative to the
// zero give s = A/B and error sum w x^2 - A^2/B), and so is the effect of moving the integer
// zero by one (the codes stay, k shifts by one; the weighted regression of llama.cpp's
// make_qkx2_quants, GG src/ggml-quants.c, with the zero rounded to an integer). So each pass
// over the group scores the refitted grid, not the candidate:
//   1. the min/max grid (so the result is never worse than min/max);
//   2. `candidates` scales spread over [window_lo, window_hi] x the min/max scale, for the
//      min/max zero and (asymmetric) the zeros next to it; each refitted as above, the
//      integer zero moved by -1/0/+1, the best refit kept;
//   3. the winner rounded to the storage dtype, its codes reassigned, and `iterations` more
//      rounds of refit + reassign (alternating refinement); the best grid seen wins.
// The symmetric counterpart pins the zero at 2^(bits-1) and, by default, also tries the
// mirrored grid (a negative scale), which puts the group's largest-magnitude value on the
// long side of the grid (-2^(bits-1) steps), as llama.cpp's q4_0 does with d = max / -8.
//
// Errors are weighted by an optional per-element importance (e.g. diag(H) of the columns).
// Every sum has a fixed order (see detail::lsq_cand_sums), so the result is a pure function
// of the group's values: identical for every SIMD tag and every thread count.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/quant/detail/lsq_grid.hpp"
#include "qforge/quant/detail/lsq_simd.hpp"
#include "qforge/quant/quantize.hpp"
#include "qforge/quant/scale_policy.hpp"
#include "qforge/simd/dispatch.hpp"

namespace qforge {

/// How the least-squares policy searches. The defaults meet the issue-9 quality floors.
struct lsq_options {
    int bits = 4;                    ///< 2..8
    bool symmetric = false;          ///< pin the zero at 2^(bits-1)
    dtype scale_dtype = dtype::F16;  ///< F16 or BF16: scales are fitted as stored
    bool signed_scale = true;        ///< symmetric only: also try the mirrored (negative) scale
    int candidates = 8;              ///< scales tried per zero (>= 1)
    float window_lo = 0.84f;         ///< candidate scales span window_lo..window_hi x min/max scale
    float window_hi = 1.06f;
    int zero_neighbours = 1;         ///< asymmetric: also try the min/max zero +- this many
    int zero_moves = 0;              ///< asymmetric: refits may also move a candidate's zero by +- this many
    int iterations = 1;              ///< alternating refit + reassign rounds at the end
};

namespace detail {

inline void lsq_check_options(const lsq_options& o) {
    if (o.bits < 2 || o.bits > 8)
        fail<shape_error>({}, {}, "least-squares: bits must be 2..8, got " + std::to_string(o.bits));
    if (o.scale_dtype != dtype::F16 && o.scale_dtype != dtype::BF16)
        fail<unsupported_error>({}, {}, "least-squares: scale dtype must be F16 or BF16");
    if (o.candidates < 1 || o.candidates > 1024 || !(o.window_lo > 0.0f) || !(o.window_hi >= o.window_lo) ||
        !(o.window_hi <= 16.0f) || o.iterations < 0 || o.iterations > 64 || o.zero_neighbours < 0 ||
        o.zero_neighbours > 255 || o.zero_moves < 0 || o.zero_moves > 255)
        fail<shape_error>({}, {}, "least-squares: search window, candidates or iterations out of range");
}

/// A refitted grid: with codes k relative to `zero`, A = sum w k x and B = sum w k^2, the
/// best scale is A/B and the error drops by A^2/B.
struct lsq_refit_result {
    double a = 0.0;
    double b = 0.0;  ///< 0: nothing fitted yet
    std::int32_t zero = 0;
    bool better_than(double a2, double b2) const noexcept { return b == 0.0 || a2 * b > a * a * b2; }
    double gain() const noexcept { return b > 0.0 ? a * a / b : -1.0; }
    double scale() const noexcept { return a / b; }
};

/// Best refit of the codes summarised by c (relative to `zero`), allowing the integer zero
/// to move by up to `shift` (codes unchanged: k becomes k + d for zero - d). Compared
/// without dividing: A1^2 / B1 > A0^2 / B0.
inline void lsq_score(const lsq_cand& c, const lsq_sums& base, std::int32_t zero, int shift, int maxq, bool negative,
                      lsq_refit_result& best) {
    for (int d = -shift; d <= shift; ++d) {
        const std::int32_t z = zero - d;
        if (z < 0 || z > maxq) continue;
        const double a = c.a + d * base.x;
        const double b = c.b + 2.0 * d * c.k + static_cast<double>(d) * d * base.w;
        if (!(b > 0.0) || (negative ? !(a < 0.0) : !(a > 0.0))) continue;
        if (best.better_than(a * a, b)) best = {a, b, z};
    }
}

/// The least-squares grid of one group of n values x (importance w or null, min mn, max mx),
/// scored with the kernels `k`. `exact_error(grid)` returns the weighted squared error of
/// coding x on `grid` by the caller's definition (the SIMD kernels'); every grid returned is
/// the best by that error among those it was asked about, and min/max is always one of them.
/// 1 / f for the candidate scale factors f spread over the window (computed once per policy).
inline std::vector<float> lsq_inverse_factors(const lsq_options& o) {
    std::vector<float> inv(static_cast<std::size_t>(o.candidates));
    for (std::size_t j = 0; j < inv.size(); ++j) {
        const float f = inv.size() == 1 ? 1.0f
                                        : o.window_lo + (o.window_hi - o.window_lo) * static_cast<float>(j) /
                                                            static_cast<float>(inv.size() - 1);
        inv[j] = 1.0f / f;
    }
    return inv;
}

template <class ExactError>
inline group_grid lsq_choose(const float* x, const float* w, std::size_t n, float mn, float mx, const lsq_options& o,
                             const float* inv_f, const lsq_kernel_table& k, ExactError&& exact_error) {
    const int maxq = (1 << o.bits) - 1;
    lsq_sums base;
    base.min = mn;
    base.max = mx;
    const group_grid mm =
        o.symmetric ? sym_minmax_grid(base, o.bits, o.scale_dtype) : asym_minmax_grid(base, o.bits, o.scale_dtype);
    group_grid best = mm;
    double best_err = exact_error(mm);
    if (!(best_err > 0.0) || n == 0) return best;
    float bs[2];
    k.base(x, w, n, bs);
    base.w = bs[0];
    base.x = bs[1];

    // Candidate scales, all scored by their refit; one kernel pass per candidate covers up to
    // three consecutive zeros.
    float r[1024];
    float sums[9 * 1024];
    const auto count = static_cast<std::size_t>(o.candidates);
    const float inv_ref = 1.0f / mm.scale;
    auto fill = [&](bool negative) {
        const float base_r = negative ? -inv_ref : inv_ref;
        for (std::size_t j = 0; j < count; ++j) r[j] = base_r * inv_f[j];
    };
    lsq_refit_result top;
    auto scan = [&](int z0, int nz, bool negative, int shift) {
        k.cand(x, w, n, r, count, z0, nz, maxq, shift > 0, sums);
        for (std::size_t j = 0; j < count; ++j)
            for (int zi = 0; zi < nz; ++zi) {
                const float* s3 = sums + (j * static_cast<std::size_t>(nz) + static_cast<std::size_t>(zi)) * 3;
                lsq_score({s3[0], s3[1], s3[2]}, base, z0 + zi, shift, maxq, negative, top);
            }
    };
    if (o.symmetric) {
        fill(false);
        scan(mm.zero, 1, false, 0);
        if (o.signed_scale) {
            fill(true);
            scan(mm.zero, 1, true, 0);
        }
    } else {
        fill(false);
        const int lo = std::max(0, mm.zero - o.zero_neighbours);
        const int hi = std::min(maxq, mm.zero + o.zero_neighbours);
        for (int z0 = lo; z0 <= hi; z0 += 3) scan(z0, std::min(3, hi - z0 + 1), false, o.zero_moves);
    }
    if (!(top.gain() > 0.0)) return best;

    // The winner as stored, then alternating refinement (refit its codes, reassign).
    group_grid cur = make_grid(static_cast<float>(top.scale()), top.zero, o.scale_dtype);
    for (int it = 0;; ++it) {
        const double err = exact_error(cur);
        if (!(err < best_err)) break;
        best = cur;
        best_err = err;
        if (it >= o.iterations) break;
        const float inv = 1.0f / cur.scale;
        k.cand(x, w, n, &inv, 1, cur.zero, 1, maxq, !o.symmetric, sums);
        lsq_refit_result next;
        lsq_score({sums[0], sums[1], sums[2]}, base, cur.zero, o.symmetric ? 0 : 1, maxq, cur.scale < 0.0f, next);
        if (!(next.gain() > 0.0)) break;
        const group_grid g = make_grid(static_cast<float>(next.scale()), next.zero, o.scale_dtype);
        if (g.scale_bits == cur.scale_bits && g.zero == cur.zero) break;
        cur = g;
    }
    return best;
}

}  // namespace detail

/// Reusable buffer of the standalone fit, so fitting a group allocates nothing.
struct lsq_workspace {
    std::vector<std::uint8_t> codes;
};

/// Fits one group outside quantize() (the GPTQ solver uses it): `x` the values, `w` optional
/// per-element importance (empty = all 1; finite, >= 0). Writes the codes to `codes` (at least
/// as long as `x`) exactly as simd encode() defines them, and returns the grid and its
/// error by the kernels' definition. Throws format_error on a non-finite value.
inline group_fit lsq_fit_group(std::span<const float> x, std::span<const float> w, const lsq_options& o,
                               std::span<std::uint8_t> codes, simd::isa isa = simd::active_isa()) {
    detail::lsq_check_options(o);
    if (!w.empty() && w.size() != x.size()) fail<shape_error>({}, {}, "least-squares: importance length mismatch");
    if (codes.size() < x.size()) fail<shape_error>({}, {}, "least-squares: code buffer too short");
    if (x.empty()) return {};
    for (std::size_t i = 0; i < x.size(); ++i)
        if (!std::isfinite(x[i]))
            fail<format_error>({}, {}, "least-squares: non-finite value at element " + std::to_string(i) + " of a group");
    const simd::group_kernels& gk = simd::kernels(isa);
    float mn = 0.0f, mx = 0.0f;
    gk.min_max(x.data(), x.size(), &mn, &mx);
    const float* wp = w.empty() ? nullptr : w.data();
    auto grid = [&](const group_grid& g) {
        return simd::grid_params{g.scale, 1.0f / g.scale, static_cast<float>(g.zero), static_cast<float>((1 << o.bits) - 1), 2.0f};
    };
    auto err = [&](const group_grid& g) { return static_cast<double>(gk.error(x.data(), wp, x.size(), grid(g))); };
    const std::vector<float> inv_f = detail::lsq_inverse_factors(o);
    const group_grid g = detail::lsq_choose(x.data(), wp, x.size(), mn, mx, o, inv_f.data(), detail::lsq_kernels(isa), err);
    gk.encode(x.data(), x.size(), grid(g), codes.data());
    return {g, err(g)};
}

/// The least-squares fit as a quantize() policy: set quant_options::policy to
/// scale_policy::custom and quant_options::custom to this. Bits, symmetry and scale dtype
/// come from the quantizer's group_view; the rest of `o` tunes the search.
///
/// **Example**:
///   qforge::quant_options opt;  opt.bits = 4; opt.group_size = 64; opt.symmetric = false;
///   qforge::use_least_squares(opt);  // policy = custom, custom = make_lsq_policy()
///   auto q = qforge::quantize(view, opt, pool.executor());
inline group_policy make_lsq_policy(lsq_options o = {}) {
    detail::lsq_check_options(o);  // the search settings; bits, symmetry and dtype come per group
    return [o, inv_f = detail::lsq_inverse_factors(o)](const group_view& g) -> group_choice {
        lsq_options opt = o;
        opt.bits = g.bits;
        opt.symmetric = g.symmetric;
        opt.scale_dtype = g.scale_dtype;
        if (g.bits < 2 || g.bits > 8 || (g.scale_dtype != dtype::F16 && g.scale_dtype != dtype::BF16))
            detail::lsq_check_options(opt);  // throws, naming the problem
        auto err = [&](const group_grid& gr) { return static_cast<double>(g.error(gr.scale_bits, gr.zero)); };
        const group_grid best =
            detail::lsq_choose(g.w, g.imp, g.n, g.mn, g.mx, opt, inv_f.data(), detail::lsq_kernels(g.kernels->id), err);
        return {best.scale_bits, best.zero};
    };
}

/// Selects the least-squares policy in `o` (policy = custom, custom = make_lsq_policy(l)).
inline void use_least_squares(quant_options& o, const lsq_options& l = {}) {
    o.policy = scale_policy::custom;
    o.custom = make_lsq_policy(l);
}

/// Min/max grid of one group, the baseline the fit is never worse than: asymmetric
/// s = (max - min)/maxq over a range that contains 0, zero = round(-min/s); symmetric
/// s = amax/(maxq/2) with the zero pinned (GPTQ's find_params, formats.md 2.3). These are
/// scale_policy::minmax and scale_policy::gptq_absmax, bit for bit.
inline group_fit minmax_fit_group(std::span<const float> x, std::span<const float> w, int bits, bool symmetric,
                                  dtype scale_dtype, std::span<std::uint8_t> codes,
                                  simd::isa isa = simd::active_isa()) {
    lsq_options o;
    o.bits = bits;
    o.symmetric = symmetric;
    o.scale_dtype = scale_dtype;
    o.candidates = 1;
    o.zero_neighbours = 0;
    o.signed_scale = false;
    if (x.empty()) return {};
    const simd::group_kernels& gk = simd::kernels(isa);
    detail::lsq_sums base;
    gk.min_max(x.data(), x.size(), &base.min, &base.max);
    const group_grid g = symmetric ? detail::sym_minmax_grid(base, bits, scale_dtype) : detail::asym_minmax_grid(base, bits, scale_dtype);
    const simd::grid_params p{g.scale, 1.0f / g.scale, static_cast<float>(g.zero), static_cast<float>((1 << bits) - 1), 2.0f};
    gk.encode(x.data(), x.size(), p, codes.data());
    return {g, static_cast<double>(gk.error(x.data(), w.empty() ? nullptr : w.data(), x.size(), p))};
}

}  // namespace qforge
