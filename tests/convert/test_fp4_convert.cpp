// NVFP4 / MXFP4 through the converter: every fused group (q/k/v, gate/up, each expert's
// gate/up or w1/w3) carries ONE global scale, computed from the group's amax before any member
// is quantized (convert/fp4_global.hpp), because vLLM keeps one per fused layer:
// `compressed_tensors_w4a16_nvfp4.py` / `compressed_tensors_w4a4_nvfp4.py`
// process_weights_after_loading take `weight_global_scale.max()` over q/k/v and gate/up, and
// `compressed_tensors_moe.py` CompressedTensorsW4A4Nvfp4MoEMethod keeps
// `w13_weight_global_scale[:, 0]` for an expert's w1/w3. The written bytes are decoded with the
// loader's formula (e2m1 * weight_scale / weight_global_scale, CT NVFP4PackedCompressor.
// decompress) written here, and the config keys are those vLLM's `compressed_tensors.py`
// `_is_fp4a16_nvfp4` / `_is_mxfp4` read.
//
// Also here: decode through a real file for every float and 8-bit format the converter writes
// (FP8 channel / block, native fp8, INT8 W8A8, NVFP4, MXFP4), each checked with a decoder
// written from the format's definition (tests/support/independent_decoders.hpp) against the
// library's own dequantization and the source values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/minifloat.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/safetensors/writer.hpp"
#include "support/checkpoint_fixture.hpp"
#include "support/fp8_checkpoint.hpp"
#include "support/independent_decoders.hpp"

using namespace qforge;

namespace {

std::string fp4_scratch(const std::string& name) {
    static const testing::scratch_root root("fp4");
    return root.fresh(name);
}

const quant_spec nvfp4_spec{4, 16, true, scale_method::minmax, std::nullopt};  // the format's E4M3 by default
const quant_spec mxfp4_spec{4, 32, true, scale_method::minmax, std::nullopt};  // E8M0 (U8) by default

convert_options fp4_options(output_format f, const quant_spec& s) {
    convert_options o;
    o.format = f;
    o.rules.default_scheme = s;
    o.threads = 2;
    return o;
}

float global_of(const checkpoint_source& c, const std::string& module) {
    const tensor_view v = c.view(module + ".weight_global_scale");
    float g;
    std::memcpy(&g, v.bytes.data(), 4);
    return g;
}

/// amax of a bf16 source weight, read independently of the converter.
float source_amax(const checkpoint_source& c, const std::string& weight) {
    const tensor_view v = c.view(weight);
    REQUIRE(v.type == dtype::BF16);
    float a = 0;
    for (std::size_t i = 0; i < v.bytes.size() / 2; ++i) {
        std::uint16_t h;
        std::memcpy(&h, v.bytes.data() + 2 * i, 2);
        a = std::max(a, std::fabs(bf16_to_float(h)));
    }
    return a;
}

/// The bf16 source weight's values.
std::vector<float> source_values(const checkpoint_source& c, const std::string& weight) {
    const tensor_view v = c.view(weight);
    REQUIRE(v.type == dtype::BF16);
    std::vector<float> x(v.bytes.size() / 2);
    for (std::size_t i = 0; i < x.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, v.bytes.data() + 2 * i, 2);
        x[i] = bf16_to_float(h);
    }
    return x;
}

double snr_db(const std::vector<float>& x, const std::vector<float>& w) {
    REQUIRE(x.size() == w.size());
    double sig = 0, err = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
        sig += double(x[i]) * x[i];
        err += (double(x[i]) - w[i]) * (double(x[i]) - w[i]);
    }
    return 10 * std::log10(sig / err);
}

/// Every output tensor of `module` as views (what a layout's decode takes).
std::vector<tensor_view> views_of(const checkpoint_source& c, const std::string& module, std::initializer_list<const char*> leaves) {
    std::vector<tensor_view> v;
    for (const char* l : leaves) v.push_back(c.view(module + l));
    return v;
}

/// The loader's decode of one NVFP4 layer (independent decoder), SNR against the bf16 source.
double decoded_snr(const checkpoint_source& out, const checkpoint_source& src, const std::string& module) {
    const std::vector<float> w = testing::independent::nvfp4(out.view(module + ".weight_packed"), out.view(module + ".weight_scale"),
                                                             out.view(module + ".weight_global_scale"));
    return snr_db(source_values(src, module + ".weight"), w);
}

}  // namespace

