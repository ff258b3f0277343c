// Bit-exact float <-> bf16 / fp16: exhaustive over every 16-bit code, plus hand-picked
// float boundaries where rounding decides the result.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "qforge/core/half.hpp"

using namespace qforge;

namespace {
std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

// An independent fp16 rounding reference computed in double: the nearest of the two
// neighbouring fp16 values by real distance, ties to the even mantissa.
std::uint16_t fp16_reference(float f) {
    const double x = std::fabs(static_cast<double>(f));
    const std::uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    if (x >= 65520.0) return sign | 0x7C00;
    std::uint16_t lo = 0;
    for (int step = 1 << 14; step; step >>= 1)  // largest code whose value <= x
        if (lo + step < 0x7C00 && fp16_to_float(static_cast<std::uint16_t>(lo + step)) <= x)
            lo = static_cast<std::uint16_t>(lo + step);
    const double vlo = fp16_to_float(lo), vhi = fp16_to_float(static_cast<std::uint16_t>(lo + 1));
    if (x - vlo < vhi - x) return sign | lo;
    if (x - vlo > vhi - x) return sign | static_cast<std::uint16_t>(lo + 1);
    return sign | ((lo & 1) ? static_cast<std::uint16_t>(lo + 1) : lo);
}
}  // namespace

TEST_CASE("bf16: every code round-trips through float exactly") {
    for (std::uint32_t c = 0; c < 65536; ++c) {
        const auto h = static_cast<std::uint16_t>(c);
        const float f = bf16_to_float(h);
        CHECK(bits_of(f) == (c << 16));
        if (std::isnan(f))
            CHECK(float_to_bf16(f) == ((h & 0x8000) | 0x7FC0));
        else
            CHECK(float_to_bf16(f) == h);
    }
}

TEST_CASE("bf16: ties round to even, overflow reaches infinity, NaN keeps only its sign") {
    CHECK(float_to_bf16(from_bits(0x3F808000)) == 0x3F80);  // tie, even kept
    CHECK(float_to_bf16(from_bits(0x3F818000)) == 0x3F82);  // tie, odd rounds up
    CHECK(float_to_bf16(from_bits(0x3F808001)) == 0x3F81);  // just above the tie
    CHECK(float_to_bf16(from_bits(0x3F807FFF)) == 0x3F80);  // just below the tie
    CHECK(float_to_bf16(from_bits(0x7F7FFFFF)) == 0x7F80);  // FLT_MAX rounds to +inf
    CHECK(float_to_bf16(from_bits(0xFF7F7FFF)) == 0xFF7F);  // stays finite
    CHECK(float_to_bf16(from_bits(0x00000001)) == 0x0000);  // smallest subnormal -> 0
    CHECK(float_to_bf16(from_bits(0x00008000)) == 0x0000);  // tie to even 0
    CHECK(float_to_bf16(from_bits(0x00018000)) == 0x0002);
    CHECK(float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
    CHECK(float_to_bf16(from_bits(0xFFC12345)) == 0xFFC0);
    CHECK(float_to_bf16(from_bits(0x7F800001)) == 0x7FC0);  // signalling NaN is quieted
}

TEST_CASE("fp16: every code round-trips through float exactly") {
    for (std::uint32_t c = 0; c < 65536; ++c) {
        const auto h = static_cast<std::uint16_t>(c);
        const float f = fp16_to_float(h);
        if (std::isnan(f)) {
            CHECK(float_to_fp16(f) == ((h & 0x8000) | 0x7E00));
            continue;
        }
        CHECK(float_to_fp16(f) == h);
        if ((c & 0x7C00) == 0)  // subnormals: exactly mant * 2^-24
            CHECK(std::fabs(f) == static_cast<float>(c & 0x3FF) * 0x1p-24f);
    }
}

TEST_CASE("fp16: the midpoints between neighbouring codes round to even") {
    // For every pair of adjacent finite codes, the float halfway between them (exact in
    // float) must round to the even one, and one float ulp either side to the nearer one.
    for (std::uint32_t c = 0; c < 0x7BFF; ++c) {
        const float a = fp16_to_float(static_cast<std::uint16_t>(c));
        const float b = fp16_to_float(static_cast<std::uint16_t>(c + 1));
        const float mid = a + (b - a) / 2;
        const auto even = static_cast<std::uint16_t>((c & 1) ? c + 1 : c);
        REQUIRE(float_to_fp16(mid) == even);
        CHECK(float_to_fp16(std::nextafter(mid, 0.0f)) == c);
        CHECK(float_to_fp16(std::nextafter(mid, 1e9f)) == c + 1);
        CHECK(float_to_fp16(-mid) == (0x8000 | even));
    }
}

TEST_CASE("fp16: boundaries (overflow, subnormal edge, zero) and an independent reference") {
    CHECK(float_to_fp16(65504.0f) == 0x7BFF);
    CHECK(float_to_fp16(65519.996f) == 0x7BFF);
    CHECK(float_to_fp16(65520.0f) == 0x7C00);  // halfway to the next binade: rounds to inf
    CHECK(float_to_fp16(1e10f) == 0x7C00);
    CHECK(float_to_fp16(-1e10f) == 0xFC00);
    CHECK(float_to_fp16(0x1p-14f) == 0x0400);              // smallest normal
    CHECK(float_to_fp16(0x1p-14f - 0x1p-25f) == 0x0400);   // tie between 0x3FF and 0x400 -> even
    CHECK(float_to_fp16(0x1p-24f) == 0x0001);
    CHECK(float_to_fp16(0x1p-25f) == 0x0000);              // tie -> even 0
    CHECK(float_to_fp16(0x1.8p-25f) == 0x0001);
    CHECK(float_to_fp16(-0.0f) == 0x8000);
    CHECK(float_to_fp16(1e-30f) == 0x0000);
    CHECK(float_to_fp16(std::numeric_limits<float>::infinity()) == 0x7C00);
    CHECK(float_to_fp16(std::numeric_limits<float>::quiet_NaN()) == 0x7E00);

    std::uint64_t state = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 200000; ++i) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        // Exponents around the fp16 range, random mantissas and signs.
        const auto mant = static_cast<std::uint32_t>(state >> 41) & 0x7FFFFF;
        const auto exp = 95u + static_cast<std::uint32_t>((state >> 20) % 50);
        const std::uint32_t sign = (state >> 63) ? 0x80000000u : 0u;
        const float f = from_bits(sign | (exp << 23) | mant);
        REQUIRE(float_to_fp16(f) == fp16_reference(f));
    }
}
