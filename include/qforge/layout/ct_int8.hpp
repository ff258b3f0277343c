// compressed-tensors `int-quantized` W8A8 checkpoints (llm-compressor W8A8 / INT8 preset, vLLM
// CompressedTensorsW8A8Int8): int8 symmetric weights with dynamic per-token int8 activations.
// Per linear:
//   <p>.weight        I8 [N, K]           the signed code q = code - 128, unpacked
//   <p>.weight_scale  checkpoint dtype [N, G] (G = 1 per channel, the W8A8 preset)
// w = q * scale, q in [-128, 127]; the scale is amax / 127.5 (CTn `quantization/utils/helpers.py
// calculate_qparams`, `calculate_range`: 255 / 2 for 8 bits), which is qforge's gptq_absmax
// policy (`--scale minmax`). The naive compressor stores the quantized weight as is
// (CTn `compressors/naive_quantized`, formats.md 4.2, 4.6); the reader is
// convert/repack_ct_naive.hpp. Config: one group, weights {int, 8, channel (or group),
// symmetric, static}, input_activations {int, 8, token, symmetric, dynamic} as the INT8_W8A8
// preset sets them (CTn `quantization/quant_scheme.py`); vLLM picks W8A8Int8 for 8-bit weights
// and inputs, weight strategy tensor or channel, input token, symmetric, static weights and
// dynamic inputs (`compressed_tensors.py _is_dynamic_token_w8a8`).
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/detail/ct_envelope.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

class ct_int8_layout {
public:
    static constexpr std::string_view format_name = "compressed-tensors-w8a8";
    static constexpr int bits = 8;

    explicit ct_int8_layout(ct_options options = {}) : opt_(options) {}
    const ct_options& options() const noexcept { return opt_; }

    std::vector<tensor_spec> specs(std::int64_t n, std::int64_t k, std::int64_t group, bool) const {
        return {{".weight", dtype::I8, {n, k}},
                {".weight_scale", opt_.checkpoint_dtype, {n, detail::ceil_div(k, detail::effective_group(group, k))}}};
    }

    void check(const quantized_tensor& q) const {
        detail::check_common(q, format_name);
        if (q.bits != 8) fail<unsupported_error>({}, q.name, "W8A8 stores 8-bit weights, not " + std::to_string(q.bits));
        if (!q.symmetric) fail<unsupported_error>({}, q.name, "W8A8 weights are symmetric (vLLM W8A8Int8 has no weight zero point)");
        if (!q.g_idx.empty()) fail<unsupported_error>({}, q.name, "W8A8: contiguous groups only (no weight_g_idx)");
        detail::check_scale_dtype(q, opt_.checkpoint_dtype, format_name);
    }

    std::vector<owned_tensor> pack(const quantized_tensor& q, std::string_view prefix) const {
        check(q);
        const std::string p(prefix);
        std::vector<owned_tensor> out;
        out.push_back(detail::alloc_tensor(p + ".weight", dtype::I8, {q.rows, q.cols}));
        auto* w = reinterpret_cast<std::int8_t*>(out.back().bytes.data());
        for (std::size_t i = 0; i < q.codes.size(); ++i) w[i] = static_cast<std::int8_t>(static_cast<int>(q.codes[i]) - 128);
        out.push_back(detail::make_tensor(p + ".weight_scale", q.scale_dtype, {q.rows, q.groups()}, q.scales));
        return out;
    }

    quantized_tensor unpack(std::span<const tensor_view> views, std::string_view prefix, layer_params params) const {
        const std::string p(prefix);
        const tensor_view& w = detail::find_view(views, p + ".weight");
        if (w.type != dtype::I8 || w.rank() != 2 || w.shape[0] <= 0 || w.shape[1] <= 0)
            fail<format_error>({}, w.name, "expected a 2-D I8 weight");
        const std::int64_t n = w.shape[0], k = w.shape[1];
        detail::expect_view(w, dtype::I8, {n, k});
        const std::int64_t group = detail::effective_group(params.group_size, k);
        const tensor_view& sc = detail::find_view(views, p + ".weight_scale");
        if (sc.type != dtype::F16 && sc.type != dtype::BF16)
            fail<unsupported_error>({}, sc.name, "weight_scale must be F16 or BF16 for qforge");
        detail::expect_view(sc, sc.type, {n, detail::ceil_div(k, group)});
        quantized_tensor q = detail::unpacked_header(p, 8, n, k, group, true, sc.type);
        const auto* c = reinterpret_cast<const std::int8_t*>(w.bytes.data());
        for (std::size_t i = 0; i < q.codes.size(); ++i) q.codes[i] = static_cast<std::uint8_t>(c[i] + 128);
        q.scales = detail::copy_elements<std::uint16_t>(sc);
        q.zeros.assign(static_cast<std::size_t>(n * q.groups()), 128);
        q.validate();
        return q;
    }

