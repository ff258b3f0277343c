// A reference gpt-oss forward pass in plain C++ (double accumulation), written from the Hugging
// Face definition (transformers models/gpt_oss/modeling_gpt_oss.py) and nothing of llama.cpp's:
//  - GptOssAttention: q/k/v/o with biases, rotate_half RoPE (no scaling here), GQA, scores
//    scaled by head_dim^-0.5, a learned sink logit per head joining the softmax and then dropped
//    (eager_attention_forward: cat([scores, sinks]), softmax, probs[..., :-1]); the layers whose
//    layer_types entry is "sliding_attention" see the last `sliding_window` positions only;
//  - GptOssTopKRouter: logits = W x + b, top-k, softmax over the k kept logits;
//  - GptOssExperts: gate = min(gate, limit), up = clamp(up, -limit, limit),
//    (up + 1) * gate * sigmoid(alpha * gate) into down_proj (+ bias), weighted by the router;
//  - RMSNorm before attention and before the MLP (post_attention_layernorm), final norm, head.
// Each expert is held as gate / up [I, H] and down [H, I] (out x in): the caller cuts them.
// Small models only: one token at a time with a KV cache, every product a double loop.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "support/llama_reference.hpp"

namespace qforge::testing::gpt_oss_ref {

using llama_ref::matrix;

struct expert {
    matrix gate, up, down, gate_bias, up_bias, down_bias;
};

struct layer {
    matrix attn_norm, q, k, v, o, q_bias, k_bias, v_bias, o_bias, sinks, post_norm, router, router_bias;
    std::vector<expert> experts;
    bool sliding = false;
};

struct model {
    std::int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, top_k = 0, window = 0;
    double eps = 1e-5, theta = 10000, limit = 7.0, alpha = 1.702;
    matrix embed, norm, head;
    std::vector<layer> layers;
};

/// W x + b.
inline std::vector<float> linear(const matrix& w, const matrix& b, const std::vector<float>& x) {
    std::vector<float> y = llama_ref::matvec(w, x);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = static_cast<float>(static_cast<double>(y[i]) + b.w[i]);
    return y;
}

namespace detail {

/// Attention of the newest position (index t of the cache) with the sinks and the window.
inline std::vector<float> attend(const model& m, const layer& L, const std::vector<float>& q,
                                 const std::vector<std::vector<float>>& kc, const std::vector<std::vector<float>>& vc) {
    const std::int64_t hd = m.head_dim, rep = m.heads / m.kv_heads, t = static_cast<std::int64_t>(kc.size()) - 1;
    const std::int64_t first = L.sliding ? std::max<std::int64_t>(0, t - m.window + 1) : 0;
    std::vector<float> att(static_cast<std::size_t>(m.heads * hd), 0.0f);
    for (std::int64_t h = 0; h < m.heads; ++h) {
        const std::int64_t g = h / rep;
        std::vector<double> sc;
        double mx = L.sinks.w[h];
        for (std::int64_t j = first; j <= t; ++j) {
            double s = 0;
            for (std::int64_t d = 0; d < hd; ++d) s += static_cast<double>(q[h * hd + d]) * kc[j][g * hd + d];
            sc.push_back(s / std::sqrt(static_cast<double>(hd)));
            mx = std::max(mx, sc.back());
        }
        double z = std::exp(L.sinks.w[h] - mx);
        for (auto& s : sc) z += (s = std::exp(s - mx));
        for (std::int64_t j = first; j <= t; ++j)
            for (std::int64_t d = 0; d < hd; ++d)
                att[h * hd + d] += static_cast<float>(sc[static_cast<std::size_t>(j - first)] / z * vc[j][g * hd + d]);
    }
    return att;
}

/// The MoE MLP of one position.
inline std::vector<float> moe(const model& m, const layer& L, const std::vector<float>& x) {
    const std::vector<float> logits = linear(L.router, L.router_bias, x);
    std::vector<std::size_t> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return logits[a] > logits[b]; });
    order.resize(static_cast<std::size_t>(m.top_k));
    double mx = logits[order[0]], z = 0;
    std::vector<double> w;
    for (std::size_t e : order) z += w.emplace_back(std::exp(logits[e] - mx));
    std::vector<double> out(x.size(), 0.0);
    for (std::size_t i = 0; i < order.size(); ++i) {
        const expert& E = L.experts[order[i]];
        std::vector<float> g = linear(E.gate, E.gate_bias, x), u = linear(E.up, E.up_bias, x);
        std::vector<float> act(g.size());
        for (std::size_t j = 0; j < g.size(); ++j) {
            const double gj = std::min<double>(g[j], m.limit), uj = std::clamp<double>(u[j], -m.limit, m.limit);
            act[j] = static_cast<float>((uj + 1.0) * gj / (1.0 + std::exp(-m.alpha * gj)));
        }
        const std::vector<float> d = linear(E.down, E.down_bias, act);
        for (std::size_t j = 0; j < d.size(); ++j) out[j] += w[i] / z * d[j];
    }
    return std::vector<float>(out.begin(), out.end());
}

}  // namespace detail

/// One sequence through the model, token by token with a KV cache: the logits after each token.
inline std::vector<std::vector<float>> run(const model& m, const std::vector<int>& tokens) {
    std::vector<std::vector<std::vector<float>>> kc(m.layers.size()), vc(m.layers.size());
    std::vector<std::vector<float>> logits;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
        std::vector<float> x(m.embed.row(tokens[t]), m.embed.row(tokens[t]) + m.hidden);
        for (std::size_t l = 0; l < m.layers.size(); ++l) {
            const layer& L = m.layers[l];
            const std::vector<float> a = llama_ref::rmsnorm(x, L.attn_norm, m.eps);
            std::vector<float> q = linear(L.q, L.q_bias, a), k = linear(L.k, L.k_bias, a), v = linear(L.v, L.v_bias, a);
            for (std::int64_t h = 0; h < m.heads; ++h) llama_ref::rope(q.data() + h * m.head_dim, m.head_dim, static_cast<std::int64_t>(t), m.theta);
            for (std::int64_t h = 0; h < m.kv_heads; ++h) llama_ref::rope(k.data() + h * m.head_dim, m.head_dim, static_cast<std::int64_t>(t), m.theta);
            kc[l].push_back(k);
            vc[l].push_back(v);
            const std::vector<float> o = linear(L.o, L.o_bias, detail::attend(m, L, q, kc[l], vc[l]));
            for (std::int64_t i = 0; i < m.hidden; ++i) x[i] += o[i];
            const std::vector<float> d = detail::moe(m, L, llama_ref::rmsnorm(x, L.post_norm, m.eps));
            for (std::int64_t i = 0; i < m.hidden; ++i) x[i] += d[i];
        }
        logits.push_back(llama_ref::matvec(m.head, llama_ref::rmsnorm(x, m.norm, m.eps)));
    }
    return logits;
}

}  // namespace qforge::testing::gpt_oss_ref
