// FP8 E4M3 weight layouts: compressed-tensors `float-quantized` (llm-compressor FP8_DYNAMIC:
// one scale per output row; FP8_BLOCK: one per 128 x 128 tile) and the native
// `quant_method: "fp8"` block layout that DeepSeek and Qwen ship. Per linear:
//   <p>.weight                          F8_E4M3 [N, K]
//   <p>.weight_scale (compressed-tensors) model dtype [N, 1] (channel) or [ceil(N/B), ceil(K/B)]
//   <p>.weight_scale_inv (native)        F32 (or BF16) [ceil(N/B), ceil(K/B)]
// both multipliers: w = e4m3(code) * scale (field-2026.md 1.1, 1.2).
//
// The quantizer computes what compressed-tensors computes (CTn
// `quantization/utils/helpers.py calculate_qparams`, `calculate_range`, `_get_dtype_eps`;
// `quantization/lifecycle/forward.py _process_quantization` / `_quantize`):
//   scale = amax(block or row) / 448 (= amax / ((448 - (-448)) / 2)), rounded to the scale
//           dtype; a zero scale becomes that dtype's epsilon (BF16 2^-7, F16 2^-10, F32 2^-23);
//   code  = e4m3(clamp(x / scale, -448, 448)), the quotient rounded first to the weight's
//           dtype (compressed-tensors divides bf16 by bf16), then to E4M3, nearest even.
// Ragged edges: the block grid is ceil-padded and the weight is not; compressed-tensors pads
// the weight with zeros (`maybe_pad_tensor_for_block_quant`), which leaves each edge block's
// amax unchanged, and truncates back. The native layout uses the same rules with F32 scales.
// Loaders: vLLM picks CompressedTensorsW8A8Fp8 for float weights + float input activations,
// symmetric static weights, strategy tensor / channel / block (`compressed_tensors.py
// _is_fp8_w8a8`), and Fp8LinearMethod for quant_method fp8 (`fp8.py`, weight_scale_inv when
// weight_block_size is set).
#pragma once

#include <algorithm>
#include <array>
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
#include "qforge/core/half.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/core/minifloat.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/detail/ct_envelope.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/quant/snr.hpp"
#include "qforge/simd/group_kernels.hpp"
#include "qforge/simd/minifloat_kernels.hpp"

namespace qforge {

enum class fp8_flavour {
    compressed_tensors,  ///< `float-quantized`, <p>.weight_scale
    native,              ///< `quant_method: "fp8"`, <p>.weight_scale_inv, block scales only
};

struct fp8_options {
    fp8_flavour flavour = fp8_flavour::compressed_tensors;
    std::int64_t block = -1;              ///< -1: one scale per output row; B: B x B tiles
    dtype scale_dtype = dtype::BF16;      ///< compressed-tensors: the model dtype; native: F32
    dtype quotient_dtype = dtype::F32;    ///< x / scale is rounded to this first (the weight's dtype)
};

namespace detail {

inline float round_to(float x, dtype t) noexcept {
    if (t == dtype::BF16) return bf16_to_float(float_to_bf16(x));
    if (t == dtype::F16) return fp16_to_float(float_to_fp16(x));
    return x;
}

/// compressed-tensors `_get_dtype_eps`: torch.finfo(dtype).eps.
inline float dtype_eps(dtype t) noexcept {
    if (t == dtype::BF16) return 0x1p-7f;
    if (t == dtype::F16) return 0x1p-10f;
    return 0x1p-23f;
}

inline float element(const tensor_view& w, std::size_t i) noexcept {
    std::uint16_t h;
    float f;
    switch (w.type) {
        case dtype::BF16: std::memcpy(&h, w.bytes.data() + 2 * i, 2); return bf16_to_float(h);
        case dtype::F16: std::memcpy(&h, w.bytes.data() + 2 * i, 2); return fp16_to_float(h);
        default: std::memcpy(&f, w.bytes.data() + 4 * i, 4); return f;
    }
}

inline void store_scale(std::byte* at, float s, dtype t) noexcept {
    if (t == dtype::F32) {
        std::memcpy(at, &s, 4);
        return;
    }
    const std::uint16_t h = t == dtype::BF16 ? float_to_bf16(s) : float_to_fp16(s);
    std::memcpy(at, &h, 2);
}

}  // namespace detail

class fp8_layout {
public:
    static constexpr std::string_view format_name = "fp8";
    static constexpr int bits = 8;

