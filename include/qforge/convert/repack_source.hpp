// What the repack readers read from: named tensor views (core/tensor_source.hpp, where every
// layout's reader and convert/'s checkpoint code share one set of checked element reads).
// The names here are the repack code's spellings of them.
#pragma once

#include <map>
#include <string>

#include "qforge/core/tensor_source.hpp"

namespace qforge {

using repack_source = tensor_source;

/// A source over an in-memory map (tests, and the converter after it has opened its shards).
inline repack_source make_repack_source(const std::map<std::string, tensor_view>& tensors, std::string file = {}) {
    return make_tensor_source(tensors, std::move(file));
}

namespace repack_detail {

using detail::load_le;
using detail::require_bytes;
using detail::require_dtype;
using detail::require_shape;
using detail::float_at;
using detail::int_at;
using detail::is_integer_dtype;
using detail::scale_patterns;
using detail::scale_of_pattern;
using detail::round_to_dtype;

}  // namespace repack_detail
}  // namespace qforge
