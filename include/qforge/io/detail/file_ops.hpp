// The one door every output file operation of qforge goes through (see io/fault_injector.hpp).
#pragma once

#include <cerrno>
#include <cstddef>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "qforge/core/config.hpp"
#include "qforge/io/fault_injector.hpp"

namespace qforge::io {

namespace detail {

// Each wrapper returns what the system call returns, with errno set; an injected fault looks
// exactly like the system call failing.
QFORGE_DECL bool injected(file_op op) noexcept;

QFORGE_DECL int sys_create(const char* path, int flags, mode_t mode) noexcept;

QFORGE_DECL ssize_t sys_pwrite(int fd, const void* buf, std::size_t n, off_t offset) noexcept;

QFORGE_DECL ssize_t sys_write(int fd, const void* buf, std::size_t n) noexcept;

QFORGE_DECL int sys_fsync(int fd) noexcept;

QFORGE_DECL int sys_rename(const char* from, const char* to) noexcept;

QFORGE_DECL int sys_mkdir(const char* path, mode_t mode) noexcept;

QFORGE_DECL int sys_unlink(const char* path) noexcept;

QFORGE_DECL int sys_rmdir(const char* path) noexcept;

}  // namespace detail
}  // namespace qforge::io

#if QFORGE_BASE_BODIES_HERE

namespace qforge::io {
namespace detail {

QFORGE_DECL bool injected(file_op op) noexcept {
    if (const int e = fault_injector::check(op)) {
        errno = e;
        return true;
    }
    return false;
}

QFORGE_DECL int sys_create(const char* path, int flags, mode_t mode) noexcept {
    if (injected(file_op::create)) return -1;
    int fd;
    do fd = ::open(path, flags | O_CREAT | O_CLOEXEC, mode);
    while (fd < 0 && errno == EINTR);
    return fd;
}

QFORGE_DECL ssize_t sys_pwrite(int fd, const void* buf, std::size_t n, off_t offset) noexcept {
    if (injected(file_op::write)) return -1;
    return ::pwrite(fd, buf, n, offset);
}

QFORGE_DECL ssize_t sys_write(int fd, const void* buf, std::size_t n) noexcept {
    if (injected(file_op::write)) return -1;
    return ::write(fd, buf, n);
}

QFORGE_DECL int sys_fsync(int fd) noexcept {
    if (injected(file_op::fsync)) return -1;
    return ::fsync(fd);
}

QFORGE_DECL int sys_rename(const char* from, const char* to) noexcept {
    if (injected(file_op::rename)) return -1;
    return ::rename(from, to);
}

QFORGE_DECL int sys_mkdir(const char* path, mode_t mode) noexcept {
    if (injected(file_op::mkdir)) return -1;
    return ::mkdir(path, mode);
}

QFORGE_DECL int sys_unlink(const char* path) noexcept {
    if (injected(file_op::remove)) return -1;
    return ::unlink(path);
}

QFORGE_DECL int sys_rmdir(const char* path) noexcept {
    if (injected(file_op::remove)) return -1;
    return ::rmdir(path);
}

}  // namespace detail
}  // namespace qforge::io
#endif
