// E4M3 / UE4M3 / E2M1 / E8M0 codes (core/minifloat.hpp) against the formats' definitions,
// computed here from sign, exponent and mantissa in double (OCP OFP8 rev 1.0 table 1; OCP MX
// v1.0 5.3.3 and 5.4.1): every code, every rounding boundary, saturation, NaN and infinity.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <ios>
#include <limits>

#include "qforge/core/half.hpp"
#include "qforge/core/minifloat.hpp"

using namespace qforge;

namespace {

constexpr double nan_value = std::numeric_limits<double>::quiet_NaN();

/// E4M3FN by definition: s.eeee.mmm, bias 7, e = 0 subnormal, S.1111.111 NaN.
double e4m3_definition(unsigned c) {
    const unsigned s = c >> 7, e = (c >> 3) & 15u, m = c & 7u;
    if (e == 15 && m == 7) return nan_value;
    const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, static_cast<int>(e) - 7);
    return s ? -v : v;
}

/// E2M1 by definition: s.ee.m, bias 1, e = 0 subnormal (m * 0.5).
double e2m1_definition(unsigned c) {
    const unsigned s = (c >> 3) & 1u, e = (c >> 1) & 3u, m = c & 1u;
    const double v = e == 0 ? m * 0.5 : std::ldexp(1.0 + m / 2.0, static_cast<int>(e) - 1);
    return s ? -v : v;
}

/// The nearest of the magnitude codes 0..last (values rising with the code) to |x| by real
/// distance, ties to the even code, saturating at `last`; `value(c)` is the definition.
template <class V>
unsigned nearest_code(double x, unsigned last, V value) {
    if (x >= value(last)) return last;
    unsigned lo = 0;
    while (lo + 1 <= last && value(lo + 1) <= x) ++lo;
    const double dlo = x - value(lo), dhi = value(lo + 1) - x;
    if (dlo < dhi) return lo;
    if (dhi < dlo) return lo + 1;
    return lo % 2 == 0 ? lo : lo + 1;
}

std::uint8_t e4m3_reference(float f) {
    const unsigned sign = std::signbit(f) ? 0x80u : 0u;
    if (std::isnan(f)) return static_cast<std::uint8_t>(sign | 0x7Fu);
    return static_cast<std::uint8_t>(sign | nearest_code(std::fabs(static_cast<double>(f)), 0x7E, e4m3_definition));
}

std::uint8_t e2m1_reference(float f) {
    if (std::isnan(f)) return 0;
    const unsigned sign = std::signbit(f) ? 0x8u : 0u;
    return static_cast<std::uint8_t>(sign | nearest_code(std::fabs(static_cast<double>(f)), 7, e2m1_definition));
}

/// E8M0 reference: nearest power of two by value, ties to the even code, in [2^-127, 2^127].
std::uint8_t e8m0_reference(float f) {
    if (std::isnan(f)) return 0xFF;
    if (!(f > 0)) return 0;
    return static_cast<std::uint8_t>(
        nearest_code(static_cast<double>(f), 254, [](unsigned c) { return std::ldexp(1.0, static_cast<int>(c) - 127); }));
}

bool same(double a, float b) { return (std::isnan(a) && std::isnan(b)) || (a == static_cast<double>(b) && std::signbit(a) == std::signbit(b)); }

// The encoders as unsigned, for comparisons with unsigned codes.
unsigned E4(float f) { return float_to_e4m3(f); }
unsigned E2(float f) { return float_to_e2m1(f); }
unsigned E8(float f) { return float_to_e8m0(f); }

float up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float down(float x) { return std::nextafter(x, 0.0f); }

}  // namespace

TEST_CASE("E4M3: every one of the 256 codes decodes to its definition") {
    int nans = 0;
    for (unsigned c = 0; c < 256; ++c) {
        const auto code = static_cast<std::uint8_t>(c);
        INFO("code 0x" << std::hex << c);
        CHECK(same(e4m3_definition(c), e4m3_to_float(code)));
        CHECK(e4m3_is_nan(code) == std::isnan(e4m3_to_float(code)));
        nans += std::isnan(e4m3_to_float(code)) ? 1 : 0;
    }
    CHECK(nans == 2);  // 0x7F and 0xFF only: E4M3FN has no infinity
    CHECK(e4m3_to_float(0x7E) == 448.0f);
    CHECK(e4m3_to_float(0x01) == 0x1p-9f);
    CHECK(e4m3_to_float(0x08) == 0x1p-6f);
    CHECK(e4m3_to_float(0x38) == 1.0f);
    CHECK(e4m3_max == 448.0f);
}

