// One job at a time behind the caller: the converter packs and writes tensor i here while the
// thread pool quantizes tensor i + 1, so neither core idles through the serial pack + pwrite.
//
//   detail::write_behind wb(true);
//   wb.submit([q = std::move(q)] { pack_and_write(q); });  // waits for the previous job first
//   ... quantize the next tensor ...
//   wb.wait();                                            // rethrows the job's exception
//
// At most one job is pending, so memory held behind is one tensor's codes and packed bytes,
// whatever the model size. Jobs run in submission order and one at a time, so whatever they
// share (the output writer) is touched by one thread at a time; the caller touches it only
// after wait(). Without `async` every job runs inside submit(), on the calling thread.
// The destructor waits (and drops a pending exception): a job never outlives what it uses
// when the caller unwinds, as long as the write_behind is declared after those objects.
#pragma once

#include <functional>
#include <future>
#include <utility>

namespace qforge::detail {

class write_behind {
public:
    explicit write_behind(bool async) : async_(async) {}
    write_behind(const write_behind&) = delete;
    write_behind& operator=(const write_behind&) = delete;
    ~write_behind() {
        if (pending_.valid()) pending_.wait();
    }

    /// Waits for the previous job (rethrowing its exception), then starts `job`.
    void submit(std::function<void()> job) {
        wait();
        if (async_) pending_ = std::async(std::launch::async, std::move(job));
        else job();
    }

    /// Waits for the pending job, if any; rethrows its exception.
    void wait() {
        if (pending_.valid()) pending_.get();
    }

private:
    bool async_;
    std::future<void> pending_;
};

}  // namespace qforge::detail
