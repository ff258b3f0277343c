// safetensors I/O throughput next to same-run baselines.
//
//   QFORGE_BENCH_IO_MIB=1024 ./bench_io      (default 1024 MiB; e.g. 64 for a quick run)
//   QFORGE_BENCH_IO_DIR=/tmp                 (where the scratch file goes; removed at exit)
//
// Pairs (the ratio table at the end divides each by its baseline):
//   write_streaming  (safetensors::writer, header + 64 tensors)  vs  write_plain (write() loop
//                    of the same header and tensor buffers into a fresh file)     floor: <= 1.3x
//   read_mmap_view_checksum (reader + zero-copy views, summed)   vs  checksum_in_memory
//   read_pread_into  (reader in pread mode, read_tensor_into)    vs  pread_plain (pread loop)
//   read_band_pread_checksum (the converter's default read: each 2.75 MiB band, 128 rows of
//                    11008 bf16, read with read_tensor_range into a reused buffer, summed)
//                                                               vs  read_mmap_view_checksum
//   view_all_tensors (views only, no byte touched: cost per view is what "no copy" means)
//   memcpy_baseline  (memcpy of the same bytes, for scale)
// Neither writer fsyncs (fsync time is the disk's, not qforge's).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace {

namespace st = qforge::safetensors;

constexpr std::size_t tensor_count = 64;

struct fixture {
    std::size_t total = 0;
    std::vector<st::tensor_spec> specs;
    std::vector<std::byte> data;  // all tensors back to back, in file order
    std::vector<std::byte> sink;  // destination for memcpy / pread
    std::string dir;
    std::string read_path, write_path, plain_path;
    st::file_layout layout;

    fixture() {
        const char* mib = std::getenv("QFORGE_BENCH_IO_MIB");
        const std::size_t mebibytes = mib ? std::strtoull(mib, nullptr, 10) : 1024;
        const char* d = std::getenv("QFORGE_BENCH_IO_DIR");
        dir = d && *d ? d : "/tmp";
        const std::size_t per_tensor = (mebibytes << 20) / tensor_count / 2 * 2;
        for (std::size_t i = 0; i < tensor_count; ++i)
            specs.push_back({"model.layers." + std::to_string(i) + ".weight", qforge::dtype::BF16,
                             {static_cast<std::int64_t>(per_tensor / 2)}});
        layout = st::plan_file(specs);
        total = per_tensor * tensor_count;
        data.resize(total);
        std::uint64_t x = 0x9E3779B97F4A7C15ull;
        for (std::size_t i = 0; i < total; i += 8) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            std::memcpy(data.data() + i, &x, std::min<std::size_t>(8, total - i));
        }
        sink.resize(total);
        const std::string tag = std::to_string(::getpid());
        read_path = dir + "/qforge-bench-io-read-" + tag + ".safetensors";
        write_path = dir + "/qforge-bench-io-write-" + tag + ".safetensors";
        plain_path = dir + "/qforge-bench-io-plain-" + tag + ".bin";
        write_with_qforge(read_path);
    }
    ~fixture() {
        std::remove(read_path.c_str());
        std::remove(write_path.c_str());
        std::remove(plain_path.c_str());
    }

    std::span<const std::byte> tensor_bytes(std::size_t i) const {
        return {data.data() + layout.begins[i], static_cast<std::size_t>(layout.sizes[i])};
    }

    void write_with_qforge(const std::string& path) const {
        st::writer w(path, specs, st::default_metadata(), {.sync = false});
        for (std::size_t i = 0; i < w.order().size(); ++i) w.write(w.order()[i].name, tensor_bytes(i));
        w.finish();
    }
};

fixture& fx() {
    static fixture f;
    return f;
}

std::uint64_t checksum(std::span<const std::byte> b) {
    std::uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    std::size_t i = 0;
    for (; i + 32 <= b.size(); i += 32) {
        std::uint64_t w[4];
        std::memcpy(w, b.data() + i, 32);
        s0 += w[0], s1 += w[1], s2 += w[2], s3 += w[3];
    }
    for (; i < b.size(); ++i) s0 += static_cast<std::uint64_t>(b[i]);
    return s0 ^ s1 ^ s2 ^ s3;
}

void write_plain(benchmark::State& state) {
    auto& f = fx();
    const std::string prefix = f.layout.prefix();
    for (auto _ : state) {
        const int fd = ::open(f.plain_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd < 0) state.SkipWithError("open failed");
        auto put = [&](const void* p, std::size_t n) {
            const auto* c = static_cast<const char*>(p);
            while (n) {
                const ssize_t w = ::write(fd, c, n);
                if (w <= 0) {
                    state.SkipWithError("write failed");
                    return;
                }
                c += w, n -= static_cast<std::size_t>(w);
            }
        };
        put(prefix.data(), prefix.size());
        for (std::size_t i = 0; i < tensor_count; ++i) put(f.tensor_bytes(i).data(), f.tensor_bytes(i).size());
        ::close(fd);
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.total));
}