    explicit fp8_layout(fp8_options o = {}) : opt_(o) {}
    const fp8_options& options() const noexcept { return opt_; }

    std::string_view scale_suffix() const noexcept {
        return opt_.flavour == fp8_flavour::native ? ".weight_scale_inv" : ".weight_scale";
    }
    std::int64_t block_rows() const noexcept { return opt_.block > 0 ? opt_.block : 1; }
    std::int64_t block_cols(std::int64_t k) const noexcept { return opt_.block > 0 ? opt_.block : k; }
    shape_t scale_shape(std::int64_t n, std::int64_t k) const {
        return {detail::ceil_div(n, block_rows()), detail::ceil_div(k, block_cols(k))};
    }

    std::vector<tensor_spec> specs(std::int64_t n, std::int64_t k) const {
        return {{".weight", dtype::F8_E4M3, {n, k}}, {std::string(scale_suffix()), opt_.scale_dtype, scale_shape(n, k)}};
    }

    /// Why this layout cannot hold a [n, k] weight, or empty.
    std::string refusal() const {
        if (opt_.block == 0 || opt_.block < -1 || opt_.block > (1 << 16))
            return "FP8 scales are per row (-1) or per B x B block, not " + std::to_string(opt_.block);
        if (opt_.flavour == fp8_flavour::native && opt_.block < 0)
            return "the native quant_method fp8 layout has block scales only (weight_block_size); use compressed-tensors for per-channel";
        if (opt_.scale_dtype != dtype::F32 && opt_.scale_dtype != dtype::BF16 && opt_.scale_dtype != dtype::F16)
            return "FP8 scales are F32, BF16 or F16, not " + std::string(dtype_name(opt_.scale_dtype));
        return {};
    }

    /// The layer's tensors for the float weight `w` [N, K] (F32, BF16 or F16), with the SNR
    /// sums of what a loader decodes (code * scale) against `w`, added in the partial order of
    /// simd::minifloat_kernels::e4m3_row (the same on every ISA). NaN or infinity is refused
    /// naming the element. The minifloat kernels read the weight's bytes twice (block amax,
    /// then quotient and E4M3 code); the group kernels' to_f32 only converts a row holding NaN
    /// or infinity, to name the element. Each table is looked up once per tensor. With
    /// `storage`, the tensors' bytes come from its recycled buffers.
    std::vector<owned_tensor> quantize(const tensor_view& w, std::string_view prefix, const executor& ex = {},
                                       snr_sums* snr = nullptr, buffer_recycler* storage = nullptr) const {
        if (const std::string why = refusal(); !why.empty()) fail<unsupported_error>({}, w.name, why);
        if ((w.type != dtype::F32 && w.type != dtype::BF16 && w.type != dtype::F16) || w.rank() != 2)
            fail<unsupported_error>({}, w.name, "FP8 quantization takes a 2-D F32, BF16 or F16 weight");
        const std::int64_t n = w.shape[0], k = w.shape[1];
        if (n <= 0 || k <= 0 || w.bytes.size() != static_cast<std::size_t>(n * k) * dtype_size(w.type))
            fail<shape_error>({}, w.name, "weight bytes do not match shape " + shape_to_string(w.shape));
        const std::string p(prefix);
        std::vector<owned_tensor> out;
        for (const tensor_spec& t : specs(n, k)) out.push_back(detail::alloc_tensor(p + t.suffix, t.type, t.shape, storage));
        const std::int64_t br = block_rows(), bc = block_cols(k), scols = detail::ceil_div(k, bc);
        const std::int64_t bands = detail::ceil_div(n, br);
        std::vector<snr_sums> band_snr(static_cast<std::size_t>(bands));
        std::vector<std::int64_t> bad(static_cast<std::size_t>(bands), -1);
        auto* codes = reinterpret_cast<std::uint8_t*>(out[0].bytes.data());
        std::byte* scales = out[1].bytes.data();
        const std::size_t ss = dtype_size(opt_.scale_dtype);
        const simd::group_kernels& conv = simd::active_kernels<simd::group_kernels>();
        const simd::minifloat_kernels& mf = simd::active_kernels<simd::minifloat_kernels>();
        const std::size_t es = dtype_size(w.type);
        parallel_for(ex, 0, static_cast<std::size_t>(bands), 1, [&](std::size_t lo, std::size_t hi) {
            std::vector<float> amax(static_cast<std::size_t>(scols)), s(static_cast<std::size_t>(scols));
            std::vector<float> x(static_cast<std::size_t>(k));
            auto load = [&](std::int64_t r) {
                return conv.to_f32(w.bytes.data() + static_cast<std::size_t>(r * k) * es, w.type, static_cast<std::size_t>(k),
                                   x.data());
            };
            for (std::size_t b = lo; b < hi; ++b) {
                const std::int64_t r0 = static_cast<std::int64_t>(b) * br, r1 = std::min(n, r0 + br);
                std::fill(amax.begin(), amax.end(), 0.0f);
                // The amax pass reads the bytes directly (no float row); only a row holding NaN
                // or infinity is converted, to name the element.
                for (std::int64_t r = r0; r < r1; ++r)
                    if (mf.block_abs_max(w.bytes.data() + static_cast<std::size_t>(r * k) * es, w.type,
                                         static_cast<std::size_t>(k), static_cast<std::size_t>(bc), amax.data())) {
                        bad[b] = r * k + load(r);
                        break;
                    }
                if (bad[b] >= 0) continue;
                for (std::int64_t j = 0; j < scols; ++j) {
                    float v = detail::round_to(amax[static_cast<std::size_t>(j)] / e4m3_max, opt_.scale_dtype);
                    if (v == 0.0f) v = detail::dtype_eps(opt_.scale_dtype);
                    s[static_cast<std::size_t>(j)] = v;
                    detail::store_scale(scales + static_cast<std::size_t>(static_cast<std::int64_t>(b) * scols + j) * ss, v,
                                        opt_.scale_dtype);
                }
                double partial[8] = {};  // SNR partials (minifloat_kernels::e4m3_row's order), the band's rows in order
                for (std::int64_t r = r0; r < r1; ++r)
                    mf.e4m3_row(w.bytes.data() + static_cast<std::size_t>(r * k) * es, w.type, static_cast<std::size_t>(k),
                                static_cast<std::size_t>(bc), s.data(), opt_.quotient_dtype,
                                codes + static_cast<std::size_t>(r * k), snr ? partial : nullptr);
                band_snr[b].signal = (partial[0] + partial[1]) + (partial[2] + partial[3]);
                band_snr[b].error = (partial[4] + partial[5]) + (partial[6] + partial[7]);
            }
        });
        for (std::size_t b = 0; b < bad.size(); ++b)
            if (bad[b] >= 0)
                fail<unsupported_error>({}, w.name, "weight holds NaN or infinity at row " + std::to_string(bad[b] / k) +
                                                        ", column " + std::to_string(bad[b] % k));
        if (snr) {
            *snr = {};
            for (const snr_sums& r : band_snr) snr->add_row(r);
        }
        return out;
    }

