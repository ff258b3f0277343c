// One test per rejection rule of formats.md 1.3, each with a malformed file made here.
#include <doctest/doctest.h>

#include <cstring>
#include <new>
#include <string>

#include <unistd.h>

#include "io_test_support.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/index.hpp"
#include "qforge/io/safetensors/writer.hpp"

using namespace qforge;
using qforge_test::safetensors_bytes;
using qforge_test::temp_dir;

namespace {

struct outcome {
    std::string kind;  // "ok", "format", "limit", "io", "other"
    std::string message;
    std::string tensor;
};

outcome open_bytes(const std::string& bytes, const safetensors::reader_limits& limits = {},
                   safetensors::read_mode mode = safetensors::read_mode::mmap) {
    temp_dir dir;
    const std::string path = dir / "t.safetensors";
    qforge_test::put_file(path, bytes);
    try {
        safetensors::reader r(path, mode, limits);
        return {"ok", {}, {}};
    } catch (const limit_error& e) {
        return {"limit", e.what(), e.tensor()};
    } catch (const format_error& e) {
        return {"format", e.what(), e.tensor()};
    } catch (const io_error& e) {
        return {"io", e.what(), e.tensor()};
    } catch (const std::bad_alloc&) {
        return {"bad_alloc", {}, {}};
    }
}

// A valid one-tensor header: F32 [2] at [0,8].
const std::string one = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
const std::string eight(8, '\x11');

void check_rejected(const outcome& o, const std::string& kind, const std::string& rule,
                    const std::string& tensor = {}) {
    CAPTURE(o.message);
    CHECK(o.kind == kind);
    CHECK(o.message.find(rule) != std::string::npos);
    CHECK(o.message.find("t.safetensors") != std::string::npos);
    CHECK(o.tensor == tensor);
}

}  // namespace

TEST_CASE("reader accepts a valid file in both modes") {
    CHECK(open_bytes(safetensors_bytes(one, eight)).kind == "ok");
    CHECK(open_bytes(safetensors_bytes(one, eight), {}, safetensors::read_mode::pread).kind == "ok");
}

TEST_CASE("rule HeaderTooSmall: file shorter than 8 bytes") {
    check_rejected(open_bytes("\x05\0\0\0\0"), "format", "(HeaderTooSmall)");
    check_rejected(open_bytes(""), "format", "(HeaderTooSmall)");
}

TEST_CASE("rule HeaderTooLarge: N above 100,000,000 (and above a configured limit)") {
    check_rejected(open_bytes(safetensors_bytes(one, eight, 100'000'001)), "limit", "(HeaderTooLarge)");
    check_rejected(open_bytes(safetensors_bytes(one, eight, UINT64_MAX - 3)), "limit", "(HeaderTooLarge)");
    safetensors::reader_limits small;
    small.max_header_bytes = 16;
    check_rejected(open_bytes(safetensors_bytes(one, eight), small), "limit", "(HeaderTooLarge)");
}

TEST_CASE("rule InvalidHeaderLength: 8 + N past the end of the file") {
    check_rejected(open_bytes(safetensors_bytes(one, "", 1000)), "format", "(InvalidHeaderLength)");
    check_rejected(open_bytes(std::string("\x01\0\0\0\0\0\0\0", 8)), "format", "(InvalidHeaderLength)");
}

TEST_CASE("rule InvalidHeader: header bytes are not UTF-8") {
    std::string bad = one;
    bad.replace(bad.find("a\""), 1, "\xff");
    check_rejected(open_bytes(safetensors_bytes(bad, eight)), "format", "(InvalidHeader)");
}

TEST_CASE("rule InvalidHeaderDeserialization: not JSON or wrong types") {
    const std::pair<std::string, std::string> cases[] = {
        {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})", ""},   // unterminated
        {R"([1,2])", ""},                                                      // not an object
        {R"({"__metadata__":{"format":1},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", ""},
        {R"({"__metadata__":"pt","a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", ""},
        {R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", "a"},     // unknown dtype
        {R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "a"},    // negative dim
        {R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", "a"},   // float dim
        {R"({"a":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", "a"},       // shape not array
        {R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", "a"},                 // missing field
        {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", "a"},   // 3 offsets
        {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-1,8]}})", "a"},    // negative offset
        {R"({"a":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", "a"},         // dtype not string
        {R"({"a":[1]})", "a"},                                                  // entry not object
        {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", ""},
    };
    for (const auto& c : cases) {
        const std::string header = c.first, tensor = c.second;
        CAPTURE(header);
        check_rejected(open_bytes(safetensors_bytes(header, eight)), "format",
                       "(InvalidHeaderDeserialization)", tensor);
    }
}

TEST_CASE("rule InvalidOffset: first begin not 0, gap, overlap, end before begin") {
    check_rejected(open_bytes(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                                std::string(12, 'x'))),
                   "format", "(InvalidOffset)", "a");
    const std::string two_gap =
        R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
    check_rejected(open_bytes(safetensors_bytes(two_gap, std::string(12, 'x'))), "format", "(InvalidOffset)", "b");
    const std::string overlap =
        R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
    check_rejected(open_bytes(safetensors_bytes(overlap, eight)), "format", "(InvalidOffset)", "b");
    check_rejected(open_bytes(safetensors_bytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[0],"data_offsets":[8,0]}})", eight)),
                   "format", "(InvalidOffset)", "b");
}

