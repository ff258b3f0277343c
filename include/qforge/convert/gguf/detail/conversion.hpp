// The body of convert_hf_to_gguf behind convert/gguf/converter.hpp: the model's hyperparameters
// and metadata keys, the plan of every tensor (names, shapes, types, fallbacks), and the
// stream that reads, permutes, quantizes and appends each one. The dry run and the cluster
// steps use the same plan and stream. converter.hpp includes it where that body is compiled:
// header-only, or in the one QFORGE_IMPLEMENTATION translation unit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/fused_experts.hpp"
#include "qforge/convert/gguf/converter.hpp"
#include "qforge/convert/gguf/name_map.hpp"
#include "qforge/convert/gguf/tokenizer.hpp"
#include "qforge/convert/gguf/type_choice.hpp"
#include "qforge/convert/importance.hpp"
#include "qforge/convert/model_config.hpp"
#include "qforge/convert/mxfp4_source.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/core/cache_aligned.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/io/gguf/imatrix.hpp"
#include "qforge/io/gguf/writer.hpp"
#include "qforge/io/json.hpp"
#include "qforge/layout/gguf/quantize.hpp"
#include "qforge/quant/snr.hpp"
#include "qforge/simd/group_kernels.hpp"

namespace qforge::gguf {

namespace detail {

struct planned_tensor {
    std::string hf;
    mapped_name map;
    dtype src_type;
    shape_t shape;                   // of one source tensor (one expert's for a stacked one)
    tensor_decl decl;
    type_decision decision;
    std::vector<std::string> parts;  // the source tensors in ne[2] order: {hf}, or expert 0..E-1
    /// Per part: the expert's cut when the part is a slice of a fused 3-D source (parts[e] then
    /// names the fused tensor, convert/fused_experts.hpp), else nullopt.
    std::vector<std::optional<expert_cut>> cuts;
    /// --repack from a packed MXFP4 source: per part, the packed weight copied into MXFP4 blocks
    /// (all parts or none); empty for a tensor read as floats.
    std::vector<std::optional<mxfp4_packed_weight>> packed;
    bool is_packed() const noexcept { return !packed.empty(); }
};

/// The GGUF architecture name llama.cpp loads each source architecture as.
inline std::string gguf_arch_name(hf_arch a) {
    switch (a) {
        case hf_arch::llama: case hf_arch::mixtral: return "llama";
        case hf_arch::qwen2: return "qwen2";
        case hf_arch::qwen3: return "qwen3";
        case hf_arch::qwen3moe: return "qwen3moe";
        case hf_arch::gpt_oss: return "gpt-oss";
    }
    return "llama";
}

inline std::int64_t cfg_int(const json& cfg, const std::string& file, const char* key, std::int64_t fallback, bool required) {
    const json* v = cfg.find(key);
    if (!v || v->is_null()) {
        if (required) fail<format_error>(file, "", std::string("config.json lacks \"") + key + "\"");
        return fallback;
    }
    if (!v->is_int() || v->as_int() <= 0 || v->as_int() > 0xFFFFFFFF)
        fail<format_error>(file, "", std::string("\"") + key + "\" must be a positive integer");
    return v->as_int();
}

inline double cfg_num(const json& cfg, const std::string& file, const char* key, double fallback) {
    const json* v = cfg.find(key);
    if (!v || v->is_null()) return fallback;
    if (!v->is_number()) fail<format_error>(file, "", std::string("\"") + key + "\" must be a number");
    return v->as_double();
}

inline hf_arch detect_arch(const json& cfg, const std::string& file) {
    const json* mt = cfg.find("model_type");
    const std::string t = mt && mt->is_string() ? mt->as_string() : "";
    if (t == "llama" || t == "mistral") return hf_arch::llama;
    if (t == "qwen2") return hf_arch::qwen2;
    if (t == "qwen3") return hf_arch::qwen3;
    if (t == "mixtral") return hf_arch::mixtral;
    if (t == "qwen3_moe") return hf_arch::qwen3moe;
    if (t == "gpt_oss") return hf_arch::gpt_oss;
    fail<unsupported_error>(file, "", "model_type \"" + t + "\" is not a Llama-family model (llama, mistral, qwen2, qwen3, mixtral, qwen3_moe, gpt_oss)");
}

/// Whether llama-quantize would quantize to `t` (and so hand it the imatrix).
inline bool is_block_quantized(ggml_type t) noexcept {
    return t != ggml_type::f32 && t != ggml_type::f16 && t != ggml_type::bf16;
}

/// llama-quantize's record of the imatrix it used (LC tools/quantize/quantize.cpp: the
/// strings are cut to 127 bytes (val_str), INT overrides are written UINT32 (src/llama-quant.cpp)).
inline void add_imatrix_keys(kv_list& kvs, const std::string& file, const importance_matrix& m) {
    kvs.emplace_back("quantize.imatrix.file", value::str(file.substr(0, 127)));
    if (!m.datasets().empty()) kvs.emplace_back("quantize.imatrix.dataset", value::str(m.datasets().front().substr(0, 127)));
    kvs.emplace_back("quantize.imatrix.entries_count", value::u32(static_cast<std::uint32_t>(m.size())));
    if (m.chunk_count() > 0) kvs.emplace_back("quantize.imatrix.chunks_count", value::u32(m.chunk_count()));
}

/// The importance one tensor is quantized with: the user's hook, or the imatrix entry of its
/// GGUF name through the one imatrix lookup (convert/importance.hpp; llama-quantize:
/// `imatrix_data->find(name)`, used when its size is ne[0] * ne[2], matrix e for expert e of a
/// stacked tensor; another size throws, except for token_embd, LC src/llama-quant.cpp). The
/// hook may give ne[0] values (every matrix) or ne[0] * ne[2]. Valid until the next lookup.
class tensor_importance {
public:
    tensor_importance(const convert_options& opt, importance_lookup* file, const tensor_decl& t)
        : cols_(t.ne[0]), n_mat_(t.ne.size() == 3 ? t.ne[2] : 1) {
        if (opt.imatrix) {
            if (const std::vector<float>* v = opt.imatrix(t.name)) {
                const auto n = static_cast<std::int64_t>(v->size());
                if (n != cols_ && n != cols_ * n_mat_)
                    fail<shape_error>("", t.name, "imatrix has " + std::to_string(v->size()) + " entries, rows have " + std::to_string(cols_));
                values_ = *v;
                per_matrix_ = n_mat_ > 1 && n == cols_ * n_mat_;
            }
            return;
        }
        if (!file || !is_block_quantized(t.type)) return;
        const imatrix_entry* entry = file->entry(t.name);
        if (!entry) {
            status_ = "not in the imatrix";
        } else if (entry->fits(cols_, n_mat_)) {
            values_ = entry->values;
            per_matrix_ = n_mat_ > 1;
            status_ = "used";
        } else if (t.name == "token_embd.weight") {
            status_ = "imatrix entry has " + std::to_string(entry->values.size()) + " values, not " + std::to_string(t.ne[0]);
        } else {
            fail<shape_error>(file->matrix().path(), t.name, "imatrix size " + std::to_string(entry->values.size()) +
                                                                 " is different from tensor size " + std::to_string(cols_ * n_mat_));
        }
    }
    /// The values for matrix `e` (expert e of a stacked tensor, 0 otherwise), or null.
    const float* data(std::int64_t e = 0) const noexcept {
        return values_.empty() ? nullptr : values_.data() + (per_matrix_ ? e * cols_ : 0);
    }
    const std::string& status() const noexcept { return status_; }

private:
    std::int64_t cols_, n_mat_;
    bool per_matrix_ = false;
    std::span<const float> values_;
    std::string status_;
};

/// llama-quantize's size check for every tensor, before anything is written.
inline void check_imatrix_sizes(const importance_matrix& m, const std::vector<planned_tensor>& plan) {
    for (const auto& p : plan) {
        const auto n = m.value_count(p.decl.name);
        const std::int64_t want = p.decl.ne[0] * (p.decl.ne.size() == 3 ? p.decl.ne[2] : 1);  // ne[0] * ne[2]
        if (n && *n != want && p.decl.name != "token_embd.weight" && is_block_quantized(p.decl.type))
            fail<shape_error>(m.path(), p.decl.name, "imatrix size " + std::to_string(*n) +
                                                         " is different from tensor size " + std::to_string(want));
    }
}

}  // namespace detail

namespace detail {

/// The hyperparameters of config.json the GGUF header and the tensor checks use.
struct model_hparams {
    hf_arch arch = hf_arch::llama;
    std::string arch_name;
    std::int64_t n_embd = 0, n_layer = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ctx = 0;
    double eps = 1e-5, theta = 10000.0;
    // MoE: the expert count, the experts used per token and each expert's FFN width
    // (Mixtral: num_local_experts, intermediate_size; Qwen3-MoE: num_experts, moe_intermediate_size)
    bool moe = false;
    std::int64_t n_expert = 0, n_expert_used = 0, n_ff_exp = 0;
    std::int64_t sliding_window = 0;  // gpt-oss: the window of its sliding-attention layers
};

/// gpt-oss's checks: what llama.cpp's gpt-oss graph fixes rather than reads (LC
/// src/models/openai-moe.cpp: sliding window on the even layers, `ggml_swiglu_oai(gate, up,
/// 1.702f, 7.0f)` constants, an output head) must be what the checkpoint says, else the GGUF
/// would run another model.
inline void check_gpt_oss_config(const json& cfg, const std::string& cfg_file, model_hparams& h) {
    h.sliding_window = cfg_int(cfg, cfg_file, "sliding_window", 0, true);  // openai-moe load_arch_hparams requires it
    if (const json* lt = cfg.find("layer_types"); lt && lt->is_array()) {
        for (std::size_t i = 0; i < lt->size(); ++i) {
            const json& t = lt->at(i);
            const char* want = i % 2 == 0 ? "sliding_attention" : "full_attention";  // llama.cpp: set_swa_pattern(2)
            if (!t.is_string() || t.as_string() != want)
                fail<unsupported_error>(cfg_file, "", "layer_types[" + std::to_string(i) + "] must be \"" + want +
                                                          "\": llama.cpp's gpt-oss slides the even layers and attends fully on the odd ones");
        }
    }
    if (cfg_num(cfg, cfg_file, "swiglu_limit", 7.0) != 7.0)
        fail<unsupported_error>(cfg_file, "", "swiglu_limit must be 7.0: llama.cpp's gpt-oss graph fixes it (ggml_swiglu_oai limit)");
    if (cfg_num(cfg, cfg_file, "swiglu_alpha", 1.702) != 1.702)
        fail<unsupported_error>(cfg_file, "", "swiglu_alpha must be 1.702: llama.cpp's gpt-oss graph fixes it (ggml_swiglu_oai alpha)");
    if (const json* tie = cfg.find("tie_word_embeddings"); tie && tie->is_bool() && tie->as_bool())
        fail<unsupported_error>(cfg_file, "", "tie_word_embeddings: llama.cpp's gpt-oss needs its own output head (output.weight)");
}

/// Reads and checks the hyperparameters llama.cpp's architectures need.
inline model_hparams read_hparams(const json& cfg, const std::string& cfg_file) {
    model_hparams h;
    h.arch = detect_arch(cfg, cfg_file);
    h.arch_name = gguf_arch_name(h.arch);
    h.n_embd = cfg_int(cfg, cfg_file, "hidden_size", 0, true);
    h.n_layer = cfg_int(cfg, cfg_file, "num_hidden_layers", 0, true);
    h.n_ff = cfg_int(cfg, cfg_file, "intermediate_size", 0, true);
    h.n_head = cfg_int(cfg, cfg_file, "num_attention_heads", 0, true);
    h.n_head_kv = cfg_int(cfg, cfg_file, "num_key_value_heads", h.n_head, false);
    h.head_dim = cfg_int(cfg, cfg_file, "head_dim", h.n_embd / h.n_head, false);
    h.n_ctx = cfg_int(cfg, cfg_file, "max_position_embeddings", 2048, false);
    h.eps = cfg_num(cfg, cfg_file, "rms_norm_eps", 1e-5);
    h.theta = cfg_num(cfg, cfg_file, "rope_theta", 10000.0);
    h.moe = is_moe(h.arch);
    const bool local_experts = h.arch == hf_arch::mixtral || h.arch == hf_arch::gpt_oss;
    h.n_expert = !h.moe ? 0 : cfg_int(cfg, cfg_file, local_experts ? "num_local_experts" : "num_experts", 0, true);
    h.n_expert_used = !h.moe ? 0 : cfg_int(cfg, cfg_file, "num_experts_per_tok", 0, true);
    h.n_ff_exp = h.arch == hf_arch::qwen3moe ? cfg_int(cfg, cfg_file, "moe_intermediate_size", 0, true) : h.n_ff;
    if (h.arch == hf_arch::gpt_oss) check_gpt_oss_config(cfg, cfg_file, h);
    if (h.moe && h.n_expert_used > h.n_expert) fail<format_error>(cfg_file, "", "num_experts_per_tok is larger than the expert count");
    // LC src/llama-hparams.h LLAMA_MAX_EXPERTS: 256 in b4753, 1024 in later releases
    if (h.n_expert > 1024) fail<unsupported_error>(cfg_file, "", "llama.cpp loads at most 1024 experts (256 before 2025-03)");
    if (h.arch == hf_arch::qwen3moe) {
        // llama.cpp's qwen3moe has an MoE FFN in every block: no dense layers
        const json* ml = cfg.find("mlp_only_layers");
        const bool dense_layers = ml && ml->is_array() && ml->size() > 0;
        if (dense_layers || cfg_int(cfg, cfg_file, "decoder_sparse_step", 1, false) != 1)
            fail<unsupported_error>(cfg_file, "", "llama.cpp's qwen3moe needs an MoE FFN in every layer (mlp_only_layers empty, decoder_sparse_step 1)");
    }
    if (permutes_qk(h.arch) && h.head_dim * h.n_head != h.n_embd)
        fail<unsupported_error>(cfg_file, "", "llama.cpp's llama architecture needs head_dim * n_head == hidden_size");
    if (h.head_dim % 2 != 0) fail<unsupported_error>(cfg_file, "", "head_dim must be even for the RoPE permutation");
    return h;
}

inline value u32_value(std::int64_t v) { return value::u32(static_cast<std::uint32_t>(v)); }

/// gpt-oss's attention, expert and RoPE keys as LC conversion/gpt_oss.py GptOssModel
/// .set_gguf_parameters and TextModel.set_gguf_parameters write them: key/value_length (head_dim,
/// 64 with hidden 2880), no rope.dimension_count, the sliding window, the expert FFN width, and
/// YaRN as type / factor / original_context_length (+ the betas the config gives; llama.cpp's
/// gpt-oss reads the first three, the rest are ignored where unknown).
inline void add_gpt_oss_kvs(kv_list& kvs, const model_hparams& h, const json& cfg, const std::string& cfg_file) {
    const std::string a = h.arch_name + ".";
    kvs.emplace_back(a + "attention.key_length", u32_value(h.head_dim));
    kvs.emplace_back(a + "attention.value_length", u32_value(h.head_dim));
    kvs.emplace_back(a + "attention.sliding_window", u32_value(h.sliding_window));
    kvs.emplace_back(a + "expert_feed_forward_length", u32_value(h.n_ff_exp));
    const json* rs = cfg.find("rope_parameters");
    if (!rs || !rs->is_object()) rs = cfg.find("rope_scaling");
    if (!rs || !rs->is_object()) return;
    const json* t = rs->find("rope_type");
    if (!t) t = rs->find("type");
    const std::string kind = t && t->is_string() ? t->as_string() : "";
    if (kind == "default" || kind.empty()) return;
    if (kind != "yarn") fail<unsupported_error>(cfg_file, "", "rope_scaling \"" + kind + "\" is not supported for gpt-oss GGUF (yarn is)");
    auto number = [&](const char* key, bool required) -> std::optional<double> {
        const json* v = rs->find(key);
        if (!v || v->is_null()) {
            if (required) fail<format_error>(cfg_file, "", std::string("rope_scaling lacks \"") + key + "\"");
            return std::nullopt;
        }
        if (!v->is_number()) fail<format_error>(cfg_file, "", std::string("rope_scaling \"") + key + "\" must be a number");
        return v->as_double();
    };
    kvs.emplace_back(a + "rope.scaling.type", value::str("yarn"));
    kvs.emplace_back(a + "rope.scaling.factor", value::f32(static_cast<float>(*number("factor", true))));
    const double ctx = *number("original_max_position_embeddings", true);
    if (!(ctx >= 1 && ctx <= 4294967295.0) || ctx != std::floor(ctx))
        fail<format_error>(cfg_file, "", "rope_scaling \"original_max_position_embeddings\" must be a positive 32-bit integer");
    kvs.emplace_back(a + "rope.scaling.original_context_length", u32_value(static_cast<std::int64_t>(ctx)));
    if (auto v = number("beta_fast", false)) kvs.emplace_back(a + "rope.scaling.yarn_beta_fast", value::f32(static_cast<float>(*v)));
    if (auto v = number("beta_slow", false)) kvs.emplace_back(a + "rope.scaling.yarn_beta_slow", value::f32(static_cast<float>(*v)));
}

/// The attention-shape and RoPE keys of the architecture, as llama.cpp's converter writes them.
inline void add_attention_kvs(kv_list& kvs, const model_hparams& h, const json& cfg, const std::string& cfg_file) {
    const std::string a = h.arch_name + ".";
    if (h.arch == hf_arch::gpt_oss) {
        add_gpt_oss_kvs(kvs, h, cfg, cfg_file);
        return;
    }
    if (has_qk_norm(h.arch)) {
        // LC convert_hf_to_gguf.py TextModel.set_gguf_parameters: key/value_length when the
        // config names head_dim (Qwen3's always does: 128 with hidden 1024 and 16 heads);
        // Qwen2Model/Qwen3Model write no rope.dimension_count (llama.cpp's n_rot defaults to
        // the key length, and qwen3's graph asserts n_embd_head == n_rot).
        if (const json* hd = cfg.find("head_dim"); hd && !hd->is_null()) {
            kvs.emplace_back(a + "attention.key_length", u32_value(h.head_dim));
            kvs.emplace_back(a + "attention.value_length", u32_value(h.head_dim));
        }
    } else {
        kvs.emplace_back(a + "rope.dimension_count", u32_value(h.head_dim));
        if (h.head_dim * h.n_head != h.n_embd) {
            kvs.emplace_back(a + "attention.key_length", u32_value(h.head_dim));
            kvs.emplace_back(a + "attention.value_length", u32_value(h.head_dim));
        }
    }
    if (const json* rs = cfg.find("rope_scaling"); rs && rs->is_object() && has_qk_norm(h.arch)) {
        const json* t = rs->find("rope_type");
        if (!t) t = rs->find("type");
        const std::string kind = t && t->is_string() ? t->as_string() : "";
        if (kind != "default") fail<unsupported_error>(cfg_file, "", "rope_scaling \"" + kind + "\" is not supported for " + h.arch_name + " GGUF");
    } else if (rs && rs->is_object()) {
        const json* t = rs->find("type");
        if (!t) t = rs->find("rope_type");
        const std::string kind = t && t->is_string() ? t->as_string() : "";
        if (kind == "linear") {
            kvs.emplace_back(a + "rope.scaling.type", value::str("linear"));
            kvs.emplace_back(a + "rope.scaling.factor", value::f32(static_cast<float>(rs->at("factor").as_double())));
        } else if (!kind.empty() && kind != "default") {
            fail<unsupported_error>(cfg_file, "", "rope_scaling type \"" + kind + "\" is not supported by the GGUF converter");
        }
    }
}

/// general.* and the architecture's keys (formats.md 5.4).
inline kv_list model_kvs(const model_hparams& h, const json& cfg, const std::string& cfg_file, const std::string& src_dir,
                         const convert_options& opt) {
    kv_list kvs;
    kvs.emplace_back("general.architecture", value::str(h.arch_name));
    std::string name = opt.model_name;
    if (name.empty()) {
        name = src_dir;
        while (!name.empty() && name.back() == '/') name.pop_back();
        name = name.substr(name.find_last_of('/') + 1);
    }
    kvs.emplace_back("general.name", value::str(name));
    const std::string a = h.arch_name + ".";
    kvs.emplace_back(a + "context_length", u32_value(h.n_ctx));
    kvs.emplace_back(a + "embedding_length", u32_value(h.n_embd));
    kvs.emplace_back(a + "block_count", u32_value(h.n_layer));
    kvs.emplace_back(a + "feed_forward_length", u32_value(h.n_ff));
    kvs.emplace_back(a + "attention.head_count", u32_value(h.n_head));
    kvs.emplace_back(a + "attention.head_count_kv", u32_value(h.n_head_kv));
    kvs.emplace_back(a + "rope.freq_base", value::f32(static_cast<float>(h.theta)));
    kvs.emplace_back(a + "attention.layer_norm_rms_epsilon", value::f32(static_cast<float>(h.eps)));
    if (h.moe) {
        // LC convert_hf_to_gguf.py TextModel.set_gguf_parameters (expert_count, expert_used_count)
        // and Qwen2MoeModel.set_gguf_parameters (expert_feed_forward_length)
        kvs.emplace_back(a + "expert_count", u32_value(h.n_expert));
        kvs.emplace_back(a + "expert_used_count", u32_value(h.n_expert_used));
        if (h.arch == hf_arch::qwen3moe) kvs.emplace_back(a + "expert_feed_forward_length", u32_value(h.n_ff_exp));
        // (gpt-oss's: add_gpt_oss_kvs, in GptOssModel's order)
    }
    add_attention_kvs(kvs, h, cfg, cfg_file);
    kvs.emplace_back("general.file_type", value::u32(opt.type.llama_ftype));
    kvs.emplace_back("general.quantization_version", value::u32(2));
    return kvs;
}

/// The shape checks llama.cpp's load_tensors makes on one source tensor and its GGUF name.
inline void check_source_tensor(const source_tensor& t, const mapped_name& m, const model_hparams& h, const std::string& where,
                                bool packed = false) {
    if (t.type != dtype::BF16 && t.type != dtype::F16 && t.type != dtype::F32 && !t.scale && !packed)
        fail<unsupported_error>(where, t.name, "source dtype " + std::string(dtype_name(t.type)) + " cannot be converted");
    if (t.shape.empty() || t.shape.size() > 2) fail<shape_error>(where, t.name, "expected a 1-D or 2-D tensor");
    if (m.permute_heads > 0 && t.shape[0] % (2 * m.permute_heads) != 0)
        fail<shape_error>(where, t.name, "rows are not a whole number of even-sized heads");
    if (m.layer >= h.n_layer)
        fail<format_error>(where, t.name, "block " + std::to_string(m.layer) + " is past num_hidden_layers (" +
                                              std::to_string(h.n_layer) + ")");
    if ((m.gguf.ends_with("attn_q_norm.weight") || m.gguf.ends_with("attn_k_norm.weight")) && t.shape != shape_t{h.head_dim})
        fail<shape_error>(where, t.name, "llama.cpp expects this norm to hold head_dim (" + std::to_string(h.head_dim) + ") values");
    if (m.gguf.ends_with("ffn_gate_inp.weight") && t.shape != shape_t{h.n_expert, h.n_embd})
        fail<shape_error>(where, t.name, "the router must be [" + std::to_string(h.n_expert) + ", " + std::to_string(h.n_embd) + "]");
    if (m.gguf.ends_with("ffn_gate_inp.bias") && t.shape != shape_t{h.n_expert})
        fail<shape_error>(where, t.name, "the router bias must be [" + std::to_string(h.n_expert) + "]");
    if (m.gguf.ends_with("attn_sinks.weight") && t.shape != shape_t{h.n_head})
        fail<shape_error>(where, t.name, "llama.cpp expects one sink per attention head (" + std::to_string(h.n_head) + ")");
}

/// One expert's slice of a stacked tensor, slotted into its plan entry (made on the first).
/// llama.cpp's load_tensors shapes are gate/up {n_embd, n_ff_exp, n_expert} and down
/// {n_ff_exp, n_embd, n_expert}; gpt-oss's expert biases gate/up {n_ff_exp, n_expert} and down
/// {n_embd, n_expert} (LC src/models/openai-moe.cpp load_arch_tensors).
inline void add_expert_slice(std::vector<planned_tensor>& plan, std::map<std::string, std::size_t>& stacked,
                             const source_tensor& t, const mapped_name& m, const model_hparams& h, const std::string& where,
                             const std::string& fused = {}, std::optional<expert_cut> cut = std::nullopt,
                             const mxfp4_packed_weight* packed = nullptr) {
    const bool down = m.gguf.find("ffn_down_exps.") != std::string::npos;
    const bool bias = m.gguf.ends_with(".bias");
    const shape_t want = bias ? shape_t{down ? h.n_embd : h.n_ff_exp} : down ? shape_t{h.n_embd, h.n_ff_exp} : shape_t{h.n_ff_exp, h.n_embd};
    if (t.shape != want) fail<shape_error>(where, t.name, "an expert must be " + shape_to_string(want));
    if (m.expert >= h.n_expert)
        fail<format_error>(where, t.name, "expert " + std::to_string(m.expert) + " is past the expert count (" + std::to_string(h.n_expert) + ")");
    auto [it, fresh] = stacked.emplace(m.gguf, plan.size());
    if (fresh) {
        planned_tensor p{t.name, m, t.type, t.shape, {}, {}, std::vector<std::string>(static_cast<std::size_t>(h.n_expert)),
                         std::vector<std::optional<expert_cut>>(static_cast<std::size_t>(h.n_expert)), {}};
        if (packed) p.packed.resize(static_cast<std::size_t>(h.n_expert));
        p.decl.name = m.gguf;
        p.decl.ne = bias ? std::vector<std::int64_t>{t.shape[0], h.n_expert} : std::vector<std::int64_t>{t.shape[1], t.shape[0], h.n_expert};
        plan.push_back(std::move(p));
    }
    auto& p = plan[it->second];
    if (t.type != p.src_type) fail<format_error>(where, t.name, "the experts of " + m.gguf + " do not share one dtype");
    auto& slot = p.parts[static_cast<std::size_t>(m.expert)];
    if (!slot.empty()) fail<format_error>(where, t.name, "expert " + std::to_string(m.expert) + " of " + m.gguf + " appears twice");
    slot = fused.empty() ? t.name : fused;
    p.cuts[static_cast<std::size_t>(m.expert)] = cut;
    if ((packed != nullptr) != p.is_packed())
        fail<format_error>(where, t.name, "the experts of " + m.gguf + " mix packed MXFP4 and dense weights");
    if (packed != nullptr) p.packed[static_cast<std::size_t>(m.expert)] = *packed;
}

/// --repack of gpt-oss's native MXFP4 (convert/gpt_oss_source.hpp): an expert piece of the
/// fused tensor `t` as rows of its blocks [E, N, K/32, 16] and scales [E, N, K/32]. The cut
/// names output rows in the bf16 orientation, which are the blocks' rows: gate row r of expert
/// e is blocks row e * 2I + 2r, up's e * 2I + 2r + 1 (GptOssModel.repack_mxfp4 splits
/// `blocks[:, ::2]` / `[:, 1::2]` the same way), down row r is e * H + r.
/// `files`: the shards (paths) of the blocks and of the scales.
inline mxfp4_packed_weight native_mxfp4_rows(const source_tensor& t, const expert_piece& piece,
                                             const std::pair<std::string, std::string>& files) {
    const source_scale& sc = *t.scale;
    mxfp4_packed_weight w{piece.name, sc.codes, sc.name, piece.shape[0], piece.shape[1], files.first, files.second};
    w.row_first = piece.cut.expert * sc.shape[1] + piece.cut.first;
    w.row_step = piece.cut.step;
    return w;
}

/// A fused 3-D expert tensor (transformers v5 `mlp.experts.gate_up_proj [E, 2I, H]`,
/// `down_proj [E, H, I]`) planned as the per-expert slices of the stacked tensors, cut by the
/// architecture's rule of convert/fused_experts.hpp (an unknown rule is refused): the GGUF is
/// the one the equivalent per-expert checkpoint gives. With `repack` (src given), a native
/// MXFP4 weight's pieces are copied as blocks (native_mxfp4_rows).
inline void add_fused_experts(std::vector<planned_tensor>& plan, std::map<std::string, std::size_t>& stacked,
                              const source_tensor& t, const model_config& mc, const model_hparams& h, const std::string& where,
                              const checkpoint_source* repack_from = nullptr, const std::string& dir = {}) {
    std::string why;
    const std::vector<expert_piece> pieces = split_fused_experts(t.name, t.shape, mc, why);
    if (pieces.empty()) fail<unsupported_error>(where, t.name, why);
    const bool native = repack_from && t.scale && t.scale->encoding == source_encoding::mxfp4;
    std::pair<std::string, std::string> files;  // the blocks' and the scales' shards, looked up once
    if (native)
        for (const source_tensor& s : repack_from->tensors()) {
            if (s.name == t.scale->codes) files.first = dir + "/" + s.file;
            if (s.name == t.scale->name) files.second = dir + "/" + s.file;
        }
    for (const expert_piece& piece : pieces) {
        const source_tensor part{piece.name, t.type, piece.shape, t.file, t.scale};
        const auto m = map_hf_name(piece.name, h.arch, static_cast<int>(h.n_head), static_cast<int>(h.n_head_kv));
        if (!m || m->expert < 0) fail<unsupported_error>(where, t.name, "expert piece " + piece.name + " has no GGUF name for " + h.arch_name);
        check_source_tensor(part, *m, h, where);
        const bool packed = native && piece.shape.size() == 2;
        const mxfp4_packed_weight pw = packed ? native_mxfp4_rows(t, piece, files) : mxfp4_packed_weight{};
        add_expert_slice(plan, stacked, part, *m, h, where, t.name, piece.cut, packed ? &pw : nullptr);
    }
}

/// The tensors llama.cpp's gpt-oss loader requires (LC src/models/openai-moe.cpp
/// load_arch_tensors: the output head, and per block the sinks, the o_proj bias, the router
/// bias and the experts' biases; q/k/v biases are written when present), so that a checkpoint
/// without them is refused here rather than by llama.cpp ("missing tensor") after the writing.
inline void check_gpt_oss_tensors(const std::set<std::string>& single, const std::map<std::string, std::size_t>& stacked,
                                  const model_hparams& h, const std::string& src_dir) {
    if (!single.contains("output.weight"))
        fail<format_error>(src_dir, "lm_head.weight", "llama.cpp's gpt-oss needs an output head and the checkpoint has none");
    for (std::int64_t l = 0; l < h.n_layer; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        for (const char* t : {"attn_sinks.weight", "attn_output.bias", "ffn_gate_inp.bias"})
            if (!single.contains(b + t)) fail<format_error>(src_dir, b + t, "llama.cpp's gpt-oss needs this tensor and the checkpoint has none");
        for (const char* t : {"ffn_gate_exps.bias", "ffn_up_exps.bias", "ffn_down_exps.bias"})
            if (!stacked.contains(b + t)) fail<format_error>(src_dir, b + t, "llama.cpp's gpt-oss needs this tensor and the checkpoint has none");
    }
}

/// Every output tensor, named and shaped, before any is read; `n_vocab` is the embedding's rows.
inline std::vector<planned_tensor> plan_tensors(const checkpoint_source& src, const model_hparams& h, const std::string& src_dir,
                                                std::int64_t& n_vocab, const mxfp4_source* mx = nullptr, bool repack = false) {
    std::vector<planned_tensor> plan;
    std::map<std::string, std::size_t> stacked;  // GGUF name -> its entry in `plan`
    std::set<std::string> single;                // GGUF names of the tensors that are not stacked
    // An FP8 source (convert/fp8_source.hpp) is read through its decoded weights: the scale
    // tensors are folded in, the first malformed one refuses the conversion.
    // (A packed MXFP4 source's float config group is FP4, not FP8: its reader speaks for it.)
    if (!(mx && mx->present) && !src.fp8().refusals.empty()) fail<unsupported_error>({}, {}, src.fp8().refusals.front().substr(8));
    const model_config mc = model_config::from_json(src.config(), src_dir + "/config.json");
    for (const auto& t : mx && mx->present ? mx->tensors : src.model_tensors()) {
        if (t.name.ends_with("rotary_emb.inv_freq")) continue;  // convert_hf_to_gguf skips it
        const std::string where = src_dir + "/" + t.file;
        const mxfp4_packed_weight* pw = mx ? mx->find(t.name) : nullptr;
        if (is_fused_expert_tensor(t.name) && t.shape.size() != 1) {
            add_fused_experts(plan, stacked, t, mc, h, where, repack ? &src : nullptr, src_dir);
            continue;
        }
        // a v5 rename undone first (Mixtral's `mlp.gate` router is `block_sparse_moe.gate`)
        auto m = map_hf_name(loader_tensor_name(t.name, mc), h.arch, static_cast<int>(h.n_head), static_cast<int>(h.n_head_kv));
        if (!m) fail<unsupported_error>(where, t.name, "tensor has no GGUF name for " + h.arch_name);
        check_source_tensor(t, *m, h, where, pw != nullptr);
        if (m->gguf == "token_embd.weight") n_vocab = t.shape[0];
        if (m->expert >= 0) {
            add_expert_slice(plan, stacked, t, *m, h, where, {}, std::nullopt, pw);
            continue;
        }
        if (!single.insert(m->gguf).second)  // e.g. a v5 router beside the original one
            fail<format_error>(where, t.name, "a second source tensor for " + m->gguf + ": which one is the model would be a guess");
        planned_tensor p{t.name, *m, t.type, t.shape, {}, {}, {t.name}, {std::nullopt}, {}};
        if (pw) p.packed = {*pw};
        p.decl.name = m->gguf;
        for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) p.decl.ne.push_back(*it);
        plan.push_back(std::move(p));
    }
    for (const auto& [gguf_name, i] : stacked)
        for (std::size_t e = 0; e < plan[i].parts.size(); ++e)
            if (plan[i].parts[e].empty())
                fail<format_error>(src_dir, gguf_name, "expert " + std::to_string(e) + " is missing (" + std::to_string(h.n_expert) + " experts)");
    if (n_vocab == 0) fail<format_error>(src_dir, "model.embed_tokens.weight", "the checkpoint has no embedding table");
    if (h.arch == hf_arch::gpt_oss) check_gpt_oss_tensors(single, stacked, h, src_dir);
    return plan;
}

/// The types need the whole tensor list first: whether there is an output head decides
/// token_embd's type (llama-quantize's has_output).
inline void choose_types(std::vector<planned_tensor>& plan, const model_hparams& h, const convert_options& opt) {
    mix_model mm;
    mm.arch = h.arch_name;
    mm.n_layer = static_cast<int>(h.n_layer);
    mm.n_head = static_cast<int>(h.n_head);
    mm.n_head_kv = static_cast<int>(h.n_head_kv);
    mm.n_expert = static_cast<int>(h.n_expert);
    mm.has_output = std::any_of(plan.begin(), plan.end(), [](const auto& p) { return p.map.gguf == "output.weight"; });
    mm.has_imatrix = static_cast<bool>(opt.imatrix);
    for (auto& p : plan) {
        p.decision = choose_type(opt.type, opt.overrides, p.map.gguf, static_cast<int>(p.decl.ne.size()), p.decl.ne[0], p.map.layer, mm);
        if (p.is_packed()) {
            // Repacked: MXFP4 whatever the mix says; an override for another type cannot be honoured losslessly.
            const type_decision mix = choose_type(opt.type, {}, p.map.gguf, static_cast<int>(p.decl.ne.size()), p.decl.ne[0], p.map.layer, mm);
            if (p.decision.requested != mix.requested && p.decision.requested != ggml_type::mxfp4)
                fail<unsupported_error>(p.packed.front()->file, p.map.gguf, "--repack copies the packed MXFP4 codes of " + p.hf +
                                                                                "; the override asks " + std::string(type_name(p.decision.requested)) +
                                                                                ", which would requantize them");
            p.decision = type_decision{};
            p.decision.requested = p.decision.chosen = ggml_type::mxfp4;
        }
        p.decl.type = p.decision.chosen;
    }
}

/// --repack's source check: packed compressed-tensors MXFP4, every refusal of its reader raised
/// (the first), and nothing else (no other source is lossless in GGUF). Without --repack a
/// packed FP4 source is refused with the way to convert it.
inline void check_repack_source(const mxfp4_source& mx, const json& cfg, const std::string& cfg_file, bool repack,
                                const checkpoint_source& src) {
    if (!mx.present) {
        if (!repack) return;
        for (const source_tensor& t : src.model_tensors())
            if (t.scale && t.scale->encoding == source_encoding::mxfp4) return;  // gpt-oss's native MXFP4 experts
        const json* qc = cfg.find("quantization_config");
        const json* qm = qc && qc->is_object() ? qc->find("quant_method") : nullptr;
        const std::string what = qm && qm->is_string() ? "a \"" + qm->as_string() + "\" source" : "a dense (unquantized) source";
        fail<unsupported_error>(cfg_file, "", "--repack into GGUF copies MXFP4 codes (compressed-tensors mxfp4-pack-quantized, gpt-oss's "
                                              "native experts) into GGUF MXFP4; " +
                                                  what + " has nothing GGUF holds losslessly: convert it without --repack");
    }
    if (!mx.refusals.empty()) {
        const std::string& r = mx.refusals.front();
        // "<file>: <tensor>: <reason>" as a qforge error
        const auto a = r.find(": "), b = a == std::string::npos ? a : r.find(": ", a + 2);
        if (b == std::string::npos) fail<unsupported_error>(cfg_file, "", r);
        fail<unsupported_error>(r.substr(0, a), r.substr(a + 2, b - a - 2), r.substr(b + 2));
    }
    if (!repack)
        fail<unsupported_error>(cfg_file, "", "a packed compressed-tensors MXFP4 source: pass --repack to copy its codes and "
                                              "exponents into GGUF MXFP4 (it is not dequantized and requantized)");
    if (mx.weights.empty()) fail<unsupported_error>(cfg_file, "", "--repack: the source has no packed MXFP4 weight (*.weight_packed)");
}

/// The tokenizer.* keys: copied from a template GGUF, converted from tokenizer.json, or
/// no_vocab; their token count must match the embedding table.
inline kv_list tokenizer_kvs(const convert_options& opt, const std::string& src_dir, const json& cfg, std::int64_t n_vocab) {
    kv_list tok;
    const std::string tok_json = opt.tokenizer_json.empty() ? src_dir + "/tokenizer.json" : opt.tokenizer_json;
    if (!opt.pre_tokenizer.empty()) check_pre_tokenizer(opt.pre_tokenizer, tok_json);
    if (!opt.tokenizer_from.empty()) {
        tok = tokenizer_from_gguf(opt.tokenizer_from);
    } else if (io::path_exists(tok_json) && !opt.pre_tokenizer.empty()) {
        const std::string tc_path = src_dir + "/tokenizer_config.json";
        json tc;
        const bool have_tc = io::path_exists(tc_path);
        if (have_tc) tc = json::parse(io::read_file(tc_path, 64u << 20), tc_path);
        tok = tokenizer_from_json(tok_json, opt.pre_tokenizer, cfg, have_tc ? &tc : nullptr);
    } else if (opt.allow_no_vocab) {
        tok.emplace_back("tokenizer.ggml.model", value::str("no_vocab"));
    } else {
        fail<unsupported_error>(src_dir, "", io::path_exists(tok_json)
                                                 ? "tokenizer.json needs a pre-tokenizer name (--pre-tokenizer) to be converted"
                                                 : "no tokenizer: give a template GGUF (--tokenizer-from) or a tokenizer.json");
    }
    if (const value* toks = find_kv(tok, "tokenizer.ggml.tokens"); toks && static_cast<std::int64_t>(toks->elems.size()) != n_vocab)
        fail<unsupported_error>(src_dir, "token_embd.weight", "the tokenizer has " + std::to_string(toks->elems.size()) +
                                                                  " tokens but the embedding table has " + std::to_string(n_vocab) + " rows");
    return tok;
}

/// Everything convert_hf_to_gguf fixes before it reads a tensor: the header's key/values, every
/// tensor with its type, the imatrix. Also the plan of a cluster conversion (convert/cluster/gguf.hpp),
/// which needs each tensor's offset up front: sizes follow from these shapes and types.
struct gguf_plan {
    model_hparams h;
    kv_list kvs;
    std::vector<planned_tensor> tensors;
    std::optional<importance_matrix> imatrix;

