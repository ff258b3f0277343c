// A reference Llama forward pass in plain C++ (double accumulation), written from the Hugging
// Face LlamaForCausalLM definition (transformers models/llama/modeling_llama.py: RMSNorm,
// rotate_half RoPE, GQA by repeat_kv, SiLU-gated MLP) and nothing of llama.cpp's. Used by the
// calibration bench (its statistics and KL figures) and by the llama.cpp logits test
// (tests/gguf/llama_logits_test.sh), which runs it over the weights decoded from a GGUF file and
// holds llama.cpp's logits against it. Small models only (stories260k): one token at a time with
// a KV cache, every matrix-vector product a double loop.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "qforge/core/half.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/reader.hpp"

namespace qforge::testing::llama_ref {

/// A row-major float matrix (a vector is one column).
struct matrix {
    std::int64_t rows = 0, cols = 0;
    std::vector<float> w;
    const float* row(std::int64_t r) const { return w.data() + r * cols; }
};

struct layer {
    matrix attn_norm, q, k, v, o, ffn_norm, gate, up, down;
};

/// The model in Hugging Face layout (q/k rows as the checkpoint has them, not GGUF-permuted).
struct model {
    std::int64_t hidden = 0, ff = 0, heads = 0, kv_heads = 0, head_dim = 0, vocab = 0;
    double eps = 1e-5, theta = 10000;
    matrix embed, norm;
    matrix head;  // lm_head; empty when tied to `embed`
    std::vector<layer> layers;
};

/// Where the forward pass shows a linear's input: 0 attention in, 1 attention out (o_proj's
/// input), 2 MLP in, 3 MLP activation (down_proj's input).
using observer = std::function<void(std::size_t layer, int slot, const std::vector<float>& x)>;

inline std::vector<float> matvec(const matrix& m, const std::vector<float>& x) {
    std::vector<float> y(static_cast<std::size_t>(m.rows));
    for (std::int64_t r = 0; r < m.rows; ++r) {
        double s = 0;
        for (std::int64_t c = 0; c < m.cols; ++c) s += static_cast<double>(m.row(r)[c]) * x[c];
        y[r] = static_cast<float>(s);
    }
    return y;
}

inline std::vector<float> rmsnorm(const std::vector<float>& x, const matrix& g, double eps) {
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
    std::vector<float> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = static_cast<float>(x[i] * inv) * g.w[i];
    return y;
}

/// Hugging Face rotate_half RoPE on one head (pairs i, i + d/2).
inline void rope(float* h, std::int64_t d, std::int64_t pos, double theta) {
    for (std::int64_t i = 0; i < d / 2; ++i) {
        const double f = static_cast<double>(pos) * std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
        const double c = std::cos(f), s = std::sin(f), a = h[i], b = h[i + d / 2];
        h[i] = static_cast<float>(a * c - b * s);
        h[i + d / 2] = static_cast<float>(b * c + a * s);
    }
}

namespace detail {

/// Causal attention of the newest position over the cache, every query head on its KV group.
inline std::vector<float> attend(const model& m, const std::vector<float>& q, const std::vector<std::vector<float>>& kc,
                                 const std::vector<std::vector<float>>& vc) {
    const std::int64_t hd = m.head_dim, rep = m.heads / m.kv_heads;
    std::vector<float> att(static_cast<std::size_t>(m.heads * hd), 0.0f);
    for (std::int64_t h = 0; h < m.heads; ++h) {
        const std::int64_t g = h / rep;
        std::vector<double> sc(kc.size());
        double mx = -1e300;
        for (std::size_t j = 0; j < kc.size(); ++j) {
            double s = 0;
            for (std::int64_t d = 0; d < hd; ++d) s += static_cast<double>(q[h * hd + d]) * kc[j][g * hd + d];
            sc[j] = s / std::sqrt(static_cast<double>(hd));
            mx = std::max(mx, sc[j]);
        }
        double z = 0;
        for (auto& s : sc) z += (s = std::exp(s - mx));
        for (std::size_t j = 0; j < kc.size(); ++j)
            for (std::int64_t d = 0; d < hd; ++d) att[h * hd + d] += static_cast<float>(sc[j] / z * vc[j][g * hd + d]);
    }
    return att;
}

}  // namespace detail

/// One sequence through the model, token by token with a KV cache: the logits after each
/// token; `seen` (when set) gets every linear's input.
inline std::vector<std::vector<float>> run(const model& m, const std::vector<int>& tokens, const observer& seen = {}) {
    std::vector<std::vector<std::vector<float>>> kc(m.layers.size()), vc(m.layers.size());
    std::vector<std::vector<float>> logits;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
        std::vector<float> x(m.embed.row(tokens[t]), m.embed.row(tokens[t]) + m.hidden);
        for (std::size_t l = 0; l < m.layers.size(); ++l) {
            const layer& L = m.layers[l];
            const std::vector<float> a = rmsnorm(x, L.attn_norm, m.eps);
            std::vector<float> q = matvec(L.q, a), k = matvec(L.k, a), v = matvec(L.v, a);
            for (std::int64_t h = 0; h < m.heads; ++h) rope(q.data() + h * m.head_dim, m.head_dim, static_cast<std::int64_t>(t), m.theta);
            for (std::int64_t h = 0; h < m.kv_heads; ++h) rope(k.data() + h * m.head_dim, m.head_dim, static_cast<std::int64_t>(t), m.theta);
            kc[l].push_back(k);
            vc[l].push_back(v);
            const std::vector<float> att = detail::attend(m, q, kc[l], vc[l]);
            const std::vector<float> o = matvec(L.o, att);
            for (std::int64_t i = 0; i < m.hidden; ++i) x[i] += o[i];
            const std::vector<float> b = rmsnorm(x, L.ffn_norm, m.eps);
            const std::vector<float> gate = matvec(L.gate, b), up = matvec(L.up, b);
            std::vector<float> act(gate.size());
            for (std::size_t i = 0; i < act.size(); ++i) act[i] = static_cast<float>(gate[i] / (1.0 + std::exp(-gate[i]))) * up[i];
            const std::vector<float> d = matvec(L.down, act);
            for (std::int64_t i = 0; i < m.hidden; ++i) x[i] += d[i];
            if (seen) {
                seen(l, 0, a);
                seen(l, 1, att);
                seen(l, 2, b);
                seen(l, 3, act);
            }
        }
        logits.push_back(matvec(m.head.rows ? m.head : m.embed, rmsnorm(x, m.norm, m.eps)));
    }
    return logits;
}

