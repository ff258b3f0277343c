// The independent side of tests/gguf/llama_logits_test.sh for gpt-oss: the weights of a GGUF
// file qforge wrote, decoded with qforge's dequantizers (ggml's dequantize_row_<t>,
// bit-identical) under llama.cpp's tensor names, run through the reference forward pass
// (tests/support/gpt_oss_reference.hpp, the Hugging Face definition, hyperparameters from the
// SOURCE's config.json, not from the GGUF metadata).
//
//   gguf_gpt_oss_reference_logits FILE.gguf SRC_DIR TOKEN,TOKEN,... [BREAK]   -> JSON on stdout
//
// BREAK makes the reference wrong on purpose, so the test shows it notices: "no-sinks" (the
// attention sinks left out), "swap-gate-up" (each expert's gate and up exchanged: what taking
// the odd rows of gate_up for gate would do), "no-window" (every layer attends fully).
//
// Output as reference_logits.cpp's: {"weights": {"min_snr_db", "tensor"}, "logits": [...]}. The
// weights are held against the source cut by transformers' definition, written here again:
// gate_up_proj [E, H, 2I] is used as x @ gate_up_proj[e] with gate = columns 0, 2, 4, ... and
// up = 1, 3, 5, ... (GptOssExperts), down_proj [E, I, H] as h @ down_proj[e]; a native MXFP4
// source's `_blocks` / `_scales` are decoded as transformers' convert_moe_packed_tensors does
// (low nibble = element 2j, e2m1 * 2^(scale - 127), [E, N, K] transposed to [E, K, N]).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "qforge/convert/gguf/decode.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/io/gguf/reader.hpp"
#include "gguf/llama_logits/reference_io.hpp"
#include "support/bf16_values.hpp"
#include "support/gpt_oss_checkpoint.hpp"
#include "support/gpt_oss_reference.hpp"

using namespace qforge;
using namespace qforge::testing::gpt_oss_ref;

namespace {

/// A source tensor as float in transformers' in-memory layout (bf16 as stored; a fused MXFP4
/// expert tensor `base` decoded from its blocks and scales into [E, K, N]).
std::vector<float> decode_source(const checkpoint_source& src, const std::string& base) {
    const std::string blocks = base + "_blocks";
    bool native = false;
    for (const auto& t : src.tensors()) native |= t.name == blocks;
    if (!native) return testing::bf16_values(src.view(base));
    const tensor_view b = src.view(blocks), s = src.view(base + "_scales");
    const std::int64_t E = b.shape[0], N = b.shape[1], G = b.shape[2], K = G * 32;
    std::vector<float> out(static_cast<std::size_t>(E * K * N));
    for (std::int64_t e = 0; e < E; ++e)
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t k = 0; k < K; ++k) {
                const auto byte = std::to_integer<unsigned>(b.bytes[static_cast<std::size_t>(((e * N + n) * G + k / 32) * 16 + (k % 32) / 2)]);
                const int sc = std::to_integer<int>(s.bytes[static_cast<std::size_t>((e * N + n) * G + k / 32)]);
                out[static_cast<std::size_t>((e * K + k) * N + n)] =
                    static_cast<float>(std::ldexp(testing::e2m1_by_definition(k % 2 ? byte >> 4 : byte & 15u), sc - 127));
            }
    return out;
}

/// decode_source, once per tensor (every expert's cut reads the same fused tensor).
const std::vector<float>& source_values(const checkpoint_source& src, const std::string& base) {
    static std::map<std::string, std::vector<float>> decoded;
    auto it = decoded.find(base);
    if (it == decoded.end()) it = decoded.emplace(base, decode_source(src, base)).first;
    return it->second;
}

matrix as_matrix(std::int64_t rows, std::int64_t cols, std::vector<float> w) { return matrix{rows, cols, std::move(w)}; }

double snr_db(const matrix& ref, const matrix& got) {
    if (ref.w.size() != got.w.size()) return -std::numeric_limits<double>::infinity();
    double s = 0, e = 0;
    for (std::size_t i = 0; i < ref.w.size(); ++i) {
        s += static_cast<double>(ref.w[i]) * ref.w[i];
        e += (static_cast<double>(ref.w[i]) - got.w[i]) * (static_cast<double>(ref.w[i]) - got.w[i]);
    }
    return e == 0 ? std::numeric_limits<double>::infinity() : 10 * std::log10(s / e);
}

