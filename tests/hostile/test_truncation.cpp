// Input that changes underneath: a source file truncated after it was opened must never crash
// the process. The io layer's documented strategy (io/mapped_file.hpp, safetensors/reader.hpp):
// read_mode::pread never maps, and read_tensor() (in either mode) reads with pread, so a
// truncated file becomes an io_error naming the file and tensor; verify_unchanged() detects a
// size change; view() into a mapping is the one access that can SIGBUS, so the converter checks
// every shard's size (verify_unchanged) before it takes each tensor's view. The converters'
// default read (source_read::pread, gguf read_mapped = false) never reads the mapping at all,
// so a source truncated at ANY moment of a conversion is an io_error or a finished conversion,
// never a signal; the last cases cut files at random moments in child processes to show it.
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "hostile/hostile_checkpoint.hpp"
#include "hostile/hostile_support.hpp"
#include "qforge/convert/converter.hpp"
#include "qforge/convert/gguf/converter.hpp"
#include "qforge/convert/repack_checkpoint.hpp"
#include "qforge/io/safetensors/index.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace st = qforge::safetensors;
using namespace qforge::hostile;

namespace {

/// In a forked child: a SIGBUS kills it with SIGBUS, as it would kill a user's converter.
/// (AddressSanitizer installs a SIGBUS handler that aborts instead, which the parent would
/// see as SIGABRT.)
void default_sigbus() { (void)std::signal(SIGBUS, SIG_DFL); }

std::string two_tensor_file(const scratch_dir& dir) {
    const auto path = (dir / "m.safetensors").string();
    st::writer w(path, {{"a", qforge::dtype::F32, {256}}, {"b", qforge::dtype::F32, {256}}}, st::default_metadata(),
                 {.sync = false});
    const std::vector<std::byte> bytes(1024, std::byte{3});
    w.write("a", bytes);
    w.write("b", bytes);
    w.finish();
    return path;
}

}  // namespace

TEST_CASE("truncation: pread mode turns a file truncated after open into an io_error") {
    scratch_dir dir;
    const auto path = two_tensor_file(dir);
    const st::reader r(path, st::read_mode::pread);
    fs::resize_file(path, r.data_offset() + 1500);  // "a" still whole, "b" cut
    CHECK(r.read_tensor("a").bytes.size() == 1024);
    CHECK_THROWS_WITH_AS(r.read_tensor("b"), doctest::Contains("unexpected end of file"), qforge::io_error);
    CHECK_THROWS_WITH_AS(r.read_tensor("b"), doctest::Contains("tensor 'b'"), qforge::io_error);
    CHECK_THROWS_WITH_AS(r.verify_unchanged(), doctest::Contains("changed size"), qforge::io_error);
    CHECK_THROWS_AS(r.view("a"), qforge::unsupported_error);  // pread mode never hands out a mapping
    fs::resize_file(path, 0);
    CHECK_THROWS_AS(r.read_tensor("a"), qforge::io_error);
}

TEST_CASE("truncation: mmap mode still reads tensor copies with pread, so they fail cleanly too") {
    scratch_dir dir;
    const auto path = two_tensor_file(dir);
    const st::reader r(path, st::read_mode::mmap);
    fs::resize_file(path, 8);
    CHECK_THROWS_AS(r.read_tensor("a"), qforge::io_error);
    CHECK_THROWS_AS(r.verify_unchanged(), qforge::io_error);
    std::vector<std::byte> out(1024);
    CHECK_THROWS_AS(r.read_tensor_into("b", out), qforge::io_error);
}

TEST_CASE("truncation: a sharded checkpoint opened in pread mode survives a shard cut to zero") {
    scratch_dir dir;
    const auto path = two_tensor_file(dir);
    const st::sharded_reader r(dir.path().string(), {.mode = st::read_mode::pread});
    fs::resize_file(path, 0);
    CHECK_THROWS_AS(r.read_tensor("a"), qforge::io_error);
}

