// The packing kernels against a bit-by-bit definition and the hand-computed words of
// formats.md (2.2, 2.3, 3, 4.3).
#include <algorithm>
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "qforge/layout/detail/pack_bits.hpp"

using namespace qforge::detail;

namespace {

// The definition: element i's bit j is bit i*b + j of the stream.
std::vector<std::uint32_t> reference_dense(const std::vector<std::uint8_t>& codes, int bits) {
    std::vector<std::uint32_t> w(static_cast<std::size_t>(dense_words(static_cast<std::int64_t>(codes.size()), bits)), 0);
    for (std::size_t i = 0; i < codes.size(); ++i)
        for (int j = 0; j < bits; ++j)
            if ((codes[i] >> j) & 1) {
                const std::size_t bit = i * static_cast<std::size_t>(bits) + static_cast<std::size_t>(j);
                w[bit / 32] |= 1u << (bit % 32);
            }
    return w;
}

std::vector<std::uint32_t> reference_padded(const std::vector<std::uint8_t>& codes, int bits) {
    const std::size_t per = static_cast<std::size_t>(32 / bits);
    std::vector<std::uint32_t> w((codes.size() + per - 1) / per, 0);
    for (std::size_t i = 0; i < codes.size(); ++i)
        w[i / per] |= static_cast<std::uint32_t>(codes[i]) << (static_cast<std::size_t>(bits) * (i % per));
    return w;
}

std::vector<std::uint8_t> seeded(std::size_t n, int bits, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::uint8_t> c(n);
    for (auto& x : c) x = static_cast<std::uint8_t>(rng() & ((1u << bits) - 1));
    return c;
}

}  // namespace

TEST_CASE("dense and padded packing match the bit-by-bit definition for every width and length") {
    for (int bits = 2; bits <= 8; ++bits) {
        for (std::size_t n : {0u, 1u, 3u, 7u, 8u, 15u, 16u, 17u, 31u, 32u, 33u, 95u, 96u, 127u, 129u, 200u}) {
            CAPTURE(bits);
            CAPTURE(n);
            const auto codes = seeded(n, bits, static_cast<std::uint32_t>(bits * 1000 + n));
            const auto want = reference_dense(codes, bits);
            std::vector<std::uint32_t> got(want.size() + 1, 0xDEADBEEF);
            pack_dense(codes.data(), 1, static_cast<std::int64_t>(n), bits, got.data(), 1);
            CHECK(std::vector<std::uint32_t>(got.begin(), got.end() - 1) == want);
            CHECK(got.back() == 0xDEADBEEF);  // never writes past the stream
            std::vector<std::uint8_t> back(n);
            unpack_dense(want.data(), 1, static_cast<std::int64_t>(n), bits, back.data(), 1);
            CHECK(back == codes);

            const auto want_p = reference_padded(codes, bits);
            std::vector<std::uint32_t> got_p(want_p.size());
            pack_padded(codes.data(), 1, static_cast<std::int64_t>(n), bits, got_p.data(), 1);
            CHECK(got_p == want_p);
            unpack_padded(want_p.data(), 1, static_cast<std::int64_t>(n), bits, back.data(), 1);
            CHECK(back == codes);
            CHECK_FALSE(padded_has_stray_bits(want_p.data(), 1, static_cast<std::int64_t>(n), bits));
            CHECK_FALSE(dense_has_stray_bits(want.data(), 1, static_cast<std::int64_t>(n), bits));
        }
    }
}

TEST_CASE("strided packing reads and writes columns") {
    // A [5][40] matrix packed down its columns (stride 40 in, stride 40 out) equals packing
    // each column gathered by hand.
    for (int bits : {3, 4, 6}) {
        const auto m = seeded(5 * 40, bits, 7u + static_cast<std::uint32_t>(bits));
        const std::int64_t words = dense_words(5, bits);
        std::vector<std::uint32_t> out(static_cast<std::size_t>(words * 40));
        for (int c = 0; c < 40; ++c) pack_dense(m.data() + c, 40, 5, bits, out.data() + c, 40);
        for (int c = 0; c < 40; ++c) {
            std::vector<std::uint8_t> col;
            for (int r = 0; r < 5; ++r) col.push_back(m[static_cast<std::size_t>(r * 40 + c)]);
            const auto want = reference_dense(col, bits);
            for (std::int64_t w = 0; w < words; ++w) CHECK(out[static_cast<std::size_t>(w * 40 + c)] == want[static_cast<std::size_t>(w)]);
        }
    }
}

