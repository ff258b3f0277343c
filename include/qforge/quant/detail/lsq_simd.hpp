// The least-squares kernels (quant/detail/lsq_kernels.ipp) compiled once per ISA over the
// primitives of simd/arch/<isa>.hpp, and looked up by the same simd::isa the quantizer runs
// with, so a forced ISA (QFORGE_FORCE_ISA) covers the least-squares fit too.
#pragma once

#include <cstddef>
#include <cstring>

#include "qforge/simd/arch/avx2.hpp"
#include "qforge/simd/arch/avx512.hpp"
#include "qforge/simd/arch/neon.hpp"
#include "qforge/simd/arch/scalar.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::detail {

struct lsq_kernel_table {
    /// out[0] = sum w, out[1] = sum w x.
    void (*base)(const float* x, const float* imp, std::size_t n, float* out) noexcept;
    /// Per candidate multiplier r[c] and zero z = z0 .. z0+nz-1 (nz 1..3): sums of
    /// k = clamp(round(x r[c]), -z, maxq - z): w k x, w k k, w k (0 unless with_k) at
    /// out[(c nz + j) 3 + 0..2].
    void (*cand)(const float* x, const float* imp, std::size_t n, const float* r, std::size_t count, int z0, int nz,
                 int maxq, bool with_k, float* out) noexcept;
};

namespace lsq_scalar_isa {
using namespace ::qforge::simd::detail::scalar_isa;
#define QFORGE_KFN inline
#include "qforge/quant/detail/lsq_kernels.ipp"
#undef QFORGE_KFN
}  // namespace lsq_scalar_isa

#if QFORGE_SIMD_X86
namespace lsq_avx2_isa {
using namespace ::qforge::simd::detail::avx2_isa;
#define QFORGE_KFN QFORGE_TARGET_AVX2 inline
#include "qforge/quant/detail/lsq_kernels.ipp"
#undef QFORGE_KFN
}  // namespace lsq_avx2_isa

namespace lsq_avx512_isa {
using namespace ::qforge::simd::detail::avx512_isa;
#define QFORGE_KFN QFORGE_TARGET_AVX512 inline
#include "qforge/quant/detail/lsq_kernels.ipp"
#undef QFORGE_KFN
}  // namespace lsq_avx512_isa
#endif

#if QFORGE_SIMD_NEON
namespace lsq_neon_isa {
using namespace ::qforge::simd::detail::neon_isa;
#define QFORGE_KFN inline
#include "qforge/quant/detail/lsq_kernels.ipp"
#undef QFORGE_KFN
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
