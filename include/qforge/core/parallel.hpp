// Threads for qforge: a tiny pool over std::thread and a parallel_for that users can replace.
//
// Everything that runs in parallel in qforge takes an `executor`: a callable that runs
// `count` independent tasks and returns when all of them are done. Work is always split
// into tasks by the caller in a way that does not depend on the number of threads, and each
// task writes only its own output, so the bytes produced never depend on the executor.
//
// **Example**:
//   qforge::thread_pool pool(4);
//   auto q = qforge::quantize(view, opt, pool.executor());      // 4 threads
//   auto r = qforge::quantize(view, opt);                       // sequential
//   auto t = qforge::quantize(view, opt, my_tbb_executor);      // bring your own
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "qforge/core/config.hpp"

namespace qforge {

/// Runs task(i) exactly once for every i in [0, count), in any order and on any threads, and
/// returns when all have finished. If tasks throw, the first exception is rethrown after the
/// others completed.
using executor = std::function<void(std::size_t count, const std::function<void(std::size_t)>& task)>;

/// Anything that can stand in for an executor (a thread pool adaptor, a TBB wrapper...).
template <class E>
concept executor_like = requires(const E& e, std::size_t n, const std::function<void(std::size_t)>& t) {
    e(n, t);
};

/// Runs the tasks one after the other on the calling thread.
QFORGE_DECL executor sequential_executor();

/// A fixed set of worker threads. The calling thread joins in, so `thread_pool(1)` starts no
/// thread at all. One batch runs at a time; concurrent callers are serialized.
class thread_pool {
public:
    explicit thread_pool(unsigned threads = std::max(1u, std::thread::hardware_concurrency()));
    thread_pool(const thread_pool&) = delete;
    thread_pool& operator=(const thread_pool&) = delete;
    ~thread_pool();

    unsigned size() const noexcept { return size_; }

    /// Runs task(0..count-1) on the pool and the calling thread.
    void run(std::size_t count, const std::function<void(std::size_t)>& task);

    /// This pool as an `executor` (the pool must outlive every use of it).
    qforge::executor executor();

private:
    void drain();
    void worker_loop();

    unsigned size_;
    std::vector<std::thread> workers_;
    std::mutex batch_mutex_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(std::size_t)>* task_ = nullptr;
    std::size_t count_ = 0;
    std::atomic<std::size_t> next_{0};
    std::size_t pending_workers_ = 0;
    std::uint64_t generation_ = 0;
    bool stopping_ = false;
    std::exception_ptr error_;
};

/// Splits [begin, end) into chunks of `grain` (the last may be shorter) and runs
/// body(lo, hi) for each chunk through `ex`. The chunking depends only on the arguments, never
/// on the thread count, which is what keeps parallel output deterministic.
namespace detail {
/// Chunk c of a parallel_for: one type for every body, so that the std::function the executor
/// takes is instantiated once in a program instead of once per call site (the body is reached
/// through a plain function pointer).
struct chunk_task {
    void (*call)(void* body, std::size_t lo, std::size_t hi);
    void* body;
    std::size_t begin, end, grain;
    void operator()(std::size_t c) const;
};
}  // namespace detail

template <class Body>
void parallel_for(const executor& ex, std::size_t begin, std::size_t end, std::size_t grain, Body&& body) {
    if (end <= begin) return;
    grain = std::max<std::size_t>(1, grain);
    const std::size_t chunks = (end - begin + grain - 1) / grain;
    using B = std::remove_reference_t<Body>;
    const std::function<void(std::size_t)> task = detail::chunk_task{
        [](void* b, std::size_t lo, std::size_t hi) { (*static_cast<B*>(b))(lo, hi); },
        const_cast<void*>(static_cast<const void*>(std::addressof(body))), begin, end, grain};
    if (ex) {
        ex(chunks, task);
    } else {
        for (std::size_t c = 0; c < chunks; ++c) task(c);
    }
}

}  // namespace qforge

#if QFORGE_BASE_BODIES_HERE

namespace qforge {

QFORGE_DECL executor sequential_executor() {
    return [](std::size_t count, const std::function<void(std::size_t)>& task) {
        for (std::size_t i = 0; i < count; ++i) task(i);
    };
}

}  // namespace qforge

namespace qforge {

QFORGE_DECL thread_pool::thread_pool(unsigned threads) : size_(std::max(1u, threads)) {
    for (unsigned i = 1; i < size_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

QFORGE_DECL thread_pool::~thread_pool() {
    {
        std::lock_guard lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
}

QFORGE_DECL void thread_pool::run(std::size_t count, const std::function<void(std::size_t)>& task) {
    if (count == 0) return;
    std::lock_guard batch_lock(batch_mutex_);
    {
        std::lock_guard lock(mutex_);
        task_ = &task;
        count_ = count;
        next_.store(0);
        pending_workers_ = workers_.size();
        error_ = nullptr;
        ++generation_;
    }
    wake_.notify_all();
    drain();
    std::unique_lock lock(mutex_);
    done_.wait(lock, [this] { return pending_workers_ == 0; });
    task_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

QFORGE_DECL qforge::executor thread_pool::executor() {
    return [this](std::size_t count, const std::function<void(std::size_t)>& task) { run(count, task); };
}

QFORGE_DECL void thread_pool::drain() {
    for (;;) {
        const std::size_t i = next_.fetch_add(1);
        if (i >= count_) return;
        try {
            (*task_)(i);
        } catch (...) {
            std::lock_guard lock(mutex_);
            if (!error_) error_ = std::current_exception();
        }
    }
}

QFORGE_DECL void thread_pool::worker_loop() {
    std::uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
            if (stopping_) return;
            seen = generation_;
        }
        drain();
        std::lock_guard lock(mutex_);
        if (--pending_workers_ == 0) done_.notify_all();
    }
}

namespace detail {

QFORGE_DECL void chunk_task::operator()(std::size_t c) const {
    const std::size_t lo = begin + c * grain;
    call(body, lo, std::min(end, lo + grain));
}

}  // namespace detail
}  // namespace qforge
#endif
