// Whole checkpoints on disk: detect the input format from config.json, repack, read back,
// compare decoded layers across checkpoints; refusals leave nothing behind.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "qforge/convert/repack_checkpoint.hpp"
#include "qforge/io/safetensors/writer.hpp"
#include "repack/repack_test_support.hpp"

using namespace qforge;
using namespace repack_test;
namespace fs = std::filesystem;

namespace {

struct scratch {
    fs::path root;
    explicit scratch(const std::string& tag) {
        root = fs::temp_directory_path() / ("qforge_repack_" + tag + "_" + std::to_string(::getpid()));
        fs::remove_all(root);
        fs::create_directories(root);
    }
    ~scratch() {
        std::error_code ec;
        fs::remove_all(root, ec);
    }
    std::string operator/(const std::string& s) const { return (root / s).string(); }
};

void write_checkpoint(const std::string& dir, const json& config, const std::vector<owned_tensor>& tensors) {
    fs::create_directories(dir);
    std::vector<safetensors::tensor_spec> specs;
    for (const auto& t : tensors) specs.push_back({t.name, t.type, t.shape});
    safetensors::writer w(dir + "/model.safetensors", specs);
    for (const auto& t : tensors) w.write(t.view());
    w.finish();
    std::ofstream(dir + "/config.json") << config.dump({.indent = 2}) << "\n";
    std::ofstream(dir + "/tokenizer.json") << "{\"version\": \"1.0\"}\n";
}

std::string file_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

const char* modules[] = {"model.layers.0.self_attn.q_proj", "model.layers.0.mlp.up_proj", "model.layers.1.mlp.down_proj"};

/// A small model: three quantized linears in `fmt` plus float embeddings, norm and lm_head.
void make_model(const std::string& dir, output_format fmt, bool sym, std::uint32_t seed, bool zero_zero = false,
                bool act_order = false, int act_order_modules = 3) {
    std::vector<owned_tensor> ts;
    std::vector<linear_entry> linears;
    const repack_target t{fmt, std::nullopt, dtype::F16, ct_packing::padded_v0_12};
    for (int i = 0; i < 3; ++i) {
        quantized_tensor q = random_qt(64, 128, 4, 32, sym, dtype::F16, seed + static_cast<unsigned>(i), zero_zero);
        q.name = modules[i];
        if (act_order && i < act_order_modules) {
            q.g_idx.resize(128);
            for (int k = 0; k < 128; ++k) q.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>((k * 37) % 128 / 32);
        }
        for (auto& o : repack_pack(repack_prepare(q, t), q.name, t)) ts.push_back(std::move(o));
        linears.push_back(linear_entry_of(q, q.name));
    }
    ts.push_back(make("model.embed_tokens.weight", dtype::F16, {16, 128}, std::vector<std::uint16_t>(16 * 128, 0x3c00)));
    ts.push_back(make("model.norm.weight", dtype::F16, {128}, std::vector<std::uint16_t>(128, 0x3c00)));
    ts.push_back(make("lm_head.weight", dtype::F16, {16, 128}, std::vector<std::uint16_t>(16 * 128, 0x3800)));
    linears.push_back({"lm_head", false, 0, 0, true, 16, 128, {}});
    json cfg = json::object({{"architectures", json::array({"LlamaForCausalLM"})}, {"hidden_size", 128}, {"torch_dtype", "float16"}});
    json side;
    cfg.set("quantization_config", repack_detail::repack_quantization_config(t, linears, act_order, &side));
    write_checkpoint(dir, cfg, ts);
}

bool all_identical(const std::vector<layer_comparison>& c, std::size_t expected) {
    if (c.size() != expected) return false;
    for (const auto& l : c)
        if (!l.identical) return false;
    return true;
}

}  // namespace

