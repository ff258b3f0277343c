// The pack kernels (simd/pack_kernels.hpp): the scalar instance against a bit-by-bit
// definition, and every other ISA this machine runs (NEON under qemu) against the scalar
// instance's words, over random codes with bits above 4 set (they must be masked), many
// shapes and odd tails, with sentinels around every output.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "qforge/simd/pack_kernels.hpp"
#include "support/isas.hpp"

using namespace qforge::simd;

namespace {

std::vector<isa> pack_other_isas() { return qforge::testing::available_isas(qforge::testing::with_scalar::no); }

std::vector<std::uint8_t> random_bytes(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::uint8_t> c(n);
    for (auto& x : c) x = static_cast<std::uint8_t>(rng());
    return c;
}

constexpr std::uint32_t sentinel = 0xDEADBEEFu;
constexpr int awq_order[8] = {0, 2, 4, 6, 1, 3, 5, 7};

// word (r, c) of AWQ from the eight codes at p[awq_order[i] * stride].
std::uint32_t awq_word(const std::uint8_t* p, std::ptrdiff_t stride) {
    std::uint32_t w = 0;
    for (int i = 0; i < 8; ++i) w |= static_cast<std::uint32_t>(p[awq_order[i] * stride] & 0xF) << (4 * i);
    return w;
}

std::vector<std::uint32_t> run_pack4_rows(const pack_kernels& k, const std::vector<std::uint8_t>& codes, std::int64_t rows,
                                          std::int64_t cols, std::ptrdiff_t ds) {
    std::vector<std::uint32_t> out(static_cast<std::size_t>(((cols + 7) / 8) * ds + 4), sentinel);
    k.pack4_rows(codes.data(), rows, cols, out.data(), ds);
    return out;
}

std::vector<std::uint32_t> run_awq_transposed(const pack_kernels& k, const std::vector<std::uint8_t>& src, std::int64_t rows,
                                              std::int64_t cols) {
    std::vector<std::uint32_t> out(static_cast<std::size_t>(rows * cols / 8 + 4), sentinel);
    std::vector<std::uint32_t> tmp(static_cast<std::size_t>(8 * rows), 0x5A5A5A5Au);  // scratch: garbage on entry
    k.awq4_transposed(src.data(), rows, cols, out.data(), tmp.data());
    return out;
}

std::vector<std::uint32_t> run_awq_band(const pack_kernels& k, const std::vector<std::uint8_t>& src, std::int64_t rows,
                                        std::int64_t cols, std::ptrdiff_t ds) {
    std::vector<std::uint32_t> out(static_cast<std::size_t>(cols * ds + 4), sentinel);
    k.awq4_band(src.data(), rows, cols, out.data(), ds);
    return out;
}

}  // namespace

TEST_CASE("pack kernels: the table of each ISA names its ISA") {
    for (isa i : all_isas)
        if (available(i)) CHECK(kernels_of<pack_kernels>(i).id == i);
}

TEST_CASE("pack kernels: or_bytes is the OR of every byte on every ISA") {
    for (std::size_t n : {0u, 1u, 5u, 31u, 32u, 33u, 127u, 128u, 129u, 255u, 256u, 300u, 1000u, 4099u}) {
        CAPTURE(n);
        std::vector<std::uint8_t> c(n, 0x03);
        for (std::size_t at : {std::size_t{0}, n / 3, n / 2, n > 0 ? n - 1 : 0}) {
            if (n == 0) break;
            c[at] = 0x43;
            for (isa i : all_isas)
                if (available(i)) {
                    CAPTURE(isa_name(i));
                    CHECK(kernels_of<pack_kernels>(i).or_bytes(c.data(), n) == 0x43);
                }
            c[at] = 0x03;
        }
        for (isa i : all_isas)
            if (available(i)) CHECK(kernels_of<pack_kernels>(i).or_bytes(c.data(), n) == (n ? 0x03 : 0));
        const auto r = random_bytes(n, static_cast<std::uint32_t>(n));
        std::uint8_t want = 0;
        for (std::uint8_t b : r) want = static_cast<std::uint8_t>(want | (b & 0x0F));
        std::vector<std::uint8_t> low(r);
        for (auto& b : low) b &= 0x0F;
        for (isa i : all_isas)
            if (available(i)) CHECK(kernels_of<pack_kernels>(i).or_bytes(low.data(), n) == want);
    }
}

