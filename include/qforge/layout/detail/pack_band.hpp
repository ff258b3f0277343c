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
#include "qforge/simd/family.hpp"
#include "qforge/simd/pack_kernels.hpp"

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

/// AWQ words of codes [rows][cols] (rows % 8 == 0) packed along the rows: the words
/// pack_awq4(src, 1, cols, cols, rows, tmp) makes as tmp [cols][rows/8], written instead at
/// dst[c * dst_stride + w], so a band's rows/8 word columns go straight into the whole
/// weight's [cols][n/8] tensor. Runs the pack kernels of `isa` (simd/pack_kernels.hpp).
inline void pack_awq4_band(const std::uint8_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                           std::ptrdiff_t dst_stride, simd::isa isa) {
    simd::kernels_of<simd::pack_kernels>(isa).awq4_band(src, rows, cols, dst, dst_stride);
}

/// pack_awq4_band with `simd_ok = false` forcing the scalar kernels, true the active ISA's.
inline void pack_awq4_band(const std::uint8_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                           std::ptrdiff_t dst_stride, bool simd_ok = true) {
    pack_awq4_band(src, rows, cols, dst, dst_stride, simd_ok ? simd::active_isa() : simd::isa::scalar);
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
