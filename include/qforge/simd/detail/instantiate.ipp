// Instantiates one kernel family for every ISA of the list.
//
// No include guard on purpose: a family header defines QFORGE_FAMILY_IPP (the family's
// kernels, written once over the primitives of simd/arch/<isa>.hpp) and includes this file,
// which compiles that text once per ISA inside the ISA's namespace, with
//   QFORGE_KFN         the ISA's target attribute + inline, for every kernel function,
//   QFORGE_KERNEL_ISA  the simd::isa value, for the table's `id`,
//   QFORGE_KERNEL_TAG  the ISA's tag type.
// The family's .ipp ends with `template <> QFORGE_DECL const Table& family_table<Table>()`,
// which arch_of<tag>::table<Table>() returns. A new ISA adds its block here, twice.
//
// With QFORGE_SEPARATE_COMPILATION (core/config.hpp) only the TU that defines
// QFORGE_IMPLEMENTATION (or QFORGE_IMPLEMENTATION_BASE) compiles the kernels; every other TU declares each ISA's table (QFORGE_FAMILY_TABLE, the table type)
// and links against it. The kernels are the costliest code qforge compiles (every family, three
// or four ISAs, all inlined), and no caller needs their bodies: they are reached only through
// the tables.
#ifndef QFORGE_FAMILY_IPP
#error "define QFORGE_FAMILY_IPP (the family's kernels) before including simd/detail/instantiate.ipp"
#endif
#ifndef QFORGE_FAMILY_TABLE
#error "define QFORGE_FAMILY_TABLE (the family's table type) before including simd/detail/instantiate.ipp"
#endif

#include "qforge/core/config.hpp"
#include "qforge/simd/arch/avx2.hpp"
#include "qforge/simd/arch/avx512.hpp"
#include "qforge/simd/arch/neon.hpp"
#include "qforge/simd/arch/scalar.hpp"

#if !QFORGE_BASE_BODIES_HERE
namespace qforge::simd::detail::scalar_isa {
template <>
const QFORGE_FAMILY_TABLE& family_table<QFORGE_FAMILY_TABLE>() noexcept;
}
#if QFORGE_SIMD_X86
namespace qforge::simd::detail::avx2_isa {
template <>
const QFORGE_FAMILY_TABLE& family_table<QFORGE_FAMILY_TABLE>() noexcept;
}
namespace qforge::simd::detail::avx512_isa {
template <>
const QFORGE_FAMILY_TABLE& family_table<QFORGE_FAMILY_TABLE>() noexcept;
}
#endif
#if QFORGE_SIMD_NEON
namespace qforge::simd::detail::neon_isa {
template <>
const QFORGE_FAMILY_TABLE& family_table<QFORGE_FAMILY_TABLE>() noexcept;
}
#endif
#else  // the kernels' bodies, once per ISA

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
#endif  // QFORGE_BASE_BODIES_HERE
