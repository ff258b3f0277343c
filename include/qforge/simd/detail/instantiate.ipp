// Instantiates one kernel family for every ISA of the list.
//
// No include guard on purpose: a family header defines QFORGE_FAMILY_IPP (the family's
// kernels, written once over the primitives of simd/arch/<isa>.hpp) and includes this file,
// which compiles that text once per ISA inside the ISA's namespace, with
//   QFORGE_KFN         the ISA's target attribute + inline, for every kernel function,
//   QFORGE_KERNEL_ISA  the simd::isa value, for the table's `id`,
//   QFORGE_KERNEL_TAG  the ISA's tag type.
// The family's .ipp ends with `template <> inline const Table& family_table<Table>() noexcept`,
// which arch_of<tag>::table<Table>() returns. A new ISA adds its block here.
#ifndef QFORGE_FAMILY_IPP
#error "define QFORGE_FAMILY_IPP (the family's kernels) before including simd/detail/instantiate.ipp"
#endif

#include "qforge/simd/arch/avx2.hpp"
#include "qforge/simd/arch/avx512.hpp"
#include "qforge/simd/arch/neon.hpp"
#include "qforge/simd/arch/scalar.hpp"

namespace qforge::simd::detail::scalar_isa {
#define QFORGE_KFN inline
#define QFORGE_KERNEL_ISA ::qforge::simd::isa::scalar
#define QFORGE_KERNEL_TAG ::qforge::simd::scalar_tag
#include QFORGE_FAMILY_IPP
#undef QFORGE_KERNEL_TAG
#undef QFORGE_KERNEL_ISA
#undef QFORGE_KFN
}  // namespace qforge::simd::detail::scalar_isa

#if QFORGE_SIMD_X86
namespace qforge::simd::detail::avx2_isa {
#define QFORGE_KFN QFORGE_TARGET_AVX2 inline
#define QFORGE_KERNEL_ISA ::qforge::simd::isa::avx2
#define QFORGE_KERNEL_TAG ::qforge::simd::avx2_tag
#include QFORGE_FAMILY_IPP
#undef QFORGE_KERNEL_TAG
#undef QFORGE_KERNEL_ISA
#undef QFORGE_KFN
}  // namespace qforge::simd::detail::avx2_isa

// GCC 12 reports its own AVX-512 intrinsics (`__m512 __Y = __Y;` placeholders) as
// uninitialized when AVX-512 comes from a target attribute rather than -mavx512f.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
namespace qforge::simd::detail::avx512_isa {
#define QFORGE_KFN QFORGE_TARGET_AVX512 inline
#define QFORGE_KERNEL_ISA ::qforge::simd::isa::avx512
#define QFORGE_KERNEL_TAG ::qforge::simd::avx512_tag
#include QFORGE_FAMILY_IPP
#undef QFORGE_KERNEL_TAG
#undef QFORGE_KERNEL_ISA
#undef QFORGE_KFN
}  // namespace qforge::simd::detail::avx512_isa
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // QFORGE_SIMD_X86

#if QFORGE_SIMD_NEON
namespace qforge::simd::detail::neon_isa {
#define QFORGE_KFN inline
#define QFORGE_KERNEL_ISA ::qforge::simd::isa::neon
#define QFORGE_KERNEL_TAG ::qforge::simd::neon_tag
#include QFORGE_FAMILY_IPP
#undef QFORGE_KERNEL_TAG
#undef QFORGE_KERNEL_ISA
#undef QFORGE_KFN
}  // namespace qforge::simd::detail::neon_isa
#endif  // QFORGE_SIMD_NEON
