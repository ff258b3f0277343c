// Bit packing of unsigned b-bit codes (b = 2..8) into 32-bit words: the one place every
// layout's words are made and read back.
//
// Two word formats exist across the formats qforge writes:
//   dense  - one LSB-first bitstream: element i sits at bit i*b of the stream, an element
//            that straddles a word keeps its low bits in word k and its high bits in word
//            k+1; ceil(count*b/32) words. GPTQ 2/3/4/8-bit (AutoGPTQ `QuantLinear.pack`,
//            3-bit pattern 10|1|10|1|10 is exactly this stream), compressed-tensors >= 0.18
//            (`pack_quantized/helpers.py pack_to_int32`) and vLLM `pack_quantized_values_into_int32`.
//   padded - floor(32/b) fields per word at bits b*j, the top 32 - b*floor(32/b) bits zero;
//            ceil(count/floor(32/b)) words: compressed-tensors <= 0.17 `pack_to_int32`.
// For b in {2, 4, 8} the two are the same words.
//
// Every kernel walks one run of `count` codes, reading with a source stride and writing with a
// destination stride (in elements), so one function packs along K (stride 1, e.g. a row of
// codes[N][K]) or along N (stride K) and writes row-major or transposed outputs. Kernels are
// noexcept (the transposed ones only allocate a small buffer) and never branch on bad input: callers validate ranges first; bits above b in a
// code are masked off so an out-of-range code can never spill into a neighbour's field.
// See formats.md 2.2 and 4.3.
//
// The vector parts (the OR scan, GPTQ's 4-bit transposed rows, AWQ's transposed gather) are
// the kernel family simd/pack_kernels.hpp; the functions here that use it take the ISA to run
// (`simd::isa`, default simd::active_isa(), so QFORGE_FORCE_ISA=scalar runs the scalar
// kernels) or, as before, `bool simd_ok` (false = the scalar kernels).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "qforge/simd/family.hpp"
#include "qforge/simd/pack_kernels.hpp"
#include "qforge/simd/transpose_kernels.hpp"

