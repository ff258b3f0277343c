// HF -> GGUF on the real tiny Llama in ../shared/fixtures/stories260k: names, shapes, metadata
// types llama.cpp checks, the Q/K permutation (decoded back and un-permuted), type choice with
// fallbacks, tokenizer sources and refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/convert/gguf/converter.hpp"
#include "qforge/convert/gguf/decode.hpp"
#include "qforge/convert/gguf/dry_run.hpp"
#include "qforge/convert/gguf/tokenizer.hpp"
#include "qforge/io/gguf/reader.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/writer.hpp"
#include "qforge/layout/gguf/quantize.hpp"
#include "qforge/quant/snr.hpp"
#include "support/bf16_values.hpp"
#include "support/fp8_checkpoint.hpp"
#include "support/fused_twin.hpp"
#include "support/independent_decoders.hpp"
#include "support/lcg_checkpoint.hpp"

using namespace qforge;
using namespace qforge::gguf;

namespace {

const std::string fixture = QFORGE_SOURCE_DIR "/tests/golden/fixtures/stories260k";
std::string out_path(const char* n) { return std::string(QFORGE_BINARY_DIR) + "/gguf_conv_" + n + ".gguf"; }

/// A template GGUF holding only a 512-token llama (SPM-style) vocabulary.
std::string make_template(std::size_t n_tokens = 512) {
    const auto path = out_path(n_tokens == 512 ? "template" : "template_bad");
    std::vector<std::string> toks;
    std::vector<float> scores;
    std::vector<std::int32_t> types;
    for (std::size_t i = 0; i < n_tokens; ++i) {
        toks.push_back("t" + std::to_string(i));
        scores.push_back(-static_cast<float>(i));
        types.push_back(i < 3 ? 3 : 1);
    }
    file_writer w(path,
                  {{"general.architecture", value::str("llama")},
                   {"tokenizer.ggml.model", value::str("llama")},
                   {"tokenizer.ggml.tokens", value::array_of<std::string>(value_type::string, toks)},
                   {"tokenizer.ggml.scores", value::array_of<float>(value_type::f32, scores)},
                   {"tokenizer.ggml.token_type", value::array_of<std::int32_t>(value_type::i32, types)},
                   {"tokenizer.ggml.bos_token_id", value::u32(1)}},
                  {});
    w.finish();
    return path;
}

std::vector<float> source_f32(const safetensors::reader& st, const std::string& name) { return testing::bf16_values(st.view(name)); }

template <class T>
void check_type(const reader& r, const char* key) {
    const value* v = r.find(key);
    REQUIRE_MESSAGE(v, key);
    CHECK_MESSAGE(v->as<T>().has_value(), key << " has type " << value_type_name(v->type));
}

}  // namespace

TEST_CASE("HF -> GGUF: stories260k, names, shapes, metadata types, permutation, fallbacks") {
    convert_options o;
    o.type = *parse_file_type("Q8_0");
    o.tokenizer_from = make_template();
    // attn_q/attn_k as F32 so the permutation can be checked bit for bit
    o.overrides.push_back({R"(blk\.[0-9]+\.attn_[qk]\.weight)", ggml_type::f32, true});
    std::vector<std::string> seen;
    const auto dst = out_path("q8");
    const auto rep = convert_hf_to_gguf(fixture, dst, o, [&](std::size_t, std::size_t, const std::string& n) { seen.push_back(n); });
    CHECK(rep.arch == "llama");
    CHECK(rep.tensors.size() == 2 + 5 * 9);
    CHECK(seen.size() == rep.tensors.size());

    const reader r(dst);
    CHECK(r.tensors().size() == 47);
    check_type<std::string>(r, "general.architecture");
    check_type<std::uint32_t>(r, "llama.context_length");
    check_type<std::uint32_t>(r, "llama.embedding_length");
    check_type<std::uint32_t>(r, "llama.block_count");
    check_type<std::uint32_t>(r, "llama.feed_forward_length");
    check_type<std::uint32_t>(r, "llama.attention.head_count");
    check_type<std::uint32_t>(r, "llama.attention.head_count_kv");
    check_type<float>(r, "llama.attention.layer_norm_rms_epsilon");
    check_type<float>(r, "llama.rope.freq_base");
    check_type<std::uint32_t>(r, "llama.rope.dimension_count");
    check_type<std::uint32_t>(r, "general.file_type");
    check_type<std::uint32_t>(r, "general.quantization_version");
    CHECK(*r.find("general.architecture")->as<std::string>() == "llama");
    CHECK(r.metadata().front().first == "general.architecture");
    CHECK(*r.find("llama.block_count")->as<std::uint32_t>() == 5);
    CHECK(*r.find("llama.attention.head_count_kv")->as<std::uint32_t>() == 4);
    CHECK(*r.find("llama.rope.dimension_count")->as<std::uint32_t>() == 8);
    CHECK(*r.find("general.file_type")->as<std::uint32_t>() == 7);
    CHECK(r.find("tokenizer.ggml.tokens")->elems.size() == 512);
    CHECK(r.find("tokenizer.ggml.scores")->elem_type == value_type::f32);
    CHECK(*r.find("tokenizer.ggml.model")->as<std::string>() == "llama");

    const auto* emb = r.find_tensor("token_embd.weight");
    REQUIRE(emb);
    CHECK(emb->ne == std::vector<std::int64_t>{64, 512});
    CHECK(emb->type == ggml_type::q8_0);
    CHECK(r.find_tensor("output.weight") == nullptr);  // tied
    const auto* norm = r.find_tensor("blk.3.attn_norm.weight");
    REQUIRE(norm);
    CHECK(norm->type == ggml_type::f32);
    CHECK(norm->ne == std::vector<std::int64_t>{64});
    CHECK(r.find_tensor("output_norm.weight")->type == ggml_type::f32);
    const auto* down = r.find_tensor("blk.0.ffn_down.weight");
    REQUIRE(down);
    CHECK(down->ne == std::vector<std::int64_t>{172, 64});
    CHECK(down->type == ggml_type::f16);  // 172 is not a multiple of 32: reported fallback
    CHECK(r.find_tensor("blk.0.ffn_gate.weight")->ne == std::vector<std::int64_t>{64, 172});
    CHECK(r.find_tensor("blk.0.ffn_gate.weight")->type == ggml_type::q8_0);
    const auto fb = rep.fallbacks();
    CHECK(fb.size() == 5);
    for (const auto& f : fb) CHECK(f.find("ffn_down") != std::string::npos);
    CHECK(rep.bits_per_weight() > 8.0);
    CHECK(rep.bits_per_weight() < 32.0);

    // permutation: the GGUF rows, un-permuted, are the HF rows bit for bit
    const safetensors::reader st(fixture + "/model.safetensors");
    for (int layer : {0, 4}) {
        for (const auto& [hf, gg, heads] : {std::tuple{"q_proj", "attn_q", 8}, std::tuple{"k_proj", "attn_k", 4}}) {
            const std::string hf_name = "model.layers." + std::to_string(layer) + ".self_attn." + hf + ".weight";
            const std::string gg_name = "blk." + std::to_string(layer) + "." + gg + ".weight";
            const auto src = source_f32(st, hf_name);
            const auto* te = r.find_tensor(gg_name);
            REQUIRE(te);
            CHECK(te->type == ggml_type::f32);
            const auto got = read_f32(r, *te);
            const std::int64_t rows = te->ne[1], cols = te->ne[0], hd = rows / heads;
            bool all_same = true, differs_from_identity = false;
            for (std::int64_t h = 0; h < heads; ++h)
                for (std::int64_t i = 0; i < hd / 2; ++i)
                    for (std::int64_t j = 0; j < 2; ++j) {
                        const auto out_row = h * hd + 2 * i + j, in_row = h * hd + j * hd / 2 + i;
                        for (std::int64_t c = 0; c < cols; ++c) {
                            all_same &= got[static_cast<std::size_t>(out_row * cols + c)] == src[static_cast<std::size_t>(in_row * cols + c)];
                            differs_from_identity |= got[static_cast<std::size_t>(out_row * cols + c)] != src[static_cast<std::size_t>(out_row * cols + c)];
                        }
                    }
            CHECK_MESSAGE(all_same, gg_name);
            CHECK(differs_from_identity);
        }
    }
    // V is not permuted; Q8_0 decode is close to the source
    const auto v_src = source_f32(st, "model.layers.2.self_attn.v_proj.weight");
    const auto v_got = read_f32(r, *r.find_tensor("blk.2.attn_v.weight"));
    double num = 0, den = 0;
    for (std::size_t i = 0; i < v_src.size(); ++i) {
        num += v_src[i] * v_src[i];
        den += (v_src[i] - v_got[i]) * (v_src[i] - v_got[i]);
    }
    CHECK(10 * std::log10(num / den) > 35.0);
    for (const auto& t : rep.tensors)
        if (t.gguf_name == "blk.2.attn_v.weight") CHECK(std::abs(t.snr_db - 10 * std::log10(num / den)) < 0.01);
    // ... and it is exactly quant/snr.hpp's sums of each row (snr_sums_of), rows added in order.
    const auto v_cols = static_cast<std::size_t>(r.find_tensor("blk.2.attn_v.weight")->ne[0]);
    snr_sums v_sums;
    for (std::size_t at = 0; at < v_src.size(); at += v_cols)
        v_sums.add_row(snr_sums_of(std::span<const float>(v_src).subspan(at, v_cols),
                                   std::span<const float>(v_got).subspan(at, v_cols)));
    for (const auto& t : rep.tensors)
        if (t.gguf_name == "blk.2.attn_v.weight") CHECK(t.snr_db == v_sums.db());
}

TEST_CASE("HF -> GGUF: Q4_K_M on a model whose rows are too short falls back and says so") {
    convert_options o;
    o.type = *parse_file_type("q4_k_m");
    o.allow_no_vocab = true;
    const auto rep = convert_hf_to_gguf(fixture, out_path("q4km"), o);
    const reader r(out_path("q4km"));
    CHECK(*r.find("tokenizer.ggml.model")->as<std::string>() == "no_vocab");
    CHECK(*r.find("general.file_type")->as<std::uint32_t>() == 15);
    CHECK(r.find_tensor("blk.1.attn_q.weight")->type == ggml_type::q5_0);  // Q4_K -> Q5_0 (64 % 256)
    CHECK(r.find_tensor("blk.2.attn_v.weight")->type == ggml_type::q8_0);  // use_more_bits(2, 5): Q6_K -> Q8_0
    CHECK(r.find_tensor("blk.1.attn_v.weight")->type == ggml_type::q5_0);
    CHECK(r.find_tensor("blk.0.ffn_down.weight")->type == ggml_type::f16);
    // tied: token_embd is the head and gets the output rule; 64 % 256 != 0 -> Q8_0
    CHECK(r.find_tensor("token_embd.weight")->type == ggml_type::q8_0);
    for (const auto& t : rep.tensors)
        if (t.chosen != t.requested) CHECK_FALSE(t.fallback.empty());
}

TEST_CASE("HF -> GGUF: reading chunks with pread (the default) writes the bytes of reading the mapping") {
    // Q8_0 with attn_q/attn_k permuted (rows read one by one from their source rows) and the rest
    // in chunks smaller than the tensors (a chunk starts at a row offset of the source).
    convert_options o;
    o.type = *parse_file_type("Q8_0");
    o.allow_no_vocab = true;
    o.chunk_rows = 48;
    CHECK_FALSE(o.read_mapped);
    convert_hf_to_gguf(fixture, out_path("pread"), o);
    o.read_mapped = true;
    convert_hf_to_gguf(fixture, out_path("mapped"), o);
    CHECK(qforge::io::read_file(out_path("pread")) == qforge::io::read_file(out_path("mapped")));
}

TEST_CASE("HF -> GGUF refuses what it cannot convert") {
    convert_options o;
    CHECK_THROWS_AS(convert_hf_to_gguf(fixture, out_path("none"), o), unsupported_error);  // no tokenizer
    o.tokenizer_from = make_template(100);
    CHECK_THROWS_AS(convert_hf_to_gguf(fixture, out_path("mismatch"), o), unsupported_error);  // 100 tokens vs 512 rows
    CHECK_FALSE(io::path_exists(out_path("mismatch")));
    CHECK_FALSE(io::path_exists(out_path("mismatch") + ".tmp"));
    o.tokenizer_from = make_template();
    o.overrides.push_back({"([", ggml_type::f32, true});
    CHECK_THROWS_AS(convert_hf_to_gguf(fixture, out_path("badre"), o), unsupported_error);
}

