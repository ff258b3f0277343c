// GGUF writer -> reader round trip, byte layout facts, and every refusal of the reader on
// malformed files built here.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "qforge/io/gguf/reader.hpp"
#include "qforge/io/gguf/writer.hpp"

using namespace qforge;
using namespace qforge::gguf;

namespace {

std::string tmp_path(const char* name) { return std::string(QFORGE_BINARY_DIR) + "/gguf_test_" + name + ".gguf"; }

std::vector<std::byte> slurp_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::vector<char> c{std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
    std::vector<std::byte> b(c.size());
    std::memcpy(b.data(), c.data(), c.size());
    return b;
}

kv_list sample_kvs() {
    return {{"general.architecture", value::str("llama")},
            {"llama.block_count", value::u32(2)},
            {"llama.attention.layer_norm_rms_epsilon", value::f32(1e-5f)},
            {"tokenizer.ggml.add_bos_token", value::boolean(true)},
            {"tokenizer.ggml.tokens", value::array_of<std::string>(value_type::string, {"<s>", "a", "b c"})},
            {"tokenizer.ggml.token_type", value::array_of<std::int32_t>(value_type::i32, {3, 1, 1})},
            {"some.i64", value::i64(-5)},
            {"some.f64", value::f64(0.25)}};
}

std::vector<std::byte> bytes_of(std::size_t n, int seed) {
    std::vector<std::byte> b(n);
    for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>((i * 31 + static_cast<std::size_t>(seed)) & 0xFF);
    return b;
}

/// Builds a valid two-tensor file in memory and returns it (used as the base of the refusals).
std::vector<std::byte> valid_image() {
    const auto path = tmp_path("base");
    file_writer w(path, sample_kvs(),
                  {{"a.weight", {32, 2}, ggml_type::q8_0}, {"b.norm", {5}, ggml_type::f32}});
    w.write_tensor(bytes_of(68, 1));
    w.write_tensor(bytes_of(20, 2));
    w.finish();
    return slurp_bytes(path);
}

void put_u32(std::vector<std::byte>& b, std::size_t at, std::uint32_t v) { std::memcpy(b.data() + at, &v, 4); }
void put_i64(std::vector<std::byte>& b, std::size_t at, std::int64_t v) { std::memcpy(b.data() + at, &v, 8); }

std::size_t find(const std::vector<std::byte>& b, std::string_view s) {
    for (std::size_t i = 0; i + s.size() <= b.size(); ++i)
        if (std::memcmp(b.data() + i, s.data(), s.size()) == 0) return i;
    FAIL("marker not found: " << s);
    return 0;
}

void refused(const std::vector<std::byte>& img, const std::string& reason_part) {
    CAPTURE(reason_part);
    try {
        (void)reader::from_memory(img, "bad.gguf");
        FAIL("accepted a malformed file");
    } catch (const format_error& e) {
        CHECK(e.file() == "bad.gguf");
        CHECK_MESSAGE(e.reason().find(reason_part) != std::string::npos, e.what());
    }
}

}  // namespace

TEST_CASE("gguf writer -> reader round trip keeps metadata types, shapes, offsets, bytes") {
    const auto path = tmp_path("roundtrip");
    const auto a = bytes_of(row_bytes(ggml_type::q4_k, 256) * 3, 7);
    const auto b = bytes_of(4 * 7, 9);
    {
        file_writer w(path, sample_kvs(),
                      {{"blk.0.attn_q.weight", {256, 3}, ggml_type::q4_k}, {"output_norm.weight", {7}, ggml_type::f32}});
        w.write_part(std::span(a).first(100));
        w.write_part(std::span(a).subspan(100));
        w.end_tensor();
        w.write_tensor(b);
        w.finish();
    }
    const auto img = slurp_bytes(path);
    reader r(path);
    CHECK(r.version() == 3);
    CHECK(r.alignment() == 32);
    CHECK(r.metadata() == sample_kvs());
    REQUIRE(r.tensors().size() == 2);
    const auto& t0 = r.tensors()[0];
    CHECK(t0.name == "blk.0.attn_q.weight");
    CHECK(t0.ne == std::vector<std::int64_t>{256, 3});
    CHECK(t0.type == ggml_type::q4_k);
    CHECK(t0.offset == 0);
    CHECK(t0.nbytes == 432);
    CHECK(r.tensors()[1].offset == 448);  // 432 padded to 32
    CHECK(r.data_offset() % 32 == 0);
    CHECK(r.read_bytes(t0) == a);
    CHECK(r.read_bytes(r.tensors()[1]) == b);
    // padding after the last tensor too: 28 bytes -> 32
    CHECK(img.size() == r.data_offset() + 448 + 32);
    for (std::size_t i = r.data_offset() + 448 + 28; i < img.size(); ++i) CHECK(img[i] == std::byte{0});
    // header facts: magic, version, counts as int64
    CHECK(std::memcmp(img.data(), "GGUF", 4) == 0);
    std::uint32_t ver;
    std::int64_t nt, nkv;
    std::memcpy(&ver, img.data() + 4, 4);
    std::memcpy(&nt, img.data() + 8, 8);
    std::memcpy(&nkv, img.data() + 16, 8);
    CHECK(ver == 3);
    CHECK(nt == 2);
    CHECK(nkv == 8);
    CHECK(*r.find("llama.block_count")->as<std::uint32_t>() == 2);
    CHECK_FALSE(r.find("llama.block_count")->as<std::int32_t>());
}

