#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io_test_support.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/writer.hpp"

using namespace qforge;
using qforge_test::as_bytes;
using qforge_test::get_file;
using qforge_test::temp_dir;

TEST_CASE("safetensors writer: the 88-byte example of formats.md 1.1, byte for byte") {
    temp_dir dir;
    const std::string path = dir / "one.safetensors";
    std::string data;
    for (int i = 0; i < 12; ++i) data += static_cast<char>(i * 7 + 1);
    {
        safetensors::writer w(path, {{"w", dtype::F16, {2, 3}}});
        w.write("w", as_bytes(data));
        w.finish();
    }
    const std::string header =
        R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F16","shape":[2,3],"data_offsets":[0,12]}})";
    REQUIRE(header.size() == 88);
    const std::string expected = std::string("\x58\0\0\0\0\0\0\0", 8) + header + data;
    CHECK(get_file(path) == expected);
}

TEST_CASE("safetensors writer: dtype-descending then name order, offsets, space padding") {
    std::vector<safetensors::tensor_spec> specs = {
        {"b", dtype::F32, {2}},   {"a", dtype::F32, {1}},   {"z", dtype::BF16, {3}},
        {"c", dtype::I64, {}},    {"m", dtype::U8, {0, 5}}, {"B", dtype::F32, {1}},
        {"e", dtype::BOOL, {2}},  {"u", dtype::U64, {1}},
    };
    const auto L = safetensors::plan_file(specs);
    std::vector<std::string> names;
    for (const auto& s : L.order) names.push_back(s.name);
    CHECK(names == std::vector<std::string>{"u", "c", "B", "a", "b", "z", "m", "e"});
    const std::string json_text =
        R"({"__metadata__":{"format":"pt"},)"
        R"("u":{"dtype":"U64","shape":[1],"data_offsets":[0,8]},)"
        R"("c":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
        R"("B":{"dtype":"F32","shape":[1],"data_offsets":[16,20]},)"
        R"("a":{"dtype":"F32","shape":[1],"data_offsets":[20,24]},)"
        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[24,32]},)"
        R"("z":{"dtype":"BF16","shape":[3],"data_offsets":[32,38]},)"
        R"("m":{"dtype":"U8","shape":[0,5],"data_offsets":[38,38]},)"
        R"("e":{"dtype":"BOOL","shape":[2],"data_offsets":[38,40]}})";
    const std::size_t padded = (json_text.size() + 7) / 8 * 8;
    REQUIRE(padded != json_text.size());  // the test must exercise padding
    CHECK(L.header == json_text + std::string(padded - json_text.size(), ' '));
    CHECK(L.data_size == 40);
    CHECK(L.file_size() == 8 + padded + 40);

    // Streaming in a different order than the file order, in parts, gives the same bytes.
    temp_dir dir;
    std::string all_data(40, '\0');
    for (std::size_t i = 0; i < all_data.size(); ++i) all_data[i] = static_cast<char>(i + 100);
    {
        safetensors::writer w(dir / "m.safetensors", specs);
        for (auto it = L.order.rbegin(); it != L.order.rend(); ++it) {
            const std::size_t k = static_cast<std::size_t>(it - L.order.rbegin());
            const std::size_t i = L.order.size() - 1 - k;
            const std::string part = all_data.substr(L.begins[i], L.sizes[i]);
            const std::size_t half = part.size() / 2;
            w.write(it->name, as_bytes(part.substr(0, half)));
            w.write(it->name, as_bytes(part.substr(half)));
        }
        w.finish();
    }
    CHECK(get_file(dir / "m.safetensors") == L.prefix() + all_data);
}

TEST_CASE("safetensors writer: metadata, escapes and empty metadata") {
    const auto L = safetensors::plan_file({{"a\"/\xc3\xa9\n", dtype::I8, {1}}}, {{"format", "pt"}, {"k", "v\x01"}});
    CHECK(L.header.rfind(
              R"({"__metadata__":{"format":"pt","k":"v\u0001"},"a\"/)" "\xc3\xa9" R"(\n":{"dtype":"I8","shape":[1],"data_offsets":[0,1]}})",
              0) == 0);
    const auto none = safetensors::plan_file({{"x", dtype::I8, {1}}}, {});
    CHECK(none.header.rfind(R"({"x":{"dtype":"I8")", 0) == 0);
}

