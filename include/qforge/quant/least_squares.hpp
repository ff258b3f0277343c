// Least-squares scale/zero policies: one scale and one integer zero per group, fitted to the
// group's values instead of taken from its min/max.
//
// Min/max spends grid steps on a group's one or two extreme values; a shrink search fixes
// that by trying many scales and keeping the one with the lowest error. The fit here tries
// few scales but gets far more out of each: for the codes k (relative to the zero) that a
// seed grid assigns, the best scale is closed form (A = sum w k x, B = sum w k^2 give s = A/B
// and error sum w x^2 - A^2/B; the weighted regression of llama.cpp's make_qkx2_quants,
// GG src/ggml-quants.c, with the zero kept an integer). So each seed is scored by its refitted
// grid, not by itself:
//   1. the seeds, each a scale factor x the min/max scale (before it is stored) and a zero
//      shift from the zero that scale gives (asymmetric), are scored in one pass over the
//      group per 8 seeds, one seed per SIMD lane (simd::lsq_kernels::lanes); the
//      largest A^2/B wins, the first on ties;
//   2. its scale A/B is rounded to the storage dtype (the kernel rounds every lane's, in
//      parallel), then `iterations` rounds of reassign + refit (alternating refinement; none
//      by default: a round adds a pass, about 20% of the fit's time at groups of 64, for
//      about +0.002 dB there);
//   3. the fit is kept only where its exact error (the SIMD kernels' error(), both grids in
//      one pass) is below the min/max grid's, so it is never worse than min/max.
// The defaults (8 seeds, 0 rounds) were chosen for speed: the fit runs at more than 10x the
// speed of the 100-step shrink search (scale_policy::mse with search_params{2, 100, 1}) and
// beats its quality at groups of 32 and 64 (bench/quality.cpp prints both). More seeds or
// rounds buy a little more quality: lsq_options.
// The symmetric counterpart pins the zero at 2^(bits-1) and, by default, also tries the
// mirrored grid (a negative scale), which puts the group's largest-magnitude value on the
// long side of the grid (-2^(bits-1) steps), as llama.cpp's q4_0 does with d = max / -8.
//
// Errors are weighted by an optional per-element importance (e.g. diag(H) of the columns).
// Every sum has a fixed order (simd/kernels/lsq_kernels.ipp), so the result is a pure
// function of the group's values: identical for every SIMD tag and every thread count.
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
#include "qforge/quant/quantize.hpp"
#include "qforge/quant/scale_policy.hpp"
#include "qforge/simd/dispatch.hpp"
#include "qforge/simd/lsq_kernels.hpp"
#include "qforge/simd/no_contract.hpp"

