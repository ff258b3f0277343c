// Third-party packed words (AutoGPTQ, AutoAWQ, compressed-tensors 0.12 and the >= 0.18 dense
// rule), copied to tests/golden/packing (PROVENANCE.md): qforge's layouts must produce the
// same bytes from the recorded codes, and read them back to the same codes.
#include <doctest/doctest.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "layout/layout_test_support.hpp"
#include "qforge/io/json.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/gptq.hpp"

using namespace qforge;
using namespace layout_test;

namespace {

const std::string golden_dir = QFORGE_SOURCE_DIR "/tests/golden/packing/";

// Every golden file is checked against the manifest's sha256 before use.
std::vector<std::uint8_t> golden(const std::string& rel) {
    static const std::map<std::string, std::string> sums = [] {
        std::map<std::string, std::string> m;
        const auto text = read_file(golden_dir + "manifest.json");
        const json manifest = json::parse(std::string(text.begin(), text.end()), "manifest.json");
        for (const json& f : manifest.at("files").as_array()) m[f.at("path").as_string()] = f.at("sha256").as_string();
        return m;
    }();
    const auto bytes = read_file(golden_dir + rel);
    REQUIRE(sums.count(rel) == 1);
    INFO("golden file ", rel);
    REQUIRE(sha256_hex(bytes) == sums.at(rel));
    return bytes;
}

std::vector<std::uint8_t> bytes_of(const owned_tensor& t) {
    std::vector<std::uint8_t> b(t.bytes.size());
    std::memcpy(b.data(), t.bytes.data(), b.size());
    return b;
}

// The CT inputs are signed codes q; the stored (and qforge) code is q + 2^(b-1).
std::vector<std::uint8_t> ct_codes(int bits) {
    const auto raw = golden("ct/ct_input_b" + std::to_string(bits) + ".bin");
    std::vector<std::uint8_t> u(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i)
        u[i] = static_cast<std::uint8_t>(static_cast<std::int8_t>(raw[i]) + (1 << (bits - 1)));
    return u;
}

template <int B>
void check_ct(ct_packing packing) {
    const bool dense = packing == ct_packing::dense_v0_18 && B != 2 && B != 4 && B != 8;
    const std::string b = std::to_string(B);
    const std::string dim1 = dense ? "ct_dense_derived_from_rule/ct018_dense_b" + b + "_dim1.bin"
                                   : "ct/ct012_padded_b" + b + "_dim1.bin";
    const std::string dim0 = dense ? "ct_dense_derived_from_rule/ct018_dense_b" + b + "_dim0.bin"
                                   : "ct/ct012_padded_b" + b + "_dim0.bin";
    const auto codes = ct_codes(B);
    compressed_tensors_layout<B> ct({.packing = packing, .checkpoint_dtype = dtype::F16});

    // dim 1 = weight_packed of a [16, 96] weight.
    quantized_tensor w;
    w.name = "ct.weight";
    w.bits = B;
    w.rows = 16;
    w.cols = 96;
    w.group_size = 96;
    w.symmetric = true;
    w.codes = codes;
    w.scales.assign(16, float_to_fp16(0.5f));
    w.zeros.assign(16, 1 << (B - 1));
    const auto packed = ct.pack(w, "ct");
    CHECK(bytes_of(named(packed, "ct.weight_packed")) == golden(dim1));
    expect_same(ct.unpack(views_of(packed), "ct", {.group_size = 96, .symmetric = true}), w);

    // dim 0 = weight_zero_point: the same matrix as zeros [N 16][groups 96], packed along N.
    quantized_tensor z = w;
    z.group_size = 1;
    z.symmetric = false;
    z.zeros.assign(codes.begin(), codes.end());
    z.scales.assign(16 * 96, float_to_fp16(0.25f));
    const auto zp = ct.pack(z, "ct");
    CHECK(bytes_of(named(zp, "ct.weight_zero_point")) == golden(dim0));
    expect_same(ct.unpack(views_of(zp), "ct", {.group_size = 1, .symmetric = false}), z);
}

template <int B>
void check_gptq(const std::string& tag) {
    const std::string p = "gptq/gptq_b" + std::to_string(B) + "_";
    quantized_tensor q;
    q.name = "gptq.weight";
    q.bits = B;
    q.rows = 64;
    q.cols = 128;
    q.group_size = 32;
    q.symmetric = tag == "sym";
    q.scale_dtype = dtype::F16;
    q.codes = golden(p + "codes.bin");
    q.scales = as<std::uint16_t>(golden(p + "scales_in.bin"));  // [64][4]
    q.zeros = as<std::int32_t>(golden(p + tag + "_zeros_in.bin"));  // real zeros [64][4]
    gptq_layout<B> v1({.format = gptq_format::v1});
    const auto ts = v1.pack(q, "m");
    CHECK(bytes_of(named(ts, "m.qweight")) == golden(p + tag + "_qweight.bin"));
    CHECK(bytes_of(named(ts, "m.qzeros")) == golden(p + tag + "_qzeros.bin"));
    CHECK(bytes_of(named(ts, "m.scales")) == golden(p + "scales_out.bin"));
    CHECK(bytes_of(named(ts, "m.g_idx")) == golden("gptq/g_idx.bin"));
    expect_same(v1.unpack(views_of(ts), "m", {.group_size = 32, .symmetric = q.symmetric}), q);
}

}  // namespace

