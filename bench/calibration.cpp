// Quality with real activations (issue 19): stories260k (a trained Llama) runs its own forward
// pass over sequences it samples itself, and the inputs of every linear give its imatrix
// (E[x^2] per input column, what llama-imatrix collects) and its Hessian H = sum x x^T (what
// GPTQ needs). Then every linear is quantized six ways and measured against those inputs:
//
//   RTN              the scheme's fixed rule (asym minmax / sym gptq_absmax)
//   search           the scale search without statistics (asym mse / sym seed search)
//   search + imatrix the same search weighted by the imatrix (qforge-convert --imatrix)
//   act. scaling     power-of-two activation-aware scales, alpha searched per fused group
//                    (q/k/v, gate/up; down_proj folds into up_proj; o_proj is left alone:
//                    stories260k has a GQA repeat between v_proj and o_proj), then RTN
//   scaling + search + imatrix   both: the scaled columns' search weighted by E[x^2] / s^2
//   GPTQ             the GPTQ solver under H, with the scheme's fixed rule
//
// Figures: weight SNR and output SNR (10 log10 tr(W H W^T) / tr(dW H dW^T)) averaged over the 35
// linears, and the model's mean next-token KL divergence from the float model on sequences the
// statistics never saw. At 4 bits g32 asymmetric and at the w4a8-cpu grid (4 bits sym g64).
// The forward pass is tests/support/llama_reference.hpp, shared with the llama.cpp logits test.
//
//   bench_calibration [--stories DIR] [--sequences N] [--length L] [--write-imatrix FILE.gguf]
//
// --write-imatrix saves the statistics as a llama-imatrix GGUF (in_sum2 = sum x^2, counts =
// tokens), for qforge-convert --imatrix or llama-quantize --imatrix.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qforge/core/half.hpp"
#include "qforge/io/gguf/writer.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/quant/activation_scaling.hpp"
#include "qforge/quant/dequantize.hpp"
#include "qforge/quant/gptq_solver.hpp"
#include "qforge/quant/quantize.hpp"
#include "tests/support/llama_reference.hpp"

using namespace qforge;
using namespace qforge::testing::llama_ref;

