// Atomic output folder: a checkpoint appears at its destination complete, or not at all.
//
//   io::atomic_output_dir out("/models/llama-gptq", /*overwrite=*/false);
//   io::write_file(out.file("config.json"), text);              // write everything into out.path()
//   safetensors::writer w(out.file("model.safetensors"), specs); ...
//   out.commit();                                                // fsync all, rename into place
//
// Everything is built in a temporary folder ".<name>.qforge-tmp-XXXXXX" next to the
// destination (same file system, so the final rename is atomic). commit() fsyncs every file
// and folder inside, renames the temporary folder to the destination and fsyncs the parent.
// An existing destination is refused (io_error) unless overwrite is requested; then the old
// folder is kept until the new one is in place: old -> ".<name>.qforge-old-XXXXXX", new ->
// destination, parent fsynced, old removed. If any step fails, the steps already done are
// undone, so the destination is exactly as before (absent, or the old folder intact), and the
// temporary folder is removed - also when the object is destroyed without commit(), e.g. by
// an exception. (A process killed outright can still leave a ".qforge-tmp" folder behind.)
#pragma once

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include <sys/stat.h>
#include <unistd.h>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/detail/file_ops.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/safe_path.hpp"

namespace qforge::io {

namespace detail {

/// A name for a sibling of `base` that does not exist yet: ".<base>.<tag>-XXXXXX".
QFORGE_DECL std::string fresh_sibling_name(const std::string& parent, const std::string& base, std::string_view tag);

/// fsync of every file and folder under `path` (and `path` itself).
QFORGE_DECL void sync_tree(const std::string& path);

}  // namespace detail

class atomic_output_dir {
public:
    explicit atomic_output_dir(std::string destination, bool overwrite = false);
    atomic_output_dir(const atomic_output_dir&) = delete;
    atomic_output_dir& operator=(const atomic_output_dir&) = delete;
    ~atomic_output_dir();

    /// The temporary folder to write into (valid until commit()).
    const std::string& path() const noexcept { return temp_; }
    const std::string& destination() const noexcept { return destination_; }
    bool committed() const noexcept { return committed_; }

    /// path()/name, refusing anything but a plain file name.
    std::string file(std::string_view name) const { return child_path(temp_, name, destination_); }

    /// Makes the output durable and moves it into place; see the top of this file.
    void commit();

private:
    void check_destination() const;

    // Undo a rename during rollback; retried once because a single injected fault must not
    // strand the user's data under a temporary name.
    static void restore(const std::string& from, const std::string& to) noexcept;

    std::string destination_;
    std::string parent_;
    std::string base_;
    std::string temp_;
    bool overwrite_ = false;
    bool committed_ = false;
};

}  // namespace qforge::io

#if QFORGE_BASE_BODIES_HERE

namespace qforge::io {
namespace detail {

QFORGE_DECL std::string fresh_sibling_name(const std::string& parent, const std::string& base, std::string_view tag) {
    static std::atomic<std::uint64_t> counter{0};
    constexpr char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    for (;;) {
        std::uint64_t x = static_cast<std::uint64_t>(::getpid()) * 0x9E3779B97F4A7C15ull ^
                          static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                          (counter.fetch_add(1) * 0xBF58476D1CE4E5B9ull);
        std::string suffix;
        for (int k = 0; k < 6; ++k, x /= 36) suffix += alphabet[x % 36];
        std::string candidate = parent + "/." + base + "." + std::string(tag) + "-" + suffix;
        if (!path_exists(candidate)) return candidate;
    }
}

QFORGE_DECL void sync_tree(const std::string& path) {
    for (const std::string& name : list_directory(path)) {
        const std::string p = path + "/" + name;
        struct stat st {};
        if (::lstat(p.c_str(), &st) != 0) fail_errno(p, "cannot stat", errno);
        if (S_ISDIR(st.st_mode)) {
            sync_tree(p);
        } else if (S_ISREG(st.st_mode)) {
            int fd;
            do fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
            while (fd < 0 && errno == EINTR);
            if (fd < 0) fail_errno(p, "cannot open to fsync", errno);
            unique_fd guard(fd);
            if (sys_fsync(fd) != 0) fail_errno(p, "fsync failed", errno);
        }
    }
    sync_directory(path);
}

}  // namespace detail

QFORGE_DECL atomic_output_dir::atomic_output_dir(std::string destination, bool overwrite) : overwrite_(overwrite) {
    while (destination.size() > 1 && destination.back() == '/') destination.pop_back();
    if (destination.empty()) fail<io_error>({}, {}, "empty destination path");
    const auto slash = destination.rfind('/');
    parent_ = slash == std::string::npos ? "." : slash == 0 ? "/" : destination.substr(0, slash);
    base_ = slash == std::string::npos ? destination : destination.substr(slash + 1);
    destination_ = std::move(destination);
    if (base_ == "." || base_ == "..") fail<io_error>(destination_, {}, "destination must name a folder");
    if (!is_directory(parent_)) fail<io_error>(destination_, {}, "parent folder " + parent_ + " does not exist");
    check_destination();
    for (int attempt = 0;; ++attempt) {  // another process may take the same name first
        temp_ = detail::fresh_sibling_name(parent_, base_, "qforge-tmp");
        if (detail::sys_mkdir(temp_.c_str(), 0755) == 0) break;
        if (errno != EEXIST || attempt == 8) fail_errno(temp_, "cannot create folder", errno);
    }
}

QFORGE_DECL atomic_output_dir::~atomic_output_dir() {
    if (!committed_) remove_tree_noexcept(temp_);
}

QFORGE_DECL void atomic_output_dir::commit() {
    if (committed_) fail<io_error>(destination_, {}, "commit() called twice");
    detail::sync_tree(temp_);
    check_destination();
    std::string old;
    if (path_exists(destination_)) {
        old = detail::fresh_sibling_name(parent_, base_, "qforge-old");
        rename_path(destination_, old);
    }
    try {
        rename_path(temp_, destination_);
    } catch (...) {
        if (!old.empty()) restore(old, destination_);
        throw;
    }
    try {
        sync_directory(parent_);
    } catch (...) {
        // Not durable: put everything back as it was, then report.
        restore(destination_, temp_);
        if (!old.empty()) restore(old, destination_);
        throw;
    }
    committed_ = true;
    if (!old.empty() && !remove_tree_noexcept(old))
        fail<io_error>(destination_, {}, "committed, but the previous version could not be removed from " + old);
}

QFORGE_DECL void atomic_output_dir::check_destination() const {
    if (!path_exists(destination_)) return;
    if (!overwrite_)
        fail<io_error>(destination_, {}, "destination already exists (ask for overwrite to replace it)");
    if (!is_directory(destination_))
        fail<io_error>(destination_, {}, "destination exists and is not a folder; refusing to replace it");
}

QFORGE_DECL void atomic_output_dir::restore(const std::string& from, const std::string& to) noexcept {
    for (int attempt = 0; attempt < 2; ++attempt)
        if (detail::sys_rename(from.c_str(), to.c_str()) == 0) return;
}

}  // namespace qforge::io
#endif
