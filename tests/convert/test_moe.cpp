// Mixture-of-experts checkpoints: the generator's four MoE styles, fused 3-D experts cut per
// expert by their architecture's rule (kept bytes exact, quantized ones decoded against the
// source slice), every expert of every format decoded with the loaders' formulas written here
// (not qforge's unpackers), and the configs checked against the rule each engine applies
// (vLLM, transformers, GPTQModel), citing the loader's file and function.
#include <doctest/doctest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/core/half.hpp"
#include "qforge/io/file.hpp"
#include "support/checkpoint_fixture.hpp"
#include "support/fused_twin.hpp"

using namespace qforge;

namespace {

std::string moe_scratch(const std::string& name) {
    static const testing::scratch_root root("moe");
    return root.fresh(name);
}

demo_options moe_demo(demo_moe style, bool shared = false) {
    demo_options o = testing::small_demo();  // hidden 128, 2 layers
    o.moe = style;
    o.experts = 4;
    o.moe_intermediate = 128;
    o.shared_expert = shared;
    o.tied = false;
    return o;
}

/// A generated MoE checkpoint of `style`, written once per test program.
const std::string& moe_dir(demo_moe style, bool shared = false) {
    static std::map<std::pair<int, bool>, std::string> dirs;
    auto [it, inserted] = dirs.emplace(std::pair{static_cast<int>(style), shared}, std::string());
    if (inserted) {
        it->second = moe_scratch("src" + std::to_string(static_cast<int>(style)) + (shared ? "s" : ""));
        write_demo_checkpoint(it->second, moe_demo(style, shared));
    }
    return it->second;
}

convert_options options(output_format f, quant_spec s = {4, 64, true, scale_method::minmax, std::nullopt}) {
    convert_options o;
    o.format = f;
    o.rules.default_scheme = s;
    o.threads = 2;
    return o;
}

json quantization_config(const std::string& out) {
    return json::parse(io::read_file(out + "/config.json")).at("quantization_config");
}

std::vector<std::string> strings(const json& a) {
    std::vector<std::string> v;
    for (const json& x : a.as_array()) v.push_back(x.as_string());
    return v;
}

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

template <class T>
T at(const tensor_view& v, std::int64_t i) {
    T x;
    std::memcpy(&x, v.bytes.data() + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
    return x;
}

float f16_at(const tensor_view& v, std::int64_t i) {
    const auto h = at<std::uint16_t>(v, i);
    return v.type == dtype::BF16 ? bf16_to_float(h) : fp16_to_float(h);
}

/// A [rows x cols] float matrix.
struct matrix {
    std::int64_t rows = 0, cols = 0;
    std::vector<float> w;
    float operator()(std::int64_t r, std::int64_t c) const { return w[static_cast<std::size_t>(r * cols + c)]; }
};

double snr_db(const matrix& ref, const matrix& got) {
    REQUIRE(ref.rows == got.rows);
    REQUIRE(ref.cols == got.cols);
    double s = 0, e = 0;
    for (std::size_t i = 0; i < ref.w.size(); ++i) {
        s += double(ref.w[i]) * ref.w[i];
        e += (double(ref.w[i]) - got.w[i]) * (double(ref.w[i]) - got.w[i]);
    }
    return 10 * std::log10(s / e);
}

/// compressed-tensors pack-quantized 4-bit symmetric, as vLLM's CompressedTensorsWNA16 reads it
/// (weight_packed [N, K/8] packed along K LSB first, stored = q + 8; weight_scale [N, G]).
matrix decode_ct4(const checkpoint_source& s, const std::string& module) {
    const tensor_view p = s.view(module + ".weight_packed"), sc = s.view(module + ".weight_scale");
    const std::int64_t n = p.shape[0], k = p.shape[1] * 8, g = k / sc.shape[1];
    matrix m{n, k, std::vector<float>(static_cast<std::size_t>(n * k))};
    for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t c = 0; c < k; ++c) {
            const int q = static_cast<int>((at<std::uint32_t>(p, r * (k / 8) + c / 8) >> (4 * (c % 8))) & 15u);
            m.w[static_cast<std::size_t>(r * k + c)] = static_cast<float>(q - 8) * f16_at(sc, r * sc.shape[1] + c / g);
        }
    return m;
}

/// GPTQ v1 4-bit (AutoGPTQ / GPTQModel v1 -> v2 conversion: stored zero + 1): qweight [K/8, N]
/// packed along K, qzeros [G, N/8] packed along N, scales [G, N].
matrix decode_gptq4(const checkpoint_source& s, const std::string& module, bool v1) {
    const tensor_view qw = s.view(module + ".qweight"), qz = s.view(module + ".qzeros"), sc = s.view(module + ".scales");
    const std::int64_t k = qw.shape[0] * 8, n = qw.shape[1], g = k / sc.shape[0];
    matrix m{n, k, std::vector<float>(static_cast<std::size_t>(n * k))};
    for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t c = 0; c < k; ++c) {
            const int q = static_cast<int>((at<std::uint32_t>(qw, (c / 8) * n + r) >> (4 * (c % 8))) & 15u);
            const std::int64_t grp = c / g;
            const int z = static_cast<int>((at<std::uint32_t>(qz, grp * (n / 8) + r / 8) >> (4 * (r % 8))) & 15u) + (v1 ? 1 : 0);
            m.w[static_cast<std::size_t>(r * k + c)] = static_cast<float>(q - z) * f16_at(sc, grp * n + r);
        }
    return m;
}

/// AWQ GEMM 4-bit as vLLM reads it: qweight [K, N/8] with AutoAWQ's order [0,2,4,6,1,3,5,7]
/// (column 8w + order[i] in nibble i; vLLM awq.py undoes it with _REVERSE_AWQ_PACK_ORDER),
/// qzeros [G, N/8] the same way, scales [G, N], w = (q - z) * s.
matrix decode_awq4(const checkpoint_source& s, const std::string& module) {
    static constexpr int nibble_of_column[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    const tensor_view qw = s.view(module + ".qweight"), qz = s.view(module + ".qzeros"), sc = s.view(module + ".scales");
    const std::int64_t k = qw.shape[0], n = qw.shape[1] * 8, g = k / sc.shape[0];
    matrix m{n, k, std::vector<float>(static_cast<std::size_t>(n * k))};
    for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t c = 0; c < k; ++c) {
            const int sh = 4 * nibble_of_column[r % 8];
            const int q = static_cast<int>((at<std::uint32_t>(qw, c * (n / 8) + r / 8) >> sh) & 15u);
            const std::int64_t grp = c / g;
            const int z = static_cast<int>((at<std::uint32_t>(qz, grp * (n / 8) + r / 8) >> sh) & 15u);
            m.w[static_cast<std::size_t>(r * k + c)] = static_cast<float>(q - z) * f16_at(sc, grp * n + r);
        }
    return m;
}

matrix source_matrix(const checkpoint_source& s, const std::string& tensor) {
    const tensor_view v = s.view(tensor);
    matrix m{v.shape[0], v.shape[1], std::vector<float>(static_cast<std::size_t>(v.shape[0] * v.shape[1]))};
    for (std::size_t i = 0; i < m.w.size(); ++i) m.w[i] = f16_at(v, static_cast<std::int64_t>(i));
    return m;
}

