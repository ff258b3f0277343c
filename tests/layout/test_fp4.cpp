// NVFP4 and MXFP4: golden bytes hand-computed from the formats' definitions (the header
// comments of layout/nvfp4.hpp, layout/mxfp4.hpp and layout/gguf/mxfp4.hpp cite them), decode
// of the written bytes, the shared global scale of a fused group, configs and refusals.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "qforge/core/half.hpp"
#include "qforge/core/minifloat.hpp"
#include "qforge/layout/gguf/mxfp4.hpp"
#include "qforge/layout/gguf/quantize.hpp"
#include "qforge/layout/mxfp4.hpp"
#include "qforge/layout/nvfp4.hpp"

using namespace qforge;

namespace {

struct f32_matrix {
    std::string name;
    std::int64_t rows, cols;
    std::vector<float> v;
    tensor_view view() const {
        return {name, dtype::F32, {rows, cols},
                std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()), v.size() * 4)};
    }
};

std::vector<std::uint8_t> fp4_bytes_of(const owned_tensor& t) {
    std::vector<std::uint8_t> out(t.bytes.size());
    std::memcpy(out.data(), t.bytes.data(), out.size());
    return out;
}

std::vector<tensor_view> fp4_views_of(const std::vector<owned_tensor>& ts) {
    std::vector<tensor_view> v;
    for (const auto& t : ts) v.push_back(t.view());
    return v;
}

float global_of(const std::vector<owned_tensor>& ts) {
    float g;
    std::memcpy(&g, ts.at(2).bytes.data(), 4);
    return g;
}

f32_matrix random_matrix(std::int64_t rows, std::int64_t cols, unsigned seed, float scale = 0.05f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, scale);
    f32_matrix m{"m.weight", rows, cols, std::vector<float>(static_cast<std::size_t>(rows * cols))};
    for (float& x : m.v) x = d(rng);
    return m;
}

}  // namespace

TEST_CASE("E2M1 fast code == float_to_e2m1 for every finite bf16 value and every float around each threshold") {
    for (std::uint32_t h = 0; h < 0x10000u; ++h) {
        const float f = bf16_to_float(static_cast<std::uint16_t>(h));
        if (!std::isfinite(f)) continue;
        const float c = std::clamp(f, -6.0f, 6.0f);
        REQUIRE(detail::e2m1_code_of(c) == float_to_e2m1(c));
    }
    for (float t : {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f})
        for (float s : {1.0f, -1.0f})
            for (float x : {std::nextafter(t, 0.0f), t, std::nextafter(t, 7.0f)}) {
                CAPTURE(s * x);
                CHECK(detail::e2m1_code_of(s * x) == float_to_e2m1(s * x));
            }
}

TEST_CASE("NVFP4 golden: one group, every E2M1 tie to the even code, -0.25 keeps its sign, global 448*6/amax") {
    f32_matrix w{"l.weight", 1, 16, {0, 0.25f, 0.5f, 0.75f, 1, 1.25f, 1.5f, 1.75f, 2, 2.5f, 3, 3.5f, 4, 5, 6, -0.25f}};
    const auto t = nvfp4_layout({false, dtype::F32}).quantize(w.view(), "l");
    REQUIRE(t.size() == 3);
    CHECK(t[0].name == "l.weight_packed");
    CHECK(t[0].type == dtype::U8);
    CHECK(t[0].shape == shape_t{1, 8});
    CHECK(fp4_bytes_of(t[0]) == std::vector<std::uint8_t>{0x00, 0x21, 0x22, 0x43, 0x44, 0x65, 0x66, 0x87});
    CHECK(t[1].type == dtype::F8_E4M3);
    CHECK(fp4_bytes_of(t[1]) == std::vector<std::uint8_t>{0x7E});  // 448 * (6 / 6) = 448
    CHECK(t[2].type == dtype::F32);
    CHECK(t[2].shape == shape_t{1});
    CHECK(global_of(t) == 448.0f);  // 2688 / 6
}

