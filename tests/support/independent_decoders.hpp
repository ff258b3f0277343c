// Decoders written from each format's definition, sharing no code with the library's decode
// paths (no qforge/core/minifloat.hpp, no layout decode): the decode-through-a-real-file tests
// check what the converter wrote against them. Each reads the tensors a loader reads and
// returns float32 values [N * K], row-major.
//
// Definitions:
//   E4M3 (OCP FP8): s.eeee.mmm, bias 7, e = 0 subnormal (m/8 * 2^-6), 0x7F/0xFF NaN.
//   E2M1 (OCP MX): s.ee.m, bias 1: e = 0 -> m * 0.5, else 2^(e-1) * (1 + m/2); values
//     0, 0.5, 1, 1.5, 2, 3, 4, 6.
//   E8M0: 2^(e - 127), 0xFF NaN.
//   compressed-tensors float-quantized (FP8_DYNAMIC / FP8_BLOCK): weight F8_E4M3 [N, K],
//     weight_scale [N, 1] (channel) or [ceil(N/B), ceil(K/B)] (block), w = e4m3 * scale
//     (compressed_tensors `forward.py _dequantize`: x_q * scale).
//   native fp8 (DeepSeek / Qwen -FP8): weight F8_E4M3, weight_scale_inv F32 [ceil(N/128),
//     ceil(K/128)], w = e4m3 * scale_inv (DeepSeek-V3 `inference/kernel.py weight_dequant`).
//   compressed-tensors int-quantized W8A8: weight I8 [N, K], weight_scale [N, 1], w = q * scale.
//   compressed-tensors nvfp4-pack-quantized: weight_packed U8 [N, K/2] (low nibble = even
//     column), weight_scale F8_E4M3 [N, K/16], weight_global_scale F32 [1]:
//     w = e2m1 * (e4m3(scale) / global) (`NVFP4PackedCompressor.decompress`).
//   compressed-tensors mxfp4-pack-quantized: weight_packed as NVFP4, weight_scale U8 [N, K/32]
//     (E8M0), w = e2m1 * 2^(e - 127).
//   GGUF MXFP4 (ggml type 39, ggml-common.h block_mxfp4 {uint8_t e; uint8_t qs[16];}): block j
//     of 32 values, element i < 16 the low nibble of qs[i], element i + 16 its high nibble,
//     w = kvalues_mxfp4[q] * 2^(e - 128) with kvalues_mxfp4 = 2 * e2m1 (ggml-quants.c
//     dequantize_row_mxfp4), i.e. e2m1(q) * 2^(e - 127).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "qforge/core/tensor_view.hpp"

namespace qforge::testing::independent {

inline float e4m3(std::uint8_t c) {
    const int s = c >> 7, e = (c >> 3) & 0xF, m = c & 7;
    if (e == 15 && m == 7) return NAN;
    const float mag = e == 0 ? std::ldexp(static_cast<float>(m) / 8.0f, -6) : std::ldexp(1.0f + static_cast<float>(m) / 8.0f, e - 7);
    return s ? -mag : mag;
}

inline float e2m1(std::uint8_t c) {
    const int s = (c >> 3) & 1, e = (c >> 1) & 3, m = c & 1;
    const float mag = e == 0 ? 0.5f * static_cast<float>(m) : std::ldexp(1.0f + 0.5f * static_cast<float>(m), e - 1);
    return s ? -mag : mag;
}

inline float e8m0(std::uint8_t e) { return e == 0xFF ? NAN : std::ldexp(1.0f, static_cast<int>(e) - 127); }

inline std::uint8_t byte_at(const tensor_view& v, std::size_t i) { return static_cast<std::uint8_t>(v.bytes[i]); }

/// Element i of a scale tensor stored as F32, BF16 or F16 (by their bit definitions).
inline float scale_at(const tensor_view& v, std::size_t i) {
    if (v.type == dtype::F32) {
        float f;
        std::memcpy(&f, v.bytes.data() + 4 * i, 4);
        return f;
    }
    std::uint16_t h;
    std::memcpy(&h, v.bytes.data() + 2 * i, 2);
    if (v.type == dtype::BF16) {
        const std::uint32_t b = static_cast<std::uint32_t>(h) << 16;
        float f;
        std::memcpy(&f, &b, 4);
        return f;
    }
    if (v.type != dtype::F16) throw std::runtime_error(v.name + ": scale dtype is not F32/BF16/F16");
    const int s = h >> 15, e = (h >> 10) & 0x1F, m = h & 0x3FF;
    const float mag = e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(1.0f + static_cast<float>(m) / 1024.0f, e - 15);
    return s ? -mag : mag;
}

/// FP8 weight [N, K] times a scale grid of [ceil(N/br), ceil(K/bc)] blocks (channel: br = 1,
/// bc = K). compressed-tensors float-quantized and native fp8 alike.
inline std::vector<float> fp8_blocks(const tensor_view& w, const tensor_view& scale, std::int64_t br, std::int64_t bc) {
    const std::int64_t n = w.shape.at(0), k = w.shape.at(1), sc = (k + bc - 1) / bc;
    std::vector<float> out(static_cast<std::size_t>(n * k));
    for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t c = 0; c < k; ++c)
            out[static_cast<std::size_t>(r * k + c)] =
                e4m3(byte_at(w, static_cast<std::size_t>(r * k + c))) * scale_at(scale, static_cast<std::size_t>((r / br) * sc + c / bc));
    return out;
}