TEST_CASE("gguf writer honours general.alignment and refuses what ggml would refuse") {
    kv_list kvs = {{"general.alignment", value::u32(64)}};
    const auto path = tmp_path("align");
    {
        file_writer w(path, kvs, {{"x", {32}, ggml_type::f16}, {"y", {3}, ggml_type::f32}});
        w.write_tensor(bytes_of(64, 1));
        w.write_tensor(bytes_of(12, 2));
        w.finish();
    }
    reader r(path);
    CHECK(r.alignment() == 64);
    CHECK(r.data_offset() % 64 == 0);
    CHECK(r.tensors()[1].offset == 64);

    std::vector<std::uint64_t> offs;
    CHECK_THROWS_AS(encode_header("f", {{"general.alignment", value::u32(48)}}, {}, offs), format_error);
    CHECK_THROWS_AS(encode_header("f", {{"general.alignment", value::i32(32)}}, {}, offs), format_error);
    CHECK_THROWS_AS(encode_header("f", {{"k", value::u8(1)}, {"k", value::u8(2)}}, {}, offs), format_error);
    CHECK_THROWS_AS(encode_header("f", {{"k", value::array(value_type::array, {})}}, {}, offs), unsupported_error);
    CHECK_THROWS_AS(encode_header("f", {{"k", value::array(value_type::u32, {scalar(std::int32_t{1})})}}, {}, offs), format_error);
    CHECK_THROWS_AS(encode_header("f", {}, {{std::string(64, 'n'), {32}, ggml_type::f32}}, offs), format_error);
    CHECK_NOTHROW(encode_header("f", {}, {{std::string(63, 'n'), {32}, ggml_type::f32}}, offs));
    CHECK_THROWS_AS(encode_header("f", {}, {{"a", {32}, ggml_type::f32}, {"a", {32}, ggml_type::f32}}, offs), format_error);
    CHECK_THROWS_AS(encode_header("f", {}, {{"a", {100}, ggml_type::q4_k}}, offs), shape_error);
    CHECK_THROWS_AS(encode_header("f", {}, {{"a", {1, 1, 1, 1, 1}, ggml_type::f32}}, offs), shape_error);

    // wrong data sizes, too many / too few tensors; no file is left behind on failure
    const auto p2 = tmp_path("sizes");
    {
        file_writer w(p2, {}, {{"x", {32}, ggml_type::f32}});
        CHECK_THROWS_AS(w.write_tensor(bytes_of(127, 0)), shape_error);
        CHECK_THROWS_AS(w.finish(), format_error);
    }
    CHECK_FALSE(io::path_exists(p2 + ".tmp"));
}

