// io::fault_injector: the test hook on every output file operation of qforge.
//
// All creates, writes, fsyncs, renames, mkdirs and removals in qforge/io call the sys_*
// wrappers of io/detail/file_ops.hpp. Each first asks io::fault_injector whether this operation should fail; in
// normal use the injector is disarmed and the check is one relaxed atomic load.
//
// Test usage (see tests/io/test_atomic_dir.cpp):
//   io::fault_injector::reset();                 // count from zero, nothing armed
//   run_whole_conversion();  auto n = io::fault_injector::count();   // operations it does
//   for (k = 1..n) { io::fault_injector::arm(k, ENOSPC); expect a qforge::io_error; check the
//                    destination is untouched and no temp folder remains; }
//   io::fault_injector::reset();
// The injection is one-shot: only the k-th counted operation fails, so the cleanup that runs
// after the failure (removing the temp folder) is itself not sabotaged. State is process-wide
// (atomics), so operations made from worker threads are counted too; tests that arm it must
// not run file-writing work concurrently with other tests.
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdint>

#include "qforge/core/config.hpp"

namespace qforge::io {

/// Kinds of output operations, as bits so a test can target only some (e.g. only fsync).
enum class file_op : unsigned {
    create = 1u << 0,  // open(O_CREAT) of an output file
    write = 1u << 1,   // every write()/pwrite() call
    fsync = 1u << 2,   // fsync of a file or a folder
    rename = 1u << 3,
    mkdir = 1u << 4,
    remove = 1u << 5,  // unlink / rmdir
};

inline constexpr unsigned all_file_ops = 0x3Fu;

/// Test-only fault injection for output file operations (documented at the top of this file).
class fault_injector {
public:
    /// The `nth` (1-based, counted from the last reset) operation whose kind is in `op_mask`
    /// fails with `error` (ENOSPC, EIO...) without being performed.
    static void arm(std::uint64_t nth, int error = ENOSPC, unsigned op_mask = all_file_ops) noexcept;
    /// Counts every operation in `op_mask` from zero, failing none.
    static void reset(unsigned op_mask = all_file_ops) noexcept { arm(0, 0, op_mask); }
    /// Operations of the masked kinds seen since the last arm/reset.
    static std::uint64_t count() noexcept { return state().counted.load(std::memory_order_acquire); }
    /// Whether the armed failure has happened.
    static bool fired() noexcept { return state().fired.load(std::memory_order_acquire); }

    /// Called by the sys_* wrappers: 0 to proceed, or the errno to fail with.
    static int check(file_op op) noexcept;

private:
    struct shared_state {
        std::atomic<std::uint64_t> counted{0};
        std::atomic<std::uint64_t> target{0};  // 0 = disarmed
        std::atomic<unsigned> mask{all_file_ops};
        std::atomic<int> error{0};
        std::atomic<bool> fired{false};
    };
    static shared_state& state() noexcept;
};

}  // namespace qforge::io

#if QFORGE_BASE_BODIES_HERE

namespace qforge::io {

QFORGE_DECL void fault_injector::arm(std::uint64_t nth, int error, unsigned op_mask) noexcept {
    state().counted.store(0, std::memory_order_relaxed);
    state().mask.store(op_mask, std::memory_order_relaxed);
    state().error.store(error, std::memory_order_relaxed);
    state().fired.store(false, std::memory_order_relaxed);
    state().target.store(nth, std::memory_order_release);
}

QFORGE_DECL int fault_injector::check(file_op op) noexcept {
    auto& s = state();
    if ((s.mask.load(std::memory_order_relaxed) & static_cast<unsigned>(op)) == 0) return 0;
    const std::uint64_t n = s.counted.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (n == s.target.load(std::memory_order_acquire)) {
        s.fired.store(true, std::memory_order_release);
        return s.error.load(std::memory_order_relaxed);
    }
    return 0;
}

QFORGE_DECL auto fault_injector::state() noexcept -> shared_state& {
    static shared_state s;
    return s;
}

}  // namespace qforge::io
#endif
