// The transposes of the word-level repack (convert/repack_transpose.hpp), as one kernel
// family (simd/kernels/transpose_kernels.ipp) instantiated for every ISA.
//
// Packed GPTQ and compressed-tensors weights are transposes of each other as 32-bit words, so
// a repack is one big word transpose (tens of MB, larger than the cache) plus small ones
// (zero points as words, scales as 16-bit patterns). The big one streams whole 64-byte
// destination lines with non-temporal stores where the ISA has them: no read-for-ownership
// of the destination, which would otherwise cost a third more memory traffic than a memcpy.
//
// A transpose moves bits and computes nothing, so every entry of every ISA writes the same
// bytes; the scalar table is the definition the tests compare the others against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "qforge/simd/family.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::simd {

/// Below this many bytes a word transpose writes through the cache, where the destination
/// stays for whoever reads it next; from here on it is streamed.
inline constexpr std::int64_t transpose_stream_min_bytes = std::int64_t{1} << 20;

struct transpose_kernels {
    static constexpr std::string_view family_name = "transpose";
    isa id = isa::scalar;

    /// dst[c * rows + r] = src[r * cols + c] for a rows x cols matrix of 32-bit words (any
    /// shape; src and dst 4-byte aligned, not overlapping): words_tiled below
    /// transpose_stream_min_bytes, words_streamed from there on.
    void (*words)(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) noexcept;

    /// The same through the cache: 16 x 16 tiles of 4 x 4 blocks, scalar edges.
    void (*words_tiled)(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) noexcept;

    /// The same, streamed where the shape allows it (rows % 16 == 0, rows >= 32, cols >= 8):
    /// 16 x 8 blocks written as whole, aligned destination lines (non-temporal stores where the
    /// ISA has them, and ordered before the return), the rest through the cache. Other shapes
    /// go through words_tiled.
    void (*words_streamed)(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) noexcept;

    /// dst[c * dst_stride + r] = pattern (r, c) of the rows x cols matrix of 16-bit patterns at
    /// src (a view into a mapped file: any byte alignment); dst_stride >= rows (rows for a
    /// whole transpose, more for a band of rows written into a wider matrix).
    void (*patterns16)(const std::byte* src, std::int64_t rows, std::int64_t cols, std::uint16_t* dst,
                       std::ptrdiff_t dst_stride) noexcept;
};

}  // namespace qforge::simd

#define QFORGE_FAMILY_IPP "qforge/simd/kernels/transpose_kernels.ipp"
#define QFORGE_FAMILY_TABLE transpose_kernels
#include "qforge/simd/detail/instantiate.ipp"
#undef QFORGE_FAMILY_TABLE
#undef QFORGE_FAMILY_IPP
