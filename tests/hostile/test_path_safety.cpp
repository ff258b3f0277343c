// Path safety: names that come from files (index.json shard names, side files, output names)
// can never make qforge read or write outside the source and destination folders. Absolute
// paths, "..", separators, NUL and control bytes, over-long names and symlinks resolving
// outside are refused with an error naming the file the name came from.
#include <doctest/doctest.h>

#include <string>
#include <unistd.h>

#include "hostile/hostile_support.hpp"
#include "qforge/io/atomic_dir.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safe_path.hpp"
#include "qforge/io/safetensors/index.hpp"
#include "support/checkpoint_fixture.hpp"

namespace st = qforge::safetensors;
namespace io = qforge::io;
using namespace qforge::hostile;
using qforge::json;
using qforge::testing::write_one_tensor_shard;

namespace {

void write_index(const fs::path& folder, const std::string& shard_name, const std::string& tensor = "w") {
    json map = json::object();
    map.set(tensor, shard_name);
    const json index = json::object({{"metadata", json::object({{"total_size", 4}})}, {"weight_map", map}});
    write_bytes(folder / "model.safetensors.index.json", index.dump({.indent = 2}));
}

// The hostile shard names, each with a word its refusal message must contain.
struct unsafe_name {
    std::string name;
    const char* needle;
};

std::vector<unsafe_name> unsafe_names(const fs::path& outside_file) {
    return {
        {outside_file.string(), "path separator"},              // absolute path to a real file
        {"../outside.safetensors", "path separator"},           // climbing out
        {"..", "names a folder"},
        {".", "names a folder"},
        {"", "empty"},
        {"sub/../model.safetensors", "path separator"},
        {"..\\outside.safetensors", "path separator"},
        {std::string("model.safetensors\0../../x", 25), "NUL"},  // C-string truncation trick
        {"model\n.safetensors", "control character"},
        {std::string(300, 'a') + ".safetensors", "longer than 255"},
    };
}

}  // namespace

TEST_CASE("path safety: check_plain_file_name refuses every non-plain name, naming the source file") {
    for (const unsafe_name& bad : unsafe_names("/etc/passwd")) {
        const std::string name = bad.name;
        const char* const needle = bad.needle;
        CAPTURE(name);
        CHECK_THROWS_WITH_AS(io::check_plain_file_name(name, "idx.json"), doctest::Contains(needle),
                             qforge::format_error);
        CHECK_THROWS_WITH_AS(io::check_plain_file_name(name, "idx.json"), doctest::Contains("idx.json"),
                             qforge::format_error);
    }
    CHECK_NOTHROW(io::check_plain_file_name("model-00001-of-00002.safetensors", "idx.json"));
    CHECK_NOTHROW(io::check_plain_file_name(std::string(255, 'a'), "idx.json"));
    CHECK_NOTHROW(io::check_plain_file_name("...safetensors", "idx.json"));  // dots alone are fine
}

TEST_CASE("path safety: index.json shard names that leave the folder are refused by sharded_reader") {
    scratch_dir root;
    const fs::path model = root / "model";
    fs::create_directories(model);
    write_one_tensor_shard(root / "outside.safetensors", "w");  // a valid file the attacker wants read
    write_one_tensor_shard(model / "model.safetensors", "w");
    for (const unsafe_name& bad : unsafe_names(root / "outside.safetensors")) {
        const std::string name = bad.name;
        const char* const needle = bad.needle;
        CAPTURE(name);
        write_index(model, name);
        CHECK_THROWS_WITH_AS(st::sharded_reader{model.string()}, doctest::Contains(needle), qforge::format_error);
        CHECK_THROWS_WITH_AS(st::sharded_reader{model.string()},
                             doctest::Contains("model.safetensors.index.json"), qforge::format_error);
    }
    write_index(model, "model.safetensors");
    CHECK(st::sharded_reader{model.string()}.tensor_names() == std::vector<std::string>{"w"});
}

TEST_CASE("path safety: a shard symlink resolving outside is refused unless follow_outside is asked for") {
    scratch_dir root;
    const fs::path model = root / "model";
    fs::create_directories(model / "sub");
    write_one_tensor_shard(root / "outside.safetensors", "w");
    write_one_tensor_shard(model / "sub" / "inner.safetensors", "w");

    fs::create_symlink(root / "outside.safetensors", model / "model-00001-of-00001.safetensors");
    write_index(model, "model-00001-of-00001.safetensors");
    CHECK_THROWS_WITH_AS(st::sharded_reader{model.string()}, doctest::Contains("symlink resolving outside"),
                         qforge::format_error);
    // Relative symlinks climbing out are the same attack.
    fs::remove(model / "model-00001-of-00001.safetensors");
    fs::create_symlink("../outside.safetensors", model / "model-00001-of-00001.safetensors");
    CHECK_THROWS_WITH_AS(st::sharded_reader{model.string()}, doctest::Contains("symlink resolving outside"),
                         qforge::format_error);
    // Without an index, a listed *.safetensors symlink is checked too.
    fs::remove(model / "model.safetensors.index.json");
    CHECK_THROWS_WITH_AS(st::sharded_reader{model.string()}, doctest::Contains("symlink resolving outside"),
                         qforge::format_error);
    // Dangling symlinks are refused, not followed to whatever appears there later.
    fs::remove(model / "model-00001-of-00001.safetensors");
    fs::create_symlink(root / "nowhere.safetensors", model / "model-00001-of-00001.safetensors");
    CHECK_THROWS_WITH_AS(st::sharded_reader{model.string()}, doctest::Contains("dangling"), qforge::format_error);
    // A symlink that stays inside the folder is fine, and the opt-in follows one outside.
    fs::remove(model / "model-00001-of-00001.safetensors");
    fs::create_symlink("sub/inner.safetensors", model / "model-00001-of-00001.safetensors");
    CHECK(st::sharded_reader{model.string()}.tensor_names().size() == 1);
    fs::remove(model / "model-00001-of-00001.safetensors");
    fs::create_symlink(root / "outside.safetensors", model / "model-00001-of-00001.safetensors");
    CHECK(st::sharded_reader(model.string(), {.symlinks = io::symlink_policy::follow_outside}).tensor_names().size() == 1);
}

TEST_CASE("path safety: side files that are symlinks out of the source are not copied") {
    scratch_dir root;
    const fs::path src = root / "src";
    const fs::path dst = root / "dst";
    fs::create_directories(src);
    fs::create_directories(dst);
    write_bytes(root / "secret.txt", "private key");
    fs::create_symlink(root / "secret.txt", src / "tokenizer.json");
    CHECK_THROWS_WITH_AS(io::copy_side_files(src.string(), dst.string()), doctest::Contains("symlink resolving outside"),
                         qforge::format_error);
    CHECK_FALSE(fs::exists(dst / "tokenizer.json"));
}

TEST_CASE("path safety: an atomic output folder only hands out plain names inside it") {
    scratch_dir root;
    io::atomic_output_dir out((root / "out").string());
    for (const unsafe_name& bad : unsafe_names(root / "x")) {
        const std::string name = bad.name;
        const char* const needle = bad.needle;
        CAPTURE(name);
        CHECK_THROWS_WITH_AS((void)out.file(name), doctest::Contains(needle), qforge::format_error);
    }
    CHECK(out.file("config.json") == out.path() + "/config.json");
}
