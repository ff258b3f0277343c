// A non-owning view of one tensor's bytes: what readers hand out and writers take in.
//
// The bytes usually point into a memory-mapped file, so a view is cheap to copy and never
// outlives the reader that made it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"

namespace qforge {

using shape_t = std::vector<std::int64_t>;

/// Product of the dimensions, or a shape_error when a dimension is negative or the product
/// overflows int64 (a hostile header can claim anything).
QFORGE_DECL std::int64_t checked_numel(const shape_t& shape, const std::string& file = {},
                                  const std::string& tensor = {});

QFORGE_DECL std::string shape_to_string(const shape_t& shape);

struct tensor_view {
    std::string name;
    dtype type = dtype::F32;
    shape_t shape;
    std::span<const std::byte> bytes;

    std::int64_t numel() const { return checked_numel(shape, {}, name); }
    std::size_t rank() const noexcept { return shape.size(); }

    /// Element pointer of a whole-byte type, e.g. `data<std::uint16_t>()` for BF16.
    template <class T>
    const T* data() const noexcept {
        return reinterpret_cast<const T*>(bytes.data());
    }
};

/// A tensor that owns its bytes: what packers produce and writers consume.
struct owned_tensor {
    std::string name;
    dtype type = dtype::F32;
    shape_t shape;
    std::vector<std::byte> bytes;

    tensor_view view() const { return {name, type, shape, std::span<const std::byte>(bytes)}; }
};

}  // namespace qforge

#if QFORGE_BASE_BODIES_HERE

namespace qforge {

QFORGE_DECL std::int64_t checked_numel(const shape_t& shape, const std::string& file,
                                  const std::string& tensor) {
    std::int64_t n = 1;
    for (std::int64_t d : shape) {
        if (d < 0) fail<shape_error>(file, tensor, "negative dimension");
        if (d != 0 && n > INT64_MAX / d)
            fail<limit_error>(file, tensor, "element count overflows 64 bits");
        n *= d;
    }
    return n;
}

QFORGE_DECL std::string shape_to_string(const shape_t& shape) {
    std::string s = "[";
    for (std::size_t i = 0; i < shape.size(); ++i) {
        if (i) s += ", ";
        s += std::to_string(shape[i]);
    }
    return s + "]";
}

}  // namespace qforge
#endif
