// gpt-oss's native MXFP4 checkpoint as a source (convert/gpt_oss_source.hpp): every output
// format writes what converting its dequantized bf16 twin writes (the twin decoded in
// tests/support/gpt_oss_checkpoint.hpp from transformers' definition, not by qforge), the dense
// linears stay dense as the source left them, and every malformed pair or scale is refused
// naming the file, the tensor and the reason, with nothing written.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/convert/gguf/converter.hpp"
#include "qforge/convert/gpt_oss_source.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/io/file.hpp"
#include "support/checkpoint_fixture.hpp"
#include "support/gpt_oss_checkpoint.hpp"

using namespace qforge;

namespace {

std::string oss_scratch(const std::string& name) {
    static const testing::scratch_root root("gpt-oss");
    return root.fresh(name);
}

/// The generator's bf16 gpt-oss (hidden 128, 4 experts of 128, two layers), written once.
const std::string& oss_bf16() {
    static const std::string dir = [] {
        demo_options o = testing::small_demo();
        o.moe = demo_moe::gpt_oss;
        o.experts = 4;
        o.moe_intermediate = 128;
        o.tied = false;
        const std::string d = oss_scratch("bf16");
        write_demo_checkpoint(d, o);
        return d;
    }();
    return dir;
}

struct oss_pair {
    std::string native, twin;
};

/// The native MXFP4 checkpoint and its dequantized twin, written once.
const oss_pair& oss_native_pair() {
    static const oss_pair p = [] {
        oss_pair q{oss_scratch("native"), oss_scratch("twin")};
        testing::write_gpt_oss_pair(oss_bf16(), q.native, q.twin);
        return q;
    }();
    return p;
}

/// Options for `f`; attention is quantized by rule on both sides (the native source leaves it
/// dense, so it is kept dense unless a rule says otherwise; GPTQ quantizes every block linear).
convert_options oss_options(output_format f, quant_spec s) {
    convert_options o;
    o.format = f;
    o.rules.default_scheme = s;
    o.rules.quantize(selector("re:.*\\.self_attn\\..*"), s);
    o.threads = 2;
    return o;
}

/// Every tensor of the checkpoint in `dir`, by name: dtype, shape and bytes.
std::map<std::string, std::tuple<dtype, shape_t, std::vector<std::byte>>> oss_tensors(const std::string& dir) {
    checkpoint_source s(dir);
    std::map<std::string, std::tuple<dtype, shape_t, std::vector<std::byte>>> m;
    for (const auto& t : s.tensors()) {
        const tensor_view v = s.view(t.name);
        m[t.name] = {v.type, v.shape, std::vector<std::byte>(v.bytes.begin(), v.bytes.end())};
    }
    return m;
}

/// Rewrites the native checkpoint's shard through `edit` (the tensors in file order, which it
/// may rename, retype, reshape, drop or add to) into a fresh folder `name`.
struct oss_tensor {
    std::string name;
    dtype type;
    shape_t shape;
    std::vector<std::byte> bytes;
};
std::string oss_edited(const std::string& name, const std::function<void(std::vector<oss_tensor>&)>& edit,
                       const std::function<void(json&)>& edit_config = {}) {
    const std::string& from = oss_native_pair().native;
    const std::string dir = oss_scratch(name);
    io::make_directory(dir);
    for (const auto& f : io::list_directory(from))
        if (f != "model.safetensors" && f != "config.json") io::copy_file(from + "/" + f, dir + "/" + f);
    json cfg = json::parse(io::read_file(from + "/config.json"));
    if (edit_config) edit_config(cfg);
    io::write_file(dir + "/config.json", cfg.dump({.indent = 2}));
    std::vector<oss_tensor> ts;
    {
        checkpoint_source s(from);
        for (const auto& t : s.tensors()) {
            const tensor_view v = s.view(t.name);
            ts.push_back({t.name, t.type, t.shape, std::vector<std::byte>(v.bytes.begin(), v.bytes.end())});
        }
    }
    edit(ts);
    std::vector<safetensors::tensor_spec> specs;
    for (const auto& t : ts) specs.push_back({t.name, t.type, t.shape});
    safetensors::writer w(dir + "/model.safetensors", specs, safetensors::default_metadata(), {.sync = false});
    for (const auto& t : ts) w.write(t.name, t.bytes);
    w.finish();
    return dir;
}

oss_tensor& oss_find(std::vector<oss_tensor>& ts, const std::string& name) {
    for (auto& t : ts)
        if (t.name == name) return t;
    FAIL("no tensor " << name);
    return ts.front();
}

/// The plan of `dir` is refused with a first refusal holding every one of `texts`, and
/// convert() throws and writes nothing.
void expect_oss_refused(const std::string& dir, std::initializer_list<std::string> texts) {
    const convert_options o = oss_options(output_format::compressed_tensors, {4, 64, true, scale_method::minmax, std::nullopt});
    const plan p = plan_conversion(checkpoint_source(dir), o);
    REQUIRE(p.refused());
    CAPTURE(p.refusals.front());
    for (const std::string& t : texts) CHECK(p.refusals.front().find(t) != std::string::npos);
    const std::string out = dir + "-out";
    CHECK_THROWS_AS(convert(dir, out, o), unsupported_error);
    CHECK_FALSE(io::path_exists(out));
}

const char* const oss_layer0 = "model.layers.0.mlp.experts.";

}  // namespace

