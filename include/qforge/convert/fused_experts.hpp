// Fused 3-D MoE experts (transformers v5 / gpt-oss on-disk layout) and the per-architecture rule
// that cuts them into the per-expert 2-D linears every quantized safetensors loader reads
// (`<p>.experts.<e>.gate_proj/up_proj/down_proj`). Orientation and gate/up order differ per
// architecture and a wrong guess corrupts silently, so only architectures whose layout was read
// in transformers' source are accepted; any other is refused with the reason.
//
//  - qwen3_moe (`Qwen3MoeExperts`, transformers src/transformers/models/qwen3_moe/
//    modeling_qwen3_moe.py, v5): `gate_up_proj [E, 2I, H]`, `linear(x, gate_up_proj[e])
//    .chunk(2, dim=-1)` -> gate = rows [0, I), up = rows [I, 2I); `down_proj [E, H, I]` used as
//    `linear(h, down_proj[e])`, i.e. already [out, in].
//  - gpt_oss (`GptOssExperts`, transformers src/transformers/models/gpt_oss/modeling_gpt_oss.py):
//    `gate_up_proj [E, H, 2I]` used as `x @ gate_up_proj[e]` ([in, out]), gate = columns 0, 2,
//    4, ..., up = columns 1, 3, 5, ... (`gate_up[..., ::2], gate_up[..., 1::2]`), bias
//    `gate_up_proj_bias [E, 2I]` interleaved the same way; `down_proj [E, I, H]` ([in, out]),
//    `down_proj_bias [E, H]`.
//  - qwen3_5_moe (Qwen3.5 MoE): `Qwen3_5MoeExperts(Qwen3NextExperts)` (src/transformers/models/
//    qwen3_5_moe/modular_qwen3_5_moe.py), `Qwen3NextExperts(Qwen2MoeExperts)` (qwen3_next/
//    modular_qwen3_next.py): the Qwen2/Qwen3-MoE layout above, [E, 2I, H] gate then up; the
//    checkpoint is only renamed on load (conversion_mapping.py _MODEL_TO_CONVERSION_PATTERN
//    "qwen3_5_moe_text" -> "qwen3_5_text": a `model.language_model.` prefix), so it is on disk so.
//  - qwen3_vl_moe (Qwen3-VL-MoE): in memory `Qwen3VLMoeTextExperts` is [E, 2I, H] gate then up
//    (modeling_qwen3_vl_moe.py), but the Hub checkpoint is its transpose: transformers
//    src/transformers/conversion_mapping.py _build_checkpoint_conversion_mapping "qwen3_vl_moe"
//    loads `mlp.experts.gate_up_proj` and `down_proj` through `Transpose(1, 2)`. On disk then:
//    `gate_up_proj [E, H, 2I]` ([in, out]; gate = columns [0, I), up = [I, 2I)) and `down_proj
//    [E, I, H]`. Only that orientation is read, checked against hidden_size and
//    moe_intermediate_size; where H == 2I (gate_up) or H == I (down) the two orientations have
//    one shape and the tensor is refused rather than guessed.
//  - mixtral (`MixtralExperts`, transformers src/transformers/models/mixtral/modeling_mixtral.py,
//    v5): `gate_up_proj [E, 2I, H]` and `down_proj [E, H, I]` with I = config.intermediate_size
//    (`self.intermediate_dim = config.intermediate_size`), used as qwen3_moe's. The checkpoint is
//    so on disk: conversion_mapping.py _build_checkpoint_conversion_mapping "mixtral" loads the
//    original `block_sparse_moe.experts.*.w1.weight` and `*.w3.weight` through
//    MergeModulelist(dim=0) + Concatenate(dim=1) into `mlp.experts.gate_up_proj` (w1 = gate rows
//    first), `*.w2.weight` through MergeModulelist(dim=0) into `mlp.experts.down_proj`, no
//    Transpose, and renames the router `.block_sparse_moe.gate` -> `.mlp.gate`; a v5 save
//    (save_original_format=False) keeps those names. The cut writes the ORIGINAL names back:
//    `<L>.block_sparse_moe.experts.<e>.w1/w3/w2` and the router `<L>.block_sparse_moe.gate`,
//    since those are what every Mixtral loader reads: vLLM model_executor/models/mixtral.py
//    (MixtralDecoderLayer's module is `block_sparse_moe`, MixtralModel.get_expert_mapping ->
//    FusedMoE.make_expert_params_mapping(ckpt_gate_proj_name="w1", ckpt_down_proj_name="w2",
//    ckpt_up_proj_name="w3"), no name mapper from `mlp.`), GPTQModel models/definitions/mixtral.py
//    (module tree `block_sparse_moe.experts.#.w1/w3/w2`) and transformers' own conversion source
//    patterns above (which its quantized loaders, e.g. integrations/compressed_tensors.py
//    DecompressExperts, run on). `mlp.experts.<e>.gate_proj` would match none of them.
//
// Each cut is gathered one expert at a time (gather_expert): memory follows one expert matrix.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/model_config.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/tensor_view.hpp"

