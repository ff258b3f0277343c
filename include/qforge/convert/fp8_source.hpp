// FP8 source checkpoints: E4M3 weights with their dequantization scales, read as the float
// weights they stand for, so that every output format converts from them.
//
// Two layouts (field-2026.md 1.1 and 1.2):
//  * native `quant_method: "fp8"` (DeepSeek V3/R1, Qwen3 -FP8, Kimi K2): `fmt: "e4m3"`,
//    `weight_block_size: [bn, bk]`; per linear <p>.weight F8_E4M3 [N, K] and
//    <p>.weight_scale_inv F32 or BF16 [ceil(N/bn), ceil(K/bk)], which despite its name is the
//    multiplier: w = e4m3(code) * scale_inv (compressed-tensors
//    `entrypoints/convert/converters/fp8block_dequantizer.py`; llama.cpp `convert_hf_to_gguf.py`
//    `dequant_model` / `dequant_simple`, which also slices the ceil-padded grid back to the
//    weight at ragged edges, e.g. DeepSeek's kv_a_proj_with_mqa [576, 7168]). Linears the
//    source left dense are listed in `modules_to_not_convert`.
//  * compressed-tensors `float-quantized` (llm-compressor FP8, FP8_DYNAMIC, FP8_BLOCK): a
//    config group with `weights.type: "float"`, `num_bits: 8`, `strategy` tensor / channel /
//    block (`block_structure [bn, bk]`); <p>.weight F8_E4M3 [N, K] and <p>.weight_scale
//    [1] / [N, 1] / [ceil(N/bn), ceil(K/bk)] in the model dtype or F32, same multiply
//    (compressed-tensors `quantization/lifecycle/initialize.py` `initialize_qparams`,
//    `quantization/lifecycle/forward.py` `dequantize`); static activation scales
//    (<p>.input_scale) are dropped; asymmetric (zero point) FP8 is refused; `ignore` lists the
//    dense linears.
//
// A third kind, gpt-oss's native MXFP4 experts (`quant_method: "mxfp4"`), is read by
// convert/gpt_oss_source.hpp and reported here as fp8_source_kind::gpt_oss_mxfp4.
//
// What qforge does with them: each scale tensor is folded into its weight (never carried over
// as a tensor), every linear the source left dense stays dense (the source's
// modules_to_not_convert / ignore carried over by the dtype it shows), the source's
// quantization_config is not copied, and every malformed scale (missing, orphaned, wrong dtype
// or shape, non-finite) is a refusal naming the file, the tensor and the reason. Weights are
// decoded tensor by tensor into float32: w = e4m3_to_float(code) * float(scale), one float
// multiply (exact for BF16/F16 scales: 4 x 11 significant bits fit 24); a NaN code is refused
// naming the element.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/format.hpp"
#include "qforge/convert/fused_experts.hpp"
#include "qforge/convert/gpt_oss_source.hpp"
#include "qforge/convert/model_config.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/minifloat.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/json.hpp"