TEST_CASE("MXFP4 row decode: every code and scale by the definition, low nibble first; NaN and overflow named by group") {
    std::vector<std::uint8_t> blocks(16 * 3), scales = {0, 127, 200};
    for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<std::uint8_t>(i * 37 + 11);
    std::vector<float> out(96);
    CHECK(decode_mxfp4_row(blocks.data(), scales.data(), 3, out.data()) == -1);
    for (int c = 0; c < 96; ++c) {
        const unsigned byte = blocks[static_cast<std::size_t>(c / 32 * 16 + (c % 32) / 2)];
        const unsigned code = c % 2 ? byte >> 4 : byte & 15u;
        CAPTURE(c);
        CHECK(out[static_cast<std::size_t>(c)] ==
              static_cast<float>(std::ldexp(testing::e2m1_by_definition(code), scales[static_cast<std::size_t>(c / 32)] - 127)));
    }
    for (unsigned code = 0; code < 16; ++code) {  // each code alone, scale 2^0
        std::uint8_t b[16] = {static_cast<std::uint8_t>(code | (code << 4))}, s = 127;
        float o[32];
        decode_mxfp4_row(b, &s, 1, o);
        CHECK(o[0] == testing::e2m1_by_definition(code));
        CHECK(o[1] == testing::e2m1_by_definition(code));
    }
    scales = {127, 0xFF, 127};
    CHECK(decode_mxfp4_row(blocks.data(), scales.data(), 3, out.data()) == 1);
    std::vector<std::uint8_t> big(16, 0x77);  // 6 * 2^127 overflows float32; 1.5 * 2^127 does not
    std::uint8_t top = 254;
    CHECK(decode_mxfp4_row(big.data(), &top, 1, out.data()) == 0);
    std::fill(big.begin(), big.end(), std::uint8_t{0x33});
    CHECK(decode_mxfp4_row(big.data(), &top, 1, out.data()) == -1);
    CHECK(out[0] == std::ldexp(1.5f, 127));
}

