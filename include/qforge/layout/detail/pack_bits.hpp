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
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "qforge/simd/tags.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if QFORGE_SIMD_X86
#include <immintrin.h>
#endif

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
// order, sixteen at a time (sequential reads keep the prefetchers streaming), their words go
// to a small [W][16] buffer, and each output row gets a whole 64-byte line per block. Writing
// each word straight down its [W][N] column instead stores to addresses N*4 bytes apart and
// ran 10x slower than a memcpy; gathering columns across many rows was slower still.
inline constexpr std::int64_t tile_rows = 16;

#if defined(__SSE2__)
// pack4_rows4_sse2: four rows of 4-bit codes, 32 codes each step -> four words per row, 4x4
// transposed so each 16-byte store holds one word index of the four rows (tmp[w][tile_rows] layout).
// Returns the codes done (a multiple of 32); the scalar loop finishes the rest.
inline std::int64_t pack4_rows4_sse2(const std::uint8_t* p, std::int64_t cols, std::uint32_t* tmp) noexcept {
    const __m128i lo = _mm_set1_epi8(0x0F), low_bytes = _mm_set1_epi16(0x00FF);
    auto row_words = [&](const std::uint8_t* q) {  // 32 codes -> 4 words (8 codes per word)
        const __m128i x0 = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), lo);
        const __m128i x1 = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)), lo);
        const __m128i y0 = _mm_and_si128(_mm_or_si128(x0, _mm_srli_epi16(x0, 4)), low_bytes);
        const __m128i y1 = _mm_and_si128(_mm_or_si128(x1, _mm_srli_epi16(x1, 4)), low_bytes);
        return _mm_packus_epi16(y0, y1);
    };
    std::int64_t k = 0;
    for (; k + 32 <= cols; k += 32) {
        const __m128i m0 = row_words(p + k), m1 = row_words(p + cols + k);
        const __m128i m2 = row_words(p + 2 * cols + k), m3 = row_words(p + 3 * cols + k);
        const __m128i t0 = _mm_unpacklo_epi32(m0, m1), t1 = _mm_unpacklo_epi32(m2, m3);
        const __m128i t2 = _mm_unpackhi_epi32(m0, m1), t3 = _mm_unpackhi_epi32(m2, m3);
        std::uint32_t* o = tmp + (k / 8) * tile_rows;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi64(t0, t1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + tile_rows), _mm_unpackhi_epi64(t0, t1));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * tile_rows), _mm_unpacklo_epi64(t2, t3));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 3 * tile_rows), _mm_unpackhi_epi64(t2, t3));
    }
    return k;
}
#endif

#if QFORGE_SIMD_X86 && (defined(__GNUC__) || defined(__clang__))
QFORGE_TARGET_AVX2 inline std::uint8_t or_bytes_avx2(const std::uint8_t* c, std::size_t n) noexcept {
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    std::size_t i = 0;
    for (; i + 128 <= n; i += 128) {
        a0 = _mm256_or_si256(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + i)));
        a1 = _mm256_or_si256(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + i + 32)));
        a2 = _mm256_or_si256(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + i + 64)));
        a3 = _mm256_or_si256(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + i + 96)));
    }
    alignas(32) std::uint8_t lane[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lane), _mm256_or_si256(_mm256_or_si256(a0, a1), _mm256_or_si256(a2, a3)));
    std::uint8_t any = 0;
    for (std::uint8_t b : lane) any |= b;
    for (; i < n; ++i) any |= c[i];
    return any;
}
#endif

/// The OR of the bytes c[0..n): whether any code has a bit above b set, in one read of the
/// codes (a weight's worth of codes is validated before every pack).
inline std::uint8_t or_bytes(const std::uint8_t* c, std::size_t n) noexcept {
#if QFORGE_SIMD_X86 && (defined(__GNUC__) || defined(__clang__))
    if (simd::available(simd::isa::avx2)) return or_bytes_avx2(c, n);
#endif
    std::uint64_t acc[4] = {0, 0, 0, 0};
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (std::size_t j = 0; j < 4; ++j) acc[j] |= load_u64(c + i + 8 * j);
    std::uint64_t any = acc[0] | acc[1] | acc[2] | acc[3];
    any |= any >> 32;
    any |= any >> 16;
    any |= any >> 8;
    auto out = static_cast<std::uint8_t>(any);
    for (; i < n; ++i) out |= c[i];
    return out;
}

