// Which already-quantized tensors a target layout can hold bit for bit, and the one change a
// repack may make on the way: a scale dtype change, allowed only when every scale converts
// exactly. Everything else (bits, group, zero points, codes, g_idx) moves unchanged or the
// repack is refused with the reason, naming the tensor and the group.
//
// Compatible pairs (formats.md 2.3, 3, 4.2): GPTQ symmetric <-> compressed-tensors symmetric
// (zero 2^(b-1) in both); AWQ <-> GPTQ v2 <-> compressed-tensors asymmetric (real zeros in
// all three); GPTQ v1 holds asymmetric zeros 1..2^b-1 only (it stores zero - 1).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "qforge/convert/format.hpp"
#include "qforge/convert/repack_packed.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

/// Where a repack writes to.
struct repack_target {
    output_format format = output_format::compressed_tensors;
    /// nullopt: GPTQ/AWQ write F16 (what their loaders expect), compressed-tensors writes
    /// `model_dtype` (it keeps scales in the checkpoint's dtype, formats.md 4.1).
    std::optional<dtype> scale_dtype;
    dtype model_dtype = dtype::BF16;  ///< the checkpoint's dtype (its unquantized tensors)
    ct_packing packing = ct_packing::dense_v0_18;  ///< compressed-tensors 3/5/6/7-bit words
};

/// The scale dtype a target writes for tensors of a checkpoint.
inline dtype target_scale_dtype(const repack_target& t) noexcept {
    if (t.scale_dtype) return *t.scale_dtype;
    if (t.format == output_format::compressed_tensors &&
        (t.model_dtype == dtype::F16 || t.model_dtype == dtype::BF16))
        return t.model_dtype;
    return dtype::F16;
}

namespace repack_detail {

inline std::string where_group(const quantized_tensor& q, std::size_t i) {
    return q.name + " group " + std::to_string(static_cast<std::int64_t>(i) % q.groups()) + " (row " +
           std::to_string(static_cast<std::int64_t>(i) / q.groups()) + ")";
}

inline bool g_idx_is_contiguous(const quantized_tensor& q) noexcept {
    for (std::int64_t k = 0; k < q.cols; ++k)
        if (q.group_of(k) != k / q.group_size) return false;
    return true;
}

}  // namespace repack_detail

/// Converts every scale pattern to `to` if each converts exactly (the decoded weights cannot
/// change); otherwise returns the reason, naming the first scale that does not.
inline std::optional<std::string> convert_scales_exactly(quantized_tensor& q, dtype to) {
    if (q.scale_dtype == to) return std::nullopt;
    if (to != dtype::F16 && to != dtype::BF16) return "scales can be written as F16 or BF16 only";
    std::vector<std::uint16_t> out(q.scales.size());
    for (std::size_t i = 0; i < q.scales.size(); ++i) {
        const float v = repack_detail::scale_of_pattern(q.scales[i], q.scale_dtype);
        const std::uint16_t p = to == dtype::BF16 ? float_to_bf16(v) : float_to_fp16(v);
        const float back = repack_detail::scale_of_pattern(p, to);
        if (!(back == v || (std::isnan(back) && std::isnan(v))))
            return "scale " + repack_detail::fmt_double(v) + " of " + repack_detail::where_group(q, i) + " is not exactly representable in " +
                   std::string(dtype_name(to)) + " (the repack would change the weights)";
        out[i] = p;
    }
    q.scales = std::move(out);
    q.scale_dtype = to;
    return std::nullopt;
}

/// Why `target` cannot hold `q` exactly (after its scales are converted), or nullopt.
/// Shape rules are the layout layer's (convert/format.hpp `format_refusal`); the value rules
/// (zero points, act-order, bits, symmetry) are checked here on the data itself.
inline std::optional<std::string> repack_refusal(const quantized_tensor& q, const repack_target& t) {
    const std::string fmt(format_name(t.format));
    const std::string b = std::to_string(q.bits);
    switch (t.format) {
        case output_format::gptq:
        case output_format::gptq_v2:
            if (q.bits != 2 && q.bits != 3 && q.bits != 4 && q.bits != 8)
                return "GPTQ stores 2, 3, 4 or 8 bits; " + q.name + " has " + b + "-bit codes";
            if (t.format == output_format::gptq && !q.symmetric)
                for (std::size_t i = 0; i < q.zeros.size(); ++i)
                    if (q.zeros[i] == 0)
                        return "GPTQ v1 cannot store zero point 0 found in " + repack_detail::where_group(q, i) +
                               " (it stores zero - 1); use --format gptq-v2 or compressed-tensors";
            break;
        case output_format::awq:
            if (q.bits != 4) return "AWQ stores 4 bits only; " + q.name + " has " + b + "-bit codes";
            if (!repack_detail::g_idx_is_contiguous(q))
                return "AWQ has no g_idx, but " + q.name + " is act-order (its g_idx is not k / " +
                       std::to_string(q.group_size) + "); use GPTQ or compressed-tensors, which keep it";
            break;
        case output_format::compressed_tensors:
            break;
        case output_format::compressed_tensors_w8a8:
            if (q.bits != 8 || !q.symmetric) return "W8A8 stores 8-bit symmetric weights; " + q.name + " has " + b + "-bit codes";
            if (!repack_detail::g_idx_is_contiguous(q)) return "W8A8 has no g_idx, but " + q.name + " is act-order";
            break;
        case output_format::compressed_tensors_fp8:
        case output_format::fp8:
            return fmt + " holds E4M3 codes, which integer codes of " + q.name +
                   " do not map onto bit for bit; convert the float checkpoint instead";
        case output_format::compressed_tensors_nvfp4:
        case output_format::compressed_tensors_mxfp4:
            return fmt + " holds E2M1 codes, which integer codes of " + q.name +
                   " do not map onto bit for bit; convert the float checkpoint instead";
    }
    quant_spec s;
    s.bits = q.bits;
    s.group_size = q.group_size;
    s.symmetric = q.symmetric;
    s.scale_dtype = target_scale_dtype(t);
    if (auto why = format_refusal(t.format, q.rows, q.cols, s, t.model_dtype))
        return fmt + " cannot hold " + q.name + ": " + *why;
    return std::nullopt;
}

/// The tensor as the target will store it: scales in the target's dtype, an identity g_idx
/// dropped. Throws unsupported_error with the reason when the target cannot hold it exactly.
inline quantized_tensor repack_prepare(quantized_tensor q, const repack_target& t, const std::string& file = {}) {
    if (!q.g_idx.empty() && repack_detail::g_idx_is_contiguous(q)) q.g_idx.clear();
    if (auto why = convert_scales_exactly(q, target_scale_dtype(t)))
        fail<unsupported_error>(file, q.name, std::string(format_name(t.format)) + ": " + *why);
    if (auto why = repack_refusal(q, t)) fail<unsupported_error>(file, q.name, *why);
    return q;
}

}  // namespace qforge