    /// The float32 values [N * K] a loader decodes from the layer's tensors: code * scale.
    /// Refuses a missing tensor, a wrong dtype or shape and a NaN code, naming the tensor.
    std::vector<float> decode(std::span<const tensor_view> views, std::string_view prefix) const {
        const std::string p(prefix);
        const tensor_view& w = detail::find_view(views, p + ".weight");
        if (w.type != dtype::F8_E4M3 || w.rank() != 2)
            fail<format_error>({}, w.name, "expected a 2-D F8_E4M3 weight, got " + std::string(dtype_name(w.type)));
        const std::int64_t n = w.shape[0], k = w.shape[1];
        detail::expect_view(w, dtype::F8_E4M3, {n, k});
        const tensor_view& sv = detail::find_view(views, p + std::string(scale_suffix()));
        detail::expect_view(sv, opt_.scale_dtype, scale_shape(n, k));
        const std::int64_t br = block_rows(), bc = block_cols(k), scols = detail::ceil_div(k, bc);
        std::vector<float> out(static_cast<std::size_t>(n * k));
        const auto* codes = reinterpret_cast<const std::uint8_t*>(w.bytes.data());
        for (std::int64_t r = 0; r < n; ++r)
            for (std::int64_t c = 0; c < k; ++c) {
                const auto i = static_cast<std::size_t>(r * k + c);
                if (e4m3_is_nan(codes[i]))
                    fail<format_error>({}, w.name, "E4M3 NaN code at row " + std::to_string(r) + ", column " + std::to_string(c));
                const tensor_view one{sv.name, sv.type, {1}, sv.bytes.subspan(static_cast<std::size_t>((r / br) * scols + c / bc) * dtype_size(sv.type), dtype_size(sv.type))};
                out[i] = e4m3_to_float(codes[i]) * detail::element(one, 0);
            }
        return out;
    }

