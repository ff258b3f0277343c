// The gguf kernel family (simd/gguf_kernels.hpp): every ISA this machine (or qemu) runs gives,
// for every GGUF type, the bytes of the scalar port of ggml's quantizers (layout/gguf's
// quantize_ref, which the golden tests pin to llama.cpp) and of the scalar table; and a scalar
// lookup is what quantize_rows runs. Rows: Student-t, then edge rows, with super-block counts
// that leave the searches' lanes partly filled (1, 3, 5 and 11 super-blocks).
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "qforge/core/cache_aligned.hpp"
#include "qforge/layout/gguf/quantize.hpp"
#include "qforge/simd/gguf_kernels.hpp"
#include "support/guarded_span.hpp"
#include "support/isas.hpp"
#include "support/synthetic.hpp"
#include "support/tuning_forms.hpp"

using namespace qforge;
using namespace qforge::gguf;

namespace {

std::vector<float> kernel_rows(std::int64_t n_per_row) {
    std::vector<float> x = testing::student_t_floats(static_cast<std::size_t>(3 * n_per_row), 20261202);
    auto row = [&](auto f) {
        for (std::int64_t i = 0; i < n_per_row; ++i) x.push_back(f(i));
    };
    row([](std::int64_t i) { return i < 32 ? 0.0f : 0.5f; });               // a zero sub-block
    row([](std::int64_t i) { return i % 64 < 16 ? 1e-3f : -1e-30f; });     // tiny next to small
    // Subnormal blocks: 1 / d overflows to infinity, every product is +-inf or NaN, and ggml's
    // (int8_t) cast of those (x86 cvttss2si) keeps the low byte of INT32_MIN: code 0.
    row([](std::int64_t i) { return i < 64 ? (i % 3 == 0 ? 1e-39f : i % 3 == 1 ? -3e-40f : 0.0f) : 0.25f; });
    row([](std::int64_t i) {  // blocks of ever smaller magnitudes, across the tiny-block bound 2^-60
        const float m[] = {1e-12f, 1e-15f, 1e-17f, 0x1p-59f, 0x1p-61f, 1e-25f, 1e-33f, 1e-37f};
        return m[(i / 32) % 8] * (i % 7 == 3 ? -1.0f : static_cast<float>(i % 5) * 0.3f);
    });
    row([](std::int64_t i) { return i % 2 ? -0.0f : (i % 5 == 0 ? 0.0f : 0.75f); });  // signed zeros
    // zero extremes: a max of -0 or +0 over negatives (the first zero's sign is ggml's), and
    // blocks of zeros of both signs, where d = max - min is -0 or +0 by that choice
    row([](std::int64_t i) { return i % 3 == 0 ? -0.0f : (i % 3 == 1 ? 0.0f : -0.5f - 0.01f * static_cast<float>(i % 7)); });
    row([](std::int64_t i) { return (i / 32) % 2 ? ((i * 7) % 3 == 0 ? -0.0f : 0.0f) : ((i * 5) % 4 == 0 ? 0.0f : -0.0f); });
    // a block range of 6e38: max - min overflows, so d is infinite and 1 / d is 0
    row([](std::int64_t i) { return i % 32 == 5 ? 3e38f : (i % 32 == 9 ? -3e38f : 0.25f * static_cast<float>(i % 11)); });
    row([](std::int64_t i) { return i == 7 ? -3.0f : 0.001f * static_cast<float>(i % 9); });
    row([](std::int64_t i) { return 0.125f * static_cast<float>(i % 16) - 1.0f; });  // exact ties
    row([](std::int64_t i) { return i % 32 == 0 ? 2.5f : -2.5f; });
    // the signed max: both signs at max |x|, the negative one first (ggml keeps the first), and a
    // single max in each of a block's positions in turn
    row([](std::int64_t i) { return i % 32 == 3 ? -2.5f : (i % 32 == 20 ? 2.5f : 0.01f * static_cast<float>(i % 13)); });
    row([](std::int64_t i) { return i % 32 == (i / 32) % 32 ? -4.0f + static_cast<float>((i / 32) % 2) * 8.0f : 0.3f * static_cast<float>(i % 5); });
    // the same within each 16-element sub-block (Q3_K's signed max), either sign first in turn
    row([](std::int64_t i) {
        const float sign = (i / 16) % 2 ? 1.f : -1.f;
        return i % 16 == 5 ? 1.5f * sign : (i % 16 == 9 ? -1.5f * sign : 0.1f * static_cast<float>(i % 7) - 0.3f);
    });
    // a loud first sub-block over quiet ones whose scales round to 0 against it: there ggml
    // keeps the search's codes instead of requantizing, so the search's own codes are compared
    row([](std::int64_t i) {
        const float v = static_cast<float>((i * 37) % 23) - 11.0f + 0.37f * static_cast<float>((i * 11) % 7);
        return i % 256 < 16 ? 0.05f * v : 1e-7f * v;
    });
    // a sub-block whose Q3_K descent (make_q3_quants) still changes a code in its fifth and
    // last try, found by running ggml's loop over uniform draws (about 1 in 2800 does)
    row([](std::int64_t i) {
        const float fifth_try[16] = {0x1.54f00cp-1f,  -0x1.733ccp-3f, 0x1.a16568p-1f,  -0x1.a2fffep-1f,
                                     0x1.4dd5ep-1f,   -0x1.896e5cp-2f, -0x1.fa288p-3f, 0x1.826bbcp-1f,
                                     -0x1.7ceb4cp-2f, -0x1.0ebb18p-1f, 0x1.2bd54p-5f,  0x1.983174p-1f,
                                     -0x1.9e86fp-1f,  0x1.443b98p-1f,  0x1.1ce6bp-1f,  -0x1.9764dp-3f};
        return fifth_try[i % 16];
    });
    return x;
}

/// The scalar port (no kernels) of quantize_row_<t>_ref, or of quantize_<t> for IQ4_NL.
void scalar_port(ggml_type t, const float* x, std::int64_t n, std::byte* out) {
    gguf::detail::with_block_type(t, [&](auto block) {
        using block_t = typename decltype(block)::block;
        quantize_ref(x, reinterpret_cast<block_t*>(out), n);
    });
}

constexpr ggml_type all_types[] = {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1,
                                   ggml_type::q8_0, ggml_type::q2_k, ggml_type::q3_k, ggml_type::q4_k,
                                   ggml_type::q5_k, ggml_type::q6_k};

}  // namespace

