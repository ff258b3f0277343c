// Bit-exact float32 <-> bfloat16 / float16 conversions.
//
// Rounding is round-to-nearest-even everywhere, overflow goes to infinity, fp16 subnormals
// are produced and read exactly. These match torch (c10::BFloat16, c10::Half) and ggml
// (ggml_compute_fp32_to_bf16/_fp16) for every finite input (formats.md section 6).
//
// NaN policy: a NaN input becomes a quiet NaN with its sign kept and no payload:
// bf16 0x7FC0|sign, fp16 0x7E00|sign. The tools disagree on NaN payloads (formats.md trap 23)
// and qforge refuses NaN weights before they reach a file, so only the sign is preserved.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace qforge {

constexpr float bf16_to_float(std::uint16_t h) noexcept {
    return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

constexpr std::uint16_t float_to_bf16(float f) noexcept {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t sign = (u >> 16) & 0x8000u;
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7FC0u);
    // Adding 0x7FFF plus the lowest kept bit rounds half to even; a carry out of the
    // mantissa bumps the exponent, which is how overflow reaches infinity.
    const std::uint32_t rounded = u + 0x7FFFu + ((u >> 16) & 1u);
    return static_cast<std::uint16_t>(rounded >> 16);
}

constexpr float fp16_to_float(std::uint16_t h) noexcept {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    const std::uint32_t exp = (h >> 10) & 0x1Fu;
    const std::uint32_t mant = h & 0x3FFu;
    if (exp == 0x1F)  // inf / NaN keep their payload's top bits
        return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13));
    if (exp == 0) {
        // Subnormal (or zero): mant * 2^-24, exact in float.
        const float mag = static_cast<float>(mant) * 0x1p-24f;
        return sign ? -mag : mag;
    }
    return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

constexpr std::uint16_t float_to_fp16(float f) noexcept {
    std::uint32_t x = std::bit_cast<std::uint32_t>(f);
    const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
    x &= 0x7FFFFFFFu;
    if (x > 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7E00u);  // NaN
    if (x >= 0x477FF000u) return static_cast<std::uint16_t>(sign | 0x7C00u);  // >= 65520: inf
    if (x < 0x38800000u) {
        // Below the smallest normal half (2^-14): count units of 2^-24 and round half to even.
        // Scaling by 2^24 is exact; 1024 units spill into the smallest normal, bit for bit.
        const float units = std::bit_cast<float>(x) * 0x1p24f;
        auto q = static_cast<std::uint32_t>(units);
        const float rem = units - static_cast<float>(q);
        if (rem > 0.5f || (rem == 0.5f && (q & 1u))) ++q;
        return static_cast<std::uint16_t>(sign | q);
    }
    const std::uint32_t exp = (x >> 23) - 112u;
    const std::uint32_t mant = x & 0x7FFFFFu;
    std::uint32_t h = (exp << 10) | (mant >> 13);
    const std::uint32_t rem = mant & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // carry may reach the exponent
    return static_cast<std::uint16_t>(sign | h);
}

}  // namespace qforge
