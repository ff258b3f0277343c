// NVFP4 W4A4 (llm-compressor's NVFP4 scheme, `--preset nvfp4`): the weights of NVFP4A16 plus
// each layer's input_global_scale = 448 * 6 / amax of its calibrated input (CTn
// `quantization/utils/helpers.py generate_gparam`), read from an activation amax file
// (convert/activation_amax.hpp).
//
// Loader rules encoded here:
// - vLLM `compressed_tensors.py CompressedTensorsConfig._is_fp4a4_nvfp4` picks the W4A4 scheme
//   when weights AND input_activations are float, 4 bits, strategy tensor_group, group 16,
//   symmetric, and the activations' `dynamic` is "local" (the per-16 scales computed at run time);
// - vLLM `schemes/compressed_tensors_w4a4_nvfp4.py CompressedTensorsW4A4Fp4.create_weights`
//   registers `input_global_scale` F32 with one value per fused shard and
//   `process_weights_after_loading` keeps `input_global_scale.max()` for the fused layer
//   (warning when the shards differ): q/k/v and gate/up must carry one value, which is what the
//   converter writes (the max amax of the group, so no member's inputs leave the range).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "qforge/convert/activation_amax.hpp"
#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/core/half.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/safetensors/writer.hpp"
#include "support/checkpoint_fixture.hpp"

using namespace qforge;

namespace {

std::string w4a4_scratch(const std::string& name) {
    static const testing::scratch_root root("w4a4");
    return root.fresh(name);
}

convert_options w4a4_options(output_format f, const std::string& amax_file) {
    convert_options o;
    o.format = f;
    o.rules.default_scheme = {4, 16, true, scale_method::minmax, std::nullopt};
    o.threads = 2;
    o.activation_amax = amax_file;
    return o;
}

float w4a4_scalar(const checkpoint_source& c, const std::string& name) {
    const tensor_view v = c.view(name);
    REQUIRE(v.type == dtype::F32);
    REQUIRE(v.shape == shape_t{1});
    float x;
    std::memcpy(&x, v.bytes.data(), 4);
    return x;
}

/// A distinct amax per linear of the small demo (2 layers), exact in BF16: q/k/v and gate/up
/// differ so that sharing is visible.
std::map<std::string, float> demo_amax() {
    std::map<std::string, float> a;
    for (int l = 0; l < 2; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const float base = 2.0f + static_cast<float>(l);
        a[p + "self_attn.q_proj"] = base;
        a[p + "self_attn.k_proj"] = base + 1.5f;
        a[p + "self_attn.v_proj"] = base + 0.5f;
        a[p + "self_attn.o_proj"] = base * 0.25f;
        a[p + "mlp.gate_proj"] = base * 3.0f;
        a[p + "mlp.up_proj"] = base * 2.0f;
        a[p + "mlp.down_proj"] = base * 8.0f;
    }
    return a;
}

std::string w4a4_json(const std::map<std::string, float>& a) {
    json o = json::object();
    for (const auto& [k, v] : a) o.set(k, json(static_cast<double>(v)));
    return o.dump();
}

std::string write_amax_json(const std::string& dir, const std::map<std::string, float>& a) {
    io::make_directory(dir);
    const std::string path = dir + "/amax.json";
    io::write_file(path, std::string_view(w4a4_json(a)));
    return path;
}

/// The same amaxes as safetensors <module>.input_amax, F32 [1] or BF16 scalars alternately.
std::string write_amax_safetensors(const std::string& dir, const std::map<std::string, float>& a) {
    io::make_directory(dir);
    const std::string path = dir + "/amax.safetensors";
    std::vector<safetensors::tensor_spec> specs;
    bool bf16 = false;
    for (const auto& [k, v] : a) {
        specs.push_back({k + ".input_amax", bf16 ? dtype::BF16 : dtype::F32, bf16 ? shape_t{} : shape_t{1}});
        bf16 = !bf16;
    }
    safetensors::writer w(path, specs, safetensors::default_metadata(), {.sync = false});
    for (const safetensors::tensor_spec& s : specs) {
        const float v = a.at(s.name.substr(0, s.name.size() - 11));
        if (s.type == dtype::BF16) {
            const std::uint16_t h = float_to_bf16(v);
            w.write(s.name, std::as_bytes(std::span<const std::uint16_t>(&h, 1)));
        } else {
            w.write(s.name, std::as_bytes(std::span<const float>(&v, 1)));
        }
    }
    w.finish();
    return path;
}

}  // namespace