/// Expert e's [out, in] matrix of a fused tensor, read with transformers' own indexing:
/// qwen3_moe `linear(x, gate_up_proj[e]).chunk(2)` -> rows [part*I, (part+1)*I) of [2I, H];
/// gpt_oss `x @ gate_up_proj[e]`, `gate_up[..., part::2]` -> out i = column 2i + part of [H, 2I].
matrix fused_expert(const checkpoint_source& s, const std::string& tensor, std::int64_t e, int part, bool gpt_oss) {
    const tensor_view v = s.view(tensor);
    const std::int64_t A = v.shape[1], B = v.shape[2];
    const bool gate_up = tensor.ends_with("gate_up_proj");
    matrix m;
    if (!gpt_oss) {
        m.rows = gate_up ? A / 2 : A;
        m.cols = B;
    } else {
        m.rows = gate_up ? B / 2 : B;
        m.cols = A;
    }
    m.w.resize(static_cast<std::size_t>(m.rows * m.cols));
    for (std::int64_t r = 0; r < m.rows; ++r)
        for (std::int64_t c = 0; c < m.cols; ++c) {
            std::int64_t a, b;
            if (!gpt_oss) {
                a = gate_up ? part * m.rows + r : r;
                b = c;
            } else {
                a = c;
                b = gate_up ? 2 * r + part : r;
            }
            m.w[static_cast<std::size_t>(r * m.cols + c)] = f16_at(v, (e * A + a) * B + b);
        }
    return m;
}

}  // namespace

TEST_CASE("MoE generator: Qwen, Mixtral, fused v5 and gpt-oss names, shapes and config.json") {
    {
        checkpoint_source s(moe_dir(demo_moe::qwen_moe, true));
        CHECK(s.contains("model.layers.1.mlp.gate.weight"));
        CHECK(s.contains("model.layers.1.mlp.experts.3.down_proj.weight"));
        CHECK(s.contains("model.layers.0.mlp.shared_expert.up_proj.weight"));
        CHECK(s.view("model.layers.0.mlp.shared_expert_gate.weight").shape == shape_t{1, 128});
        CHECK_FALSE(s.contains("model.layers.0.mlp.gate_proj.weight"));
        CHECK(s.config().at("model_type").as_string() == "qwen2_moe");
        CHECK(s.config().at("num_experts").as_int() == 4);
    }
    {
        checkpoint_source s(moe_dir(demo_moe::mixtral));
        CHECK(s.view("model.layers.0.block_sparse_moe.experts.2.w2.weight").shape == shape_t{128, 128});
        CHECK(s.view("model.layers.0.block_sparse_moe.gate.weight").shape == shape_t{4, 128});
        CHECK(s.config().at("model_type").as_string() == "mixtral");
        CHECK(s.config().at("num_local_experts").as_int() == 4);
    }
    {
        checkpoint_source s(moe_dir(demo_moe::qwen_moe_fused));
        CHECK(s.view("model.layers.0.mlp.experts.gate_up_proj").shape == shape_t{4, 256, 128});
        CHECK(s.view("model.layers.0.mlp.experts.down_proj").shape == shape_t{4, 128, 128});
        CHECK(s.config().at("architectures").at(0).as_string() == "Qwen3MoeForCausalLM");
        CHECK(s.config().at("moe_intermediate_size").as_int() == 128);
    }
    {
        checkpoint_source s(moe_dir(demo_moe::gpt_oss));
        CHECK(s.view("model.layers.0.mlp.experts.gate_up_proj").shape == shape_t{4, 128, 256});
        CHECK(s.view("model.layers.0.mlp.experts.gate_up_proj_bias").shape == shape_t{4, 256});
        CHECK(s.view("model.layers.0.mlp.experts.down_proj").shape == shape_t{4, 128, 128});
        CHECK(s.view("model.layers.0.mlp.router.bias").shape == shape_t{4});
        CHECK(s.config().at("model_type").as_string() == "gpt_oss");
    }
}

TEST_CASE("fused experts kept dense: every per-expert tensor is its source slice, byte for byte") {
    // Keeping the experts on purpose still cuts them per expert (the names loaders read), so the
    // gathered bytes can be compared exactly with transformers' indexing of the fused tensor.
    for (const bool gpt_oss : {false, true}) {
        CAPTURE(gpt_oss);
        const std::string& src_dir = moe_dir(gpt_oss ? demo_moe::gpt_oss : demo_moe::qwen_moe_fused);
        convert_options o = options(output_format::compressed_tensors);
        o.rules.keep("re:.*\\.experts\\..*");
        const std::string out = moe_scratch(std::string("keep") + (gpt_oss ? "-oss" : "-qwen"));
        convert(src_dir, out, o);
        checkpoint_source src(src_dir), dst(out);
        CHECK_FALSE(dst.contains("model.layers.0.mlp.experts.gate_up_proj"));
        for (int l = 0; l < 2; ++l)
            for (std::int64_t e = 0; e < 4; ++e) {
                const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
                const std::string x = p + std::to_string(e) + ".";
                CHECK(source_matrix(dst, x + "gate_proj.weight").w == fused_expert(src, p + "gate_up_proj", e, 0, gpt_oss).w);
                CHECK(source_matrix(dst, x + "up_proj.weight").w == fused_expert(src, p + "gate_up_proj", e, 1, gpt_oss).w);
                CHECK(source_matrix(dst, x + "down_proj.weight").w == fused_expert(src, p + "down_proj", e, 0, gpt_oss).w);
                if (gpt_oss) {
                    const tensor_view b = src.view(p + "gate_up_proj_bias"), gb = dst.view(x + "gate_proj.bias"),
                                      ub = dst.view(x + "up_proj.bias"), db = dst.view(x + "down_proj.bias");
                    for (std::int64_t i = 0; i < 128; ++i) {
                        CHECK(at<std::uint16_t>(gb, i) == at<std::uint16_t>(b, e * 256 + 2 * i));
                        CHECK(at<std::uint16_t>(ub, i) == at<std::uint16_t>(b, e * 256 + 2 * i + 1));
                        CHECK(at<std::uint16_t>(db, i) == at<std::uint16_t>(src.view(p + "down_proj_bias"), e * 128 + i));
                    }
                }
            }
        // Kept on purpose, and counted: bits per weight over the whole model is near 16.
        const json rep = json::parse(io::read_file(out + "/quantization_report.json"));
        CHECK(rep.at("bits_per_weight").as_double() > 12.0);
    }
}

TEST_CASE("fused experts quantized: decoded per expert, each matches its own source slice") {
    for (const bool gpt_oss : {false, true}) {
        CAPTURE(gpt_oss);
        const std::string& src_dir = moe_dir(gpt_oss ? demo_moe::gpt_oss : demo_moe::qwen_moe_fused);
        const std::string out = moe_scratch(std::string("q") + (gpt_oss ? "-oss" : "-qwen"));
        const conversion_result r = convert(src_dir, out, options(output_format::compressed_tensors));
        checkpoint_source src(src_dir), dst(out);
        for (const auto& t : dst.tensors()) CHECK(t.shape.size() <= 2);  // never a fused 3-D quantized tensor
        for (int l = 0; l < 2; ++l)
            for (std::int64_t e = 0; e < 4; ++e) {
                const std::string p = "model.layers." + std::to_string(l) + ".mlp.experts.";
                const std::string x = p + std::to_string(e) + ".";
                const matrix gate = fused_expert(src, p + "gate_up_proj", e, 0, gpt_oss);
                const matrix up = fused_expert(src, p + "gate_up_proj", e, 1, gpt_oss);
                const matrix got_gate = decode_ct4(dst, x + "gate_proj");
                CHECK(snr_db(gate, got_gate) > 15.0);
                CHECK(snr_db(up, got_gate) < 1.0);  // the check can fail: a swapped half scores ~0 dB
                CHECK(snr_db(up, decode_ct4(dst, x + "up_proj")) > 15.0);
                CHECK(snr_db(fused_expert(src, p + "down_proj", e, 0, gpt_oss), decode_ct4(dst, x + "down_proj")) > 15.0);
            }
        // Every weight counted: experts now quantized, so the whole model is near 4 bits + the
        // dense embeddings and head; the quantized linears alone at 4.25 + weight_shape.
        CHECK(r.report.quantized_bits_per_weight > 4.0);
        CHECK(r.report.quantized_bits_per_weight < 4.6);
        CHECK(r.report.bits_per_weight > r.report.quantized_bits_per_weight);
        CHECK(r.report.bits_per_weight < 8.0);
        CHECK(r.report.tensors.size() == 2 * (4 + 4 * 3));  // q, k, v, o + 4 experts x 3, per layer
    }
}

