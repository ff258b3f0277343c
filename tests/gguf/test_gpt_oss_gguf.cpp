// HF gpt-oss -> GGUF architecture "gpt-oss", as llama.cpp loads it:
//  - names and shapes: LC src/models/openai-moe.cpp llama_model_openai_moe::load_arch_tensors
//    (attn_sinks {n_head}, attn_output.bias, post_attention_norm and no ffn_norm,
//    ffn_gate_inp.{weight,bias}, ffn_{gate,up}_exps {n_embd, n_ff_exp, n_expert} and their
//    biases {n_ff_exp, n_expert}, ffn_down_exps {n_ff_exp, n_embd, n_expert} + bias
//    {n_embd, n_expert}, output required);
//  - keys: LC conversion/gpt_oss.py GptOssModel.set_gguf_parameters and conversion/base.py
//    TextModel.set_gguf_parameters; load_arch_hparams requires expert_feed_forward_length and
//    attention.sliding_window;
//  - the expert split: GptOssModel.modify_tensors, gate = gate_up[..., ::2] and up =
//    gate_up[..., 1::2] (weights and biases), its MXFP4 repack_mxfp4 the same on the blocks' rows;
//  - types: TextModel.prepare_tensors keeps every 1-D tensor, the router and every tensor not
//    named .weight (the 2-D expert biases) F32.
// The values are checked against the source read here by its own definition (bf16 [E, H, 2I]
// [in, out]; the native MXFP4 checkpoint's decoded twin, tests/support/gpt_oss_checkpoint.hpp).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/convert/gguf/converter.hpp"
#include "qforge/convert/gguf/decode.hpp"
#include "qforge/io/gguf/reader.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/writer.hpp"
#include "support/bf16_values.hpp"
#include "support/checkpoint_fixture.hpp"
#include "support/gpt_oss_checkpoint.hpp"

using namespace qforge;
using namespace qforge::gguf;

namespace {

std::string oss_gguf_scratch(const std::string& name) {
    static const testing::scratch_root root("gpt-oss-gguf");
    return root.fresh(name);
}

/// The generator's bf16 gpt-oss: two layers, hidden 128, 4 heads of 32, 4 experts of 128.
const std::string& oss_gguf_bf16() {
    static const std::string dir = [] {
        demo_options o = testing::small_demo();
        o.moe = demo_moe::gpt_oss;
        o.experts = 4;
        o.moe_intermediate = 128;
        const std::string d = oss_gguf_scratch("bf16");
        write_demo_checkpoint(d, o);
        return d;
    }();
    return dir;
}

/// The native MXFP4 checkpoint made from it and its decoded twin, written once.
const std::pair<std::string, std::string>& oss_gguf_native() {
    static const std::pair<std::string, std::string> p = [] {
        std::pair<std::string, std::string> q{oss_gguf_scratch("native"), oss_gguf_scratch("twin")};
        testing::write_gpt_oss_pair(oss_gguf_bf16(), q.first, q.second);
        return q;
    }();
    return p;
}

gguf::convert_options oss_gguf_options(const char* type) {
    gguf::convert_options o;
    o.type = *parse_file_type(type);
    o.allow_no_vocab = true;
    return o;
}

/// Every value of tensor `name` of a bf16 safetensors file as float.
std::vector<float> oss_source(const std::string& dir, const std::string& name) {
    return testing::bf16_values(checkpoint_source(dir).view(name));
}

const tensor_entry& oss_tensor(const reader& r, const std::string& name) {
    const tensor_entry* t = r.find_tensor(name);
    REQUIRE_MESSAGE(t, name);
    return *t;
}

std::uint32_t oss_u32(const reader& r, const std::string& key) {
    const value* v = r.find(key);
    REQUIRE_MESSAGE(v, key);
    REQUIRE_MESSAGE(v->as<std::uint32_t>().has_value(), key);
    return *v->as<std::uint32_t>();
}

/// Each expert's gate / up / down as the GGUF stacks them ([e][row][col], rows = out features),
/// cut from the [E, H, 2I] / [E, I, H] ([in, out]) source by GptOssModel's rule.
struct oss_expert_weights {
    std::vector<float> gate, up, down, gate_bias, up_bias, down_bias;
};

oss_expert_weights oss_split(const std::string& dir, int layer, std::int64_t E, std::int64_t H, std::int64_t I) {
    const std::string p = "model.layers." + std::to_string(layer) + ".mlp.experts.";
    const std::vector<float> gu = oss_source(dir, p + "gate_up_proj"), dn = oss_source(dir, p + "down_proj");
    const std::vector<float> gub = oss_source(dir, p + "gate_up_proj_bias"), dnb = oss_source(dir, p + "down_proj_bias");
    oss_expert_weights w;
    for (std::int64_t e = 0; e < E; ++e) {
        for (std::int64_t r = 0; r < I; ++r) {
            for (std::int64_t c = 0; c < H; ++c) {
                w.gate.push_back(gu[static_cast<std::size_t>((e * H + c) * 2 * I + 2 * r)]);
                w.up.push_back(gu[static_cast<std::size_t>((e * H + c) * 2 * I + 2 * r + 1)]);
            }
            w.gate_bias.push_back(gub[static_cast<std::size_t>(e * 2 * I + 2 * r)]);
            w.up_bias.push_back(gub[static_cast<std::size_t>(e * 2 * I + 2 * r + 1)]);
        }
        for (std::int64_t r = 0; r < H; ++r) {
            for (std::int64_t c = 0; c < I; ++c) w.down.push_back(dn[static_cast<std::size_t>((e * I + c) * H + r)]);
            w.down_bias.push_back(dnb[static_cast<std::size_t>(e * H + r)]);
        }
    }
    return w;
}

}  // namespace