TEST_CASE("MXFP4 row decode into BF16: the float decode's values rounded to BF16 and its bad group, every byte and scale") {
    std::vector<std::uint8_t> blocks(256);  // 16 groups: every byte value, so every code in both nibbles
    for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<std::uint8_t>(i);
    std::vector<float> want(512);
    std::vector<std::uint16_t> got(512);
    for (unsigned scale = 0; scale < 256; ++scale) {
        CAPTURE(scale);
        std::vector<std::uint8_t> scales(16, static_cast<std::uint8_t>(scale));
        scales[0] = 127;  // a finite first group, so a bad group is found past it
        const std::int64_t bad = decode_mxfp4_row(blocks.data(), scales.data(), 16, want.data());
        CHECK(decode_mxfp4_row_bf16(blocks.data(), scales.data(), 16, got.data()) == bad);
        std::size_t diff = 0;
        for (std::size_t c = 0; c < want.size(); ++c) diff += got[c] != float_to_bf16(want[c]);
        CHECK(diff == 0);
    }
    // a group whose scale overflows only its large codes is bad only if one of them occurs
    std::vector<std::uint8_t> small(16, 0x33);
    std::uint8_t top = 254;
    CHECK(decode_mxfp4_row_bf16(small.data(), &top, 1, got.data()) == -1);
    small[9] = 0x73;
    CHECK(decode_mxfp4_row_bf16(small.data(), &top, 1, got.data()) == 0);
}

TEST_CASE("gpt-oss native: each blocks / scales pair is one fused tensor of the bf16 orientation; the dense linears stay dense") {
    const checkpoint_source s(oss_native_pair().native);
    CHECK(s.fp8().kind == fp8_source_kind::gpt_oss_mxfp4);
    CHECK(s.fp8().refusals.empty());
    const std::string p = oss_layer0;
    const source_tensor* gate_up = nullptr;
    for (const auto& t : s.model_tensors()) {
        CHECK_FALSE(t.name.ends_with("_blocks"));
        CHECK_FALSE(t.name.ends_with("_scales"));
        if (t.name == p + "gate_up_proj") gate_up = &t;
    }
    REQUIRE(gate_up);
    CHECK(gate_up->type == dtype::F4);
    CHECK(gate_up->shape == shape_t{4, 128, 256});  // [E, H, 2I], as the bf16 checkpoint holds it
    REQUIRE(gate_up->scale);
    CHECK(gate_up->scale->name == p + "gate_up_proj_scales");
    CHECK(gate_up->scale->codes == p + "gate_up_proj_blocks");
    CHECK(s.view(p + "gate_up_proj").bytes.size() == 4u * 256 * 128 / 2);  // the blocks' bytes
    for (const char* m : {"self_attn.q_proj", "self_attn.o_proj", "mlp.router"}) {
        const std::string w = std::string("model.layers.1.") + m + ".weight";
        CHECK(std::find(s.fp8().kept_dense.begin(), s.fp8().kept_dense.end(), w) != s.fp8().kept_dense.end());
    }
    CHECK(s.fp8().not_converted.size() == 4);
    convert_options o;
    o.format = output_format::compressed_tensors;
    o.rules.default_scheme = {4, 64, true, scale_method::minmax, std::nullopt};
    const plan pl = plan_conversion(s, o);
    if (pl.refused()) MESSAGE(pl.refusals.front());
    REQUIRE_FALSE(pl.refused());
    std::ostringstream text;
    print_plan(text, pl);
    CHECK(text.str().find("model.layers.0.mlp.experts.2.up_proj.weight [128, 128] F4 (MXFP4 blocks) x E8M0 scale per 32 "
                          "columns (from model.layers.0.mlp.experts.gate_up_proj expert 2) -> quantize") != std::string::npos);
    CHECK(text.str().find("model.layers.0.self_attn.q_proj.weight [128, 128] BF16 -> keep") != std::string::npos);
}

