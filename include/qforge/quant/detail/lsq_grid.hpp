// Internals of the least-squares policies: the grid of one group, the sums one pass over a
// group collects, and the seed grids. Shared by quant/least_squares.hpp and the GPTQ solver.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"

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
inline group_grid make_grid(float scale, std::int32_t zero, dtype sd) {
    std::uint16_t b = sd == dtype::BF16 ? float_to_bf16(scale) : float_to_fp16(scale);
    const auto sign = static_cast<std::uint16_t>(b & 0x8000u);
    const std::uint16_t smallest = sd == dtype::BF16 ? 0x0080u : 0x0001u;
    const std::uint16_t max_finite = sd == dtype::BF16 ? 0x7F7Fu : 0x7BFFu;
    if ((b & 0x7FFFu) < smallest) b = static_cast<std::uint16_t>(sign | smallest);
    if ((b & 0x7FFFu) > max_finite) b = static_cast<std::uint16_t>(sign | max_finite);
    const float v = sd == dtype::BF16 ? bf16_to_float(b) : fp16_to_float(b);
    return {v, b, zero};
}

/// Sums over a group that do not depend on the codes.
struct lsq_sums {
    double w = 0.0;   ///< sum of weights
    double x = 0.0;   ///< sum of w*x
    double xx = 0.0;  ///< sum of w*x^2
    float min = 0.0f;
    float max = 0.0f;
};

/// Sums over a group that do depend on the codes q (0..maxq), plus the error.
struct lsq_pass {
    double err = 0.0;  ///< sum w (x - (q - zero)*scale)^2
    double q = 0.0;    ///< sum w q
    double qq = 0.0;   ///< sum w q^2
    double qx = 0.0;   ///< sum w q x
};

inline lsq_sums lsq_base_sums(const float* x, const float* w, int n) {
    lsq_sums s;
    if (n <= 0) return s;
    s.min = s.max = x[0];
    for (int i = 0; i < n; ++i) {
        const double wi = w ? static_cast<double>(w[i]) : 1.0;
        s.w += wi;
        s.x += wi * static_cast<double>(x[i]);
        s.xx += wi * static_cast<double>(x[i]) * static_cast<double>(x[i]);
        s.min = std::min(s.min, x[i]);
        s.max = std::max(s.max, x[i]);
    }
    if (!std::isfinite(s.min) || !std::isfinite(s.max) || !std::isfinite(s.x))
        fail<format_error>({}, {}, "non-finite weight value in a group");
    if (!std::isfinite(s.w) || s.w < 0.0) fail<shape_error>({}, {}, "importance weights must be finite and >= 0");
    return s;
}

/// Round half to even for |v| < 2^22 without a libm call (nearbyint is a call on baseline
/// x86-64): adding 1.5*2^23 leaves no fraction bits, so the FPU's rounding does the work.
/// Not folded away: qforge is never built with -ffast-math (it would break exactness anyway).
inline float lsq_round(float v) noexcept {
    const float magic = 12582912.0f;
    return (v + magic) - magic;
}

template <bool Weighted>
inline lsq_pass lsq_assign_impl(const float* x, const float* w, int n, const group_grid& g, int maxq,
                                std::uint8_t* codes) {
    const float s = g.scale;
    const float inv = 1.0f / s;
    const float lo = -static_cast<float>(g.zero);
    const float hi = static_cast<float>(maxq - g.zero);
    const float z = static_cast<float>(g.zero);
    lsq_pass p;
    for (int i = 0; i < n; ++i) {
        // Clamping before rounding equals rounding then clamping (the bounds are integers)
        // and keeps the magic-number rounding in its valid range.
        const float c = std::min(std::max(x[i] * inv, lo), hi);
        const float r = lsq_round(c);
        const float q = r + z;
        codes[i] = static_cast<std::uint8_t>(static_cast<int>(q));
        const float d = r * s - x[i];
        const double wi = Weighted ? static_cast<double>(w[i]) : 1.0;
        const double qd = static_cast<double>(q);
        p.err += wi * static_cast<double>(d * d);
        p.q += wi * qd;
        p.qq += wi * qd * qd;
        p.qx += wi * qd * static_cast<double>(x[i]);
    }
    return p;
}

