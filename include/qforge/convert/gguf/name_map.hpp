// Hugging Face -> GGUF tensor names for the Llama family (llama, mistral, qwen2, qwen3, and the
// MoE mixtral, qwen3_moe and gpt_oss, whose experts are slices of stacked tensors), and
// llama.cpp's Q/K row permutation.
//
// Names: LC gguf-py/gguf/tensor_mapping.py and src/llama-arch.cpp (formats.md 5.4); Qwen3 adds
// self_attn.q_norm / k_norm -> attn_q_norm / attn_k_norm (ne {head_dim}) and has no q/k/v bias
// (LC src/llama-model.cpp LLM_ARCH_QWEN3 load_tensors creates none, so a file with them is
// refused: "wrong number of tensors").
// Permutation: LC convert_hf_to_gguf.py LlamaModel.permute: Llama/Mistral q_proj (n_head) and
// k_proj (n_head_kv) rows go from HF's half-split RoPE order to GGML's interleaved pairs,
//   out[h*hd + 2i + j] = in[h*hd + j*hd/2 + i]   (i < hd/2, j in {0,1}),
// weights and biases alike, before quantization. Qwen2 and Qwen3 use NEOX RoPE in llama.cpp
// (llama_model_rope_type) and their converters (Qwen2Model, Qwen3Model) do not permute.
// gpt-oss (LC conversion/gpt_oss.py GptOssModel, gguf-py tensor_mapping.py MODEL_TENSORS[GPT_OSS]):
// NEOX RoPE, no permutation; post_attention_layernorm -> post_attention_norm (the arch has no
// ffn_norm), o_proj.bias -> attn_output.bias, self_attn.sinks -> attn_sinks.weight, the router
// mlp.router.{weight,bias} -> ffn_gate_inp.{weight,bias}, and each expert's weights and biases
// -> ffn_{gate,up,down}_exps.{weight,bias} (the fused tensors are cut per expert first,
// convert/fused_experts.hpp; gate = the even rows of gate_up, up = the odd ones, as
// GptOssModel.modify_tensors splits `[:, ::2]` / `[:, 1::2]`).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "qforge/core/config.hpp"

namespace qforge::gguf {

/// The source architectures: llama (also mistral), qwen2, qwen3, and the MoE ones: mixtral
/// (GGUF architecture llama with experts), qwen3moe and gpt_oss (GGUF architecture gpt-oss).
enum class hf_arch { llama, qwen2, qwen3, mixtral, qwen3moe, gpt_oss };

/// The architectures with Qwen3's per-head q/k norms and no q/k/v bias.
constexpr bool has_qk_norm(hf_arch a) noexcept { return a == hf_arch::qwen3 || a == hf_arch::qwen3moe; }
/// The architectures whose Q/K rows llama.cpp's converter permutes (LlamaModel.permute).
constexpr bool permutes_qk(hf_arch a) noexcept { return a == hf_arch::llama || a == hf_arch::mixtral; }
constexpr bool is_moe(hf_arch a) noexcept { return a == hf_arch::mixtral || a == hf_arch::qwen3moe || a == hf_arch::gpt_oss; }

/// What one HF tensor becomes.
struct mapped_name {
    std::string gguf;
    int layer = -1;           // block index, -1 for global tensors
    int permute_heads = 0;    // > 0: apply the Q/K permutation with this many heads
    int expert = -1;          // >= 0: this expert's slice of a stacked 3-D tensor (ne {cols, rows, n_expert})
};

namespace detail {
QFORGE_DECL bool parse_layer(std::string_view name, int& layer, std::string_view& rest);

/// MoE FFN tensors (LC gguf-py/gguf/tensor_mapping.py FFN_GATE_INP, FFN_{GATE,UP,DOWN}_EXP):
/// the router and each expert's slice of the stacked ffn_{gate,up,down}_exps tensors, as
/// convert_hf_to_gguf.py stacks them (LlamaModel for Mixtral's w1/w3/w2, Qwen2MoeModel for
/// Qwen3-MoE's gate_proj/up_proj/down_proj, GptOssModel for gpt-oss's, biases too), expert e
/// at index e of ne[2] (of ne[1] for a bias).
QFORGE_DECL std::optional<mapped_name> map_moe_ffn(std::string_view rest, hf_arch arch, int layer);
}  // namespace detail

/// The GGUF name of an HF tensor, or nothing for a tensor llama.cpp does not know.
QFORGE_DECL std::optional<mapped_name> map_hf_name(std::string_view hf, hf_arch arch, int n_head, int n_head_kv);

/// Source row of output row r under the Q/K permutation of a tensor with `rows` rows.
QFORGE_DECL std::int64_t permuted_source_row(std::int64_t r, std::int64_t rows, int n_heads) noexcept;

}  // namespace qforge::gguf

