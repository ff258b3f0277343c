// Pre-quantized input: codes, scales and zero points that already exist (trained by
// quantization-aware training, or read from another checkpoint), checked and turned into
// the same quantized_tensor that quantize() produces, so every layout can write them.
//
// Refused, naming the tensor and the place: codes outside 0..2^bits-1, zero points that are
// not integers (QA-LoRA style fractional zeros; the group is named) or out of range,
// symmetric input whose zeros are not 2^(bits-1), scales whose dtype is not the declared
// one, non-finite scales, sizes that do not match the shape.
//
// **Example**:
//   qforge::prequantized_input in;
//   in.name = "model.layers.0.mlp.up_proj"; in.bits = 4; in.rows = N; in.cols = K;
//   in.group_size = 128; in.symmetric = false; in.scale_dtype = qforge::dtype::BF16;
//   in.codes = codes_span; in.scales = scales_view; in.zeros = zeros_span;
//   qforge::quantized_tensor q = qforge::from_prequantized(in);
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

struct prequantized_input {
    std::string name;
    int bits = 4;
    std::int64_t rows = 0, cols = 0;
    std::int64_t group_size = 128;            ///< columns per group, or -1 for per channel
    bool symmetric = true;
    dtype scale_dtype = dtype::F16;           ///< the declared scale dtype (F16 or BF16)
    std::span<const std::int32_t> codes;      ///< [rows * cols] unsigned codes, row-major
    tensor_view scales;                       ///< [rows, groups], dtype must be scale_dtype
    std::span<const double> zeros;            ///< [rows * groups] code-space zeros; empty = pinned 2^(bits-1) (symmetric only)
    std::span<const std::int32_t> g_idx;      ///< optional [cols]
};

inline quantized_tensor from_prequantized(const prequantized_input& in) {
    auto shape_bad = [&](const std::string& why) { fail<shape_error>({}, in.name, why); };
    auto bad = [&](const std::string& why) { fail<unsupported_error>({}, in.name, why); };
    if (in.bits < 2 || in.bits > 8) bad("bits must be 2..8, got " + std::to_string(in.bits));
    if (in.rows <= 0 || in.cols <= 0) shape_bad("empty weight");
    const std::int64_t gsize = in.group_size == -1 ? in.cols : in.group_size;
    if (gsize <= 0 || gsize > in.cols) shape_bad("group size " + std::to_string(in.group_size) + " out of range");
    if (in.scale_dtype != dtype::F16 && in.scale_dtype != dtype::BF16)
        bad("declared scale dtype must be F16 or BF16, not " + std::string(dtype_name(in.scale_dtype)));
    if (in.scales.type != in.scale_dtype)
        bad("scales are " + std::string(dtype_name(in.scales.type)) + " but the declared scale dtype is " +
            std::string(dtype_name(in.scale_dtype)));
    const std::int64_t groups = (in.cols + gsize - 1) / gsize;
    const std::int64_t maxq = (1 << in.bits) - 1;
    if (in.codes.size() != static_cast<std::size_t>(in.rows * in.cols))
        shape_bad("codes hold " + std::to_string(in.codes.size()) + " values, shape needs " +
                  std::to_string(in.rows * in.cols));
    if (in.scales.shape != shape_t{in.rows, groups} || in.scales.bytes.size() != static_cast<std::size_t>(in.rows * groups) * 2)
        shape_bad("scales shape " + shape_to_string(in.scales.shape) + " is not [" + std::to_string(in.rows) + ", " +
                  std::to_string(groups) + "]");
    if (!in.zeros.empty() && in.zeros.size() != static_cast<std::size_t>(in.rows * groups))
        shape_bad("zeros hold " + std::to_string(in.zeros.size()) + " values, need " + std::to_string(in.rows * groups));
    if (in.zeros.empty() && !in.symmetric) bad("asymmetric input needs zero points");

    quantized_tensor q;
    q.name = in.name;
    q.bits = in.bits;
    q.rows = in.rows;
    q.cols = in.cols;
    q.group_size = gsize;
    q.symmetric = in.symmetric;
    q.scale_dtype = in.scale_dtype;
    q.codes.resize(in.codes.size());
    for (std::size_t i = 0; i < in.codes.size(); ++i) {
        if (in.codes[i] < 0 || in.codes[i] > maxq)
            fail<format_error>({}, in.name, "code " + std::to_string(in.codes[i]) + " at element " + std::to_string(i) +
                                                " is outside 0.." + std::to_string(maxq));
        q.codes[i] = static_cast<std::uint8_t>(in.codes[i]);
    }
    const auto n_groups = static_cast<std::size_t>(in.rows * groups);
    q.scales.resize(n_groups);
    std::memcpy(q.scales.data(), in.scales.bytes.data(), n_groups * 2);
    for (std::size_t i = 0; i < n_groups; ++i) {
        const std::uint16_t mag = q.scales[i] & 0x7FFFu;
        if (mag >= (in.scale_dtype == dtype::BF16 ? 0x7F80u : 0x7C00u))
            fail<format_error>({}, in.name, "scale of row " + std::to_string(static_cast<std::int64_t>(i) / groups) +
                                                " group " + std::to_string(static_cast<std::int64_t>(i) % groups) +
                                                " is not finite");
    }
    const std::int32_t pinned = 1 << (in.bits - 1);
    q.zeros.assign(n_groups, pinned);
    for (std::size_t i = 0; i < in.zeros.size(); ++i) {
        const double z = in.zeros[i];
        const std::string where = "row " + std::to_string(static_cast<std::int64_t>(i) / groups) + " group " +
                                  std::to_string(static_cast<std::int64_t>(i) % groups);
        if (!(z == std::floor(z)))
            fail<unsupported_error>({}, in.name, "zero point " + std::to_string(z) + " of " + where +
                                                     " is not an integer (fractional zero points cannot be stored)");
        if (z < 0 || z > static_cast<double>(maxq))
            fail<format_error>({}, in.name, "zero point " + std::to_string(z) + " of " + where + " is outside 0.." +
                                                std::to_string(maxq));
        if (in.symmetric && z != pinned)
            fail<unsupported_error>({}, in.name, "symmetric input has zero point " + std::to_string(z) + " at " + where +
                                                     " (must be " + std::to_string(pinned) + ")");
        q.zeros[i] = static_cast<std::int32_t>(z);
    }
    if (!in.g_idx.empty()) {
        if (in.g_idx.size() != static_cast<std::size_t>(in.cols)) shape_bad("g_idx must have one entry per column");
        q.g_idx.assign(in.g_idx.begin(), in.g_idx.end());
    }
    q.validate();
    return q;
}

}  // namespace qforge
