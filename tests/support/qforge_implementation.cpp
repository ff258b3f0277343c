// The one translation unit of the test programs that compiles qforge's separately compilable
// entry points (core/config.hpp): every other test TU is built with
// QFORGE_SEPARATE_COMPILATION and links against this object, so the converter, the repacker,
// the planner and the GGUF converter are compiled once for the whole suite instead of once
// per test file that calls them.
#define QFORGE_IMPLEMENTATION
#include "qforge/qforge.hpp"
