// Atomic output with a failure injected at every output operation of a small conversion.
#include <doctest/doctest.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "io_test_support.hpp"
#include "qforge/io/atomic_dir.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/fault_injector.hpp"
#include "qforge/io/safetensors/index.hpp"

using namespace qforge;
using qforge_test::get_file;
using qforge_test::put_file;
using qforge_test::temp_dir;

namespace {

std::vector<std::string> sorted_listing(const std::string& dir) {
    auto names = io::list_directory(dir);
    std::sort(names.begin(), names.end());
    return names;
}

// A miniature conversion: config, a side file, two tensors, commit.
void convert_into(const std::string& src, const std::string& dst, bool overwrite) {
    io::atomic_output_dir out(dst, overwrite);
    json cfg = io::read_config(src);
    cfg["quantization_config"] = json::object({{"bits", 4}});
    io::write_config(out.path(), cfg);
    io::copy_side_files(src, out.path());
    // Two shards (16-byte maximum) and an index: every kind of file a conversion writes.
    safetensors::sharded_writer w(out.path(), {{"a", dtype::F32, {4}}, {"b", dtype::BF16, {2, 2}}}, 16);
    const std::vector<std::byte> a(16, std::byte{1}), b(8, std::byte{2});
    w.write("a", a);
    w.write("b", b);
    w.finish();
    out.commit();
}

std::vector<std::string> expected_output() {
    return {"config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
            "model.safetensors.index.json", "tokenizer.json"};
}

void make_source(const std::string& src) {
    io::make_directory(src);
    put_file(src + "/config.json", "{\"model_type\": \"llama\", \"hidden_size\": 64}");
    put_file(src + "/tokenizer.json", "{\"tok\": 1}");
}

}  // namespace

TEST_CASE("atomic_output_dir: commit moves a complete folder into place, nothing else left") {
    temp_dir root;
    make_source(root / "src");
    convert_into(root / "src", root / "out", false);
    CHECK(sorted_listing(root.path) == std::vector<std::string>{"out", "src"});
    CHECK(sorted_listing(root / "out") == expected_output());
    CHECK(get_file(root / "out/tokenizer.json") == "{\"tok\": 1}");
    CHECK(safetensors::sharded_reader(root / "out").tensor_names().size() == 2);
    // Existing destination: refused without overwrite, nothing created.
    CHECK_THROWS_WITH_AS(convert_into(root / "src", root / "out", false),
                         doctest::Contains("already exists"), io_error);
    CHECK(sorted_listing(root.path) == std::vector<std::string>{"out", "src"});
}

TEST_CASE("atomic_output_dir: no commit (exception) removes the temporary folder") {
    temp_dir root;
    try {
        io::atomic_output_dir out(root / "dst");
        CHECK(out.path().find("/.dst.qforge-tmp-") != std::string::npos);
        io::write_file(out.file("x"), "partial");
        CHECK_THROWS_AS(out.file("../escape"), format_error);
        throw std::runtime_error("converter failed");
    } catch (const std::runtime_error&) {
    }
    CHECK(io::list_directory(root.path).empty());
}

TEST_CASE("atomic_output_dir: overwrite replaces the old folder only at commit") {
    temp_dir root;
    make_source(root / "src");
    io::make_directory(root / "out");
    put_file(root / "out/old.txt", "old");
    {
        io::atomic_output_dir out(root / "out", true);
        io::write_file(out.file("new.txt"), "new");
        CHECK(get_file(root / "out/old.txt") == "old");  // untouched until commit
        out.commit();
    }
    CHECK(sorted_listing(root / "out") == std::vector<std::string>{"new.txt"});
    CHECK(sorted_listing(root.path) == std::vector<std::string>{"out", "src"});
    put_file(root / "file", "x");
    CHECK_THROWS_WITH_AS(io::atomic_output_dir(root / "file", true), doctest::Contains("not a folder"), io_error);
}

TEST_CASE("fault injection at every output operation: destination absent or old one intact, no temp left") {
    temp_dir root;
    make_source(root / "src");

    io::fault_injector::reset();
    convert_into(root / "src", root / "probe", false);
    const std::uint64_t ops = io::fault_injector::count();
    CHECK(ops >= 25);  // create/write/fsync of 5 files, mkdir, fsyncs, rename...
    io::remove_tree(root / "probe");

    for (const bool overwrite : {false, true}) {
        if (overwrite) {
            io::make_directory(root / "out");
            put_file(root / "out/old.txt", "precious");
        }
        // The old-folder removal after a successful overwrite adds operations; probe again.
        std::uint64_t n = ops;
        if (overwrite) {
            io::make_directory(root / "probe");
            io::fault_injector::reset();
            convert_into(root / "src", root / "probe", true);
            n = io::fault_injector::count();
            io::remove_tree(root / "probe");
        }
        for (std::uint64_t k = 1; k <= n; ++k) {
            CAPTURE(overwrite);
            CAPTURE(k);
            const int err = k % 2 ? ENOSPC : EIO;
            io::fault_injector::arm(k, err);
            bool threw = false;
            try {
                convert_into(root / "src", root / "out", overwrite);
            } catch (const io_error& e) {
                threw = true;
                CHECK(std::string(e.what()).find(k % 2 ? "No space left" : "Input/output error") != std::string::npos);
            }
            const bool fired = io::fault_injector::fired();
            io::fault_injector::reset();
            CHECK(fired);
            if (threw) {
                if (overwrite) {
                    CHECK(sorted_listing(root.path) == std::vector<std::string>{"out", "src"});
                    CHECK(sorted_listing(root / "out") == std::vector<std::string>{"old.txt"});
                    CHECK(get_file(root / "out/old.txt") == "precious");
                } else {
                    CHECK(sorted_listing(root.path) == std::vector<std::string>{"src"});
                }
            } else {
                // Only a failure in removing the replaced folder may go unreported (it is retried).
                CHECK(overwrite);
                CHECK(sorted_listing(root.path) == std::vector<std::string>{"out", "src"});
                CHECK(sorted_listing(root / "out") == expected_output());
                io::remove_tree(root / "out");
                io::make_directory(root / "out");
                put_file(root / "out/old.txt", "precious");
            }
        }
    }
}

TEST_CASE("fault injector: targets only the requested kinds of operation") {
    temp_dir root;
    io::fault_injector::reset(static_cast<unsigned>(io::file_op::fsync));
    io::write_file(root / "a", "x");
    CHECK(io::fault_injector::count() == 1);
    io::fault_injector::arm(1, EIO, static_cast<unsigned>(io::file_op::rename));
    CHECK_THROWS_WITH_AS(io::rename_path(root / "a", root / "b"), doctest::Contains("Input/output error"), io_error);
    CHECK(io::path_exists(root / "a"));
    io::rename_path(root / "a", root / "b");  // one-shot
    io::fault_injector::reset();
    CHECK(io::path_exists(root / "b"));
}
