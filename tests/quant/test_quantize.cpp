// The runtime entry point: shapes, tails, refusals, threads, SNR, dequantize, pre-quantized input.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "qforge/core/parallel.hpp"
#include "qforge/quant/dequantize.hpp"
#include "qforge/quant/prequantized.hpp"
#include "qforge/quant/quantize.hpp"
#include "qforge/quant/scheme.hpp"
#include "qforge/quant/snr.hpp"
#include "support/synthetic.hpp"

using namespace qforge;

static_assert(scheme_like<scheme<4, 128, symmetry::symmetric>>);
static_assert(scheme_like<scheme<8, per_channel, symmetry::asymmetric>>);
static_assert(scheme<4, 64, symmetry::symmetric>::pinned_zero == 8 && scheme<3, 64, symmetry::symmetric>::maxq == 7);
static_assert(!supported_bits<1> && !supported_bits<9> && supported_bits<2> && supported_bits<8>);
static_assert(!supported_group_size<48> && !supported_group_size<-2> && supported_group_size<256>);

TEST_CASE("with_scheme maps runtime (bits, group, symmetry) onto compile-time schemes") {
    with_scheme(3, 128, false, [](auto s) {
        using S = decltype(s);
        CHECK(S::bits == 3);
        CHECK(S::group_size == 128);
        CHECK(!S::is_symmetric);
    });
    with_scheme(8, -1, true, [](auto s) { CHECK(decltype(s)::group_size == per_channel); });
    with_scheme(4, 1024, true, [](auto s) {
        CHECK(decltype(s)::group_size == dynamic_group);
        CHECK(decltype(s)::columns_per_group(4096, 1024) == 1024);
    });
    CHECK_THROWS_AS(with_scheme(9, 64, true, [](auto) {}), shape_error);
    CHECK_THROWS_AS(with_scheme(4, 48, true, [](auto) {}), shape_error);
}

TEST_CASE("output shape, group count and tails") {
    const auto w = testing::student_t_floats(3 * 129, 11);
    quant_options o;
    o.group_size = 64;
    const auto q = quantize(testing::view_of(w, 3, 129, dtype::F32, "layer.w"), o);
    CHECK(q.name == "layer.w");
    CHECK(q.rows == 3);
    CHECK(q.cols == 129);
    CHECK(q.group_size == 64);
    CHECK(q.groups() == 3);
    CHECK(q.scales.size() == 9);
    CHECK_NOTHROW(q.validate());
    // The tail group holds column 128 alone: its scale is that element's |w| / 7.5.
    for (int r = 0; r < 3; ++r)
        CHECK(q.scales[static_cast<std::size_t>(r * 3 + 2)] ==
              float_to_fp16(scale_formula::gptq(std::fabs(w[static_cast<std::size_t>(r * 129 + 128)]), 4)));
    o.group_size = -1;
    const auto pc = quantize(testing::view_of(w, 3, 129, dtype::F32), o);
    CHECK(pc.group_size == 129);
    CHECK(pc.groups() == 1);
}

TEST_CASE("F32, F16 and BF16 inputs holding the same values quantize identically") {
    const auto f = testing::student_t_floats(4 * 96, 3);
    const auto b16 = testing::to_bf16(f);
    std::vector<float> fb(f.size());
    for (std::size_t i = 0; i < f.size(); ++i) fb[i] = bf16_to_float(b16[i]);
    quant_options o;
    o.group_size = 32;
    o.symmetric = false;
    o.policy = scale_policy::minmax;
    const auto a = quantize(testing::view_of(fb, 4, 96, dtype::F32), o);
    const auto b = quantize(testing::view_of(b16, 4, 96, dtype::BF16), o);
    CHECK(a.codes == b.codes);
    CHECK(a.scales == b.scales);
    CHECK(a.zeros == b.zeros);
    const auto h16 = testing::to_fp16(fb);  // bf16 values of this size are exact in fp16
    const auto c = quantize(testing::view_of(h16, 4, 96, dtype::F16), o);
    CHECK(a.codes == c.codes);
}

