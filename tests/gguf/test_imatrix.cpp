// llama.cpp importance matrices in both forms llama-quantize reads (LC common/imatrix-loader.cpp
// common_imatrix_load / common_imatrix_load_legacy, tools/quantize/quantize.cpp load_imatrix):
// the values handed to the quantizers (sums / counts, 1 for an expert that saw no token;
// legacy: stored / ncall), the metadata, every refusal, and the HF -> entry names (convert/importance.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "qforge/convert/gguf/converter.hpp"
#include "qforge/convert/importance.hpp"
#include "qforge/io/gguf/imatrix.hpp"
#include "qforge/io/gguf/writer.hpp"
#include "qforge/io/safetensors/writer.hpp"

using namespace qforge;
using namespace qforge::gguf;

namespace {

std::string tmp_path(const std::string& name) { return std::string(QFORGE_BINARY_DIR) + "/imatrix_test_" + name; }

std::span<const std::byte> bytes_of(const std::vector<float>& v) { return std::as_bytes(std::span<const float>(v)); }

struct gguf_tensor {
    std::string name;
    std::vector<std::int64_t> ne;
    std::vector<float> data;
    ggml_type type = ggml_type::f32;
};

kv_list imatrix_kvs() {
    return {{"general.type", value::str("imatrix")},
            {"imatrix.datasets", value::array_of<std::string>(value_type::string, {"calibration.txt"})},
            {"imatrix.chunk_count", value::u32(45)},
            {"imatrix.chunk_size", value::u32(512)}};
}

std::string write_gguf(const std::string& name, const kv_list& kvs, const std::vector<gguf_tensor>& ts) {
    const std::string path = tmp_path(name + ".gguf");
    std::vector<tensor_decl> decls;
    for (const auto& t : ts) decls.push_back({t.name, t.ne, t.type});
    file_writer w(path, kvs, decls);
    for (const auto& t : ts) {
        if (t.type == ggml_type::f32) {
            w.write_tensor(bytes_of(t.data));
        } else {  // F16 of the same count: only its type matters to the refusal
            std::vector<std::byte> half(t.data.size() * 2);
            w.write_tensor(half);
        }
    }
    w.finish();
    return path;
}

/// A standard two-entry file: a dense weight and a three-expert weight, one expert unused.
std::vector<gguf_tensor> sample_tensors() {
    return {{"blk.0.attn_q.weight.in_sum2", {4, 1}, {4, 8, 12, 40}},
            {"blk.0.attn_q.weight.counts", {1, 1}, {4}},
            {"blk.0.attn_q.weight.in_sum", {4, 1}, {-1, -1, -1, -1}},  // ignored, as llama.cpp does
            {"blk.1.ffn_up_exps.weight.in_sum2", {2, 3}, {2, 6, 5, 7, 16, 24}},
            {"blk.1.ffn_up_exps.weight.counts", {1, 3}, {2, 0, 8}}};
}

/// Legacy .dat bytes: i32 count; per entry i32 len, name, i32 ncall, i32 nval, f32 values.
struct legacy_builder {
    std::string out;
    void i32(std::int32_t v) { out.append(reinterpret_cast<const char*>(&v), 4); }
    void f32(float v) { out.append(reinterpret_cast<const char*>(&v), 4); }
    void entry(const std::string& name, std::int32_t ncall, const std::vector<float>& values) {
        i32(static_cast<std::int32_t>(name.size()));
        out += name;
        i32(ncall);
        i32(static_cast<std::int32_t>(values.size()));
        for (float v : values) f32(v);
    }
    std::span<const std::byte> bytes() const { return std::as_bytes(std::span<const char>(out)); }
};

std::string refusal(std::span<const std::byte> b) {
    try {
        const auto m = importance_matrix::from_memory(b, "im.dat");
        for (const auto& n : m.names()) (void)m.load(n);
    } catch (const format_error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("imatrix GGUF: values are in_sum2 / counts per expert, 1 for an expert with no tokens") {
    const auto m = importance_matrix::open(write_gguf("ok", imatrix_kvs(), sample_tensors()));
    CHECK_FALSE(m.legacy());
    CHECK(m.datasets() == std::vector<std::string>{"calibration.txt"});
    CHECK(m.chunk_count() == 45);
    CHECK(m.chunk_size() == 512);
    CHECK(m.size() == 2);
    CHECK(m.names() == std::vector<std::string>{"blk.0.attn_q.weight", "blk.1.ffn_up_exps.weight"});

    const auto q = m.load("blk.0.attn_q.weight");
    REQUIRE(q);
    CHECK(q->n_per_row == 4);
    CHECK(q->n_mat == 1);
    CHECK(q->values == std::vector<float>{1, 2, 3, 10});
    CHECK(q->counts == std::vector<std::int64_t>{4});
    CHECK(q->fits(4, 1));
    CHECK_FALSE(q->fits(8, 1));

    const auto up = m.load("blk.1.ffn_up_exps.weight");
    REQUIRE(up);
    CHECK(up->n_per_row == 2);
    CHECK(up->n_mat == 3);
    CHECK(up->values == std::vector<float>{1, 3, 1, 1, 2, 3});  // expert 1 saw no token: 1.0
    REQUIRE(up->fits(2, 3));
    CHECK(std::vector<float>(up->matrix(2, 2).begin(), up->matrix(2, 2).end()) == std::vector<float>{2, 3});
    CHECK_FALSE(m.load("blk.9.attn_q.weight"));
    CHECK_FALSE(m.contains("blk.0.attn_q.weight.in_sum2"));
}

TEST_CASE("imatrix GGUF: counts are rounded to whole tokens before dividing (lround)") {
    auto ts = sample_tensors();
    ts[1].data = {3.6f};  // lround -> 4
    const auto m = importance_matrix::open(write_gguf("round", imatrix_kvs(), ts));
    CHECK(m.load("blk.0.attn_q.weight")->values == std::vector<float>{1, 2, 3, 10});
}

TEST_CASE("imatrix legacy .dat: values are stored / ncall, trailer gives chunks and dataset") {
    legacy_builder b;
    b.i32(2);
    b.entry("blk.0.attn_k.weight", 4, {4, 8, 2});
    b.entry("blk.0.ffn_down.weight", 0, {5, 6});  // ncall 0: the stored values as they are
    b.i32(17);
    b.i32(9);
    b.out += "wiki.text";
    const auto m = importance_matrix::from_memory(b.bytes(), "im.dat");
    CHECK(m.legacy());
    CHECK(m.chunk_count() == 17);
    CHECK(m.datasets() == std::vector<std::string>{"wiki.text"});
    CHECK(m.load("blk.0.attn_k.weight")->values == std::vector<float>{1, 2, 0.5f});
    CHECK(m.load("blk.0.ffn_down.weight")->values == std::vector<float>{5, 6});
    CHECK(m.load("blk.0.attn_k.weight")->fits(3, 1));

    // Through a file too, and without the optional trailer (or with half of it).
    legacy_builder c;
    c.i32(1);
    c.entry("output.weight", 2, {2, 4});
    c.i32(3);
    const std::string path = tmp_path("legacy.dat");
    {
        std::FILE* f = std::fopen(path.c_str(), "wb");
        REQUIRE(f);
        std::fwrite(c.out.data(), 1, c.out.size(), f);
        std::fclose(f);
    }
    const auto n = importance_matrix::open(path);
    CHECK(n.legacy());
    CHECK(n.chunk_count() == 3);
    CHECK(n.datasets().empty());
    CHECK(n.load("output.weight")->values == std::vector<float>{1, 2});
}

TEST_CASE("imatrix GGUF refusals name the file, the entry and the reason") {
    auto without = [](const char* key) {
        kv_list k;
        for (auto& kv : imatrix_kvs())
            if (kv.first != key) k.push_back(kv);
        return k;
    };
    for (const char* key : {"imatrix.datasets", "imatrix.chunk_count", "imatrix.chunk_size"})
        CHECK_THROWS_WITH_AS(importance_matrix::open(write_gguf("nometa", without(key), sample_tensors())),
                             doctest::Contains("missing imatrix metadata"), format_error);
    auto kvs = without("imatrix.chunk_count");
    kvs.emplace_back("imatrix.chunk_count", value::i32(45));
    CHECK_THROWS_WITH_AS(importance_matrix::open(write_gguf("i32", kvs, sample_tensors())),
                         doctest::Contains("imatrix.chunk_count must be UINT32"), format_error);

    auto ts = sample_tensors();
    ts.erase(ts.begin() + 1);  // attn_q has sums, no counts
    CHECK_THROWS_WITH_AS(importance_matrix::open(write_gguf("pair", imatrix_kvs(), ts)),
                         doctest::Contains("blk.0.attn_q.weight': has in_sum2 or counts but not both"), format_error);
    ts = sample_tensors();
    ts[4] = {"blk.1.ffn_up_exps.weight.counts", {1, 2}, {2, 0}};
    CHECK_THROWS_WITH_AS(importance_matrix::open(write_gguf("ncount", imatrix_kvs(), ts)),
                         doctest::Contains("counts has 2 entries for 3 matrices"), format_error);
    ts = sample_tensors();
    ts[0].type = ggml_type::f16;
    CHECK_THROWS_WITH_AS(importance_matrix::open(write_gguf("f16", imatrix_kvs(), ts)),
                         doctest::Contains("must be F32"), format_error);
    CHECK_THROWS_WITH_AS(importance_matrix::open(write_gguf("empty", imatrix_kvs(), {})),
                         doctest::Contains("no data"), format_error);

    // Values are checked when they are read.
    ts = sample_tensors();
    ts[0].data[2] = -1.0f;
    const auto neg = importance_matrix::open(write_gguf("neg", imatrix_kvs(), ts));
    CHECK_THROWS_WITH_AS((void)neg.load("blk.0.attn_q.weight"),
                         doctest::Contains("blk.0.attn_q.weight': in_sum2 value 2 is negative"), format_error);
    ts = sample_tensors();
    ts[4].data[1] = std::numeric_limits<float>::quiet_NaN();
    const auto nan = importance_matrix::open(write_gguf("nan", imatrix_kvs(), ts));
    CHECK_THROWS_WITH_AS((void)nan.load("blk.1.ffn_up_exps.weight"), doctest::Contains("count"), format_error);
}

TEST_CASE("imatrix legacy refusals: where llama.cpp would crash or read past the end") {
    legacy_builder none;
    none.i32(0);
    CHECK(refusal(none.bytes()).find("entry count 0") != std::string::npos);

    legacy_builder neg;
    neg.i32(1);
    neg.i32(-5);  // llama.cpp allocates len + 1 bytes
    neg.out += std::string(32, 'x');
    CHECK(refusal(neg.bytes()).find("name length -5") != std::string::npos);

    legacy_builder zero_vals;
    zero_vals.i32(1);
    zero_vals.entry("blk.0.attn_q.weight", 1, {});
    zero_vals.out += std::string(8, '\0');
    CHECK(refusal(zero_vals.bytes()).find("value count 0") != std::string::npos);

    legacy_builder cut;
    cut.entry("blk.0.attn_q.weight", 1, {1, 2, 3, 4});
    std::string full;
    {
        legacy_builder h;
        h.i32(1);
        full = h.out + cut.out;
    }
    const std::string truncated = full.substr(0, full.size() - 4);
    CHECK(refusal(std::as_bytes(std::span<const char>(truncated))).find("value count 4") != std::string::npos);

    legacy_builder dup;
    dup.i32(2);
    dup.entry("blk.0.attn_q.weight", 1, {1});
    dup.entry("blk.0.attn_q.weight", 1, {2});
    CHECK(refusal(dup.bytes()).find("entry appears twice") != std::string::npos);

    legacy_builder inf;
    inf.i32(1);
    inf.entry("blk.0.attn_q.weight", 1, {1, std::numeric_limits<float>::infinity()});
    CHECK(refusal(inf.bytes()).find("stored value 1 is negative, NaN or infinite") != std::string::npos);

    CHECK(refusal({}).find("truncated legacy imatrix") != std::string::npos);
    const std::string gguf_head = "GGUF";
    CHECK(refusal(std::as_bytes(std::span<const char>(gguf_head))).find("im.dat") != std::string::npos);
}

TEST_CASE("imatrix names: HF weights map to llama.cpp's entries, experts to matrices of the stacked entry") {
    auto at = [](const char* hf) { return imatrix_location_of(hf); };
    CHECK(at("model.layers.0.self_attn.q_proj.weight")->entry == "blk.0.attn_q.weight");
    CHECK(at("model.layers.12.mlp.down_proj.weight")->entry == "blk.12.ffn_down.weight");
    CHECK(at("lm_head.weight")->entry == "output.weight");
    CHECK(at("model.layers.0.self_attn.q_proj.weight")->expert == -1);
    const auto qwen = at("model.layers.3.mlp.experts.17.up_proj.weight");
    REQUIRE(qwen);
    CHECK(qwen->entry == "blk.3.ffn_up_exps.weight");
    CHECK(qwen->expert == 17);
    CHECK(at("model.layers.1.block_sparse_moe.experts.7.w1.weight")->entry == "blk.1.ffn_gate_exps.weight");
    CHECK(at("model.layers.1.block_sparse_moe.experts.7.w3.weight")->entry == "blk.1.ffn_up_exps.weight");
    CHECK(at("model.layers.1.block_sparse_moe.experts.7.w2.weight")->entry == "blk.1.ffn_down_exps.weight");
    CHECK(at("model.layers.1.block_sparse_moe.experts.7.w2.weight")->expert == 7);
    CHECK(at("model.layers.2.mlp.shared_expert.down_proj.weight")->entry == "blk.2.ffn_down_shexp.weight");
    CHECK(at("model.layers.2.mlp.shared_experts.gate_proj.weight")->entry == "blk.2.ffn_gate_shexp.weight");
    CHECK(at("model.layers.2.mlp.gate.weight")->entry == "blk.2.ffn_gate_inp.weight");
    CHECK(at("model.layers.2.block_sparse_moe.gate.weight")->entry == "blk.2.ffn_gate_inp.weight");
    CHECK_FALSE(at("model.layers.3.mlp.experts.x.up_proj.weight"));
    CHECK_FALSE(at("model.layers.3.mlp.experts.1.w4.weight"));
    CHECK_FALSE(at("model.vision_tower.proj.weight"));
}

TEST_CASE("imatrix lookup: a weight's columns, an expert's matrix, and llama-quantize's size check") {
    const auto m = importance_matrix::open(write_gguf("lookup", imatrix_kvs(), sample_tensors()));
    importance_lookup look(m);
    const auto q = look.find("model.layers.0.self_attn.q_proj.weight", 4);
    CHECK(std::vector<float>(q.begin(), q.end()) == std::vector<float>{1, 2, 3, 10});
    const auto e2 = look.find("model.layers.1.mlp.experts.2.up_proj.weight", 2);
    CHECK(std::vector<float>(e2.begin(), e2.end()) == std::vector<float>{2, 3});
    const auto e1 = look.find("model.layers.1.mlp.experts.1.up_proj.weight", 2);
    CHECK(std::vector<float>(e1.begin(), e1.end()) == std::vector<float>{1, 1});
    CHECK(look.find("model.layers.0.self_attn.k_proj.weight", 4).empty());  // no entry: without one
    CHECK_THROWS_WITH_AS((void)look.find("model.layers.0.self_attn.q_proj.weight", 8),
                         doctest::Contains("blk.0.attn_q.weight': imatrix has 4 values, but"), shape_error);
    CHECK_THROWS_WITH_AS((void)look.find("model.layers.1.mlp.experts.3.up_proj.weight", 2),
                         doctest::Contains("for expert 3"), shape_error);
}

namespace {

std::vector<char> slurp_file(const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    REQUIRE_MESSAGE(f, "missing file " << path);
    std::vector<char> out;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.insert(out.end(), buf, buf + n);
    std::fclose(f);
    return out;
}

std::vector<float> golden_floats(const std::string& name) {
    const auto b = slurp_file(QFORGE_SOURCE_DIR "/tests/golden/gguf/" + name);
    std::vector<float> v(b.size() / 4);
    std::memcpy(v.data(), b.data(), v.size() * 4);
    return v;
}

/// A one-layer F32 Llama (hidden 8, MLP 256) whose ffn_down rows are the golden Student-t case
/// student_t_n256 (8 rows x 256, tests/golden/gguf/cases.txt: input offset 0).
std::string golden_llama() {
    const std::string dir = tmp_path("llama");
    io::remove_tree_noexcept(dir);
    io::make_directory(dir);
    {
        std::FILE* f = std::fopen((dir + "/config.json").c_str(), "wb");
        const std::string cfg = R"({"model_type": "llama", "hidden_size": 8, "num_hidden_layers": 1,
            "intermediate_size": 256, "num_attention_heads": 2, "num_key_value_heads": 2,
            "tie_word_embeddings": true})";
        std::fwrite(cfg.data(), 1, cfg.size(), f);
        std::fclose(f);
    }
    const std::vector<float> input = golden_floats("inputs_f32.bin");
    std::vector<safetensors::tensor_spec> specs = {
        {"model.embed_tokens.weight", dtype::F32, {8, 8}},
        {"model.layers.0.input_layernorm.weight", dtype::F32, {8}},
        {"model.layers.0.post_attention_layernorm.weight", dtype::F32, {8}},
        {"model.layers.0.self_attn.q_proj.weight", dtype::F32, {8, 8}},
        {"model.layers.0.self_attn.k_proj.weight", dtype::F32, {8, 8}},
        {"model.layers.0.self_attn.v_proj.weight", dtype::F32, {8, 8}},
        {"model.layers.0.self_attn.o_proj.weight", dtype::F32, {8, 8}},
        {"model.layers.0.mlp.gate_proj.weight", dtype::F32, {256, 8}},
        {"model.layers.0.mlp.up_proj.weight", dtype::F32, {256, 8}},
        {"model.layers.0.mlp.down_proj.weight", dtype::F32, {8, 256}},
        {"model.norm.weight", dtype::F32, {8}}};
    safetensors::writer w(dir + "/model.safetensors", specs);
    for (const auto& s : specs) {
        std::vector<float> v(static_cast<std::size_t>(s.shape.size() == 1 ? s.shape[0] : s.shape[0] * s.shape[1]), 0.5f);
        if (s.name.ends_with("down_proj.weight")) v.assign(input.begin(), input.begin() + 8 * 256);
        w.write(s.name, bytes_of(v));
    }
    w.finish();
    return dir;
}

}  // namespace

TEST_CASE("HF -> GGUF with an imatrix file: llama-quantize's bytes for every type, the fallback reported") {
    const std::string src = golden_llama();
    const std::vector<float> im256 = golden_floats("imatrix_n256.f32");
    std::vector<float> sums(im256.size());
    for (std::size_t i = 0; i < im256.size(); ++i) sums[i] = 4.0f * im256[i];  // / count 4: exact
    const std::string with = write_gguf("down", imatrix_kvs(), {{"blk.0.ffn_down.weight.in_sum2", {256, 1}, sums},
                                                                {"blk.0.ffn_down.weight.counts", {1, 1}, {4}}});
    const std::string without = write_gguf("other", imatrix_kvs(), {{"blk.0.ffn_up.weight.in_sum2", {8, 1}, std::vector<float>(8, 1)},
                                                                    {"blk.0.ffn_up.weight.counts", {1, 1}, {1}}});
    struct type_case {
        const char* name;
        ggml_type type;
    };
    // student_t_n256 is the first case of every type: byte offset 0 of its .bin (cases.txt).
    const type_case types[] = {{"q4_0", ggml_type::q4_0}, {"q4_1", ggml_type::q4_1}, {"q5_0", ggml_type::q5_0},
                               {"q5_1", ggml_type::q5_1}, {"q2_K", ggml_type::q2_k}, {"q3_K", ggml_type::q3_k},
                               {"q4_K", ggml_type::q4_k}, {"q5_K", ggml_type::q5_k}, {"q6_K", ggml_type::q6_k},
                               {"iq4_nl", ggml_type::iq4_nl}};
    for (const auto& tc : types) {
        CAPTURE(tc.name);
        for (const bool have_entry : {true, false}) {
            gguf::convert_options o;
            o.allow_no_vocab = true;
            o.overrides = {parse_override(std::string("blk.0.ffn_down.weight=") + tc.name)};
            o.imatrix_file = have_entry ? with : without;
            const std::string dst = tmp_path(std::string(tc.name) + (have_entry ? "-im" : "-null") + ".gguf");
            io::remove_tree_noexcept(dst);
            const convert_report r = convert_hf_to_gguf(src, dst, o);
            const reader g(dst);
            const tensor_entry* t = g.find_tensor("blk.0.ffn_down.weight");
            REQUIRE(t);
            REQUIRE(t->type == tc.type);
            const auto golden = slurp_file(QFORGE_SOURCE_DIR "/tests/golden/gguf/" + std::string(tc.name) + "/quantize_" +
                                           (have_entry ? "imatrix" : "null") + ".bin");
            const auto bytes = g.read_bytes(*t);
            REQUIRE(bytes.size() <= golden.size());
            CHECK(std::memcmp(bytes.data(), golden.data(), bytes.size()) == 0);
            const auto missing = r.without_imatrix();
            const bool down_missing =
                std::find(missing.begin(), missing.end(), "blk.0.ffn_down.weight: not in the imatrix") != missing.end();
            CHECK(down_missing == !have_entry);
            // llama-quantize's record of the file it used.
            REQUIRE(g.find("quantize.imatrix.file"));
            CHECK(g.find("quantize.imatrix.file")->as<std::string>() == o.imatrix_file);
            CHECK(g.find("quantize.imatrix.dataset")->as<std::string>() == "calibration.txt");
            CHECK(g.find("quantize.imatrix.entries_count")->as<std::uint32_t>() == 1u);
            CHECK(g.find("quantize.imatrix.chunks_count")->as<std::uint32_t>() == 45u);
        }
    }
    // An entry of the wrong size is refused before the output exists.
    const std::string bad = write_gguf("bad", imatrix_kvs(), {{"blk.0.ffn_down.weight.in_sum2", {128, 1}, std::vector<float>(128, 1)},
                                                              {"blk.0.ffn_down.weight.counts", {1, 1}, {1}}});
    gguf::convert_options o;
    o.allow_no_vocab = true;
    o.overrides = {parse_override("blk.0.ffn_down.weight=q4_K")};
    o.imatrix_file = bad;
    const std::string dst = tmp_path("refused-out.gguf");
    io::remove_tree_noexcept(dst);
    CHECK_THROWS_WITH_AS(convert_hf_to_gguf(src, dst, o),
                         doctest::Contains("blk.0.ffn_down.weight': imatrix size 128 is different from tensor size 256"),
                         shape_error);
    CHECK_FALSE(io::path_exists(dst));
    CHECK_FALSE(io::path_exists(dst + ".tmp"));
}