namespace qforge {

/// One seed of the asymmetric scan: the scale `factor` x the min/max scale, with the zero point
/// `zero_shift` away from the min/max zero.
struct lsq_seed {
    float factor = 1.0f;
    int zero_shift = 0;
};

/// The default asymmetric seeds: picked greedily, one at a time, as the seed that raised the
/// SNR of groups of 32 and 64 (weighted 1:2) the most, from scale factors 0.70..1.20 (step
/// 0.01) x zero shifts -2..2, on 256 rows of the seeded Student-t(df 5) matrix of
/// bench/quality.cpp, each seed scored by its refit as the fit does; checked on other seeds.
inline std::vector<lsq_seed> lsq_default_seeds() {
    return {{0.95f, 0}, {1.05f, 0}, {0.98f, 0}, {0.92f, 0}, {1.13f, 0}, {0.93f, 1}, {0.93f, -1}, {1.02f, 0}};
}

/// The default symmetric scale factors, each tried with the positive and (signed_scale) the
/// mirrored scale: one pass of 8 seeds.
inline std::vector<float> lsq_default_sym_factors() { return {0.84f, 0.90f, 0.96f, 1.02f}; }

/// How the least-squares policy searches. The defaults meet the issue-9 quality floors.
struct lsq_options {
    int bits = 4;                    ///< 2..8
    bool symmetric = false;          ///< pin the zero at 2^(bits-1)
    dtype scale_dtype = dtype::F16;  ///< F16 or BF16: scales are fitted as stored
    bool signed_scale = true;        ///< symmetric only: also try the mirrored (negative) scale
    std::vector<lsq_seed> seeds = lsq_default_seeds();            ///< asymmetric scan (1..1024)
    std::vector<float> sym_factors = lsq_default_sym_factors();  ///< symmetric scan (1..1024)
    int iterations = 0;  ///< reassign + refit rounds after the scan (0..8)
};

namespace detail {

using simd::lsq_lane_fits;
using simd::lsq_pass_lanes;

/// The least-squares kernels of `i` (simd::kernels_of, which records the ISA the family ran
/// with and throws when `i` cannot run here).
inline const simd::lsq_kernels& lsq_kernels(simd::isa i) { return simd::kernels_of<simd::lsq_kernels>(i); }

inline constexpr int lsq_max_iterations = 8;

inline void lsq_check_options(const lsq_options& o) {
    if (o.bits < 2 || o.bits > 8)
        fail<shape_error>({}, {}, "least-squares: bits must be 2..8, got " + std::to_string(o.bits));
    if (o.scale_dtype != dtype::F16 && o.scale_dtype != dtype::BF16)
        fail<unsupported_error>({}, {}, "least-squares: scale dtype must be F16 or BF16");
    auto factor_ok = [](float f) { return f > 0.0f && f <= 16.0f; };
    bool ok = !o.seeds.empty() && o.seeds.size() <= 1024 && !o.sym_factors.empty() && o.sym_factors.size() <= 1024 &&
              o.iterations >= 0 && o.iterations <= lsq_max_iterations;
    for (const lsq_seed& sd : o.seeds) ok = ok && factor_ok(sd.factor) && sd.zero_shift >= -255 && sd.zero_shift <= 255;
    for (float f : o.sym_factors) ok = ok && factor_ok(f);
    if (!ok) fail<shape_error>({}, {}, "least-squares: seeds, scale factors or iterations out of range");
}

/// The scan of one policy, laid out as lanes of the kernel's passes (computed once per
/// policy): per lane the multiplier 1/factor relative to the min/max scale's (negative for a
/// mirrored symmetric lane; 0 pads a pass) and the zero shift.
struct lsq_plan {
    std::vector<float> inv_f;
    std::vector<float> shift;
    int iterations = 1;
};

inline lsq_plan lsq_make_plan(const lsq_options& o, bool symmetric) {
    lsq_plan p;
    p.iterations = o.iterations;
    if (symmetric) {
        for (int sign : {1, -1}) {
            if (sign < 0 && !o.signed_scale) break;
            for (float f : o.sym_factors) {
                p.inv_f.push_back(static_cast<float>(sign) / f);
                p.shift.push_back(0.0f);
            }
        }
    } else {
        for (const lsq_seed& sd : o.seeds) {
            p.inv_f.push_back(1.0f / sd.factor);
            p.shift.push_back(static_cast<float>(sd.zero_shift));
        }
    }
    while (p.inv_f.size() % lsq_pass_lanes != 0) {
        p.inv_f.push_back(0.0f);
        p.shift.push_back(0.0f);
    }
    return p;
}

/// The min/max grid and the fit as the kernels take them.
inline simd::grid_params lsq_params(const group_grid& g, float rinv, int maxq) noexcept {
    return {g.scale, rinv, static_cast<float>(g.zero), static_cast<float>(maxq), 2.0f};
}

/// The least-squares grid of one group of n values x (importance w or null, min mn, max mx),
/// scored with the kernels `k`; the fit is kept only where its exact error (simd error(), which
/// k.errors2 reproduces bit for bit) is below min/max's, so it is never worse than min/max.
inline group_grid lsq_choose(const float* x, const float* w, std::size_t n, float mn, float mx, int bits, bool symmetric,
                             dtype sd, const lsq_plan& plan, const simd::lsq_kernels& k) {
    const int maxq = (1 << bits) - 1;
    if (n == 0) return symmetric ? sym_minmax_grid(mn, mx, bits, sd) : asym_minmax_grid(mn, mx, bits, sd);
    // The seeds are relative to the min/max scale before it is stored, and their zeros to the
    // zero that scale gives: one division ahead of the scan instead of three and a rounding.
    // (The stored min/max grid, needed only at the end, is computed off that path.)
    float ref_rinv, ref_zero;
    if (symmetric) {
        const float amax = std::fmax(-mn, mx);
        ref_rinv = (static_cast<float>(maxq) / 2.0f) / (amax > 0.0f ? amax : 1.0f);
        ref_zero = static_cast<float>(1 << (bits - 1));
    } else {
        float lo = std::min(mn, 0.0f), hi = std::max(mx, 0.0f);
        if (lo == 0.0f && hi == 0.0f) lo = -1.0f, hi = 1.0f;
        ref_rinv = static_cast<float>(maxq) / (hi - lo);
        ref_zero = std::min(std::max(round_half_even(simd::no_contract(-lo * ref_rinv)), 0.0f),
                            static_cast<float>(maxq));
    }

    // The stored min/max grid (and the reciprocal the exact check needs) does not depend on
    // the scan: computed here, its divisions run in the shadow of the scan's start rather than
    // after its end.
    const group_grid mm = symmetric ? sym_minmax_grid(mn, mx, bits, sd) : asym_minmax_grid(mn, mx, bits, sd);
    const float mm_rinv = 1.0f / mm.scale;
    lsq_lane_fits lf;
    float top_gain = 0.0f;  // the winner so far, as stored
    group_grid fit;
    float fit_rinv = 1.0f;
    static_assert(lsq_pass_lanes == 8, "the tournament below is over 8 lanes");
    for (std::size_t p0 = 0; p0 < plan.inv_f.size(); p0 += lsq_pass_lanes) {
        k.lanes(x, w, n, plan.inv_f.data() + p0, plan.shift.data() + p0, ref_rinv, ref_zero, static_cast<float>(maxq),
                sd == dtype::BF16, lf);
        // The largest gain, the first on ties: a tournament in which the left side keeps ties.
        auto pick = [&](std::size_t i, std::size_t j) { return lf.gain[j] > lf.gain[i] ? j : i; };
        const std::size_t c = pick(pick(pick(0, 1), pick(2, 3)), pick(pick(4, 5), pick(6, 7)));
        if (lf.gain[c] > top_gain) {
            top_gain = lf.gain[c];
            const auto z = static_cast<std::int32_t>(ref_zero + plan.shift[p0 + c]);
            const bool negative = plan.inv_f[p0 + c] < 0.0f;
            if ((lf.bits[c] & 0x7FFFu) < (sd == dtype::BF16 ? 0x7F80u : 0x7C00u)) {
                // make_grid(a/b) bit for bit: the kernel rounded |a/b| as make_grid does.
                fit = {negative ? -lf.scale[c] : lf.scale[c],
                       static_cast<std::uint16_t>(lf.bits[c] | (negative ? 0x8000u : 0u)), z};
                fit_rinv = negative ? -lf.rinv[c] : lf.rinv[c];
            } else {  // overflowed the dtype: make_grid pins it to the largest finite value
                fit = make_grid(lf.a[c] / lf.b[c], z, sd);
                fit_rinv = 1.0f / fit.scale;
            }
        }
    }
    if (!(top_gain > 0.0f)) return mm;

    // Then `iterations` rounds of reassign + refit. In exact arithmetic a round never raises
    // the error (its stored scale is the one nearest the best scale for the previous codes,
    // and the codes are then the nearest for it), so only the last grid is compared with
    // min/max.
    for (int it = 0; it < plan.iterations; ++it) {
        float s2[2];
        k.refit(x, w, n, fit_rinv, fit.zero, maxq, s2);
        if (!(s2[1] > 0.0f) || !(fit.scale > 0.0f ? s2[0] > 0.0f : s2[0] < 0.0f)) break;
        const group_grid g = make_grid(s2[0] / s2[1], fit.zero, sd);
        if (g.scale_bits == fit.scale_bits) break;
        fit = g;
        fit_rinv = 1.0f / fit.scale;
    }
    const simd::grid_params p[2] = {lsq_params(mm, mm_rinv, maxq), lsq_params(fit, fit_rinv, maxq)};
    float err[2];
    k.errors2(x, w, n, p, err);
    return err[1] < err[0] ? fit : mm;
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
    const int maxq = (1 << o.bits) - 1;
    const group_grid g = detail::lsq_choose(x.data(), wp, x.size(), mn, mx, o.bits, o.symmetric, o.scale_dtype,
                                            detail::lsq_make_plan(o, o.symmetric), detail::lsq_kernels(isa));
    const simd::grid_params p = detail::lsq_params(g, 1.0f / g.scale, maxq);
    gk.encode(x.data(), x.size(), p, codes.data());
    return {g, static_cast<double>(gk.error(x.data(), wp, x.size(), p))};
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
    return [asym = detail::lsq_make_plan(o, false), sym = detail::lsq_make_plan(o, true)](const group_view& g) -> group_choice {
        if (g.bits < 2 || g.bits > 8 || (g.scale_dtype != dtype::F16 && g.scale_dtype != dtype::BF16)) {
            lsq_options bad;
            bad.bits = g.bits;
            bad.scale_dtype = g.scale_dtype;
            detail::lsq_check_options(bad);  // throws, naming the problem
        }
        const group_grid best = detail::lsq_choose(g.w, g.imp, g.n, g.mn, g.mx, g.bits, g.symmetric, g.scale_dtype,
                                                   g.symmetric ? sym : asym, detail::lsq_kernels(g.kernels->id));
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
    if (x.empty()) return {};
    const simd::group_kernels& gk = simd::kernels(isa);
    float mn = 0.0f, mx = 0.0f;
    gk.min_max(x.data(), x.size(), &mn, &mx);
    const group_grid g = symmetric ? detail::sym_minmax_grid(mn, mx, bits, scale_dtype) : detail::asym_minmax_grid(mn, mx, bits, scale_dtype);
    const simd::grid_params p{g.scale, 1.0f / g.scale, static_cast<float>(g.zero), static_cast<float>((1 << bits) - 1), 2.0f};
    gk.encode(x.data(), x.size(), p, codes.data());
    return {g, static_cast<double>(gk.error(x.data(), w.empty() ? nullptr : w.data(), x.size(), p))};
}

}  // namespace qforge
