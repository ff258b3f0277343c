// ggml's 32-element block quantizers Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: reference, importance-
// weighted and decode, byte-identical to ggml-quants.c (llama.cpp c392e509) built with
// -ffp-contract=off.
//
// Rounding, which is where re-implementations usually differ from ggml:
// - Q4_0/Q5_0: code = MIN(15|31, (int8_t)(x*id + 8.5f|16.5f)): a TRUNCATING cast after adding
//   8.5, i.e. round half up in the shifted domain, computed from the unrounded fp32 d (the
//   stored fp16 d is not read back). Q4_1: (int8_t)((x-min)*id + 0.5f); Q5_1: (uint8_t)(...).
// - Q8_0: roundf (half away from zero) of x*id.
// - the importance-weighted paths use make_qx_quants / make_qkx3_quants (nearest_int, RNE).
// - `x*id + c` is a rounded product then a rounded add (never an FMA), see detail/fp.hpp.
#pragma once

#include <cfloat>
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "qforge/core/half.hpp"
#include "qforge/layout/gguf/blocks.hpp"
#include "qforge/layout/gguf/detail/fp.hpp"
#include "qforge/layout/gguf/detail/search.hpp"
#include "qforge/simd/gguf_kernels.hpp"

namespace qforge::gguf {

namespace detail {

/// Value and |value| of the element with the largest magnitude; the first one on ties.
inline float signed_absmax(const float* x, int n, float& amax) noexcept {
    amax = 0.0f;
    float max = 0.0f;
    for (int j = 0; j < n; ++j) {
        if (amax < std::fabs(x[j])) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    }
    return max;
}

inline void min_max(const float* x, int n, float& min, float& max) noexcept {
    min = FLT_MAX;
    max = -FLT_MAX;
    for (int j = 0; j < n; ++j) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
}

/// sigma^2 = sum(x^2)/n over one row, the base of the importance weights of the 32-blocks.
inline float row_sigma2(const float* x, std::int64_t n) noexcept {
    float sum_x2 = 0;
    for (std::int64_t j = 0; j < n; ++j) sum_x2 += mul(x[j], x[j]);
    return sum_x2 / static_cast<float>(n);
}

/// weight[j] = qw[j] * sqrt(sigma2 + x[j]^2)  (the *_impl functions of ggml-quants.c)
inline void importance(const float* x, const float* qw, float sigma2, int n, float* weight) noexcept {
    for (int j = 0; j < n; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + mul(x[j], x[j]));
}


template <class Block>
inline void pack_nibbles_and_high(const std::uint8_t* L, Block& b) noexcept {
    std::uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        const std::uint8_t l0 = L[j];
        const std::uint8_t l1 = L[j + 16];
        b.qs[j] = static_cast<std::uint8_t>((l0 & 0x0F) | ((l1 & 0x0F) << 4));
        qh |= ((l0 & 0x10u) >> 4) << (j + 0);
        qh |= ((l1 & 0x10u) >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; ++k) b.qh[k] = static_cast<std::uint8_t>(qh >> (8 * k));  // LE memcpy
}

}  // namespace detail

// ---- reference quantizers: quantize_row_<t>_ref(x, y, k) ------------------------------------

inline void quantize_ref(const float* x, block_q4_0* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i, x += 32) {
        float amax;
        const float max = detail::signed_absmax(x, 32, amax);
        const float d = max / -8;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = float_to_fp16(d);
        for (int j = 0; j < 16; ++j) {
            const int c0 = detail::trunc_to_i8(detail::mul(x[j], id) + 8.5f);
            const int c1 = detail::trunc_to_i8(detail::mul(x[j + 16], id) + 8.5f);
            const auto q0 = static_cast<std::uint8_t>(c0 < 15 ? c0 : 15);
            const auto q1 = static_cast<std::uint8_t>(c1 < 15 ? c1 : 15);
            y[i].qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
        }
    }
}

inline void quantize_ref(const float* x, block_q4_1* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i, x += 32) {
        float min, max;
        detail::min_max(x, 32, min, max);
        const float d = (max - min) / 15;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = float_to_fp16(d);
        y[i].m = float_to_fp16(min);
        for (int j = 0; j < 16; ++j) {
            const int c0 = detail::trunc_to_i8(detail::mul(x[j] - min, id) + 0.5f);
            const int c1 = detail::trunc_to_i8(detail::mul(x[j + 16] - min, id) + 0.5f);
            const auto q0 = static_cast<std::uint8_t>(c0 < 15 ? c0 : 15);
            const auto q1 = static_cast<std::uint8_t>(c1 < 15 ? c1 : 15);
            y[i].qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
        }
    }
}

