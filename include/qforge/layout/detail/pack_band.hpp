// Band packing helpers (layout/quantize_packed.hpp): a layout's pack_band() writes the part of
// the whole weight's tensors that one band of rows owns, while other bands are packed at the
// same time on other threads into the same tensors. These helpers write exactly the words
// the whole-weight kernels of pack_bits.hpp would, and no word another band writes too,
// except where a format's words straddle band boundaries (padded streams), which they OR in
// atomically.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "qforge/core/error.hpp"
#include "qforge/layout/detail/pack_bits.hpp"
#include "qforge/quant/quantized_tensor.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace qforge::detail {

/// Rows a band must start on (and span, unless it is the last): every format's words along
/// N then close inside a band (AWQ: 8 rows a word; dense streams: 32*b bits).
inline constexpr std::int64_t band_row_unit = 32;

/// Refuses a band that is not rows [first_row, first_row + band.rows) of an n-row weight on
/// band_row_unit boundaries: packing it would tear words another band owns.
inline void check_band_bounds(const quantized_tensor& band, std::int64_t first_row, std::int64_t n,
                              std::string_view format) {
    const std::int64_t end = first_row + band.rows;
    if (first_row < 0 || band.rows <= 0 || end > n || first_row % band_row_unit != 0 ||
        (end != n && band.rows % band_row_unit != 0))
        fail<shape_error>({}, band.name,
                          std::string(format) + ": band of rows [" + std::to_string(first_row) + ", " +
                              std::to_string(end) + ") of " + std::to_string(n) +
                              " does not start and end on multiples of " + std::to_string(band_row_unit) +
                              " rows (or at the last row)");
}

#if defined(__SSE2__)
// pack_awq4_band_sse2: the words of pack_awq4_band for columns [0, done) with done a
// multiple of 16. Sixteen codes of each of eight rows per step make sixteen words of one
// word column, nibble-merged the way awq4_transposed_sse2 does (pairs 0|2, 4|6, 1|3, 5|7,
// then byte and 16-bit interleaves); four word columns are then 4x4-transposed so each
// output row gets its four words in one 16-byte store. awq4_transposed_sse2 itself flushes
// eight word columns at a time and falls back to one word per store below that, which is
// every 32-row band (four word columns); this kernel writes those straight into the whole
// weight's rows instead of through a buffer.
inline std::int64_t pack_awq4_band_sse2(const std::uint8_t* src, std::int64_t rows, std::int64_t cols,
                                        std::uint32_t* dst, std::ptrdiff_t ds) noexcept {
    const std::int64_t words = rows / 8;
    const __m128i lo = _mm_set1_epi8(0x0F);
    auto load = [&](const std::uint8_t* p) {
        return _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), lo);
    };
    auto words16 = [&](std::int64_t w, std::int64_t c, __m128i* q) {  // q[j]: columns c+4j .. c+4j+3
        const std::uint8_t* base = src + 8 * w * cols + c;
        const __m128i a = _mm_or_si128(load(base), _mm_slli_epi16(load(base + 2 * cols), 4));
        const __m128i b = _mm_or_si128(load(base + 4 * cols), _mm_slli_epi16(load(base + 6 * cols), 4));
        const __m128i cc = _mm_or_si128(load(base + cols), _mm_slli_epi16(load(base + 3 * cols), 4));
        const __m128i d = _mm_or_si128(load(base + 5 * cols), _mm_slli_epi16(load(base + 7 * cols), 4));
        const __m128i ab0 = _mm_unpacklo_epi8(a, b), ab1 = _mm_unpackhi_epi8(a, b);
        const __m128i cd0 = _mm_unpacklo_epi8(cc, d), cd1 = _mm_unpackhi_epi8(cc, d);
        q[0] = _mm_unpacklo_epi16(ab0, cd0);
        q[1] = _mm_unpackhi_epi16(ab0, cd0);
        q[2] = _mm_unpacklo_epi16(ab1, cd1);
        q[3] = _mm_unpackhi_epi16(ab1, cd1);
    };
    std::int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        std::int64_t w = 0;
        for (; w + 4 <= words; w += 4) {
            __m128i q[4][4];
            for (int i = 0; i < 4; ++i) words16(w + i, c, q[i]);
            for (int j = 0; j < 4; ++j) {
                const __m128i t0 = _mm_unpacklo_epi32(q[0][j], q[1][j]), t1 = _mm_unpacklo_epi32(q[2][j], q[3][j]);
                const __m128i t2 = _mm_unpackhi_epi32(q[0][j], q[1][j]), t3 = _mm_unpackhi_epi32(q[2][j], q[3][j]);
                std::uint32_t* o = dst + (c + 4 * j) * ds + w;
                _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm_unpacklo_epi64(t0, t1));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(o + ds), _mm_unpackhi_epi64(t0, t1));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 2 * ds), _mm_unpacklo_epi64(t2, t3));
                _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 3 * ds), _mm_unpackhi_epi64(t2, t3));
            }
        }
        for (; w < words; ++w) {  // rows % 32 != 0: the last band's odd word columns
            alignas(16) std::uint32_t t[16];
            __m128i q[4];
            words16(w, c, q);
            for (int j = 0; j < 4; ++j) _mm_store_si128(reinterpret_cast<__m128i*>(t + 4 * j), q[j]);
            for (int j = 0; j < 16; ++j) dst[(c + j) * ds + w] = t[j];
        }
    }
    return c;
}
#endif

