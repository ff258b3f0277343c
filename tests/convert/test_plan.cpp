// Rules and plans: selectors, last-match-wins, defaults, split/untie/rename, every refusal.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <span>
#include <sstream>

#include "qforge/convert/fp8_source.hpp"
#include "qforge/convert/plan.hpp"

using namespace qforge;

namespace {

model_config llama_cfg() {
    model_config c;
    c.hidden_size = 64;
    c.intermediate_size = 128;
    c.num_attention_heads = 8;
    c.num_key_value_heads = 4;
    c.head_dim = 8;
    c.tie_word_embeddings = true;
    return c;
}

std::vector<source_tensor> llama_headers() {
    std::vector<source_tensor> h{{"model.embed_tokens.weight", dtype::BF16, {256, 64}, "a.safetensors"},
                                 {"model.norm.weight", dtype::BF16, {64}, "a.safetensors"}};
    for (const char* l : {"0", "1"}) {
        const std::string p = std::string("model.layers.") + l + ".";
        h.push_back({p + "self_attn.q_proj.weight", dtype::BF16, {64, 64}, "a.safetensors"});
        h.push_back({p + "self_attn.k_proj.weight", dtype::BF16, {32, 64}, "a.safetensors"});
        h.push_back({p + "self_attn.v_proj.weight", dtype::BF16, {32, 64}, "a.safetensors"});
        h.push_back({p + "self_attn.o_proj.weight", dtype::BF16, {64, 64}, "a.safetensors"});
        h.push_back({p + "mlp.gate_proj.weight", dtype::BF16, {128, 64}, "b.safetensors"});
        h.push_back({p + "mlp.up_proj.weight", dtype::BF16, {128, 64}, "b.safetensors"});
        h.push_back({p + "mlp.down_proj.weight", dtype::BF16, {64, 128}, "b.safetensors"});
        h.push_back({p + "input_layernorm.weight", dtype::BF16, {64}, "b.safetensors"});
    }
    return h;
}

const plan_item* find_item(const plan& p, std::string_view name) {
    for (const auto& it : p.items)
        if (it.name == name) return &it;
    return nullptr;
}

quant_spec g64() { return {4, 64, true, scale_method::search, dtype::BF16}; }

}  // namespace

TEST_CASE("selectors: exact, dotted suffix, anchored regex, module names") {
    CHECK(selector("lm_head").matches("lm_head.weight"));
    CHECK(selector("mlp.down_proj").matches("model.layers.3.mlp.down_proj.weight"));
    CHECK_FALSE(selector("down_proj").matches("model.layers.3.mlp.xdown_proj.weight"));
    CHECK(selector("re:.*mlp\\.gate").matches("model.layers.0.mlp.gate.weight"));
    CHECK_FALSE(selector("re:.*mlp\\.gate").matches("model.layers.0.mlp.gate_proj.weight"));
    CHECK_FALSE(selector("re:layers").matches("model.layers.0.mlp.gate.weight"));
    CHECK(selector("re:model\\.(.*)").replace("model.x.weight", "m.$1") == "m.x.weight");
    CHECK(selector("out_proj").replace("a.self_attn.out_proj.weight", "o_proj") == "a.self_attn.o_proj.weight");
    CHECK_THROWS_AS(selector("re:(["), format_error);
}

TEST_CASE("defaults quantize decoder linears and keep embeddings, norms, routers, lm_head") {
    CHECK(default_action("model.layers.0.mlp.down_proj.weight", dtype::BF16, {64, 128}, 0) == default_decision::quantize);
    CHECK(default_action("model.layers.0.mlp.down_proj.bias", dtype::BF16, {64}, 0) == default_decision::keep);
    CHECK(default_action("model.embed_tokens.weight", dtype::BF16, {256, 64}, 0) == default_decision::keep);
    CHECK(default_action("lm_head.weight", dtype::BF16, {256, 64}, 0) == default_decision::keep);
    CHECK(default_action("model.layers.1.input_layernorm.weight", dtype::BF16, {64}, 0) == default_decision::keep);
    CHECK(default_action("model.layers.1.mlp.gate.weight", dtype::BF16, {8, 64}, 8) == default_decision::keep);
    CHECK(default_action("model.layers.1.mlp.gate.weight", dtype::BF16, {128, 64}, 8) == default_decision::quantize);
    CHECK(default_action("vision.proj.weight", dtype::BF16, {128, 64}, 0) == default_decision::uncovered);
}

