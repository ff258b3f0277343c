// A read-only, private memory mapping of a whole file.
//
//   io::mapped_file m("model.safetensors");
//   std::span<const std::byte> all = m.bytes();
//   m.release(offset, length);   // madvise(DONTNEED): drop pages we are done with
//
// Caveat (documented for hostile input): if another process truncates the file while it is
// mapped, touching a page past the new end raises SIGBUS. Readers that must survive that use
// pread instead (safetensors::read_mode::pread / reader::read_tensor), which turns it into an
// io_error.
#pragma once

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "qforge/core/config.hpp"
#include "qforge/io/file.hpp"

namespace qforge::io {

class mapped_file {
public:
    mapped_file() = default;
    explicit mapped_file(std::string path);
    mapped_file(mapped_file&& o) noexcept
        : path_(std::move(o.path_)), data_(std::exchange(o.data_, nullptr)),
          size_(std::exchange(o.size_, 0)) {}
    mapped_file& operator=(mapped_file&& o) noexcept;
    mapped_file(const mapped_file&) = delete;
    mapped_file& operator=(const mapped_file&) = delete;
    ~mapped_file() { unmap(); }

    const std::string& path() const noexcept { return path_; }
    std::uint64_t size() const noexcept { return size_; }
    std::span<const std::byte> bytes() const noexcept;

    /// Tells the kernel we are done with [offset, offset+length): the pages are dropped and
    /// would be read again from the file if touched. Rounded inward to whole pages; a no-op
    /// for ranges outside the file. Advisory: errors are ignored.
    void release(std::uint64_t offset, std::uint64_t length) const noexcept;

    /// Hints sequential access for the whole mapping (read-ahead).
    void advise_sequential() const noexcept;

private:
    void unmap() noexcept;

    std::string path_;
    const std::byte* data_ = nullptr;
    std::uint64_t size_ = 0;
};

}  // namespace qforge::io

#if QFORGE_BASE_BODIES_HERE

namespace qforge::io {

QFORGE_DECL mapped_file::mapped_file(std::string path) : path_(std::move(path)) {
    int fd;
    do fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) fail_errno(path_, "cannot open for reading", errno);
    unique_fd guard(fd);
    size_ = file_size_of(fd, path_);
    if (size_ == 0) return;  // mmap of length 0 is an error; an empty span will do
    if (size_ > static_cast<std::uint64_t>(SIZE_MAX))
        fail<limit_error>(path_, {}, "file too large to map");
    void* p = ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) fail_errno(path_, "mmap failed", errno);
    data_ = static_cast<const std::byte*>(p);
}

QFORGE_DECL mapped_file& mapped_file::operator=(mapped_file&& o) noexcept {
    if (this != &o) {
        unmap();
        path_ = std::move(o.path_);
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
    }
    return *this;
}

QFORGE_DECL std::span<const std::byte> mapped_file::bytes() const noexcept {
    return {data_, static_cast<std::size_t>(size_)};
}

QFORGE_DECL void mapped_file::release(std::uint64_t offset, std::uint64_t length) const noexcept {
    if (!data_ || offset >= size_) return;
    length = std::min(length, size_ - offset);
    const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
    const std::uint64_t begin = (offset + page - 1) / page * page;
    const std::uint64_t end = (offset + length) / page * page;
    if (end <= begin) return;
    ::madvise(const_cast<std::byte*>(data_) + begin, static_cast<std::size_t>(end - begin),
              MADV_DONTNEED);
}

QFORGE_DECL void mapped_file::advise_sequential() const noexcept {
    if (data_) ::madvise(const_cast<std::byte*>(data_), static_cast<std::size_t>(size_), MADV_SEQUENTIAL);
}

QFORGE_DECL void mapped_file::unmap() noexcept {
    if (data_) ::munmap(const_cast<std::byte*>(data_), static_cast<std::size_t>(size_));
    data_ = nullptr;
    size_ = 0;
}

}  // namespace qforge::io
#endif
