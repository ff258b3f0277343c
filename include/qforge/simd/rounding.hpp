// Round half to even in plain float code, defined once for the scalar kernels (simd/arch/
// scalar.hpp's vround, which every other ISA reproduces) and the scalar formulas of quant/
// (scale_policy.hpp's zero points, the least-squares fit); and x86's truncating conversion,
// for the scalar kernels' code stores and layout/gguf's port of ggml's casts.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

#include "qforge/simd/no_contract.hpp"

namespace qforge::simd {

/// The nearest integer to x, ties to even, for |x| < 2^23 (larger floats are integers
/// already and come back unchanged, as do NaN and infinities): adding and removing 2^23
/// leaves it, and no_contract keeps the compiler from folding the two away.
inline float round_half_even(float x) noexcept {
    if (!(std::fabs(x) < 0x1p23f)) return x;
    const float big = x < 0 ? -0x1p23f : 0x1p23f;
    return detail::no_contract(x + big) - big;
}

/// The C conversion `(int32_t)f` as x86's cvttss2si performs it: truncation toward zero, and
/// INT32_MIN for NaN or values out of range (where C leaves it undefined). ggml's `(int8_t)f`
/// and `(uint8_t)f` casts are this conversion followed by keeping the low byte; the vector
/// ISAs' code stores give the same bytes for every code they are given.
inline std::int32_t trunc_to_i32(float f) noexcept {
    if (!(f > -2147483904.0f && f < 2147483648.0f)) return std::numeric_limits<std::int32_t>::min();
    return static_cast<std::int32_t>(f);
}

}  // namespace qforge::simd