namespace {

/// Sets `keys` in src_dir's config.json, then checks that the plan is refused with a first
/// refusal holding every one of `texts`, and that convert() throws and writes nothing.
void expect_refused_by_config(const std::string& src_dir, std::initializer_list<std::pair<const char*, json>> keys,
                              std::initializer_list<const char*> texts) {
    json cfg = json::parse(io::read_file(src_dir + "/config.json"));
    for (const auto& kv : keys) cfg.set(kv.first, kv.second);
    io::write_file(src_dir + "/config.json", cfg.dump({.indent = 2}));
    checkpoint_source src(src_dir);
    const plan p = plan_conversion(src, options(output_format::gptq));
    REQUIRE(p.refused());
    CAPTURE(p.refusals.front());
    for (const char* t : texts) CHECK(p.refusals.front().find(t) != std::string::npos);
    const std::string out = src_dir + "-out";
    if (io::path_exists(out)) io::remove_tree(out);
    CHECK_THROWS_AS(convert(src_dir, out, options(output_format::gptq)), unsupported_error);
    CHECK_FALSE(io::path_exists(out));
}

}  // namespace

TEST_CASE("fused experts of an architecture without a verified rule are refused, nothing written") {
    // OLMoE also stores fused experts in transformers v5, in an orientation qforge has not read
    // in its modeling code: a guess would corrupt silently, so the plan refuses with the reason.
    const std::string src_dir = moe_scratch("fused-unknown");
    write_demo_checkpoint(src_dir, moe_demo(demo_moe::qwen_moe_fused));
    expect_refused_by_config(src_dir, {{"model_type", "olmoe"}, {"architectures", json::array({"OlmoeForCausalLM"})}},
                             {".mlp.experts.", "olmoe", "no verified orientation rule"});
}

namespace {

/// A fused tensor [E, A, B] in memory whose element (e, a, b) is the BF16 of e * 10000 + a * 100 + b
/// (every value distinct and exact): a cut is checked element by element against its formula.
owned_tensor numbered_fused(const std::string& name, std::int64_t E, std::int64_t A, std::int64_t B) {
    owned_tensor t{name, dtype::F32, {E, A, B}, std::vector<std::byte>(static_cast<std::size_t>(E * A * B) * 4)};
    for (std::int64_t i = 0; i < E * A * B; ++i) {
        const float v = static_cast<float>((i / (A * B)) * 10000 + ((i / B) % A) * 100 + i % B);
        std::memcpy(t.bytes.data() + 4 * i, &v, 4);
    }
    return t;
}

float at(const owned_tensor& t, std::int64_t r, std::int64_t c) {
    float v;
    std::memcpy(&v, t.bytes.data() + 4 * (r * t.shape[1] + c), 4);
    return v;
}

}  // namespace

// Qwen3-VL-MoE's Hub checkpoint holds the transpose of its in-memory [E, 2I, H] experts
// (transformers src/transformers/conversion_mapping.py _build_checkpoint_conversion_mapping
// "qwen3_vl_moe": Transpose(1, 2) on load; modeling_qwen3_vl_moe.py Qwen3VLMoeTextExperts):
// gate_up_proj [E, H, 2I], gate = columns [0, I), up = [I, 2I); down_proj [E, I, H]. Qwen3.5 MoE
// keeps the Qwen2-MoE [E, 2I, H] layout (modular_qwen3_5_moe.py Qwen3_5MoeExperts(Qwen3NextExperts),
// modular_qwen3_next.py Qwen3NextExperts(Qwen2MoeExperts)). Mixtral v5: the tests after this one.
TEST_CASE("fused expert rules: Qwen3-VL-MoE on-disk [E, H, 2I], Qwen3.5 MoE [E, 2I, H]") {
    const std::string p = "model.language_model.layers.0.mlp.experts.";
    model_config vl;
    vl.model_type = "qwen3_vl_moe";
    vl.hidden_size = 96;
    vl.moe_intermediate_size = 64;
    vl.num_experts = 3;
    std::string why;
    const owned_tensor gu = numbered_fused(p + "gate_up_proj", 3, 96, 128), down = numbered_fused(p + "down_proj", 3, 64, 96);
    const auto gpieces = split_fused_experts(gu.name, gu.shape, vl, why);
    REQUIRE_MESSAGE(gpieces.size() == 6, why);
    const auto dpieces = split_fused_experts(down.name, down.shape, vl, why);
    REQUIRE_MESSAGE(dpieces.size() == 3, why);
    for (std::int64_t e = 0; e < 3; ++e) {
        const expert_piece& g = gpieces[static_cast<std::size_t>(2 * e)];
        const expert_piece& u = gpieces[static_cast<std::size_t>(2 * e + 1)];
        const expert_piece& d = dpieces[static_cast<std::size_t>(e)];
        CHECK(g.name == p + std::to_string(e) + ".gate_proj.weight");
        CHECK(d.name == p + std::to_string(e) + ".down_proj.weight");
        CHECK(g.shape == shape_t{64, 96});
        CHECK(d.shape == shape_t{96, 64});
        const owned_tensor gt = gather_expert(gu.view(), g.cut, g.name, g.shape), ut = gather_expert(gu.view(), u.cut, u.name, u.shape);
        const owned_tensor dt = gather_expert(down.view(), d.cut, d.name, d.shape);
        bool ok = true;  // gate[r][k] = gate_up[e][k][r], up[r][k] = gate_up[e][k][I + r], down[h][i] = down_proj[e][i][h]
        for (std::int64_t r = 0; r < 64; ++r)
            for (std::int64_t k = 0; k < 96; ++k) {
                ok = ok && at(gt, r, k) == static_cast<float>(e * 10000 + k * 100 + r);
                ok = ok && at(ut, r, k) == static_cast<float>(e * 10000 + k * 100 + 64 + r);
                ok = ok && at(dt, k, r) == static_cast<float>(e * 10000 + r * 100 + k);
            }
        CHECK(ok);
    }
    // the in-memory orientation, and shapes where both orientations coincide, are refused
    CHECK(split_fused_experts(gu.name, {3, 128, 96}, vl, why).empty());
    CHECK(why.find("transpose of the on-disk layout") != std::string::npos);
    model_config square = vl;
    square.moe_intermediate_size = 48;  // 2I == H
    CHECK(split_fused_experts(gu.name, {3, 96, 96}, square, why).empty());
    CHECK(why.find("orientation would be a guess") != std::string::npos);

    // Qwen3.5 MoE: the cuts qwen3_moe makes
    model_config q35 = vl, q3 = vl;
    q35.model_type = "qwen3_5_moe";
    q3.model_type = "qwen3_moe";
    const auto a = split_fused_experts(gu.name, {3, 128, 96}, q35, why), b = split_fused_experts(gu.name, {3, 128, 96}, q3, why);
    REQUIRE(a.size() == 6);
    REQUIRE(b.size() == 6);
    for (std::size_t i = 0; i < a.size(); ++i) {
        CHECK(a[i].name == b[i].name);
        CHECK(a[i].shape == b[i].shape);
        CHECK((a[i].cut.first == b[i].cut.first && a[i].cut.step == b[i].cut.step && a[i].cut.transposed == b[i].cut.transposed));
    }
}

