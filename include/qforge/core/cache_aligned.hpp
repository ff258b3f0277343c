// cache_aligned_vector<T>: a std::vector whose storage starts on a 64-byte cache line.
// Rows of floats handed to the vector kernels are read a whole vector at a time; from the
// 16-byte boundary malloc gives, every 64-byte load of AVX-512 (and every other one of AVX2)
// spans two lines, and the 32-element GGUF types, which stream their input, ran 6-9% slower
// (Intel Xeon, 256 x 11008 rows, medians of 5 alternated: Q4_1 AVX2 5.64 -> 6.09 G weights/s).
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace qforge {

inline constexpr std::size_t cache_line_bytes = 64;

/// std::allocator's contract, storage aligned to cache_line_bytes.
template <class T>
struct cache_aligned_allocator {
    using value_type = T;

    cache_aligned_allocator() noexcept = default;
    template <class U>
    cache_aligned_allocator(const cache_aligned_allocator<U>&) noexcept {}

    T* allocate(std::size_t n) {
        if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
        return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{cache_line_bytes}));
    }
    void deallocate(T* p, std::size_t) noexcept { ::operator delete(p, std::align_val_t{cache_line_bytes}); }

    template <class U>
    bool operator==(const cache_aligned_allocator<U>&) const noexcept {
        return true;
    }
};

template <class T>
using cache_aligned_vector = std::vector<T, cache_aligned_allocator<T>>;

}  // namespace qforge
