// A float gpt-oss into the native MXFP4 checkpoint OpenAI ships (convert/gpt_oss_mxfp4.hpp):
// the layout vLLM's and transformers' gpt-oss loaders read, the demo's MXFP4 quantization of the
// same weights byte for byte, a decode of the written bytes by the format's definition that
// matches the source to MXFP4 precision and the reported SNR, and every refusal naming the file,
// the tensor and the reason with nothing written.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/convert/gpt_oss_mxfp4.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/io/file.hpp"
#include "support/checkpoint_fixture.hpp"
#include "support/gpt_oss_checkpoint.hpp"

using namespace qforge;

namespace {

std::string native_scratch(const std::string& name) {
    static const testing::scratch_root root("gpt-oss-mxfp4");
    return root.fresh(name);
}

demo_options native_demo(demo_moe moe) {
    demo_options o = testing::small_demo();  // hidden 128, two layers
    o.moe = moe;
    o.experts = 4;
    o.moe_intermediate = 64;
    o.tied = false;
    return o;
}

/// The demo `moe` written once per kind.
const std::string& native_demo_dir(demo_moe moe) {
    static std::map<demo_moe, std::string> dirs;
    auto [it, fresh] = dirs.emplace(moe, std::string());
    if (fresh) {
        it->second = native_scratch("demo-" + std::to_string(static_cast<int>(moe)));
        write_demo_checkpoint(it->second, native_demo(moe));
    }
    return it->second;
}

/// The bf16 gpt-oss demo converted once (two threads).
const std::string& native_converted() {
    static const std::string dir = [] {
        const std::string d = native_scratch("converted");
        gpt_oss_mxfp4_options o;
        o.threads = 2;
        convert_gpt_oss_mxfp4(native_demo_dir(demo_moe::gpt_oss), d, o);
        return d;
    }();
    return dir;
}

using native_tensor_map = std::map<std::string, std::tuple<dtype, shape_t, std::vector<std::byte>>>;

native_tensor_map native_tensors(const std::string& dir) {
    const checkpoint_source s(dir);
    native_tensor_map m;
    for (const auto& t : s.tensors()) {
        const tensor_view v = s.view(t.name);
        m[t.name] = {v.type, v.shape, std::vector<std::byte>(v.bytes.begin(), v.bytes.end())};
    }
    return m;
}

/// A copy of `from` (one shard) whose tensors `edit` may change, and whose config `edit_config` may.
std::string native_edited(const std::string& from, const std::string& name, const std::function<void(native_tensor_map&)>& edit,
                          const std::function<void(json&)>& edit_config = {}) {
    const std::string dir = native_scratch(name);
    io::make_directory(dir);
    json cfg = json::parse(io::read_file(from + "/config.json"));
    if (edit_config) edit_config(cfg);
    io::write_file(dir + "/config.json", cfg.dump({.indent = 2}));
    native_tensor_map ts = native_tensors(from);
    edit(ts);
    std::vector<safetensors::tensor_spec> specs;
    for (const auto& [n, t] : ts) specs.push_back({n, std::get<0>(t), std::get<1>(t)});
    safetensors::writer w(dir + "/model.safetensors", specs, safetensors::default_metadata(), {.sync = false});
    for (const auto& [n, t] : ts) w.write(n, std::get<2>(t));
    w.finish();
    return dir;
}

/// `src` is refused with a message holding every one of `texts`, by the plan and by the
/// conversion, which writes nothing.
void expect_native_refused(const std::string& src, std::initializer_list<std::string> texts) {
    const gpt_oss_mxfp4_plan p = plan_gpt_oss_mxfp4(checkpoint_source(src));
    REQUIRE_FALSE(p.refusals.empty());
    CAPTURE(p.refusals.front());
    for (const std::string& t : texts) CHECK(p.refusals.front().find(t) != std::string::npos);
    const std::string out = src + "-out";
    CHECK_THROWS_AS(convert_gpt_oss_mxfp4(src, out), unsupported_error);
    CHECK_FALSE(io::path_exists(out));
}

const char* const native_layer0 = "model.layers.0.mlp.experts.";

}  // namespace