    std::vector<tensor_decl> decls() const {
        std::vector<tensor_decl> d;
        for (const auto& p : tensors) d.push_back(p.decl);
        return d;
    }
};

/// The plan step of convert_hf_to_gguf (headers, config, tokenizer, imatrix; no tensor data).
inline gguf_plan plan_gguf(const checkpoint_source& src, const std::string& src_dir, const convert_options& opt) {
    gguf_plan g;
    const std::string cfg_file = src_dir + "/config.json";
    const json& cfg = src.config();
    g.h = read_hparams(cfg, cfg_file);
    g.kvs = model_kvs(g.h, cfg, cfg_file, src_dir, opt);
    std::int64_t n_vocab = 0;
    const mxfp4_source mx = read_mxfp4_source(cfg, cfg_file, src.tensors(), src_dir);
    check_repack_source(mx, cfg, cfg_file, opt.repack, src);
    g.tensors = plan_tensors(src, g.h, src_dir, n_vocab, &mx, opt.repack);
    choose_types(g.tensors, g.h, opt);
    g.kvs.emplace_back(g.h.arch_name + ".vocab_size", u32_value(n_vocab));
    for (auto& kv : tokenizer_kvs(opt, src_dir, cfg, n_vocab)) g.kvs.push_back(std::move(kv));
    if (!opt.imatrix_file.empty()) {
        if (opt.imatrix) fail<unsupported_error>(opt.imatrix_file, "", "give an imatrix file or an importance hook, not both");
        g.imatrix.emplace(importance_matrix::open(opt.imatrix_file));
        add_imatrix_keys(g.kvs, opt.imatrix_file, *g.imatrix);
        check_imatrix_sizes(*g.imatrix, g.tensors);
    }
    return g;
}

/// Elements of a planned tensor (every expert of a stacked one), as the report counts them.
inline std::uint64_t element_count(const planned_tensor& p) {
    return static_cast<std::uint64_t>((p.shape.size() == 2 ? p.shape[0] : 1) * p.decl.ne[0] * static_cast<std::int64_t>(p.parts.size()));
}

/// The streaming pass: each planned tensor read a chunk of rows at a time, quantized with the
/// ggml kernels and handed to the Writer (file_writer: appended to the GGUF; a cluster worker's
/// writer: pwritten at the tensor's planned offset); its buffers are reused from tensor to tensor.
/// Writer: write_part(span of bytes), end_tensor().
template <class Writer = file_writer>
class tensor_stream {
public:
    tensor_stream(const checkpoint_source& src, const std::string& src_dir, const convert_options& opt,
                  importance_lookup* imatrix, Writer& w)
        : src_(src), src_dir_(src_dir), opt_(opt), imatrix_(imatrix), w_(w) {}

