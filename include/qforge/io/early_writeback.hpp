// Making output files durable while the conversion is still computing.
//
// Output files (the converter's shards, a GGUF file) are fsynced when they are finished
// (atomic output). With buffered writes the page cache holds every dirty byte until then, and
// that one fsync waited for the whole output at the end: 0.4 s of idle cores after a 1.5 s
// conversion of a 1 GiB model.
// Two steps move that wait under the computation:
//  * after each tensor, the kernel is asked to start the write-out (Linux sync_file_range
//    with SYNC_FILE_RANGE_WRITE: start, do not wait);
//  * a flusher thread then fdatasyncs the file in the background. Started pages are not yet
//    durable: the device (or a VM's host) may hold them in its write cache until a flush, and
//    that flush of a 280 MB shard still took 0.19 s at the end with the write-out alone.
// Requests for a file whose flush is running coalesce into one more flush, so the flusher
// never falls behind the writer by more than one pass, and it rests 25 ms between passes: a
// pass after every tensor (norms included) was ~190 flushes for a 1 GiB model, ~30 with the
// rest, at the same wall time. The final fsync still guarantees durability and now only
// waits for what was written since the last flush.
//
//   io::early_writeback wb;
//   ... write a tensor to shard.safetensors ...
//   wb.start(path_of_shard);   // returns at once; the flush runs behind
//   ... at the end: fsync the shard as before (io::atomic_dir's commit) ...
//
// Advisory only: a file that cannot be opened, a kernel without the calls or a thread that
// cannot start changes nothing (the fsync at the end is what counts, and a flush's error is
// still reported to the writer's own descriptor there). The files are opened read-only, which
// is enough for both calls and is not an output operation (io::fault_injector does not count
// it). The destructor drops the flushes not yet begun and waits for the running one.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

#include <fcntl.h>
#include <unistd.h>

#include "qforge/io/file.hpp"

namespace qforge::io {

/// What the flusher does to an output file: fdatasync (size and data, not timestamps).
struct data_sync {
    void operator()(int fd) const noexcept {
#if defined(__linux__)
        (void)::fdatasync(fd);
#else
        (void)::fsync(fd);
#endif
    }
};

/// What early_writeback_with calls on its flusher thread: a const call with the descriptor,
/// which must not throw (there is no one to catch it on that thread).
template <class F>
concept flush_function = std::is_nothrow_invocable_v<const F&, int>;

template <flush_function Flush = data_sync>
class early_writeback_with {
public:
    explicit early_writeback_with(Flush flush = {}) : flush_(std::move(flush)) {}
    early_writeback_with(const early_writeback_with&) = delete;
    early_writeback_with& operator=(const early_writeback_with&) = delete;
    ~early_writeback_with() {
        {
            std::lock_guard lock(mutex_);
            stopping_ = true;
        }
        wake_.notify_one();
        if (flusher_.joinable()) flusher_.join();
    }

    /// Starts the write-out of every dirty page of `path` (opened once, kept open) and asks
    /// the flusher to make them durable.
    void start(const std::string& path) noexcept {
        try {
            auto it = files_.find(path);
            if (it == files_.end()) it = files_.emplace(path, unique_fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC))).first;
            const int fd = it->second.get();
            if (fd < 0) return;
#if defined(__linux__) && defined(SYNC_FILE_RANGE_WRITE)
            (void)::sync_file_range(fd, 0, 0, SYNC_FILE_RANGE_WRITE);
#endif
            request_flush(fd);
        } catch (...) {  // advice only: no memory for the entry, or no thread, changes nothing
        }
    }

private:
    void request_flush(int fd) {
        {
            std::lock_guard lock(mutex_);
            requested_.insert(fd);
        }
        if (!flusher_.joinable()) flusher_ = std::thread([this] { run(); });
        wake_.notify_one();
    }

    void run() noexcept {
        std::unique_lock lock(mutex_);
        for (;;) {
            wake_.wait(lock, [this] { return stopping_ || !requested_.empty(); });
            if (stopping_) return;
            const std::set<int> batch = std::move(requested_);
            requested_.clear();
            lock.unlock();
            for (const int fd : batch) flush_(fd);
            lock.lock();
            wake_.wait_for(lock, std::chrono::milliseconds(25), [this] { return stopping_; });  // the rest
        }
    }

    Flush flush_;
    std::map<std::string, unique_fd> files_;  ///< touched by start() only, one caller at a time
    std::mutex mutex_;
    std::condition_variable wake_;
    std::set<int> requested_;  ///< files to flush on the next pass
    bool stopping_ = false;
    std::thread flusher_;  ///< last: started after the rest, joined before the files close
};

using early_writeback = early_writeback_with<>;

}  // namespace qforge::io
