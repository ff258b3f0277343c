// Rules and plans: selectors, last-match-wins, defaults, split/untie/rename, every refusal.
#include <doctest/doctest.h>

#include <sstream>

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