TEST_CASE("gguf kernels: every ISA gives the scalar port's bytes for every GGUF type") {
    int compared = 0;
    const qforge::testing::avx2_forms forms;
    for (simd::isa i : qforge::testing::available_isas()) {
        for (const qforge::testing::avx2_form form : forms.of(i)) {
            qforge::testing::avx2_forms::use(form);
            CHECK(simd::kernels_of<simd::gguf_kernels>(i).id == i);
            for (ggml_type t : all_types) {
                for (std::int64_t n_per_row : {256, 768, 1280, 2816}) {
                    const auto x = kernel_rows(n_per_row);
                    const std::int64_t nrow = static_cast<std::int64_t>(x.size()) / n_per_row;
                    const auto size = static_cast<std::size_t>(quantized_size(t, nrow, n_per_row));
                    std::vector<std::uint16_t> port(size / 2 + 1), scalar(size / 2 + 1), ours(size / 2 + 1);
                    scalar_port(t, x.data(), nrow * n_per_row, reinterpret_cast<std::byte*>(port.data()));
                    quantize_rows(t, x.data(), nrow, n_per_row, nullptr, reinterpret_cast<std::byte*>(scalar.data()),
                                  simd::isa::scalar, true);
                    quantize_rows(t, x.data(), nrow, n_per_row, nullptr, reinterpret_cast<std::byte*>(ours.data()), i,
                                  true);
                    CAPTURE(simd::isa_name(i));
                    CAPTURE(form);
                    CAPTURE(type_name(t));
                    CAPTURE(n_per_row);
                    CHECK(std::memcmp(port.data(), scalar.data(), size) == 0);
                    CHECK(std::memcmp(port.data(), ours.data(), size) == 0);
                    ++compared;
                }
            }
        }
    }
    CHECK(compared >= 40);  // scalar at least, every type and length
}

