// A small synthetic FP8 checkpoint (Llama-shaped, one layer) in the layouts qforge reads
// (convert/fp8_source.hpp), and its "twin": the same model with every FP8 weight replaced by
// its dequantized float32 values, computed here from the E4M3 definition (OCP OFP8 table 1),
// not by qforge. Dimensions are chosen ragged against 128 x 128 blocks: hidden 192 (K = 192 is
// one block and a half), intermediate 320, k/v projections of 64 rows.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qforge/core/half.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace qforge::testing {

enum class fp8_layout { native_block, ct_block, ct_channel };

struct fp8_fixture {
    fp8_layout layout = fp8_layout::native_block;
    dtype scale_type = dtype::F32;  ///< F32 (DeepSeek) or BF16 (Qwen, compressed-tensors)
    /// Decoder linears (module names) written in BF16 and listed in modules_to_not_convert / ignore.
    std::vector<std::string> dense;
    bool twin = false;  ///< write the dequantized twin: F32 linears, no quantization_config
    bool nan_code = false;  ///< put the E4M3 NaN code 0x7F at down_proj [1, 2]
    std::uint32_t seed = 7;
    /// > 0: a Qwen3-MoE block instead of the dense MLP: router `mlp.gate.weight` BF16 [E, 192]
    /// and the fused experts `mlp.experts.gate_up_proj [E, 640, 192]` and `down_proj
    /// [E, 192, 320]`, each with its per-expert 128 x 128 grid `<name>_scales_inv [E, rows/128,
    /// cols/128]` as transformers' FP8Expert stores them (src/transformers/integrations/
    /// finegrained_fp8.py: FP8Expert.__init__, Fp8Quantize.convert's `target_keys + "_scales_inv"`).
    /// native_block only; the twin holds the fused tensors as F32.
    std::int64_t fused_experts = 0;
};

/// E4M3 by definition: s.eeee.mmm, bias 7, e = 0 subnormal.
inline float e4m3_by_definition(std::uint8_t c) {
    const int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    return static_cast<float>(s ? -v : v);
}

inline std::vector<std::string> fp8_fixture_linears(std::int64_t fused_experts = 0) {
    std::vector<std::string> m = {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.k_proj",
                                  "model.layers.0.self_attn.v_proj", "model.layers.0.self_attn.o_proj"};
    for (const char* mlp : {"gate_proj", "up_proj", "down_proj"})
        if (!fused_experts) m.push_back(std::string("model.layers.0.mlp.") + mlp);
    if (fused_experts) {
        m.push_back("model.layers.0.mlp.experts.gate_up_proj");
        m.push_back("model.layers.0.mlp.experts.down_proj");
    }
    return m;
}

/// [N, K] of a linear, or [E, N, K] of a fused expert tensor.
inline shape_t fp8_fixture_shape(const std::string& module, std::int64_t fused_experts = 0) {
    const std::int64_t h = 192, i = 320;
    if (module.ends_with("gate_up_proj")) return {fused_experts, 2 * i, h};
    if (module.ends_with("experts.down_proj")) return {fused_experts, h, i};
    if (module.ends_with("q_proj") || module.ends_with("o_proj")) return {h, h};
    if (module.ends_with("k_proj") || module.ends_with("v_proj")) return {64, h};
    if (module.ends_with("down_proj")) return {h, i};
    return {i, h};
}

