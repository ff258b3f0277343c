// qforge::json: the JSON value of checkpoint metadata (config.json, safetensors headers,
// model.safetensors.index.json, quantization_config fragments): build it, read it, compare it.
//
//   qforge::json c = qforge::json::object({{"bits", 4}, {"quant_method", "gptq"}});
//   c.set("group_size", 128);
//   std::int64_t bits = c.at("bits").as_int();
//
// The value lives in core so that layouts can describe their configs without depending on io.
// Turning text into a value and back (json::parse, json::dump) is io's: include
// qforge/io/json.hpp to call them (without it they fail to compile, naming json_io).
//
// Guarantees: objects keep key order (insertion / file order); integers are int64-exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"

namespace qforge {

class json;
struct json_io;  // parse and dump: defined in io/json.hpp

/// One key/value pair of an object; objects are vectors of these so key order is kept.
/// A template so that it is completed lazily, once json itself is complete: clang (with
/// libstdc++) needs the element type of object_t complete inside json's member bodies.
template <class Json>
struct basic_json_member {
    std::string key;
    Json value;
};
using json_member = basic_json_member<json>;

/// Hostile-input limits for json::parse. Defaults fit every real checkpoint file.
///
/// Memory: whatever the limits, parsing N bytes never holds more than 24 N bytes of heap (+ a
/// few KiB): containers are sized exactly from a structural pre-scan (no growth slack), strings
/// are reserved at their raw length, and each value costs sizeof(json) = 40 bytes against the
/// at least 2 bytes of text ("0,") it takes, so a hostile header cannot make the parser allocate
/// more than a small multiple of what was read (tests/hostile/test_limits.cpp measures it).
/// max_values caps the absolute size of the tree on top of that.
struct json_limits {
    std::size_t max_depth = 128;                   // serde_json's recursion limit
    std::size_t max_bytes = std::size_t{1} << 30;  // 1 GiB of text
    /// Values in the document (scalars, strings, arrays, objects; object keys not counted).
    /// 16 Mi values: the largest tokenizer.json files (256k vocab + merges) hold ~2 Mi.
    std::size_t max_values = std::size_t{1} << 24;
};

/// Output shape for json::dump. indent < 0: compact, byte-identical to serde_json::to_string
/// (lowercase \u00xx for control bytes, raw UTF-8, '/' unescaped). indent >= 0: the layout of
/// Python json.dump(obj, indent=N) (", " -> ",\n", ": " between key and value).
/// ensure_ascii: escape DEL and every non-ASCII code point as \uxxxx (Python's default).
/// sort_keys: write object keys in bytewise order (transformers' index.json / config.json).
struct json_dump_options {
    int indent = -1;
    bool ensure_ascii = false;
    bool sort_keys = false;
};

class json {
public:
    enum class kind : std::uint8_t { null, boolean, integer, number, string, array, object };
    using array_t = std::vector<json>;
    using object_t = std::vector<json_member>;

    json() noexcept = default;
    json(std::nullptr_t) noexcept {}
    json(bool b) noexcept : v_(b) {}
    template <class I>
        requires(std::is_integral_v<I> && !std::is_same_v<I, bool>)
    json(I i) {
        if constexpr (std::is_unsigned_v<I> && sizeof(I) >= sizeof(std::int64_t)) {
            if (i > static_cast<std::make_unsigned_t<std::int64_t>>(
                        std::numeric_limits<std::int64_t>::max()))
                fail<format_error>({}, {}, "JSON integer " + std::to_string(i) +
                                               " does not fit int64");
        }
        v_ = static_cast<std::int64_t>(i);
    }
    json(double d) noexcept : v_(d) {}
    json(std::string s) noexcept : v_(std::move(s)) {}
    json(std::string_view s) : v_(std::string(s)) {}
    json(const char* s) : v_(std::string(s)) {}
    json(array_t a) noexcept : v_(std::move(a)) {}
    json(object_t o) noexcept : v_(std::move(o)) {}

    /// Builders: json::object({{"bits", 4}, {"sym", true}}), json::array({1, 2, 3}).
    static json object(std::initializer_list<json_member> members = {});
    static json array(std::initializer_list<json> items = {}) { return json(array_t(items)); }

    /// Parses a whole document. `file` only names the source in error messages. Defined by
    /// io/json.hpp (json_io), like dump: the template parameter defers the lookup, so a
    /// translation unit without io/json.hpp gets a compile error, never a missing symbol.
    template <class Io = json_io>
    static json parse(std::string_view text, std::string_view file = {}, const json_limits& limits = {}) {
        return Io::parse(text, file, limits);
    }
    template <class Io = json_io>
    std::string dump(const json_dump_options& options = {}) const {
        return Io::dump(*this, options);
    }

    kind type() const noexcept { return static_cast<kind>(v_.index()); }
    bool is_null() const noexcept { return type() == kind::null; }
    bool is_bool() const noexcept { return type() == kind::boolean; }
    bool is_int() const noexcept { return type() == kind::integer; }
    bool is_double() const noexcept { return type() == kind::number; }
    bool is_number() const noexcept { return is_int() || is_double(); }
    bool is_string() const noexcept { return type() == kind::string; }
    bool is_array() const noexcept { return type() == kind::array; }
    bool is_object() const noexcept { return type() == kind::object; }