namespace {

/// Every tensor of the converted checkpoint in `dir`: name -> (dtype, shape, bytes).
std::map<std::string, std::tuple<dtype, shape_t, std::vector<std::byte>>> mixtral_v5_tensors(const std::string& dir) {
    std::map<std::string, std::tuple<dtype, shape_t, std::vector<std::byte>>> out;
    const checkpoint_source s(dir);
    for (const auto& t : s.tensors()) {
        const tensor_view v = s.view(t.name);
        out[t.name] = {t.type, t.shape, std::vector<std::byte>(v.bytes.begin(), v.bytes.end())};
    }
    return out;
}

/// The report's per-tensor entries by name (the order follows each source's tensor order).
std::map<std::string, std::string> mixtral_v5_report(const std::string& dir) {
    std::map<std::string, std::string> out;
    const json rep = json::parse(io::read_file(dir + "/quantization_report.json"));
    for (const json& e : rep.at("per_tensor").as_array()) out[e.at("name").as_string()] = e.dump();
    out["bits_per_weight"] = rep.at("bits_per_weight").dump();
    return out;
}

/// config.json with each compressed-tensors group's `targets` sorted: a target list names the
/// modules it holds in the order the source held them (the fused source holds each layer's w1
/// and w3 before its w2), and a loader matches any entry (find_matched_target), so the order
/// carries nothing. Every other byte is compared as written.
/// The per-expert Mixtral (w1/w3/w2, block_sparse_moe.gate) and its transformers v5 twin, once
/// per test program: I = 256, H = 128, so no two of H, I, 2I coincide and a transposed cut
/// could not even have the right shape.
const std::pair<std::string, std::string>& mixtral_v5_pair() {
    static const std::pair<std::string, std::string> dirs = [] {
        demo_options o = moe_demo(demo_moe::mixtral);
        o.moe_intermediate = 256;
        const std::string per_expert = moe_scratch("mx5-per-expert"), fused = moe_scratch("mx5-fused");
        write_demo_checkpoint(per_expert, o);
        testing::write_fused_twin(per_expert, fused);
        return std::pair{per_expert, fused};
    }();
    return dirs;
}

}  // namespace

// transformers v5 stores Mixtral's experts fused (conversion_mapping.py "mixtral": w1/w3 ->
// `mlp.experts.gate_up_proj [E, 2I, H]` by MergeModulelist(dim=0) + Concatenate(dim=1), w2 ->
// `mlp.experts.down_proj [E, H, I]`, router `.block_sparse_moe.gate` -> `.mlp.gate`). qforge cuts
// them back into the names every Mixtral loader reads, so the output is the per-expert twin's:
//  - vLLM model_executor/models/mixtral.py: MixtralDecoderLayer.block_sparse_moe (MixtralMoE:
//    `gate` a ReplicatedLinear with quant_config=None, `experts` a FusedMoE), and
//    MixtralModel.load_weights through get_expert_mapping -> FusedMoE.make_expert_params_mapping(
//    ckpt_gate_proj_name="w1", ckpt_down_proj_name="w2", ckpt_up_proj_name="w3"): a checkpoint name
//    must contain "experts.E.w1." etc. under `block_sparse_moe`; there is no mapper from `mlp.`,
//    so `mlp.experts.E.gate_proj` would miss params_dict;
//  - GPTQModel gptqmodel/models/definitions/mixtral.py: module tree `block_sparse_moe.experts.#`
//    with ("w1:0", "w3:0", "w2:1");
//  - transformers: the conversion mapping above reads `block_sparse_moe.experts.*.w1.weight`
//    (and the quantized loaders' DecompressExperts, integrations/compressed_tensors.py, run on it).
TEST_CASE("fused Mixtral (transformers v5): every safetensors format writes its per-expert twin's tensors and config") {
    const auto& [per_expert, fused] = mixtral_v5_pair();
    {
        checkpoint_source s(fused);
        CHECK(s.view("model.layers.1.mlp.experts.gate_up_proj").shape == shape_t{4, 512, 128});
        CHECK(s.view("model.layers.1.mlp.experts.down_proj").shape == shape_t{4, 128, 256});
        CHECK(s.contains("model.layers.1.mlp.gate.weight"));
        for (const auto& t : s.tensors()) CHECK(t.name.find("block_sparse_moe") == std::string::npos);
    }
    struct fmt_case {
        output_format f;
        quant_spec s;
    };
    const fmt_case cases[] = {{output_format::gptq, {4, 64, true, scale_method::minmax, std::nullopt}},
                              {output_format::gptq_v2, {4, 64, true, scale_method::minmax, std::nullopt}},
                              {output_format::awq, {4, 64, false, scale_method::minmax, std::nullopt}},
                              {output_format::compressed_tensors, {4, 64, true, scale_method::minmax, std::nullopt}},
                              {output_format::compressed_tensors_fp8, {8, -1, true, scale_method::minmax, std::nullopt}},
                              {output_format::fp8, {8, 128, true, scale_method::minmax, std::nullopt}},
                              {output_format::compressed_tensors_w8a8, {8, -1, true, scale_method::minmax, std::nullopt}},
                              {output_format::compressed_tensors_nvfp4, {4, 16, true, scale_method::minmax, std::nullopt}},
                              {output_format::compressed_tensors_mxfp4, {4, 32, true, scale_method::minmax, std::nullopt}}};
    for (const auto& c : cases) {
        const std::string fmt(format_name(c.f));
        CAPTURE(fmt);
        const std::string a = moe_scratch("mx5-a-" + fmt), b = moe_scratch("mx5-b-" + fmt);
        convert(per_expert, a, options(c.f, c.s));
        convert(fused, b, options(c.f, c.s));
        const auto want = mixtral_v5_tensors(a), got = mixtral_v5_tensors(b);
        CHECK(got.size() == want.size());
        for (const auto& w : want) {
            CAPTURE(w.first);
            const auto it = got.find(w.first);
            REQUIRE(it != got.end());
            CHECK(std::get<0>(it->second) == std::get<0>(w.second));
            CHECK(std::get<1>(it->second) == std::get<1>(w.second));
            CHECK(std::get<2>(it->second) == std::get<2>(w.second));
        }
        // config.json (quantization_config: ignore, dynamic, modules_to_not_convert; targets as a
        // set) and the side files, byte for byte; the report entry for entry.
        for (const auto& f : io::list_directory(a))
            if (!f.ends_with(".safetensors") && f != "model.safetensors.index.json" && f != "quantization_report.json" &&
                f != "config.json") {
                CAPTURE(f);
                CHECK(io::read_file(b + "/" + f) == io::read_file(a + "/" + f));
            }
        CHECK(testing::config_with_sorted_targets(b) == testing::config_with_sorted_targets(a));
        CHECK(mixtral_v5_report(b) == mixtral_v5_report(a));
        // The names the loaders above look up, and the router dense (vLLM builds it unquantized).
        checkpoint_source dst(b);
        CHECK(dst.view("model.layers.1.block_sparse_moe.gate.weight").type == dtype::BF16);
        for (const auto& t : dst.tensors()) CHECK(t.name.find(".mlp.") == std::string::npos);
        const json qc = quantization_config(b);
        const std::string router = "model.layers.1.block_sparse_moe.gate";
        if (c.f == output_format::gptq || c.f == output_format::gptq_v2) {
            CHECK(dst.contains("model.layers.1.block_sparse_moe.experts.3.w3.qweight"));
            // vLLM gptq_utils.get_dynamic_override: a "-:" key re.match-ing the router skips it
            bool skipped = false;
            for (const auto& m : qc.at("dynamic").as_object())
                skipped = skipped || std::regex_search(router, std::regex(m.key.substr(2)), std::regex_constants::match_continuous);
            CHECK(skipped);
        } else if (c.f == output_format::awq) {
            CHECK(dst.contains("model.layers.1.block_sparse_moe.experts.3.w2.qzeros"));
            CHECK(has(strings(qc.at("modules_to_not_convert")), router));  // vLLM is_layer_skipped
        } else if (c.f != output_format::fp8) {
            CHECK(has(strings(qc.at("ignore")), router));  // compressed-tensors should_ignore_layer
        }
    }
    // The plan says where each expert came from.
    std::ostringstream text;
    print_plan(text, plan_conversion(checkpoint_source(fused), options(output_format::gptq)));
    CHECK(text.str().find("model.layers.0.block_sparse_moe.experts.2.w3.weight [256, 128] BF16 (from "
                          "model.layers.0.mlp.experts.gate_up_proj expert 2)") != std::string::npos);
    CHECK(text.str().find("model.layers.0.block_sparse_moe.gate.weight [4, 128] BF16 (from model.layers.0.mlp.gate.weight)") !=
          std::string::npos);
}

