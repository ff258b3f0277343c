// Transposes of 32-bit words and 16-bit patterns for the word-level repack (repack_transpose.hpp).
//
// Packed GPTQ and compressed-tensors weights are transposes of each other as 32-bit words, so
// a repack is one big word transpose (tens of MB, larger than the cache) plus small ones
// (scales, zero points). The big one streams whole 64-byte destination lines with
// non-temporal stores: no read-for-ownership of the destination, which would otherwise cost
// a third more memory traffic than a memcpy. Every path writes the same bytes; the portable
// one (SSE2 is part of the x86-64 baseline, plain C++ elsewhere) is the reference the tests
// compare the AVX2 one against.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define QFORGE_REPACK_AVX2 1
#define QFORGE_REPACK_TARGET_AVX2 __attribute__((target("avx2")))
#else
#define QFORGE_REPACK_AVX2 0
#endif

#include "qforge/simd/cpu_features.hpp"

namespace qforge::repack_detail {

// ---------------------------------------------------------------------------------------------
// Portable: 4 x 4 word blocks through the cache, scalar edges.

#if defined(__SSE2__)
inline void transpose4x4(const std::uint32_t* s, std::int64_t ss, std::uint32_t* d, std::int64_t ds) noexcept {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + ss));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * ss));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 3 * ss));
    const __m128i ab_lo = _mm_unpacklo_epi32(a, b), ce_lo = _mm_unpacklo_epi32(c, e);
    const __m128i ab_hi = _mm_unpackhi_epi32(a, b), ce_hi = _mm_unpackhi_epi32(c, e);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_unpacklo_epi64(ab_lo, ce_lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + ds), _mm_unpackhi_epi64(ab_lo, ce_lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * ds), _mm_unpacklo_epi64(ab_hi, ce_hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 3 * ds), _mm_unpackhi_epi64(ab_hi, ce_hi));
}
#else
inline void transpose4x4(const std::uint32_t* s, std::int64_t ss, std::uint32_t* d, std::int64_t ds) noexcept {
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) d[j * ds + i] = s[i * ss + j];
}
#endif

/// d[c * ds + r] = s[r * ss + c] for r < nr, c < nc: 16 x 16 tiles of 4 x 4 blocks.
inline void transpose_words_strided(const std::uint32_t* s, std::int64_t ss, std::int64_t nr, std::int64_t nc, std::uint32_t* d,
                                    std::int64_t ds) noexcept {
    constexpr std::int64_t tile = 16;
    for (std::int64_t c0 = 0; c0 < nc; c0 += tile) {
        const std::int64_t c1 = std::min(nc, c0 + tile), c4 = c0 + (c1 - c0) / 4 * 4;
        for (std::int64_t r0 = 0; r0 < nr; r0 += tile) {
            const std::int64_t r1 = std::min(nr, r0 + tile), r4 = r0 + (r1 - r0) / 4 * 4;
            for (std::int64_t c = c0; c < c4; c += 4)
                for (std::int64_t r = r0; r < r4; r += 4) transpose4x4(s + r * ss + c, ss, d + c * ds + r, ds);
            for (std::int64_t c = c0; c < c1; ++c)
                for (std::int64_t r = (c < c4 ? r4 : r0); r < r1; ++r) d[c * ds + r] = s[r * ss + c];
        }
    }
}

/// dst[c][r] = src[r][c] for a rows x cols matrix, through the cache (any shape, alignment).
inline void transpose_words_tiled(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) noexcept {
    transpose_words_strided(src, cols, rows, cols, dst, rows);
}

/// Where the streamed rows of a transpose start and end: every destination row begins at the
/// same offset in a cache line only when rows % 16 == 0; rows [first, last) then fill whole,
/// aligned lines of every destination row. first == last: nothing can be streamed.
struct stream_span {
    std::int64_t first = 0, last = 0;
};

inline stream_span stream_rows(const std::uint32_t* dst, std::int64_t rows, std::int64_t cols, std::int64_t col_block) noexcept {
    const auto addr = reinterpret_cast<std::uintptr_t>(dst);
    if (rows % 16 != 0 || addr % 4 != 0 || rows < 32 || cols < col_block) return {};
    const auto first = static_cast<std::int64_t>((64 - addr % 64) % 64 / 4);
    return {first, first + (rows - first) / 16 * 16};
}