namespace {

/// A model as llama-quantize sees it, with the row lengths its tensors have.
struct model_shape {
    const char* what;
    mix_model m;
    std::int64_t n_embd, n_ff;
};

const model_shape untied_gqa4_8{"untied llama, GQA 4, 8 layers", {"llama", 8, 8, 2, 0, true, false}, 512, 1536};
const model_shape tied_mha_16{"tied llama, MHA, 16 layers", {"llama", 16, 8, 8, 0, false, false}, 512, 1536};
const model_shape untied_gqa2_2{"untied llama, GQA 2, 2 layers", {"llama", 2, 8, 4, 0, true, false}, 512, 1536};
const model_shape llama70b{"llama, 80 layers, GQA 8 (LLM_TYPE_70B)", {"llama", 80, 64, 8, 0, true, false}, 512, 1536};
const model_shape llama65b{"llama, 80 layers, MHA (LLM_TYPE_65B)", {"llama", 80, 64, 64, 0, true, false}, 512, 1536};
const model_shape mixtral{"llama, 32 layers, GQA 4, 8 experts", {"llama", 32, 32, 8, 8, true, false}, 512, 1536};
const model_shape qwen2_80{"qwen2, 80 layers, MHA (LLM_TYPE_70B)", {"qwen2", 80, 8, 8, 0, true, false}, 512, 1536};
const model_shape qwen3_80{"qwen3, 80 layers, GQA 8 (no 70B type)", {"qwen3", 80, 64, 8, 0, true, false}, 512, 1536};
const model_shape ragged{"tied llama, GQA 4, 8 layers, 320/1000", {"llama", 8, 8, 2, 0, false, false}, 320, 1000};

/// The GGUF name of `tensor` in block `layer` (-1: a global tensor); MoE models have _exps FFNs.
std::string tensor_name(const model_shape& s, const std::string& tensor, int layer) {
    if (layer < 0) return tensor + ".weight";
    const bool ffn = tensor.starts_with("ffn_");
    return "blk." + std::to_string(layer) + "." + tensor + (ffn && s.m.n_expert > 0 ? "_exps" : "") + ".weight";
}

std::int64_t row_length(const model_shape& s, const std::string& tensor) {
    return tensor == "ffn_down" ? s.n_ff : s.n_embd;
}

/// The chosen type of `tensor` in every block, space-separated (one name for a global tensor).
std::string chosen_types(const char* type, const model_shape& s, const std::string& tensor, bool imatrix = false) {
    const auto ft = *parse_file_type(type);
    mix_model m = s.m;
    m.has_imatrix = imatrix;
    const bool global = tensor == "token_embd" || tensor == "output";
    std::string out;
    for (int layer = global ? -1 : 0; layer < (global ? 0 : m.n_layer); ++layer) {
        const auto d = choose_type(ft, {}, tensor_name(s, tensor, layer), 2, row_length(s, tensor), layer, m);
        out += (out.empty() ? "" : " ") + std::string(type_name(d.chosen));
    }
    return out;
}

/// `n` layers of type `other` except `layers`, which are `hit`: a per-layer list written from a
/// rule's text (e.g. use_more_bits' layers) without calling the code under test.
std::string layers_with(int n, std::vector<int> layers, const char* hit, const char* other) {
    std::string out;
    for (int i = 0; i < n; ++i)
        out += (i ? " " : "") + std::string(std::find(layers.begin(), layers.end(), i) != layers.end() ? hit : other);
    return out;
}
std::string all_layers(int n, const char* t) { return layers_with(n, {}, t, t); }

/// use_more_bits(i, n) as llama-quant.cpp states it, listed by hand for each n used here:
/// i < n/8, i >= 7n/8, or (i - n/8) % 3 == 2.
const std::vector<int> more_bits_8 = {0, 3, 6, 7};                     // n/8 = 1, 7n/8 = 7
const std::vector<int> more_bits_16 = {0, 1, 4, 7, 10, 13, 14, 15};    // n/8 = 2, 7n/8 = 14
const std::vector<int> more_bits_32 = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};  // 4, 28
std::vector<int> more_bits_80() {  // n/8 = 10, 7n/8 = 70
    std::vector<int> v;
    for (int i = 0; i < 10; ++i) v.push_back(i);
    for (int i = 12; i < 70; i += 3) v.push_back(i);
    for (int i = 70; i < 80; ++i) v.push_back(i);
    return v;
}

struct expectation {
    const model_shape* shape;
    const char* type;
    const char* tensor;
    std::string types;  // per layer, or one for a global tensor
    bool imatrix = false;
};

}  // namespace

// Every expected type below is written from the text of LC src/llama-quant.cpp
// llama_tensor_get_type (llama.cpp b4753, the day after c392e509): for each mix and model shape,
// every tensor kind, every layer.
TEST_CASE("type choice: every mix gives llama-quantize's types (llama.cpp b4753 llama-quant.cpp llama_tensor_get_type)") {
    const auto& a = untied_gqa4_8;
    const auto& t = tied_mha_16;
    const auto& two = untied_gqa2_2;
    const std::vector<expectation> rows = {
        // Q4_K_M: output Q6_K; attn_v and ffn_down Q6_K where use_more_bits(i_attention_wv / i_ffn_down, n)
        {&a, "Q4_K_M", "output", "Q6_K"},
        {&a, "Q4_K_M", "token_embd", "Q4_K"},  // untied: token_embd is not the head
        {&a, "Q4_K_M", "attn_v", layers_with(8, more_bits_8, "Q6_K", "Q4_K")},
        {&a, "Q4_K_M", "ffn_down", layers_with(8, more_bits_8, "Q6_K", "Q4_K")},
        {&a, "Q4_K_M", "attn_q", all_layers(8, "Q4_K")},
        {&a, "Q4_K_M", "attn_k", all_layers(8, "Q4_K")},
        {&a, "Q4_K_M", "attn_output", all_layers(8, "Q4_K")},
        {&a, "Q4_K_M", "ffn_gate", all_layers(8, "Q4_K")},
        {&a, "Q4_K_M", "ffn_up", all_layers(8, "Q4_K")},
        {&a, "Q4_K", "attn_v", layers_with(8, more_bits_8, "Q6_K", "Q4_K")},  // alias for Q4_K_M
        {&t, "Q4_K_M", "token_embd", "Q6_K"},  // tied: !qs.has_output && name == token_embd -> the output rule
        {&t, "Q4_K_M", "attn_v", layers_with(16, more_bits_16, "Q6_K", "Q4_K")},
        {&t, "Q4_K_M", "ffn_down", layers_with(16, more_bits_16, "Q6_K", "Q4_K")},
        {&two, "Q4_K_M", "attn_v", "Q4_K Q6_K"},
        {&two, "Q4_K_M", "ffn_down", "Q4_K Q6_K"},
        // Q5_K_M: the same layers, Q6_K over Q5_K
        {&a, "Q5_K_M", "attn_v", layers_with(8, more_bits_8, "Q6_K", "Q5_K")},
        {&a, "Q5_K_M", "ffn_down", layers_with(8, more_bits_8, "Q6_K", "Q5_K")},
        {&a, "Q5_K_M", "attn_output", all_layers(8, "Q5_K")},
        {&t, "Q5_K_M", "token_embd", "Q6_K"},
        {&a, "Q5_K", "ffn_down", layers_with(8, more_bits_8, "Q6_K", "Q5_K")},
        // Q2_K: attn_v n_gqa() >= 4 ? Q4_K : Q3_K; ffn_down Q3_K; attn_output Q3_K
        {&a, "Q2_K", "attn_v", all_layers(8, "Q4_K")},
        {&t, "Q2_K", "attn_v", all_layers(16, "Q3_K")},
        {&two, "Q2_K", "attn_v", "Q3_K Q3_K"},
        {&a, "Q2_K", "ffn_down", all_layers(8, "Q3_K")},
        {&a, "Q2_K", "attn_output", all_layers(8, "Q3_K")},
        {&a, "Q2_K", "attn_q", all_layers(8, "Q2_K")},
        {&a, "Q2_K", "token_embd", "Q2_K"},
        {&t, "Q2_K", "token_embd", "Q6_K"},
        {&a, "Q2_K", "output", "Q6_K"},
        // Q3_K_S: only the output rule
        {&a, "Q3_K_S", "attn_v", all_layers(8, "Q3_K")},
        {&a, "Q3_K_S", "ffn_down", all_layers(8, "Q3_K")},
        {&a, "Q3_K_S", "attn_output", all_layers(8, "Q3_K")},
        {&t, "Q3_K_S", "token_embd", "Q6_K"},
        // Q3_K_M: attn_v i_attention_wv < 2 ? Q5_K : Q4_K; ffn_down i_layer < n/16 ? Q5_K : Q4_K
        // (arch != FALCON); attn_output Q4_K
        {&a, "Q3_K_M", "attn_v", layers_with(8, {0, 1}, "Q5_K", "Q4_K")},
        {&a, "Q3_K_M", "ffn_down", all_layers(8, "Q4_K")},                    // n/16 = 0
        {&t, "Q3_K_M", "ffn_down", layers_with(16, {0}, "Q5_K", "Q4_K")},     // n/16 = 1
        {&two, "Q3_K_M", "ffn_down", "Q4_K Q4_K"},
        {&a, "Q3_K_M", "attn_output", all_layers(8, "Q4_K")},
        {&a, "Q3_K_M", "ffn_up", all_layers(8, "Q3_K")},
        {&t, "Q3_K_M", "token_embd", "Q6_K"},
        {&a, "Q3_K", "attn_v", layers_with(8, {0, 1}, "Q5_K", "Q4_K")},  // alias for Q3_K_M
        // Q3_K_L: attn_v, ffn_down, attn_output Q5_K
        {&a, "Q3_K_L", "attn_v", all_layers(8, "Q5_K")},
        {&a, "Q3_K_L", "ffn_down", all_layers(8, "Q5_K")},
        {&a, "Q3_K_L", "attn_output", all_layers(8, "Q5_K")},
        {&a, "Q3_K_L", "attn_k", all_layers(8, "Q3_K")},
        // Q4_K_S: attn_v i_attention_wv < 4 -> Q5_K; ffn_down i_layer < n/8 -> Q5_K
        {&a, "Q4_K_S", "attn_v", layers_with(8, {0, 1, 2, 3}, "Q5_K", "Q4_K")},
        {&a, "Q4_K_S", "ffn_down", layers_with(8, {0}, "Q5_K", "Q4_K")},
        {&t, "Q4_K_S", "ffn_down", layers_with(16, {0, 1}, "Q5_K", "Q4_K")},
        {&t, "Q4_K_S", "token_embd", "Q6_K"},
        // Q5_K_S, Q6_K: only the output rule (Q6_K already)
        {&a, "Q5_K_S", "attn_v", all_layers(8, "Q5_K")},
        {&a, "Q5_K_S", "ffn_down", all_layers(8, "Q5_K")},
        {&a, "Q5_K_S", "output", "Q6_K"},
        {&a, "Q6_K", "attn_v", all_layers(8, "Q6_K")},
        {&t, "Q6_K", "token_embd", "Q6_K"},
        // Q8_0: the output rule keeps Q8_0 (new_type != Q8_0 -> Q6_K)
        {&a, "Q8_0", "output", "Q8_0"},
        {&t, "Q8_0", "token_embd", "Q8_0"},
        {&a, "Q8_0", "attn_v", all_layers(8, "Q8_0")},
        // Q4_0/Q4_1/Q5_0/Q5_1: the head becomes Q6_K; ffn_down's first eighth Q4_1/Q5_1 with an imatrix
        {&a, "Q4_0", "output", "Q6_K"},
        {&t, "Q4_0", "token_embd", "Q6_K"},
        {&a, "Q4_0", "ffn_down", all_layers(8, "Q4_0")},
        {&a, "Q4_0", "ffn_down", layers_with(8, {0}, "Q4_1", "Q4_0"), true},
        {&t, "Q5_0", "ffn_down", layers_with(16, {0, 1}, "Q5_1", "Q5_0"), true},
        {&a, "Q4_1", "ffn_down", all_layers(8, "Q4_1"), true},
        {&a, "Q5_1", "output", "Q6_K"},
        // IQ4_NL: attn_v Q5_K when n_gqa() >= 4; ffn_down's first eighth Q5_K without an imatrix
        {&a, "IQ4_NL", "attn_v", all_layers(8, "Q5_K")},
        {&t, "IQ4_NL", "attn_v", all_layers(16, "IQ4_NL")},
        {&a, "IQ4_NL", "ffn_down", layers_with(8, {0}, "Q5_K", "IQ4_NL")},
        {&a, "IQ4_NL", "ffn_down", all_layers(8, "IQ4_NL"), true},
        {&a, "IQ4_NL", "output", "Q6_K"},
        {&t, "IQ4_NL", "token_embd", "Q6_K"},
        // F16/BF16/F32: ggml_is_quantized(default_type) is false, no mix
        {&a, "F16", "output", "F16"},
        {&t, "BF16", "token_embd", "BF16"},
        {&a, "F32", "attn_v", all_layers(8, "F32")},
        // LLM_TYPE_70B (llama: 80 layers and n_head != n_head_kv; qwen2: 80 layers): attn_v's Q3_K/Q4_K -> Q5_K
        {&llama70b, "Q4_K_M", "attn_v", layers_with(80, more_bits_80(), "Q6_K", "Q5_K")},
        {&llama70b, "Q4_K_M", "ffn_down", layers_with(80, more_bits_80(), "Q6_K", "Q4_K")},
        {&llama70b, "Q2_K", "attn_v", all_layers(80, "Q5_K")},
        {&llama70b, "Q3_K_S", "attn_v", all_layers(80, "Q5_K")},
        {&llama70b, "Q3_K_M", "attn_v", all_layers(80, "Q5_K")},
        {&llama70b, "Q3_K_M", "ffn_down", layers_with(80, {0, 1, 2, 3, 4}, "Q5_K", "Q4_K")},  // n/16 = 5
        {&llama70b, "Q4_K_S", "attn_v", all_layers(80, "Q5_K")},
        {&llama70b, "Q5_K_M", "attn_v", layers_with(80, more_bits_80(), "Q6_K", "Q5_K")},
        {&llama70b, "Q8_0", "attn_v", all_layers(80, "Q8_0")},
        {&llama65b, "Q4_K_M", "attn_v", layers_with(80, more_bits_80(), "Q6_K", "Q4_K")},
        {&llama65b, "Q2_K", "attn_v", all_layers(80, "Q3_K")},
        {&qwen2_80, "Q4_K_M", "attn_v", layers_with(80, more_bits_80(), "Q6_K", "Q5_K")},
        {&qwen2_80, "Q2_K", "attn_v", all_layers(80, "Q5_K")},  // n_gqa 1: Q3_K, then 70B: Q5_K
        {&qwen3_80, "Q4_K_M", "attn_v", layers_with(80, more_bits_80(), "Q6_K", "Q4_K")},
        // n_expert == 8: attn_v and attn_k Q8_0; attn_output Q5_K for the listed mixes
        {&mixtral, "Q4_K_M", "attn_v", all_layers(32, "Q8_0")},
        {&mixtral, "Q4_K_M", "attn_k", all_layers(32, "Q8_0")},
        {&mixtral, "Q4_K_M", "attn_q", all_layers(32, "Q4_K")},
        {&mixtral, "Q4_K_M", "attn_output", all_layers(32, "Q5_K")},
        {&mixtral, "Q4_K_M", "ffn_down", layers_with(32, more_bits_32, "Q6_K", "Q4_K")},
        {&mixtral, "Q4_K_M", "ffn_gate", all_layers(32, "Q4_K")},
        {&mixtral, "Q2_K", "attn_v", all_layers(32, "Q8_0")},
        {&mixtral, "Q2_K", "attn_output", all_layers(32, "Q5_K")},
        {&mixtral, "Q2_K", "ffn_down", all_layers(32, "Q3_K")},
        {&mixtral, "Q3_K_S", "attn_output", all_layers(32, "Q5_K")},
        {&mixtral, "Q3_K_M", "attn_output", all_layers(32, "Q5_K")},
        {&mixtral, "Q3_K_L", "attn_output", all_layers(32, "Q3_K")},  // not in the n_expert == 8 list
        {&mixtral, "Q4_K_S", "attn_output", all_layers(32, "Q5_K")},
        {&mixtral, "IQ4_NL", "attn_output", all_layers(32, "Q5_K")},
        {&mixtral, "Q6_K", "attn_output", all_layers(32, "Q6_K")},
        {&mixtral, "Q6_K", "attn_k", all_layers(32, "Q8_0")},
        {&mixtral, "Q4_0", "attn_v", all_layers(32, "Q8_0")},
        {&mixtral, "Q4_0", "attn_output", all_layers(32, "Q4_0")},
        // rows that do not divide the block: the output rule picks Q8_0 when ne[0] % block(default)
        // != 0; otherwise the fallback ladder, then F16
        {&ragged, "Q4_K_M", "token_embd", "Q8_0"},
        {&ragged, "Q4_K_M", "attn_q", all_layers(8, "Q5_0")},                                    // Q4_K -> Q5_0
        {&ragged, "Q4_K_M", "attn_v", layers_with(8, more_bits_8, "Q8_0", "Q5_0")},              // Q6_K -> Q8_0
        {&ragged, "Q4_K_M", "ffn_down", all_layers(8, "F16")},                                   // 1000 % 32 != 0
        {&ragged, "Q5_K_M", "attn_q", all_layers(8, "Q5_1")},                                    // Q5_K -> Q5_1
        {&ragged, "Q2_K", "attn_q", all_layers(8, "IQ4_NL")},                                    // Q2_K -> IQ4_NL
        {&ragged, "Q3_K_M", "ffn_up", all_layers(8, "IQ4_NL")},                                  // Q3_K -> IQ4_NL
        {&ragged, "Q4_0", "token_embd", "Q8_0"},                                                 // Q6_K -> Q8_0
        {&ragged, "Q8_0", "ffn_down", all_layers(8, "F16")},
    };
    for (const auto& r : rows) {
        INFO(r.shape->what << ", --type " << r.type << ", " << r.tensor << (r.imatrix ? ", imatrix" : ""));
        CHECK(chosen_types(r.type, *r.shape, r.tensor, r.imatrix) == r.types);
    }
}