TEST_CASE("fused Mixtral kept dense: each expert's w1 / w3 / w2 is its gate rows / up rows / down matrix, byte for byte") {
    const auto& [per_expert, fused] = mixtral_v5_pair();
    convert_options o = options(output_format::compressed_tensors);
    o.rules.keep("re:.*\\.experts\\..*");
    const std::string out = moe_scratch("mx5-keep");
    convert(fused, out, o);
    checkpoint_source src(per_expert), dst(out);
    for (int l = 0; l < 2; ++l)
        for (int e = 0; e < 4; ++e)
            for (const char* leaf : {"w1", "w3", "w2"}) {
                const std::string m = "model.layers." + std::to_string(l) + ".block_sparse_moe.experts." + std::to_string(e) + "." + leaf + ".weight";
                CAPTURE(m);
                const tensor_view a = src.view(m), b = dst.view(m);
                CHECK(a.shape == b.shape);
                REQUIRE(a.bytes.size() == b.bytes.size());
                CHECK(std::memcmp(a.bytes.data(), b.bytes.data(), a.bytes.size()) == 0);
            }
}

// What cannot be read without a guess is refused, naming the tensor and the reason: a shape that
// is the transpose of transformers' [E, 2I, H] / [E, H, I], a config.json without the sizes that
// tell the two apart, a bias (MixtralExperts has none), and a checkpoint holding the same experts
// or router twice (fused and per-expert names). Where H == 2I the two orientations have one
// shape: read as transformers reads it (MixtralExperts.forward: linear(x, gate_up_proj[e]).chunk(2)).
TEST_CASE("fused Mixtral refusals: transposed shapes, missing sizes, biases, the same experts twice") {
    model_config mx;
    mx.model_type = "mixtral";
    mx.architectures = {"MixtralForCausalLM"};
    mx.hidden_size = 96;
    mx.intermediate_size = 64;
    mx.num_experts = 3;
    const std::string p = "model.layers.0.mlp.experts.";
    std::string why;
    const auto pieces = split_fused_experts(p + "gate_up_proj", {3, 128, 96}, mx, why);
    REQUIRE_MESSAGE(pieces.size() == 6, why);
    CHECK(pieces[2].name == "model.layers.0.block_sparse_moe.experts.1.w1.weight");
    CHECK(pieces[3].name == "model.layers.0.block_sparse_moe.experts.1.w3.weight");
    CHECK(pieces[3].cut.first == 64);
    CHECK_FALSE(pieces[3].cut.transposed);
    const auto down = split_fused_experts(p + "down_proj", {3, 96, 64}, mx, why);
    REQUIRE(down.size() == 3);
    CHECK(down[2].name == "model.layers.0.block_sparse_moe.experts.2.w2.weight");
    CHECK(down[2].shape == shape_t{96, 64});
    // transposes
    CHECK(split_fused_experts(p + "gate_up_proj", {3, 96, 128}, mx, why).empty());
    CHECK(why.find("transpose of Mixtral's [E, 128, 96]") != std::string::npos);
    CHECK(split_fused_experts(p + "down_proj", {3, 64, 96}, mx, why).empty());
    CHECK(why.find("transpose of Mixtral's [E, 96, 64]") != std::string::npos);
    // Mixtral's expert size is intermediate_size (a moe_intermediate_size does not stand in)
    model_config no_i = mx;
    no_i.intermediate_size = 0;
    no_i.moe_intermediate_size = 64;
    CHECK(split_fused_experts(p + "gate_up_proj", {3, 128, 96}, no_i, why).empty());
    CHECK(why.find("must give hidden_size and intermediate_size") != std::string::npos);
    model_config wrong_i = mx;
    wrong_i.intermediate_size = 32;
    CHECK(split_fused_experts(p + "gate_up_proj", {3, 128, 96}, wrong_i, why).empty());
    CHECK(why.find("differs from config.json's intermediate_size 32") != std::string::npos);
    CHECK(split_fused_experts(p + "gate_up_proj_bias", {3, 128}, mx, why).empty());
    CHECK(why.find("only known for gpt_oss") != std::string::npos);
    // H == 2I: one shape for both orientations, cut as transformers reads it
    model_config square = mx;
    square.intermediate_size = 48;
    const auto sq = split_fused_experts(p + "gate_up_proj", {3, 96, 96}, square, why);
    REQUIRE_MESSAGE(sq.size() == 6, why);
    CHECK((sq[1].cut.first == 48 && sq[1].cut.step == 1 && !sq[1].cut.transposed));

    // The same weights twice: per-expert w1 beside the fused tensor, a v5 router beside the original.
    rule_set rules;
    rules.default_scheme = quant_spec{4, 32, true, scale_method::minmax, std::nullopt};
    auto refusal_of = [&](const std::vector<source_tensor>& t) {
        const plan pl = make_plan(t, mx, rules, output_format::gptq);
        REQUIRE(pl.refused());
        return pl.refusals.front();
    };
    const std::string twice = refusal_of({{p + "gate_up_proj", dtype::BF16, {3, 128, 96}, "a.safetensors"},
                                          {"model.layers.0.block_sparse_moe.experts.0.w1.weight", dtype::BF16, {64, 96}, "b.safetensors"}});
    CAPTURE(twice);
    CHECK(twice.find("a.safetensors") != std::string::npos);
    CHECK(twice.find(p + "gate_up_proj") != std::string::npos);
    CHECK(twice.find("expert 0") != std::string::npos);
    CHECK(twice.find("would be a guess") != std::string::npos);
    const std::string router = refusal_of({{"model.layers.0.mlp.gate.weight", dtype::BF16, {3, 96}, "a.safetensors"},
                                           {"model.layers.0.block_sparse_moe.gate.weight", dtype::BF16, {3, 96}, "a.safetensors"}});
    CHECK(router.find("model.layers.0.mlp.gate.weight") != std::string::npos);
    CHECK(router.find("also holds 'model.layers.0.block_sparse_moe.gate.weight'") != std::string::npos);
    // The rename is Mixtral's alone: a Qwen router keeps its name.
    model_config q = mx;
    q.model_type = "qwen3_moe";
    q.architectures = {};
    CHECK(loader_tensor_name("model.layers.0.mlp.gate.weight", q) == "model.layers.0.mlp.gate.weight");
    CHECK(loader_tensor_name("model.layers.0.mlp.gate.weight", mx) == "model.layers.0.block_sparse_moe.gate.weight");
}

