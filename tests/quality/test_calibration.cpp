// --hessians end to end: a Hessian file drives GPTQ (with act-order) inside the converter,
// layers without a Hessian fall back to round-to-nearest and are listed, and the written GPTQ
// checkpoint decodes (through g_idx) to a lower output error than round-to-nearest.
#include <doctest/doctest.h>

#include <string>
#include <unistd.h>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/writer.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/convert/hessians.hpp"
#include "quality/quality_support.hpp"

using namespace qforge;

namespace {

std::string fresh(const std::string& name) {
    const std::string p = "/tmp/qforge-test-quality-" + std::to_string(::getpid()) + "-" + name;
    if (io::path_exists(p)) io::remove_tree(p);
    return p;
}

constexpr std::int64_t hidden = 128;
const std::vector<std::string> with_hessian = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                               "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj"};

struct setup {
    std::string model = fresh("model");
    std::string hess = fresh("h.safetensors");
    std::vector<double> h = quality_test::hessian_of(quality_test::ar_inputs(512, hidden, 0.9, 5), 512, hidden);

    setup() {
        demo_options d;
        d.hidden = hidden;
        d.intermediate = 256;
        d.layers = 1;
        d.heads = 4;
        d.kv_heads = 2;
        d.vocab = 256;
        d.shards = 1;
        write_demo_checkpoint(model, d);
        std::vector<safetensors::tensor_spec> specs;
        for (const auto& m : with_hessian)
            specs.push_back({"model.layers.0." + m + ".hessian", dtype::F64, {hidden, hidden}});
        specs.push_back({"model.layers.0.self_attn.q_proj.nsamples", dtype::I64, {}});
        safetensors::writer w(hess, specs);
        for (const auto& m : with_hessian) w.write("model.layers.0." + m + ".hessian", std::as_bytes(std::span(h)));
        const std::int64_t n = 512;
        w.write("model.layers.0.self_attn.q_proj.nsamples", std::as_bytes(std::span(&n, 1)));
        w.finish();
    }
    ~setup() {
        io::remove_tree(model);
        (void)::unlink(hess.c_str());
    }
};

convert_options options(const std::string& hessians, bool act_order) {
    convert_options o;
    o.format = output_format::gptq;
    o.rules.default_scheme = quant_spec{4, 64, true, scale_method::lsq, dtype::F16};
    o.threads = 2;
    o.hessians = hessians;
    o.gptq.act_order = act_order;
    return o;
}

quantized_tensor read_linear(const conversion_result& r, const std::string& dir, const std::string& module) {
    safetensors::reader rd(dir + "/" + r.shards.at(0));
    std::vector<tensor_view> views;
    for (const char* s : {".qweight", ".qzeros", ".scales", ".g_idx"}) views.push_back(rd.view(module + s));
    quantized_tensor q = gptq_layout<4>().unpack(views, module, layer_params{64, true});
    return q;  // views die with the reader; q owns its data
}

std::vector<float> source_weight(const std::string& model, const std::string& module) {
    safetensors::reader rd(model + "/model.safetensors");
    const tensor_view v = rd.view(module + ".weight");
    std::vector<float> out(static_cast<std::size_t>(v.numel()));
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_float(v.data<std::uint16_t>()[i]);
    return out;
}

}  // namespace

TEST_CASE("--hessians: GPTQ with act-order converts end to end and decodes through g_idx") {
    const setup s;
    const std::string out_rtn = fresh("rtn"), out_gptq = fresh("gptq");
    const conversion_result rtn = convert(s.model, out_rtn, options({}, false));
    const conversion_result g = convert(s.model, out_gptq, options(s.hess, true));
    CHECK(g.gptq_layers.size() == with_hessian.size());
    REQUIRE(g.rtn_layers.size() == 1);
    CHECK(g.rtn_layers[0] == "model.layers.0.mlp.down_proj");
    CHECK(rtn.gptq_layers.empty());

    json cfg = json::parse(io::read_file(out_gptq + "/config.json"));
    CHECK(cfg["quantization_config"]["desc_act"].as_bool());
    json side = json::parse(io::read_file(out_gptq + "/quantize_config.json"));
    CHECK(side["desc_act"].as_bool());
    json cfg_rtn = json::parse(io::read_file(out_rtn + "/config.json"));
    CHECK_FALSE(cfg_rtn["quantization_config"]["desc_act"].as_bool());

    for (const std::string m : {"self_attn.q_proj", "mlp.up_proj"}) {
        CAPTURE(m);
        const std::string module = "model.layers.0." + m;
        const std::vector<float> w = source_weight(s.model, module);
        const quantized_tensor qg = read_linear(g, out_gptq, module);
        const quantized_tensor qr = read_linear(rtn, out_rtn, module);
        CHECK_FALSE(std::is_sorted(qg.g_idx.begin(), qg.g_idx.end()));
        const double eg = quality_test::output_error(w, qg, s.h);
        const double er = quality_test::output_error(w, qr, s.h);
        MESSAGE(m << ": GPTQ/RTN output error through the written checkpoint = " << eg / er);
        CHECK(eg < 0.7 * er);
    }
    io::remove_tree(out_rtn);
    io::remove_tree(out_gptq);
}

TEST_CASE("--hessians: a Hessian of the wrong size or a stray tensor is refused naming the file") {
    const setup s;
    const std::string bad = fresh("bad.safetensors");
    {
        const std::vector<double> small(64 * 64, 0.0);
        safetensors::writer w(bad, {{"model.layers.0.self_attn.q_proj.hessian", dtype::F64, {64, 64}}});
        w.write("model.layers.0.self_attn.q_proj.hessian", std::as_bytes(std::span(small)));
        w.finish();
    }
    const std::string out = fresh("bad-out");
    CHECK_THROWS_WITH_AS(convert(s.model, out, options(bad, false)), doctest::Contains("bad.safetensors"), shape_error);
    CHECK_FALSE(io::path_exists(out));
    (void)::unlink(bad.c_str());
    {
        const std::vector<float> v(4, 0.0f);
        safetensors::writer w(bad, {{"model.layers.0.self_attn.q_proj.weight", dtype::F32, {4}}});
        w.write("model.layers.0.self_attn.q_proj.weight", std::as_bytes(std::span(v)));
        w.finish();
    }
    CHECK_THROWS_AS(hessian_file{bad}, format_error);
    (void)::unlink(bad.c_str());
    hessian_file hf(s.hess);
    CHECK(hf.layers().size() == with_hessian.size());
    CHECK(hf.nsamples("model.layers.0.self_attn.q_proj").value() == 512.0);
    CHECK_FALSE(hf.nsamples("model.layers.0.mlp.up_proj").has_value());
    CHECK_FALSE(hf.find("model.layers.0.mlp.down_proj", 256).has_value());
}
