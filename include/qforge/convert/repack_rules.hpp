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
#include "qforge/convert/repack_fake_quant.hpp"  // fmt_double
#include "qforge/convert/repack_packed.hpp"
#include "qforge/core/config.hpp"
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
QFORGE_DECL dtype target_scale_dtype(const repack_target& t) noexcept;

/// Converts every scale pattern to `to` if each converts exactly (the decoded weights cannot
/// change); otherwise returns the reason, naming the first scale that does not.
QFORGE_DECL std::optional<std::string> convert_scales_exactly(quantized_tensor& q, dtype to);

/// Why `target` cannot hold `q` exactly (after its scales are converted), or nullopt.
/// Shape rules are the layout layer's (convert/format.hpp `format_refusal`); the value rules
/// (zero points, act-order, bits, symmetry) are checked here on the data itself.
QFORGE_DECL std::optional<std::string> repack_refusal(const quantized_tensor& q, const repack_target& t);

/// The tensor as the target will store it: scales in the target's dtype, an identity g_idx
/// dropped. Throws unsupported_error with the reason when the target cannot hold it exactly.
QFORGE_DECL quantized_tensor repack_prepare(quantized_tensor q, const repack_target& t, const std::string& file = {});

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL dtype target_scale_dtype(const repack_target& t) noexcept {
    return t.scale_dtype ? *t.scale_dtype : repack_scale_dtype(t.format, t.model_dtype);
}

QFORGE_DECL std::optional<std::string> convert_scales_exactly(quantized_tensor& q, dtype to) {
    if (q.scale_dtype == to) return std::nullopt;
    if (to != dtype::F16 && to != dtype::BF16) return "scales can be written as F16 or BF16 only";
    std::vector<std::uint16_t> out(q.scales.size());
    for (std::size_t i = 0; i < q.scales.size(); ++i) {
        const float v = detail::scale_of_pattern(q.scales[i], q.scale_dtype);
        const std::uint16_t p = to == dtype::BF16 ? float_to_bf16(v) : float_to_fp16(v);
        const float back = detail::scale_of_pattern(p, to);
        if (!(back == v || (std::isnan(back) && std::isnan(v))))
            return "scale " + repack_detail::fmt_double(v) + " of " + detail::where_group(q, i) + " is not exactly representable in " +
                   std::string(dtype_name(to)) + " (the repack would change the weights)";
        out[i] = p;
    }
    q.scales = std::move(out);
    q.scale_dtype = to;
    return std::nullopt;
}

QFORGE_DECL std::optional<std::string> repack_refusal(const quantized_tensor& q, const repack_target& t) {
    const std::string fmt(format_name(t.format));
    if (auto why = format_codes_refusal(t.format, q)) return why;
    quant_spec s;
    s.bits = q.bits;
    s.group_size = q.group_size;
    s.symmetric = q.symmetric;
    s.scale_dtype = target_scale_dtype(t);
    if (auto why = format_refusal(t.format, q.rows, q.cols, s, t.model_dtype))
        return fmt + " cannot hold " + q.name + ": " + *why;
    return std::nullopt;
}

QFORGE_DECL quantized_tensor repack_prepare(quantized_tensor q, const repack_target& t, const std::string& file) {
    if (!q.g_idx.empty() && detail::g_idx_is_contiguous(q)) q.g_idx.clear();
    if (auto why = convert_scales_exactly(q, target_scale_dtype(t)))
        fail<unsupported_error>(file, q.name, std::string(format_name(t.format)) + ": " + *why);
    if (auto why = repack_refusal(q, t)) fail<unsupported_error>(file, q.name, *why);
    return q;
}

}  // namespace qforge
#endif