TEST_CASE("NVFP4 golden: zero group -> eps scale 0.125, small normal scale, subnormal scale, group amax from a sibling") {
    f32_matrix w{"l.weight", 1, 48, std::vector<float>(48, 0.0f)};
    w.v[16] = 0.001f;
    w.v[17] = -0.0005f;
    w.v[32] = 7.9e-5f;
    const auto t = nvfp4_layout({false, dtype::F32}).quantize(w.view(), "l", 6.0f);  // the sibling's amax is 6
    CHECK(global_of(t) == 448.0f);
    // g0: amax 0 -> scale 0 -> 0.125 (0x20). g1: 448 * 0.001/6 = 0.0747 -> 1.25 * 2^-4 (0x1A).
    // g2: 448 * 7.9e-5/6 = 3.02 * 2^-9 -> subnormal 3 * 2^-9 (0x03).
    CHECK(fp4_bytes_of(t[1]) == std::vector<std::uint8_t>{0x20, 0x1A, 0x03});
    std::vector<std::uint8_t> packed(24, 0);
    packed[8] = 0xD7;   // 0.001 / (0.078125/448) = 5.73 -> 6 (7); -0.0005 -> -2.87 -> -3 (0xD)
    packed[16] = 0x07;  // 7.9e-5 / (0.005859375/448) = 6.04 -> clamp 6 (7)
    CHECK(fp4_bytes_of(t[0]) == packed);
}

TEST_CASE("NVFP4 decode of the written bytes: e2m1 * (e4m3(scale) / global), and the SNR it reports") {
    const f32_matrix w = random_matrix(8, 64, 7);
    snr_sums sums;
    const nvfp4_layout layout({false, dtype::F32});
    const auto t = layout.quantize(w.view(), "m", std::nullopt, {}, &sums);
    const auto dq = layout.decode(fp4_views_of(t), "m");
    const float g = global_of(t);
    double sig = 0, err = 0;
    for (std::int64_t r = 0; r < 8; ++r)
        for (std::int64_t c = 0; c < 64; ++c) {
            const std::uint8_t byte = static_cast<std::uint8_t>(t[0].bytes[static_cast<std::size_t>(r * 32 + c / 2)]);
            const std::uint8_t code = c % 2 ? byte >> 4 : byte & 0xF;
            const auto s = static_cast<std::uint8_t>(t[1].bytes[static_cast<std::size_t>(r * 4 + c / 16)]);
            const float want = e2m1_to_float(code) * (e4m3_to_float(s) / g);
            const std::size_t i = static_cast<std::size_t>(r * 64 + c);
            REQUIRE(dq[i] == want);
            sig += static_cast<double>(w.v[i]) * w.v[i];
            err += (static_cast<double>(w.v[i]) - dq[i]) * (static_cast<double>(w.v[i]) - dq[i]);
        }
    CHECK(sums.db() == doctest::Approx(10 * std::log10(sig / err)).epsilon(1e-5));  // float lanes, reduced in double
    CHECK(sums.db() > 15.0);
}

TEST_CASE("NVFP4 fused group: siblings quantized under the group's amax share one global scale; alone they would not") {
    // vLLM keeps one global scale per fused layer (weight_global_scale.max() for q/k/v and
    // gate/up, w13_weight_global_scale[:, 0] for an expert's gate/up: layout/nvfp4.hpp).
    f32_matrix q = random_matrix(4, 32, 1, 0.02f), k = random_matrix(4, 32, 2, 0.2f), v = random_matrix(4, 32, 3, 0.05f);
    const nvfp4_layout layout({false, dtype::F32});
    const float amax = std::max({nvfp4_layout::amax_of(q.view()), nvfp4_layout::amax_of(k.view()), nvfp4_layout::amax_of(v.view())});
    const auto tq = layout.quantize(q.view(), "q", amax), tk = layout.quantize(k.view(), "k", amax), tv = layout.quantize(v.view(), "v", amax);
    CHECK(fp4_bytes_of(tq[2]) == fp4_bytes_of(tk[2]));
    CHECK(fp4_bytes_of(tk[2]) == fp4_bytes_of(tv[2]));
    CHECK(global_of(tq) == nvfp4_global_scale(amax));
    CHECK(global_of(layout.quantize(q.view(), "q")) != global_of(tq));  // its own amax is smaller
    // Decoding each sibling with the one shared global gives back what was written.
    for (const auto* t : {&tq, &tk, &tv}) CHECK_NOTHROW(layout.decode(fp4_views_of(*t), t->front().name.substr(0, 1)));
}