TEST_CASE("truncation: source shards truncated before any tensor of a conversion do not crash it") {
    // Each cut runs in a child process: if the converter touches a mapped view of a shrunken
    // file the kernel sends SIGBUS, which must show up as a test failure, not kill the test
    // program. The cut happens before output weight k, for every k.
    scratch_dir root("truncate", true);
    const fs::path src = root / "src";
    qforge::write_demo_checkpoint(src.string(), tiny_demo());
    std::vector<fs::path> shards;
    for (const auto& e : fs::directory_iterator(src))
        if (e.path().extension() == ".safetensors") shards.push_back(e.path());
    REQUIRE(shards.size() == 2);
    const fs::path saved = root / "saved";
    fs::copy(src, saved, fs::copy_options::recursive);
    std::size_t items = 0;
    {
        auto opts = tiny_gptq();
        opts.before_tensor = [&](std::size_t i) { items = i + 1; };
        qforge::convert(src.string(), (root / "dst").string(), opts);
        fs::remove_all(root / "dst");
    }
    REQUIRE(items > 3);
    for (std::size_t k = 0; k < items; ++k) {
        CAPTURE(k);
        const pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            default_sigbus();
            auto opts = tiny_gptq();
            opts.before_tensor = [&](std::size_t i) {
                if (i == k)
                    for (const auto& s : shards) fs::resize_file(s, 8);  // cut to the length field
            };
            int code = 3;
            try {
                qforge::convert(src.string(), (root / "dst").string(), opts);
                code = 2;  // finished with data it could not have read
            } catch (const qforge::error&) {
                code = fs::exists(root / "dst") ? 4 : 0;  // refused, nothing left behind
            } catch (...) {
                code = 5;
            }
            ::_exit(code);
        }
        int status = 0;
        REQUIRE(::waitpid(child, &status, 0) == child);
        if (WIFSIGNALED(status)) {
            const std::string sig = WTERMSIG(status) == SIGBUS ? "SIGBUS" : std::to_string(WTERMSIG(status));
            FAIL_CHECK("conversion killed by signal " << sig);
        } else {
            CHECK(WEXITSTATUS(status) == 0);
        }
        CHECK(entries_except(root.path(), {"src", "saved"}).empty());
        fs::remove_all(src);
        fs::copy(saved, src, fs::copy_options::recursive);
    }
}

