// The three layout policies: hand-computed words per layout x bits, pack -> unpack identity on
// odd legal shapes, decode through a real safetensors file equal to the quantizer's values bit
// for bit, and every refusal.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <unistd.h>
#include <string>
#include <vector>

#include "layout/layout_test_support.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/writer.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/gptq.hpp"

using namespace qforge;
using namespace layout_test;

namespace {

static_assert(layout_policy<gptq_layout<2>> && layout_policy<gptq_layout<3>> &&
              layout_policy<gptq_layout<4>> && layout_policy<gptq_layout<8>>);
static_assert(layout_policy<awq_layout<4>>);
static_assert(layout_policy<compressed_tensors_layout<2>> && layout_policy<compressed_tensors_layout<5>> &&
              layout_policy<compressed_tensors_layout<7>> && layout_policy<compressed_tensors_layout<8>>);

// A quantized tensor whose codes are f(n, k) and whose zeros are z(n, g).
template <class Fc, class Fz>
quantized_tensor hand_qt(int bits, std::int64_t rows, std::int64_t cols, std::int64_t group, bool sym,
                         Fc code, Fz zero) {
    quantized_tensor q;
    q.name = "hand.weight";
    q.bits = bits;
    q.rows = rows;
    q.cols = cols;
    q.group_size = group;
    q.symmetric = sym;
    for (std::int64_t n = 0; n < rows; ++n)
        for (std::int64_t k = 0; k < cols; ++k) q.codes.push_back(static_cast<std::uint8_t>(code(n, k)));
    for (std::int64_t n = 0; n < rows; ++n)
        for (std::int64_t g = 0; g < q.groups(); ++g) {
            q.zeros.push_back(sym ? 1 << (bits - 1) : zero(n, g));
            q.scales.push_back(float_to_fp16(0.125f * static_cast<float>(1 + g)));
        }
    return q;
}

std::vector<std::uint32_t> words(const std::vector<owned_tensor>& ts, const std::string& name) {
    return elements<std::uint32_t>(named(ts, name));
}

bool has(const std::vector<owned_tensor>& ts, const std::string& name) {
    for (const auto& t : ts)
        if (t.name == name) return true;
    return false;
}

// Writes the tensors to a safetensors file and reads the named ones back as views.
struct st_roundtrip {
    std::filesystem::path path;
    std::optional<safetensors::reader> reader;
    std::vector<tensor_view> views;

    explicit st_roundtrip(const std::vector<owned_tensor>& ts, const std::string& tag) {
        path = std::filesystem::temp_directory_path() /
               ("qforge_layout_" + tag + "_" + std::to_string(::getpid()) + ".safetensors");
        std::vector<safetensors::tensor_spec> specs;
        for (const auto& t : ts) specs.push_back({t.name, t.type, t.shape});
        safetensors::writer w(path.string(), specs, safetensors::default_metadata(), {.sync = false});
        for (const auto& t : ts) w.write(t.view());
        w.finish();
        reader.emplace(path.string());
        for (const auto& t : ts) views.push_back(reader->view(t.name));
    }
    ~st_roundtrip() {
        reader.reset();
        std::error_code ec;
        std::filesystem::remove(path, ec);
    }
};

// Every element's decoded value equals quantized_tensor::dequantized of the original, by bits.
void expect_same_decode(const quantized_tensor& a, const quantized_tensor& b) {
    REQUIRE(a.rows == b.rows);
    REQUIRE(a.cols == b.cols);
    std::int64_t mismatches = 0;
    for (std::int64_t n = 0; n < a.rows; ++n)
        for (std::int64_t k = 0; k < a.cols; ++k)
            if (std::bit_cast<std::uint32_t>(a.dequantized(n, k)) != std::bit_cast<std::uint32_t>(b.dequantized(n, k)))
                ++mismatches;
    CHECK(mismatches == 0);
}

template <class L>
void roundtrip(const L& layout, const quantized_tensor& q, bool through_file) {
    const std::int64_t group = q.group_size == q.cols ? -1 : q.group_size;
    const auto ts = layout.pack(q, "model.layers.0.mlp.down_proj");
    // The tensors are exactly the layout's specs.
    const auto specs = layout.specs(q.rows, q.cols, group, q.symmetric);
    REQUIRE(specs.size() == ts.size());
    for (std::size_t i = 0; i < specs.size(); ++i) {
        CHECK(ts[i].name == "model.layers.0.mlp.down_proj" + specs[i].suffix);
        CHECK(ts[i].type == specs[i].type);
        CHECK(ts[i].shape == specs[i].shape);
    }
    const layer_params params{.group_size = group, .symmetric = q.symmetric};
    if (through_file) {
        st_roundtrip file(ts, std::string(L::format_name) + std::to_string(L::bits));
        const auto back = layout.unpack(file.views, "model.layers.0.mlp.down_proj", params);
        expect_same(back, q);
        expect_same_decode(back, q);
    } else {
        expect_same(layout.unpack(views_of(ts), "model.layers.0.mlp.down_proj", params), q);
    }
}

}  // namespace