TEST_CASE("gguf kernels: the 32-element types' last blocks, past the batches of eight, keep the port's bytes") {
    // Their kernels take eight blocks' scales at a time; a buffer whose block count is no
    // multiple of eight ends in a batch padded with blocks of zeros. The scalar ISA shares that
    // code, so each ISA is held against the scalar port itself.
    const auto isas = qforge::testing::available_isas();
    for (std::int64_t n_per_row : {96, 416}) {  // 3 blocks a row, and 13 (a batch and five)
        const auto x = kernel_rows(n_per_row);
        const std::int64_t nrow = static_cast<std::int64_t>(x.size()) / n_per_row;
        for (ggml_type t : {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1, ggml_type::q8_0}) {
            for (std::int64_t rows : {std::int64_t{1}, std::int64_t{5}, nrow}) {
                const auto size = static_cast<std::size_t>(quantized_size(t, rows, n_per_row));
                std::vector<std::uint16_t> port(size / 2 + 1), ours(size / 2 + 1);
                scalar_port(t, x.data(), rows * n_per_row, reinterpret_cast<std::byte*>(port.data()));
                for (simd::isa i : isas) {
                    quantize_rows(t, x.data(), rows, n_per_row, nullptr, reinterpret_cast<std::byte*>(ours.data()), i,
                                  true);
                    CAPTURE(simd::isa_name(i));
                    CAPTURE(type_name(t));
                    CAPTURE(n_per_row);
                    CAPTURE(rows);
                    CHECK(std::memcmp(port.data(), ours.data(), size) == 0);
                }
            }
        }
    }
}

TEST_CASE("gguf kernels: rows at any alignment give the bytes of rows on a cache line, every ISA") {
    // The kernels load whole vectors wherever the caller's rows start; the GGUF converter keeps
    // its rows on cache lines (faster), a caller's std::vector may not.
    constexpr std::int64_t n_per_row = 768;
    const auto x = kernel_rows(n_per_row);
    const std::int64_t nrow = static_cast<std::int64_t>(x.size()) / n_per_row;
    cache_aligned_vector<float> held(x.size() + 16);
    for (ggml_type t : all_types) {
        const auto size = static_cast<std::size_t>(quantized_size(t, nrow, n_per_row));
        for (simd::isa i : qforge::testing::available_isas()) {
            std::vector<std::uint16_t> aligned(size / 2 + 1), shifted(size / 2 + 1);
            std::copy(x.begin(), x.end(), held.begin());
            quantize_rows(t, held.data(), nrow, n_per_row, nullptr, reinterpret_cast<std::byte*>(aligned.data()), i);
            for (std::size_t off : {1u, 4u, 7u, 12u}) {  // 4 to 48 bytes past the line
                std::copy(x.begin(), x.end(), held.begin() + static_cast<std::ptrdiff_t>(off));
                quantize_rows(t, held.data() + off, nrow, n_per_row, nullptr, reinterpret_cast<std::byte*>(shifted.data()), i);
                CAPTURE(simd::isa_name(i));
                CAPTURE(type_name(t));
                CAPTURE(off);
                CHECK(std::memcmp(aligned.data(), shifted.data(), size) == 0);
            }
        }
    }
}

TEST_CASE("gguf kernels: rows that end where their mapping ends quantize as anywhere else, every ISA") {
    // The 32-element types prefetch 2 KB past a block two batches ahead of its codes; past
    // the end of the rows that must not fault. 96 blocks: several whole batches and their tail.
    const std::int64_t n = 96 * 32;
    const auto x = testing::student_t_floats(static_cast<std::size_t>(n), 31);
    const testing::guarded_span at_end(std::as_bytes(std::span(x)));
    const auto* end_rows = reinterpret_cast<const float*>(at_end.data());
    for (simd::isa i : testing::available_isas()) {
        CAPTURE(simd::isa_name(i));
        for (ggml_type t : {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1, ggml_type::q8_0}) {
            CAPTURE(type_name(t));
            std::vector<std::byte> here(row_bytes(t, n)), there(row_bytes(t, n));
            quantize_rows(t, x.data(), 1, n, nullptr, here.data(), i);
            quantize_rows(t, end_rows, 1, n, nullptr, there.data(), i);
            CHECK(here == there);
        }
    }
}

