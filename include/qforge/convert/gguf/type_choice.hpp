// Per-tensor GGUF type choice: a bulk type or a llama-quantize mix (Q4_K_M ...) with exactly
// llama-quantize's per-tensor types, overrides by exact name or regex, F32 for 1-D tensors,
// norms and MoE routers, and an explicit, reported fallback when a row length is not a
// multiple of the block size.
//
// The mixes follow llama.cpp b4753 (2025-02-21, one day after c392e509, the revision the GGUF
// golden blocks come from): LC src/llama-quant.cpp llama_tensor_get_type and
// llama_model_quantize_impl, for every --type qforge offers: the output head (and token_embd
// when the model is tied: `!qs.has_output && name == token_embd`), attn_v (Q2_K by
// n_gqa() >= 4, Q3_K_M's first two layers, IQ4_NL by n_gqa() >= 4, use_more_bits for the _K_M
// mixes, Q4_K_S's first four, LLM_TYPE_70B, n_expert == 8), attn_k (n_expert == 8), ffn_down
// (Q2_K, Q3_K_M's first sixteenth, Q3_K_L, use_more_bits, IQ4_NL's and Q4_K_S's first eighth,
// the imatrix rule of Q4_0/Q5_0) and attn_output (n_expert == 8, Q2_K, Q3_K_M, Q3_K_L). Q3_K,
// Q4_K and Q5_K are llama-quantize's aliases of the _M mixes (LC examples/quantize/quantize.cpp
// QUANT_OPTIONS). The IQ1/IQ2/IQ3/TQ/Q2_K_S mixes are not offered. Fallbacks are the same
// file's: a K-quant whose ne[0] is not a multiple of 256 becomes Q2_K/Q3_K -> IQ4_NL,
// Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, then F16 when that block does not divide either
// (newer llama.cpp maps Q2_K/Q3_K to Q4_0 instead). Where llama-quantize has no fallback and
// stops ("Unsupported tensor size encountered": a 32-block type on a row that is not a multiple
// of 32), qforge writes F16 and says so in the tensor's fallback text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/regex.hpp"
#include "qforge/layout/gguf/blocks.hpp"

namespace qforge::gguf {

/// A named file type: the bulk type plus the mix rules of its preset.
struct file_type {
    std::string name;       // "Q4_K_M", "Q8_0", "F16" ...
    ggml_type base = ggml_type::f16;
    std::uint32_t llama_ftype = 1;  // general.file_type (LlamaFileType)
};

/// Presets and plain types accepted by --type (case-insensitive).
QFORGE_DECL std::optional<file_type> parse_file_type(std::string_view s);

/// A user override: tensors whose GGUF name equals `pattern`, or (is_regex) fully matches it.
struct type_override {
    std::string pattern;
    ggml_type type = ggml_type::f16;
    bool is_regex = false;
};

/// Parses a command-line override: "NAME=TYPE" (exact GGUF tensor name) or "re:REGEX=TYPE"
/// (the regex must match the whole name), TYPE a ggml type name such as Q6_K or F16.
QFORGE_DECL type_override parse_override(std::string_view spec);

/// LLAMA_FTYPE_MOSTLY_MXFP4_MOE (38; LC tools/quantize/quantize.cpp QUANT_OPTIONS "MXFP4_MOE"):
/// llama-quant.cpp llama_tensor_get_type_impl gives the output head Q8_0 (`if (ftype ==
/// LLAMA_FTYPE_MOSTLY_MXFP4_MOE) new_type = GGML_TYPE_Q8_0;` in the OUTPUT branch) and every
/// other quantized tensor, the token embedding included, MXFP4 when `tensor->ne[2] > 1` (the
/// merged experts ffn_{gate,up,down}_exps) and Q8_0 otherwise.
inline constexpr std::uint32_t mxfp4_moe_ftype = 38;
inline ggml_type mxfp4_moe_type(int n_dims) noexcept { return n_dims >= 3 ? ggml_type::mxfp4 : ggml_type::q8_0; }

/// The decision for one tensor.
struct type_decision {
    ggml_type requested = ggml_type::f32;
    ggml_type chosen = ggml_type::f32;
    std::string fallback;  // empty, or why `chosen` differs from `requested`
};

/// What llama-quantize knows of the model when it picks a mix's types: the hparams it reads
/// (LC src/llama-quant.cpp llama_tensor_get_type: n_gqa(), n_expert, model.type) and the state
/// it gathers first (quantize_state_impl: has_output, has_imatrix).
struct mix_model {
    std::string arch = "llama";  // general.architecture
    int n_layer = 0;
    int n_head = 0, n_head_kv = 0;
    int n_expert = 0;            // {arch}.expert_count; 0 for a dense model
    bool has_output = true;      // output.weight exists; false: token_embd doubles as the head
    bool has_imatrix = false;    // an importance matrix is given (for any tensor)