    json config(std::span<const linear_entry> linears) const {
        check_untied(linears, format_name);
        check_fused_share_scheme(linears, format_name);
        const linear_entry& first = common_scheme(linears, format_name);
        if (first.bits != 8 || !first.symmetric)
            fail<unsupported_error>({}, first.name, "W8A8: 8-bit symmetric weights only");
        const std::int64_t g = common_group_size(linears, format_name);
        json targets = json::array();
        for (const linear_entry& e : linears)
            if (e.quantized) targets.push_back(e.name);
        json inputs = detail::ct_quantization_args("int", 8, "token", true, true, json(), nullptr, json());
        json weights = detail::ct_quantization_args("int", 8, g > 0 ? "group" : "channel", true, false,
                                                    g > 0 ? json(g) : json(), nullptr, "minmax");
        json group = detail::ct_config_group("int-quantized", std::move(inputs), std::move(targets), std::move(weights));
        return detail::ct_envelope(json::object({{"group_0", std::move(group)}}), "int-quantized",
                                   unquantized_names(linears), ct_version(ct_packing::padded_v0_12));
    }

private:
    ct_options opt_;
};

/// compressed-tensors W8A8 as the converter's format table sees it (convert/format.hpp).
struct ct_int8_format_traits {
    static constexpr std::string_view name = ct_int8_layout::format_name;
    static constexpr std::array<std::string_view, 0> aliases{};
    static constexpr code_kind codes = code_kind::integer;
    static constexpr bool carries_g_idx = false;
    static constexpr bool one_scheme = false;
    static constexpr scale_policy asymmetric_minmax = scale_policy::minmax;

    static dtype default_scale_dtype(dtype checkpoint) noexcept { return detail::ct_scale_dtype(checkpoint); }

    /// Why W8A8 cannot hold the codes of `q` exactly as they are, or nullopt.
    static std::optional<std::string> repack_refusal(const quantized_tensor& q) {
        if (q.bits != 8 || !q.symmetric)
            return "W8A8 stores 8-bit symmetric weights; " + q.name + " has " + std::to_string(q.bits) + "-bit codes";
        if (!detail::g_idx_is_contiguous(q)) return "W8A8 has no g_idx, but " + q.name + " is act-order";
        return std::nullopt;
    }

    static std::optional<std::string> refusal(std::int64_t /*n*/, std::int64_t k, const layout_scheme& s) {
        if (s.bits != 8 || !s.symmetric)
            return "W8A8 holds 8-bit symmetric weights, not " + std::to_string(s.bits) + "-bit " + (s.symmetric ? "sym" : "asym");
        if (auto why = detail::ct_scale_refusal(s, true)) return why;
        const std::int64_t g = detail::effective_group(s.group_size, k);
        if (k % g != 0)
            return "W8A8 needs whole groups: K=" + std::to_string(k) + " is not a multiple of group " + std::to_string(g);
        return std::nullopt;
    }

    template <class F>
    static decltype(auto) with_layout(const layout_request& r, F&& f) {
        if (r.bits != 8) fail<unsupported_error>({}, {}, "W8A8 holds 8 bits, got " + std::to_string(r.bits));
        return f(ct_int8_layout(ct_options{static_cast<ct_packing>(r.packing), r.checkpoint}));
    }

    static json config(std::span<const linear_entry> linears, layout_request r) {
        if (const linear_entry* base = majority_scheme(linears)) r.bits = base->bits;
        return with_layout(r, [&](const auto& layout) { return layout.config(linears); });
    }

    static std::vector<side_file> side_files(std::span<const linear_entry>, const layout_request&) { return {}; }
};

}  // namespace qforge