/// AWQ words of codes [rows][cols] (rows % 8 == 0) packed along the rows: the words
/// pack_awq4(src, 1, cols, cols, rows, tmp) makes as tmp [cols][rows/8], written instead at
/// dst[c * dst_stride + w], so a band's rows/8 word columns go straight into the whole
/// weight's [cols][n/8] tensor. `simd_ok = false` forces the portable path (tests compare).
inline void pack_awq4_band(const std::uint8_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                           std::ptrdiff_t dst_stride, bool simd_ok = true) noexcept {
    const std::int64_t words = rows / 8;
    std::int64_t c = 0;
#if defined(__SSE2__)
    if (simd_ok) c = pack_awq4_band_sse2(src, rows, cols, dst, dst_stride);
#else
    (void)simd_ok;
#endif
    for (; c + 8 <= cols; c += 8)
        for (std::int64_t w = 0; w < words; ++w)
            awq4_gather8(src + 8 * w * cols + c, cols, dst + c * dst_stride + w, dst_stride);
    for (; c < cols; ++c)
        for (std::int64_t w = 0; w < words; ++w) {
            std::uint32_t word = 0;
            for (int i = 0; i < 8; ++i)
                word |= static_cast<std::uint32_t>(src[(8 * w + awq_order[i]) * cols + c] & 0xF) << (4 * i);
            dst[c * dst_stride + w] = word;
        }
}

/// Codes [first, first + count) of a padded stream of `total` codes (pack_padded's words
/// over the whole stream, at dst[w * ds]); src[i * ss] is code first + i. The stream must be
/// zeroed before its first part is packed. Words wholly inside the part are stored; the at
/// most two words it shares with the neighbouring parts (floor(32/b) codes a word need not
/// divide a band: 10 for 3 bits) get its fields OR'ed in atomically, so parts packed at once
/// on different threads, in any order, leave pack_padded's bytes.
inline void pack_padded_part(const std::uint8_t* src, std::ptrdiff_t ss, std::int64_t first, std::int64_t count,
                             std::int64_t total, int bits, std::uint32_t* dst, std::ptrdiff_t ds) noexcept {
    const std::int64_t per = 32 / bits;
    const std::uint32_t mask = (1u << bits) - 1u;
    auto or_fields = [&](std::int64_t from, std::int64_t n) {  // codes from.. from+n-1, all in one word
        std::uint32_t word = 0;
        for (std::int64_t i = 0; i < n; ++i)
            word |= (src[(from - first + i) * ss] & mask) << (bits * ((from + i) % per));
        std::atomic_ref<std::uint32_t>(dst[(from / per) * ds]).fetch_or(word, std::memory_order_relaxed);
    };
    std::int64_t lo = first;
    const std::int64_t hi = first + count;
    if (lo % per != 0 && lo < hi) {
        const std::int64_t head = per - lo % per < hi - lo ? per - lo % per : hi - lo;
        or_fields(lo, head);
        lo += head;
    }
    // lo is now on a word boundary (or == hi); a tail shared with the next part is OR'ed.
    const std::int64_t tail = hi != total && lo < hi ? hi % per : 0;
    pack_padded(src + (lo - first) * ss, ss, hi - tail - lo, bits, dst + (lo / per) * ds, ds);
    if (tail > 0) or_fields(hi - tail, tail);
}

}  // namespace qforge::detail
