// The options of the quantizers (quantize() and the GPTQ solver) and the names of the scale
// policies: what a converter's options hold, in a header that compiles none of the kernels.
// The rules behind each policy are in quant/scale_policy.hpp, the drivers in quant/quantize.hpp
// and quant/gptq_solver.hpp.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>

#include "qforge/core/dtype.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge {

enum class scale_policy { absmax, gptq_absmax, seed_fixed, seed_search, minmax, awq_minmax, mse, custom };

inline constexpr std::array<scale_policy, 8> all_scale_policies{
    scale_policy::absmax, scale_policy::gptq_absmax, scale_policy::seed_fixed, scale_policy::seed_search,
    scale_policy::minmax, scale_policy::awq_minmax,  scale_policy::mse,        scale_policy::custom};

constexpr std::string_view policy_name(scale_policy p) noexcept {
    switch (p) {
        case scale_policy::absmax: return "absmax";
        case scale_policy::gptq_absmax: return "gptq_absmax";
        case scale_policy::seed_fixed: return "seed_fixed";
        case scale_policy::seed_search: return "seed_search";
        case scale_policy::minmax: return "minmax";
        case scale_policy::awq_minmax: return "awq_minmax";
        case scale_policy::mse: return "mse";
        case scale_policy::custom: return "custom";
    }
    return "?";
}

constexpr std::optional<scale_policy> policy_from_name(std::string_view name) noexcept {
    for (scale_policy p : all_scale_policies)
        if (policy_name(p) == name) return p;
    return std::nullopt;
}

/// Whether policy `p` is defined for a symmetric (or asymmetric) scheme.
constexpr bool policy_supports(scale_policy p, bool symmetric) noexcept {
    switch (p) {
        case scale_policy::absmax:
        case scale_policy::gptq_absmax:
        case scale_policy::seed_fixed:
        case scale_policy::seed_search: return symmetric;
        case scale_policy::minmax:
        case scale_policy::awq_minmax: return !symmetric;
        case scale_policy::mse:
        case scale_policy::custom: return true;
    }
    return false;
}

/// What a policy decides for one group.
struct group_choice {
    std::uint16_t scale = 0;  ///< storage pattern (F16/BF16 per group_view::scale_dtype)
    std::int32_t zero = 0;    ///< code-space zero point
};

struct group_view;  // quant/scale_policy.hpp: one group as a policy sees it

/// A user-supplied policy (scale_policy::custom).
using group_policy = std::function<group_choice(const group_view&)>;

/// Parameters of the search policies.
struct search_params {
    float norm = 2.4f;        ///< mse error exponent (llm-compressor default 2.4; 2.0 = squared)
    int grid = 100;           ///< mse grid
    float max_shrink = 0.2f;  ///< mse: candidates i = 0 .. floor(max_shrink * grid) - 1
};

struct quant_options {
    int bits = 4;                                      ///< 2..8
    int group_size = 128;                              ///< power of two <= K, or -1 (per channel)
    bool symmetric = true;                             ///< zero pinned at 2^(bits-1)
    scale_policy policy = scale_policy::gptq_absmax;   ///< must suit `symmetric` (policy_supports)
    dtype scale_dtype = dtype::F16;                    ///< F16 or BF16
    search_params search{};                            ///< mse: norm, grid, max_shrink
    std::span<const float> importance{};               ///< empty, or one weight >= 0 per input column
    std::optional<simd::isa> isa{};                    ///< empty: simd::active_isa()
    group_policy custom{};                             ///< used when policy == custom
};

struct gptq_solver_options {
    quant_options quant{};       ///< bits, group size, symmetry, scale policy (any, incl. custom), scale dtype
    double damp_percent = 0.01;  ///< dampening as a fraction of mean diag(H) (AutoGPTQ 0.01, transformers 0.1)
    int block_size = 128;        ///< columns per lazy-update block
    bool act_order = false;      ///< process columns by descending diag(H) (desc_act)
    bool static_groups = false;  ///< choose every group's grid from the original weights first
    int damp_retries = 6;        ///< extra attempts, each with 10x the dampening
};

}  // namespace qforge