/// Writes the checkpoint (config.json + model.safetensors) into `dir` (created).
inline void write_fp8_checkpoint(const std::string& dir, const fp8_fixture& f) {
    io::make_directory(dir);
    std::uint32_t state = f.seed;
    auto next = [&] {
        state = state * 1664525u + 1013904223u;
        return state >> 8;
    };
    struct tensor {
        std::string name;
        dtype type;
        shape_t shape;
        std::vector<std::byte> bytes;
    };
    std::vector<tensor> ts;
    auto bf16_tensor = [&](std::string name, shape_t shape, float spread) {
        tensor t{std::move(name), dtype::BF16, shape, {}};
        std::size_t n = 1;
        for (auto d : shape) n *= static_cast<std::size_t>(d);
        t.bytes.resize(2 * n);
        for (std::size_t j = 0; j < n; ++j) {
            const float v = spread * (static_cast<float>(next() % 2001) / 1000.0f - 1.0f) + (spread == 0 ? 1.0f : 0.0f);
            const std::uint16_t h = float_to_bf16(v);
            std::memcpy(t.bytes.data() + 2 * j, &h, 2);
        }
        ts.push_back(std::move(t));
    };
    const bool block = f.layout != fp8_layout::ct_channel;
    const std::string scale_suffix = f.layout == fp8_layout::native_block ? ".weight_scale_inv" : ".weight_scale";
    bf16_tensor("model.embed_tokens.weight", {96, 192}, 0.05f);
    bf16_tensor("lm_head.weight", {96, 192}, 0.05f);
    bf16_tensor("model.norm.weight", {192}, 0.0f);
    bf16_tensor("model.layers.0.input_layernorm.weight", {192}, 0.0f);
    bf16_tensor("model.layers.0.post_attention_layernorm.weight", {192}, 0.0f);
    if (f.fused_experts) bf16_tensor("model.layers.0.mlp.gate.weight", {f.fused_experts, 192}, 0.05f);
    for (const std::string& m : fp8_fixture_linears(f.fused_experts)) {
        const shape_t shape = fp8_fixture_shape(m, f.fused_experts);
        const bool fused = shape.size() == 3;
        const std::int64_t E = fused ? shape[0] : 1, n = shape[shape.size() - 2], k = shape.back();
        const std::string wname = fused ? m : m + ".weight";
        bool dense = false;
        for (const auto& d : f.dense) dense = dense || d == m;
        if (dense) {
            bf16_tensor(m + ".weight", shape, 0.05f);
            continue;
        }
        const std::int64_t sr = block ? (n + 127) / 128 : n, sc = block ? (k + 127) / 128 : 1;
        std::vector<float> scales(static_cast<std::size_t>(E * sr * sc));
        for (float& s : scales) {
            // 2^-9 .. 2^-8 with a full float mantissa (the product then rounds in float32)
            s = std::ldexp(1.0f + static_cast<float>(next() % 1000003) / 1000003.0f, -9);
            if (f.scale_type == dtype::BF16) s = bf16_to_float(float_to_bf16(s));
        }
        std::vector<std::uint8_t> codes(static_cast<std::size_t>(E * n * k));
        for (auto& c : codes) {
            const std::uint32_t r = next();
            // exponents 0 (subnormals) .. 14, a few at 15 (up to 448), never the NaN code
            const std::uint32_t e = r % 16 == 0 ? 15 : (r / 16) % 15;
            const std::uint32_t m3 = e == 15 ? (r / 256) % 7 : (r / 256) % 8;
            c = static_cast<std::uint8_t>(((r >> 20) & 1u) << 7 | e << 3 | m3);
        }
        if (f.nan_code && m.ends_with("down_proj")) codes[static_cast<std::size_t>(k + 2)] = 0x7F;
        const std::int64_t brows = block ? 128 : 1, bcols = block ? 128 : k;
        if (f.twin) {
            tensor t{wname, dtype::F32, shape, std::vector<std::byte>(codes.size() * 4)};
            for (std::int64_t e = 0; e < E; ++e)  // expert e's [n, k] block under its own grid
                for (std::int64_t r = 0; r < n; ++r)
                    for (std::int64_t c = 0; c < k; ++c) {
                        const auto at = static_cast<std::size_t>((e * n + r) * k + c);
                        const float v = e4m3_by_definition(codes[at]) *
                                        scales[static_cast<std::size_t>(e * sr * sc + (r / brows) * sc + c / bcols)];
                        std::memcpy(t.bytes.data() + 4 * at, &v, 4);
                    }
            ts.push_back(std::move(t));
            continue;
        }
        tensor w{wname, dtype::F8_E4M3, shape, std::vector<std::byte>(codes.size())};
        std::memcpy(w.bytes.data(), codes.data(), codes.size());
        ts.push_back(std::move(w));
        const shape_t scale_shape = fused ? shape_t{E, sr, sc} : block ? shape_t{sr, sc} : shape_t{n, 1};
        tensor s{fused ? m + "_scales_inv" : m + scale_suffix, f.scale_type, scale_shape, {}};
        s.bytes.resize(scales.size() * dtype_size(f.scale_type));
        for (std::size_t j = 0; j < scales.size(); ++j) {
            if (f.scale_type == dtype::BF16) {
                const std::uint16_t h = float_to_bf16(scales[j]);
                std::memcpy(s.bytes.data() + 2 * j, &h, 2);
            } else {
                std::memcpy(s.bytes.data() + 4 * j, &scales[j], 4);
            }
        }
        ts.push_back(std::move(s));
    }
    std::vector<safetensors::tensor_spec> specs;
    for (const auto& t : ts) specs.push_back({t.name, t.type, t.shape});
    safetensors::writer w(dir + "/model.safetensors", specs, safetensors::default_metadata(), {.sync = false});
    for (const auto& t : ts) w.write(t.name, t.bytes);
    w.finish();

    json cfg = json::object({{"architectures", json::array({"LlamaForCausalLM"})},
                             {"model_type", "llama"},
                             {"hidden_size", 192},
                             {"intermediate_size", 320},
                             {"num_hidden_layers", 1},
                             {"num_attention_heads", 3},
                             {"num_key_value_heads", 1},
                             {"head_dim", 64},
                             {"vocab_size", 96},
                             {"max_position_embeddings", 256},
                             {"rms_norm_eps", 1e-5},
                             {"tie_word_embeddings", false},
                             {"torch_dtype", "bfloat16"}});
    if (f.fused_experts) {
        cfg.set("architectures", json::array({"Qwen3MoeForCausalLM"}));
        cfg.set("model_type", "qwen3_moe");
        cfg.set("num_experts", f.fused_experts);
        cfg.set("num_experts_per_tok", 2);
        cfg.set("moe_intermediate_size", 320);
        cfg.set("decoder_sparse_step", 1);
        cfg.set("mlp_only_layers", json::array());
    }
    if (!f.twin) {
        json dense = json::array();
        for (const auto& d : f.dense) dense.push_back(d);
        if (f.layout == fp8_layout::native_block) {
            cfg.set("quantization_config", json::object({{"activation_scheme", "dynamic"},
                                                         {"fmt", "e4m3"},
                                                         {"modules_to_not_convert", std::move(dense)},
                                                         {"quant_method", "fp8"},
                                                         {"weight_block_size", json::array({128, 128})}}));
        } else {
            dense.push_back("lm_head");
            json weights = json::object({{"num_bits", 8},
                                         {"type", "float"},
                                         {"symmetric", true},
                                         {"dynamic", false},
                                         {"strategy", block ? "block" : "channel"},
                                         {"block_structure", block ? json::array({128, 128}) : json()}});
            json group = json::object({{"targets", json::array({"Linear"})}, {"weights", std::move(weights)}});
            cfg.set("quantization_config",
                    json::object({{"quant_method", "compressed-tensors"},
                                  {"format", "float-quantized"},
                                  {"config_groups", json::object({{"group_0", std::move(group)}})},
                                  {"ignore", std::move(dense)},
                                  {"quantization_status", "compressed"}}));
        }
    }
    io::write_config(dir, cfg);
}

}  // namespace qforge::testing