TEST_CASE("a 3-D weight tensor no rule covers is refused, a keep rule keeps it and the plan counts it") {
    std::vector<source_tensor> t{{"model.layers.0.self_attn.q_proj.weight", dtype::BF16, {64, 64}, "m.safetensors"},
                                 {"model.layers.0.conv.weight", dtype::BF16, {8, 4, 64}, "m.safetensors"}};
    rule_set rules;
    rules.default_scheme = quant_spec{4, 64, true, scale_method::minmax, std::nullopt};
    const plan refused = make_plan(t, model_config{}, rules, output_format::compressed_tensors);
    REQUIRE(refused.refusals.size() == 1);
    CHECK(refused.refusals[0].find("model.layers.0.conv.weight") != std::string::npos);
    CHECK(refused.refusals[0].find("[8, 4, 64]") != std::string::npos);
    rules.keep("model.layers.0.conv");
    const plan kept = make_plan(t, model_config{}, rules, output_format::compressed_tensors);
    REQUIRE_FALSE(kept.refused());
    CHECK(kept.kept_matrices().first == 1);
    CHECK(kept.kept_matrices().second == 8 * 4 * 64);
    // 64x64 at ~4.5 bits + 2048 weights at 16: the model figure sees the dense tensor.
    CHECK(kept.bits_per_weight() > kept.quantized_bits_per_weight() + 1.0);
}

TEST_CASE("per-expert MoE, both naming styles: every expert of every format decodes to its source") {
    struct style_case {
        demo_moe style;
        const char* block;
        const char* leaves[3];
    };
    const style_case styles[] = {{demo_moe::qwen_moe, "mlp.experts.", {"gate_proj", "up_proj", "down_proj"}},
                                 {demo_moe::mixtral, "block_sparse_moe.experts.", {"w1", "w3", "w2"}}};
    for (const auto& st : styles)
        for (output_format f : {output_format::gptq, output_format::gptq_v2, output_format::awq, output_format::compressed_tensors}) {
            CAPTURE(st.block);
            CAPTURE(format_name(f));
            const quant_spec s{4, 64, f != output_format::awq, scale_method::minmax, std::nullopt};
            const std::string out = moe_scratch(std::string("pe-") + st.leaves[0] + "-" + std::string(format_name(f)));
            convert(moe_dir(st.style), out, options(f, s));
            checkpoint_source src(moe_dir(st.style)), dst(out);
            for (int l = 0; l < 2; ++l)
                for (int e = 0; e < 4; ++e)
                    for (const char* leaf : st.leaves) {
                        const std::string m = "model.layers." + std::to_string(l) + "." + st.block + std::to_string(e) + "." + leaf;
                        const matrix ref = source_matrix(src, m + ".weight");
                        const matrix got = f == output_format::compressed_tensors ? decode_ct4(dst, m)
                                           : f == output_format::awq              ? decode_awq4(dst, m)
                                                                                  : decode_gptq4(dst, m, f == output_format::gptq);
                        CHECK(snr_db(ref, got) > 15.0);
                    }
        }
}

TEST_CASE("compressed-tensors MoE config: the shape every vLLM MoE path and transformers resolve") {
    for (const demo_moe style : {demo_moe::qwen_moe, demo_moe::mixtral}) {
        const bool mixtral = style == demo_moe::mixtral;
        CAPTURE(mixtral);
        const std::string out = moe_scratch(mixtral ? "ct-mixtral" : "ct-qwen");
        convert(moe_dir(style, !mixtral), out, options(output_format::compressed_tensors));
        const json qc = quantization_config(out);
        const json& groups = qc.at("config_groups");
        REQUIRE(groups.size() == 1);
        const auto targets = strings(groups.at("group_0").at("targets"));
        const auto ignore = strings(qc.at("ignore"));
        // llm-compressor's MoE shape: one group targeting the Linear class, dense modules ignored.
        CHECK(targets == std::vector<std::string>{"Linear"});
        // Older vLLM: CompressedTensorsMoEMethod.get_moe_method(quant_config, layer) reads
        // quant_config.target_scheme_map["Linear"] (compressed_tensors_moe.py).
        CHECK(has(targets, "Linear"));
        // Newer vLLM: get_moe_method looks up "<prefix>.0.gate_proj" on the FusedMoE module after
        // _add_fused_moe_to_target_scheme_map copied "Linear" to "FusedMoE"; find_matched_target
        // (compressed_tensors/utils.py) tries the name, then the class name by case-insensitive
        // substring. Mixtral's experts are w1/w2/w3 on disk, so the name never matches; the class does.
        std::vector<std::string> keys = targets;
        if (has(keys, "Linear") && !has(keys, "FusedMoE")) keys.push_back("FusedMoE");
        const std::string lookup = std::string("model.layers.0.") + (mixtral ? "block_sparse_moe" : "mlp") + ".experts.0.gate_proj";
        auto matched = [&](const std::string& name, const std::string& cls) -> std::string {
            for (const auto& k : keys)
                if (k == name) return k;
            std::string c = cls;
            for (auto& ch : c) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
            for (const auto& k : keys) {
                std::string lk = k;
                for (auto& ch : lk) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
                if (c.find(lk) != std::string::npos) return k;
            }
            return {};
        };
        CHECK_FALSE(has(ignore, lookup));  // should_ignore_layer first: the experts are not ignored
        CHECK(matched(lookup, "FusedMoE") == "FusedMoE");
        // Attention linears resolve through the same class target (QKVParallelLinear, RowParallelLinear).
        CHECK(matched("model.layers.0.self_attn.qkv_proj", "QKVParallelLinear") == "Linear");
        // Routers, shared-expert gates and the head: dense, and listed in ignore (should_ignore_layer:
        // exact name), since "Linear" would otherwise select a router built as a ReplicatedLinear.
        const std::string router = mixtral ? "model.layers.0.block_sparse_moe.gate" : "model.layers.0.mlp.gate";
        CHECK(has(ignore, router));
        CHECK(has(ignore, "lm_head"));
        if (!mixtral) CHECK(has(ignore, "model.layers.1.mlp.shared_expert_gate"));
        if (!mixtral) CHECK_FALSE(has(ignore, "model.layers.1.mlp.shared_expert.gate_proj"));  // quantized
        checkpoint_source dst(out);
        CHECK(dst.view(router + ".weight").type == dtype::BF16);
        // transformers get_scheme: no name target matches "<experts>.0.<leaf>", so the group
        // holding "Linear" is the experts' scheme (integrations/compressed_tensors.py).
        CHECK(groups.at("group_0").at("weights").at("num_bits").as_int() == 4);
    }
}

