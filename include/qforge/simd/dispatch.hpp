// Kept for existing includes: the ISA choice and dispatch (simd/family.hpp) and the group
// kernels (simd/group_kernels.hpp).
#pragma once

#include "qforge/simd/family.hpp"
#include "qforge/simd/group_kernels.hpp"