#if QFORGE_SIMD_X86 && (defined(__GNUC__) || defined(__clang__))
// pack4_rows8_avx2: eight rows of 4-bit codes, 32 codes each step -> four words per row,
// stored as tmp[w][r..r+7] (the tmp[w][tile_rows] layout). maddubs joins code pairs into
// bytes (c0 + 16 c1), one pack makes two rows' words, and two rounds of dword unpacks plus a
// 128-bit permute transpose the 8 x 4 words. Returns the codes done (a multiple of 32).
QFORGE_TARGET_AVX2 inline __m256i pack4_pairs_avx2(const std::uint8_t* q) noexcept {
    const __m256i x = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)), _mm256_set1_epi8(0x0F));
    return _mm256_maddubs_epi16(x, _mm256_set1_epi16(0x1001));  // bytes 1, 16: c0 + 16 c1 as u16 <= 255
}

QFORGE_TARGET_AVX2 inline std::int64_t pack4_rows8_avx2(const std::uint8_t* p, std::int64_t cols,
                                                        std::uint32_t* tmp) noexcept {
    std::int64_t k = 0;
    for (; k + 32 <= cols; k += 32) {
        const __m256i ab = _mm256_packus_epi16(pack4_pairs_avx2(p + k), pack4_pairs_avx2(p + cols + k));  // [A0 A1 B0 B1 | A2 A3 B2 B3]
        const __m256i cd = _mm256_packus_epi16(pack4_pairs_avx2(p + 2 * cols + k), pack4_pairs_avx2(p + 3 * cols + k));
        const __m256i ef = _mm256_packus_epi16(pack4_pairs_avx2(p + 4 * cols + k), pack4_pairs_avx2(p + 5 * cols + k));
        const __m256i gh = _mm256_packus_epi16(pack4_pairs_avx2(p + 6 * cols + k), pack4_pairs_avx2(p + 7 * cols + k));
        const __m256i u1 = _mm256_unpacklo_epi32(ab, cd), u2 = _mm256_unpackhi_epi32(ab, cd);
        const __m256i v1 = _mm256_unpacklo_epi32(ef, gh), v2 = _mm256_unpackhi_epi32(ef, gh);
        const __m256i x0 = _mm256_unpacklo_epi32(u1, u2), x1 = _mm256_unpackhi_epi32(u1, u2);  // [w0 | w2], [w1 | w3] of A-D
        const __m256i y0 = _mm256_unpacklo_epi32(v1, v2), y1 = _mm256_unpackhi_epi32(v1, v2);  // same for E-H
        std::uint32_t* o = tmp + (k / 8) * tile_rows;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_permute2x128_si256(x0, y0, 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + tile_rows), _mm256_permute2x128_si256(x1, y1, 0x20));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * tile_rows), _mm256_permute2x128_si256(x0, y0, 0x31));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 3 * tile_rows), _mm256_permute2x128_si256(x1, y1, 0x31));
    }
    return k;
}
#endif

/// Rows [r, nr) of a tile (codes [nr][cols] from `tile`) through a 4-bit SIMD row packer,
/// `Step` rows a call, into tmp [words][tile_rows]; the columns past what the packer takes
/// go through the scalar stream. Returns the first row left (fewer than Step remain).
template <std::int64_t Step, class RowPacker>
std::int64_t pack4_tile_rows(const std::uint8_t* tile, std::int64_t cols, std::int64_t r, std::int64_t nr,
                             std::uint32_t* tmp, RowPacker pack_rows) {
    for (; r + Step <= nr; r += Step) {
        const std::uint8_t* p = tile + r * cols;
        const std::int64_t done = pack_rows(p, cols, tmp + r);
        for (std::int64_t j = 0; j < Step; ++j)
            pack_dense(p + j * cols + done, 1, cols - done, 4, tmp + (done / 8) * tile_rows + r + j, tile_rows);
    }
    return r;
}