TEST_CASE("nvfp4a16 on a dense bf16 model: q/k/v and gate/up share one global scale = 448*6/max amax; config as vLLM reads it") {
    const std::string src_dir = fp4_scratch("dense-src"), out_dir = fp4_scratch("dense-out");
    write_demo_checkpoint(src_dir, testing::small_demo());
    const conversion_result r = convert(src_dir, out_dir, fp4_options(output_format::compressed_tensors_nvfp4, nvfp4_spec));
    CHECK(r.report.tensors.size() == 14);  // 7 linears x 2 layers
    checkpoint_source out(out_dir), src(src_dir);
    for (int l = 0; l < 2; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        const float qkv = std::max({source_amax(src, p + "self_attn.q_proj.weight"), source_amax(src, p + "self_attn.k_proj.weight"),
                                    source_amax(src, p + "self_attn.v_proj.weight")});
        for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}) {
            CAPTURE(m);
            CHECK(global_of(out, p + m) == nvfp4_global_scale(qkv));
            CHECK(decoded_snr(out, src, p + m) > 15.0);
        }
        const float gu = std::max(source_amax(src, p + "mlp.gate_proj.weight"), source_amax(src, p + "mlp.up_proj.weight"));
        CHECK(global_of(out, p + "mlp.gate_proj") == nvfp4_global_scale(gu));
        CHECK(global_of(out, p + "mlp.up_proj") == nvfp4_global_scale(gu));
        // Layers no loader fuses keep their own.
        CHECK(global_of(out, p + "self_attn.o_proj") == nvfp4_global_scale(source_amax(src, p + "self_attn.o_proj.weight")));
        CHECK(global_of(out, p + "mlp.down_proj") == nvfp4_global_scale(source_amax(src, p + "mlp.down_proj.weight")));
        CHECK(out.view(p + "mlp.down_proj.weight_scale").type == dtype::F8_E4M3);
        CHECK(out.view(p + "mlp.down_proj.weight_packed").shape == shape_t{128, 128});
    }
    const json qc = json::parse(io::read_file(out_dir + "/config.json")).at("quantization_config");
    CHECK(qc.at("format").as_string() == "nvfp4-pack-quantized");
    const json& w = qc.at("config_groups").at("group_0").at("weights");
    CHECK(w.at("strategy").as_string() == "tensor_group");  // vLLM _is_fp4a16_nvfp4
    CHECK(w.at("group_size").as_int() == 16);
    CHECK(w.at("type").as_string() == "float");
    CHECK(qc.at("config_groups").at("group_0").at("input_activations").is_null());
    // The embedding and the (tied) head stay dense, as for the integer formats; the head is in ignore.
    CHECK(out.view("model.embed_tokens.weight").type == dtype::BF16);
    bool head_ignored = false;
    for (const json& n : qc.at("ignore").as_array()) head_ignored = head_ignored || n.as_string() == "lm_head";
    CHECK(head_ignored);
}

TEST_CASE("nvfp4a16 on MoE: each expert's gate/up (qwen per-expert, mixtral w1/w3, fused 3-D) share one global scale") {
    for (demo_moe style : {demo_moe::qwen_moe, demo_moe::mixtral, demo_moe::qwen_moe_fused}) {
        CAPTURE(static_cast<int>(style));
        demo_options o = testing::small_demo();
        o.moe = style;
        o.experts = 4;
        o.moe_intermediate = 128;
        o.tied = false;
        const std::string tag = std::to_string(static_cast<int>(style));
        const std::string src_dir = fp4_scratch("moe-src" + tag), out_dir = fp4_scratch("moe-out" + tag);
        write_demo_checkpoint(src_dir, o);
        convert(src_dir, out_dir, fp4_options(output_format::compressed_tensors_nvfp4, nvfp4_spec));
        checkpoint_source out(out_dir);
        const bool mixtral = style == demo_moe::mixtral;
        const std::string base = mixtral ? "model.layers.0.block_sparse_moe.experts." : "model.layers.0.mlp.experts.";
        std::vector<float> globals;
        for (int e = 0; e < 4; ++e) {
            const std::string p = base + std::to_string(e) + ".";
            const float a = global_of(out, p + (mixtral ? "w1" : "gate_proj")), b = global_of(out, p + (mixtral ? "w3" : "up_proj"));
            CHECK(a == b);
            globals.push_back(a);
        }
        if (style != demo_moe::qwen_moe_fused) {  // per-expert sources: the group amax read independently
            checkpoint_source src(src_dir);
            const std::string p = base + "2.";
            const float gu = std::max(source_amax(src, p + (mixtral ? "w1.weight" : "gate_proj.weight")),
                                      source_amax(src, p + (mixtral ? "w3.weight" : "up_proj.weight")));
            CHECK(globals[2] == nvfp4_global_scale(gu));
        }
    }
}