namespace qforge {

/// What a source's quantization_config declares: no quantized weights, FP8 (native or
/// compressed-tensors), or gpt-oss's MXFP4 experts (convert/gpt_oss_source.hpp).
enum class fp8_source_kind { none, native_fp8, compressed_tensors, gpt_oss_mxfp4 };

/// A checkpoint's tensors as the converter sees them once FP8 scales are folded in.
struct fp8_source {
    fp8_source_kind kind = fp8_source_kind::none;
    std::vector<source_tensor> tensors;  ///< every tensor but the scales; FP8 weights carry theirs
    std::vector<std::string> refusals;   ///< complete messages, as plan::refusals
    /// Linear weights the source left in a float dtype: kept dense (modules_to_not_convert / ignore).
    std::vector<std::string> kept_dense;
    std::vector<std::string> not_converted;  ///< the source's modules_to_not_convert / ignore, as listed
};

namespace detail {

/// The scale of a fused FP8 expert tensor `<p>.experts.gate_up_proj` is `<p>.experts.
/// gate_up_proj_scales_inv` [E, ceil(N/bn), ceil(K/bk)] (transformers src/transformers/
/// integrations/finegrained_fp8.py: FP8Expert.__init__ `gate_up_proj_scales_inv`, and
/// Fp8Quantize.convert: `scale_key = target_keys + "_scales_inv"` for a key not ending in
/// "weight", the scales keeping the leading expert dim); Fp8Dequantize multiplies each expert's
/// [N, K] block by its own grid, as for a 2-D weight.
inline constexpr std::string_view fused_scale_suffix = "_scales_inv";

struct fp8_grid {
    std::string strategy;  ///< "block", "channel" or "tensor"
    std::int64_t bn = 0, bk = 0;
};

/// The scale shape `g` gives a [n, k] weight, and its block extent.
QFORGE_DECL shape_t fp8_scale_shape(const fp8_grid& g, std::int64_t n, std::int64_t k);

QFORGE_DECL std::optional<fp8_grid> parse_block(const json* b, std::string& why);

QFORGE_DECL void string_list(const json* v, const char* key, std::vector<std::string>& out, std::string& why);

/// The grids a compressed-tensors config declares for float weights (empty: not an FP8 source).
QFORGE_DECL std::vector<fp8_grid> ct_float_grids(const json& qc, std::string& why);

}  // namespace detail

namespace detail {

/// The dense linears a source left in a float dtype: kept dense, as the source's authors chose.
QFORGE_DECL void note_dense_linears(fp8_source& out);

QFORGE_DECL bool is_gpt_oss_config(const json& config);

}  // namespace detail

/// gpt-oss's native checkpoint (`quant_method: "mxfp4"`, convert/gpt_oss_source.hpp): its MXFP4
/// expert pairs become fused tensors decoded expert by expert; its bf16 linears (attention,
/// router, embeddings, head: its `modules_to_not_convert`) are kept dense. Never throws.
QFORGE_DECL fp8_source read_gpt_oss_source(const json& config, const std::string& config_file,
                                           const std::vector<source_tensor>& tensors, const std::string& dir);

/// Reads the FP8 facts of a checkpoint (config.json's quantization_config and the tensor
/// headers). Never throws for a malformed source: every problem is a refusal. A checkpoint
/// whose config declares no FP8 scheme gives kind none and its tensors unchanged.
QFORGE_DECL fp8_source read_fp8_source(const json& config, const std::string& config_file,
                                       const std::vector<source_tensor>& tensors, const std::string& dir = {});

namespace detail {

QFORGE_DECL const std::array<float, 256>& e4m3_table();

QFORGE_DECL float stored_scale_value(const std::byte* p, dtype t) noexcept;

}  // namespace detail

/// The float32 values [rows, K] of the FP8 weight `w` under its scale tensor `scale`
/// (described by `s`): w[r][c] = e4m3(code) * scale[r / block_rows][c / block_cols]. Refuses
/// a NaN code or a non-finite scale naming `file`, the tensor and the element.
QFORGE_DECL owned_tensor decode_fp8_weight(const tensor_view& w, const tensor_view& scale, const source_scale& s,
                                           const std::string& file = {}, const std::string& scale_file = {});

/// True when an FP8 source weight's codes and scales are already what `format` would store
/// for scheme `s` (same grid, same scale dtype): the converter then copies them bit for bit
/// instead of quantizing the decoded values again (issue 17: "FP8 source -> FP8 output with
/// the same block grid is a copy of codes and scales").
QFORGE_DECL bool fp8_copy_applies(const source_scale& src, output_format format, const quant_spec& s, std::int64_t cols);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {
namespace detail {

QFORGE_DECL shape_t fp8_scale_shape(const fp8_grid& g, std::int64_t n, std::int64_t k) {
    if (g.strategy == "block") return {(n + g.bn - 1) / g.bn, (k + g.bk - 1) / g.bk};
    if (g.strategy == "channel") return {n, 1};
    return {1};
}

QFORGE_DECL std::optional<fp8_grid> parse_block(const json* b, std::string& why) {
    if (!b || !b->is_array() || b->size() != 2 || !b->at(0).is_int() || !b->at(1).is_int() || b->at(0).as_int() <= 0 ||
        b->at(1).as_int() <= 0 || b->at(0).as_int() > (1 << 20) || b->at(1).as_int() > (1 << 20)) {
        why = "the block size must be two positive integers [rows, cols]";
        return std::nullopt;
    }
    return fp8_grid{"block", b->at(0).as_int(), b->at(1).as_int()};
}

QFORGE_DECL void string_list(const json* v, const char* key, std::vector<std::string>& out, std::string& why) {
    if (!v || v->is_null()) return;
    if (!v->is_array()) {
        why = std::string("\"") + key + "\" must be a list of module names";
        return;
    }
    for (const json& e : v->as_array()) {
        if (!e.is_string()) {
            why = std::string("\"") + key + "\" must be a list of module names";
            return;
        }
        out.push_back(e.as_string());
    }
}

QFORGE_DECL std::vector<fp8_grid> ct_float_grids(const json& qc, std::string& why) {
    std::vector<fp8_grid> grids;
    const json* groups = qc.find("config_groups");
    if (!groups || !groups->is_object()) return grids;
    for (const auto& [name, group] : groups->as_object()) {
        const json* w = group.is_object() ? group.find("weights") : nullptr;
        if (!w || !w->is_object()) continue;
        const json* type = w->find("type");
        if (!type || !type->is_string() || type->as_string() != "float") continue;
        const json* bits = w->find("num_bits");
        if (!bits || !bits->is_int() || bits->as_int() != 8) {
            why = "config group " + name + ": float weights of other than 8 bits are not read";
            return {};
        }
        if (const json* sym = w->find("symmetric"); sym && sym->is_bool() && !sym->as_bool()) {
            why = "config group " + name + ": asymmetric FP8 (zero points) is not read";
            return {};
        }
        const json* st = w->find("strategy");
        const std::string strategy = st && st->is_string() ? st->as_string() : "";
        if (strategy == "block") {
            auto g = parse_block(w->find("block_structure"), why);
            if (!g) {
                why = "config group " + name + ": " + why;
                return {};
            }
            grids.push_back(*g);
        } else if (strategy == "channel" || strategy == "tensor") {
            grids.push_back({strategy, 0, 0});
        } else {
            why = "config group " + name + ": FP8 weight strategy \"" + strategy +
                  "\" is not read (tensor, channel or block)";
            return {};
        }
    }
    return grids;
}

QFORGE_DECL void note_dense_linears(fp8_source& out) {
    for (const source_tensor& t : out.tensors)
        if (!t.scale && t.shape.size() == 2 && t.name.ends_with(".weight") && is_floating(t.type)) out.kept_dense.push_back(t.name);
}

QFORGE_DECL bool is_gpt_oss_config(const json& config) {
    const json* type = config.find("model_type");
    if (type && type->is_string() && type->as_string() == "gpt_oss") return true;
    const json* archs = config.find("architectures");
    if (archs && archs->is_array())
        for (const json& a : archs->as_array())
            if (a.is_string() && a.as_string() == "GptOssForCausalLM") return true;
    return false;
}

}  // namespace detail

QFORGE_DECL fp8_source read_gpt_oss_source(const json& config, const std::string& config_file,
                                           const std::vector<source_tensor>& tensors, const std::string& dir) {
    fp8_source out;
    out.kind = fp8_source_kind::gpt_oss_mxfp4;
    auto refuse = [&](const std::string& why) { out.refusals.push_back(detail::format_error_message(config_file, {}, why)); };
    if (!detail::is_gpt_oss_config(config))
        refuse("quant_method \"mxfp4\" is read for gpt-oss (model_type gpt_oss) only: the orientation of its blocks and its "
               "interleaved gate/up rows are gpt-oss's (transformers integrations/mxfp4.py)");
    const json& qc = *config.find("quantization_config");
    std::string why;
    detail::string_list(qc.find("modules_to_not_convert"), "modules_to_not_convert", out.not_converted, why);
    if (!why.empty()) refuse(why);
    gpt_oss_mxfp4_tensors read = read_gpt_oss_mxfp4(tensors, declared_model_dtype(config).value_or(dtype::BF16), dir);
    out.tensors = std::move(read.tensors);
    out.refusals.insert(out.refusals.end(), read.refusals.begin(), read.refusals.end());
    detail::note_dense_linears(out);
    return out;
}

QFORGE_DECL fp8_source read_fp8_source(const json& config, const std::string& config_file,
                                       const std::vector<source_tensor>& tensors, const std::string& dir) {
    fp8_source out;
    out.tensors = tensors;
    const json* qc = config.is_object() ? config.find("quantization_config") : nullptr;
    const json* method = qc && qc->is_object() ? qc->find("quant_method") : nullptr;
    if (!method || !method->is_string()) return out;
    auto refuse = [&](const std::string& file, const std::string& tensor, const std::string& why) {
        out.refusals.push_back(detail::format_error_message(file, tensor, why));
    };
    std::string why;
    std::vector<detail::fp8_grid> grids;
    std::string scale_suffix;
    if (method->as_string() == "fp8") {
        out.kind = fp8_source_kind::native_fp8;
        scale_suffix = "_scale_inv";
        if (const json* fmt = qc->find("fmt"); fmt && !(fmt->is_string() && fmt->as_string() == "e4m3"))
            refuse(config_file, {}, "quantization_config.fmt must be \"e4m3\" (F8_E4M3 weights); other FP8 formats are not read");
        const json* block = qc->find("weight_block_size");
        if (!block || block->is_null()) {
            refuse(config_file, {}, "quant_method \"fp8\" without weight_block_size: only block-scaled FP8 sources are read");
        } else if (auto g = detail::parse_block(block, why)) {
            grids.push_back(*g);
        } else {
            refuse(config_file, {}, "weight_block_size: " + why);
            why.clear();
        }
        detail::string_list(qc->find("modules_to_not_convert"), "modules_to_not_convert", out.not_converted, why);
    } else if (method->as_string() == "compressed-tensors") {
        grids = detail::ct_float_grids(*qc, why);
        if (grids.empty() && why.empty()) return out;  // an integer compressed-tensors checkpoint: not ours
        out.kind = fp8_source_kind::compressed_tensors;
        scale_suffix = "_scale";
        if (!why.empty()) {
            refuse(config_file, {}, why);
            why.clear();
        }
        detail::string_list(qc->find("ignore"), "ignore", out.not_converted, why);
    } else if (method->as_string() == "mxfp4") {
        return read_gpt_oss_source(config, config_file, tensors, dir);
    } else {
        return out;
    }
    if (!why.empty()) refuse(config_file, {}, why);
    const dtype model = declared_model_dtype(config).value_or(dtype::BF16);

    std::map<std::string, std::size_t> index;
    for (std::size_t i = 0; i < tensors.size(); ++i) index.emplace(tensors[i].name, i);
    std::vector<bool> drop(tensors.size(), false);
    auto file_of = [&](const source_tensor& t) { return dir.empty() ? t.file : dir + "/" + t.file; };
    for (std::size_t i = 0; i < tensors.size(); ++i) {
        const source_tensor& t = tensors[i];
        const std::string_view name = t.name;
        // Scales and static activation scales belong to a weight; each is checked from it.
        const bool fused_scale = name.ends_with("_proj" + std::string(detail::fused_scale_suffix)) &&
                                 is_fused_expert_tensor(name.substr(0, name.size() - detail::fused_scale_suffix.size()));
        if (name.ends_with(".weight" + scale_suffix) || name.ends_with(".input_scale") || fused_scale) {
            const std::string weight = name.ends_with(".input_scale") ? std::string(name.substr(0, name.size() - 12)) + ".weight"
                                       : fused_scale ? std::string(name.substr(0, name.size() - detail::fused_scale_suffix.size()))
                                                     : std::string(name.substr(0, name.size() - scale_suffix.size()));
            drop[i] = true;
            const auto w = index.find(weight);
            if (w == index.end() || tensors[w->second].type != dtype::F8_E4M3)
                refuse(file_of(t), t.name, "scale tensor without an F8_E4M3 weight '" + weight + "' to apply to");
            continue;
        }
        if (name.ends_with(".weight_zero_point")) {
            drop[i] = true;
            refuse(file_of(t), t.name, "asymmetric FP8 (a zero point) is not read");
            continue;
        }
        if (t.type == dtype::F8_E5M2 || t.type == dtype::F8_E4M3FNUZ || t.type == dtype::F8_E5M2FNUZ) {
            refuse(file_of(t), t.name, std::string(dtype_name(t.type)) + " weights are not read (F8_E4M3 only)");
            continue;
        }
        if (t.type != dtype::F8_E4M3) {
            if (t.shape.size() == 2 && name.ends_with(".weight") && is_floating(t.type)) out.kept_dense.push_back(t.name);
            continue;
        }
        // transformers' FP8Expert: a fused 3-D expert tensor [E, N, K] of a native fp8 source
        const bool fused = t.shape.size() == 3 && is_fused_expert_tensor(name) && !name.ends_with(".weight");
        if (fused && out.kind != fp8_source_kind::native_fp8) {
            refuse(file_of(t), t.name, "fused 3-D FP8 experts are read from quant_method \"fp8\" sources only "
                                       "(transformers FP8Expert); no compressed-tensors layout for them is known");
            continue;
        }
        if (!fused && (t.shape.size() != 2 || !name.ends_with(".weight"))) {
            refuse(file_of(t), t.name, "an F8_E4M3 tensor must be a 2-D linear weight '<module>.weight' or a fused 3-D "
                                       "expert tensor, not shape " + shape_to_string(t.shape));
            continue;
        }
        if (std::any_of(t.shape.begin(), t.shape.end(), [](std::int64_t d) { return d <= 0; })) {
            refuse(file_of(t), t.name, "an F8_E4M3 weight cannot have an empty dimension: " + shape_to_string(t.shape));
            continue;
        }
        const std::string sname = t.name + (fused ? std::string(detail::fused_scale_suffix) : scale_suffix);
        const auto s = index.find(sname);
        if (s == index.end()) {
            refuse(file_of(t), t.name, "F8_E4M3 weight without its scale '" + sname + "'");
            continue;
        }
        const source_tensor& st = tensors[s->second];
        if (st.type != dtype::F32 && st.type != dtype::BF16 && st.type != dtype::F16) {
            refuse(file_of(st), st.name, "scale dtype is " + std::string(dtype_name(st.type)) + ", expected F32, BF16 or F16");
            continue;
        }
        const std::int64_t n = t.shape[t.shape.size() - 2], k = t.shape.back();
        const detail::fp8_grid* grid = nullptr;
        std::string expected;
        for (const auto& g : grids) {
            shape_t want = detail::fp8_scale_shape(g, n, k);
            if (fused) want.insert(want.begin(), t.shape[0]);  // one grid per expert: [E, N/bn, K/bk]
            const bool fits = st.shape == want || (g.strategy == "tensor" && (st.shape.empty() || st.shape == shape_t{1, 1}));
            if (fits) {
                grid = &g;
                break;
            }
            expected += (expected.empty() ? "" : " or ") + shape_to_string(want) + " (" + g.strategy +
                        (g.strategy == "block" ? " " + std::to_string(g.bn) + "x" + std::to_string(g.bk) : "") + ")";
        }
        if (!grid) {
            if (!grids.empty())
                refuse(file_of(st), st.name, "scale shape " + shape_to_string(st.shape) + " does not fit weight " +
                                                 shape_to_string(t.shape) + ": expected " + expected);
            continue;
        }
        source_scale sc{st.name, st.type, st.shape, 1, k, model};
        if (grid->strategy == "block") sc.block_rows = grid->bn, sc.block_cols = grid->bk;
        else if (grid->strategy == "tensor") sc.block_rows = n;
        out.tensors[i].scale = std::move(sc);
    }
    std::vector<source_tensor> kept;
    for (std::size_t i = 0; i < out.tensors.size(); ++i)
        if (!drop[i]) kept.push_back(std::move(out.tensors[i]));
    out.tensors = std::move(kept);
    return out;
}

namespace detail {

QFORGE_DECL const std::array<float, 256>& e4m3_table() {
    static const std::array<float, 256> t = [] {
        std::array<float, 256> v{};
        for (unsigned c = 0; c < 256; ++c) v[c] = e4m3_to_float(static_cast<std::uint8_t>(c));
        return v;
    }();
    return t;
}

QFORGE_DECL float stored_scale_value(const std::byte* p, dtype t) noexcept {
    std::uint16_t h;
    float f;
    switch (t) {
        case dtype::BF16: std::memcpy(&h, p, 2); return bf16_to_float(h);
        case dtype::F16: std::memcpy(&h, p, 2); return fp16_to_float(h);
        default: std::memcpy(&f, p, 4); return f;
    }
}

}  // namespace detail

QFORGE_DECL owned_tensor decode_fp8_weight(const tensor_view& w, const tensor_view& scale, const source_scale& s,
                                           const std::string& file, const std::string& scale_file) {
    if (w.type != dtype::F8_E4M3 || w.rank() != 2)
        fail<format_error>(file, w.name, "expected a 2-D F8_E4M3 weight, got " + std::string(dtype_name(w.type)) + " " +
                                             shape_to_string(w.shape));
    const std::int64_t n = w.shape[0], k = w.shape[1];
    if (w.bytes.size() != static_cast<std::size_t>(n * k))
        fail<format_error>(file, w.name, "holds " + std::to_string(w.bytes.size()) + " bytes for " + shape_to_string(w.shape));
    if (s.block_rows <= 0 || s.block_cols <= 0)
        fail<format_error>(scale_file, scale.name, "scale block extent must be positive");
    const std::int64_t srows = (n + s.block_rows - 1) / s.block_rows, scols = (k + s.block_cols - 1) / s.block_cols;
    if (scale.type != s.type || dtype_size(scale.type) == 0 ||
        scale.bytes.size() != static_cast<std::size_t>(srows * scols) * dtype_size(scale.type))
        fail<format_error>(scale_file, scale.name, "scale holds " + std::to_string(scale.bytes.size()) + " bytes, the " +
                                                       std::to_string(srows) + " x " + std::to_string(scols) +
                                                       " grid of weight " + shape_to_string(w.shape) + " needs " +
                                                       std::to_string(srows * scols) + " " + std::string(dtype_name(s.type)));
    std::vector<float> sv(static_cast<std::size_t>(srows * scols));
    for (std::size_t i = 0; i < sv.size(); ++i) {
        sv[i] = detail::stored_scale_value(scale.bytes.data() + i * dtype_size(scale.type), scale.type);
        // 448 * scale must stay finite: an infinite weight would reach no file anyway.
        if (!std::isfinite(sv[i]) || std::fabs(sv[i]) > std::numeric_limits<float>::max() / e4m3_max)
            fail<format_error>(scale_file, scale.name, "scale at block [" + std::to_string(static_cast<std::int64_t>(i) / scols) +
                                                           ", " + std::to_string(static_cast<std::int64_t>(i) % scols) +
                                                           "] is not finite or overflows the weights");
    }
    owned_tensor out{w.name, dtype::F32, w.shape, {}};
    out.bytes.resize(static_cast<std::size_t>(n * k) * sizeof(float));
    const auto& lut = detail::e4m3_table();
    const auto* codes = reinterpret_cast<const std::uint8_t*>(w.bytes.data());
    float* dst = reinterpret_cast<float*>(out.bytes.data());
    for (std::int64_t r = 0; r < n; ++r) {
        const float* srow = sv.data() + (r / s.block_rows) * scols;
        const std::uint8_t* crow = codes + r * k;
        float* drow = dst + r * k;
        std::uint8_t nan_seen = 0;
        for (std::int64_t c0 = 0; c0 < k; c0 += s.block_cols) {
            const std::int64_t c1 = std::min(k, c0 + s.block_cols);
            const float m = srow[c0 / s.block_cols];
            for (std::int64_t c = c0; c < c1; ++c) {
                const std::uint8_t code = crow[c];
                nan_seen |= static_cast<std::uint8_t>((code & 0x7Fu) == 0x7Fu);
                drow[c] = lut[code] * m;
            }
        }
        if (nan_seen)
            for (std::int64_t c = 0; c < k; ++c)
                if (e4m3_is_nan(crow[c]))
                    fail<format_error>(file, w.name, "E4M3 NaN code 0x" + std::string(crow[c] & 0x80u ? "FF" : "7F") +
                                                         " at row " + std::to_string(r) + ", column " + std::to_string(c));
    }
    return out;
}

QFORGE_DECL bool fp8_copy_applies(const source_scale& src, output_format format, const quant_spec& s, std::int64_t cols) {
    if (!is_float_format(format) || !s.scale_dtype || src.type != *s.scale_dtype) return false;
    const std::int64_t br = s.group_size > 0 ? s.group_size : 1, bc = s.group_size > 0 ? s.group_size : cols;
    return src.block_rows == br && src.block_cols == bc;
}

}  // namespace qforge
#endif
