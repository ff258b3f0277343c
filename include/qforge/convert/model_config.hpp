// The few config.json facts a conversion plan needs: head counts and head_dim (to split a
// fused q/k/v projection), intermediate_size (to split gate/up), the expert count (to
// recognise MoE routers), model_type / architectures (to pick the per-architecture rule for
// fused 3-D experts) and whether the output head is tied to the embedding table.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/io/json.hpp"

namespace qforge {

/// config.json's torch_dtype (or `dtype`, the newer transformers key), if it names a float
/// dtype qforge knows.
QFORGE_DECL std::optional<dtype> declared_model_dtype(const json& config);

struct model_config {
    std::int64_t hidden_size = 0;
    std::int64_t intermediate_size = 0;
    std::int64_t num_attention_heads = 0;
    std::int64_t num_key_value_heads = 0;  ///< defaults to num_attention_heads
    std::int64_t head_dim = 0;             ///< defaults to hidden_size / num_attention_heads
    std::int64_t num_experts = 0;          ///< 0 for dense models
    std::int64_t moe_intermediate_size = 0;  ///< per-expert intermediate size, 0 when absent
    std::string model_type;                  ///< "qwen3_moe", "gpt_oss", ... (empty when absent)
    std::vector<std::string> architectures;  ///< "Qwen3MoeForCausalLM", ...
    bool tie_word_embeddings = false;

    /// Reads the keys above from a Hugging Face config.json (also a nested "text_config",
    /// which multimodal models use). Absent keys keep their defaults; a present key of the
    /// wrong type is a format_error naming `file` and the key.
    static model_config from_json(const json& cfg, const std::string& file = "config.json");
};

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL std::optional<dtype> declared_model_dtype(const json& config) {
    if (!config.is_object()) return std::nullopt;
    for (const char* key : {"torch_dtype", "dtype"}) {
        const json* v = config.find(key);
        if (!v || !v->is_string()) continue;
        const std::string& s = v->as_string();
        if (s == "bfloat16") return dtype::BF16;
        if (s == "float16") return dtype::F16;
        if (s == "float32") return dtype::F32;
    }
    return std::nullopt;
}


QFORGE_DECL model_config model_config::from_json(const json& cfg, const std::string& file) {
    const json* text = cfg.find("text_config");
    const json& c = (text && text->is_object() && !cfg.contains("num_attention_heads")) ? *text : cfg;
    auto get_int = [&](const char* key, std::int64_t fallback) -> std::int64_t {
        const json* v = c.find(key);
        if (!v || v->is_null()) return fallback;
        if (!v->is_int() || v->as_int() < 0)
            fail<format_error>(file, {}, std::string("key \"") + key + "\" must be a non-negative integer");
        return v->as_int();
    };
    model_config m;
    m.hidden_size = get_int("hidden_size", 0);
    m.intermediate_size = get_int("intermediate_size", 0);
    m.num_attention_heads = get_int("num_attention_heads", 0);
    m.num_key_value_heads = get_int("num_key_value_heads", m.num_attention_heads);
    m.head_dim = get_int("head_dim", m.num_attention_heads > 0 ? m.hidden_size / m.num_attention_heads : 0);
    m.num_experts = get_int("num_experts", get_int("num_local_experts", get_int("n_routed_experts", 0)));
    m.moe_intermediate_size = get_int("moe_intermediate_size", 0);
    // model_type and architectures name the whole model (the outer config), not its text part.
    for (const json* holder : {&c, &cfg})
        if (const json* t = holder->find("model_type"); t && !t->is_null()) {
            if (!t->is_string()) fail<format_error>(file, {}, "key \"model_type\" must be a string");
            m.model_type = t->as_string();
        }
    if (const json* a = cfg.find("architectures"); a && !a->is_null()) {
        if (!a->is_array()) fail<format_error>(file, {}, "key \"architectures\" must be an array of strings");
        for (const json& name : a->as_array()) {
            if (!name.is_string()) fail<format_error>(file, {}, "key \"architectures\" must be an array of strings");
            m.architectures.push_back(name.as_string());
        }
    }
    // transformers' PretrainedConfig defaults tie_word_embeddings to true.
    m.tie_word_embeddings = true;
    for (const json* holder : {&cfg, &c})
        if (const json* t = holder->find("tie_word_embeddings"); t && !t->is_null()) {
            if (!t->is_bool()) fail<format_error>(file, {}, "key \"tie_word_embeddings\" must be a boolean");
            m.tie_word_embeddings = t->as_bool();
        }
    return m;
}

}  // namespace qforge
#endif
