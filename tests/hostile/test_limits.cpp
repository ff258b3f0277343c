// Resource limits: sizes, counts, ranks and element counts a file claims are checked with
// overflow-safe arithmetic before anything is allocated from them, in both read modes, and the
// limits are configurable (safetensors::reader_limits, json_limits).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <utility>

#include "hostile/alloc_probe.hpp"
#include "hostile/hostile_support.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/reader.hpp"

namespace st = qforge::safetensors;
using namespace qforge::hostile;

namespace {

constexpr std::size_t one_mib = std::size_t{1} << 20;

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  std::uint64_t begin, std::uint64_t end) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
           ",\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(end) + "]}";
}

// Opens `bytes` as a file in both modes; each must throw E with `needle` in the message, and
// neither may allocate more than `max_alloc` bytes at once while doing so.
template <class E>
void refused_in_both_modes(const scratch_dir& dir, const std::string& bytes, const std::string& needle,
                           const st::reader_limits& limits = {}, std::size_t max_alloc = one_mib) {
    const auto path = (dir / "hostile.safetensors").string();
    write_bytes(path, bytes);
    for (const st::read_mode mode : {st::read_mode::mmap, st::read_mode::pread}) {
        CAPTURE(static_cast<int>(mode));
        alloc_probe probe;
        CHECK_THROWS_WITH_AS(st::reader(path, mode, limits), doctest::Contains(needle.c_str()), E);
        CHECK(probe.largest() <= max_alloc);
    }
}

}  // namespace

TEST_CASE("limits: a header length of 2^64-1 or just over 100 MB is refused before reading it") {
    scratch_dir dir;
    refused_in_both_modes<qforge::limit_error>(dir, le64(UINT64_MAX) + "{}", "HeaderTooLarge");
    refused_in_both_modes<qforge::limit_error>(dir, le64(100'000'001) + "{}      ", "HeaderTooLarge");
    // Within the limit but past the end of the file: nothing is allocated from the claim.
    refused_in_both_modes<qforge::format_error>(dir, le64(99'999'992) + "{}      ", "InvalidHeaderLength");
}

TEST_CASE("limits: max_header_bytes is configurable and is checked before the header is read") {
    scratch_dir dir;
    const std::string file = safetensors_bytes("{" + entry("a", "U8", "[4]", 0, 4) + "}", "abcd");
    const auto path = (dir / "ok.safetensors").string();
    write_bytes(path, file);
    CHECK_NOTHROW(st::reader{path});
    refused_in_both_modes<qforge::limit_error>(dir, file, "exceeds the limit of 16 bytes",
                                               {.max_header_bytes = 16});
}

TEST_CASE("limits: a file that claims a terabyte tensor is refused without allocating it") {
    scratch_dir dir;
    // 2^38 F32 elements = 1 TiB, offsets consistent with the shape, 4 bytes of actual data.
    const std::uint64_t tib = std::uint64_t{1} << 40;
    refused_in_both_modes<qforge::format_error>(
        dir, safetensors_bytes("{" + entry("w", "F32", "[262144,1048576]", 0, tib) + "}", "abcd"),
        "MetadataIncompleteBuffer");
    // Above the default element limit (2^40 per tensor): a limit_error naming the knob.
    refused_in_both_modes<qforge::limit_error>(
        dir, safetensors_bytes("{" + entry("w", "U8", "[1048576,1048577]", 0, tib + 1048576) + "}", "abcd"),
        "reader_limits::max_elements");
}