namespace {

// Exit codes of a child that converts while a thread of its own truncates a source shard.
enum child_exit : int {
    finished = 0,        // the conversion completed (the cut came after its last read)
    refused = 1,         // an io_error naming the source file and the tensor being read
    refused_at_open = 2, // the cut came before the shard was opened or read: an io_error or a
                         // format_error (the file is now too short for its header) naming it
    left_behind = 3,     // refused, but output or temporaries remain
    wrong_error = 4,     // another error type, or not naming the file
    not_an_error = 5,    // an exception that is not a qforge::error
};

struct cut_outcomes {
    int finished = 0, refused = 0, refused_at_open = 0, signalled = 0, other = 0;
};

// Runs `runs` conversions (`convert_once(dst)`), each in a forked child in which a second thread
// truncates one shard of `src`, chosen at random, to a random length at a random moment within
// `window` of the conversion's start. Restores `src` from `saved` after each run. A child
// killed by a signal (SIGBUS from a mapped read) is counted, never fatal to the test program.
cut_outcomes truncate_while_converting(const fs::path& root, const fs::path& src, const fs::path& saved,
                                       const fs::path& dst, const std::function<void(const std::string&)>& convert_once,
                                       int runs, std::chrono::microseconds window, unsigned seed) {
    std::vector<fs::path> shards;
    for (const auto& e : fs::directory_iterator(src))
        if (e.path().extension() == ".safetensors") shards.push_back(e.path());
    REQUIRE(!shards.empty());
    std::mt19937 rng(seed);
    cut_outcomes seen;
    for (int run = 0; run < runs; ++run) {
        const fs::path victim = shards[rng() % shards.size()];
        const auto size = static_cast<std::uintmax_t>(fs::file_size(victim));
        const std::uintmax_t cut_to = rng() % 8 == 0 ? 0 : rng() % size;
        const auto delay = std::chrono::microseconds(rng() % static_cast<unsigned>(window.count() + 1));
        CAPTURE(run);
        CAPTURE(victim.filename().string());
        CAPTURE(cut_to);
        CAPTURE(delay.count());
        const pid_t child = ::fork();
        REQUIRE(child >= 0);
        if (child == 0) {
            default_sigbus();
            const rlimit no_core{0, 0};
            (void)::setrlimit(RLIMIT_CORE, &no_core);  // a SIGBUS must not leave a core file
            std::thread cutter([&] {
                std::this_thread::sleep_for(delay);
                fs::resize_file(victim, cut_to);
            });
            int code = not_an_error;
            try {
                convert_once(dst.string());
                code = finished;
            } catch (const qforge::error& e) {
                const std::string m = e.what();
                const bool io = dynamic_cast<const qforge::io_error*>(&e) != nullptr;
                const bool format = dynamic_cast<const qforge::format_error*>(&e) != nullptr;
                const bool names_file = m.find(src.string()) != std::string::npos;
                const bool names_tensor = m.find("tensor '") != std::string::npos;
                code = !names_file               ? wrong_error
                       : io && names_tensor      ? refused
                       : io || format            ? refused_at_open
                                                 : wrong_error;
                if (code != wrong_error && !entries_except(root, {"src", "saved"}).empty()) code = left_behind;
                if (code == wrong_error) std::fprintf(stderr, "unexpected: %s\n", m.c_str());
            } catch (...) {
            }
            cutter.join();
            if (code == finished) fs::remove_all(dst);
            ::_exit(code);
        }
        int status = 0;
        REQUIRE(::waitpid(child, &status, 0) == child);
        if (WIFSIGNALED(status)) {
            ++seen.signalled;
            const std::string sig = WTERMSIG(status) == SIGBUS ? "SIGBUS" : std::to_string(WTERMSIG(status));
            MESSAGE("conversion killed by signal " << sig);
        } else if (WEXITSTATUS(status) == finished) {
            ++seen.finished;
        } else if (WEXITSTATUS(status) == refused) {
            ++seen.refused;
        } else if (WEXITSTATUS(status) == refused_at_open) {
            ++seen.refused_at_open;
        } else {
            ++seen.other;
            MESSAGE("child exit " << WEXITSTATUS(status) << " (3 left behind, 4 wrong error, 5 not an error)");
        }
        fs::remove_all(dst);
        for (const auto& e : fs::directory_iterator(root))
            if (e.path().filename() != "src" && e.path().filename() != "saved") fs::remove_all(e.path());
        fs::remove_all(src);
        fs::copy(saved, src, fs::copy_options::recursive);
    }
    return seen;
}

qforge::demo_options cut_demo() {
    qforge::demo_options d = tiny_demo();
    d.hidden = 256;  // a few ms of work per run, so random moments fall inside the conversion
    d.intermediate = 512;
    d.layers = 2;
    d.vocab = 512;
    return d;
}

std::chrono::microseconds time_of(const std::function<void()>& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0);
}

/// The cut loop every "cut at a random moment" case runs: one warm conversion (the files
/// cached), one timed (the window the cuts fall in), then `runs` cut conversions.
struct timed_cuts {
    cut_outcomes seen;
    std::chrono::microseconds window{};
};
timed_cuts cut_at_random(const fs::path& root, const fs::path& src, const fs::path& saved, const fs::path& dst,
                         const std::function<void(const std::string&)>& convert_once, int runs, unsigned seed) {
    convert_once(dst.string());  // warm: the window is that of a run with the files cached
    fs::remove_all(dst);
    timed_cuts t;
    t.window = time_of([&] { convert_once(dst.string()); });
    fs::remove_all(dst);
    t.seen = truncate_while_converting(root, src, saved, dst, convert_once, runs, t.window, seed);
    return t;
}

/// What a cut conversion must come to: an io_error or a finished run, never a signal, and
/// some cuts inside a conversion (so the case tested something).
void check_never_a_signal(const timed_cuts& t, int runs) {
    const cut_outcomes& seen = t.seen;
    MESSAGE(runs << " cuts within " << t.window.count() << " us: " << seen.refused << " io_error naming the tensor, "
                 << seen.refused_at_open << " refused at open, " << seen.finished << " finished, "
                 << seen.signalled << " signals, " << seen.other << " other");
    CHECK(seen.signalled == 0);
    CHECK(seen.other == 0);
    CHECK(seen.refused > 0);  // the cuts did land inside conversions
}

}  // namespace