namespace {

struct rng {
    std::uint64_t x;
    double uniform() {
        x += 0x9E3779B97F4A7C15ull;
        std::uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return static_cast<double>((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
    }
};

/// The five linears' inputs of one layer, accumulated: sum x x^T and the token count.
struct input_stats {
    std::int64_t k = 0, tokens = 0;
    std::vector<double> h;
    explicit input_stats(std::int64_t cols = 0) : k(cols), h(static_cast<std::size_t>(cols * cols), 0.0) {}
    void add(const std::vector<float>& x) {
        for (std::int64_t i = 0; i < k; ++i)
            for (std::int64_t j = 0; j < k; ++j) h[i * k + j] += static_cast<double>(x[i]) * x[j];
        ++tokens;
    }
    std::vector<float> mean_sq() const {
        std::vector<float> m(static_cast<std::size_t>(k));
        for (std::int64_t i = 0; i < k; ++i) m[i] = static_cast<float>(h[i * k + i] / static_cast<double>(tokens));
        return m;
    }
};

/// Inputs seen by each layer's linears: [layer][0 attn_in, 1 attn_out, 2 mlp_in, 3 mlp_act].
using stats_table = std::vector<std::array<input_stats, 4>>;

/// Every linear's input of `tokens` added to `st`.
void collect(const model& m, const std::vector<int>& tokens, stats_table& st) {
    (void)run(m, tokens, [&](std::size_t l, int slot, const std::vector<float>& x) { st[l][static_cast<std::size_t>(slot)].add(x); });
}

/// Sequences the model writes itself from BOS (token 1), sampled at temperature 1.
std::vector<std::vector<int>> sample(const model& m, int count, int length, std::uint64_t seed) {
    std::vector<std::vector<int>> out;
    rng r{seed};
    for (int s = 0; s < count; ++s) {
        std::vector<int> toks = {1};
        while (static_cast<int>(toks.size()) < length) {
            const auto lg = run(m, toks).back();  // O(L^2): fine at this size
            const float mx = *std::max_element(lg.begin(), lg.end());
            double z = 0;
            for (float v : lg) z += std::exp(static_cast<double>(v - mx));
            double u = r.uniform() * z;
            int next = 0;
            for (std::size_t i = 0; i < lg.size(); ++i)
                if ((u -= std::exp(static_cast<double>(lg[i] - mx))) <= 0) {
                    next = static_cast<int>(i);
                    break;
                }
            toks.push_back(next);
        }
        out.push_back(std::move(toks));
    }
    return out;
}

double mean_kl(const model& ref, const model& q, const std::vector<std::vector<int>>& seqs) {
    double kl = 0;
    std::size_t n = 0;
    for (const auto& s : seqs) {
        const auto a = run(ref, s), b = run(q, s);
        for (std::size_t t = 0; t < a.size(); ++t) {
            auto logp = [](const std::vector<float>& lg) {
                const double mx = *std::max_element(lg.begin(), lg.end());
                double z = 0;
                for (float v : lg) z += std::exp(v - mx);
                std::vector<double> out(lg.size());
                for (std::size_t i = 0; i < lg.size(); ++i) out[i] = lg[i] - mx - std::log(z);
                return out;
            };
            const auto pa = logp(a[t]), pb = logp(b[t]);
            for (std::size_t i = 0; i < pa.size(); ++i) kl += std::exp(pa[i]) * (pa[i] - pb[i]);
            ++n;
        }
    }
    return kl / static_cast<double>(n);
}

double quad(const std::vector<double>& h, const float* a, const float* b, std::int64_t k) {
    double s = 0;
    for (std::int64_t i = 0; i < k; ++i) {
        const double di = a[i] - (b ? b[i] : 0.0f);
        if (di == 0) continue;
        for (std::int64_t j = 0; j < k; ++j) s += di * h[i * k + j] * (a[j] - (b ? b[j] : 0.0f));
    }
    return s;
}

struct scheme_row {
    const char* name;
    bool symmetric;
    int group;
    scale_policy rule, search;
};

enum class method { rtn, search, search_imatrix, scaling, scaling_search_imatrix, gptq };
constexpr const char* method_names[] = {"RTN", "search", "search + imatrix", "activation scaling",
                                        "activation scaling + search + imatrix", "GPTQ"};
constexpr int method_count = 6;

quant_options options(const scheme_row& s, scale_policy p) {
    quant_options o;
    o.bits = 4;
    o.group_size = s.group;
    o.symmetric = s.symmetric;
    o.policy = p;
    o.scale_dtype = dtype::F16;
    return o;
}

tensor_view view_of(const matrix& m, const std::string& name) {
    return {name, dtype::F32, {m.rows, m.cols}, std::as_bytes(std::span<const float>(m.w))};
}

/// The effective float weights of one fused group under `how` (scaled groups: dq(W s) / s).
std::vector<matrix> quantize_group(const std::vector<const matrix*>& parts, const input_stats& st, const scheme_row& s,
                                   method how, bool foldable) {
    std::vector<matrix> out;
    const std::vector<float> m = st.mean_sq();
    std::vector<float> scale(m.size(), 1.0f);
    const bool scaled = how == method::scaling || how == method::scaling_search_imatrix;
    const bool searched = how == method::search || how == method::search_imatrix || how == method::scaling_search_imatrix;
    const bool weighted = how == method::search_imatrix || how == method::scaling_search_imatrix;
    if (scaled && foldable) {
        std::vector<tensor_view> views;
        for (const matrix* p : parts) views.push_back(view_of(*p, "w"));
        activation_scaling_options ao;
        ao.quant = options(s, searched ? s.search : s.rule);
        if (weighted) ao.quant.importance = m;  // the search sees m / s^2 for the scaled columns
        scale = search_activation_scales(views, m, ao).scale;
    }
    for (const matrix* p : parts) {
        matrix w = *p;
        for (std::int64_t r = 0; r < w.rows; ++r)
            for (std::int64_t c = 0; c < w.cols; ++c) w.w[r * w.cols + c] *= scale[c];
        quant_options o = options(s, searched ? s.search : s.rule);
        std::vector<float> imp(m.size());
        for (std::size_t c = 0; c < m.size(); ++c) imp[c] = m[c] / (scale[c] * scale[c]);
        if (weighted) o.importance = imp;
        quantized_tensor q;
        if (how == method::gptq) {
            gptq_solver_options g;
            g.quant = o;
            q = gptq_quantize(view_of(w, "w"), st.h, g);
        } else {
            q = quantize(view_of(w, "w"), o);
        }
        matrix dq{w.rows, w.cols, dequantize(q)};
        for (std::int64_t r = 0; r < w.rows; ++r)
            for (std::int64_t c = 0; c < w.cols; ++c) dq.w[r * w.cols + c] /= scale[c];
        out.push_back(std::move(dq));
    }
    return out;
}

void write_imatrix(const model& m, const stats_table& st, const std::string& path, int chunks) {
    static const char* names[] = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    static const int input_of[] = {0, 0, 0, 1, 2, 2, 3};
    std::vector<gguf::tensor_decl> decls;
    std::vector<std::vector<float>> data;
    for (std::size_t l = 0; l < m.layers.size(); ++l)
        for (int i = 0; i < 7; ++i) {
            const input_stats& s = st[l][static_cast<std::size_t>(input_of[i])];
            const std::string base = "blk." + std::to_string(l) + "." + names[i] + ".weight";
            std::vector<float> sums(static_cast<std::size_t>(s.k));
            for (std::int64_t k = 0; k < s.k; ++k) sums[k] = static_cast<float>(s.h[k * s.k + k]);
            decls.push_back({base + ".in_sum2", {s.k, 1}, gguf::ggml_type::f32});
            data.push_back(std::move(sums));
            decls.push_back({base + ".counts", {1, 1}, gguf::ggml_type::f32});
            data.push_back({static_cast<float>(s.tokens)});
        }
    gguf::file_writer w(path, {{"general.type", gguf::value::str("imatrix")},
                               {"imatrix.datasets", gguf::value::array_of<std::string>(gguf::value_type::string, {"stories260k self-samples"})},
                               {"imatrix.chunk_count", gguf::value::u32(static_cast<std::uint32_t>(chunks))},
                               {"imatrix.chunk_size", gguf::value::u32(static_cast<std::uint32_t>(st[0][0].tokens / std::max(1, chunks)))}},
                        decls);
    for (const auto& d : data) w.write_tensor(std::as_bytes(std::span<const float>(d)));
    w.finish();
}

}  // namespace

int main(int argc, char** argv) {
    std::string dir = QFORGE_SOURCE_DIR "/tests/golden/fixtures/stories260k", imatrix_out;
    int sequences = 24, length = 64;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--stories") dir = argv[i + 1];
        else if (a == "--sequences") sequences = std::atoi(argv[i + 1]);
        else if (a == "--length") length = std::atoi(argv[i + 1]);
        else if (a == "--write-imatrix") imatrix_out = argv[i + 1];
    }
    const model m = load_model(dir);
    const auto calib = sample(m, sequences, length, 20261201);
    const auto held_out = sample(m, 8, length, 7);
    stats_table st(m.layers.size());
    for (auto& l : st) l = {input_stats(m.hidden), input_stats(m.heads * m.head_dim), input_stats(m.hidden), input_stats(m.ff)};
    for (const auto& s : calib) collect(m, s, st);
    std::printf("stories260k: %d self-sampled sequences of %d tokens for the statistics (%lld tokens), 8 held out for KL\n\n",
                sequences, length, static_cast<long long>(st[0][0].tokens));
    if (!imatrix_out.empty()) {
        write_imatrix(m, st, imatrix_out, sequences);
        std::printf("wrote %s\n\n", imatrix_out.c_str());
    }

