// The fuzz targets' scratch file: input bytes put in a memfd and opened through
// /proc/self/fd/N, so a reader runs its real open/fstat/mmap/pread path without touching the
// disk. One per target (a function-local static), refilled for every input.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace qforge_fuzz {

struct memfile {
    int fd = -1;
    std::string path;
    explicit memfile(const char* name) {
        fd = ::memfd_create(name, 0);
        if (fd < 0) std::abort();
        path = "/proc/self/fd/" + std::to_string(fd);
    }
    /// Replaces the file's bytes with `data` (short writes retried).
    void assign(const std::uint8_t* data, std::size_t size) const {
        if (::ftruncate(fd, 0) != 0) std::abort();
        std::size_t done = 0;
        while (done < size) {
            const ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(done));
            if (n <= 0) std::abort();
            done += static_cast<std::size_t>(n);
        }
    }
    /// assign, returning the path to open.
    const std::string& put(const std::uint8_t* data, std::size_t size) const {
        assign(data, size);
        return path;
    }
};

}  // namespace qforge_fuzz
