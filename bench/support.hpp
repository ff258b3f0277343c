// What the end-to-end benches (convert, moe, cluster) share: a synthetic checkpoint written
// from a pool of Student-t values, a clock, and the process's peak resident memory.
#pragma once

#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/core/half.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/safetensors/index.hpp"

namespace qforge_bench {

/// The environment variable `name` as a number, or `fallback` when it is unset or empty.
inline std::uint64_t env_or(const char* name, std::uint64_t fallback) {
    const char* v = std::getenv(name);
    return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

/// The options of a timed end-to-end conversion: `format` with `scheme` on every linear,
/// QFORGE_BENCH_THREADS threads (2 by default), replacing the previous run's output.
inline qforge::convert_options bench_options(qforge::output_format format, const qforge::quant_spec& scheme) {
    qforge::convert_options o;
    o.format = format;
    o.rules.default_scheme = scheme;
    o.threads = static_cast<unsigned>(env_or("QFORGE_BENCH_THREADS", 2));
    o.overwrite = true;
    return o;
}

/// Seconds on the steady clock (differences only).
inline double now_s() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

/// Peak resident memory of this process (VmHWM) in MiB, -1 when /proc does not say.
inline double vm_hwm_mib() {
    std::ifstream f("/proc/self/status");
    for (std::string line; std::getline(f, line);)
        if (line.starts_with("VmHWM:")) return std::stod(line.substr(6)) / 1024.0;
    return -1;
}

/// Resident memory of this process now (VmRSS) in MiB, -1 when /proc does not say.
inline double vm_rss_mib() {
    std::ifstream f("/proc/self/status");
    for (std::string line; std::getline(f, line);)
        if (line.starts_with("VmRSS:")) return std::stod(line.substr(6)) / 1024.0;
    return -1;
}

/// Resets VmHWM to the current resident size (clear_refs 5), so a peak is the next step's.
inline void reset_hwm() {
    std::ofstream f("/proc/self/clear_refs");
    f << "5";
}

/// User + system CPU seconds of every thread of this process so far.
inline double process_cpu_s() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

/// Llama-shaped widths (hidden 2048, MLP 5632, vocab 32000), as many layers as fit
/// `target_bytes` of bf16 weights.
inline qforge::demo_options llama_like(std::uint64_t target_bytes) {
    qforge::demo_options o;
    o.hidden = 2048;
    o.intermediate = 5632;
    o.heads = 16;
    o.kv_heads = 16;
    o.vocab = 32000;
    const std::uint64_t per_layer = 2 * (4 * 2048ull * 2048 + 3 * 2048ull * 5632), embed = 2 * 32000ull * 2048;
    o.layers = static_cast<std::int64_t>(std::max<std::uint64_t>(1, (target_bytes > embed ? target_bytes - embed : 0) / per_layer));
    return o;
}

/// Sizes of a synthetic checkpoint's tensors.
struct checkpoint_sizes {
    std::uint64_t bytes = 0;         ///< all tensors
    std::uint64_t largest = 0;       ///< the largest tensor
    std::uint64_t expert_block = 0;  ///< the largest one-expert block of a fused 3-D tensor
};

inline checkpoint_sizes sizes_of(const std::vector<qforge::planned_tensor>& tensors) {
    checkpoint_sizes s;
    for (const auto& t : tensors) {
        s.bytes += t.bytes();
        s.largest = std::max(s.largest, t.bytes());
        if (t.shape.size() == 3) s.expert_block = std::max(s.expert_block, t.bytes() / static_cast<std::uint64_t>(t.shape[0]));
    }
    return s;
}

/// The demo model `o`'s tensors into two shards under `dir`, each weight filled from a reused
/// pool of 2^pool_log2 Student-t values at shifting offsets (drawing every weight would
/// dominate the run), norms 1.0.
inline void write_pooled_shards(const std::string& dir, const qforge::demo_options& o, int pool_log2, std::uint64_t seed) {
    using namespace qforge;
    const auto tensors = demo_tensors(o);
    std::vector<safetensors::tensor_spec> specs;
    for (const auto& t : tensors) specs.push_back({t.name, t.type, t.shape});
    safetensors::sharded_writer w(dir, specs, sizes_of(tensors).bytes / 2 + 1, safetensors::default_metadata(), {.sync = false});
    detail::demo_rng rng(seed);
    std::vector<std::uint16_t> pool(std::size_t{1} << pool_log2);
    for (auto& h : pool) h = float_to_bf16(static_cast<float>(0.02 * rng.student_t5()));
    std::vector<std::uint16_t> buf;
    std::size_t shift = 0;
    for (const auto& t : tensors) {
        buf.resize(static_cast<std::size_t>(t.bytes() / 2));
        for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = t.shape.size() == 1 ? 0x3F80 : pool[(i + shift) % pool.size()];
        shift += 7919;
        w.write(t.name, std::as_bytes(std::span<const std::uint16_t>(buf)));
    }
    w.finish();
}

/// Seconds to read every cache line of the checkpoint in `dir` through the mapping reader (one
/// byte per 64-byte line, each tensor released after): the converters' I/O floor.
inline double read_every_line(const std::string& dir) {
    const double t0 = now_s();
    qforge::safetensors::sharded_reader r(dir);
    std::uint64_t sum = 0;
    for (const std::string& n : r.tensor_names()) {
        const qforge::tensor_view v = r.view(n);
        for (std::size_t i = 0; i < v.bytes.size(); i += 64) sum += static_cast<std::uint64_t>(v.bytes[i]);
        r.release(n);
    }
    benchmark::DoNotOptimize(sum);
    return now_s() - t0;
}

/// The config.json a llama_like checkpoint needs (tied embeddings), with what the GGUF
/// converter reads too.
inline void write_llama_config(const std::string& dir, const qforge::demo_options& o) {
    using qforge::json;
    json cfg = json::object({{"model_type", json("llama")}, {"hidden_size", json(o.hidden)},
                             {"intermediate_size", json(o.intermediate)}, {"num_attention_heads", json(o.heads)},
                             {"num_key_value_heads", json(o.kv_heads)}, {"num_hidden_layers", json(o.layers)},
                             {"vocab_size", json(o.vocab)}, {"rms_norm_eps", json(1e-5)}, {"rope_theta", json(10000.0)},
                             {"max_position_embeddings", json(2048)}, {"tie_word_embeddings", json(true)}});
    qforge::io::write_file(dir + "/config.json", cfg.dump({.indent = 2}));
}

}  // namespace qforge_bench
