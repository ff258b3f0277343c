// Bit-exact float32 <-> E4M3 (OCP FP8 E4M3FN), UE4M3, E2M1 (FP4) and E8M0 element and scale
// codes, written from the formats' definitions (no library float8 type assumed).
//
// Definitions (OCP 8-bit Floating Point Specification (OFP8) rev 1.0 table 1, "E4M3"; OCP
// Microscaling Formats (MX) v1.0 sections 5.3.3 "FP4 (E2M1)" and 5.4.1 "E8M0"; the same
// facts as torch.float8_e4m3fn / float8_e8m0fnu in pytorch c10/util/Float8_e4m3fn.h and
// Float8_e8m0fnu.h, and ggml's kvalues_mxfp4 in ggml-common.h):
//   E4M3  s.eeee.mmm, bias 7: e = 0 -> m * 2^-9 (subnormal); else (1 + m/8) * 2^(e-7).
//         No infinity; S.1111.111 (0x7F, 0xFF) is NaN; the largest finite value is 448 (0x7E).
//   UE4M3 E4M3 without its sign bit (0x00..0x7E; 0x7F NaN): the group scales of NVFP4, which
//         compressed-tensors stores as float8_e4m3fn holding non-negative values.
//   E2M1  s.ee.m, bias 1: the magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6 for codes 0..7, bit 3 the
//         sign. No infinity, no NaN.
//   E8M0  eeeeeeee: 2^(e-127) for e = 0..254, 0xFF NaN. No sign, no zero.
//
// Encoding (qforge's decision where the definitions leave one; each is pinned by a test):
//   * round to nearest, ties to even code (for E8M0: nearest power of two by value, ties to
//     the even exponent);
//   * saturating: a finite value beyond the largest code, and +-infinity, become the largest
//     code of that sign (E4M3 +-448, E2M1 +-6, E8M0 2^127), as torch's saturating casts and
//     compressed-tensors' clamp to finfo.max before casting do;
//   * NaN: E4M3 gives 0x7F with the sign kept, UE4M3 0x7F, E8M0 0xFF. E2M1 has no NaN code, so
//     a NaN encodes as +0. Callers refuse NaN before encoding (qforge refuses NaN weights and
//     scales naming the tensor), so no NaN code is ever written;
//   * the sign of a value that rounds to zero is kept (E4M3 0x80, E2M1 0x8), like torch's cast;
//   * UE4M3 and E8M0 hold no sign: a negative value or zero encodes as the smallest code
//     (UE4M3 0x00 = 0, E8M0 0x00 = 2^-127), as ggml does for an all-zero block.
#pragma once

#include <bit>
#include <cstdint>

namespace qforge {

inline constexpr float e4m3_max = 448.0f;
inline constexpr float e2m1_max = 6.0f;

/// The E4M3 value of `code`; NaN for 0x7F / 0xFF. Exact (every E4M3 value is a float).
constexpr float e4m3_to_float(std::uint8_t code) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(code & 0x80u) << 24;
    const std::uint32_t exp = (code >> 3) & 0xFu;
    const std::uint32_t mant = code & 0x7u;
    if (exp == 0xFu && mant == 0x7u) return std::bit_cast<float>(sign | 0x7FC00000u);
    if (exp == 0) {
        const float mag = static_cast<float>(mant) * 0x1p-9f;  // subnormal: m * 2^-9, exact
        return sign ? -mag : mag;
    }
    return std::bit_cast<float>(sign | ((exp + 120u) << 23) | (mant << 20));  // rebias 7 -> 127
}

/// True for the two NaN codes of E4M3.
constexpr bool e4m3_is_nan(std::uint8_t code) noexcept { return (code & 0x7Fu) == 0x7Fu; }

