// compressed-tensors `nvfp4-pack-quantized` (llm-compressor NVFP4A16 and NVFP4 schemes). Per
// linear:
//   <p>.weight_packed        U8      [N, K/2]   two E2M1 codes per byte, low nibble = even column
//   <p>.weight_scale         F8_E4M3 [N, K/16]  one per group of 16 columns
//   <p>.weight_global_scale  F32     [1]
//   <p>.input_global_scale   F32     [1]        NVFP4 (W4A4) only
// A loader decodes w = e2m1(code) * (e4m3(scale) / global_scale) (CTn `compressors/nvfp4/base.py
// NVFP4PackedCompressor.decompress` -> `lifecycle/forward.py _dequantize`: scale / global_scale,
// then times the code).
//
// The quantizer computes what compressed-tensors computes (field-2026.md 1.3):
//   global = 448 * 6 / max(amax, FLT_MIN) in float32 (CTn `quantization/utils/helpers.py
//            generate_gparam`: scale_data.max * quant_data.max / max_val_pos clamped to
//            finfo(float32).tiny, `.to(float32)`); amax is that of the whole FUSED GROUP the
//            caller passes (see below);
//   local  = amax(group of 16) / 6, rounded to the weight's dtype (calculate_qparams step 1:
//            max_val_pos / (bit_range / 2), bit_range = 6 - (-6), in the observed dtype);
//   scale  = e4m3(clamp(global * local, -448, 448)) (steps 2-3: global_scale * scales, then
//            round_to_quantized_type_dtype float8_e4m3fn), and a scale that rounds to 0 becomes
//            0.125 (step 5: `_get_dtype_eps` of FP8_E4M3 is 0.125);
//   code   = e2m1(clamp(x / (scale / global), -6, 6)) (forward.py `_quantize`: scale /
//            global_scale, x / scale in float32, `round_to_quantized_type_args` ->
//            cast_to_fp4; see detail::e2m1_code_of).
// One global scale per fused group: vLLM keeps ONE global scale for a fused layer — for
// q/k/v and gate/up linears `compressed_tensors_w4a16_nvfp4.py CompressedTensorsW4A16Fp4.
// process_weights_after_loading` (and `compressed_tensors_w4a4_nvfp4.py`) take
// `weight_global_scale.max()` over the shards, and for MoE `compressed_tensors_moe.py
// CompressedTensorsW4A4Nvfp4MoEMethod.process_weights_after_loading` keeps
// `w13_weight_global_scale[:, 0]` (w1's) and only warns "w1_weight_global_scale must match
// w3_weight_global_scale". A sibling quantized under another global would be decoded with
// the wrong one; so the caller passes the amax of the whole group (llm-compressor
// `entrypoints/model_free/process.py` does the same: torch.min of the members' global scales,
// which is 448*6 over the max of their amaxes). convert/fp4_global.hpp computes it.
// Shapes: K must be a multiple of 16 (and so even); refused naming the tensor.
#pragma once

#include <algorithm>
#include <array>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/minifloat.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/detail/ct_envelope.hpp"
#include "qforge/layout/detail/fp4_rows.hpp"
#include "qforge/layout/fp8.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/quant/snr.hpp"

namespace qforge {

inline constexpr std::int64_t nvfp4_group = 16;

struct nvfp4_options {
    bool w4a4 = false;                 ///< NVFP4 (input_global_scale + FP4 activations) vs NVFP4A16
    dtype values = dtype::BF16;        ///< the weight's dtype: amax / 6 is rounded to it
    float input_global_scale = 1.0f;   ///< W4A4 only: 448 * 6 / amax(activations), from calibration
};

/// compressed-tensors `generate_gparam`: 448 * 6 / amax, amax clamped to FLT_MIN.
inline float nvfp4_global_scale(float amax) noexcept {
    return (e4m3_max * e2m1_max) / std::max(amax, FLT_MIN);
}

/// The E4M3 code of one group's scale (see the file comment): `amax` is the group's, `global`
/// the tensor's (fused group's) global scale, `values` the weight's dtype.
inline std::uint8_t nvfp4_group_scale(float amax, float global, dtype values) noexcept;

namespace detail {

/// What nvfp4_group_scale rounds to E4M3: clamp(global * round_to(amax / 6, values), +-448).
inline float nvfp4_scale_value(float amax, float global, dtype values) noexcept {
    return std::clamp(global * round_to(amax / e2m1_max, values), -e4m3_max, e4m3_max);
}

/// A scale code that decodes to zero becomes 0.125's (`_get_dtype_eps`).
inline std::uint8_t nvfp4_nonzero_scale(std::uint8_t code) noexcept {
    return e4m3_to_float(code) == 0.0f ? float_to_e4m3(0.125f) : code;
}

}  // namespace detail

inline std::uint8_t nvfp4_group_scale(float amax, float global, dtype values) noexcept {
    return detail::nvfp4_nonzero_scale(float_to_e4m3(detail::nvfp4_scale_value(amax, global, values)));
}

class nvfp4_layout {
public:
    static constexpr std::string_view format_name = "nvfp4-pack-quantized";
    static constexpr int bits = 4;