/// compressed-tensors int-quantized W8A8: int8 codes times a per-row scale.
inline std::vector<float> int8_channel(const tensor_view& w, const tensor_view& scale) {
    const std::int64_t n = w.shape.at(0), k = w.shape.at(1);
    std::vector<float> out(static_cast<std::size_t>(n * k));
    for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t c = 0; c < k; ++c)
            out[static_cast<std::size_t>(r * k + c)] =
                static_cast<float>(static_cast<std::int8_t>(byte_at(w, static_cast<std::size_t>(r * k + c)))) *
                scale_at(scale, static_cast<std::size_t>(r));
    return out;
}

/// Column c's E2M1 code in a packed row (low nibble = even column).
inline std::uint8_t nibble(const tensor_view& packed, std::int64_t row, std::int64_t k, std::int64_t c) {
    const std::uint8_t b = byte_at(packed, static_cast<std::size_t>(row * (k / 2) + c / 2));
    return c % 2 ? static_cast<std::uint8_t>(b >> 4) : static_cast<std::uint8_t>(b & 0xF);
}

inline std::vector<float> nvfp4(const tensor_view& packed, const tensor_view& scale, const tensor_view& global) {
    const std::int64_t n = packed.shape.at(0), k = packed.shape.at(1) * 2;
    const float g = scale_at(global, 0);
    std::vector<float> out(static_cast<std::size_t>(n * k));
    for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t c = 0; c < k; ++c)
            out[static_cast<std::size_t>(r * k + c)] =
                e2m1(nibble(packed, r, k, c)) * (e4m3(byte_at(scale, static_cast<std::size_t>(r * (k / 16) + c / 16))) / g);
    return out;
}

inline std::vector<float> mxfp4_ct(const tensor_view& packed, const tensor_view& scale) {
    const std::int64_t n = packed.shape.at(0), k = packed.shape.at(1) * 2;
    std::vector<float> out(static_cast<std::size_t>(n * k));
    for (std::int64_t r = 0; r < n; ++r)
        for (std::int64_t c = 0; c < k; ++c)
            out[static_cast<std::size_t>(r * k + c)] =
                e2m1(nibble(packed, r, k, c)) * e8m0(byte_at(scale, static_cast<std::size_t>(r * (k / 32) + c / 32)));
    return out;
}

/// GGUF MXFP4 blocks (17 bytes per 32 values), `count` values.
inline std::vector<float> mxfp4_gguf(const std::byte* blocks, std::size_t count) {
    std::vector<float> out(count);
    for (std::size_t b = 0; b < count / 32; ++b) {
        const auto* blk = reinterpret_cast<const std::uint8_t*>(blocks) + 17 * b;
        const float d = e8m0(blk[0]);
        for (int i = 0; i < 16; ++i) {
            out[32 * b + static_cast<std::size_t>(i)] = e2m1(blk[1 + i] & 0xF) * d;
            out[32 * b + 16 + static_cast<std::size_t>(i)] = e2m1(blk[1 + i] >> 4) * d;
        }
    }
    return out;
}

}  // namespace qforge::testing::independent