TEST_CASE("gguf kernels: a scalar lookup is the path quantize_rows runs") {
    const auto x = kernel_rows(256);
    std::vector<std::uint16_t> out(static_cast<std::size_t>(quantized_size(ggml_type::q8_0, 1, 256)));  // >= each type used
    simd::forget_last_isa<simd::gguf_kernels>();
    CHECK_FALSE(simd::last_isa_of<simd::gguf_kernels>().has_value());
    quantize_rows(ggml_type::q4_k, x.data(), 1, 256, nullptr, reinterpret_cast<std::byte*>(out.data()), simd::scalar_tag{});
    CHECK(simd::last_isa_of<simd::gguf_kernels>() == simd::isa::scalar);
    quantize_rows(ggml_type::q8_0, x.data(), 1, 256, nullptr, reinterpret_cast<std::byte*>(out.data()), simd::isa::scalar);
    CHECK(simd::last_isa_of<simd::gguf_kernels>() == simd::isa::scalar);
    // without a path: active_isa(), i.e. scalar under QFORGE_FORCE_ISA=scalar
    quantize_rows(ggml_type::q6_k, x.data(), 1, 256, nullptr, reinterpret_cast<std::byte*>(out.data()));
    CHECK(simd::last_isa_of<simd::gguf_kernels>() == simd::active_isa());
    for (simd::isa i : simd::all_isas) {
        if (simd::available(i)) continue;
        CHECK_THROWS_WITH_AS(quantize_rows(ggml_type::q4_k, x.data(), 1, 256, nullptr,
                                           reinterpret_cast<std::byte*>(out.data()), i),
                             doctest::Contains("gguf kernels is not available"), unsupported_error);
    }
}

namespace {
/// Rows where ggml's arithmetic leaves its usual range: magnitudes from 2^-30 to 2^30 in one
/// super-block (the fp16 d overflows to inf, so d * 0 is NaN and the requantization reads
/// nearest_int's 0 from a NaN quotient), one large weight among tiny ones, float32 subnormals,
/// fifth powers (wide x^2 weights in the descent) and exact quarter ties.
std::vector<float> gguf_kernel_extreme_rows(std::int64_t n_per_row) {
    std::mt19937 gen(20261202);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> x;
    for (int kind = 0; kind < 5; ++kind) {
        for (std::int64_t i = 0; i < n_per_row; ++i) {
            float v = u(gen);
            if (kind == 0) v *= std::ldexp(1.f, static_cast<int>(gen() % 60) - 30);
            if (kind == 1) v *= i % 16 == 3 ? 1e3f : 1e-6f;
            if (kind == 2) v = gen() % 4 == 0 ? 0.f : v * 1e-38f;
            if (kind == 3) v = v * v * v * v * v;
            if (kind == 4) v = std::round(v * 4) * 0.25f;
            x.push_back(v);
        }
    }
    return x;
}
}  // namespace

TEST_CASE("gguf kernels: Q3_K and Q6_K keep the port's bytes on extreme rows (fp16 d overflow, subnormals)") {
    const std::int64_t n_per_row = 1280;
    const auto x = gguf_kernel_extreme_rows(n_per_row);
    const std::int64_t nrow = static_cast<std::int64_t>(x.size()) / n_per_row;
    for (ggml_type t : {ggml_type::q3_k, ggml_type::q6_k}) {
        const auto size = static_cast<std::size_t>(quantized_size(t, nrow, n_per_row));
        std::vector<std::uint16_t> port(size / 2 + 1), ours(size / 2 + 1);
        scalar_port(t, x.data(), nrow * n_per_row, reinterpret_cast<std::byte*>(port.data()));
        for (simd::isa i : qforge::testing::available_isas()) {
            quantize_rows(t, x.data(), nrow, n_per_row, nullptr, reinterpret_cast<std::byte*>(ours.data()), i, true);
            CAPTURE(simd::isa_name(i));
            CAPTURE(type_name(t));
            CHECK(std::memcmp(port.data(), ours.data(), size) == 0);
        }
    }
}