TEST_CASE("E4M3: encode(decode(c)) == c for every non-NaN code, signed zeros included") {
    for (unsigned c = 0; c < 256; ++c) {
        const auto code = static_cast<std::uint8_t>(c);
        if (e4m3_is_nan(code)) continue;
        INFO("code 0x" << std::hex << c);
        CHECK(float_to_e4m3(e4m3_to_float(code)) == code);
    }
}

TEST_CASE("E4M3: every midpoint ties to the even code; one float either side goes to its side") {
    for (unsigned c = 0; c < 0x7E; ++c) {
        const double lo = e4m3_definition(c), hi = e4m3_definition(c + 1);
        const auto mid = static_cast<float>((lo + hi) / 2);
        REQUIRE(static_cast<double>(mid) == (lo + hi) / 2);  // 5 significant bits: exact in float
        const unsigned even = c % 2 == 0 ? c : c + 1;
        INFO("between 0x" << std::hex << c << " and 0x" << c + 1);
        CHECK(E4(mid) == even);
        CHECK(E4(up(mid)) == c + 1);
        CHECK(E4(down(mid)) == c);
        CHECK(E4(-mid) == (0x80u | even));
        CHECK(E4(-up(mid)) == (0x80u | (c + 1)));
        CHECK(E4(-down(mid)) == (0x80u | c));
    }
}

TEST_CASE("E4M3: saturation to +-448, infinity, NaN, the subnormal floor, signed zero") {
    CHECK(float_to_e4m3(448.0f) == 0x7E);
    CHECK(float_to_e4m3(up(448.0f)) == 0x7E);
    CHECK(float_to_e4m3(464.0f) == 0x7E);  // where a 480 code would start: still saturated
    CHECK(float_to_e4m3(1e30f) == 0x7E);
    CHECK(float_to_e4m3(-1e30f) == 0xFE);
    CHECK(float_to_e4m3(std::numeric_limits<float>::infinity()) == 0x7E);
    CHECK(float_to_e4m3(-std::numeric_limits<float>::infinity()) == 0xFE);
    CHECK(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()) == 0x7F);
    CHECK(float_to_e4m3(-std::numeric_limits<float>::quiet_NaN()) == 0xFF);
    CHECK(float_to_e4m3(0x1p-10f) == 0x00);  // half the smallest subnormal: tie to 0 (even)
    CHECK(float_to_e4m3(up(0x1p-10f)) == 0x01);
    CHECK(float_to_e4m3(std::numeric_limits<float>::denorm_min()) == 0x00);
    CHECK(float_to_e4m3(-std::numeric_limits<float>::denorm_min()) == 0x80);
    CHECK(float_to_e4m3(-0.0f) == 0x80);
    CHECK(float_to_e4m3(0.0f) == 0x00);
    CHECK(float_to_e4m3(0x1.ep-7f) == 0x08);  // 7.5 units of 2^-9: ties up to the first normal (even)
}

TEST_CASE("E4M3: every bf16 value as input encodes to the nearest code by real distance") {
    for (std::uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_float(static_cast<std::uint16_t>(h));
        INFO("bf16 0x" << std::hex << h);
        CHECK(float_to_e4m3(f) == e4m3_reference(f));
    }
}

TEST_CASE("UE4M3: the unsigned half of E4M3; negatives and zero give 0, bit 7 is not a code") {
    for (unsigned c = 0; c < 0x7F; ++c) {
        const auto code = static_cast<std::uint8_t>(c);
        CHECK(same(e4m3_definition(c), ue4m3_to_float(code)));
        CHECK(float_to_ue4m3(ue4m3_to_float(code)) == code);
    }
    CHECK(std::isnan(ue4m3_to_float(0x7F)));
    for (unsigned c = 0x80; c < 256; ++c) CHECK(std::isnan(ue4m3_to_float(static_cast<std::uint8_t>(c))));
    CHECK(float_to_ue4m3(-1.0f) == 0x00);
    CHECK(float_to_ue4m3(-0.0f) == 0x00);
    CHECK(float_to_ue4m3(1e9f) == 0x7E);
    CHECK(float_to_ue4m3(std::numeric_limits<float>::quiet_NaN()) == 0x7F);
    CHECK(float_to_ue4m3(0x1.1p0f) == 0x38);  // 1.0625 between 1 (0x38) and 1.125 (0x39): tie to even
}