    const scheme_row schemes[] = {{"4 bits asym g32", false, 32, scale_policy::minmax, scale_policy::mse},
                                  {"4 bits sym g64 (w4a8-cpu grid)", true, 64, scale_policy::gptq_absmax, scale_policy::seed_search}};
    std::printf("| scheme | method | weight SNR dB (mean) | output SNR dB (mean) | next-token KL vs float (nats) |\n|---|---|---|---|---|\n");
    for (const auto& s : schemes) {
        for (int mi = 0; mi < method_count; ++mi) {
            const auto how = static_cast<method>(mi);
            model q = m;
            double snr = 0, out = 0;
            int n = 0;
            auto account = [&](const matrix& w, const matrix& dq, const input_stats& in) {
                double sig = 0, err = 0, e2 = 0, w2 = 0;
                for (std::int64_t r = 0; r < w.rows; ++r) {
                    sig += quad(in.h, w.row(r), nullptr, w.cols);
                    err += quad(in.h, w.row(r), dq.row(r), w.cols);
                    for (std::int64_t c = 0; c < w.cols; ++c) {
                        const double d = w.row(r)[c] - dq.row(r)[c];
                        e2 += d * d;
                        w2 += static_cast<double>(w.row(r)[c]) * w.row(r)[c];
                    }
                }
                snr += 10 * std::log10(w2 / e2);
                out += 10 * std::log10(sig / err);
                ++n;
            };
            for (std::size_t l = 0; l < m.layers.size(); ++l) {
                const layer& L = m.layers[l];
                layer& Q = q.layers[l];
                // v_proj -> o_proj holds a GQA repeat here, so o_proj is not scaled (AutoAWQ's rule).
                const bool o_foldable = m.kv_heads == m.heads;
                const auto qkv = quantize_group({&L.q, &L.k, &L.v}, st[l][0], s, how, true);
                const auto o = quantize_group({&L.o}, st[l][1], s, how, o_foldable);
                const auto gu = quantize_group({&L.gate, &L.up}, st[l][2], s, how, true);
                const auto d = quantize_group({&L.down}, st[l][3], s, how, true);
                account(L.q, qkv[0], st[l][0]);
                account(L.k, qkv[1], st[l][0]);
                account(L.v, qkv[2], st[l][0]);
                account(L.o, o[0], st[l][1]);
                account(L.gate, gu[0], st[l][2]);
                account(L.up, gu[1], st[l][2]);
                account(L.down, d[0], st[l][3]);
                Q.q = qkv[0], Q.k = qkv[1], Q.v = qkv[2], Q.o = o[0], Q.gate = gu[0], Q.up = gu[1], Q.down = d[0];
            }
            std::printf("| %s | %s | %.2f | %.2f | %.5f |\n", s.name, method_names[mi], snr / n, out / n, mean_kl(m, q, held_out));
            std::fflush(stdout);
        }
    }
    return 0;
}
