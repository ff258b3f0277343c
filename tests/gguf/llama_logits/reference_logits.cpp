// The independent side of tests/gguf/llama_logits_test.sh: the weights of a GGUF file qforge
// wrote, decoded with qforge's dequantizers (ggml's dequantize_row_<t>, bit-identical), mapped
// back to Hugging Face names and layout, then run through the reference forward pass
// (tests/support/llama_reference.hpp, HF rotate_half RoPE, hyperparameters from the SOURCE's
// config.json, not from the GGUF metadata).
//
//   gguf_reference_logits FILE.gguf SRC_DIR TOKEN,TOKEN,... [BREAK]   -> JSON on stdout
//
// BREAK makes the reference wrong on purpose, so the test shows it notices: "rope-theta" (RoPE
// base 500000 instead of config.json's), "no-unpermute" (q/k rows taken as GGUF stores them),
// "eps" (RMSNorm epsilon 1e-6).
//
// Output: {"weights": {"min_snr_db": x, "tensor": name}, "logits": [[...], ...]}: the decoded
// weights against the source (HF layout) and the reference logits after each token. The q/k
// rows are un-permuted here with convert_hf_to_gguf.py's own formula (LlamaModel.permute:
// reshape(n_head, 2, rows / n_head / 2, cols).swapaxes(1, 2)), written again rather than taken
// from qforge. A wrong permutation in qforge therefore shows in min_snr_db, and a wrong RoPE,
// norm epsilon or head layout in llama.cpp's logits against these.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "qforge/convert/gguf/decode.hpp"
#include "qforge/io/gguf/reader.hpp"
#include "gguf/llama_logits/reference_io.hpp"
#include "support/llama_reference.hpp"

using namespace qforge;
using namespace qforge::testing::llama_ref;

namespace {

/// The llama.cpp tensor name of a Hugging Face Llama tensor (LC gguf-py tensor_mapping.py).
std::string gguf_name(const std::string& hf) {
    static const std::map<std::string, std::string> top = {{"model.embed_tokens.weight", "token_embd.weight"},
                                                           {"model.norm.weight", "output_norm.weight"},
                                                           {"lm_head.weight", "output.weight"}};
    static const std::map<std::string, std::string> per_layer = {
        {"input_layernorm", "attn_norm"}, {"self_attn.q_proj", "attn_q"}, {"self_attn.k_proj", "attn_k"},
        {"self_attn.v_proj", "attn_v"}, {"self_attn.o_proj", "attn_output"}, {"post_attention_layernorm", "ffn_norm"},
        {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"}, {"mlp.down_proj", "ffn_down"}};
    if (const auto it = top.find(hf); it != top.end()) return it->second;
    const std::string p = "model.layers.";
    const auto dot = hf.find('.', p.size());
    const std::string layer = hf.substr(p.size(), dot - p.size()), rest = hf.substr(dot + 1, hf.size() - dot - 1 - 7);
    return "blk." + layer + "." + per_layer.at(rest) + ".weight";
}

/// HF row of GGUF row `g` for a tensor permuted over `n_head` heads (the inverse of
/// convert_hf_to_gguf's permute: GGUF (h, i, j) <- HF (h, j, i), i < rows / n_head / 2, j < 2).
std::int64_t hf_row(std::int64_t g, std::int64_t rows, std::int64_t n_head) {
    const std::int64_t hd = rows / n_head, h = g / hd, i = (g % hd) / 2, j = g % 2;
    return h * hd + j * (hd / 2) + i;
}

double snr_db(const matrix& ref, const matrix& got) {
    double s = 0, e = 0;
    for (std::size_t i = 0; i < ref.w.size(); ++i) {
        s += static_cast<double>(ref.w[i]) * ref.w[i];
        e += (static_cast<double>(ref.w[i]) - got.w[i]) * (static_cast<double>(ref.w[i]) - got.w[i]);
    }
    return e == 0 ? std::numeric_limits<double>::infinity() : 10 * std::log10(s / e);
}

}  // namespace

int main(int argc, char** argv) try {
    if (argc != 4 && argc != 5) {
        std::fprintf(stderr, "usage: %s FILE.gguf SRC_DIR TOKEN,TOKEN,... [rope-theta|no-unpermute|eps]\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[2], broken = argc == 5 ? argv[4] : "";
    if (!broken.empty() && broken != "rope-theta" && broken != "no-unpermute" && broken != "eps")
        throw std::runtime_error("unknown BREAK '" + broken + "'");
    const gguf::reader r(argv[1]);
    const model shape = shape_from_config(dir);
    const model source = load_model(dir);
    double min_snr = std::numeric_limits<double>::infinity();
    std::string worst;
    auto decode = [&](const std::string& hf) {
        const std::string name = gguf_name(hf);
        const gguf::tensor_entry* t = r.find_tensor(name);
        if (!t) throw std::runtime_error(std::string(argv[1]) + ": no tensor " + name);
        const std::vector<float> flat = gguf::read_f32(r, *t);
        matrix m{t->ne.size() == 2 ? t->ne[1] : t->ne[0], t->ne.size() == 2 ? t->ne[0] : 1, flat};
        const bool q = hf.find("q_proj") != std::string::npos, k = hf.find("k_proj") != std::string::npos;
        if ((q || k) && broken != "no-unpermute")
            for (std::int64_t g = 0; g < m.rows; ++g)
                std::copy_n(flat.data() + g * m.cols, m.cols, m.w.data() + hf_row(g, m.rows, q ? shape.heads : shape.kv_heads) * m.cols);
        return m;
    };
    model decoded = load_with(dir, decode);
    if (broken == "rope-theta") decoded.theta = 500000;
    if (broken == "eps") decoded.eps = 1e-6;
    if (r.find_tensor("output.weight")) decoded.head = decode("lm_head.weight");
    auto account = [&](const std::string& name, const matrix& a, const matrix& b) {
        const double s = a.rows == b.rows && a.cols == b.cols ? snr_db(a, b) : -std::numeric_limits<double>::infinity();
        if (s < min_snr) min_snr = s, worst = name;
    };
    account("model.embed_tokens.weight", source.embed, decoded.embed);
    for (std::size_t l = 0; l < source.layers.size(); ++l) {
        const auto n = layer_tensor_names(static_cast<std::int64_t>(l));
        const layer &a = source.layers[l], &b = decoded.layers[l];
        const matrix* pa[] = {&a.attn_norm, &a.q, &a.k, &a.v, &a.o, &a.ffn_norm, &a.gate, &a.up, &a.down};
        const matrix* pb[] = {&b.attn_norm, &b.q, &b.k, &b.v, &b.o, &b.ffn_norm, &b.gate, &b.up, &b.down};
        for (std::size_t i = 0; i < n.size(); ++i) account(n[i], *pa[i], *pb[i]);
    }
    testing::print_reference(min_snr, worst, run(decoded, testing::parse_token_list(argv[3])));
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_reference_logits: %s\n", e.what());
    return 1;
}
