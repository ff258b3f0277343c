// GGUF MXFP4 (ggml type 39): blocks of 32 values, each one E8M0 exponent byte and 16 bytes of
// 4-bit indices into kvalues_mxfp4 = {0, 1, 2, 3, 4, 6, 8, 12, -0, -1, -2, -3, -4, -6, -8, -12}
// (twice the E2M1 values, so the block's d is half its E8M0 scale).
//
// Definitions (ggml-org/llama.cpp): `ggml/src/ggml-common.h` block_mxfp4 {uint8_t e; uint8_t
// qs[QK_MXFP4/2];} with QK_MXFP4 = 32 (17 bytes) and kvalues_mxfp4; `ggml/src/ggml-impl.h`
// GGML_E8M0_TO_FP32_HALF(e) = 2^(e - 128) (its e < 2 cases are the float32 subnormals 2^-128,
// 2^-127); `ggml/src/ggml-quants.c`:
//   quantize_row_mxfp4_ref: amax over the block; e = amax > 0 ? floorf(log2f(amax)) - 2 + 127
//     : 0; d = E8M0_TO_FP32_HALF(e); qs[j] = best(x[j]) | best(x[j + 16]) << 4 (LOW nibble =
//     element j, HIGH nibble = element j + 16), best = best_index_mxfp4: the first index of
//     the smallest |kvalues[i] * d - x| over i = 0..15 (so a tie goes to the lower index,
//     i.e. the smaller magnitude, and a negative value that rounds to zero gets index 0);
//   quantize_mxfp4 ignores quant_weights (GGML_UNUSED) and runs the _ref row by row;
//   dequantize_row_mxfp4: y = kvalues[q] * d.
// Where ggml's cast of e is undefined (amax below 2^-125 makes it negative) qforge writes 0.
// The errors are computed in float exactly as written there (kvalues * d is exact, the
// difference rounds once), so the bytes are ggml's; log2f is the C library's, as ggml's is.
//
// The nibble order differs from compressed-tensors / gpt-oss MXFP4 (low nibble = even column,
// layout/mxfp4.hpp); the codes and the exponent byte are the same numbers (e2m1 * 2^(e-127) =
// kvalues * 2^(e-128)), so one converts to the other by permuting nibbles:
// ct_mxfp4_row_to_gguf.
#pragma once

#include <cmath>
#include <cstdint>

#include "qforge/layout/gguf/blocks.hpp"

namespace qforge::gguf {

inline constexpr int qk_mxfp4 = 32;

struct block_mxfp4 {
    std::uint8_t e;
    std::uint8_t qs[16];
};
static_assert(sizeof(block_mxfp4) == 17, "block_mxfp4 size/padding");
static_assert(traits_of(ggml_type::mxfp4).block_bytes == sizeof(block_mxfp4));

inline constexpr std::int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/// GGML_E8M0_TO_FP32_HALF: 2^(e - 128), exact.
inline float e8m0_to_fp32_half(std::uint8_t e) noexcept { return std::ldexp(1.0f, static_cast<int>(e) - 128); }

namespace detail {

inline std::uint8_t mxfp4_best_index(float x, float d) noexcept {
    std::uint8_t best = 0;
    float best_err = std::fabs(static_cast<float>(kvalues_mxfp4[0]) * d - x);
    for (std::uint8_t i = 1; i < 16; ++i) {
        const float err = std::fabs(static_cast<float>(kvalues_mxfp4[i]) * d - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

inline void mxfp4_block(const float* x, block_mxfp4& y) noexcept {
    float amax = 0.0f;
    for (int j = 0; j < qk_mxfp4; ++j)
        if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
    int e = 0;
    if (amax > 0.0f) {
        e = static_cast<int>(std::floor(std::log2(amax))) - 2 + 127;
        if (e < 0) e = 0;  // undefined in ggml (a negative value cast to uint8_t)
    }
    y.e = static_cast<std::uint8_t>(e);
    const float d = e8m0_to_fp32_half(y.e);
    for (int j = 0; j < qk_mxfp4 / 2; ++j)
        y.qs[j] = static_cast<std::uint8_t>(mxfp4_best_index(x[j], d) | (mxfp4_best_index(x[j + 16], d) << 4));
}

}  // namespace detail

/// quantize_row_mxfp4_ref over k elements (a multiple of 32).
inline void quantize_ref(const float* x, block_mxfp4* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / qk_mxfp4; ++i) detail::mxfp4_block(x + qk_mxfp4 * i, y[i]);
}

/// quantize_mxfp4 with quant_weights: ggml ignores them.
inline void quantize_weighted_row(const float* x, block_mxfp4* y, std::int64_t n_per_row, const float*) noexcept {
    quantize_ref(x, y, n_per_row);
}

/// dequantize_row_mxfp4.
inline void dequantize(const block_mxfp4* x, float* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / qk_mxfp4; ++i) {
        const float d = e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < qk_mxfp4 / 2; ++j) {
            y[i * qk_mxfp4 + j] = static_cast<float>(kvalues_mxfp4[x[i].qs[j] & 0xF]) * d;
            y[i * qk_mxfp4 + j + 16] = static_cast<float>(kvalues_mxfp4[x[i].qs[j] >> 4]) * d;
        }
    }
}

/// One row of compressed-tensors / gpt-oss MXFP4 (`packed` K/2 bytes, low nibble = even
/// column; `scales` K/32 E8M0 bytes) as GGUF MXFP4 blocks: the same codes and exponents, the
/// nibbles permuted. Lossless (field-2026.md 1.4 (c): llama.cpp converts gpt-oss this way,
/// `transform_nibble_layout`).
inline void ct_mxfp4_row_to_gguf(const std::uint8_t* packed, const std::uint8_t* scales, std::int64_t k,
                                 block_mxfp4* y) noexcept {
    for (std::int64_t b = 0; b < k / qk_mxfp4; ++b) {
        const std::uint8_t* p = packed + b * (qk_mxfp4 / 2);
        auto code = [&](int c) { return static_cast<std::uint8_t>(c & 1 ? p[c / 2] >> 4 : p[c / 2] & 0xF); };
        y[b].e = scales[b];
        for (int j = 0; j < 16; ++j) y[b].qs[j] = static_cast<std::uint8_t>(code(j) | (code(j + 16) << 4));
    }
}

}  // namespace qforge::gguf