    /// Writes one planned tensor (every expert's slice of a stacked one) and reports it.
    tensor_report write(const planned_tensor& p) {
        if (p.is_packed()) return write_packed(p);
        const std::int64_t nrows = p.shape.size() == 2 ? p.shape[0] : 1;  // per part
        const tensor_importance im(opt_, imatrix_, p.decl);
        snr_ = {};
        // a stacked tensor is written one expert's slice after the other (ne[2] is the slowest
        // dimension): one source tensor is mapped at a time, never the whole stack
        for (std::size_t part = 0; part < p.parts.size(); ++part) {
            const std::string& hf = p.parts[part];
            owned_tensor decoded;  // an FP8 weight's float32 values (convert/fp8_source.hpp), this part only
            const std::optional<expert_cut>& cut = p.cuts.empty() ? std::nullopt : p.cuts[part];
            if (cut) decoded = src_.read_expert(hf, *cut, p.hf, p.shape, !opt_.read_mapped);  // one expert's slice
            else if (src_.scale_of(hf)) decoded = src_.decode(hf, !opt_.read_mapped);
            const bool in_memory = opt_.read_mapped || !decoded.bytes.empty();  // else v gives sizes only
            const tensor_view v = decoded.bytes.empty() ? src_.view(hf) : decoded.view();
            const float* imr = im.data(static_cast<std::int64_t>(part));
            for (std::int64_t r0 = 0; r0 < nrows; r0 += opt_.chunk_rows)
                write_chunk(p, hf, v, in_memory, r0, std::min(opt_.chunk_rows, nrows - r0), nrows, imr);
            src_.release(hf);
        }
        w_.end_tensor();
        return {p.hf, p.decl.name, p.decl.ne, p.decision.requested, p.decl.type, p.decision.fallback, tensor_nbytes(p.decl),
                snr_.error > 0 ? snr_.db() : std::numeric_limits<double>::infinity(), p.map.permute_heads > 0,
                im.status(), false};
    }

private:
    /// A repacked tensor: each part's packed rows and exponent rows read a chunk at a time (pread,
    /// or the mapping), permuted as the float rows would be, each row's nibbles reordered into
    /// GGUF MXFP4 blocks. Nothing is rounded: the report's SNR is infinite.
    tensor_report write_packed(const planned_tensor& p) {
        for (const auto& part : p.packed) {
            const mxfp4_packed_weight& pw = *part;
            const std::int64_t k = pw.cols, nb = k / qk_mxfp4;
            const auto code_row = static_cast<std::size_t>(k / 2), scale_row = static_cast<std::size_t>(nb);
            for (std::int64_t r0 = 0; r0 < pw.rows; r0 += opt_.chunk_rows) {
                const std::int64_t n = std::min(opt_.chunk_rows, pw.rows - r0);
                codes_.resize(code_row * static_cast<std::size_t>(n));
                scales_.resize(scale_row * static_cast<std::size_t>(n));
                blocks_.resize(static_cast<std::size_t>(nb * n));
                for (std::int64_t ri = 0; ri < n; ++ri) {
                    const std::int64_t wrow = p.map.permute_heads > 0 ? permuted_source_row(r0 + ri, pw.rows, p.map.permute_heads) : r0 + ri;
                    const std::int64_t srow = pw.row_first + wrow * pw.row_step;
                    read_row(pw.packed, srow, code_row, codes_.data() + static_cast<std::size_t>(ri) * code_row);
                    read_row(pw.scale, srow, scale_row, scales_.data() + static_cast<std::size_t>(ri) * scale_row);
                    const std::uint8_t* e = scales_.data() + static_cast<std::size_t>(ri) * scale_row;
                    for (std::int64_t b = 0; b < nb; ++b)
                        if (e[b] == 0xFFu)  // NaN in OCP MX, 2^127 in ggml: no GGUF block means the same
                            fail<format_error>(pw.scale_file, pw.scale, "E8M0 NaN scale 0xFF at row " + std::to_string(srow) +
                                                                                   ", group " + std::to_string(b) + " (ggml would read 2^127)");
                    ct_mxfp4_row_to_gguf(codes_.data() + static_cast<std::size_t>(ri) * code_row, e, k, blocks_.data() + ri * nb);
                }
                w_.write_part(std::as_bytes(std::span<const block_mxfp4>(blocks_)));
            }
            src_.release(pw.packed);
            src_.release(pw.scale);
        }
        w_.end_tensor();
        tensor_report tr{p.hf, p.decl.name, p.decl.ne, p.decision.requested, p.decl.type, p.decision.fallback, tensor_nbytes(p.decl),
                         std::numeric_limits<double>::infinity(), p.map.permute_heads > 0, {}, true};
        return tr;
    }