TEST_CASE("gpt-oss float -> native MXFP4: the demo's MXFP4 of the same weights, byte for byte; the rest copied") {
    // demo_moe::gpt_oss_mxfp4 quantizes the gpt_oss demo's experts row by row itself
    // (demo_checkpoint.hpp demo_mxfp4_experts: its own transposition of the whole tensor).
    const native_tensor_map got = native_tensors(native_converted());
    const native_tensor_map want = native_tensors(native_demo_dir(demo_moe::gpt_oss_mxfp4));
    REQUIRE(got.size() == want.size());
    for (const auto& entry : want) {
        const std::string& name = entry.first;
        const auto& t = entry.second;
        CAPTURE(name);
        REQUIRE(got.contains(name));
        CHECK(std::get<0>(got.at(name)) == std::get<0>(t));
        CHECK(std::get<1>(got.at(name)) == std::get<1>(t));
        CHECK(std::get<2>(got.at(name)) == std::get<2>(t));
    }
    const json cfg = json::parse(io::read_file(native_converted() + "/config.json"));
    const json demo = json::parse(io::read_file(native_demo_dir(demo_moe::gpt_oss_mxfp4) + "/config.json"));
    CHECK(cfg.dump({.sort_keys = true}) == demo.dump({.sort_keys = true}));  // openai/gpt-oss-20b's quantization_config
    CHECK(io::path_exists(native_converted() + "/tokenizer.json") == io::path_exists(native_demo_dir(demo_moe::gpt_oss) + "/tokenizer.json"));
}

// vLLM model_executor/models/gpt_oss.py GptOssModel.load_weights: quant_method "mxfp4" takes
// the MXFP4 loader, which maps <p>.gate_up_proj_blocks / _scales / down_proj_blocks / _scales
// and the _bias tensors onto the FusedMoE parameters that layers/quantization/mxfp4.py
// Mxfp4MoEMethod.create_weights makes (w13_weight U8 [E, 2I, H/2] = the blocks viewed
// (E, 2I, -1), w13_weight_scale U8 [E, 2I, H/32], w13_bias bf16 [E, 2I], w2_weight U8
// [E, H, I/2], w2_weight_scale U8 [E, H, I/32], w2_bias bf16 [E, H]); Mxfp4Config.
// get_quant_method keeps every LinearBase unquantized. Any other name for the experts is
// skipped there without an error, so none may be written.
TEST_CASE("gpt-oss native MXFP4: the tensors and config vLLM's MXFP4 gpt-oss loader reads, nothing per expert") {
    const std::int64_t E = 4, H = 128, I = 64;
    const checkpoint_source out(native_converted());
    const std::string p = native_layer0;
    const std::tuple<std::string, dtype, shape_t> want[] = {
        {p + "gate_up_proj_blocks", dtype::U8, {E, 2 * I, H / 32, 16}}, {p + "gate_up_proj_scales", dtype::U8, {E, 2 * I, H / 32}},
        {p + "down_proj_blocks", dtype::U8, {E, H, I / 32, 16}},        {p + "down_proj_scales", dtype::U8, {E, H, I / 32}},
        {p + "gate_up_proj_bias", dtype::BF16, {E, 2 * I}},             {p + "down_proj_bias", dtype::BF16, {E, H}},
    };
    for (const auto& entry : want) {
        const std::string& name = std::get<0>(entry);
        const dtype type = std::get<1>(entry);
        const shape_t& shape = std::get<2>(entry);
        CAPTURE(name);
        REQUIRE(out.contains(name));
        CHECK(out.view(name).type == type);
        CHECK(out.view(name).shape == shape);
    }
    for (const auto& t : out.tensors()) {
        CAPTURE(t.name);
        CHECK_FALSE(t.name.ends_with(".experts.gate_up_proj"));  // no dense copy beside the blocks
        CHECK_FALSE(t.name.ends_with(".experts.down_proj"));
        CHECK(t.name.find(".experts.0.") == std::string::npos);  // no per-expert name
        if (t.name.find(".self_attn.") != std::string::npos && t.name.ends_with(".weight")) CHECK(t.type == dtype::BF16);
    }
    const json cfg = json::parse(io::read_file(native_converted() + "/config.json"));
    const json* qc = cfg.find("quantization_config");
    REQUIRE(qc != nullptr);
    CHECK(qc->find("quant_method")->as_string() == "mxfp4");
    // qforge's own reader takes it as gpt-oss's native MXFP4, with nothing refused
    CHECK(out.fp8().kind == fp8_source_kind::gpt_oss_mxfp4);
    CHECK(out.fp8().refusals.empty());
}