TEST_CASE("compressed-tensors MoE with several schemes: experts' group first with Linear; fused layers must join it") {
    convert_options o = options(output_format::compressed_tensors);
    o.rules.quantize("re:.*o_proj", {8, -1, true, scale_method::minmax, std::nullopt});
    const std::string out = moe_scratch("ct-mixed");
    convert(moe_dir(demo_moe::qwen_moe), out, o);
    const json groups = quantization_config(out).at("config_groups");
    REQUIRE(groups.size() == 2);
    const auto g0 = strings(groups.at("group_0").at("targets")), g1 = strings(groups.at("group_1").at("targets"));
    // transformers get_experts_scheme takes the first group with a non-regex target.
    CHECK(has(g0, "Linear"));
    CHECK(has(g0, "model.layers.0.mlp.experts.0.gate_proj"));
    CHECK(groups.at("group_0").at("weights").at("num_bits").as_int() == 4);
    // o_proj is unfused in vLLM: its exact name matches group_1 before any class target.
    CHECK(has(g1, "model.layers.1.self_attn.o_proj"));
    CHECK_FALSE(has(g1, "Linear"));
    // q/k/v are fused (QKVParallelLinear): the class target would win over their shard names.
    o.rules.quantize("re:.*[qkv]_proj", {8, -1, true, scale_method::minmax, std::nullopt});
    const plan p = plan_conversion(checkpoint_source(moe_dir(demo_moe::qwen_moe)), o);
    REQUIRE(p.refused());
    CHECK(p.refusals.front().find("find_matched_target") != std::string::npos);
}

TEST_CASE("MoE experts of one block share one scheme, and all experts share one") {
    checkpoint_source src(moe_dir(demo_moe::qwen_moe));
    convert_options o = options(output_format::compressed_tensors);
    o.rules.quantize("model.layers.0.mlp.experts.2.down_proj", {8, 64, true, scale_method::minmax, std::nullopt});
    plan p = plan_conversion(src, o);
    REQUIRE(p.refused());
    CHECK(p.refusals.front().find("All MoE projections need to have same quantization scheme") != std::string::npos);
    o = options(output_format::compressed_tensors);
    o.rules.keep("model.layers.1.mlp.experts.0.down_proj");
    p = plan_conversion(src, o);
    REQUIRE(p.refused());
    CHECK(p.refusals.front().find("kept dense") != std::string::npos);
    o = options(output_format::compressed_tensors);
    o.rules.quantize("re:model\\.layers\\.1\\.mlp\\.experts\\..*", {8, 64, true, scale_method::minmax, std::nullopt});
    p = plan_conversion(src, o);
    REQUIRE(p.refused());
    CHECK(p.refusals.front().find("target_scheme_map") != std::string::npos);
    // Kept whole on purpose: a block may stay dense (newer vLLM finds its experts in `ignore`).
    o = options(output_format::compressed_tensors);
    o.rules.keep("re:model\\.layers\\.1\\.mlp\\.experts\\..*");
    p = plan_conversion(src, o);
    CHECK_FALSE(p.refused());
    // ... but older vLLM gives every fused-MoE layer the "Linear" scheme: warned.
    REQUIRE(p.warnings.size() == 1);
    CHECK(p.warnings[0].find("gives the dense blocks the quantized experts' scheme") != std::string::npos);
    // Every expert dense: older vLLM's get_moe_method indexes target_scheme_map["Linear"],
    // which no group then holds -> warned, naming it.
    o = options(output_format::compressed_tensors);
    o.rules.keep("re:.*\\.mlp\\.experts\\..*");
    p = plan_conversion(src, o);
    CHECK_FALSE(p.refused());
    REQUIRE(p.warnings.size() == 1);
    CHECK(p.warnings[0].find("KeyError 'Linear'") != std::string::npos);
}

TEST_CASE("AWQ MoE: routers and shared-expert gates listed in modules_to_not_convert") {
    const std::string out = moe_scratch("awq-moe");
    convert(moe_dir(demo_moe::qwen_moe, true), out, options(output_format::awq, {4, 64, false, scale_method::minmax, std::nullopt}));
    const auto skip = strings(quantization_config(out).at("modules_to_not_convert"));
    // vLLM auto_awq.py get_quant_method -> is_layer_skipped(prefix, modules_to_not_convert);
    // transformers should_convert_module matches full names.
    CHECK(has(skip, "model.layers.0.mlp.gate"));
    CHECK(has(skip, "model.layers.1.mlp.shared_expert_gate"));
    CHECK(has(skip, "lm_head"));
    CHECK_FALSE(has(skip, "model.layers.0.mlp.experts.0.gate_proj"));
    // vLLM quant_utils.is_layer_skipped(prefix, modules_to_not_convert, skip_with_substr=True):
    // any entry that is a substring of the prefix skips the layer. No entry may hit a quantized
    // layer's vLLM prefix (the fused-MoE layer, fused qkv / gate_up), every router must be hit.
    auto skipped = [&](const std::string& prefix) {
        for (const auto& x : skip)
            if (prefix.find(x) != std::string::npos) return true;
        return false;
    };
    for (int l = 0; l < 2; ++l) {
        const std::string b = "model.layers." + std::to_string(l) + ".";
        CHECK_FALSE(skipped(b + "mlp.experts"));
        CHECK_FALSE(skipped(b + "self_attn.qkv_proj"));
        CHECK_FALSE(skipped(b + "self_attn.o_proj"));
        CHECK_FALSE(skipped(b + "mlp.shared_expert.gate_up_proj"));
        CHECK_FALSE(skipped(b + "mlp.shared_expert.down_proj"));
        CHECK(skipped(b + "mlp.gate"));
        CHECK(skipped(b + "mlp.shared_expert_gate"));
    }
}

TEST_CASE("GPTQ MoE: routers kept dense through GPTQModel's dynamic negative matches") {
    for (const demo_moe style : {demo_moe::qwen_moe, demo_moe::mixtral}) {
        const std::string out = moe_scratch(style == demo_moe::mixtral ? "gptq-mixtral" : "gptq-qwen");
        convert(moe_dir(style), out, options(output_format::gptq));
        const json qc = quantization_config(out);
        const json side = json::parse(io::read_file(out + "/quantize_config.json"));
        REQUIRE(qc.contains("dynamic"));
        CHECK(side.at("dynamic").size() == qc.at("dynamic").size());
        CHECK(qc.at("dynamic").size() == 2);  // one router per layer
        const std::string router = style == demo_moe::mixtral ? "model.layers.0.block_sparse_moe.gate" : "model.layers.0.mlp.gate";
        // vLLM gptq_utils.get_dynamic_override: "-:" pattern, re.match against the module name
        // (a prefix match; the written "$" anchors it) -> False -> unquantized.
        int router_hits = 0, other_hits = 0;
        for (const auto& member : qc.at("dynamic").as_object()) {
            const std::string& key = member.key;
            const json& value = member.value;
            REQUIRE(key.starts_with("-:"));
            CHECK(value.size() == 0);
            const std::regex re(key.substr(2));
            auto prefix_match = [&](const std::string& n) { return std::regex_search(n, re, std::regex_constants::match_continuous); };
            router_hits += prefix_match(router);
            other_hits += prefix_match(router + "_up_proj") + prefix_match("model.layers.0.mlp.experts.0.gate_proj") +
                          prefix_match("model.layers.10.mlp.gate") + prefix_match("model.layers.0.mlp.experts") +
                          prefix_match("model.layers.0.block_sparse_moe.experts");
        }
        CHECK(router_hits == 1);
        CHECK(other_hits == 0);
        checkpoint_source dst(out);
        CHECK(dst.view(router + ".weight").type == dtype::BF16);
    }
    // Dense models get no dynamic key (their bytes are unchanged).
    const std::string dense = moe_scratch("gptq-dense");
    const std::string src = moe_scratch("dense-src");
    write_demo_checkpoint(src, testing::small_demo());
    convert(src, dense, options(output_format::gptq));
    CHECK_FALSE(quantization_config(dense).contains("dynamic"));
}