TEST_CASE("plan: default Llama plan, last match wins, totals") {
    rule_set rules;
    rules.default_scheme = g64();
    rules.keep("re:.*mlp\\..*").quantize("mlp.down_proj", g64());  // the later rule wins for down_proj
    plan p = make_plan(llama_headers(), llama_cfg(), rules, output_format::compressed_tensors);
    REQUIRE_FALSE(p.refused());
    CHECK(find_item(p, "model.layers.0.mlp.gate_proj.weight")->action == plan_action::keep);
    CHECK(find_item(p, "model.layers.0.mlp.down_proj.weight")->action == plan_action::quantize);
    const plan_item* q = find_item(p, "model.layers.1.self_attn.k_proj.weight");
    REQUIRE(q->action == plan_action::quantize);
    REQUIRE(q->outputs.size() == 3);
    CHECK(q->outputs[0].name == "model.layers.1.self_attn.k_proj.weight_packed");
    CHECK(q->outputs[0].shape == shape_t{32, 8});
    CHECK(q->outputs[1].type == dtype::BF16);
    CHECK(p.quantized_count() == 10);
    // gate/up kept dense and the tied head are listed in `ignore` (vLLM needs every linear covered).
    const json& ignore = p.quantization_config.at("ignore");
    CHECK(ignore.size() == 5);
    CHECK(ignore.at(4).as_string() == "lm_head");
    // GPTQ cannot describe dense block linears: the layout's refusal lands in the plan.
    plan g = make_plan(llama_headers(), llama_cfg(), rules, output_format::gptq);
    REQUIRE(g.refused());
    CHECK(g.refusals[0].find("gate_proj") != std::string::npos);
    std::ostringstream os;
    print_plan(os, p);
    CHECK(os.str().find("bits per weight") != std::string::npos);
}

TEST_CASE("plan: fused q/k/v and gate/up split by the config, untie adds a quantized head") {
    std::vector<source_tensor> h{{"model.embedding.weight", dtype::BF16, {256, 64}, "m.safetensors"},
                                 {"model.layers.0.self_attn.q_k_v_proj.weight", dtype::BF16, {128, 64}, "m.safetensors"},
                                 {"model.layers.0.mlp.gate_up_proj.weight", dtype::BF16, {256, 64}, "m.safetensors"}};
    rule_set rules;
    rules.default_scheme = g64();
    rules.split_qkv("q_k_v_proj").split_gate_up().untie("model.embedding.weight").quantize("lm_head", g64());
    plan p = make_plan(h, llama_cfg(), rules, output_format::gptq);
    REQUIRE_FALSE(p.refused());
    const plan_item* k = find_item(p, "model.layers.0.self_attn.k_proj.weight");
    REQUIRE(k);
    CHECK(k->row_begin == 64);
    CHECK(k->row_end == 96);
    CHECK(find_item(p, "model.layers.0.mlp.up_proj.weight")->row_begin == 128);
    const plan_item* head = find_item(p, "lm_head.weight");
    REQUIRE(head);
    CHECK(head->action == plan_action::quantize);
    CHECK(head->source == "model.embedding.weight");
    CHECK(find_item(p, "model.embedding.weight")->action == plan_action::keep);
    CHECK(p.untied);
}

