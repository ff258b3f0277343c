// bench_moe: memory and rate of converting many-expert MoE checkpoints.
//
// 1. Fused 3-D experts (transformers v5 Qwen3-MoE layout, `mlp.experts.gate_up_proj [E, 2I, H]`,
//    `down_proj [E, H, I]`), cut per expert while converting (convert/fused_experts.hpp).
//    Defaults: 128 experts, hidden 1024, moe_intermediate 256, 4 layers (~0.6 GiB of bf16;
//    QFORGE_BENCH_MOE_EXPERTS / _LAYERS change it), compressed-tensors W4A16 g128, 2 threads.
//    Reported, from one run each (the checkpoint is in the page cache for both):
//      read_input   every cache line of the input through the mmap reader (the I/O floor);
//      convert_moe  the conversion, with peak resident memory (VmHWM, reset just before) against
//                   the largest fused tensor and against one expert's block of it;
//      convert_moe_copied  the same reading each whole source tensor into memory first
//                   (--read-copy): the memory of not streaming the experts, a same-run baseline.
//    Floor: VmHWM <= largest fused tensor / 2 + 128 MiB, i.e. memory follows experts, not the
//    fused tensor (each expert's pages are dropped once it is copied out).
// 2. An FP8 block-scaled MoE source (quant_method "fp8", weight_block_size [128, 128]: every
//    decoder linear F8_E4M3 [N, K] with its F32 `weight_scale_inv [N/128, K/128]`, per-expert
//    `mlp.experts.E.{gate,up,down}_proj`, the Qwen3-FP8 / DeepSeek-V3 layout), decoded tensor by
//    tensor while converting to compressed-tensors W4A16 g128 (convert/fp8_source.hpp), at two
//    expert counts: QFORGE_BENCH_FP8_EXPERTS (default 160: ~1 GiB; hidden 1024, moe_intermediate
//    512, 4 layers) and a quarter of it. Each size reports
//      read_fp8_E      every byte of its shards read with pread in 8 MiB chunks (the same bytes);
//      convert_fp8_E   G weights/s, the ratio to the read, and VmHWM above the resident size just
//                      before (reset then) against the largest decoded (F32) tensor.
//    Floor: the peak above the start <= 16 decoded tensors + 64 MiB at either size, and the
//    large one's <= the small one's + 32 MiB (memory flat in the expert count).
// 3. gpt-oss as OpenAI ships it (quant_method "mxfp4": each fused expert tensor as U8 MXFP4
//    blocks [E, N, K/32, 16] + E8M0 scales, convert/gpt_oss_source.hpp; qforge-make-demo
//    --moe gpt-oss-mxfp4, hidden 1024, moe_intermediate 1024, 4 layers), decoded one expert's
//    rows at a time while converting to compressed-tensors NVFP4A16, at two expert counts:
//    QFORGE_BENCH_OSS_EXPERTS (default 32, ~240 MB on disk) and a quarter of it. Each reports
//      read_oss_E      every byte of its shards read with pread (the I/O floor);
//      convert_oss_E   G weights/s (the weights the blocks stand for), the ratio to the read, and
//                      VmHWM above the resident size just before.
//    Floor: the large one's peak above the start <= the small one's + 32 MiB (flat in E).
// 4. The same gpt-oss in bf16 written as its native MXFP4 (convert/gpt_oss_mxfp4.hpp:
//    --format gpt-oss-mxfp4), one expert's rows at a time, at the same two expert counts:
//      read_native_E / convert_native_E  as for 3. Floor: flat in E, as for 3.
// Exits 1 when a floor is missed.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/convert/gpt_oss_mxfp4.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/safetensors/index.hpp"

#include "bench/support.hpp"

namespace {

using namespace qforge;

using qforge_bench::env_or;
using qforge_bench::reset_hwm;
using qforge_bench::vm_hwm_mib;
using qforge_bench::vm_rss_mib;

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
        g.read_s = qforge_bench::read_every_line(g.src);
        state.SetIterationTime(g.read_s);
    }
    state.counters["GB_per_s"] = static_cast<double>(g.bytes) / g.read_s / 1e9;
}