TEST_CASE("gpt-oss native: every safetensors format writes what converting its dequantized bf16 twin writes") {
    const oss_pair& pr = oss_native_pair();
    struct fmt_case {
        output_format f;
        quant_spec s;
    };
    const fmt_case cases[] = {{output_format::gptq, {4, 64, true, scale_method::minmax, std::nullopt}},
                              {output_format::awq, {4, 64, false, scale_method::minmax, std::nullopt}},
                              {output_format::compressed_tensors, {4, 64, true, scale_method::mse, std::nullopt}},
                              {output_format::compressed_tensors_fp8, {8, -1, true, scale_method::minmax, std::nullopt}},
                              {output_format::fp8, {8, 128, true, scale_method::minmax, std::nullopt}},
                              {output_format::compressed_tensors_w8a8, {8, -1, true, scale_method::minmax, std::nullopt}},
                              {output_format::compressed_tensors_nvfp4, {4, 16, true, scale_method::minmax, std::nullopt}},
                              {output_format::compressed_tensors_mxfp4, {4, 32, true, scale_method::minmax, std::nullopt}}};
    for (const auto& c : cases) {
        const std::string fmt(format_name(c.f));
        CAPTURE(fmt);
        const std::string a = oss_scratch("a-" + fmt), b = oss_scratch("b-" + fmt);
        const conversion_result ra = convert(pr.native, a, oss_options(c.f, c.s));
        const conversion_result rb = convert(pr.twin, b, oss_options(c.f, c.s));
        const auto got = oss_tensors(a), want = oss_tensors(b);
        CHECK(got.size() == want.size());
        for (const auto& w : want) {
            const std::string& name = w.first;  // no structured bindings in CAPTURE (clang 14)
            CAPTURE(name);
            const auto it = got.find(name);
            REQUIRE(it != got.end());
            CHECK(it->second == w.second);
        }
        CHECK(testing::config_with_sorted_targets(a) == testing::config_with_sorted_targets(b));
        // the same SNR per layer (the report follows each file's data order, which differs)
        std::map<std::string, double> snr_a, snr_b;
        for (const auto& t : ra.report.tensors) snr_a[t.name] = t.snr_db;
        for (const auto& t : rb.report.tensors) snr_b[t.name] = t.snr_db;
        CHECK(snr_a.size() == ra.report.tensors.size());
        CHECK(snr_a == snr_b);
        CHECK(got.contains(std::string(oss_layer0) + "3.down_proj." +
                           (c.f == output_format::gptq || c.f == output_format::awq ? "qweight"
                            : c.f == output_format::fp8 || c.f == output_format::compressed_tensors_fp8 ||
                                      c.f == output_format::compressed_tensors_w8a8
                                ? "weight"
                                : "weight_packed")));
    }
}

TEST_CASE("gpt-oss native kept dense: each expert's gate / up / down is its twin's bf16, mapped or copied, one or two threads") {
    const oss_pair& pr = oss_native_pair();
    convert_options o = oss_options(output_format::compressed_tensors, {4, 64, true, scale_method::minmax, std::nullopt});
    o.rules.keep(selector("re:.*\\.experts\\..*"));
    const std::string a = oss_scratch("keep-a"), b = oss_scratch("keep-b"), c = oss_scratch("keep-c");
    o.threads = 1;
    convert(pr.native, a, o);
    convert(pr.twin, b, o);
    o.threads = 2;
    o.read = source_read::copied;
    convert(pr.native, c, o);
    const auto x = oss_tensors(a), y = oss_tensors(b), z = oss_tensors(c);
    CHECK(x == y);
    CHECK(z == y);
    const auto& down = x.at(std::string(oss_layer0) + "1.down_proj.weight");
    CHECK(std::get<0>(down) == dtype::BF16);
    CHECK(std::get<1>(down) == shape_t{128, 128});
}

TEST_CASE("gpt-oss native: a NaN or overflowing E8M0 scale fails the conversion naming expert, row and group; nothing written") {
    for (const std::uint8_t bad : {std::uint8_t{0xFF}, std::uint8_t{0xFE}}) {
        CAPTURE(int(bad));
        const std::string n = oss_scratch("bad-n-" + std::to_string(bad)), t = oss_scratch("bad-t-" + std::to_string(bad));
        testing::gpt_oss_native_options go;
        go.bad_scale = bad;
        testing::write_gpt_oss_pair(oss_bf16(), n, t, go);
        const std::string out = n + "-out";
        try {
            convert(n, out, oss_options(output_format::compressed_tensors, {4, 64, true, scale_method::minmax, std::nullopt}));
            FAIL("converted");
        } catch (const format_error& e) {
            const std::string what = e.what();
            CAPTURE(what);
            CHECK(what.find("model.safetensors") != std::string::npos);
            CHECK(what.find("model.layers.0.mlp.experts.down_proj_scales") != std::string::npos);
            CHECK(what.find("expert 1, row 3, group 1") != std::string::npos);
            CHECK(what.find(bad == 0xFF ? "0xFF is NaN" : "overflow float32") != std::string::npos);
        }
        CHECK_FALSE(io::path_exists(out));
    }
}