TEST_CASE("NaN and infinity are refused with the tensor and the first bad element") {
    auto w = testing::student_t_floats(4 * 40, 5);
    w[2 * 40 + 5] = std::numeric_limits<float>::quiet_NaN();
    w[3 * 40 + 1] = std::numeric_limits<float>::infinity();
    quant_options o;
    o.group_size = 8;
    try {
        (void)quantize(testing::view_of(w, 4, 40, dtype::F32, "blk.0.w"), o);
        FAIL("no exception");
    } catch (const unsupported_error& e) {
        CHECK(e.tensor() == "blk.0.w");
        CHECK(std::string(e.what()).find("NaN at element 85 (row 2, column 5)") != std::string::npos);
    }
    w[2 * 40 + 5] = 0.0f;
    auto b = testing::to_bf16(w);
    thread_pool pool(2);
    try {
        (void)quantize(testing::view_of(b, 4, 40, dtype::BF16, "blk.0.w"), o, pool.executor());
        FAIL("no exception");
    } catch (const unsupported_error& e) {
        CHECK(std::string(e.what()).find("infinity at element 121") != std::string::npos);
    }
}

TEST_CASE("bad options are refused by name") {
    const auto w = testing::student_t_floats(2 * 64, 1);
    const auto v = testing::view_of(w, 2, 64, dtype::F32, "t");
    const quant_options base = [] {
        quant_options b;
        b.group_size = 32;
        return b;
    }();
    quant_options o = base;
    o.bits = 9;
    CHECK_THROWS_AS(quantize(v, o), shape_error);
    o = base;
    o.group_size = 48;
    CHECK_THROWS_AS(quantize(v, o), shape_error);
    o.group_size = 128;  // more than the 64 columns
    CHECK_THROWS_AS(quantize(v, o), shape_error);
    o = base;
    o.policy = scale_policy::minmax;  // asymmetric policy on a symmetric scheme
    CHECK_THROWS_AS(quantize(v, o), unsupported_error);
    o = base;
    o.symmetric = false;  // gptq_absmax is symmetric only
    CHECK_THROWS_AS(quantize(v, o), unsupported_error);
    o = base;
    o.scale_dtype = dtype::F32;
    CHECK_THROWS_AS(quantize(v, o), unsupported_error);
    o = base;
    std::vector<float> imp(63, 1.0f);
    o.importance = imp;
    CHECK_THROWS_AS(quantize(v, o), shape_error);
    imp.assign(64, 1.0f);
    imp[3] = -1.0f;
    o.importance = imp;
    CHECK_THROWS_AS(quantize(v, o), unsupported_error);
    o = base;
    o.policy = scale_policy::custom;
    CHECK_THROWS_AS(quantize(v, o), unsupported_error);
    const std::vector<std::int32_t> ints(128, 0);
    CHECK_THROWS_AS(quantize(testing::view_of(ints, 2, 64, dtype::I32), base), unsupported_error);
    CHECK_THROWS_AS(quantize(testing::view_of(w, 2, 65, dtype::F32), base), shape_error);
}

TEST_CASE("a scale that overflows F16 is refused with the group named") {
    const std::vector<float> w{1e6f, 1.0f};
    quant_options o;
    o.group_size = -1;
    CHECK_THROWS_WITH_AS(quantize(testing::view_of(w, 1, 2, dtype::F32, "big"), o),
                         doctest::Contains("row 0 group 0 overflows F16"), unsupported_error);
    o.scale_dtype = dtype::BF16;
    CHECK_NOTHROW(quantize(testing::view_of(w, 1, 2, dtype::F32, "big"), o));
}

TEST_CASE("a searched scale that overflows F16 is refused with the group named, in any group of a block") {
    // The searches round every candidate's scale in search_groups, a block of groups at a
    // time; an overflowed candidate must stop the block and be worded by the group's rule.
    std::vector<float> w(4 * 32, 0.01f);
    w[2 * 32 + 5] = -1e6f;  // group 2 of row 0: 1e6 * 1.06 / 8 and 1e6 / 7.5 overflow F16
    for (scale_policy p : {scale_policy::seed_search, scale_policy::mse}) {
        CAPTURE(static_cast<int>(p));
        quant_options o;
        o.group_size = 32;
        o.policy = p;
        CHECK_THROWS_WITH_AS(quantize(testing::view_of(w, 1, 128, dtype::F32, "big"), o),
                             doctest::Contains("row 0 group 2 overflows F16"), unsupported_error);
        o.scale_dtype = dtype::BF16;
        CHECK_NOTHROW(quantize(testing::view_of(w, 1, 128, dtype::F32, "big"), o));
    }
}

