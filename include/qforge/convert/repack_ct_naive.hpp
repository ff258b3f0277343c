// Reader for compressed-tensors `naive-quantized` (alias `int-quantized`) checkpoints: the
// weight stored unpacked as signed int8 codes, plus `weight_scale`, `weight_zero_point` (only
// when asymmetric) and `weight_g_idx` (only with actorder "group"). Source facts: formats.md
// 4.2 and 4.6 (CTo `compressors/quantized_compressors/naive_quantized.py`,
// `utils/helpers.py calculate_range`). The scale, zero point and g_idx steps are the packed
// reader's (layout/compressed_tensors.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "qforge/core/config.hpp"
#include "qforge/core/tensor_source.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

namespace repack_detail {

QFORGE_DECL std::int64_t ct_groups(std::int64_t K, std::int64_t group_size) noexcept;

}  // namespace repack_detail

/// Reads `<prefix>.weight` (I8 [N, K]), `weight_scale`, `weight_zero_point`, `weight_g_idx`.
QFORGE_DECL quantized_tensor read_ct_naive(const tensor_source& src, const std::string& prefix, const ct_weight_args& args);

/// compressed-tensors `naive-quantized` as a repack source (convert/repack.hpp's source table).
struct ct_naive_source_traits {
    static constexpr std::string_view source_name = "compressed-tensors naive-quantized";
    static constexpr std::array<std::string_view, 4> source_tensors{".weight", ".weight_scale", ".weight_zero_point", ".weight_g_idx"};
    static quantized_tensor read_source(const tensor_source& src, const std::string& prefix, const ct_weight_args& a);
};

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {
namespace repack_detail {

QFORGE_DECL std::int64_t ct_groups(std::int64_t K, std::int64_t group_size) noexcept {
    return group_size > 0 ? (K + group_size - 1) / group_size : 1;
}

}  // namespace repack_detail

QFORGE_DECL quantized_tensor read_ct_naive(const tensor_source& src, const std::string& prefix, const ct_weight_args& args) {
    using namespace detail;
    using namespace repack_detail;
    const tensor_view& w = src.require(prefix + ".weight");
    if (args.bits < 2 || args.bits > 8) fail<unsupported_error>(src.file, w.name, "bits must be 2..8, got " + std::to_string(args.bits));
    require_dtype(w, dtype::I8, src.file);
    if (w.rank() != 2 || w.shape[0] <= 0 || w.shape[1] <= 0)
        fail<shape_error>(src.file, w.name, "weight must be a non-empty 2-D tensor, shape " + shape_to_string(w.shape));
    quantized_tensor q;
    q.name = prefix;
    q.bits = args.bits;
    q.rows = w.shape[0];
    q.cols = w.shape[1];
    q.group_size = args.group_size > 0 ? args.group_size : q.cols;
    if (q.group_size > q.cols) q.group_size = q.cols;
    q.symmetric = args.symmetric;

    const int half = 1 << (args.bits - 1);
    q.codes.resize(static_cast<std::size_t>(q.rows * q.cols));
    const auto* p = reinterpret_cast<const std::int8_t*>(w.bytes.data());
    for (std::size_t i = 0; i < q.codes.size(); ++i) {
        const int v = p[i];
        if (v < -half || v >= half)
            fail<format_error>(src.file, w.name, "code " + std::to_string(v) + " at element " + std::to_string(i) + " is outside the signed " +
                                                     std::to_string(args.bits) + "-bit range");
        q.codes[i] = static_cast<std::uint8_t>(v + half);
    }

    const tensor_view* zp = src.optional(prefix + ".weight_zero_point");
    if (!args.symmetric) {
        if (!zp) fail<format_error>(src.file, prefix + ".weight_zero_point", "tensor is missing (the scheme is asymmetric)");
        require_shape(*zp, {q.rows, ct_groups(q.cols, q.group_size)}, src.file);
        if (!is_integer_dtype(zp->type)) fail<format_error>(src.file, zp->name, "zero point must be an integer tensor, got " + std::string(dtype_name(zp->type)));
        require_bytes(*zp, src.file);
    }
    ct_fill_scales_zeros(q, src.require(prefix + ".weight_scale"), args.symmetric,
                         [&](std::size_t i) { return int_at(*zp, i); }, src.file);
    ct_read_g_idx(q, src.optional(prefix + ".weight_g_idx"), src.file);
    q.validate();
    return q;
}


QFORGE_DECL quantized_tensor ct_naive_source_traits::read_source(const tensor_source& src, const std::string& prefix, const ct_weight_args& a) {
    return read_ct_naive(src, prefix, a);
}

}  // namespace qforge
#endif