// ---- hand-computed words ------------------------------------------------------------------

TEST_CASE("GPTQ words by hand: K-packed qweight, N-packed qzeros, v1 = zero-1, v2 = zero") {
    SUBCASE("4-bit") {
        const auto q = hand_qt(4, 8, 16, 8, true, [](auto, auto k) { return k % 8; },
                               [](auto, auto) { return 8; });
        const auto v1 = gptq_layout<4>({.format = gptq_format::v1}).pack(q, "p");
        // Column n of qweight: word 0 = codes k 0..7 = 0x76543210, word 1 the same.
        CHECK(words(v1, "p.qweight") == std::vector<std::uint32_t>(16, 0x76543210u));
        CHECK(words(v1, "p.qzeros") == std::vector<std::uint32_t>{0x77777777u, 0x77777777u});
        const auto v2 = gptq_layout<4>({.format = gptq_format::v2}).pack(q, "p");
        CHECK(words(v2, "p.qzeros") == std::vector<std::uint32_t>{0x88888888u, 0x88888888u});
        CHECK(elements<std::int32_t>(named(v1, "p.g_idx")) == std::vector<std::int32_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1});
        CHECK(named(v1, "p.scales").shape == shape_t{2, 8});
    }
    SUBCASE("4-bit asym zeros along N") {
        const auto q = hand_qt(4, 8, 8, 8, false, [](auto n, auto) { return n; }, [](auto n, auto) { return 15 - n; });
        const auto v2 = gptq_layout<4>({.format = gptq_format::v2}).pack(q, "p");
        CHECK(words(v2, "p.qzeros") == std::vector<std::uint32_t>{0x89ABCDEFu});
        // qweight [1, 8]: column n is eight copies of n.
        CHECK(words(v2, "p.qweight") == std::vector<std::uint32_t>{0x0u, 0x11111111u, 0x22222222u, 0x33333333u,
                                                                    0x44444444u, 0x55555555u, 0x66666666u, 0x77777777u});
        const auto v1 = gptq_layout<4>({.format = gptq_format::v1}).pack(q, "p");
        CHECK(words(v1, "p.qzeros") == std::vector<std::uint32_t>{0x789ABCDEu});
    }
    SUBCASE("2-bit") {
        const auto q = hand_qt(2, 16, 16, 16, true, [](auto, auto k) { return k % 4; }, [](auto, auto) { return 2; });
        const auto v1 = gptq_layout<2>().pack(q, "p");
        CHECK(words(v1, "p.qweight") == std::vector<std::uint32_t>(16, 0xE4E4E4E4u));
        CHECK(words(v1, "p.qzeros") == std::vector<std::uint32_t>{0x55555555u});
        CHECK(words(gptq_layout<2>({.format = gptq_format::v2}).pack(q, "p"), "p.qzeros") ==
              std::vector<std::uint32_t>{0xAAAAAAAAu});
    }
    SUBCASE("8-bit") {
        const auto q = hand_qt(8, 4, 4, 4, true, [](auto n, auto k) { return 16 * k + n; }, [](auto, auto) { return 128; });
        const auto v1 = gptq_layout<8>().pack(q, "p");
        CHECK(words(v1, "p.qweight") == std::vector<std::uint32_t>{0x30201000u, 0x31211101u, 0x32221202u, 0x33231303u});
        CHECK(words(v1, "p.qzeros") == std::vector<std::uint32_t>{0x7F7F7F7Fu});
        CHECK(words(gptq_layout<8>({.format = gptq_format::v2}).pack(q, "p"), "p.qzeros") ==
              std::vector<std::uint32_t>{0x80808080u});
    }
    SUBCASE("3-bit: formats.md 4.3 example down each column, qzeros constants of 2.3") {
        const auto q = hand_qt(3, 32, 32, 32, true, [](auto, auto k) { return k % 8; }, [](auto, auto) { return 4; });
        const auto v1 = gptq_layout<3>().pack(q, "p");
        const auto qw = words(v1, "p.qweight");  // [3][32]
        for (int n = 0; n < 32; ++n) {
            CHECK(qw[static_cast<std::size_t>(0 * 32 + n)] == 0x88fac688u);
            CHECK(qw[static_cast<std::size_t>(1 * 32 + n)] == 0xc688fac6u);
            CHECK(qw[static_cast<std::size_t>(2 * 32 + n)] == 0xfac688fau);
        }
        CHECK(words(v1, "p.qzeros") == std::vector<std::uint32_t>{0xDB6DB6DBu, 0xB6DB6DB6u, 0x6DB6DB6Du});
        CHECK(words(gptq_layout<3>({.format = gptq_format::v2}).pack(q, "p"), "p.qzeros") ==
              std::vector<std::uint32_t>{0x24924924u, 0x49249249u, 0x92492492u});
    }
}