inline void quantize_ref(const float* x, block_q5_0* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i, x += 32) {
        float amax;
        const float max = detail::signed_absmax(x, 32, amax);
        const float d = max / -16;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = float_to_fp16(d);
        std::uint8_t L[32];
        for (int j = 0; j < 32; ++j) {
            const int c = detail::trunc_to_i8(detail::mul(x[j], id) + 16.5f);
            L[j] = static_cast<std::uint8_t>(c < 31 ? c : 31);
        }
        detail::pack_nibbles_and_high(L, y[i]);
    }
}

inline void quantize_ref(const float* x, block_q5_1* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i, x += 32) {
        float min, max;
        detail::min_max(x, 32, min, max);
        const float d = (max - min) / 31;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = float_to_fp16(d);
        y[i].m = float_to_fp16(min);
        std::uint8_t L[32];
        for (int j = 0; j < 32; ++j) L[j] = detail::trunc_to_u8(detail::mul(x[j] - min, id) + 0.5f);
        detail::pack_nibbles_and_high(L, y[i]);
    }
}

inline void quantize_ref(const float* x, block_q8_0* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i, x += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);
        const float d = amax / 127;
        const float id = d != 0 ? 1.0f / d : 0.0f;
        y[i].d = float_to_fp16(d);
        for (int j = 0; j < 32; ++j) y[i].qs[j] = detail::trunc_to_i8(std::round(x[j] * id));
    }
}

// ---- the reference quantizers on a SIMD path (simd/gguf_kernels.hpp): the same bytes --------
// The kernels write whole blocks in the byte layout the table documents, which is these structs'.
static_assert(offsetof(block_q8_0, d) == 0 && offsetof(block_q8_0, qs) == 2, "block_q8_0 as gguf_kernels::q8_0 writes it");
static_assert(offsetof(block_q4_0, d) == 0 && offsetof(block_q4_0, qs) == 2, "block_q4_0 as gguf_kernels::q4_0 writes it");

inline void quantize_ref(const simd::gguf_kernels& kern, const float* x, block_q8_0* y, std::int64_t k) noexcept {
    kern.q8_0(x, k / 32, reinterpret_cast<std::byte*>(y));
}

inline void quantize_ref(const simd::gguf_kernels& kern, const float* x, block_q4_0* y, std::int64_t k) noexcept {
    kern.q4_0(x, k / 32, reinterpret_cast<std::byte*>(y));
}

static_assert(offsetof(block_q4_1, m) == 2 && offsetof(block_q4_1, qs) == 4, "block_q4_1 as gguf_kernels::q4_1 writes it");
static_assert(offsetof(block_q5_0, qh) == 2 && offsetof(block_q5_0, qs) == 6, "block_q5_0 as gguf_kernels::q5_0 writes it");
static_assert(offsetof(block_q5_1, m) == 2 && offsetof(block_q5_1, qh) == 4 && offsetof(block_q5_1, qs) == 8,
              "block_q5_1 as gguf_kernels::q5_1 writes it");

inline void quantize_ref(const simd::gguf_kernels& kern, const float* x, block_q4_1* y, std::int64_t k) noexcept {
    kern.q4_1(x, k / 32, reinterpret_cast<std::byte*>(y));
}

inline void quantize_ref(const simd::gguf_kernels& kern, const float* x, block_q5_0* y, std::int64_t k) noexcept {
    kern.q5_0(x, k / 32, reinterpret_cast<std::byte*>(y));
}

inline void quantize_ref(const simd::gguf_kernels& kern, const float* x, block_q5_1* y, std::int64_t k) noexcept {
    kern.q5_1(x, k / 32, reinterpret_cast<std::byte*>(y));
}

// ---- importance-weighted: quantize_row_<t>_impl(x, y, n_per_row, quant_weights) -------------

inline void quantize_weighted_row(const float* x, block_q4_0* y, std::int64_t n_per_row,
                                  const float* qw) noexcept {
    const float sigma2 = detail::row_sigma2(x, n_per_row);
    float weight[32];
    std::int8_t L[32];
    for (std::int64_t ib = 0; ib < n_per_row / 32; ++ib) {
        const float* xb = x + 32 * ib;
        detail::importance(xb, qw + 32 * ib, sigma2, 32, weight);
        const float d = detail::make_qx_quants(32, 8, xb, L, 1, weight);
        y[ib].d = float_to_fp16(d);
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = static_cast<std::uint8_t>(L[j] | (L[j + 16] << 4));
    }
}