    explicit nvfp4_layout(nvfp4_options o = {}) : opt_(o) {}
    const nvfp4_options& options() const noexcept { return opt_; }

    std::vector<tensor_spec> specs(std::int64_t n, std::int64_t k) const {
        std::vector<tensor_spec> s{{".weight_packed", dtype::U8, {n, k / 2}},
                                   {".weight_scale", dtype::F8_E4M3, {n, k / nvfp4_group}},
                                   {".weight_global_scale", dtype::F32, {1}}};
        if (opt_.w4a4) s.push_back({".input_global_scale", dtype::F32, {1}});
        return s;
    }

    /// Why this layout cannot hold a [n, k] weight, or empty.
    std::string refusal(std::int64_t k) const { return detail::fp4_shape_refusal(k, nvfp4_group, "NVFP4"); }

    /// amax |w| over the weight (what the global scale of a group of one is computed from).
    /// Rows are converted and reduced by the group and minifloat kernels; a row holding NaN
    /// or infinity is reduced element by element (NaN ignored, infinity kept).
    static float amax_of(const tensor_view& w) {
        detail::check_fp4_weight(w, nvfp4_group, "NVFP4");
        const std::int64_t n = w.shape[0], k = w.shape[1];
        const std::size_t es = dtype_size(w.type);
        const simd::minifloat_kernels& mf = simd::active_kernels<simd::minifloat_kernels>();
        float a = 0.0f;
        for (std::int64_t r = 0; r < n; ++r) {
            const std::size_t at = static_cast<std::size_t>(r * k);
            float row = 0.0f;  // one block of K: no float row stored
            if (mf.block_abs_max(w.bytes.data() + at * es, w.type, static_cast<std::size_t>(k), static_cast<std::size_t>(k), &row)) {
                for (std::size_t i = at; i < at + static_cast<std::size_t>(k); ++i) a = std::max(a, std::fabs(detail::element(w, i)));
                continue;
            }
            a = std::max(a, row);
        }
        return a;
    }

    /// The layer's tensors for the float weight `w` [N, K] under the global scale of amax
    /// `group_amax` (the fused group's; nullopt: w's own), with the SNR sums of what a loader
    /// decodes. NaN or infinity is refused naming the element. With `storage`, the tensors'
    /// bytes come from its recycled buffers.
    std::vector<owned_tensor> quantize(const tensor_view& w, std::string_view prefix, std::optional<float> group_amax = {},
                                       const executor& ex = {}, snr_sums* snr = nullptr, buffer_recycler* storage = nullptr) const {
        detail::check_fp4_weight(w, nvfp4_group, "NVFP4");
        const std::int64_t n = w.shape[0], k = w.shape[1], groups = k / nvfp4_group;
        const float global = nvfp4_global_scale(group_amax ? *group_amax : amax_of(w));
        const std::string p(prefix);
        std::vector<owned_tensor> out;
        for (const tensor_spec& t : specs(n, k)) out.push_back(detail::alloc_tensor(p + t.suffix, t.type, t.shape, storage));
        std::memcpy(out[2].bytes.data(), &global, 4);
        if (opt_.w4a4) std::memcpy(out[3].bytes.data(), &opt_.input_global_scale, 4);
        auto* packed = reinterpret_cast<std::uint8_t*>(out[0].bytes.data());
        auto* scales = reinterpret_cast<std::uint8_t*>(out[1].bytes.data());
        const simd::minifloat_kernels& mf = simd::active_kernels<simd::minifloat_kernels>();
        const dtype values = opt_.values;
        // Per group: its E4M3 scale and e4m3(scale) / global, the quotient's divisor and what a
        // loader multiplies by (nvfp4_group_scale's definition, in vectors of groups).
        detail::quantize_fp4_rows<nvfp4_group>(
            w, simd::e2m1_op::divide, packed, ex, snr, [&](std::size_t r, detail::fp4_row<nvfp4_group>& row) {
                mf.nvfp4_scales(row.amax.data(), row.amax.size(), global, values, scales + r * static_cast<std::size_t>(groups),
                                row.m.data());
                std::copy(row.m.begin(), row.m.end(), row.s.begin());
            });
        return out;
    }