TEST_CASE("AWQ words by hand: N-packed, order [0,2,4,6,1,3,5,7], real zeros") {
    const auto q = hand_qt(4, 8, 8, 8, false, [](auto n, auto) { return n; }, [](auto n, auto) { return 15 - n; });
    const auto ts = awq_layout<4>().pack(q, "p");
    CHECK(words(ts, "p.qweight") == std::vector<std::uint32_t>(8, 0x75316420u));
    CHECK(words(ts, "p.qzeros") == std::vector<std::uint32_t>{0x8ACE9BDFu});
    CHECK(named(ts, "p.scales").type == dtype::F16);
    CHECK(named(ts, "p.qweight").shape == shape_t{8, 1});
}

TEST_CASE("compressed-tensors words by hand: codes stored as q + 2^(b-1), zero point only when asym") {
    SUBCASE("4-bit sym: no weight_zero_point") {
        auto q = hand_qt(4, 2, 8, 8, true, [](auto, auto k) { return k; }, [](auto, auto) { return 8; });
        q.scale_dtype = dtype::BF16;
        for (auto& s : q.scales) s = float_to_bf16(0.5f);
        const auto ts = compressed_tensors_layout<4>().pack(q, "p");
        CHECK(words(ts, "p.weight_packed") == std::vector<std::uint32_t>{0x76543210u, 0x76543210u});
        CHECK_FALSE(has(ts, "p.weight_zero_point"));
        CHECK(elements<std::int64_t>(named(ts, "p.weight_shape")) == std::vector<std::int64_t>{2, 8});
        CHECK(named(ts, "p.weight_shape").type == dtype::I64);
        CHECK(named(ts, "p.weight_scale").type == dtype::BF16);
        CHECK(named(ts, "p.weight_scale").shape == shape_t{2, 1});
    }
    SUBCASE("4-bit asym: zero point packed along N") {
        auto q = hand_qt(4, 8, 8, 4, false, [](auto, auto k) { return k; }, [](auto n, auto g) { return g == 0 ? n : 8; });
        q.scale_dtype = dtype::BF16;
        const auto ts = compressed_tensors_layout<4>().pack(q, "p");
        CHECK(named(ts, "p.weight_zero_point").shape == shape_t{1, 2});
        CHECK(words(ts, "p.weight_zero_point") == std::vector<std::uint32_t>{0x76543210u, 0x88888888u});
    }
    SUBCASE("3-bit: padded (CT <= 0.17) and dense (CT >= 0.18), formats.md 4.3") {
        auto q = hand_qt(3, 1, 32, 32, true, [](auto, auto k) { return k % 8; }, [](auto, auto) { return 4; });
        q.scale_dtype = dtype::BF16;
        const auto padded = compressed_tensors_layout<3>({.packing = ct_packing::padded_v0_12}).pack(q, "p");
        CHECK(words(padded, "p.weight_packed") == std::vector<std::uint32_t>{0x08fac688u, 0x1a23eb1au, 0x2c688facu, 0x3eu});
        const auto dense = compressed_tensors_layout<3>({.packing = ct_packing::dense_v0_18}).pack(q, "p");
        CHECK(words(dense, "p.weight_packed") == std::vector<std::uint32_t>{0x88fac688u, 0xc688fac6u, 0xfac688fau});
    }
    SUBCASE("5, 6, 7 bits, both packings") {
        auto q5 = hand_qt(5, 1, 32, 32, true, [](auto, auto) { return 1; }, [](auto, auto) { return 16; });
        q5.scale_dtype = dtype::BF16;
        CHECK(words(compressed_tensors_layout<5>({.packing = ct_packing::dense_v0_18}).pack(q5, "p"), "p.weight_packed") ==
              std::vector<std::uint32_t>{0x42108421u, 0x10842108u, 0x84210842u, 0x21084210u, 0x08421084u});
        CHECK(words(compressed_tensors_layout<5>().pack(q5, "p"), "p.weight_packed") ==
              std::vector<std::uint32_t>{0x02108421u, 0x02108421u, 0x02108421u, 0x02108421u, 0x02108421u, 0x21u});
        auto q6 = hand_qt(6, 1, 16, 16, true, [](auto, auto k) { return k; }, [](auto, auto) { return 32; });
        q6.scale_dtype = dtype::BF16;
        CHECK(words(compressed_tensors_layout<6>({.packing = ct_packing::dense_v0_18}).pack(q6, "p"), "p.weight_packed") ==
              std::vector<std::uint32_t>{0x440c2040u, 0xa2481c61u, 0x3ce34c2cu});
        CHECK(words(compressed_tensors_layout<6>().pack(q6, "p"), "p.weight_packed") ==
              std::vector<std::uint32_t>{0x040c2040u, 0x09207185u, 0x0e34c2cau, 0xfu});
        auto q7 = hand_qt(7, 1, 8, 8, true, [](auto, auto k) { return 127 - k; }, [](auto, auto) { return 64; });
        q7.scale_dtype = dtype::BF16;
        CHECK(words(compressed_tensors_layout<7>({.packing = ct_packing::dense_v0_18}).pack(q7, "p"), "p.weight_packed") ==
              std::vector<std::uint32_t>{0xbf9f7f7fu, 0x00f1e7d7u});
        CHECK(words(compressed_tensors_layout<7>().pack(q7, "p"), "p.weight_packed") ==
              std::vector<std::uint32_t>{0x0f9f7f7fu, 0x0f1e7d7bu});
    }
}

