// The translation unit of qforge's own programs (tests, benches, examples) that compiles
// qforge's separately compilable entry points (core/config.hpp): the other TUs are built with
// QFORGE_SEPARATE_COMPILATION and link against this object, so the converter, the repacker,
// the planner and the GGUF converter are compiled once per build instead of once per source
// file that calls them. The lower layers' part (regex,
// SIMD kernels) is qforge_base.cpp's.
#define QFORGE_IMPLEMENTATION_ENTRY_POINTS
#include "qforge/qforge.hpp"
