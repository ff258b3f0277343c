// bench_moe: memory and rate of converting a many-expert MoE checkpoint whose experts are fused
// 3-D tensors (transformers v5 Qwen3-MoE layout, `mlp.experts.gate_up_proj [E, 2I, H]`,
// `down_proj [E, H, I]`), cut per expert while converting (convert/fused_experts.hpp).
// Defaults: 128 experts, hidden 1024, moe_intermediate 256, 4 layers (~0.6 GiB of bf16;
// QFORGE_BENCH_MOE_EXPERTS / _LAYERS change it), compressed-tensors W4A16 g128, 2 threads.
//
// Reported, from one run each (the checkpoint is in the page cache for both):
//   read_input   every cache line of the input through the mmap reader (the I/O floor);
//   convert_moe  the conversion, with peak resident memory (VmHWM, reset just before) against
//                the largest fused tensor and against one expert's block of it;
//   convert_moe_copied  the same reading each whole source tensor into memory first (--read-copy):
//                the memory of not streaming the experts, as a same-run baseline.
// Floor: VmHWM <= largest fused tensor / 2 + 128 MiB, i.e. memory follows experts, not the
// fused tensor (each expert's pages are dropped once it is copied out). Exits 1 when missed.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/safetensors/index.hpp"

#include "bench/support.hpp"

namespace {

using namespace qforge;

using qforge_bench::env_or;
using qforge_bench::reset_hwm;
using qforge_bench::vm_hwm_mib;

struct bench_state {
    std::string root = "/tmp/qforge-bench-moe-" + std::to_string(::getpid());
    std::string src = root + "/src";
    std::uint64_t bytes = 0, largest = 0, expert_block = 0;
    double hwm_mib = 0, read_s = 0, convert_s = 0, copied_hwm_mib = 0, copied_s = 0;
} g;

demo_options model() {
    demo_options o;
    o.hidden = 1024;
    o.intermediate = 2048;
    o.heads = 8;
    o.kv_heads = 4;
    o.vocab = 4096;
    o.tied = false;
    o.layers = static_cast<std::int64_t>(env_or("QFORGE_BENCH_MOE_LAYERS", 4));
    o.moe = demo_moe::qwen_moe_fused;
    o.experts = static_cast<std::int64_t>(env_or("QFORGE_BENCH_MOE_EXPERTS", 128));
    o.moe_intermediate = 256;
    return o;
}

/// The demo model's tensors, filled from a reused pool of Student-t values (drawing every
/// weight would dominate the run), plus the demo's config and tokenizer files.
void make_checkpoint() {
    const demo_options o = model();
    io::make_directory(g.root);
    io::make_directory(g.src);
    const qforge_bench::checkpoint_sizes sizes = qforge_bench::sizes_of(demo_tensors(o));
    g.bytes = sizes.bytes;
    g.largest = sizes.largest;
    g.expert_block = sizes.expert_block;
    qforge_bench::write_pooled_shards(g.src, o, 20, 11);
    write_demo_side_files(g.src, o);
}

void read_input(benchmark::State& state) {
    for (auto _ : state) {
        const auto t0 = std::chrono::steady_clock::now();
        safetensors::sharded_reader r(g.src);
        std::uint64_t sum = 0;
        for (const std::string& n : r.tensor_names()) {
            const tensor_view v = r.view(n);
            for (std::size_t i = 0; i < v.bytes.size(); i += 64) sum += static_cast<std::uint64_t>(v.bytes[i]);
            r.release(n);
        }
        benchmark::DoNotOptimize(sum);
        g.read_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        state.SetIterationTime(g.read_s);
    }
    state.counters["GB_per_s"] = static_cast<double>(g.bytes) / g.read_s / 1e9;
}

void run_convert(benchmark::State& state, source_read read, double& hwm, double& secs) {
    for (auto _ : state) {
        convert_options o;
        o.read = read;
        o.format = output_format::compressed_tensors;
        o.rules.default_scheme = quant_spec{4, 128, true, scale_method::minmax, std::nullopt};
        o.threads = static_cast<unsigned>(env_or("QFORGE_BENCH_THREADS", 2));
        o.overwrite = true;
        reset_hwm();
        const auto t0 = std::chrono::steady_clock::now();
        convert(g.src, g.root + "/out", o);
        secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        hwm = vm_hwm_mib();
        state.SetIterationTime(secs);
    }
    state.counters["G_weights_per_s"] = static_cast<double>(g.bytes / 2) / secs / 1e9;
    state.counters["VmHWM_MiB"] = hwm;
}

void convert_moe(benchmark::State& state) { run_convert(state, source_read::mapped, g.hwm_mib, g.convert_s); }
/// The same with source_read::copied, which holds each whole source tensor in memory: the
/// baseline a converter that does not stream experts pays (the fused tensor, at least).
void convert_moe_copied(benchmark::State& state) { run_convert(state, source_read::copied, g.copied_hwm_mib, g.copied_s); }

BENCHMARK(read_input)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(convert_moe)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(convert_moe_copied)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    std::fprintf(stderr, "generating a fused-expert MoE checkpoint in %s ...\n", g.src.c_str());
    make_checkpoint();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    io::remove_tree(g.root);
    const double mib = 1 << 20, floor = static_cast<double>(g.largest) / mib / 2 + 128;
    std::printf("\nconvert fused MoE (%lld experts): %.0f MiB in %.2f s; read alone %.2f s (%.2fx of convert)\n",
                static_cast<long long>(model().experts), static_cast<double>(g.bytes) / mib, g.convert_s, g.read_s,
                g.read_s / g.convert_s);
    std::printf("peak VmHWM %.0f MiB; largest fused tensor %.0f MiB, one expert's block of it %.2f MiB; floor %.0f MiB\n",
                g.hwm_mib, static_cast<double>(g.largest) / mib, static_cast<double>(g.expert_block) / mib, floor);
    std::printf("same run, whole tensors held (--read-copy): VmHWM %.0f MiB in %.2f s\n", g.copied_hwm_mib, g.copied_s);
    const bool ok = g.hwm_mib <= floor;
    std::printf("floor: %s\n", ok ? "met" : "MISSED");
    return ok ? 0 : 1;
}