// The written codes decoded by the definition (tests/support/gpt_oss_checkpoint.hpp: E2M1 by
// OCP MX table, times 2^(s - 127), low nibble first), row j of expert e against column j of the
// source's [E, K, N] tensor: an orientation or interleave error would leave noise, not 15 dB.
TEST_CASE("gpt-oss native MXFP4: the bytes decode by the definition to the source within MXFP4 precision, at the SNR reported") {
    const checkpoint_source src(native_demo_dir(demo_moe::gpt_oss)), out(native_converted());
    gpt_oss_mxfp4_options o;
    o.threads = 1;
    const std::string again = native_scratch("again");
    const gpt_oss_mxfp4_result r = convert_gpt_oss_mxfp4(native_demo_dir(demo_moe::gpt_oss), again, o);
    REQUIRE(r.snr_db.size() == 4);  // two layers, gate_up and down
    for (const auto& entry : r.snr_db) {
        const std::string& name = entry.first;
        const double reported = entry.second;
        CAPTURE(name);
        const tensor_view w = src.view(name), blocks = out.view(name + "_blocks"), scales = out.view(name + "_scales");
        const std::int64_t E = w.shape[0], K = w.shape[1], N = w.shape[2], G = K / 32;
        double sig = 0, err = 0;
        for (std::int64_t e = 0; e < E; ++e)
            for (std::int64_t n = 0; n < N; ++n)
                for (std::int64_t k = 0; k < K; ++k) {
                    const auto byte = std::to_integer<unsigned>(blocks.bytes[static_cast<std::size_t>(((e * N + n) * G + k / 32) * 16 + (k % 32) / 2)]);
                    const int s = std::to_integer<int>(scales.bytes[static_cast<std::size_t>((e * N + n) * G + k / 32)]);
                    const double dq = std::ldexp(testing::e2m1_by_definition(k % 2 ? byte >> 4 : byte & 15u), s - 127);
                    std::uint16_t h;
                    std::memcpy(&h, w.bytes.data() + static_cast<std::size_t>((e * K + k) * N + n) * 2, 2);
                    const double x = bf16_to_float(h);
                    sig += x * x;
                    err += (x - dq) * (x - dq);
                }
        const double snr = 10 * std::log10(sig / err);
        CHECK(snr > 15.0);
        CHECK(snr < 30.0);
        CHECK(reported == doctest::Approx(snr).epsilon(1e-4));
    }
    // one thread or two: the same files
    for (const auto& f : io::list_directory(again)) {
        CAPTURE(f);
        CHECK(io::read_file(again + "/" + f) == io::read_file(native_converted() + "/" + f));
    }
}

