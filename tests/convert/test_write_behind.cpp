// The converter's write-behind: packing and writing tensor i on a helper thread while tensor
// i + 1 is quantized. Failures there must surface as the same errors and leave nothing
// behind; progress events keep their order and arrive once the bytes are written.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/stat.h>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/io/early_writeback.hpp"
#include "qforge/convert/detail/write_behind.hpp"
#include "qforge/io/fault_injector.hpp"
#include "qforge/io/file.hpp"
#include "support/checkpoint_fixture.hpp"

using namespace qforge;

namespace {

const testing::scratch_root& root() {
    static const testing::scratch_root r("write-behind");
    return r;
}

const std::string& demo() {
    static const std::string d = [] {
        const std::string p = root().path + "/demo";
        write_demo_checkpoint(p, testing::small_demo());
        return p;
    }();
    return d;
}

convert_options two_threads() {
    convert_options o = testing::w4a8_cpu();
    o.overwrite = true;
    return o;
}

/// Entries of the scratch root other than the source checkpoint.
std::vector<std::string> others() { return testing::entries_except(root().path, {"demo"}); }

}  // namespace

TEST_CASE("write_behind: jobs run in order, one at a time; each done in order on the caller; errors at collection") {
    for (bool async : {false, true}) {
        CAPTURE(async);
        std::vector<int> order, done;
        std::atomic<int> running{0};
        bool overlapped = false, done_elsewhere = false;
        const auto caller = std::this_thread::get_id();
        {
            detail::write_behind wb(async);
            for (int i = 0; i < 20; ++i)
                wb.submit(
                    [&, i] {
                        overlapped |= running.fetch_add(1) != 0;
                        std::this_thread::sleep_for(std::chrono::microseconds(i % 3 == 0 ? 2000 : 100));
                        order.push_back(i);
                        running.fetch_sub(1);
                    },
                    [&, i] {
                        done_elsewhere |= std::this_thread::get_id() != caller;
                        done.push_back(i);
                    });
            wb.drain();
            CHECK(done.size() == 20);
        }
        CHECK_FALSE(overlapped);
        CHECK_FALSE(done_elsewhere);
        REQUIRE(order.size() == 20);
        for (int i = 0; i < 20; ++i) {
            CHECK(order[static_cast<std::size_t>(i)] == i);
            CHECK(done[static_cast<std::size_t>(i)] == i);
        }

        detail::write_behind wb(async);
        bool later_done = false;
        if (async) {
            wb.submit([] { throw std::runtime_error("behind"); });
            wb.submit([] {}, [&] { later_done = true; });
            CHECK_THROWS_WITH(wb.drain(), "behind");
        } else {
            CHECK_THROWS_WITH(wb.submit([] { throw std::runtime_error("behind"); }), "behind");
        }
        CHECK_NOTHROW(wb.drain());  // reported once
        CHECK_FALSE(later_done);    // a job after a failed one is not reported as done
    }
}

TEST_CASE("write_behind: at most `depth` jobs pending") {
    std::atomic<int> started{0};
    std::atomic<bool> release{false};
    detail::write_behind wb(true, 2);
    for (int i = 0; i < 2; ++i)
        wb.submit([&] {
            ++started;
            while (!release) std::this_thread::sleep_for(std::chrono::microseconds(100));
        });
    std::thread opener([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        release = true;
    });
    const auto t0 = std::chrono::steady_clock::now();
    wb.submit([] {});  // the third waits for the oldest
    CHECK(std::chrono::steady_clock::now() - t0 >= std::chrono::milliseconds(20));
    CHECK(started >= 1);
    wb.drain();
    opener.join();
    CHECK(started == 2);
}

TEST_CASE("write_behind: the destructor waits for the pending job") {
    std::atomic<bool> done{false};
    {
        detail::write_behind wb(true);
        wb.submit([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(20));
            done = true;
        });
    }
    CHECK(done);
}

/// The flushes an early_writeback asked for, by file; the first one waits until released, so
/// a test can start files while a flush is running.
struct recorded_flushes {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<ino_t> files;
    bool hold = true;

    bool wait_for_count(std::size_t n) {
        std::unique_lock lock(mutex);
        return changed.wait_for(lock, std::chrono::seconds(10), [&] { return files.size() >= n; });
    }
    void release() {
        std::lock_guard lock(mutex);
        hold = false;
        changed.notify_all();
    }
};

struct recording_flush {
    recorded_flushes* r;
    void operator()(int fd) const noexcept {
        struct stat st {};
        ::fstat(fd, &st);
        std::unique_lock lock(r->mutex);
        r->files.push_back(st.st_ino);
        r->changed.notify_all();
        r->changed.wait(lock, [this] { return !r->hold; });
    }
};

ino_t inode_of(const std::string& path) {
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    return st.st_ino;
}