TEST_CASE("truncation: the harness sees a SIGBUS from a truncated mapping (so the cases below can fail)") {
    scratch_dir dir;
    const auto path = two_tensor_file(dir);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
        default_sigbus();
        const rlimit no_core{0, 0};
        (void)::setrlimit(RLIMIT_CORE, &no_core);
        const st::reader r(path, st::read_mode::mmap);
        const auto v = r.view("b");
        fs::resize_file(path, 0);
        volatile std::byte b = v.bytes[v.bytes.size() - 1];  // past the end of the file now
        (void)b;
        ::_exit(0);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGBUS);
}

TEST_CASE("truncation: a source cut at a random moment of a conversion is an io_error or a finished run, never a signal") {
    scratch_dir root("truncate-random", true);
    const fs::path src = root / "src", saved = root / "saved", dst = root / "dst";
    qforge::write_demo_checkpoint(src.string(), cut_demo());
    fs::copy(src, saved, fs::copy_options::recursive);
    for (const qforge::output_format f : {qforge::output_format::gptq, qforge::output_format::awq}) {
        CAPTURE(static_cast<int>(f));
        auto opts = tiny_gptq();
        opts.format = f;
        if (f == qforge::output_format::awq)
            opts.rules.default_scheme = qforge::quant_spec{4, 64, false, qforge::scale_method::minmax, qforge::dtype::F16};
        opts.threads = 2;  // the pool and the write-behind job read too
        opts.rules.keep("re:.*norm.*", qforge::dtype::F32);  // kept tensors go through a cast
        const auto convert_once = [&](const std::string& out) { qforge::convert(src.string(), out, opts); };
        check_never_a_signal(cut_at_random(root.path(), src, saved, dst, convert_once, 40, 20 + static_cast<unsigned>(f)), 40);
    }
}

TEST_CASE("truncation: the same random cuts kill a conversion from the mapping, never one through pread") {
    // Larger weights (512 x 1024) and the slow shrink search (milliseconds per weight), so
    // that cuts land while a tensor is being quantized: the window verify_unchanged cannot
    // close. (Under the mapping a cut can also surface as the OUTPUT's "write failed: Bad
    // address" when a kept tensor is pwritten from the truncated mapping: counted as other.)
    scratch_dir root("truncate-compare", true);
    const fs::path src = root / "src", saved = root / "saved", dst = root / "dst";
    qforge::demo_options d = cut_demo();
    d.hidden = 512;
    d.intermediate = 1024;
    d.layers = 1;
    qforge::write_demo_checkpoint(src.string(), d);
    fs::copy(src, saved, fs::copy_options::recursive);
    int signalled[2] = {0, 0};
    for (const auto mode : {qforge::source_read::mapped, qforge::source_read::pread}) {
        auto opts = tiny_gptq();
        opts.threads = 2;
        opts.read = mode;
        opts.rules.default_scheme = qforge::quant_spec{4, 64, true, qforge::scale_method::mse, qforge::dtype::F16};
        const auto convert_once = [&](const std::string& out) { qforge::convert(src.string(), out, opts); };
        const timed_cuts t = cut_at_random(root.path(), src, saved, dst, convert_once, 20, 99);
        const cut_outcomes& seen = t.seen;
        const auto window = t.window;
        const bool mapped = mode == qforge::source_read::mapped;
        signalled[mapped] = seen.signalled;
        MESSAGE(std::string(mapped ? "source_read::mapped" : "source_read::pread") << ", 20 cuts within " << window.count() << " us: "
                << seen.signalled << " killed by a signal, " << seen.refused + seen.refused_at_open << " refused, "
                << seen.finished << " finished, " << seen.other << " other");
        if (!mapped) CHECK(seen.other == 0);
    }
    CHECK(signalled[0] == 0);  // pread: never
    // The mapping's deaths are timing-dependent, so only reported (they show the cuts land).
}

TEST_CASE("truncation: the GGUF converter cut at a random moment is an io_error or a finished run, never a signal") {
    scratch_dir root("truncate-gguf", true);
    const fs::path src = root / "src", saved = root / "saved", dst = root / "dst";
    qforge::write_demo_checkpoint(src.string(), cut_demo());
    fs::copy(src, saved, fs::copy_options::recursive);
    qforge::gguf::convert_options o;
    o.allow_no_vocab = true;
    o.chunk_rows = 64;
    const auto convert_once = [&](const std::string& out) { qforge::gguf::convert_hf_to_gguf(src.string(), out, o); };
    check_never_a_signal(cut_at_random(root.path(), src, saved, dst, convert_once, 40, 7), 40);
}