void run_convert(benchmark::State& state, source_read read, double& hwm, double& secs) {
    for (auto _ : state) {
        convert_options o = qforge_bench::bench_options(output_format::compressed_tensors, {4, 128, true, scale_method::minmax, std::nullopt});
        o.read = read;
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

// ---- 2. FP8 block-scaled MoE source ----

/// One FP8 checkpoint and what its benchmarks measured.
struct fp8_state {
    std::int64_t experts = 0;
    std::string src;
    std::uint64_t bytes = 0, weights = 0, largest_decoded = 0;
    double read_s = 0, convert_s = 0, start_mib = 0, hwm_mib = 0;
};
fp8_state fp8_small, fp8_large;

demo_options fp8_model(std::int64_t experts) {
    demo_options o;
    o.hidden = 1024;
    o.intermediate = 2048;
    o.heads = 8;
    o.kv_heads = 4;
    o.vocab = 4096;
    o.tied = false;
    o.layers = 4;
    o.moe = demo_moe::qwen_moe;
    o.experts = experts;
    o.moe_intermediate = 512;
    return o;
}

/// A decoder linear the FP8 source stores in F8_E4M3 (not the router, norms, embeddings, head).
bool fp8_linear(const planned_tensor& t) {
    return t.shape.size() == 2 && t.name.starts_with("model.layers.") && !t.name.ends_with("mlp.gate.weight");
}

/// The demo MoE's tensors with every decoder linear as F8_E4M3 + its F32 128 x 128 scale grid,
/// codes from a reused pool (|value| < 16, no NaN code), scales near 1/1024; config.json with
/// the source's quantization_config.
void make_fp8_checkpoint(fp8_state& st) {
    const demo_options o = fp8_model(st.experts);
    st.src = g.root + "/fp8-" + std::to_string(st.experts);
    io::make_directory(st.src);
    std::vector<safetensors::tensor_spec> specs;
    for (const auto& t : demo_tensors(o)) {
        const std::uint64_t n = static_cast<std::uint64_t>(checked_numel(t.shape));
        st.weights += n;
        if (!fp8_linear(t)) {
            specs.push_back({t.name, t.type, t.shape});
            st.largest_decoded = std::max(st.largest_decoded, n * 4);
            continue;
        }
        st.largest_decoded = std::max(st.largest_decoded, n * 4);
        specs.push_back({t.name, dtype::F8_E4M3, t.shape});
        specs.push_back({t.name + "_scale_inv", dtype::F32, {(t.shape[0] + 127) / 128, (t.shape[1] + 127) / 128}});
    }
    for (const auto& s : specs) st.bytes += static_cast<std::uint64_t>(checked_numel(s.shape)) * dtype_size(s.type);
    safetensors::sharded_writer w(st.src, specs, st.bytes / 4 + 1, safetensors::default_metadata(), {.sync = false});
    std::vector<std::uint8_t> pool(std::size_t{1} << 20);
    std::uint64_t x = 0x9E3779B97F4A7C15ull;
    for (auto& c : pool) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        c = static_cast<std::uint8_t>((x & 0x80) | ((x >> 8) % 0x58));  // sign | magnitude code < 0x58 (< 16)
    }
    std::vector<std::byte> buf;
    std::size_t shift = 0;
    for (const auto& s : specs) {
        const std::size_t n = static_cast<std::size_t>(checked_numel(s.shape));
        buf.resize(n * dtype_size(s.type));
        if (s.type == dtype::F8_E4M3) {
            for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<std::byte>(pool[(i + shift) % pool.size()]);
        } else if (s.type == dtype::F32) {
            for (std::size_t i = 0; i < n; ++i) {
                const float v = (1.0f + static_cast<float>(i % 7) / 16.0f) / 1024.0f;
                std::memcpy(buf.data() + 4 * i, &v, 4);
            }
        } else {
            for (std::size_t i = 0; i < n; ++i) {
                const std::uint16_t h = s.shape.size() == 1 ? 0x3F80 : float_to_bf16(0.02f * static_cast<float>(static_cast<int>(pool[(i + shift) % pool.size()] & 0x7F) - 44) / 44.0f);
                std::memcpy(buf.data() + 2 * i, &h, 2);
            }
        }
        shift += 7919;
        w.write(s.name, buf);
    }
    w.finish();
    write_demo_side_files(st.src, o);
    json cfg = json::parse(io::read_file(st.src + "/config.json"));
    cfg.set("quantization_config", json::object({{"quant_method", "fp8"},
                                                 {"fmt", "e4m3"},
                                                 {"activation_scheme", "dynamic"},
                                                 {"weight_block_size", json::array({128, 128})}}));
    io::write_file(st.src + "/config.json", cfg.dump({.indent = 2}) + "\n");
}

/// Every byte of the checkpoint's shards through pread, 8 MiB at a time (what the converter's
/// default pread path reads, without the decoding, quantizing and writing).
double read_all_pread(const std::string& dir) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<char> chunk(8u << 20);
    std::uint64_t sum = 0;
    for (const std::string& f : io::list_directory(dir)) {
        if (!f.ends_with(".safetensors")) continue;
        const int fd = ::open((dir + "/" + f).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        for (off_t at = 0;;) {
            const ssize_t n = ::pread(fd, chunk.data(), chunk.size(), at);
            if (n <= 0) break;
            for (ssize_t i = 0; i < n; i += 64) sum += static_cast<unsigned char>(chunk[static_cast<std::size_t>(i)]);
            at += n;
        }
        ::close(fd);
    }
    benchmark::DoNotOptimize(sum);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void fp8_ensure(fp8_state& st, std::int64_t experts) {
    if (!st.src.empty()) return;
    st.experts = experts;
    make_fp8_checkpoint(st);
}

std::int64_t fp8_large_experts() { return static_cast<std::int64_t>(env_or("QFORGE_BENCH_FP8_EXPERTS", 160)); }

void read_fp8(benchmark::State& state, fp8_state& st, std::int64_t experts) {
    fp8_ensure(st, experts);
    for (auto _ : state) {
        st.read_s = read_all_pread(st.src);
        state.SetIterationTime(st.read_s);
    }
    state.counters["GB_per_s"] = static_cast<double>(st.bytes) / st.read_s / 1e9;
}

void convert_fp8(benchmark::State& state, fp8_state& st, std::int64_t experts) {
    fp8_ensure(st, experts);
    for (auto _ : state) {
        const convert_options o =
            qforge_bench::bench_options(output_format::compressed_tensors, {4, 128, true, scale_method::minmax, std::nullopt});
        st.start_mib = vm_rss_mib();
        reset_hwm();
        const auto t0 = std::chrono::steady_clock::now();
        convert(st.src, g.root + "/fp8-out", o);
        st.convert_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        st.hwm_mib = vm_hwm_mib();
        state.SetIterationTime(st.convert_s);
        io::remove_tree(g.root + "/fp8-out");
    }
    state.counters["G_weights_per_s"] = static_cast<double>(st.weights) / st.convert_s / 1e9;
    state.counters["peak_above_start_MiB"] = st.hwm_mib - st.start_mib;
}

void read_fp8_small(benchmark::State& s) { read_fp8(s, fp8_small, std::max<std::int64_t>(1, fp8_large_experts() / 4)); }
void convert_fp8_small(benchmark::State& s) { convert_fp8(s, fp8_small, std::max<std::int64_t>(1, fp8_large_experts() / 4)); }
void read_fp8_large(benchmark::State& s) { read_fp8(s, fp8_large, fp8_large_experts()); }
void convert_fp8_large(benchmark::State& s) { convert_fp8(s, fp8_large, fp8_large_experts()); }

/// Prints one FP8 size's figures; returns whether its floor is met.
bool report_fp8(const fp8_state& st) {
    if (st.convert_s <= 0) return true;  // filtered out
    const double mib = 1 << 20, peak = st.hwm_mib - st.start_mib, tensor = static_cast<double>(st.largest_decoded) / mib;
    std::printf("FP8 MoE %lld experts: %.0f MiB, %.3f G weights in %.2f s = %.3f G weights/s; pread of the same bytes "
                "%.2f s (convert = %.1fx the read)\n",
                static_cast<long long>(st.experts), static_cast<double>(st.bytes) / mib, static_cast<double>(st.weights) / 1e9,
                st.convert_s, static_cast<double>(st.weights) / st.convert_s / 1e9, st.read_s, st.convert_s / st.read_s);
    std::printf("  peak RSS %.0f MiB, %.0f MiB above the %.0f MiB at the start = %.1f x the largest decoded tensor (%.0f MiB)\n",
                st.hwm_mib, peak, st.start_mib, peak / tensor, tensor);
    return peak <= 16 * tensor + 64;
}

// ---- 3. gpt-oss native MXFP4 source ----

fp8_state oss_small, oss_large;  // the same figures as an FP8 source's

demo_options oss_model(std::int64_t experts) {
    demo_options o = fp8_model(experts);
    o.moe = demo_moe::gpt_oss_mxfp4;
    o.moe_intermediate = 1024;
    return o;
}

void oss_ensure(fp8_state& st, std::int64_t experts) {
    if (!st.src.empty()) return;
    st.experts = experts;
    st.src = g.root + "/oss-" + std::to_string(experts);
    write_demo_checkpoint(st.src, oss_model(experts));
    demo_options bf16 = oss_model(experts);
    bf16.moe = demo_moe::gpt_oss;  // the same model with its experts in bf16: the weight count
    for (const auto& t : demo_tensors(bf16)) st.weights += static_cast<std::uint64_t>(checked_numel(t.shape));
    for (const std::string& f : io::list_directory(st.src))
        if (f.ends_with(".safetensors")) st.bytes += io::input_file(st.src + "/" + f).size();
}

std::int64_t oss_large_experts() { return static_cast<std::int64_t>(env_or("QFORGE_BENCH_OSS_EXPERTS", 32)); }

/// Every byte of st.src's shards read with pread: the I/O floor of a conversion of it.
void read_source(benchmark::State& state, fp8_state& st) {
    for (auto _ : state) {
        st.read_s = read_all_pread(st.src);
        state.SetIterationTime(st.read_s);
    }
    state.counters["GB_per_s"] = static_cast<double>(st.bytes) / st.read_s / 1e9;
}

/// `run(out)` converting st.src into the folder `out`, timed, with the peak memory above the
/// resident size just before.
void timed_conversion(benchmark::State& state, fp8_state& st, const std::function<void(const std::string&)>& run) {
    const std::string out = g.root + "/timed-out";
    for (auto _ : state) {
        st.start_mib = vm_rss_mib();
        reset_hwm();
        const auto t0 = std::chrono::steady_clock::now();
        run(out);
        st.convert_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        st.hwm_mib = vm_hwm_mib();
        state.SetIterationTime(st.convert_s);
        io::remove_tree(out);
    }
    state.counters["G_weights_per_s"] = static_cast<double>(st.weights) / st.convert_s / 1e9;
    state.counters["peak_above_start_MiB"] = st.hwm_mib - st.start_mib;
}

void read_oss(benchmark::State& state, fp8_state& st, std::int64_t experts) {
    oss_ensure(st, experts);
    read_source(state, st);
}

void convert_oss(benchmark::State& state, fp8_state& st, std::int64_t experts) {
    oss_ensure(st, experts);
    timed_conversion(state, st, [&](const std::string& out) {
        convert(st.src, out, qforge_bench::bench_options(output_format::compressed_tensors_nvfp4, {4, 16, true, scale_method::minmax, std::nullopt}));
    });
}

void read_oss_small(benchmark::State& s) { read_oss(s, oss_small, std::max<std::int64_t>(1, oss_large_experts() / 4)); }
void convert_oss_small(benchmark::State& s) { convert_oss(s, oss_small, std::max<std::int64_t>(1, oss_large_experts() / 4)); }
void read_oss_large(benchmark::State& s) { read_oss(s, oss_large, oss_large_experts()); }
void convert_oss_large(benchmark::State& s) { convert_oss(s, oss_large, oss_large_experts()); }

void report_oss(const fp8_state& st) {
    if (st.convert_s <= 0) return;  // filtered out
    const double mib = 1 << 20;
    std::printf("gpt-oss MXFP4 %lld experts: %.0f MiB on disk, %.3f G weights in %.2f s = %.3f G weights/s; pread of the "
                "same bytes %.2f s (convert = %.1fx the read); peak RSS %.0f MiB, %.0f MiB above the start\n",
                static_cast<long long>(st.experts), static_cast<double>(st.bytes) / mib, static_cast<double>(st.weights) / 1e9,
                st.convert_s, static_cast<double>(st.weights) / st.convert_s / 1e9, st.read_s, st.convert_s / st.read_s,
                st.hwm_mib, st.hwm_mib - st.start_mib);
}

// ---- 4. a bf16 gpt-oss written as its native MXFP4 (convert/gpt_oss_mxfp4.hpp) ----

fp8_state native_small, native_large;

void native_ensure(fp8_state& st, std::int64_t experts) {
    if (!st.src.empty()) return;
    st.experts = experts;
    st.src = g.root + "/oss-bf16-" + std::to_string(experts);
    demo_options o = oss_model(experts);
    o.moe = demo_moe::gpt_oss;
    write_demo_checkpoint(st.src, o);
    for (const auto& t : demo_tensors(o)) st.weights += static_cast<std::uint64_t>(checked_numel(t.shape));
    for (const std::string& f : io::list_directory(st.src))
        if (f.ends_with(".safetensors")) st.bytes += io::input_file(st.src + "/" + f).size();
}

void read_native(benchmark::State& state, fp8_state& st, std::int64_t experts) {
    native_ensure(st, experts);
    read_source(state, st);
}

void convert_native(benchmark::State& state, fp8_state& st, std::int64_t experts) {
    native_ensure(st, experts);
    timed_conversion(state, st, [&](const std::string& out) {
        gpt_oss_mxfp4_options o;
        o.threads = static_cast<unsigned>(env_or("QFORGE_BENCH_THREADS", 2));
        convert_gpt_oss_mxfp4(st.src, out, o);
    });
}

void read_native_small(benchmark::State& s) { read_native(s, native_small, std::max<std::int64_t>(1, oss_large_experts() / 4)); }
void convert_native_small(benchmark::State& s) { convert_native(s, native_small, std::max<std::int64_t>(1, oss_large_experts() / 4)); }
void read_native_large(benchmark::State& s) { read_native(s, native_large, oss_large_experts()); }
void convert_native_large(benchmark::State& s) { convert_native(s, native_large, oss_large_experts()); }

void report_native(const fp8_state& st) {
    if (st.convert_s <= 0) return;  // filtered out
    const double mib = 1 << 20;
    std::printf("gpt-oss bf16 -> native MXFP4, %lld experts: %.0f MiB, %.3f G weights in %.2f s = %.3f G weights/s; pread of "
                "the same bytes %.2f s (convert = %.1fx the read); peak RSS %.0f MiB, %.0f MiB above the start\n",
                static_cast<long long>(st.experts), static_cast<double>(st.bytes) / mib, static_cast<double>(st.weights) / 1e9,
                st.convert_s, static_cast<double>(st.weights) / st.convert_s / 1e9, st.read_s, st.convert_s / st.read_s,
                st.hwm_mib, st.hwm_mib - st.start_mib);
}

BENCHMARK(read_input)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(convert_moe)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(convert_moe_copied)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(read_fp8_small)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(convert_fp8_small)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(read_fp8_large)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(convert_fp8_large)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(read_oss_small)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(convert_oss_small)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(read_oss_large)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(convert_oss_large)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(read_native_small)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(convert_native_small)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(read_native_large)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(convert_native_large)->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);

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
    bool ok = g.hwm_mib <= floor;
    std::printf("floor: %s\n\n", ok ? "met" : "MISSED");
    const bool fp8_ok = report_fp8(fp8_small) && report_fp8(fp8_large);
    const bool flat = fp8_small.convert_s <= 0 || fp8_large.convert_s <= 0 ||
                      fp8_large.hwm_mib - fp8_large.start_mib <= fp8_small.hwm_mib - fp8_small.start_mib + 32;
    std::printf("FP8 floor (peak above start <= 16 decoded tensors + 64 MiB; %lld experts <= %lld experts + 32 MiB): %s\n",
                static_cast<long long>(fp8_large.experts), static_cast<long long>(fp8_small.experts),
                fp8_ok && flat ? "met" : "MISSED");
    report_oss(oss_small);
    report_oss(oss_large);
    const bool oss_flat = oss_small.convert_s <= 0 || oss_large.convert_s <= 0 ||
                          oss_large.hwm_mib - oss_large.start_mib <= oss_small.hwm_mib - oss_small.start_mib + 32;
    std::printf("gpt-oss floor (%lld experts' peak above start <= %lld experts' + 32 MiB): %s\n",
                static_cast<long long>(oss_large.experts), static_cast<long long>(oss_small.experts), oss_flat ? "met" : "MISSED");
    report_native(native_small);
    report_native(native_large);
    const bool native_flat = native_small.convert_s <= 0 || native_large.convert_s <= 0 ||
                             native_large.hwm_mib - native_large.start_mib <= native_small.hwm_mib - native_small.start_mib + 32;
    std::printf("gpt-oss bf16 -> native MXFP4 floor (%lld experts' peak above start <= %lld experts' + 32 MiB): %s\n",
                static_cast<long long>(native_large.experts), static_cast<long long>(native_small.experts),
                native_flat ? "met" : "MISSED");
    ok = ok && fp8_ok && flat && oss_flat && native_flat;
    return ok ? 0 : 1;
}