/// Assigns each value its nearest code on grid g and collects the pass sums.
inline lsq_pass lsq_assign(const float* x, const float* w, int n, const group_grid& g, int maxq,
                           std::uint8_t* codes) {
    return w ? lsq_assign_impl<true>(x, w, n, g, maxq, codes) : lsq_assign_impl<false>(x, w, n, g, maxq, codes);
}

/// Sums of one candidate scale: relative codes k_i = clamp(round(x_i * r), lo, hi) (the code
/// minus the zero), A = sum w k x, B = sum w k^2, K = sum w k. Element i goes to partial sum
/// i % 8 and the partials are added pairwise in a fixed order, so the loop vectorizes (SSE2
/// on a baseline build) and the result never depends on how it was vectorized.
struct lsq_cand {
    double a = 0.0, b = 0.0, k = 0.0;
};

template <bool Weighted>
inline lsq_cand lsq_cand_sums_impl(const float* x, const float* w, int n, float r, float lo, float hi) noexcept {
    float pa[8] = {}, pb[8] = {}, pk[8] = {};
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int j = 0; j < 8; ++j) {
            float v = x[i + j] * r;
            v = v < lo ? lo : v;
            v = v > hi ? hi : v;
            const float k = lsq_round(v);
            const float wk = Weighted ? w[i + j] * k : k;
            pa[j] += wk * x[i + j];
            pb[j] += wk * k;
            pk[j] += wk;
        }
    }
    for (int j = 0; i < n; ++i, ++j) {
        float v = x[i] * r;
        v = v < lo ? lo : v;
        v = v > hi ? hi : v;
        const float k = lsq_round(v);
        const float wk = Weighted ? w[i] * k : k;
        pa[j] += wk * x[i];
        pb[j] += wk * k;
        pk[j] += wk;
    }
    auto total = [](const float* p) {
        return static_cast<double>(((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7])));
    };
    return {total(pa), total(pb), total(pk)};
}

inline lsq_cand lsq_cand_sums(const float* x, const float* w, int n, float r, float lo, float hi) noexcept {
    return w ? lsq_cand_sums_impl<true>(x, w, n, r, lo, hi) : lsq_cand_sums_impl<false>(x, w, n, r, lo, hi);
}

/// Asymmetric min/max grid, scale_policy::minmax bit for bit: the range is forced to contain
/// 0 (as GPTQ and llama.cpp do; an all-zero group uses -1..1), s = range/maxq as stored,
/// zero = round(-min/s) against the stored s.
inline group_grid asym_minmax_grid(const lsq_sums& b, int bits, dtype sd) {
    const int maxq = (1 << bits) - 1;
    float lo = std::min(b.min, 0.0f);
    float hi = std::max(b.max, 0.0f);
    if (lo == 0.0f && hi == 0.0f) lo = -1.0f, hi = 1.0f;
    group_grid g = make_grid((hi - lo) / static_cast<float>(maxq), 0, sd);
    g.zero = static_cast<std::int32_t>(std::clamp(std::nearbyint(-lo / g.scale), 0.0f, static_cast<float>(maxq)));
    return g;
}

/// Symmetric min/max grid (zero pinned at 2^(bits-1)), scale_policy::gptq_absmax bit for bit:
/// s = amax / (maxq / 2) as stored (amax / 7.5 at 4 bits; an all-zero group uses amax = 1).
inline group_grid sym_minmax_grid(const lsq_sums& b, int bits, dtype sd) {
    const int maxq = (1 << bits) - 1;
    float amax = std::fmax(-b.min, b.max);
    if (!(amax > 0.0f)) amax = 1.0f;
    return make_grid(amax / (static_cast<float>(maxq) / 2.0f), 1 << (bits - 1), sd);
}

}  // namespace detail
}  // namespace qforge