TEST_CASE("NVFP4 BF16 weights: amax/6 is rounded to bf16 before the global multiplies it") {
    // amax_g = 3 of a bf16 row, group amax passed 3e-3 -> global = 896000. local = bf16(0.5) = 0.5
    // -> 448000 -> saturates to 448 (0x7E). A second group amax 1e-3 (bf16 0.00099945068359375):
    // local = bf16(1.6657e-4) = 1.66893005e-4 -> 149.536 -> 144 (0x71).
    std::vector<std::uint16_t> h(32, 0);
    h[0] = float_to_bf16(3.0f);
    h[16] = float_to_bf16(1e-3f);
    const tensor_view w{"b.weight", dtype::BF16, {1, 32}, std::span<const std::byte>(reinterpret_cast<const std::byte*>(h.data()), 64)};
    const auto t = nvfp4_layout({false, dtype::BF16}).quantize(w, "b", 3e-3f);
    const float local = bf16_to_float(float_to_bf16(bf16_to_float(h[16]) / 6.0f));
    CHECK(fp4_bytes_of(t[1])[1] == float_to_e4m3(nvfp4_global_scale(3e-3f) * local));
    CHECK(fp4_bytes_of(t[1])[0] == 0x7E);
}

TEST_CASE("NVFP4 refusals name the tensor: K odd, K not a multiple of 16, NaN, wrong dtype") {
    const nvfp4_layout layout;
    f32_matrix odd{"x.weight", 2, 17, std::vector<float>(34, 0.5f)};
    CHECK_THROWS_WITH_AS(layout.quantize(odd.view(), "x"), doctest::Contains("x.weight"), unsupported_error);
    CHECK_THROWS_WITH_AS(layout.quantize(odd.view(), "x"), doctest::Contains("K=17 is odd"), unsupported_error);
    f32_matrix k24{"y.weight", 2, 24, std::vector<float>(48, 0.5f)};
    CHECK_THROWS_WITH_AS(layout.quantize(k24.view(), "y"), doctest::Contains("K=24 is not a multiple of 16"), unsupported_error);
    CHECK(layout.refusal(24).find("multiple of 16") != std::string::npos);
    CHECK(layout.refusal(4096).empty());
    f32_matrix nan{"z.weight", 1, 16, std::vector<float>(16, 0.5f)};
    nan.v[5] = std::nanf("");
    CHECK_THROWS_WITH_AS(layout.quantize(nan.view(), "z"), doctest::Contains("row 0, column 5"), unsupported_error);
    const f32_matrix ok = random_matrix(1, 16, 3);
    const auto t = layout.quantize(ok.view(), "m");
    auto views = fp4_views_of(t);
    views.pop_back();  // no weight_global_scale
    CHECK_THROWS_WITH_AS(layout.decode(views, "m"), doctest::Contains("m.weight_global_scale"), format_error);
}

