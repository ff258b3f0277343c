// The output formats a converter writes, as the plan sees them: which tensors a quantized
// linear becomes (names, dtypes, shapes), which shapes a format's loaders cannot read, and
// which scale dtype a format uses when the user does not say.
//
// Facts from docs/formats.md: GPTQ 2.1-2.3 (AutoGPTQ qlinear_cuda.py, vLLM gptq_marlin.py),
// AWQ 3 (AutoAWQ gemm.py), compressed-tensors 4.1 (compressed_tensors pack_quantized.py,
// vLLM compressed_tensors_wNa16.py), FP8 field-2026.md 1.1-1.2 (layout/fp8.hpp). The packing
// itself is the layout layer's job.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/rule.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/ct_int8.hpp"
#include "qforge/layout/fp8.hpp"
#include "qforge/layout/gptq.hpp"

namespace qforge {

/// compressed_tensors_fp8 is compressed-tensors `float-quantized` (FP8_DYNAMIC with group -1,
/// FP8_BLOCK with group B = B x B tiles); fp8 is the native `quant_method: "fp8"` block layout
/// (layout/fp8.hpp). Both hold E4M3 codes, not integer codes: is_float_format().
/// compressed_tensors_w8a8 is compressed-tensors `int-quantized` (int8 weights unpacked, dynamic
/// per-token int8 activations: layout/ct_int8.hpp).
enum class output_format { gptq, gptq_v2, awq, compressed_tensors, compressed_tensors_fp8, fp8, compressed_tensors_w8a8 };

inline std::string_view format_name(output_format f) noexcept {
    switch (f) {
        case output_format::gptq: return "gptq";
        case output_format::gptq_v2: return "gptq-v2";
        case output_format::awq: return "awq";
        case output_format::compressed_tensors: return "compressed-tensors";
        case output_format::compressed_tensors_fp8: return "compressed-tensors-fp8";
        case output_format::fp8: return "fp8";
        case output_format::compressed_tensors_w8a8: return "compressed-tensors-w8a8";
    }
    return "?";
}

constexpr bool is_float_format(output_format f) noexcept {
    return f == output_format::compressed_tensors_fp8 || f == output_format::fp8;
}

inline std::optional<output_format> parse_format(std::string_view s) noexcept {
    for (auto f : {output_format::gptq, output_format::gptq_v2, output_format::awq,
                   output_format::compressed_tensors, output_format::compressed_tensors_fp8, output_format::fp8,
                   output_format::compressed_tensors_w8a8})
        if (format_name(f) == s) return f;
    if (s == "gptq_v2") return output_format::gptq_v2;
    if (s == "ct" || s == "compressed_tensors") return output_format::compressed_tensors;
    return std::nullopt;
}

/// One tensor a plan promises to write.
struct planned_tensor {
    std::string name;
    dtype type = dtype::F32;
    shape_t shape;

