// Floating-point helpers that pin down the exact rounding of ggml's reference quantizers.
//
// The golden bytes come from ggml-quants.c compiled with -ffp-contract=off (formats.md trap 21,
// golden/gguf/README.md): every `a*b + c` is a rounded product followed by a rounded add. g++
// defaults to -ffp-contract=fast for C++ (even with -std=c++20: the ISO switch only turns it off
// for C) and fuses such pairs into FMA whenever the target has FMA (-march=native, aarch64, a
// target("fma") function); clang fuses within one expression (-ffp-contract=on). Neither a
// pragma nor splitting statements is reliable across both compilers and inlining, so every
// product that feeds an add or a subtract goes through `mul()`, whose result passes
// simd::no_contract (the one anti-FMA helper, which the SIMD kernels' vmul mirrors): the
// compiler must materialise the rounded float product, and no FMA can be formed across it.
#pragma once

#include <bit>
#include <cstdint>

#include "qforge/simd/no_contract.hpp"
#include "qforge/simd/rounding.hpp"

namespace qforge::gguf::detail {

/// A float product rounded to float, never contracted into a following add (see above).
inline float mul(float a, float b) noexcept { return simd::no_contract(a * b); }

/// ggml `nearest_int` (ggml-quants.c): round half to even by adding 1.5*2^23 and reading the
/// mantissa. Defined for |f| <= 4194303; outside that (and for NaN) it returns what the same
/// bit trick gives, as ggml does in a release build, instead of asserting.
inline int nearest_int(float f) noexcept {
    const float v = simd::no_contract(f) + 12582912.f;
    const auto i = std::bit_cast<std::int32_t>(v);
    return (i & 0x007fffff) - 0x00400000;
}

/// ggml's `(int8_t)f` and `(uint8_t)f` casts: x86's truncating conversion (simd/rounding.hpp),
/// then the low byte.
using simd::trunc_to_i32;
inline std::int8_t trunc_to_i8(float f) noexcept {
    return static_cast<std::int8_t>(static_cast<std::uint8_t>(trunc_to_i32(f) & 0xFF));
}
inline std::uint8_t trunc_to_u8(float f) noexcept {
    return static_cast<std::uint8_t>(trunc_to_i32(f) & 0xFF);
}

}  // namespace qforge::gguf::detail
