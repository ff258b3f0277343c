// Jobs run behind the caller: the converter writes tensor i here while the thread pool
// quantizes tensor i + 1, so neither core idles through the serial pwrite.
//
//   detail::write_behind wb(true);
//   wb.submit([t = std::move(tensors)] { write(t); }, [&] { report_done(); });
//   ... quantize the next tensor ...
//   wb.drain();   // every job finished and its `done` called, in order; rethrows a job's error
//
// Jobs run one at a time, in submission order (each on its own thread, after the one before
// it; a job after a failed one is skipped and never reported done), so whatever they share (the output writer) is touched by one thread at a time; the
// caller touches it only after drain(). Each job's `done` runs on the caller's thread, in
// order, once the job has finished (at a later submit or at drain). At most `depth` jobs are
// pending, so memory held behind is bounded by a few tensors, whatever the model size; two
// lets a tiny job (a norm) queue behind a big one without stopping the caller.
// Without `async` every job and its `done` run inside submit(), on the calling thread.
// The destructor waits for every job (and drops their errors): a job never outlives what it
// uses when the caller unwinds, as long as the write_behind is declared after those objects.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <utility>

namespace qforge::detail {

class write_behind {
public:
    explicit write_behind(bool async, std::size_t depth = 2) : async_(async), depth_(depth < 1 ? 1 : depth) {}
    write_behind(const write_behind&) = delete;
    write_behind& operator=(const write_behind&) = delete;
    ~write_behind() {
        for (auto& e : pending_) e.finished.wait();
    }

    /// Starts `job` after every job before it; first collects finished jobs and, while
    /// `depth` are pending, waits for the oldest. Rethrows the error of a collected job.
    void submit(std::function<void()> job, std::function<void()> done = {}) {
        if (!async_) {
            job();
            if (done) done();
            return;
        }
        while (!pending_.empty() &&
               (pending_.size() >= depth_ ||
                pending_.front().finished.wait_for(std::chrono::seconds(0)) == std::future_status::ready))
            collect_oldest();
        std::shared_future<bool> before = pending_.empty() ? std::shared_future<bool>() : pending_.back().finished;
        std::shared_future<bool> finished =
            std::async(std::launch::async, [before, job = std::move(job)] {
                if (before.valid()) {
                    try {
                        if (!before.get()) return false;
                    } catch (...) {
                        return false;  // skipped: the error is reported with the job that raised it
                    }
                }
                job();
                return true;
            }).share();
        pending_.push_back({std::move(finished), std::move(done)});
    }

    /// Waits for every pending job, calling each `done` in order; rethrows the first error.
    void drain() {
        while (!pending_.empty()) collect_oldest();
    }

private:
    struct entry {
        std::shared_future<bool> finished;  ///< false: skipped after an earlier job failed
        std::function<void()> done;
    };

    void collect_oldest() {
        entry e = std::move(pending_.front());
        pending_.pop_front();
        if (e.finished.get() && e.done) e.done();
    }

    bool async_;
    std::size_t depth_;
    std::deque<entry> pending_;
};

}  // namespace qforge::detail