/// float -> E4M3, round to nearest even, saturating to +-448 (see the file comment).
constexpr std::uint8_t float_to_e4m3(float f) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
    const std::uint32_t x = u & 0x7FFFFFFFu;
    if (x > 0x7F800000u) return static_cast<std::uint8_t>(sign | 0x7Fu);  // NaN
    if (x >= 0x43E00000u) return static_cast<std::uint8_t>(sign | 0x7Eu);  // >= 448 or inf: saturate
    if (x < 0x3C800000u) {
        // Below the smallest normal 2^-6: count units of 2^-9 and round half to even. The
        // scaling is exact, and 8 units spill into the smallest normal code 0x08, bit for bit.
        const float units = std::bit_cast<float>(x) * 0x1p9f;
        auto q = static_cast<std::uint32_t>(units);
        const float rem = units - static_cast<float>(q);
        if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
        return static_cast<std::uint8_t>(sign | q);
    }
    const std::uint32_t exp = (x >> 23) - 120u;  // 1..15
    const std::uint32_t mant = x & 0x7FFFFFu;
    std::uint32_t h = (exp << 3) | (mant >> 20);
    const std::uint32_t rem = mant & 0xFFFFFu;
    if (rem > 0x80000u || (rem == 0x80000u && (h & 1u))) ++h;  // a carry may reach the exponent
    return static_cast<std::uint8_t>(sign | (h > 0x7Eu ? 0x7Eu : h));
}

/// The UE4M3 value of `code` (0x00..0x7E); NaN for 0x7F and for any code with bit 7 set.
constexpr float ue4m3_to_float(std::uint8_t code) noexcept {
    return code & 0x80u ? std::bit_cast<float>(0x7FC00000u) : e4m3_to_float(code);
}

/// float -> UE4M3: E4M3's rounding and saturation; zero and negative values give 0x00.
constexpr std::uint8_t float_to_ue4m3(float f) noexcept {
    if (f != f) return 0x7Fu;
    if (!(f > 0.0f)) return 0x00u;
    return float_to_e4m3(f);
}

/// The E2M1 value of the low four bits of `code`.
constexpr float e2m1_to_float(std::uint8_t code) noexcept {
    constexpr float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float m = magnitude[code & 0x7u];
    return code & 0x8u ? -m : m;
}

/// float -> E2M1 code (low four bits), round to nearest even, saturating to +-6; NaN -> +0.
constexpr std::uint8_t float_to_e2m1(float f) noexcept {
    if (f != f) return 0;
    const std::uint8_t sign = std::bit_cast<std::uint32_t>(f) >> 31 ? 0x8u : 0x0u;
    const float a = f < 0.0f ? -f : f;
    // Each midpoint goes to the neighbour with the even code (0, 2, 4, 6 = 0, 1, 2, 4).
    std::uint8_t m;
    if (a <= 0.25f) m = 0;
    else if (a < 0.75f) m = 1;
    else if (a <= 1.25f) m = 2;
    else if (a < 1.75f) m = 3;
    else if (a <= 2.5f) m = 4;
    else if (a < 3.5f) m = 5;
    else if (a <= 5.0f) m = 6;
    else m = 7;
    return static_cast<std::uint8_t>(sign | m);
}

/// 2^(code - 127); NaN for 0xFF. Exact: 2^-127 is a float32 subnormal.
constexpr float e8m0_to_float(std::uint8_t code) noexcept {
    if (code == 0xFFu) return std::bit_cast<float>(0x7FC00000u);
    if (code == 0) return std::bit_cast<float>(0x00400000u);
    return std::bit_cast<float>(static_cast<std::uint32_t>(code) << 23);
}

/// The E8M0 code of 2^exponent, exponent clamped to [-127, 127].
constexpr std::uint8_t e8m0_from_exponent(int exponent) noexcept {
    const int e = exponent < -127 ? -127 : exponent > 127 ? 127 : exponent;
    return static_cast<std::uint8_t>(e + 127);
}

/// float -> E8M0: the nearest power of two (ties, 1.5 * 2^k, to the even exponent code),
/// within [2^-127, 2^127]; zero and negative values give 0x00, NaN 0xFF.
constexpr std::uint8_t float_to_e8m0(float f) noexcept {
    if (f != f) return 0xFFu;
    if (!(f > 0x1p-127f)) return 0x00u;
    if (f >= 0x1.8p127f) return 0xFEu;  // beyond the midpoint above 2^127, and infinity
    if (f < 0x1p-126f) return f > 0x1.8p-127f ? 0x01u : 0x00u;  // float32 subnormals: 2^-127 or 2^-126
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    // Dropping all 23 mantissa bits with round-half-even (the bf16 trick, one level further);
    // a carry moves to the next exponent.
    const std::uint32_t rounded = u + 0x3FFFFFu + ((u >> 23) & 1u);
    return static_cast<std::uint8_t>(rounded >> 23);
}

}  // namespace qforge