#if QFORGE_BODIES_HERE

namespace qforge::gguf {
namespace detail {

QFORGE_DECL bool parse_layer(std::string_view name, int& layer, std::string_view& rest) {
    constexpr std::string_view prefix = "model.layers.";
    if (!name.starts_with(prefix)) return false;
    name.remove_prefix(prefix.size());
    const auto dot = name.find('.');
    if (dot == 0 || dot == std::string_view::npos || dot > 6) return false;
    int v = 0;
    for (char c : name.substr(0, dot)) {
        if (c < '0' || c > '9') return false;
        v = v * 10 + (c - '0');
    }
    layer = v;
    rest = name.substr(dot + 1);
    return true;
}

QFORGE_DECL std::optional<mapped_name> map_moe_ffn(std::string_view rest, hf_arch arch, int layer) {
    const std::string blk = "blk." + std::to_string(layer) + ".";
    const std::string_view moe = arch == hf_arch::mixtral ? "block_sparse_moe." : "mlp.";
    if (!rest.starts_with(moe)) return std::nullopt;
    rest.remove_prefix(moe.size());
    const bool gpt_oss = arch == hf_arch::gpt_oss;
    if (rest == (gpt_oss ? "router.weight" : "gate.weight")) return mapped_name{blk + "ffn_gate_inp.weight", layer};
    if (gpt_oss && rest == "router.bias") return mapped_name{blk + "ffn_gate_inp.bias", layer};
    constexpr std::string_view experts = "experts.";
    if (!rest.starts_with(experts)) return std::nullopt;
    rest.remove_prefix(experts.size());
    const auto dot = rest.find('.');
    if (dot == 0 || dot == std::string_view::npos || dot > 6) return std::nullopt;
    int e = 0;
    for (char c : rest.substr(0, dot)) {
        if (c < '0' || c > '9') return std::nullopt;
        e = e * 10 + (c - '0');
    }
    rest.remove_prefix(dot + 1);
    struct entry {
        std::string_view hf, gguf;
    };
    static constexpr entry mixtral[] = {{"w1.weight", "ffn_gate_exps.weight"}, {"w3.weight", "ffn_up_exps.weight"}, {"w2.weight", "ffn_down_exps.weight"}};
    static constexpr entry qwen[] = {{"gate_proj.weight", "ffn_gate_exps.weight"}, {"up_proj.weight", "ffn_up_exps.weight"},
                                     {"down_proj.weight", "ffn_down_exps.weight"}};
    static constexpr entry oss[] = {{"gate_proj.weight", "ffn_gate_exps.weight"}, {"up_proj.weight", "ffn_up_exps.weight"},
                                    {"down_proj.weight", "ffn_down_exps.weight"}, {"gate_proj.bias", "ffn_gate_exps.bias"},
                                    {"up_proj.bias", "ffn_up_exps.bias"},         {"down_proj.bias", "ffn_down_exps.bias"}};
    const std::span<const entry> names = arch == hf_arch::mixtral ? std::span<const entry>(mixtral)
                                         : gpt_oss                ? std::span<const entry>(oss)
                                                                  : std::span<const entry>(qwen);
    for (const auto& x : names)
        if (rest == x.hf) return mapped_name{blk + std::string(x.gguf), layer, 0, e};
    return std::nullopt;
}

}  // namespace detail

QFORGE_DECL std::optional<mapped_name> map_hf_name(std::string_view hf, hf_arch arch, int n_head, int n_head_kv) {
    if (hf == "model.embed_tokens.weight") return mapped_name{"token_embd.weight"};
    if (hf == "model.norm.weight") return mapped_name{"output_norm.weight"};
    if (hf == "lm_head.weight") return mapped_name{"output.weight"};
    int layer = -1;
    std::string_view rest;
    if (!detail::parse_layer(hf, layer, rest)) return std::nullopt;
    if (is_moe(arch)) {
        if (auto m = detail::map_moe_ffn(rest, arch, layer)) return m;
        if (rest.starts_with("mlp.") || rest.starts_with("block_sparse_moe.")) return std::nullopt;  // no dense FFN
    }
    enum which : int { all = 0, no_qwen3 = 1, qwen3_only = 2, gpt_oss_only = 3, not_gpt_oss = 4 };
    struct entry {
        std::string_view hf, gguf;
        int heads;  // 1: q (n_head), 2: k (n_head_kv)
        which archs;
    };
    static constexpr entry table[] = {
        {"input_layernorm.weight", "attn_norm.weight", 0, all},
        {"post_attention_layernorm.weight", "ffn_norm.weight", 0, not_gpt_oss},
        {"post_attention_layernorm.weight", "post_attention_norm.weight", 0, gpt_oss_only},
        {"self_attn.o_proj.bias", "attn_output.bias", 0, gpt_oss_only},
        {"self_attn.sinks", "attn_sinks.weight", 0, gpt_oss_only},
        {"self_attn.q_proj.weight", "attn_q.weight", 1, all},
        {"self_attn.k_proj.weight", "attn_k.weight", 2, all},
        {"self_attn.v_proj.weight", "attn_v.weight", 0, all},
        {"self_attn.o_proj.weight", "attn_output.weight", 0, all},
        {"self_attn.q_proj.bias", "attn_q.bias", 1, no_qwen3},
        {"self_attn.k_proj.bias", "attn_k.bias", 2, no_qwen3},
        {"self_attn.v_proj.bias", "attn_v.bias", 0, no_qwen3},
        {"self_attn.q_norm.weight", "attn_q_norm.weight", 0, qwen3_only},
        {"self_attn.k_norm.weight", "attn_k_norm.weight", 0, qwen3_only},
        {"mlp.gate_proj.weight", "ffn_gate.weight", 0, all},
        {"mlp.up_proj.weight", "ffn_up.weight", 0, all},
        {"mlp.down_proj.weight", "ffn_down.weight", 0, all},
    };
    for (const auto& e : table) {
        if (rest != e.hf) continue;
        const bool oss = arch == hf_arch::gpt_oss;
        if ((e.archs == no_qwen3 && has_qk_norm(arch)) || (e.archs == qwen3_only && !has_qk_norm(arch)) ||
            (e.archs == gpt_oss_only && !oss) || (e.archs == not_gpt_oss && oss))
            continue;
        mapped_name m{"blk." + std::to_string(layer) + "." + std::string(e.gguf), layer, 0};
        if (permutes_qk(arch)) m.permute_heads = e.heads == 1 ? n_head : e.heads == 2 ? n_head_kv : 0;
        return m;
    }
    return std::nullopt;
}

QFORGE_DECL std::int64_t permuted_source_row(std::int64_t r, std::int64_t rows, int n_heads) noexcept {
    const std::int64_t hd = rows / n_heads;
    const std::int64_t h = r / hd, within = r % hd;
    const std::int64_t i = within / 2, j = within % 2;
    return h * hd + j * (hd / 2) + i;
}

}  // namespace qforge::gguf
#endif
