// Fault injection at EVERY output file operation of a whole conversion: the k-th create /
// write / fsync / rename / mkdir / remove fails (ENOSPC or EIO, alternating) for k = 1..N,
// where N is what an undisturbed conversion does. After each failure the destination must be
// exactly as before - absent, or an old checkpoint intact byte for byte - and no temporary
// folder may remain next to it.
#include <doctest/doctest.h>

#include <cerrno>
#include <cstdint>
#include <string>

#include "hostile/hostile_checkpoint.hpp"
#include "hostile/hostile_support.hpp"
#include "qforge/convert/converter.hpp"
#include "qforge/io/atomic_dir.hpp"
#include "qforge/io/fault_injector.hpp"
#include "qforge/io/safetensors/index.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace io = qforge::io;
namespace st = qforge::safetensors;
using namespace qforge::hostile;

namespace {

/// Disarms the injector however the test exits.
struct injector_guard {
    ~injector_guard() { io::fault_injector::reset(); }
};

struct sweep_result {
    std::uint64_t operations = 0;  // counted in the undisturbed run
    std::uint64_t failed = 0;      // injected runs that threw
    std::uint64_t survived = 0;    // injected runs that still succeeded (a retried cleanup step)
};

/// Runs `job` once undisturbed to count its operations, then once per operation with that
/// operation failing. `check_failed` / `check_succeeded` inspect the world after each run;
/// `restore` puts the world back before the next one.
template <class Job, class Failed, class Succeeded, class Restore>
sweep_result sweep(Job job, Failed check_failed, Succeeded check_succeeded, Restore restore) {
    injector_guard guard;
    sweep_result r;
    io::fault_injector::reset();
    job();
    r.operations = io::fault_injector::count();
    check_succeeded();
    for (std::uint64_t k = 1; k <= r.operations; ++k) {
        restore();
        const int err = k % 2 ? ENOSPC : EIO;
        io::fault_injector::arm(k, err);
        bool threw = false;
        try {
            job();
        } catch (const qforge::error& e) {
            threw = true;
            CAPTURE(k);
            CAPTURE(e.what());
            CHECK(io::fault_injector::fired());
            check_failed(k, e);
        }
        io::fault_injector::reset();
        if (!threw) {
            CAPTURE(k);
            check_succeeded();
            ++r.survived;
        } else {
            ++r.failed;
        }
    }
    restore();
    return r;
}

}  // namespace

TEST_CASE("fault injection: every operation of a conversion into a new folder, destination stays absent") {
    scratch_dir root("faults", true);
    const fs::path src = root / "src";
    qforge::write_demo_checkpoint(src.string(), tiny_demo());
    const fs::path dst = root / "dst";
    std::map<std::string, std::string> expected;
    const auto r = sweep(
        [&] { qforge::convert(src.string(), dst.string(), tiny_gptq()); },
        [&](std::uint64_t, const qforge::error& e) {
            CHECK_FALSE(fs::exists(fs::symlink_status(dst)));
            CHECK(entries_except(root.path(), {"src"}).empty());
            // The reason carries the errno text the operation failed with.
            const std::string what = e.what();
            CHECK((what.find("No space left") != std::string::npos ||
                   what.find("Input/output error") != std::string::npos));
        },
        [&] {
            if (expected.empty()) expected = snapshot(dst);
            CHECK(snapshot(dst) == expected);
            CHECK(entries_except(root.path(), {"src", "dst"}).empty());
        },
        [&] { fs::remove_all(dst); });
    MESSAGE("conversion into a new folder: " << r.operations << " file operations, " << r.failed
                                             << " injected failures refused cleanly, " << r.survived
                                             << " absorbed by a retried cleanup step");
    CHECK(r.operations > 20);
    CHECK(r.failed > 0);
}

