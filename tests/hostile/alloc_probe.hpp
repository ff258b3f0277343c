// Measures the largest single heap allocation made inside a scope, so a test can prove that a
// file claiming terabytes is refused WITHOUT allocating what it claims.
//
//   qforge::hostile::alloc_probe probe;
//   CHECK_THROWS(open_hostile_file());
//   CHECK(probe.largest() < 1 << 20);
//
// The global operator new/delete replacements live in alloc_probe.cpp (one per program).
#pragma once

#include <atomic>
#include <cstddef>

namespace qforge::hostile {

namespace detail {
inline std::atomic<std::size_t>& largest_allocation() {
    static std::atomic<std::size_t> v{0};
    return v;
}
inline std::atomic<bool>& probing() {
    static std::atomic<bool> v{false};
    return v;
}
}  // namespace detail

/// Records the largest `operator new` size while alive (process-wide, not thread-aware).
class alloc_probe {
public:
    alloc_probe() {
        detail::largest_allocation().store(0);
        detail::probing().store(true);
    }
    ~alloc_probe() { detail::probing().store(false); }
    alloc_probe(const alloc_probe&) = delete;
    alloc_probe& operator=(const alloc_probe&) = delete;
    std::size_t largest() const { return detail::largest_allocation().load(); }
};

inline void note_allocation(std::size_t n) noexcept {
    if (!detail::probing().load(std::memory_order_relaxed)) return;
    auto& m = detail::largest_allocation();
    std::size_t cur = m.load(std::memory_order_relaxed);
    while (n > cur && !m.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
    }
}

}  // namespace qforge::hostile