TEST_CASE("mxfp4a16: E8M0 group-32 scales, no global scale; config as vLLM _is_mxfp4 reads it") {
    const std::string src_dir = fp4_scratch("mx-src"), out_dir = fp4_scratch("mx-out");
    write_demo_checkpoint(src_dir, testing::small_demo());
    const conversion_result r = convert(src_dir, out_dir, fp4_options(output_format::compressed_tensors_mxfp4, mxfp4_spec));
    checkpoint_source out(out_dir);
    const std::string m = "model.layers.1.mlp.down_proj";
    CHECK(out.view(m + ".weight_scale").type == dtype::U8);
    CHECK(out.view(m + ".weight_scale").shape == shape_t{128, 8});
    CHECK_THROWS_AS(out.view(m + ".weight_global_scale"), error);
    for (const auto& t : r.report.tensors) CHECK(t.snr_db > 12.0);
    const json qc = json::parse(io::read_file(out_dir + "/config.json")).at("quantization_config");
    CHECK(qc.at("format").as_string() == "mxfp4-pack-quantized");
    CHECK(qc.at("config_groups").at("group_0").at("weights").at("strategy").as_string() == "group");
}

TEST_CASE("FP4 refusals at plan time name the tensor: K not a multiple of 16 / 32, a wrong group or scale dtype") {
    demo_options o = testing::small_demo();
    o.intermediate = 264;  // down_proj K = 264: a multiple of 8, not of 16
    const std::string src_dir = fp4_scratch("ragged-src");
    write_demo_checkpoint(src_dir, o);
    checkpoint_source src(src_dir);
    const plan p = plan_conversion(src, fp4_options(output_format::compressed_tensors_nvfp4, nvfp4_spec));
    REQUIRE(p.refused());
    std::string all;
    for (const auto& why : p.refusals) all += why + "\n";
    CHECK(all.find("down_proj") != std::string::npos);
    CHECK(all.find("K=264 is not a multiple of 16") != std::string::npos);
    const quant_spec g32{4, 32, true, scale_method::minmax, dtype::F8_E4M3};
    CHECK(format_refusal(output_format::compressed_tensors_nvfp4, 8, 64, g32, dtype::BF16)->find("groups are 16") != std::string::npos);
    CHECK(format_refusal(output_format::compressed_tensors_mxfp4, 8, 48, mxfp4_spec, dtype::BF16)->find("multiple of 32") != std::string::npos);
    quant_spec asym = nvfp4_spec;
    asym.symmetric = false;
    CHECK(format_refusal(output_format::compressed_tensors_nvfp4, 8, 64, asym, dtype::BF16).has_value());
    CHECK_FALSE(format_refusal(output_format::compressed_tensors_nvfp4, 8, 64, nvfp4_spec, dtype::BF16).has_value());
}