TEST_CASE("gpt-oss native refusals name the file, the tensor and the reason; nothing written") {
    const std::string gu = std::string(oss_layer0) + "gate_up_proj", dn = std::string(oss_layer0) + "down_proj";
    SUBCASE("blocks that are not U8 [E, N, K/32, 16]") {
        expect_oss_refused(oss_edited("blocks-i8", [&](auto& ts) { oss_find(ts, gu + "_blocks").type = dtype::I8; }),
                           {"model.safetensors", gu + "_blocks", "U8 [E, N, K/32, 16]"});
        expect_oss_refused(oss_edited("blocks-8", [&](auto& ts) { oss_find(ts, gu + "_blocks").shape = {4, 256, 8, 8}; }),
                           {gu + "_blocks", "[4, 256, 8, 8]"});
    }
    SUBCASE("scales missing, misshapen or not U8") {
        expect_oss_refused(oss_edited("no-scales",
                                      [&](auto& ts) {
                                          std::erase_if(ts, [&](const oss_tensor& t) { return t.name == dn + "_scales"; });
                                      }),
                           {dn + "_blocks", "without their E8M0 scales"});
        expect_oss_refused(oss_edited("scales-shape",
                                      [&](auto& ts) {
                                          auto& s = oss_find(ts, dn + "_scales");
                                          s.shape = {4, 4, 128};
                                      }),
                           {dn + "_blocks", "must be U8 [4, 128, 4]", "[4, 4, 128]"});
        expect_oss_refused(oss_edited("scales-f16",
                                      [&](auto& ts) {
                                          auto& s = oss_find(ts, dn + "_scales");
                                          s.type = dtype::I8;
                                      }),
                           {dn + "_blocks", "got I8"});
    }
    SUBCASE("scales without blocks, blocks outside the experts, a dense tensor beside its blocks") {
        expect_oss_refused(oss_edited("orphan",
                                      [&](auto& ts) {
                                          std::erase_if(ts, [&](const oss_tensor& t) { return t.name == dn + "_blocks"; });
                                      }),
                           {dn + "_scales", "without their MXFP4 blocks"});
        expect_oss_refused(oss_edited("attn-blocks",
                                      [&](auto& ts) {
                                          ts.push_back({"model.layers.0.self_attn.o_proj_blocks", dtype::U8, {128, 4, 16},
                                                        std::vector<std::byte>(128 * 64)});
                                      }),
                           {"model.layers.0.self_attn.o_proj_blocks", "only read for gpt-oss's fused experts"});
        expect_oss_refused(oss_edited("dense-beside",
                                      [&](auto& ts) {
                                          ts.push_back({dn, dtype::BF16, {4, 128, 128}, std::vector<std::byte>(4 * 128 * 128 * 2)});
                                      }),
                           {dn, "a dense tensor beside its MXFP4 blocks"});
    }
    SUBCASE("quant_method mxfp4 on another architecture") {
        expect_oss_refused(oss_edited(
                               "qwen", [](auto&) {},
                               [](json& c) {
                                   c.set("model_type", "qwen3_moe");
                                   c.set("architectures", json::array({"Qwen3MoeForCausalLM"}));
                               }),
                           {"config.json", "read for gpt-oss (model_type gpt_oss) only"});
    }
}