TEST_CASE("output bytes do not depend on the thread count or executor") {
    const auto w = testing::to_bf16(testing::student_t_floats(37 * 300, 99));
    const auto v = testing::view_of(w, 37, 300, dtype::BF16);
    for (scale_policy p : {scale_policy::gptq_absmax, scale_policy::seed_search, scale_policy::mse}) {
        quant_options o;
        o.group_size = 32;
        o.policy = p;
        const auto ref = quantize(v, o);
        for (unsigned t : {1u, 2u, 3u, 5u}) {
            thread_pool pool(t);
            const auto q = quantize(v, o, pool.executor());
            CHECK(q.codes == ref.codes);
            CHECK(q.scales == ref.scales);
            CHECK(q.zeros == ref.zeros);
        }
        // An executor that runs tasks backwards.
        executor reverse = [](std::size_t n, const std::function<void(std::size_t)>& task) {
            for (std::size_t i = n; i-- > 0;) task(i);
        };
        CHECK(quantize(v, o, reverse).codes == ref.codes);
    }
}

TEST_CASE("thread_pool runs every task once and rethrows") {
    thread_pool pool(3);
    std::vector<int> hits(1000, 0);
    pool.run(hits.size(), [&](std::size_t i) { hits[i] += 1; });
    CHECK(std::count(hits.begin(), hits.end(), 1) == 1000);
    CHECK_THROWS_AS(pool.run(10, [](std::size_t i) { if (i == 7) throw std::runtime_error("x"); }), std::runtime_error);
    std::vector<int> again(50, 0);
    parallel_for(pool.executor(), 0, 50, 7, [&](std::size_t lo, std::size_t hi) {
        for (std::size_t i = lo; i < hi; ++i) again[i] += 1;
    });
    CHECK(std::count(again.begin(), again.end(), 1) == 50);
}

TEST_CASE("custom policy runs through the same driver") {
    const auto w = testing::student_t_floats(4 * 64, 8);
    quant_options o;
    o.group_size = 16;
    o.policy = scale_policy::custom;
    o.custom = [](const group_view& g) { return group_choice{g.store(0.01f), 1 << (g.bits - 1)}; };
    const auto q = quantize(testing::view_of(w, 4, 64, dtype::F32), o);
    for (auto s : q.scales) CHECK(s == float_to_fp16(0.01f));
    o.custom = [](const group_view& g) { return group_choice{g.store(0.01f), 3}; };
    CHECK_THROWS_AS(quantize(testing::view_of(w, 4, 64, dtype::F32), o), unsupported_error);
}

TEST_CASE("SNR: 10 log10(signal / error) of the stored decoded values") {
    // w = [1, 0.5], absmax BF16: s = bf16(1/7) = 0.142578125; codes 15, 12 -> dq = 0.998046875,
    // 0.5703125. signal 1.25, error (0.001953125^2 + 0.0703125^2).
    const std::vector<float> w{1.0f, 0.5f};
    quant_options o;
    o.group_size = -1;
    o.policy = scale_policy::absmax;
    o.scale_dtype = dtype::BF16;
    const auto q = quantize(testing::view_of(w, 1, 2, dtype::F32), o);
    const auto dq = dequantize(q);
    CHECK(dq[0] == 0.998046875f);
    CHECK(dq[1] == 0.5703125f);
    const double err = 0.001953125 * 0.001953125 + 0.0703125 * 0.0703125;
    CHECK(snr_db(testing::view_of(w, 1, 2, dtype::F32), q) == doctest::Approx(10 * std::log10(1.25 / err)).epsilon(1e-12));
    CHECK(snr_db(std::span<const float>(w), std::span<const float>(w)) == std::numeric_limits<double>::infinity());
    // Realistic: 4-bit g64 on Student-t lands in the expected 18-22 dB band.
    const auto t = testing::student_t_floats(64 * 256, 4);
    o.group_size = 64;
    o.policy = scale_policy::gptq_absmax;
    const double db = snr_db(testing::view_of(t, 64, 256, dtype::F32), quantize(testing::view_of(t, 64, 256, dtype::F32), o));
    CHECK(db > 17.0);
    CHECK(db < 23.0);
    o.policy = scale_policy::mse;
    const double db_mse = snr_db(testing::view_of(t, 64, 256, dtype::F32), quantize(testing::view_of(t, 64, 256, dtype::F32), o));
    CHECK(db_mse > db);  // the search improves on plain absmax
}

