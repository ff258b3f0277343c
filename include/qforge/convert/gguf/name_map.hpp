// Hugging Face -> GGUF tensor names for the Llama family (llama, mistral, qwen2, qwen3), and
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
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace qforge::gguf {

enum class hf_arch { llama, qwen2, qwen3 };

/// What one HF tensor becomes.
struct mapped_name {
    std::string gguf;
    int layer = -1;           // block index, -1 for global tensors
    int permute_heads = 0;    // > 0: apply the Q/K permutation with this many heads
};

namespace detail {
inline bool parse_layer(std::string_view name, int& layer, std::string_view& rest) {
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
}  // namespace detail

/// The GGUF name of an HF tensor, or nothing for a tensor llama.cpp does not know.
inline std::optional<mapped_name> map_hf_name(std::string_view hf, hf_arch arch, int n_head, int n_head_kv) {
    if (hf == "model.embed_tokens.weight") return mapped_name{"token_embd.weight"};
    if (hf == "model.norm.weight") return mapped_name{"output_norm.weight"};
    if (hf == "lm_head.weight") return mapped_name{"output.weight"};
    int layer = -1;
    std::string_view rest;
    if (!detail::parse_layer(hf, layer, rest)) return std::nullopt;
    enum which : int { all = 0, no_qwen3 = 1, qwen3_only = 2 };
    struct entry {
        std::string_view hf, gguf;
        int heads;  // 1: q (n_head), 2: k (n_head_kv)
        which archs;
    };
    static constexpr entry table[] = {
        {"input_layernorm.weight", "attn_norm.weight", 0, all},
        {"post_attention_layernorm.weight", "ffn_norm.weight", 0, all},
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
        if ((e.archs == no_qwen3 && arch == hf_arch::qwen3) || (e.archs == qwen3_only && arch != hf_arch::qwen3)) return std::nullopt;
        mapped_name m{"blk." + std::to_string(layer) + "." + std::string(e.gguf), layer, 0};
        if (arch == hf_arch::llama) m.permute_heads = e.heads == 1 ? n_head : e.heads == 2 ? n_head_kv : 0;
        return m;
    }
    return std::nullopt;
}

/// Source row of output row r under the Q/K permutation of a tensor with `rows` rows.
inline std::int64_t permuted_source_row(std::int64_t r, std::int64_t rows, int n_heads) noexcept {
    const std::int64_t hd = rows / n_heads;
    const std::int64_t h = r / hd, within = r % hd;
    const std::int64_t i = within / 2, j = within % 2;
    return h * hd + j * (hd / 2) + i;
}

}  // namespace qforge::gguf
