// Internals of the least-squares policies: the grid of one group and the min/max grids the
// fit starts from.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "qforge/core/dtype.hpp"
#include "qforge/core/half.hpp"
#include "qforge/quant/scale_policy.hpp"

namespace qforge {

/// The grid of one group: w = (code - zero) * scale, with `scale` already the value of the
/// stored 16-bit pattern `scale_bits`.
struct group_grid {
    float scale = 0.0f;
    std::uint16_t scale_bits = 0;
    std::int32_t zero = 0;
};

/// A fitted group: its grid and the weighted squared error of the codes written with it.
struct group_fit {
    group_grid grid;
    double error = 0.0;
};

namespace detail {

/// Rounds a nonzero scale to its storage dtype (RNE, core/half.hpp), with the edge rules of
/// quant/scale_policy.hpp store_scale: a magnitude below the smallest usable value (F16 2^-24,
/// BF16 2^-126, where 1/s stays finite) is raised to it. A magnitude that overflows is pinned
/// to the largest finite value (fits here never come near it: they are bounded by min/max).
// Always inlined: returned from a call, the 12-byte struct went through two narrow stores and
// one wide load, a store-forwarding stall that cost more than the rounding.
[[gnu::always_inline]] inline group_grid make_grid(float scale, std::int32_t zero, dtype sd) {
    const auto u = std::bit_cast<std::uint32_t>(scale);
    const std::uint32_t mag = u & 0x7FFFFFFFu;
    if (sd == dtype::F16 && mag >= 0x38800000u && mag < 0x477FF000u) {
        // The usual case, a normal F16 (2^-14 <= |s| < 65520): float_to_fp16's rounding without
        // its branches (adding 0xFFF plus the lowest kept bit rounds half to even; a carry
        // moves into the exponent), and fp16_to_float's value.
        const std::uint32_t v = mag - (112u << 23);
        const std::uint32_t h = (v + 0xFFFu + ((v >> 13) & 1u)) >> 13;
        const auto b = static_cast<std::uint16_t>(((u >> 16) & 0x8000u) | h);
        return {std::bit_cast<float>((u & 0x80000000u) | ((h << 13) + (112u << 23))), b, zero};
    }
    std::uint16_t b = sd == dtype::BF16 ? float_to_bf16(scale) : float_to_fp16(scale);
    const auto sign = static_cast<std::uint16_t>(b & 0x8000u);
    const std::uint16_t smallest = sd == dtype::BF16 ? 0x0080u : 0x0001u;
    const std::uint16_t max_finite = sd == dtype::BF16 ? 0x7F7Fu : 0x7BFFu;
    if ((b & 0x7FFFu) < smallest) b = static_cast<std::uint16_t>(sign | smallest);
    if ((b & 0x7FFFu) > max_finite) b = static_cast<std::uint16_t>(sign | max_finite);
    const float v = sd == dtype::BF16 ? bf16_to_float(b) : fp16_to_float(b);
    return {v, b, zero};
}

/// Asymmetric min/max grid, scale_policy::minmax bit for bit: the range is forced to contain
/// 0 (as GPTQ and llama.cpp do; an all-zero group uses -1..1), s = range/maxq as stored,
/// zero = round(-min/s) against the stored s.
[[gnu::always_inline]] inline group_grid asym_minmax_grid(float mn, float mx, int bits, dtype sd) {
    const int maxq = (1 << bits) - 1;
    float lo = std::min(mn, 0.0f);
    float hi = std::max(mx, 0.0f);
    if (lo == 0.0f && hi == 0.0f) lo = -1.0f, hi = 1.0f;
    group_grid g = make_grid((hi - lo) / static_cast<float>(maxq), 0, sd);
    g.zero = zero_from_min(lo, g.scale, maxq);
    return g;
}

/// Symmetric min/max grid (zero pinned at 2^(bits-1)), scale_policy::gptq_absmax bit for bit:
/// s = amax / (maxq / 2) as stored (amax / 7.5 at 4 bits; an all-zero group uses amax = 1).
[[gnu::always_inline]] inline group_grid sym_minmax_grid(float mn, float mx, int bits, dtype sd) {
    const int maxq = (1 << bits) - 1;
    float amax = std::fmax(-mn, mx);
    if (!(amax > 0.0f)) amax = 1.0f;
    return make_grid(amax / (static_cast<float>(maxq) / 2.0f), 1 << (bits - 1), sd);
}

}  // namespace detail
}  // namespace qforge
