// The packers of layout/detail/ on every ISA this machine runs (NEON under qemu) give the
// scalar ISA's words, for every bit count and odd shapes; and a layout packs on the ISA its
// caller asks for, which the pack family's record proves (QFORGE_FORCE_ISA=scalar is the
// active_isa() case of the same path).
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "layout/layout_test_support.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/detail/pack_band.hpp"
#include "qforge/layout/detail/pack_bits.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/layout/quantize_packed.hpp"
#include "qforge/quant/quantize.hpp"
#include "qforge/simd/pack_kernels.hpp"
#include "support/synthetic.hpp"

using namespace qforge;

namespace {

std::vector<simd::isa> vector_isas() {
    std::vector<simd::isa> out;
    for (simd::isa i : simd::all_isas) {
        if (i == simd::isa::scalar) continue;
        if (simd::available(i)) out.push_back(i);
        else MESSAGE("skipped: " << simd::isa_name(i) << " not available on this CPU");
    }
    return out;
}

std::vector<std::uint8_t> random_codes(std::size_t n, std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<std::uint8_t> c(n);
    for (auto& x : c) x = static_cast<std::uint8_t>(rng());  // bits above b set: they must be masked
    return c;
}

}  // namespace

TEST_CASE("packers: every ISA gives the scalar ISA's words (GPTQ transposed, AWQ, AWQ bands, or_bytes)") {
    using simd::isa;
    const auto others = vector_isas();
    for (int bits = 2; bits <= 8; ++bits)
        for (const auto& dims : {std::pair<std::int64_t, std::int64_t>{1, 32}, {3, 64}, {7, 96}, {13, 40},
                                         {16, 128}, {17, 264}, {33, 8}, {40, 1000}, {45, 136}}) {
            const std::int64_t rows = dims.first, cols = dims.second;
            if (cols * bits % 32 != 0) continue;
            CAPTURE(bits);
            CAPTURE(rows);
            CAPTURE(cols);
            const auto codes = random_codes(static_cast<std::size_t>(rows * cols), static_cast<std::uint32_t>(rows * cols + bits));
            const std::int64_t stride = rows + 5;  // a band inside a wider matrix
            std::vector<std::uint32_t> want(static_cast<std::size_t>(detail::dense_words(cols, bits) * stride), 0xA5A5A5A5u);
            std::vector<std::uint32_t> got(want.size(), 0xA5A5A5A5u);
            detail::pack_dense_transposed(codes.data(), rows, cols, bits, want.data(), isa::scalar, stride);
            for (isa i : others) {
                CAPTURE(simd::isa_name(i));
                std::fill(got.begin(), got.end(), 0xA5A5A5A5u);
                detail::pack_dense_transposed(codes.data(), rows, cols, bits, got.data(), i, stride);
                CHECK(got == want);
            }
        }
    for (const auto& dims : {std::pair<std::int64_t, std::int64_t>{8, 8}, {24, 13}, {64, 64}, {72, 40}, {136, 70},
                               {200, 48}, {13, 16}}) {
        const std::int64_t n = dims.first, k = dims.second;
        CAPTURE(n);
        CAPTURE(k);
        const auto codes = random_codes(static_cast<std::size_t>(n * k), static_cast<std::uint32_t>(3 * n + k));
        if (n % 8 == 0) {  // codes [n][k] -> [k][n/8], the transposed-source gather
            std::vector<std::uint32_t> want(static_cast<std::size_t>(k * n / 8)), got(want.size());
            detail::pack_awq4(codes.data(), 1, k, k, n, want.data(), isa::scalar);
            for (isa i : others) {
                CAPTURE(simd::isa_name(i));
                detail::pack_awq4(codes.data(), 1, k, k, n, got.data(), i);
                CHECK(got == want);
            }
            // the same codes as one band of rows [16, 16 + n) of a wider weight
            const std::int64_t ds = n / 8 + 4;
            std::vector<std::uint32_t> bwant(static_cast<std::size_t>(k * ds), 0xDEADBEEFu), bgot(bwant.size());
            detail::pack_awq4_band(codes.data(), n, k, bwant.data() + 2, ds, isa::scalar);
            for (isa i : others) {
                CAPTURE(simd::isa_name(i));
                std::fill(bgot.begin(), bgot.end(), 0xDEADBEEFu);
                detail::pack_awq4_band(codes.data(), n, k, bgot.data() + 2, ds, i);
                CHECK(bgot == bwant);
            }
        }
        for (isa i : others) CHECK(detail::or_bytes(codes.data(), codes.size(), i) == detail::or_bytes(codes.data(), codes.size(), isa::scalar));
    }
}

TEST_CASE("layouts pack on the ISA asked for: after a scalar packing the pack family last ran scalar") {
    using simd::isa;
    const auto q = layout_test::random_qt(4, 64, 256, 128, false, 7);
    std::vector<isa> runnable{isa::scalar};
    for (isa i : vector_isas()) runnable.push_back(i);
    const auto scalar_gptq = gptq_layout<4>({.format = gptq_format::v2}).pack(q, "m", isa::scalar);
    const auto scalar_awq = awq_layout<4>().pack(q, "m", isa::scalar);
    for (isa i : runnable) {
        CAPTURE(simd::isa_name(i));
        simd::forget_last_isa<simd::pack_kernels>();
        const auto g = gptq_layout<4>({.format = gptq_format::v2}).pack(q, "m", i);
        CHECK(simd::last_isa_of<simd::pack_kernels>() == i);
        simd::forget_last_isa<simd::pack_kernels>();
        const auto a = awq_layout<4>().pack(q, "m", i);
        CHECK(simd::last_isa_of<simd::pack_kernels>() == i);
        simd::forget_last_isa<simd::pack_kernels>();
        const auto c = compressed_tensors_layout<4>({.checkpoint_dtype = dtype::F16}).pack(q, "m", i);  // its only kernel: the code scan
        CHECK(simd::last_isa_of<simd::pack_kernels>() == i);
        for (std::size_t t = 0; t < g.size(); ++t) CHECK(g[t].bytes == scalar_gptq[t].bytes);
        for (std::size_t t = 0; t < a.size(); ++t) CHECK(a[t].bytes == scalar_awq[t].bytes);
    }
    // The same through quantize_packed: opt.isa reaches the band packers.
    const auto w = testing::student_t_floats(static_cast<std::size_t>(96 * 256), 11);
    const tensor_view v = testing::view_of(w, 96, 256, dtype::F32, "m.proj.weight");
    quant_options o;
    o.bits = 4;
    o.group_size = 128;
    o.symmetric = false;
    o.scale_dtype = dtype::F16;
    o.policy = scale_policy::awq_minmax;
    o.isa = isa::scalar;
    simd::forget_last_isa<simd::pack_kernels>();
    const auto banded = quantize_packed(v, o, awq_layout<4>(), "m.proj");
    CHECK(simd::last_isa_of<simd::pack_kernels>() == isa::scalar);
    o.isa = simd::active_isa();
    const auto active = quantize_packed(v, o, awq_layout<4>(), "m.proj");
    CHECK(simd::last_isa_of<simd::pack_kernels>() == simd::active_isa());
    for (std::size_t t = 0; t < banded.size(); ++t) CHECK(banded[t].bytes == active[t].bytes);
    // No ISA named: the active one (QFORGE_FORCE_ISA, else the best of this CPU).
    simd::forget_last_isa<simd::pack_kernels>();
    (void)gptq_layout<4>({.format = gptq_format::v2}).pack(q, "m");
    CHECK(simd::last_isa_of<simd::pack_kernels>() == simd::active_isa());
}