TEST_CASE("NVFP4 W4A4 writes input_global_scale; config groups as compressed-tensors writes them and vLLM matches") {
    const nvfp4_layout a16({false, dtype::BF16}), a4({true, dtype::BF16, 12.5f});
    CHECK(a16.specs(8, 32).size() == 3);
    const auto specs = a4.specs(8, 32);
    REQUIRE(specs.size() == 4);
    CHECK(specs[3].suffix == ".input_global_scale");
    const auto t = a4.quantize(random_matrix(2, 16, 5).view(), "m");
    float ig;
    std::memcpy(&ig, t[3].bytes.data(), 4);
    CHECK(ig == 12.5f);

    const std::vector<linear_entry> linears{{"model.layers.0.self_attn.q_proj", true, 4, 16, true, 8, 32, {}},
                                            {"model.layers.0.mlp.gate", false, 4, -1, true, 8, 32, {}},
                                            {"lm_head", false, 4, -1, true, 8, 32, {}}};
    // vLLM compressed_tensors.py _is_fp4a16_nvfp4: weights only, strategy tensor_group,
    // float, 4 bits, group 16, symmetric; _is_fp4a4_nvfp4: the same for input_activations.
    const json c = a16.config(linears);
    CHECK(c.at("format").as_string() == "nvfp4-pack-quantized");
    const json& g = c.at("config_groups").at("group_0");
    CHECK(g.at("format").as_string() == "nvfp4-pack-quantized");
    CHECK(g.at("input_activations").is_null());
    const json& wq = g.at("weights");
    CHECK(wq.at("strategy").as_string() == "tensor_group");
    CHECK(wq.at("type").as_string() == "float");
    CHECK(wq.at("num_bits").as_int() == 4);
    CHECK(wq.at("group_size").as_int() == 16);
    CHECK(wq.at("symmetric").as_bool());
    CHECK(c.at("ignore").size() == 2);
    const json c4 = a4.config(linears);
    const json& ia = c4.at("config_groups").at("group_0").at("input_activations");
    CHECK(ia.at("strategy").as_string() == "tensor_group");
    CHECK(ia.at("group_size").as_int() == 16);
    CHECK(ia.at("dynamic").as_string() == "local");
}

TEST_CASE("MXFP4 (compressed-tensors) golden: exponent from round_to_power_2, codes ties to even, zero group") {
    f32_matrix w{"e.weight", 3, 32, std::vector<float>(96, 0.0f)};
    // row 0: amax 6 -> bf16 6 rounds to 4 -> e = 127 + 2 - 2 = 127, scale 1
    for (auto [i, x] : std::vector<std::pair<int, float>>{{0, 6}, {1, -3}, {2, 1.75f}, {3, 0.25f}, {4, 0.75f}, {5, 5}}) w.v[i] = x;
    // row 1: amax 7 = 1.75 * 4 -> rounds up to 8 -> e = 128, scale 2
    for (auto [i, x] : std::vector<std::pair<int, float>>{{0, 7}, {1, 1}, {2, 0.5f}, {3, -0.5f}}) w.v[32 + i] = x;
    const auto t = mxfp4_layout().quantize(w.view(), "e");
    REQUIRE(t.size() == 2);
    CHECK(t[1].type == dtype::U8);
    CHECK(t[1].shape == shape_t{3, 1});
    CHECK(fp4_bytes_of(t[1]) == std::vector<std::uint8_t>{0x7F, 0x80, 0x00});
    std::vector<std::uint8_t> packed(48, 0);
    packed[0] = 0xD7;   // 6 -> 7, -3 -> 0xD
    packed[1] = 0x04;   // 1.75 -> 2 (even), 0.25 -> 0 (even)
    packed[2] = 0x62;   // 0.75 -> 1 (even), 5 -> 4 (even)
    packed[16] = 0x16;  // 7/2 = 3.5 -> 4 (6), 1/2 -> 0.5 (1)
    packed[17] = 0x80;  // 0.5/2 = 0.25 -> 0, -0.25 -> -0 (8)
    CHECK(fp4_bytes_of(t[0]) == packed);
    const auto dq = mxfp4_layout().decode(fp4_views_of(t), "e");
    CHECK(dq[0] == 6.0f);
    CHECK(dq[32] == 8.0f);
    CHECK(dq[33] == 1.0f);
    CHECK(mxfp4_scale_code(0.0f) == 0);
    CHECK(mxfp4_scale_code(1.0f) == 125);    // 2^0 -> 127 + 0 - 2
    CHECK(mxfp4_scale_code(1.74f) == 125);   // bf16 1.7421875: mantissa below 0.75
    CHECK(mxfp4_scale_code(1.75f) == 126);
    CHECK_THROWS_WITH_AS(mxfp4_layout().quantize(random_matrix(1, 48, 1).view(), "r"),
                         doctest::Contains("K=48 is not a multiple of 32"), unsupported_error);
    const json c = mxfp4_layout().config(std::vector<linear_entry>{{"a.experts.0.up_proj", true, 4, 32, true, 4, 32, {}}});
    // vLLM compressed_tensors.py _is_mxfp4: strategy group, group 32, float, 4 bits, symmetric.
    const json& wq = c.at("config_groups").at("group_0").at("weights");
    CHECK(c.at("format").as_string() == "mxfp4-pack-quantized");
    CHECK(wq.at("strategy").as_string() == "group");
    CHECK(wq.at("group_size").as_int() == 32);
}