// The fallbacks are b4753's (llama_model_quantize_impl: Q2_K/Q3_K -> IQ4_NL). Newer llama.cpp
// moved them into tensor_type_fallback (LC src/llama-quant.cpp, stored copy id 57928331346, and
// the v0.5.0 build node-llama-cpp 3.22.1 ships), where Q2_K/Q3_K -> Q4_0 instead (IQ types still
// -> IQ4_NL, the rest unchanged). qforge follows b4753, the release its golden blocks and
// byte-identity runs are pinned to (README, GGUF section).
TEST_CASE("type choice: fallbacks are reported, llama-quantize's refusals named, overrides applied (llama.cpp b4753)") {
    const auto q4km = *parse_file_type("Q4_K_M");
    const mix_model m = ragged.m;
    const auto embd = choose_type(q4km, {}, "token_embd.weight", 2, 320, -1, m);
    CHECK(embd.requested == ggml_type::q8_0);  // the output rule's own choice, not a fallback
    CHECK(embd.fallback.empty());
    const auto v = choose_type(q4km, {}, "blk.0.attn_v.weight", 2, 320, 0, m);
    CHECK(v.requested == ggml_type::q6_k);
    CHECK(v.chosen == ggml_type::q8_0);
    CHECK(v.fallback.find("320") != std::string::npos);
    const auto down = choose_type(q4km, {}, "blk.1.ffn_down.weight", 2, 1000, 1, m);
    CHECK(down.requested == ggml_type::q4_k);
    CHECK(down.chosen == ggml_type::f16);
    CHECK(down.fallback.find("Q5_0") != std::string::npos);
    CHECK(down.fallback.find("refuses") == std::string::npos);  // the ladder's F16, as llama-quantize does
    for (const char* mix : {"Q2_K", "Q3_K_S"}) {
        CAPTURE(mix);
        const auto gate = choose_type(*parse_file_type(mix), {}, "blk.3.ffn_gate.weight", 2, 320, 3, m);
        CHECK(gate.requested == (std::string(mix) == "Q2_K" ? ggml_type::q2_k : ggml_type::q3_k));
        CHECK(gate.chosen == ggml_type::iq4_nl);  // b4753; llama.cpp v0.5.0 writes Q4_0 here
    }
    const auto q8 = choose_type(*parse_file_type("Q8_0"), {}, "blk.1.ffn_down.weight", 2, 1000, 1, m);
    CHECK(q8.chosen == ggml_type::f16);
    CHECK(q8.fallback.find("llama-quantize has no fallback") != std::string::npos);
    CHECK(choose_type(q4km, {}, "blk.6.ffn_norm.weight", 1, 4096, 6, m).chosen == ggml_type::f32);
    CHECK(choose_type(q4km, {}, "blk.6.attn_q_norm.weight", 1, 128, 6, m).chosen == ggml_type::f32);
    CHECK(choose_type(q4km, {}, "blk.6.ffn_gate_inp.weight", 2, 4096, 6, mixtral.m).chosen == ggml_type::f32);

    const mix_model u = untied_gqa4_8.m;
    const std::vector<type_override> ov = {{"token_embd.weight", ggml_type::q8_0, false}, {R"(.*ffn_.*)", ggml_type::q5_k, true}};
    CHECK(choose_type(q4km, ov, "token_embd.weight", 2, 4096, -1, u).chosen == ggml_type::q8_0);
    CHECK(choose_type(q4km, ov, "blk.6.ffn_down.weight", 2, 1536, 6, u).requested == ggml_type::q5_k);
    const auto po = parse_override("re:blk\\.[0-9]+\\.ffn_down\\.weight=q6_k");
    CHECK(po.is_regex);
    CHECK(po.type == ggml_type::q6_k);
    CHECK(choose_type(q4km, {po}, "blk.5.ffn_down.weight", 2, 1536, 5, u).chosen == ggml_type::q6_k);
    CHECK_FALSE(parse_override("output.weight=F16").is_regex);
    CHECK_THROWS_AS(parse_override("output.weight"), unsupported_error);
    CHECK_THROWS_AS(parse_override("output.weight=Q7_K"), unsupported_error);
    CHECK_FALSE(parse_file_type("Q9_K"));
    CHECK_FALSE(parse_file_type("Q2_K_S"));  // a mix qforge does not model is not offered
    CHECK_FALSE(parse_file_type("IQ3_M"));
    CHECK(parse_file_type("bf16")->base == ggml_type::bf16);
    CHECK(parse_file_type("q4_k")->name == "Q4_K_M");
    CHECK(parse_file_type("Q3_K")->llama_ftype == 12);
    mix_model unknown = u;
    unknown.arch = "falcon";
    CHECK_THROWS_AS(choose_type(q4km, {}, "blk.0.attn_v.weight", 2, 512, 0, unknown), unsupported_error);
}

TEST_CASE("HF -> GGUF: byte-level BPE tokenizer.json conversion") {
    const std::string path = std::string(QFORGE_BINARY_DIR) + "/gguf_tokenizer.json";
    std::string vocab;
    for (int i = 0; i < 500; ++i) vocab += (i ? "," : "") + std::string("\"v") + std::to_string(i) + "\":" + std::to_string(i);
    const std::string text = R"({"version":"1.0","added_tokens":[{"id":500,"content":"<|begin|>","special":true},)"
                             R"({"id":501,"content":"<x>","special":false}],)"
                             R"("pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Split"},{"type":"ByteLevel"}]},)"
                             R"("decoder":{"type":"ByteLevel"},)"
                             R"("model":{"type":"BPE","vocab":{)" + vocab + R"(},"merges":["v1 v2",["v3","v4"]]}})";
    io::write_file(path, text);
    convert_options o;
    o.tokenizer_json = path;
    CHECK_THROWS_AS(convert_hf_to_gguf(fixture, out_path("bpe"), o), unsupported_error);  // no pre-tokenizer name
    o.pre_tokenizer = "llama-bpe";
    convert_hf_to_gguf(fixture, out_path("bpe"), o);
    const reader r(out_path("bpe"));
    CHECK(*r.find("tokenizer.ggml.model")->as<std::string>() == "gpt2");
    CHECK(*r.find("tokenizer.ggml.pre")->as<std::string>() == "llama-bpe");
    const value* toks = r.find("tokenizer.ggml.tokens");
    REQUIRE(toks->elems.size() == 512);
    CHECK(std::get<std::string>(toks->elems[7]) == "v7");
    CHECK(std::get<std::string>(toks->elems[500]) == "<|begin|>");
    CHECK(std::get<std::string>(toks->elems[511]) == "[PAD511]");
    const value* types = r.find("tokenizer.ggml.token_type");
    CHECK(types->elem_type == value_type::i32);
    CHECK(std::get<std::int32_t>(types->elems[7]) == 1);
    CHECK(std::get<std::int32_t>(types->elems[500]) == 3);
    CHECK(std::get<std::int32_t>(types->elems[501]) == 4);
    CHECK(std::get<std::int32_t>(types->elems[511]) == 4);
    const value* merges = r.find("tokenizer.ggml.merges");
    REQUIRE(merges->elems.size() == 2);
    CHECK(std::get<std::string>(merges->elems[1]) == "v3 v4");
    CHECK(*r.find("tokenizer.ggml.bos_token_id")->as<std::uint32_t>() == 1);
    CHECK(*r.find("tokenizer.ggml.eos_token_id")->as<std::uint32_t>() == 2);

    // SentencePiece-style (byte_fallback) BPE is refused
    io::write_file(path, R"({"model":{"type":"BPE","byte_fallback":true,"vocab":{"a":0},"merges":["a a"]},"decoder":{"type":"ByteLevel"}})");
    CHECK_THROWS_AS(convert_hf_to_gguf(fixture, out_path("spm"), o), unsupported_error);
    io::write_file(path, R"({"model":{"type":"Unigram","vocab":[]}})");
    CHECK_THROWS_AS(convert_hf_to_gguf(fixture, out_path("uni"), o), unsupported_error);
}

// LC src/llama-vocab.cpp llama_vocab::impl::load compares tokenizer_pre with a fixed list and
// throws "unknown pre-tokenizer type" for any other name: `gpt2` (the tokenizer model's name)
// was written once and refused; the pre-tokenizer is `gpt-2`.
TEST_CASE("HF -> GGUF: --pre-tokenizer is checked against llama.cpp's names") {
    const std::string path = std::string(QFORGE_BINARY_DIR) + "/gguf_tokenizer_pre.json";
    std::string vocab;
    for (int i = 0; i < 512; ++i) vocab += (i ? "," : "") + std::string("\"v") + std::to_string(i) + "\":" + std::to_string(i);
    io::write_file(path, R"({"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{)" + vocab + R"(},"merges":["v1 v2"]}})");
    convert_options o;
    o.tokenizer_json = path;
    o.pre_tokenizer = "gpt2";
    const auto dst = out_path("pre_bad");
    if (io::path_exists(dst)) io::remove_file(dst);
    try {
        convert_hf_to_gguf(fixture, dst, o);
        FAIL("gpt2 was accepted");
    } catch (const unsupported_error& e) {
        const std::string what = e.what();
        CHECK(what.find("'gpt2'") != std::string::npos);
        CHECK(what.find("did you mean 'gpt-2'") != std::string::npos);
        CHECK(what.find("Known names: default, llama3,") != std::string::npos);
        CHECK(what.find("qwen2") != std::string::npos);
    }
    CHECK_FALSE(io::path_exists(dst));
    o.pre_tokenizer = "Llama-BPE";  // names are exact: llama.cpp compares with ==
    CHECK_THROWS_AS(convert_hf_to_gguf(fixture, dst, o), unsupported_error);
    for (const char* ok : {"gpt-2", "qwen2", "llama-bpe", "default", "gpt-4o"}) {
        o.pre_tokenizer = ok;
        convert_hf_to_gguf(fixture, dst, o);
        CHECK(*reader(dst).find("tokenizer.ggml.pre")->as<std::string>() == ok);
    }
    // the b4753 names come first and include the ones qforge's users name most
    const auto names = llama_pre_tokenizers();
    std::size_t n_b4753 = 0;
    for (const auto& n : names) n_b4753 += n.in_b4753;
    CHECK(n_b4753 == 42);
    for (std::size_t i = 0; i < names.size(); ++i) CHECK(names[i].in_b4753 == (i < n_b4753));

    // a template GGUF whose BPE tokenizer names an unknown pre-tokenizer is refused too
    const auto tpl = out_path("template_pre");
    std::vector<std::string> toks;
    for (int i = 0; i < 512; ++i) toks.push_back("t" + std::to_string(i));
    {
        file_writer w(tpl,
                      {{"general.architecture", value::str("llama")},
                       {"tokenizer.ggml.model", value::str("gpt2")},
                       {"tokenizer.ggml.pre", value::str("gpt2")},
                       {"tokenizer.ggml.tokens", value::array_of<std::string>(value_type::string, toks)},
                       {"tokenizer.ggml.merges", value::array_of<std::string>(value_type::string, {"t1 t2"})}},
                      {});
        w.finish();
    }
    convert_options t;
    t.tokenizer_from = tpl;
    CHECK_THROWS_AS(convert_hf_to_gguf(fixture, dst, t), unsupported_error);
}