TEST_CASE("plan refusals") {
    rule_set rules;
    rules.default_scheme = g64();
    SUBCASE("fused rows that do not match the config") {
        std::vector<source_tensor> h{{"model.layers.0.self_attn.qkv_proj.weight", dtype::BF16, {120, 64}, "m"}};
        rules.split_qkv();
        plan p = make_plan(h, llama_cfg(), rules, output_format::gptq);
        REQUIRE(p.refused());
        CHECK(p.refusals[0].find("120 rows") != std::string::npos);
        CHECK_THROWS_AS(p.throw_if_refused(), unsupported_error);
    }
    SUBCASE("a tied head quantized without untie") {
        rules.quantize("lm_head", g64());
        plan p = make_plan(llama_headers(), llama_cfg(), rules, output_format::gptq);
        REQUIRE(p.refused());
        CHECK(p.refusals.back().find("untie") != std::string::npos);
    }
    SUBCASE("a matrix no rule covers") {
        auto h = llama_headers();
        h.push_back({"vision.proj.weight", dtype::BF16, {64, 64}, "m"});
        plan p = make_plan(h, llama_cfg(), rules, output_format::gptq);
        REQUIRE(p.refusals.size() == 1);
        CHECK(p.refusals[0].find("vision.proj.weight") != std::string::npos);
    }
    SUBCASE("layout shape refusals name the tensor") {
        auto h = llama_headers();
        h[2].shape = {64, 96};  // K=96 is not a multiple of group 64
        plan p = make_plan(h, llama_cfg(), rules, output_format::gptq);
        REQUIRE(p.refused());
        CHECK(p.refusals[0].find("model.layers.0.self_attn.q_proj.weight") != std::string::npos);
        CHECK(p.refusals[0].find("group 64") != std::string::npos);
    }
    SUBCASE("fused layers with different schemes") {
        rules.keep("k_proj");
        plan p = make_plan(llama_headers(), llama_cfg(), rules, output_format::compressed_tensors);
        REQUIRE(p.refused());
        CHECK(p.refusals[0].find("same scheme") != std::string::npos);
    }
    SUBCASE("compressed-tensors scale dtype must be the checkpoint's") {
        quant_spec s = g64();
        s.scale_dtype = dtype::F16;
        rules.default_scheme = s;
        plan p = make_plan(llama_headers(), llama_cfg(), rules, output_format::compressed_tensors);
        REQUIRE(p.refused());
        CHECK(p.refusals[0].find("checkpoint dtype") != std::string::npos);
    }
    SUBCASE("already quantized input") {
        std::vector<source_tensor> h{{"model.layers.0.mlp.down_proj.qweight", dtype::I32, {8, 64}, "m"}};
        plan p = make_plan(h, llama_cfg(), rules, output_format::gptq);
        CHECK(p.refused());
    }
}

// ---- FP8 sources: every malformed scale is a refusal naming file, tensor and reason -------

namespace {

json fp8_native_config(json block = json::array({128, 128})) {
    return json::object({{"torch_dtype", "bfloat16"},
                         {"quantization_config", json::object({{"quant_method", "fp8"},
                                                               {"fmt", "e4m3"},
                                                               {"activation_scheme", "dynamic"},
                                                               {"weight_block_size", std::move(block)}})}});
}

json fp8_ct_config(const char* strategy) {
    json w = json::object({{"num_bits", 8}, {"type", "float"}, {"symmetric", true}, {"strategy", strategy}});
    if (std::string_view(strategy) == "block") w.set("block_structure", json::array({128, 128}));
    return json::object({{"quantization_config",
                          json::object({{"quant_method", "compressed-tensors"},
                                        {"format", "float-quantized"},
                                        {"config_groups", json::object({{"group_0", json::object({{"weights", w}})}})},
                                        {"ignore", json::array({"lm_head"})}})}});
}

const std::string w576 = "model.layers.0.self_attn.kv_a_proj_with_mqa.weight";

/// The one refusal of `f`, which must name `file`, `tensor` and contain `why`.
void check_one_refusal(const fp8_source& f, const std::string& file, const std::string& tensor, const std::string& why) {
    REQUIRE(f.refusals.size() == 1);
    const std::string& r = f.refusals.front();
    CAPTURE(r);
    CHECK(r.starts_with("qforge: " + file + ": "));
    if (!tensor.empty()) CHECK(r.find("tensor '" + tensor + "'") != std::string::npos);
    CHECK(r.find(why) != std::string::npos);
}

}  // namespace

