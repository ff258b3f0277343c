// Files without a runtime dependency: an RAII descriptor, pread-based input, output files and
// the folder operations the atomic output needs. Every failure is an io_error naming the file
// and the errno text; every output operation goes through io/detail/file_ops.hpp so tests can
// inject faults (io/fault_injector.hpp).
//
//   io::input_file in("model.safetensors");
//   in.read_at(offset, std::span<std::byte>(buf));       // io_error on a short read
//   io::output_file out = io::output_file::create("x.bin");
//   out.write(bytes); out.sync(); out.close();           // close() reports errors; ~ does not
//   io::write_file("config.json", text);                 // create + write + fsync + close
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/detail/file_ops.hpp"

namespace qforge::io {

/// io_error "<what>: <strerror> (errno N)" naming `file` (and `tensor` when given).
[[noreturn]] inline void fail_errno(std::string file, std::string_view what, int err,
                                    std::string tensor = {}) {
    fail<io_error>(std::move(file), std::move(tensor),
                   std::string(what) + ": " + std::generic_category().message(err) + " (errno " +
                       std::to_string(err) + ")");
}

/// Owns a file descriptor; closes it (ignoring errors) on destruction.
class unique_fd {
public:
    unique_fd() noexcept = default;
    explicit unique_fd(int fd) noexcept : fd_(fd) {}
    unique_fd(unique_fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
    unique_fd& operator=(unique_fd&& o) noexcept;
    unique_fd(const unique_fd&) = delete;
    unique_fd& operator=(const unique_fd&) = delete;
    ~unique_fd() { reset(); }

    int get() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }
    int release() noexcept { return std::exchange(fd_, -1); }
    void reset(int fd = -1) noexcept;

private:
    int fd_ = -1;
};

/// Size of an open file, via fstat.
QFORGE_DECL std::uint64_t file_size_of(int fd, const std::string& path);

/// A file opened read-only; reads are positional (pread), so one object can serve threads.
class input_file {
public:
    input_file() = default;
    explicit input_file(std::string path);

    const std::string& path() const noexcept { return path_; }
    int fd() const noexcept { return fd_.get(); }
    /// Size when opened (a file truncated later makes read_at fail, never crash).
    std::uint64_t size() const noexcept { return size_; }

    /// Fills `out` from `offset`; a short read (file shorter than expected, e.g. truncated
    /// underneath us) is an io_error naming the file and `tensor`.
    void read_at(std::uint64_t offset, std::span<std::byte> out, const std::string& tensor = {}) const;

private:
    std::string path_;
    unique_fd fd_;
    std::uint64_t size_ = 0;
};

/// Writes all of `bytes` at `offset` of the open file `fd` (named `path` in errors), through the
/// fault-injectable system call so tests can fail it; retries on EINTR and short writes.
QFORGE_DECL void write_at(int fd, const std::string& path, std::span<const std::byte> bytes, std::uint64_t offset);

/// fsync of the open file `fd` (named `path` in errors).
QFORGE_DECL void sync_file(int fd, const std::string& path);

/// Whole-file read, refusing files over `max_bytes` before allocating (limit_error).
QFORGE_DECL std::string read_file(const std::string& path, std::uint64_t max_bytes = std::uint64_t{1} << 30);

/// An output file. Writes loop over short writes and EINTR. The destructor closes without
/// reporting; call close() to learn about errors.
class output_file {
public:
    output_file() = default;

    /// Creates (or truncates) `path`. With `exclusive`, an existing file is an error.
    static output_file create(std::string path, bool exclusive = false);

    const std::string& path() const noexcept { return path_; }
    bool is_open() const noexcept { return static_cast<bool>(fd_); }
    std::uint64_t position() const noexcept { return pos_; }

    /// Appends at the current position.
    void write(std::span<const std::byte> bytes);
    void write(std::string_view text) { write(std::as_bytes(std::span<const char>(text))); }

    /// Writes at `offset` without moving the append position (pwrite).
    void write_at(std::uint64_t offset, std::span<const std::byte> bytes);

    void sync();

