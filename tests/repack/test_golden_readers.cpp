// The third-party golden files (AutoGPTQ, AutoAWQ, compressed-tensors; tests/golden/packing,
// see PROVENANCE.md) read back through the repack readers to the codes, scales and zeros
// recorded beside them.
#include <doctest/doctest.h>

#include <string>

#include "qforge/convert/repack_packed.hpp"
#include "repack/repack_test_support.hpp"

using namespace qforge;
using namespace repack_test;

namespace {
const std::string golden = QFORGE_SOURCE_DIR "/tests/golden/packing/";

template <class T>
owned_tensor load(const std::string& rel, std::string name, dtype t, shape_t shape) {
    auto v = read_array<T>(golden + rel);
    REQUIRE(static_cast<std::int64_t>(v.size()) == checked_numel(shape));
    return make(std::move(name), t, std::move(shape), v);
}
}  // namespace

TEST_CASE("AutoGPTQ golden (v1): bits 2/3/4/8, sym and asym, read back to the recorded inputs") {
    const std::int64_t N = 64, K = 128, G = 4;
    for (int b : {2, 3, 4, 8}) {
        for (const char* tag : {"sym", "asym"}) {
            CAPTURE(b);
            CAPTURE(tag);
            const std::string base = "gptq/gptq_b" + std::to_string(b) + "_";
            store st;
            st.add(load<std::int32_t>(base + tag + "_qweight.bin", "l.qweight", dtype::I32, {K * b / 32, N}));
            st.add(load<std::int32_t>(base + tag + "_qzeros.bin", "l.qzeros", dtype::I32, {G, N * b / 32}));
            st.add(load<std::uint16_t>(base + "scales_out.bin", "l.scales", dtype::F16, {G, N}));
            st.add(load<std::int32_t>("gptq/g_idx.bin", "l.g_idx", dtype::I32, {K}));
            const bool sym = std::string(tag) == "sym";
            const quantized_tensor q = read_gptq(make_tensor_source(st.views, "golden"), "l", {b, 32, sym, false});
            const auto codes = read_array<std::uint8_t>(golden + base + "codes.bin");
            const auto zeros = read_array<std::int32_t>(golden + base + tag + "_zeros_in.bin");
            const auto scales = read_array<std::uint16_t>(golden + base + "scales_in.bin");
            CHECK(q.rows == N);
            CHECK(q.cols == K);
            CHECK(q.group_size == 32);
            CHECK(q.g_idx.empty());  // k // 32: the identity, dropped
            CHECK(q.codes == codes);
            CHECK(q.zeros == zeros);  // [64][4], real zero points
            CHECK(q.scales == scales);
            CHECK(q.scale_dtype == dtype::F16);
        }
    }
}

TEST_CASE("AutoGPTQ golden: the zero-point-0 quirk is refused, naming tensor and group") {
    store st;
    st.add(load<std::int32_t>("gptq/gptq_b4_asym_zero0_quirk_qweight.bin", "m.qweight", dtype::I32, {16, 64}));
    st.add(load<std::int32_t>("gptq/gptq_b4_asym_zero0_quirk_qzeros.bin", "m.qzeros", dtype::I32, {4, 8}));
    st.add(load<std::uint16_t>("gptq/gptq_b4_scales_out.bin", "m.scales", dtype::F16, {4, 64}));
    try {
        (void)read_gptq(make_tensor_source(st.views, "golden"), "m", {4, 32, false, false});
        FAIL("expected a refusal");
    } catch (const unsupported_error& e) {
        CHECK(e.tensor() == "m.qzeros");
        CHECK(std::string(e.what()).find("group 0 column 0") != std::string::npos);
    }
    // Read as v2 the same words are just fields; nothing is refused, but they are not the
    // inputs (the word was corrupted by AutoGPTQ's OR).
    const quantized_tensor v2 = read_gptq(make_tensor_source(st.views), "m", {4, 32, false, true});
    const auto zeros = read_array<std::int32_t>(golden + "gptq/gptq_b4_asym_zero0_quirk_zeros_in.bin");
    CHECK(v2.zeros != zeros);
}

