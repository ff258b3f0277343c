// compressed-tensors `mxfp4-pack-quantized` (llm-compressor MXFP4A16 scheme). Per linear:
//   <p>.weight_packed  U8 [N, K/2]   two E2M1 codes per byte, low nibble = even column (as NVFP4)
//   <p>.weight_scale   U8 [N, K/32]  E8M0: the biased exponent e, scale 2^(e - 127)
// No global scale. A loader decodes w = e2m1(code) * 2^(e - 127) (CTn `compressors/mxfp4/base.py
// MXFP4PackedCompressor`, which reuses the NVFP4 packer and stores the scale as its exponent).
//
// The scale, as compressed-tensors computes it (CTn `quantization/utils/mxfp4_utils.py`,
// field-2026.md 1.4 (b)):
//   p2 = round_to_power_2(amax(group of 32)): the bfloat16 bits of amax plus 1 << 5, masked to
//        sign and exponent (so amax >= 1.75 * 2^k rounds up to 2^(k+1), below stays 2^k);
//   e  = 127 + floor(log2(p2)) - 2 (`generate_mxfp4_scales`; 2 = E2M1's largest exponent),
//        stored as a uint8 (clamped to 0..254 here: a group of zeros, or of values below
//        2^-125, gets e = 0; CT's own result for those is -inf cast to an integer);
//   code = e2m1(clamp(x / 2^(e - 127), -6, 6)) (forward.py `_quantize`, cast_to_fp4; the
//        division by a power of two is exact).
// round_to_power_2 asserts a bfloat16 amax; an F16 or F32 weight's amax is rounded to bfloat16
// first (qforge's decision, the nearest even, so that BF16 weights give exactly CT's bytes).
// vLLM takes it through CompressedTensorsW4A16Mxfp4 when `_is_mxfp4`: strategy group, group
// 32, float, 4 bits, symmetric (`compressed_tensors.py`).
#pragma once

#include <algorithm>
#include <array>
#include <optional>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/minifloat.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/detail/ct_envelope.hpp"
#include "qforge/layout/detail/fp4_rows.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/quant/snr.hpp"

namespace qforge {

inline constexpr std::int64_t mxfp4_group = 32;

/// The E8M0 code compressed-tensors gives a group whose amax is `amax` (see the file comment).
inline std::uint8_t mxfp4_scale_code(float amax) noexcept {
    const std::uint32_t bits = float_to_bf16(amax);
    const std::uint32_t p2 = (bits + (1u << 5)) & 0xFF80u;  // sign and exponent of bf16
    const int biased = static_cast<int>((p2 >> 7) & 0xFFu);  // bf16 exponent field of the power of two
    if (biased == 0) return 0;                                // zero (or a bf16 subnormal that stayed one)
    const int e = 127 + (biased - 127) - 2;
    return static_cast<std::uint8_t>(std::clamp(e, 0, 254));
}

class mxfp4_layout {
public:
    static constexpr std::string_view format_name = "mxfp4-pack-quantized";
    static constexpr int bits = 4;

    std::vector<tensor_spec> specs(std::int64_t n, std::int64_t k) const {
        return {{".weight_packed", dtype::U8, {n, k / 2}}, {".weight_scale", dtype::U8, {n, k / mxfp4_group}}};
    }

    std::string refusal(std::int64_t k) const { return detail::fp4_shape_refusal(k, mxfp4_group, "MXFP4"); }

    /// The layer's tensors for the float weight `w` [N, K], with the SNR sums of what a loader
    /// decodes. NaN or infinity is refused naming the element. With `storage`, the tensors'
    /// bytes come from its recycled buffers.
    std::vector<owned_tensor> quantize(const tensor_view& w, std::string_view prefix, const executor& ex = {},
                                       snr_sums* snr = nullptr, buffer_recycler* storage = nullptr) const {
        detail::check_fp4_weight(w, mxfp4_group, "MXFP4");
        const std::int64_t n = w.shape[0], k = w.shape[1], groups = k / mxfp4_group;
        const std::string p(prefix);
        std::vector<owned_tensor> out;
        for (const tensor_spec& t : specs(n, k)) out.push_back(detail::alloc_tensor(p + t.suffix, t.type, t.shape, storage));
        auto* packed = reinterpret_cast<std::uint8_t*>(out[0].bytes.data());
        auto* scales = reinterpret_cast<std::uint8_t*>(out[1].bytes.data());
        // x / 2^(e-127) == x * 2^(127-e) exactly: both are the exact product rounded once.
        detail::quantize_fp4_rows<mxfp4_group>(
            w, simd::e2m1_op::multiply, packed, ex, snr, [&](std::size_t r, detail::fp4_row<mxfp4_group>& row) {
                std::uint8_t* sc = scales + r * static_cast<std::size_t>(groups);
                for (std::size_t g = 0; g < row.amax.size(); ++g) {
                    const std::uint8_t e = sc[g] = mxfp4_scale_code(row.amax[g]);
                    row.s[g] = e8m0_to_float(static_cast<std::uint8_t>(254 - e));
                    row.m[g] = e8m0_to_float(e);
                }
            });
        return out;
    }

