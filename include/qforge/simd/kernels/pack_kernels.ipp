// Bit-packing kernels, written once over one ISA's integer primitives (vi128, pk_u8x32, pk_*,
// transpose4x4_u32 of simd/arch/<isa>.hpp); their contract is simd/pack_kernels.hpp.
//
// No include guard on purpose: simd/pack_kernels.hpp has simd/detail/instantiate.ipp compile
// it inside each ISA's namespace with QFORGE_KFN that ISA's target attribute + inline. Every
// operation is exact integer bit movement, so each ISA gives the scalar instance's words as
// long as its primitives match scalar.hpp's definitions (tests/simd/test_pack_kernels.cpp).
// Helpers and kernels live in pack_family so they never meet another family's names. No
// lambdas: a lambda would not inherit the target attribute its primitives need.

namespace pack_family {

// Nibble i of an AWQ word holds column 8c + awq_order[i] (pack_awq4's definition).
inline constexpr int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

QFORGE_KFN std::uint64_t load_u64(const std::uint8_t* p) noexcept {
    std::uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// ---- GPTQ: 4-bit rows, transposed ----

// 32 codes of one row -> its four dense words [w0 w1 w2 w3]: code pairs joined into bytes
// (c0 + 16 c1, the low nibble first), then the u16 lanes packed to bytes.
QFORGE_KFN vi128 row_words(const std::uint8_t* q) noexcept {
    const vi128 lo = pk_splat8(0x0F);
    return pk_packus16(pk_join_nibbles16(pk_and(pk_load16(q), lo)), pk_join_nibbles16(pk_and(pk_load16(q + 16), lo)));
}

// Both 16-code halves of a 32-code step as u16 pairs: per block, bytes 2i, 2i+1 -> c0 + 16 c1.
QFORGE_KFN pk_u8x32 row_pairs(const std::uint8_t* q) noexcept {
    return pk_join_nibbles16(pk_and(pk_load32(q), pk_splat8x32(0x0F)));
}

// Eight rows (p, stride cols), codes [k, k + 32) -> words k/8 .. k/8 + 3 of each row, stored
// as o[w * ds + 0..7]. One pack makes two rows' words ([A0 A1 B0 B1 | A2 A3 B2 B3]); two
// rounds of u32 interleaves and a block exchange transpose the 8 x 4 words.
QFORGE_KFN void rows8_step(const std::uint8_t* p, std::int64_t cols, std::int64_t k, std::uint32_t* o,
                           std::ptrdiff_t ds) noexcept {
    const pk_u8x32 ab = pk_packus16(row_pairs(p + k), row_pairs(p + cols + k));
    const pk_u8x32 cd = pk_packus16(row_pairs(p + 2 * cols + k), row_pairs(p + 3 * cols + k));
    const pk_u8x32 ef = pk_packus16(row_pairs(p + 4 * cols + k), row_pairs(p + 5 * cols + k));
    const pk_u8x32 gh = pk_packus16(row_pairs(p + 6 * cols + k), row_pairs(p + 7 * cols + k));
    const pk_u8x32 u1 = pk_zip32_lo(ab, cd), u2 = pk_zip32_hi(ab, cd);
    const pk_u8x32 v1 = pk_zip32_lo(ef, gh), v2 = pk_zip32_hi(ef, gh);
    const pk_u8x32 x0 = pk_zip32_lo(u1, u2), x1 = pk_zip32_hi(u1, u2);  // [w0 | w2], [w1 | w3] of A-D
    const pk_u8x32 y0 = pk_zip32_lo(v1, v2), y1 = pk_zip32_hi(v1, v2);  // same for E-H
    pk_store32(o, pk_low_blocks(x0, y0));
    pk_store32(o + ds, pk_low_blocks(x1, y1));
    pk_store32(o + 2 * ds, pk_high_blocks(x0, y0));
    pk_store32(o + 3 * ds, pk_high_blocks(x1, y1));
}

// Four rows, one 32-code step: each row's four words, 4x4 transposed into word rows.
QFORGE_KFN void rows4_step(const std::uint8_t* p, std::int64_t cols, std::int64_t k, std::uint32_t* o,
                           std::ptrdiff_t ds) noexcept {
    vi128 m0 = row_words(p + k), m1 = row_words(p + cols + k);
    vi128 m2 = row_words(p + 2 * cols + k), m3 = row_words(p + 3 * cols + k);
    transpose4x4_u32(m0, m1, m2, m3);
    pk_store16(o, m0);
    pk_store16(o + ds, m1);
    pk_store16(o + 2 * ds, m2);
    pk_store16(o + 3 * ds, m3);
}

// Codes [from, cols) of one row, eight a word (the last one zero-padded): the definition.
QFORGE_KFN void row_tail(const std::uint8_t* p, std::int64_t from, std::int64_t cols, std::uint32_t* o,
                         std::ptrdiff_t ds) noexcept {
    for (std::int64_t i = from; i < cols; i += 8) {
        std::uint32_t word = 0;
        for (std::int64_t j = 0; j < 8 && i + j < cols; ++j) word |= static_cast<std::uint32_t>(p[i + j] & 0xF) << (4 * j);
        o[(i / 8) * ds] = word;
    }
}

// ---- AWQ: 4-bit gathers ----

// Sixteen words of one AWQ word column from eight source rows (row j = column 8c + j of the
// words, at base + j * stride), sixteen positions each: q[i] = the words of positions 4i ..
// 4i+3. Nibble-merging the AWQ pairs (0|2, 4|6, 1|3, 5|7) and interleaving bytes, then u16
// lanes, lays each position's four bytes out as its word.
QFORGE_KFN vi128 nibble_pair(const std::uint8_t* lo_row, const std::uint8_t* hi_row) noexcept {
    const vi128 lo = pk_splat8(0x0F);
    return pk_or(pk_and(pk_load16(lo_row), lo), pk_shl16<4>(pk_and(pk_load16(hi_row), lo)));
}
QFORGE_KFN void words16(const std::uint8_t* base, std::ptrdiff_t stride, vi128* q) noexcept {
    const vi128 a = nibble_pair(base, base + 2 * stride), b = nibble_pair(base + 4 * stride, base + 6 * stride);
    const vi128 c = nibble_pair(base + stride, base + 3 * stride), d = nibble_pair(base + 5 * stride, base + 7 * stride);
    const vi128 ab0 = pk_zip8_lo(a, b), ab1 = pk_zip8_hi(a, b);
    const vi128 cd0 = pk_zip8_lo(c, d), cd1 = pk_zip8_hi(c, d);
    q[0] = pk_zip16_lo(ab0, cd0);
    q[1] = pk_zip16_hi(ab0, cd0);
    q[2] = pk_zip16_lo(ab1, cd1);
    q[3] = pk_zip16_hi(ab1, cd1);
}

// Eight positions of one word column from eight source rows of eight codes (SWAR): the
// nibble-merged pairs leave four u64 whose byte t is byte 0..3 of word t; a 4x8 byte
// transpose (two swap stages) lays out the words, written at o[t * ostride].
QFORGE_KFN void gather8(const std::uint8_t* p, std::ptrdiff_t stride, std::uint32_t* o, std::ptrdiff_t ostride) noexcept {
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
    const std::uint64_t pairs[4] = {a, b, c, d};
    for (int t4 = 0; t4 < 4; ++t4) {
        o[t4 * ostride] = static_cast<std::uint32_t>(pairs[t4]);
        o[(t4 + 4) * ostride] = static_cast<std::uint32_t>(pairs[t4] >> 32);
    }
}

// One AWQ word from the codes at p[awq_order[i] * stride]: the definition, one nibble at a time.
QFORGE_KFN std::uint32_t word1(const std::uint8_t* p, std::ptrdiff_t stride) noexcept {
    std::uint32_t word = 0;
    for (int i = 0; i < 8; ++i) word |= static_cast<std::uint32_t>(p[awq_order[i] * stride] & 0xF) << (4 * i);
    return word;
}

// Four vectors of words (m[i] = positions 4i.. of word columns 0..3 as rows) 4x4 transposed
// so each position gets its four words in one 16-byte store at o + position * ds.
QFORGE_KFN void store_transposed(vi128 m0, vi128 m1, vi128 m2, vi128 m3, std::uint32_t* o, std::ptrdiff_t ds) noexcept {
    transpose4x4_u32(m0, m1, m2, m3);
    pk_store16(o, m0);
    pk_store16(o + ds, m1);
    pk_store16(o + 2 * ds, m2);
    pk_store16(o + 3 * ds, m3);
}

// ---- the kernels ----

QFORGE_KFN std::uint8_t k_or_bytes(const std::uint8_t* c, std::size_t n) noexcept {
    const pk_u8x32 zero = pk_splat8x32(0);
    pk_u8x32 a0 = zero, a1 = zero, a2 = zero, a3 = zero;
    std::size_t i = 0;
    for (; i + 128 <= n; i += 128) {  // four accumulators: loads, not the OR chain, set the pace
        a0 = pk_or(a0, pk_load32(c + i));
        a1 = pk_or(a1, pk_load32(c + i + 32));
        a2 = pk_or(a2, pk_load32(c + i + 64));
        a3 = pk_or(a3, pk_load32(c + i + 96));
    }
    std::uint8_t any = pk_or_reduce(pk_or(pk_or(a0, a1), pk_or(a2, a3)));
    for (; i < n; ++i) any = static_cast<std::uint8_t>(any | c[i]);
    return any;
}

// Rows in steps of 8, then 4, then 1, each over the whole 32-code steps of the row (sequential
// reads); the columns past the last whole step through the definition.
QFORGE_KFN void k_pack4_rows(const std::uint8_t* codes, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                             std::ptrdiff_t ds) noexcept {
    const std::int64_t bulk = cols / 32 * 32;
    std::int64_t r = 0;
    for (; r + 8 <= rows; r += 8)
        for (std::int64_t k = 0; k < bulk; k += 32) rows8_step(codes + r * cols, cols, k, dst + (k / 8) * ds + r, ds);
    for (; r + 4 <= rows; r += 4)
        for (std::int64_t k = 0; k < bulk; k += 32) rows4_step(codes + r * cols, cols, k, dst + (k / 8) * ds + r, ds);
    for (; r < rows; ++r)
        for (std::int64_t k = 0; k < bulk; k += 32) {
            std::uint32_t w[4];
            pk_store16(w, row_words(codes + r * cols + k));
            for (std::int64_t j = 0; j < 4; ++j) dst[(k / 8 + j) * ds + r] = w[j];
        }
    for (std::int64_t rr = 0; rr < rows; ++rr) row_tail(codes + rr * cols, bulk, cols, dst + rr, ds);
}

// Eight output columns' worth of source rows are read in order into tmp [8][rows] (sixteen
// positions a step through words16, a tail of eight through gather8), then 4x4 transposes
// give each output row 32 contiguous bytes. Writing each word straight to its row instead
// stores to addresses cols/2 bytes apart.
QFORGE_KFN void k_awq4_transposed(const std::uint8_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                                  std::uint32_t* tmp) noexcept {
    constexpr std::int64_t block = 8;
    const std::int64_t words = cols / 8;
    for (std::int64_t c0 = 0; c0 < words; c0 += block) {
        const std::int64_t nb = words - c0 < block ? words - c0 : block;
        for (std::int64_t cb = 0; cb < nb; ++cb) {
            const std::uint8_t* base = src + 8 * (c0 + cb) * rows;
            std::uint32_t* t = tmp + cb * rows;
            std::int64_t r = 0;
            for (; r + 16 <= rows; r += 16) {
                vi128 q[4];
                words16(base + r, rows, q);
                for (int j = 0; j < 4; ++j) pk_store16(t + r + 4 * j, q[j]);
            }
            for (; r < rows; r += 8) gather8(base + r, rows, t + r, 1);
        }
        if (nb == block) {
            for (std::int64_t r = 0; r < rows; r += 4)
                for (std::int64_t half = 0; half < block; half += 4) {
                    const std::uint32_t* t = tmp + half * rows + r;
                    store_transposed(pk_load16(t), pk_load16(t + rows), pk_load16(t + 2 * rows),
                                                  pk_load16(t + 3 * rows), dst + r * words + c0 + half, words);
                }
        } else {
            for (std::int64_t r = 0; r < rows; ++r)
                for (std::int64_t cb = 0; cb < nb; ++cb) dst[r * words + c0 + cb] = tmp[cb * rows + r];
        }
    }
}

// Sixteen columns a step: words16 makes sixteen words of one word column, and four word
// columns are 4x4 transposed so each column's four words go out in one 16-byte store, straight
// into the whole weight (a 32-row band is exactly four word columns). Leftover word columns
// one word a store, leftover columns eight (gather8), then one at a time.
QFORGE_KFN void k_awq4_band(const std::uint8_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst,
                            std::ptrdiff_t ds) noexcept {
    const std::int64_t words = rows / 8;
    std::int64_t c = 0;
    for (; c + 16 <= cols; c += 16) {
        std::int64_t w = 0;
        for (; w + 4 <= words; w += 4) {
            vi128 q[4][4];
            for (int i = 0; i < 4; ++i) words16(src + 8 * (w + i) * cols + c, cols, q[i]);
            for (int j = 0; j < 4; ++j)
                store_transposed(q[0][j], q[1][j], q[2][j], q[3][j], dst + (c + 4 * j) * ds + w, ds);
        }
        for (; w < words; ++w) {  // rows % 32 != 0: the last band's odd word columns
            std::uint32_t t[16];
            vi128 q[4];
            words16(src + 8 * w * cols + c, cols, q);
            for (int j = 0; j < 4; ++j) pk_store16(t + 4 * j, q[j]);
            for (int j = 0; j < 16; ++j) dst[(c + j) * ds + w] = t[j];
        }
    }
    for (; c + 8 <= cols; c += 8)
        for (std::int64_t w = 0; w < words; ++w) gather8(src + 8 * w * cols + c, cols, dst + c * ds + w, ds);
    for (; c < cols; ++c)
        for (std::int64_t w = 0; w < words; ++w) dst[c * ds + w] = word1(src + 8 * w * cols + c, cols);
}

// Sixteen rows ahead (each a 256-byte segment of GPTQ's 64-row tile): RTN + GPTQ pack on a
// 4096 x 11008 weight 1.29-1.34 -> 1.52-1.56 G weights/s (AVX2, 2-core Sapphire Rapids class
// VM, 2026-12-07; 4 and 8 rows ahead gained less, 32 no more). A 64-word row copies as a
// constant size, which compiles to a few vector moves.
inline constexpr std::int64_t store_tile_ahead = 16;
QFORGE_KFN void k_store_tile(const std::uint32_t* tile, std::int64_t rows, std::ptrdiff_t ts, std::int64_t n,
                             std::uint32_t* dst, std::ptrdiff_t ds) noexcept {
    const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(std::uint32_t);
    for (std::int64_t w = 0; w < rows; ++w) {
        if (w + store_tile_ahead < rows) prefetch_lines(dst + (w + store_tile_ahead) * ds, 0, bytes);
        if (n == 64) std::memcpy(dst + w * ds, tile + w * ts, 64 * sizeof(std::uint32_t));
        else std::memcpy(dst + w * ds, tile + w * ts, bytes);
    }
}

}  // namespace pack_family

template <>
QFORGE_DECL const pack_kernels& family_table<pack_kernels>() noexcept {
    static constexpr pack_kernels table{QFORGE_KERNEL_ISA, &pack_family::k_or_bytes, &pack_family::k_pack4_rows,
                                        &pack_family::k_awq4_transposed, &pack_family::k_awq4_band,
                                        &pack_family::k_store_tile};
    return table;
}