    /// llama_hparams::n_gqa(): n_head / n_head_kv, 0 without KV heads.
    int n_gqa() const noexcept { return n_head_kv > 0 ? n_head / n_head_kv : 0; }
};

/// llama.cpp's model.type == LLM_TYPE_70B (LC src/llama-model.cpp load_hparams): for llama an
/// 80-layer GQA model that is not an 8-expert one, for qwen2 any 80-layer model; qwen3 and
/// qwen3moe have no 70B type (their switches stop at 64 and 94 layers with other types).
QFORGE_DECL bool llama_model_is_70b(const mix_model& m);

namespace detail {

/// llama-quant.cpp use_more_bits: the first and last eighth of layers and every third between.
QFORGE_DECL bool use_more_bits(int i_layer, int n_layers) noexcept;

inline bool has(std::string_view s, std::string_view t) noexcept { return s.find(t) != std::string_view::npos; }

/// LlamaFileType ids (LC gguf-py/gguf/constants.py, include/llama.h llama_ftype).
namespace ftype {
inline constexpr std::uint32_t q4_0 = 2, q8_0 = 7, q5_0 = 8, q2_k = 10, q3_k_s = 11, q3_k_m = 12, q3_k_l = 13,
                               q4_k_s = 14, q4_k_m = 15, q5_k_m = 17, iq4_nl = 25;
}

/// attn_v: `layer` is llama-quantize's i_attention_wv, which equals the block index because its
/// tensors are visited sorted by block (llama-model-loader.h weight_name_comparer) and every
/// block of these architectures has one attn_v; n_attention_wv is then n_layer.
QFORGE_DECL ggml_type attn_v_type(std::uint32_t f, ggml_type t, int layer, const mix_model& m);

/// ffn_down: `layer` is i_ffn_down (the block index for the same reason; MoE models parse it
/// from the name) and n_ffn_down is n_layer. No architecture here is Falcon.
QFORGE_DECL ggml_type ffn_down_type(std::uint32_t f, ggml_type t, int layer, const mix_model& m);

QFORGE_DECL ggml_type attn_output_type(std::uint32_t f, ggml_type t, const mix_model& m);

/// The mix's type for a 2-D/3-D weight before overrides and fallbacks (llama_tensor_get_type up
/// to its shape check). `ne0` is the row length, `layer` the block index (-1 for globals).
QFORGE_DECL ggml_type mix_type(const file_type& ft, std::string_view name, std::int64_t ne0, int layer, const mix_model& m);

/// llama-quant.cpp's fallback when ne[0] does not divide the block: the K-quant ladder, or
/// nothing (llama-quantize stops: "Unsupported tensor size encountered").
QFORGE_DECL std::optional<ggml_type> fallback_for(ggml_type t) noexcept;

QFORGE_DECL std::string fallback_text(std::int64_t ne0, ggml_type from, ggml_type to, bool refused_by_llama);

}  // namespace detail

/// Chooses the type of one tensor. `ne0` is the row length (GGUF ne[0]); `n_dims` its rank;
/// `layer` the block index (-1 for global tensors); `model` what llama-quantize would know.
QFORGE_DECL type_decision choose_type(const file_type& ft, const std::vector<type_override>& overrides,
                                      const std::string& gguf_name, int n_dims, std::int64_t ne0, int layer,
                                      const mix_model& model);

}  // namespace qforge::gguf

#if QFORGE_BODIES_HERE