namespace {

/// A synthetic Qwen3 checkpoint shaped like the real ones (head_dim 128 with 4 heads over a
/// 256-wide model, so n_head * head_dim != hidden_size; q_norm/k_norm per head; tied head; no
/// q/k/v bias). `extra` adds tensors (name, shape) to test refusals; `config_tail` extra keys.
std::string write_qwen3(const std::string& tag, const std::vector<std::pair<std::string, shape_t>>& extra = {},
                        const std::string& config_tail = "", std::int64_t norm_len = 128) {
    const std::string dir = std::string(QFORGE_BINARY_DIR) + "/gguf_qwen3_" + tag;
    qforge::testing::fresh_dir(dir);
    io::write_file(dir + "/config.json",
                   R"({"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","hidden_size":256,"intermediate_size":512,)"
                   R"("num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":128,)"
                   R"("max_position_embeddings":40960,"rms_norm_eps":1e-06,"rope_theta":1000000,"vocab_size":512,)"
                   R"("tie_word_embeddings":true,"torch_dtype":"bfloat16")" + config_tail + "}");
    std::vector<safetensors::tensor_spec> specs = {{"model.embed_tokens.weight", dtype::BF16, {512, 256}},
                                                   {"model.norm.weight", dtype::BF16, {256}}};
    for (int l = 0; l < 2; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        for (const auto& [n, shape] : std::vector<std::pair<std::string, shape_t>>{
                 {"input_layernorm.weight", {256}}, {"post_attention_layernorm.weight", {256}},
                 {"self_attn.q_proj.weight", {512, 256}}, {"self_attn.k_proj.weight", {256, 256}},
                 {"self_attn.v_proj.weight", {256, 256}}, {"self_attn.o_proj.weight", {256, 512}},
                 {"self_attn.q_norm.weight", {norm_len}}, {"self_attn.k_norm.weight", {128}},
                 {"mlp.gate_proj.weight", {512, 256}}, {"mlp.up_proj.weight", {512, 256}}, {"mlp.down_proj.weight", {256, 512}}})
            specs.push_back({p + n, dtype::BF16, shape});
    }
    for (const auto& [n, shape] : extra) specs.push_back({n, dtype::BF16, shape});
    qforge::testing::write_lcg_bf16(dir + "/model.safetensors", specs, 12345);
    return dir;
}

}  // namespace

// What LC convert_hf_to_gguf.py Qwen3Model (a Qwen2Model: no Q/K permutation, NEOX RoPE)
// writes and LC src/llama-model.cpp LLM_ARCH_QWEN3 loads: arch "qwen3", the TextModel keys
// (key_length/value_length from head_dim, no rope.dimension_count), attn_q_norm/attn_k_norm
// {head_dim} F32, attn_q {n_embd, n_head*head_dim}, attn_output {n_head*head_dim, n_embd},
// output optional (tied to token_embd).
TEST_CASE("HF -> GGUF: Qwen3 names, ne order, metadata keys, no permutation, mix types") {
    const auto dir = write_qwen3("ok");
    convert_options o;
    o.type = *parse_file_type("Q4_K_M");
    o.allow_no_vocab = true;
    o.overrides.push_back({R"(blk\.[0-9]+\.attn_[qk]\.weight)", ggml_type::f32, true});
    const auto dst = out_path("qwen3");
    const auto rep = convert_hf_to_gguf(dir, dst, o);
    CHECK(rep.arch == "qwen3");
    const reader r(dst);
    CHECK(*r.find("general.architecture")->as<std::string>() == "qwen3");
    for (const char* k : {"qwen3.context_length", "qwen3.embedding_length", "qwen3.block_count", "qwen3.feed_forward_length",
                          "qwen3.attention.head_count", "qwen3.attention.head_count_kv", "qwen3.attention.key_length",
                          "qwen3.attention.value_length"})
        check_type<std::uint32_t>(r, k);
    check_type<float>(r, "qwen3.rope.freq_base");
    check_type<float>(r, "qwen3.attention.layer_norm_rms_epsilon");
    CHECK(*r.find("qwen3.embedding_length")->as<std::uint32_t>() == 256);
    CHECK(*r.find("qwen3.context_length")->as<std::uint32_t>() == 40960);
    CHECK(*r.find("qwen3.attention.head_count_kv")->as<std::uint32_t>() == 2);
    CHECK(*r.find("qwen3.attention.key_length")->as<std::uint32_t>() == 128);
    CHECK(*r.find("qwen3.attention.value_length")->as<std::uint32_t>() == 128);
    CHECK(*r.find("qwen3.rope.freq_base")->as<float>() == 1000000.0f);
    CHECK(r.find("qwen3.rope.dimension_count") == nullptr);
    CHECK(r.find("llama.block_count") == nullptr);

    CHECK(r.tensors().size() == 2 + 2 * 11);
    CHECK(r.find_tensor("output.weight") == nullptr);
    const auto ne = [&](const char* n) { return r.find_tensor(n)->ne; };
    using v = std::vector<std::int64_t>;
    CHECK(ne("token_embd.weight") == v{256, 512});
    CHECK(ne("blk.0.attn_q.weight") == v{256, 512});
    CHECK(ne("blk.0.attn_k.weight") == v{256, 256});
    CHECK(ne("blk.0.attn_v.weight") == v{256, 256});
    CHECK(ne("blk.0.attn_output.weight") == v{512, 256});
    CHECK(ne("blk.1.attn_q_norm.weight") == v{128});
    CHECK(ne("blk.1.attn_k_norm.weight") == v{128});
    CHECK(ne("blk.1.ffn_gate.weight") == v{256, 512});
    CHECK(ne("blk.1.ffn_down.weight") == v{512, 256});
    CHECK(r.find_tensor("blk.1.attn_q_norm.weight")->type == ggml_type::f32);
    CHECK(r.find_tensor("blk.0.attn_k_norm.weight")->type == ggml_type::f32);
    // llama_tensor_get_type on this model: tied head Q6_K, use_more_bits(i, 2) = {1}
    CHECK(r.find_tensor("token_embd.weight")->type == ggml_type::q6_k);
    CHECK(r.find_tensor("blk.0.attn_v.weight")->type == ggml_type::q4_k);
    CHECK(r.find_tensor("blk.1.attn_v.weight")->type == ggml_type::q6_k);
    CHECK(r.find_tensor("blk.0.ffn_down.weight")->type == ggml_type::q4_k);
    CHECK(r.find_tensor("blk.1.ffn_down.weight")->type == ggml_type::q6_k);
    CHECK(r.find_tensor("blk.0.attn_output.weight")->type == ggml_type::q4_k);

    // no permutation: Q and K rows are the HF rows in HF order, bit for bit
    const safetensors::reader st(dir + "/model.safetensors");
    for (const char* hf : {"model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight"}) {
        const auto src = source_f32(st, hf);
        const std::string gg = std::string(hf).find("q_proj") != std::string::npos ? "blk.1.attn_q.weight" : "blk.1.attn_k.weight";
        CHECK(read_f32(r, *r.find_tensor(gg)) == src);
    }
    const auto qn = read_f32(r, *r.find_tensor("blk.0.attn_q_norm.weight"));
    CHECK(qn == source_f32(st, "model.layers.0.self_attn.q_norm.weight"));
    for (const auto& t : rep.tensors) CHECK_FALSE(t.permuted);
}

TEST_CASE("HF -> GGUF: Qwen3 refuses what llama.cpp's qwen3 would not load") {
    convert_options o;
    o.allow_no_vocab = true;
    // llama.cpp's qwen3 has no q/k/v bias tensors
    CHECK_THROWS_WITH_AS(convert_hf_to_gguf(write_qwen3("bias", {{"model.layers.0.self_attn.q_proj.bias", {512}}}), out_path("qb"), o),
                         doctest::Contains("q_proj.bias"), unsupported_error);
    CHECK_FALSE(io::path_exists(out_path("qb")));
    // the norms hold head_dim values
    CHECK_THROWS_AS(convert_hf_to_gguf(write_qwen3("norm", {}, "", 64), out_path("qn"), o), shape_error);
    // a block past num_hidden_layers
    CHECK_THROWS_AS(convert_hf_to_gguf(write_qwen3("blk", {{"model.layers.2.mlp.up_proj.weight", {512, 256}}}), out_path("qx"), o),
                    format_error);
    // rope scaling the converter would write differently
    CHECK_THROWS_AS(convert_hf_to_gguf(write_qwen3("yarn", {}, R"(,"rope_scaling":{"rope_type":"yarn","factor":4.0})"), out_path("qy"), o),
                    unsupported_error);
    // Qwen3's q_norm/k_norm under another architecture have no GGUF name
    const auto dir = write_qwen3("as_qwen2");
    auto cfg = io::read_file(dir + "/config.json");
    cfg.replace(cfg.find("\"qwen3\""), 7, "\"qwen2\"");
    io::write_file(dir + "/config.json", cfg);
    CHECK_THROWS_WITH_AS(convert_hf_to_gguf(dir, out_path("q2"), o), doctest::Contains("_norm.weight': tensor has no GGUF name for qwen2"), unsupported_error);
}

namespace {

/// A synthetic MoE checkpoint: Mixtral naming (block_sparse_moe.experts.E.w1/w2/w3, untied,
/// 8 experts, GQA 4) or Qwen3-MoE naming (mlp.experts.E.gate_proj/up_proj/down_proj, q/k norms,
/// tied, 12 experts so that "experts.10" sorts before "experts.2"). Expert FFN width 512 so
/// gate/up [512, 256] and down [256, 512] cannot be confused. `drop` leaves one tensor out,
/// `extra` adds some, `config_tail` adds config keys.
std::string write_moe(const std::string& tag, bool mixtral, const std::string& drop = "",
                      const std::vector<std::pair<std::string, shape_t>>& extra = {}, const std::string& config_tail = "") {
    const std::string dir = std::string(QFORGE_BINARY_DIR) + "/gguf_moe_" + tag;
    qforge::testing::fresh_dir(dir);
    const int n_expert = mixtral ? 8 : 12;
    io::write_file(dir + "/config.json",
                   mixtral ? R"({"model_type":"mixtral","hidden_size":256,"intermediate_size":512,"num_hidden_layers":2,)"
                             R"("num_attention_heads":4,"num_key_value_heads":1,"num_local_experts":8,"num_experts_per_tok":2,)"
                             R"("max_position_embeddings":4096,"rms_norm_eps":1e-05,"rope_theta":1000000,"vocab_size":512)" + config_tail + "}"
                           : R"({"model_type":"qwen3_moe","hidden_size":256,"intermediate_size":768,"moe_intermediate_size":512,)"
                             R"("num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":128,"num_experts":12,)"
                             R"("num_experts_per_tok":2,"decoder_sparse_step":1,"mlp_only_layers":[],"norm_topk_prob":true,)"
                             R"("max_position_embeddings":40960,"rms_norm_eps":1e-06,"rope_theta":1000000,"vocab_size":512,)"
                             R"("tie_word_embeddings":true)" + config_tail + "}");
    std::vector<safetensors::tensor_spec> specs = {{"model.embed_tokens.weight", dtype::BF16, {512, 256}},
                                                   {"model.norm.weight", dtype::BF16, {256}}};
    if (mixtral) specs.push_back({"lm_head.weight", dtype::BF16, {512, 256}});
    const std::int64_t qkv = mixtral ? 256 : 512, kv = mixtral ? 64 : 256;
    for (int l = 0; l < 2; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        std::vector<std::pair<std::string, shape_t>> t = {
            {"input_layernorm.weight", {256}}, {"post_attention_layernorm.weight", {256}}, {"self_attn.q_proj.weight", {qkv, 256}},
            {"self_attn.k_proj.weight", {kv, 256}}, {"self_attn.v_proj.weight", {kv, 256}}, {"self_attn.o_proj.weight", {256, qkv}}};
        if (!mixtral) {
            t.push_back({"self_attn.q_norm.weight", {128}});
            t.push_back({"self_attn.k_norm.weight", {128}});
        }
        const std::string moe = mixtral ? "block_sparse_moe." : "mlp.";
        t.push_back({moe + "gate.weight", {n_expert, 256}});
        for (int e = 0; e < n_expert; ++e) {
            const std::string x = moe + "experts." + std::to_string(e) + ".";
            t.push_back({x + (mixtral ? "w1.weight" : "gate_proj.weight"), {512, 256}});
            t.push_back({x + (mixtral ? "w3.weight" : "up_proj.weight"), {512, 256}});
            t.push_back({x + (mixtral ? "w2.weight" : "down_proj.weight"), {256, 512}});
        }
        for (const auto& [n, shape] : t)
            if (p + n != drop) specs.push_back({p + n, dtype::BF16, shape});
    }
    for (const auto& [n, shape] : extra) specs.push_back({n, dtype::BF16, shape});
    qforge::testing::write_lcg_bf16(dir + "/model.safetensors", specs, 777);
    return dir;
}

}  // namespace

