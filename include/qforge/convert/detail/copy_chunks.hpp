// Copying a source tensor's bytes to an output tensor in pread chunks, cast to another float
// dtype on the way when asked: what the converters do with every tensor they keep, so memory
// is one chunk and no mapping is read (a shard truncated underneath is an io_error).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/half.hpp"

namespace qforge::detail {

inline float load_float(const std::byte* p, dtype t) noexcept {
    std::uint16_t h;
    switch (t) {
        case dtype::BF16: std::memcpy(&h, p, 2); return bf16_to_float(h);
        case dtype::F16: std::memcpy(&h, p, 2); return fp16_to_float(h);
        case dtype::F64: {
            double d;
            std::memcpy(&d, p, 8);
            return static_cast<float>(d);
        }
        default: {
            float f;
            std::memcpy(&f, p, 4);
            return f;
        }
    }
}

/// Casts a float tensor's bytes to another float dtype (round to nearest even).
inline std::vector<std::byte> cast_floats(std::span<const std::byte> in, dtype from, dtype to) {
    const std::size_t n = in.size() / dtype_size(from);
    std::vector<std::byte> out(n * dtype_size(to));
    for (std::size_t i = 0; i < n; ++i) {
        const float f = load_float(in.data() + i * dtype_size(from), from);
        std::byte* dst = out.data() + i * dtype_size(to);
        if (to == dtype::BF16 || to == dtype::F16) {
            const std::uint16_t h = to == dtype::BF16 ? float_to_bf16(f) : float_to_fp16(f);
            std::memcpy(dst, &h, 2);
        } else if (to == dtype::F32) {
            std::memcpy(dst, &f, 4);
        } else {
            const double d = f;
            std::memcpy(dst, &d, 8);
        }
    }
    return out;
}

/// Copies bytes [offset, offset + length) of source tensor `name` to output tensor `out_name`
/// in pread chunks (cast to `to` when it differs from `from`): no mapping is read, and memory
/// is one chunk.
template <class Source, class Writer>
void copy_through_pread(const Source& src, const std::string& name, std::uint64_t offset, std::uint64_t length,
                        dtype from, dtype to, Writer& writer, const std::string& out_name) {
    constexpr std::uint64_t chunk = std::uint64_t{4} << 20;  // a multiple of every dtype size
    std::vector<std::byte> buf(static_cast<std::size_t>(std::min(chunk, length)));
    for (std::uint64_t done = 0; done < length;) {
        const std::span<std::byte> b(buf.data(), static_cast<std::size_t>(std::min(chunk, length - done)));
        src.read_tensor_range(name, offset + done, b);
        if (from == to) writer.write(out_name, b);
        else writer.write(out_name, cast_floats(b, from, to));
        done += b.size();
    }
}

}  // namespace qforge::detail
