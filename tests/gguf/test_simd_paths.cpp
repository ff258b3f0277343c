// Every SIMD path of the GGUF quantizers gives the scalar reference's bytes: Student-t rows,
// odd super-block counts (the AVX2 K-quant kernel pairs super-blocks), and the edge rows of
// the golden set (zeros, constant, one outlier, negative only, tiny, huge, ramp), and blocks
// whose scale is subnormal.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "qforge/layout/gguf/quantize.hpp"
#include "support/synthetic.hpp"

using namespace qforge;
using namespace qforge::gguf;

namespace {

std::vector<float> test_rows(std::int64_t n_per_row) {
    std::vector<float> x = testing::student_t_floats(static_cast<std::size_t>(7 * n_per_row), 20261130);
    auto row = [&](auto f) {
        for (std::int64_t i = 0; i < n_per_row; ++i) x.push_back(f(i));
    };
    row([](std::int64_t) { return 0.0f; });
    row([](std::int64_t) { return 0.01f; });
    row([](std::int64_t i) { return i == 100 ? 1.0f : 0.0f; });
    row([](std::int64_t i) { return -0.001f - 0.0001f * static_cast<float>(i % 17); });
    row([](std::int64_t i) { return 1e-30f * static_cast<float>(i % 5 - 2); });
    row([](std::int64_t i) { return 6e4f * std::sin(static_cast<float>(i)); });
    row([&](std::int64_t i) { return -1.0f + 2.0f * static_cast<float>(i) / static_cast<float>(n_per_row - 1); });
    row([](std::int64_t i) { return i % 2 ? -0.02f : 0.02f; });
    // blocks whose d is subnormal, so that 1 / d is infinite: the 32-element types' zero codes
    row([](std::int64_t i) { return 4e-38f * std::sin(static_cast<float>(i)); });
    return x;
}

template <class Tag>
void compare_with_scalar(Tag tag) {
    if (!Tag::available()) {
        MESSAGE("skipped: " << Tag::name() << " not available");
        return;
    }
    for (ggml_type t : {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1, ggml_type::q8_0, ggml_type::q2_k,
                        ggml_type::q3_k, ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k, ggml_type::iq4_nl}) {
        for (std::int64_t n_per_row : {256, 768}) {  // 768: 3 super-blocks per row (odd)
            const auto x = test_rows(n_per_row);
            const std::int64_t nrow = static_cast<std::int64_t>(x.size()) / n_per_row;
            for (std::int64_t rows : {nrow, std::int64_t{1}}) {
                const auto size = static_cast<std::size_t>(quantized_size(t, rows, n_per_row));
                std::vector<std::uint16_t> a(size / 2 + 1), b(size / 2 + 1);
                quantize_rows(t, x.data(), rows, n_per_row, nullptr, reinterpret_cast<std::byte*>(a.data()), simd::scalar_tag{});
                quantize_rows(t, x.data(), rows, n_per_row, nullptr, reinterpret_cast<std::byte*>(b.data()), tag);
                CAPTURE(type_name(t));
                CAPTURE(n_per_row);
                CAPTURE(rows);
                CHECK(std::memcmp(a.data(), b.data(), size) == 0);
            }
        }
    }
}

}  // namespace

TEST_CASE("gguf SIMD paths are byte-identical to the scalar reference") {
    compare_with_scalar(simd::avx2_tag{});
    compare_with_scalar(simd::avx512_tag{});
    compare_with_scalar(simd::neon_tag{});
}

TEST_CASE("gguf decode(quantize(x)) stays within each type's known error") {
    const auto x = testing::student_t_floats(256 * 64, 7);
    struct bound {
        ggml_type t;
        double min_snr_db;
    };
    // SNR floors for Student-t(5) weights, a few dB under what ggml's quantizers reach
    for (const auto& b : {bound{ggml_type::q8_0, 40}, bound{ggml_type::q6_k, 28}, bound{ggml_type::q5_k, 23},
                                      bound{ggml_type::q5_0, 21}, bound{ggml_type::q5_1, 22}, bound{ggml_type::q4_k, 18},
                                      bound{ggml_type::q4_0, 15}, bound{ggml_type::q4_1, 16}, bound{ggml_type::q3_k, 12},
                                      bound{ggml_type::q2_k, 6}, bound{ggml_type::iq4_nl, 16}, bound{ggml_type::f16, 60},
                                      bound{ggml_type::bf16, 40}}) {
        const ggml_type t = b.t;
        const double floor_db = b.min_snr_db;
        const auto size = static_cast<std::size_t>(quantized_size(t, 64, 256));
        std::vector<std::uint16_t> q(size / 2 + 1);
        quantize_rows(t, x.data(), 64, 256, nullptr, reinterpret_cast<std::byte*>(q.data()));
        std::vector<float> y(x.size());
        dequantize_rows(t, reinterpret_cast<const std::byte*>(q.data()), static_cast<std::int64_t>(x.size()), y.data());
        double s = 0, e = 0, worst = 0, amax = 0;
        for (std::size_t i = 0; i < x.size(); ++i) {
            s += double(x[i]) * x[i];
            e += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
            worst = std::max(worst, std::abs(double(x[i]) - y[i]));
            amax = std::max(amax, std::abs(double(x[i])));
        }
        const double snr = 10 * std::log10(s / e);
        CAPTURE(type_name(t));
        CAPTURE(snr);
        CHECK(snr > floor_db);
        CHECK(worst < amax);  // no error larger than the largest weight
    }
    // F32 is exact
    std::vector<float> y(256);
    std::vector<std::uint32_t> q(256);
    quantize_rows(ggml_type::f32, x.data(), 1, 256, nullptr, reinterpret_cast<std::byte*>(q.data()));
    dequantize_rows(ggml_type::f32, reinterpret_cast<const std::byte*>(q.data()), 256, y.data());
    CHECK(std::memcmp(y.data(), x.data(), 1024) == 0);
    // refusals
    std::vector<std::uint16_t> buf(1024);
    CHECK_THROWS_AS(quantize_rows(ggml_type::q4_k, x.data(), 1, 100, nullptr, reinterpret_cast<std::byte*>(buf.data())), shape_error);
    CHECK_THROWS_AS(quantize_rows(ggml_type::q8_1, x.data(), 1, 32, nullptr, reinterpret_cast<std::byte*>(buf.data())), unsupported_error);
}