    void close();

private:
    std::string path_;
    unique_fd fd_;
    std::uint64_t pos_ = 0;
};

/// Creates `path` with `bytes` as its content, fsyncs and closes it.
QFORGE_DECL void write_file(const std::string& path, std::span<const std::byte> bytes);
QFORGE_DECL void write_file(const std::string& path, std::string_view text);

/// Copies a regular file byte for byte (pread in 4 MiB chunks), fsyncing the copy.
QFORGE_DECL void copy_file(const std::string& from, const std::string& to);

/// lstat-based checks (a symlink is reported as itself, not followed).
QFORGE_DECL bool path_exists(const std::string& path) noexcept;
QFORGE_DECL bool is_directory(const std::string& path) noexcept;

QFORGE_DECL void rename_path(const std::string& from, const std::string& to);

/// rename_path for cleanup paths (undoing a move after a failure): never throws.
QFORGE_DECL bool rename_path_noexcept(const std::string& from, const std::string& to) noexcept;

QFORGE_DECL void make_directory(const std::string& path);

QFORGE_DECL void remove_file(const std::string& path);

/// fsync of a folder, so the names created or renamed in it are durable.
QFORGE_DECL void sync_directory(const std::string& path);

/// Names in a folder (no "." or ".."), in readdir order.
QFORGE_DECL std::vector<std::string> list_directory(const std::string& path);

/// Removes a file, a symlink (not its target) or a whole folder tree. Throws on failure.
QFORGE_DECL void remove_tree(const std::string& path);

/// remove_tree for cleanup paths (destructors, after a failure): never throws; retries once
/// so that a single failing operation does not leave the tree behind.
QFORGE_DECL bool remove_tree_noexcept(const std::string& path) noexcept;

}  // namespace qforge::io

#if QFORGE_BASE_BODIES_HERE

namespace qforge::io {

QFORGE_DECL std::uint64_t file_size_of(int fd, const std::string& path) {
    struct stat st {};
    if (::fstat(fd, &st) != 0) fail_errno(path, "fstat failed", errno);
    if (!S_ISREG(st.st_mode)) fail<io_error>(path, {}, "not a regular file");
    return static_cast<std::uint64_t>(st.st_size);
}

QFORGE_DECL void write_at(int fd, const std::string& path, std::span<const std::byte> bytes, std::uint64_t offset) {
    for (std::size_t done = 0; done < bytes.size();) {
        const ssize_t n = detail::sys_pwrite(fd, bytes.data() + done, std::min<std::size_t>(bytes.size() - done, 1u << 30),
                                             static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            fail_errno(path, "write failed", errno);
        }
        done += static_cast<std::size_t>(n);
    }
}

QFORGE_DECL void sync_file(int fd, const std::string& path) {
    if (detail::sys_fsync(fd) != 0) fail_errno(path, "fsync failed", errno);
}

QFORGE_DECL std::string read_file(const std::string& path, std::uint64_t max_bytes) {
    input_file in(path);
    if (in.size() > max_bytes)
        fail<limit_error>(path, {}, "file of " + std::to_string(in.size()) +
                                        " bytes exceeds the limit of " + std::to_string(max_bytes));
    std::string text(static_cast<std::size_t>(in.size()), '\0');
    in.read_at(0, std::as_writable_bytes(std::span<char>(text)));
    return text;
}

QFORGE_DECL void write_file(const std::string& path, std::span<const std::byte> bytes) {
    output_file f = output_file::create(path);
    f.write(bytes);
    f.sync();
    f.close();
}

QFORGE_DECL void write_file(const std::string& path, std::string_view text) {
    write_file(path, std::as_bytes(std::span<const char>(text)));
}

QFORGE_DECL void copy_file(const std::string& from, const std::string& to) {
    input_file in(from);
    output_file out = output_file::create(to);
    std::vector<std::byte> buf(std::min<std::uint64_t>(in.size(), std::uint64_t{4} << 20));
    for (std::uint64_t off = 0; off < in.size();) {
        const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), in.size() - off));
        in.read_at(off, std::span<std::byte>(buf.data(), n));
        out.write(std::span<const std::byte>(buf.data(), n));
        off += n;
    }
    out.sync();
    out.close();
}

QFORGE_DECL bool path_exists(const std::string& path) noexcept {
    struct stat st {};
    return ::lstat(path.c_str(), &st) == 0;
}