TEST_CASE("HF -> GGUF gpt-oss: llama.cpp's names, shapes, keys and F32 tensors, experts split even / odd") {
    const std::string dst = oss_gguf_scratch("q8.gguf");
    const convert_report rep = convert_hf_to_gguf(oss_gguf_bf16(), dst, oss_gguf_options("Q8_0"));
    CHECK(rep.arch == "gpt-oss");
    const reader r(dst);
    CHECK(r.find("general.architecture")->as<std::string>() == "gpt-oss");
    const std::int64_t H = 128, I = 128, E = 4, heads = 4, kv = 2, hd = 32;
    CHECK(oss_u32(r, "gpt-oss.expert_count") == E);
    CHECK(oss_u32(r, "gpt-oss.expert_used_count") == 2);
    CHECK(oss_u32(r, "gpt-oss.expert_feed_forward_length") == I);
    CHECK(oss_u32(r, "gpt-oss.attention.sliding_window") == 128);
    CHECK(oss_u32(r, "gpt-oss.attention.key_length") == hd);
    CHECK(oss_u32(r, "gpt-oss.attention.value_length") == hd);
    CHECK(oss_u32(r, "gpt-oss.block_count") == 2);
    CHECK(r.find("gpt-oss.rope.dimension_count") == nullptr);  // GptOssModel writes none: n_rot = key_length
    CHECK(r.find("gpt-oss.rope.scaling.type") == nullptr);    // the demo has no rope scaling

    struct want {
        std::string name;
        std::vector<std::int64_t> ne;
        bool f32;
    };
    std::vector<want> wants = {{"token_embd.weight", {H, 512}, false}, {"output.weight", {H, 512}, false},
                               {"output_norm.weight", {H}, true}};
    for (int l = 0; l < 2; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        for (want w : std::vector<want>{{"attn_norm.weight", {H}, true},
                                        {"post_attention_norm.weight", {H}, true},
                                        {"attn_q.weight", {H, heads * hd}, false},
                                        {"attn_q.bias", {heads * hd}, true},
                                        {"attn_k.weight", {H, kv * hd}, false},
                                        {"attn_k.bias", {kv * hd}, true},
                                        {"attn_v.weight", {H, kv * hd}, false},
                                        {"attn_v.bias", {kv * hd}, true},
                                        {"attn_output.weight", {heads * hd, H}, false},
                                        {"attn_output.bias", {H}, true},
                                        {"attn_sinks.weight", {heads}, true},
                                        {"ffn_gate_inp.weight", {H, E}, true},
                                        {"ffn_gate_inp.bias", {E}, true},
                                        {"ffn_gate_exps.weight", {H, I, E}, false},
                                        {"ffn_up_exps.weight", {H, I, E}, false},
                                        {"ffn_down_exps.weight", {I, H, E}, false},
                                        {"ffn_gate_exps.bias", {I, E}, true},
                                        {"ffn_up_exps.bias", {I, E}, true},
                                        {"ffn_down_exps.bias", {H, E}, true}}) {
            w.name = b + w.name;
            wants.push_back(w);
        }
        CHECK(r.find_tensor(b + "ffn_norm.weight") == nullptr);  // gpt-oss has post_attention_norm instead
    }
    CHECK(r.tensors().size() == wants.size());
    for (const want& w : wants) {
        const tensor_entry& t = oss_tensor(r, w.name);
        CHECK_MESSAGE(t.ne == w.ne, w.name);
        CHECK_MESSAGE((t.type == ggml_type::f32) == w.f32, w.name << " is " << type_name(t.type));
        if (!w.f32) CHECK_MESSAGE(t.type == ggml_type::q8_0, w.name);
    }

    // F32: the values themselves. gate row r of expert e is column 2r of gate_up [E, H, 2I], up's 2r + 1.
    const std::string f32 = oss_gguf_scratch("f32.gguf");
    convert_hf_to_gguf(oss_gguf_bf16(), f32, oss_gguf_options("F32"));
    const reader rf(f32);
    for (int l = 0; l < 2; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        const oss_expert_weights w = oss_split(oss_gguf_bf16(), l, E, H, I);
        CHECK(read_f32(rf, oss_tensor(rf, b + "ffn_gate_exps.weight")) == w.gate);
        CHECK(read_f32(rf, oss_tensor(rf, b + "ffn_up_exps.weight")) == w.up);
        CHECK(read_f32(rf, oss_tensor(rf, b + "ffn_down_exps.weight")) == w.down);
        CHECK(read_f32(rf, oss_tensor(rf, b + "ffn_gate_exps.bias")) == w.gate_bias);
        CHECK(read_f32(rf, oss_tensor(rf, b + "ffn_up_exps.bias")) == w.up_bias);
        CHECK(read_f32(rf, oss_tensor(rf, b + "ffn_down_exps.bias")) == w.down_bias);
        const std::string p = "model.layers." + std::to_string(l) + ".";
        CHECK(read_f32(rf, oss_tensor(rf, b + "attn_sinks.weight")) == oss_source(oss_gguf_bf16(), p + "self_attn.sinks"));
        CHECK(read_f32(rf, oss_tensor(rf, b + "attn_output.bias")) == oss_source(oss_gguf_bf16(), p + "self_attn.o_proj.bias"));
        CHECK(read_f32(rf, oss_tensor(rf, b + "ffn_gate_inp.bias")) == oss_source(oss_gguf_bf16(), p + "mlp.router.bias"));
        // NEOX RoPE: q rows are not permuted (llama_model_rope_type: LLM_ARCH_OPENAI_MOE is NEOX)
        CHECK(read_f32(rf, oss_tensor(rf, b + "attn_q.weight")) == oss_source(oss_gguf_bf16(), p + "self_attn.q_proj.weight"));
    }
}

