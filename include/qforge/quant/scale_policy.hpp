// Scale policies: how each group's scale (and zero point) is chosen. Every rule is an exact
// formula in float arithmetic, evaluated in the order written, then rounded to the scale's
// storage dtype; codes and errors always use the stored scale.
//
// Notation: a group's values w_i, mn = min w_i, mx = max w_i, amax = max |w_i|, b = bits,
// maxq = 2^b - 1, store(x) = x rounded to F16/BF16 (round half to even), code_i =
// clamp(round_half_even(w_i / s) + z, 0, maxq), decoded value (code_i - z) * s.
//
// Symmetric policies (z = 2^(b-1)):
//   absmax       s = store(amax / (2^(b-1) - 1))                    never clips
//   gptq_absmax  s = store(amax / ((2^b - 1) / 2))                  GPTQ / compressed-tensors
//                                                                  (amax / 7.5 at 4 bits)
//   seed_fixed   s = store((amax * 0.875f) / 2^(b-1))               the seed exporter without search
//   seed_search  s = store((amax * f) / 2^(b-1)) for f in 1.06, 1.0, 0.95, 0.9, 0.875, 0.85,
//                0.8, 0.75: the candidate with the lowest squared error; strict `<`, so the
//                earliest candidate wins ties (the seed exporter's search).
// Asymmetric policies:
//   minmax       lo = min(mn, 0), hi = max(mx, 0); s = store((hi - lo) / maxq);
//                z = clamp(round_half_even(-lo / s), 0, maxq)      GPTQ / compressed-tensors
//   awq_minmax   s = store(max(mx - mn, 1e-5f) / maxq); z = clamp(round_half_even(-mn / s), 0, maxq)
//                (AutoAWQ pseudo_quantize_tensor: 0 is NOT forced into the range)
// Either symmetry:
//   mse          llm-compressor's MSE observer: for i = 0 .. floor(max_shrink * grid) - 1,
//                p = float(1 - i / grid) (in double, then rounded to float), shrink the range
//                to p * amax (symmetric, scale rule of gptq_absmax) or to p * lo, p * hi
//                together (asymmetric, scale rule of minmax), and keep the candidate with the
//                lowest sum imp_k |dq - w|^norm (strict `<`). No early stopping ("patience").
//   custom       quant_options::custom decides (see group_view); for least-squares policies.
//
// Edge rules (simd::group_amax, simd::group_range): a group whose range is all zero uses
// amax = 1 (symmetric) or lo = -1, hi = 1 (asymmetric), so its codes decode to exactly 0. A
// stored scale that rounds below the smallest usable value (F16: 2^-24, BF16: 2^-126, where
// 1/s stays finite) is raised to it; a scale that overflows the storage dtype is refused.
// Tails (the last, shorter group) follow the same formulas over the elements they have. With
// importance weights imp_k (one per input column) every error term is multiplied by imp_k.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/quant/quant_options.hpp"
#include "qforge/simd/no_contract.hpp"
#include "qforge/simd/kernel_table.hpp"
#include "qforge/simd/rounding.hpp"