TEST_CASE("FP8 source: DeepSeek's ragged [576, 7168] with its [5, 56] F32 scale_inv folds in; the scale is gone") {
    const std::vector<source_tensor> t{{w576, dtype::F8_E4M3, {576, 7168}, "s1.safetensors"},
                                       {w576 + "_scale_inv", dtype::F32, {5, 56}, "s1.safetensors"},
                                       {"model.layers.0.mlp.gate.weight", dtype::BF16, {8, 7168}, "s1.safetensors"}};
    const fp8_source f = read_fp8_source(fp8_native_config(), "m/config.json", t, "m");
    CHECK(f.refusals.empty());
    CHECK(f.kind == fp8_source_kind::native_fp8);
    REQUIRE(f.tensors.size() == 2);
    REQUIRE(f.tensors[0].scale);
    CHECK(f.tensors[0].scale->name == w576 + "_scale_inv");
    CHECK(f.tensors[0].scale->block_rows == 128);
    CHECK(f.tensors[0].scale->block_cols == 128);
    CHECK(f.tensors[0].scale->dequantized_type == dtype::BF16);
    CHECK(f.kept_dense == std::vector<std::string>{"model.layers.0.mlp.gate.weight"});
    // The plan quantizes the decoded weight as F32 values and never sees the scale tensor.
    rule_set rules;
    rules.default_scheme = quant_spec{4, 128, true, scale_method::minmax, std::nullopt};
    model_config c;
    c.num_experts = 8;
    const plan p = make_plan(f.tensors, c, rules, output_format::compressed_tensors);
    CHECK_FALSE(p.refused());
    REQUIRE(p.items.size() == 2);
    CHECK(p.items[0].action == plan_action::quantize);
    CHECK(p.items[0].value_type() == dtype::F32);
    CHECK(p.items[0].model_type() == dtype::BF16);
    CHECK(p.items[0].scheme.scale_dtype == dtype::BF16);
}

