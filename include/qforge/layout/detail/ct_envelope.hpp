// The compressed-tensors `quantization_config` written once for its three schemes
// (pack-quantized integers, layout/compressed_tensors.hpp; float-quantized FP8, layout/fp8.hpp;
// int-quantized W8A8, layout/ct_int8.hpp): the envelope around the config groups, one config
// group, and one QuantizationArgs. Only keys compressed-tensors 0.12 accepts: its
// QuantizationArgs and QuantizationConfig forbid extra keys (CTn `quantization/quant_args.py`,
// `quantization/quant_config.py`; formats.md 4.4). Keys are written in this order, which is the
// order the golden configs hold. Also the scale-dtype rule the three share.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "qforge/core/dtype.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/layout/layout_traits.hpp"

namespace qforge::detail {

/// One QuantizationArgs: `type` "int" or "float", `strategy` "channel", "group", "block" or
/// "token" or "tensor_group"; `dynamic` false, true or "local" (NVFP4 activations);
/// `group_size`, `block_structure` and `observer` are null where they do not apply.
inline json ct_quantization_args(std::string_view type, int num_bits, std::string_view strategy, bool symmetric,
                                 json dynamic, json group_size, json block_structure, json observer) {
    return json::object({{"actorder", nullptr},
                         {"block_structure", std::move(block_structure)},
                         {"dynamic", std::move(dynamic)},
                         {"group_size", std::move(group_size)},
                         {"num_bits", num_bits},
                         {"observer", std::move(observer)},
                         {"observer_kwargs", json::object()},
                         {"strategy", strategy},
                         {"symmetric", symmetric},
                         {"type", type}});
}

/// One config group: the layers it `targets`, their weights' args and (null for weight-only
/// schemes) the input activations' args.
inline json ct_config_group(std::string_view format, json input_activations, json targets, json weights) {
    return json::object({{"format", format},
                         {"input_activations", std::move(input_activations)},
                         {"output_activations", nullptr},
                         {"targets", std::move(targets)},
                         {"weights", std::move(weights)}});
}

/// The whole `quantization_config`: the config groups ("group_0", ...), the checkpoint's
/// compression format, the unquantized linears (`ignore`) and the compressed-tensors version.
inline json ct_envelope(json config_groups, std::string_view format, json ignore, std::string_view version) {
    return json::object({{"config_groups", std::move(config_groups)},
                         {"format", format},
                         {"global_compression_ratio", nullptr},
                         {"ignore", std::move(ignore)},
                         {"kv_cache_scheme", nullptr},
                         {"quant_method", "compressed-tensors"},
                         {"quantization_status", "compressed"},
                         {"sparsity_config", json::object()},
                         {"transform_config", json::object()},
                         {"version", version}});
}

/// compressed-tensors keeps the checkpoint's dtype for scales (nothing is cast), which an F32
/// checkpoint cannot satisfy with 16-bit scales: F16 there.
inline dtype ct_scale_dtype(dtype checkpoint) noexcept {
    return checkpoint == dtype::BF16 || checkpoint == dtype::F16 ? checkpoint : dtype::F16;
}

/// The refusal of a scale dtype other than the checkpoint's (every compressed-tensors scheme).
inline std::optional<std::string> ct_scale_refusal(const layout_scheme& s, bool name_given) {
    if (s.scale_dtype == s.checkpoint) return std::nullopt;
    std::string why = std::string("compressed-tensors keeps scales in the checkpoint dtype (") +
                      std::string(dtype_name(s.checkpoint)) + ")";
    if (name_given) why += ", not " + std::string(dtype_name(*s.scale_dtype));
    return why;
}

}  // namespace qforge::detail