namespace qforge {

/// The seed exporter's candidate factors, in its order (gptq_cpu_export.py).
inline constexpr std::array<float, 8> seed_factors{1.06f, 1.0f, 0.95f, 0.9f, 0.875f, 0.85f, 0.8f, 0.75f};
inline constexpr float seed_fixed_factor = 0.875f;

/// The unrounded scale formulas (float, evaluated exactly as written). The divisors of the
/// symmetric ones are also the make_grids recipes' `div`.
namespace scale_formula {
inline float absmax_div(int bits) noexcept { return static_cast<float>((1 << (bits - 1)) - 1); }
inline float gptq_div(int bits) noexcept { return static_cast<float>((1 << bits) - 1) / 2.0f; }
inline float seed_div(int bits) noexcept { return static_cast<float>(1 << (bits - 1)); }
inline float absmax(float amax, int bits) noexcept { return amax / absmax_div(bits); }
inline float gptq(float amax, int bits) noexcept { return amax / gptq_div(bits); }
inline float seed(float amax, float f, int bits) noexcept { return simd::no_contract(amax * f) / seed_div(bits); }
inline float minmax(float lo, float hi, int bits) noexcept { return (hi - lo) / static_cast<float>((1 << bits) - 1); }
inline float awq(float mn, float mx, int bits) noexcept {
    const float range = mx - mn;
    return (range > 1e-5f ? range : 1e-5f) / static_cast<float>((1 << bits) - 1);
}
}  // namespace scale_formula

/// Value of a stored 16-bit scale pattern. A function object rather than a function, so
/// argument-dependent lookup never drags it into other layers' unqualified calls.
inline constexpr struct scale_value_fn {
    float operator()(std::uint16_t bits, dtype d) const noexcept {
        return d == dtype::BF16 ? bf16_to_float(bits) : fp16_to_float(bits);
    }
} scale_value{};

/// Rounds a positive scale to its storage pattern (see "Edge rules" above); nullopt when it
/// overflows the dtype.
inline std::optional<std::uint16_t> store_scale(float s, dtype d) noexcept {
    std::uint16_t bits = d == dtype::BF16 ? float_to_bf16(s) : float_to_fp16(s);
    const std::uint16_t smallest = d == dtype::BF16 ? 0x0080 : 0x0001;
    if ((bits & 0x7FFFu) < smallest) bits = smallest;
    if ((bits & 0x7FFFu) >= (d == dtype::BF16 ? 0x7F80u : 0x7C00u)) return std::nullopt;
    return bits;
}

/// round_half_even for the scalar formulas: the kernels' own (simd/rounding.hpp).
using simd::round_half_even;

/// z = clamp(round_half_even(-lo / s), 0, maxq) against the stored scale s.
inline std::int32_t zero_from_min(float lo, float s, int maxq) noexcept {
    const float z = round_half_even(-lo / s);
    if (!(z > 0)) return 0;
    return z > static_cast<float>(maxq) ? maxq : static_cast<std::int32_t>(z);
}

/// One group as a policy sees it.
struct group_view {
    const float* w = nullptr;    ///< the group's values (as float)
    const float* imp = nullptr;  ///< importance per value, or null
    std::size_t n = 0;           ///< number of values (shorter for a tail)
    float mn = 0, mx = 0;        ///< min and max of w
    int bits = 4;
    bool symmetric = true;
    dtype scale_dtype = dtype::F16;
    std::int64_t row = 0, group = 0;  ///< position, for messages
    const std::string* tensor = nullptr;
    const simd::group_kernels* kernels = nullptr;

    int maxq() const noexcept { return (1 << bits) - 1; }