TEST_CASE("pack kernels: pack4_rows is the transposed dense 4-bit stream, identical on every ISA") {
    const auto& ref = kernels_of<pack_kernels>(isa::scalar);
    const auto others = pack_other_isas();
    for (std::int64_t rows : {1, 2, 3, 4, 5, 7, 8, 9, 12, 13, 15, 16})
        for (std::int64_t cols : {1, 7, 8, 13, 16, 24, 31, 32, 33, 40, 64, 96, 136, 264, 1000}) {
            CAPTURE(rows);
            CAPTURE(cols);
            const std::ptrdiff_t ds = rows + 3;
            const auto codes = random_bytes(static_cast<std::size_t>(rows * cols), static_cast<std::uint32_t>(rows * 977 + cols));
            const auto want = run_pack4_rows(ref, codes, rows, cols, ds);
            std::vector<std::uint32_t> def(want.size(), sentinel);
            for (std::int64_t r = 0; r < rows; ++r)
                for (std::int64_t w = 0; w < (cols + 7) / 8; ++w) {
                    std::uint32_t word = 0;
                    for (std::int64_t j = 0; j < 8 && 8 * w + j < cols; ++j)
                        word |= static_cast<std::uint32_t>(codes[static_cast<std::size_t>(r * cols + 8 * w + j)] & 0xF) << (4 * j);
                    def[static_cast<std::size_t>(w * ds + r)] = word;
                }
            REQUIRE(want == def);
            for (isa i : others) {
                CAPTURE(isa_name(i));
                CHECK(run_pack4_rows(kernels_of<pack_kernels>(i), codes, rows, cols, ds) == want);
            }
        }
}

TEST_CASE("pack kernels: awq4_transposed is the AWQ gather, identical on every ISA") {
    const auto& ref = kernels_of<pack_kernels>(isa::scalar);
    const auto others = pack_other_isas();
    for (std::int64_t rows : {8, 16, 24, 40, 64, 136, 200})
        for (std::int64_t cols : {8, 16, 56, 64, 72, 128, 200}) {
            CAPTURE(rows);
            CAPTURE(cols);
            const auto src = random_bytes(static_cast<std::size_t>(rows * cols), static_cast<std::uint32_t>(rows * 31 + cols));
            const auto want = run_awq_transposed(ref, src, rows, cols);
            std::vector<std::uint32_t> def(want.size(), sentinel);
            for (std::int64_t r = 0; r < rows; ++r)
                for (std::int64_t c = 0; c < cols / 8; ++c)
                    def[static_cast<std::size_t>(r * (cols / 8) + c)] = awq_word(src.data() + 8 * c * rows + r, rows);
            REQUIRE(want == def);
            for (isa i : others) {
                CAPTURE(isa_name(i));
                CHECK(run_awq_transposed(kernels_of<pack_kernels>(i), src, rows, cols) == want);
            }
        }
}

TEST_CASE("pack kernels: awq4_band writes the band's word columns only, identical on every ISA") {
    const auto& ref = kernels_of<pack_kernels>(isa::scalar);
    const auto others = pack_other_isas();
    for (std::int64_t rows : {8, 16, 24, 32, 40, 64, 104})
        for (std::int64_t cols : {1, 7, 8, 9, 13, 15, 16, 17, 45, 61, 64, 100}) {
            CAPTURE(rows);
            CAPTURE(cols);
            const std::ptrdiff_t ds = rows / 8 + 2;
            const auto src = random_bytes(static_cast<std::size_t>(rows * cols), static_cast<std::uint32_t>(rows * 131 + cols));
            const auto want = run_awq_band(ref, src, rows, cols, ds);
            std::vector<std::uint32_t> def(want.size(), sentinel);
            for (std::int64_t c = 0; c < cols; ++c)
                for (std::int64_t w = 0; w < rows / 8; ++w)
                    def[static_cast<std::size_t>(c * ds + w)] = awq_word(src.data() + 8 * w * cols + c, cols);
            REQUIRE(want == def);
            for (isa i : others) {
                CAPTURE(isa_name(i));
                CHECK(run_awq_band(kernels_of<pack_kernels>(i), src, rows, cols, ds) == want);
            }
        }
}

TEST_CASE("pack kernels: store_tile copies each tile row's first n words to its row of dst, and nothing else") {
    // 64 words (the constant-size copy), odd widths, and more rows than the kernel asks ahead
    for (std::int64_t n : {1, 3, 16, 63, 64}) {
        for (std::int64_t rows : {1, 5, 16, 17, 40}) {
            CAPTURE(n);
            CAPTURE(rows);
            const std::ptrdiff_t ts = 64, ds = 100;
            std::vector<std::uint32_t> tile(static_cast<std::size_t>(rows * ts));
            std::mt19937 rng(static_cast<std::uint32_t>(n * 131 + rows));
            for (auto& w : tile) w = static_cast<std::uint32_t>(rng());
            for (isa i : all_isas) {
                if (!available(i)) continue;
                CAPTURE(isa_name(i));
                std::vector<std::uint32_t> dst(static_cast<std::size_t>(rows * ds + 8), sentinel);
                kernels_of<pack_kernels>(i).store_tile(tile.data(), rows, ts, n, dst.data() + 3, ds);
                for (std::int64_t w = 0; w < rows; ++w)
                    for (std::int64_t j = 0; j < ds; ++j) {
                        const std::uint32_t want = j < n ? tile[static_cast<std::size_t>(w * ts + j)] : sentinel;
                        if (dst[static_cast<std::size_t>(3 + w * ds + j)] != want) FAIL("row " << w << " word " << j);
                    }
                for (std::size_t j = 0; j < 3; ++j) CHECK(dst[j] == sentinel);
                for (std::size_t j = static_cast<std::size_t>(3 + rows * ds); j < dst.size(); ++j) CHECK(dst[j] == sentinel);
            }
        }
    }
}
