// The one door every output file operation of qforge goes through (see io/fault_injector.hpp).
#pragma once

#include <cerrno>
#include <cstddef>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "qforge/io/fault_injector.hpp"

namespace qforge::io {

namespace detail {

// Each wrapper returns what the system call returns, with errno set; an injected fault looks
// exactly like the system call failing.
inline bool injected(file_op op) noexcept {
    if (const int e = fault_injector::check(op)) {
        errno = e;
        return true;
    }
    return false;
}

inline int sys_create(const char* path, int flags, mode_t mode) noexcept {
    if (injected(file_op::create)) return -1;
    int fd;
    do fd = ::open(path, flags | O_CREAT | O_CLOEXEC, mode);
    while (fd < 0 && errno == EINTR);
    return fd;
}

inline ssize_t sys_pwrite(int fd, const void* buf, std::size_t n, off_t offset) noexcept {
    if (injected(file_op::write)) return -1;
    return ::pwrite(fd, buf, n, offset);
}

inline ssize_t sys_write(int fd, const void* buf, std::size_t n) noexcept {
    if (injected(file_op::write)) return -1;
    return ::write(fd, buf, n);
}

inline int sys_fsync(int fd) noexcept {
    if (injected(file_op::fsync)) return -1;
    return ::fsync(fd);
}

inline int sys_rename(const char* from, const char* to) noexcept {
    if (injected(file_op::rename)) return -1;
    return ::rename(from, to);
}

inline int sys_mkdir(const char* path, mode_t mode) noexcept {
    if (injected(file_op::mkdir)) return -1;
    return ::mkdir(path, mode);
}

inline int sys_unlink(const char* path) noexcept {
    if (injected(file_op::remove)) return -1;
    return ::unlink(path);
}

inline int sys_rmdir(const char* path) noexcept {
    if (injected(file_op::remove)) return -1;
    return ::rmdir(path);
}

}  // namespace detail
}  // namespace qforge::io