    /// Row `r` (`bytes` long) of tensor `name`: pread, or copied from the mapping with read_mapped.
    void read_row(const std::string& name, std::int64_t r, std::size_t bytes, std::uint8_t* out) {
        const auto at = static_cast<std::uint64_t>(r) * bytes;
        if (opt_.read_mapped) {
            src_.verify_unchanged(name);
            const tensor_view v = src_.view(name);
            std::memcpy(out, v.bytes.data() + at, bytes);
        } else {
            src_.read_tensor_range(name, at, std::span<std::byte>(reinterpret_cast<std::byte*>(out), bytes));
        }
    }

    /// Rows [r0, r0 + n) of part `hf`: read (pread, permuted rows one by one), quantized and
    /// measured row by row on the executor, appended in row order.
    void write_chunk(const planned_tensor& p, const std::string& hf, const tensor_view& v, bool in_memory, std::int64_t r0,
                     std::int64_t n, std::int64_t nrows, const float* imr) {
        const std::int64_t cols = p.decl.ne[0];
        const ggml_type t = p.decl.type;
        const auto row_size = static_cast<std::size_t>(quantized_size(t, 1, cols));
        rows_.resize(static_cast<std::size_t>(n * cols));
        back_.resize(rows_.size());
        out_.resize(row_size * static_cast<std::size_t>(n) / 2 + 1);
        auto* dst = reinterpret_cast<std::byte*>(out_.data());
        // Row ri of the chunk is row ri of chunk_src_ (pread by the task that quantizes it), or
        // row srow of the mapping.
        const std::size_t row_bytes = static_cast<std::size_t>(cols) * dtype_size(v.type);
        if (!in_memory) chunk_src_.resize(row_bytes * static_cast<std::size_t>(n));
        const std::span<const std::byte> chunk = in_memory ? v.bytes : std::span<const std::byte>(chunk_src_);
        row_snr_.assign(static_cast<std::size_t>(n), snr_sums{});
        const simd::isa isa = simd::active_isa();
        const simd::group_kernels& k = simd::kernels(isa);
        parallel_for(opt_.exec, 0, static_cast<std::size_t>(n), 8, [&](std::size_t lo, std::size_t hi) {
            if (!in_memory) read_rows(p, hf, r0 + static_cast<std::int64_t>(lo), static_cast<std::int64_t>(hi - lo), nrows, row_bytes,
                                      chunk_src_.data() + lo * row_bytes);
            for (std::size_t r = lo; r < hi; ++r) {
                const auto ri = static_cast<std::int64_t>(r);
                const std::int64_t srow = p.map.permute_heads > 0 ? permuted_source_row(r0 + ri, nrows, p.map.permute_heads) : r0 + ri;
                const auto row = static_cast<std::size_t>(in_memory ? srow : ri);
                float* xr = rows_.data() + ri * cols;
                if (k.to_f32(chunk.data() + row * row_bytes, v.type, static_cast<std::size_t>(cols), xr) >= 0)
                    fail<format_error>(src_dir_, hf, "tensor holds NaN or infinity");
                std::byte* qr = dst + r * row_size;
                quantize_rows(t, xr, 1, cols, imr, qr, isa);
                float* yr = back_.data() + ri * cols;
                dequantize_rows(t, qr, cols, yr, isa);
                row_snr_[r] = snr_sums_of({xr, static_cast<std::size_t>(cols)}, {yr, static_cast<std::size_t>(cols)}, isa);
            }
        });
        for (const snr_sums& r : row_snr_) snr_.add_row(r);  // in row order: deterministic
        w_.write_part(std::span<const std::byte>(dst, row_size * static_cast<std::size_t>(n)));
    }

