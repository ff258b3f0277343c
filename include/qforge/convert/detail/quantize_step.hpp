// The converter's quantization step: one weight (a whole tensor or a row slice of a fused one)
// in, the format's packed tensors (or, under GPTQ, the quant layer's quantized_tensor) and the
// SNR of what a loader decodes out.
//
// The user-facing scale names map onto the quant layer's exact policies
// (quant/scale_policy.hpp):
//   minmax  sym: gptq_absmax (amax / ((2^b-1)/2), GPTQ and compressed-tensors)
//           asym: minmax (range forced to hold 0), or awq_minmax for the AWQ format (AutoAWQ)
//   absmax  sym: absmax (amax / (2^(b-1)-1), never clips)
//   search  sym: seed_search (the seed exporter's 8 candidate factors)
//   mse     either: mse (llm-compressor's shrink grid)
//   fixed   sym: seed_fixed (the seed exporter's --no-search factor 0.875)
//   lsq     either: custom = the least-squares fit (quant/least_squares.hpp)
// The SNR is measured by the quantizer while it encodes (quant/snr.hpp defines the order).
// quantize_rows_packed quantizes and packs band by band; quantize_rows_gptq runs the GPTQ solver (quant/gptq_solver.hpp) with the same policies.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/format.hpp"
#include "qforge/convert/rule.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/quantize_packed.hpp"
#include "qforge/quant/gptq_solver.hpp"
#include "qforge/quant/least_squares.hpp"
#include "qforge/quant/quantize.hpp"
#include "qforge/quant/quantized_tensor.hpp"
#include "qforge/quant/snr.hpp"

namespace qforge::detail {

inline quant_options options_for(const quant_spec& s, output_format f) {
    quant_options o;
    o.bits = s.bits;
    o.group_size = s.group_size > 0 ? static_cast<int>(s.group_size) : per_channel;
    o.symmetric = s.symmetric;
    o.policy = policy_for(s, f).value_or(scale_policy::minmax);
    o.scale_dtype = s.scale_dtype.value_or(dtype::F16);
    if (s.scale == scale_method::lsq) use_least_squares(o);
    return o;
}

struct quantize_result {
    quantized_tensor q;
    double snr_db = 0;
};

/// Rows [row_begin, row_end) of the rank-2 view `v`, as the weight `name`.
inline tensor_view row_slice(const tensor_view& v, std::int64_t row_begin, std::int64_t row_end, const std::string& name) {
    const std::int64_t cols = v.shape.at(1);
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * dtype_size(v.type);
    return {name, v.type, {row_end - row_begin, cols},
            v.bytes.subspan(static_cast<std::size_t>(row_begin) * row_bytes,
                            static_cast<std::size_t>(row_end - row_begin) * row_bytes)};
}

struct packed_result {
    std::vector<owned_tensor> tensors;  ///< the layout's tensors of `module`
    double snr_db = 0;
};

/// Quantizes rows [row_begin, row_end) of the rank-2 view `v` (the weight `name`) straight
/// into the format's tensors for `module`, scales in the plan's dtype (layout/quantize_packed.hpp):
/// bands of rows are quantized and packed on the executor while their codes are in cache,
/// with no whole-tensor code array and no serial pack. The bytes are those of
/// layout.pack(quantize(rows), module); the SNR is the one the quantizer measures while it
/// encodes (a second pass over the tensor cost more than the scale search itself).
/// `importance` (one weight per input column, or empty) weights the errors of the search
/// policies (search, mse, lsq). With `source`, band k's rows (counted from row_begin) are
/// read through it instead of from v. `group`: the amaxes of the weight's fused group, for a
/// format whose siblings share one global scale (NVFP4; convert/fp4_global.hpp) and whose
/// activations have a calibrated one (NVFP4 W4A4; convert/activation_amax.hpp). With
/// `workspace`, the output tensors' storage (and an integer layout's band buffers) come from it.
inline packed_result quantize_rows_packed(const tensor_view& v, std::int64_t row_begin, std::int64_t row_end,
                                          const quant_spec& scheme, output_format f, dtype checkpoint,
                                          const executor& run, const std::string& name, const std::string& module,
                                          std::span<const float> importance = {}, const band_source& source = {},
                                          const fp4_group& group = {}, packed_workspace* workspace = nullptr) {
    const tensor_view rows = row_slice(v, row_begin, row_end, name);
    snr_sums sums;
    packed_result r;
    visit_format(f, [&](auto t) {
        using T = decltype(t);
        if constexpr (T::codes == code_kind::e4m3) {  // no integer grid, its own quantizer (layout/fp8.hpp); reads v whole
            r.tensors = fp8_layout(T::options(scheme.group_size, scheme.scale_dtype, v.type))
                            .quantize(rows, module, run, &sums, workspace ? &workspace->outputs : nullptr);
        } else if constexpr (T::codes == code_kind::e2m1) {  // E2M1 (layout/nvfp4.hpp, mxfp4.hpp); reads v whole
            r.tensors = T::quantize(rows, module, group, run, &sums, workspace ? &workspace->outputs : nullptr);
        } else {
            quant_options o = options_for(scheme, f);
            o.importance = importance;
            r.tensors = T::with_layout(layout_request_for(scheme, checkpoint, v.type), [&](const auto& layout) {
                return quantize_packed(rows, o, layout, module, run, &sums, source, workspace);
            });
        }
    });
    r.snr_db = sums.db();
    return r;
}

/// The rows quantized by GPTQ under the layer's input Hessian `h` [K, K] (issue 9).
inline quantize_result quantize_rows_gptq(const tensor_view& v, std::int64_t row_begin, std::int64_t row_end,
                                          const quant_spec& scheme, output_format f, const executor& run,
                                          const std::string& name, const tensor_view& h, gptq_solver_options g,
                                          std::span<const float> importance = {}) {
    const tensor_view rows = row_slice(v, row_begin, row_end, name);
    g.quant = options_for(scheme, f);
    g.quant.importance = importance;
    quantize_result r{gptq_quantize(rows, h, g, run), 0};
    r.snr_db = snr_db(rows, r.q);
    return r;
}

}  // namespace qforge::detail