    /// Typed access; a type mismatch throws format_error ("expected an integer, got a string").
    bool as_bool() const { return get<bool>("a boolean"); }
    std::int64_t as_int() const { return get<std::int64_t>("an integer"); }
    double as_double() const {  // integers convert, as in Python
        if (is_int()) return static_cast<double>(std::get<std::int64_t>(v_));
        return get<double>("a number");
    }
    const std::string& as_string() const { return get<std::string>("a string"); }
    const array_t& as_array() const { return get<array_t>("an array"); }
    array_t& as_array() { return get<array_t>("an array"); }
    const object_t& as_object() const { return get<object_t>("an object"); }
    object_t& as_object() { return get<object_t>("an object"); }

    /// Object lookup: nullptr when absent (or when this is not an object).
    const json* find(std::string_view key) const noexcept;
    json* find(std::string_view key) noexcept;
    bool contains(std::string_view key) const noexcept { return find(key) != nullptr; }
    /// Object lookup that throws format_error naming the key when it is absent.
    const json& at(std::string_view key) const;
    json& at(std::string_view key);
    /// Inserts null at the end when absent (like a map); turns a null value into an object.
    json& operator[](std::string_view key);
    /// Replaces the value of `key` in place (keeping its position) or appends it.
    json& set(std::string_view key, json value);
    /// Removes `key`; returns whether it was there.
    bool erase(std::string_view key);

    const json& at(std::size_t i) const;
    const json& operator[](std::size_t i) const { return at(i); }
    json& at(std::size_t i) { return const_cast<json&>(std::as_const(*this).at(i)); }
    json& operator[](std::size_t i) { return at(i); }
    json& push_back(json value);  // turns a null value into an array
    /// Elements of an array or members of an object; 0 for scalars.
    std::size_t size() const noexcept;

    friend bool operator==(const json& a, const json& b);

    static std::string_view kind_name(kind k) noexcept;

private:
    template <class T>
    const T& get(std::string_view expected) const {
        if (const T* p = std::get_if<T>(&v_)) return *p;
        fail<format_error>({}, {}, "JSON value is " + std::string(kind_name(type())) +
                                       ", expected " + std::string(expected));
    }
    template <class T>
    T& get(std::string_view expected) {
        return const_cast<T&>(std::as_const(*this).get<T>(expected));
    }

    std::variant<std::monostate, bool, std::int64_t, double, std::string, array_t, object_t> v_;
};

QFORGE_DECL bool operator==(const json_member& a, const json_member& b);

QFORGE_DECL bool operator==(const json& a, const json& b);

}  // namespace qforge

#if QFORGE_BASE_BODIES_HERE

namespace qforge {

QFORGE_DECL json json::object(std::initializer_list<json_member> members) {
    return json(object_t(members));
}

QFORGE_DECL const json* json::find(std::string_view key) const noexcept {
    if (const auto* o = std::get_if<object_t>(&v_))
        for (const auto& m : *o)
            if (m.key == key) return &m.value;
    return nullptr;
}

QFORGE_DECL json* json::find(std::string_view key) noexcept {
    return const_cast<json*>(std::as_const(*this).find(key));
}

QFORGE_DECL const json& json::at(std::string_view key) const {
    (void)as_object();  // a non-object is a type error, not a missing key
    if (const json* found = find(key)) return *found;
    fail<format_error>({}, {}, "JSON object has no key \"" + std::string(key) + "\"");
}

QFORGE_DECL json& json::at(std::string_view key) {
    return const_cast<json&>(std::as_const(*this).at(key));
}

QFORGE_DECL json& json::operator[](std::string_view key) {
    if (is_null()) v_ = object_t{};
    if (json* found = find(key)) return *found;
    auto& o = as_object();
    o.push_back({std::string(key), json()});
    return o.back().value;
}

QFORGE_DECL json& json::set(std::string_view key, json value) {
    json& slot = (*this)[key];
    slot = std::move(value);
    return slot;
}

QFORGE_DECL bool json::erase(std::string_view key) {
    auto& o = as_object();
    for (auto it = o.begin(); it != o.end(); ++it)
        if (it->key == key) {
            o.erase(it);
            return true;
        }
    return false;
}

QFORGE_DECL const json& json::at(std::size_t i) const {
    const auto& a = as_array();
    if (i >= a.size())
        fail<format_error>({}, {}, "JSON array index " + std::to_string(i) +
                                       " out of range (size " + std::to_string(a.size()) + ")");
    return a[i];
}

QFORGE_DECL json& json::push_back(json value) {
    if (is_null()) v_ = array_t{};
    auto& a = as_array();
    a.push_back(std::move(value));
    return a.back();
}

QFORGE_DECL std::size_t json::size() const noexcept {
    if (const auto* a = std::get_if<array_t>(&v_)) return a->size();
    if (const auto* o = std::get_if<object_t>(&v_)) return o->size();
    return 0;
}

QFORGE_DECL bool operator==(const json_member& a, const json_member& b) {
    return a.key == b.key && a.value == b.value;
}

QFORGE_DECL bool operator==(const json& a, const json& b) { return a.v_ == b.v_; }


QFORGE_DECL std::string_view json::kind_name(kind k) noexcept {
    constexpr std::string_view names[] = {"null",   "a boolean", "an integer", "a number",
                                          "a string", "an array", "an object"};
    return names[static_cast<std::size_t>(k)];
}

}  // namespace qforge
#endif