namespace {

/// The transformers v5 twin of a per-expert Qwen3-MoE checkpoint (write_moe): every layer's
/// experts fused into `mlp.experts.gate_up_proj [E, 2I, H]` (expert e's gate rows, then its up
/// rows: Qwen3MoeExperts, transformers src/transformers/models/qwen3_moe/modeling_qwen3_moe.py)
/// and `mlp.experts.down_proj [E, H, I]`, the same bytes; every other tensor as it was.
std::string fuse_qwen_experts(const std::string& per_expert, const std::string& tag) {
    const std::string dir = std::string(QFORGE_BINARY_DIR) + "/gguf_moe_fused_" + tag;
    if (io::path_exists(dir)) io::remove_tree(dir);
    io::make_directory(dir);
    io::write_file(dir + "/config.json", io::read_file(per_expert + "/config.json"));
    const safetensors::reader st(per_expert + "/model.safetensors");
    const json cfg = json::parse(io::read_file(per_expert + "/config.json"));
    const std::int64_t n_expert = cfg.at("num_experts").as_int(), layers = cfg.at("num_hidden_layers").as_int();
    std::vector<safetensors::tensor_spec> specs;
    for (const auto& t : st.tensors())
        if (t.name.find(".mlp.experts.") == std::string::npos) specs.push_back({t.name, t.type, t.shape});
    for (std::int64_t l = 0; l < layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
        const auto& g = st.view(p + "0.gate_proj.weight").shape;
        specs.push_back({p + "gate_up_proj", dtype::BF16, {n_expert, 2 * g[0], g[1]}});
        specs.push_back({p + "down_proj", dtype::BF16, {n_expert, g[1], g[0]}});
    }
    safetensors::writer w(dir + "/model.safetensors", specs, safetensors::default_metadata(), {.sync = false});
    for (const auto& s : specs) {
        if (!s.name.ends_with("_proj") || s.name.find(".mlp.experts.") == std::string::npos) {
            w.write(s.name, st.view(s.name).bytes);
            continue;
        }
        const std::string p = s.name.substr(0, s.name.rfind('.') + 1);
        std::vector<std::byte> bytes;
        for (std::int64_t e = 0; e < n_expert; ++e)
            for (const char* leaf : s.name.ends_with("gate_up_proj") ? std::vector<const char*>{"gate_proj", "up_proj"}
                                                                      : std::vector<const char*>{"down_proj"}) {
                const auto v = st.view(p + std::to_string(e) + "." + leaf + ".weight");
                bytes.insert(bytes.end(), v.bytes.begin(), v.bytes.end());
            }
        w.write(s.name, bytes);
    }
    w.finish();
    return dir;
}

/// Two GGUF files hold the same metadata and the same tensors, byte for byte (the tensor order
/// may differ: it follows each source's data order).
void check_same_gguf(const std::string& a, const std::string& b) {
    const reader r(a), t(b);
    CHECK(r.metadata().size() == t.metadata().size());
    REQUIRE(r.tensors().size() == t.tensors().size());
    for (const auto& e : r.tensors()) {
        CAPTURE(e.name);
        const tensor_entry* same = t.find_tensor(e.name);
        REQUIRE(same);
        CHECK(same->type == e.type);
        CHECK(same->ne == e.ne);
        CHECK(r.read_bytes(e) == t.read_bytes(*same));
    }
}

}  // namespace

// A fused source is planned as the per-expert slices of the stacked tensors and read one
// expert's block at a time (pread by default, the mapping with read_mapped): the GGUF is the
// one its per-expert twin gives, tensor for tensor.
TEST_CASE("HF -> GGUF: Qwen3-MoE fused 3-D experts stack into the bytes of the per-expert checkpoint") {
    const auto per_expert = write_moe("fuse_src", false);
    const auto fused = fuse_qwen_experts(per_expert, "qwen3");
    convert_options o;
    o.allow_no_vocab = true;
    o.model_name = "moe";
    o.type = *parse_file_type("Q4_K_M");
    const auto want = out_path("fused_want"), got = out_path("fused_got"), mapped = out_path("fused_mapped");
    const auto rep_want = convert_hf_to_gguf(per_expert, want, o);
    const auto rep = convert_hf_to_gguf(fused, got, o);
    check_same_gguf(got, want);
    CHECK(rep.total_elements == rep_want.total_elements);
    CHECK(rep.total_bytes == rep_want.total_bytes);
    CHECK(reader(got).find_tensor("blk.1.ffn_down_exps.weight")->ne == std::vector<std::int64_t>{512, 256, 12});
    o.read_mapped = true;
    convert_hf_to_gguf(fused, mapped, o);
    check_same_gguf(mapped, want);
    // a fused tensor its rule cannot cut is refused with the reason, nothing written
    auto cfg = io::read_file(fused + "/config.json");
    const auto bad = fuse_qwen_experts(per_expert, "bad");
    io::write_file(bad + "/config.json", cfg.replace(cfg.find("\"moe_intermediate_size\":512"), 27, "\"moe_intermediate_size\":384"));
    CHECK_THROWS_WITH_AS(convert_hf_to_gguf(bad, out_path("fused_bad"), o), doctest::Contains("differs from config.json's moe_intermediate_size 384"),
                         unsupported_error);
    CHECK_FALSE(io::path_exists(out_path("fused_bad")));
}

// transformers v5 Mixtral (src/transformers/conversion_mapping.py "mixtral": w1 then w3 ->
// `mlp.experts.gate_up_proj [E, 2I, H]`, w2 -> `mlp.experts.down_proj [E, H, I]`, the router
// renamed `mlp.gate`) gives the GGUF its per-expert twin gives: LC convert_hf_to_gguf.py
// LlamaModel.modify_tensors stacks w1 -> ffn_gate_exps, w3 -> ffn_up_exps, w2 -> ffn_down_exps,
// and gguf-py tensor_mapping.py FFN_GATE_INP names Mixtral's router
// "model.layers.{bid}.block_sparse_moe.gate", which the v5 `mlp.gate` is mapped back to. A
// checkpoint holding the router under both names is refused, nothing written.
TEST_CASE("HF -> GGUF: Mixtral fused v5 experts and its mlp.gate router give the per-expert Mixtral's GGUF") {
    const auto per_expert = write_moe("fuse_mixtral_src", true);
    const std::string fused = std::string(QFORGE_BINARY_DIR) + "/gguf_moe_fused_mixtral";
    if (io::path_exists(fused)) io::remove_tree(fused);
    qforge::testing::write_fused_twin(per_expert, fused);
    CHECK(safetensors::reader(fused + "/model.safetensors").view("model.layers.1.mlp.experts.gate_up_proj").shape ==
          shape_t{8, 1024, 256});
    convert_options o;
    o.allow_no_vocab = true;
    o.type = *parse_file_type("Q4_K_M");
    const auto want = out_path("mixtral_fused_want"), got = out_path("mixtral_fused_got");
    const auto rep_want = convert_hf_to_gguf(per_expert, want, o);
    const auto rep = convert_hf_to_gguf(fused, got, o);
    check_same_gguf(got, want);
    CHECK(rep.total_bytes == rep_want.total_bytes);
    CHECK(reader(got).find_tensor("blk.1.ffn_gate_inp.weight")->ne == std::vector<std::int64_t>{256, 8});
    CHECK(reader(got).find_tensor("blk.0.ffn_up_exps.weight")->ne == std::vector<std::int64_t>{256, 512, 8});
    const auto both = write_moe("mixtral_two_routers", true, "", {{"model.layers.0.mlp.gate.weight", {8, 256}}});
    CHECK_THROWS_WITH_AS(convert_hf_to_gguf(both, out_path("mixtral_two_routers"), o),
                         doctest::Contains("a second source tensor for blk.0.ffn_gate_inp.weight"), format_error);
    CHECK_FALSE(io::path_exists(out_path("mixtral_two_routers")));
}

// LC convert_hf_to_gguf.py LlamaModel.modify_tensors (Mixtral: w1 -> ffn_gate_exps, w3 -> ffn_up_exps,
// w2 -> ffn_down_exps, torch.stack over experts 0..E-1) and Qwen2MoeModel.modify_tensors (the
// same for gate_proj/up_proj/down_proj); LC src/llama-model.cpp load_tensors: ffn_gate_inp
// {n_embd, n_expert}, ffn_{gate,up}_exps {n_embd, n_ff_exp, n_expert}, ffn_down_exps
// {n_ff_exp, n_embd, n_expert}; keys {arch}.expert_count / expert_used_count (TextModel) and
// qwen3moe.expert_feed_forward_length (Qwen2MoeModel).
TEST_CASE("HF -> GGUF: Mixtral and Qwen3-MoE experts stacked into 3-D tensors, keys, mix types") {
    for (const bool mixtral : {true, false}) {
        INFO((mixtral ? "mixtral" : "qwen3_moe"));
        const int n_expert = mixtral ? 8 : 12;
        const auto dir = write_moe(mixtral ? "mixtral" : "qwen3", mixtral);
        const std::string arch = mixtral ? "llama" : "qwen3moe";
        convert_options o;
        o.allow_no_vocab = true;
        o.type = *parse_file_type("Q4_K_M");
        const auto dst = out_path(mixtral ? "mixtral" : "qwen3moe");
        const auto rep = convert_hf_to_gguf(dir, dst, o);
        const reader r(dst);
        CHECK(*r.find("general.architecture")->as<std::string>() == arch);
        CHECK(*r.find((arch + ".expert_count").c_str())->as<std::uint32_t>() == static_cast<std::uint32_t>(n_expert));
        CHECK(*r.find((arch + ".expert_used_count").c_str())->as<std::uint32_t>() == 2);
        if (mixtral) {
            CHECK(r.find("llama.expert_feed_forward_length") == nullptr);
            CHECK(*r.find("llama.feed_forward_length")->as<std::uint32_t>() == 512);
        } else {
            CHECK(*r.find("qwen3moe.expert_feed_forward_length")->as<std::uint32_t>() == 512);
            CHECK(*r.find("qwen3moe.feed_forward_length")->as<std::uint32_t>() == 768);
            CHECK(*r.find("qwen3moe.attention.key_length")->as<std::uint32_t>() == 128);
        }
        CHECK(r.tensors().size() == (mixtral ? 3 + 2 * 10 : 2 + 2 * 12));
        using v = std::vector<std::int64_t>;
        const auto e = static_cast<std::int64_t>(n_expert);
        CHECK(r.find_tensor("blk.1.ffn_gate_inp.weight")->ne == v{256, e});
        CHECK(r.find_tensor("blk.1.ffn_gate_inp.weight")->type == ggml_type::f32);  // never quantized
        CHECK(r.find_tensor("blk.1.ffn_gate_exps.weight")->ne == v{256, 512, e});
        CHECK(r.find_tensor("blk.1.ffn_up_exps.weight")->ne == v{256, 512, e});
        CHECK(r.find_tensor("blk.1.ffn_down_exps.weight")->ne == v{512, 256, e});
        CHECK(r.find_tensor("blk.0.ffn_gate.weight") == nullptr);
        // llama_tensor_get_type: n_expert == 8 (Mixtral) puts attn_v/attn_k at Q8_0 and attn_output
        // at Q5_K; 12 experts change nothing; ffn_down_exps by use_more_bits(layer from the name, 2)
        CHECK(r.find_tensor("blk.0.attn_v.weight")->type == (mixtral ? ggml_type::q8_0 : ggml_type::q4_k));
        CHECK(r.find_tensor("blk.0.attn_k.weight")->type == (mixtral ? ggml_type::q8_0 : ggml_type::q4_k));
        CHECK(r.find_tensor("blk.0.attn_output.weight")->type == (mixtral ? ggml_type::q5_k : ggml_type::q4_k));
        CHECK(r.find_tensor("blk.0.ffn_down_exps.weight")->type == ggml_type::q4_k);
        CHECK(r.find_tensor("blk.1.ffn_down_exps.weight")->type == ggml_type::q6_k);
        CHECK(r.find_tensor("blk.1.ffn_gate_exps.weight")->type == ggml_type::q4_k);
        CHECK(r.find_tensor("token_embd.weight")->type == (mixtral ? ggml_type::q4_k : ggml_type::q6_k));  // untied / tied
        for (const auto& t : rep.tensors) {
            if (t.gguf_name.ends_with("_exps.weight")) CHECK(t.snr_db > 15.0);
            // LlamaModel permutes Mixtral's Q/K rows; Qwen2MoeModel does not (NEOX RoPE)
            if (t.gguf_name.ends_with("attn_q.weight") || t.gguf_name.ends_with("attn_k.weight")) CHECK(t.permuted == mixtral);
        }
        std::uint64_t weights = 0;  // every expert's weights are counted
        for (const auto& t : rep.tensors) {
            std::uint64_t n = 1;
            for (auto d : t.ne) n *= static_cast<std::uint64_t>(d);
            weights += n;
        }
        CHECK(rep.total_elements == weights);

        // stacking order: as F32, expert e's rows are slice e of ne[2], bit for bit
        o.overrides.push_back({R"(.*_exps\.weight)", ggml_type::f32, true});
        convert_hf_to_gguf(dir, dst, o);
        const reader f(dst);
        const safetensors::reader st(dir + "/model.safetensors");
        for (const auto& names : {std::pair{"ffn_gate_exps", mixtral ? "w1" : "gate_proj"}, std::pair{"ffn_up_exps", mixtral ? "w3" : "up_proj"},
                                  std::pair{"ffn_down_exps", mixtral ? "w2" : "down_proj"}}) {
            const std::string gg = names.first, hf = names.second;  // not bindings: clang 14 cannot capture those
            std::vector<float> want;
            for (int x = 0; x < n_expert; ++x) {
                const auto part = source_f32(st, std::string("model.layers.1.") + (mixtral ? "block_sparse_moe" : "mlp") + ".experts." +
                                                     std::to_string(x) + "." + hf + ".weight");
                want.insert(want.end(), part.begin(), part.end());
            }
            CHECK_MESSAGE(read_f32(f, *f.find_tensor((std::string("blk.1.") + gg + ".weight").c_str())) == want, gg);
        }
    }
}

