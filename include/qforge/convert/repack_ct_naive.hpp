// Reader for compressed-tensors `naive-quantized` (alias `int-quantized`) checkpoints: the
// weight stored unpacked as signed int8 codes, plus `weight_scale`, `weight_zero_point` (only
// when asymmetric) and `weight_g_idx` (only with actorder "group"). Source facts: formats.md
// 4.2 and 4.6 (CTo `compressors/quantized_compressors/naive_quantized.py`,
// `utils/helpers.py calculate_range`).
#pragma once

#include <cstdint>
#include <string>

#include "qforge/convert/repack_source.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

/// The `weights` arguments of one compressed-tensors config group that the readers need.
struct ct_weight_args {
    int bits = 4;
    bool symmetric = true;
    std::int64_t group_size = 128;  ///< <= 0 means strategy "channel" (one group per row)
};

namespace repack_detail {

inline std::int64_t ct_groups(std::int64_t K, std::int64_t group_size) noexcept {
    return group_size > 0 ? (K + group_size - 1) / group_size : 1;
}

/// Reads `<prefix>.weight_scale` [N, G] and, for asymmetric schemes, the zero points through
/// `zero_of(i)` (already unpacked, signed CT convention); fills scales/zeros of `q`.
template <class ZeroOf>
void ct_fill_scales_zeros(quantized_tensor& q, const tensor_view& scale, bool symmetric, ZeroOf zero_of,
                          const std::string& file) {
    const std::int64_t G = q.groups();
    if (!(scale.rank() == 2 && scale.shape[0] == q.rows && scale.shape[1] == G))
        fail<shape_error>(file, scale.name, "shape is " + shape_to_string(scale.shape) + ", expected " +
                                                shape_to_string({q.rows, G}));
    q.scale_dtype = scale.type;
    q.scales = scale_patterns(scale, file);
    const int half = 1 << (q.bits - 1);
    q.zeros.assign(static_cast<std::size_t>(q.rows * G), half);
    if (symmetric) return;
    for (std::size_t i = 0; i < q.zeros.size(); ++i) {
        const std::int64_t z = zero_of(i);
        if (z < -half || z >= half)
            fail<format_error>(file, q.name, "zero point " + std::to_string(z) + " at row " + std::to_string(static_cast<std::int64_t>(i) / G) +
                                                 " group " + std::to_string(static_cast<std::int64_t>(i) % G) + " is outside the signed " +
                                                 std::to_string(q.bits) + "-bit range");
        q.zeros[i] = static_cast<std::int32_t>(z + half);
    }
}

/// Reads an optional `weight_g_idx` [K]; an identity one (k / group) is dropped so the
/// tensor also fits layouts without act-order.
inline void ct_read_g_idx(quantized_tensor& q, const tensor_view* g_idx, const std::string& file) {
    if (!g_idx) return;
    require_shape(*g_idx, {q.cols}, file);
    if (!is_integer_dtype(g_idx->type)) fail<format_error>(file, g_idx->name, "g_idx must be an integer tensor");
    require_bytes(*g_idx, file);
    q.g_idx.resize(static_cast<std::size_t>(q.cols));
    bool identity = true;
    for (std::int64_t k = 0; k < q.cols; ++k) {
        const std::int64_t g = int_at(*g_idx, static_cast<std::size_t>(k));
        if (g < 0 || g >= q.groups())
            fail<format_error>(file, g_idx->name, "entry " + std::to_string(k) + " = " + std::to_string(g) + " is not a group of this tensor");
        q.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(g);
        identity = identity && g == k / q.group_size;
    }
    if (identity) q.g_idx.clear();
}

}  // namespace repack_detail

/// Reads `<prefix>.weight` (I8 [N, K]), `weight_scale`, `weight_zero_point`, `weight_g_idx`.
inline quantized_tensor read_ct_naive(const repack_source& src, const std::string& prefix, const ct_weight_args& args) {
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

}  // namespace qforge