TEST_CASE("FP8 source -> nvfp4a16 / mxfp4a16: the bytes of its dequantized F32 twin; q/k/v still share one global scale") {
    testing::fp8_fixture f;
    f.layout = testing::fp8_layout::native_block;
    const std::string src = fp4_scratch("fp8-src"), twin = fp4_scratch("fp8-twin");
    testing::write_fp8_checkpoint(src, f);
    f.twin = true;
    testing::write_fp8_checkpoint(twin, f);
    for (const auto& fs : {std::pair{output_format::compressed_tensors_nvfp4, nvfp4_spec},
                           std::pair{output_format::compressed_tensors_mxfp4, mxfp4_spec}}) {
        const output_format fmt = fs.first;  // no structured bindings in CAPTURE (clang 14)
        const quant_spec& spec = fs.second;
        const std::string name(format_name(fmt));
        CAPTURE(name);
        const std::string a = fp4_scratch("fp8-a-" + std::string(format_name(fmt))), b = fp4_scratch("fp8-b-" + std::string(format_name(fmt)));
        const conversion_result r = convert(src, a, fp4_options(fmt, spec));
        convert(twin, b, fp4_options(fmt, spec));
        checkpoint_source x(a), y(b);
        for (const auto& t : r.report.tensors)
            for (const char* leaf : {".weight_packed", ".weight_scale"}) {
                CAPTURE(t.name + leaf);
                const tensor_view u = x.view(t.name + leaf), v = y.view(t.name + leaf);
                REQUIRE(u.bytes.size() == v.bytes.size());
                CHECK(std::memcmp(u.bytes.data(), v.bytes.data(), u.bytes.size()) == 0);
            }
        if (fmt == output_format::compressed_tensors_nvfp4) {
            const std::string p = "model.layers.0.self_attn.";
            CHECK(global_of(x, p + "q_proj") == global_of(x, p + "k_proj"));
            CHECK(global_of(x, p + "k_proj") == global_of(x, p + "v_proj"));
            CHECK(global_of(x, p + "q_proj") == global_of(y, p + "q_proj"));
        }
    }
}

TEST_CASE("FP8 fused 3-D experts -> nvfp4a16: read one expert at a time, the bytes of the F32 twin, each expert's gate/up share one global scale") {
    // The fused group's amax is read through checkpoint_source::read_expert (each member's cut,
    // decoded with its expert's scale grid), never the whole 3-D tensor at once.
    testing::fp8_fixture f;
    f.layout = testing::fp8_layout::native_block;
    f.fused_experts = 4;
    const std::string src = fp4_scratch("fp8-moe-src"), twin = fp4_scratch("fp8-moe-twin");
    testing::write_fp8_checkpoint(src, f);
    f.twin = true;
    testing::write_fp8_checkpoint(twin, f);
    const std::string a = fp4_scratch("fp8-moe-a"), b = fp4_scratch("fp8-moe-b");
    const conversion_result r = convert(src, a, fp4_options(output_format::compressed_tensors_nvfp4, nvfp4_spec));
    convert(twin, b, fp4_options(output_format::compressed_tensors_nvfp4, nvfp4_spec));
    checkpoint_source x(a), y(b);
    REQUIRE(r.report.tensors.size() == 4 + 3 * 4);
    for (const auto& t : r.report.tensors)
        for (const char* leaf : {".weight_packed", ".weight_scale", ".weight_global_scale"}) {
            CAPTURE(t.name + leaf);
            const tensor_view u = x.view(t.name + leaf), v = y.view(t.name + leaf);
            REQUIRE(u.bytes.size() == v.bytes.size());
            CHECK(std::memcmp(u.bytes.data(), v.bytes.data(), u.bytes.size()) == 0);
        }
    for (int e = 0; e < 4; ++e) {
        const std::string p = "model.layers.0.mlp.experts." + std::to_string(e) + ".";
        CHECK(global_of(x, p + "gate_proj") == global_of(x, p + "up_proj"));
    }
    CHECK(global_of(x, "model.layers.0.mlp.experts.0.gate_proj") != global_of(x, "model.layers.0.mlp.experts.1.gate_proj"));
}