TEST_CASE("demo gpt_oss_mxfp4: the gpt_oss demo's weights, experts as MXFP4 blocks; it converts, experts close to the bf16 demo") {
    demo_options o = testing::small_demo();
    o.moe = demo_moe::gpt_oss_mxfp4;
    o.experts = 4;
    o.moe_intermediate = 128;
    o.tied = false;
    const std::string dir = oss_scratch("demo-mxfp4");
    write_demo_checkpoint(dir, o);
    const checkpoint_source mx(dir), bf(oss_bf16());
    CHECK(mx.fp8().kind == fp8_source_kind::gpt_oss_mxfp4);
    CHECK(mx.fp8().refusals.empty());
    CHECK(mx.view(std::string(oss_layer0) + "gate_up_proj_blocks").shape == shape_t{4, 256, 4, 16});
    for (const auto& t : bf.tensors()) {  // everything but the experts' weights: the same bytes
        if (t.name.ends_with("_proj")) continue;
        CAPTURE(t.name);
        const tensor_view a = mx.view(t.name), b = bf.view(t.name);
        REQUIRE(a.bytes.size() == b.bytes.size());
        CHECK(std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0);
    }
    // Kept dense, each expert is the bf16 demo's expert to MXFP4 precision (E2M1: about 18 dB).
    convert_options c = oss_options(output_format::compressed_tensors, {4, 64, true, scale_method::minmax, std::nullopt});
    c.rules.keep(selector("re:.*\\.experts\\..*"));
    const std::string a = oss_scratch("demo-mx-keep"), b = oss_scratch("demo-bf-keep");
    convert(dir, a, c);
    convert(oss_bf16(), b, c);
    const checkpoint_source x(a), y(b);
    for (const char* piece : {"0.gate_proj.weight", "2.up_proj.weight", "3.down_proj.weight"}) {
        const tensor_view u = x.view(std::string(oss_layer0) + piece), v = y.view(std::string(oss_layer0) + piece);
        REQUIRE(u.bytes.size() == v.bytes.size());
        double sig = 0, err = 0;
        for (std::size_t i = 0; i < u.bytes.size() / 2; ++i) {
            std::uint16_t p, q;
            std::memcpy(&p, u.bytes.data() + 2 * i, 2);
            std::memcpy(&q, v.bytes.data() + 2 * i, 2);
            const double ref = bf16_to_float(q), got = bf16_to_float(p);
            sig += ref * ref;
            err += (ref - got) * (ref - got);
        }
        const double snr = 10 * std::log10(sig / err);
        CAPTURE(piece);
        CHECK(snr > 15.0);
        CHECK(snr < 30.0);  // quantized, not copied
    }
}

// The loader rule of serving_check.hpp detail::gpt_oss_per_expert_warning: vLLM
// model_executor/models/gpt_oss.py GptOssModel._load_weights_other (@1ad84fea) loads gpt-oss
// experts only as the fused w13_weight / w2_weight (hf_to_vllm_mapper of experts.gate_up_proj /
// down_proj) and skips every other name, and transformers' conversion_mapping.py has no gpt_oss
// rule that gathers per-expert names. A plan that cuts gpt-oss's experts says so, whatever the
// format and whether they are quantized or kept; a Qwen MoE whose fused experts are cut the same
// way does not (vLLM qwen3_moe.py Qwen3MoeModel.load_weights maps per-expert names through
// FusedMoE.make_expert_params_mapping).
TEST_CASE("gpt-oss cut into per-expert linears: the plan warns that vLLM's gpt-oss loader reads fused experts only") {
    const auto carries = [](const plan& p) {
        return std::any_of(p.warnings.begin(), p.warnings.end(), [](const std::string& w) {
            return w.find("gpt_oss.py _load_weights_other") != std::string::npos &&
                   w.find("<layer>.mlp.experts.<e>.gate_proj") != std::string::npos;
        });
    };
    const checkpoint_source bf(oss_bf16()), native(oss_native_pair().native);
    struct fmt_case {
        output_format f;
        quant_spec s;
    };
    const fmt_case cases[] = {{output_format::gptq, {4, 64, true, scale_method::minmax, std::nullopt}},
                              {output_format::compressed_tensors_fp8, {8, -1, true, scale_method::minmax, std::nullopt}},
                              {output_format::compressed_tensors_nvfp4, {4, 16, true, scale_method::minmax, std::nullopt}}};
    for (const auto& c : cases) {
        const std::string fmt(format_name(c.f));
        CAPTURE(fmt);
        convert_options o = oss_options(c.f, c.s);
        const plan q = plan_conversion(bf, o);
        REQUIRE_FALSE(q.refused());
        CHECK(carries(q));
        CHECK(carries(plan_conversion(native, o)));
        if (c.f == output_format::gptq) continue;  // GPTQ quantizes every block linear: keeping is refused
        o.rules.keep(selector("re:.*\\.experts\\..*"));  // kept bf16, still one tensor per expert
        const plan k = plan_conversion(bf, o);
        REQUIRE_FALSE(k.refused());
        CHECK(carries(k));
    }
    demo_options d = testing::small_demo();
    d.moe = demo_moe::qwen_moe_fused;
    d.experts = 4;
    d.moe_intermediate = 128;
    const std::string qwen = oss_scratch("qwen-fused");
    write_demo_checkpoint(qwen, d);
    const plan p =
        plan_conversion(checkpoint_source(qwen), oss_options(output_format::gptq, {4, 64, true, scale_method::minmax, std::nullopt}));
    REQUIRE_FALSE(p.refused());
    REQUIRE(std::any_of(p.items.begin(), p.items.end(), [](const plan_item& it) { return it.cut.has_value(); }));
    CHECK_FALSE(carries(p));
}

