// The transpose family (simd/transpose_kernels.hpp): every entry of every ISA this machine can
// run (NEON under qemu in scripts/test.sh) writes the bytes of the scalar definition, which
// are those of a plain loop, on odd shapes and at every word offset within a cache line,
// without touching a word around the destination.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "qforge/simd/transpose_kernels.hpp"
#include "support/isas.hpp"

using namespace qforge::simd;

namespace {

std::vector<isa> transpose_isas() { return qforge::testing::available_isas(); }

using words_fn = void (*)(const std::uint32_t*, std::int64_t, std::int64_t, std::uint32_t*) noexcept;

constexpr std::uint32_t guard = 0xDEADBEEFu;

/// f's output for rows x cols at word offset `shift` of a 64-byte line, with 8 + shift guard
/// words before and 16 - shift after (the whole buffer, for comparison).
std::vector<std::uint32_t> run_words(words_fn f, const std::vector<std::uint32_t>& src, std::int64_t rows, std::int64_t cols,
                                     std::size_t shift) {
    std::vector<std::uint32_t> buf(src.size() + 40, guard);
    std::size_t base = 0;  // the first word of buf that starts a line
    while (reinterpret_cast<std::uintptr_t>(buf.data() + base) % 64 != 0) ++base;
    f(src.data(), rows, cols, buf.data() + base + 8 + shift);
    return std::vector<std::uint32_t>(buf.begin() + static_cast<std::ptrdiff_t>(base), buf.begin() + static_cast<std::ptrdiff_t>(base + src.size() + 24));
}

/// A plain loop's result in run_words' buffer layout.
std::vector<std::uint32_t> expected_words(const std::vector<std::uint32_t>& src, std::int64_t rows, std::int64_t cols, std::size_t shift) {
    std::vector<std::uint32_t> out(src.size() + 24, guard);
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c)
            out[8 + shift + static_cast<std::size_t>(c * rows + r)] = src[static_cast<std::size_t>(r * cols + c)];
    return out;
}

std::vector<std::uint32_t> source_words(std::int64_t rows, std::int64_t cols) {
    std::vector<std::uint32_t> src(static_cast<std::size_t>(rows * cols));
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint32_t>(i * 2654435761u + 12345u);
    return src;
}

// Shapes that reach every branch: too small to stream, rows % 16 != 0 (tiled), columns past
// the last 8-column block, passes of 64 rows (rows of at most 2 KB) with a short last pass,
// passes of 16 rows (longer rows), seams wider and narrower than 8 columns.
const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
    {1, 1},   {3, 7},   {16, 40},  {17, 33}, {32, 3},   {32, 8},  {32, 9},  {48, 17},  {64, 8},   {64, 36},
    {80, 100}, {96, 7}, {128, 64}, {144, 13}, {208, 31}, {300, 5}, {33, 200}, {32, 515}, {48, 600}, {96, 520}};

}  // namespace

TEST_CASE("transpose kernels: words, words_tiled and words_streamed of every ISA write the scalar bytes") {
    const transpose_kernels& ref = kernels_of<transpose_kernels>(isa::scalar);
    for (const auto& shape : shapes) {
        const std::int64_t rows = shape.first, cols = shape.second;
        const std::vector<std::uint32_t> src = source_words(rows, cols);
        for (std::size_t shift = 0; shift < 16; ++shift) {
            const std::vector<std::uint32_t> want = expected_words(src, rows, cols, shift);
            CAPTURE(rows);
            CAPTURE(cols);
            CAPTURE(shift);
            REQUIRE(run_words(ref.words_streamed, src, rows, cols, shift) == want);
            REQUIRE(run_words(ref.words_tiled, src, rows, cols, shift) == want);
            for (isa i : transpose_isas()) {
                CAPTURE(std::string(isa_name(i)));
                const transpose_kernels& k = kernels_of<transpose_kernels>(i);
                CHECK(k.id == i);
                CHECK(run_words(k.words, src, rows, cols, shift) == want);
                CHECK(run_words(k.words_tiled, src, rows, cols, shift) == want);
                CHECK(run_words(k.words_streamed, src, rows, cols, shift) == want);
            }
        }
    }
}

