// The real weights of ../shared/fixtures/stories260k (a trained Llama, bf16, hidden 64, MLP 172
// wide) through every layout: quantize each linear with qforge's quantizer, pack it, write
// all of a layout's tensors to one safetensors file, read them back, unpack, and require the
// decode to equal the quantizer's values bit for bit. The SNR of what a loader decodes is
// printed per layer. Layers whose shapes a layout cannot hold are refused by name (the
// 172-wide MLP for GPTQ 4-bit and AWQ), and then the layout's config refuses the model.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "layout/layout_test_support.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/writer.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/quant/quantize.hpp"
#include "qforge/quant/snr.hpp"

using namespace qforge;

namespace {

const std::string fixture = QFORGE_SOURCE_DIR "/tests/golden/fixtures/stories260k/model.safetensors";

std::vector<std::string> linear_names() {
    std::vector<std::string> names;
    for (int l = 0; l < 5; ++l)
        for (const char* leaf : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                 "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
            names.push_back("model.layers." + std::to_string(l) + "." + leaf);
    return names;
}

struct run_result {
    int packed = 0;
    int refused = 0;
    std::vector<linear_entry> linears;
    std::string report;
};

// Quantizes, packs and round-trips every linear of the model through `layout`.
template <class L>
run_result run_layout(const safetensors::reader& model, const L& layout, quant_options opt, const std::string& tag,
                      std::int64_t read_group) {
    run_result res;
    std::vector<owned_tensor> all;
    std::vector<std::pair<std::string, quantized_tensor>> kept;
    char line[256];
    for (const std::string& name : linear_names()) {
        const tensor_view w = model.view(name + ".weight");
        const quantized_tensor q = quantize(w, opt);
        linear_entry e = linear_entry_of(q, name);
        e.group_size = opt.group_size;
        try {
            auto ts = layout.pack(q, name);
            for (auto& t : ts) all.push_back(std::move(t));
            kept.emplace_back(name, q);
            ++res.packed;
        } catch (const error& err) {
            // The refusal names the tensor and says why; the layer stays unquantized.
            CHECK(err.tensor() == q.name);
            CHECK_FALSE(err.reason().empty());
            e.quantized = false;
            ++res.refused;
            std::snprintf(line, sizeof line, "  %-32s refused: %s\n", name.c_str(), err.reason().c_str());
            res.report += line;
        }
        res.linears.push_back(e);
    }
    res.linears.push_back([] {
        linear_entry head;
        head.name = "lm_head";
        head.quantized = false;
        return head;
    }());
    if (kept.empty()) return res;

    // One real file per layout, read back through the safetensors reader.
    const auto path = std::filesystem::temp_directory_path() /
                      ("qforge_stories_" + tag + "_" + std::to_string(::getpid()) + ".safetensors");
    {
        std::vector<safetensors::tensor_spec> specs;
        for (const auto& t : all) specs.push_back({t.name, t.type, t.shape});
        safetensors::writer out(path.string(), specs, safetensors::default_metadata(), {.sync = false});
        for (const auto& t : all) out.write(t.view());
        out.finish();
    }
    {
        const safetensors::reader back(path.string());
        std::vector<tensor_view> views;
        for (const auto& t : back.tensors()) views.push_back(back.view(t.name));
        for (const auto& item : kept) {
            const std::string& name = item.first;
            const quantized_tensor& q = item.second;
            const quantized_tensor d = layout.unpack(views, name, {.group_size = read_group, .symmetric = opt.symmetric});
            std::int64_t diff = 0;
            for (std::int64_t n = 0; n < q.rows; ++n)
                for (std::int64_t k = 0; k < q.cols; ++k)
                    diff += std::bit_cast<std::uint32_t>(d.dequantized(n, k)) != std::bit_cast<std::uint32_t>(q.dequantized(n, k));
            CHECK_MESSAGE(diff == 0, name);
            const double db = snr_db(model.view(name + ".weight"), d);
            CHECK(db > 5.0);  // a decoded trained weight, not noise
            std::snprintf(line, sizeof line, "  %-32s [%3lld x %3lld]  SNR %6.2f dB\n", name.c_str(),
                          static_cast<long long>(q.rows), static_cast<long long>(q.cols), db);
            res.report += line;
        }
    }
    std::filesystem::remove(path);
    return res;
}

quant_options opts(int bits, int group, bool sym, dtype scale) {
    quant_options o;
    o.bits = bits;
    o.group_size = group;
    o.symmetric = sym;
    o.policy = sym ? scale_policy::gptq_absmax : scale_policy::minmax;
    o.scale_dtype = scale;
    return o;
}

}  // namespace

TEST_CASE("stories260k through every layout: decode bit for bit, SNR per layer, refusals by name") {
    if (!std::filesystem::exists(fixture)) {
        MESSAGE("skipped: " << fixture << " not present");
        return;
    }
    const safetensors::reader model(fixture);

    SUBCASE("GPTQ 8-bit per channel (v1, fp16 scales): every linear fits") {
        const auto r = run_layout(model, gptq_layout<8>(), opts(8, -1, true, dtype::F16), "gptq8", -1);
        MESSAGE("GPTQ 8-bit sym per-channel v1:\n" << r.report);
        CHECK(r.packed == 35);
        const json c = gptq_layout<8>().config(r.linears);
        CHECK(c.dump() == R"({"quant_method":"gptq","bits":8,"group_size":-1,"desc_act":false,"sym":true,"lm_head":false,"checkpoint_format":"gptq"})");
    }
    SUBCASE("GPTQ 4-bit group 32 (v2, asym): the 172-wide MLP is refused by name, then the config") {
        const auto r = run_layout(model, gptq_layout<4>({.format = gptq_format::v2}), opts(4, 32, false, dtype::F16),
                                  "gptq4", 32);
        MESSAGE("GPTQ 4-bit asym g32 v2:\n" << r.report);
        CHECK(r.packed == 20);   // q, k, v, o of 5 blocks
        CHECK(r.refused == 15);  // gate/up (N = 172), down (K = 172)
        CHECK_THROWS_WITH_AS(gptq_layout<4>({.format = gptq_format::v2}).config(r.linears),
                             doctest::Contains("model.layers.0.mlp.gate_proj"), unsupported_error);
    }
    SUBCASE("GPTQ 3-bit group 32 (v2, sym)") {
        const auto r = run_layout(model, gptq_layout<3>({.format = gptq_format::v2}), opts(3, 32, true, dtype::F16),
                                  "gptq3", 32);
        MESSAGE("GPTQ 3-bit sym g32 v2:\n" << r.report);
        CHECK(r.packed == 20);
        CHECK(r.refused == 15);
    }
    SUBCASE("AWQ 4-bit group 32: attention fits, the MLP is refused") {
        const auto r = run_layout(model, awq_layout<4>(), opts(4, 32, false, dtype::F16), "awq4", 32);
        MESSAGE("AWQ 4-bit g32:\n" << r.report);
        CHECK(r.packed == 20);
        CHECK(r.refused == 15);
        // AWQ can list the unquantized MLP in modules_to_not_convert; fused gate/up share "unquantized".
        // 15 full names + lm_head for vLLM and transformers, then the block-relative names AutoAWQ
        // matches (dense in every block, so they over-match nothing).
        const json c = awq_layout<4>().config(r.linears);
        const json& skip = c.at("modules_to_not_convert");
        REQUIRE(skip.size() == 19);
        CHECK(skip.at(16).as_string() == "mlp.gate_proj");
        CHECK(skip.at(18).as_string() == "mlp.down_proj");
    }
    SUBCASE("compressed-tensors 4-bit asym group 32 (bf16 scales): every linear, partial last group") {
        const auto r = run_layout(model, compressed_tensors_layout<4>(), opts(4, 32, false, dtype::BF16), "ct4", 32);
        MESSAGE("compressed-tensors 4-bit asym g32:\n" << r.report);
        CHECK(r.packed == 35);
        const json c = ct_config(r.linears, {});
        CHECK(c.at("config_groups").at("group_0").at("targets").size() == 35);
        CHECK(c.at("ignore").dump() == R"(["lm_head"])");
    }
    SUBCASE("compressed-tensors 3-bit sym, dense (0.18) and padded (0.12)") {
        for (ct_packing pk : {ct_packing::dense_v0_18, ct_packing::padded_v0_12}) {
            const auto r = run_layout(model, compressed_tensors_layout<3>({.packing = pk}), opts(3, 32, true, dtype::BF16),
                                      pk == ct_packing::dense_v0_18 ? "ct3d" : "ct3p", 32);
            MESSAGE("compressed-tensors 3-bit sym g32 " << std::string(pk == ct_packing::dense_v0_18 ? "dense" : "padded") << ":\n"
                                                      << r.report);
            CHECK(r.packed == 35);
        }
    }
    SUBCASE("compressed-tensors 8-bit sym per channel") {
        const auto r = run_layout(model, compressed_tensors_layout<8>(), opts(8, -1, true, dtype::BF16), "ct8", -1);
        MESSAGE("compressed-tensors 8-bit sym per-channel:\n" << r.report);
        CHECK(r.packed == 35);
        CHECK(ct_config(r.linears, {}).at("config_groups").at("group_0").at("weights").at("strategy").as_string() == "channel");
    }
}