TEST_CASE("nvfp4 (W4A4): NVFP4A16's weight bytes, input_global_scale = 448*6 / the fused group's max amax, config vLLM reads as W4A4") {
    const std::string src_dir = w4a4_scratch("src"), a16_dir = w4a4_scratch("a16"), out_dir = w4a4_scratch("out");
    write_demo_checkpoint(src_dir, testing::small_demo());
    const auto amax = demo_amax();
    const std::string file = write_amax_json(w4a4_scratch("amax"), amax);
    convert(src_dir, out_dir, w4a4_options(output_format::compressed_tensors_nvfp4_w4a4, file));
    convert(src_dir, a16_dir, w4a4_options(output_format::compressed_tensors_nvfp4, {}));
    checkpoint_source out(out_dir), a16(a16_dir);
    for (int l = 0; l < 2; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const float qkv = std::max({amax.at(p + "self_attn.q_proj"), amax.at(p + "self_attn.k_proj"), amax.at(p + "self_attn.v_proj")});
        const float gu = std::max(amax.at(p + "mlp.gate_proj"), amax.at(p + "mlp.up_proj"));
        const std::map<std::string, float> expected{
            {"self_attn.q_proj", qkv}, {"self_attn.k_proj", qkv}, {"self_attn.v_proj", qkv}, {"mlp.gate_proj", gu},
            {"mlp.up_proj", gu},       {"self_attn.o_proj", amax.at(p + "self_attn.o_proj")},
            {"mlp.down_proj", amax.at(p + "mlp.down_proj")}};
        for (const auto& [leaf, a] : expected) {
            const std::string m = p + leaf;
            CAPTURE(m);
            CHECK(w4a4_scalar(out, m + ".input_global_scale") == 448.0f * 6.0f / a);
            for (const char* t : {".weight_packed", ".weight_scale", ".weight_global_scale"}) {  // the weights are NVFP4A16's
                const tensor_view x = out.view(m + t), y = a16.view(m + t);
                REQUIRE(x.bytes.size() == y.bytes.size());
                CHECK(std::memcmp(x.bytes.data(), y.bytes.data(), x.bytes.size()) == 0);
            }
        }
    }
    const json qc = json::parse(io::read_file(out_dir + "/config.json")).at("quantization_config");
    CHECK(qc.at("format").as_string() == "nvfp4-pack-quantized");
    const json& g = qc.at("config_groups").at("group_0");
    for (const char* side : {"weights", "input_activations"}) {  // _is_fp4a4_nvfp4
        CAPTURE(side);
        const json& a = g.at(side);
        CHECK(a.at("type").as_string() == "float");
        CHECK(a.at("num_bits").as_int() == 4);
        CHECK(a.at("strategy").as_string() == "tensor_group");
        CHECK(a.at("group_size").as_int() == 16);
        CHECK(a.at("symmetric").as_bool());
    }
    CHECK(g.at("input_activations").at("dynamic").as_string() == "local");
    CHECK(g.at("input_activations").at("observer").as_string() == "static_minmax");
    CHECK_FALSE(g.at("weights").at("dynamic").as_bool());
    CHECK_THROWS_AS(a16.view("model.layers.0.self_attn.q_proj.input_global_scale"), error);  // A16 has none
}

TEST_CASE("activation amax as safetensors (F32 [1] and BF16 scalars) writes the same checkpoint as the JSON file") {
    const std::string src_dir = w4a4_scratch("st-src"), a = w4a4_scratch("st-json"), b = w4a4_scratch("st-st");
    write_demo_checkpoint(src_dir, testing::small_demo());
    const auto amax = demo_amax();
    const std::string st = write_amax_safetensors(w4a4_scratch("st-b"), amax);
    convert(src_dir, a, w4a4_options(output_format::compressed_tensors_nvfp4_w4a4, write_amax_json(w4a4_scratch("st-a"), amax)));
    convert(src_dir, b, w4a4_options(output_format::compressed_tensors_nvfp4_w4a4, st));
    CHECK(io::read_file(a + "/model.safetensors") == io::read_file(b + "/model.safetensors"));
    const activation_amax_file f = activation_amax_file::open(st);
    CHECK(f.entries().size() == amax.size());
    CHECK(*f.find("model.layers.1.mlp.down_proj") == 24.0f);
    CHECK_FALSE(f.find("model.layers.1.mlp").has_value());
}

