// The least-squares kernels (simd/kernels/lsq_kernels.ipp): the SIMD part of quant/
// least_squares.hpp's fit, one kernel family instantiated for every ISA and chosen through
// kernels_of like every other, so a forced ISA (QFORGE_FORCE_ISA) covers the fit too.
//
// Every entry is byte-identical across ISAs; the scalar table is the definition.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "qforge/simd/family.hpp"
#include "qforge/simd/group_kernels.hpp"  // errors2 is built from the group kernels' element error
#include "qforge/simd/kernel_table.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::simd {

/// Seeds scored by one lanes() pass: one 8-float vector. AVX-512 runs the AVX2 instance of
/// lanes(); on cores that split 512-bit operations in two, as the Zen 4 this was tuned on,
/// that costs the same per seed.
inline constexpr std::size_t lsq_pass_lanes = 8;

/// What one lanes() pass returns per lane (see simd/kernels/lsq_kernels.ipp).
struct lsq_lane_fits {
    alignas(32) float a[lsq_pass_lanes];      ///< sum w k x
    alignas(32) float b[lsq_pass_lanes];      ///< sum w k k
    alignas(32) float gain[lsq_pass_lanes];   ///< a^2 / b, or 0 where the refit is no candidate
    alignas(32) float scale[lsq_pass_lanes];  ///< |a| / b as stored (1 where gain is 0)
    alignas(32) float rinv[lsq_pass_lanes];   ///< 1.0f / scale
    std::uint16_t bits[lsq_pass_lanes];       ///< scale's F16/BF16 pattern (may be infinity)
};

struct lsq_kernels {
    static constexpr std::string_view family_name = "least-squares";
    isa id = isa::scalar;

    /// lsq_pass_lanes seeds at once, lane c with multiplier m f[c] and zero z0 + d[c], scales
    /// stored as BF16 (bf16) or F16 (simd/kernels/lsq_kernels.ipp has the rules).
    void (*lanes)(const float* x, const float* imp, std::size_t n, const float* f, const float* d, float m, float z0,
                  float maxq, bool bf16, lsq_lane_fits& out) noexcept;
    /// One grid's refit sums: k = clamp(round(x rinv), -z, maxq - z), out = {sum w k x, sum w k k}.
    void (*refit)(const float* x, const float* imp, std::size_t n, float rinv, int z, int maxq, float* out) noexcept;
    /// out[j] = group_kernels::error(x, imp, n, g[j]) for j = 0, 1 (norm 2), bit for bit, in
    /// one pass.
    void (*errors2)(const float* x, const float* imp, std::size_t n, const grid_params* g, float* out) noexcept;
};

}  // namespace qforge::simd

#define QFORGE_FAMILY_IPP "qforge/simd/kernels/lsq_kernels.ipp"
#define QFORGE_FAMILY_TABLE lsq_kernels
#include "qforge/simd/detail/instantiate.ipp"
#undef QFORGE_FAMILY_TABLE
#undef QFORGE_FAMILY_IPP