    /// The float32 values [N * K] a loader decodes: e2m1 * (e4m3(scale) / global). Refuses a
    /// missing tensor, a wrong dtype or shape, a NaN scale and a global scale that is not a
    /// positive finite number, naming the tensor.
    std::vector<float> decode(std::span<const tensor_view> views, std::string_view prefix) const {
        const std::string p(prefix);
        const tensor_view& wp = detail::find_view(views, p + ".weight_packed");
        if (wp.type != dtype::U8 || wp.rank() != 2)
            fail<format_error>({}, wp.name, "expected a 2-D U8 weight_packed, got " + std::string(dtype_name(wp.type)));
        const std::int64_t n = wp.shape[0], k = wp.shape[1] * 2;
        if (k % nvfp4_group != 0) fail<shape_error>({}, wp.name, detail::fp4_shape_refusal(k, nvfp4_group, "NVFP4"));
        const tensor_view& sv = detail::find_view(views, p + ".weight_scale");
        detail::expect_view(sv, dtype::F8_E4M3, {n, k / nvfp4_group});
        const tensor_view& gv = detail::find_view(views, p + ".weight_global_scale");
        detail::expect_view(gv, dtype::F32, {1});
        float global;
        std::memcpy(&global, gv.bytes.data(), 4);
        if (!(global > 0.0f) || !std::isfinite(global))
            fail<format_error>({}, gv.name, "global scale " + std::to_string(global) + " is not a positive finite number");
        std::vector<float> out(static_cast<std::size_t>(n * k));
        const auto* codes = reinterpret_cast<const std::uint8_t*>(wp.bytes.data());
        const auto* sc = reinterpret_cast<const std::uint8_t*>(sv.bytes.data());
        for (std::int64_t r = 0; r < n; ++r)
            for (std::int64_t g = 0; g < k / nvfp4_group; ++g) {
                const std::uint8_t s = sc[r * (k / nvfp4_group) + g];
                if (e4m3_is_nan(s))
                    fail<format_error>({}, sv.name, "E4M3 NaN scale at row " + std::to_string(r) + ", group " + std::to_string(g));
                const float m = e4m3_to_float(s) / global;
                for (std::int64_t c = g * nvfp4_group; c < (g + 1) * nvfp4_group; ++c)
                    out[static_cast<std::size_t>(r * k + c)] = e2m1_to_float(detail::nibble_at(codes + r * (k / 2), c)) * m;
            }
        return out;
    }

