// HF -> GGUF on the real tiny Llama in ../shared/fixtures/stories260k: names, shapes, metadata
// types llama.cpp checks, the Q/K permutation (decoded back and un-permuted), type choice with
// fallbacks, tokenizer sources and refusals.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/convert/gguf/converter.hpp"
#include "qforge/io/gguf/reader.hpp"
#include "qforge/io/safetensors/reader.hpp"

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

std::vector<float> source_f32(const safetensors::reader& st, const std::string& name) {
    const auto v = st.view(name);
    std::vector<float> out(static_cast<std::size_t>(v.numel()));
    for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, v.bytes.data() + 2 * i, 2);
        out[i] = bf16_to_float(h);
    }
    return out;
}

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
            const auto got = r.read_f32(*te);
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
    const auto v_got = r.read_f32(*r.find_tensor("blk.2.attn_v.weight"));
    double num = 0, den = 0;
    for (std::size_t i = 0; i < v_src.size(); ++i) {
        num += v_src[i] * v_src[i];
        den += (v_src[i] - v_got[i]) * (v_src[i] - v_got[i]);
    }
    CHECK(10 * std::log10(num / den) > 35.0);
    for (const auto& t : rep.tensors)
        if (t.gguf_name == "blk.2.attn_v.weight") CHECK(std::abs(t.snr_db - 10 * std::log10(num / den)) < 0.01);
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
    for (const auto& t : rep.tensors)
        if (t.chosen != t.requested) CHECK_FALSE(t.fallback.empty());
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

TEST_CASE("type choice: presets, overrides, fallbacks") {
    const auto q4km = *parse_file_type("Q4_K_M");
    CHECK(choose_type(q4km, {}, "output.weight", 2, 4096, -1, 32).chosen == ggml_type::q6_k);
    CHECK(choose_type(q4km, {}, "blk.0.attn_v.weight", 2, 4096, 0, 32).chosen == ggml_type::q6_k);
    CHECK(choose_type(q4km, {}, "blk.5.attn_v.weight", 2, 4096, 5, 32).chosen == ggml_type::q4_k);
    CHECK(choose_type(q4km, {}, "blk.6.ffn_down.weight", 2, 11008, 6, 32).chosen == ggml_type::q6_k);
    CHECK(choose_type(q4km, {}, "blk.6.ffn_down.weight", 2, 11008, 7, 32).chosen == ggml_type::q4_k);
    CHECK(choose_type(q4km, {}, "blk.6.ffn_norm.weight", 1, 4096, 6, 32).chosen == ggml_type::f32);
    const auto d = choose_type(q4km, {}, "blk.1.ffn_up.weight", 2, 4000, 1, 32);
    CHECK(d.requested == ggml_type::q4_k);
    CHECK(d.chosen == ggml_type::q5_0);
    CHECK(d.fallback.find("4000") != std::string::npos);
    const std::vector<type_override> ov = {{"token_embd.weight", ggml_type::q8_0, false}, {R"(.*ffn_.*)", ggml_type::q5_k, true}};
    CHECK(choose_type(q4km, ov, "token_embd.weight", 2, 4096, -1, 32).chosen == ggml_type::q8_0);
    CHECK(choose_type(q4km, ov, "blk.6.ffn_down.weight", 2, 11008, 6, 32).chosen == ggml_type::q5_k);
    const auto po = parse_override("re:blk\\.[0-9]+\\.ffn_down\\.weight=q6_k");
    CHECK(po.is_regex);
    CHECK(po.type == ggml_type::q6_k);
    CHECK(choose_type(q4km, {po}, "blk.9.ffn_down.weight", 2, 11008, 9, 32).chosen == ggml_type::q6_k);
    CHECK_FALSE(parse_override("output.weight=F16").is_regex);
    CHECK_THROWS_AS(parse_override("output.weight"), unsupported_error);
    CHECK_THROWS_AS(parse_override("output.weight=Q7_K"), unsupported_error);
    CHECK_FALSE(parse_file_type("Q9_K"));
    CHECK(parse_file_type("bf16")->base == ggml_type::bf16);
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
    const auto got = r.read_f32(*te);
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