// llama-quantize uses matrix e of a stacked tensor's imatrix entry (ne[0] * ne[2] values) for
// expert e (LC src/llama-quant.cpp: `it->second.size() == ne[0]*ne[2]`, per-expert slices).
TEST_CASE("HF -> GGUF: a stacked tensor's expert e is quantized with matrix e of its imatrix entry") {
    const auto dir = write_moe("imatrix", false);
    const std::int64_t cols = 256, rows = 512, n_expert = 12;
    std::vector<float> im(static_cast<std::size_t>(cols * n_expert));
    for (std::size_t i = 0; i < im.size(); ++i) im[i] = 0.1f + static_cast<float>((i * 7919) % 1000) / 250.0f;
    convert_options o;
    o.allow_no_vocab = true;
    o.type = *parse_file_type("Q4_K_M");
    o.imatrix = [&](const std::string& name) -> const std::vector<float>* { return name == "blk.0.ffn_up_exps.weight" ? &im : nullptr; };
    const auto dst = out_path("moe_imatrix");
    convert_hf_to_gguf(dir, dst, o);
    const reader r(dst);
    const auto* te = r.find_tensor("blk.0.ffn_up_exps.weight");
    REQUIRE(te);
    REQUIRE(te->type == ggml_type::q4_k);
    const auto got = r.read_bytes(*te);
    const auto slice = static_cast<std::size_t>(quantized_size(ggml_type::q4_k, rows, cols));
    const safetensors::reader st(dir + "/model.safetensors");
    for (const std::int64_t e : {std::int64_t{0}, std::int64_t{5}, std::int64_t{11}}) {
        const auto src = source_f32(st, "model.layers.0.mlp.experts." + std::to_string(e) + ".up_proj.weight");
        std::vector<std::uint16_t> want(slice / 2);
        auto* w = reinterpret_cast<std::byte*>(want.data());
        quantize_rows(ggml_type::q4_k, src.data(), rows, cols, im.data() + e * cols, w);
        CHECK_MESSAGE(std::memcmp(got.data() + static_cast<std::size_t>(e) * slice, w, slice) == 0, "expert " << e);
        quantize_rows(ggml_type::q4_k, src.data(), rows, cols, im.data(), w);  // matrix 0 instead: differs
        if (e != 0) CHECK(std::memcmp(got.data() + static_cast<std::size_t>(e) * slice, w, slice) != 0);
    }
    std::vector<float> wrong(static_cast<std::size_t>(cols * 3));
    o.imatrix = [&](const std::string& name) -> const std::vector<float>* { return name == "blk.0.ffn_up_exps.weight" ? &wrong : nullptr; };
    CHECK_THROWS_AS(convert_hf_to_gguf(dir, out_path("moe_imatrix_bad"), o), shape_error);
}

TEST_CASE("HF -> GGUF: MoE checkpoints llama.cpp could not load are refused") {
    convert_options o;
    o.allow_no_vocab = true;
    const auto dst = out_path("moe_bad");
    CHECK_THROWS_WITH_AS(convert_hf_to_gguf(write_moe("missing", false, "model.layers.1.mlp.experts.10.up_proj.weight"), dst, o),
                         doctest::Contains("expert 10 is missing"), format_error);
    CHECK_FALSE(io::path_exists(dst));
    CHECK_THROWS_WITH_AS(convert_hf_to_gguf(write_moe("past", true, "", {{"model.layers.0.block_sparse_moe.experts.8.w1.weight", {512, 256}}}), dst, o),
                         doctest::Contains("past the expert count"), format_error);
    CHECK_THROWS_AS(convert_hf_to_gguf(write_moe("shape", true, "", {{"model.layers.0.block_sparse_moe.experts.9.w2.weight", {512, 256}}}), dst, o),
                    shape_error);  // down must be [hidden, ffn]
    CHECK_THROWS_WITH_AS(convert_hf_to_gguf(write_moe("dense", false, "", {{"model.layers.0.mlp.down_proj.weight", {256, 768}}}), dst, o),
                         doctest::Contains("has no GGUF name for qwen3moe"), unsupported_error);
    for (const auto& [from, to] : {std::pair{"\"mlp_only_layers\":[]", "\"mlp_only_layers\":[0]"},
                                   std::pair{"\"decoder_sparse_step\":1", "\"decoder_sparse_step\":2"}}) {
        const auto dir = write_moe("dense_layers", false);
        auto cfg = io::read_file(dir + "/config.json");
        cfg.replace(cfg.find(from), std::string(from).size(), to);
        io::write_file(dir + "/config.json", cfg);
        CHECK_THROWS_WITH_AS(convert_hf_to_gguf(dir, dst, o), doctest::Contains("MoE FFN in every layer"), unsupported_error);
    }
    {
        const auto dir = write_moe("many", true);
        auto cfg = io::read_file(dir + "/config.json");
        cfg.replace(cfg.find("\"num_local_experts\":8"), 21, "\"num_local_experts\":4000000000");
        io::write_file(dir + "/config.json", cfg);
        CHECK_THROWS_WITH_AS(convert_hf_to_gguf(dir, dst, o), doctest::Contains("at most 1024 experts"), unsupported_error);
    }
    CHECK_FALSE(io::path_exists(dst));
}

TEST_CASE("HF -> GGUF: Q4_K_M on the two-shard demo checkpoint, read back and un-permuted") {
    const std::string dir = std::string(QFORGE_BINARY_DIR) + "/gguf_demo_ckpt";
    if (io::path_exists(dir)) io::remove_tree(dir);
    demo_options d;
    d.layers = 2;
    d.vocab = 512;
    write_demo_checkpoint(dir, d);
    convert_options o;
    o.type = *parse_file_type("Q4_K_M");
    o.pre_tokenizer = "llama-bpe";
    // the demo's tokenizer.json is BPE without byte-level pre-tokenization: refused, not guessed
    CHECK_THROWS_AS(convert_hf_to_gguf(dir, out_path("demo"), o), unsupported_error);
    o.pre_tokenizer.clear();
    o.allow_no_vocab = true;
    const auto rep = convert_hf_to_gguf(dir, out_path("demo"), o);
    const reader r(out_path("demo"));
    CHECK(r.tensors().size() == 2 + 2 * 9);
    CHECK(r.find_tensor("blk.0.attn_q.weight")->type == ggml_type::q4_k);
    CHECK(r.find_tensor("blk.0.attn_v.weight")->type == ggml_type::q4_k);
    CHECK(r.find_tensor("blk.1.attn_v.weight")->type == ggml_type::q6_k);  // use_more_bits(1, 2)
    CHECK(r.find_tensor("blk.0.ffn_gate.weight")->type == ggml_type::q4_k);
    CHECK(r.find_tensor("output.weight") == nullptr);
    CHECK(r.find_tensor("token_embd.weight")->type == ggml_type::q6_k);  // tied: the output type
    CHECK(r.find_tensor("blk.0.ffn_down.weight")->ne[0] == 1408);  // 1408 % 256 != 0
    CHECK(r.find_tensor("blk.0.ffn_down.weight")->type == ggml_type::q5_0);  // Q4_K -> Q5_0
    CHECK(r.find_tensor("blk.1.ffn_down.weight")->type == ggml_type::q8_0);  // Q6_K -> Q8_0
    CHECK(rep.fallbacks().size() >= 1);
    CHECK(rep.bits_per_weight() > 4.0);
    CHECK(rep.bits_per_weight() < 6.5);
    // attn_q decoded and un-permuted is close to the source (Q4_K on Student-t weights)
    const checkpoint_source src(dir);
    const auto v = src.view("model.layers.1.self_attn.q_proj.weight");
    const auto* te = r.find_tensor("blk.1.attn_q.weight");
    const auto got = read_f32(r, *te);
    const std::int64_t rows = te->ne[1], cols = te->ne[0], heads = 8, hd = rows / heads;
    double num = 0, den = 0, den_unpermuted = 0;
    for (std::int64_t out_row = 0; out_row < rows; ++out_row) {
        const std::int64_t h = out_row / hd, i = (out_row % hd) / 2, j = out_row % 2;
        const std::int64_t in_row = h * hd + j * hd / 2 + i;
        for (std::int64_t c = 0; c < cols; ++c) {
            std::uint16_t b, b_same;
            std::memcpy(&b, v.bytes.data() + 2 * (in_row * cols + c), 2);
            std::memcpy(&b_same, v.bytes.data() + 2 * (out_row * cols + c), 2);
            const double s = bf16_to_float(b), g = got[static_cast<std::size_t>(out_row * cols + c)];
            num += s * s;
            den += (s - g) * (s - g);
            den_unpermuted += (bf16_to_float(b_same) - g) * (bf16_to_float(b_same) - g);
        }
    }
    CHECK(10 * std::log10(num / den) > 18.0);
    CHECK(10 * std::log10(num / den_unpermuted) < 3.0);  // without the permutation it would not match

    // threads change nothing: same bytes, same report
    thread_pool pool(3);
    o.exec = pool.executor();
    o.chunk_rows = 100;  // chunks that do not divide the row counts
    const auto rep3 = convert_hf_to_gguf(dir, out_path("demo_mt"), o);
    CHECK(io::read_file(out_path("demo_mt")) == io::read_file(out_path("demo")));
    REQUIRE(rep3.tensors.size() == rep.tensors.size());
    for (std::size_t i = 0; i < rep.tensors.size(); ++i) CHECK(rep3.tensors[i].snr_db == rep.tensors[i].snr_db);
}

TEST_CASE("HF -> GGUF from FP8 sources: the bytes of the dequantized twin; a malformed scale is refused, nothing written") {
    // The twin holds e4m3(code) * scale as F32 (tests/support/fp8_checkpoint.hpp, from the E4M3
    // definition): llama.cpp's converter dequantizes FP8 the same way before it quantizes
    // (LC convert_hf_to_gguf.py dequant_model, dequant_simple).
    const testing::fp8_layout layouts[] = {testing::fp8_layout::native_block, testing::fp8_layout::ct_channel};
    int n = 0;
    for (const auto layout : layouts) {
        CAPTURE(n);
        testing::fp8_fixture f;
        f.layout = layout;
        f.scale_type = layout == testing::fp8_layout::native_block ? dtype::F32 : dtype::BF16;
        const std::string src = std::string(QFORGE_BINARY_DIR) + "/gguf_fp8_src" + std::to_string(n);
        const std::string twin = std::string(QFORGE_BINARY_DIR) + "/gguf_fp8_twin" + std::to_string(n);
        for (const auto& d : {src, twin})
            if (io::path_exists(d)) io::remove_tree(d);
        testing::write_fp8_checkpoint(src, f);
        f.twin = true;
        testing::write_fp8_checkpoint(twin, f);
        convert_options o;
        o.type = *parse_file_type("Q8_0");
        o.allow_no_vocab = true;
        o.model_name = "fp8";
        const auto a = out_path(n == 0 ? "fp8_a0" : "fp8_a1"), b = out_path(n == 0 ? "fp8_b0" : "fp8_b1");
        const auto rep = convert_hf_to_gguf(src, a, o);
        convert_hf_to_gguf(twin, b, o);
        CHECK(rep.tensors.size() == 12);  // 5 dense + 7 linears: no scale tensor
        // Same metadata, same tensors; the order follows each source file's data order, which
        // the safetensors writer sorts by dtype.
        check_same_gguf(a, b);
        const reader r(a);
        CHECK(r.find_tensor("blk.0.attn_q.weight")->type == ggml_type::q8_0);
        ++n;
    }
    {  // fused 3-D FP8 experts (transformers FP8Expert, `<name>_scales_inv` [E, N/128, K/128]): each
       // expert's slice decoded on its own gives the stacked tensors of the F32 twin, bit for bit
        testing::fp8_fixture f;
        f.fused_experts = 4;
        const std::string src = std::string(QFORGE_BINARY_DIR) + "/gguf_fp8_fused", twin = src + "_twin";
        for (const auto& d : {src, twin})
            if (io::path_exists(d)) io::remove_tree(d);
        testing::write_fp8_checkpoint(src, f);
        f.twin = true;
        testing::write_fp8_checkpoint(twin, f);
        convert_options o;
        o.type = *parse_file_type("Q8_0");
        o.allow_no_vocab = true;
        o.model_name = "fp8";
        convert_hf_to_gguf(twin, out_path("fp8_fused_twin"), o);
        for (const bool mapped : {false, true}) {
            o.read_mapped = mapped;
            convert_hf_to_gguf(src, out_path("fp8_fused"), o);
            check_same_gguf(out_path("fp8_fused"), out_path("fp8_fused_twin"));
        }
        CHECK(reader(out_path("fp8_fused")).find_tensor("blk.0.ffn_gate_exps.weight")->ne == std::vector<std::int64_t>{192, 320, 4});
    }
    testing::fp8_fixture f;
    const std::string bad = std::string(QFORGE_BINARY_DIR) + "/gguf_fp8_bad";
    if (io::path_exists(bad)) io::remove_tree(bad);
    testing::write_fp8_checkpoint(bad, f);
    json cfg = json::parse(io::read_file(bad + "/config.json"));
    cfg.at("quantization_config").set("weight_block_size", json::array({128, 64}));  // the scales no longer fit
    io::write_config(bad, cfg);
    convert_options o;
    o.allow_no_vocab = true;
    CHECK_THROWS_WITH_AS(convert_hf_to_gguf(bad, out_path("fp8_bad"), o),
                         doctest::Contains("model.layers.0.mlp.down_proj.weight_scale_inv': scale shape [2, 3] does not fit weight [192, 320]"),
                         unsupported_error);
    CHECK_FALSE(io::path_exists(out_path("fp8_bad")));
}