namespace qforge {

/// How an architecture stores its fused experts.
enum class fused_expert_layout {
    out_in_concat,   ///< [E, 2I, H] gate rows then up rows; down [E, H, I] (qwen3_moe)
    in_out_strided,  ///< [E, H, 2I] gate/up interleaved along the last dim; down [E, I, H] (gpt_oss)
    in_out_concat,   ///< [E, H, 2I] gate columns then up columns; down [E, I, H] (qwen3_vl_moe on disk)
};

/// One per-expert tensor cut out of a fused expert tensor. The source is seen as
/// [E, A, B] (a bias as [E, B]); the output element (r, c) of expert `expert` is
///   transposed ? src[expert][c][first + r * step] : src[expert][first + r * step][c]
/// (a bias: src[expert][first + r * step]).
struct expert_cut {
    std::int64_t expert = 0;
    bool transposed = false;
    std::int64_t first = 0;
    std::int64_t step = 1;
};

/// A per-expert output of one fused source tensor.
struct expert_piece {
    std::string name;  ///< "<p>.experts.<e>.gate_proj.weight"
    shape_t shape;     ///< [rows, cols] of the 2-D linear, or [rows] of a bias
    expert_cut cut;
};

/// The architectures with a known fused layout, as "model_type (ArchitectureClass)".
QFORGE_DECL std::string_view known_fused_expert_architectures() noexcept;

namespace detail {
/// `c` describes model_type `type`, or lists the architecture class `arch`.
QFORGE_DECL bool is_architecture(const model_config& c, std::string_view type, std::string_view arch);
}  // namespace detail

inline bool is_mixtral(const model_config& c) { return detail::is_architecture(c, "mixtral", "MixtralForCausalLM"); }

/// The fused-expert layout of the model `c` describes, or nullopt (then `why` says so).
QFORGE_DECL std::optional<fused_expert_layout> fused_expert_layout_for(const model_config& c, std::string& why);

/// The per-expert names the loaders of model `c` read for the pieces of its fused experts:
/// "<layer>.<block>.experts.<e>.<gate|up|down>". Mixtral's are its original names (see above);
/// every other architecture keeps the fused tensor's block and the Qwen leaf names.
struct expert_piece_names {
    std::string_view block;  ///< the block loaders read ("block_sparse_moe"); empty: the fused tensor's own
    std::string_view gate = "gate_proj", up = "up_proj", down = "down_proj";
};

QFORGE_DECL expert_piece_names expert_piece_names_for(const model_config& c);

/// The per-expert intermediate size config.json gives (0 when absent), and its key: Mixtral's
/// experts are its MLP (MixtralExperts: intermediate_dim = config.intermediate_size).
QFORGE_DECL std::int64_t expert_intermediate_size(const model_config& c, std::string_view* key = nullptr);

/// The name loaders read for a tensor that transformers v5 renames on load, and a v5 save
/// leaves renamed: Mixtral's router `<L>.mlp.gate.weight` is `<L>.block_sparse_moe.gate.weight`
/// (conversion_mapping.py "mixtral" WeightRenaming(".block_sparse_moe.gate", ".mlp.gate"); vLLM
/// mixtral.py MixtralMoE builds it as `{prefix}.gate` under `block_sparse_moe`). Every other
/// name, and every other architecture's, is returned unchanged.
QFORGE_DECL std::string loader_tensor_name(std::string_view name, const model_config& c);

namespace detail {

enum class fused_part { gate_up, down, gate_up_bias, down_bias };

/// Which fused tensor `name` is ("<p>.experts.gate_up_proj" ...), and its prefix "<p>.experts".
QFORGE_DECL std::optional<fused_part> fused_part_of(std::string_view name, std::string& prefix);

/// For a layout read in one orientation only ([E, H, 2I] / [E, I, H]): the config's sizes must
/// be known and must not also fit the transposed shape (then which one the file holds is a guess).
QFORGE_DECL bool one_orientation(const shape_t& shape, fused_part part, const model_config& c, std::string& why);

/// Mixtral's fused experts are read in transformers' one orientation, gate_up [E, 2I, H] and
/// down [E, H, I] (on disk as in memory: its conversion mapping has no Transpose), told from
/// their transposes by config.json's hidden_size and intermediate_size (MixtralConfig always
/// writes both). Without them, or in the transposed shape ([E, H, 2I] / [E, I, H], the [in, out]
/// orientation of gpt-oss and Qwen3-VL files, e.g. a tool's re-save), which matrix is which
/// would be a guess: refused. Where both orientations have one shape (H == 2I for gate_up,
/// H == I for down) the file is read as transformers reads it, whose model is the reference.
QFORGE_DECL bool mixtral_orientation(const shape_t& shape, fused_part part, const model_config& c, std::string& why);

/// The prefix "<layer>.<block>.experts" the pieces of the fused tensor under `prefix` are named
/// with: the fused tensor's own, or with the block the architecture's loaders read.
QFORGE_DECL std::string piece_prefix(const std::string& prefix, const expert_piece_names& names);

}  // namespace detail

/// The most experts one fused tensor may hold (the largest released models have 384).
inline constexpr std::int64_t max_fused_experts = 65536;

/// True when `name` is a fused expert tensor (by name; the shape is checked by split_fused_experts).
QFORGE_DECL bool is_fused_expert_tensor(std::string_view name);

/// The per-expert pieces of the fused tensor `name` [shape], or an empty list and `why`.
QFORGE_DECL std::vector<expert_piece> split_fused_experts(std::string_view name, const shape_t& shape,
                                                          const model_config& c, std::string& why);

/// Bytes of one expert's block [A, B] (or [N]) of the fused tensor `v`.
QFORGE_DECL std::uint64_t expert_block_bytes(const tensor_view& v);

/// Copies one cut out of the fused tensor `v` (its full [E, A, B] or [E, N] view) into an owned
/// tensor `name` of `shape`, in the source dtype (bytes as they are: nothing is rounded).
namespace detail {

/// dst[r][k] = src[k * stride + first + r * step] for r < rows, k < cols, elements of type T:
/// the transposed cut, in tiles so that both sides stay in cache (a [in, out] expert is read
/// down its columns).
template <class T>
void gather_transposed(const std::byte* src, std::int64_t stride, std::int64_t first, std::int64_t step, std::int64_t rows,
                       std::int64_t cols, std::byte* dst) noexcept {
    constexpr std::int64_t tile = 32;
    for (std::int64_t r0 = 0; r0 < rows; r0 += tile)
        for (std::int64_t k0 = 0; k0 < cols; k0 += tile)
            for (std::int64_t r = r0; r < std::min(rows, r0 + tile); ++r) {
                const std::int64_t col = first + r * step;
                for (std::int64_t k = k0; k < std::min(cols, k0 + tile); ++k) {
                    T x;
                    std::memcpy(&x, src + static_cast<std::size_t>(k * stride + col) * sizeof(T), sizeof(T));
                    std::memcpy(dst + static_cast<std::size_t>(r * cols + k) * sizeof(T), &x, sizeof(T));
                }
            }
}

}  // namespace detail

QFORGE_DECL owned_tensor gather_expert(const tensor_view& v, const expert_cut& cut, const std::string& name,
                                       const shape_t& shape);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL std::string_view known_fused_expert_architectures() noexcept {
    return "qwen3_moe (Qwen3MoeForCausalLM) and qwen3_5_moe (Qwen3_5MoeForConditionalGeneration): [E, 2I, H] gate "
           "then up; mixtral (MixtralForCausalLM): [E, 2I, H] w1 then w3; gpt_oss (GptOssForCausalLM): [E, H, 2I] "
           "gate/up interleaved; qwen3_vl_moe (Qwen3VLMoeForConditionalGeneration): [E, H, 2I] gate then up";
}

namespace detail {

QFORGE_DECL bool is_architecture(const model_config& c, std::string_view type, std::string_view arch) {
    if (c.model_type == type) return true;
    for (const auto& a : c.architectures)
        if (a == arch) return true;
    return false;
}

}  // namespace detail

QFORGE_DECL std::optional<fused_expert_layout> fused_expert_layout_for(const model_config& c, std::string& why) {
    auto is = [&](std::string_view type, std::string_view arch) { return detail::is_architecture(c, type, arch); };
    if (is("qwen3_moe", "Qwen3MoeForCausalLM")) return fused_expert_layout::out_in_concat;
    if (is("qwen3_5_moe", "Qwen3_5MoeForConditionalGeneration") || is("qwen3_5_moe_text", "Qwen3_5MoeForCausalLM"))
        return fused_expert_layout::out_in_concat;
    if (is_mixtral(c)) return fused_expert_layout::out_in_concat;
    if (is("gpt_oss", "GptOssForCausalLM")) return fused_expert_layout::in_out_strided;
    if (is("qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration")) return fused_expert_layout::in_out_concat;
    std::string archs;
    for (const auto& a : c.architectures) archs += (archs.empty() ? "" : ", ") + a;
    why = "fused 3-D experts of model_type '" + c.model_type + "' (architectures [" + archs +
          "]) have no verified orientation rule in qforge; splitting them on a guess would corrupt "
          "every expert silently. Known: " +
          std::string(known_fused_expert_architectures());
    return std::nullopt;
}

QFORGE_DECL expert_piece_names expert_piece_names_for(const model_config& c) {
    if (is_mixtral(c)) return {"block_sparse_moe", "w1", "w3", "w2"};
    return {};
}

QFORGE_DECL std::int64_t expert_intermediate_size(const model_config& c, std::string_view* key) {
    const bool mixtral = is_mixtral(c);
    if (key) *key = mixtral ? "intermediate_size" : "moe_intermediate_size";
    return mixtral ? c.intermediate_size : c.moe_intermediate_size;
}

QFORGE_DECL std::string loader_tensor_name(std::string_view name, const model_config& c) {
    constexpr std::string_view v5_router = ".mlp.gate.weight";
    if (!is_mixtral(c) || !name.ends_with(v5_router)) return std::string(name);
    return std::string(name.substr(0, name.size() - v5_router.size())) + ".block_sparse_moe.gate.weight";
}

namespace detail {

QFORGE_DECL std::optional<fused_part> fused_part_of(std::string_view name, std::string& prefix) {
    static constexpr std::pair<std::string_view, fused_part> leaves[] = {
        {".experts.gate_up_proj", fused_part::gate_up},
        {".experts.down_proj", fused_part::down},
        {".experts.gate_up_proj_bias", fused_part::gate_up_bias},
        {".experts.down_proj_bias", fused_part::down_bias},
        // some re-saves add a ".weight" to the parameter name
        {".experts.gate_up_proj.weight", fused_part::gate_up},
        {".experts.down_proj.weight", fused_part::down}};
    for (const auto& [leaf, part] : leaves)
        if (name.size() > leaf.size() && name.ends_with(leaf)) {
            prefix = std::string(name.substr(0, name.size() - leaf.size())) + ".experts";
            return part;
        }
    return std::nullopt;
}

QFORGE_DECL bool one_orientation(const shape_t& shape, fused_part part, const model_config& c, std::string& why) {
    if (c.hidden_size <= 0 || c.moe_intermediate_size <= 0) {
        why = "config.json must give hidden_size and moe_intermediate_size to tell this layout's orientation";
        return false;
    }
    if (shape.size() != 3) return true;  // the shape checks that follow say why
    const std::int64_t H = c.hidden_size, I = c.moe_intermediate_size, n = part == fused_part::gate_up ? 2 * I : I;
    if (H == n) {
        why = "hidden_size equals the " + std::string(part == fused_part::gate_up ? "gate/up" : "intermediate") +
              " size (" + std::to_string(H) + "): [E, H, N] and its transpose have one shape, the orientation would be a guess";
        return false;
    }
    // on disk: gate_up [E, H, 2I], down [E, I, H]; their transposes are the in-memory layout
    const bool gate_up = part == fused_part::gate_up;
    if (gate_up ? (shape[1] == n && shape[2] == H) : (shape[1] == H && shape[2] == n)) {
        why = "shape " + shape_to_string(shape) + " is the transpose of the on-disk layout [E, " +
              std::to_string(gate_up ? H : n) + ", " + std::to_string(gate_up ? n : H) +
              "] transformers loads (conversion_mapping.py: Transpose(1, 2)); not read";
        return false;
    }
    return true;
}

QFORGE_DECL bool mixtral_orientation(const shape_t& shape, fused_part part, const model_config& c, std::string& why) {
    if (c.hidden_size <= 0 || c.intermediate_size <= 0) {
        why = "config.json must give hidden_size and intermediate_size: Mixtral's fused experts are read as "
              "[E, 2I, H] / [E, H, I] (transformers MixtralExperts) and told from their transposes by them";
        return false;
    }
    if (shape.size() != 3) return true;  // the shape checks that follow say why
    const bool gate_up = part == fused_part::gate_up;
    const std::int64_t H = c.hidden_size, n = gate_up ? 2 * c.intermediate_size : c.intermediate_size;
    if (H == n) return true;
    if (gate_up ? (shape[1] == H && shape[2] == n) : (shape[1] == n && shape[2] == H)) {
        why = "shape " + shape_to_string(shape) + " is the transpose of Mixtral's [E, " + std::to_string(gate_up ? n : H) +
              ", " + std::to_string(gate_up ? H : n) +
              "] (transformers MixtralExperts; conversion_mapping.py \"mixtral\" stacks w1/w3/w2 without a "
              "Transpose): an [in, out] re-save, not read";
        return false;
    }
    return true;
}

QFORGE_DECL std::string piece_prefix(const std::string& prefix, const expert_piece_names& names) {
    if (names.block.empty()) return prefix;
    const std::string layer = prefix.substr(0, prefix.size() - std::string_view(".experts").size());
    const std::size_t dot = layer.rfind('.');
    return (dot == std::string::npos ? std::string() : layer.substr(0, dot + 1)) + std::string(names.block) + ".experts";
}

}  // namespace detail

QFORGE_DECL bool is_fused_expert_tensor(std::string_view name) {
    std::string prefix;
    return detail::fused_part_of(name, prefix).has_value();
}

QFORGE_DECL std::vector<expert_piece> split_fused_experts(std::string_view name, const shape_t& shape,
                                                          const model_config& c, std::string& why) {
    std::string prefix;
    const auto part = detail::fused_part_of(name, prefix);
    if (!part) {
        why = "not a fused expert tensor";
        return {};
    }
    const auto layout = fused_expert_layout_for(c, why);
    if (!layout) return {};
    const bool bias = *part == detail::fused_part::gate_up_bias || *part == detail::fused_part::down_bias;
    if (shape.size() != (bias ? 2u : 3u)) {
        why = std::string("a fused expert ") + (bias ? "bias must be [E, N]" : "weight must be 3-D [E, A, B]") +
              ", not " + shape_to_string(shape);
        return {};
    }
    if (bias && *layout != fused_expert_layout::in_out_strided) {
        why = "fused expert biases are only known for gpt_oss";
        return {};
    }
    for (const std::int64_t d : shape)
        if (d <= 0) {
            why = "a fused expert tensor cannot have an empty dimension: " + shape_to_string(shape);
            return {};
        }
    const std::int64_t E = shape[0];
    if (E > max_fused_experts) {  // one plan item per expert and matrix: bound what a header can ask for
        why = "holds " + std::to_string(E) + " experts, more than qforge accepts (" + std::to_string(max_fused_experts) + ")";
        return {};
    }
    if (E <= 0 || (c.num_experts > 0 && E != c.num_experts)) {
        why = "holds " + std::to_string(E) + " experts but config.json says " + std::to_string(c.num_experts);
        return {};
    }
    // Output [rows, cols] (rows = out features) of each piece, and how it is read.
    const bool strided = *layout != fused_expert_layout::out_in_concat;  // stored [in, out]
    const bool interleaved = *layout == fused_expert_layout::in_out_strided;
    if (*layout == fused_expert_layout::in_out_concat && !detail::one_orientation(shape, *part, c, why)) return {};
    if (is_mixtral(c) && !detail::mixtral_orientation(shape, *part, c, why)) return {};
    const std::int64_t a = shape[1], b = bias ? 0 : shape[2];
    const bool gate_up = *part == detail::fused_part::gate_up || *part == detail::fused_part::gate_up_bias;
    const std::int64_t two_i = bias ? a : (strided ? b : a);  // the dim that holds gate and up
    const std::int64_t other = bias ? 0 : (strided ? a : b);
    if (gate_up && (two_i <= 0 || two_i % 2 != 0)) {
        why = "the gate/up dimension " + std::to_string(two_i) + " of " + shape_to_string(shape) + " is not even";
        return {};
    }
    const std::int64_t I = gate_up ? two_i / 2 : (bias ? 0 : (strided ? a : b));
    std::string_view size_key;
    const std::int64_t config_i = expert_intermediate_size(c, &size_key);
    if (config_i > 0 && !bias && I != config_i) {
        why = "per-expert intermediate size " + std::to_string(I) + " of " + shape_to_string(shape) +
              " differs from config.json's " + std::string(size_key) + " " + std::to_string(config_i);
        return {};
    }
    if (!bias && c.hidden_size > 0 && (gate_up ? other : (strided ? b : a)) != c.hidden_size) {
        why = "hidden size of " + shape_to_string(shape) + " differs from config.json's hidden_size " +
              std::to_string(c.hidden_size);
        return {};
    }
    const expert_piece_names names = expert_piece_names_for(c);
    const std::string named = detail::piece_prefix(prefix, names);
    std::vector<expert_piece> out;
    for (std::int64_t e = 0; e < E; ++e) {
        const std::string p = named + "." + std::to_string(e) + ".";
        const std::string suffix = bias ? ".bias" : ".weight";
        if (gate_up) {
            for (int which = 0; which < 2; ++which) {  // 0 gate, 1 up
                expert_cut cut{e, strided, interleaved ? which : which * I, interleaved ? 2 : 1};
                shape_t s = bias ? shape_t{I} : shape_t{I, other};
                out.push_back({p + std::string(which == 0 ? names.gate : names.up) + suffix, std::move(s), cut});
            }
        } else {
            const std::int64_t H = bias ? a : (strided ? b : a);
            shape_t s = bias ? shape_t{H} : shape_t{H, strided ? a : b};
            out.push_back({p + std::string(names.down) + suffix, std::move(s), expert_cut{e, strided, 0, 1}});
        }
    }
    return out;
}

QFORGE_DECL std::uint64_t expert_block_bytes(const tensor_view& v) {
    if (v.shape.empty() || v.shape[0] <= 0) return 0;
    return static_cast<std::uint64_t>(checked_numel(v.shape, {}, v.name) / v.shape[0]) * dtype_size(v.type);
}

QFORGE_DECL owned_tensor gather_expert(const tensor_view& v, const expert_cut& cut, const std::string& name,
                                       const shape_t& shape) {
    const std::size_t es = dtype_size(v.type);
    const bool bias = v.shape.size() == 2;
    const std::int64_t A = v.shape.at(1), B = bias ? 1 : v.shape.at(2);
    const std::int64_t rows = shape.at(0), cols = bias ? 1 : shape.at(1);
    if (es == 0 || cut.expert < 0 || cut.expert >= v.shape.at(0))
        fail<shape_error>({}, name, "expert cut outside the fused tensor");
    owned_tensor out{name, v.type, shape,
                     std::vector<std::byte>(static_cast<std::size_t>(checked_numel(shape, {}, name)) * es)};
    const std::byte* base = v.bytes.data() + static_cast<std::size_t>(cut.expert * A * B) * es;
    std::byte* dst = out.bytes.data();
    if (cut.transposed && !bias) {  // [in, out] source: element (k, first + r * step)
        switch (es) {
            case 1: detail::gather_transposed<std::uint8_t>(base, B, cut.first, cut.step, rows, cols, dst); return out;
            case 2: detail::gather_transposed<std::uint16_t>(base, B, cut.first, cut.step, rows, cols, dst); return out;
            case 4: detail::gather_transposed<std::uint32_t>(base, B, cut.first, cut.step, rows, cols, dst); return out;
            case 8: detail::gather_transposed<std::uint64_t>(base, B, cut.first, cut.step, rows, cols, dst); return out;
            default: fail<shape_error>({}, name, "no expert cut for elements of " + std::to_string(es) + " bytes");
        }
    }
    for (std::int64_t r = 0; r < rows; ++r)
        std::memcpy(dst + static_cast<std::size_t>(r * cols) * es,
                    base + static_cast<std::size_t>((cut.first + r * cut.step) * B) * es, static_cast<std::size_t>(cols) * es);
    return out;
}

}  // namespace qforge
#endif
