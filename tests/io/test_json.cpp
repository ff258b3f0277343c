#include <doctest/doctest.h>

#include <string>

#include "qforge/io/json.hpp"

using qforge::json;

namespace {
std::string parse_error(std::string_view text, qforge::json_limits limits = {}) {
    try {
        json::parse(text, "x.json", limits);
    } catch (const qforge::error& e) {
        return e.what();
    }
    return "(no error)";
}
}  // namespace

TEST_CASE("json: scalars parse with exact types") {
    CHECK(json::parse("null").is_null());
    CHECK(json::parse("true").as_bool());
    CHECK_FALSE(json::parse(" false ").as_bool());
    CHECK(json::parse("9223372036854775807").as_int() == INT64_MAX);
    CHECK(json::parse("-9223372036854775808").as_int() == INT64_MIN);
    CHECK(json::parse("9223372036854775808").is_double());  // beyond int64: a double
    CHECK(json::parse("1.5").as_double() == 1.5);
    CHECK(json::parse("1e-05").as_double() == 1e-05);
    CHECK(json::parse("-0.0").is_double());
    CHECK(json::parse("3").as_double() == 3.0);
    CHECK_THROWS_AS(json::parse("3").as_string(), qforge::format_error);
}

TEST_CASE("json: doubles round-trip and print like Python repr") {
    const std::pair<double, const char*> cases[] = {
        {1e-05, "1e-05"},       {1e-06, "1e-06"},          {0.0001, "0.0001"},
        {10000.0, "10000.0"},   {1e16, "1e+16"},           {1e15, "1000000000000000.0"},
        {0.1, "0.1"},           {-2.5, "-2.5"},            {1.5e-10, "1.5e-10"},
        {123.456, "123.456"},   {0.0, "0.0"},              {1e300, "1e+300"},
        {5e-324, "5e-324"},     {1.7976931348623157e308, "1.7976931348623157e+308"},
        {0.02, "0.02"},         {500000.0, "500000.0"},
    };
    for (const auto& c : cases) {
        const double d = c.first;
        const char* text = c.second;
        CAPTURE(text);
        CHECK(json(d).dump() == text);
        CHECK(json::parse(text).as_double() == d);
    }
    CHECK_THROWS_AS(json(std::numeric_limits<double>::quiet_NaN()).dump(), qforge::format_error);
}

TEST_CASE("json: object keeps key order and round-trips compactly") {
    const std::string text = R"({"z":1,"a":[true,null,"x"],"m":{"b":2,"a":{}},"e":[]})";
    const json v = json::parse(text);
    REQUIRE(v.is_object());
    CHECK(v.as_object()[0].key == "z");
    CHECK(v.as_object()[1].key == "a");
    CHECK(v.dump() == text);
    CHECK(v.at("m").at("b").as_int() == 2);
    CHECK(v.find("missing") == nullptr);
    CHECK_THROWS_WITH_AS(v.at("missing"), doctest::Contains("missing"), qforge::format_error);
    CHECK(json::parse(v.dump()) == v);
}

TEST_CASE("json: string escapes follow serde_json on output") {
    std::string s = "q\"b\\s/t\tn\nr\rf\fb\b";
    s += '\x01';
    s += '\x1f';
    s += '\x7f';
    s += "\xc3\xa9\xf0\x9f\x98\x80";  // é and U+1F600, raw
    CHECK(json(s).dump() ==
          "\"q\\\"b\\\\s/t\\tn\\nr\\rf\\fb\\b\\u0001\\u001f\x7f\xc3\xa9\xf0\x9f\x98\x80\"");
    // Python ensure_ascii=True: DEL and non-ASCII escaped, astral as a surrogate pair.
    CHECK(json(s).dump({.ensure_ascii = true}) ==
          "\"q\\\"b\\\\s/t\\tn\\nr\\rf\\fb\\b\\u0001\\u001f\\u007f\\u00e9\\ud83d\\ude00\"");
    CHECK(json::parse(json(s).dump()).as_string() == s);
    CHECK(json::parse(json(s).dump({.ensure_ascii = true})).as_string() == s);
}

TEST_CASE("json: \\u escapes and surrogate pairs decode to UTF-8") {
    CHECK(json::parse(R"("\u00e9\u00E9")").as_string() == "\xc3\xa9\xc3\xa9");
    CHECK(json::parse(R"("\ud83d\ude00")").as_string() == "\xf0\x9f\x98\x80");
    CHECK(json::parse(R"("\u0000")").as_string() == std::string(1, '\0'));
    CHECK(json::parse(R"("\/")").as_string() == "/");
    CHECK(parse_error(R"("\ud83d")").find("low surrogate") != std::string::npos);
    CHECK(parse_error(R"("\ud83d\u0041")").find("low surrogate") != std::string::npos);
    CHECK(parse_error(R"("\ude00")").find("lone") != std::string::npos);
    CHECK(parse_error(R"("\u12g4")").find("hex digits") != std::string::npos);
    CHECK(parse_error(R"("\x")").find("escape") != std::string::npos);
}