    /// The float32 values [N * K] a loader decodes: e2m1 * 2^(e - 127). Refuses a missing
    /// tensor, a wrong dtype or shape and the E8M0 NaN code 0xFF, naming the tensor.
    std::vector<float> decode(std::span<const tensor_view> views, std::string_view prefix) const {
        const std::string p(prefix);
        const tensor_view& wp = detail::find_view(views, p + ".weight_packed");
        if (wp.type != dtype::U8 || wp.rank() != 2)
            fail<format_error>({}, wp.name, "expected a 2-D U8 weight_packed, got " + std::string(dtype_name(wp.type)));
        const std::int64_t n = wp.shape[0], k = wp.shape[1] * 2;
        if (k % mxfp4_group != 0) fail<shape_error>({}, wp.name, detail::fp4_shape_refusal(k, mxfp4_group, "MXFP4"));
        const tensor_view& sv = detail::find_view(views, p + ".weight_scale");
        detail::expect_view(sv, dtype::U8, {n, k / mxfp4_group});
        std::vector<float> out(static_cast<std::size_t>(n * k));
        const auto* codes = reinterpret_cast<const std::uint8_t*>(wp.bytes.data());
        const auto* sc = reinterpret_cast<const std::uint8_t*>(sv.bytes.data());
        for (std::int64_t r = 0; r < n; ++r)
            for (std::int64_t g = 0; g < k / mxfp4_group; ++g) {
                const std::uint8_t e = sc[r * (k / mxfp4_group) + g];
                if (e == 0xFFu)
                    fail<format_error>({}, sv.name, "E8M0 NaN scale at row " + std::to_string(r) + ", group " + std::to_string(g));
                const float s = e8m0_to_float(e);
                for (std::int64_t c = g * mxfp4_group; c < (g + 1) * mxfp4_group; ++c)
                    out[static_cast<std::size_t>(r * k + c)] = e2m1_to_float(detail::nibble_at(codes + r * (k / 2), c)) * s;
            }
        return out;
    }

    json config(std::span<const linear_entry> linears) const;
};

/// The `quantization_config` of an MXFP4A16 checkpoint: one config group, format
/// `mxfp4-pack-quantized`, weights {float, 4 bits, group, group 32, symmetric, static} (CTn
/// `quantization/quant_scheme.py` MXFP4A16; what vLLM `_is_mxfp4` accepts), unquantized
/// linears in `ignore`.
inline json mxfp4_config(std::span<const linear_entry> linears) {
    json targets = detail::fp4_config_targets(linears, "mxfp4");
    json weights = detail::ct_quantization_args("float", 4, "group", true, json(false), json(mxfp4_group), nullptr,
                                                json("minmax"));
    json group = detail::ct_config_group("mxfp4-pack-quantized", nullptr, std::move(targets), std::move(weights));
    return detail::ct_envelope(json::object({{"group_0", std::move(group)}}), "mxfp4-pack-quantized",
                               unquantized_names(linears), "0.12.2");
}

inline json mxfp4_layout::config(std::span<const linear_entry> linears) const { return mxfp4_config(linears); }

/// The converter's view of MXFP4A16 (layout/layout_traits.hpp format_traits; convert/format.hpp
/// lists it). No global scale, so nothing is shared across a fused group.
struct mxfp4_format_traits {
    static constexpr std::string_view name = "compressed-tensors-mxfp4";
    static constexpr std::array<std::string_view, 1> aliases{"mxfp4-pack-quantized"};
    static constexpr code_kind codes = code_kind::e2m1;
    static constexpr bool carries_g_idx = false;
    static constexpr bool one_scheme = false;
    static constexpr scale_policy asymmetric_minmax = scale_policy::minmax;
    static constexpr bool fused_global_scale = false;
    static constexpr bool calibrated_inputs = false;  ///< MXFP4 activations are fully dynamic
    static constexpr std::int64_t group = mxfp4_group;
    static constexpr dtype scale_dtype = dtype::U8;  // E8M0 exponents, stored as uint8
    static constexpr std::string_view element = "MXFP4";

    static dtype default_scale_dtype(dtype) noexcept { return scale_dtype; }

    static std::vector<tensor_spec> specs(std::int64_t n, std::int64_t k) { return mxfp4_layout().specs(n, k); }

    static std::optional<std::string> refusal(std::int64_t /*n*/, std::int64_t k, const layout_scheme&) {
        if (std::string why = mxfp4_layout().refusal(k); !why.empty()) return why;
        return std::nullopt;
    }

    static std::vector<owned_tensor> quantize(const tensor_view& rows, std::string_view module, const fp4_group&,
                                              const executor& ex, snr_sums* snr, buffer_recycler* storage = nullptr) {
        return mxfp4_layout().quantize(rows, module, ex, snr, storage);
    }

    static json config(std::span<const linear_entry> linears, const layout_request&) { return mxfp4_config(linears); }

    static std::vector<side_file> side_files(std::span<const linear_entry>, const layout_request&) { return {}; }
};

}  // namespace qforge