TEST_CASE("transpose kernels: words() streams large matrices, with the bytes of the tiled path") {
    // 2 MB: past transpose_stream_min_bytes; rows of 8 KB (passes of 16 rows) and of 1 KB (64).
    for (const auto& shape : std::vector<std::pair<std::int64_t, std::int64_t>>{{256, 2048 + 8}, {2048, 260}}) {
        const std::int64_t rows = shape.first, cols = shape.second;
        REQUIRE(rows * cols * 4 >= transpose_stream_min_bytes);
        const std::vector<std::uint32_t> src = source_words(rows, cols);
        for (std::size_t shift : {0, 5}) {
            const std::vector<std::uint32_t> want = expected_words(src, rows, cols, shift);
            for (isa i : transpose_isas()) {
                CAPTURE(std::string(isa_name(i)));
                CHECK(run_words(kernels_of<transpose_kernels>(i).words, src, rows, cols, shift) == want);
            }
        }
    }
}

TEST_CASE("transpose kernels: 16-bit patterns from any byte offset into rows any distance apart, every ISA") {
    for (const auto& shape :
         std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {7, 9}, {8, 8}, {16, 24}, {9, 100}, {33, 17}, {32, 344}, {40, 8}}) {
        const std::int64_t rows = shape.first, cols = shape.second;
        for (std::size_t offset : {0, 1, 2, 6})
            for (std::int64_t extra : {0, 3, 64}) {  // 0: a whole transpose; else a band into a wider matrix
                CAPTURE(rows);
                CAPTURE(cols);
                CAPTURE(offset);
                CAPTURE(extra);
                const std::int64_t ds = rows + extra;
                std::vector<std::byte> raw(static_cast<std::size_t>(rows * cols) * 2 + offset);
                for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::byte>(i * 37u + 11u);
                const std::byte* src = raw.data() + offset;
                std::vector<std::uint16_t> want(static_cast<std::size_t>(ds * cols) + 8, 0xBEEF);  // the gaps stay
                for (std::int64_t r = 0; r < rows; ++r)
                    for (std::int64_t c = 0; c < cols; ++c)
                        std::memcpy(&want[static_cast<std::size_t>(c * ds + r)], src + 2 * (r * cols + c), 2);
                for (isa i : transpose_isas()) {
                    CAPTURE(std::string(isa_name(i)));
                    std::vector<std::uint16_t> dst(want.size(), 0xBEEF);
                    kernels_of<transpose_kernels>(i).patterns16(src, rows, cols, dst.data(), ds);
                    CHECK(dst == want);
                }
            }
    }
}

TEST_CASE("transpose kernels: kernels_of records the ISA and refuses an unavailable one") {
    if (available(isa::avx512)) {  // AVX-512 runs the AVX2 instance
        const transpose_kernels &a = kernels_of<transpose_kernels>(isa::avx512), &b = kernels_of<transpose_kernels>(isa::avx2);
        const bool same = a.words == b.words && a.words_tiled == b.words_tiled && a.words_streamed == b.words_streamed &&
                          a.patterns16 == b.patterns16;
        CHECK(same);
    }
    forget_last_isa<transpose_kernels>();
    CHECK_FALSE(last_isa_of<transpose_kernels>().has_value());
    CHECK(kernels_of<transpose_kernels>(isa::scalar).id == isa::scalar);
    CHECK(last_isa_of<transpose_kernels>() == isa::scalar);
    for (isa i : all_isas) {
        if (available(i)) {
            CHECK(kernels_of<transpose_kernels>(i).id == i);
            CHECK(last_isa_of<transpose_kernels>() == i);
        } else {
            CHECK_THROWS_WITH_AS(kernels_of<transpose_kernels>(i), doctest::Contains("transpose kernels is not available"),
                                 qforge::unsupported_error);
        }
    }
}
