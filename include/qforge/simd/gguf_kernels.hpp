// The vector steps of the GGUF quantizers (layout/gguf/), as one kernel family.
//
// The kernels are written once (simd/kernels/gguf_kernels.ipp) over each ISA's primitives and
// compiled once per ISA. layout/gguf looks the table up once per quantize_rows call
// (kernels_of<gguf_kernels>) and calls it once per chunk of blocks, so no indirect call sits in
// an element loop. Each entry repeats a piece of ggml's reference quantizer (ggml-quants.c,
// llama.cpp c392e509, built with -ffp-contract=off) operation for operation, with every sum
// in ggml's order and every product rounded before it is added; the scalar instance is the
// definition and every other ISA gives its bytes. The parts of the quantizers that are plain
// scalar bookkeeping (most super-block scale steps, the codes a search keeps where a stored
// scale is 0) stay in layout/gguf.
//
// Codes are the float results of round-half-even (ggml's nearest_int: exact for |q| <= 2^22,
// which ggml asserts) clamped to the grid, so they never leave the float domain.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>

#include "qforge/simd/family.hpp"
#include "qforge/simd/tuning.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::simd {

struct gguf_kernels {
    static constexpr std::string_view family_name = "gguf";
    isa id = isa::scalar;

    /// ggml make_qkx2_quants(32, nmax, x, weights, L, &min, Laux, rmin, 0.1f, nstep, false)
    /// with weights[i] = av_x + |x[i]|, av_x = sqrt(sum x^2 / 32) (quantize_row_q4_K_ref's and
    /// q5_K's sub-block search), for each of the `count` consecutive 32-element sub-blocks of x
    /// (count a multiple of 8): scale[j] (the return value) and neg_min[j] (*the_min). Not the
    /// codes L: the quantizers keep a search's codes only where a sub-block's stored scale is
    /// 0, which is rare, and take those from the scalar port (layout/gguf/kquants.hpp).
    void (*qkx2_search)(const float* x, std::size_t count, int nmax, float rmin, int nstep, float* scale,
                        float* neg_min) noexcept;

    /// ggml make_qkx2_quants(16, 3, x, weights, L, &min, Laux, -0.5f, 0.1f, 15, true) with
    /// weights[i] = |x[i]| (quantize_row_q2_K_ref's sub-block search), for each of the `count`
    /// consecutive 16-element sub-blocks of x (count a multiple of 8): scale[j] and neg_min[j]
    /// (no codes, as qkx2_search).
    void (*q2k_search)(const float* x, std::size_t count, float* scale, float* neg_min) noexcept;

    /// ggml make_qx_quants(16, 32, x, L, 1, NULL) (quantize_row_q6_K_ref's sub-block search)
    /// for each of the `count` consecutive 16-element sub-blocks of x (count a multiple of 8):
    /// scale[j] (no codes, as qkx2_search).
    void (*qx32_search)(const float* x, std::size_t count, float* scale) noexcept;

    /// For each of the `count` consecutive sub-blocks j of `len` elements (len 16 or 32) whose
    /// d[j] != 0: codes[len j + i] = clamp(nearest_int((x + dm[j]) / d[j]), lo, hi) + offset
    /// (dm null: nearest_int(x / d[j])), which is 0..255. Sub-blocks with d[j] == 0 keep their
    /// codes, as ggml keeps the search's there.
    void (*requantize)(const float* x, std::size_t count, std::size_t len, const float* d, const float* dm,
                       float lo, float hi, float offset, std::uint8_t* codes) noexcept;

    /// ggml's Q4_K (five = false) or Q5_K packing of one super-block's 256 codes: per 64-code
    /// chunk c, qs[32 c + l] = low nibble of code 64 c + l | low nibble of code 64 c + 32 + l
    /// << 4; for Q5_K, bit 4 of those codes go to bits 2c and 2c + 1 of qh[l].
    void (*pack_q45k)(const std::uint8_t* codes, bool five, std::uint8_t* qh, std::uint8_t* qs) noexcept;

    /// ggml's Q6_K packing of one super-block's 256 codes (0..63): per 128-code half h and
    /// l < 32, with a, b, c, e the codes 128 h + l + 0, 32, 64, 96: ql[64 h + l] = a & 15 |
    /// (c & 15) << 4, ql[64 h + 32 + l] = b & 15 | (e & 15) << 4, qh[32 h + l] = a >> 4 |
    /// (b >> 4) << 2 | (c >> 4) << 4 | (e >> 4) << 6.
    void (*pack_q6k)(const std::uint8_t* codes, std::uint8_t* ql, std::uint8_t* qh) noexcept;

    /// quantize_row_q8_0_ref of nb 32-element blocks into nb ggml block_q8_0 (34 bytes: fp16 d,
    /// little-endian, then 32 int8 codes roundf(x / d)).
    void (*q8_0)(const float* x, std::int64_t nb, std::byte* blocks) noexcept;

    /// quantize_row_q4_0_ref of nb 32-element blocks into nb ggml block_q4_0 (18 bytes: fp16 d,
    /// then 16 bytes, element j in the low and j + 16 in the high nibble of byte j).
    void (*q4_0)(const float* x, std::int64_t nb, std::byte* blocks) noexcept;