TEST_CASE("rule ValidationOverflow: element count or bit size overflows") {
    check_rejected(open_bytes(safetensors_bytes(
                       R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,8]}})", eight),
                              {.max_elements = UINT64_MAX}),
                   "format", "(ValidationOverflow)", "a");
    check_rejected(open_bytes(safetensors_bytes(
                       R"({"a":{"dtype":"F64","shape":[4294967296,1073741824],"data_offsets":[0,8]}})", eight),
                              {.max_elements = UINT64_MAX}),
                   "format", "(ValidationOverflow)", "a");
}

TEST_CASE("rule MisalignedSlice: sub-byte dtype that does not fill whole bytes") {
    check_rejected(open_bytes(safetensors_bytes(R"({"a":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})", "xx")),
                   "format", "(MisalignedSlice)", "a");
    CHECK(open_bytes(safetensors_bytes(R"({"a":{"dtype":"F4","shape":[4],"data_offsets":[0,2]}})", "xx")).kind == "ok");
}

TEST_CASE("rule TensorInvalidInfo: byte span differs from dtype x shape") {
    check_rejected(open_bytes(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "xxxx")),
                   "format", "(TensorInvalidInfo)", "a");
}

TEST_CASE("rule MetadataIncompleteBuffer: trailing bytes or short data") {
    check_rejected(open_bytes(safetensors_bytes(one, eight + "x")), "format", "trailing bytes");
    check_rejected(open_bytes(safetensors_bytes(one, eight + "x")), "format", "(MetadataIncompleteBuffer)");
    check_rejected(open_bytes(safetensors_bytes(one, "xxxx")), "format", "(MetadataIncompleteBuffer)");
}

TEST_CASE("a file claiming terabytes is refused without allocating") {
    // 2^41 F32 elements = 8 TiB claimed, 8 bytes present.
    const std::string huge = R"({"a":{"dtype":"F32","shape":[2097152,1048576],"data_offsets":[0,8796093022208]}})";
    check_rejected(open_bytes(safetensors_bytes(huge, eight), {.max_elements = UINT64_MAX}), "format",
                   "(MetadataIncompleteBuffer)");
    check_rejected(open_bytes(safetensors_bytes(huge, eight)), "limit", "max_elements", "a");
}

TEST_CASE("configurable limits: tensor count, rank, elements") {
    const std::string two =
        R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
    check_rejected(open_bytes(safetensors_bytes(two, "xy"), {.max_tensors = 1}), "limit", "max_tensors");
    CHECK(open_bytes(safetensors_bytes(two, "xy"), {.max_tensors = 2}).kind == "ok");
    const std::string rank3 = R"({"a":{"dtype":"U8","shape":[1,1,1],"data_offsets":[0,1]}})";
    check_rejected(open_bytes(safetensors_bytes(rank3, "x"), {.max_rank = 2}), "limit", "max_rank", "a");
    check_rejected(open_bytes(safetensors_bytes(two, "xy"), {.max_elements = 0}), "limit", "max_elements", "a");
    // A header with a million tiny tensors is refused at the count, not after building them all.
}

TEST_CASE("accepted variations: whitespace, padding, no metadata, scalars, empty tensors, extra fields") {
    CHECK(open_bytes(safetensors_bytes("  \n" + one + "       ", eight)).kind == "ok");
    CHECK(open_bytes(safetensors_bytes("{}", "")).kind == "ok");
    CHECK(open_bytes(safetensors_bytes(R"({"__metadata__":null})", "")).kind == "ok");
    CHECK(open_bytes(safetensors_bytes(R"({"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})", eight)).kind == "ok");
    CHECK(open_bytes(safetensors_bytes(
                         R"({"e":{"dtype":"BF16","shape":[0,7],"data_offsets":[0,0]},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":[1]}})",
                         eight))
              .kind == "ok");
    // Keys in any order: tensors sorted by offsets, not by key order.
    temp_dir dir;
    qforge_test::put_file(dir / "r.safetensors",
                          safetensors_bytes(R"({"second":{"dtype":"U8","shape":[1],"data_offsets":[1,2]},"__metadata__":{"k":"v","format":"pt"},"first":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})",
                                            "AB"));
    safetensors::reader r(dir / "r.safetensors");
    REQUIRE(r.tensors().size() == 2);
    CHECK(r.tensors()[0].name == "first");
    CHECK(r.metadata() == safetensors::metadata_t{{"k", "v"}, {"format", "pt"}});
    CHECK(static_cast<char>(r.view("second").bytes[0]) == 'B');
    CHECK_THROWS_WITH_AS(r.view("third"), doctest::Contains("tensor 'third': no such tensor"), format_error);
}