    /// `quantization_config` (see nvfp4_config).
    json config(std::span<const linear_entry> linears) const;

private:
    nvfp4_options opt_;
};

/// The `quantization_config` of an NVFP4 checkpoint: one config group naming every quantized
/// layer, format `nvfp4-pack-quantized`, weights {float, 4 bits, tensor_group, group 16,
/// symmetric, static} as CTn `quantization/quant_scheme.py` NVFP4A16 sets them; NVFP4 adds
/// input_activations {float, 4, tensor_group, group 16, symmetric, dynamic "local"}. vLLM picks
/// CompressedTensorsW4A16Fp4 when `_is_fp4a16_nvfp4` (weights only, tensor_group, float, 4
/// bits, group 16, symmetric) and CompressedTensorsW4A4Fp4 when `_is_fp4a4_nvfp4` (both
/// tensor_group, group 16, float, 4 bits, symmetric) (`compressed_tensors.py`); the
/// activations' observer is `static_minmax`, as CTn `quant_scheme.py` NVFP4 names it. Every
/// unquantized linear goes to `ignore`; only keys compressed-tensors 0.12 accepts.
inline json nvfp4_config(std::span<const linear_entry> linears, const nvfp4_options& o) {
    json targets = detail::fp4_config_targets(linears, "nvfp4");
    auto args = [](json dynamic, std::string_view observer) {
        return detail::ct_quantization_args("float", 4, "tensor_group", true, std::move(dynamic), json(nvfp4_group),
                                            nullptr, json(observer));
    };
    json group = detail::ct_config_group("nvfp4-pack-quantized", o.w4a4 ? args(json("local"), "static_minmax") : json(),
                                         std::move(targets), args(json(false), "minmax"));
    return detail::ct_envelope(json::object({{"group_0", std::move(group)}}), "nvfp4-pack-quantized",
                               unquantized_names(linears), "0.12.2");
}

inline json nvfp4_layout::config(std::span<const linear_entry> linears) const { return nvfp4_config(linears, opt_); }

namespace detail {

/// The converter's view of NVFP4 (layout/layout_traits.hpp format_traits; convert/format.hpp
/// lists both): NVFP4A16 (`W4A4` false) and the W4A4 scheme NVFP4, whose input_global_scale
/// is 448 * 6 / amax of the layer's calibrated input activations (compressed-tensors computes
/// it with the same `generate_gparam` from the `static_minmax` observer's range), which only
/// calibration gives: the converter reads it from an activation amax file
/// (convert/activation_amax.hpp). `fused_global_scale`: siblings a loader fuses must share one
/// global scale, so the converter passes quantize() the amax of the whole fused group
/// (convert/fp4_global.hpp); vLLM `compressed_tensors_w4a4_nvfp4.py CompressedTensorsW4A4Fp4.
/// process_weights_after_loading` also keeps one input_global_scale per fused layer (the max
/// over its shards, with a warning when they differ), so the group's input amax is shared too.
template <bool W4A4>
struct nvfp4_traits {
    static constexpr std::string_view name = W4A4 ? "compressed-tensors-nvfp4-w4a4" : "compressed-tensors-nvfp4";
    static constexpr std::array<std::string_view, W4A4 ? 0 : 1> aliases = [] {
        if constexpr (W4A4) return std::array<std::string_view, 0>{};
        else return std::array<std::string_view, 1>{"nvfp4-pack-quantized"};
    }();
    static constexpr code_kind codes = code_kind::e2m1;
    static constexpr bool carries_g_idx = false;
    static constexpr bool one_scheme = false;
    static constexpr scale_policy asymmetric_minmax = scale_policy::minmax;
    static constexpr bool fused_global_scale = true;
    static constexpr bool calibrated_inputs = W4A4;  ///< needs each layer's input amax
    static constexpr std::int64_t group = nvfp4_group;
    static constexpr dtype scale_dtype = dtype::F8_E4M3;
    static constexpr std::string_view element = "NVFP4";

    static dtype default_scale_dtype(dtype) noexcept { return scale_dtype; }

    static std::vector<tensor_spec> specs(std::int64_t n, std::int64_t k) { return nvfp4_layout({W4A4}).specs(n, k); }

    /// Why this layout cannot hold a [n, k] weight (after the E2M1 rules convert/format.hpp
    /// checks: 4 bits, symmetric, minmax, group 16, E4M3 scales).
    static std::optional<std::string> refusal(std::int64_t /*n*/, std::int64_t k, const layout_scheme&) {
        if (std::string why = nvfp4_layout().refusal(k); !why.empty()) return why;
        return std::nullopt;
    }

    /// The tensors of `rows` (values in their own dtype) under the global scale of the group's
    /// weight amax (nullopt: the weight's own); W4A4 also under the group's input amax.
    static std::vector<owned_tensor> quantize(const tensor_view& rows, std::string_view module, const fp4_group& g,
                                              const executor& ex, snr_sums* snr, buffer_recycler* storage = nullptr) {
        nvfp4_options o{W4A4, rows.type};
        if constexpr (W4A4) {
            if (!g.input_amax)
                fail<unsupported_error>({}, std::string(module), "NVFP4 W4A4 needs the layer's input amax (input_global_scale = 448*6 / amax)");
            o.input_global_scale = nvfp4_global_scale(*g.input_amax);
        }
        return nvfp4_layout(o).quantize(rows, module, g.weight_amax, ex, snr, storage);
    }

    static json config(std::span<const linear_entry> linears, const layout_request& r) {
        return nvfp4_config(linears, nvfp4_options{W4A4, r.checkpoint});
    }

    static std::vector<side_file> side_files(std::span<const linear_entry>, const layout_request&) { return {}; }
};

}  // namespace detail

using nvfp4_format_traits = detail::nvfp4_traits<false>;       ///< NVFP4A16
using nvfp4_w4a4_format_traits = detail::nvfp4_traits<true>;   ///< NVFP4 (W4A4)

}  // namespace qforge