TEST_CASE("gguf reader refuses every malformed file") {
    const auto base = valid_image();
    CHECK_NOTHROW(reader::from_memory(base, "bad.gguf"));

    auto img = base;
    img[0] = std::byte{'X'};
    refused(img, "magic");

    img = base;
    put_u32(img, 4, 1);
    refused(img, "version 1");
    put_u32(img, 4, 4);
    refused(img, "newer than 3");
    put_u32(img, 4, 0x03000000);
    refused(img, "byte order");

    img = base;
    put_i64(img, 8, -1);
    refused(img, "tensor count");
    put_i64(img, 8, std::int64_t{1} << 40);
    refused(img, "tensor count");
    img = base;
    put_i64(img, 16, -3);
    refused(img, "key/value count");

    // every truncation of the header or the data is refused, never a crash
    for (std::size_t n = 0; n < base.size(); n += 7) {
        std::vector<std::byte> cut(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(n));
        CAPTURE(n);
        CHECK_THROWS_AS(reader::from_memory(cut, "bad.gguf"), format_error);
    }

    // key/value type: invalid id, nested array, bad bool, duplicate key
    img = base;
    const auto k_arch = find(img, "general.architecture");
    put_u32(img, k_arch + 20, 13);
    refused(img, "invalid GGUF type");
    img = base;
    const auto k_tok = find(img, "tokenizer.ggml.tokens");
    put_u32(img, k_tok + 21 + 4, 9);  // element type ARRAY
    refused(img, "nested array");
    img = base;
    const auto k_bos = find(img, "tokenizer.ggml.add_bos_token");
    img[k_bos + 28 + 4] = std::byte{2};
    refused(img, "BOOL");
    img = base;
    {
        const auto at = find(img, "some.f64");
        std::memcpy(img.data() + at, "some.i64", 8);
    }
    refused(img, "duplicate key");
    // array that claims more elements than the file holds
    img = base;
    put_i64(img, k_tok + 21 + 8, std::int64_t{1} << 50);
    refused(img, "past the end");

    // tensor table: name too long, duplicate name, n_dims, type, block size, offset, bounds
    const auto t_a = find(base, "a.weight");
    const auto t_b = find(base, "b.norm");
    // duplicate tensor names: written different, then patched equal
    {
        const auto p = tmp_path("dup");
        file_writer w(p, {}, {{"t1", {4}, ggml_type::f32}, {"t2", {4}, ggml_type::f32}});
        w.write_tensor(bytes_of(16, 0));
        w.write_tensor(bytes_of(16, 1));
        w.finish();
        auto d = slurp_bytes(p);
        d[find(d, "t2") + 1] = std::byte{'1'};
        refused(d, "duplicate tensor name");
    }
    img = base;
    put_u32(img, t_a + 8, 5);  // n_dims
    refused(img, "dimensions");
    img = base;
    put_i64(img, t_a + 8 + 4, -32);  // ne[0]
    refused(img, "negative");
    img = base;
    put_u32(img, t_a + 8 + 4 + 16, 4);  // removed type id 4
    refused(img, "invalid ggml type");
    img = base;
    put_i64(img, t_a + 8 + 4, 48);  // ne[0] = 48, not a multiple of 32 for Q8_0
    refused(img, "block size");
    img = base;
    put_i64(img, t_b + 6 + 4 + 8 + 4, 96);  // b.norm's offset should be 96 (68 padded to 32)
    CHECK_NOTHROW(reader::from_memory(img, "bad.gguf"));
    put_i64(img, t_b + 6 + 4 + 8 + 4, 68);
    refused(img, "expected 96");
    img = base;
    img.resize(img.size() - 1);  // the padding after the last tensor is required
    refused(img, "data section");
    img = base;
    put_i64(img, t_a + 8 + 4 + 8, std::int64_t{1} << 40);  // huge ne[1]
    refused(img, "past the end");

    // a long name (64 bytes) in the file
    {
        const auto p = tmp_path("longname");
        file_writer w(p, {}, {{std::string(63, 'x'), {4}, ggml_type::f32}});
        w.write_tensor(bytes_of(16, 0));
        w.finish();
        auto d = slurp_bytes(p);
        const auto at = find(d, std::string(63, 'x'));
        put_u32(d, at - 8, 64);  // claim 64 bytes: the name now swallows one byte of n_dims
        refused(d, "");
    }
    // general.alignment of the wrong type or not a power of two
    {
        const auto p = tmp_path("badalign");
        file_writer w(p, {{"general.alignment", value::u32(32)}}, {});
        w.finish();
        auto d = slurp_bytes(p);
        const auto at = find(d, "general.alignment");
        put_u32(d, at + 17 + 4, 48);
        refused(d, "power of two");
        put_u32(d, at + 17, 5);  // INT32
        refused(d, "UINT32");
    }
}