namespace qforge::detail {

static_assert(std::endian::native == std::endian::little,
              "qforge: the packing kernels assume a little-endian host (all formats are LE)");

/// Words a dense stream of `count` b-bit codes occupies.
constexpr std::int64_t dense_words(std::int64_t count, int bits) noexcept {
    return (count * bits + 31) / 32;
}

/// Words the padded (floor(32/b) per word) format of `count` codes occupies.
constexpr std::int64_t padded_words(std::int64_t count, int bits) noexcept {
    const std::int64_t per_word = 32 / bits;
    return (count + per_word - 1) / per_word;
}

inline std::uint64_t load_u64(const std::uint8_t* p) noexcept {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// swar4: eight codes in the bytes of x (byte j = code j) -> one word, code j at bits 4j.
inline std::uint32_t swar_pack4(std::uint64_t x) noexcept {
    x &= 0x0F0F0F0F0F0F0F0FULL;
    x = (x | (x >> 4)) & 0x00FF00FF00FF00FFULL;
    x = (x | (x >> 8)) & 0x0000FFFF0000FFFFULL;
    return static_cast<std::uint32_t>(x | (x >> 16));
}

// swar2: eight codes in the bytes of x -> sixteen bits, code j at bits 2j.
inline std::uint32_t swar_pack2(std::uint64_t x) noexcept {
    x &= 0x0303030303030303ULL;
    x = (x | (x >> 6)) & 0x000F000F000F000FULL;
    x = (x | (x >> 12)) & 0x000000FF000000FFULL;
    return static_cast<std::uint32_t>((x | (x >> 24)) & 0xFFFFU);
}

// pack_dense_contig: stride-1 source, word-at-a-time fast paths for b = 2, 4, 8.
inline void pack_dense_fast(const std::uint8_t* src, std::int64_t count, int bits,
                            std::uint32_t* dst, std::ptrdiff_t dst_stride,
                            std::int64_t& done, std::int64_t& words) noexcept {
    done = 0;
    words = 0;
    if (bits == 4) {
        for (; done + 8 <= count; done += 8, ++words)
            dst[words * dst_stride] = swar_pack4(load_u64(src + done));
    } else if (bits == 2) {
        for (; done + 16 <= count; done += 16, ++words)
            dst[words * dst_stride] =
                swar_pack2(load_u64(src + done)) | (swar_pack2(load_u64(src + done + 8)) << 16);
    } else if (bits == 8) {
        for (; done + 4 <= count; done += 4, ++words) {
            std::uint32_t w;
            std::memcpy(&w, src + done, sizeof w);
            dst[words * dst_stride] = w;
        }
    }
}

/// Packs `count` codes (src[i * src_stride]) into dense_words(count, bits) words written at
/// dst[w * dst_stride]. The last word is zero-padded.
inline void pack_dense(const std::uint8_t* src, std::ptrdiff_t src_stride, std::int64_t count,
                       int bits, std::uint32_t* dst, std::ptrdiff_t dst_stride) noexcept {
    std::int64_t i = 0;
    std::int64_t w = 0;
    if (src_stride == 1) pack_dense_fast(src, count, bits, dst, dst_stride, i, w);
    // General path: a 64-bit accumulator holds the stream's not-yet-written low bits.
    const std::uint64_t mask = (1u << bits) - 1u;
    std::uint64_t acc = 0;
    int fill = 0;
    for (; i < count; ++i) {
        acc |= (src[i * src_stride] & mask) << fill;
        fill += bits;
        if (fill >= 32) {
            dst[w++ * dst_stride] = static_cast<std::uint32_t>(acc);
            acc >>= 32;
            fill -= 32;
        }
    }
    if (fill > 0) dst[w * dst_stride] = static_cast<std::uint32_t>(acc);
}

// swar_unpack4: one word -> eight codes in the bytes of the result (code j = byte j).
inline std::uint64_t swar_unpack4(std::uint32_t w) noexcept {
    std::uint64_t x = w;
    x = (x | (x << 16)) & 0x0000FFFF0000FFFFULL;
    x = (x | (x << 8)) & 0x00FF00FF00FF00FFULL;
    return (x | (x << 4)) & 0x0F0F0F0F0F0F0F0FULL;
}

// swar_unpack2: sixteen bits -> eight 2-bit codes in bytes.
inline std::uint64_t swar_unpack2(std::uint32_t h) noexcept {
    std::uint64_t x = h & 0xFFFFU;
    x = (x | (x << 24)) & 0x000000FF000000FFULL;
    x = (x | (x << 12)) & 0x000F000F000F000FULL;
    return (x | (x << 6)) & 0x0303030303030303ULL;
}

/// Reverse of pack_dense: reads dense_words(count, bits) words, writes `count` codes.
inline void unpack_dense(const std::uint32_t* src, std::ptrdiff_t src_stride, std::int64_t count,
                         int bits, std::uint8_t* dst, std::ptrdiff_t dst_stride) noexcept {
    const std::uint64_t mask = (1u << bits) - 1u;
    std::uint64_t acc = 0;
    int fill = 0;
    std::int64_t w = 0;
    std::int64_t i = 0;
    if (dst_stride == 1) {  // word-at-a-time fast paths; the general loop finishes the tail
        if (bits == 4) {
            for (; i + 8 <= count; i += 8, ++w) {
                const std::uint64_t x = swar_unpack4(src[w * src_stride]);
                std::memcpy(dst + i, &x, sizeof x);
            }
        } else if (bits == 2) {
            for (; i + 16 <= count; i += 16, ++w) {
                const std::uint32_t word = src[w * src_stride];
                const std::uint64_t lo = swar_unpack2(word), hi = swar_unpack2(word >> 16);
                std::memcpy(dst + i, &lo, sizeof lo);
                std::memcpy(dst + i + 8, &hi, sizeof hi);
            }
        } else if (bits == 8) {
            for (; i + 4 <= count; i += 4, ++w) {
                const std::uint32_t word = src[w * src_stride];
                std::memcpy(dst + i, &word, sizeof word);
            }
        }
    }
    for (; i < count; ++i) {
        if (fill < bits) {
            acc |= static_cast<std::uint64_t>(src[w++ * src_stride]) << fill;
            fill += 32;
        }
        dst[i * dst_stride] = static_cast<std::uint8_t>(acc & mask);
        acc >>= bits;
        fill -= bits;
    }
}

/// Packs `count` codes as floor(32/b) fields per word (top bits zero), padded_words() words.
inline void pack_padded(const std::uint8_t* src, std::ptrdiff_t src_stride, std::int64_t count,
                        int bits, std::uint32_t* dst, std::ptrdiff_t dst_stride) noexcept {
    if (32 % bits == 0) return pack_dense(src, src_stride, count, bits, dst, dst_stride);
    const int per_word = 32 / bits;
    const std::uint32_t mask = (1u << bits) - 1u;
    std::int64_t w = 0;
    for (std::int64_t i = 0; i < count; i += per_word, ++w) {
        std::uint32_t word = 0;
        const std::int64_t n = count - i < per_word ? count - i : per_word;
        for (std::int64_t j = 0; j < n; ++j)
            word |= (src[(i + j) * src_stride] & mask) << (bits * j);
        dst[w * dst_stride] = word;
    }
}

/// Reverse of pack_padded.
inline void unpack_padded(const std::uint32_t* src, std::ptrdiff_t src_stride, std::int64_t count,
                          int bits, std::uint8_t* dst, std::ptrdiff_t dst_stride) noexcept {
    if (32 % bits == 0) return unpack_dense(src, src_stride, count, bits, dst, dst_stride);
    const int per_word = 32 / bits;
    const std::uint32_t mask = (1u << bits) - 1u;
    for (std::int64_t i = 0; i < count; ++i) {
        const std::uint32_t word = src[(i / per_word) * src_stride];
        dst[i * dst_stride] = static_cast<std::uint8_t>((word >> (bits * (i % per_word))) & mask);
    }
}

/// True when some word of a padded stream has a bit set outside its fields (a reader checks
/// this: such a word was not written by the padded packer).
inline bool padded_has_stray_bits(const std::uint32_t* src, std::ptrdiff_t src_stride,
                                  std::int64_t count, int bits) noexcept {
    const int per_word = 32 / bits;
    const std::int64_t words = padded_words(count, bits);
    for (std::int64_t w = 0; w < words; ++w) {
        const std::int64_t fields =
            count - w * per_word < per_word ? count - w * per_word : per_word;
        const int used = static_cast<int>(fields) * bits;
        if (used < 32 && (src[w * src_stride] >> used) != 0) return true;
    }
    return false;
}

/// True when the last word of a dense stream has bits set beyond the stream's end.
inline bool dense_has_stray_bits(const std::uint32_t* src, std::ptrdiff_t src_stride,
                                 std::int64_t count, int bits) noexcept {
    const std::int64_t words = dense_words(count, bits);
    const int tail = static_cast<int>((count * bits) % 32);
    return words > 0 && tail != 0 && (src[(words - 1) * src_stride] >> tail) != 0;
}

// Transposed packers (GPTQ qweight [W][N] from codes [N][K]). Rows are read whole and in
// order, sixty-four at a time (sequential reads keep the prefetchers streaming), their words
// go to a small [W][64] buffer, and each output row gets four whole 64-byte lines per block.
// Writing each word straight down its [W][N] column instead stores to addresses N*4 bytes
// apart and ran 10x slower than a memcpy; gathering columns across many rows was slower
// still. Sixteen rows (one line per output row, a page visit per 64 bytes) made the GPTQ
// 4-bit pack 1.3-1.7x slower and the RTN quantize_packed path 12% slower (bench_pack,
// bench_quantize, 2026-12-04, Zen 4); 128 rows no longer fit the buffer in L1/L2 and were
// slower than either.
inline constexpr std::int64_t tile_rows = 64;

/// The OR of the bytes c[0..n): whether any code has a bit above b set, in one read of the
/// codes (a weight's worth of codes is validated before every pack).
inline std::uint8_t or_bytes(const std::uint8_t* c, std::size_t n, simd::isa isa = simd::active_isa()) {
    return simd::kernels_of<simd::pack_kernels>(isa).or_bytes(c, n);
}

/// A [rows][cols] matrix of 16-bit scale patterns into dst[c * dst_stride + r] through the
/// transpose kernels of `isa`: qforge keeps scales [n][groups], GPTQ and AWQ store them
/// [groups][n]; whole weights (dst_stride = rows) and bands of rows (dst_stride = n) go
/// through here, packing and unpacking.
inline void transpose_scales_into(const std::uint16_t* src, std::int64_t rows, std::int64_t cols, std::uint16_t* dst,
                                  std::int64_t dst_stride, simd::isa isa) noexcept {
    simd::kernels_of<simd::transpose_kernels>(isa).patterns16(reinterpret_cast<const std::byte*>(src), rows, cols, dst,
                                                             dst_stride);
}
inline std::vector<std::uint16_t> transpose_scales(std::span<const std::uint16_t> src, std::int64_t rows,
                                                   std::int64_t cols, simd::isa isa) {
    std::vector<std::uint16_t> out(static_cast<std::size_t>(rows * cols));
    transpose_scales_into(src.data(), rows, cols, out.data(), rows, isa);
    return out;
}

/// GPTQ qweight: codes [rows][cols] (row-major) -> words [dense_words(cols)][rows], each row a
/// dense stream along cols written down its column. cols*bits must fill whole words.
/// Allocates a dense_words(cols) x tile_rows word buffer (may throw std::bad_alloc). 4-bit rows
/// are packed, and every width's tiles stored, by the pack kernels of `isa`. `dst_stride`
/// (default `rows`) is the distance between word rows of dst, so a band of rows can go into a
/// wider matrix.
inline void pack_dense_transposed(const std::uint8_t* codes, std::int64_t rows, std::int64_t cols, int bits,
                                  std::uint32_t* dst, simd::isa isa, std::int64_t dst_stride = -1) {
    if (dst_stride < 0) dst_stride = rows;
    const simd::pack_kernels& k = simd::kernels_of<simd::pack_kernels>(isa);
    const std::int64_t words = dense_words(cols, bits);
    // Uninitialised: every word of it a tile reads back is packed first. Zero-filling it
    // cost as much as writing the output (one band of a wide layer calls this once).
    const std::unique_ptr<std::uint32_t[]> buffer(new std::uint32_t[static_cast<std::size_t>(words * tile_rows)]);
    std::uint32_t* const tmp = buffer.get();
    for (std::int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
        const std::int64_t nr = rows - r0 < tile_rows ? rows - r0 : tile_rows;
        if (bits == 4) {
            k.pack4_rows(codes + r0 * cols, nr, cols, tmp, tile_rows);
        } else {
            for (std::int64_t r = 0; r < nr; ++r) pack_dense(codes + (r0 + r) * cols, 1, cols, bits, tmp + r, tile_rows);
        }
        k.store_tile(tmp, words, tile_rows, nr, dst + r0, dst_stride);
    }
}

/// pack_dense_transposed with `simd_ok = false` forcing the scalar kernels, true the active ISA's.
inline void pack_dense_transposed(const std::uint8_t* codes, std::int64_t rows, std::int64_t cols, int bits,
                                  std::uint32_t* dst, bool simd_ok = true, std::int64_t dst_stride = -1) {
    pack_dense_transposed(codes, rows, cols, bits, dst, simd_ok ? simd::active_isa() : simd::isa::scalar, dst_stride);
}

/// Reverse of pack_dense_transposed: words [dense_words(cols)][rows] -> codes [rows][cols].
inline void unpack_dense_transposed(const std::uint32_t* src, std::int64_t rows, std::int64_t cols,
                                    int bits, std::uint8_t* codes) {
    const std::int64_t words = dense_words(cols, bits);
    // Uninitialised, as in pack_dense_transposed: each tile copies in what it reads.
    const std::unique_ptr<std::uint32_t[]> buffer(new std::uint32_t[static_cast<std::size_t>(words * tile_rows)]);
    std::uint32_t* const tmp = buffer.get();
    for (std::int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
        const std::int64_t nr = rows - r0 < tile_rows ? rows - r0 : tile_rows;
        for (std::int64_t w = 0; w < words; ++w)
            std::memcpy(tmp + w * tile_rows, src + w * rows + r0,
                        static_cast<std::size_t>(nr) * sizeof(std::uint32_t));
        for (std::int64_t r = 0; r < nr; ++r)
            unpack_dense(tmp + r, tile_rows, cols, bits, codes + (r0 + r) * cols, 1);
    }
}

// AWQ GEMM nibble order (AutoAWQ `awq/modules/linear/gemm.py` order_map, vLLM
// `quant_utils.awq_pack`): nibble i of a word holds column 8c + awq_order[i].
inline constexpr int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};
// ... and column 8c + j lives in nibble awq_slot[j].
inline constexpr int awq_slot[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// awq_word: eight codes of consecutive columns in bytes of x -> one AWQ-ordered word
// (even columns in the low 16 bits, odd columns in the high 16 bits).
inline std::uint32_t awq_word_from_bytes(std::uint64_t x) noexcept {
    auto four = [](std::uint64_t v) {  // bytes 0,2,4,6 of v (low nibbles) -> 16 bits
        v &= 0x000F000F000F000FULL;
        v = (v | (v >> 12)) & 0x000000FF000000FFULL;
        return static_cast<std::uint32_t>((v | (v >> 24)) & 0xFFFFU);
    };
    return four(x) | (four(x >> 8) << 16);
}

/// Packs 4-bit codes [rows][cols] (row-major, cols % 8 == 0) along the columns in AWQ order:
/// dst [rows][cols/8]. `src_col_stride` / `src_row_stride` let the caller pack a transposed
/// source (AWQ packs along N while qforge holds codes [N][K]); that case, with rows % 8 == 0,
/// goes through the pack kernels of `isa`.
inline void pack_awq4(const std::uint8_t* src, std::ptrdiff_t src_row_stride, std::ptrdiff_t src_col_stride,
                      std::int64_t rows, std::int64_t cols, std::uint32_t* dst, simd::isa isa) {
    const std::int64_t words = cols / 8;
    if (src_col_stride == 1) {
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t c = 0; c < words; ++c)
                dst[r * words + c] = awq_word_from_bytes(load_u64(src + r * src_row_stride + 8 * c));
        return;
    }
    if (src_row_stride == 1 && src_col_stride == rows && rows % 8 == 0) {
        const auto& k = simd::kernels_of<simd::pack_kernels>(isa);
        // Eight output columns' worth of source rows at a time (see the kernel).
        const std::unique_ptr<std::uint32_t[]> tmp(new std::uint32_t[static_cast<std::size_t>(8 * rows)]);
        k.awq4_transposed(src, rows, cols, dst, tmp.get());
        return;
    }
    // Any other strides: one nibble at a time, 64 output rows a tile so the eight source rows'
    // cache lines stay hot across them.
    constexpr std::int64_t tile = 64;
    for (std::int64_t r0 = 0; r0 < rows; r0 += tile) {
        const std::int64_t r1 = r0 + tile < rows ? r0 + tile : rows;
        for (std::int64_t c = 0; c < words; ++c) {
            const std::uint8_t* base = src + 8 * c * src_col_stride;
            for (std::int64_t r = r0; r < r1; ++r) {
                const std::uint8_t* p = base + r * src_row_stride;
                std::uint32_t word = 0;
                for (int i = 0; i < 8; ++i)
                    word |= static_cast<std::uint32_t>(p[awq_order[i] * src_col_stride] & 0xF)
                            << (4 * i);
                dst[r * words + c] = word;
            }
        }
    }
}

/// pack_awq4 with `simd_ok = false` forcing the scalar kernels, true the active ISA's.
inline void pack_awq4(const std::uint8_t* src, std::ptrdiff_t src_row_stride, std::ptrdiff_t src_col_stride,
                      std::int64_t rows, std::int64_t cols, std::uint32_t* dst, bool simd_ok = true) {
    pack_awq4(src, src_row_stride, src_col_stride, rows, cols, dst, simd_ok ? simd::active_isa() : simd::isa::scalar);
}

/// Reverse of pack_awq4: dst[r * dst_row_stride + col * dst_col_stride] = code. Rows go in
/// tiles of 64: read back transposed (dst_row_stride 1), a row at a time wrote one byte into
/// each of `cols` destination lines, and the lines left the cache before the next row came
/// (the AWQ reader spent two thirds of an AWQ conversion here); within a tile each
/// destination line gets 64 consecutive bytes while the tile's source lines stay in L1.
inline void unpack_awq4(const std::uint32_t* src, std::int64_t rows, std::int64_t cols,
                        std::uint8_t* dst, std::ptrdiff_t dst_row_stride,
                        std::ptrdiff_t dst_col_stride) noexcept {
    const std::int64_t words = cols / 8;
    constexpr std::int64_t tile = 64;
    for (std::int64_t r0 = 0; r0 < rows; r0 += tile) {
        const std::int64_t r1 = rows - r0 < tile ? rows : r0 + tile;
        for (std::int64_t c = 0; c < words; ++c)
            for (std::int64_t r = r0; r < r1; ++r) {
                const std::uint32_t word = src[r * words + c];
                for (int i = 0; i < 8; ++i)
                    dst[r * dst_row_stride + (8 * c + awq_order[i]) * dst_col_stride] =
                        static_cast<std::uint8_t>((word >> (4 * i)) & 0xF);
            }
    }
}

}  // namespace qforge::detail