/// The rows a streaming transpose leaves to the cache: [0, first) and [last, rows) of every
/// column, and the columns past the last whole block.
inline void transpose_stream_edges(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                                   stream_span sp, std::int64_t col_end) noexcept {
    transpose_words_strided(src, cols, sp.first, cols, dst, rows);
    transpose_words_strided(src + sp.last * cols, cols, rows - sp.last, cols, dst + sp.last, rows);
    transpose_words_strided(src + sp.first * cols + col_end, cols, sp.last - sp.first, cols - col_end, dst + col_end * rows + sp.first,
                            rows);
}

#if defined(__SSE2__)
/// 16 source rows x 4 source columns -> 4 destination lines of 16 words, streamed.
inline void stream_block16x4(const std::uint32_t* s, std::int64_t ss, std::uint32_t* d, std::int64_t ds) noexcept {
    __m128i o[4][4];
    for (int q = 0; q < 4; ++q) {
        const std::uint32_t* b = s + 4 * q * ss;
        const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
        const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + ss));
        const __m128i a2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * ss));
        const __m128i a3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 3 * ss));
        const __m128i lo01 = _mm_unpacklo_epi32(a0, a1), lo23 = _mm_unpacklo_epi32(a2, a3);
        const __m128i hi01 = _mm_unpackhi_epi32(a0, a1), hi23 = _mm_unpackhi_epi32(a2, a3);
        o[0][q] = _mm_unpacklo_epi64(lo01, lo23);
        o[1][q] = _mm_unpackhi_epi64(lo01, lo23);
        o[2][q] = _mm_unpacklo_epi64(hi01, hi23);
        o[3][q] = _mm_unpackhi_epi64(hi01, hi23);
    }
    for (int r = 0; r < 4; ++r)
        for (int q = 0; q < 4; ++q) _mm_stream_si128(reinterpret_cast<__m128i*>(d + r * ds + 4 * q), o[r][q]);
}

/// The portable streaming transpose (SSE2): 16 x 4 blocks, edges through the cache.
inline void transpose_words_stream_sse2(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) noexcept {
    const stream_span sp = stream_rows(dst, rows, cols, 4);
    if (sp.first == sp.last) return transpose_words_tiled(src, rows, cols, dst);
    const std::int64_t col_end = cols / 4 * 4;
    for (std::int64_t r = sp.first; r < sp.last; r += 16)
        for (std::int64_t c = 0; c < col_end; c += 4) stream_block16x4(src + r * cols + c, cols, dst + c * rows + r, rows);
    _mm_sfence();  // streaming stores are weakly ordered: publish them before the edges and the return
    transpose_stream_edges(src, rows, cols, dst, sp, col_end);
}
#endif

#if QFORGE_REPACK_AVX2
/// 8 x 8 words: a[i] = row i -> o[j] = column j.
QFORGE_REPACK_TARGET_AVX2 inline void transpose8x8_avx2(const __m256i a[8], __m256i o[8]) noexcept {
    const __m256i b0 = _mm256_unpacklo_epi32(a[0], a[1]), b1 = _mm256_unpackhi_epi32(a[0], a[1]);
    const __m256i b2 = _mm256_unpacklo_epi32(a[2], a[3]), b3 = _mm256_unpackhi_epi32(a[2], a[3]);
    const __m256i b4 = _mm256_unpacklo_epi32(a[4], a[5]), b5 = _mm256_unpackhi_epi32(a[4], a[5]);
    const __m256i b6 = _mm256_unpacklo_epi32(a[6], a[7]), b7 = _mm256_unpackhi_epi32(a[6], a[7]);
    const __m256i c0 = _mm256_unpacklo_epi64(b0, b2), c1 = _mm256_unpackhi_epi64(b0, b2);
    const __m256i c2 = _mm256_unpacklo_epi64(b1, b3), c3 = _mm256_unpackhi_epi64(b1, b3);
    const __m256i c4 = _mm256_unpacklo_epi64(b4, b6), c5 = _mm256_unpackhi_epi64(b4, b6);
    const __m256i c6 = _mm256_unpacklo_epi64(b5, b7), c7 = _mm256_unpackhi_epi64(b5, b7);
    o[0] = _mm256_permute2x128_si256(c0, c4, 0x20);
    o[1] = _mm256_permute2x128_si256(c1, c5, 0x20);
    o[2] = _mm256_permute2x128_si256(c2, c6, 0x20);
    o[3] = _mm256_permute2x128_si256(c3, c7, 0x20);
    o[4] = _mm256_permute2x128_si256(c0, c4, 0x31);
    o[5] = _mm256_permute2x128_si256(c1, c5, 0x31);
    o[6] = _mm256_permute2x128_si256(c2, c6, 0x31);
    o[7] = _mm256_permute2x128_si256(c3, c7, 0x31);
}