void write_streaming(benchmark::State& state) {
    auto& f = fx();
    for (auto _ : state) f.write_with_qforge(f.write_path);
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.total));
}

void memcpy_baseline(benchmark::State& state) {
    auto& f = fx();
    for (auto _ : state) {
        std::memcpy(f.sink.data(), f.data.data(), f.total);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.total));
}

void checksum_in_memory(benchmark::State& state) {
    auto& f = fx();
    for (auto _ : state) benchmark::DoNotOptimize(checksum(f.data));
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.total));
}

void read_mmap_view_checksum(benchmark::State& state) {
    auto& f = fx();
    for (auto _ : state) {
        st::reader r(f.read_path);
        std::uint64_t sum = 0;
        for (const auto& t : r.tensors()) sum ^= checksum(r.view(t.name).bytes);
        benchmark::DoNotOptimize(sum);
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.total));
}

// What source_read::pread does per quantizer task: pread one band into a buffer that stays in
// cache, then read it (here: the checksum; in the converter: the quantizer).
void read_band_pread_checksum(benchmark::State& state) {
    auto& f = fx();
    constexpr std::size_t band = 128 * 11008 * 2;
    std::vector<std::byte> buf(band);
    for (auto _ : state) {
        st::reader r(f.read_path);
        std::uint64_t sum = 0;
        for (const auto& t : r.tensors())
            for (std::uint64_t at = 0; at < t.size(); at += band) {
                const std::span<std::byte> b(buf.data(), static_cast<std::size_t>(std::min<std::uint64_t>(band, t.size() - at)));
                r.read_tensor_range(t.name, at, b);
                sum ^= checksum(b);
            }
        benchmark::DoNotOptimize(sum);
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.total));
}

void pread_plain(benchmark::State& state) {
    auto& f = fx();
    for (auto _ : state) {
        const int fd = ::open(f.read_path.c_str(), O_RDONLY | O_CLOEXEC);
        std::size_t done = 0;
        const std::size_t data_at = f.layout.prefix().size();
        while (done < f.total) {
            const ssize_t n = ::pread(fd, f.sink.data() + done, f.total - done, static_cast<off_t>(data_at + done));
            if (n <= 0) break;
            done += static_cast<std::size_t>(n);
        }
        ::close(fd);
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.total));
}

void read_pread_into(benchmark::State& state) {
    auto& f = fx();
    for (auto _ : state) {
        st::reader r(f.read_path, st::read_mode::pread);
        std::size_t at = 0;
        for (const auto& t : r.tensors()) {
            r.read_tensor_into(t.name, std::span<std::byte>(f.sink.data() + at, static_cast<std::size_t>(t.size())));
            at += static_cast<std::size_t>(t.size());
        }
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * f.total));
}

void view_all_tensors(benchmark::State& state) {
    auto& f = fx();
    st::reader r(f.read_path);
    for (auto _ : state)
        for (const auto& t : r.tensors()) benchmark::DoNotOptimize(r.view(t.name).bytes.data());
    state.counters["views"] = benchmark::Counter(static_cast<double>(state.iterations() * tensor_count),
                                                 benchmark::Counter::kIsRate);
}

/// Console output plus a ratio table (each measurement over its same-run baseline).
class ratio_reporter : public benchmark::ConsoleReporter {
public:
    void ReportRuns(const std::vector<Run>& runs) override {
        for (const Run& r : runs)
            seconds_[r.run_name.function_name] = r.GetAdjustedRealTime();
        ConsoleReporter::ReportRuns(runs);
    }
    void Finalize() override {
        ConsoleReporter::Finalize();
        std::printf("\nsize: %.0f MiB in %zu tensors\n", static_cast<double>(fx().total) / (1 << 20), tensor_count);
        pair("write_streaming", "write_plain", " (floor: <= 1.30)");
        pair("read_mmap_view_checksum", "checksum_in_memory", "");
        pair("read_pread_into", "pread_plain", "");
        pair("read_pread_into", "memcpy_baseline", "");
        pair("read_band_pread_checksum", "read_mmap_view_checksum", " (the converter's default read vs the mapping)");
    }

private:
    void pair(const char* what, const char* base, const char* note) {
        if (!seconds_.count(what) || !seconds_.count(base)) return;
        std::printf("ratio %-24s / %-19s = %.3f%s\n", what, base, seconds_[what] / seconds_[base], note);
    }
    std::map<std::string, double> seconds_;
};

}  // namespace

BENCHMARK(write_plain)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(4);
BENCHMARK(write_streaming)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(4);
BENCHMARK(memcpy_baseline)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(checksum_in_memory)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(read_mmap_view_checksum)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(read_band_pread_checksum)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(pread_plain)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(read_pread_into)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(view_all_tensors)->UseRealTime();

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    ratio_reporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter);
    benchmark::Shutdown();
    return 0;
}