TEST_CASE("fault injection: every operation of an overwriting conversion, old checkpoint intact byte for byte") {
    scratch_dir root("faults", true);
    const fs::path src = root / "src";
    qforge::write_demo_checkpoint(src.string(), tiny_demo());
    const fs::path dst = root / "dst";
    // The "old" checkpoint is another conversion (different bits), so old and new differ.
    auto old_opts = tiny_gptq();
    old_opts.rules.default_scheme->bits = 8;
    qforge::convert(src.string(), dst.string(), old_opts);
    const auto before = snapshot(dst);
    REQUIRE(before.size() > 3);
    const fs::path saved = root / "saved";
    fs::copy(dst, saved, fs::copy_options::recursive);

    auto opts = tiny_gptq();
    opts.overwrite = true;
    std::map<std::string, std::string> expected;
    const auto r = sweep(
        [&] { qforge::convert(src.string(), dst.string(), opts); },
        [&](std::uint64_t, const qforge::error&) {
            CHECK(snapshot(dst) == before);
            CHECK(entries_except(root.path(), {"src", "dst", "saved"}).empty());
        },
        [&] {
            const auto now = snapshot(dst);
            if (expected.empty()) expected = now;
            CHECK(now == expected);
            CHECK(now != before);
            CHECK(entries_except(root.path(), {"src", "dst", "saved"}).empty());
        },
        [&] {
            fs::remove_all(dst);
            fs::copy(saved, dst, fs::copy_options::recursive);
        });
    MESSAGE("overwriting conversion: " << r.operations << " file operations, " << r.failed
                                       << " injected failures refused cleanly, " << r.survived
                                       << " absorbed by a retried cleanup step");
    CHECK(r.failed > 0);
}

TEST_CASE("fault injection: only fsyncs, only renames (EIO): each one refused, nothing left") {
    scratch_dir root("faults", true);
    const fs::path src = root / "src";
    qforge::write_demo_checkpoint(src.string(), tiny_demo());
    const fs::path dst = root / "dst";
    injector_guard guard;
    for (const io::file_op op : {io::file_op::fsync, io::file_op::rename}) {
        io::fault_injector::reset(static_cast<unsigned>(op));
        qforge::convert(src.string(), dst.string(), tiny_gptq());
        const auto n = io::fault_injector::count();
        CHECK(n > 0);
        fs::remove_all(dst);
        for (std::uint64_t k = 1; k <= n; ++k) {
            CAPTURE(k);
            io::fault_injector::arm(k, EIO, static_cast<unsigned>(op));
            CHECK_THROWS_WITH_AS(qforge::convert(src.string(), dst.string(), tiny_gptq()),
                                 doctest::Contains("Input/output error"), qforge::io_error);
            CHECK_FALSE(fs::exists(dst));
            CHECK(entries_except(root.path(), {"src"}).empty());
        }
    }
}

TEST_CASE("fault injection: the sharded writer inside an atomic folder, at every operation") {
    scratch_dir root("faults", true);
    const fs::path dst = root / "out";
    std::vector<st::tensor_spec> specs;
    for (int i = 0; i < 6; ++i) specs.push_back({"t" + std::to_string(i), qforge::dtype::F32, {16, 16}});
    const std::vector<std::byte> bytes(16 * 16 * 4, std::byte{7});
    auto job = [&] {
        io::atomic_output_dir out(dst.string());
        st::sharded_writer w(out.path(), specs, 2500);  // ~3 shards + index.json
        for (const auto& s : specs) w.write(s.name, bytes);
        w.finish();
        out.commit();
    };
    const auto r = sweep(
        job,
        [&](std::uint64_t, const qforge::error&) {
            CHECK_FALSE(fs::exists(dst));
            CHECK(fs::is_empty(root.path()));
        },
        [&] {
            CHECK(st::sharded_reader(dst.string()).tensor_names().size() == specs.size());
            CHECK(entries_except(root.path(), {"out"}).empty());
        },
        [&] { fs::remove_all(dst); });
    CHECK(r.operations > 10);
}