namespace {
/// Rows of 32-element blocks holding infinities, one kind of block after another so that each
/// kind lands in every lane of the batches of eight and in the tail past them.
std::vector<float> infinite_rows(std::int64_t blocks) {
    const float inf = std::numeric_limits<float>::infinity();
    const auto draws = testing::student_t_floats(static_cast<std::size_t>(32 * blocks), 20261207);
    std::vector<float> x(draws.begin(), draws.end());
    for (std::int64_t b = 0; b < blocks; ++b) {
        float* v = x.data() + 32 * b;
        const auto at = static_cast<std::size_t>((b * 7) % 32);
        switch (b % 5) {
            case 0: break;  // finite
            case 1: v[at] = inf; break;
            case 2: v[at] = -inf; break;
            case 3: v[at] = inf, v[(at + 9) % 32] = -inf; break;  // equal magnitudes of both signs
            case 4: v[at] = -inf, v[(at + 3) % 32] = -inf; break;
        }
    }
    return x;
}
}  // namespace

TEST_CASE("gguf kernels: the 32-element types keep the port's bytes on rows with infinities, every ISA") {
    // An infinite x makes d infinite and 1 / d zero, and ggml's codes there come from (int8_t)
    // casts of NaN products, which x86 makes 0: a float minimum that dropped the NaN for its
    // bound stored 15 or 31, a saturating pack of cvttps2dq's INT_MIN -128. (The converters
    // refuse such tensors; quantize_rows takes what it is given.)
    for (std::int64_t blocks : {40, 13}) {  // whole batches; a batch and a tail of five
        const auto x = infinite_rows(blocks);
        for (ggml_type t : {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1, ggml_type::q8_0}) {
            const auto size = static_cast<std::size_t>(quantized_size(t, 1, 32 * blocks));
            std::vector<std::uint16_t> port(size / 2 + 1), ours(size / 2 + 1);
            scalar_port(t, x.data(), 32 * blocks, reinterpret_cast<std::byte*>(port.data()));
            for (simd::isa i : qforge::testing::available_isas()) {
                quantize_rows(t, x.data(), 1, 32 * blocks, nullptr, reinterpret_cast<std::byte*>(ours.data()), i, true);
                CAPTURE(simd::isa_name(i));
                CAPTURE(type_name(t));
                CAPTURE(blocks);
                CHECK(std::memcmp(port.data(), ours.data(), size) == 0);
            }
        }
    }
}

namespace {
/// Super-blocks of 16 sub-block scales that ggml's searches rarely or never give, for the
/// super-block step: equal magnitudes of both signs (the first wins), NaN (never wins), all
/// zero or NaN (no largest), a largest below GROUP_MAX_EPS, infinities, subnormals, quotients
/// on rounding ties, the largest last, and Student-t draws.
std::vector<float> edge_scales() {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::vector<float> s;
    auto block = [&](auto f) {
        for (int j = 0; j < 16; ++j) s.push_back(f(j));
    };
    block([](int j) { return j == 3 ? -2.f : j == 9 ? 2.f : 0.1f * static_cast<float>(j % 5); });
    block([](int j) { return j == 2 ? 2.f : j == 7 ? -2.f : -0.1f * static_cast<float>(j % 3); });
    block([&](int j) { return j == 0 ? nan : j == 5 ? -nan : 0.25f * static_cast<float>(j) - 1.f; });
    block([&](int) { return nan; });
    block([](int j) { return j % 2 ? -0.f : 0.f; });
    block([](int j) { return 1e-16f * static_cast<float>(j % 4); });
    block([&](int j) { return j == 6 ? -inf : j == 11 ? inf : 1.f; });
    block([](int j) { return j == 15 ? -3.f : 0.2f * static_cast<float>(j); });
    block([](int j) { return j == 0 ? -128.f : 0.5f * static_cast<float>(j) - 3.5f; });  // iscale 1: quotients on ties
    block([](int j) { return j == 4 ? 3e38f : 1e-30f * static_cast<float>(j); });
    block([](int j) { return 1e-40f * static_cast<float>(j + 1) * (j % 2 ? -1.f : 1.f); });
    block([](int j) { return j == 8 ? 1e-5f : -7e-6f; });
    const auto draws = testing::student_t_floats(16 * 6, 20261206);
    s.insert(s.end(), draws.begin(), draws.end());
    return s;
}
}  // namespace