TEST_CASE("E2M1: 16 codes, values 0 0.5 1 1.5 2 3 4 6 with sign; round trip; every midpoint") {
    const double magnitudes[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
    for (unsigned c = 0; c < 16; ++c) {
        CHECK(same(e2m1_definition(c), e2m1_to_float(static_cast<std::uint8_t>(c))));
        CHECK(std::fabs(e2m1_definition(c)) == magnitudes[c & 7]);
        CHECK(E2(e2m1_to_float(static_cast<std::uint8_t>(c))) == c);
    }
    for (unsigned c = 0; c < 7; ++c) {
        const auto mid = static_cast<float>((magnitudes[c] + magnitudes[c + 1]) / 2);
        const unsigned even = c % 2 == 0 ? c : c + 1;
        INFO("between codes " << c << " and " << c + 1);
        CHECK(E2(mid) == even);
        CHECK(E2(up(mid)) == c + 1);
        CHECK(E2(down(mid)) == c);
        CHECK(E2(-mid) == (8u | even));
    }
    CHECK(float_to_e2m1(6.5f) == 7);
    CHECK(float_to_e2m1(1e30f) == 7);
    CHECK(float_to_e2m1(-std::numeric_limits<float>::infinity()) == 15);
    CHECK(float_to_e2m1(std::numeric_limits<float>::quiet_NaN()) == 0);  // no NaN code: callers refuse NaN
    CHECK(float_to_e2m1(-0.1f) == 8);  // -0 keeps its sign
    CHECK(e2m1_to_float(0x7F) == -6.0f);  // the high nibble is ignored
    CHECK(e2m1_to_float(0xF7) == 6.0f);
    for (std::uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_float(static_cast<std::uint16_t>(h));
        INFO("bf16 0x" << std::hex << h);
        CHECK(float_to_e2m1(f) == e2m1_reference(f));
    }
}

TEST_CASE("E8M0: 2^(c-127), 0xFF NaN; round trip; midpoints 1.5 * 2^k to the even code; limits") {
    for (unsigned c = 0; c < 255; ++c) {
        const auto code = static_cast<std::uint8_t>(c);
        CHECK(static_cast<double>(e8m0_to_float(code)) == std::ldexp(1.0, static_cast<int>(c) - 127));
        CHECK(float_to_e8m0(e8m0_to_float(code)) == code);
        CHECK(e8m0_from_exponent(static_cast<int>(c) - 127) == code);
    }
    CHECK(std::isnan(e8m0_to_float(0xFF)));
    for (unsigned c = 0; c < 254; ++c) {
        const auto mid = static_cast<float>(std::ldexp(1.5, static_cast<int>(c) - 127));
        const unsigned even = c % 2 == 0 ? c : c + 1;
        INFO("between codes " << c << " and " << c + 1);
        CHECK(E8(mid) == even);
        CHECK(E8(up(mid)) == c + 1);
        CHECK(E8(down(mid)) == c);
    }
    CHECK(float_to_e8m0(0.0f) == 0x00);
    CHECK(float_to_e8m0(-4.0f) == 0x00);
    CHECK(float_to_e8m0(std::numeric_limits<float>::denorm_min()) == 0x00);
    CHECK(float_to_e8m0(std::numeric_limits<float>::infinity()) == 0xFE);
    CHECK(float_to_e8m0(std::numeric_limits<float>::max()) == 0xFE);
    CHECK(float_to_e8m0(std::numeric_limits<float>::quiet_NaN()) == 0xFF);
    CHECK(e8m0_from_exponent(-500) == 0x00);
    CHECK(e8m0_from_exponent(500) == 0xFE);
    for (std::uint32_t h = 0; h < 65536; ++h) {
        const float f = bf16_to_float(static_cast<std::uint16_t>(h));
        INFO("bf16 0x" << std::hex << h);
        CHECK(float_to_e8m0(f) == e8m0_reference(f));
    }
}

TEST_CASE("minifloat conversions are constexpr") {
    static_assert(e4m3_to_float(0x7E) == 448.0f);
    static_assert(float_to_e4m3(-448.0f) == 0xFE);
    static_assert(float_to_e2m1(2.5f) == 4);
    static_assert(float_to_e8m0(1.0f) == 127);
    CHECK(true);
}
