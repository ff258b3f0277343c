// The bit-packing kernels (simd/kernels/pack_kernels.ipp), as one table of function pointers,
// instantiated for every ISA.
//
// layout/detail/pack_bits.hpp and pack_band.hpp hold the portable stream packers and call
// these for the hot, vectorisable parts: the OR scan that validates codes, GPTQ's 4-bit
// transposed rows and AWQ's 4-bit gathers. The caller picks the table with
// kernels_of<pack_kernels>(isa), so QFORGE_FORCE_ISA=scalar runs the scalar instance.
//
// Every entry gives the same words on every ISA; the scalar instance is the definition. A
// code's bits above 4 are masked off (never spill into a neighbour's field). Kernels never
// allocate and never throw; callers validate shapes first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "qforge/simd/family.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::simd {

struct pack_kernels {
    static constexpr std::string_view family_name = "pack";
    isa id = isa::scalar;

    /// The OR of the bytes c[0..n) (0 for n == 0).
    std::uint8_t (*or_bytes)(const std::uint8_t* c, std::size_t n) noexcept;

    /// Dense LSB-first 4-bit streams of `rows` rows of codes (row r at codes + r * cols, cols
    /// codes; the last word zero-padded), written transposed: word w of row r at
    /// dst[w * dst_stride + r] (GPTQ qweight; formats.md 2.2).
    void (*pack4_rows)(const std::uint8_t* codes, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                       std::ptrdiff_t dst_stride) noexcept;

    /// AWQ-ordered 4-bit words (nibble i of a word = column 8c + {0,2,4,6,1,3,5,7}[i]; AutoAWQ
    /// `gemm.py` order_map) of a source [cols][rows] row-major read transposed: output
    /// dst [rows][cols / 8], word (r, c) from src[(8c + j) * rows + r]. rows % 8 == 0, cols % 8
    /// == 0. `tmp` holds 8 * rows words of scratch (its contents on entry do not matter).
    void (*awq4_transposed)(const std::uint8_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                            std::uint32_t* tmp) noexcept;

    /// AWQ-ordered words of codes [rows][cols] (rows % 8 == 0) packed along the rows: word w of
    /// column c (from src[(8w + j) * cols + c]) at dst[c * dst_stride + w] (a band of rows
    /// written into the whole weight's [cols][n / 8] tensor).
    void (*awq4_band)(const std::uint8_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                      std::ptrdiff_t dst_stride) noexcept;

    /// The first `n` words of each of `rows` rows of a word tile (row w at tile + w *
    /// tile_stride) copied to dst + w * dst_stride: a transposed packer's tile into the whole
    /// weight. Each destination row is asked for a few rows before it is written, since the
    /// rows lie a page or more apart, where the hardware prefetchers do not follow.
    void (*store_tile)(const std::uint32_t* tile, std::int64_t rows, std::ptrdiff_t tile_stride, std::int64_t n,
                       std::uint32_t* dst, std::ptrdiff_t dst_stride) noexcept;
};

}  // namespace qforge::simd

#define QFORGE_FAMILY_IPP "qforge/simd/kernels/pack_kernels.ipp"
#define QFORGE_FAMILY_TABLE pack_kernels
#include "qforge/simd/detail/instantiate.ipp"
#undef QFORGE_FAMILY_TABLE
#undef QFORGE_FAMILY_IPP