TEST_CASE("limits: element counts and byte sizes that overflow 64 bits are refused (ValidationOverflow)") {
    scratch_dir dir;
    // 2^32 x 2^32 overflows the element count; 2^61 F64 overflows the bit count.
    refused_in_both_modes<qforge::format_error>(
        dir, safetensors_bytes("{" + entry("w", "F64", "[4294967296,4294967296]", 0, 8) + "}", "12345678"),
        "overflows 64 bits", {.max_elements = UINT64_MAX});
    refused_in_both_modes<qforge::format_error>(
        dir, safetensors_bytes("{" + entry("w", "F64", "[2305843009213693952]", 0, 8) + "}", "12345678"),
        "overflows 64 bits", {.max_elements = UINT64_MAX});
    // A dimension beyond int64 is parsed as a double by the JSON reader: not an integer.
    refused_in_both_modes<qforge::format_error>(
        dir, safetensors_bytes("{" + entry("w", "U8", "[18446744073709551616]", 0, 1) + "}", "1"),
        "non-negative integer");
    refused_in_both_modes<qforge::format_error>(
        dir, safetensors_bytes("{" + entry("w", "U8", "[-1]", 0, 0) + "}", ""), "non-negative integer");
    // data_offsets past 2^63 (an int64 JSON integer cannot hold them).
    refused_in_both_modes<qforge::format_error>(
        dir, safetensors_bytes(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,9223372036854775808]}})", "x"),
        "data_offsets[1] must be a non-negative integer");
}

TEST_CASE("limits: tensor count and rank limits are configurable and name the knob") {
    scratch_dir dir;
    std::string header = "{";
    for (int i = 0; i < 5; ++i) header += (i ? "," : "") + entry("t" + std::to_string(i), "U8", "[1]", i, i + 1);
    header += "}";
    const std::string five = safetensors_bytes(header, "abcde");
    refused_in_both_modes<qforge::limit_error>(dir, five, "reader_limits::max_tensors", {.max_tensors = 4});
    const auto path = (dir / "five.safetensors").string();
    write_bytes(path, five);
    CHECK(st::reader(path, st::read_mode::pread, {.max_tensors = 5}).tensors().size() == 5);

    const std::string rank9 =
        safetensors_bytes("{" + entry("w", "U8", "[1,1,1,1,1,1,1,1,1]", 0, 1) + "}", "x");
    refused_in_both_modes<qforge::limit_error>(dir, rank9, "reader_limits::max_rank", {.max_rank = 8});
    write_bytes(path, rank9);
    CHECK(st::reader(path, st::read_mode::mmap, {.max_rank = 9}).tensors().size() == 1);
}