TEST_CASE("MoE warnings name the engine that misreads the output") {
    // Other warnings (the loader contracts') may sit beside these: count the MoE ones by content.
    auto with = [](const plan& p, const char* needle) {
        std::vector<std::string> hits;
        for (const auto& w : p.warnings)
            if (w.find(needle) != std::string::npos) hits.push_back(w);
        return hits;
    };
    checkpoint_source src(moe_dir(demo_moe::qwen_moe));
    // gptq-v2 symmetric MoE: vLLM's CPU MoE kernel adds 1 to the stored zero
    // (cpu_moe.py prepare_int4_moe_layer_for_cpu), and vLLM ignores checkpoint_format.
    const auto v2_warned = with(plan_conversion(src, options(output_format::gptq_v2)), "prepare_int4_moe_layer_for_cpu");
    REQUIRE(v2_warned.size() == 1);
    CHECK(v2_warned[0].find("--format gptq") != std::string::npos);
    CHECK(with(plan_conversion(src, options(output_format::gptq)), "prepare_int4_moe_layer_for_cpu").empty());
    // The stored v1 zero really is 7 (+1 = 8 in that kernel) and v2's is 8 (+1 = 9).
    const std::string v1 = moe_scratch("w-v1"), v2 = moe_scratch("w-v2");
    convert(moe_dir(demo_moe::qwen_moe), v1, options(output_format::gptq));
    convert(moe_dir(demo_moe::qwen_moe), v2, options(output_format::gptq_v2));
    CHECK(at<std::uint32_t>(checkpoint_source(v1).view("model.layers.0.mlp.experts.1.up_proj.qzeros"), 0) == 0x77777777u);
    CHECK(at<std::uint32_t>(checkpoint_source(v2).view("model.layers.0.mlp.experts.1.up_proj.qzeros"), 0) == 0x88888888u);
    // compressed-tensors asymmetric MoE: transformers' DecompressExperts never collects
    // weight_zero_point (integrations/compressed_tensors.py _EXPERT_COMPONENTS_BY_FORMAT).
    const quant_spec asym{4, 64, false, scale_method::minmax, std::nullopt};
    CHECK(with(plan_conversion(src, options(output_format::compressed_tensors, asym)), "DecompressExperts").size() == 1);
    CHECK(with(plan_conversion(src, options(output_format::compressed_tensors)), "DecompressExperts").empty());
    // A dense model warns about neither.
    const std::string dense_dir = moe_scratch("dense-warn");
    write_demo_checkpoint(dense_dir, testing::small_demo());
    checkpoint_source dense(dense_dir);
    CHECK(with(plan_conversion(dense, options(output_format::gptq_v2)), "MoE").empty());
    CHECK(with(plan_conversion(dense, options(output_format::compressed_tensors, asym)), "MoE").empty());
    std::ostringstream text;
    print_plan(text, plan_conversion(src, options(output_format::gptq_v2)));
    CHECK(text.str().find("warning: gptq-v2 symmetric MoE") != std::string::npos);
}

TEST_CASE("malformed fused expert tensors are refused naming the tensor and the reason") {
    model_config c;
    c.model_type = "qwen3_moe";
    c.num_experts = 4;
    c.hidden_size = 64;
    c.moe_intermediate_size = 32;
    rule_set rules;
    rules.default_scheme = quant_spec{4, 32, true, scale_method::minmax, std::nullopt};
    auto refusal = [&](const std::string& name, const shape_t& shape, const model_config& cfg) {
        const std::vector<source_tensor> t{{name, dtype::BF16, shape, "m.safetensors"}};
        const plan p = make_plan(t, cfg, rules, output_format::compressed_tensors);
        REQUIRE(p.refused());
        CHECK(p.refusals.front().find("m.safetensors") != std::string::npos);
        CHECK(p.refusals.front().find(name) != std::string::npos);
        return p.refusals.front();
    };
    const std::string gu = "model.layers.0.mlp.experts.gate_up_proj";
    CHECK(refusal(gu, {4, 64}, c).find("3-D") != std::string::npos);
    CHECK(refusal("model.layers.0.mlp.experts.down_proj", {4, 0, 32}, c).find("empty dimension") != std::string::npos);
    CHECK(refusal(gu, {3, 64, 64}, c).find("config.json says 4") != std::string::npos);
    CHECK(refusal(gu, {4, 63, 64}, c).find("not even") != std::string::npos);
    CHECK(refusal(gu, {4, 128, 64}, c).find("moe_intermediate_size") != std::string::npos);
    CHECK(refusal(gu, {4, 64, 48}, c).find("hidden_size") != std::string::npos);
    CHECK(refusal("model.layers.0.mlp.experts.gate_up_proj_bias", {4, 64}, c).find("gpt_oss") != std::string::npos);
    model_config many = c;
    many.num_experts = 0;
    CHECK(refusal(gu, {max_fused_experts + 1, 2, 1}, many).find("more than qforge accepts") != std::string::npos);
    // The well-formed one is accepted and cut into 4 x (gate, up) pieces of [32, 64].
    const std::vector<source_tensor> ok{{gu, dtype::BF16, {4, 64, 64}, "m.safetensors"}};
    const plan p = make_plan(ok, c, rules, output_format::compressed_tensors);
    REQUIRE_FALSE(p.refused());
    REQUIRE(p.items.size() == 8);
    CHECK(p.items[3].name == "model.layers.0.mlp.experts.1.up_proj.weight");
    CHECK(p.items[3].shape == shape_t{32, 64});
    CHECK(p.items[3].cut->first == 32);
}

TEST_CASE("fused experts: mapped or copied reads, one or two threads, write the same bytes") {
    const std::string& src = moe_dir(demo_moe::gpt_oss);
    convert_options o = options(output_format::gptq);
    o.threads = 1;
    const std::string a = moe_scratch("same-a"), b = moe_scratch("same-b");
    convert(src, a, o);
    o.threads = 2;
    o.read = source_read::copied;
    convert(src, b, o);
    checkpoint_source x(a), y(b);
    REQUIRE(x.tensors().size() == y.tensors().size());
    for (const auto& t : x.tensors()) {
        CAPTURE(t.name);
        const tensor_view u = x.view(t.name), v = y.view(t.name);
        REQUIRE(u.bytes.size() == v.bytes.size());
        CHECK(std::memcmp(u.bytes.data(), v.bytes.data(), u.bytes.size()) == 0);
    }
}