namespace {

/// Sub-blocks for the search tests: normal, uniform and Student-t draws, then three 16-element
/// sub-blocks whose make_qx_quants scale comes from its last step (is = +9) and from no other,
/// found by running ggml's loop with and without that step over normal, uniform and Student-t
/// (2 degrees) draws (1 in 2,000,000 to 1 in 8,000 differ), then Student-t up to whole Q4_K
/// super-blocks: 304 16-element sub-blocks, 152 32-element ones.
std::vector<float> search_rows() {
    std::mt19937 gen(20261206);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::uniform_real_distribution<float> uniform(-1.f, 1.f);
    std::vector<float> x;
    for (int i = 0; i < 1536; ++i) x.push_back(normal(gen));
    for (int i = 0; i < 1536; ++i) x.push_back(uniform(gen));
    const auto t = testing::student_t_floats(1536 + 256, 20261206);
    x.insert(x.end(), t.begin(), t.begin() + 1536);
    const float last_step_wins[3][16] = {
        {-0x1.5aeb8ep-1f, -0x1.b7875ep+0f, -0x1.c11a34p-2f, -0x1.b1320ep+0f, -0x1.bd5a88p-2f, -0x1.41018cp-4f,
         0x1.efa4dap-2f, -0x1.afc22ap-2f, 0x1.4b9dc2p-1f, 0x1.2be6fcp+0f, -0x1.9e44cep-5f, 0x1.afa2fep-1f,
         0x1.35328p-4f, -0x1.85a80ep-3f, -0x1.0a895p-1f, 0x1.4fea84p+0f},
        {0x1.74422p-4f, -0x1.ca322cp-2f, -0x1.f242fcp-2f, -0x1.c255cp-4f, 0x1.65b80cp-1f, -0x1.3a647p-3f,
         0x1.dd8ffp-1f, 0x1.6ef98p-5f, 0x1.3f58e8p-1f, -0x1.1d76ap-2f, -0x1.bcp-14f, -0x1.783e4p-5f,
         -0x1.f59182p-1f, -0x1.1868aep-1f, -0x1.acab14p-1f, -0x1.a33188p-1f},
        {0x1.7d1326p+0f, -0x1.31c1ep-3f, -0x1.45170ep+2f, 0x1.1bced2p+1f, -0x1.2647fap+0f, -0x1.e62f3cp-1f,
         0x1.24f56ep-2f, -0x1.9e6edep+0f, -0x1.31fa7cp+0f, 0x1.289648p+1f, -0x1.e623f2p-1f, 0x1.17453p-1f,
         -0x1.905e48p+0f, -0x1.f0486cp-1f, -0x1.f90448p-2f, 0x1.0319d6p+5f}};
    for (const auto& b : last_step_wins) x.insert(x.end(), b, b + 16);
    x.insert(x.end(), t.begin() + 1536, t.begin() + 1536 + (256 - x.size() % 256));
    return x;
}

/// The sub-blocks whose (scale, min) differ in any bit between the kernel and the scalar port.
int differing(const std::vector<float>& a, const std::vector<float>& b) {
    int n = 0;
    for (std::size_t j = 0; j < a.size(); ++j) n += std::memcmp(&a[j], &b[j], sizeof(float)) != 0;
    return n;
}

}  // namespace

