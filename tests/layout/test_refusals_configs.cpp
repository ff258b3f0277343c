// Every refusal of the layouts and the shared checkpoint rules, the reader-side checks on
// malformed tensors, and the config fragments each layout writes.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <unistd.h>
#include <vector>

#include "layout/layout_test_support.hpp"
#include "qforge/io/safetensors/writer.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/gptq.hpp"

using namespace qforge;
using namespace layout_test;

namespace {

// The way an export uses a layout: pack (which checks) first, open the file only after.
template <class L>
void write_layer(const std::filesystem::path& path, const L& layout, const quantized_tensor& q) {
    const auto ts = layout.pack(q, "m");
    std::vector<safetensors::tensor_spec> specs;
    for (const auto& t : ts) specs.push_back({t.name, t.type, t.shape});
    safetensors::writer w(path.string(), specs, safetensors::default_metadata(), {.sync = false});
    for (const auto& t : ts) w.write(t.view());
    w.finish();
}

template <class L, class E = unsupported_error>
void refused(const L& layout, const quantized_tensor& q, const std::string& words) {
    const auto path = std::filesystem::temp_directory_path() /
                      ("qforge_refusal_" + std::to_string(::getpid()) + ".safetensors");
    std::filesystem::remove(path);
    CHECK_THROWS_WITH_AS(write_layer(path, layout, q), doctest::Contains(words.c_str()), E);
    CHECK_FALSE(std::filesystem::exists(path));  // nothing written
}

linear_entry entry(std::string name, int bits = 4, std::int64_t group = 32, bool sym = true,
                   std::int64_t rows = 64, std::int64_t cols = 256) {
    return {std::move(name), true, bits, group, sym, rows, cols, {}};
}

linear_entry plain(std::string name) {
    linear_entry e;
    e.name = std::move(name);
    e.quantized = false;
    return e;
}

// A Llama block's linears, all quantized with one scheme, plus an unquantized lm_head.
std::vector<linear_entry> llama_block(int bits = 4, std::int64_t group = 32, bool sym = true) {
    std::vector<linear_entry> v;
    for (const char* leaf : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
        v.push_back(entry(std::string("model.layers.0.") + leaf, bits, group, sym));
    v.push_back(plain("lm_head"));
    return v;
}

}  // namespace

TEST_CASE("GPTQ refusals name the tensor and the reason, and nothing is written") {
    auto q = random_qt(4, 32, 64, 32, false, 3);
    q.name = "model.layers.3.mlp.up_proj.weight";
    for (auto& z : q.zeros) z = z == 0 ? 1 : z;
    q.zeros[2 * 2 + 1] = 0;  // row 2, group 1
    refused(gptq_layout<4>(), q, "tensor 'model.layers.3.mlp.up_proj.weight': GPTQ v1 (checkpoint_format \"gptq\") stores zero-1 and cannot hold the zero point 0 at row 2, group 1");
    CHECK_NOTHROW(gptq_layout<4>({.format = gptq_format::v2}).check(q));  // v2 holds it

    refused(gptq_layout<4>({.format = gptq_format::v2}), random_qt(4, 32, 64, 32, true, 4, dtype::BF16),
            "scales are BF16 but the export asks for F16");
    refused(gptq_layout<4>({.format = gptq_format::v2, .scale_dtype = dtype::BF16}), random_qt(4, 32, 64, 32, true, 4),
            "scales are F16 but the export asks for BF16");
    refused<gptq_layout<4>, shape_error>(gptq_layout<4>(), random_qt(4, 32, 172, 172, true, 5), "packs K in units of 8; K = 172");
    refused<gptq_layout<4>, shape_error>(gptq_layout<4>(), random_qt(4, 172, 64, 64, true, 5), "packs qzeros along N in units of 8; N = 172");
    refused<gptq_layout<3>, shape_error>(gptq_layout<3>(), random_qt(3, 32, 48, 16, true, 5), "packs K in units of 32; K = 48");
    refused<gptq_layout<4>, shape_error>(gptq_layout<4>(), random_qt(4, 32, 64, 24, true, 5), "K (64) to be a multiple of the group size (24)");
    refused(gptq_layout<4>(), random_qt(3, 32, 64, 32, true, 5), "GPTQ layout for 4 bits given a 3-bit weight");
    auto bad_sym = random_qt(4, 32, 64, 32, true, 6);
    bad_sym.zeros[5] = 7;
    refused<gptq_layout<4>, shape_error>(gptq_layout<4>(), bad_sym, "symmetric weight with zero point 7 at row 2, group 1");
    auto act_order = random_qt(4, 32, 64, 32, true, 6);
    act_order.g_idx.assign(64, 0);
    act_order.g_idx[3] = 1;
    refused(gptq_layout<4>(), act_order, "column 3 is in group 1 (act-order g_idx) but desc_act is off");
    CHECK_NOTHROW(gptq_layout<4>({.desc_act = true}).check(act_order));
    auto bad_code = random_qt(4, 32, 64, 32, true, 6);
    bad_code.codes[10] = 16;
    refused<gptq_layout<4>, shape_error>(gptq_layout<4>(), bad_code, "code out of range at element 10");
}

TEST_CASE("AWQ refusals") {
    refused<awq_layout<4>, shape_error>(awq_layout<4>(), random_qt(4, 172, 64, 32, false, 7), "AWQ packs N in words of 8 columns; N = 172");
    refused<awq_layout<4>, shape_error>(awq_layout<4>(), random_qt(4, 64, 172, 64, false, 7), "K (172) to be a multiple of the group size (64)");
    refused(awq_layout<4>(), random_qt(4, 64, 64, 32, false, 7, dtype::BF16), "scales are BF16 but the export asks for F16");
    refused(awq_layout<4>(), random_qt(3, 64, 64, 32, false, 7), "AWQ packs 4 bits only; got a 3-bit weight");
    auto q = random_qt(4, 64, 64, 32, false, 8);
    q.g_idx.assign(64, 0);
    q.g_idx[63] = 1;
    q.g_idx[0] = 1;
    refused(awq_layout<4>(), q, "AWQ has no g_idx: groups must be contiguous, but column 0 is in group 1");
}

TEST_CASE("compressed-tensors refusals") {
    const compressed_tensors_layout<4> ct({.packing = ct_packing::padded_v0_12, .checkpoint_dtype = dtype::BF16});
    refused(ct, random_qt(4, 16, 64, 32, false, 9, dtype::F16), "scales are F16 but the export asks for BF16");
    auto q = random_qt(4, 16, 64, 32, false, 9, dtype::BF16);
    q.g_idx.assign(64, 0);
    q.g_idx[0] = 1;
    refused(ct, q, "contiguous groups only");
    CHECK_THROWS_WITH_AS(with_ct_layout(9, {}, [](const auto& l) { return +l.bits; }),
                         doctest::Contains("holds 2 to 8 bits, got 9"), unsupported_error);
}

TEST_CASE("fractional zero points are refused, naming row and group; integers pass") {
    const std::vector<float> good{8.0f, 0.0f, 15.0f, 3.0f};
    CHECK(integer_zero_points(good, 4, 2, "w") == std::vector<std::int32_t>{8, 0, 15, 3});
    const std::vector<float> frac{8.0f, 0.0f, 7.25f, 3.0f};
    CHECK_THROWS_WITH_AS(integer_zero_points(frac, 4, 2, "model.layers.0.mlp.up_proj.weight"),
                         doctest::Contains("fractional zero point 7.250000 at row 1, group 0"), unsupported_error);
    const std::vector<float> nan{std::numeric_limits<float>::quiet_NaN()};
    CHECK_THROWS_AS(integer_zero_points(nan, 4, 1, "w"), unsupported_error);
    const std::vector<float> big{16.0f};
    CHECK_THROWS_WITH_AS(integer_zero_points(big, 4, 1, "w"), doctest::Contains("outside the 4-bit code range"), unsupported_error);
}

TEST_CASE("tied quantized weights and fused layers with different schemes are refused by every config") {
    auto tied = llama_block();
    tied.back().quantized = true;
    tied.back().bits = 4;
    tied.back().group_size = 32;
    tied.back().tied_to = "model.embed_tokens.weight";
    const std::string tie_msg = "tied to 'model.embed_tokens.weight'";
    CHECK_THROWS_WITH_AS(ct_config(tied, {}), doctest::Contains(tie_msg.c_str()), unsupported_error);
    CHECK_THROWS_WITH_AS(gptq_layout<4>().config(tied), doctest::Contains(tie_msg.c_str()), unsupported_error);
    CHECK_THROWS_WITH_AS(awq_layout<4>().config(tied), doctest::Contains(tie_msg.c_str()), unsupported_error);

    auto mixed = llama_block();
    mixed[1].bits = 8;  // k_proj
    const char* fused_msg = "layers a loader fuses must share one scheme: model.layers.0.self_attn.q_proj (4-bit sym group 32), "
                            "model.layers.0.self_attn.k_proj (8-bit sym group 32), model.layers.0.self_attn.v_proj (4-bit sym group 32)";
    CHECK_THROWS_WITH_AS(ct_config(mixed, {}), doctest::Contains(fused_msg), unsupported_error);
    auto half = llama_block();
    half[5].quantized = false;  // up_proj left out, gate_proj quantized
    CHECK_THROWS_WITH_AS(ct_config(half, {}), doctest::Contains("model.layers.0.mlp.up_proj (unquantized)"), unsupported_error);
    // Different blocks may differ.
    auto two = llama_block();
    for (auto e : llama_block(8, 64, false)) {
        if (!e.quantized) continue;
        e.name.replace(e.name.find("layers.0"), 8, "layers.1");
        two.push_back(e);
    }
    CHECK_NOTHROW(ct_config(two, {}));
    CHECK(fused_groups(two).size() == 4);
}

TEST_CASE("GPTQ config and quantize_config.json") {
    const auto block = llama_block(4, 128);
    const json c = gptq_layout<4>().config(block);
    CHECK(c.dump() == R"({"quant_method":"gptq","bits":4,"group_size":128,"desc_act":false,"sym":true,"lm_head":false,"checkpoint_format":"gptq"})");
    const json v2 = gptq_layout<4>({.format = gptq_format::v2, .desc_act = true}).config(llama_block(4, 128, false));
    CHECK(v2.dump() == R"({"quant_method":"gptq","bits":4,"group_size":128,"desc_act":true,"sym":false,"lm_head":false,"checkpoint_format":"gptq_v2"})");
    CHECK(gptq_layout<4>().side_file(block).dump() ==
          R"({"bits":4,"group_size":128,"desc_act":false,"sym":true,"quant_method":"gptq","checkpoint_format":"gptq"})");
    auto head = block;
    head.back() = entry("lm_head", 4, 128);
    CHECK(gptq_layout<4>().config(head).at("lm_head").as_bool());
    // Per-channel everywhere: group_size -1.
    auto pc = llama_block(4, -1);
    CHECK(gptq_layout<4>().config(pc).at("group_size").as_int() == -1);
    // Refusals: an unquantized block linear, wrong layout bits.
    auto hole = block;
    hole[3].quantized = false;
    CHECK_THROWS_WITH_AS(gptq_layout<4>().config(hole), doctest::Contains("model.layers.0.self_attn.o_proj"), unsupported_error);
    CHECK_THROWS_AS(gptq_layout<8>().config(block), unsupported_error);
    // A per-channel layer fits a stated group size when its K equals it (no override needed);
    // otherwise it becomes a `dynamic` override (next test case).
    auto pc_mix = llama_block(4, 64);
    pc_mix[6].group_size = -1;
    pc_mix[6].cols = 64;
    CHECK(gptq_layout<4>().config(pc_mix).find("dynamic") == nullptr);  // K = 64 = the group size
    pc_mix[6].cols = 172;
    CHECK(gptq_layout<4>().config(pc_mix).at("dynamic").dump() ==
          R"({"+:(?:(?:.*\\.)?mlp\\.down_proj)$":{"bits":4,"group_size":-1,"sym":true}})");
}

// Loader rule: GPTQModel `quantization/config.py dynamic_get` (ModelCloud/GPTQModel @f4c327a1)
// and vLLM `model_executor/layers/quantization/utils/gptq_utils.py get_dynamic_override` /
// `override_config` (vllm-project/vllm @02239f5e) read per-module overrides from
// quantization_config["dynamic"]: keys "+:<regex>" applied with re.match to the module name (vLLM
// asks with its fused names, e.g. "...self_attn.qkv_proj"), the first matching key wins, values
// override "bits", "group_size", "sym". Each key qforge writes must match exactly its layers.
TEST_CASE("GPTQ mixed schemes: GPTQModel `dynamic` overrides that match exactly their layers") {
    std::vector<linear_entry> model;
    for (const char* l : {"0", "1"})
        for (const char* leaf : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
            model.push_back(entry(std::string("model.layers.") + l + "." + leaf, 4, 32));
    // every down_proj 8-bit per channel; layer 1's q/k/v 8-bit g32 asym
    for (auto& e : model) {
        if (e.name.ends_with("down_proj")) e = entry(e.name, 8, -1, true, 64, 172);
        if (e.name.starts_with("model.layers.1.self_attn.") && !e.name.ends_with("o_proj")) e = entry(e.name, 8, 32, false);
    }
    const json c = gptq_layout<4>().config(model);
    CHECK(c.at("bits").as_int() == 4);
    CHECK(c.at("group_size").as_int() == 32);
    const json& d = c.at("dynamic");
    REQUIRE(d.size() == 2);
    auto scheme_of = [&](std::string_view module) -> json {
        for (const auto& kv : d.as_object())  // first match wins, as in both readers
            if (detail::python_re_match(kv.key.substr(2), module)) return kv.value;
        return json();
    };
    for (const auto& e : model) {
        const json s = scheme_of(e.name);
        if (e.name.ends_with("down_proj")) {
            CHECK(s.dump() == R"({"bits":8,"group_size":-1,"sym":true})");
        } else if (e.name.starts_with("model.layers.1.self_attn.") && !e.name.ends_with("o_proj")) {
            CHECK(s.dump() == R"({"bits":8,"group_size":32,"sym":false})");
        } else {
            CHECK_MESSAGE(s.is_null(), e.name);  // the base scheme: no override
        }
    }
    // vLLM's fused names: layer 1's qkv_proj has the override, layer 0's does not.
    CHECK(scheme_of("model.layers.1.self_attn.qkv_proj").at("bits").as_int() == 8);
    CHECK(scheme_of("model.layers.0.self_attn.qkv_proj").is_null());
    CHECK(scheme_of("model.layers.0.mlp.gate_up_proj").is_null());
    // quantize_config.json carries it too; a one-scheme export has no `dynamic` key.
    CHECK(gptq_layout<4>().side_file(model).at("dynamic").dump() == d.dump());
    CHECK(gptq_layout<4>().config(llama_block(4, 32)).find("dynamic") == nullptr);
}

// Loader rules for AWQ's `modules_to_not_convert` (see layout/checkpoint_rules.hpp loader_match):
//  vLLM `quantization/utils/quant_utils.py is_layer_skipped(..., skip_with_substr=True)` (@01693a61,
//    called by `auto_awq.py AutoAWQConfig.get_quant_method` @0043d6b5): substring of the full name;
//  transformers `quantizers/quantizers_utils.py should_convert_module`: re.match prefix or endswith;
//  AutoAWQ `awq/utils/module.py exclude_layers_to_not_quantize` with block-relative names from
//    `awq/models/base.py _load_quantized_modules` (casper-hansen/AutoAWQ @88e4c76): substring.
TEST_CASE("loader_match: each loader's skip-list rule as its source states it") {
    CHECK(loader_match::vllm_skips("mlp.down_proj", "model.layers.3.mlp.down_proj"));
    CHECK(loader_match::vllm_skips("model.layers.1.mlp.up_proj", "model.layers.1.mlp.up_proj"));
    CHECK_FALSE(loader_match::vllm_skips("model.layers.1.mlp.up_proj", "model.layers.11.mlp.up_proj"));
    CHECK(loader_match::vllm_skips("model.layers.1.mlp.fc", "model.layers.1.mlp.fc2"));  // substring
    CHECK(loader_match::transformers_skips("lm_head", "lm_head"));
    CHECK(loader_match::transformers_skips("mlp.down_proj", "model.layers.3.mlp.down_proj"));  // endswith
    CHECK(loader_match::transformers_skips("model.layers.1", "model.layers.1Xmlp"));  // a regex: '.' is any char
    CHECK_FALSE(loader_match::transformers_skips("model.layers.1.mlp.up_proj", "model.layers.11.mlp.up_proj"));
    CHECK_FALSE(loader_match::autoawq_skips("model.layers.0.mlp.up_proj", "mlp.up_proj"));  // full names never match
    CHECK(loader_match::autoawq_skips("mlp.up_proj", "mlp.up_proj"));
    const auto b = loader_match::split_block("model.layers.12.self_attn.q_proj");
    REQUIRE(b);
    CHECK(b->first == "model.layers.12");
    CHECK(b->second == "self_attn.q_proj");
    CHECK_FALSE(loader_match::split_block("lm_head"));
}

TEST_CASE("AWQ modules_to_not_convert: full and block-relative names, exact in vLLM, transformers and AutoAWQ") {
    auto two_blocks = [] {
        std::vector<linear_entry> v;
        for (const char* l : {"0", "1"})
            for (const char* leaf : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                     "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
                v.push_back(entry(std::string("model.layers.") + l + "." + leaf, 4, 32, false));
        v.push_back(plain("lm_head"));
        return v;
    };
    // Every loader must skip exactly the unquantized linears.
    auto check_exact = [](const std::vector<linear_entry>& model, const json& names, bool autoawq_exact) {
        for (const auto& e : model) {
            bool vllm = false, tf = false, aa = false;
            for (const auto& n : names.as_array()) {
                vllm = vllm || loader_match::vllm_skips(n.as_string(), e.name);
                tf = tf || loader_match::transformers_skips(n.as_string(), e.name);
                if (auto b = loader_match::split_block(e.name)) aa = aa || loader_match::autoawq_skips(n.as_string(), b->second);
            }
            CHECK_MESSAGE(vllm == !e.quantized, e.name);
            CHECK_MESSAGE(tf == !e.quantized, e.name);
            if (autoawq_exact && loader_match::split_block(e.name)) CHECK_MESSAGE(aa == !e.quantized, e.name);
        }
    };
    SUBCASE("every down_proj dense: the block-relative name is added and AutoAWQ matches it") {
        auto model = two_blocks();
        for (auto& e : model)
            if (e.name.ends_with("down_proj")) e.quantized = false;
        const auto skip = awq_layout<4>::awq_modules_to_not_convert(model);
        CHECK(skip.names.dump() == R"(["model.layers.0.mlp.down_proj","model.layers.1.mlp.down_proj","lm_head","mlp.down_proj"])");
        CHECK(skip.autoawq_misses.empty());
        check_exact(model, skip.names, true);
        CHECK(awq_layout<4>().config(model).at("modules_to_not_convert").dump() == skip.names.dump());
    }
    SUBCASE("one block's MLP dense: AutoAWQ cannot be told, vLLM and transformers can") {
        auto model = two_blocks();
        for (auto& e : model)
            if (e.name.starts_with("model.layers.0.mlp.")) e.quantized = false;
        const auto skip = awq_layout<4>::awq_modules_to_not_convert(model);
        CHECK(skip.names.dump() ==
              R"(["model.layers.0.mlp.gate_proj","model.layers.0.mlp.up_proj","model.layers.0.mlp.down_proj","lm_head"])");
        CHECK(skip.autoawq_misses ==
              std::vector<std::string>{"model.layers.0.mlp.gate_proj", "model.layers.0.mlp.up_proj", "model.layers.0.mlp.down_proj"});
        check_exact(model, skip.names, false);
    }
    SUBCASE("a dense name that is a substring of a quantized one is refused") {
        std::vector<linear_entry> model{entry("model.layers.0.mlp.fc2", 4, 32, false), plain("model.layers.0.mlp.fc")};
        CHECK_THROWS_WITH_AS(awq_layout<4>::awq_modules_to_not_convert(model),
                             doctest::Contains("would also keep the quantized 'model.layers.0.mlp.fc2' dense"), unsupported_error);
    }
}

// Loader rule: vLLM `auto_awq.py AutoAWQConfig.from_config` reads `lm_head` (default False) and
// `get_quant_method` quantizes ParallelLMHead only when it is set (vllm-project/vllm @0043d6b5).
TEST_CASE("AWQ config: a quantized lm_head is announced with \"lm_head\": true") {
    auto block = llama_block(4, 32, false);
    block.back() = entry("lm_head", 4, 32, false);
    const json c = awq_layout<4>().config(block);
    CHECK(c.at("lm_head").as_bool());
    CHECK(c.at("modules_to_not_convert").is_null());
    CHECK(awq_layout<4>().config(llama_block(4, 32, false)).find("lm_head") == nullptr);  // bytes kept when dense
}

TEST_CASE("AWQ config") {
    auto block = llama_block(4, 32, false);
    CHECK(awq_layout<4>().config(block).dump() ==
          R"({"quant_method":"awq","zero_point":true,"group_size":32,"bits":4,"version":"gemm","modules_to_not_convert":["lm_head"]})");
    block.pop_back();
    CHECK(awq_layout<4>().config(block).at("modules_to_not_convert").is_null());
    CHECK_THROWS_WITH_AS(awq_layout<4>().config(llama_block(4, -1)), doctest::Contains("per channel"), unsupported_error);
    CHECK_THROWS_WITH_AS(awq_layout<4>().config(llama_block(8, 32)), doctest::Contains("AWQ packs 4 bits only"), unsupported_error);
}

TEST_CASE("compressed-tensors config: groups per scheme, full names, ignore, 0.12 keys only") {
    auto model = llama_block(4, 32, false);
    model[6] = entry("model.layers.0.mlp.down_proj", 8, -1, true, 64, 172);  // per channel, sym
    const json c = ct_config(model, {.packing = ct_packing::padded_v0_12});
    CHECK(c.at("quant_method").as_string() == "compressed-tensors");
    CHECK(c.at("format").as_string() == "pack-quantized");
    CHECK(c.at("version").as_string() == "0.12.2");
    CHECK(c.at("ignore").dump() == R"(["lm_head"])");
    const json& groups = c.at("config_groups");
    REQUIRE(groups.size() == 2);
    CHECK(groups.at("group_0").at("targets").dump() ==
          R"(["model.layers.0.self_attn.q_proj","model.layers.0.self_attn.k_proj","model.layers.0.self_attn.v_proj","model.layers.0.self_attn.o_proj","model.layers.0.mlp.gate_proj","model.layers.0.mlp.up_proj"])");
    CHECK(groups.at("group_0").at("weights").dump() ==
          R"({"actorder":null,"block_structure":null,"dynamic":false,"group_size":32,"num_bits":4,"observer":"minmax","observer_kwargs":{},"strategy":"group","symmetric":false,"type":"int"})");
    CHECK(groups.at("group_1").at("targets").dump() == R"(["model.layers.0.mlp.down_proj"])");
    const json& w1 = groups.at("group_1").at("weights");
    CHECK(w1.at("strategy").as_string() == "channel");
    CHECK(w1.at("group_size").is_null());
    CHECK(w1.at("num_bits").as_int() == 8);
    // compressed-tensors 0.12 QuantizationArgs fields (extra="forbid"): nothing else may appear.
    const std::set<std::string> allowed{"num_bits", "type", "symmetric", "group_size", "strategy", "block_structure",
                                        "dynamic", "actorder", "observer", "observer_kwargs"};
    for (const auto& g : groups.as_object())
        for (const auto& m : g.value.at("weights").as_object()) CHECK(allowed.count(m.key) == 1);
    CHECK(ct_config(model, {.packing = ct_packing::dense_v0_18}).at("version").as_string() == "0.18.0");
    // The layout's own config refuses layers of another width (mixed widths go through ct_config).
    CHECK_THROWS_AS(compressed_tensors_layout<4>().config(model), unsupported_error);
    auto bad_bits = model;
    bad_bits[6].bits = 1;
    CHECK_THROWS_WITH_AS(ct_config(bad_bits, {}), doctest::Contains("holds 2 to 8 bits, got 1"), unsupported_error);
    // Written the way save_pretrained writes config.json: indent 2, sorted keys, trailing newline.
    json cfg = json::object({{"model_type", "llama"}});
    set_quantization_config(cfg, c);
    const std::string text = config_file_text(cfg);
    CHECK(text.starts_with("{\n  \"model_type\": \"llama\",\n  \"quantization_config\": {\n    \"config_groups\": {"));
    CHECK(text.ends_with("}\n"));
}

TEST_CASE("readers refuse malformed tensors, naming them") {
    const gptq_layout<4> gptq({.format = gptq_format::v2});
    const auto q = random_qt(4, 16, 64, 32, false, 11);
    auto ts = gptq.pack(q, "m");
    CHECK_THROWS_WITH_AS(gptq.unpack(views_of({ts[0], ts[2], ts[3]}), "m", {.group_size = 32, .symmetric = false}),
                         doctest::Contains("tensor 'm.qzeros': tensor is missing"), format_error);
    auto wrong_type = ts;
    wrong_type[1].type = dtype::U32;
    CHECK_THROWS_WITH_AS(gptq.unpack(views_of(wrong_type), "m", {.group_size = 32, .symmetric = false}),
                         doctest::Contains("tensor 'm.qzeros': dtype is U32, expected I32"), format_error);
    CHECK_THROWS_WITH_AS(gptq.unpack(views_of(ts), "m", {.group_size = 16, .symmetric = false}),
                         doctest::Contains("tensor 'm.qzeros': shape is [2, 2], expected [4, 2]"), shape_error);
    auto bad_gidx = ts;
    std::int32_t big = 9;
    std::memcpy(bad_gidx[3].bytes.data(), &big, 4);
    CHECK_THROWS_WITH_AS(gptq.unpack(views_of(bad_gidx), "m", {.group_size = 32, .symmetric = false}),
                         doctest::Contains("g_idx entry 9 at 0 is not a group index"), format_error);

    const compressed_tensors_layout<3> ct({.packing = ct_packing::padded_v0_12, .checkpoint_dtype = dtype::BF16});
    auto cq = random_qt(3, 4, 30, 30, true, 12, dtype::BF16);
    auto cts = ct.pack(cq, "c");
    auto stray = cts;
    stray[0].bytes[3] |= std::byte{0x80};  // top (padding) bit of row 0's first word
    CHECK_THROWS_WITH_AS(ct.unpack(views_of(stray), "c", {.group_size = -1, .symmetric = true}),
                         doctest::Contains("row 0 has bits set outside its code fields"), format_error);
    auto with_zp = cts;
    auto asym = ct.pack([&] { auto a = cq; a.symmetric = false; return a; }(), "c");
    with_zp.push_back(named(asym, "c.weight_zero_point"));
    CHECK_THROWS_WITH_AS(ct.unpack(views_of(with_zp), "c", {.group_size = -1, .symmetric = true}),
                         doctest::Contains("must not carry a zero point"), format_error);
    auto shape = cts;
    std::int64_t huge = std::int64_t{1} << 50;
    for (auto& t : shape)
        if (t.name == "c.weight_shape") std::memcpy(t.bytes.data(), &huge, 8);
    CHECK_THROWS_AS(ct.unpack(views_of(shape), "c", {.group_size = -1, .symmetric = true}), shape_error);
}