TEST_CASE("HF -> GGUF gpt-oss --repack: native MXFP4 experts copied into GGUF MXFP4, value for value") {
    const auto& [native, twin] = oss_gguf_native();
    const std::string dst = oss_gguf_scratch("repack.gguf");
    gguf::convert_options o = oss_gguf_options("Q8_0");
    o.repack = true;
    const convert_report rep = convert_hf_to_gguf(native, dst, o);
    int repacked = 0;
    for (const auto& t : rep.tensors) {
        const bool expert_weight = t.gguf_name.ends_with("_exps.weight");
        CHECK_MESSAGE(t.repacked == expert_weight, t.gguf_name);
        CHECK_MESSAGE((t.chosen == ggml_type::mxfp4) == expert_weight, t.gguf_name);
        repacked += t.repacked;
    }
    CHECK(repacked == 6);
    const reader r(dst);
    const std::int64_t H = 128, I = 128, E = 4;
    for (int l = 0; l < 2; ++l) {
        const std::string b = "blk." + std::to_string(l) + ".";
        const oss_expert_weights w = oss_split(twin, l, E, H, I);  // the blocks decoded by definition
        CHECK(read_f32(r, oss_tensor(r, b + "ffn_gate_exps.weight")) == w.gate);
        CHECK(read_f32(r, oss_tensor(r, b + "ffn_up_exps.weight")) == w.up);
        CHECK(read_f32(r, oss_tensor(r, b + "ffn_down_exps.weight")) == w.down);
        CHECK(read_f32(r, oss_tensor(r, b + "ffn_gate_exps.bias")) == w.gate_bias);
    }
    // Everything else is converted as from the twin: the same bytes.
    const std::string from_twin = oss_gguf_scratch("twin.gguf");
    convert_hf_to_gguf(twin, from_twin, oss_gguf_options("Q8_0"));
    const reader rt(from_twin);
    for (const auto& t : r.tensors()) {
        if (t.name.ends_with("_exps.weight")) continue;
        CHECK_MESSAGE(r.read_bytes(t) == rt.read_bytes(oss_tensor(rt, t.name)), t.name);
    }

    // Without --repack the experts are decoded and requantized by the mix (here all Q8_0).
    const std::string decoded = oss_gguf_scratch("decoded.gguf");
    const convert_report dec = convert_hf_to_gguf(native, decoded, oss_gguf_options("Q8_0"));
    for (const auto& t : dec.tensors) CHECK_MESSAGE(!t.repacked, t.gguf_name);
    CHECK(reader(decoded).find_tensor("blk.0.ffn_gate_exps.weight")->type == ggml_type::q8_0);

    // An override asking another type for a repacked expert would requantize it: refused.
    gguf::convert_options bad = o;
    bad.overrides.push_back({"blk.0.ffn_up_exps.weight", ggml_type::q4_0, false});
    CHECK_THROWS_WITH_AS(convert_hf_to_gguf(native, oss_gguf_scratch("bad.gguf"), bad),
                         doctest::Contains("would requantize them"), unsupported_error);
}