TEST_CASE("compressed-tensors 0.12 padded words, bits 2..8, dim 1 and dim 0") {
    check_ct<2>(ct_packing::padded_v0_12);
    check_ct<3>(ct_packing::padded_v0_12);
    check_ct<4>(ct_packing::padded_v0_12);
    check_ct<5>(ct_packing::padded_v0_12);
    check_ct<6>(ct_packing::padded_v0_12);
    check_ct<7>(ct_packing::padded_v0_12);
    check_ct<8>(ct_packing::padded_v0_12);
}

TEST_CASE("compressed-tensors >= 0.18 dense words (3, 5, 6, 7 from the rule; 2, 4, 8 = padded)") {
    check_ct<2>(ct_packing::dense_v0_18);
    check_ct<3>(ct_packing::dense_v0_18);
    check_ct<4>(ct_packing::dense_v0_18);
    check_ct<5>(ct_packing::dense_v0_18);
    check_ct<6>(ct_packing::dense_v0_18);
    check_ct<7>(ct_packing::dense_v0_18);
    check_ct<8>(ct_packing::dense_v0_18);
}

TEST_CASE("AutoGPTQ QuantLinear.pack words, bits 2, 3, 4, 8, sym and asym (v1)") {
    for (const std::string tag : {"sym", "asym"}) {
        CAPTURE(tag);
        check_gptq<2>(tag);
        check_gptq<3>(tag);
        check_gptq<4>(tag);
        check_gptq<8>(tag);
    }
}

TEST_CASE("AutoGPTQ's zero-0 quirk: qforge refuses v1, writes v2, and refuses to read the corrupted word") {
    quantized_tensor q;
    q.name = "quirk.weight";
    q.bits = 4;
    q.rows = 64;
    q.cols = 128;
    q.group_size = 32;
    q.symmetric = false;
    q.codes = golden("gptq/gptq_b4_codes.bin");
    q.scales = as<std::uint16_t>(golden("gptq/gptq_b4_scales_in.bin"));
    q.zeros = as<std::int32_t>(golden("gptq/gptq_b4_asym_zero0_quirk_zeros_in.bin"));
    const gptq_layout<4> v1({.format = gptq_format::v1});
    CHECK_THROWS_WITH_AS(v1.pack(q, "m"), doctest::Contains("cannot hold the zero point 0 at row 0, group 0"),
                         unsupported_error);
    // The codes are unaffected by the zero: qweight matches AutoGPTQ's bytes under v2 too.
    const gptq_layout<4> v2({.format = gptq_format::v2});
    const auto ts = v2.pack(q, "m");
    CHECK(bytes_of(named(ts, "m.qweight")) == golden("gptq/gptq_b4_asym_zero0_quirk_qweight.bin"));
    expect_same(v2.unpack(views_of(ts), "m", {.group_size = 32, .symmetric = false}), q);
    // Reading AutoGPTQ's corrupted qzeros as v1 is refused, not decoded to garbage.
    auto bad = ts;
    const auto quirk_qzeros = golden("gptq/gptq_b4_asym_zero0_quirk_qzeros.bin");
    for (auto& t : bad)
        if (t.name == "m.qzeros") std::memcpy(t.bytes.data(), quirk_qzeros.data(), quirk_qzeros.size());
    CHECK(as<std::uint32_t>(quirk_qzeros)[0] == 0xFFFFFFFFu);
    CHECK_THROWS_AS(v1.unpack(views_of(bad), "m", {.group_size = 32, .symmetric = false}), format_error);
}

TEST_CASE("AutoAWQ WQLinear_GEMM.from_linear words, 4-bit") {
    quantized_tensor q;
    q.name = "awq.weight";
    q.bits = 4;
    q.rows = 64;
    q.cols = 128;
    q.group_size = 32;
    q.symmetric = false;
    q.codes = golden("awq/awq_b4_codes.bin");
    const auto scales_gn = as<std::uint16_t>(golden("awq/awq_b4_scales_in.bin"));  // [4][64]
    const auto zeros_gn = as<std::int32_t>(golden("awq/awq_b4_zeros_in.bin"));     // [4][64]
    q.scales.resize(256);
    q.zeros.resize(256);
    for (int n = 0; n < 64; ++n)
        for (int g = 0; g < 4; ++g) {
            q.scales[static_cast<std::size_t>(n * 4 + g)] = scales_gn[static_cast<std::size_t>(g * 64 + n)];
            q.zeros[static_cast<std::size_t>(n * 4 + g)] = zeros_gn[static_cast<std::size_t>(g * 64 + n)];
        }
    const awq_layout<4> awq;
    const auto ts = awq.pack(q, "m");
    CHECK(bytes_of(named(ts, "m.qweight")) == golden("awq/awq_b4_qweight.bin"));
    CHECK(bytes_of(named(ts, "m.qzeros")) == golden("awq/awq_b4_qzeros.bin"));
    CHECK(bytes_of(named(ts, "m.scales")) == golden("awq/awq_b4_scales_out.bin"));
    expect_same(awq.unpack(views_of(ts), "m", {.group_size = 32, .symmetric = false}), q);
}
