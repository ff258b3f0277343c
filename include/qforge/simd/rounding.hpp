// Round half to even in plain float code, defined once for the scalar kernels (simd/arch/
// scalar.hpp's vround, which every other ISA reproduces) and the scalar formulas of quant/
// (scale_policy.hpp's zero points, the least-squares fit).
#pragma once

#include <cmath>

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

}  // namespace qforge::simd