/// GPTQ qweight: codes [rows][cols] (row-major) -> words [dense_words(cols)][rows], each row a
/// dense stream along cols written down its column. cols*bits must fill whole words.
/// Allocates a dense_words(cols) x tile_rows word buffer (may throw std::bad_alloc). `simd_ok = false`
/// forces the portable scalar path (the tests compare both). `dst_stride` (default `rows`) is
/// the distance between word rows of dst, so a band of rows can go into a wider matrix.
inline void pack_dense_transposed(const std::uint8_t* codes, std::int64_t rows, std::int64_t cols,
                                  int bits, std::uint32_t* dst, bool simd_ok = true, std::int64_t dst_stride = -1) {
    if (dst_stride < 0) dst_stride = rows;
    const std::int64_t words = dense_words(cols, bits);
    // Uninitialised: every word of it a tile reads back is packed first. Zero-filling it
    // cost as much as writing the output (one band of a wide layer calls this once).
    const std::unique_ptr<std::uint32_t[]> buffer(new std::uint32_t[static_cast<std::size_t>(words * tile_rows)]);
    std::uint32_t* const tmp = buffer.get();
    [[maybe_unused]] const bool use_avx2 = simd_ok && bits == 4 && simd::available(simd::isa::avx2);
    for (std::int64_t r0 = 0; r0 < rows; r0 += tile_rows) {
        const std::int64_t nr = rows - r0 < tile_rows ? rows - r0 : tile_rows;
        std::int64_t r = 0;
#if QFORGE_SIMD_X86 && (defined(__GNUC__) || defined(__clang__))
        if (simd_ok && bits == 4 && use_avx2) r = pack4_tile_rows<8>(codes + r0 * cols, cols, r, nr, tmp, pack4_rows8_avx2);
#endif
#if defined(__SSE2__)
        if (simd_ok && bits == 4) r = pack4_tile_rows<4>(codes + r0 * cols, cols, r, nr, tmp, pack4_rows4_sse2);
#else
        (void)simd_ok;
#endif
        for (; r < nr; ++r)
            pack_dense(codes + (r0 + r) * cols, 1, cols, bits, tmp + r, tile_rows);
        if (nr == tile_rows) {
            for (std::int64_t w = 0; w < words; ++w)
                std::memcpy(dst + w * dst_stride + r0, tmp + w * tile_rows, tile_rows * sizeof(std::uint32_t));
        } else {
            for (std::int64_t w = 0; w < words; ++w)
                std::memcpy(dst + w * dst_stride + r0, tmp + w * tile_rows,
                            static_cast<std::size_t>(nr) * sizeof(std::uint32_t));
        }
    }
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

// awq4_gather8: eight output words (rows r..r+7 of output column c) from eight source rows
// of eight codes each. Nibble-merging the AWQ pairs (columns 0|2, 4|6, 1|3, 5|7) leaves four
// u64 whose byte t is byte 0..3 of output word t; a 4x8 byte transpose (two swap stages)
// lays out the words, written at o[t * ostride].
inline void awq4_gather8(const std::uint8_t* p, std::ptrdiff_t stride, std::uint32_t* o,
                         std::ptrdiff_t ostride) noexcept {
    constexpr std::uint64_t lo = 0x0F0F0F0F0F0F0F0FULL;
    std::uint64_t x[8];
    for (int j = 0; j < 8; ++j) x[j] = load_u64(p + j * stride);
    std::uint64_t a = (x[0] & lo) | ((x[2] & lo) << 4);
    std::uint64_t b = (x[4] & lo) | ((x[6] & lo) << 4);
    std::uint64_t c = (x[1] & lo) | ((x[3] & lo) << 4);
    std::uint64_t d = (x[5] & lo) | ((x[7] & lo) << 4);
    std::uint64_t t = ((a >> 8) ^ b) & 0x00FF00FF00FF00FFULL;
    a ^= t << 8;  // a0 b0 a2 b2 a4 b4 a6 b6
    b ^= t;       // a1 b1 a3 b3 a5 b5 a7 b7
    t = ((c >> 8) ^ d) & 0x00FF00FF00FF00FFULL;
    c ^= t << 8;
    d ^= t;
    t = ((a >> 16) ^ c) & 0x0000FFFF0000FFFFULL;
    a ^= t << 16;  // words 0 and 4
    c ^= t;        // words 2 and 6
    t = ((b >> 16) ^ d) & 0x0000FFFF0000FFFFULL;
    b ^= t << 16;  // words 1 and 5
    d ^= t;        // words 3 and 7
    o[0 * ostride] = static_cast<std::uint32_t>(a);
    o[4 * ostride] = static_cast<std::uint32_t>(a >> 32);
    o[1 * ostride] = static_cast<std::uint32_t>(b);
    o[5 * ostride] = static_cast<std::uint32_t>(b >> 32);
    o[2 * ostride] = static_cast<std::uint32_t>(c);
    o[6 * ostride] = static_cast<std::uint32_t>(c >> 32);
    o[3 * ostride] = static_cast<std::uint32_t>(d);
    o[7 * ostride] = static_cast<std::uint32_t>(d >> 32);
}

// awq4_transposed: output [rows][cols/8] from a source whose output row r is source column r
// (source [cols][rows] row-major). Eight output columns' worth of source rows are read in
// order into a [rows][8] buffer, then flushed 32 bytes per output row (same reasoning as
// pack_dense_transposed). rows % 8 == 0.
inline void awq4_transposed(const std::uint8_t* src, std::int64_t rows, std::int64_t cols,
                            std::uint32_t* dst) {
    constexpr std::int64_t block = 8;
    const std::int64_t words = cols / 8;
    std::vector<std::uint32_t> tmp(static_cast<std::size_t>(rows * block));
    for (std::int64_t c0 = 0; c0 < words; c0 += block) {
        const std::int64_t nb = words - c0 < block ? words - c0 : block;
        for (std::int64_t cb = 0; cb < nb; ++cb)
            for (std::int64_t r = 0; r < rows; r += 8)
                awq4_gather8(src + 8 * (c0 + cb) * rows + r, rows, tmp.data() + r * block + cb, block);
        for (std::int64_t r = 0; r < rows; ++r)
            std::memcpy(dst + r * words + c0, tmp.data() + r * block, static_cast<std::size_t>(nb) * sizeof(std::uint32_t));
    }
}

#if defined(__SSE2__)
// awq4_transposed_sse2: the same words as awq4_transposed with SSE2 (baseline on x86-64, so
// no dispatch is needed). Sixteen codes of each of eight source rows per step: nibble-merge
// the AWQ pairs, interleave bytes then 16-bit lanes, and four stores hold sixteen words of
// one output column in a [8][rows] buffer; 4x4 word transposes then write each output row
// 32 contiguous bytes. Tested byte-identical to the scalar path (test_pack_bits.cpp).
inline void awq4_transposed_sse2(const std::uint8_t* src, std::int64_t rows, std::int64_t cols,
                                 std::uint32_t* dst) {
    constexpr std::int64_t block = 8;
    const std::int64_t words = cols / 8;
    std::vector<std::uint32_t> tmp(static_cast<std::size_t>(block * rows));  // [cb][row]
    const __m128i lo = _mm_set1_epi8(0x0F);
    auto load = [&](const std::uint8_t* p) {
        return _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), lo);
    };
    for (std::int64_t c0 = 0; c0 < words; c0 += block) {
        const std::int64_t nb = words - c0 < block ? words - c0 : block;
        for (std::int64_t cb = 0; cb < nb; ++cb) {
            const std::uint8_t* base = src + 8 * (c0 + cb) * rows;
            std::uint32_t* t = tmp.data() + cb * rows;
            std::int64_t r = 0;
            for (; r + 16 <= rows; r += 16) {
                const __m128i a = _mm_or_si128(load(base + r), _mm_slli_epi16(load(base + 2 * rows + r), 4));
                const __m128i b = _mm_or_si128(load(base + 4 * rows + r), _mm_slli_epi16(load(base + 6 * rows + r), 4));
                const __m128i c = _mm_or_si128(load(base + 1 * rows + r), _mm_slli_epi16(load(base + 3 * rows + r), 4));
                const __m128i d = _mm_or_si128(load(base + 5 * rows + r), _mm_slli_epi16(load(base + 7 * rows + r), 4));
                const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
                const __m128i cd0 = _mm_unpacklo_epi8(c, d), cd1 = _mm_unpackhi_epi8(c, d);
                _mm_storeu_si128(reinterpret_cast<__m128i*>(t + r), _mm_unpacklo_epi16(ab0, cd0));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(t + r + 4), _mm_unpackhi_epi16(ab0, cd0));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(t + r + 8), _mm_unpacklo_epi16(ab1, cd1));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(t + r + 12), _mm_unpackhi_epi16(ab1, cd1));
            }
            for (; r < rows; r += 8) awq4_gather8(base + r, rows, t + r, 1);
        }
        if (nb == block) {
            for (std::int64_t r = 0; r < rows; r += 4)
                for (std::int64_t half = 0; half < block; half += 4) {
                    const std::uint32_t* t = tmp.data() + half * rows + r;
                    const __m128i m0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t));
                    const __m128i m1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + rows));
                    const __m128i m2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 2 * rows));
                    const __m128i m3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t + 3 * rows));
                    const __m128i t0 = _mm_unpacklo_epi32(m0, m1), t1 = _mm_unpacklo_epi32(m2, m3);
                    const __m128i t2 = _mm_unpackhi_epi32(m0, m1), t3 = _mm_unpackhi_epi32(m2, m3);
                    std::uint32_t* o = dst + r * words + c0 + half;
                    _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi64(t0, t1));
                    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + words), _mm_unpackhi_epi64(t0, t1));
                    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * words), _mm_unpacklo_epi64(t2, t3));
                    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 3 * words), _mm_unpackhi_epi64(t2, t3));
                }
        } else {
            for (std::int64_t r = 0; r < rows; ++r)
                for (std::int64_t cb = 0; cb < nb; ++cb)
                    dst[r * words + c0 + cb] = tmp[static_cast<std::size_t>(cb * rows + r)];
        }
    }
}
#endif