TEST_CASE("FP8 source refusals: scales missing, orphaned, of the wrong dtype or shape; bad configs; other FP8 types") {
    const std::string F = "m/s1.safetensors";
    auto native = [&](std::vector<source_tensor> t, json cfg = fp8_native_config()) { return read_fp8_source(cfg, "m/config.json", t, "m"); };
    SUBCASE("missing scale") {
        check_one_refusal(native({{w576, dtype::F8_E4M3, {576, 7168}, "s1.safetensors"}}), F, w576,
                          "F8_E4M3 weight without its scale '" + w576 + "_scale_inv'");
    }
    SUBCASE("scale grid not ceil-padded (floor instead)") {
        check_one_refusal(native({{w576, dtype::F8_E4M3, {576, 7168}, "s1.safetensors"},
                                  {w576 + "_scale_inv", dtype::F32, {4, 56}, "s1.safetensors"}}),
                          F, w576 + "_scale_inv", "scale shape [4, 56] does not fit weight [576, 7168]: expected [5, 56] (block 128x128)");
    }
    SUBCASE("scale dtype") {
        check_one_refusal(native({{w576, dtype::F8_E4M3, {576, 7168}, "s1.safetensors"},
                                  {w576 + "_scale_inv", dtype::I32, {5, 56}, "s1.safetensors"}}),
                          F, w576 + "_scale_inv", "scale dtype is I32, expected F32, BF16 or F16");
    }
    SUBCASE("orphaned scale") {
        check_one_refusal(native({{w576 + "_scale_inv", dtype::F32, {5, 56}, "s1.safetensors"}}), F, w576 + "_scale_inv",
                          "scale tensor without an F8_E4M3 weight '" + w576 + "' to apply to");
    }
    SUBCASE("an F8 tensor that is not a 2-D weight") {
        check_one_refusal(native({{"model.layers.0.x.weight", dtype::F8_E4M3, {7}, "s1.safetensors"}}), F,
                          "model.layers.0.x.weight", "an F8_E4M3 tensor must be a 2-D linear weight");
    }
    SUBCASE("fused 3-D FP8 experts: the per-expert grid `<name>_scales_inv` [E, N/128, K/128] (transformers FP8Expert)") {
        const std::string gu = "model.layers.0.mlp.experts.gate_up_proj";
        const fp8_source ok = native({{gu, dtype::F8_E4M3, {4, 640, 192}, "s1.safetensors"},
                                      {gu + "_scales_inv", dtype::F32, {4, 5, 2}, "s1.safetensors"}});
        CHECK(ok.refusals.empty());
        REQUIRE(ok.tensors.size() == 1);
        REQUIRE(ok.tensors[0].scale.has_value());
        CHECK(ok.tensors[0].scale->block_rows == 128);
        check_one_refusal(native({{gu, dtype::F8_E4M3, {4, 640, 192}, "s1.safetensors"}}), F, gu,
                          "F8_E4M3 weight without its scale '" + gu + "_scales_inv'");
        check_one_refusal(native({{gu, dtype::F8_E4M3, {4, 640, 192}, "s1.safetensors"},
                                  {gu + "_scales_inv", dtype::F32, {5, 2}, "s1.safetensors"}}),
                          F, gu + "_scales_inv", "scale shape [5, 2] does not fit weight [4, 640, 192]: expected [4, 5, 2]");
        check_one_refusal(native({{gu + "_scales_inv", dtype::F32, {4, 5, 2}, "s1.safetensors"}}), F, gu + "_scales_inv",
                          "scale tensor without an F8_E4M3 weight");
        check_one_refusal(native({{"model.layers.0.mlp.experts.gate_up_proj", dtype::F8_E4M3, {4, 0, 192}, "s1.safetensors"},
                                  {gu + "_scales_inv", dtype::F32, {4, 0, 2}, "s1.safetensors"}}),
                          F, gu, "cannot have an empty dimension");
    }
    SUBCASE("E5M2 weights") {
        check_one_refusal(native({{w576, dtype::F8_E5M2, {576, 7168}, "s1.safetensors"}}), F, w576,
                          "F8_E5M2 weights are not read (F8_E4M3 only)");
    }
    SUBCASE("weight_block_size not two positive integers, or absent; fmt not e4m3") {
        check_one_refusal(native({}, fp8_native_config(json::array({128}))), "m/config.json", {},
                          "weight_block_size: the block size must be two positive integers");
        check_one_refusal(native({}, fp8_native_config(json::array({128, 0}))), "m/config.json", {},
                          "weight_block_size: the block size must be two positive integers");
        check_one_refusal(native({}, fp8_native_config(json())), "m/config.json", {},
                          "quant_method \"fp8\" without weight_block_size");
        json cfg = fp8_native_config();
        cfg.at("quantization_config").set("fmt", "e5m2");
        check_one_refusal(native({}, cfg), "m/config.json", {}, "quantization_config.fmt must be \"e4m3\"");
    }
    SUBCASE("compressed-tensors: channel scale [N, 1] expected, zero points refused, input_scale dropped") {
        const std::string w = "model.layers.0.mlp.up_proj.weight";
        const fp8_source ok = read_fp8_source(fp8_ct_config("channel"), "m/config.json",
                                              {{w, dtype::F8_E4M3, {320, 192}, "s1.safetensors"},
                                               {w + "_scale", dtype::BF16, {320, 1}, "s1.safetensors"},
                                               {"model.layers.0.mlp.up_proj.input_scale", dtype::F32, {1}, "s1.safetensors"}},
                                              "m");
        CHECK(ok.refusals.empty());
        CHECK(ok.kind == fp8_source_kind::compressed_tensors);
        REQUIRE(ok.tensors.size() == 1);
        CHECK(ok.tensors[0].scale->block_rows == 1);
        CHECK(ok.tensors[0].scale->block_cols == 192);
        CHECK(ok.not_converted == std::vector<std::string>{"lm_head"});
        check_one_refusal(read_fp8_source(fp8_ct_config("channel"), "m/config.json",
                                          {{w, dtype::F8_E4M3, {320, 192}, "s1.safetensors"},
                                           {w + "_scale", dtype::BF16, {1, 320}, "s1.safetensors"}},
                                          "m"),
                          F, w + "_scale", "expected [320, 1] (channel)");
        check_one_refusal(read_fp8_source(fp8_ct_config("block"), "m/config.json",
                                          {{w, dtype::F8_E4M3, {320, 192}, "s1.safetensors"},
                                           {w + "_scale", dtype::BF16, {3, 2}, "s1.safetensors"},
                                           {"model.layers.0.mlp.up_proj.weight_zero_point", dtype::I8, {3, 2}, "s1.safetensors"}},
                                          "m"),
                          F, "model.layers.0.mlp.up_proj.weight_zero_point", "asymmetric FP8 (a zero point) is not read");
        json cfg = fp8_ct_config("group");
        check_one_refusal(read_fp8_source(cfg, "m/config.json", {}, "m"), "m/config.json", {},
                          "FP8 weight strategy \"group\" is not read");
    }
    SUBCASE("an integer compressed-tensors checkpoint and a bf16 one are not FP8 sources") {
        const fp8_source none = read_fp8_source(json::object({{"torch_dtype", "bfloat16"}}), "m/config.json",
                                                {{"model.layers.0.mlp.up_proj.weight", dtype::BF16, {4, 4}, "s"}}, "m");
        CHECK(none.kind == fp8_source_kind::none);
        CHECK(none.tensors.size() == 1);
        CHECK(none.kept_dense.empty());
    }
}