TEST_CASE("limits: deeply nested JSON in a header is refused without exhausting the stack") {
    scratch_dir dir;
    // 100,000 levels: a recursive parser without a depth limit would overflow the stack.
    const std::string deep = "{\"a\":" + std::string(100'000, '[') + std::string(100'000, ']') + "}";
    refused_in_both_modes<qforge::format_error>(dir, safetensors_bytes(deep, ""), "nesting deeper than 128",
                                                {}, 4 * one_mib);
    CHECK_THROWS_AS(qforge::json::parse(std::string(1'000'000, '['), "deep.json"), qforge::limit_error);
    CHECK_THROWS_WITH_AS(qforge::json::parse("[[1]]", "x.json", {.max_depth = 1}),
                         doctest::Contains("nesting deeper than 1"), qforge::limit_error);
    CHECK_THROWS_WITH_AS(qforge::json::parse("[1,2]", "x.json", {.max_bytes = 3}),
                         doctest::Contains("exceeds the limit of 3"), qforge::limit_error);
}

namespace {

// Peak live heap bytes of parsing `text` (whether it parses or is refused), over its size.
double parse_memory_ratio(const std::string& text) {
    alloc_probe probe;
    try {
        const qforge::json v = qforge::json::parse(text, "hostile.json");
        (void)v;
    } catch (const qforge::error&) {
    }
    return static_cast<double>(probe.peak()) / static_cast<double>(text.size());
}

std::string repeated(const std::string& open, const std::string& item, std::size_t n,
                     const std::string& sep, const std::string& close) {
    std::string s = open;
    for (std::size_t k = 0; k < n; ++k) s += (k ? sep : "") + item;
    return s + close;
}

// Distinct keys of minimal length: base-90 digits from printable ASCII except '"' and '\'.
std::string short_key(std::size_t k) {
    std::string key;
    do {
        char c = static_cast<char>(' ' + 1 + k % 90);
        if (c == '"' || c == '\\') c = static_cast<char>('~' - (c == '"'));
        key += c;
        k /= 90;
    } while (k);
    return key;
}

}  // namespace

TEST_CASE("limits: JSON parsing holds at most 24 bytes of heap per byte of input, valid or not") {
    // The constant stated in json_limits: 40-byte values, each taking >= 2 bytes of text.
    constexpr double bound = 24.0;
    constexpr std::size_t n = 200'000;
    std::string keys = "{";
    for (std::size_t k = 0; k < n; ++k) keys += (k ? ",\"" : "\"") + short_key(k) + "\":0";
    keys += "}";
    std::string deep = std::string(127, '[') + repeated("", "{}", n, ",", "") + std::string(127, ']');
    const std::pair<const char*, std::string> cases[] = {
        {"tiny numbers [0,0,...]", repeated("[", "0", n, ",", "]")},
        {"empty arrays [[],[],...]", repeated("[", "[]", n, ",", "]")},
        {"empty objects [{},{},...]", repeated("[", "{}", n, ",", "]")},
        {"127 arrays deep, then empty objects", deep},
        {"empty strings", repeated("[", "\"\"", n, ",", "]")},
        {"one-character strings", repeated("[", "\"a\"", n, ",", "]")},
        {"many short keys", keys},
        {"a long string", "[\"" + std::string(4'000'000, 'x') + "\"]"},
        {"a long string of escapes", "[\"" + repeated("", "\\u00e9", 500'000, "", "") + "\"]"},
        {"17-byte strings (just past SSO)", repeated("[", "\"" + std::string(17, 's') + "\"", n, ",", "]")},
        {"nested pairs [[0,0],[0,0],...]", repeated("[", "[0,0]", n, ",", "]")},
        {"nested singles [[0],[0],...]", repeated("[", "[0]", n, ",", "]")},
        {"strings of backslashes", repeated("[", "\"" + std::string(64, '\\') + "\"", n / 16, ",", "]")},
        // Invalid inputs that a naive pre-count would size from: commas, juxtaposed values,
        // keys without values, then a syntax error at the very end.
        {"commas only [,,,]", repeated("[", "", n, ",", "]")},
        {"juxtaposed [0 0 0", repeated("[", "0", n, " ", "")},
        {"juxtaposed [0\"\"0\"\"", repeated("[", "0\"\"", n, "", "")},
        {"keys without values", repeated("{", "\"\":", n, ",", "}")},
        {"valid until the last byte", repeated("[", "0", n, ",", "]x")},
    };
    for (const auto& c : cases) {  // not a structured binding: clang 14 cannot capture one in CAPTURE's lambda
        const auto& name = c.first;
        const auto& text = c.second;
        CAPTURE(name);
        const double ratio = parse_memory_ratio(text);
        MESSAGE(std::string(name) << ": " << text.size() << " bytes, peak heap " << ratio << "x");
        CHECK(ratio <= bound);
    }
}

TEST_CASE("limits: json_limits::max_values caps the tree, as a limit_error naming the file") {
    CHECK_NOTHROW(qforge::json::parse("[1,2]", "x.json", {.max_values = 3}));
    CHECK_THROWS_WITH_AS(qforge::json::parse("[1,2,3]", "x.json", {.max_values = 3}),
                         doctest::Contains("x.json: more than 3 JSON values at byte 5 (json_limits::max_values)"),
                         qforge::limit_error);
    // Keys are not values; the object and its two values are.
    CHECK_NOTHROW(qforge::json::parse(R"({"a":1,"b":[]})", "x.json", {.max_values = 3}));
    CHECK_THROWS_AS(qforge::json::parse(R"({"a":1,"b":[0]})", "x.json", {.max_values = 3}),
                    qforge::limit_error);
}

TEST_CASE("limits: files too small or empty are refused (HeaderTooSmall)") {
    scratch_dir dir;
    refused_in_both_modes<qforge::format_error>(dir, "", "HeaderTooSmall");
    refused_in_both_modes<qforge::format_error>(dir, "1234567", "HeaderTooSmall");
    refused_in_both_modes<qforge::format_error>(dir, le64(0), "InvalidHeaderDeserialization");
}

TEST_CASE("limits: the allocation probe itself sees large allocations (so the checks above can fail)") {
    alloc_probe probe;
    std::string big(8 * one_mib, 'x');
    CHECK(probe.largest() >= 8 * one_mib);
    CHECK(probe.peak() >= 8 * one_mib);
    CHECK(big.size() == 8 * one_mib);
}
