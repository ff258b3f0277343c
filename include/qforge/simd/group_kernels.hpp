// The group kernels (simd/kernels/group_kernels.ipp; their contract is simd/kernel_table.hpp),
// instantiated for every ISA.
#pragma once

#include "qforge/simd/family.hpp"
#include "qforge/simd/kernel_table.hpp"
#include "qforge/simd/tuning.hpp"

#define QFORGE_FAMILY_IPP "qforge/simd/kernels/group_kernels.ipp"
#define QFORGE_FAMILY_TABLE group_kernels
#include "qforge/simd/detail/instantiate.ipp"
#undef QFORGE_FAMILY_TABLE
#undef QFORGE_FAMILY_IPP

namespace qforge::simd {

/// The group kernels of `i`; throws when `i` cannot run here.
inline const group_kernels& kernels(isa i) { return kernels_of<group_kernels>(i); }

}  // namespace qforge::simd
