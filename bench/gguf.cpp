// GGUF quantizers on one 4096 x 11008 Student-t(df 5, std 0.02) matrix (seeded), single
// thread: each type's AVX2 path (and AVX-512's, where the CPU has it) against the plain scalar
// port of ggml's reference (quantize_row_<t>_ref as layout/gguf writes it, without the gguf
// kernels; the golden tests pin it to llama.cpp's bytes), measured in the same run, and checked
// byte-identical on the rows both quantized.
// Both paths quantize the same first `ref_rows` rows (128 or 256: 5.6 or 11 MB of floats, the
// size of the converter's chunk of rows, which it quantizes right after widening them), so the
// ratio compares the kernels under one cache state; rates are per weight. The SIMD path's rate
// over the whole 180 MB matrix, streamed from memory, is printed beside it ("whole"): there the
// legacy types are bound by the memory bandwidth of one core, not by their arithmetic. Times are
// process CPU time (std::clock), best of 3 or more: the build machine is shared, and wall time
// there measures the load; the SIMD paths and ggml's quantizer go in alternating rounds (see main).
// Floors (issue 6): Q4_K and Q5_K >= 10x and >= 0.09 G weights/s; Q6_K >= 8x; Q4_0, Q8_0 >= 2x.
// Built with -DQFORGE_LLAMA_CPP_DIR (see bench/CMakeLists.txt), it also times ggml's own
// quantizer, ggml_quantize_chunk from that checkout's ggml-base, on the same rows, checks that
// qforge's bytes equal ggml's, and prints each SIMD path's ratio to it beside the goal of issue
// 21: Q4_K/Q5_K >= 25x, Q6_K >= 20x, Q4_0 >= 3x, Q8_0 >= 8x, every other type >= 10x.
// The K-quant searches' AVX2 form (vectors a step, rounding) is chosen by the CPU (vendor,
// AVX-512); the forms not chosen are timed in the same rounds and printed beside it. The
// matrix starts on a cache line, as the GGUF converter's rows do; the 32-element types, which
// stream their rows, are timed again on rows 16 bytes past one (where malloc leaves a large
// std::vector), and ggml's quantizer there too.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <ctime>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "qforge/core/cache_aligned.hpp"
#include "qforge/layout/gguf/quantize.hpp"
#include "tests/support/synthetic.hpp"
#include "tests/support/tuning_forms.hpp"

#ifdef QFORGE_BENCH_WITH_GGML
// bench/ggml_peer.c: ggml_quantize_chunk of rows [0, nrows), no importance matrix.
extern "C" std::size_t qforge_bench_ggml_quantize(int type, const float* src, void* dst, std::int64_t nrows,
                                                  std::int64_t n_per_row);
#endif

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

/// Best of the process-CPU times of `run()`: at least `reps` runs, and more until the runs add
/// up to 0.2 s (a fast kernel's rows take half a millisecond, where three runs are noise).
template <class Run>
double best_seconds(int reps, Run run) {
    double best = 1e30, spent = 0;
    for (int r = 0; r < reps || (spent < 0.2 && r < 1000); ++r) {
        const std::clock_t t0 = std::clock();
        run();
        benchmark::ClobberMemory();
        const double s = static_cast<double>(std::clock() - t0) / CLOCKS_PER_SEC;
        best = std::min(best, s);
        spent += s;
    }
    return best;
}

/// The CPU's model name (/proc/cpuinfo on Linux): the figures belong to a machine class.
std::string cpu_model() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) return line.substr(line.find(':') + 2);
    return "unknown";
}

/// isa: a SIMD path of quantize_rows; nullopt: the scalar port.
double seconds_per_run(ggml_type t, const float* x, std::int64_t nrow, std::byte* out, std::optional<simd::isa> isa,
                       int reps) {
    return best_seconds(reps, [&] {
        if (isa) quantize_rows(t, x, nrow, cols, nullptr, out, *isa);
        else scalar_port(t, x, nrow, out);
        benchmark::DoNotOptimize(out);
    });
}

