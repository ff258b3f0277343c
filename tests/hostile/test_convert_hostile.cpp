// Hostile input and failures through a whole conversion (qforge::convert): hostile shard and
// side-file names in the source folder, and an output that fails at every file operation.
#include <doctest/doctest.h>

#include <string>
#include <unistd.h>

#include "hostile/hostile_checkpoint.hpp"
#include "hostile/hostile_support.hpp"
#include "qforge/convert/converter.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/io/json.hpp"

using namespace qforge::hostile;
using qforge::json;
using qforge::testing::write_one_tensor_shard;

namespace {

struct bad_name {
    std::string name;
    const char* needle;
};

std::vector<bad_name> bad_names(const fs::path& outside_file) {
    return {
        {outside_file.string(), "path separator"},
        {"../outside.safetensors", "path separator"},
        {"..", "names a folder"},
        {".", "names a folder"},
        {"", "empty"},
        {"sub/../model.safetensors", "path separator"},
        {"model\n.safetensors", "control character"},
        {std::string(300, 'a') + ".safetensors", "longer than 255"},
    };
}

}  // namespace

TEST_CASE("path safety: the converter's checkpoint source refuses hostile shard names") {
    scratch_dir root;
    const fs::path model = root / "model";
    qforge::write_demo_checkpoint(model.string(), tiny_demo());
    write_one_tensor_shard(root / "outside.safetensors", "model.norm.weight");
    const std::string good = read_bytes(model / "model.safetensors.index.json");
    json index = json::parse(good);
    const std::string first_shard = index.at("weight_map").at("model.norm.weight").as_string();
    for (const bad_name& hostile : bad_names(root / "outside.safetensors")) {
        const std::string name = hostile.name;
        CAPTURE(name);
        json bad = index;
        bad["weight_map"].set("model.norm.weight", name);
        write_bytes(model / "model.safetensors.index.json", bad.dump({.indent = 2}));
        CHECK_THROWS_WITH_AS(qforge::checkpoint_source{model.string()}, doctest::Contains(hostile.needle),
                             qforge::format_error);
    }
    // NUL: "<real shard>\0<junk>" must not open the real shard through C-string truncation.
    json nul = index;
    nul["weight_map"].set("model.norm.weight", first_shard + std::string("\0.evil", 6));
    write_bytes(model / "model.safetensors.index.json", nul.dump({.indent = 2}));
    CHECK_THROWS_WITH_AS(qforge::checkpoint_source{model.string()}, doctest::Contains("NUL"), qforge::format_error);
    // A shard symlinked out of the folder.
    write_bytes(model / "model.safetensors.index.json", good);
    fs::rename(model / first_shard, root / "moved.safetensors");
    fs::create_symlink(root / "moved.safetensors", model / first_shard);
    CHECK_THROWS_WITH_AS(qforge::checkpoint_source{model.string()}, doctest::Contains("symlink"), qforge::format_error);
}

TEST_CASE("path safety: a conversion does not copy a side file symlinked out of the source") {
    scratch_dir root;
    const fs::path model = root / "model";
    qforge::write_demo_checkpoint(model.string(), tiny_demo());
    write_bytes(root / "secret.txt", "private key");
    fs::remove(model / "tokenizer.json");
    fs::create_symlink(root / "secret.txt", model / "tokenizer.json");
    const fs::path out = root / "out";
    CHECK_THROWS_WITH_AS(qforge::convert(model.string(), out.string(), tiny_gptq()), doctest::Contains("symlink"),
                         qforge::format_error);
    CHECK_FALSE(fs::exists(out));
    CHECK(entries_except(root.path(), {"model", "secret.txt"}).empty());
}
