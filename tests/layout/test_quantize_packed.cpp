// quantize_packed() makes a layout's tensors band by band. Its bytes must be exactly those of
// layout.pack(quantize(...)) for every bit width, symmetry, GPTQ format, executor and a shape
// that spans several bands with a short last one; its SNR must be quantize()'s; and a refusal
// must name the weight's row, not the band's.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "qforge/core/error.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/layout/quantize_packed.hpp"
#include "qforge/quant/quantize.hpp"
#include "support/synthetic.hpp"

using namespace qforge;

namespace {

template <class Layout>
void expect_same_as_pack(const Layout& layout, const tensor_view& v, quant_options o, const std::string& what) {
    thread_pool pool(3);
    snr_sums ref_snr;
    const auto ref = layout.pack(quantize(v, o, {}, &ref_snr), "m.proj");
    for (bool threads : {false, true}) {
        snr_sums snr{-1, -1};
        const auto got = quantize_packed(v, o, layout, "m.proj", threads ? pool.executor() : executor{}, &snr);
        REQUIRE(got.size() == ref.size());
        for (std::size_t i = 0; i < ref.size(); ++i) {
            INFO(what << " tensor " << ref[i].name << " threads " << threads);
            CHECK(got[i].name == ref[i].name);
            CHECK(got[i].type == ref[i].type);
            CHECK(got[i].shape == ref[i].shape);
            CHECK(got[i].bytes == ref[i].bytes);
        }
        CHECK(snr.signal == ref_snr.signal);
        CHECK(snr.error == ref_snr.error);
    }
}

}  // namespace

TEST_CASE("quantize_packed equals pack(quantize) for GPTQ: bits, symmetry, v1/v2, several bands") {
    // 2048 columns -> bands of 128 rows: 288 rows are two full bands and a 32-row tail.
    const std::int64_t rows = 288, cols = 2048;
    REQUIRE(detail::band_rows(cols) == 128);
    const auto w = testing::to_bf16(testing::student_t_floats(static_cast<std::size_t>(rows * cols), 4242));
    const tensor_view v = testing::view_of(w, rows, cols, dtype::BF16, "m.proj.weight");
    auto run = [&](auto layout, bool sym, gptq_format f) {
        quant_options o;
        o.bits = decltype(layout)::bits;
        o.group_size = 128;
        o.symmetric = sym;
        o.policy = sym ? scale_policy::seed_search : scale_policy::minmax;
        o.scale_dtype = dtype::F16;
        expect_same_as_pack(decltype(layout)(gptq_options{f, dtype::F16, false}), v, o,
                            std::to_string(o.bits) + " bits sym " + std::to_string(sym));
    };
    for (gptq_format f : {gptq_format::v1, gptq_format::v2})
        for (bool sym : {true, false}) {
            if (f == gptq_format::v1 && !sym) continue;  // minmax may give zero 0, which v1 refuses (tested below)
            run(gptq_layout<2>{}, sym, f);
            run(gptq_layout<3>{}, sym, f);
            run(gptq_layout<4>{}, sym, f);
            run(gptq_layout<8>{}, sym, f);
        }
}

TEST_CASE("quantize_packed: per-channel and small shapes, one band") {
    const std::int64_t rows = 40, cols = 96;
    const auto w = testing::student_t_floats(static_cast<std::size_t>(rows * cols), 99);
    const tensor_view v = testing::view_of(w, rows, cols, dtype::F32, "small.weight");
    quant_options o;
    o.bits = 4;
    o.group_size = -1;
    o.policy = scale_policy::gptq_absmax;
    expect_same_as_pack(gptq_layout<4>{}, v, o, "per channel");
    o.group_size = 32;
    o.symmetric = false;
    o.policy = scale_policy::minmax;
    expect_same_as_pack(gptq_layout<4>(gptq_options{gptq_format::v2, dtype::F16, false}), v, o, "asym g32");
}

TEST_CASE("quantize_packed: layouts without band packing go through pack(quantize)") {
    const std::int64_t rows = 64, cols = 256;
    const auto w = testing::to_bf16(testing::student_t_floats(static_cast<std::size_t>(rows * cols), 5));
    const tensor_view v = testing::view_of(w, rows, cols, dtype::BF16, "x.weight");
    quant_options o;
    o.bits = 4;
    o.group_size = 64;
    o.symmetric = false;
    o.policy = scale_policy::awq_minmax;
    expect_same_as_pack(awq_layout<4>{}, v, o, "awq");
    o.policy = scale_policy::minmax;
    o.scale_dtype = dtype::BF16;  // the compressed-tensors default
    expect_same_as_pack(compressed_tensors_layout<4>{}, v, o, "compressed-tensors");
}

TEST_CASE("quantize_packed refusals name the weight's row and leave the shape check first") {
    const std::int64_t rows = 288, cols = 2048;
    std::vector<float> w(static_cast<std::size_t>(rows * cols), 0.5f);  // all positive: minmax zero is 0
    const tensor_view v = testing::view_of(w, rows, cols, dtype::F32, "z.weight");
    quant_options o;
    o.bits = 4;
    o.group_size = 128;
    o.symmetric = false;
    o.policy = scale_policy::minmax;
    try {
        (void)quantize_packed(v, o, gptq_layout<4>{}, "z");
        FAIL("v1 must refuse zero point 0");
    } catch (const unsupported_error& e) {
        CHECK(std::string(e.what()).find("zero point 0 at row 0,") != std::string::npos);
    }
    // A band other than the first: rows 130.. hold the only zero-0 groups.
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) w[static_cast<std::size_t>(r * cols + c)] = r >= 130 ? 0.5f : (c % 2 ? 0.5f : -0.5f);
    try {
        (void)quantize_packed(v, o, gptq_layout<4>{}, "z");
        FAIL("v1 must refuse zero point 0");
    } catch (const unsupported_error& e) {
        CHECK(std::string(e.what()).find("zero point 0 at row 130,") != std::string::npos);
    }
    const tensor_view narrow = testing::view_of(w, 36, cols, dtype::F32, "n.weight");  // 36 rows: not whole words of 3 bits
    o.bits = 3;
    o.symmetric = true;
    o.policy = scale_policy::gptq_absmax;
    CHECK_THROWS_AS((void)quantize_packed(narrow, o, gptq_layout<3>{}, "n"), shape_error);
}
