#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "io_test_support.hpp"
#include "qforge/io/safetensors/index.hpp"

using namespace qforge;
using qforge_test::get_file;
using qforge_test::put_file;
using qforge_test::temp_dir;
namespace st = qforge::safetensors;

namespace {

std::vector<st::tensor_spec> model_specs() {
    return {{"embed", dtype::BF16, {8, 4}},  // 64 bytes
            {"l0.w", dtype::BF16, {4, 4}},   // 32
            {"l0.n", dtype::F32, {4}},       // 16
            {"l1.w", dtype::BF16, {4, 4}},   // 32
            {"head", dtype::BF16, {16, 8}},  // 256 > max: alone
            {"norm", dtype::F32, {4}}};      // 16
}

std::vector<std::byte> pattern(std::size_t n, int seed) {
    std::vector<std::byte> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::byte>((i * 13 + static_cast<std::size_t>(seed) * 7) & 0xFF);
    return v;
}

void write_model(const std::string& dir, std::uint64_t max_shard) {
    st::sharded_writer w(dir, model_specs(), max_shard);
    int seed = 0;
    for (const auto& s : model_specs()) w.write(s.name, pattern(st::tensor_bytes(s), seed++));
    w.finish();
}

std::string index_with(const std::string& shard) {
    return R"({"metadata":{"total_size":8},"weight_map":{"a":")" + shard + R"("}})";
}

}  // namespace

TEST_CASE("plan_shards: huggingface_hub's greedy split and file names") {
    const auto plan = st::plan_shards(model_specs(), 100);
    REQUIRE(plan.shards.size() == 3);
    auto names = [](const std::vector<st::tensor_spec>& v) {
        std::vector<std::string> out;
        for (const auto& t : v) out.push_back(t.name);
        return out;
    };
    // embed(64)+l0.w(32)=96; +l0.n(16) > 100 -> split; head(256) alone, appended at once.
    CHECK(names(plan.shards[0]) == std::vector<std::string>{"embed", "l0.w"});
    CHECK(names(plan.shards[1]) == std::vector<std::string>{"head"});
    CHECK(names(plan.shards[2]) == std::vector<std::string>{"l0.n", "l1.w", "norm"});
    CHECK(plan.file_names == std::vector<std::string>{"model-00001-of-00003.safetensors",
                                                      "model-00002-of-00003.safetensors",
                                                      "model-00003-of-00003.safetensors"});
    CHECK(plan.total_size == 64 + 32 + 16 + 32 + 256 + 16);
    const auto one = st::plan_shards(model_specs());
    CHECK(one.shards.size() == 1);
    CHECK(one.file_names == std::vector<std::string>{"model.safetensors"});
    CHECK(st::plan_shards({}, 10).file_names == std::vector<std::string>{"model.safetensors"});
}

TEST_CASE("index text: indent 2, sorted keys, trailing newline, total_size = tensor bytes") {
    const auto plan = st::plan_shards({{"b", dtype::F32, {2}}, {"a", dtype::U8, {3}}}, 4);
    CHECK(st::index_text(plan) ==
          "{\n  \"metadata\": {\n    \"total_size\": 11\n  },\n  \"weight_map\": {\n"
          "    \"a\": \"model-00002-of-00002.safetensors\",\n"
          "    \"b\": \"model-00001-of-00002.safetensors\"\n  }\n}\n");
}

TEST_CASE("sharded write -> read round trip, index consistent with the shards") {
    temp_dir dir;
    write_model(dir.path, 100);
    const json index = json::parse(get_file(dir / "model.safetensors.index.json"));
    CHECK(index.at("metadata").at("total_size").as_int() == 416);
    for (const auto& m : index.at("weight_map").as_object())
        CHECK(io::path_exists(dir / m.value.as_string()));
    CHECK(index.at("weight_map").size() == 6);

    st::sharded_reader r(dir.path);
    CHECK(r.has_index());
    CHECK(r.shard_count() == 3);
    CHECK(r.total_size() == 416);
    CHECK(r.tensor_names().size() == 6);
    int seed = 0;
    for (const auto& s : model_specs()) {
        const auto want = pattern(st::tensor_bytes(s), seed++);
        const tensor_view v = r.view(s.name);
        CHECK(v.type == s.type);
        CHECK(v.shape == s.shape);
        REQUIRE(v.bytes.size() == want.size());
        CHECK(std::memcmp(v.bytes.data(), want.data(), want.size()) == 0);
        CHECK(r.read_tensor(s.name).bytes == want);
    }
    std::vector<std::byte> buf(256);
    r.read_tensor_into("head", buf);
    CHECK(buf == pattern(256, 4));
    CHECK_NOTHROW(r.verify_unchanged());
    CHECK(r.shard_of("head")->path() == dir / "model-00002-of-00003.safetensors");
    CHECK_THROWS_AS(r.view("nope"), format_error);

    // Without the index, the same folder is read from its *.safetensors files.
    io::remove_file(dir / "model.safetensors.index.json");
    st::sharded_reader listing(dir.path);
    CHECK_FALSE(listing.has_index());
    CHECK(listing.tensor_names().size() == 6);
    CHECK(listing.read_tensor("norm").bytes == pattern(16, 5));
}