namespace {

/// One format the decode-through-a-real-file test converts to.
struct file_case {
    const char* name;
    output_format format;
    quant_spec scheme;
};

/// What a loader decodes for `module` of the converted checkpoint, by the format's definition.
std::vector<float> decode_independently(const checkpoint_source& out, const file_case& f, const std::string& module) {
    namespace ind = testing::independent;
    const tensor_view w = f.format == output_format::compressed_tensors_nvfp4 || f.format == output_format::compressed_tensors_mxfp4
                              ? out.view(module + ".weight_packed")
                              : out.view(module + ".weight");
    switch (f.format) {
        case output_format::compressed_tensors_fp8: {
            const std::int64_t b = f.scheme.group_size;
            return b > 0 ? ind::fp8_blocks(w, out.view(module + ".weight_scale"), b, b)
                         : ind::fp8_blocks(w, out.view(module + ".weight_scale"), 1, w.shape.at(1));
        }
        case output_format::fp8: return ind::fp8_blocks(w, out.view(module + ".weight_scale_inv"), 128, 128);
        case output_format::compressed_tensors_w8a8: return ind::int8_channel(w, out.view(module + ".weight_scale"));
        case output_format::compressed_tensors_nvfp4:
            return ind::nvfp4(w, out.view(module + ".weight_scale"), out.view(module + ".weight_global_scale"));
        case output_format::compressed_tensors_mxfp4: return ind::mxfp4_ct(w, out.view(module + ".weight_scale"));
        default: FAIL("no independent decoder"); return {};
    }
}

/// The library's own dequantization of the same tensors (nullopt: the format has no float decode).
std::optional<std::vector<float>> decode_by_library(const checkpoint_source& out, const file_case& f, const std::string& module) {
    switch (f.format) {
        case output_format::compressed_tensors_fp8:
            return fp8_layout(fp8_options{fp8_flavour::compressed_tensors, f.scheme.group_size, dtype::BF16, dtype::BF16})
                .decode(views_of(out, module, {".weight", ".weight_scale"}), module);
        case output_format::fp8:
            return fp8_layout(fp8_options{fp8_flavour::native, 128, dtype::F32, dtype::BF16})
                .decode(views_of(out, module, {".weight", ".weight_scale_inv"}), module);
        case output_format::compressed_tensors_nvfp4:
            return nvfp4_layout().decode(views_of(out, module, {".weight_packed", ".weight_scale", ".weight_global_scale"}), module);
        case output_format::compressed_tensors_mxfp4:
            return mxfp4_layout().decode(views_of(out, module, {".weight_packed", ".weight_scale"}), module);
        default: return std::nullopt;  // INT8: checked against the source within half a step
    }
}

}  // namespace

TEST_CASE("decode through a real file: every float and 8-bit format, independent decoder == library decode, close to the source") {
    const std::string src_dir = fp4_scratch("decode-src");
    write_demo_checkpoint(src_dir, testing::small_demo());
    checkpoint_source src(src_dir);
    const file_case cases[] = {
        {"fp8-dynamic", output_format::compressed_tensors_fp8, {8, -1, true, scale_method::minmax, std::nullopt}},
        {"fp8-block", output_format::compressed_tensors_fp8, {8, 128, true, scale_method::minmax, std::nullopt}},
        {"fp8 native", output_format::fp8, {8, 128, true, scale_method::minmax, std::nullopt}},
        {"w8a8-int8", output_format::compressed_tensors_w8a8, {8, -1, true, scale_method::minmax, std::nullopt}},
        {"nvfp4a16", output_format::compressed_tensors_nvfp4, nvfp4_spec},
        {"mxfp4a16", output_format::compressed_tensors_mxfp4, mxfp4_spec},
    };
    for (const file_case& f : cases) {
        CAPTURE(f.name);
        const std::string out_dir = fp4_scratch(std::string("decode-out-") + f.name);
        convert(src_dir, out_dir, fp4_options(f.format, f.scheme));
        checkpoint_source out(out_dir);
        for (const char* m : {"model.layers.0.self_attn.k_proj", "model.layers.1.mlp.down_proj"}) {
            CAPTURE(m);
            const std::vector<float> x = source_values(src, std::string(m) + ".weight");
            const std::vector<float> w = decode_independently(out, f, m);
            REQUIRE(w.size() == x.size());
            if (const auto lib = decode_by_library(out, f, m)) {
                REQUIRE(lib->size() == w.size());
                std::size_t differ = 0;
                for (std::size_t i = 0; i < w.size(); ++i) differ += (*lib)[i] != w[i];
                CHECK(differ == 0);
            } else {  // INT8 per channel, scale amax / 127: every value within half a step
                const tensor_view sc = out.view(std::string(m) + ".weight_scale");
                const std::int64_t k = static_cast<std::int64_t>(x.size()) / sc.shape.at(0);
                std::size_t outside = 0;
                for (std::size_t i = 0; i < x.size(); ++i)
                    outside += std::fabs(x[i] - w[i]) >
                               0.5001f * testing::independent::scale_at(sc, i / static_cast<std::size_t>(k)) + 1e-7f;
                CHECK(outside == 0);
            }
            const double floor_db = f.scheme.bits == 8 ? 25.0 : 12.0;
            CHECK(snr_db(x, w) > floor_db);
        }
    }
}

