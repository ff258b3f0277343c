// GGUF metadata values: the 13 value types of gguf.h and a value that holds a scalar, a string
// or a one-level array of them (ggml refuses nested arrays).
//
// The variant's index IS the GGUF type id (UINT8 0 ... FLOAT64 12; 9 = ARRAY is a placeholder),
// so serialising a scalar needs no table. Types matter: llama.cpp checks them strictly
// (formats.md 5.4, trap 19), so callers choose them explicitly (value::u32(...), value::f32(...)).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "qforge/core/config.hpp"

namespace qforge::gguf {

enum class value_type : std::uint32_t {
    u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
    string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};

constexpr std::string_view value_type_name(value_type t) noexcept {
    constexpr std::string_view names[] = {"UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
                                          "BOOL", "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};
    const auto i = static_cast<std::uint32_t>(t);
    return i < 13 ? names[i] : std::string_view("invalid");
}

/// Bytes of one element of a fixed-size type; 0 for STRING/ARRAY/invalid.
constexpr std::uint64_t value_type_size(value_type t) noexcept {
    switch (t) {
        case value_type::u8: case value_type::i8: case value_type::boolean: return 1;
        case value_type::u16: case value_type::i16: return 2;
        case value_type::u32: case value_type::i32: case value_type::f32: return 4;
        case value_type::u64: case value_type::i64: case value_type::f64: return 8;
        default: return 0;
    }
}

struct array_placeholder {
    bool operator==(const array_placeholder&) const = default;
};

/// One scalar; index() == GGUF type id.
using scalar = std::variant<std::uint8_t, std::int8_t, std::uint16_t, std::int16_t, std::uint32_t,
                            std::int32_t, float, bool, std::string, array_placeholder, std::uint64_t,
                            std::int64_t, double>;

/// A metadata value: a scalar, or an array of scalars that all have `elem_type`.
struct value {
    value_type type = value_type::u32;
    value_type elem_type = value_type::u32;  // arrays only
    scalar one;                                // scalars only
    std::vector<scalar> elems;                 // arrays only

    static value of(scalar s);
    static value u8(std::uint8_t x) { return of(x); }
    static value i8(std::int8_t x) { return of(x); }
    static value u16(std::uint16_t x) { return of(x); }
    static value i16(std::int16_t x) { return of(x); }
    static value u32(std::uint32_t x) { return of(x); }
    static value i32(std::int32_t x) { return of(x); }
    static value f32(float x) { return of(x); }
    static value boolean(bool x) { return of(x); }
    static value str(std::string x) { return of(std::move(x)); }
    static value u64(std::uint64_t x) { return of(x); }
    static value i64(std::int64_t x) { return of(x); }
    static value f64(double x) { return of(x); }

    /// An array of `elem` (not ARRAY); every element must hold that type.
    static value array(value_type elem, std::vector<scalar> items);
    template <class T>
    static value array_of(value_type elem, const std::vector<T>& items) {
        std::vector<scalar> s;
        s.reserve(items.size());
        for (const auto& x : items) s.emplace_back(T(x));
        return array(elem, std::move(s));
    }

    bool is_array() const noexcept { return type == value_type::array; }

    /// The scalar as T when it holds exactly T (no conversion: types are strict in llama.cpp).
    template <class T>
    std::optional<T> as() const {
        if (is_array()) return std::nullopt;
        if (const T* p = std::get_if<T>(&one)) return *p;
        return std::nullopt;
    }
    bool operator==(const value&) const = default;
};

/// Ordered key/value list (GGUF keeps insertion order; gguf-py puts general.architecture first).
using kv_list = std::vector<std::pair<std::string, value>>;

QFORGE_DECL const value* find_kv(const kv_list& kvs, std::string_view key) noexcept;

}  // namespace qforge::gguf

#if QFORGE_BASE_BODIES_HERE

namespace qforge::gguf {

QFORGE_DECL const value* find_kv(const kv_list& kvs, std::string_view key) noexcept {
    for (const auto& [k, v] : kvs)
        if (k == key) return &v;
    return nullptr;
}


QFORGE_DECL value value::of(scalar s) {
    value v;
    v.type = static_cast<value_type>(s.index());
    v.one = std::move(s);
    return v;
}

QFORGE_DECL value value::array(value_type elem, std::vector<scalar> items) {
    value v;
    v.type = value_type::array;
    v.elem_type = elem;
    v.elems = std::move(items);
    return v;
}

}  // namespace qforge::gguf
#endif