#ifdef QFORGE_BENCH_WITH_GGML
/// Issue 21's goal for a SIMD path against ggml's own quantizer.
double goal_vs_ggml(ggml_type t) {
    switch (t) {
        case ggml_type::q4_k:
        case ggml_type::q5_k: return 25;
        case ggml_type::q6_k: return 20;
        case ggml_type::q4_0: return 3;
        case ggml_type::q8_0: return 8;
        default: return 10;
    }
}

/// ggml's own quantizer on the same rows (no importance matrix: quantize_row_<t>_ref): the best
/// CPU time of a run, its bytes into out.
double ggml_seconds(ggml_type t, const float* x, std::int64_t nrow, std::vector<std::byte>& out) {
    return best_seconds(1, [&] {
        qforge_bench_ggml_quantize(static_cast<int>(t), x, out.data(), nrow, cols);
        benchmark::DoNotOptimize(out.data());
    });
}
#endif

/// The 32-element types' AVX2 path on the first 256 rows as they lie (on a cache line) and
/// copied 16 bytes past one, in alternating rounds, with ggml's quantizer on the copy too.
void off_line_rates(const cache_aligned_vector<float>& x) {
    constexpr std::int64_t n = 256;
    cache_aligned_vector<float> held(static_cast<std::size_t>(n * cols) + 4);
    std::copy(x.begin(), x.begin() + n * cols, held.begin() + 4);
    const float* off = held.data() + 4;
    std::printf("\n32-element types on rows 16 bytes past a cache line (AVX2, %lld rows, same rounds):\n",
                static_cast<long long>(n));
    std::printf("%-6s %14s %14s %7s%s\n", "type", "on line Mw/s", "past it Mw/s", "past/on",
#ifdef QFORGE_BENCH_WITH_GGML
                "  ggml past it Mw/s  avx2/ggml there"
#else
                ""
#endif
    );
    for (ggml_type t : {ggml_type::q4_0, ggml_type::q4_1, ggml_type::q5_0, ggml_type::q5_1, ggml_type::q8_0}) {
        std::vector<std::byte> out(static_cast<std::size_t>(quantized_size(t, n, cols)));
        double on = 1e30, past = 1e30;
#ifdef QFORGE_BENCH_WITH_GGML
        double ggml = 1e30;
#endif
        for (int round = 0; round < 3; ++round) {
            on = std::min(on, seconds_per_run(t, x.data(), n, out.data(), simd::isa::avx2, 1));
            past = std::min(past, seconds_per_run(t, off, n, out.data(), simd::isa::avx2, 1));
#ifdef QFORGE_BENCH_WITH_GGML
            ggml = std::min(ggml, ggml_seconds(t, off, n, out));
#endif
        }
        const double w = static_cast<double>(n * cols);
        std::printf("%-6s %14.1f %14.1f %6.2fx", std::string(type_name(t)).c_str(), w / on / 1e6, w / past / 1e6, on / past);
#ifdef QFORGE_BENCH_WITH_GGML
        std::printf("  %17.1f %15.1fx", w / ggml / 1e6, ggml / past);
#endif
        std::printf("\n");
    }
}

}  // namespace