// The MXFP4_MOE mix (LLAMA_FTYPE_MOSTLY_MXFP4_MOE = 38, llama.cpp tools/quantize/quantize.cpp
// QUANT_OPTIONS): src/llama-quant.cpp llama_tensor_get_type_impl gives merged expert tensors
// (ne[2] > 1) MXFP4 and every other quantized tensor, token embedding and output head included,
// Q8_0; norms, 1-D tensors and the router stay F32 as in every mix.
TEST_CASE("type choice: MXFP4_MOE puts the 3-D experts in MXFP4 and the rest in Q8_0") {
    const auto ft = parse_file_type("mxfp4_moe");
    REQUIRE(ft);
    CHECK(ft->name == "MXFP4_MOE");
    CHECK(ft->llama_ftype == 38);
    mix_model m;
    m.arch = "qwen3moe";
    m.n_layer = 2;
    m.n_head = 4;
    m.n_head_kv = 2;
    m.n_expert = 4;
    CHECK(choose_type(*ft, {}, "blk.0.ffn_gate_exps.weight", 3, 128, 0, m).chosen == ggml_type::mxfp4);
    CHECK(choose_type(*ft, {}, "blk.1.ffn_down_exps.weight", 3, 128, 1, m).chosen == ggml_type::mxfp4);
    CHECK(choose_type(*ft, {}, "blk.0.attn_q.weight", 2, 128, 0, m).chosen == ggml_type::q8_0);
    CHECK(choose_type(*ft, {}, "output.weight", 2, 128, -1, m).chosen == ggml_type::q8_0);
    CHECK(choose_type(*ft, {}, "token_embd.weight", 2, 128, -1, m).chosen == ggml_type::q8_0);
    CHECK(choose_type(*ft, {}, "blk.0.ffn_gate_inp.weight", 2, 128, 0, m).chosen == ggml_type::f32);
    CHECK(choose_type(*ft, {}, "blk.0.attn_norm.weight", 1, 128, 0, m).chosen == ggml_type::f32);
    // An expert row that is not a whole number of 32-blocks: F16, and said so.
    const auto odd = choose_type(*ft, {}, "blk.0.ffn_up_exps.weight", 3, 100, 0, m);
    CHECK(odd.chosen != ggml_type::mxfp4);
    CHECK_FALSE(odd.fallback.empty());
    CHECK(choose_type(*ft, {parse_override("re:blk\\.0\\.ffn_down_exps\\.weight=Q8_0")}, "blk.0.ffn_down_exps.weight", 3, 128, 0, m)
              .chosen == ggml_type::q8_0);
}

TEST_CASE("HF -> GGUF MXFP4_MOE (Qwen3-MoE, Mixtral): stacked experts are MXFP4 blocks that decode independently to the library's values") {
    for (qforge::demo_moe style : {qforge::demo_moe::qwen_moe, qforge::demo_moe::mixtral}) {
        CAPTURE(static_cast<int>(style));
        const std::string tag = "mxfp4_moe_" + std::to_string(static_cast<int>(style));
        const std::string dir = std::string(QFORGE_BINARY_DIR) + "/gguf_" + tag + "_src", dst = out_path(tag.c_str());
        if (qforge::io::path_exists(dir)) qforge::io::remove_tree(dir);
        qforge::demo_options o;
        o.hidden = 128;
        o.intermediate = 256;
        o.layers = 2;
        o.heads = 4;
        o.kv_heads = 2;
        o.vocab = 512;
        o.moe = style;
        o.experts = 4;
        o.moe_intermediate = 128;
        o.tied = false;
        qforge::write_demo_checkpoint(dir, o);
        convert_options c;
        c.allow_no_vocab = true;
        c.type = *parse_file_type("MXFP4_MOE");
        const auto rep = convert_hf_to_gguf(dir, dst, c);
        const reader r(dst);
        CHECK(*r.find("general.file_type")->as<std::uint32_t>() == 38);
        for (const char* t : {"blk.0.ffn_gate_exps.weight", "blk.0.ffn_up_exps.weight", "blk.1.ffn_down_exps.weight"}) {
            CAPTURE(t);
            const auto* e = r.find_tensor(t);
            REQUIRE(e);
            CHECK(e->type == ggml_type::mxfp4);
            REQUIRE(e->nbytes == static_cast<std::uint64_t>(e->numel() / 32 * 17));
            const std::vector<std::byte> bytes = r.read_bytes(*e);
            const auto n = static_cast<std::size_t>(e->numel());
            const std::vector<float> mine = qforge::testing::independent::mxfp4_gguf(bytes.data(), n);
            std::vector<float> lib(n);
            dequantize_rows(ggml_type::mxfp4, bytes.data(), static_cast<std::int64_t>(n), lib.data());
            CHECK(mine == lib);
        }
        CHECK(r.find_tensor("blk.0.attn_q.weight")->type == ggml_type::q8_0);
        CHECK(r.find_tensor("output.weight")->type == ggml_type::q8_0);
        CHECK(r.find_tensor("blk.0.ffn_gate_inp.weight")->type == ggml_type::f32);
        for (const auto& t : rep.tensors)
            if (t.gguf_name.ends_with("_exps.weight")) CHECK(t.snr_db > 12.0);  // E2M1 under power-of-two scales
    }
}

// --dry-run for GGUF (issue 15): the plan is convert_hf_to_gguf's own plan step, so every
// tensor's planned type and fallback equal what the conversion then writes; the serving check's
// block rule (gguf_shard_refusal) applies to the row-parallel tensors per degree. stories260k
// under Q4_K_M: attn_output has K = 64, Q4_K falls back to Q5_0 (block 32), so tp 2 keeps whole
// blocks (32 per rank) and tp 4 does not (16); ffn_down has K = 172, F16 (block 1): 172 does
// not split into 8 ranks.
TEST_CASE("GGUF dry run: the converter's planned types and fallbacks, the block rule per tp") {
    convert_options o;
    o.type = *parse_file_type("Q4_K_M");
    o.tokenizer_from = make_template();
    const std::vector<int> tp = {1, 2, 4, 8};
    const dry_run_report plan = dry_run_hf_to_gguf(fixture, o, tp);
    const convert_report wrote = convert_hf_to_gguf(fixture, out_path("dry-q4km"), o);
    REQUIRE(plan.tensors.size() == wrote.tensors.size());
    for (std::size_t i = 0; i < plan.tensors.size(); ++i) {
        const auto& p = plan.tensors[i];
        const auto& w = wrote.tensors[i];
        CAPTURE(p.gguf_name);
        CHECK(p.gguf_name == w.gguf_name);
        CHECK(p.ne == w.ne);
        CHECK(p.requested == w.requested);
        CHECK(p.chosen == w.chosen);
        CHECK(p.fallback == w.fallback);
        CHECK(p.bytes == w.bytes);
    }
    CHECK(plan.total_bytes == wrote.total_bytes);
    auto find = [&](const std::string& name) -> const dry_run_tensor& {
        const auto it = std::find_if(plan.tensors.begin(), plan.tensors.end(), [&](const auto& t) { return t.gguf_name == name; });
        REQUIRE(it != plan.tensors.end());
        return *it;
    };
    const dry_run_tensor& o0 = find("blk.0.attn_output.weight");
    CHECK(o0.row_parallel);
    CHECK(o0.chosen == ggml_type::q5_0);
    CHECK_FALSE(o0.tp_refusals[0]);
    CHECK_FALSE(o0.tp_refusals[1]);
    CHECK(o0.tp_refusals[2].value_or("").find("K per rank 16 is not a multiple of the 32-weight block") != std::string::npos);
    const dry_run_tensor& d0 = find("blk.0.ffn_down.weight");
    CHECK(d0.chosen == ggml_type::f16);
    CHECK_FALSE(d0.tp_refusals[2]);
    CHECK(d0.tp_refusals[3].value_or("").find("does not split into 8 ranks") != std::string::npos);
    const dry_run_tensor& q0 = find("blk.0.attn_q.weight");  // column-parallel: K is never split
    CHECK_FALSE(q0.row_parallel);
    CHECK_FALSE(q0.tp_refusals[3]);

    std::ostringstream os;
    print_dry_run(os, plan);
    const std::string text = os.str();
    CHECK(text.find("blk.0.attn_output.weight [64x64] Q5_0 (fallback: ") != std::string::npos);
    CHECK(text.find("serving tp=2: every row-parallel shard holds whole blocks") != std::string::npos);
    CHECK(text.find("serving tp=4: blk.0.attn_output.weight (Q5_0): K per rank 16") != std::string::npos);
    CHECK(text.find("serving tp=8: 10 row-parallel tensor(s) break a quant block") != std::string::npos);
}

// --repack: packed compressed-tensors MXFP4 (weight_packed U8 [N, K/2], weight_scale E8M0 U8
// [N, K/32], format mxfp4-pack-quantized; CTn compressors/mxfp4/base.py) -> GGUF MXFP4 (ggml
// type 39) by copying codes and exponents. The source is written here from random codes whose
// every block holds a magnitude 4 or 6 and no negative zero: then ggml's quantize_row_mxfp4_ref
// of the decoded values picks the very same exponent (floor(log2(4 or 6 * 2^s)) - 2 = s) and
// codes (each value is exactly one kvalues_mxfp4 * d), i.e. it is the same quantization, and the
// repacked file must equal, byte for byte, the GGUF written directly from the decoded twin.
namespace {

struct repack_mx_dirs {
    std::string ct, twin;
};

bool repack_mx_is_linear(const std::string& n) {
    return n.ends_with(".weight") && (n.find("self_attn.") != std::string::npos || n.find(".experts.") != std::string::npos) &&
           n.find("_norm") == std::string::npos;
}

/// A CT MXFP4 checkpoint and its dequantized BF16 twin, from the demo model `o` (its dense
/// tensors copied to both; every attention / expert linear replaced).
repack_mx_dirs repack_mx_checkpoints(const std::string& tag, const qforge::demo_options& o, json group_weights = json()) {
    const std::string base = std::string(QFORGE_BINARY_DIR) + "/gguf_repack_" + tag;
    const repack_mx_dirs d{base + "_ct", base + "_twin"};
    for (const std::string& p : {base + "_bf16", d.ct, d.twin})
        if (qforge::io::path_exists(p)) qforge::io::remove_tree(p);
    qforge::write_demo_checkpoint(base + "_bf16", o);
    const qforge::checkpoint_source src(base + "_bf16");
    struct out_tensor {
        std::string name;
        dtype type;
        shape_t shape;
        std::vector<std::byte> bytes;
    };
    std::vector<out_tensor> ct, twin;
    std::uint32_t state = 12345;
    auto next = [&] {
        state = state * 1664525u + 1013904223u;
        return state >> 8;
    };
    for (const auto& t : src.tensors()) {
        const tensor_view v = src.view(t.name);
        if (!repack_mx_is_linear(t.name)) {
            const std::vector<std::byte> b(v.bytes.begin(), v.bytes.end());
            ct.push_back({t.name, t.type, t.shape, b});
            twin.push_back({t.name, t.type, t.shape, b});
            continue;
        }
        const std::int64_t n = t.shape[0], k = t.shape[1], nb = k / 32;
        const std::string m = t.name.substr(0, t.name.size() - 7);
        std::vector<std::byte> packed(static_cast<std::size_t>(n * k / 2)), scale(static_cast<std::size_t>(n * nb)),
            dense(static_cast<std::size_t>(n * k * 2));
        for (std::int64_t r = 0; r < n; ++r)
            for (std::int64_t b = 0; b < nb; ++b) {
                const auto e = static_cast<std::uint8_t>(115 + next() % 8);  // 2^-12 .. 2^-5
                scale[static_cast<std::size_t>(r * nb + b)] = std::byte{e};
                const std::int64_t top = static_cast<std::int64_t>(next() % 32);  // the element of magnitude 4 or 6
                for (std::int64_t c = 32 * b; c < 32 * (b + 1); ++c) {
                    std::uint8_t code = static_cast<std::uint8_t>(next() % 16);
                    if (c - 32 * b == top) code = static_cast<std::uint8_t>((next() % 2) << 3 | (6 + next() % 2));
                    if (code == 8) code = 0;  // no negative zero (ggml writes +0 for it)
                    auto& byte = packed[static_cast<std::size_t>((r * k + c) / 2)];
                    byte |= std::byte{static_cast<std::uint8_t>(c % 2 ? code << 4 : code)};
                    const float w = qforge::testing::independent::e2m1(code) * std::ldexp(1.0f, e - 127);
                    const std::uint16_t h = float_to_bf16(w);
                    REQUIRE(bf16_to_float(h) == w);
                    std::memcpy(dense.data() + 2 * (r * k + c), &h, 2);
                }
            }
        ct.push_back({m + ".weight_packed", dtype::U8, {n, k / 2}, std::move(packed)});
        ct.push_back({m + ".weight_scale", dtype::U8, {n, nb}, std::move(scale)});
        twin.push_back({t.name, dtype::BF16, t.shape, std::move(dense)});
    }
    json cfg = qforge::io::read_config(base + "_bf16");
    auto write = [&](const std::string& dir, const std::vector<out_tensor>& ts, bool quantized) {
        qforge::io::make_directory(dir);
        std::vector<safetensors::tensor_spec> specs;
        for (const auto& t : ts) specs.push_back({t.name, t.type, t.shape});
        safetensors::writer w(dir + "/model.safetensors", specs, safetensors::default_metadata(), {.sync = false});
        for (const auto& t : ts) w.write(t.name, t.bytes);
        w.finish();
        json c = cfg;
        if (quantized) {
            json weights = !group_weights.is_null() ? group_weights
                                                    : json::object({{"num_bits", 4}, {"type", "float"}, {"strategy", "group"},
                                                                    {"group_size", 32}, {"symmetric", true}, {"dynamic", false}});
            json group = json::object({{"format", "mxfp4-pack-quantized"}, {"targets", json::array({"Linear"})},
                                       {"weights", std::move(weights)}, {"input_activations", json()}});
            c.set("quantization_config", json::object({{"quant_method", "compressed-tensors"}, {"format", "mxfp4-pack-quantized"},
                                                       {"config_groups", json::object({{"group_0", std::move(group)}})},
                                                       {"ignore", json::array({"lm_head"})}}));
        }
        qforge::io::write_config(dir, c);
    };
    write(d.ct, ct, true);
    write(d.twin, twin, false);
    return d;
}

qforge::demo_options repack_mx_demo(qforge::demo_moe style) {
    qforge::demo_options o;
    o.hidden = 64;
    o.intermediate = 128;
    o.layers = 1;
    o.heads = 4;
    o.kv_heads = 2;
    o.vocab = 96;
    o.shards = 1;
    o.moe = style;
    o.experts = 2;
    o.moe_intermediate = 64;
    o.tied = false;
    return o;
}

convert_options repack_mx_options(bool repack) {
    convert_options c;
    c.allow_no_vocab = true;
    c.model_name = "repack";
    c.type = *parse_file_type("MXFP4_MOE");
    c.overrides.push_back(parse_override("re:blk\\..*\\.attn_(q|k|v|output)\\.weight=MXFP4"));
    c.repack = repack;
    return c;
}

}  // namespace

