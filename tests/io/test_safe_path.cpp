#include <doctest/doctest.h>

#include <string>

#include <unistd.h>

#include "io_test_support.hpp"
#include "qforge/io/safe_path.hpp"

using namespace qforge;
using qforge_test::put_file;
using qforge_test::temp_dir;

TEST_CASE("check_plain_file_name: accepts plain names, refuses every escape") {
    CHECK_NOTHROW(io::check_plain_file_name("model-00001-of-00002.safetensors", "idx"));
    CHECK_NOTHROW(io::check_plain_file_name("..hidden", "idx"));  // not "..": a plain name
    CHECK_NOTHROW(io::check_plain_file_name(std::string(255, 'a'), "idx"));
    const std::pair<std::string, std::string> bad[] = {
        {"", "empty"},
        {".", "names a folder"},
        {"..", "names a folder"},
        {"/etc/passwd", "path separator"},
        {"../x", "path separator"},
        {"a/b", "path separator"},
        {"a\\b", "path separator"},
        {std::string("a\0b", 3), "NUL"},
        {"a\tb", "control character"},
        {std::string(256, 'a'), "longer than 255"},
    };
    for (const auto& b : bad) {
        CAPTURE(b.first);
        CHECK_THROWS_WITH_AS(io::check_plain_file_name(b.first, "index.json"),
                             doctest::Contains(b.second.c_str()), format_error);
    }
    CHECK_THROWS_WITH_AS(io::check_plain_file_name("../x", "index.json"),
                         doctest::Contains("qforge: index.json: file name \"../x\" refused"), format_error);
}

TEST_CASE("child_path: symlinks must resolve inside the folder") {
    temp_dir outside, dir;
    put_file(outside / "f", "x");
    put_file(dir / "inner", "y");
    REQUIRE(::symlink((outside / "f").c_str(), (dir / "out").c_str()) == 0);
    REQUIRE(::symlink("inner", (dir / "in").c_str()) == 0);
    REQUIRE(::symlink("nowhere", (dir / "dangling").c_str()) == 0);
    REQUIRE(::symlink(".", (dir / "self").c_str()) == 0);
    CHECK(io::child_path(dir.path, "inner", "src") == dir / "inner");
    CHECK(io::child_path(dir.path, "in", "src") == dir / "in");
    CHECK(io::child_path(dir.path, "absent", "src") == dir / "absent");  // creating is the caller's business
    CHECK_THROWS_WITH_AS(io::child_path(dir.path, "out", "src"), doctest::Contains("resolving outside"), format_error);
    CHECK_THROWS_WITH_AS(io::child_path(dir.path, "dangling", "src"), doctest::Contains("dangling"), format_error);
    CHECK_THROWS_AS(io::child_path(dir.path, "self", "src"), format_error);  // the folder itself
    CHECK(io::child_path(dir.path, "out", "src", io::symlink_policy::follow_outside) == dir / "out");
}