TEST_CASE("gpt-oss native MXFP4 refusals name the file, the tensor and the reason; nothing is written") {
    SUBCASE("not gpt-oss") { expect_native_refused(native_demo_dir(demo_moe::qwen_moe_fused), {"config.json", "gpt_oss", "qwen3_moe"}); }
    SUBCASE("already native MXFP4") {
        expect_native_refused(native_demo_dir(demo_moe::gpt_oss_mxfp4), {"config.json", "already gpt-oss's native MXFP4"});
    }
    SUBCASE("already quantized") {
        const std::string d = native_edited(native_demo_dir(demo_moe::gpt_oss), "quantized", [](native_tensor_map&) {},
                                            [](json& c) { c.set("quantization_config", json::object({{"quant_method", "gptq"}})); });
        expect_native_refused(d, {"config.json", "already quantized"});
    }
    SUBCASE("an input dimension that is not a multiple of 32") {
        const std::string d = native_edited(native_demo_dir(demo_moe::gpt_oss), "k48", [](native_tensor_map& ts) {
            auto& t = ts.at(std::string(native_layer0) + "down_proj");
            std::get<1>(t) = {4, 48, 128};
            std::get<2>(t).resize(4 * 48 * 128 * 2);
        }, [](json& c) { c.set("intermediate_size", 48); });
        expect_native_refused(d, {"model.safetensors", "model.layers.0.mlp.experts.down_proj", "not a multiple of 32"});
    }
    SUBCASE("an expert weight of the wrong shape or dtype") {
        const std::string shape = native_edited(native_demo_dir(demo_moe::gpt_oss), "shape", [](native_tensor_map& ts) {
            auto& t = ts.at(std::string(native_layer0) + "gate_up_proj");
            std::get<1>(t) = {4, 128 * 2, 64};  // [E, 2I, H]: Qwen's orientation, not gpt-oss's
        });
        expect_native_refused(shape, {"model.safetensors", "gate_up_proj", "expected [4, 128, 128]"});
        const std::string type = native_edited(native_demo_dir(demo_moe::gpt_oss), "type", [](native_tensor_map& ts) {
            std::get<0>(ts.at(std::string(native_layer0) + "down_proj")) = dtype::I16;
        });
        expect_native_refused(type, {"model.safetensors", "down_proj", "BF16, F16 or F32"});
    }
    SUBCASE("an expert tensor under a per-expert name") {
        const std::string d = native_edited(native_demo_dir(demo_moe::gpt_oss), "per-expert", [](native_tensor_map& ts) {
            ts[std::string(native_layer0) + "0.gate_proj.weight"] = {dtype::BF16, {64, 128}, std::vector<std::byte>(64 * 128 * 2)};
        });
        expect_native_refused(d, {"model.safetensors", "experts.0.gate_proj.weight", "not a fused expert tensor"});
    }
}

TEST_CASE("gpt-oss native MXFP4: NaN in an expert fails naming shard, expert and element; cancel and an existing destination") {
    SUBCASE("NaN") {
        const std::string d = native_edited(native_demo_dir(demo_moe::gpt_oss), "nan", [](native_tensor_map& ts) {
            auto& bytes = std::get<2>(ts.at("model.layers.1.mlp.experts.down_proj"));  // [E, I, H] = [4, 64, 128]
            const std::uint16_t nan = 0x7FC0;
            std::memcpy(bytes.data() + static_cast<std::size_t>((2 * 64 + 5) * 128 + 7) * 2, &nan, 2);  // expert 2, in 5, out 7
        });
        const std::string out = d + "-out";
        try {
            convert_gpt_oss_mxfp4(d, out);
            FAIL("no error");
        } catch (const unsupported_error& e) {
            CHECK(e.file().ends_with("model.safetensors"));
            CHECK(e.tensor() == "model.layers.1.mlp.experts.down_proj[2]");
            CHECK(std::string(e.what()).find("row 7, column 5") != std::string::npos);
        }
        CHECK_FALSE(io::path_exists(out));
    }
    SUBCASE("cancelled by the progress callback") {
        const std::string out = native_scratch("cancelled");
        gpt_oss_mxfp4_options o;
        std::size_t calls = 0;
        o.progress = [&](const std::string&, std::size_t i, std::size_t n) {
            ++calls;
            CHECK(n > 3);
            return i < 3;
        };
        CHECK_THROWS_AS(convert_gpt_oss_mxfp4(native_demo_dir(demo_moe::gpt_oss), out, o), error);
        CHECK(calls == 3);
        CHECK_FALSE(io::path_exists(out));
    }
    SUBCASE("an existing destination is kept unless overwrite") {
        const std::string out = native_scratch("existing");
        io::make_directory(out);
        io::write_file(out + "/keep.txt", "mine");
        CHECK_THROWS_AS(convert_gpt_oss_mxfp4(native_demo_dir(demo_moe::gpt_oss), out), io_error);
        CHECK(io::read_file(out + "/keep.txt") == "mine");
        gpt_oss_mxfp4_options o;
        o.overwrite = true;
        convert_gpt_oss_mxfp4(native_demo_dir(demo_moe::gpt_oss), out, o);
        CHECK_FALSE(io::path_exists(out + "/keep.txt"));
        CHECK(io::path_exists(out + "/config.json"));
    }
}