// ---- identity and decode ------------------------------------------------------------------

TEST_CASE("pack -> unpack identity, every layout x bits x symmetry, odd legal shapes") {
    std::uint32_t seed = 1;
    for (bool sym : {true, false}) {
        CAPTURE(sym);
        // GPTQ: K and N fill whole words; 3-bit needs multiples of 32.
        roundtrip(gptq_layout<2>({.format = gptq_format::v2}), random_qt(2, 48, 80, 16, sym, seed++), false);
        roundtrip(gptq_layout<3>({.format = gptq_format::v2}), random_qt(3, 96, 160, 32, sym, seed++), false);
        roundtrip(gptq_layout<4>({.format = gptq_format::v2}), random_qt(4, 24, 40, 8, sym, seed++), false);
        roundtrip(gptq_layout<8>({.format = gptq_format::v2}), random_qt(8, 12, 36, 12, sym, seed++), false);
        roundtrip(gptq_layout<4>({.format = gptq_format::v2}), random_qt(4, 24, 40, 40, sym, seed++), false);
        // v1 needs zeros >= 1 (it stores zero-1).
        auto v1q = random_qt(4, 24, 40, 8, sym, seed++);
        for (auto& z : v1q.zeros) z = z == 0 ? 1 : z;
        roundtrip(gptq_layout<4>(), v1q, false);
        auto v1q3 = random_qt(3, 32, 64, 32, sym, seed++);
        for (auto& z : v1q3.zeros) z = z == 0 ? 1 : z;
        roundtrip(gptq_layout<3>(), v1q3, false);
        // AWQ: N % 8, K % group.
        roundtrip(awq_layout<4>(), random_qt(4, 40, 45, 9, sym, seed++), false);
        // compressed-tensors: any shape, partial last group, both packings.
        for (ct_packing pk : {ct_packing::padded_v0_12, ct_packing::dense_v0_18}) {
            const ct_options o{.packing = pk, .checkpoint_dtype = dtype::BF16};
            roundtrip(compressed_tensors_layout<2>(o), random_qt(2, 7, 33, 8, sym, seed++, dtype::BF16), false);
            roundtrip(compressed_tensors_layout<3>(o), random_qt(3, 13, 31, 7, sym, seed++, dtype::BF16), false);
            roundtrip(compressed_tensors_layout<4>(o), random_qt(4, 5, 29, 29, sym, seed++, dtype::BF16), false);
            roundtrip(compressed_tensors_layout<5>(o), random_qt(5, 11, 47, 16, sym, seed++, dtype::BF16), false);
            roundtrip(compressed_tensors_layout<6>(o), random_qt(6, 9, 19, 5, sym, seed++, dtype::BF16), false);
            roundtrip(compressed_tensors_layout<7>(o), random_qt(7, 3, 37, 12, sym, seed++, dtype::BF16), false);
            roundtrip(compressed_tensors_layout<8>(o), random_qt(8, 17, 23, 23, sym, seed++, dtype::BF16), false);
        }
    }
}

