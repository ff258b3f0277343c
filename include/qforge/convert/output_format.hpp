// The output formats' names and what a plan promises to write, without the formats' layouts:
// the light part of convert/format.hpp, so that the converter's and the plan's declarations
// (convert/converter.hpp, convert/plan.hpp) can be read in a translation unit that does not
// compile the layouts' packers (QFORGE_SEPARATE_COMPILATION; core/config.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/tensor_view.hpp"

namespace qforge {

/// compressed_tensors_fp8 is compressed-tensors `float-quantized` (FP8_DYNAMIC with group -1,
/// FP8_BLOCK with group B = B x B tiles); fp8 is the native `quant_method: "fp8"` block layout
/// (layout/fp8.hpp). Both hold E4M3 codes, not integer codes: is_float_format().
/// compressed_tensors_w8a8 is compressed-tensors `int-quantized` (int8 weights unpacked, dynamic
/// per-token int8 activations: layout/ct_int8.hpp).
/// compressed_tensors_nvfp4 / _mxfp4 are `nvfp4-pack-quantized` (NVFP4A16) and
/// `mxfp4-pack-quantized` (MXFP4A16): E2M1 codes (layout/nvfp4.hpp, layout/mxfp4.hpp);
/// compressed_tensors_nvfp4_w4a4 is NVFP4 with FP4 activations (input_global_scale from
/// calibrated activation amaxes: convert_options::activation_amax).
enum class output_format {
    gptq, gptq_v2, awq, compressed_tensors, compressed_tensors_fp8, fp8, compressed_tensors_w8a8,
    compressed_tensors_nvfp4, compressed_tensors_mxfp4, compressed_tensors_nvfp4_w4a4
};

/// The format's name ("gptq", "compressed-tensors"...), "?" for a value outside the table
/// (defined in convert/format.hpp, from each layout's traits).
QFORGE_DECL std::string_view format_name(output_format f) noexcept;

/// One tensor a plan promises to write.
struct planned_tensor {
    std::string name;
    dtype type = dtype::F32;
    shape_t shape;

    std::uint64_t bytes() const;
};

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL std::uint64_t planned_tensor::bytes() const {
    return static_cast<std::uint64_t>(checked_numel(shape, {}, name)) * dtype_size(type);
}

}  // namespace qforge
#endif