TEST_CASE("AutoAWQ golden: 4-bit GEMM read back to the recorded codes, zeros and scales") {
    const std::int64_t N = 64, K = 128, G = 4;
    store st;
    st.add(load<std::int32_t>("awq/awq_b4_qweight.bin", "a.qweight", dtype::I32, {K, N / 8}));
    st.add(load<std::int32_t>("awq/awq_b4_qzeros.bin", "a.qzeros", dtype::I32, {G, N / 8}));
    st.add(load<std::uint16_t>("awq/awq_b4_scales_out.bin", "a.scales", dtype::F16, {G, N}));
    const quantized_tensor q = read_awq(make_tensor_source(st.views, "golden"), "a", {4, 32});
    const auto codes = read_array<std::uint8_t>(golden + "awq/awq_b4_codes.bin");
    const auto zeros_gn = read_array<std::int32_t>(golden + "awq/awq_b4_zeros_in.bin");   // [4][64]
    const auto scales_gn = read_array<std::uint16_t>(golden + "awq/awq_b4_scales_in.bin");  // [4][64]
    CHECK(q.codes == codes);
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t g = 0; g < G; ++g) {
            REQUIRE(q.zero(n, g) == zeros_gn[static_cast<std::size_t>(g * N + n)]);
            REQUIRE(q.scales[static_cast<std::size_t>(n * G + g)] == scales_gn[static_cast<std::size_t>(g * N + n)]);
        }
    CHECK_FALSE(q.symmetric);
}

TEST_CASE("compressed-tensors golden: padded (0.12) and dense (>= 0.18) words read back to the int8 inputs") {
    // Each file holds a [16, 96] int8 matrix packed along dim 1 (as weight_packed) and dim 0
    // (as weight_zero_point). Read as one layer with group size 1 so both are checked.
    const std::int64_t N = 16, K = 96;
    for (int b = 2; b <= 8; ++b) {
        for (ct_packing packing : {ct_packing::padded_v0_12, ct_packing::dense_v0_18}) {
            const bool dense_only_file = b == 3 || b == 5 || b == 6 || b == 7;
            if (packing == ct_packing::dense_v0_18 && !dense_only_file) continue;  // same words as padded
            CAPTURE(b);
            CAPTURE(static_cast<int>(packing));
            const std::string stem = packing == ct_packing::padded_v0_12 ? "ct/ct012_padded_b" + std::to_string(b)
                                                                   : "ct_dense_derived_from_rule/ct018_dense_b" + std::to_string(b);
            const int pf = 32 / b;
            const std::int64_t kw = packing == ct_packing::padded_v0_12 ? (K + pf - 1) / pf : (K * b + 31) / 32;
            const std::int64_t nw = packing == ct_packing::padded_v0_12 ? (N + pf - 1) / pf : (N * b + 31) / 32;
            store st;
            st.add(load<std::int32_t>(stem + "_dim1.bin", "c.weight_packed", dtype::I32, {N, kw}));
            st.add(load<std::int32_t>(stem + "_dim0.bin", "c.weight_zero_point", dtype::I32, {nw, K}));
            st.add(make("c.weight_shape", dtype::I64, {2}, std::vector<std::int64_t>{N, K}));
            st.add(make("c.weight_scale", dtype::BF16, {N, K}, std::vector<std::uint16_t>(static_cast<std::size_t>(N * K), 0x3c00)));
            const quantized_tensor q = read_ct_packed(make_tensor_source(st.views, "golden"), "c", {b, false, 1}, packing);
            const auto input = read_array<std::int8_t>(golden + "ct/ct_input_b" + std::to_string(b) + ".bin");
            REQUIRE(input.size() == static_cast<std::size_t>(N * K));
            const int half = 1 << (b - 1);
            for (std::size_t i = 0; i < input.size(); ++i) {
                REQUIRE(q.codes[i] == input[i] + half);
                REQUIRE(q.zeros[i] == input[i] + half);
            }
        }
    }
}

