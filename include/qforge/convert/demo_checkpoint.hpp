// A deterministic synthetic checkpoint: Llama-shaped bf16 weights with heavy tails, for the
// demo, the tests and the benchmark (nothing to download).
//
// Weights are Student-t (df 5) scaled to std 0.02, drawn from a fixed-seed splitmix64 stream
// with our own normal sampler, so the bytes are the same on every machine and compiler.
// Norm weights are 1 + small noise. The folder gets config.json, tokenizer.json,
// tokenizer_config.json and generation_config.json, and the tensors are split into
// two shard files (or one, with shards = 1) with a model.safetensors.index.json.
//
// `seed_naming` writes the first seed exporter's model ("Spark-X2.5"): a fused
// `self_attn.q_k_v_proj`, `self_attn.out_proj` and `model.embedding.weight` tied to the head.
//
// `moe` replaces every block's MLP with a mixture of `experts` experts of `moe_intermediate`
// (config.json as transformers writes it for that architecture):
//  - qwen_moe: Qwen3-MoE per-expert naming `mlp.experts.E.{gate,up,down}_proj.weight`, router
//    `mlp.gate.weight [E, H]`; with `shared_expert`, Qwen2-MoE's `mlp.shared_expert.*` and
//    `mlp.shared_expert_gate.weight [1, H]` (model_type qwen2_moe);
//  - mixtral: `block_sparse_moe.experts.E.w1/w3` (gate/up) and `w2` (down), router
//    `block_sparse_moe.gate.weight`;
//  - qwen_moe_fused: transformers v5 `mlp.experts.gate_up_proj [E, 2I, H]` (gate rows then up
//    rows) and `mlp.experts.down_proj [E, H, I]` (model_type qwen3_moe);
//  - gpt_oss: `mlp.experts.gate_up_proj [E, H, 2I]` (gate/up interleaved along the last dim),
//    `gate_up_proj_bias [E, 2I]`, `down_proj [E, I, H]`, `down_proj_bias [E, H]`, router
//    `mlp.router.weight [E, H]` + `mlp.router.bias [E]`, and gpt-oss's attention: q/k/v/o
//    biases and `self_attn.sinks [heads]` (model_type gpt_oss; config.json with gpt-oss-20b's
//    sliding_window / layer_types / swiglu_limit, no rope scaling; the head is never tied);
//  - gpt_oss_mxfp4: the same model as OpenAI ships gpt-oss (quantization_config
//    {"quant_method": "mxfp4"}): each fused expert tensor is the MXFP4 quantization of gpt_oss's
//    (the same weights), stored as `<p>.gate_up_proj_blocks` U8 [E, 2I, H/32, 16] and
//    `_scales` U8 [E, 2I, H/32] (rows are output features, gate/up interleaved), `down_proj_*`
//    [E, H, I/32, 16] / [E, H, I/32] (transformers integrations/mxfp4.py; see
//    convert/gpt_oss_source.hpp); attention, router, embeddings and head stay bf16.
// The orientations are transformers' (convert/fused_experts.hpp cites them).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/format.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/half.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/index.hpp"

