// Per-tensor GGUF type choice: a bulk type or a llama-quantize-like mix (Q4_K_M ...), overrides
// by exact name or regex, F32 for 1-D tensors and norms, and an explicit, reported fallback when
// a row length is not a multiple of the block size.
//
// Mixes follow LC src/llama-quant.cpp llama_tensor_get_type for the tensors that rule changes
// most (output.weight, attn_v, ffn_down, attn_output); its rarer rules (MoE, GQA-8 models,
// IQ types, token_embd for Q2_K) are not modelled. Fallbacks follow the same file: a K-quant
// whose ne[0] is not a multiple of 256 becomes a 32-block type (Q2_K/Q3_K -> IQ4_NL,
// Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0), and a 32-block type whose ne[0] is not a multiple
// of 32 becomes F16.
#pragma once

#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/error.hpp"
#include "qforge/layout/gguf/blocks.hpp"

namespace qforge::gguf {

/// A named file type: the bulk type plus the mix rules of its preset.
struct file_type {
    std::string name;       // "Q4_K_M", "Q8_0", "F16" ...
    ggml_type base = ggml_type::f16;
    std::uint32_t llama_ftype = 1;  // general.file_type (LlamaFileType)
};

/// Presets and plain types accepted by --type (case-insensitive).
inline std::optional<file_type> parse_file_type(std::string_view s) {
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
        // plain K types: the base type everywhere (except the output rule), ftype of the _M mix
        {"Q3_K", ggml_type::q3_k, 12},  {"Q4_K", ggml_type::q4_k, 15},  {"Q5_K", ggml_type::q5_k, 17},
    };
    std::string up(s);
    for (auto& c : up)
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    for (const auto& r : rows)
        if (up == r.name) return file_type{std::string(r.name), r.base, r.ftype};
    return std::nullopt;
}

/// A user override: tensors whose GGUF name equals `pattern`, or (is_regex) fully matches it.
struct type_override {
    std::string pattern;
    ggml_type type = ggml_type::f16;
    bool is_regex = false;
};

/// Parses a command-line override: "NAME=TYPE" (exact GGUF tensor name) or "re:REGEX=TYPE"
/// (the regex must match the whole name), TYPE a ggml type name such as Q6_K or F16.
inline type_override parse_override(std::string_view spec) {
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

/// The decision for one tensor.
struct type_decision {
    ggml_type requested = ggml_type::f32;
    ggml_type chosen = ggml_type::f32;
    std::string fallback;  // empty, or why `chosen` differs from `requested`
};

namespace detail {

/// llama-quant.cpp use_more_bits: the first and last eighth of layers and every third between.
inline bool use_more_bits(int i_layer, int n_layers) noexcept {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

inline bool ends_with(std::string_view s, std::string_view t) noexcept { return s.ends_with(t); }

/// The mix's type for a tensor before overrides and fallbacks.
inline ggml_type mix_type(const file_type& ft, std::string_view name, int layer, int n_layers) {
    const ggml_type base = ft.base;
    const bool quantized = base != ggml_type::f32 && base != ggml_type::f16 && base != ggml_type::bf16;
    if (!quantized) return base;
    if (name == "output.weight") return base == ggml_type::q8_0 ? base : ggml_type::q6_k;
    const std::string_view n = ft.name;
    if (ends_with(name, "attn_v.weight")) {
        if (n == "Q2_K") return ggml_type::q4_k;  // Q2_K: attn_v Q4_K (n_gqa < 8)
        if (n == "Q3_K_M") return layer < 2 ? ggml_type::q5_k : ggml_type::q4_k;
        if (n == "Q3_K_L") return ggml_type::q5_k;
        if ((n == "Q4_K_M" || n == "Q5_K_M") && use_more_bits(layer, n_layers)) return ggml_type::q6_k;
        if (n == "Q4_K_S" && layer < 4) return ggml_type::q5_k;
        return base;
    }
    if (ends_with(name, "ffn_down.weight")) {
        if (n == "Q2_K") return ggml_type::q3_k;
        if (n == "Q3_K_M") return layer < n_layers / 16 ? ggml_type::q5_k
                                  : use_more_bits(layer, n_layers) ? ggml_type::q4_k : ggml_type::q3_k;
        if (n == "Q3_K_L") return ggml_type::q5_k;
        if ((n == "Q4_K_M" || n == "Q5_K_M") && use_more_bits(layer, n_layers)) return ggml_type::q6_k;
        if (n == "Q4_K_S" && layer < n_layers / 8) return ggml_type::q5_k;
        return base;
    }
    if (ends_with(name, "attn_output.weight")) {
        if (n == "Q2_K") return ggml_type::q3_k;
        if (n == "Q3_K_M") return ggml_type::q4_k;
        if (n == "Q3_K_L") return ggml_type::q5_k;
        return base;
    }
    return base;
}

/// K-quant -> 32-block type -> F16 when ne[0] does not divide (llama-quant.cpp fallback).
inline ggml_type fallback_for(ggml_type t) noexcept {
    switch (t) {
        case ggml_type::q2_k: case ggml_type::q3_k: return ggml_type::iq4_nl;
        case ggml_type::q4_k: return ggml_type::q5_0;
        case ggml_type::q5_k: return ggml_type::q5_1;
        case ggml_type::q6_k: return ggml_type::q8_0;
        default: return ggml_type::f16;
    }
}

}  // namespace detail

/// Chooses the type of one tensor. `ne0` is the row length (GGUF ne[0]); `n_dims` its rank.
inline type_decision choose_type(const file_type& ft, const std::vector<type_override>& overrides,
                                 const std::string& gguf_name, int n_dims, std::int64_t ne0, int layer,
                                 int n_layers) {
    type_decision d;
    // convert_hf_to_gguf: 1-D tensors and norms stay F32 (llama.cpp needs F32 norms).
    const bool keep_f32 = n_dims <= 1 || detail::ends_with(gguf_name, "_norm.weight");
    d.requested = keep_f32 ? ggml_type::f32 : detail::mix_type(ft, gguf_name, layer, n_layers);
    if (!keep_f32) {
        for (const auto& o : overrides) {
            bool hit = false;
            if (o.is_regex) {
                try {
                    hit = std::regex_match(gguf_name, std::regex(o.pattern));
                } catch (const std::regex_error& e) {
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
    while (ne0 % traits_of(d.chosen).block_elems != 0) {
        const ggml_type next = detail::fallback_for(d.chosen);
        d.fallback += std::string(d.fallback.empty() ? "" : "; ") + "row length " + std::to_string(ne0) +
                      " is not a multiple of the " + std::string(type_name(d.chosen)) + " block (" +
                      std::to_string(traits_of(d.chosen).block_elems) + "): " + std::string(type_name(next));
        d.chosen = next;
    }
    return d;
}

}  // namespace qforge::gguf
