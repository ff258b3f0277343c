// The translation unit of qforge's own programs that compiles the lower layers' separately
// compiled part (core/config.hpp, QFORGE_IMPLEMENTATION_BASE): core's regex and the SIMD kernel
// families for every ISA, which every other TU of a test, bench or example reaches through the
// kernel tables. Apart from the entry points' object, so that a build of the lower layers'
// tests (the aarch64 stage) compiles only this, and a parallel build compiles both at once.
#define QFORGE_IMPLEMENTATION_BASE
#include "qforge/core/regex.hpp"
#include "qforge/simd/gguf_kernels.hpp"
#include "qforge/simd/group_kernels.hpp"
#include "qforge/simd/lsq_kernels.hpp"
#include "qforge/simd/minifloat_kernels.hpp"
#include "qforge/simd/pack_kernels.hpp"
#include "qforge/simd/transpose_kernels.hpp"