/// Streams 8 destination lines d + j * ds (16 words each, 64-byte aligned) from 16 source rows
/// of 8 words; each line by two adjacent stores, so its write-combining buffer fills at once.
QFORGE_REPACK_TARGET_AVX2 inline void stream_lines16x8_avx2(const __m256i rows[16], std::uint32_t* d, std::int64_t ds) noexcept {
    __m256i lo[8], hi[8];
    transpose8x8_avx2(rows, lo);
    transpose8x8_avx2(rows + 8, hi);
    for (int j = 0; j < 8; ++j) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d + j * ds), lo[j]);
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d + j * ds + 8), hi[j]);
    }
}

/// 4 words at lane0 into the low 128-bit lane, 4 at lane1 into the high one.
QFORGE_REPACK_TARGET_AVX2 inline __m256i load_lanes_avx2(const std::uint32_t* lane0, const std::uint32_t* lane1) noexcept {
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(lane0));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), _mm_loadu_si128(reinterpret_cast<const __m128i*>(lane1)), 1);
}

/// 8 x 8 words at s (rows ss words apart) -> o[j] = column j. The step across 128-bit lanes is
/// done by the loads (row i's and row i + 4's 4-word halves into one register, a load-insert),
/// which leaves 16 in-lane shuffles instead of 24 on the shuffle ports (measured on Zen 4: the
/// compressed-tensors -> GPTQ transpose 6-12% faster, the other direction 2-6%).
QFORGE_REPACK_TARGET_AVX2 inline void transpose8x8_load_avx2(const std::uint32_t* s, std::int64_t ss, __m256i o[8]) noexcept {
    for (int half = 0; half < 2; ++half) {  // columns 0-3, then 4-7; lane 0 holds row i, lane 1 row i + 4
        const std::uint32_t* p = s + 4 * half;
        const __m256i a0 = load_lanes_avx2(p, p + 4 * ss), a1 = load_lanes_avx2(p + ss, p + 5 * ss);
        const __m256i a2 = load_lanes_avx2(p + 2 * ss, p + 6 * ss), a3 = load_lanes_avx2(p + 3 * ss, p + 7 * ss);
        const __m256i t0 = _mm256_unpacklo_epi32(a0, a1), t1 = _mm256_unpackhi_epi32(a0, a1);
        const __m256i t2 = _mm256_unpacklo_epi32(a2, a3), t3 = _mm256_unpackhi_epi32(a2, a3);
        o[4 * half + 0] = _mm256_unpacklo_epi64(t0, t2);
        o[4 * half + 1] = _mm256_unpackhi_epi64(t0, t2);
        o[4 * half + 2] = _mm256_unpacklo_epi64(t1, t3);
        o[4 * half + 3] = _mm256_unpackhi_epi64(t1, t3);
    }
}

/// 16 source rows x 8 source columns (rows ss words apart) -> 8 destination lines.
QFORGE_REPACK_TARGET_AVX2 inline void stream_block16x8_avx2(const std::uint32_t* s, std::int64_t ss, std::uint32_t* d,
                                                            std::int64_t ds) noexcept {
    __m256i lo[8], hi[8];
    transpose8x8_load_avx2(s, ss, lo);
    transpose8x8_load_avx2(s + 8 * ss, ss, hi);
    for (int j = 0; j < 8; ++j) {
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d + j * ds), lo[j]);
        _mm256_stream_si256(reinterpret_cast<__m256i*>(d + j * ds + 8), hi[j]);
    }
}