namespace qforge {

enum class demo_moe { none, qwen_moe, mixtral, qwen_moe_fused, gpt_oss, gpt_oss_mxfp4 };

struct demo_options {
    std::int64_t hidden = 512;
    std::int64_t intermediate = 1408;
    std::int64_t layers = 4;
    std::int64_t heads = 8;
    std::int64_t kv_heads = 4;
    std::int64_t vocab = 4096;
    int shards = 2;
    bool tied = true;
    bool seed_naming = false;
    demo_moe moe = demo_moe::none;
    std::int64_t experts = 4;
    std::int64_t moe_intermediate = 128;
    bool shared_expert = false;  ///< qwen_moe only: a Qwen2-MoE shared expert and its gate
    std::uint64_t seed = 20261130;
};

namespace detail {

/// splitmix64 + Box-Muller: portable, unlike std::normal_distribution.
class demo_rng {
public:
    explicit demo_rng(std::uint64_t seed) : s_(seed) {}
    std::uint64_t next() noexcept;
    double uniform() noexcept { return (static_cast<double>(next() >> 11) + 0.5) * 0x1p-53; }
    double normal() noexcept;
    /// Student-t with 5 degrees of freedom, scaled to unit variance (var = 5/3).
    double student_t5() noexcept;

private:
    std::uint64_t s_;
    double spare_ = 0;
    bool has_spare_ = false;
};


/// The MoE MLP of one block (`p` = "model.layers.L."), in write order.
QFORGE_DECL void demo_moe_tensors(std::vector<planned_tensor>& t, const std::string& p, const demo_options& o);

/// config.json's architecture keys for `o` (model_type, architectures, expert counts).
QFORGE_DECL void demo_moe_config(json& cfg, const demo_options& o);

/// gpt_oss_mxfp4: the MXFP4 blocks and scales of a fused expert tensor whose bf16 values `w`
/// are in gpt_oss's [E, K, N] ([in, out]) order, each expert's [N, K] rows quantized as
/// compressed-tensors' MXFP4 (layout/mxfp4.hpp), whose packed bytes are gpt-oss's blocks.
QFORGE_DECL void demo_mxfp4_experts(const std::vector<std::uint16_t>& w, const shape_t& blocks_shape, std::vector<std::byte>& blocks,
                                    std::vector<std::byte>& scales);

}  // namespace detail

/// The tensors of the demo model, in write order.
QFORGE_DECL std::vector<planned_tensor> demo_tensors(const demo_options& o);

/// Writes the demo checkpoint into `dir` (created; must not exist).
QFORGE_DECL void write_demo_checkpoint(const std::string& dir, const demo_options& o = {});

/// config.json, tokenizer.json, tokenizer_config.json and generation_config.json of the demo
/// model `o` (a benchmark that writes its own tensors reuses them).
QFORGE_DECL void write_demo_side_files(const std::string& dir, const demo_options& o);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {
namespace detail {

QFORGE_DECL void demo_moe_tensors(std::vector<planned_tensor>& t, const std::string& p, const demo_options& o) {
    const std::int64_t E = o.experts, I = o.moe_intermediate, H = o.hidden;
    switch (o.moe) {
        case demo_moe::none: return;
        case demo_moe::qwen_moe:
            t.push_back({p + "mlp.gate.weight", dtype::BF16, {E, H}});
            for (std::int64_t e = 0; e < E; ++e) {
                const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
                t.push_back({x + "gate_proj.weight", dtype::BF16, {I, H}});
                t.push_back({x + "up_proj.weight", dtype::BF16, {I, H}});
                t.push_back({x + "down_proj.weight", dtype::BF16, {H, I}});
            }
            if (o.shared_expert) {
                t.push_back({p + "mlp.shared_expert.gate_proj.weight", dtype::BF16, {o.intermediate, H}});
                t.push_back({p + "mlp.shared_expert.up_proj.weight", dtype::BF16, {o.intermediate, H}});
                t.push_back({p + "mlp.shared_expert.down_proj.weight", dtype::BF16, {H, o.intermediate}});
                t.push_back({p + "mlp.shared_expert_gate.weight", dtype::BF16, {1, H}});
            }
            return;
        case demo_moe::mixtral:
            t.push_back({p + "block_sparse_moe.gate.weight", dtype::BF16, {E, H}});
            for (std::int64_t e = 0; e < E; ++e) {
                const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
                t.push_back({x + "w1.weight", dtype::BF16, {I, H}});
                t.push_back({x + "w2.weight", dtype::BF16, {H, I}});
                t.push_back({x + "w3.weight", dtype::BF16, {I, H}});
            }
            return;
        case demo_moe::qwen_moe_fused:
            t.push_back({p + "mlp.gate.weight", dtype::BF16, {E, H}});
            t.push_back({p + "mlp.experts.gate_up_proj", dtype::BF16, {E, 2 * I, H}});
            t.push_back({p + "mlp.experts.down_proj", dtype::BF16, {E, H, I}});
            return;
        case demo_moe::gpt_oss:
            t.push_back({p + "mlp.router.weight", dtype::BF16, {E, H}});
            t.push_back({p + "mlp.router.bias", dtype::BF16, {E}});
            t.push_back({p + "mlp.experts.gate_up_proj", dtype::BF16, {E, H, 2 * I}});
            t.push_back({p + "mlp.experts.gate_up_proj_bias", dtype::BF16, {E, 2 * I}});
            t.push_back({p + "mlp.experts.down_proj", dtype::BF16, {E, I, H}});
            t.push_back({p + "mlp.experts.down_proj_bias", dtype::BF16, {E, H}});
            return;
        case demo_moe::gpt_oss_mxfp4:  // each _blocks right before its _scales (write_demo_checkpoint)
            t.push_back({p + "mlp.router.weight", dtype::BF16, {E, H}});
            t.push_back({p + "mlp.router.bias", dtype::BF16, {E}});
            t.push_back({p + "mlp.experts.gate_up_proj_blocks", dtype::U8, {E, 2 * I, H / 32, 16}});
            t.push_back({p + "mlp.experts.gate_up_proj_scales", dtype::U8, {E, 2 * I, H / 32}});
            t.push_back({p + "mlp.experts.gate_up_proj_bias", dtype::BF16, {E, 2 * I}});
            t.push_back({p + "mlp.experts.down_proj_blocks", dtype::U8, {E, H, I / 32, 16}});
            t.push_back({p + "mlp.experts.down_proj_scales", dtype::U8, {E, H, I / 32}});
            t.push_back({p + "mlp.experts.down_proj_bias", dtype::BF16, {E, H}});
            return;
    }
}

QFORGE_DECL void demo_moe_config(json& cfg, const demo_options& o) {
    const char* type = "llama";
    const char* arch = "LlamaForCausalLM";
    switch (o.moe) {
        case demo_moe::none: break;
        case demo_moe::qwen_moe:
        case demo_moe::qwen_moe_fused:
            type = o.shared_expert && o.moe == demo_moe::qwen_moe ? "qwen2_moe" : "qwen3_moe";
            arch = o.shared_expert && o.moe == demo_moe::qwen_moe ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM";
            cfg.set("num_experts", o.experts);
            cfg.set("moe_intermediate_size", o.moe_intermediate);
            cfg.set("num_experts_per_tok", std::min<std::int64_t>(2, o.experts));
            cfg.set("decoder_sparse_step", 1);
            cfg.set("mlp_only_layers", json::array());
            cfg.set("norm_topk_prob", true);
            if (o.shared_expert && o.moe == demo_moe::qwen_moe) cfg.set("shared_expert_intermediate_size", o.intermediate);
            break;
        case demo_moe::mixtral:
            type = "mixtral";
            arch = "MixtralForCausalLM";
            cfg.set("intermediate_size", o.moe_intermediate);  // Mixtral's experts are its MLP
            cfg.set("num_local_experts", o.experts);
            cfg.set("num_experts_per_tok", std::min<std::int64_t>(2, o.experts));
            break;
        case demo_moe::gpt_oss:
        case demo_moe::gpt_oss_mxfp4:
            type = "gpt_oss";
            arch = "GptOssForCausalLM";
            cfg.set("intermediate_size", o.moe_intermediate);
            cfg.set("num_local_experts", o.experts);
            cfg.set("num_experts_per_tok", std::min<std::int64_t>(2, o.experts));
            cfg.set("tie_word_embeddings", false);
            cfg.set("attention_bias", true);
            cfg.set("sliding_window", 128);
            cfg.set("swiglu_limit", 7.0);
            {
                json::array_t types;  // gpt-oss: the even layers slide
                for (std::int64_t l = 0; l < o.layers; ++l) types.emplace_back(l % 2 == 0 ? "sliding_attention" : "full_attention");
                cfg.set("layer_types", json(std::move(types)));
            }
            break;
    }
    cfg.set("model_type", type);
    cfg.set("architectures", json::array({arch}));
    if (o.moe == demo_moe::gpt_oss_mxfp4)  // openai/gpt-oss-20b's config.json
        cfg.set("quantization_config",
                json::object({{"quant_method", "mxfp4"},
                              {"modules_to_not_convert", json::array({"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                      "model.embed_tokens", "lm_head"})}}));
}

QFORGE_DECL void demo_mxfp4_experts(const std::vector<std::uint16_t>& w, const shape_t& blocks_shape, std::vector<std::byte>& blocks,
                                    std::vector<std::byte>& scales) {
    const std::int64_t E = blocks_shape[0], N = blocks_shape[1], K = blocks_shape[2] * 32;
    blocks.clear();
    scales.clear();
    std::vector<float> rows(static_cast<std::size_t>(N * K));
    for (std::int64_t e = 0; e < E; ++e) {
        for (std::int64_t k = 0; k < K; ++k)
            for (std::int64_t n = 0; n < N; ++n)
                rows[static_cast<std::size_t>(n * K + k)] = bf16_to_float(w[static_cast<std::size_t>((e * K + k) * N + n)]);
        const tensor_view v{"expert", dtype::F32, {N, K}, std::as_bytes(std::span<const float>(rows))};
        const std::vector<owned_tensor> q = mxfp4_layout().quantize(v, "expert");
        blocks.insert(blocks.end(), q[0].bytes.begin(), q[0].bytes.end());
        scales.insert(scales.end(), q[1].bytes.begin(), q[1].bytes.end());
    }
}

}  // namespace detail

QFORGE_DECL std::vector<planned_tensor> demo_tensors(const demo_options& o) {
    const std::int64_t hd = o.hidden / o.heads, q = o.heads * hd, kv = o.kv_heads * hd;
    std::vector<planned_tensor> t;
    t.push_back({o.seed_naming ? "model.embedding.weight" : "model.embed_tokens.weight", dtype::BF16, {o.vocab, o.hidden}});
    for (std::int64_t l = 0; l < o.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        t.push_back({p + "input_layernorm.weight", dtype::BF16, {o.hidden}});
        if (o.seed_naming) {
            t.push_back({p + "self_attn.q_k_v_proj.weight", dtype::BF16, {q + 2 * kv, o.hidden}});
            t.push_back({p + "self_attn.out_proj.weight", dtype::BF16, {o.hidden, q}});
        } else {
            t.push_back({p + "self_attn.q_proj.weight", dtype::BF16, {q, o.hidden}});
            t.push_back({p + "self_attn.k_proj.weight", dtype::BF16, {kv, o.hidden}});
            t.push_back({p + "self_attn.v_proj.weight", dtype::BF16, {kv, o.hidden}});
            t.push_back({p + "self_attn.o_proj.weight", dtype::BF16, {o.hidden, q}});
        }
        if (o.moe == demo_moe::gpt_oss || o.moe == demo_moe::gpt_oss_mxfp4) {
            t.push_back({p + "self_attn.q_proj.bias", dtype::BF16, {q}});
            t.push_back({p + "self_attn.k_proj.bias", dtype::BF16, {kv}});
            t.push_back({p + "self_attn.v_proj.bias", dtype::BF16, {kv}});
            t.push_back({p + "self_attn.o_proj.bias", dtype::BF16, {o.hidden}});
            t.push_back({p + "self_attn.sinks", dtype::BF16, {o.heads}});
        }
        t.push_back({p + "post_attention_layernorm.weight", dtype::BF16, {o.hidden}});
        if (o.moe != demo_moe::none) {
            detail::demo_moe_tensors(t, p, o);
            continue;
        }
        t.push_back({p + "mlp.gate_proj.weight", dtype::BF16, {o.intermediate, o.hidden}});
        t.push_back({p + "mlp.up_proj.weight", dtype::BF16, {o.intermediate, o.hidden}});
        t.push_back({p + "mlp.down_proj.weight", dtype::BF16, {o.hidden, o.intermediate}});
    }
    t.push_back({"model.norm.weight", dtype::BF16, {o.hidden}});
    if (!o.tied || o.moe == demo_moe::gpt_oss || o.moe == demo_moe::gpt_oss_mxfp4) t.push_back({"lm_head.weight", dtype::BF16, {o.vocab, o.hidden}});
    return t;
}

QFORGE_DECL void write_demo_checkpoint(const std::string& dir, const demo_options& o) {
    io::make_directory(dir);
    const auto tensors = demo_tensors(o);
    std::uint64_t total = 0;
    std::vector<safetensors::tensor_spec> specs;
    for (const auto& t : tensors) {
        total += t.bytes();
        specs.push_back({t.name, t.type, t.shape});
    }
    // 60% per shard: with no tensor near that size, greedy splitting makes exactly two shards.
    safetensors::sharded_writer writer(dir, specs, o.shards > 1 ? total * 3 / 5 : total + 1);
    detail::demo_rng rng(o.seed);
    std::vector<std::uint16_t> buf;
    std::vector<std::byte> blocks, scales;  // gpt_oss_mxfp4: a fused tensor's pair
    for (const auto& t : tensors) {
        if (t.type == dtype::U8 && t.name.ends_with("_scales")) {  // made with its blocks, just before
            writer.write(t.name, scales);
            continue;
        }
        // MXFP4 blocks [E, N, K/32, 16] stand for the bf16 [E, K, N] tensor gpt_oss draws here
        buf.resize(static_cast<std::size_t>(t.type == dtype::U8 ? checked_numel(t.shape) * 2 : checked_numel(t.shape)));
        const bool norm = t.shape.size() == 1 && t.name.ends_with("norm.weight");
        for (auto& h : buf)
            h = float_to_bf16(static_cast<float>(norm ? 1.0 + 0.05 * rng.normal() : 0.02 * rng.student_t5()));
        if (t.type == dtype::U8) {
            detail::demo_mxfp4_experts(buf, t.shape, blocks, scales);
            writer.write(t.name, blocks);
            continue;
        }
        writer.write(t.name, std::as_bytes(std::span<const std::uint16_t>(buf)));
    }
    writer.finish();
    write_demo_side_files(dir, o);
}

QFORGE_DECL void write_demo_side_files(const std::string& dir, const demo_options& o) {
    const std::int64_t hd = o.hidden / o.heads;
    json cfg = json::object({{"architectures", json::array({"LlamaForCausalLM"})},
                             {"model_type", "llama"},
                             {"hidden_size", o.hidden},
                             {"intermediate_size", o.intermediate},
                             {"num_hidden_layers", o.layers},
                             {"num_attention_heads", o.heads},
                             {"num_key_value_heads", o.kv_heads},
                             {"head_dim", hd},
                             {"vocab_size", o.vocab},
                             {"max_position_embeddings", 2048},
                             {"rms_norm_eps", 1e-05},
                             {"rope_theta", 10000.0},
                             {"hidden_act", "silu"},
                             {"tie_word_embeddings", o.tied},
                             {"bos_token_id", 1},
                             {"eos_token_id", 2},
                             {"torch_dtype", "bfloat16"}});
    if (o.moe != demo_moe::none) detail::demo_moe_config(cfg, o);
    io::write_file(dir + "/config.json", cfg.dump({.indent = 2}) + "\n");
    io::write_file(dir + "/generation_config.json",
                   std::string("{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n  \"do_sample\": false\n}\n"));
    io::write_file(dir + "/tokenizer_config.json",
                   std::string("{\n  \"bos_token\": \"<s>\",\n  \"eos_token\": \"</s>\",\n  \"model_max_length\": 2048\n}\n"));
    // A tiny byte-level vocabulary: enough for the file to be copied and parsed, not a real tokenizer.
    json vocab = json::object({{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}});
    for (int b = 0; b < 256 && b + 3 < o.vocab; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        vocab.set(name, b + 3);
    }
    json tok = json::object({{"version", "1.0"},
                             {"added_tokens", json::array()},
                             {"model", json::object({{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}})}});
    io::write_file(dir + "/tokenizer.json", tok.dump({.indent = 2}) + "\n");
}

namespace detail {

QFORGE_DECL std::uint64_t demo_rng::next() noexcept {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

QFORGE_DECL double demo_rng::normal() noexcept {
    if (has_spare_) {
        has_spare_ = false;
        return spare_;
    }
    const double r = std::sqrt(-2.0 * std::log(uniform())), t = 6.283185307179586 * uniform();
    spare_ = r * std::sin(t);
    has_spare_ = true;
    return r * std::cos(t);
}

QFORGE_DECL double demo_rng::student_t5() noexcept {
    double chi = 0;
    for (int i = 0; i < 5; ++i) {
        const double z = normal();
        chi += z * z;
    }
    return normal() / std::sqrt(chi / 5.0) * std::sqrt(3.0 / 5.0);
}

}  // namespace detail
}  // namespace qforge
#endif