/// The model from `get(gguf_name, rows, cols)` per tensor, experts cut from stacked {cols, rows, E}.
template <class Get>
model assemble(const json& cfg, Get&& get) {
    model m;
    m.hidden = cfg.at("hidden_size").as_int();
    m.heads = cfg.at("num_attention_heads").as_int();
    m.kv_heads = cfg.at("num_key_value_heads").as_int();
    m.head_dim = cfg.at("head_dim").as_int();
    m.top_k = cfg.at("num_experts_per_tok").as_int();
    m.window = cfg.at("sliding_window").as_int();
    m.eps = cfg.at("rms_norm_eps").as_double();
    m.theta = cfg.at("rope_theta").as_double();
    const std::int64_t L = cfg.at("num_hidden_layers").as_int(), E = cfg.at("num_local_experts").as_int();
    m.embed = get("token_embd.weight", -1);
    m.norm = get("output_norm.weight", -1);
    m.head = get("output.weight", -1);
    for (std::int64_t l = 0; l < L; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        layer y;
        y.sliding = cfg.at("layer_types").as_array().at(static_cast<std::size_t>(l)).as_string() == "sliding_attention";
        matrix* dst[] = {&y.attn_norm, &y.q, &y.k, &y.v, &y.o, &y.q_bias, &y.k_bias, &y.v_bias, &y.o_bias,
                         &y.sinks, &y.post_norm, &y.router, &y.router_bias};
        const char* names[] = {"attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight",
                               "attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "attn_sinks.weight",
                               "post_attention_norm.weight", "ffn_gate_inp.weight", "ffn_gate_inp.bias"};
        for (std::size_t i = 0; i < std::size(names); ++i) *dst[i] = get(b + names[i], -1);
        for (std::int64_t e = 0; e < E; ++e)
            y.experts.push_back({get(b + "ffn_gate_exps.weight", e), get(b + "ffn_up_exps.weight", e), get(b + "ffn_down_exps.weight", e),
                                 get(b + "ffn_gate_exps.bias", e), get(b + "ffn_up_exps.bias", e), get(b + "ffn_down_exps.bias", e)});
        m.layers.push_back(std::move(y));
    }
    return m;
}