TEST_CASE("single shard: model.safetensors and no index") {
    temp_dir dir;
    write_model(dir.path, st::default_max_shard_bytes);
    CHECK_FALSE(io::path_exists(dir / "model.safetensors.index.json"));
    st::sharded_reader r(dir.path, {.mode = st::read_mode::pread});
    CHECK(r.shard_count() == 1);
    CHECK(r.read_tensor("embed").bytes == pattern(64, 0));
}

TEST_CASE("folder errors: no files, duplicates across shards, index inconsistencies") {
    temp_dir dir;
    CHECK_THROWS_WITH_AS(st::sharded_reader(dir.path), doctest::Contains("no model.safetensors.index.json"), io_error);
    {
        st::writer a(dir / "x-1.safetensors", {{"t", dtype::U8, {1}}});
        a.write("t", pattern(1, 0));
        a.finish();
        st::writer b(dir / "x-2.safetensors", {{"t", dtype::U8, {1}}});
        b.write("t", pattern(1, 0));
        b.finish();
    }
    CHECK_THROWS_WITH_AS(st::sharded_reader(dir.path), doctest::Contains("tensor 't': tensor is in two shards"),
                         format_error);
    put_file(dir / "model.safetensors.index.json", index_with("x-1.safetensors"));
    CHECK_THROWS_WITH_AS(st::sharded_reader(dir.path), doctest::Contains("tensor 'a': index maps it"), format_error);
    put_file(dir / "model.safetensors.index.json", index_with("missing.safetensors"));
    CHECK_THROWS_WITH_AS(st::sharded_reader(dir.path), doctest::Contains("does not exist"), format_error);
    put_file(dir / "model.safetensors.index.json", R"({"weight_map":{"t":7}})");
    CHECK_THROWS_WITH_AS(st::sharded_reader(dir.path), doctest::Contains("expected a shard file name"), format_error);
    put_file(dir / "model.safetensors.index.json", R"({"weight_map":[]})");
    CHECK_THROWS_WITH_AS(st::sharded_reader(dir.path), doctest::Contains("weight_map"), format_error);
    put_file(dir / "model.safetensors.index.json", R"({"weight_map":{"t":"x-1.safetensors"}})");
    st::sharded_reader ok(dir.path);  // map decides where the duplicated tensor is read from
    CHECK(ok.shard_of("t")->path() == dir / "x-1.safetensors");
}

TEST_CASE("path safety: shard names from index.json must stay inside the folder") {
    temp_dir outside, dir;
    {
        st::writer w(outside / "evil.safetensors", {{"a", dtype::U8, {8}}});
        w.write("a", pattern(8, 0));
        w.finish();
    }
    const std::pair<std::string, std::string> cases[] = {
        {outside / "evil.safetensors", "path separator"},
        {"../" + outside.path.substr(outside.path.rfind('/') + 1) + "/evil.safetensors", "path separator"},
        {"..", "names a folder"},
        {".", "names a folder"},
        {"", "empty"},
        {"sub/evil.safetensors", "path separator"},
        {"a\\\\b.safetensors", "path separator"},
        {"a\\u0000b.safetensors", "NUL"},
        {"a\\nb.safetensors", "control character"},
        {std::string(300, 'x') + ".safetensors", "longer than 255"},
    };
    for (const auto& c : cases) {
        const std::string name = c.first, why = c.second;
        CAPTURE(name);
        put_file(dir / "model.safetensors.index.json", index_with(name));
        CHECK_THROWS_WITH_AS(st::sharded_reader(dir.path), doctest::Contains(why.c_str()), format_error);
    }
    REQUIRE(::symlink((outside / "evil.safetensors").c_str(), (dir / "link.safetensors").c_str()) == 0);
    put_file(dir / "model.safetensors.index.json", index_with("link.safetensors"));
    CHECK_THROWS_WITH_AS(st::sharded_reader(dir.path), doctest::Contains("symlink resolving outside"), format_error);
    st::sharded_reader allowed(dir.path, {.symlinks = io::symlink_policy::follow_outside});
    CHECK(allowed.read_tensor("a").bytes == pattern(8, 0));
    // A symlink that stays inside the folder is fine.
    io::remove_file(dir / "link.safetensors");
    io::copy_file(outside / "evil.safetensors", dir / "real.safetensors");
    REQUIRE(::symlink("real.safetensors", (dir / "link.safetensors").c_str()) == 0);
    CHECK(st::sharded_reader(dir.path).contains("a"));
}
