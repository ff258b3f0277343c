// Transpose kernels, written once over one ISA's primitives (simd/arch/<isa>.hpp: the shared
// u32x4 / transpose4x4_u32 and the tp_ block); the contract is simd/transpose_kernels.hpp.
//
// No include guard on purpose: simd/transpose_kernels.hpp has simd/detail/instantiate.ipp
// compile it inside each ISA's namespace, with QFORGE_KFN the ISA's target attribute + inline.
// The control flow (tiles, stream spans, passes, seams) is the same on every ISA; only the
// primitives differ (on the scalar tag a "stream" is a plain store and the fence does
// nothing).

namespace transpose_family {

using word = std::uint32_t;
using i64 = std::int64_t;

// ---- Through the cache ------------------------------------------------------------------

/// 4 x 4 words at s (rows ss apart) -> d (rows ds apart).
QFORGE_KFN void block4x4(const word* s, i64 ss, word* d, i64 ds) noexcept {
    u32x4 a = u32x4_load(s), b = u32x4_load(s + ss), c = u32x4_load(s + 2 * ss), e = u32x4_load(s + 3 * ss);
    transpose4x4_u32(a, b, c, e);
    u32x4_store(d, a);
    u32x4_store(d + ds, b);
    u32x4_store(d + 2 * ds, c);
    u32x4_store(d + 3 * ds, e);
}

/// d[c * ds + r] = s[r * ss + c] for r < nr, c < nc: 16 x 16 tiles of 4 x 4 blocks.
QFORGE_KFN void strided(const word* s, i64 ss, i64 nr, i64 nc, word* d, i64 ds) noexcept {
    constexpr i64 tile = 16;
    for (i64 c0 = 0; c0 < nc; c0 += tile) {
        const i64 c1 = nc < c0 + tile ? nc : c0 + tile, c4 = c0 + (c1 - c0) / 4 * 4;
        for (i64 r0 = 0; r0 < nr; r0 += tile) {
            const i64 r1 = nr < r0 + tile ? nr : r0 + tile, r4 = r0 + (r1 - r0) / 4 * 4;
            for (i64 c = c0; c < c4; c += 4)
                for (i64 r = r0; r < r4; r += 4) block4x4(s + r * ss + c, ss, d + c * ds + r, ds);
            for (i64 c = c0; c < c1; ++c)
                for (i64 r = (c < c4 ? r4 : r0); r < r1; ++r) d[c * ds + r] = s[r * ss + c];
        }
    }
}

QFORGE_KFN void k_words_tiled(const word* src, i64 rows, i64 cols, word* dst) noexcept {
    strided(src, cols, rows, cols, dst, rows);
}

// ---- Streamed ---------------------------------------------------------------------------

/// Where the streamed rows of a transpose start and end: every destination row begins at the
/// same offset in a cache line only when rows % 16 == 0; rows [first, last) then fill whole,
/// aligned lines of every destination row. first == last: nothing can be streamed.
struct stream_span {
    i64 first = 0, last = 0;
};

inline stream_span stream_rows(const word* dst, i64 rows, i64 cols) noexcept {
    const auto addr = reinterpret_cast<std::uintptr_t>(dst);
    if (rows % 16 != 0 || addr % 4 != 0 || rows < 32 || cols < 8) return {};
    const auto first = static_cast<i64>((64 - addr % 64) % 64 / 4);
    return {first, first + (rows - first) / 16 * 16};
}

/// Streams 8 destination lines d + j * ds (16 words each, 64-byte aligned) from 16 source rows
/// of 8 words; each line by two adjacent stores, so its write-combining buffer fills at once.
QFORGE_KFN void stream_lines16x8(const tp_u32x8 rows[16], word* d, i64 ds) noexcept {
    tp_u32x8 lo[8], hi[8];
    tp_transpose8x8(rows, lo);
    tp_transpose8x8(rows + 8, hi);
    for (int j = 0; j < 8; ++j) {
        tp_stream8(d + j * ds, lo[j]);
        tp_stream8(d + j * ds + 8, hi[j]);
    }
}

/// 16 source rows x 8 source columns (rows ss words apart) -> 8 destination lines.
QFORGE_KFN void stream_block16x8(const word* s, i64 ss, word* d, i64 ds) noexcept {
    tp_u32x8 lo[8], hi[8];
    tp_transpose8x8_load(s, ss, lo);
    tp_transpose8x8_load(s + 8 * ss, ss, hi);
    for (int j = 0; j < 8; ++j) {
        tp_stream8(d + j * ds, lo[j]);
        tp_stream8(d + j * ds + 8, hi[j]);
    }
}

/// When the destination does not start on a line, the line that starts at destination row c's
/// element `last` holds the end of row c (source rows [last, rows) of column c) and the start
/// of row c + 1 (source rows [0, first) of column c + 1). Built from those 16 source rows, it
/// is streamed like any other; only the first partial line, the last one and the seams past
/// the last whole 8-column block go through the cache.
QFORGE_KFN void stream_seams(const word* src, i64 rows, i64 cols, word* dst, stream_span sp) noexcept {
    const i64 tail = rows - sp.last;  // 16 - first
    i64 c = 0;
    for (; c + 8 < cols; c += 8) {
        tp_u32x8 a[16];
        for (i64 i = 0; i < 16; ++i) a[i] = tp_load8(i < tail ? src + (sp.last + i) * cols + c : src + (i - tail) * cols + c + 1);
        stream_lines16x8(a, dst + c * rows + sp.last, rows);
    }
    for (; c + 1 < cols; ++c) {
        for (i64 r = sp.last; r < rows; ++r) dst[c * rows + r] = src[r * cols + c];
        for (i64 r = 0; r < sp.first; ++r) dst[(c + 1) * rows + r] = src[r * cols + c + 1];
    }
    for (i64 r = 0; r < sp.first; ++r) dst[r] = src[r * cols];
    for (i64 r = sp.last; r < rows; ++r) dst[(cols - 1) * rows + r] = src[r * cols + cols - 1];
}

/// Source rows per pass: a pass gives each destination row one contiguous run of pass x 4
/// bytes, and reads pass rows per 8-column step. Measured on Zen 4 (AVX2, streaming stores,
/// tens of MB): runs of 64 B write at 60% of sequential speed, runs of 128 B and more at full
/// speed; but reading more than 16 rows per step (the two 8-column steps of a line then miss
/// L1) costs more than that gains unless the rows are short. Of 16, 32 and 64 rows, 64 won for
/// rows of 1 and 2 KB, 16 for long rows, except where the destination rows lie a multiple of
/// 512 bytes apart (rows % 128 == 0: GPTQ's [K/8][N] qweight whenever K is a multiple of 1024).
/// There the 64-byte runs of a pass fall into a few cache sets and 16 rows ran at 5.6 GB/s
/// (a multiple of 1 KB) or 10.5 (of 512 B), 32 rows at 9.4-17.7 (2026-12-04, 2-core Zen 4,
/// 4096- to 14336-word rows; 32 rows lost to 16 at every other stride tried).
inline i64 stream_pass_rows(i64 rows, i64 cols) noexcept {
    constexpr i64 budget = 128 * 1024;  // 64 rows of at most 2 KB
    if (64 * cols * 4 <= budget) return 64;
    return rows % 128 == 0 ? 32 : 16;
}

/// One pass of short rows (64 of them): the next pass's rows are one contiguous block,
/// prefetched in address order, spread over this pass's column steps.
QFORGE_KFN void stream_short_pass(const word* src, i64 cols, word* dst, i64 rows, i64 r0, i64 r1, i64 next_end,
                                  i64 col_end) noexcept {
    const char* next = reinterpret_cast<const char*>(src + r1 * cols);
    const i64 steps = col_end / 8, lines = (next_end - r1) * cols * 4 / 64, per_step = (lines + steps - 1) / steps;
    i64 issued = 0;
    for (i64 c = 0; c < col_end; c += 8) {
        for (i64 k = 0; k < per_step && issued < lines; ++k, ++issued) prefetch_read(next + 64 * issued);
        for (i64 r = r0; r < r1; r += 16) stream_block16x8(src + r * cols + c, cols, dst + c * rows + r, rows);
    }
}

/// One pass of long rows (16 of them): the next line of every source row prefetched a few
/// lines ahead.
QFORGE_KFN void stream_long_pass(const word* src, i64 cols, word* dst, i64 rows, i64 r0, i64 r1, i64 col_end) noexcept {
    constexpr i64 ahead = 64;  // words: four lines ahead of the loads
    for (i64 c = 0; c < col_end; c += 8) {
        if (c % 16 == 0 && c + ahead < cols)
            for (i64 r = r0; r < r1; ++r) prefetch_read(src + r * cols + c + ahead);
        for (i64 r = r0; r < r1; r += 16) stream_block16x8(src + r * cols + c, cols, dst + c * rows + r, rows);
    }
}

/// 16 x 8 blocks in passes of stream_pass_rows rows, the seams between destination rows
/// streamed too, the columns past the last whole block through the cache.
QFORGE_KFN void k_words_streamed(const word* src, i64 rows, i64 cols, word* dst) noexcept {
    const stream_span sp = stream_rows(dst, rows, cols);
    if (sp.first == sp.last) return k_words_tiled(src, rows, cols, dst);
    const i64 col_end = cols / 8 * 8, pass = stream_pass_rows(rows, cols);
    for (i64 r0 = sp.first; r0 < sp.last; r0 += pass) {
        const i64 r1 = sp.last < r0 + pass ? sp.last : r0 + pass;
        if (pass == 64) stream_short_pass(src, cols, dst, rows, r0, r1, sp.last < r1 + pass ? sp.last : r1 + pass, col_end);
        else stream_long_pass(src, cols, dst, rows, r0, r1, col_end);
    }
    if (sp.first > 0) stream_seams(src, rows, cols, dst, sp);
    tp_stream_fence();  // streaming stores are weakly ordered: publish them before the return
    strided(src + sp.first * cols + col_end, cols, sp.last - sp.first, cols - col_end, dst + col_end * rows + sp.first, rows);
}

QFORGE_KFN void k_words(const word* src, i64 rows, i64 cols, word* dst) noexcept {
    if (rows * cols * 4 < ::qforge::simd::transpose_stream_min_bytes) return k_words_tiled(src, rows, cols, dst);
    return k_words_streamed(src, rows, cols, dst);
}

// ---- 16-bit patterns ----------------------------------------------------------------------

QFORGE_KFN void k_patterns16(const std::byte* src, i64 rows, i64 cols, std::uint16_t* dst, std::ptrdiff_t ds) noexcept {
    const i64 r8 = rows / 8 * 8, c8 = cols / 8 * 8;
    for (i64 r = 0; r < r8; r += 8)
        for (i64 c = 0; c < c8; c += 8) tp_transpose8x8_u16(src + 2 * (r * cols + c), 2 * cols, dst + c * ds + r, ds);
    for (i64 r = 0; r < rows; ++r)  // the edges: columns past c8 of the first r8 rows, all of the rest
        for (i64 c = r < r8 ? c8 : 0; c < cols; ++c) {
            std::uint16_t v;
            std::memcpy(&v, src + 2 * (r * cols + c), 2);
            dst[c * ds + r] = v;
        }
}

// This ISA's table. AVX-512 takes the AVX2 instance's entries: compiled for AVX-512 the same
// 256-bit code ran the GPTQ -> compressed-tensors repack 5-10% slower (bench/repack.cpp on a
// Xeon), and 512-bit shuffles give a transpose of 64-byte lines nothing. A template so that
// the branch not taken is never instantiated (no AVX2 namespace exists on other targets).
template <class Avx2 = ::qforge::simd::avx2_tag>
inline transpose_kernels this_table() noexcept {
    if constexpr (QFORGE_KERNEL_ISA == ::qforge::simd::isa::avx512) {
        transpose_kernels t = ::qforge::simd::arch_of<Avx2>::template table<transpose_kernels>();
        t.id = QFORGE_KERNEL_ISA;
        return t;
    } else {
        return {QFORGE_KERNEL_ISA, &k_words, &k_words_tiled, &k_words_streamed, &k_patterns16};
    }
}

}  // namespace transpose_family

template <>
QFORGE_DECL const transpose_kernels& family_table<transpose_kernels>() noexcept {
    static const transpose_kernels t = transpose_family::this_table();
    return t;
}