TEST_CASE("safetensors writer: refuses bad specs and wrong byte counts") {
    temp_dir dir;
    CHECK_THROWS_AS(safetensors::plan_file({{"a", dtype::F32, {1}}, {"a", dtype::F16, {1}}}), format_error);
    CHECK_THROWS_AS(safetensors::plan_file({{"a", dtype::F32, {-1}}}), shape_error);
    CHECK_THROWS_AS(safetensors::plan_file({{"a", dtype::F4, {3}}}), shape_error);
    CHECK_THROWS_AS(safetensors::plan_file({{"a", dtype::F32, {1LL << 40, 1LL << 40}}}), limit_error);
    CHECK_THROWS_AS(safetensors::plan_file({{"__metadata__", dtype::F32, {1}}}), format_error);

    safetensors::writer w(dir / "x.safetensors", {{"a", dtype::F32, {2}}, {"b", dtype::U8, {1}}});
    const std::string eight(8, 'x');
    CHECK_THROWS_AS(w.write("nope", as_bytes(eight)), format_error);
    CHECK_THROWS_WITH_AS(w.write("a", as_bytes(eight + "y")), doctest::Contains("tensor 'a'"), shape_error);
    w.write("a", as_bytes(eight));
    CHECK_THROWS_WITH_AS(w.finish(), doctest::Contains("tensor 'b': only 0 of 1 bytes"), shape_error);
    const std::vector<std::byte> one(1);
    CHECK_THROWS_AS(w.write(tensor_view{"b", dtype::I8, {1}, one}), shape_error);
    w.write(tensor_view{"b", dtype::U8, {1}, one});
    w.finish();
    CHECK(safetensors::reader(dir / "x.safetensors").tensors().size() == 2);
}

TEST_CASE("safetensors writer: an abandoned writer removes its partial file") {
    temp_dir dir;
    {
        safetensors::writer w(dir / "p.safetensors", {{"a", dtype::F32, {2}}});
        CHECK(io::path_exists(dir / "p.safetensors"));
    }
    CHECK_FALSE(io::path_exists(dir / "p.safetensors"));
}

TEST_CASE("safetensors: every dtype writes and reads back (mmap view and pread copy)") {
    temp_dir dir;
    std::vector<safetensors::tensor_spec> specs;
    for (const auto& info : detail::dtype_table)
        specs.push_back({"t_" + std::string(info.name), info.type, {2, 4}});  // 8 elements: whole bytes for F4/F6
    const auto L = safetensors::plan_file(specs);
    std::vector<std::string> payload;
    {
        safetensors::writer w(dir / "all.safetensors", specs);
        for (std::size_t i = 0; i < L.order.size(); ++i) {
            std::string p(L.sizes[i], '\0');
            for (std::size_t k = 0; k < p.size(); ++k) p[k] = static_cast<char>(i * 31 + k * 3 + 1);
            w.write(L.order[i].name, as_bytes(p));
            payload.push_back(p);
        }
        w.finish();
    }
    for (auto mode : {safetensors::read_mode::mmap, safetensors::read_mode::pread}) {
        safetensors::reader r(dir / "all.safetensors", mode);
        REQUIRE(r.tensors().size() == dtype_count);
        CHECK(r.metadata() == safetensors::metadata_t{{"format", "pt"}});
        for (std::size_t i = 0; i < L.order.size(); ++i) {
            const auto& t = r.info(L.order[i].name);
            CHECK(t.type == L.order[i].type);
            CHECK(t.shape == shape_t{2, 4});
            CHECK(t.size() == dtype_bits(t.type));  // 8 elements x bits / 8
            const owned_tensor o = r.read_tensor(t.name);
            CHECK(std::memcmp(o.bytes.data(), payload[i].data(), payload[i].size()) == 0);
            if (mode == safetensors::read_mode::mmap) {
                const tensor_view v = r.view(t.name);
                REQUIRE(v.bytes.size() == payload[i].size());
                CHECK(std::memcmp(v.bytes.data(), payload[i].data(), payload[i].size()) == 0);
                r.release(t.name);
                CHECK(std::memcmp(v.bytes.data(), payload[i].data(), payload[i].size()) == 0);
            } else {
                CHECK_THROWS_AS(r.view(t.name), unsupported_error);
            }
        }
    }
}

TEST_CASE("safetensors::save writes in-memory tensors in one call") {
    temp_dir dir;
    owned_tensor a{"a", dtype::I32, {2}, std::vector<std::byte>(8, std::byte{3})};
    owned_tensor b{"b", dtype::F64, {}, std::vector<std::byte>(8, std::byte{4})};
    safetensors::save(dir / "s.safetensors", {a.view(), b.view()});
    safetensors::reader r(dir / "s.safetensors");
    CHECK(r.tensors()[0].name == "b");  // F64 sorts before I32
    CHECK(r.read_tensor("a").bytes == a.bytes);
    CHECK(r.read_tensor("b").bytes == b.bytes);
}
