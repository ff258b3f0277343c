// Writes the seed corpus of the fuzz targets with qforge's own writers: valid files and
// near-valid ones (one rule broken each), so libFuzzer starts from inputs that reach deep
// into the parsers. Run through `scripts/fuzz.sh --seeds`; the output is committed under
// tests/fuzz/corpus/<target>/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "qforge/io/gguf/writer.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace fs = std::filesystem;
namespace st = qforge::safetensors;
using qforge::dtype;

namespace {

fs::path root;

void put(const std::string& target, const std::string& name, const std::string& bytes) {
    fs::create_directories(root / target);
    std::ofstream(root / target / name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// A safetensors file made by qforge's writer, with deterministic tensor bytes.
std::string safetensors_file(const std::vector<st::tensor_spec>& specs, const st::metadata_t& meta = st::default_metadata()) {
    const fs::path tmp = root / "tmp.safetensors";
    {
        st::writer w(tmp.string(), specs, meta, {.sync = false});
        for (const auto& s : w.order()) {
            std::vector<std::byte> bytes(static_cast<std::size_t>(st::tensor_bytes(s)));
            for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>(i * 37 + 11);
            w.write(s.name, bytes);
        }
        w.finish();
    }
    std::string bytes = slurp(tmp);
    fs::remove(tmp);
    return bytes;
}

void safetensors_seeds() {
    const std::string one = safetensors_file({{"w", dtype::F16, {2, 3}}});
    put("safetensors", "one_f16.safetensors", one);
    const std::string mixed = safetensors_file({{"model.layers.0.self_attn.q_proj.weight", dtype::BF16, {8, 16}},
                                                {"model.layers.0.input_layernorm.weight", dtype::F32, {16}},
                                                {"ids", dtype::I64, {3}},
                                                {"mask", dtype::BOOL, {2, 2}},
                                                {"scalar", dtype::F64, {}},
                                                {"empty", dtype::I32, {0, 4}},
                                                {"q", dtype::I8, {5}},
                                                {"u", dtype::U8, {1, 1, 1, 2}}});
    put("safetensors", "mixed.safetensors", mixed);
    put("safetensors", "no_metadata.safetensors", safetensors_file({{"a", dtype::F32, {2}}}, {}));
    put("safetensors", "sub_byte_f4.safetensors", safetensors_file({{"f4", dtype::F4, {4}}}));
    put("safetensors", "escaped_name.safetensors", safetensors_file({{"a\"b\\c\n\xc3\xa9", dtype::U16, {2}}}));
    // Near-valid: each breaks one rule of formats.md 1.3.
    put("safetensors", "truncated.safetensors", one.substr(0, one.size() - 1));
    put("safetensors", "trailing.safetensors", one + "x");
    std::string len_plus = one;
    len_plus[0] = static_cast<char>(len_plus[0] + 8);
    put("safetensors", "header_len_past_end.safetensors", len_plus);
    std::string huge_len = one;
    huge_len[7] = '\x7f';
    put("safetensors", "header_len_huge.safetensors", huge_len);
    put("safetensors", "short.safetensors", one.substr(0, 5));
    auto raw = [](std::string header, const std::string& data) {
        while (header.size() % 8) header += ' ';
        std::string len(8, '\0');
        for (std::size_t k = 0; k < 8; ++k) len[k] = static_cast<char>((header.size() >> (8 * k)) & 0xFF);
        return len + header + data;
    };
    put("safetensors", "gap.safetensors", raw(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[3,5]}})", "abcde"));
    put("safetensors", "overlap.safetensors", raw(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", "abc"));
    put("safetensors", "size_mismatch.safetensors", raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"));
    put("safetensors", "unknown_dtype.safetensors", raw(R"({"a":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}})", std::string(16, 'x')));
    put("safetensors", "overflow_shape.safetensors", raw(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", std::string(8, 'x')));
    put("safetensors", "terabyte_claim.safetensors", raw(R"({"a":{"dtype":"F32","shape":[262144,1048576],"data_offsets":[0,1099511627776]}})", "abcd"));
    put("safetensors", "negative_dim.safetensors", raw(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", ""));
    put("safetensors", "metadata_not_string.safetensors", raw(R"({"__metadata__":{"format":1},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "z"));
    put("safetensors", "leading_space.safetensors", raw(R"(  {"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", "z"));
    put("safetensors", "not_utf8.safetensors", raw("{\"\xff\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", "z"));
}

void json_seeds() {
    qforge::json cfg = qforge::json::parse(slurp(fs::path(QFORGE_SOURCE_DIR) / "tests/golden/fixtures/stories260k/config.json"));
    cfg.set("quantization_config", qforge::json::object({{"bits", 4}, {"group_size", 128}, {"desc_act", false},
                                                         {"sym", true}, {"quant_method", "gptq"},
                                                         {"damp_percent", 0.01}}));
    put("json", "config_gptq_indent2.json", cfg.dump({.indent = 2}));
    put("json", "config_gptq_compact.json", cfg.dump());
    put("json", "config_ascii_sorted.json", cfg.dump({.indent = 2, .ensure_ascii = true, .sort_keys = true}));
    put("config", "config_gptq.json", cfg.dump({.indent = 2}));
}

void index_seeds() {
    // Tensor and shard names match the folder fuzz_index.cpp builds around the index.
    const std::string s1 = "model-00001-of-00002.safetensors", s2 = "model-00002-of-00002.safetensors";
    qforge::json weight_map = qforge::json::object();
    weight_map.set("a", s1);
    weight_map.set("b", s1);
    weight_map.set("c", s2);
    weight_map.set("lm_head.weight", s2);
    qforge::json index = qforge::json::object({{"metadata", qforge::json::object({{"total_size", 12}})},
                                               {"weight_map", weight_map}});
    put("index", "two_shards.json", index.dump({.indent = 2, .sort_keys = true}) + "\n");
    put("index", "two_shards_compact.json", index.dump());
    auto with = [&](const std::string& tensor, const std::string& shard) {
        qforge::json bad = index;
        bad["weight_map"].set(tensor, shard);
        return bad.dump({.indent = 2});
    };
    put("index", "dotdot.json", with("a", "../outside.safetensors"));
    put("index", "absolute.json", with("a", "/etc/passwd"));
    put("index", "nul.json", with("a", s1 + std::string("\0x", 2)));
    put("index", "symlink_out.json", with("a", "link.safetensors"));
    put("index", "secret.json", with("secret", s1));
    put("index", "wrong_shard.json", with("c", s1));
    put("index", "missing_shard.json", with("b", "model-00003-of-00003.safetensors"));
    put("index", "no_weight_map.json", R"({"metadata":{"total_size":0}})");
    put("index", "weight_map_not_strings.json", R"({"metadata":{"total_size":1},"weight_map":{"a":1}})");
}

void gguf_seeds() {
    namespace gg = qforge::gguf;
    using gg::ggml_type;
    const fs::path tmp = root / "tmp.gguf";
    auto make = [&](const gg::kv_list& kvs, const std::vector<gg::tensor_decl>& tensors) {
        {
            gg::file_writer w(tmp.string(), kvs, tensors);
            for (const auto& t : tensors) {
                std::vector<std::byte> bytes(static_cast<std::size_t>(gg::tensor_nbytes(t)));
                // Small values in every byte: valid-looking f16 scales, no NaN/inf patterns.
                for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::byte>((i * 7 + 3) & 0x3F);
                w.write_tensor(bytes);
            }
            w.finish();
        }
        std::string b = slurp(tmp);
        fs::remove(tmp);
        return b;
    };
    gg::kv_list kvs = {
        {"general.architecture", gg::value::str("llama")},
        {"general.name", gg::value::str("fuzz")},
        {"llama.block_count", gg::value::u32(1)},
        {"llama.rope.freq_base", gg::value::f32(10000.0f)},
        {"general.file_type", gg::value::u32(7)},
        {"some.bool", gg::value::boolean(true)},
        {"some.i64", gg::value::i64(-5)},
        {"some.f64", gg::value::f64(0.5)},
        {"tokenizer.ggml.tokens", gg::value::array(gg::value_type::string, {std::string("<s>"), std::string("a")})},
        {"tokenizer.ggml.scores", gg::value::array(gg::value_type::f32, {0.0f, -1.0f})},
        {"u8s", gg::value::array(gg::value_type::u8, {std::uint8_t{1}, std::uint8_t{2}})},
    };
    const std::vector<gg::tensor_decl> tensors = {
        {"token_embd.weight", {32, 2}, ggml_type::q8_0},
        {"blk.0.attn_q.weight", {32, 2}, ggml_type::q4_0},
        {"blk.0.ffn_down.weight", {256, 1}, ggml_type::q4_k},
        {"output_norm.weight", {3}, ggml_type::f32},
        {"f16", {2, 1, 1, 2}, ggml_type::f16},
        {"bf16", {2}, ggml_type::bf16},
    };
    const std::string good = make(kvs, tensors);
    put("gguf", "mixed.gguf", good);
    gg::kv_list aligned = kvs;
    aligned.push_back({"general.alignment", gg::value::u32(64)});
    put("gguf", "align64.gguf", make(aligned, {{"a", {32}, ggml_type::q5_0},
                                               {"b", {256}, ggml_type::q6_k}}));
    put("gguf", "no_tensors.gguf", make({{"general.architecture", gg::value::str("llama")}}, {}));
    // Near-valid.
    put("gguf", "truncated.gguf", good.substr(0, good.size() - 1));
    put("gguf", "header_only.gguf", good.substr(0, 24));
    std::string v1 = good;
    v1[4] = 1;
    put("gguf", "version1.gguf", v1);
    std::string magic = good;
    magic[0] = 'X';
    put("gguf", "bad_magic.gguf", magic);
    std::string many = good;
    many[8] = '\x7f';  // n_tensors huge
    put("gguf", "many_tensors.gguf", many);
}

void imatrix_seeds() {
    namespace gg = qforge::gguf;
    using gg::ggml_type;
    const fs::path tmp = root / "tmp.imatrix";
    auto make = [&](const gg::kv_list& kvs, const std::vector<gg::tensor_decl>& tensors) {
        {
            gg::file_writer w(tmp.string(), kvs, tensors);
            for (const auto& t : tensors) {
                std::vector<float> v(static_cast<std::size_t>(gg::tensor_nbytes(t) / 4));
                for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 5);
                w.write_tensor(std::as_bytes(std::span<const float>(v)));
            }
            w.finish();
        }
        std::string b = slurp(tmp);
        fs::remove(tmp);
        return b;
    };
    const gg::kv_list kvs = {
        {"general.type", gg::value::str("imatrix")},
        {"imatrix.datasets", gg::value::array(gg::value_type::string, {std::string("calibration.txt")})},
        {"imatrix.chunk_count", gg::value::u32(8)},
        {"imatrix.chunk_size", gg::value::u32(512)},
    };
    put("imatrix", "dense_and_experts.gguf",
        make(kvs, {{"blk.0.attn_q.weight.in_sum2", {8, 1}, ggml_type::f32},
                   {"blk.0.attn_q.weight.counts", {1, 1}, ggml_type::f32},
                   {"blk.0.ffn_up_exps.weight.in_sum2", {4, 3}, ggml_type::f32},
                   {"blk.0.ffn_up_exps.weight.counts", {1, 3}, ggml_type::f32},
                   {"blk.0.ffn_up_exps.weight.in_sum", {4, 3}, ggml_type::f32}}));
    put("imatrix", "no_metadata.gguf", make({{"general.type", gg::value::str("imatrix")}},
                                            {{"output.weight.in_sum2", {4, 1}, ggml_type::f32},
                                             {"output.weight.counts", {1, 1}, ggml_type::f32}}));
    // Legacy .dat: i32 count; per entry i32 len, name, i32 ncall, i32 nval, f32[nval]; trailer.
    std::string dat;
    auto i32 = [&](std::int32_t v) { dat.append(reinterpret_cast<const char*>(&v), 4); };
    auto entry = [&](const std::string& name, std::int32_t ncall, std::int32_t nval) {
        i32(static_cast<std::int32_t>(name.size()));
        dat += name;
        i32(ncall);
        i32(nval);
        for (std::int32_t i = 0; i < nval; ++i) {
            const float v = static_cast<float>(i + 1) * static_cast<float>(ncall);
            dat.append(reinterpret_cast<const char*>(&v), 4);
        }
    };
    i32(2);
    entry("blk.0.attn_k.weight", 4, 8);
    entry("blk.0.ffn_down.weight", 0, 4);
    i32(10);
    i32(9);
    dat += "wiki.text";
    put("imatrix", "legacy.dat", dat);
}

/// fuzz_fp8_source: config.json, one NUL, a safetensors file: native 128x128 blocks with a
/// ragged edge, compressed-tensors per channel, and near-misses (a floor-sized grid, a NaN code).
void fp8_source_seeds() {
    using qforge::json;
    const json native = json::object({{"torch_dtype", "bfloat16"},
                                      {"quantization_config", json::object({{"quant_method", "fp8"},
                                                                            {"fmt", "e4m3"},
                                                                            {"activation_scheme", "dynamic"},
                                                                            {"weight_block_size", json::array({128, 128})},
                                                                            {"modules_to_not_convert", json::array({"lm_head"})}})}});
    json w = json::object({{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", "channel"}});
    const json ct = json::object({{"quantization_config",
                                   json::object({{"quant_method", "compressed-tensors"},
                                                 {"format", "float-quantized"},
                                                 {"config_groups", json::object({{"group_0", json::object({{"weights", w}})}})},
                                                 {"ignore", json::array({"lm_head"})}})}});
    auto seed = [](const json& cfg, const std::vector<st::tensor_spec>& specs) {
        return cfg.dump() + std::string(1, '\0') + safetensors_file(specs);
    };
    const std::string l = "model.layers.0.mlp.up_proj.weight";
    put("fp8_source", "native_ragged", seed(native, {{l, dtype::F8_E4M3, {130, 129}}, {l + "_scale_inv", dtype::F32, {2, 2}},
                                                     {"lm_head.weight", dtype::BF16, {4, 129}}}));
    put("fp8_source", "native_floor_grid", seed(native, {{l, dtype::F8_E4M3, {130, 129}}, {l + "_scale_inv", dtype::F32, {1, 1}}}));
    put("fp8_source", "ct_channel", seed(ct, {{l, dtype::F8_E4M3, {6, 40}}, {l + "_scale", dtype::BF16, {6, 1}},
                                              {"model.layers.0.mlp.up_proj.input_scale", dtype::F32, {1}}}));
    put("fp8_source", "ct_orphan", seed(ct, {{l + "_scale", dtype::BF16, {6, 1}}}));
    // packed compressed-tensors MXFP4 (convert/mxfp4_source.hpp): a good layer, and a group-16 scale
    json mw = json::object({{"num_bits", 4}, {"type", "float"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 32}});
    const json mx = json::object({{"quantization_config",
                                   json::object({{"quant_method", "compressed-tensors"},
                                                 {"format", "mxfp4-pack-quantized"},
                                                 {"config_groups", json::object({{"group_0", json::object({{"format", "mxfp4-pack-quantized"}, {"weights", mw}})}})},
                                                 {"ignore", json::array({"lm_head"})}})}});
    const std::string m = "model.layers.0.mlp.up_proj";
    put("fp8_source", "ct_mxfp4", seed(mx, {{m + ".weight_packed", dtype::U8, {3, 32}}, {m + ".weight_scale", dtype::U8, {3, 2}}}));
    put("fp8_source", "ct_mxfp4_group16", seed(mx, {{m + ".weight_packed", dtype::U8, {3, 32}}, {m + ".weight_scale", dtype::U8, {3, 4}}}));
    // gpt-oss native MXFP4 (convert/gpt_oss_source.hpp): a good pair, and scales of the wrong grid
    const json oss = json::object({{"model_type", "gpt_oss"},
                                   {"quantization_config", json::object({{"quant_method", "mxfp4"},
                                                                         {"modules_to_not_convert", json::array({"lm_head"})}})}});
    const std::string x = "model.layers.0.mlp.experts.gate_up_proj";
    put("fp8_source", "gpt_oss_pair", seed(oss, {{x + "_blocks", dtype::U8, {2, 4, 2, 16}}, {x + "_scales", dtype::U8, {2, 4, 2}},
                                                 {x + "_bias", dtype::BF16, {2, 4}}}));
    put("fp8_source", "gpt_oss_grid", seed(oss, {{x + "_blocks", dtype::U8, {2, 4, 2, 16}}, {x + "_scales", dtype::U8, {2, 2, 4}}}));
}

/// fuzz_cluster_plan: a plan.json as convert/cluster/plan_file.hpp writes it, then one NUL and
/// a unit record of its unit 0; near-misses: a gap between units, a shard name leaving the
/// staging folder, a negative count, a record of another plan.
void cluster_plan_seeds() {
    using qforge::json;
    auto plan = [](const json& units, const json& shards, std::int64_t tensors) {
        return json::object({{"qforge_cluster_plan", 1}, {"source", "src"}, {"destination", "out"}, {"format", "gptq"},
                             {"fingerprint", "0123456789abcdef"}, {"tensors", tensors}, {"shards", shards}, {"units", units},
                             {"extra", json::object({{"args", json::array({"src", "out"})}, {"cwd", "/tmp"}})}})
            .dump({.indent = 1});
    };
    auto unit = [](std::int64_t b, std::int64_t e) { return json::object({{"items", json::array({b, e})}, {"cost", 100}}); };
    const json two = json::array({unit(0, 1), unit(1, 2)});
    const json shard = json::array({json::object({{"file", "model.safetensors"}, {"bytes", 4096}})});
    auto tensor = [](const char* n, std::int64_t b) { return json::object({{"name", n}, {"bytes", b}, {"checksum", "00000000000000ff"}}); };
    const std::string record = json::object({{"unit", 0}, {"fingerprint", "0123456789abcdef"}, {"items", json::array({0, 1})},
                                             {"tensors", json::array({tensor("model.embed_tokens.weight", 16), tensor("lm_head.weight", 32)})},
                                             {"snr_bits", json::array({"4040000000000000"})}})
                                   .dump();
    const std::string sep(1, '\0');
    put("cluster_plan", "plan_record", plan(two, shard, 2) + sep + record);
    put("cluster_plan", "plan_only", plan(two, shard, 2));
    put("cluster_plan", "gap", plan(json::array({unit(0, 1), unit(2, 3)}), shard, 2));
    put("cluster_plan", "escape", plan(two, json::array({json::object({{"file", "../model.safetensors"}, {"bytes", 1}})}), 2));
    put("cluster_plan", "negative", plan(two, shard, -1));
    put("cluster_plan", "foreign_record", plan(two, shard, 2) + sep + std::string(record).replace(record.find("0123"), 4, "ffff"));
}

/// Activation amax files (convert/activation_amax.hpp): JSON and safetensors, valid and one
/// rule broken each.
void activation_amax_seeds() {
    using qforge::json;
    const json ok = json::object({{"model.layers.0.self_attn.q_proj", 7.25}, {"model.layers.0.mlp.down_proj", 3}});
    put("activation_amax", "ok.json", ok.dump());
    put("activation_amax", "negative.json", json::object({{"model.layers.0.mlp.up_proj", -1.5}}).dump());
    put("activation_amax", "string.json", json::object({{"m", "7"}}).dump());
    put("activation_amax", "huge.json", "{\"m\": 1e300}");
    put("activation_amax", "empty.json", "{}");
    put("activation_amax", "ok.safetensors", safetensors_file({{"model.layers.0.self_attn.q_proj.input_amax", dtype::F32, {1}},
                                                               {"model.layers.0.mlp.down_proj.input_amax", dtype::BF16, {}}}));
    put("activation_amax", "f16.safetensors", safetensors_file({{"m.input_amax", dtype::F16, {}}}));
    put("activation_amax", "wrong_name.safetensors", safetensors_file({{"m.weight", dtype::F32, {1}}}));
    put("activation_amax", "wrong_shape.safetensors", safetensors_file({{"m.input_amax", dtype::F32, {2}}}));
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: make_seeds <corpus root>\n");
        return 2;
    }
    root = argv[1];
    safetensors_seeds();
    json_seeds();
    index_seeds();
    gguf_seeds();
    imatrix_seeds();
    fp8_source_seeds();
    cluster_plan_seeds();
    activation_amax_seeds();
    return 0;
}