    /// Stored pattern of scale `s`, or an unsupported_error naming the tensor and group.
    std::uint16_t store(float s) const {
        const auto b = store_scale(s, scale_dtype);
        if (!b) overflow(s);
        return *b;
    }
    [[noreturn, gnu::noinline, gnu::cold]] void overflow(float s) const {
        fail<unsupported_error>({}, tensor ? *tensor : std::string{},
                                "scale " + std::to_string(s) + " of row " + std::to_string(row) + " group " +
                                    std::to_string(group) + " overflows " + std::string(dtype_name(scale_dtype)));
    }
    simd::grid_params grid(std::uint16_t scale_bits, std::int32_t zero, float norm = 2.0f) const noexcept {
        const float s = scale_value(scale_bits, scale_dtype);
        return {s, 1.0f / s, static_cast<float>(zero), static_cast<float>(maxq()), norm};
    }
    /// sum imp_i |dq_i - w_i|^norm on the grid (scale_bits, zero), the kernels' exact definition.
    float error(std::uint16_t scale_bits, std::int32_t zero, float norm = 2.0f) const noexcept {
        return kernels->error(w, imp, n, grid(scale_bits, zero, norm));
    }
};

namespace detail {

inline float sym_amax(const group_view& g) noexcept { return simd::group_amax(g.mn, g.mx); }

/// Index of the lowest error, the earliest on ties (strict `<`).
inline std::size_t first_lowest(const float* err, std::size_t count) noexcept {
    std::size_t best = 0;
    for (std::size_t i = 1; i < count; ++i)
        if (err[i] < err[best]) best = i;
    return best;
}

/// Policies whose scale is one formula of the group's min/max (no search): quantize() computes
/// a whole block of their groups with one make_grids call.
constexpr bool is_fixed_rule(scale_policy p) noexcept {
    return p == scale_policy::absmax || p == scale_policy::gptq_absmax || p == scale_policy::seed_fixed ||
           p == scale_policy::minmax || p == scale_policy::awq_minmax;
}

/// The make_grids recipe of a fixed-rule policy (the formulas at the top of this header).
inline simd::grid_recipe fixed_recipe(scale_policy p, int bits, dtype scale_dtype) noexcept {
    simd::grid_recipe r;
    r.bits = bits;
    r.bf16 = scale_dtype == dtype::BF16;
    switch (p) {
        case scale_policy::absmax: r.div = scale_formula::absmax_div(bits); break;
        case scale_policy::gptq_absmax: r.div = scale_formula::gptq_div(bits); break;
        case scale_policy::seed_fixed: r.div = scale_formula::seed_div(bits); break;
        case scale_policy::minmax: r.rule = simd::grid_rule::range; break;
        default: r.rule = simd::grid_rule::awq_range; break;
    }
    return r;
}

/// make_grids inputs (a, b) of a fixed-rule policy for a group with min mn and max mx.
inline void fixed_inputs(scale_policy p, float mn, float mx, float& a, float& b) noexcept {
    b = 0;
    switch (p) {
        case scale_policy::absmax:
        case scale_policy::gptq_absmax: a = simd::group_amax(mn, mx); return;
        case scale_policy::seed_fixed: a = simd::no_contract(simd::group_amax(mn, mx) * seed_fixed_factor); return;
        case scale_policy::minmax: simd::group_range(mn, mx, a, b); return;
        default: a = mn, b = mx; return;
    }
}

/// A search policy as one search_groups call: its candidate factors and recipe. Empty when
/// the policy is not a search or has more candidates than one call takes (choose_group then
/// runs it group by group, with the same result).
struct search_plan {
    std::vector<float> factors;
    simd::grid_recipe recipe;
};

/// The seed search's recipe (scale rule of scale_formula::seed).
inline simd::grid_recipe seed_recipe(int bits, dtype scale_dtype) noexcept {
    simd::grid_recipe r;
    r.bits = bits;
    r.div = scale_formula::seed_div(bits);
    r.bf16 = scale_dtype == dtype::BF16;
    return r;
}

/// The mse search's recipe (scale rule of scale_formula::gptq, or of minmax), its number of
/// candidates and candidate i's shrink factor (see the top of this header).
inline simd::grid_recipe mse_recipe(int bits, bool symmetric, dtype scale_dtype, const search_params& sp) noexcept {
    simd::grid_recipe r;
    r.rule = symmetric ? simd::grid_rule::symmetric : simd::grid_rule::range;
    r.bits = bits;
    r.div = scale_formula::gptq_div(bits);
    r.bf16 = scale_dtype == dtype::BF16;
    r.norm = sp.norm;
    return r;
}
inline std::size_t mse_steps(const search_params& sp) noexcept {
    return static_cast<std::size_t>(static_cast<double>(sp.max_shrink) * sp.grid);
}
inline float mse_factor(std::size_t i, const search_params& sp) noexcept {
    return static_cast<float>(1.0 - static_cast<double>(i) / sp.grid);
}

inline std::optional<search_plan> plan_search(scale_policy p, int bits, bool symmetric, dtype scale_dtype,
                                              const search_params& sp) {
    search_plan plan;
    if (p == scale_policy::seed_search) {
        plan.factors.assign(seed_factors.begin(), seed_factors.end());
        plan.recipe = seed_recipe(bits, scale_dtype);
        return plan;
    }
    if (p != scale_policy::mse) return std::nullopt;
    const std::size_t steps = mse_steps(sp);
    if (steps > simd::max_search_candidates) return std::nullopt;
    for (std::size_t i = 0; i < steps; ++i) plan.factors.push_back(mse_factor(i, sp));
    plan.recipe = mse_recipe(bits, symmetric, scale_dtype, sp);
    return plan;
}

inline group_choice choose_mse(const group_view& g, const search_params& sp) {
    const std::size_t steps = mse_steps(sp);
    float lo, hi;
    simd::group_range(g.mn, g.mx, lo, hi);
    const float amax = sym_amax(g);
    constexpr std::size_t batch = 32;
    std::uint16_t scales[batch];
    simd::grid_params grid[batch];
    float a[batch], b[batch], err[batch];
    const simd::grid_recipe recipe = mse_recipe(g.bits, g.symmetric, g.scale_dtype, sp);
    group_choice best{};
    float best_err = 0;
    for (std::size_t i0 = 0; i0 < steps; i0 += batch) {
        const std::size_t count = std::min(batch, steps - i0);
        for (std::size_t j = 0; j < count; ++j) {
            const float p = mse_factor(i0 + j, sp);
            if (g.symmetric) {
                a[j] = simd::no_contract(p * amax);
            } else {
                a[j] = simd::no_contract(p * lo);
                b[j] = simd::no_contract(p * hi);
            }
        }
        const std::int64_t bad = g.kernels->make_grids(a, b, count, recipe, scales, grid);
        if (bad >= 0) {
            const auto j = static_cast<std::size_t>(bad);
            g.overflow(g.symmetric ? scale_formula::gptq(a[j], g.bits) : scale_formula::minmax(a[j], b[j], g.bits));
        }
        g.kernels->errors(g.w, g.imp, g.n, grid, count, err);
        const std::size_t w = first_lowest(err, count);
        if (i0 == 0 || err[w] < best_err)
            best = {scales[w], static_cast<std::int32_t>(grid[w].zero)}, best_err = err[w];
    }
    return best;
}

}  // namespace detail

/// The choice of a built-in policy (not custom) for one group.
inline group_choice choose_group(scale_policy policy, const group_view& g, const search_params& sp) {
    const int pinned = 1 << (g.bits - 1);
    switch (policy) {
        case scale_policy::absmax: return {g.store(scale_formula::absmax(detail::sym_amax(g), g.bits)), pinned};
        case scale_policy::gptq_absmax: return {g.store(scale_formula::gptq(detail::sym_amax(g), g.bits)), pinned};
        case scale_policy::seed_fixed:
            return {g.store(scale_formula::seed(detail::sym_amax(g), seed_fixed_factor, g.bits)), pinned};
        case scale_policy::seed_search: {
            const float amax = detail::sym_amax(g);
            constexpr std::size_t count = seed_factors.size();
            std::uint16_t scales[count];
            simd::grid_params grid[count];
            float a[count], err[count];
            for (std::size_t i = 0; i < count; ++i) a[i] = simd::no_contract(amax * seed_factors[i]);
            const simd::grid_recipe recipe = detail::seed_recipe(g.bits, g.scale_dtype);
            const std::int64_t bad = g.kernels->make_grids(a, nullptr, count, recipe, scales, grid);
            if (bad >= 0) g.overflow(scale_formula::seed(amax, seed_factors[static_cast<std::size_t>(bad)], g.bits));
            g.kernels->errors(g.w, g.imp, g.n, grid, seed_factors.size(), err);
            return {scales[detail::first_lowest(err, seed_factors.size())], pinned};
        }
        case scale_policy::minmax: {
            float lo, hi;
            simd::group_range(g.mn, g.mx, lo, hi);
            const std::uint16_t s = g.store(scale_formula::minmax(lo, hi, g.bits));
            return {s, zero_from_min(lo, scale_value(s, g.scale_dtype), g.maxq())};
        }
        case scale_policy::awq_minmax: {
            const std::uint16_t s = g.store(scale_formula::awq(g.mn, g.mx, g.bits));
            return {s, zero_from_min(g.mn, scale_value(s, g.scale_dtype), g.maxq())};
        }
        case scale_policy::mse: return detail::choose_mse(g, sp);
        case scale_policy::custom: break;
    }
    fail<unsupported_error>({}, g.tensor ? *g.tensor : std::string{}, "custom policy has no built-in rule");
}

}  // namespace qforge