TEST_CASE("checkpoint GPTQ -> compressed-tensors -> GPTQ: same decoded layers, then identical files") {
    scratch s("gptq_ct");
    for (bool sym : {true, false}) {
        CAPTURE(sym);
        const std::string tag = sym ? "sym" : "asym";
        make_model(s / ("gptq_" + tag), output_format::gptq, sym, 10);
        repack_options o;
        o.format = output_format::compressed_tensors;
        const repack_report r = repack_checkpoint(s / ("gptq_" + tag), s / ("ct_" + tag), o);
        CHECK(r.exact());
        REQUIRE(r.layers.size() == 3);
        CHECK(r.layers[0].how == "words");
        CHECK(r.copied_tensors.size() == 3);
        const json cfg = io::read_config(s / ("ct_" + tag));
        CHECK(cfg.at("quantization_config").at("quant_method").as_string() == "compressed-tensors");
        CHECK(cfg.at("quantization_config").at("ignore").at(0).as_string() == "lm_head");
        CHECK(fs::exists(s / ("ct_" + tag + "/tokenizer.json")));
        CHECK(all_identical(compare_quantized_checkpoints(s / ("gptq_" + tag), s / ("ct_" + tag)), 3));

        o.format = output_format::gptq;
        repack_checkpoint(s / ("ct_" + tag), s / ("back_" + tag), o);
        CHECK(file_text(s / ("back_" + tag + "/model.safetensors")) == file_text(s / ("gptq_" + tag + "/model.safetensors")));
        const json back = io::read_config(s / ("back_" + tag));
        CHECK(back.at("quantization_config").at("checkpoint_format").as_string() == "gptq");
        CHECK(back.at("quantization_config").at("sym").as_bool() == sym);
        CHECK(fs::exists(s / ("back_" + tag + "/quantize_config.json")));
    }
}

TEST_CASE("checkpoint AWQ -> GPTQ v2 -> AWQ: identical files; AWQ -> GPTQ v1 refused before anything is written") {
    scratch s("awq");
    make_model(s / "awq", output_format::awq, false, 20, /*zero_zero=*/true);
    repack_options o;
    o.format = output_format::gptq_v2;
    const auto r = repack_checkpoint(s / "awq", s / "v2", o);
    CHECK(r.layers[0].how == "codes");
    CHECK(all_identical(compare_quantized_checkpoints(s / "awq", s / "v2"), 3));
    o.format = output_format::awq;
    repack_checkpoint(s / "v2", s / "awq_back", o);
    CHECK(file_text(s / "awq_back/model.safetensors") == file_text(s / "awq/model.safetensors"));

    const auto before = std::distance(fs::directory_iterator(s.root), fs::directory_iterator());
    o.format = output_format::gptq;
    CHECK_THROWS_WITH_AS(repack_checkpoint(s / "awq", s / "v1", o), doctest::Contains("GPTQ v1 cannot store zero point 0 found in"),
                         unsupported_error);
    CHECK_FALSE(fs::exists(s / "v1"));
    CHECK(std::distance(fs::directory_iterator(s.root), fs::directory_iterator()) == before);  // no temp folder either

    SUBCASE("with --requantize the refused layers are requantized and their SNR reported") {
        o.requantize = true;
        const auto rq = repack_checkpoint(s / "awq", s / "v1rq", o);
        CHECK_FALSE(rq.exact());
        bool some = false;
        for (const auto& l : rq.layers)
            if (l.how == "requantized") {
                some = true;
                CHECK(l.snr_db > 10.0);
                CHECK(l.reason.find("zero point 0") != std::string::npos);
            }
        CHECK(some);
        const auto cmp = compare_quantized_checkpoints(s / "awq", s / "v1rq");
        CHECK_FALSE(all_identical(cmp, 3));
    }
}

TEST_CASE("checkpoint: act-order GPTQ -> compressed-tensors keeps g_idx (actorder group); -> AWQ refused") {
    scratch s("actorder");
    make_model(s / "gptq", output_format::gptq, true, 30, false, /*act_order=*/true);
    repack_options o;
    o.format = output_format::compressed_tensors;
    repack_checkpoint(s / "gptq", s / "ct", o);
    const json cfg = io::read_config(s / "ct");
    CHECK(cfg.at("quantization_config").at("config_groups").at("group_0").at("weights").at("actorder").as_string() == "group");
    safetensors::sharded_reader r(s / "ct");
    CHECK(r.contains(std::string(modules[0]) + ".weight_g_idx"));
    CHECK(all_identical(compare_quantized_checkpoints(s / "gptq", s / "ct"), 3));
    o.format = output_format::gptq;
    repack_checkpoint(s / "ct", s / "back", o);
    CHECK(file_text(s / "back/model.safetensors") == file_text(s / "gptq/model.safetensors"));
    CHECK(io::read_config(s / "back").at("quantization_config").at("desc_act").as_bool());
    o.format = output_format::awq;
    CHECK_THROWS_WITH_AS(repack_checkpoint(s / "gptq", s / "awq", o), doctest::Contains("AWQ has no g_idx"), unsupported_error);
    CHECK_FALSE(fs::exists(s / "awq"));
}

