// Input that changes underneath: a source file truncated after it was opened must never crash
// the process. The io layer's documented strategy (io/mapped_file.hpp, safetensors/reader.hpp):
// read_mode::pread never maps, and read_tensor() (in either mode) reads with pread, so a
// truncated file becomes an io_error naming the file and tensor; verify_unchanged() detects a
// size change; view() into a mapping is the one access that can SIGBUS, so the converter checks
// every shard's size (verify_unchanged) before it takes each tensor's view. Known limit: a file
// truncated while one tensor is being quantized from its view can still SIGBUS; only a pread
// source (read_tensor) closes that window.
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <string>
#include <vector>

#include "hostile/hostile_checkpoint.hpp"
#include "hostile/hostile_support.hpp"
#include "qforge/convert/converter.hpp"
#include "qforge/io/safetensors/index.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace st = qforge::safetensors;
using namespace qforge::hostile;

namespace {

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