TEST_CASE("pre-quantized input: accepted when consistent, refused by place otherwise") {
    const std::vector<std::int32_t> codes{0, 15, 6, 4, 1, 2, 3, 4};  // 2 rows x 4 cols, group 2
    const std::vector<std::uint16_t> scales{float_to_bf16(0.125f), float_to_bf16(0.25f), float_to_bf16(0.5f),
                                            float_to_bf16(1.0f)};
    const std::vector<double> zeros{4, 5, 6, 7};
    prequantized_input in;
    in.name = "qat.w";
    in.bits = 4;
    in.rows = 2;
    in.cols = 4;
    in.group_size = 2;
    in.symmetric = false;
    in.scale_dtype = dtype::BF16;
    in.codes = codes;
    in.scales = testing::view_of(scales, 2, 2, dtype::BF16);
    in.zeros = zeros;
    const auto q = from_prequantized(in);
    CHECK(q.dequantized(0, 0) == -0.5f);
    CHECK(q.dequantized(0, 3) == -0.25f);
    CHECK(q.dequantized(1, 2) == -4.0f);  // (3 - 7) * 1

    auto fractional = zeros;
    fractional[3] = 7.5;
    in.zeros = fractional;
    CHECK_THROWS_WITH_AS(from_prequantized(in), doctest::Contains("zero point 7.500000 of row 1 group 1 is not an integer"),
                         unsupported_error);
    in.zeros = zeros;
    auto bad_codes = codes;
    bad_codes[5] = 16;
    in.codes = bad_codes;
    CHECK_THROWS_WITH_AS(from_prequantized(in), doctest::Contains("code 16 at element 5"), format_error);
    in.codes = codes;
    in.scale_dtype = dtype::F16;  // declared F16, given BF16
    CHECK_THROWS_WITH_AS(from_prequantized(in), doctest::Contains("scales are BF16 but the declared scale dtype is F16"),
                         unsupported_error);
    in.scale_dtype = dtype::BF16;
    in.symmetric = true;  // zeros are not 8
    CHECK_THROWS_AS(from_prequantized(in), unsupported_error);
    in.zeros = {};
    const auto s = from_prequantized(in);
    CHECK(s.zeros == std::vector<std::int32_t>{8, 8, 8, 8});
}

TEST_CASE("validate names the first code above 2^bits - 1, in the eight-byte words and in the tail") {
    for (int bits : {2, 3, 4, 8}) {
        quantized_tensor q;
        q.name = "m.weight";
        q.bits = bits;
        q.rows = 3;
        q.cols = 13;  // 39 codes: four whole eight-byte words and a 7-byte tail
        q.group_size = 13;
        q.symmetric = false;
        q.scale_dtype = dtype::F16;
        q.codes.assign(39, static_cast<std::uint8_t>((1 << bits) - 1));
        q.scales.assign(3, float_to_fp16(0.5f));
        q.zeros.assign(3, 0);
        CHECK_NOTHROW(q.validate());
        if (bits == 8) continue;  // every byte fits
        for (std::size_t at : {0u, 7u, 8u, 31u, 32u, 38u}) {
            quantized_tensor bad = q;
            bad.codes[at] = static_cast<std::uint8_t>(1 << bits);
            bad.codes[38] = at == 38 ? bad.codes[38] : static_cast<std::uint8_t>(0xFF);  // a later one too
            CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains(("code out of range at element " + std::to_string(at)).c_str()),
                                 shape_error);
        }
    }
}