TEST_CASE("checkpoint: one act-order module gives every compressed-tensors module a g_idx, the identity where it had none") {
    // compressed-tensors states one actorder for the whole config group, so the modules GPTQ
    // stored without g_idx get the identity order (k / group size) instead of none.
    scratch s("actorder_mixed");
    make_model(s / "gptq", output_format::gptq, true, 31, false, /*act_order=*/true, /*act_order_modules=*/1);
    repack_options o;
    o.format = output_format::compressed_tensors;
    repack_checkpoint(s / "gptq", s / "ct", o);
    safetensors::sharded_reader r(s / "ct");
    for (int i = 1; i < 3; ++i) {
        const std::string name = std::string(modules[i]) + ".weight_g_idx";
        REQUIRE(r.contains(name));
        const owned_tensor g = r.read_tensor(name);
        REQUIRE(g.type == dtype::I32);
        REQUIRE(g.bytes.size() == 128 * sizeof(std::int32_t));
        std::vector<std::int32_t> v(128);
        std::memcpy(v.data(), g.bytes.data(), g.bytes.size());
        for (int k = 0; k < 128; ++k) CHECK(v[static_cast<std::size_t>(k)] == k / 32);
    }
    CHECK(all_identical(compare_quantized_checkpoints(s / "gptq", s / "ct"), 3));
}

TEST_CASE("checkpoint: a fake-quantized QAT model exports to compressed-tensors and decodes to its weights exactly") {
    scratch s("qat");
    std::vector<owned_tensor> ts;
    std::vector<std::vector<std::uint16_t>> weights;
    for (int i = 0; i < 3; ++i) {
        quantized_tensor q = random_qt(64, 128, 4, 32, false, dtype::BF16, 40u + static_cast<unsigned>(i));
        std::vector<std::uint16_t> w(q.codes.size()), z(q.zeros.size());
        for (std::int64_t n = 0; n < q.rows; ++n)
            for (std::int64_t k = 0; k < q.cols; ++k) w[static_cast<std::size_t>(n * q.cols + k)] = float_to_bf16(q.dequantized(n, k));
        for (std::size_t j = 0; j < z.size(); ++j) z[j] = float_to_bf16(static_cast<float>(q.zeros[j]));
        const std::string m = modules[i];
        ts.push_back(make(m + ".weight", dtype::BF16, {64, 128}, w));
        ts.push_back(make(m + ".weight_scale", dtype::BF16, {64, 4}, q.scales));
        ts.push_back(make(m + ".weight_zero_point", dtype::BF16, {64, 4}, z));
        weights.push_back(w);
    }
    ts.push_back(make("model.norm.weight", dtype::BF16, {128}, std::vector<std::uint16_t>(128, 0x3f80)));
    write_checkpoint(s / "qat", json::object({{"torch_dtype", "bfloat16"}}), ts);
    repack_options o;
    o.format = output_format::compressed_tensors;
    CHECK_THROWS_WITH_AS(repack_checkpoint(s / "qat", s / "ct", o), doctest::Contains("pass the bit width"), unsupported_error);
    o.fake_bits = 4;
    repack_checkpoint(s / "qat", s / "ct", o);
    const json cfg = io::read_config(s / "ct");
    CHECK(cfg.at("quantization_config").at("config_groups").at("group_0").at("weights").at("symmetric").as_bool() == false);
    // Decode the written compressed-tensors layers the way a loader does, in bf16.
    repack_detail::open_checkpoint ct(s / "ct", 0);
    for (int i = 0; i < 3; ++i) {
        const quantized_tensor q = read_quantized(ct.source(), modules[i], ct.scheme.for_module(modules[i]));
        const auto d = dequantize(q);
        bool exact = true;
        for (std::size_t j = 0; j < d.size(); ++j) exact = exact && float_to_bf16(d[j]) == weights[static_cast<std::size_t>(i)][j];
        CHECK(exact);
    }
    CHECK(all_identical(compare_quantized_checkpoints(s / "qat", s / "ct", 4), 3));

    SUBCASE("an off-grid weight refuses the whole export, nothing written") {
        auto& w = ts[3];  // modules[1].weight
        std::uint16_t v;
        std::memcpy(&v, w.bytes.data() + 2 * 77, 2);
        v = static_cast<std::uint16_t>(v + 1);  // one bf16 ulp off the grid
        std::memcpy(w.bytes.data() + 2 * 77, &v, 2);
        fs::remove_all(s / "qat2");
        write_checkpoint(s / "qat2", json::object({{"torch_dtype", "bfloat16"}}), ts);
        CHECK_THROWS_WITH_AS(repack_checkpoint(s / "qat2", s / "ct2", o), doctest::Contains("not on its 4-bit grid"), unsupported_error);
        CHECK_FALSE(fs::exists(s / "ct2"));
    }
}