TEST_CASE("GGUF MXFP4 golden: e = floor(log2 amax) - 2 + 127, low nibble j / high j+16, ties to the lower index") {
    std::vector<float> x(32, 0.0f);
    x[0] = 6;       // idx 7
    x[16] = -3;     // idx 13
    x[1] = 1.5f;    // idx 3
    x[17] = 0.25f;  // tie 0 / 0.5 -> idx 0
    x[2] = 1.25f;   // tie 1 / 1.5 -> idx 2
    x[18] = -1.25f; // tie -1 / -1.5 -> idx 10
    x[3] = -0.1f;   // 0 and -0 tie -> idx 0
    x[4] = 5;       // tie 4 / 6 -> idx 6
    x[5] = 1.75f;   // tie 1.5 / 2 -> idx 3 (compressed-tensors: 2, the even code)
    x[21] = 3.5f;   // tie 3 / 4 -> idx 5
    std::vector<std::byte> out(17);
    gguf::quantize_rows(gguf::ggml_type::mxfp4, x.data(), 1, 32, nullptr, out.data());
    std::vector<std::uint8_t> want(17, 0);
    want[0] = 0x7F;
    want[1] = 0xD7;
    want[2] = 0x03;
    want[3] = 0xA2;
    want[5] = 0x06;
    want[6] = 0x53;
    std::vector<std::uint8_t> got(17);
    std::memcpy(got.data(), out.data(), 17);
    CHECK(got == want);
    std::vector<float> back(32);
    gguf::dequantize_rows(gguf::ggml_type::mxfp4, out.data(), 32, back.data());
    CHECK(back[0] == 6.0f);
    CHECK(back[16] == -3.0f);
    CHECK(back[2] == 1.0f);
    CHECK(gguf::traits_of(gguf::ggml_type::mxfp4).block_bytes == 17);
    CHECK(gguf::type_from_name("mxfp4") == gguf::ggml_type::mxfp4);
    std::vector<float> tiny(32, 0x1p-130f);  // ggml's exponent would be negative: 0
    gguf::quantize_rows(gguf::ggml_type::mxfp4, tiny.data(), 1, 32, nullptr, out.data());
    CHECK(static_cast<std::uint8_t>(out[0]) == 0);
}

TEST_CASE("compressed-tensors MXFP4 -> GGUF MXFP4 is a nibble permutation: same values decoded") {
    const f32_matrix w = random_matrix(4, 64, 11);
    const auto t = mxfp4_layout().quantize(w.view(), "m");
    const auto ct = mxfp4_layout().decode(fp4_views_of(t), "m");
    std::vector<gguf::block_mxfp4> blocks(4 * 2);
    for (int r = 0; r < 4; ++r)
        gguf::ct_mxfp4_row_to_gguf(reinterpret_cast<const std::uint8_t*>(t[0].bytes.data()) + r * 32,
                                   reinterpret_cast<const std::uint8_t*>(t[1].bytes.data()) + r * 2, 64, blocks.data() + r * 2);
    std::vector<float> back(256);
    gguf::dequantize(blocks.data(), back.data(), 256);
    for (std::size_t i = 0; i < 256; ++i) REQUIRE(back[i] == ct[i]);  // GGUF has no -0: kvalues[8] is 0
}