/// Packs 4-bit codes [rows][cols] (row-major, cols % 8 == 0) along the columns in AWQ order:
/// dst [rows][cols/8]. `src_col_stride` / `src_row_stride` let the caller pack a transposed
/// source (AWQ packs along N while qforge holds codes [N][K]).
/// `simd_ok = false` forces the portable scalar path (the tests compare both).
inline void pack_awq4(const std::uint8_t* src, std::ptrdiff_t src_row_stride,
                      std::ptrdiff_t src_col_stride, std::int64_t rows, std::int64_t cols,
                      std::uint32_t* dst, bool simd_ok = true) {
    const std::int64_t words = cols / 8;
    if (src_col_stride == 1) {
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t c = 0; c < words; ++c)
                dst[r * words + c] = awq_word_from_bytes(load_u64(src + r * src_row_stride + 8 * c));
        return;
    }
    // Transposed source: gather eight columns (rows of the source) at a time. The tile keeps
    // the eight source rows' cache lines hot across 64 consecutive output rows.
    std::int64_t done = 0;
    if (src_row_stride == 1 && src_col_stride == rows && rows % 8 == 0) {
#if defined(__SSE2__)
        if (simd_ok) awq4_transposed_sse2(src, rows, cols, dst);
        else awq4_transposed(src, rows, cols, dst);
#else
        (void)simd_ok;
        awq4_transposed(src, rows, cols, dst);
#endif
        done = rows;
    }
    src += done * src_row_stride;
    dst += done * words;
    rows -= done;
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

/// Reverse of pack_awq4: dst[r * dst_row_stride + col * dst_col_stride] = code.
inline void unpack_awq4(const std::uint32_t* src, std::int64_t rows, std::int64_t cols,
                        std::uint8_t* dst, std::ptrdiff_t dst_row_stride,
                        std::ptrdiff_t dst_col_stride) noexcept {
    const std::int64_t words = cols / 8;
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < words; ++c) {
            const std::uint32_t word = src[r * words + c];
            for (int i = 0; i < 8; ++i)
                dst[r * dst_row_stride + (8 * c + awq_order[i]) * dst_col_stride] =
                    static_cast<std::uint8_t>((word >> (4 * i)) & 0xF);
        }
}

}  // namespace qforge::detail
