// Build modes: header-only (the default) or, opt-in, separately compiled entry points.
//
// Header-only, every translation unit that calls qforge::convert compiles the whole converter
// (tens of CPU seconds at -O2). A program with several such TUs can instead compile the heavy
// non-template entry points once, in the manner of Asio's ASIO_SEPARATE_COMPILATION:
//   - every TU of the program defines QFORGE_SEPARATE_COMPILATION (e.g. on the command line:
//     target_compile_definitions(app PRIVATE QFORGE_SEPARATE_COMPILATION));
//   - exactly one TU also defines QFORGE_IMPLEMENTATION and includes qforge/qforge.hpp:
//         #define QFORGE_IMPLEMENTATION
//         #include "qforge/qforge.hpp"
// The other TUs then see only the declarations of those functions (marked QFORGE_DECL) and
// link against the one definition. Templates, small inline helpers and everything in detail/
// stay in the headers in both modes; the bytes written and every message are the same.
#pragma once

#if defined(QFORGE_IMPLEMENTATION) && !defined(QFORGE_SEPARATE_COMPILATION)
#define QFORGE_SEPARATE_COMPILATION
#endif

/// QFORGE_DECL: the linkage of a separately compilable function (inline when header-only).
/// QFORGE_BODIES_HERE: 1 when this TU compiles the bodies of those functions.
#if defined(QFORGE_SEPARATE_COMPILATION)
#define QFORGE_DECL
#if defined(QFORGE_IMPLEMENTATION)
#define QFORGE_BODIES_HERE 1
#else
#define QFORGE_BODIES_HERE 0
#endif
#else
#define QFORGE_DECL inline
#define QFORGE_BODIES_HERE 1
#endif