TEST_CASE("early_writeback: flushes run behind the writer, and starts during one coalesce into one more pass") {
    const testing::scratch_root dir("early-writeback");
    const std::string a = dir.path + "/a.safetensors", b = dir.path + "/b.safetensors";
    std::ofstream(a) << "tensor bytes";
    std::ofstream(b) << "more tensor bytes";
    recorded_flushes r;
    {
        io::early_writeback_with<recording_flush> wb(recording_flush{&r});
        // The writer goes on while a flush runs: no start waits for one.
        auto first = std::async(std::launch::async, [&] { wb.start(a); });
        const bool first_returned =
            r.wait_for_count(1) && first.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
        if (!first_returned) r.release();  // a failing check must not hang the test
        REQUIRE(first_returned);           // ... and a's flush is running, held
        auto starts = std::async(std::launch::async, [&] {
            wb.start(a);
            wb.start(a);
            wb.start(b);
        });
        const bool returned = starts.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
        r.release();
        REQUIRE(returned);
        REQUIRE(r.wait_for_count(3));
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // room for a wrong extra pass
        std::lock_guard lock(r.mutex);
        REQUIRE(r.files.size() == 3);
        CHECK(r.files[0] == inode_of(a));
        // The three starts made one pass over both files, each after its last start.
        CHECK(std::set<ino_t>{r.files[1], r.files[2]} == std::set<ino_t>{inode_of(a), inode_of(b)});
    }
}

TEST_CASE("early_writeback: a file that cannot be opened is skipped") {
    const testing::scratch_root dir("early-writeback-missing");
    const std::string a = dir.path + "/a.bin";
    std::ofstream(a) << "bytes";
    recorded_flushes r;
    r.hold = false;
    {
        io::early_writeback_with<recording_flush> wb(recording_flush{&r});
        wb.start(dir.path + "/missing.bin");  // advice only: no throw, no flush
        wb.start(a);
        REQUIRE(r.wait_for_count(1));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    REQUIRE(r.files.size() == 1);
    CHECK(r.files[0] == inode_of(a));
}

TEST_CASE("2 threads: progress events in order, one per output weight, the same SNRs as 1 thread") {
    std::vector<std::size_t> seen;
    std::vector<double> snr2;
    convert_options o = two_threads();
    o.progress = [&](const progress_event& e) {
        seen.push_back(e.index);
        if (e.snr_db) snr2.push_back(*e.snr_db);
        return true;
    };
    const conversion_result r2 = convert(demo(), root().path + "/p2", o);
    REQUIRE(seen.size() == r2.the_plan.items.size());
    for (std::size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == i + 1);
    REQUIRE(snr2.size() == r2.report.tensors.size());
    o.threads = 1;
    std::vector<double> snr1;
    o.progress = [&](const progress_event& e) {
        if (e.snr_db) snr1.push_back(*e.snr_db);
        return true;
    };
    convert(demo(), root().path + "/p1", o);
    CHECK(snr1 == snr2);
    io::remove_tree(root().path + "/p1");
    io::remove_tree(root().path + "/p2");
}

TEST_CASE("2 threads: a failed write on the helper thread is the conversion's io_error and leaves nothing") {
    const std::string dst = root().path + "/faults";
    io::fault_injector::reset(static_cast<unsigned>(io::file_op::write));
    convert(demo(), dst, two_threads());
    const std::uint64_t writes = io::fault_injector::count();
    io::fault_injector::reset();
    io::remove_tree(dst);
    REQUIRE(writes > 20);
    int failed = 0;
    for (std::uint64_t k = 1; k <= writes; ++k) {
        CAPTURE(k);
        io::fault_injector::arm(k, EIO, static_cast<unsigned>(io::file_op::write));
        bool threw = false;
        try {
            convert(demo(), dst, two_threads());
        } catch (const io_error& e) {
            threw = true;
            CHECK(std::string(e.what()).find("Input/output error") != std::string::npos);
        }
        CHECK(io::fault_injector::fired());
        io::fault_injector::reset();
        CHECK(threw);
        failed += threw;
        if (threw) CHECK(others().empty());
        else if (io::path_exists(dst)) io::remove_tree(dst);
    }
    CHECK(failed == static_cast<int>(writes));
}

TEST_CASE("2 threads: before_tensor(i) runs once tensors 0..i-1 are written and reported") {
    std::size_t reported = 0;
    bool in_flight = false;
    convert_options o = two_threads();
    o.progress = [&](const progress_event&) {
        ++reported;
        return true;
    };
    o.before_tensor = [&](std::size_t i) { in_flight |= reported != i; };
    const conversion_result r = convert(demo(), root().path + "/hook", o);
    CHECK(reported == r.the_plan.items.size());
    CHECK_FALSE(in_flight);
    io::remove_tree(root().path + "/hook");
}

TEST_CASE("2 threads: an exception from the progress callback while a job is behind leaves nothing") {
    for (std::size_t at : {1u, 2u, 5u, 9u}) {
        CAPTURE(at);
        convert_options o = two_threads();
        o.progress = [at](const progress_event& e) {
            if (e.index == at) throw std::runtime_error("callback");
            return true;
        };
        CHECK_THROWS_WITH(convert(demo(), root().path + "/cb", o), "callback");
        CHECK(others().empty());
    }
}