/// When the destination does not start on a line, the line that starts at destination row c's
/// element `last` holds the end of row c (source rows [last, rows) of column c) and the start
/// of row c + 1 (source rows [0, first) of column c + 1). Built from those 16 source rows, it
/// is streamed like any other; only the first partial line, the last one and the seams past
/// the last whole 8-column block go through the cache.
QFORGE_REPACK_TARGET_AVX2 inline void stream_seams_avx2(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                                                        stream_span sp) noexcept {
    const std::int64_t tail = rows - sp.last;  // 16 - first
    std::int64_t c = 0;
    for (; c + 8 < cols; c += 8) {
        __m256i a[16];
        for (std::int64_t i = 0; i < 16; ++i) {
            const std::uint32_t* p = i < tail ? src + (sp.last + i) * cols + c : src + (i - tail) * cols + c + 1;
            a[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        }
        stream_lines16x8_avx2(a, dst + c * rows + sp.last, rows);
    }
    for (; c + 1 < cols; ++c) {
        for (std::int64_t r = sp.last; r < rows; ++r) dst[c * rows + r] = src[r * cols + c];
        for (std::int64_t r = 0; r < sp.first; ++r) dst[(c + 1) * rows + r] = src[r * cols + c + 1];
    }
    for (std::int64_t r = 0; r < sp.first; ++r) dst[r] = src[r * cols];
    for (std::int64_t r = sp.last; r < rows; ++r) dst[(cols - 1) * rows + r] = src[r * cols + cols - 1];
}

/// Source rows per pass of the AVX2 transpose: a pass gives each destination row one
/// contiguous run of pass x 4 bytes, and reads pass rows per 8-column step. Measured on Zen 4
/// (streaming stores, tens of MB): runs of 64 B write at 60% of sequential speed, runs of
/// 128 B and more at full speed; but reading more than 16 rows per step (the two 8-column
/// steps of a line then miss L1) costs more than that gains unless the rows are short. Of 16,
/// 32 and 64 rows, 64 won for rows of 1 and 2 KB, 16 for rows of 4, 5.5, 16, 32 and 44 KB.
inline std::int64_t stream_pass_rows(std::int64_t cols) noexcept {
    constexpr std::int64_t budget = 128 * 1024;  // 64 rows of at most 2 KB
    return 64 * cols * 4 <= budget ? 64 : 16;
}

/// The AVX2 streaming transpose: 16 x 8 blocks in passes of stream_pass_rows rows, the next
/// line of every source row prefetched a few lines ahead, the seams between destination rows
/// streamed too.
QFORGE_REPACK_TARGET_AVX2 inline void transpose_words_stream_avx2(const std::uint32_t* src, std::int64_t rows, std::int64_t cols,
                                                                  std::uint32_t* dst) noexcept {
    const stream_span sp = stream_rows(dst, rows, cols, 8);
    if (sp.first == sp.last) return transpose_words_tiled(src, rows, cols, dst);
    const std::int64_t col_end = cols / 8 * 8, pass = stream_pass_rows(cols), steps = col_end / 8;
    constexpr std::int64_t ahead = 64;  // words: four lines ahead of the loads
    for (std::int64_t r0 = sp.first; r0 < sp.last; r0 += pass) {
        const std::int64_t r1 = std::min(sp.last, r0 + pass);
        if (pass == 64) {
            // Short rows: the next pass's rows are one contiguous block; prefetch it in address
            // order, spread over this pass's column steps.
            const char* next = reinterpret_cast<const char*>(src + r1 * cols);
            const std::int64_t lines = (std::min(sp.last, r1 + pass) - r1) * cols * 4 / 64, per_step = (lines + steps - 1) / steps;
            std::int64_t issued = 0;
            for (std::int64_t c = 0; c < col_end; c += 8) {
                for (std::int64_t k = 0; k < per_step && issued < lines; ++k, ++issued) _mm_prefetch(next + 64 * issued, _MM_HINT_T0);
                for (std::int64_t r = r0; r < r1; r += 16) stream_block16x8_avx2(src + r * cols + c, cols, dst + c * rows + r, rows);
            }
            continue;
        }
        for (std::int64_t c = 0; c < col_end; c += 8) {
            if (c % 16 == 0 && c + ahead < cols)
                for (std::int64_t r = r0; r < r1; ++r) _mm_prefetch(reinterpret_cast<const char*>(src + r * cols + c + ahead), _MM_HINT_T0);
            for (std::int64_t r = r0; r < r1; r += 16) stream_block16x8_avx2(src + r * cols + c, cols, dst + c * rows + r, rows);
        }
    }
    if (sp.first > 0) stream_seams_avx2(src, rows, cols, dst, sp);
    _mm_sfence();  // streaming stores are weakly ordered: publish them before the return
    transpose_words_strided(src + sp.first * cols + col_end, cols, sp.last - sp.first, cols - col_end, dst + col_end * rows + sp.first, rows);
}
#endif

/// Whether the AVX2 transpose runs here: the CPU has it and QFORGE_FORCE_ISA (see
/// simd/dispatch.hpp) does not pin a lower ISA.
inline bool repack_use_avx2() noexcept {
#if QFORGE_REPACK_AVX2
    static const bool use = [] {
        const char* forced = std::getenv("QFORGE_FORCE_ISA");
        const std::string_view f = forced ? forced : "";
        return simd::cpu().avx2 && (f.empty() || f == "avx2" || f == "avx512");
    }();
    return use;
#else
    return false;
#endif
}

/// Below this many bytes the destination stays in the cache for whoever reads it next, so it
/// is written through the cache; above, it is streamed.
inline constexpr std::int64_t stream_min_bytes = std::int64_t{1} << 20;

/// dst[c][r] = src[r][c] for a rows x cols matrix of 32-bit words (dst 4-byte aligned).
inline void transpose_words(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) noexcept {
    if (rows * cols * 4 < stream_min_bytes) return transpose_words_tiled(src, rows, cols, dst);
#if QFORGE_REPACK_AVX2
    if (repack_use_avx2()) return transpose_words_stream_avx2(src, rows, cols, dst);
#endif
#if defined(__SSE2__)
    return transpose_words_stream_sse2(src, rows, cols, dst);
#else
    return transpose_words_tiled(src, rows, cols, dst);
#endif
}

// ---------------------------------------------------------------------------------------------
// 16-bit patterns (scales): [rows][cols] -> [cols][rows]. The source is a view into a mapped
// file and may sit at any byte offset, so it is read with unaligned loads.

inline std::uint16_t load_u16(const std::byte* p) noexcept {
    std::uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}

#if defined(__SSE2__)
/// 8 x 8 patterns: rows s, s + ss bytes, ... -> 8 destination rows d + j * ds.
inline void transpose8x8_u16(const std::byte* s, std::int64_t ss, std::uint16_t* d, std::int64_t ds) noexcept {
    __m128i a[8];
    for (int i = 0; i < 8; ++i) a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i * ss));
    const __m128i b0 = _mm_unpacklo_epi16(a[0], a[1]), b1 = _mm_unpackhi_epi16(a[0], a[1]);
    const __m128i b2 = _mm_unpacklo_epi16(a[2], a[3]), b3 = _mm_unpackhi_epi16(a[2], a[3]);
    const __m128i b4 = _mm_unpacklo_epi16(a[4], a[5]), b5 = _mm_unpackhi_epi16(a[4], a[5]);
    const __m128i b6 = _mm_unpacklo_epi16(a[6], a[7]), b7 = _mm_unpackhi_epi16(a[6], a[7]);
    const __m128i c0 = _mm_unpacklo_epi32(b0, b2), c1 = _mm_unpackhi_epi32(b0, b2);  // columns 0-1, 2-3 of rows 0-3
    const __m128i c2 = _mm_unpacklo_epi32(b1, b3), c3 = _mm_unpackhi_epi32(b1, b3);  // columns 4-5, 6-7
    const __m128i c4 = _mm_unpacklo_epi32(b4, b6), c5 = _mm_unpackhi_epi32(b4, b6);  // the same of rows 4-7
    const __m128i c6 = _mm_unpacklo_epi32(b5, b7), c7 = _mm_unpackhi_epi32(b5, b7);
    const __m128i o[8] = {_mm_unpacklo_epi64(c0, c4), _mm_unpackhi_epi64(c0, c4), _mm_unpacklo_epi64(c1, c5),
                          _mm_unpackhi_epi64(c1, c5), _mm_unpacklo_epi64(c2, c6), _mm_unpackhi_epi64(c2, c6),
                          _mm_unpacklo_epi64(c3, c7), _mm_unpackhi_epi64(c3, c7)};
    for (int j = 0; j < 8; ++j) _mm_storeu_si128(reinterpret_cast<__m128i*>(d + j * ds), o[j]);
}
#endif

/// dst[c][r] = pattern (r, c) of the rows x cols matrix of 16-bit patterns at `src`.
inline void transpose_u16(const std::byte* src, std::int64_t rows, std::int64_t cols, std::uint16_t* dst) noexcept {
    std::int64_t r8 = 0, c8 = 0;
#if defined(__SSE2__)
    r8 = rows / 8 * 8;
    c8 = cols / 8 * 8;
    for (std::int64_t r = 0; r < r8; r += 8)
        for (std::int64_t c = 0; c < c8; c += 8) transpose8x8_u16(src + 2 * (r * cols + c), 2 * cols, dst + c * rows + r, rows);
#endif
    for (std::int64_t r = 0; r < rows; ++r)  // the edges: columns past c8 of the first r8 rows, all of the rest
        for (std::int64_t c = r < r8 ? c8 : 0; c < cols; ++c) dst[c * rows + r] = load_u16(src + 2 * (r * cols + c));
}

}  // namespace qforge::repack_detail
