// The per-ISA group kernels, as one table of plain function pointers.
//
// Kernels are written once (simd/kernels/group_kernels.ipp) over each ISA's primitives and
// compiled once per ISA with that ISA's target attribute. The quantizer looks the table up
// once per tensor and calls through it once per group, so no indirect call sits inside an
// element loop.
//
// Every entry is byte-identical across ISAs; the scalar table is the definition. The rules
// that make that possible are documented on each entry.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "qforge/core/dtype.hpp"
#include "qforge/simd/no_contract.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::simd {

/// The grid one candidate (or the final choice) of a group is evaluated on.
struct grid_params {
    float scale = 1;  ///< the scale as stored: a nonzero F16 or BF16 value (the kernels rely on its
                      ///< <= 11 significant bits to test quotient ties exactly)
    float rinv = 1;   ///< 1.0f / scale, rounded once (the fast path's multiplier)
    float zero = 0;   ///< integer zero point in code space
    float maxq = 15;  ///< 2^bits - 1
    float norm = 2;   ///< error exponent p of sum |e|^p; exactly 2 selects the plain square
};

/// How make_grids turns a group's inputs (a, b) into its stored scale and zero; the formulas
/// of quant/scale_policy.hpp, where the policies compute a and b.
enum class grid_rule : std::uint8_t {
    symmetric,  ///< raw = a / div, zero pinned at 2^(bits-1)
    range,      ///< raw = (b - a) / maxq, zero = clamp(round_half_even(-a / s), 0, maxq)
    awq_range,  ///< raw = max(b - a, 1e-5f) / maxq, zero as for range
};

struct grid_recipe {
    grid_rule rule = grid_rule::symmetric;
    int bits = 4;
    float div = 1;       ///< symmetric: the divisor
    bool bf16 = false;   ///< scales stored as BF16 (else F16)
    float norm = 2;      ///< copied into every grid
};

/// The group-range rules of quant/scale_policy.hpp ("Edge rules"), defined once here because
/// search_groups applies them inside the kernels and the policies outside. Plain float code
/// (no intrinsics), so the kernels of every ISA inline it.
///
/// max(-mn, mx), as compared: NaN when mx is NaN.
inline float group_abs_max(float mn, float mx) noexcept { return -mn > mx ? -mn : mx; }

/// A symmetric group's amax: group_abs_max, or 1 when that is not positive (an all-zero group;
/// also NaN), so that the group's codes decode to exactly 0.
inline float group_amax(float mn, float mx) noexcept {
    const float amax = group_abs_max(mn, mx);
    return amax > 0 ? amax : 1.0f;
}

/// An asymmetric group's range: lo = min(mn, 0), hi = max(mx, 0), or -1 and 1 when both are 0.
inline void group_range(float mn, float mx, float& lo, float& hi) noexcept {
    lo = mn < 0 ? mn : 0.0f;
    hi = mx > 0 ? mx : 0.0f;
    if (lo == 0 && hi == 0) lo = -1, hi = 1;
}

/// The most candidates one search_groups call takes.
inline constexpr std::size_t max_search_candidates = 128;

struct group_kernels {
    static constexpr std::string_view family_name = "group";
    isa id = isa::scalar;

    /// Converts n elements of F32, F16 or BF16 (any alignment) to float, exactly. Returns the
    /// index of the first NaN or infinity, or -1 when every element is finite.
    std::int64_t (*to_f32)(const std::byte* src, dtype type, std::size_t n, float* dst) noexcept;

    /// Smallest and largest of w[0..n), n >= 1.
    void (*min_max)(const float* w, std::size_t n, float* mn, float* mx) noexcept;

    /// Error of coding w[0..n) on the grid: sum over i of imp[i] * |dq_i - w_i|^norm (imp may
    /// be null = all ones), where code_i = clamp(round_half_even(w_i / scale) + zero, 0, maxq)
    /// with w_i / scale the IEEE float quotient, and dq_i = (code_i - zero) * scale (exact in
    /// float). Reduction order: element i goes to partial sum i % 8, partials in increasing i,
    /// then ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)). No product is ever fused into an add.
    float (*error)(const float* w, const float* imp, std::size_t n, const grid_params& p) noexcept;