TEST_CASE("codes above the bit width never leak into a neighbour's field") {
    std::vector<std::uint8_t> codes(32, 0xFF);
    codes[1] = 0;
    for (int bits = 2; bits <= 8; ++bits) {
        std::vector<std::uint32_t> w(static_cast<std::size_t>(dense_words(32, bits)));
        pack_dense(codes.data(), 1, 32, bits, w.data(), 1);
        std::vector<std::uint8_t> back(32);
        unpack_dense(w.data(), 1, 32, bits, back.data(), 1);
        CHECK(back[1] == 0);
        CHECK(back[0] == (1u << bits) - 1);
    }
}

TEST_CASE("formats.md 4.3 worked example: 32 codes 0..7 repeated, 3 bits") {
    std::vector<std::uint8_t> codes(32);
    for (int i = 0; i < 32; ++i) codes[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(i % 8);
    std::vector<std::uint32_t> dense(3), padded(4);
    pack_dense(codes.data(), 1, 32, 3, dense.data(), 1);
    pack_padded(codes.data(), 1, 32, 3, padded.data(), 1);
    CHECK(dense == std::vector<std::uint32_t>{0x88fac688u, 0xc688fac6u, 0xfac688fau});
    CHECK(padded == std::vector<std::uint32_t>{0x08fac688u, 0x1a23eb1au, 0x2c688facu, 0x3eu});
}

TEST_CASE("GPTQ 3-bit 10|1|10|1|10 pattern (formats.md 2.2) is the dense stream") {
    const auto q = seeded(32, 3, 99);
    std::uint32_t w0 = 0, w1 = 0, w2 = 0;
    for (int j = 0; j < 10; ++j) w0 |= static_cast<std::uint32_t>(q[static_cast<std::size_t>(j)]) << (3 * j);
    w0 |= static_cast<std::uint32_t>(q[10]) << 30;
    w1 = (q[10] >> 2) & 1u;
    for (int j = 0; j < 10; ++j) w1 |= static_cast<std::uint32_t>(q[static_cast<std::size_t>(11 + j)]) << (3 * j + 1);
    w1 |= static_cast<std::uint32_t>(q[21]) << 31;
    w2 = (q[21] >> 1) & 3u;
    for (int j = 0; j < 10; ++j) w2 |= static_cast<std::uint32_t>(q[static_cast<std::size_t>(22 + j)]) << (3 * j + 2);
    std::vector<std::uint32_t> got(3);
    pack_dense(q.data(), 1, 32, 3, got.data(), 1);
    CHECK(got == std::vector<std::uint32_t>{w0, w1, w2});
}

TEST_CASE("symmetric qzeros constants of formats.md 2.3") {
    // One group of 32 columns, every zero the same: v1 stores zero-1, v2 the zero.
    auto words_of = [](int bits, std::uint8_t field) {
        std::vector<std::uint8_t> z(32, field);
        std::vector<std::uint32_t> w(static_cast<std::size_t>(dense_words(32, bits)));
        pack_dense(z.data(), 1, 32, bits, w.data(), 1);
        return w;
    };
    CHECK(words_of(4, 7)[0] == 0x77777777u);
    CHECK(words_of(4, 8)[0] == 0x88888888u);
    CHECK(static_cast<std::int32_t>(words_of(4, 7)[0]) == 2004318071);
    CHECK(static_cast<std::int32_t>(words_of(4, 8)[0]) == -2004318072);
    CHECK(words_of(8, 127)[0] == 0x7F7F7F7Fu);
    CHECK(words_of(8, 128)[0] == 0x80808080u);
    CHECK(words_of(2, 1)[0] == 0x55555555u);
    CHECK(words_of(2, 2)[0] == 0xAAAAAAAAu);
    CHECK(words_of(3, 3) == std::vector<std::uint32_t>{0xDB6DB6DBu, 0xB6DB6DB6u, 0x6DB6DB6Du});
    CHECK(words_of(3, 4) == std::vector<std::uint32_t>{0x24924924u, 0x49249249u, 0x92492492u});
}

TEST_CASE("AWQ interleave: nibble i holds column order[i]") {
    std::vector<std::uint8_t> row{0, 1, 2, 3, 4, 5, 6, 7, 15, 14, 13, 12, 11, 10, 9, 8};
    std::vector<std::uint32_t> w(2);
    pack_awq4(row.data(), 16, 1, 1, 16, w.data());
    CHECK(w[0] == 0x75316420u);
    CHECK(w[1] == 0x8ACE9BDFu);
    // The same through the transposed (gathering) path: a [16][1] column source.
    std::vector<std::uint32_t> t(2);
    pack_awq4(row.data(), 1, 1 + 0, 1, 16, t.data());  // col stride 1 takes the fast path
    CHECK(t == w);
    std::vector<std::uint8_t> col2(32);  // [16 rows][2 cols]; column 1 holds `row`
    for (int i = 0; i < 16; ++i) col2[static_cast<std::size_t>(2 * i + 1)] = row[static_cast<std::size_t>(i)];
    std::vector<std::uint32_t> g(4);
    pack_awq4(col2.data(), 1, 2, 2, 16, g.data());  // output rows = the 2 columns
    CHECK(g[2] == 0x75316420u);
    CHECK(g[3] == 0x8ACE9BDFu);
    std::vector<std::uint8_t> back(16);
    unpack_awq4(w.data(), 1, 16, back.data(), 16, 1);
    CHECK(back == row);
    for (int j = 0; j < 8; ++j) CHECK(awq_order[awq_slot[j]] == j);
}

TEST_CASE("stray bits are found in padded and dense words") {
    std::vector<std::uint32_t> padded{0x3FFFFFFFu | 0x40000000u};  // 3-bit: 10 fields, bit 30 stray
    CHECK(padded_has_stray_bits(padded.data(), 1, 10, 3));
    std::vector<std::uint32_t> dense{0xFFFFFFFFu};  // 3 codes of 4 bits use 12 bits
    CHECK(dense_has_stray_bits(dense.data(), 1, 3, 4));
    CHECK_FALSE(dense_has_stray_bits(dense.data(), 1, 8, 4));
}

TEST_CASE("tiled transposed packers equal the strided definition (GPTQ qweight, AWQ gather)") {
    for (int bits : {2, 3, 4, 8}) {
        for (const auto& dims : {std::pair<std::int64_t, std::int64_t>{1, 32}, {17, 96}, {33, 544}, {40, 288}, {13, 40}, {9, 8}, {12, 72}}) {
            const std::int64_t rows = dims.first, cols = dims.second;
            CAPTURE(bits);
            CAPTURE(rows);
            CAPTURE(cols);
            const auto codes = seeded(static_cast<std::size_t>(rows * cols), bits, static_cast<std::uint32_t>(rows + cols + bits));
            const std::int64_t words = dense_words(cols, bits);
            std::vector<std::uint32_t> want(static_cast<std::size_t>(words * rows)), got(want.size());
            for (std::int64_t r = 0; r < rows; ++r) pack_dense(codes.data() + r * cols, 1, cols, bits, want.data() + r, rows);
            pack_dense_transposed(codes.data(), rows, cols, bits, got.data());
            CHECK(got == want);
            std::vector<std::uint8_t> back(codes.size());
            unpack_dense_transposed(got.data(), rows, cols, bits, back.data());
            CHECK(back == codes);
        }
    }
    // AWQ: source codes [N][K], output [K][N/8]; the SWAR gather against one nibble at a time.
    for (const auto& dims : {std::pair<std::int64_t, std::int64_t>{8, 8}, {24, 13}, {136, 70}, {64, 1}}) {
        const std::int64_t n = dims.first, k = dims.second;
        CAPTURE(n);
        CAPTURE(k);
        const auto codes = seeded(static_cast<std::size_t>(n * k), 4, static_cast<std::uint32_t>(n * k));
        std::vector<std::uint32_t> want(static_cast<std::size_t>(k * n / 8), 0), got(want.size());
        for (std::int64_t kk = 0; kk < k; ++kk)
            for (std::int64_t c = 0; c < n / 8; ++c)
                for (int i = 0; i < 8; ++i)
                    want[static_cast<std::size_t>(kk * (n / 8) + c)] |=
                        static_cast<std::uint32_t>(codes[static_cast<std::size_t>((8 * c + awq_order[i]) * k + kk)]) << (4 * i);
        pack_awq4(codes.data(), 1, k, k, n, got.data());
        CHECK(got == want);
        std::vector<std::uint8_t> back(codes.size());
        unpack_awq4(got.data(), k, n, back.data(), 1, k);
        CHECK(back == codes);
    }
}

TEST_CASE("AWQ SSE2 gather is byte-identical to the scalar path") {
    for (const auto& dims : {std::pair<std::int64_t, std::int64_t>{64, 64}, {72, 40}, {136, 24}, {8, 8}, {200, 48}}) {
        const std::int64_t n = dims.first, k = dims.second;  // codes [n][k]; output [k][n/8]
        CAPTURE(n);
        CAPTURE(k);
        const auto codes = seeded(static_cast<std::size_t>(n * k), 4, static_cast<std::uint32_t>(3 * n + k));
        std::vector<std::uint32_t> fast(static_cast<std::size_t>(k * n / 8)), scalar(fast.size());
        pack_awq4(codes.data(), 1, k, k, n, fast.data(), true);
        pack_awq4(codes.data(), 1, k, k, n, scalar.data(), false);
        CHECK(fast == scalar);
    }
}

TEST_CASE("GPTQ 4-bit SIMD row packers (AVX2 8 rows, SSE2 4 rows) are byte-identical to the scalar path") {
    // Shapes exercise 8-row AVX2 steps, 4-row SSE2 leftovers, single rows, and columns that are
    // not a multiple of the 32-code step; codes above 15 must be masked the same way.
    for (const auto& dims : {std::pair<std::int64_t, std::int64_t>{64, 64}, {13, 40}, {4, 32}, {37, 136}, {8, 8},
                             {31, 1000}, {16, 2048}, {29, 264}}) {
        const std::int64_t rows = dims.first, cols = dims.second;
        CAPTURE(rows);
        CAPTURE(cols);
        const auto codes = seeded(static_cast<std::size_t>(rows * cols), 4, static_cast<std::uint32_t>(rows * 7 + cols));
        std::vector<std::uint32_t> fast(static_cast<std::size_t>(dense_words(cols, 4) * rows)), scalar(fast.size());
        pack_dense_transposed(codes.data(), rows, cols, 4, fast.data(), true);
        pack_dense_transposed(codes.data(), rows, cols, 4, scalar.data(), false);
        CHECK(fast == scalar);
    }
}

TEST_CASE("GPTQ transposed packing into a wider matrix: bands with dst_stride equal the whole") {
    const std::int64_t rows = 72, cols = 96;
    const auto codes = seeded(static_cast<std::size_t>(rows * cols), 4, 4711);
    std::vector<std::uint32_t> whole(static_cast<std::size_t>(dense_words(cols, 4) * rows)), banded(whole.size());
    pack_dense_transposed(codes.data(), rows, cols, 4, whole.data());
    for (std::int64_t r0 = 0; r0 < rows; r0 += 32) {
        const std::int64_t nr = std::min<std::int64_t>(32, rows - r0);
        pack_dense_transposed(codes.data() + r0 * cols, nr, cols, 4, banded.data() + r0, true, rows);
    }
    CHECK(banded == whole);
}

TEST_CASE("or_bytes is the OR of every byte, at any length and any position of the set bit") {
    // validate_fast's range test rests on it: one stray high bit anywhere must show.
    std::vector<std::uint8_t> codes(1000, 0x05);
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{127}, std::size_t{128},
                          std::size_t{129}, std::size_t{300}, std::size_t{1000}}) {
        CHECK(or_bytes(codes.data(), n) == (n ? 0x05 : 0));
        for (std::size_t at = 0; at < n; at += 7) {
            codes[at] = 0x85;
            CHECK(or_bytes(codes.data(), n) == 0x85);
            codes[at] = 0x05;
        }
    }
}