/// The Hugging Face tensor names of one layer, in `layer`'s member order.
inline std::vector<std::string> layer_tensor_names(std::int64_t l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    return {p + "input_layernorm.weight", p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
            p + "self_attn.v_proj.weight", p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight",
            p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight", p + "mlp.down_proj.weight"};
}

/// Hyperparameters from config.json; the weights are left empty.
inline model shape_from_config(const std::string& dir) {
    const json cfg = json::parse(io::read_file(dir + "/config.json"), dir + "/config.json");
    model m;
    m.hidden = cfg.at("hidden_size").as_int();
    m.ff = cfg.at("intermediate_size").as_int();
    m.heads = cfg.at("num_attention_heads").as_int();
    m.kv_heads = cfg.at("num_key_value_heads").as_int();
    m.head_dim = m.hidden / m.heads;
    m.eps = cfg.at("rms_norm_eps").as_double();
    m.theta = cfg.at("rope_theta").as_double();
    m.layers.resize(static_cast<std::size_t>(cfg.at("num_hidden_layers").as_int()));
    return m;
}

/// A Hugging Face Llama directory (config.json + one bf16 model.safetensors) loaded with
/// `get(name)` filling each matrix (the safetensors loader below, or a GGUF decoder).
template <class Get>
model load_with(const std::string& dir, Get&& get) {
    model m = shape_from_config(dir);
    m.embed = get("model.embed_tokens.weight");
    m.norm = get("model.norm.weight");
    m.vocab = m.embed.rows;
    for (std::size_t l = 0; l < m.layers.size(); ++l) {
        const auto n = layer_tensor_names(static_cast<std::int64_t>(l));
        layer& L = m.layers[l];
        matrix* dst[] = {&L.attn_norm, &L.q, &L.k, &L.v, &L.o, &L.ffn_norm, &L.gate, &L.up, &L.down};
        for (std::size_t i = 0; i < n.size(); ++i) *dst[i] = get(n[i]);
    }
    return m;
}

/// The source model itself (bf16 safetensors, tied head).
inline model load_model(const std::string& dir) {
    const safetensors::reader rd(dir + "/model.safetensors");
    return load_with(dir, [&](const std::string& name) {
        const tensor_view v = rd.view(name);
        matrix m{v.shape[0], v.rank() == 2 ? v.shape[1] : 1, std::vector<float>(static_cast<std::size_t>(v.numel()))};
        for (std::size_t i = 0; i < m.w.size(); ++i) m.w[i] = bf16_to_float(v.data<std::uint16_t>()[i]);
        return m;
    });
}

}  // namespace qforge::testing::llama_ref