    /// codes[i] = clamp(round_half_even(w_i / scale) + zero, 0, maxq), as error() defines it.
    void (*encode)(const float* w, std::size_t n, const grid_params& p, std::uint8_t* codes) noexcept;

    /// out[c] = error(w, imp, n, p[c]) for every candidate c < count, in one call.
    void (*errors)(const float* w, const float* imp, std::size_t n, const grid_params* p, std::size_t count,
                   float* out) noexcept;

    /// min_max of each group of w[0..n): groups of gsize values (the last one shorter when gsize
    /// does not divide n) -> mn[j], mx[j].
    void (*min_max_groups)(const float* w, std::size_t n, std::size_t gsize, float* mn, float* mx) noexcept;

    /// For j < count: the raw scale of `recipe` from (a[j], b[j]) in float, stored as F16/BF16
    /// (round half to even; a pattern below the smallest positive one, F16 0x0001, BF16 0x0080,
    /// is raised to it), its pattern in scale_bits[j] and grids[j] = {s, 1.0f / s, zero, maxq,
    /// norm} with s the stored value. Returns the first j whose scale overflows the dtype
    /// (its grid is then meaningless), or -1. b may be null for the symmetric rule.
    std::int64_t (*make_grids)(const float* a, const float* b, std::size_t count, const grid_recipe& recipe,
                               std::uint16_t* scale_bits, grid_params* grids) noexcept;

    /// encode of each group of w[0..n) on its own grid p[j] (groups as in min_max_groups).
    /// With `snr` (8 doubles: signal partials 0-3, error partials 0-3; requires gsize % 4 == 0
    /// and w[0] at a stream position that is a multiple of 4) it also adds each element's w^2
    /// and (w - dq)^2, dq = (code - zero) * scale, in double, element i to partial i % 4, in
    /// increasing i, products never fused: the order quant/snr.hpp defines.
    void (*encode_groups)(const float* w, std::size_t n, std::size_t gsize, const grid_params* p,
                          std::uint8_t* codes, double* snr) noexcept;

    /// to_f32 and min_max_groups in one pass over src: dst as to_f32 writes it, mn/mx as
    /// min_max_groups computes them from dst. Returns to_f32's result (mn/mx are unspecified
    /// when it is not -1).
    std::int64_t (*to_f32_min_max_groups)(const std::byte* src, dtype type, std::size_t n, std::size_t gsize,
                                          float* dst, float* mn, float* mx) noexcept;

    /// A search over candidate scales for every group of w[0..n) (groups as in
    /// min_max_groups, mn[j] and mx[j] each group's smallest and largest values as
    /// min_max_groups gives them, importance imp + group start or null): for each
    /// candidate c < count (<= max_search_candidates), symmetric recipe: a_c = factors[c] *
    /// group_amax(mn, mx); range recipes: a_c = factors[c] * lo, b_c = factors[c] * hi with
    /// group_range(mn, mx, lo, hi); each candidate's grid as make_grids makes it and its error
    /// as errors() computes it; the lowest error wins, the earliest on ties: scale_bits[j],
    /// grids[j]. Returns the first group where some candidate's scale overflows (its outputs
    /// are then unset), or -1.
    std::int64_t (*search_groups)(const float* w, const float* imp, std::size_t n, std::size_t gsize,
                                  const float* mn, const float* mx, const float* factors, std::size_t count,
                                  const grid_recipe& recipe, std::uint16_t* scale_bits, grid_params* grids) noexcept;

    /// Adds to `snr` (8 doubles: signal partials 0-3, error partials 0-3) each element's x[i]^2
    /// and (x[i] - y[i])^2 for i < n, in double, element i to partial i % 4, in increasing i,
    /// products never fused: the order quant/snr.hpp defines, for a reference x and a decoded y
    /// (a GGUF row against its dequantized blocks).
    void (*snr_sums)(const float* x, const float* y, std::size_t n, double* snr) noexcept;
};

}  // namespace qforge::simd