    /// ggml make_q3_quants(16, 4, x, L, true) (quantize_row_q3_K_ref's sub-block search:
    /// symmetric grid -4..3, then up to five coordinate-descent tries on x^2-weighted error) for
    /// each of the `count` consecutive 16-element sub-blocks of x (count a multiple of 8):
    /// scale[j] (no codes, as qkx2_search).
    void (*q3_search)(const float* x, std::size_t count, float* scale) noexcept;

    /// ggml's Q3_K packing of one super-block's 256 codes (0..7): bit 2 of code 32 b + l is
    /// bit b of hmask[l]; the low two bits go to qs as Q2_K packs them (per 128-code half h
    /// and l < 32, qs[32 h + l] = codes 128 h + l, + 32, + 64, + 96 at bits 0, 2, 4, 6).
    void (*pack_q3k)(const std::uint8_t* codes, std::uint8_t* hmask, std::uint8_t* qs) noexcept;

    /// quantize_row_q4_1_ref into nb block_q4_1 (20 bytes: fp16 d, fp16 min, then q4_0's 16
    /// nibble bytes of MIN(15, (int8_t)((x - min) / d + 0.5f))).
    void (*q4_1)(const float* x, std::int64_t nb, std::byte* blocks) noexcept;

    /// quantize_row_q5_0_ref into nb block_q5_0 (22 bytes: fp16 d, 4 bytes qh whose bit j is
    /// bit 4 of code j, little-endian, then the low nibbles as q4_0 stores them).
    void (*q5_0)(const float* x, std::int64_t nb, std::byte* blocks) noexcept;

    /// quantize_row_q5_1_ref into nb block_q5_1 (24 bytes: fp16 d, fp16 min, then qh and qs as
    /// block_q5_0 holds them).
    void (*q5_1)(const float* x, std::int64_t nb, std::byte* blocks) noexcept;

    /// The first of the nb blocks of `elems` floats at x (elems a multiple of 16) in which some
    /// 16 consecutive values are all below 2^-60 in magnitude and not all zero, or nb where no
    /// block is. (Layout/gguf sends such blocks to the scalar port; a NaN may make a block
    /// count as such, which only sends it there too.)
    std::int64_t (*first_tiny_block)(const float* x, std::int64_t nb, std::int64_t elems) noexcept;

    /// For each of the `count` consecutive sub-blocks j of `len` codes (len 16 or 32):
    /// y[len j + i] = d[j] * (codes[len j + i] - offset) - m[j] (m null: no subtraction), the
    /// product rounded on its own, never fused into the subtraction: ggml's dequantize_row_q4_K
    /// and q5_K (offset 0, d and m the sub-block's d * sc and min * m) and q6_K (offset 32, m
    /// null), once layout/gguf has unpacked the codes to one byte each.
    void (*dequantize_codes)(const std::uint8_t* codes, std::size_t count, std::size_t len, const float* d,
                             const float* m, float offset, float* y) noexcept;

    /// The super-block step of quantize_row_q3_K_ref (nmax 32) and q6_K_ref (nmax 128) up to
    /// each type's own clamps, for `count` super-blocks of 16 sub-block scales each
    /// (scale[16 b + j], as the searches give them): amax[b] = the largest |scale| (NaN and 0
    /// never win; 0 where none is above 0), largest = the first scale at it, iscale = -nmax /
    /// largest, d16[b] = fp16(1 / iscale), dd[b] = the value of that fp16, and q[16 b + j] =
    /// nearest_int(iscale * scale[16 b + j]) (ggml's bit trick). Where amax[b] is 0 the others
    /// are unspecified.
    void (*super_block_scales)(const float* scale, std::size_t count, float nmax, std::uint16_t* d16, float* dd,
                               float* q, float* amax) noexcept;

    /// The super-block step of quantize_row_q2_K_ref for `count` super-blocks of 16 sub-block
    /// scales and mins each (scale[16 b + j], mins[16 b + j]: q2k_search's scale and -min):
    /// with max_s and max_m the largest scale and min of super-block b (ggml's `if (v > max)`
    /// from 0: NaN and values <= 0 never win), sc[16 b + j] = the byte ggml stores for sub-block
    /// j (nearest_int(15 / max_s * scale) in the low nibble, nearest_int(15 / max_m * min) shifted
    /// left four and or-ed in; each 0 where its max is 0), dm16[2 b], dm16[2 b + 1] = fp16(max_s /
    /// 15), fp16(max_m / 15), and d[16 b + j], dm[16 b + j] = the value of each fp16 times the
    /// byte's low and high nibble: the sub-block scales the codes are requantized against.
    void (*q2k_scales)(const float* scale, const float* mins, std::size_t count, std::uint8_t* sc, std::uint16_t* dm16,
                       float* d, float* dm) noexcept;
};

}  // namespace qforge::simd

#define QFORGE_FAMILY_IPP "qforge/simd/kernels/gguf_kernels.ipp"
#define QFORGE_FAMILY_TABLE gguf_kernels
#include "qforge/simd/detail/instantiate.ipp"
#undef QFORGE_FAMILY_TABLE
#undef QFORGE_FAMILY_IPP