/// The source tensor that llama.cpp's `gguf_name` stands for, cut for expert `e` by transformers' definition.
matrix source_tensor_for(const checkpoint_source& src, const std::string& gguf_name, std::int64_t e, const json& cfg) {
    const std::int64_t H = cfg.at("hidden_size").as_int(), I = cfg.at("intermediate_size").as_int();
    if (gguf_name == "token_embd.weight") return as_matrix(cfg.at("vocab_size").as_int(), H, source_values(src, "model.embed_tokens.weight"));
    if (gguf_name == "output.weight") return as_matrix(cfg.at("vocab_size").as_int(), H, source_values(src, "lm_head.weight"));
    if (gguf_name == "output_norm.weight") return as_matrix(H, 1, source_values(src, "model.norm.weight"));
    const auto dot = gguf_name.find('.', 4);
    const std::string layer = gguf_name.substr(4, dot - 4), leaf = gguf_name.substr(dot + 1);
    const std::string p = "model.layers." + layer + ".";
    struct dense {
        const char* gguf;
        const char* hf;
    };
    static const dense plain[] = {{"attn_norm.weight", "input_layernorm.weight"}, {"post_attention_norm.weight", "post_attention_layernorm.weight"},
                                  {"attn_q.weight", "self_attn.q_proj.weight"},  {"attn_k.weight", "self_attn.k_proj.weight"},
                                  {"attn_v.weight", "self_attn.v_proj.weight"},  {"attn_output.weight", "self_attn.o_proj.weight"},
                                  {"attn_q.bias", "self_attn.q_proj.bias"},      {"attn_k.bias", "self_attn.k_proj.bias"},
                                  {"attn_v.bias", "self_attn.v_proj.bias"},      {"attn_output.bias", "self_attn.o_proj.bias"},
                                  {"attn_sinks.weight", "self_attn.sinks"},      {"ffn_gate_inp.weight", "mlp.router.weight"},
                                  {"ffn_gate_inp.bias", "mlp.router.bias"}};
    for (const dense& d : plain)
        if (leaf == d.gguf) {
            const std::vector<float>& v = source_values(src, p + d.hf);
            const std::int64_t cols = leaf == "attn_output.weight" ? cfg.at("num_attention_heads").as_int() * cfg.at("head_dim").as_int()
                                      : leaf.ends_with(".bias") || leaf.ends_with("norm.weight") || leaf == "attn_sinks.weight" ? 1
                                                                                                                               : H;
            return as_matrix(static_cast<std::int64_t>(v.size()) / cols, cols, v);
        }
    const bool gate = leaf.starts_with("ffn_gate_exps"), up = leaf.starts_with("ffn_up_exps");
    if (leaf.ends_with(".bias")) {
        const std::vector<float>& v = source_values(src, p + (gate || up ? "mlp.experts.gate_up_proj_bias" : "mlp.experts.down_proj_bias"));
        std::vector<float> out;
        if (gate || up)
            for (std::int64_t r = 0; r < I; ++r) out.push_back(v[static_cast<std::size_t>(e * 2 * I + 2 * r + (up ? 1 : 0))]);
        else
            out.assign(v.begin() + e * H, v.begin() + (e + 1) * H);
        return as_matrix(static_cast<std::int64_t>(out.size()), 1, out);
    }
    if (gate || up) {
        const std::vector<float>& v = source_values(src, p + "mlp.experts.gate_up_proj");  // [E, H, 2I]
        std::vector<float> out;
        for (std::int64_t r = 0; r < I; ++r)
            for (std::int64_t c = 0; c < H; ++c) out.push_back(v[static_cast<std::size_t>((e * H + c) * 2 * I + 2 * r + (up ? 1 : 0))]);
        return as_matrix(I, H, out);
    }
    const std::vector<float>& v = source_values(src, p + "mlp.experts.down_proj");  // [E, I, H]
    std::vector<float> out;
    for (std::int64_t r = 0; r < H; ++r)
        for (std::int64_t c = 0; c < I; ++c) out.push_back(v[static_cast<std::size_t>((e * I + c) * H + r)]);
    return as_matrix(H, I, out);
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc != 4 && argc != 5) {
        std::fprintf(stderr, "usage: %s FILE.gguf SRC_DIR TOKEN,TOKEN,... [no-sinks|swap-gate-up|no-window]\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[2], broken = argc == 5 ? argv[4] : "";
    if (!broken.empty() && broken != "no-sinks" && broken != "swap-gate-up" && broken != "no-window")
        throw std::runtime_error("unknown BREAK '" + broken + "'");
    const gguf::reader r(argv[1]);
    const json cfg = json::parse(io::read_file(dir + "/config.json"), dir + "/config.json");
    const checkpoint_source src(dir);
    double min_snr = std::numeric_limits<double>::infinity();
    std::string worst;
    // One GGUF tensor decoded, an expert's matrix (ne {cols, rows, E}) cut from a stacked one,
    // and held against the source's.
    auto get = [&](const std::string& name, std::int64_t e) {
        const gguf::tensor_entry* t = r.find_tensor(name);
        if (!t) throw std::runtime_error(std::string(argv[1]) + ": no tensor " + name);
        std::vector<float> flat = gguf::read_f32(r, *t);
        const bool stacked = e >= 0;
        const std::int64_t cols = t->ne[0], rows = stacked ? (t->ne.size() == 3 ? t->ne[1] : 1) : t->numel() / cols;
        if (stacked) flat = std::vector<float>(flat.begin() + e * rows * cols, flat.begin() + (e + 1) * rows * cols);
        matrix m = t->ne.size() == 1 || (stacked && t->ne.size() == 2) ? as_matrix(cols, 1, flat) : as_matrix(rows, cols, flat);
        const double s = snr_db(source_tensor_for(src, name, e, cfg), m);
        if (s < min_snr) min_snr = s, worst = name + (stacked ? " expert " + std::to_string(e) : "");
        return m;
    };
    model m = assemble(cfg, get);
    for (layer& y : m.layers) {
        if (broken == "no-sinks") std::fill(y.sinks.w.begin(), y.sinks.w.end(), -1e30f);
        if (broken == "no-window") y.sliding = false;
        if (broken == "swap-gate-up")
            for (expert& x : y.experts) std::swap(x.gate, x.up), std::swap(x.gate_bias, x.up_bias);
    }
    testing::print_reference(min_snr, worst, run(m, testing::parse_token_list(argv[3])));
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_gpt_oss_reference_logits: %s\n", e.what());
    return 1;
}
