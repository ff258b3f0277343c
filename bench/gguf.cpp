// GGUF quantizers on one 4096 x 11008 Student-t(df 5, std 0.02) matrix (seeded), single
// thread: each type's AVX2 path (and AVX-512's, where the CPU has it) against the plain scalar
// port of ggml's reference (quantize_row_<t>_ref as layout/gguf writes it, without the gguf
// kernels; the golden tests pin it to llama.cpp's bytes), measured in the same run, and checked
// byte-identical on the rows both quantized.
// The SIMD path runs on the whole matrix; the scalar reference on the first `ref_rows` rows
// (it is slow: ~10 M weights/s for Q4_K) -- rates are per weight. Times are process CPU time
// (std::clock), best of 2: the build machine is shared, and wall time there measures the load.
// Floors (issue 6): Q4_K and Q5_K >= 10x and >= 0.09 G weights/s; Q6_K >= 8x; Q4_0, Q8_0 >= 2x.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "qforge/layout/gguf/quantize.hpp"
#include "tests/support/synthetic.hpp"

namespace {

using namespace qforge;
using namespace qforge::gguf;

constexpr std::int64_t rows = 4096, cols = 11008;  // 11008 = 43 * 256

/// The scalar port itself (quantize_ref without a kernel table).
void scalar_port(ggml_type t, const float* x, std::int64_t nrow, std::byte* out) {
    gguf::detail::with_block_type(t, [&](auto block) {
        using block_t = typename decltype(block)::block;
        quantize_ref(x, reinterpret_cast<block_t*>(out), nrow * cols);
    });
}

/// isa: a SIMD path of quantize_rows; nullopt: the scalar port.
double seconds_per_run(ggml_type t, const float* x, std::int64_t nrow, std::byte* out, std::optional<simd::isa> isa,
                       int reps) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const std::clock_t t0 = std::clock();
        if (isa) quantize_rows(t, x, nrow, cols, nullptr, out, *isa);
        else scalar_port(t, x, nrow, out);
        benchmark::DoNotOptimize(out);
        benchmark::ClobberMemory();
        best = std::min(best, static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC);
    }
    return best;
}

}  // namespace

int main() {
    std::printf("generating %lld x %lld Student-t(5) weights...\n", static_cast<long long>(rows), static_cast<long long>(cols));
    const std::vector<float> x = testing::student_t_floats(static_cast<std::size_t>(rows * cols), 20261130, 5, 0.02);
    const bool simd_ok = simd::avx2_tag::available();
    const bool wide = simd::avx512_tag::available();
    std::printf("SIMD path: %s\n\n", simd_ok ? (wide ? "avx2 (ratio, floor) and avx512" : "avx2") : "none (scalar only)");
    std::printf("%-6s %10s %14s %14s %8s %7s %s %14s %8s\n", "type", "ref_rows", "scalar Mw/s", "simd Mw/s", "ratio",
                "floor", "identical", "avx512 Mw/s", "ratio");
    struct row {
        ggml_type t;
        std::int64_t ref_rows;
        double floor;
    };
    bool all_ok = true;
    for (const auto& [t, ref_rows, floor] :
         {row{ggml_type::q4_k, 128, 10}, row{ggml_type::q5_k, 128, 10}, row{ggml_type::q6_k, 256, 8},
          row{ggml_type::q4_0, 4096, 2}, row{ggml_type::q8_0, 4096, 2}, row{ggml_type::q2_k, 128, 0},
          row{ggml_type::q3_k, 128, 0}, row{ggml_type::q4_1, 1024, 0}, row{ggml_type::q5_0, 1024, 0},
          row{ggml_type::q5_1, 1024, 0}}) {
        const auto full = static_cast<std::size_t>(quantized_size(t, rows, cols));
        const auto part = static_cast<std::size_t>(quantized_size(t, ref_rows, cols));
        std::vector<std::uint16_t> ref(part / 2 + 1), fast(full / 2 + 1);
        auto* ref_out = reinterpret_cast<std::byte*>(ref.data());
        auto* fast_out = reinterpret_cast<std::byte*>(fast.data());
        const double s_ref = seconds_per_run(t, x.data(), ref_rows, ref_out, std::nullopt, 2);
        const double w_ref = static_cast<double>(ref_rows * cols) / s_ref;
        double w_fast = w_ref;
        bool same = true;
        if (simd_ok) {
            const double s_fast = seconds_per_run(t, x.data(), rows, fast_out, simd::isa::avx2, 2);
            w_fast = static_cast<double>(rows * cols) / s_fast;
            same = std::memcmp(ref_out, fast_out, part) == 0;
        }
        double w_wide = 0;
        if (wide) {
            const double s_wide = seconds_per_run(t, x.data(), rows, fast_out, simd::isa::avx512, 2);
            w_wide = static_cast<double>(rows * cols) / s_wide;
            same = same && std::memcmp(ref_out, fast_out, part) == 0;
        }
        const double ratio = w_fast / w_ref;
        const bool ok = same && (floor == 0 || !simd_ok || ratio >= floor);
        all_ok &= ok;
        std::printf("%-6s %10lld %14.1f %14.1f %7.1fx %6.0fx %-9s %14.1f %7.1fx%s\n", std::string(type_name(t)).c_str(),
                    static_cast<long long>(ref_rows), w_ref / 1e6, w_fast / 1e6, ratio, floor, same ? "yes" : "NO",
                    w_wide / 1e6, w_wide / w_ref, ok ? "" : "  <-- below floor or differs");
    }
    return all_ok ? 0 : 1;
}