// The quantizers' bytes keep a search's scale only as a 6- or 8-bit fraction of its super-
// block's largest, so a search that picks a neighbouring step's scale often leaves them as they
// were. The searches are held to the scalar port on their own results here.
TEST_CASE("gguf kernels: every ISA's sub-block searches return the port's scales and mins, bit for bit") {
    const std::vector<float> x = search_rows();
    // 296 and 152 sub-blocks: the last group of lanes is partly filled at 16 and at 32 lanes
    const std::size_t n16 = x.size() / 16 - 8, n32 = x.size() / 32;
    REQUIRE(x.size() % 256 == 0);
    std::vector<float> qx_port(n16), q3_port(n16), q2_port(n16), q2_min_port(n16);
    std::vector<float> q4_port(n32), q4_min_port(n32), q5_port(n32), q5_min_port(n32);
    std::int8_t l8[16];
    std::uint8_t L[32];
    for (std::size_t j = 0; j < n16; ++j) {
        qx_port[j] = gguf::detail::make_qx_quants(16, 32, x.data() + 16 * j, l8, 1, nullptr);
        q3_port[j] = gguf::detail::make_q3_quants(16, 4, x.data() + 16 * j, l8, true);
        q2_port[j] = gguf::detail::q2k_sub_search(x.data() + 16 * j, L, &q2_min_port[j]);
    }
    for (std::size_t j = 0; j < n32; ++j) {
        q4_port[j] = gguf::detail::qk45_sub_search<15>(x.data() + 32 * j, L, &q4_min_port[j]);
        q5_port[j] = gguf::detail::qk45_sub_search<31>(x.data() + 32 * j, L, &q5_min_port[j]);
    }
    const qforge::testing::avx2_forms forms;
    for (simd::isa i : qforge::testing::available_isas()) {
        for (const qforge::testing::avx2_form form : forms.of(i)) {
            qforge::testing::avx2_forms::use(form);
            const auto& kern = simd::kernels_of<simd::gguf_kernels>(i);
            CAPTURE(simd::isa_name(i));
            CAPTURE(form);
            std::vector<float> s16(n16), m16(n16), s32(n32), m32(n32);
            kern.qx32_search(x.data(), n16, s16.data());
            CHECK(differing(s16, qx_port) == 0);
            kern.q3_search(x.data(), n16, s16.data());
            CHECK(differing(s16, q3_port) == 0);
            kern.q2k_search(x.data(), n16, s16.data(), m16.data());
            CHECK(differing(s16, q2_port) == 0);
            CHECK(differing(m16, q2_min_port) == 0);
            kern.qkx2_search(x.data(), n32, 15, -1.f, 20, s32.data(), m32.data());
            CHECK(differing(s32, q4_port) == 0);
            CHECK(differing(m32, q4_min_port) == 0);
            kern.qkx2_search(x.data(), n32, 31, -0.5f, 15, s32.data(), m32.data());
            CHECK(differing(s32, q5_port) == 0);
            CHECK(differing(m32, q5_min_port) == 0);
        }
    }
}

TEST_CASE("gguf kernels: every ISA's super-block step gives the port's Q3_K and Q6_K scales and d") {
    const auto s = edge_scales();
    const std::size_t count = s.size() / 16;  // 18: one batch and a part on eight lanes, a part on sixteen
    for (simd::isa i : qforge::testing::available_isas()) {
        const auto& kern = simd::kernels_of<simd::gguf_kernels>(i);
        for (float nmax : {32.f, 128.f}) {
            std::vector<std::uint16_t> d16(count);
            std::vector<float> dd(count), q(s.size()), amax(count);
            kern.super_block_scales(s.data(), count, nmax, d16.data(), dd.data(), q.data(), amax.data());
            for (std::size_t b = 0; b < count; ++b) {
                CAPTURE(simd::isa_name(i));
                CAPTURE(nmax);
                CAPTURE(b);
                float d_port[16], d_ours[16];
                if (nmax == 128.f) {
                    block_q6_k port, ours;
                    std::memset(&port, 0x5a, sizeof port);
                    std::memset(&ours, 0x5a, sizeof ours);
                    const bool kept = gguf::detail::q6k_scales(s.data() + 16 * b, port, d_port);
                    CHECK(gguf::detail::q6k_stored_scales(amax[b], d16[b], dd[b], q.data() + 16 * b, ours, d_ours) == kept);
                    CHECK(std::memcmp(&port, &ours, sizeof port) == 0);
                    if (kept) CHECK(std::memcmp(d_port, d_ours, sizeof d_port) == 0);
                } else {
                    block_q3_k port, ours;
                    std::memset(&port, 0x5a, sizeof port);
                    std::memset(&ours, 0x5a, sizeof ours);
                    gguf::detail::q3k_scales(s.data() + 16 * b, port, d_port);
                    gguf::detail::q3k_stored_scales(amax[b], d16[b], dd[b], q.data() + 16 * b, ours, d_ours);
                    CHECK(std::memcmp(&port, &ours, sizeof port) == 0);
                    CHECK(std::memcmp(d_port, d_ours, sizeof d_port) == 0);
                }
            }
        }
    }
}