TEST_CASE("gpt-oss native: an expert cut's amax read from its MXFP4 codes is the amax of its decoded BF16 rows") {
    const checkpoint_source s(oss_native_pair().native);
    const std::string fused = std::string(oss_layer0) + "gate_up_proj";
    shape_t full;
    for (const auto& x : s.model_tensors())
        if (x.name == fused) full = x.shape;
    REQUIRE(full.size() == 3);
    const std::int64_t E = full[0], k = full[1], n = full[2];
    for (std::int64_t e = 0; e < E; ++e)
        for (std::int64_t first : {std::int64_t{0}, std::int64_t{1}}) {  // gate = even rows, up = odd
            CAPTURE(e);
            CAPTURE(first);
            const expert_cut cut{e, true, first, 2};
            const shape_t shape{n / 2, k};
            const owned_tensor rows = s.read_expert(fused, cut, "cut", shape, true);
            for (const auto& [r0, r1] : {std::pair<std::int64_t, std::int64_t>{0, n / 2}, {3, 9}}) {
                float want = 0.0f;
                for (std::int64_t i = r0 * k; i < r1 * k; ++i) {
                    std::uint16_t h;
                    std::memcpy(&h, rows.bytes.data() + 2 * i, 2);
                    want = std::max(want, std::fabs(bf16_to_float(h)));
                }
                const std::optional<float> got = s.mxfp4_cut_abs_max(fused, cut, shape, r0, r1);
                REQUIRE(got.has_value());
                CHECK(*got == want);
                CHECK(want > 0.0f);
            }
        }
    CHECK_FALSE(s.mxfp4_cut_abs_max(std::string(oss_layer0) + "nothing", expert_cut{0, true, 0, 2}, {n / 2, k}, 0, 1));
    CHECK_FALSE(s.mxfp4_cut_abs_max(fused, expert_cut{E, true, 0, 2}, {n / 2, k}, 0, 1));  // no such expert
    // a scale that may decode to infinity leaves it to read_expert, which names the group
    const std::string big = oss_edited("big-scale", [&](std::vector<oss_tensor>& ts) {
        oss_find(ts, std::string(oss_layer0) + "gate_up_proj_scales").bytes[0] = std::byte{0xFE};
    });
    const checkpoint_source b(big);
    CHECK_FALSE(b.mxfp4_cut_abs_max(fused, expert_cut{0, true, 0, 2}, {n / 2, k}, 0, 1));
    CHECK(b.mxfp4_cut_abs_max(fused, expert_cut{0, true, 0, 2}, {n / 2, k}, 1, 2));  // row 0 is not in rows [1, 2)
}