TEST_CASE("json: invalid UTF-8 and raw control characters are refused") {
    CHECK(parse_error("\"\xc3\"").find("UTF-8") != std::string::npos);
    CHECK(parse_error("\"\xc0\xaf\"").find("UTF-8") != std::string::npos);         // overlong
    CHECK(parse_error("\"\xed\xa0\x80\"").find("UTF-8") != std::string::npos);     // surrogate
    CHECK(parse_error("\"\xf4\x90\x80\x80\"").find("UTF-8") != std::string::npos); // > U+10FFFF
    CHECK(parse_error("\"a\nb\"").find("control character") != std::string::npos);
}

TEST_CASE("json: errors name the file, the byte offset and what was expected") {
    CHECK(parse_error(R"({"a":1,})") ==
          "qforge: x.json: invalid JSON at byte 7: expected '\"' starting an object key, found '}'");
    CHECK(parse_error(R"({"a" 1})") ==
          "qforge: x.json: invalid JSON at byte 5: expected ':' after an object key, found '1'");
    CHECK(parse_error("[1 2]") ==
          "qforge: x.json: invalid JSON at byte 3: expected ',' or ']' after an array element, found '2'");
    CHECK(parse_error("{} x").find("byte 3: expected end of input") != std::string::npos);
    CHECK(parse_error("").find("byte 0: expected a value") != std::string::npos);
    CHECK(parse_error("[01]").find("byte 2") != std::string::npos);
    CHECK(parse_error("1.").find("after the decimal point") != std::string::npos);
    CHECK(parse_error("1e").find("exponent") != std::string::npos);
    CHECK(parse_error("NaN").find("a value") != std::string::npos);
    CHECK(parse_error("tru").find("byte 0") != std::string::npos);
    CHECK(parse_error("1e400").find("range") != std::string::npos);
    CHECK(parse_error("\"abc").find("closing") != std::string::npos);
    CHECK(parse_error(R"({"a":1,"a":2})").find("duplicate key \"a\"") != std::string::npos);
}

TEST_CASE("json: duplicate keys are found in large objects too") {
    std::string text = "{";
    for (int i = 0; i < 100; ++i) text += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
    CHECK(json::parse(text + "\"end\":0}").size() == 101);
    CHECK(parse_error(text + "\"k57\":0}").find("duplicate key \"k57\"") != std::string::npos);
}

TEST_CASE("json: depth and size limits stop hostile input") {
    const std::string deep(100000, '[');
    CHECK_THROWS_AS(json::parse(deep), qforge::limit_error);
    std::string ok = std::string(128, '[') + std::string(128, ']');
    CHECK(json::parse(ok).is_array());
    std::string too_deep = std::string(129, '[') + std::string(129, ']');
    CHECK_THROWS_AS(json::parse(too_deep), qforge::limit_error);
    CHECK_THROWS_AS(json::parse("[1, 2, 3]", "f", {.max_depth = 128, .max_bytes = 4}),
                    qforge::limit_error);
    CHECK_THROWS_AS(json::parse(R"({"a":{"b":1}})", "f", {.max_depth = 1, .max_bytes = 100}),
                    qforge::limit_error);
}

TEST_CASE("json: indented output matches Python json.dump(indent=2)") {
    json v = json::object({{"b", 1}, {"a", json::array({1, "x", json::object()})}, {"e", json::array()}});
    CHECK(v.dump({.indent = 2}) ==
          "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    \"x\",\n    {}\n  ],\n  \"e\": []\n}");
    CHECK(v.dump({.indent = 2, .sort_keys = true}) ==
          "{\n  \"a\": [\n    1,\n    \"x\",\n    {}\n  ],\n  \"b\": 1,\n  \"e\": []\n}");
    CHECK(json::parse(v.dump({.indent = 2})) == v);
}

TEST_CASE("json: builders and mutation keep positions") {
    json cfg = json::parse(R"({"a":1,"b":2,"c":3})");
    cfg.set("b", "two");
    cfg["d"] = 4.5;
    cfg["q"]["bits"] = 4;  // operator[] creates nested objects
    CHECK(cfg.erase("a"));
    CHECK_FALSE(cfg.erase("a"));
    CHECK(cfg.dump() == R"({"b":"two","c":3,"d":4.5,"q":{"bits":4}})");
    json arr;
    arr.push_back(1);
    arr.push_back(json::array({2, 3}));
    CHECK(arr.dump() == "[1,[2,3]]");
    CHECK(arr[1][0].as_int() == 2);
    arr[0] = "first";  // literal 0 picks the array index, not a key
    CHECK(arr.dump() == R"(["first",[2,3]])");
    const json& carr = arr;
    CHECK(carr[0].as_string() == "first");
    CHECK_THROWS_AS(arr.at(5), qforge::format_error);
    CHECK(json(std::uint64_t{7}).as_int() == 7);
    CHECK_THROWS_AS(json(UINT64_MAX), qforge::format_error);
}
