// cache_aligned_vector (core/cache_aligned.hpp): its storage starts on a 64-byte cache line at
// every size, through growth and after a copy.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>

#include "qforge/core/cache_aligned.hpp"

using namespace qforge;

namespace {

bool on_cache_line(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % cache_line_bytes == 0; }

}  // namespace

TEST_CASE("cache_aligned_vector: storage starts on a cache line at every size, grown and copied") {
    for (std::size_t n : {1u, 3u, 16u, 17u, 1000u, 1u << 20}) {
        cache_aligned_vector<float> v(n, 1.5f);
        CAPTURE(n);
        CHECK(on_cache_line(v.data()));
        v.resize(3 * n + 5, 2.5f);  // a reallocation
        CHECK(on_cache_line(v.data()));
        CHECK(v[0] == 1.5f);
        CHECK(v.back() == 2.5f);
        const cache_aligned_vector<float> copy = v;
        CHECK(on_cache_line(copy.data()));
        CHECK(copy == v);
    }
    cache_aligned_vector<char> bytes;  // an element smaller than the alignment
    for (int i = 0; i < 100; ++i) {
        bytes.push_back(static_cast<char>(i));
        CHECK(on_cache_line(bytes.data()));
    }
}
