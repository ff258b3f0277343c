// assign_zeros(): a vector of n zeros whose large storage is offered huge pages first;
// buffer_recycler: large byte buffers given back once used and taken again, zeroed.
// Public in core because quant/ (code arrays) and layout/ (packed tensors) both allocate so.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>

#include "qforge/core/config.hpp"
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

/// Byte buffers handed back after use (a tensor once written) and taken again, zeroed, for the
/// next one. A buffer freshly allocated is zeroed through a page fault per 4 KB, which in a
/// converter costs more than the zeroing itself and runs on the thread that allocates
/// (bench_convert, w4a16 on a 2-core VM: faults and zero fill were a fifth of the wall time
/// while the pool waited); a recycled buffer's pages are already there. Thread-safe: the
/// writer gives back on its thread while the quantizer takes on another.
///
/// Memory stays bounded: at most `max_buffers` are kept, holding at most `max_bytes` in all,
/// the smallest going first, and only buffers of at least `min_bytes` (smaller ones come from
/// the heap without faults anyway).
class buffer_recycler {
public:
    explicit buffer_recycler(std::size_t max_buffers = 8, std::size_t min_bytes = std::size_t{1} << 18,
                             std::size_t max_bytes = static_cast<std::size_t>(-1))
        : max_buffers_(max_buffers), min_bytes_(min_bytes), max_bytes_(max_bytes) {}

    /// Caps the bytes kept from now on (what is kept beyond it goes at the next give).
    void limit_bytes(std::size_t max_bytes);

    /// n zero bytes: the smallest kept buffer that holds n, else a new one (assign_zeros).
    std::vector<std::byte> take_zeroed(std::size_t n);

    /// n bytes of no particular value, for a caller that overwrites them all (a pread): a kept
    /// buffer is not zeroed first.
    std::vector<std::byte> take(std::size_t n);

    /// Keeps `v`'s storage for a later take (or frees it: too small, or smaller than all kept).
    void give(std::vector<std::byte> v);

    /// How many buffers are kept now.
    std::size_t kept() const;

private:
    /// The smallest kept buffer whose capacity holds n (removed from the kept ones), or none.
    std::vector<std::byte> take_kept(std::size_t n);

    std::size_t max_buffers_, min_bytes_, max_bytes_;
    std::size_t bytes_ = 0;  ///< the capacities of kept_, summed
    mutable std::mutex m_;
    std::vector<std::vector<std::byte>> kept_;
};

}  // namespace qforge

#if QFORGE_BASE_BODIES_HERE

namespace qforge {

QFORGE_DECL void buffer_recycler::limit_bytes(std::size_t max_bytes) {
    std::lock_guard<std::mutex> lock(m_);
    max_bytes_ = max_bytes;
}

QFORGE_DECL std::vector<std::byte> buffer_recycler::take_zeroed(std::size_t n) {
    std::vector<std::byte> v = take_kept(n);
    if (v.capacity() >= n) v.assign(n, std::byte{0});
    else assign_zeros(v, n);
    return v;
}

QFORGE_DECL std::vector<std::byte> buffer_recycler::take(std::size_t n) {
    std::vector<std::byte> v = take_kept(n);
    if (v.capacity() >= n) v.resize(n);
    else assign_zeros(v, n);
    return v;
}

QFORGE_DECL void buffer_recycler::give(std::vector<std::byte> v) {
    if (v.capacity() < min_bytes_ || max_buffers_ == 0) return;
    std::lock_guard<std::mutex> lock(m_);
    if (v.capacity() > max_bytes_) return;
    while (!kept_.empty() && (kept_.size() >= max_buffers_ || bytes_ + v.capacity() > max_bytes_)) {
        auto smallest = std::min_element(kept_.begin(), kept_.end(),
                                         [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
        if (smallest->capacity() >= v.capacity()) return;
        bytes_ -= smallest->capacity();
        kept_.erase(smallest);
    }
    bytes_ += v.capacity();
    kept_.push_back(std::move(v));
}

QFORGE_DECL std::size_t buffer_recycler::kept() const {
    std::lock_guard<std::mutex> lock(m_);
    return kept_.size();
}

QFORGE_DECL std::vector<std::byte> buffer_recycler::take_kept(std::size_t n) {
    std::lock_guard<std::mutex> lock(m_);
    auto best = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
        if (it->capacity() >= n && (best == kept_.end() || it->capacity() < best->capacity())) best = it;
    if (best == kept_.end()) return {};
    bytes_ -= best->capacity();
    std::vector<std::byte> v = std::move(*best);
    kept_.erase(best);
    return v;
}

}  // namespace qforge
#endif
