// Build modes: header-only (the default) or, opt-in, separately compiled entry points and SIMD
// kernels.
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
// link against the one definition; nor do they compile the SIMD kernels (simd/*_kernels.hpp),
// which they reach only through the kernel tables. Every non-template function of convert/ and
// io/ longer than a line (free or a class member), and those of core's json, thread pool,
// buffer recycler and tensor sources and of layout/checkpoint_rules.hpp, is such a function:
// its header declares it where it was and keeps its body in a section at its end, under the
// macro below that says whether this TU compiles it. Templates, one-liners and the maths of
// quant/ and layout/ stay in the headers in both modes: those helpers run per group or row
// inside templates that a caller's TU instantiates, where an out-of-line call would cost. The
// bytes written and every message are the same.
//
// The one TU may also be two, which a parallel build compiles at once: one defines
// QFORGE_IMPLEMENTATION_BASE and includes qforge/base.hpp (the lower layers' part: all a
// program needs that quantizes, reads or writes without calling the converters),
// the other defines QFORGE_IMPLEMENTATION_ENTRY_POINTS and includes qforge/qforge.hpp.
#pragma once

#if defined(QFORGE_IMPLEMENTATION) || defined(QFORGE_IMPLEMENTATION_BASE) || \
    defined(QFORGE_IMPLEMENTATION_ENTRY_POINTS)
#ifndef QFORGE_SEPARATE_COMPILATION
#define QFORGE_SEPARATE_COMPILATION
#endif
#endif

/// QFORGE_DECL: the linkage of a separately compilable function (inline when header-only).
/// QFORGE_BODIES_HERE: 1 when this TU compiles the bodies of the converter layer's functions.
/// QFORGE_BASE_BODIES_HERE: 1 when this TU compiles those of core/ (regex, json...), simd/ (the
/// kernels and their tables), io/ and layout/'s checkpoint rules.
#if defined(QFORGE_SEPARATE_COMPILATION)
#define QFORGE_DECL
#if defined(QFORGE_IMPLEMENTATION) || defined(QFORGE_IMPLEMENTATION_ENTRY_POINTS)
#define QFORGE_BODIES_HERE 1
#else
#define QFORGE_BODIES_HERE 0
#endif
#if defined(QFORGE_IMPLEMENTATION) || defined(QFORGE_IMPLEMENTATION_BASE)
#define QFORGE_BASE_BODIES_HERE 1
#else
#define QFORGE_BASE_BODIES_HERE 0
#endif
#else
#define QFORGE_DECL inline
#define QFORGE_BODIES_HERE 1
#define QFORGE_BASE_BODIES_HERE 1
#endif