    /// Source rows [r0, r0 + n) of part `hf` (permuted rows one by one) read with pread into `into`.
    void read_rows(const planned_tensor& p, const std::string& hf, std::int64_t r0, std::int64_t n, std::int64_t nrows,
                   std::size_t row_bytes, std::byte* into) const {
        if (p.map.permute_heads > 0) {
            for (std::int64_t ri = 0; ri < n; ++ri)
                src_.read_tensor_range(hf, static_cast<std::uint64_t>(permuted_source_row(r0 + ri, nrows, p.map.permute_heads)) * row_bytes,
                                       std::span<std::byte>(into + static_cast<std::size_t>(ri) * row_bytes, row_bytes));
        } else {
            src_.read_tensor_range(hf, static_cast<std::uint64_t>(r0) * row_bytes,
                                   std::span<std::byte>(into, row_bytes * static_cast<std::size_t>(n)));
        }
    }

    const checkpoint_source& src_;
    const std::string& src_dir_;
    const convert_options& opt_;
    importance_lookup* imatrix_;  // the imatrix file's entries, or null
    Writer& w_;
    snr_sums snr_;  // the tensor's so far
    cache_aligned_vector<float> rows_, back_;  ///< rows of cols floats: each on a cache line where cols % 16 == 0
    std::vector<snr_sums> row_snr_;
    std::vector<std::uint16_t> out_;     // 2-byte aligned block storage (every row size is even)
    std::vector<std::byte> chunk_src_;  // the chunk's source rows, read with pread
    std::vector<std::uint8_t> codes_, scales_;  // a repacked chunk's packed rows and exponent rows
    std::vector<block_mxfp4> blocks_;            // ... and its GGUF MXFP4 blocks
};

}  // namespace detail

#if QFORGE_BODIES_HERE
QFORGE_DECL convert_report convert_hf_to_gguf(const std::string& src_dir, const std::string& dst_file,
                                              const convert_options& opt, const progress_fn& progress) {
    const checkpoint_source src(src_dir);
    detail::gguf_plan g = detail::plan_gguf(src, src_dir, opt);  // every tensor up front
    const std::vector<detail::planned_tensor>& plan = g.tensors;
    std::optional<importance_lookup> lookup;
    if (g.imatrix) lookup.emplace(*g.imatrix);

    // ---- stream ---------------------------------------------------------------------------
    file_writer w(dst_file, g.kvs, g.decls());
    convert_report report;
    report.arch = g.h.arch_name;
    detail::tensor_stream stream(src, src_dir, opt, lookup ? &*lookup : nullptr, w);
    for (std::size_t ti = 0; ti < plan.size(); ++ti) {
        const auto& p = plan[ti];
        tensor_report tr = stream.write(p);
        report.total_elements += detail::element_count(p);
        report.total_bytes += tr.bytes;
        report.tensors.push_back(std::move(tr));
        if (progress) progress(ti + 1, plan.size(), p.decl.name);
    }
    w.finish();
    return report;
}
#endif

}  // namespace qforge::gguf
