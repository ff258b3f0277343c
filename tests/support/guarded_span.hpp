// Bytes that end where a mapping ends: the page after them is mapped PROT_NONE, so any load
// past their end faults. The streaming kernels prefetch a fixed distance past what they read,
// which must never fault (a weight can end at the end of a memory-mapped file).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstring>
#include <span>
#include <stdexcept>

namespace qforge::testing {

class guarded_span {
public:
    /// A copy of `data`, placed so that its last byte is the last one before the guard page.
    explicit guarded_span(std::span<const std::byte> data) {
        page_ = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
        const std::size_t body = (data.size() + page_ - 1) / page_ * page_;
        size_ = body + page_;
        void* p = mmap(nullptr, size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) throw std::runtime_error("guarded_span: mmap failed");
        base_ = static_cast<std::byte*>(p);
        if (mprotect(base_ + body, page_, PROT_NONE) != 0) {
            munmap(base_, size_);
            throw std::runtime_error("guarded_span: mprotect failed");
        }
        data_ = base_ + body - data.size();
        std::memcpy(data_, data.data(), data.size());
    }
    guarded_span(const guarded_span&) = delete;
    guarded_span& operator=(const guarded_span&) = delete;
    ~guarded_span() { munmap(base_, size_); }

    const std::byte* data() const noexcept { return data_; }

private:
    std::byte* base_ = nullptr;
    std::byte* data_ = nullptr;
    std::size_t size_ = 0, page_ = 0;
};

}  // namespace qforge::testing