int main() {
    std::printf("generating %lld x %lld Student-t(5) weights...\n", static_cast<long long>(rows), static_cast<long long>(cols));
    // On a cache line, as the GGUF converter keeps its rows (core/cache_aligned.hpp); the
    // 32-element types on rows 16 bytes past one (malloc's usual place) are timed at the end.
    const std::vector<float> drawn = testing::student_t_floats(static_cast<std::size_t>(rows * cols), 20261130, 5, 0.02);
    const cache_aligned_vector<float> x(drawn.begin(), drawn.end());
    const bool simd_ok = simd::avx2_tag::available();
    const bool wide = simd::avx512_tag::available();
    std::printf("SIMD path: %s\n", simd_ok ? (wide ? "avx2 (ratio, floor) and avx512" : "avx2") : "none (scalar only)");
    const auto vendor = simd::cpu().vendor;
    std::printf("CPU: %s, %u logical CPUs\n", cpu_model().c_str(), std::thread::hardware_concurrency());
    std::printf("AVX2 K-quant searches: %s (CPU vendor: %s%s)\n\n", testing::avx2_forms::current().name().c_str(),
                vendor == simd::cpu_vendor::amd ? "AMD" : vendor == simd::cpu_vendor::intel ? "Intel" : "other",
                wide ? ", AVX-512" : ", no AVX-512");
    std::printf("%-6s %9s %12s %11s %7s %6s %s %12s %7s %11s\n", "type", "rows", "scalar Mw/s", "simd Mw/s", "ratio",
                "floor", "identical", "avx512 Mw/s", "ratio", "whole Mw/s");
    struct row {
        ggml_type t;
        std::int64_t ref_rows;
        double floor;
    };
    bool all_ok = true;
    struct ggml_row {
        ggml_type t;
        double rate, avx2, avx512, goal;
        bool same;
    };
    std::vector<ggml_row> vs_ggml;
    // The AVX2 searches in the forms this CPU does not take, in the same rounds: the form is
    // chosen by the CPU (simd/tuning.hpp), and this shows the choice on the machine at hand.
    const testing::avx2_forms forms;
    const testing::avx2_form chosen = testing::avx2_forms::current();
    std::vector<testing::avx2_form> others;
    for (const testing::avx2_form& f : forms.of(simd::isa::avx2))
        if (!(f == chosen)) others.push_back(f);
    struct form_row {
        ggml_type t;
        double chosen, other[2];
    };
    std::vector<form_row> form_rows;
    for (const auto& [t, ref_rows, floor] :
         {row{ggml_type::q4_k, 128, 10}, row{ggml_type::q5_k, 128, 10}, row{ggml_type::q6_k, 256, 8},
          row{ggml_type::q4_0, 256, 2}, row{ggml_type::q8_0, 256, 2}, row{ggml_type::q2_k, 128, 0},
          row{ggml_type::q3_k, 128, 0}, row{ggml_type::q4_1, 256, 0}, row{ggml_type::q5_0, 256, 0},
          row{ggml_type::q5_1, 256, 0}}) {
        const auto full = static_cast<std::size_t>(quantized_size(t, rows, cols));
        const auto part = static_cast<std::size_t>(quantized_size(t, ref_rows, cols));
        std::vector<std::uint16_t> ref(part / 2 + 1), fast(full / 2 + 1);
        auto* ref_out = reinterpret_cast<std::byte*>(ref.data());
        auto* fast_out = reinterpret_cast<std::byte*>(fast.data());
        const double measured = static_cast<double>(ref_rows * cols);
        const double w_ref = measured / seconds_per_run(t, x.data(), ref_rows, ref_out, std::nullopt, 3);
        double w_whole = 0;
        bool same = true;
        if (simd_ok) {
            w_whole = static_cast<double>(rows * cols) / seconds_per_run(t, x.data(), rows, fast_out, simd::isa::avx2, 2);
            same = std::memcmp(ref_out, fast_out, part) == 0;
        }
        // The SIMD paths and ggml's quantizer in alternating rounds, best of each: the machine's
        // speed drifts over seconds, and timed in blocks one after the other the same kernels'
        // ratio moved by up to 10% between invocations (Q4_K: 9.9x in one, 10.9x in another).
        double s_fast = 1e30, s_wide = 1e30, s_other[2] = {1e30, 1e30};
        const bool searched = t == ggml_type::q2_k || t == ggml_type::q4_k || t == ggml_type::q5_k || t == ggml_type::q6_k;
#ifdef QFORGE_BENCH_WITH_GGML
        double s_ggml = 1e30;
        std::vector<std::byte> ggml_out(part);
#endif
        for (int round = 0; round < 3; ++round) {
            if (simd_ok) {
                s_fast = std::min(s_fast, seconds_per_run(t, x.data(), ref_rows, fast_out, simd::isa::avx2, 1));
                same = same && std::memcmp(ref_out, fast_out, part) == 0;
            }
            for (std::size_t o = 0; simd_ok && searched && o < others.size(); ++o) {
                testing::avx2_forms::use(others[o]);
                s_other[o] = std::min(s_other[o], seconds_per_run(t, x.data(), ref_rows, fast_out, simd::isa::avx2, 1));
                testing::avx2_forms::use(chosen);
                same = same && std::memcmp(ref_out, fast_out, part) == 0;
            }
            if (wide) {
                s_wide = std::min(s_wide, seconds_per_run(t, x.data(), ref_rows, fast_out, simd::isa::avx512, 1));
                same = same && std::memcmp(ref_out, fast_out, part) == 0;
            }
#ifdef QFORGE_BENCH_WITH_GGML
            s_ggml = std::min(s_ggml, ggml_seconds(t, x.data(), ref_rows, ggml_out));
#endif
        }
        const double w_fast = simd_ok ? measured / s_fast : w_ref, w_wide = wide ? measured / s_wide : 0;
        const double ratio = w_fast / w_ref;
        if (simd_ok && searched) form_rows.push_back({t, w_fast, {measured / s_other[0], measured / s_other[1]}});
        const bool ok = same && (floor == 0 || !simd_ok || ratio >= floor);
        all_ok &= ok;
        std::printf("%-6s %9lld %12.1f %11.1f %6.1fx %5.0fx %-9s %12.1f %6.1fx %11.1f%s\n", std::string(type_name(t)).c_str(),
                    static_cast<long long>(ref_rows), w_ref / 1e6, w_fast / 1e6, ratio, floor, same ? "yes" : "NO",
                    w_wide / 1e6, w_wide / w_ref, w_whole / 1e6, ok ? "" : "  <-- below floor or differs");
#ifdef QFORGE_BENCH_WITH_GGML
        const bool ggml_same = std::memcmp(ggml_out.data(), ref_out, part) == 0;
        const double w_ggml = measured / s_ggml;
        all_ok &= ggml_same;
        const double goal = goal_vs_ggml(t);
        vs_ggml.push_back({t, w_ggml, w_fast / w_ggml, wide ? w_wide / w_ggml : 0, goal, ggml_same});
#endif
    }
    if (!form_rows.empty()) {
        std::printf("\nAVX2 searches in each form, same rows, same rounds (chosen: %s; A: %s; B: %s):\n",
                    chosen.name().c_str(), others[0].name().c_str(), others[1].name().c_str());
        std::printf("%-6s %13s %9s %9s %8s %8s\n", "type", "chosen Mw/s", "A Mw/s", "B Mw/s", "A/chosen", "B/chosen");
        for (const auto& f : form_rows)
            std::printf("%-6s %13.1f %9.1f %9.1f %7.2fx %7.2fx\n", std::string(type_name(f.t)).c_str(), f.chosen / 1e6,
                        f.other[0] / 1e6, f.other[1] / 1e6, f.other[0] / f.chosen, f.other[1] / f.chosen);
    }
    if (simd_ok) off_line_rates(x);
    if (!vs_ggml.empty()) {
        std::printf("\nagainst ggml's own quantizer (ggml_quantize_chunk, same rows, same run):\n");
        std::printf("%-6s %10s %9s %11s %6s %-9s %s\n", "type", "ggml Mw/s", "avx2/ggml", "avx512/ggml", "goal", "identical",
                    "avx2 meets goal");
        for (const auto& g : vs_ggml)
            std::printf("%-6s %10.1f %8.1fx %10.1fx %5.0fx %-9s %s\n", std::string(type_name(g.t)).c_str(), g.rate / 1e6,
                        g.avx2, g.avx512, g.goal, g.same ? "yes" : "NO", g.avx2 >= g.goal ? "yes" : "no");
    }
    return all_ok ? 0 : 1;
}
