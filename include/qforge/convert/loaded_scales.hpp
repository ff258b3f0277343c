// What vLLM decodes when a weight-only int checkpoint's scales are not in the dtype vLLM runs
// the model in (issue 15 item 9). quantization_report.json's snr_db measures the stored
// scales; vLLM does not keep them when their dtype differs from its params_dtype:
//
//  - params_dtype is ModelConfig.dtype: with `--dtype auto`, config.json's torch_dtype (or
//    `dtype`), a float32 model downcast to the platform's first supported dtype, which is
//    bfloat16 on CUDA sm80+ and on x86/aarch64 CPUs (vllm/config/model.py _resolve_auto_dtype:
//    "Downcast for float32 models"; platforms/cuda.py CudaPlatformBase.supported_dtypes,
//    platforms/cpu.py CpuPlatform.supported_dtypes).
//  - the scales parameter is allocated in params_dtype: auto_gptq.py
//    AutoGPTQLinearMethod.create_weights (weight_scale_args data dtype=params_dtype, @055e47c2),
//    auto_awq.py AutoAWQMarlinLinearMethod.create_weights (GroupQuantScaleParameter
//    dtype=params_dtype, @0043d6b5), schemes/compressed_tensors_wNa16.py
//    CompressedTensorsWNA16.create_weights (weight_scale_args dtype=params_dtype).
//  - the stored tensor is copied in: parameter.py BasevLLMParameter._assert_and_load,
//    _ColumnvLLMParameter.load_column_parallel_weight / load_merged_column_weight /
//    load_qkv_weight and RowvLLMParameter.load_row_parallel_weight all end in
//    `param.data.copy_(loaded_weight)`, a dtype-converting copy: f16/bf16 widened to float
//    (exact), then rounded to nearest even in params_dtype.
//
// So the figure a vLLM user gets is the SNR with each scale re-rounded that way; it is
// computed here from the tensors as written (read back with the formats' own readers) and
// reported as snr_db_as_loaded. It depends on the declared model dtype, not on the dtype the
// source weights happen to be stored in: an FP8 source and its dequantized F32 twin that both
// declare bfloat16 are served (and reported) alike.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qforge/convert/format.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/convert/repack_packed.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/tensor_source.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/json.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/quant/quantized_tensor.hpp"
#include "qforge/quant/snr.hpp"

namespace qforge {

/// The dtype vLLM (`--dtype auto`) allocates parameters in for a model that declares
/// `declared` (else whose weights are `weights`): float32 is downcast to bfloat16 (see the file
/// comment), bf16 and fp16 are kept.
constexpr dtype vllm_params_dtype(std::optional<dtype> declared, dtype weights) noexcept {
    const dtype d = declared.value_or(weights);
    return d == dtype::F16 ? dtype::F16 : dtype::BF16;
}

/// The same for a plan: its declared dtype (plan_conversion reads config.json), else the model
/// dtype of its first quantized weight.
QFORGE_DECL dtype vllm_params_dtype(const plan& p) noexcept;

/// The dtype vLLM holds `format`'s scales in when they are stored as `stored` and vLLM runs
/// in `params`; nullopt when it keeps them bit for bit. Weight-only int formats only (GPTQ
/// v1/v2, AWQ, compressed-tensors pack-quantized): the float formats carry their own scale
/// rules.
constexpr std::optional<dtype> vllm_rounds_scales_to(output_format format, dtype params, dtype stored) noexcept {
    const bool params_dtype_scales = format == output_format::gptq || format == output_format::gptq_v2 ||
                                     format == output_format::awq || format == output_format::compressed_tensors;
    if (!params_dtype_scales || stored == params) return std::nullopt;
    if ((stored != dtype::F16 && stored != dtype::BF16) || (params != dtype::F16 && params != dtype::BF16)) return std::nullopt;
    return params;
}

/// `q` with every scale converted to `kept` as torch's copy_ converts it: the stored value
/// widened to float (exact), then rounded to nearest even (float_to_bf16 / float_to_fp16).
QFORGE_DECL quantized_tensor with_scales_as(quantized_tensor q, dtype kept);

/// The SNR of `q` against `original` once its scales are held as `kept` (q by value: a layer
/// read back only for this is moved, not copied), rows in parallel on `ex`.
QFORGE_DECL double snr_db_as_loaded(const tensor_view& original, quantized_tensor q, dtype kept, const executor& ex = {});

/// The same for a layer as written in `format` (`packed`: the tensors of `module`), read back
/// with the format's reader, which takes codes, zeros and scales as they are.
QFORGE_DECL double snr_db_as_loaded(const tensor_view& original, const std::vector<owned_tensor>& packed, const std::string& module,
                                    output_format format, const quant_spec& s, dtype kept, const executor& ex = {});

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL dtype vllm_params_dtype(const plan& p) noexcept {
    dtype weights = dtype::BF16;
    for (const auto& it : p.items)
        if (it.action == plan_action::quantize) {
            weights = it.model_type();
            break;
        }
    return vllm_params_dtype(p.declared_dtype, weights);
}

QFORGE_DECL quantized_tensor with_scales_as(quantized_tensor q, dtype kept) {
    if (q.scale_dtype == kept) return q;
    for (auto& s : q.scales) {
        const float f = q.scale_dtype == dtype::BF16 ? bf16_to_float(s) : fp16_to_float(s);
        s = kept == dtype::BF16 ? float_to_bf16(f) : float_to_fp16(f);
    }
    q.scale_dtype = kept;
    return q;
}

QFORGE_DECL double snr_db_as_loaded(const tensor_view& original, quantized_tensor q, dtype kept, const executor& ex) {
    return snr_db(original, with_scales_as(std::move(q), kept), ex);
}

QFORGE_DECL double snr_db_as_loaded(const tensor_view& original, const std::vector<owned_tensor>& packed, const std::string& module,
                                    output_format format, const quant_spec& s, dtype kept, const executor& ex) {
    std::map<std::string, tensor_view> views;
    for (const auto& t : packed) views.emplace(t.name, t.view());
    const tensor_source src = make_tensor_source(views, module);
    const std::int64_t group = s.group_size;
    switch (format) {
        case output_format::awq: return snr_db_as_loaded(original, read_awq(src, module, awq_args{s.bits, group}), kept, ex);
        case output_format::compressed_tensors:
            return snr_db_as_loaded(original, read_ct_packed(src, module, ct_weight_args{s.bits, s.symmetric, group}, ct_packing::padded_v0_12),
                                    kept, ex);
        default:
            return snr_db_as_loaded(original,
                                    read_gptq(src, module, gptq_args{s.bits, group, s.symmetric, format == output_format::gptq_v2}), kept, ex);
    }
}

}  // namespace qforge
#endif
