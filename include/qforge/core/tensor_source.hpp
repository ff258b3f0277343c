// What the readers of packed checkpoints read from: named tensor views, and the checked
// element access every reader shares.
//
// A reader does not care where the bytes live (a memory-mapped safetensors shard, a test's
// vector, a layout's own pack output), so it takes a `tensor_source`: a name -> view lookup
// plus the file name used in error messages. Element access goes through memcpy because a view
// may point at any byte offset of a mapped file. It sits in core/ so that each layout's reader
// (layout/<format>.hpp) and convert/'s checkpoint code share one set of checks and wordings.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/tensor_view.hpp"

namespace qforge {

/// A lookup of tensors by full name. `find` returns nullptr when the tensor is absent.
struct tensor_source {
    std::string file;  ///< shown in error messages (checkpoint folder or file)
    std::function<const tensor_view*(const std::string&)> find;

    const tensor_view& require(const std::string& name) const;
    const tensor_view* optional(const std::string& name) const { return find ? find(name) : nullptr; }
};

/// A source over an in-memory map (tests, and the converter after it has opened its shards).
QFORGE_DECL tensor_source make_tensor_source(const std::map<std::string, tensor_view>& tensors,
                                        std::string file = {});

/// A source over a list of views (a layout's unpack reads its own pack's output this way).
QFORGE_DECL tensor_source make_tensor_source(std::span<const tensor_view> views, std::string file = {});

namespace detail {

template <class T>
T load_le(const std::byte* p) noexcept {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

/// Checks the byte count against dtype x shape, so element reads below stay in bounds even
/// for a view built by hand.
QFORGE_DECL void require_bytes(const tensor_view& t, const std::string& file);

QFORGE_DECL void require_dtype(const tensor_view& t, dtype want, const std::string& file);

QFORGE_DECL void require_shape(const tensor_view& t, const shape_t& want, const std::string& file);

/// Element i of a floating tensor as double (F16/BF16/F32/F64).
QFORGE_DECL double float_at(const tensor_view& t, std::size_t i) noexcept;

/// Element i of an integer tensor as int64 (I8/U8/I16/U16/I32/U32/I64).
QFORGE_DECL std::int64_t int_at(const tensor_view& t, std::size_t i) noexcept;

QFORGE_DECL bool is_integer_dtype(dtype t) noexcept;

/// Reads 16-bit scale storage patterns; refuses any dtype other than `want` (no cast: a cast
/// would change what the loader decodes).
QFORGE_DECL std::vector<std::uint16_t> scale_patterns(const tensor_view& t, const std::string& file);

QFORGE_DECL float scale_of_pattern(std::uint16_t pattern, dtype t) noexcept;

/// Rounds a float into the weight dtype the way torch does (RNE); F32 stays as is.
QFORGE_DECL float round_to_dtype(float v, dtype t) noexcept;

/// The I32 words of a packed tensor: read in place when the view is 4-byte aligned (a
/// mapped safetensors file always is), copied out when it is not.
struct word_span {
    std::vector<std::uint32_t> copy;
    const std::uint32_t* ptr = nullptr;
    const std::uint32_t* data() const noexcept { return ptr; }
};

QFORGE_DECL word_span words_of(const tensor_view& t, const shape_t& shape, const std::string& file);

QFORGE_DECL void check_bits(int bits, const std::string& file, const std::string& name, std::initializer_list<int> allowed,
                       const char* format);

QFORGE_DECL std::vector<std::int32_t> read_g_idx_i32(const tensor_view& t, std::int64_t K, std::int64_t groups, const std::string& file);

QFORGE_DECL bool is_identity_g_idx(const std::vector<std::int32_t>& g, std::int64_t group_size) noexcept;

}  // namespace detail
}  // namespace qforge

#if QFORGE_BASE_BODIES_HERE

namespace qforge {

QFORGE_DECL tensor_source make_tensor_source(const std::map<std::string, tensor_view>& tensors,
                                        std::string file) {
    tensor_source src;
    src.file = std::move(file);
    src.find = [&tensors](const std::string& name) -> const tensor_view* {
        auto it = tensors.find(name);
        return it == tensors.end() ? nullptr : &it->second;
    };
    return src;
}

QFORGE_DECL tensor_source make_tensor_source(std::span<const tensor_view> views, std::string file) {
    tensor_source src;
    src.file = std::move(file);
    src.find = [views](const std::string& name) -> const tensor_view* {
        for (const tensor_view& v : views)
            if (v.name == name) return &v;
        return nullptr;
    };
    return src;
}

namespace detail {

QFORGE_DECL void require_bytes(const tensor_view& t, const std::string& file) {
    const std::size_t size = dtype_size(t.type);
    if (size == 0) fail<unsupported_error>(file, t.name, "dtype " + std::string(dtype_name(t.type)) + " cannot be read here");
    const auto n = static_cast<std::size_t>(checked_numel(t.shape, file, t.name));
    if (t.bytes.size() != n * size)
        fail<format_error>(file, t.name, "holds " + std::to_string(t.bytes.size()) + " bytes, shape " +
                                             shape_to_string(t.shape) + " of " + std::string(dtype_name(t.type)) +
                                             " needs " + std::to_string(n * size));
}

QFORGE_DECL void require_dtype(const tensor_view& t, dtype want, const std::string& file) {
    if (t.type != want)
        fail<format_error>(file, t.name, "dtype is " + std::string(dtype_name(t.type)) + ", expected " +
                                             std::string(dtype_name(want)));
    require_bytes(t, file);
}

QFORGE_DECL void require_shape(const tensor_view& t, const shape_t& want, const std::string& file) {
    if (t.shape != want)
        fail<shape_error>(file, t.name, "shape is " + shape_to_string(t.shape) + ", expected " + shape_to_string(want));
}

QFORGE_DECL double float_at(const tensor_view& t, std::size_t i) noexcept {
    const std::byte* p = t.bytes.data();
    switch (t.type) {
        case dtype::F16: return fp16_to_float(load_le<std::uint16_t>(p + 2 * i));
        case dtype::BF16: return bf16_to_float(load_le<std::uint16_t>(p + 2 * i));
        case dtype::F32: return load_le<float>(p + 4 * i);
        case dtype::F64: return load_le<double>(p + 8 * i);
        default: return 0.0;
    }
}

QFORGE_DECL std::int64_t int_at(const tensor_view& t, std::size_t i) noexcept {
    const std::byte* p = t.bytes.data();
    switch (t.type) {
        case dtype::I8: return load_le<std::int8_t>(p + i);
        case dtype::U8: return load_le<std::uint8_t>(p + i);
        case dtype::I16: return load_le<std::int16_t>(p + 2 * i);
        case dtype::U16: return load_le<std::uint16_t>(p + 2 * i);
        case dtype::I32: return load_le<std::int32_t>(p + 4 * i);
        case dtype::U32: return load_le<std::uint32_t>(p + 4 * i);
        case dtype::I64: return load_le<std::int64_t>(p + 8 * i);
        default: return 0;
    }
}

QFORGE_DECL bool is_integer_dtype(dtype t) noexcept {
    switch (t) {
        case dtype::I8: case dtype::U8: case dtype::I16: case dtype::U16:
        case dtype::I32: case dtype::U32: case dtype::I64:
            return true;
        default:
            return false;
    }
}

QFORGE_DECL std::vector<std::uint16_t> scale_patterns(const tensor_view& t, const std::string& file) {
    if (t.type != dtype::F16 && t.type != dtype::BF16)
        fail<unsupported_error>(file, t.name, "scale dtype " + std::string(dtype_name(t.type)) +
                                                  " is not F16 or BF16; qforge repacks 16-bit scales only, and a cast would change the decoded weights");
    require_bytes(t, file);
    std::vector<std::uint16_t> out(t.bytes.size() / 2);
    if (!out.empty()) std::memcpy(out.data(), t.bytes.data(), t.bytes.size());
    return out;
}

QFORGE_DECL float scale_of_pattern(std::uint16_t pattern, dtype t) noexcept {
    return t == dtype::BF16 ? bf16_to_float(pattern) : fp16_to_float(pattern);
}

QFORGE_DECL float round_to_dtype(float v, dtype t) noexcept {
    switch (t) {
        case dtype::BF16: return bf16_to_float(float_to_bf16(v));
        case dtype::F16: return fp16_to_float(float_to_fp16(v));
        default: return v;
    }
}

QFORGE_DECL word_span words_of(const tensor_view& t, const shape_t& shape, const std::string& file) {
    require_dtype(t, dtype::I32, file);
    require_shape(t, shape, file);
    word_span w;
    if (reinterpret_cast<std::uintptr_t>(t.bytes.data()) % alignof(std::uint32_t) == 0) {
        w.ptr = reinterpret_cast<const std::uint32_t*>(t.bytes.data());
        return w;
    }
    w.copy.resize(t.bytes.size() / 4);
    if (!w.copy.empty()) std::memcpy(w.copy.data(), t.bytes.data(), t.bytes.size());
    w.ptr = w.copy.data();
    return w;
}

QFORGE_DECL void check_bits(int bits, const std::string& file, const std::string& name, std::initializer_list<int> allowed,
                       const char* format) {
    for (int b : allowed)
        if (b == bits) return;
    fail<unsupported_error>(file, name, std::string(format) + " does not store " + std::to_string(bits) + "-bit codes");
}

QFORGE_DECL std::vector<std::int32_t> read_g_idx_i32(const tensor_view& t, std::int64_t K, std::int64_t groups, const std::string& file) {
    require_shape(t, {K}, file);
    if (!is_integer_dtype(t.type)) fail<format_error>(file, t.name, "g_idx must be an integer tensor");
    require_bytes(t, file);
    std::vector<std::int32_t> g(static_cast<std::size_t>(K));
    for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t v = int_at(t, static_cast<std::size_t>(k));
        if (v < 0 || v >= groups)
            fail<format_error>(file, t.name, "entry " + std::to_string(k) + " = " + std::to_string(v) + " is not one of the " +
                                                 std::to_string(groups) + " groups");
        g[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(v);
    }
    return g;
}

QFORGE_DECL bool is_identity_g_idx(const std::vector<std::int32_t>& g, std::int64_t group_size) noexcept {
    for (std::size_t k = 0; k < g.size(); ++k)
        if (g[k] != static_cast<std::int64_t>(k) / group_size) return false;
    return true;
}

}  // namespace detail
}  // namespace qforge

namespace qforge {

QFORGE_DECL const tensor_view& tensor_source::require(const std::string& name) const {
    if (const tensor_view* t = find ? find(name) : nullptr) return *t;
    fail<format_error>(file, name, "tensor is missing");
}

}  // namespace qforge
#endif