TEST_CASE("compressed-tensors: a 3-bit word count that contradicts the config's packing is refused") {
    const std::int64_t N = 16, K = 96;
    store st;
    st.add(load<std::int32_t>("ct/ct012_padded_b3_dim1.bin", "c.weight_packed", dtype::I32, {N, 10}));
    st.add(make("c.weight_shape", dtype::I64, {2}, std::vector<std::int64_t>{N, K}));
    st.add(make("c.weight_scale", dtype::BF16, {N, 1}, std::vector<std::uint16_t>(16, 0x3c00)));
    CHECK_NOTHROW((void)read_ct_packed(make_tensor_source(st.views), "c", {3, true, -1}, ct_packing::padded_v0_12));
    CHECK_THROWS_AS((void)read_ct_packed(make_tensor_source(st.views), "c", {3, true, -1}, ct_packing::dense_v0_18), format_error);
}

TEST_CASE("malformed packed layers are refused with a qforge error, never a crash") {
    const std::int64_t N = 64, K = 128, G = 4;
    auto base = [&] {
        store st;
        st.add(load<std::int32_t>("gptq/gptq_b4_sym_qweight.bin", "l.qweight", dtype::I32, {K / 8, N}));
        st.add(load<std::int32_t>("gptq/gptq_b4_sym_qzeros.bin", "l.qzeros", dtype::I32, {G, N / 8}));
        st.add(load<std::uint16_t>("gptq/gptq_b4_scales_out.bin", "l.scales", dtype::F16, {G, N}));
        return st;
    };
    const gptq_args args{4, 32, true, false};
    SUBCASE("qzeros of the wrong dtype") {
        store st = base();
        st.add(make("l.qzeros", dtype::F32, {G, N / 8}, std::vector<float>(static_cast<std::size_t>(G * N / 8))));
        CHECK_THROWS_AS((void)read_gptq(make_tensor_source(st.views), "l", args), format_error);
    }
    SUBCASE("scales of the wrong shape") {
        store st = base();
        st.add(make("l.scales", dtype::F16, {G + 1, N}, std::vector<std::uint16_t>(static_cast<std::size_t>((G + 1) * N))));
        CHECK_THROWS_AS((void)read_gptq(make_tensor_source(st.views), "l", args), shape_error);
    }
    SUBCASE("a view with fewer bytes than its shape claims") {
        store st = base();
        owned_tensor t = make("l.qweight", dtype::I32, {K / 8, N}, std::vector<std::int32_t>(10));
        st.add(t);
        CHECK_THROWS_AS((void)read_gptq(make_tensor_source(st.views), "l", args), format_error);
    }
    SUBCASE("g_idx naming a group that does not exist") {
        store st = base();
        std::vector<std::int32_t> g(static_cast<std::size_t>(K), 0);
        g[5] = 9;
        st.add(make("l.g_idx", dtype::I32, {K}, g));
        CHECK_THROWS_AS((void)read_gptq(make_tensor_source(st.views), "l", args), format_error);
    }
    SUBCASE("missing tensor") {
        store st = base();
        st.owned.erase("l.scales");
        st.refresh();
        CHECK_THROWS_WITH_AS((void)read_gptq(make_tensor_source(st.views, "ckpt"), "l", args), doctest::Contains("tensor 'l.scales': tensor is missing"),
                             format_error);
    }
    SUBCASE("compressed-tensors weight_shape that does not match the words") {
        store st;
        st.add(make("c.weight_packed", dtype::I32, {4, 4}, std::vector<std::int32_t>(16)));
        st.add(make("c.weight_shape", dtype::I64, {2}, std::vector<std::int64_t>{1LL << 40, 32}));
        st.add(make("c.weight_scale", dtype::BF16, {4, 1}, std::vector<std::uint16_t>(4)));
        CHECK_THROWS_AS((void)read_ct_packed(make_tensor_source(st.views), "c", {4, true, -1}, ct_packing::dense_v0_18), shape_error);
        st.add(make("c.weight_shape", dtype::I64, {2}, std::vector<std::int64_t>{-4, 32}));
        CHECK_THROWS_AS((void)read_ct_packed(make_tensor_source(st.views), "c", {4, true, -1}, ct_packing::dense_v0_18), shape_error);
    }
}
