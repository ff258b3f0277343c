// Packing alone, from codes, per layout and bit width, against a memcpy of the same source
// code bytes in the same run. Floor (issue 4): 4-bit GPTQ / compressed-tensors / AWQ packing
// at least 0.5x the memcpy speed. Every benchmark reports bytes_per_second over the source
// codes (N*K bytes), so the ratio to `memcpy_codes` is the figure to read.
//
//   kernel/...  the packing of the big tensor (qweight / weight_packed) into a preallocated buffer
//   layout/...  the whole layout.pack(): checks, qweight, zeros, scales, g_idx, owned tensors
//   e2e/...     quantize + pack of a 4096 x 11008 BF16 Student-t(df 5, std 0.02) matrix (the
//               one bench_quantize uses): quantize_packed (band by band, straight into the
//               layout's tensors) beside pack(quantize()) (all codes first, then packed), single
//               thread; Gw_per_s = weights per second / 1e9 of wall time, Gw_per_cpu_s per
//               second of process CPU time (steadier on a shared machine). The ratio of the two
//               rows of one layout is the figure to read.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/detail/pack_bits.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/layout/quantize_packed.hpp"
#include "qforge/quant/quantize.hpp"
#include "tests/support/synthetic.hpp"

namespace {

using namespace qforge;

constexpr std::int64_t N = 4096, K = 4096, group = 128;

const quantized_tensor& codes_of(int bits) {
    static std::vector<quantized_tensor> cache(9);
    quantized_tensor& q = cache[static_cast<std::size_t>(bits)];
    if (q.codes.empty()) {
        q.name = "bench.weight";
        q.bits = bits;
        q.rows = N;
        q.cols = K;
        q.group_size = group;
        q.symmetric = true;
        q.scale_dtype = dtype::F16;
        std::mt19937 rng(static_cast<unsigned>(bits));
        q.codes.resize(static_cast<std::size_t>(N * K));
        for (auto& c : q.codes) c = static_cast<std::uint8_t>(rng() & ((1u << bits) - 1));
        q.scales.assign(static_cast<std::size_t>(N * q.groups()), float_to_fp16(0.01f));
        q.zeros.assign(static_cast<std::size_t>(N * q.groups()), 1 << (bits - 1));
    }
    return q;
}

void memcpy_codes(benchmark::State& state) {
    const auto& q = codes_of(4);
    std::vector<std::uint8_t> dst(q.codes.size());
    for (auto _ : state) {
        std::memcpy(dst.data(), q.codes.data(), q.codes.size());
        benchmark::DoNotOptimize(dst.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * N * K);
}
BENCHMARK(memcpy_codes)->Unit(benchmark::kMillisecond)->UseRealTime();

template <int Bits>
void kernel_gptq(benchmark::State& state) {
    const auto& q = codes_of(Bits);
    std::vector<std::uint32_t> out(static_cast<std::size_t>(K * Bits / 32 * N));
    for (auto _ : state) {
        detail::pack_dense_transposed(q.codes.data(), N, K, Bits, out.data());
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * N * K);
}

template <int Bits, bool Dense>
void kernel_ct(benchmark::State& state) {
    const auto& q = codes_of(Bits);
    const std::int64_t wk = Dense ? detail::dense_words(K, Bits) : detail::padded_words(K, Bits);
    std::vector<std::uint32_t> out(static_cast<std::size_t>(wk * N));
    for (auto _ : state) {
        for (std::int64_t r = 0; r < N; ++r) {
            if constexpr (Dense) detail::pack_dense(q.codes.data() + r * K, 1, K, Bits, out.data() + r * wk, 1);
            else detail::pack_padded(q.codes.data() + r * K, 1, K, Bits, out.data() + r * wk, 1);
        }
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * N * K);
}

void kernel_awq4(benchmark::State& state) {
    const auto& q = codes_of(4);
    std::vector<std::uint32_t> out(static_cast<std::size_t>(K * N / 8));
    for (auto _ : state) {
        detail::pack_awq4(q.codes.data(), 1, K, K, N, out.data());
        benchmark::DoNotOptimize(out.data());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * N * K);
}

template <class L>
void layout_pack(benchmark::State& state, L layout, int bits) {
    const auto& q = codes_of(bits);
    for (auto _ : state) {
        auto ts = layout.pack(q, "m");
        benchmark::DoNotOptimize(ts.data());
    }
    state.SetBytesProcessed(state.iterations() * N * K);
}

constexpr std::int64_t kRows = 4096, kCols = 11008;

const std::vector<std::uint16_t>& big_matrix() {
    static const std::vector<std::uint16_t> m = testing::bench_bf16_matrix(kRows, kCols);
    return m;
}

double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

quant_options e2e_options(bool symmetric, dtype scale_dtype) {
    quant_options o;
    o.bits = 4;
    o.group_size = 128;
    o.symmetric = symmetric;
    o.policy = symmetric ? scale_policy::gptq_absmax : scale_policy::awq_minmax;  // RTN
    o.scale_dtype = scale_dtype;
    return o;
}

template <class L>
void e2e(benchmark::State& state, L layout, quant_options o, bool banded) {
    const auto& m = big_matrix();
    const tensor_view v{"bench.weight", dtype::BF16, {kRows, kCols},
                        std::span<const std::byte>(reinterpret_cast<const std::byte*>(m.data()), m.size() * 2)};
    const double cpu0 = process_cpu_seconds();
    for (auto _ : state) {
        auto ts = banded ? quantize_packed(v, o, layout, "m") : layout.pack(quantize(v, o), "m");
        benchmark::DoNotOptimize(ts.data());
    }
    const double cpu = process_cpu_seconds() - cpu0;
    const double weights = static_cast<double>(state.iterations()) * static_cast<double>(kRows * kCols);
    state.counters["Gw_per_s"] = benchmark::Counter(weights / 1e9, benchmark::Counter::kIsRate);
    state.counters["Gw_per_cpu_s"] = weights / 1e9 / cpu;
}

}  // namespace

BENCHMARK(kernel_gptq<4>)->Name("kernel/gptq/4")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_ct<4, false>)->Name("kernel/ct/4")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_awq4)->Name("kernel/awq/4")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_gptq<2>)->Name("kernel/gptq/2")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_gptq<3>)->Name("kernel/gptq/3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_gptq<8>)->Name("kernel/gptq/8")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_ct<2, false>)->Name("kernel/ct/2")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_ct<3, false>)->Name("kernel/ct/3-padded")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_ct<3, true>)->Name("kernel/ct/3-dense")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_ct<5, false>)->Name("kernel/ct/5-padded")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_ct<5, true>)->Name("kernel/ct/5-dense")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_ct<6, true>)->Name("kernel/ct/6-dense")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_ct<7, true>)->Name("kernel/ct/7-dense")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(kernel_ct<8, false>)->Name("kernel/ct/8")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(layout_pack, gptq4, gptq_layout<4>({.format = gptq_format::v1}), 4)
    ->Name("layout/gptq/4")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(layout_pack, ct4, compressed_tensors_layout<4>({.checkpoint_dtype = dtype::F16}), 4)
    ->Name("layout/ct/4")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(layout_pack, awq4, awq_layout<4>(), 4)
    ->Name("layout/awq/4")->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_CAPTURE(e2e, ct4_two_step, compressed_tensors_layout<4>(), e2e_options(true, dtype::BF16), false)
    ->Name("e2e/ct/4-sym-g128/pack(quantize)")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(e2e, ct4_banded, compressed_tensors_layout<4>(), e2e_options(true, dtype::BF16), true)
    ->Name("e2e/ct/4-sym-g128/quantize_packed")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(e2e, awq4_two_step, awq_layout<4>(), e2e_options(false, dtype::F16), false)
    ->Name("e2e/awq/4-asym-g128/pack(quantize)")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(e2e, awq4_banded, awq_layout<4>(), e2e_options(false, dtype::F16), true)
    ->Name("e2e/awq/4-asym-g128/quantize_packed")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(e2e, gptq4_two_step, gptq_layout<4>(), e2e_options(true, dtype::F16), false)
    ->Name("e2e/gptq/4-sym-g128/pack(quantize)")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(e2e, gptq4_banded, gptq_layout<4>(), e2e_options(true, dtype::F16), true)
    ->Name("e2e/gptq/4-sym-g128/quantize_packed")->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