inline void quantize_weighted_row(const float* x, block_q4_1* y, std::int64_t n_per_row,
                                  const float* qw) noexcept {
    const float sigma2 = detail::row_sigma2(x, n_per_row);
    float weight[32];
    std::uint8_t L[32], Laux[32];
    for (std::int64_t ib = 0; ib < n_per_row / 32; ++ib) {
        const float* xb = x + 32 * ib;
        detail::importance(xb, qw + 32 * ib, sigma2, 32, weight);
        float min;
        const float d = detail::make_qkx_quants<true>(32, 15, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[ib].d = float_to_fp16(d);
        y[ib].m = float_to_fp16(-min);
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = static_cast<std::uint8_t>(L[j] | (L[j + 16] << 4));
    }
}

inline void quantize_weighted_row(const float* x, block_q5_0* y, std::int64_t n_per_row,
                                  const float* qw) noexcept {
    const float sigma2 = detail::row_sigma2(x, n_per_row);
    float weight[32];
    std::int8_t L[32];
    for (std::int64_t ib = 0; ib < n_per_row / 32; ++ib) {
        const float* xb = x + 32 * ib;
        detail::importance(xb, qw + 32 * ib, sigma2, 32, weight);
        const float d = detail::make_qx_quants(32, 16, xb, L, 1, weight);
        y[ib].d = float_to_fp16(d);
        std::uint8_t U[32];
        for (int j = 0; j < 32; ++j) U[j] = static_cast<std::uint8_t>(L[j]);
        detail::pack_nibbles_and_high(U, y[ib]);
    }
}

inline void quantize_weighted_row(const float* x, block_q5_1* y, std::int64_t n_per_row,
                                  const float* qw) noexcept {
    const float sigma2 = detail::row_sigma2(x, n_per_row);
    float weight[32];
    std::uint8_t L[32], Laux[32];
    for (std::int64_t ib = 0; ib < n_per_row / 32; ++ib) {
        const float* xb = x + 32 * ib;
        detail::importance(xb, qw + 32 * ib, sigma2, 32, weight);
        float min;
        const float d = detail::make_qkx_quants<true>(32, 31, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[ib].d = float_to_fp16(d);
        y[ib].m = float_to_fp16(-min);
        detail::pack_nibbles_and_high(L, y[ib]);
    }
}

// ---- decode: dequantize_row_<t> -------------------------------------------------------------

inline void dequantize(const block_q4_0* x, float* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i, y += 32) {
        const float d = fp16_to_float(x[i].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = static_cast<float>((x[i].qs[j] & 0x0F) - 8) * d;
            y[j + 16] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

inline void dequantize(const block_q4_1* x, float* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i, y += 32) {
        const float d = fp16_to_float(x[i].d);
        const float m = fp16_to_float(x[i].m);
        for (int j = 0; j < 16; ++j) {
            y[j] = detail::mul(static_cast<float>(x[i].qs[j] & 0x0F), d) + m;
            y[j + 16] = detail::mul(static_cast<float>(x[i].qs[j] >> 4), d) + m;
        }
    }
}

namespace detail {
inline std::uint32_t load_qh(const std::uint8_t* qh) noexcept {
    return static_cast<std::uint32_t>(qh[0]) | (static_cast<std::uint32_t>(qh[1]) << 8) |
           (static_cast<std::uint32_t>(qh[2]) << 16) | (static_cast<std::uint32_t>(qh[3]) << 24);
}
}  // namespace detail

inline void dequantize(const block_q5_0* x, float* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i, y += 32) {
        const float d = fp16_to_float(x[i].d);
        const std::uint32_t qh = detail::load_qh(x[i].qh);
        for (int j = 0; j < 16; ++j) {
            const int h0 = static_cast<int>(((qh >> j) << 4) & 0x10);
            const int h1 = static_cast<int>((qh >> (j + 12)) & 0x10);
            y[j] = static_cast<float>(((x[i].qs[j] & 0x0F) | h0) - 16) * d;
            y[j + 16] = static_cast<float>(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

inline void dequantize(const block_q5_1* x, float* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i, y += 32) {
        const float d = fp16_to_float(x[i].d);
        const float m = fp16_to_float(x[i].m);
        const std::uint32_t qh = detail::load_qh(x[i].qh);
        for (int j = 0; j < 16; ++j) {
            const int h0 = static_cast<int>(((qh >> j) << 4) & 0x10);
            const int h1 = static_cast<int>((qh >> (j + 12)) & 0x10);
            y[j] = detail::mul(static_cast<float>((x[i].qs[j] & 0x0F) | h0), d) + m;
            y[j + 16] = detail::mul(static_cast<float>((x[i].qs[j] >> 4) | h1), d) + m;
        }
    }
}

inline void dequantize(const block_q8_0* x, float* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i, y += 32) {
        const float d = fp16_to_float(x[i].d);
        for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
    }
}

// ---- IQ4_NL: 4-bit indices into a non-linear table (ggml quantize_row_iq4_nl_impl) ----------

/// ggml `kvalues_iq4nl` (ggml-common.h; formats.md 5.2).
inline constexpr std::int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                  1,    13,   25,  38,  53,  69,  89,  113};

namespace detail {

/// ggml `best_index_int8`: index of the table value nearest to x (ties to the upper one).
inline int best_index_int8(const std::int8_t* val, float x) noexcept {
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav;
        else ml = mav;
    }
    return x - static_cast<float>(val[mu - 1]) < static_cast<float>(val[mu]) - x ? mu - 1 : mu;
}

/// One 32-element block, super_block_size = block_size = 32. ntry = 7 is what llama-quantize
/// runs (quantize_iq4_nl); ntry = -1 is quantize_row_iq4_nl_ref, which leaves the codes of an
/// all-zero block unwritten in ggml (uninitialised bytes; qforge writes the codes of index 0).
inline void iq4_nl_block(const float* x, block_iq4_nl& y, const float* qw, int ntry) noexcept {
    const std::int8_t* values = kvalues_iq4nl;
    float sigma2 = 0;
    for (int j = 0; j < 32; ++j) sigma2 += mul(x[j], x[j]);
    sigma2 *= 2.f / 32;
    float weight[32];
    std::uint8_t L[32] = {};
    y.d = float_to_fp16(0.f);
    if (qw) {
        for (int j = 0; j < 32; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + mul(x[j], x[j]));
    } else {
        for (int j = 0; j < 32; ++j) weight[j] = x[j] * x[j];
    }
    float amax = 0, max = 0;
    for (int j = 0; j < 32; ++j) {
        const float ax = std::fabs(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    float scale = 0;
    if (!(amax < group_max_eps)) {
        const auto v0 = static_cast<float>(values[0]);
        float d = ntry > 0 ? -max / v0 : max / v0;
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < 32; ++j) {
            const int l = best_index_int8(values, id * x[j]);
            L[j] = static_cast<std::uint8_t>(l);
            const auto q = static_cast<float>(values[l]);
            sumqx += mul(weight[j] * q, x[j]);
            sumq2 += mul(weight[j] * q, q);
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; ++itry) {
            id = static_cast<float>(itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < 32; ++j) {
                const int l = best_index_int8(values, id * x[j]);
                const auto q = static_cast<float>(values[l]);
                sumqx += mul(weight[j] * q, x[j]);
                sumq2 += mul(weight[j] * q, q);
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scale = d;
    }
    y.d = float_to_fp16(scale);
    if (ntry > 0) {
        const float id = scale != 0 ? 1 / scale : 0;
        for (int j = 0; j < 32; ++j) L[j] = static_cast<std::uint8_t>(best_index_int8(values, id * x[j]));
    }
    for (int j = 0; j < 16; ++j) y.qs[j] = static_cast<std::uint8_t>(L[j] | (L[j + 16] << 4));
}

}  // namespace detail

/// quantize_row_iq4_nl_ref (ntry = -1).
inline void quantize_ref(const float* x, block_iq4_nl* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i) detail::iq4_nl_block(x + 32 * i, y[i], nullptr, -1);
}

/// quantize_iq4_nl (ntry = 7), with or without importance weights: what llama-quantize writes.
inline void quantize_weighted_row(const float* x, block_iq4_nl* y, std::int64_t n_per_row, const float* qw) noexcept {
    for (std::int64_t i = 0; i < n_per_row / 32; ++i) detail::iq4_nl_block(x + 32 * i, y[i], qw ? qw + 32 * i : nullptr, 7);
}

inline void dequantize(const block_iq4_nl* x, float* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 32; ++i, y += 32) {
        const float d = fp16_to_float(x[i].d);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * static_cast<float>(kvalues_iq4nl[x[i].qs[j] & 0xF]);
            y[j + 16] = d * static_cast<float>(kvalues_iq4nl[x[i].qs[j] >> 4]);
        }
    }
}

}  // namespace qforge::gguf
