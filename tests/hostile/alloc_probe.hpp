// Measures the largest single heap allocation made inside a scope, so a test can prove that a
// file claiming terabytes is refused WITHOUT allocating what it claims, and the peak of live
// heap bytes above the scope's start, so a test can prove memory is bounded by the input.
//
//   qforge::hostile::alloc_probe probe;
//   CHECK_THROWS(open_hostile_file());
//   CHECK(probe.largest() < 1 << 20);
//   CHECK(probe.peak() <= 24 * input.size());
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
// Live heap bytes of the whole program (malloc_usable_size of every block, so the allocator's
// rounding counts too) and their high-water mark since the last reset.
inline std::atomic<std::size_t>& live_bytes() {
    static std::atomic<std::size_t> v{0};
    return v;
}
inline std::atomic<std::size_t>& peak_live_bytes() {
    static std::atomic<std::size_t> v{0};
    return v;
}
}  // namespace detail

/// Records the largest `operator new` size while alive (process-wide, not thread-aware).
class alloc_probe {
public:
    alloc_probe() : baseline_(detail::live_bytes().load()) {
        detail::largest_allocation().store(0);
        detail::peak_live_bytes().store(baseline_);
        detail::probing().store(true);
    }
    ~alloc_probe() { detail::probing().store(false); }
    alloc_probe(const alloc_probe&) = delete;
    alloc_probe& operator=(const alloc_probe&) = delete;
    std::size_t largest() const { return detail::largest_allocation().load(); }
    /// Highest live heap bytes reached since construction, above what was live then.
    std::size_t peak() const { return detail::peak_live_bytes().load() - baseline_; }

private:
    std::size_t baseline_;
};

inline void note_allocation(std::size_t n) noexcept {
    if (!detail::probing().load(std::memory_order_relaxed)) return;
    auto& m = detail::largest_allocation();
    std::size_t cur = m.load(std::memory_order_relaxed);
    while (n > cur && !m.compare_exchange_weak(cur, n, std::memory_order_relaxed)) {
    }
}

inline void note_block(std::size_t usable) noexcept {
    const std::size_t now = detail::live_bytes().fetch_add(usable, std::memory_order_relaxed) + usable;
    auto& peak = detail::peak_live_bytes();
    std::size_t cur = peak.load(std::memory_order_relaxed);
    while (now > cur && !peak.compare_exchange_weak(cur, now, std::memory_order_relaxed)) {
    }
}
inline void note_release(std::size_t usable) noexcept {
    detail::live_bytes().fetch_sub(usable, std::memory_order_relaxed);
}

}  // namespace qforge::hostile
