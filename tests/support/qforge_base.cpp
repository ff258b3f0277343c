// The translation unit of qforge's own programs that compiles the lower layers' separately
// compiled part (core/config.hpp, QFORGE_IMPLEMENTATION_BASE): core's regex and json, io's readers
// and writers, and the SIMD kernel families for every ISA, which every other TU of a test, bench
// or example reaches through the kernel tables. Apart from the entry points' object, so that a build of the lower layers'
// tests (the aarch64 stage) compiles only this, and a parallel build compiles both at once.
#define QFORGE_IMPLEMENTATION_BASE
#include "qforge/base.hpp"
