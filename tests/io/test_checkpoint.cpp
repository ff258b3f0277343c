#include <doctest/doctest.h>

#include <string>
#include <vector>

#include <unistd.h>

#include "io_test_support.hpp"
#include "qforge/io/checkpoint.hpp"

using namespace qforge;
using qforge_test::get_file;
using qforge_test::put_file;
using qforge_test::temp_dir;

TEST_CASE("config.json: the stories260k config round-trips byte for byte, keys in order") {
    const std::string path = QFORGE_SOURCE_DIR "/tests/golden/fixtures/stories260k/config.json";
    const std::string original = get_file(path);
    REQUIRE_FALSE(original.empty());
    json cfg = io::read_config(QFORGE_SOURCE_DIR "/tests/golden/fixtures/stories260k");
    CHECK(cfg.as_object().front().key == "architectures");
    CHECK(cfg.at("rms_norm_eps").as_double() == 1e-05);
    CHECK(cfg.at("rope_theta").is_double());
    std::string expected = original;
    if (expected.back() != '\n') expected += '\n';
    CHECK(cfg.dump({.indent = 2}) + "\n" == expected);
}

TEST_CASE("config.json: modify keeps unknown keys in place, write is indent 2 plus newline") {
    temp_dir dir;
    put_file(dir / "config.json", R"({"zeta": 1, "model_type": "llama", "custom": {"x": [1, 2]}, "name": "caf\u00e9"})");
    json cfg = io::read_config(dir.path);
    cfg["torch_dtype"] = "float16";
    cfg.set("zeta", 2);
    io::write_config(dir.path, cfg);
    CHECK(get_file(dir / "config.json") ==
          "{\n  \"zeta\": 2,\n  \"model_type\": \"llama\",\n  \"custom\": {\n    \"x\": [\n      1,\n      2\n"
          "    ]\n  },\n  \"name\": \"caf\xc3\xa9\",\n  \"torch_dtype\": \"float16\"\n}\n");
    put_file(dir / "config.json", "[1]");
    CHECK_THROWS_WITH_AS(io::read_config(dir.path), doctest::Contains("expected an object"), format_error);
    put_file(dir / "config.json", "{\"a\": }");
    CHECK_THROWS_WITH_AS(io::read_config(dir.path), doctest::Contains("config.json: invalid JSON at byte 6"),
                         format_error);
}

TEST_CASE("side files: known names and chat_template.* copied byte for byte, nothing else") {
    temp_dir src, dst;
    std::string binary;
    for (int i = 0; i < 256; ++i) binary += static_cast<char>(i);
    put_file(src / "tokenizer.model", binary);
    put_file(src / "tokenizer.json", "{\"v\":1}\r\n");
    put_file(src / "merges.txt", "a b\n");
    put_file(src / "chat_template.jinja", "{{ x }}");
    put_file(src / "model.safetensors", "not copied");
    put_file(src / "notes.md", "not copied");
    const auto copied = io::copy_side_files(src.path, dst.path);
    CHECK(copied == std::vector<std::string>{"chat_template.jinja", "merges.txt", "tokenizer.json", "tokenizer.model"});
    CHECK(get_file(dst / "tokenizer.model") == binary);
    CHECK(get_file(dst / "tokenizer.json") == "{\"v\":1}\r\n");
    CHECK_FALSE(io::path_exists(dst / "notes.md"));
}

TEST_CASE("side files: a symlink pointing outside the source folder is refused") {
    temp_dir outside, src, dst;
    put_file(outside / "secret", "secret");
    REQUIRE(::symlink((outside / "secret").c_str(), (src / "tokenizer.json").c_str()) == 0);
    CHECK_THROWS_WITH_AS(io::copy_side_files(src.path, dst.path), doctest::Contains("symlink resolving outside"),
                         format_error);
    CHECK_FALSE(io::path_exists(dst / "tokenizer.json"));
    CHECK(io::copy_side_files(src.path, dst.path, io::symlink_policy::follow_outside).size() == 1);
    CHECK(get_file(dst / "tokenizer.json") == "secret");
}