TEST_CASE("a file truncated underneath the reader gives an io_error naming file and tensor") {
    temp_dir dir;
    const std::string path = dir / "trunc.safetensors";
    {
        safetensors::writer w(path, {{"a", dtype::F32, {1024}}, {"b", dtype::F32, {1024}}});
        const std::vector<std::byte> zeros(4096);
        w.write("a", zeros);
        w.write("b", zeros);
        w.finish();
    }
    for (auto mode : {safetensors::read_mode::pread, safetensors::read_mode::mmap}) {
        safetensors::reader r(path, mode);
        REQUIRE(::truncate(path.c_str(), static_cast<off_t>(r.data_offset() + 4096 + 100)) == 0);
        CHECK_NOTHROW(r.read_tensor("a"));
        CHECK_THROWS_WITH_AS(r.read_tensor("b"), doctest::Contains("trunc.safetensors: tensor 'b': unexpected end of file"),
                             io_error);
        CHECK_THROWS_WITH_AS(r.verify_unchanged(), doctest::Contains("changed size"), io_error);
        std::vector<std::byte> buf(4096);
        CHECK_THROWS_AS(r.read_tensor_into("b", buf), io_error);
        CHECK_THROWS_AS(r.read_tensor_into("b", std::span<std::byte>(buf.data(), 10)), shape_error);
        // Restore full length for the next mode.
        REQUIRE(::truncate(path.c_str(), static_cast<off_t>(r.file_size())) == 0);
    }
}

TEST_CASE("the stories260k fixture reads, and rewrites to the canonical recipe with identical tensors") {
    const std::string folder = QFORGE_SOURCE_DIR "/tests/golden/fixtures/stories260k";
    safetensors::sharded_reader in(folder);
    REQUIRE(in.shard_count() == 1);
    const safetensors::reader& r = in.shard(0);
    CHECK(r.metadata() == safetensors::metadata_t{{"format", "pt"}});
    CHECK(r.tensors().size() == 47);  // embed + norm + 5 x (2 norms + 7 linears)
    CHECK(r.info("model.embed_tokens.weight").shape == shape_t{512, 64});
    CHECK(r.info("model.layers.0.mlp.down_proj.weight").shape == shape_t{64, 172});
    std::vector<safetensors::tensor_spec> specs;
    for (const auto& t : r.tensors()) specs.push_back({t.name, t.type, t.shape});
    temp_dir dir;
    {
        safetensors::writer w(dir / "copy.safetensors", specs);
        for (const auto& t : r.tensors()) w.write(r.view(t.name));
        w.finish();
    }
    safetensors::reader copy(dir / "copy.safetensors");
    CHECK(copy.file_size() == r.file_size() - r.header_size() + copy.header_size());
    for (const auto& t : r.tensors()) {
        const auto a = r.view(t.name).bytes, b = copy.view(t.name).bytes;
        REQUIRE(a.size() == b.size());
        CHECK(std::memcmp(a.data(), b.data(), a.size()) == 0);
    }
    // Canonical order: all BF16, so by name.
    CHECK(copy.tensors().front().name == "model.embed_tokens.weight");
    CHECK(copy.tensors()[1].name == "model.layers.0.input_layernorm.weight");
}

TEST_CASE("transformers_can_load follows transformers' __metadata__ check") {
    temp_dir dir;
    auto with_meta = [&](const std::string& meta) {
        qforge_test::put_file(dir / "m.safetensors", safetensors_bytes(meta.empty() ? "{}" : "{\"__metadata__\":" + meta + "}", ""));
        return safetensors::reader(dir / "m.safetensors").transformers_can_load();
    };
    CHECK(with_meta(""));
    CHECK(with_meta(R"({"format":"pt"})"));
    CHECK(with_meta(R"({"format":"mlx","x":"y"})"));
    CHECK_FALSE(with_meta(R"({"format":"np"})"));
    CHECK_FALSE(with_meta(R"({"other":"pt"})"));
}