namespace qforge::gguf {

QFORGE_DECL std::optional<file_type> parse_file_type(std::string_view s) {
    struct row {
        std::string_view name;
        ggml_type base;
        std::uint32_t ftype;
    };
    static constexpr row rows[] = {
        {"F32", ggml_type::f32, 0},     {"F16", ggml_type::f16, 1},     {"BF16", ggml_type::bf16, 32},
        {"Q4_0", ggml_type::q4_0, 2},   {"Q4_1", ggml_type::q4_1, 3},   {"Q8_0", ggml_type::q8_0, 7},
        {"Q5_0", ggml_type::q5_0, 8},   {"Q5_1", ggml_type::q5_1, 9},   {"Q2_K", ggml_type::q2_k, 10},
        {"Q3_K_S", ggml_type::q3_k, 11}, {"Q3_K_M", ggml_type::q3_k, 12}, {"Q3_K_L", ggml_type::q3_k, 13},
        {"Q4_K_S", ggml_type::q4_k, 14}, {"Q4_K_M", ggml_type::q4_k, 15}, {"Q5_K_S", ggml_type::q5_k, 16},
        {"Q5_K_M", ggml_type::q5_k, 17}, {"Q6_K", ggml_type::q6_k, 18},
        {"IQ4_NL", ggml_type::iq4_nl, 25},
        {"MXFP4_MOE", ggml_type::mxfp4, 38},  // see mxfp4_moe_type
    };
    // llama-quantize's aliases (LC examples/quantize/quantize.cpp QUANT_OPTIONS: "alias for Q4_K_M")
    static constexpr std::pair<std::string_view, std::string_view> aliases[] = {
        {"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};
    std::string up(s);
    for (auto& c : up)
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    for (const auto& [alias, name] : aliases)
        if (up == alias) up = name;
    for (const auto& r : rows)
        if (up == r.name) return file_type{std::string(r.name), r.base, r.ftype};
    return std::nullopt;
}

QFORGE_DECL type_override parse_override(std::string_view spec) {
    const auto eq = spec.rfind('=');
    if (eq == std::string_view::npos || eq == 0 || eq + 1 == spec.size())
        fail<unsupported_error>("", "", "override '" + std::string(spec) + "' is not NAME=TYPE or re:REGEX=TYPE");
    const auto type = type_from_name(spec.substr(eq + 1));
    if (!type) fail<unsupported_error>("", "", "override '" + std::string(spec) + "': unknown GGUF type");
    type_override o;
    o.type = *type;
    o.pattern = std::string(spec.substr(0, eq));
    if (o.pattern.starts_with("re:")) {
        o.is_regex = true;
        o.pattern.erase(0, 3);
    }
    return o;
}

QFORGE_DECL bool llama_model_is_70b(const mix_model& m) {
    if (m.arch == "llama") return m.n_expert != 8 && m.n_layer == 80 && m.n_head != m.n_head_kv;
    if (m.arch == "qwen2") return m.n_layer == 80;
    if (m.arch == "qwen3" || m.arch == "qwen3moe") return false;
    if (m.arch == "gpt-oss") return false;  // LC src/models/openai-moe.cpp: 24 layers 20B, 36 layers 120B, no 70B
    fail<unsupported_error>("", "", "the llama-quantize mixes are not modelled for architecture \"" + m.arch + "\"");
}

namespace detail {

QFORGE_DECL bool use_more_bits(int i_layer, int n_layers) noexcept {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

QFORGE_DECL ggml_type attn_v_type(std::uint32_t f, ggml_type t, int layer, const mix_model& m) {
    const int gqa = m.n_gqa();
    if (f == ftype::q2_k) t = gqa >= 4 ? ggml_type::q4_k : ggml_type::q3_k;
    else if (f == ftype::q3_k_m) t = layer < 2 ? ggml_type::q5_k : ggml_type::q4_k;
    else if (f == ftype::q3_k_l) t = ggml_type::q5_k;
    else if (f == ftype::iq4_nl && gqa >= 4) t = ggml_type::q5_k;
    else if ((f == ftype::q4_k_m || f == ftype::q5_k_m) && use_more_bits(layer, m.n_layer)) t = ggml_type::q6_k;
    else if (f == ftype::q4_k_s && layer < 4) t = ggml_type::q5_k;
    if (llama_model_is_70b(m) && (t == ggml_type::q3_k || t == ggml_type::q4_k)) t = ggml_type::q5_k;
    if (m.n_expert == 8) t = ggml_type::q8_0;
    return t;
}

QFORGE_DECL ggml_type ffn_down_type(std::uint32_t f, ggml_type t, int layer, const mix_model& m) {
    const int n = m.n_layer;
    if (f == ftype::q2_k) return ggml_type::q3_k;
    if (f == ftype::q3_k_m) return layer < n / 16 ? ggml_type::q5_k : ggml_type::q4_k;
    if (f == ftype::q3_k_l) return ggml_type::q5_k;
    if (f == ftype::q4_k_m) return use_more_bits(layer, n) ? ggml_type::q6_k : t;
    if (f == ftype::iq4_nl && layer < n / 8 && !m.has_imatrix) return ggml_type::q5_k;
    if (f == ftype::q5_k_m) return use_more_bits(layer, n) ? ggml_type::q6_k : t;
    if (f == ftype::q4_k_s && layer < n / 8) return ggml_type::q5_k;
    if ((f == ftype::q4_0 || f == ftype::q5_0) && m.has_imatrix && layer < n / 8)
        return f == ftype::q4_0 ? ggml_type::q4_1 : ggml_type::q5_1;
    return t;
}

QFORGE_DECL ggml_type attn_output_type(std::uint32_t f, ggml_type t, const mix_model& m) {
    if (m.n_expert == 8) {
        const bool bumped = f == ftype::q2_k || f == ftype::q3_k_s || f == ftype::q3_k_m || f == ftype::iq4_nl ||
                            f == ftype::q4_k_s || f == ftype::q4_k_m;
        return bumped ? ggml_type::q5_k : t;
    }
    if (f == ftype::q2_k) return ggml_type::q3_k;
    if (f == ftype::q3_k_m) return ggml_type::q4_k;
    if (f == ftype::q3_k_l) return ggml_type::q5_k;
    return t;
}

QFORGE_DECL ggml_type mix_type(const file_type& ft, std::string_view name, std::int64_t ne0, int layer, const mix_model& m) {
    const ggml_type base = ft.base;
    // ggml_is_quantized(default_type) is false for F32/F16/BF16: no mix at all
    if (base == ggml_type::f32 || base == ggml_type::f16 || base == ggml_type::bf16) return base;
    const std::uint32_t f = ft.llama_ftype;
    if (name == "output.weight" || (!m.has_output && name == "token_embd.weight")) {
        if (ne0 % traits_of(base).block_elems != 0) return ggml_type::q8_0;
        return base != ggml_type::q8_0 ? ggml_type::q6_k : base;
    }
    if (name == "token_embd.weight") return base;  // only the IQ1/IQ2/IQ3_XXS/TQ mixes change it
    if (has(name, "attn_v.weight")) return attn_v_type(f, base, layer, m);
    if (has(name, "attn_k.weight")) return m.n_expert == 8 ? ggml_type::q8_0 : base;
    if (has(name, "ffn_down")) return ffn_down_type(f, base, layer, m);
    if (has(name, "attn_output.weight")) return attn_output_type(f, base, m);
    return base;  // attn_q, ffn_gate, ffn_up: only the IQ3 mixes change them
}

QFORGE_DECL std::optional<ggml_type> fallback_for(ggml_type t) noexcept {
    switch (t) {
        case ggml_type::q2_k: case ggml_type::q3_k: return ggml_type::iq4_nl;
        case ggml_type::q4_k: return ggml_type::q5_0;
        case ggml_type::q5_k: return ggml_type::q5_1;
        case ggml_type::q6_k: return ggml_type::q8_0;
        default: return std::nullopt;
    }
}

QFORGE_DECL std::string fallback_text(std::int64_t ne0, ggml_type from, ggml_type to, bool refused_by_llama) {
    std::string s = "row length " + std::to_string(ne0) + " is not a multiple of the " + std::string(type_name(from)) +
                    " block (" + std::to_string(traits_of(from).block_elems) + "): " + std::string(type_name(to));
    if (refused_by_llama) s += " (llama-quantize has no fallback here and refuses the tensor)";
    return s;
}

}  // namespace detail

QFORGE_DECL type_decision choose_type(const file_type& ft, const std::vector<type_override>& overrides,
                                      const std::string& gguf_name, int n_dims, std::int64_t ne0, int layer,
                                      const mix_model& model) {
    type_decision d;
    // convert_hf_to_gguf keeps 1-D tensors, norms, the MoE router (ffn_gate_inp) and every
    // tensor not named .weight (gpt-oss's 2-D expert biases) F32 (TextModel.prepare_tensors), and
    // llama-quantize does not quantize them (llama_model_quantize_impl's `quantize &=` rules).
    const bool keep_f32 = n_dims <= 1 || gguf_name.ends_with("_norm.weight") || detail::has(gguf_name, "ffn_gate_inp.weight") ||
                          !gguf_name.ends_with(".weight");
    d.requested = keep_f32                            ? ggml_type::f32
                  : ft.llama_ftype == mxfp4_moe_ftype ? mxfp4_moe_type(n_dims)
                                                      : detail::mix_type(ft, gguf_name, ne0, layer, model);
    if (!keep_f32) {
        for (const auto& o : overrides) {
            bool hit = false;
            if (o.is_regex) {
                try {
                    hit = regex(o.pattern).matches(gguf_name);
                } catch (const regex_error& e) {
                    fail<unsupported_error>("", gguf_name, "bad override regex '" + o.pattern + "': " + e.what());
                }
            } else {
                hit = gguf_name == o.pattern;
            }
            if (hit) {
                d.requested = o.type;
                break;
            }
        }
    }
    d.chosen = d.requested;
    if (ne0 % traits_of(d.chosen).block_elems == 0) return d;
    const auto next = detail::fallback_for(d.chosen);
    ggml_type t = next.value_or(ggml_type::f16);
    d.fallback = detail::fallback_text(ne0, d.chosen, t, !next);
    if (ne0 % traits_of(t).block_elems != 0) {  // the ladder's type does not divide either: F16
        d.fallback += "; " + detail::fallback_text(ne0, t, ggml_type::f16, false);
        t = ggml_type::f16;
    }
    d.chosen = t;
    return d;
}

}  // namespace qforge::gguf
#endif