TEST_CASE("scheme detection from quantization_config") {
    const std::vector<std::string> names = {"a.qweight", "a.qzeros", "a.scales", "b.qweight", "b.qzeros", "b.scales", "emb.weight"};
    SUBCASE("GPTQ v2, asym, bits and group") {
        const auto r = detect_repack_scheme(json::parse(R"({"quantization_config":{"quant_method":"gptq","bits":8,"group_size":64,"sym":false,"checkpoint_format":"gptq_v2"}})"), names);
        CHECK(r.modules == std::vector<std::string>{"a", "b"});
        CHECK(r.common.gptq.bits == 8);
        CHECK(r.common.gptq.group_size == 64);
        CHECK_FALSE(r.common.gptq.sym);
        CHECK(r.common.gptq.v2);
    }
    SUBCASE("AWQ GEMV is refused by name") {
        CHECK_THROWS_WITH_AS(detect_repack_scheme(json::parse(R"({"quantization_config":{"quant_method":"awq","version":"gemv"}})"), names),
                             doctest::Contains("not GEMM"), unsupported_error);
    }
    SUBCASE("compressed-tensors groups by regex and class name, version selects the packing") {
        const std::vector<std::string> ct_names = {"m.q_proj.weight_packed", "m.q_proj.weight_scale", "m.q_proj.weight_shape",
                                                   "m.down_proj.weight_packed", "m.down_proj.weight_scale", "m.down_proj.weight_shape",
                                                   "m.down_proj.weight_zero_point"};
        const auto r = detect_repack_scheme(json::parse(R"({"quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized","version":"0.18.1",
            "config_groups":{"group_0":{"targets":["re:.*down_proj$"],"weights":{"num_bits":3,"symmetric":false,"group_size":32,"strategy":"group","type":"int"}},
                             "group_1":{"targets":["Linear"],"weights":{"num_bits":4,"symmetric":true,"group_size":null,"strategy":"channel","type":"int"}}}}})"),
                                            ct_names);
        CHECK(r.common.packing == ct_packing::dense_v0_18);
        const auto down = r.for_module("m.down_proj"), q = r.for_module("m.q_proj");
        CHECK(down.ct.bits == 3);
        CHECK_FALSE(down.ct.symmetric);
        CHECK(q.ct.bits == 4);
        CHECK(q.ct.group_size == -1);
        CHECK(q.format == repack_source_format::ct_packed);
    }
    SUBCASE("a broken target regex is a format error, not a crash") {
        const auto r = detect_repack_scheme(json::parse(R"({"quantization_config":{"quant_method":"compressed-tensors","format":"pack-quantized",
            "config_groups":{"group_0":{"targets":["re:(unclosed"],"weights":{"num_bits":4,"symmetric":true,"group_size":32,"strategy":"group","type":"int"}}}}})"),
                                            {"m.weight_packed", "m.weight_scale", "m.weight_shape"});
        CHECK_THROWS_AS(r.for_module("m"), format_error);
    }
    SUBCASE("unknown quant_method") {
        CHECK_THROWS_AS(detect_repack_scheme(json::parse(R"({"quantization_config":{"quant_method":"bitsandbytes"}})"), names), unsupported_error);
    }
}

TEST_CASE("checkpoint: an inexact scale dtype change is refused before anything is written") {
    scratch s("scaledtype");
    make_model(s / "gptq", output_format::gptq, true, 50);
    repack_options o;
    o.format = output_format::compressed_tensors;
    o.model_dtype = dtype::BF16;  // compressed-tensors keeps scales in the model dtype; these F16 scales are not all BF16
    const auto before = std::distance(fs::directory_iterator(s.root), fs::directory_iterator());
    CHECK_THROWS_WITH_AS(repack_checkpoint(s / "gptq", s / "ct", o), doctest::Contains("is not exactly representable in BF16"), unsupported_error);
    CHECK_FALSE(fs::exists(s / "ct"));
    CHECK(std::distance(fs::directory_iterator(s.root), fs::directory_iterator()) == before);
    o.model_dtype = dtype::F16;
    CHECK_NOTHROW(repack_checkpoint(s / "gptq", s / "ct", o));
    CHECK_THROWS_WITH_AS(repack_checkpoint(s / "gptq", s / "ct", o), doctest::Contains("destination exists"), io_error);
}
