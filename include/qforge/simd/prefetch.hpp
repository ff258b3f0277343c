// Asking for memory before it is read, where a loop's next reader is far from where it is now:
// the hardware prefetchers follow a stream that is being read, not one that will be.
#pragma once

#include <cstddef>
#include <cstdint>

namespace qforge::simd {

/// Asks for the cache lines of bytes [p + ahead, p + ahead + bytes) to be read soon. The
/// addresses are formed as integers and a prefetch never faults, so the range may lie past the
/// end of the caller's data (a loop asks a fixed distance ahead of itself, to its end and beyond).
inline void prefetch_lines(const void* p, std::size_t ahead, std::size_t bytes) noexcept {
#if defined(__GNUC__) || defined(__clang__)
    const std::uintptr_t first = reinterpret_cast<std::uintptr_t>(p) + ahead, end = first + bytes;
    for (std::uintptr_t line = first & ~std::uintptr_t{63}; line < end; line += 64)
        __builtin_prefetch(reinterpret_cast<const void*>(line));
#else
    (void)p;
    (void)ahead;
    (void)bytes;
#endif
}

}  // namespace qforge::simd