TEST_CASE("GPTQ keeps an act-order g_idx and bf16 scales on request") {
    auto q = random_qt(4, 16, 64, 16, true, 77, dtype::BF16);
    q.g_idx.resize(64);
    for (int k = 0; k < 64; ++k) q.g_idx[static_cast<std::size_t>(k)] = (k * 7) % 4;  // non-monotonic
    const gptq_layout<4> gptq({.format = gptq_format::v1, .scale_dtype = dtype::BF16, .desc_act = true});
    const auto ts = gptq.pack(q, "p");
    CHECK(named(ts, "p.scales").type == dtype::BF16);
    CHECK(elements<std::int32_t>(named(ts, "p.g_idx")) == q.g_idx);
    roundtrip(gptq, q, true);
}

TEST_CASE("decode of a written layer equals the quantized values bit for bit, through a safetensors file") {
    std::uint32_t seed = 500;
    for (bool sym : {true, false}) {
        CAPTURE(sym);
        auto g4 = random_qt(4, 64, 96, 32, sym, seed++);
        for (auto& z : g4.zeros) z = z == 0 ? 1 : z;
        roundtrip(gptq_layout<4>(), g4, true);
        roundtrip(gptq_layout<2>({.format = gptq_format::v2}), random_qt(2, 32, 64, 32, sym, seed++), true);
        roundtrip(gptq_layout<3>({.format = gptq_format::v2}), random_qt(3, 32, 64, 32, sym, seed++), true);
        roundtrip(gptq_layout<8>({.format = gptq_format::v2}), random_qt(8, 32, 64, 32, sym, seed++), true);
        roundtrip(awq_layout<4>(), random_qt(4, 64, 96, 32, sym, seed++), true);
        for (ct_packing pk : {ct_packing::padded_v0_12, ct_packing::dense_v0_18}) {
            const ct_options o{.packing = pk, .checkpoint_dtype = dtype::BF16};
            roundtrip(compressed_tensors_layout<3>(o), random_qt(3, 33, 70, 32, sym, seed++, dtype::BF16), true);
            roundtrip(compressed_tensors_layout<4>(o), random_qt(4, 33, 70, 32, sym, seed++, dtype::BF16), true);
            roundtrip(compressed_tensors_layout<5>(o), random_qt(5, 20, 64, 64, sym, seed++, dtype::BF16), true);
            roundtrip(compressed_tensors_layout<8>(o), random_qt(8, 20, 64, 16, sym, seed++, dtype::BF16), true);
        }
    }
}

TEST_CASE("run-time bit dispatch picks the compile-time layout or refuses") {
    CHECK(with_gptq_layout(3, {}, [](const auto& l) { return decltype(+l.bits)(l.bits); }) == 3);
    CHECK_THROWS_WITH_AS(with_gptq_layout(5, {}, [](const auto& l) { return +l.bits; }),
                         doctest::Contains("GPTQ packs 2, 3, 4 or 8 bits"), unsupported_error);
    CHECK_THROWS_WITH_AS(with_awq_layout(8, [](const auto& l) { return +l.bits; }),
                         doctest::Contains("AWQ packs 4 bits only"), unsupported_error);
    CHECK(with_ct_layout(7, {}, [](const auto& l) { return +l.bits; }) == 7);
    CHECK_THROWS_AS(with_ct_layout(1, {}, [](const auto& l) { return +l.bits; }), unsupported_error);
    CHECK_THROWS_AS(with_ct_layout(9, {}, [](const auto& l) { return +l.bits; }), unsupported_error);
}