    std::uint64_t bytes() const {
        return static_cast<std::uint64_t>(checked_numel(shape, {}, name)) * dtype_size(type);
    }
};

/// The scale dtype a format uses when the scheme leaves it open: GPTQ and AWQ loaders expect
/// fp16 (AutoGPTQ/GPTQModel/AutoAWQ write .half()); compressed-tensors keeps the checkpoint's
/// dtype (nothing is cast), which an F32 checkpoint cannot satisfy with 16-bit scales.
/// compressed-tensors FP8 keeps the model dtype too (F32 included), the native FP8 layout F32
/// (DeepSeek's weight_scale_inv).
inline dtype default_scale_dtype(output_format f, dtype checkpoint) noexcept {
    if (f == output_format::compressed_tensors_fp8) return checkpoint;
    if (f == output_format::fp8) return dtype::F32;
    if ((f == output_format::compressed_tensors || f == output_format::compressed_tensors_w8a8) &&
        (checkpoint == dtype::BF16 || checkpoint == dtype::F16))
        return checkpoint;
    return dtype::F16;
}

/// The FP8 layout options of a float format for scheme `s` (scale dtype resolved); `values` is
/// the dtype of the weight's values, which the quotient x / scale is rounded to first.
inline fp8_options fp8_options_for(output_format f, const quant_spec& s, dtype values) noexcept {
    return {f == output_format::fp8 ? fp8_flavour::native : fp8_flavour::compressed_tensors, s.group_size,
            s.scale_dtype.value_or(dtype::F32), values};
}

/// Why `format` cannot hold a [rows x cols] weight quantized with `s` (s.scale_dtype
/// resolved), or nullopt when it can. `checkpoint` is the source weight's dtype.
inline std::optional<std::string> format_refusal(output_format f, std::int64_t rows, std::int64_t cols,
                                                 const quant_spec& s, dtype checkpoint) {
    const std::string K = std::to_string(cols), N = std::to_string(rows), b = std::to_string(s.bits);
    if (is_float_format(f)) {
        if (s.bits != 8) return "FP8 weights are 8 bits (E4M3), not " + b;
        if (!s.symmetric) return "FP8 weights are symmetric (no zero point)";
        if (s.scale != scale_method::minmax)
            return std::string("FP8 scales are amax / 448 (minmax), not ") + std::string(scale_method_name(s.scale));
        if (f == output_format::compressed_tensors_fp8 && s.scale_dtype != checkpoint)
            return std::string("compressed-tensors keeps scales in the checkpoint dtype (") +
                   std::string(dtype_name(checkpoint)) + ")";
        if (const std::string why = fp8_layout(fp8_options_for(f, s, checkpoint)).refusal(); !why.empty()) return why;
        return std::nullopt;
    }
    if (s.bits < 2 || s.bits > 8) return "bits must be 2..8, got " + b;
    if (s.group_size == 0 || s.group_size < -1 || (s.group_size > 0 && (s.group_size & (s.group_size - 1)) != 0))
        return "group size must be a power of two or -1 (per channel), not " + std::to_string(s.group_size);
    const std::int64_t g = s.group_for(cols);
    if (g > cols)
        return "group size " + std::to_string(g) + " is larger than the " + K + " input columns";
    if (!s.scale_dtype || (*s.scale_dtype != dtype::F16 && *s.scale_dtype != dtype::BF16))
        return "scale dtype must be F16 or BF16";
    switch (f) {
        case output_format::gptq:
        case output_format::gptq_v2:
            if (s.bits != 2 && s.bits != 3 && s.bits != 4 && s.bits != 8)
                return "GPTQ stores 2, 3, 4 or 8 bits, not " + b;
            if (cols % g != 0)
                return "GPTQ needs whole groups: K=" + K + " is not a multiple of group " + std::to_string(g);
            if ((cols * s.bits) % 32 != 0)
                return "GPTQ packs K along int32 words: K=" + K + " x " + b + " bits is not a multiple of 32";
            if ((rows * s.bits) % 32 != 0)
                return "GPTQ packs qzeros along N: N=" + N + " x " + b + " bits is not a multiple of 32";
            return std::nullopt;
        case output_format::awq:
            if (s.bits != 4) return "AWQ packs 4 bits only, not " + b;
            if (cols % g != 0)
                return "AWQ needs whole groups: K=" + K + " is not a multiple of group " + std::to_string(g);
            if (rows % 8 != 0) return "AWQ packs N in words of 8: N=" + N + " is not a multiple of 8";
            return std::nullopt;
        case output_format::compressed_tensors:
            if (*s.scale_dtype != checkpoint)
                return std::string("compressed-tensors keeps scales in the checkpoint dtype (") +
                       std::string(dtype_name(checkpoint)) + "), not " + std::string(dtype_name(*s.scale_dtype));
            if (cols % g != 0)
                return "vLLM's WNA16 kernels need whole groups: K=" + K + " is not a multiple of group " +
                       std::to_string(g) + " (use --group -1 for per-channel)";
            return std::nullopt;
        case output_format::compressed_tensors_w8a8:
            if (s.bits != 8 || !s.symmetric) return "W8A8 holds 8-bit symmetric weights, not " + b + "-bit " + (s.symmetric ? "sym" : "asym");
            if (*s.scale_dtype != checkpoint)
                return std::string("compressed-tensors keeps scales in the checkpoint dtype (") +
                       std::string(dtype_name(checkpoint)) + "), not " + std::string(dtype_name(*s.scale_dtype));
            if (cols % g != 0) return "W8A8 needs whole groups: K=" + K + " is not a multiple of group " + std::to_string(g);
            return std::nullopt;
        case output_format::compressed_tensors_fp8:
        case output_format::fp8:
            break;  // checked above
    }
    return "unknown format";
}

/// Runs `fn(layout)` with the layout object of `f` for `bits` (scales stored as `scale_dtype`,
/// compressed-tensors scales in the `checkpoint` dtype). The layouts live in qforge/layout/.
template <class F>
decltype(auto) with_layout(output_format f, int bits, dtype scale_dtype, dtype checkpoint, F&& fn) {
    switch (f) {
        case output_format::gptq:
        case output_format::gptq_v2:
            return with_gptq_layout(bits,
                                    gptq_options{f == output_format::gptq ? gptq_format::v1 : gptq_format::v2,
                                                 scale_dtype, false},
                                    std::forward<F>(fn));
        case output_format::awq:
            return with_awq_layout(bits, std::forward<F>(fn));
        case output_format::compressed_tensors_w8a8:
            if (bits != 8) fail<unsupported_error>({}, {}, "W8A8 holds 8 bits, got " + std::to_string(bits));
            return fn(ct_int8_layout(ct_options{ct_packing::padded_v0_12, checkpoint}));
        case output_format::compressed_tensors:
            break;
        case output_format::compressed_tensors_fp8:
        case output_format::fp8:  // float codes: layout/fp8.hpp, through fp8_options_for()
            fail<unsupported_error>({}, {}, std::string(format_name(f)) + " has no integer layout");
    }
    return with_ct_layout(bits, ct_options{ct_packing::padded_v0_12, checkpoint}, std::forward<F>(fn));
}

/// The tensors one quantized linear `<module>.weight` [rows x cols] becomes.
inline std::vector<planned_tensor> format_tensors(output_format f, std::string_view module, std::int64_t rows,
                                                  std::int64_t cols, const quant_spec& s, dtype checkpoint) {
    const dtype sd = s.scale_dtype.value_or(default_scale_dtype(f, checkpoint));
    quant_spec resolved = s;
    resolved.scale_dtype = sd;
    const auto specs = is_float_format(f) ? fp8_layout(fp8_options_for(f, resolved, checkpoint)).specs(rows, cols)
                                          : with_layout(f, s.bits, sd, checkpoint, [&](const auto& layout) {
                                                return layout.specs(rows, cols, s.group_size, s.symmetric);
                                            });
    std::vector<planned_tensor> out;
    for (const tensor_spec& t : specs) out.push_back({std::string(module) + t.suffix, t.type, t.shape});
    return out;
}

}  // namespace qforge