TEST_CASE("FP8 decode: every non-NaN code times its block's scale, ragged blocks; NaN codes and non-finite scales refused") {
    // A [3, 254] weight holding every non-NaN code in row 0 and 1 (row 1 reversed); blocks of 2 x 128
    // give a [2, 2] scale grid whose last block row and column are ragged.
    std::vector<std::uint8_t> codes;
    for (unsigned c = 0; c < 256; ++c)
        if ((c & 0x7F) != 0x7F) codes.push_back(static_cast<std::uint8_t>(c));
    REQUIRE(codes.size() == 254);
    std::vector<std::uint8_t> w(codes);
    w.insert(w.end(), codes.rbegin(), codes.rend());
    w.insert(w.end(), codes.begin(), codes.end());
    const float scales[4] = {0.5f, 0x1.8p-3f, 3.0f, 0x1.000002p0f};
    const source_scale s{"x.weight_scale_inv", dtype::F32, {2, 2}, 2, 128, dtype::BF16};
    const tensor_view wv{"x.weight", dtype::F8_E4M3, {3, 254}, std::as_bytes(std::span(w))};
    const tensor_view sv{"x.weight_scale_inv", dtype::F32, {2, 2}, std::as_bytes(std::span(scales))};
    const owned_tensor d = decode_fp8_weight(wv, sv, s, "f.safetensors", "f.safetensors");
    REQUIRE(d.type == dtype::F32);
    REQUIRE(d.bytes.size() == 3 * 254 * 4);
    bool all = true;
    for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 254; ++c) {
            const std::uint8_t code = w[static_cast<std::size_t>(r * 254 + c)];
            const int sign = code >> 7, e = (code >> 3) & 15, m = code & 7;  // the E4M3 definition
            const double v = (sign ? -1 : 1) * (e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7));
            const float want = static_cast<float>(v) * scales[(r / 2) * 2 + c / 128];
            float got;
            std::memcpy(&got, d.bytes.data() + 4 * static_cast<std::size_t>(r * 254 + c), 4);
            all = all && std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want);
        }
    CHECK(all);

    w[254 + 9] = 0xFF;  // row 1, column 9
    CHECK_THROWS_WITH_AS(decode_fp8_weight(wv, sv, s, "f.safetensors", "f.safetensors"),
                         "qforge: f.safetensors: tensor 'x.weight': E4M3 NaN code 0xFF at row 1, column 9", format_error);
    w[254 + 9] = 0x00;
    const float bad[4] = {0.5f, std::numeric_limits<float>::infinity(), 1.0f, 1.0f};
    const tensor_view bv{"x.weight_scale_inv", dtype::F32, {2, 2}, std::as_bytes(std::span(bad))};
    CHECK_THROWS_WITH_AS(decode_fp8_weight(wv, bv, s, "f.safetensors", "g.safetensors"),
                         "qforge: g.safetensors: tensor 'x.weight_scale_inv': scale at block [0, 1] is not finite or overflows the weights", format_error);
    const tensor_view short_scale{"x.weight_scale_inv", dtype::F32, {2, 2}, std::as_bytes(std::span(scales)).first(12)};
    CHECK_THROWS_AS(decode_fp8_weight(wv, short_scale, s, "f.safetensors", "g.safetensors"), format_error);
}
