// bench_cluster: plan / work / finalize against one process on this machine (issue 18).
// A generated Llama-shaped bf16 checkpoint (~1 GiB; QFORGE_BENCH_CLUSTER_MB sets the size) is
// converted to compressed-tensors int4 g128 with round-to-nearest (minmax) and with the scale
// search (search), each:
//   one_process   convert(), 1 thread;
//   one_worker    plan (2 units) + both units in one worker process + finalize, 1 thread;
//   two_workers   plan (2 units) + two worker processes at once (fork), 1 thread each + finalize;
// in wall seconds of the same run, plus the time of plan and of finalize alone (the overhead
// a cluster run adds to the work itself: finalize re-reads and checksums every output byte).
// Every cluster output is compared with the one-process output (the program exits 1 if not
// identical). CI builds this program but does not run it (it writes ~1.5 GiB).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "qforge/convert/cluster.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/safetensors/index.hpp"

#include "bench/support.hpp"

namespace {

using namespace qforge;

std::string root = "/tmp/qforge-bench-cluster-" + std::to_string(::getpid());
std::string src = root + "/src";
bool all_identical = true;

using qforge_bench::now_s;

/// Llama-shaped widths (hidden 2048, MLP 5632), as many layers as fit the size; weights reuse
/// a pool of Student-t values at shifting offsets (sampling 0.5 G values would dominate).
void make_checkpoint(std::uint64_t target_bytes) {
    const demo_options o = qforge_bench::llama_like(target_bytes);
    io::make_directory(root);
    io::make_directory(src);
    qforge_bench::write_pooled_shards(src, o, 22, 7);
    qforge_bench::write_llama_config(src, o);
}

convert_options options(scale_method m) {
    convert_options o;
    o.format = output_format::compressed_tensors;
    o.rules.default_scheme = quant_spec{4, 128, true, m, std::nullopt};
    o.threads = 1;
    return o;
}

bool identical(const std::string& a, const std::string& b) {
    for (const auto& f : io::list_directory(a))
        if (io::read_file(a + "/" + f, std::uint64_t{1} << 34) != io::read_file(b + "/" + f, std::uint64_t{1} << 34)) return false;
    return io::list_directory(a).size() == io::list_directory(b).size();
}

/// Runs worker w of n in a child process; returns its pid.
pid_t spawn_worker(const std::string& dst, std::size_t w, std::size_t n, const convert_options& o) {
    const pid_t pid = ::fork();
    if (pid == 0) {
        try {
            cluster::work(dst, w, n, o);
            std::_Exit(0);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "worker %zu: %s\n", w, e.what());
            std::_Exit(1);
        }
    }
    return pid;
}

void wait_all(const std::vector<pid_t>& pids) {
    for (pid_t p : pids) {
        int status = 0;
        ::waitpid(p, &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) all_identical = false;
    }
}

/// state.range(0): 0 minmax (RTN), 1 search. state.range(1): 0 one process, 1 one worker, 2 two workers.
void convert_cluster(benchmark::State& state) {
    const scale_method m = state.range(0) == 0 ? scale_method::minmax : scale_method::search;
    const convert_options o = options(m);
    const std::string one = root + "/one-" + std::to_string(state.range(0));
    for (auto _ : state) {
        if (state.range(1) == 0) {
            if (io::path_exists(one)) io::remove_tree(one);
            const double t0 = now_s();
            convert(src, one, o);
            state.counters["wall_s"] = now_s() - t0;
            continue;
        }
        const std::string dst = root + "/cluster";
        if (io::path_exists(dst)) io::remove_tree(dst);
        const double t0 = now_s();
        cluster::make_plan(src, dst, o, 2);
        const double t1 = now_s();
        if (state.range(1) == 1) wait_all({spawn_worker(dst, 0, 1, o)});
        else wait_all({spawn_worker(dst, 0, 2, o), spawn_worker(dst, 1, 2, o)});
        const double t2 = now_s();
        cluster::finalize(dst, o);
        const double t3 = now_s();
        state.counters["wall_s"] = t3 - t0;
        state.counters["plan_s"] = t1 - t0;
        state.counters["work_s"] = t2 - t1;
        state.counters["finalize_s"] = t3 - t2;
        if (!io::path_exists(one) || !identical(one, dst)) all_identical = false;
        io::remove_tree(dst);
    }
}
BENCHMARK(convert_cluster)
    ->ArgsProduct({{0, 1}, {0, 1, 2}})
    ->ArgNames({"search", "workers"})
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
    const char* mb = std::getenv("QFORGE_BENCH_CLUSTER_MB");
    make_checkpoint((mb && *mb ? std::strtoull(mb, nullptr, 10) : 1024) << 20);
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    io::remove_tree(root);
    if (!all_identical) {
        std::fprintf(stderr, "bench_cluster: a cluster output differs from the one-process output\n");
        return 1;
    }
    std::printf("bench_cluster: every cluster output identical to the one-process output\n");
    return 0;
}
