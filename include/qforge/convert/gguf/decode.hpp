// A GGUF tensor decoded to float32: the reader's bytes (io/gguf/reader.hpp) through the
// layout's dequantizer (layout/gguf/quantize.hpp, ggml's dequantize_row_<t>, bit-identical).
// It lives here because it needs both: io reads files without knowing block layouts.
//
//   gguf::reader r("model.gguf");
//   std::vector<float> w = gguf::read_f32(r, *r.find_tensor("blk.0.attn_q.weight"));
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/gguf/reader.hpp"
#include "qforge/layout/gguf/quantize.hpp"

namespace qforge::gguf {

/// Tensor `t` of `r` as floats; an unsupported_error naming the file and tensor for a type
/// qforge cannot decode, the reader's io_error when its bytes cannot be read.
QFORGE_DECL std::vector<float> read_f32(const reader& r, const tensor_entry& t);

}  // namespace qforge::gguf

#if QFORGE_BODIES_HERE

namespace qforge::gguf {

QFORGE_DECL std::vector<float> read_f32(const reader& r, const tensor_entry& t) {
    if (!can_quantize(t.type))
        fail<unsupported_error>(r.path(), t.name, "cannot decode GGUF type " + std::string(type_name(t.type)));
    if (t.numel() == 0) return {};
    const auto raw = r.read_bytes(t);
    std::vector<std::uint16_t> aligned((raw.size() + 1) / 2);
    if (!raw.empty()) std::memcpy(aligned.data(), raw.data(), raw.size());  // memcpy(nullptr, ..., 0) is UB
    std::vector<float> out(static_cast<std::size_t>(t.numel()));
    dequantize_rows(t.type, reinterpret_cast<const std::byte*>(aligned.data()), t.numel(), out.data());
    return out;
}

}  // namespace qforge::gguf
#endif