    /// `quantization_config` (see fp8_config).
    json config(std::span<const linear_entry> linears) const;

private:
    fp8_options opt_;
};

/// The `quantization_config` of an FP8 checkpoint. compressed-tensors: one config group
/// naming every quantized layer, weights {type float, 8 bits, symmetric, static, strategy
/// channel or block [B, B]} and dynamic activations as FP8_DYNAMIC (per token) / FP8_BLOCK
/// (groups of B) set them (CTn `quantization/quant_scheme.py`), every unquantized linear in
/// `ignore`, only keys compressed-tensors 0.12 accepts. Native: `{"quant_method": "fp8",
/// "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [B, B],
/// "modules_to_not_convert": [...]}` (field-2026.md 1.1).
inline json fp8_config(std::span<const linear_entry> linears, const fp8_options& o) {
    check_untied(linears, "fp8");
    check_fused_share_scheme(linears, "fp8");
    json targets = json::array();
    for (const linear_entry& e : linears)
        if (e.quantized) targets.push_back(e.name);
    if (targets.size() == 0) fail<unsupported_error>({}, {}, "fp8: no quantized layer to export");
    if (o.flavour == fp8_flavour::native)
        return json::object({{"activation_scheme", "dynamic"},
                             {"fmt", "e4m3"},
                             {"modules_to_not_convert", unquantized_names(linears)},
                             {"quant_method", "fp8"},
                             {"weight_block_size", json::array({o.block, o.block})}});
    const bool block = o.block > 0;
    json weights = detail::ct_quantization_args("float", 8, block ? "block" : "channel", true, false, json(),
                                                block ? json::array({o.block, o.block}) : json(), "minmax");
    json inputs = block ? detail::ct_quantization_args("float", 8, "group", true, true, json(o.block), json(), json())
                        : detail::ct_quantization_args("float", 8, "token", true, true, json(), json(), json());
    json group = detail::ct_config_group("float-quantized", std::move(inputs), std::move(targets), std::move(weights));
    return detail::ct_envelope(json::object({{"group_0", std::move(group)}}), "float-quantized", unquantized_names(linears),
                               "0.12.2");
}

inline json fp8_layout::config(std::span<const linear_entry> linears) const { return fp8_config(linears, opt_); }

/// The FP8 formats as the converter's format table sees them (convert/format.hpp):
/// compressed-tensors `float-quantized` (scales in the model dtype, F32 included) and the
/// native `quant_method: "fp8"` (F32 scales, DeepSeek's weight_scale_inv). E4M3 codes: no
/// integer grid, so no layout_policy: fp8_layout(options(...)) quantizes and packs in one.
template <fp8_flavour Flavour>
struct fp8_format_traits {
    static constexpr std::string_view name = Flavour == fp8_flavour::native ? "fp8" : "compressed-tensors-fp8";
    static constexpr std::array<std::string_view, 0> aliases{};
    static constexpr code_kind codes = code_kind::e4m3;
    static constexpr bool carries_g_idx = false;
    static constexpr bool one_scheme = false;
    static constexpr scale_policy asymmetric_minmax = scale_policy::minmax;

    static dtype default_scale_dtype(dtype checkpoint) noexcept {
        return Flavour == fp8_flavour::native ? dtype::F32 : checkpoint;
    }

    /// The layout for a scheme of group (block) `group_size`, scales `scale_dtype` (F32 when
    /// unset), the quotient x / scale rounded to `values` first.
    static fp8_options options(std::int64_t group_size, std::optional<dtype> scale_dtype, dtype values) noexcept {
        return {Flavour, group_size, scale_dtype.value_or(dtype::F32), values};
    }

    /// Why this layout cannot hold the weight (after the E4M3 rules every float format shares).
    static std::optional<std::string> refusal(std::int64_t /*n*/, std::int64_t /*k*/, const layout_scheme& s) {
        if constexpr (Flavour == fp8_flavour::compressed_tensors)
            if (auto why = detail::ct_scale_refusal(s, false)) return why;
        if (std::string why = fp8_layout(options(s.group_size, s.scale_dtype, s.checkpoint)).refusal(); !why.empty())
            return why;
        return std::nullopt;
    }

    static json config(std::span<const linear_entry> linears, const layout_request& r) {
        return fp8_config(linears, options(r.group_size, r.scale_dtype, r.values));
    }

    static std::vector<side_file> side_files(std::span<const linear_entry>, const layout_request&) { return {}; }
};

}  // namespace qforge