// vLLM `compressed_tensors_moe.py CompressedTensorsW4A4Nvfp4MoEMethod.process_weights_after_loading`
// keeps `w13_input_global_scale.max(dim=1)`: one value per expert for its w1/w3 pair.
TEST_CASE("nvfp4 on MoE: each expert's gate/up pair shares one input_global_scale, experts keep their own") {
    demo_options o = testing::small_demo();
    o.moe = demo_moe::mixtral;
    o.experts = 4;
    o.moe_intermediate = 128;
    o.tied = false;
    const std::string src_dir = w4a4_scratch("moe-src"), out_dir = w4a4_scratch("moe-out");
    write_demo_checkpoint(src_dir, o);
    std::map<std::string, float> amax;
    for (int l = 0; l < 2; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj"}) amax[p + m] = 4.0f;
        for (int e = 0; e < 4; ++e) {
            const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
            amax[x + "w1"] = 1.0f + static_cast<float>(e);
            amax[x + "w3"] = 2.0f * static_cast<float>(e) + 0.5f;
            amax[x + "w2"] = 16.0f;
        }
    }
    convert(src_dir, out_dir, w4a4_options(output_format::compressed_tensors_nvfp4_w4a4, write_amax_json(w4a4_scratch("moe-a"), amax)));
    checkpoint_source out(out_dir);
    for (int e = 0; e < 4; ++e) {
        CAPTURE(e);
        const std::string x = "model.layers.1.block_sparse_moe.experts." + std::to_string(e) + ".";
        const float shared = 448.0f * 6.0f / std::max(amax.at(x + "w1"), amax.at(x + "w3"));
        CHECK(w4a4_scalar(out, x + "w1.input_global_scale") == shared);
        CHECK(w4a4_scalar(out, x + "w3.input_global_scale") == shared);
        CHECK(w4a4_scalar(out, x + "w2.input_global_scale") == 448.0f * 6.0f / 16.0f);
    }
}

TEST_CASE("nvfp4 refusals name the file and the entry, and write nothing") {
    const std::string src_dir = w4a4_scratch("bad-src");
    write_demo_checkpoint(src_dir, testing::small_demo());
    const std::string dir = w4a4_scratch("bad");
    io::make_directory(dir);
    int n = 0;
    auto refused = [&](const std::string& amax_file, output_format f, const std::string& text) {
        const std::string out = dir + "/out" + std::to_string(n++);
        CAPTURE(text);
        CHECK_THROWS_WITH_AS(convert(src_dir, out, w4a4_options(f, amax_file)), doctest::Contains(text.c_str()), error);
        CHECK_FALSE(io::path_exists(out));
    };
    auto text_file = [&](const std::string& body) {
        const std::string p = dir + "/f" + std::to_string(n++) + ".json";
        io::write_file(p, std::string_view(body));
        return p;
    };
    auto amax = demo_amax();
    refused({}, output_format::compressed_tensors_nvfp4_w4a4, "calibrated input amax");
    const std::string good = text_file(w4a4_json(amax));
    refused(good, output_format::compressed_tensors_nvfp4, "not used");
    refused(good, output_format::gptq, "not used");
    auto missing = amax;
    missing.erase("model.layers.1.mlp.up_proj");
    refused(text_file(w4a4_json(missing)), output_format::compressed_tensors_nvfp4_w4a4, "model.layers.1.mlp.up_proj");
    auto unknown = amax;
    unknown["model.layers.7.mlp.up_proj"] = 1.0f;
    refused(text_file(w4a4_json(unknown)), output_format::compressed_tensors_nvfp4_w4a4, "model.layers.7.mlp.up_proj': names no linear");
    auto zero = amax;
    zero["model.layers.0.mlp.down_proj"] = 0.0f;
    refused(text_file(w4a4_json(zero)), output_format::compressed_tensors_nvfp4_w4a4, "not a positive finite");
    refused(text_file(R"({"model.layers.0.mlp.down_proj": "7"})"), output_format::compressed_tensors_nvfp4_w4a4, "must be a number");
    refused(text_file(R"({"model.layers.0.mlp.down_proj": 1e300})"), output_format::compressed_tensors_nvfp4_w4a4, "not a positive finite");
    refused(text_file(R"({"model.layers.0.mlp.down_proj": 1e-60})"), output_format::compressed_tensors_nvfp4_w4a4, "too small");
    refused(text_file(R"([1, 2])"), output_format::compressed_tensors_nvfp4_w4a4, "expected a JSON object");
    refused(text_file(R"({})"), output_format::compressed_tensors_nvfp4_w4a4, "holds no activation amax");
    refused(text_file(R"({"a": 1,)"), output_format::compressed_tensors_nvfp4_w4a4, ".json");
    refused(dir + "/absent.json", output_format::compressed_tensors_nvfp4_w4a4, "absent.json");
    {  // safetensors: a tensor that is not <module>.input_amax, a wrong shape, a wrong dtype
        for (const safetensors::tensor_spec& s : {safetensors::tensor_spec{"model.layers.0.mlp.down_proj.scale", dtype::F32, {1}},
                                                  safetensors::tensor_spec{"model.layers.0.mlp.down_proj.input_amax", dtype::F32, {2}},
                                                  safetensors::tensor_spec{"model.layers.0.mlp.down_proj.input_amax", dtype::I32, {1}}}) {
            const std::string p = dir + "/bad" + std::to_string(n++) + ".safetensors";
            safetensors::writer w(p, {s}, safetensors::default_metadata(), {.sync = false});
            const std::vector<std::byte> zeros(static_cast<std::size_t>(checked_numel(s.shape)) * dtype_size(s.type));
            w.write(s.name, zeros);
            w.finish();
            refused(p, output_format::compressed_tensors_nvfp4_w4a4, s.name);
        }
    }
}