QFORGE_DECL bool is_directory(const std::string& path) noexcept {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

QFORGE_DECL void rename_path(const std::string& from, const std::string& to) {
    if (detail::sys_rename(from.c_str(), to.c_str()) != 0)
        fail_errno(from, "cannot rename to " + to, errno);
}

QFORGE_DECL bool rename_path_noexcept(const std::string& from, const std::string& to) noexcept {
    return detail::sys_rename(from.c_str(), to.c_str()) == 0;
}

QFORGE_DECL void make_directory(const std::string& path) {
    if (detail::sys_mkdir(path.c_str(), 0755) != 0) fail_errno(path, "cannot create folder", errno);
}

QFORGE_DECL void remove_file(const std::string& path) {
    if (detail::sys_unlink(path.c_str()) != 0) fail_errno(path, "cannot remove", errno);
}

QFORGE_DECL void sync_directory(const std::string& path) {
    int fd;
    do fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) fail_errno(path, "cannot open folder", errno);
    unique_fd guard(fd);
    if (detail::sys_fsync(fd) != 0) fail_errno(path, "fsync of folder failed", errno);
}

QFORGE_DECL std::vector<std::string> list_directory(const std::string& path) {
    DIR* d = ::opendir(path.c_str());
    if (!d) fail_errno(path, "cannot list folder", errno);
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
        const std::string_view n = e->d_name;
        if (n != "." && n != "..") names.emplace_back(n);
    }
    ::closedir(d);
    return names;
}

QFORGE_DECL void remove_tree(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
        if (errno == ENOENT) return;
        fail_errno(path, "cannot stat", errno);
    }
    if (S_ISDIR(st.st_mode)) {
        for (const std::string& name : list_directory(path)) remove_tree(path + "/" + name);
        if (detail::sys_rmdir(path.c_str()) != 0) fail_errno(path, "cannot remove folder", errno);
    } else {
        remove_file(path);
    }
}

QFORGE_DECL bool remove_tree_noexcept(const std::string& path) noexcept {
    for (int attempt = 0; attempt < 2; ++attempt) {
        try {
            remove_tree(path);
            return true;
        } catch (...) {
        }
    }
    return false;
}


QFORGE_DECL unique_fd& unique_fd::operator=(unique_fd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
}

QFORGE_DECL void unique_fd::reset(int fd) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
}

QFORGE_DECL input_file::input_file(std::string path) : path_(std::move(path)) {
    int fd;
    do fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) fail_errno(path_, "cannot open for reading", errno);
    fd_.reset(fd);
    size_ = file_size_of(fd_.get(), path_);
}

QFORGE_DECL void input_file::read_at(std::uint64_t offset, std::span<std::byte> out, const std::string& tensor) const {
    std::size_t done = 0;
    while (done < out.size()) {
        const std::size_t chunk = std::min<std::size_t>(out.size() - done, std::size_t{1} << 30);
        const ssize_t n = ::pread(fd_.get(), out.data() + done, chunk,
                                  static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            fail_errno(path_, "read failed", errno, tensor);
        }
        if (n == 0)
            fail<io_error>(path_, tensor,
                           "unexpected end of file: wanted " + std::to_string(out.size()) +
                               " bytes at offset " + std::to_string(offset) + ", got " +
                               std::to_string(done) + " (file truncated or changed?)");
        done += static_cast<std::size_t>(n);
    }
}

QFORGE_DECL output_file output_file::create(std::string path, bool exclusive) {
    output_file f;
    const int flags = O_WRONLY | O_TRUNC | (exclusive ? O_EXCL : 0);
    const int fd = detail::sys_create(path.c_str(), flags, 0644);
    if (fd < 0) fail_errno(path, "cannot create", errno);
    f.fd_.reset(fd);
    f.path_ = std::move(path);
    return f;
}

QFORGE_DECL void output_file::write(std::span<const std::byte> bytes) {
    write_at(pos_, bytes);
    pos_ += bytes.size();
}

QFORGE_DECL void output_file::write_at(std::uint64_t offset, std::span<const std::byte> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const std::size_t chunk = std::min<std::size_t>(bytes.size() - done, std::size_t{1} << 30);
        const ssize_t n = detail::sys_pwrite(fd_.get(), bytes.data() + done, chunk,
                                             static_cast<off_t>(offset + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            fail_errno(path_, "write failed", errno);
        }
        done += static_cast<std::size_t>(n);
    }
}

QFORGE_DECL void output_file::sync() {
    if (detail::sys_fsync(fd_.get()) != 0) fail_errno(path_, "fsync failed", errno);
}

QFORGE_DECL void output_file::close() {
    const int fd = fd_.release();
    if (fd >= 0 && ::close(fd) != 0) fail_errno(path_, "close failed", errno);
}

}  // namespace qforge::io
#endif
