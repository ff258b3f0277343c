// The least-squares kernels (quant/detail/lsq_kernels.ipp) compiled once per ISA over the
// primitives of simd/arch/<isa>.hpp, and looked up by the same simd::isa the quantizer runs
// with, so a forced ISA (QFORGE_FORCE_ISA) covers the least-squares fit too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "qforge/simd/arch/avx2.hpp"
#include "qforge/simd/arch/avx512.hpp"
#include "qforge/simd/arch/neon.hpp"
#include "qforge/simd/arch/scalar.hpp"
#include "qforge/simd/kernel_table.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::detail {

/// Seeds scored by one lanes() pass: one 8-float vector (AVX-512 runs the AVX2 instance; on
/// cores that split 512-bit operations in two, as the Zen 4 this was tuned on, that costs the
/// same per seed).
inline constexpr std::size_t lsq_pass_lanes = 8;

/// What one lanes() pass returns per lane (see lsq_kernels.ipp).
struct lsq_lane_fits {
    alignas(32) float a[lsq_pass_lanes];      ///< sum w k x
    alignas(32) float b[lsq_pass_lanes];      ///< sum w k k
    alignas(32) float gain[lsq_pass_lanes];   ///< a^2 / b, or 0 where the refit is no candidate
    alignas(32) float scale[lsq_pass_lanes];  ///< |a| / b as stored (1 where gain is 0)
    alignas(32) float rinv[lsq_pass_lanes];   ///< 1.0f / scale
    std::uint16_t bits[lsq_pass_lanes];       ///< scale's F16/BF16 pattern (may be infinity)
};

struct lsq_kernel_table {
    /// lsq_pass_lanes seeds at once, lane c with multiplier m f[c] and zero z0 + d[c], scales
    /// stored as BF16 (bf16) or F16 (lsq_kernels.ipp has the rules).
    void (*lanes)(const float* x, const float* imp, std::size_t n, const float* f, const float* d, float m, float z0,
                  float maxq, bool bf16, lsq_lane_fits& out) noexcept;
    /// One grid's refit sums: k = clamp(round(x rinv), -z, maxq - z), out = {sum w k x, sum w k k}.
    void (*refit)(const float* x, const float* imp, std::size_t n, float rinv, int z, int maxq, float* out) noexcept;
    /// out[j] = simd::group_kernels::error(x, imp, n, g[j]) for j = 0, 1 (norm 2), bit for bit,
    /// in one pass.
    void (*errors2)(const float* x, const float* imp, std::size_t n, const simd::grid_params* g, float* out) noexcept;
};

namespace lsq_scalar_isa {
using namespace ::qforge::simd::detail::scalar_isa;
#define QFORGE_KFN inline
#define QFORGE_LSQ_LANES
#include "qforge/quant/detail/lsq_kernels.ipp"
#undef QFORGE_LSQ_LANES
#undef QFORGE_KFN
inline const lsq_kernel_table& lsq_table() noexcept {
    static constexpr lsq_kernel_table table{&lsq_k_lanes, &lsq_k_refit, &lsq_k_errors2};
    return table;
}
}  // namespace lsq_scalar_isa

#if QFORGE_SIMD_X86
namespace lsq_avx2_isa {
using namespace ::qforge::simd::detail::avx2_isa;
#define QFORGE_KFN QFORGE_TARGET_AVX2 inline
#define QFORGE_LSQ_LANES
#include "qforge/quant/detail/lsq_kernels.ipp"
#undef QFORGE_LSQ_LANES
#undef QFORGE_KFN
inline const lsq_kernel_table& lsq_table() noexcept {
    static constexpr lsq_kernel_table table{&lsq_k_lanes, &lsq_k_refit, &lsq_k_errors2};
    return table;
}
}  // namespace lsq_avx2_isa

namespace lsq_avx512_isa {
using namespace ::qforge::simd::detail::avx512_isa;
#define QFORGE_KFN QFORGE_TARGET_AVX512 inline
#include "qforge/quant/detail/lsq_kernels.ipp"
#undef QFORGE_KFN
inline const lsq_kernel_table& lsq_table() noexcept {
    static constexpr lsq_kernel_table table{&lsq_avx2_isa::lsq_k_lanes, &lsq_k_refit, &lsq_k_errors2};
    return table;
}
}  // namespace lsq_avx512_isa
#endif

#if QFORGE_SIMD_NEON
namespace lsq_neon_isa {
using namespace ::qforge::simd::detail::neon_isa;
#define QFORGE_KFN inline
#define QFORGE_LSQ_LANES
#include "qforge/quant/detail/lsq_kernels.ipp"
#undef QFORGE_LSQ_LANES
#undef QFORGE_KFN
inline const lsq_kernel_table& lsq_table() noexcept {
    static constexpr lsq_kernel_table table{&lsq_k_lanes, &lsq_k_refit, &lsq_k_errors2};
    return table;
}
}  // namespace lsq_neon_isa
#endif

/// The kernels of ISA `i` (the scalar ones when `i` is not compiled in; callers pass an ISA
/// that simd::kernels() accepted, so it can run here).
inline const lsq_kernel_table& lsq_kernels(simd::isa i) noexcept {
    switch (i) {
#if QFORGE_SIMD_X86
        case simd::isa::avx512: return lsq_avx512_isa::lsq_table();
        case simd::isa::avx2: return lsq_avx2_isa::lsq_table();
#endif
#if QFORGE_SIMD_NEON
        case simd::isa::neon: return lsq_neon_isa::lsq_table();
#endif
        default: return lsq_scalar_isa::lsq_table();
    }
}

}  // namespace qforge::detail