TEST_CASE("HF -> GGUF gpt-oss: YaRN keys as GptOssModel writes them, and what llama.cpp's graph fixes is refused otherwise") {
    auto variant = [](const std::string& tag, auto&& edit) {
        const std::string dir = oss_gguf_scratch(tag);
        io::make_directory(dir);
        for (const auto& f : io::list_directory(oss_gguf_bf16())) io::copy_file(oss_gguf_bf16() + "/" + f, dir + "/" + f);
        json cfg = json::parse(io::read_file(dir + "/config.json"));
        edit(cfg);
        io::write_file(dir + "/config.json", cfg.dump({.indent = 2}));
        return dir;
    };
    const std::string yarn = variant("yarn", [](json& c) {
        c.set("rope_scaling", json::object({{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                                            {"truncate", false}, {"original_max_position_embeddings", 4096}}));
    });
    const std::string dst = oss_gguf_scratch("yarn.gguf");
    convert_hf_to_gguf(yarn, dst, oss_gguf_options("Q8_0"));
    const reader r(dst);
    CHECK(r.find("gpt-oss.rope.scaling.type")->as<std::string>() == "yarn");
    CHECK(r.find("gpt-oss.rope.scaling.factor")->as<float>() == 32.0f);
    CHECK(oss_u32(r, "gpt-oss.rope.scaling.original_context_length") == 4096);
    CHECK(r.find("gpt-oss.rope.scaling.yarn_beta_fast")->as<float>() == 32.0f);
    CHECK(r.find("gpt-oss.rope.scaling.yarn_beta_slow")->as<float>() == 1.0f);

    struct refusal {
        const char* tag;
        std::function<void(json&)> edit;
        const char* says;
    };
    const refusal refusals[] = {
        {"limit", [](json& c) { c.set("swiglu_limit", 8.0); }, "swiglu_limit must be 7.0"},
        {"layers", [](json& c) { c.set("layer_types", json::array({"full_attention", "sliding_attention"})); }, "layer_types[0]"},
        {"tied", [](json& c) { c.set("tie_word_embeddings", true); }, "own output head"},
        {"window", [](json& c) { c.erase("sliding_window"); }, "sliding_window"},
        {"linear", [](json& c) { c.set("rope_scaling", json::object({{"rope_type", "linear"}, {"factor", 2.0}})); }, "yarn is"},
        {"yarn_ctx",
         [](json& c) {
             c.set("rope_scaling", json::object({{"rope_type", "yarn"}, {"factor", 32.0}, {"original_max_position_embeddings", 1e300}}));
         },
         "positive 32-bit integer"},
    };
    // A tensor llama.cpp's gpt-oss loader requires, missing: refused before anything is written.
    for (const char* dropped : {"model.layers.1.self_attn.sinks", "model.layers.0.mlp.experts.down_proj_bias"}) {
        CAPTURE(dropped);
        const std::string dir = oss_gguf_scratch("without");
        io::make_directory(dir);
        for (const auto& f : io::list_directory(oss_gguf_bf16()))
            if (!f.ends_with(".safetensors") && !f.ends_with(".index.json")) io::copy_file(oss_gguf_bf16() + "/" + f, dir + "/" + f);
        const checkpoint_source src(oss_gguf_bf16());
        std::vector<safetensors::tensor_spec> specs;
        for (const auto& t : src.tensors())
            if (t.name != dropped) specs.push_back({t.name, t.type, t.shape});
        safetensors::writer w(dir + "/model.safetensors", specs, safetensors::default_metadata(), {.sync = false});
        for (const auto& t : specs) w.write(t.name, src.view(t.name).bytes);
        w.finish();
        const std::string out = oss_gguf_scratch("without.gguf");
        CHECK_THROWS_WITH_AS(convert_hf_to_gguf(dir, out, oss_gguf_options("Q8_0")), doctest::Contains("needs this tensor"), format_error);
        CHECK(!io::path_exists(out));
    }
    for (const refusal& x : refusals) {
        CAPTURE(x.tag);
        const std::string dir = variant(std::string("bad_") + x.tag, x.edit);
        const std::string out = oss_gguf_scratch(std::string("bad_") + x.tag + ".gguf");
        CHECK_THROWS_WITH(convert_hf_to_gguf(dir, out, oss_gguf_options("Q8_0")), doctest::Contains(x.says));
        CHECK(!io::path_exists(out));
    }
}