// The last reads the default path took from a mapping: one expert of a fused 3-D tensor (now
// read on its own with pread, checkpoint_source::read_expert) and the --hessians file (now
// opened in pread mode). A cut of the source shards or of the Hessian file is an io_error naming
// it and the tensor, or a finished run: never a signal.
TEST_CASE("truncation: fused experts and a GPTQ Hessian file cut at a random moment are an io_error or a finished run, never a signal") {
    for (const bool hessians : {false, true}) {
        CAPTURE(hessians);
        scratch_dir root(hessians ? "truncate-hessians" : "truncate-fused", true);
        const fs::path src = root / "src", saved = root / "saved", dst = root / "dst";
        qforge::demo_options d = cut_demo();
        if (!hessians) {
            d.moe = qforge::demo_moe::qwen_moe_fused;
            d.experts = 8;
            d.moe_intermediate = 256;
        }
        qforge::write_demo_checkpoint(src.string(), d);
        auto opts = tiny_gptq();
        opts.threads = 2;
        if (hessians) {  // beside the shards (the index does not list it), so the cutter picks it too
            const std::int64_t k = d.hidden;
            std::vector<double> h(static_cast<std::size_t>(k * k));
            for (std::int64_t r = 0; r < k; ++r) h[static_cast<std::size_t>(r * k + r)] = 1.0 + 0.01 * static_cast<double>(r % 5);
            std::vector<st::tensor_spec> specs;
            for (int l = 0; l < d.layers; ++l)
                for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "mlp.up_proj"})
                    specs.push_back({"model.layers." + std::to_string(l) + "." + m + ".hessian", qforge::dtype::F64, {k, k}});
            st::writer w((src / "hessians.safetensors").string(), specs, st::default_metadata(), {.sync = false});
            for (const auto& sp : specs) w.write(sp.name, std::as_bytes(std::span(h)));
            w.finish();
            opts.hessians = (src / "hessians.safetensors").string();
        }
        fs::copy(src, saved, fs::copy_options::recursive);
        const auto convert_once = [&](const std::string& out) { qforge::convert(src.string(), out, opts); };
        convert_once(dst.string());
        fs::remove_all(dst);
        const auto window = time_of([&] { convert_once(dst.string()); });
        fs::remove_all(dst);
        const cut_outcomes seen = truncate_while_converting(root.path(), src, saved, dst, convert_once, 30, window, hessians ? 31 : 37);
        MESSAGE(std::string(hessians ? "hessians" : "fused experts") << ", 30 cuts within " << window.count() << " us: " << seen.refused
                << " io_error naming the tensor, " << seen.refused_at_open << " refused at open, " << seen.finished
                << " finished, " << seen.signalled << " signals, " << seen.other << " other");
        CHECK(seen.signalled == 0);
        CHECK(seen.other == 0);
        CHECK(seen.refused > 0);
    }
}

TEST_CASE("truncation: a repack whose source is cut at a random moment is an io_error or a finished run, never a signal") {
    scratch_dir root("truncate-repack", true);
    const fs::path src = root / "src", saved = root / "saved", dst = root / "dst";
    scratch_dir dense_dir("truncate-repack-dense", true);
    const fs::path dense = dense_dir / "dense";
    qforge::write_demo_checkpoint(dense.string(), cut_demo());
    auto gptq = tiny_gptq();
    gptq.max_shard_bytes = 200'000;  // several shards to cut
    gptq.rules.default_scheme->scale_dtype = qforge::dtype::BF16;  // compressed-tensors keeps the model's dtype
    qforge::convert(dense.string(), src.string(), gptq);
    fs::copy(src, saved, fs::copy_options::recursive);
    qforge::repack_options o;
    o.format = qforge::output_format::compressed_tensors;
    const auto convert_once = [&](const std::string& out) { qforge::repack_checkpoint(src.string(), out, o); };
    check_never_a_signal(cut_at_random(root.path(), src, saved, dst, convert_once, 40, 11), 40);
}