TEST_CASE("--repack CT MXFP4 -> GGUF MXFP4: the bytes of the direct GGUF of the decoded twin; codes permuted, values decoded equal") {
    for (qforge::demo_moe style : {qforge::demo_moe::qwen_moe, qforge::demo_moe::mixtral}) {
        CAPTURE(static_cast<int>(style));
        const std::string tag = "mx" + std::to_string(static_cast<int>(style));
        const repack_mx_dirs d = repack_mx_checkpoints(tag, repack_mx_demo(style));
        const std::string out_rep = out_path((tag + "_repacked").c_str()), out_dir = out_path((tag + "_direct").c_str());
        for (bool mapped : {false, true}) {
            convert_options c = repack_mx_options(true);
            c.read_mapped = mapped;
            c.chunk_rows = 5;  // chunks that end mid-tensor
            const convert_report rep = convert_hf_to_gguf(d.ct, out_rep, c);
            std::size_t repacked = 0;
            for (const auto& t : rep.tensors)
                if (t.repacked) {
                    ++repacked;
                    CHECK(t.chosen == ggml_type::mxfp4);
                    CHECK(std::isinf(t.snr_db));
                }
            CHECK(repacked == 7);  // q, k, v, o, and the three stacked expert tensors
            convert_hf_to_gguf(d.twin, out_dir, repack_mx_options(false));
            // same tensors, byte for byte, and the same metadata (the tensor order follows each
            // source's data order: the CT file holds its U8 tensors after the BF16 ones)
            check_same_gguf(out_rep, out_dir);
            CHECK((reader(out_rep).metadata() == reader(out_dir).metadata()));
        }
        // Decoded values: every GGUF row (independent GGUF decoder) is the CT row it came from
        // (independent CT decoder), through llama.cpp's Q/K row permutation where it applies
        // (formats.md 5.4: out[h*hd + 2i + j] = in[h*hd + j*hd/2 + i]).
        const reader r(out_rep);
        const checkpoint_source ct(d.ct);
        const bool permutes = style == qforge::demo_moe::mixtral;
        const std::string pre = "model.layers.0.";
        const std::string up = style == qforge::demo_moe::mixtral ? "block_sparse_moe.experts.1.w3" : "mlp.experts.1.up_proj";
        for (const auto& [gguf_name, hf, heads] : std::vector<std::tuple<std::string, std::string, int>>{
                 {"blk.0.attn_q.weight", pre + "self_attn.q_proj", 4}, {"blk.0.attn_k.weight", pre + "self_attn.k_proj", 2},
                 {"blk.0.attn_v.weight", pre + "self_attn.v_proj", 0}, {"blk.0.ffn_up_exps.weight", pre + up, 0}}) {
            const std::string where = gguf_name;
            CAPTURE(where);
            const auto* e = r.find_tensor(gguf_name);
            REQUIRE(e);
            REQUIRE(e->type == ggml_type::mxfp4);
            const tensor_view packed = ct.view(hf + ".weight_packed"), scale = ct.view(hf + ".weight_scale");
            const std::vector<float> want = qforge::testing::independent::mxfp4_ct(packed, scale);
            const std::int64_t n = packed.shape[0], k = packed.shape[1] * 2;
            const std::vector<std::byte> bytes = r.read_bytes(*e);
            const std::size_t expert_at = gguf_name.find("exps") != std::string::npos ? static_cast<std::size_t>(n * k / 32 * 17) : 0;
            const std::vector<float> got = qforge::testing::independent::mxfp4_gguf(bytes.data() + expert_at, static_cast<std::size_t>(n * k));
            const int h = permutes ? heads : 0;
            for (std::int64_t row = 0; row < n; ++row) {
                std::int64_t srow = row;
                if (h > 0) {
                    const std::int64_t hd = n / h, head = row / hd, i = (row % hd) / 2, j = row % 2;
                    srow = head * hd + j * (hd / 2) + i;
                }
                for (std::int64_t c = 0; c < k; ++c)
                    if (got[static_cast<std::size_t>(row * k + c)] != want[static_cast<std::size_t>(srow * k + c)]) {
                        FAIL_CHECK("row " << row << " column " << c);
                        row = n;
                        break;
                    }
            }
        }
    }
}

TEST_CASE("--repack into GGUF refuses what is not lossless, naming file, tensor and reason, and writes nothing") {
    const qforge::demo_options o = repack_mx_demo(qforge::demo_moe::qwen_moe);
    const repack_mx_dirs d = repack_mx_checkpoints("refuse", o);
    const std::string dst = out_path("repack_refused");
    auto refused = [&](const std::string& src, const convert_options& c, const std::string& what) {
        CAPTURE(what);
        if (qforge::io::path_exists(dst)) qforge::io::remove_file(dst);
        try {
            convert_hf_to_gguf(src, dst, c);
            FAIL_CHECK("not refused");
        } catch (const qforge::error& e) {
            const std::string msg = e.what();
            CHECK_MESSAGE(msg.find(what) != std::string::npos, msg);
        }
        CHECK_FALSE(qforge::io::path_exists(dst));
    };
    // a dense source has nothing to copy; a packed one needs --repack
    refused(d.twin, repack_mx_options(true), "a dense (unquantized) source has nothing GGUF holds losslessly");
    refused(d.ct, repack_mx_options(false), "pass --repack to copy its codes");
    // an override that would requantize a packed tensor
    convert_options q4 = repack_mx_options(true);
    q4.overrides.insert(q4.overrides.begin(), parse_override("blk.0.attn_v.weight=Q4_0"));
    refused(d.ct, q4, "gguf_repack_refuse_ct/model.safetensors: tensor 'blk.0.attn_v.weight': --repack copies the packed MXFP4 codes of "
                    "model.layers.0.self_attn.v_proj.weight; the override asks Q4_0");
    // NVFP4's group 16, an integer group, a group of 64
    const auto nv = repack_mx_checkpoints("refuse_g16", o, json::object({{"num_bits", 4}, {"type", "float"}, {"strategy", "tensor_group"},
                                                                          {"group_size", 16}, {"symmetric", true}}));
    refused(nv.ct, repack_mx_options(true), "GGUF MXFP4 blocks are groups of 32 along a row");
    const auto in = repack_mx_checkpoints("refuse_int", o, json::object({{"num_bits", 4}, {"type", "int"}, {"strategy", "group"},
                                                                          {"group_size", 32}, {"symmetric", true}}));
    refused(in.ct, repack_mx_options(true), "GGUF MXFP4 holds 4-bit float (E2M1) codes only");
    // tensor-level: a scale of the wrong shape, a missing one, the E8M0 NaN code
    auto edit = [&](const std::string& tag, const std::function<void(std::vector<std::pair<safetensors::tensor_spec, std::vector<std::byte>>>&)>& f) {
        const std::string dir = std::string(QFORGE_BINARY_DIR) + "/gguf_repack_" + tag;
        if (qforge::io::path_exists(dir)) qforge::io::remove_tree(dir);
        qforge::io::make_directory(dir);
        qforge::io::copy_file(d.ct + "/config.json", dir + "/config.json");
        const safetensors::reader st(d.ct + "/model.safetensors");
        std::vector<std::pair<safetensors::tensor_spec, std::vector<std::byte>>> ts;
        for (const auto& t : st.tensors()) {
            const auto v = st.view(t.name);
            ts.push_back({{t.name, t.type, t.shape}, std::vector<std::byte>(v.bytes.begin(), v.bytes.end())});
        }
        f(ts);
        std::vector<safetensors::tensor_spec> specs;
        for (const auto& t : ts) specs.push_back(t.first);
        safetensors::writer w(dir + "/model.safetensors", specs, safetensors::default_metadata(), {.sync = false});
        for (const auto& t : ts) w.write(t.first.name, t.second);
        w.finish();
        return dir;
    };
    const std::string v_scale = "model.layers.0.self_attn.v_proj.weight_scale";
    refused(edit("refuse_shape", [&](auto& ts) {
                for (auto& t : ts)
                    if (t.first.name == v_scale) {
                        t.first.shape = {t.first.shape[0] * 2, t.first.shape[1] / 2};  // group 64's shape
                    }
            }),
            repack_mx_options(true), "model.safetensors: tensor '" + v_scale + "': expected [32, 2] (one exponent per 32 columns), got [64, 1]");
    refused(edit("refuse_missing", [&](auto& ts) { std::erase_if(ts, [&](const auto& t) { return t.first.name == v_scale; }); }),
            repack_mx_options(true), "model.safetensors: tensor '" + v_scale + "': missing: a packed MXFP4 weight needs its E8M0 scales");
    refused(edit("refuse_nan", [&](auto& ts) {
                for (auto& t : ts)
                    if (t.first.name == v_scale) t.second[3] = std::byte{0xFF};
            }),
            repack_mx_options(true), "model.safetensors: tensor '" + v_scale + "': E8M0 NaN scale 0xFF at row 1, group 1");
}

TEST_CASE("HF -> GGUF: a NaN or infinity in a weight is refused, naming file and tensor, and nothing is written") {
    const std::string dir = std::string(QFORGE_BINARY_DIR) + "/gguf_nan_ckpt";
    demo_options d;
    d.layers = 1;
    d.vocab = 512;
    for (const std::uint16_t bad : {std::uint16_t{0x7FC0}, std::uint16_t{0xFF80}}) {  // bf16 NaN, -infinity
        if (io::path_exists(dir)) io::remove_tree(dir);
        write_demo_checkpoint(dir, d);
        const std::string name = "model.layers.0.mlp.up_proj.weight";
        std::string shard;
        std::uint64_t at = 0;
        {
            const safetensors::sharded_reader st(dir);
            const safetensors::reader& r = *st.shard_of(name);
            shard = r.path();
            at = r.data_offset() + r.info(name).begin + 2 * 1000;  // row 0 or 1, a column past the first blocks
        }
        std::string bytes = io::read_file(shard);
        std::memcpy(bytes.data() + at, &bad, 2);
        io::write_file(shard, std::string_view(bytes));
        convert_options o;
        o.type = *parse_file_type("Q4_K_M");
        o.allow_no_vocab = true;
        const std::string dst = out_path("nan");
        if (io::path_exists(dst)) io::remove_tree(dst);
        CHECK_THROWS_WITH_AS(convert_hf_to_gguf(dir, dst, o),
                             doctest::Contains((name + "': tensor holds NaN or infinity").c_str()), format_error);
        CHECK_FALSE(io::path_exists(dst));
    }
}