TEST_CASE("gguf kernels: every ISA's Q2_K super-block step gives the port's scale bytes, d, dmin and sub-block scales") {
    // Scales from edge_scales, mins the same blocks in another order (so each super-block pairs
    // two different patterns: most hold a code outside 0..15); one more block of each with NaNs
    // that carry a payload (where a largest value is 0, ggml's codes are 0 without a product,
    // which with such a NaN is not); then blocks of magnitudes, as searches give them.
    auto s = edge_scales();
    const std::size_t edge = s.size() / 16;
    std::vector<float> mins(s.size());
    for (std::size_t b = 0; b < edge; ++b) std::memcpy(&mins[16 * b], &s[16 * ((b + 5) % edge)], 16 * sizeof(float));
    const float payload_nan = std::bit_cast<float>(0x7fc01234u);
    for (int j = 0; j < 16; ++j) {
        s.push_back(j == 4 ? payload_nan : -0.5f);
        mins.push_back(j == 9 ? payload_nan : 0.f);
    }
    const auto draws = testing::student_t_floats(2 * 16 * 5, 20261207);
    for (std::size_t k = 0; k < 16 * 5; ++k) {
        s.push_back(std::fabs(draws[k]));
        mins.push_back(k < 16 ? 0.f : std::fabs(draws[16 * 5 + k]));  // the first: no min
    }
    const std::size_t count = s.size() / 16;  // 24: a part batch on sixteen lanes
    for (simd::isa i : qforge::testing::available_isas()) {
        const auto& kern = simd::kernels_of<simd::gguf_kernels>(i);
        std::vector<std::uint8_t> sc(s.size(), 0x5a);
        std::vector<std::uint16_t> dm16(2 * count);
        std::vector<float> d(s.size()), dm(s.size());
        kern.q2k_scales(s.data(), mins.data(), count, sc.data(), dm16.data(), d.data(), dm.data());
        for (std::size_t b = 0; b < count; ++b) {
            CAPTURE(simd::isa_name(i));
            CAPTURE(b);
            block_q2_k port;
            std::memset(&port, 0x5a, sizeof port);
            gguf::detail::q2k_scales(s.data() + 16 * b, mins.data() + 16 * b, port);
            float d_port[16], dm_port[16];
            gguf::detail::q2k_sub_scales(port, d_port, dm_port);
            CHECK(std::memcmp(port.scales, &sc[16 * b], 16) == 0);
            CHECK(port.d == dm16[2 * b]);
            CHECK(port.dmin == dm16[2 * b + 1]);
            CHECK(std::memcmp(d_port, &d[16 * b], sizeof d_port) == 0);
            CHECK(std::memcmp(dm_port, &dm[16 * b], sizeof dm_port) == 0);
        }
    }
}

TEST_CASE("gguf kernels: dequantize_rows gives the scalar port's floats for Q4_K, Q5_K and Q6_K on every ISA") {
    // Random block bytes (every code, scale and min pattern), their fp16 factors finite and of
    // both signs, so every product and subtraction is compared, zeros' signs included.
    testing::splitmix64 rng(0x5EED);
    for (ggml_type t : {ggml_type::q4_k, ggml_type::q5_k, ggml_type::q6_k}) {
        const std::int64_t n = 256 * 7;
        std::vector<std::byte> blocks(static_cast<std::size_t>(quantized_size(t, 1, n)));
        for (std::byte& b : blocks) b = static_cast<std::byte>(rng.next());
        const std::size_t block_bytes = blocks.size() / 7;
        for (std::size_t b = 0; b < 7; ++b) {
            // d (and dmin) sit first in Q4_K/Q5_K blocks and last in Q6_K's
            const std::size_t at = t == ggml_type::q6_k ? block_bytes - 2 : 0;
            for (std::size_t f = 0; f < (t == ggml_type::q6_k ? 1u : 2u); ++f) {
                const std::uint16_t h = float_to_fp16(static_cast<float>(static_cast<int>(rng.next() % 2001) - 1000) * 1e-4f);
                std::memcpy(blocks.data() + b * block_bytes + at + 2 * f, &h, 2);
            }
        }
        std::vector<float> want(static_cast<std::size_t>(n));
        gguf::detail::with_block_type(t, [&](auto tag) {
            dequantize(reinterpret_cast<const typename decltype(tag)::block*>(blocks.data()), want.data(), n);
        });
        for (simd::isa i : testing::available_isas(testing::with_scalar::yes)) {
            CAPTURE(simd::isa_name(i));
            CAPTURE(static_cast<int>(t));
            std::vector<float> got(static_cast<std::size_t>(n), -1.0f);
            dequantize_rows(t, blocks.data(), n, got.data(), i);
            CHECK(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) == 0);
        }
    }
}