TEST_CASE("decode through a real file: an FP8 source's layers converted to NVFP4/MXFP4 decode independently to the library's values") {
    testing::fp8_fixture f;
    f.layout = testing::fp8_layout::ct_channel;
    f.scale_type = dtype::BF16;
    const std::string src = fp4_scratch("fp8c-src");
    testing::write_fp8_checkpoint(src, f);
    for (const file_case& c : {file_case{"nvfp4a16", output_format::compressed_tensors_nvfp4, nvfp4_spec},
                               file_case{"mxfp4a16", output_format::compressed_tensors_mxfp4, mxfp4_spec}}) {
        CAPTURE(c.name);
        const std::string out_dir = fp4_scratch(std::string("fp8c-out-") + c.name);
        const conversion_result r = convert(src, out_dir, fp4_options(c.format, c.scheme));
        checkpoint_source out(out_dir);
        REQUIRE(!r.report.tensors.empty());
        for (const auto& t : r.report.tensors) {
            CAPTURE(t.name);
            const std::vector<float> w = decode_independently(out, c, t.name);
            const std::vector<float> lib = *decode_by_library(out, c, t.name);
            CHECK(w == lib);
        }
    }
}

TEST_CASE("nvfp4a16 on an fp16 model: q/k/v share one global scale from the F16 values, the file decodes independently to the library's values") {
    const std::string bf = fp4_scratch("f16-bf16"), f16 = fp4_scratch("f16-src"), out_dir = fp4_scratch("f16-out");
    write_demo_checkpoint(bf, testing::small_demo());
    {  // the demo's tensors as F16 (exact for these magnitudes), config torch_dtype float16
        checkpoint_source b(bf);
        json cfg = b.config();
        cfg.set("torch_dtype", "float16");
        if (!io::path_exists(f16)) io::make_directory(f16);
        io::write_config(f16, cfg);
        std::vector<safetensors::tensor_spec> specs;
        for (const auto& t : b.tensors()) specs.push_back({t.name, dtype::F16, t.shape});
        safetensors::writer w(f16 + "/model.safetensors", specs, safetensors::default_metadata(), {.sync = false});
        for (const auto& t : b.tensors()) {
            const tensor_view v = b.view(t.name);
            std::vector<std::uint16_t> h(v.bytes.size() / 2);
            for (std::size_t i = 0; i < h.size(); ++i) {
                std::uint16_t x;
                std::memcpy(&x, v.bytes.data() + 2 * i, 2);
                h[i] = float_to_fp16(bf16_to_float(x));
            }
            w.write(t.name, std::as_bytes(std::span<const std::uint16_t>(h)));
        }
        w.finish();
    }
    const file_case c{"nvfp4a16", output_format::compressed_tensors_nvfp4, nvfp4_spec};
    const conversion_result r = convert(f16, out_dir, fp4_options(c.format, c.scheme));
    CHECK(r.report.tensors.size() == 14);
    checkpoint_source out(out_dir), src(bf);
    const std::string p = "model.layers.1.self_attn.";
    const float qkv = std::max({source_amax(src, p + "q_proj.weight"), source_amax(src, p + "k_proj.weight"),
                                source_amax(src, p + "v_proj.weight")});
    for (const char* m : {"q_proj", "k_proj", "v_proj"}) {
        CAPTURE(m);
        CHECK(global_of(out, p + m) == nvfp4_global_scale(qkv));
        CHECK(decode_independently(out, c, p + m) == *decode_by_library(out, c, p + m));
        CHECK(decoded_snr(out, src, p + m) > 15.0);
    }
    const json qc = json::parse(io::read_file(out_dir + "/config.json")).at("quantization_config");
    CHECK(qc.at("format").as_string() == "nvfp4-pack-quantized");
}
