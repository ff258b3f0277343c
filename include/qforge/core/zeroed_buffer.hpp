// assign_zeros(): a vector of n zeros whose large storage is offered huge pages first.
// Public in core because quant/ (code arrays) and layout/ (packed tensors) both allocate so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace qforge {

/// v = n zeros. A buffer of many megabytes is first offered to the kernel for transparent huge
/// pages (Linux, THP in "madvise" mode): its first touch then costs one fault per 2 MB instead
/// of one per 4 KB, and writes scattered over it (a transposed layout's words) stop missing
/// the TLB. On a 45 MB code array the faults were a third of the quantizer's time. Only where
/// pages come from changes, never their contents.
template <class T>
void assign_zeros(std::vector<T>& v, std::size_t n) {
    v.clear();
    v.reserve(n);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    constexpr std::uintptr_t huge = std::uintptr_t{1} << 21;
    const auto lo = reinterpret_cast<std::uintptr_t>(v.data());
    const std::uintptr_t hi = lo + n * sizeof(T);
    const std::uintptr_t a = (lo + huge - 1) & ~(huge - 1), b = hi & ~(huge - 1);
    if (b > a) (void)madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);  // advice only: failure is harmless
#endif
    v.assign(n, T{});
}

}  // namespace qforge
