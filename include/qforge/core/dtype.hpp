// Element types of checkpoint tensors, named as safetensors names them.
//
// qforge computes with F32, F16, BF16 and the integer types; the other safetensors dtypes
// (F8, F4, F6, C64...) are known by name so a file holding them is read and its tensors
// refused by name rather than rejected as garbage. Declaration order matches the safetensors
// Rust enum (formats.md 1.2) because the canonical writer sorts tensors by it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "qforge/core/error.hpp"

namespace qforge {

enum class dtype : std::uint8_t {
    BOOL,
    F4,
    F6_E2M3,
    F6_E3M2,
    U8,
    I8,
    F8_E5M2,
    F8_E4M3,
    F8_E8M0,
    F8_E4M3FNUZ,
    F8_E5M2FNUZ,
    I16,
    U16,
    F16,
    BF16,
    I32,
    U32,
    F32,
    C64,
    F64,
    I64,
    U64,
};

inline constexpr std::size_t dtype_count = 22;

namespace detail {
struct dtype_info {
    dtype type;
    std::string_view name;
    unsigned bits;
};

inline constexpr std::array<dtype_info, dtype_count> dtype_table{{
    {dtype::BOOL, "BOOL", 8},           {dtype::F4, "F4", 4},
    {dtype::F6_E2M3, "F6_E2M3", 6},     {dtype::F6_E3M2, "F6_E3M2", 6},
    {dtype::U8, "U8", 8},               {dtype::I8, "I8", 8},
    {dtype::F8_E5M2, "F8_E5M2", 8},     {dtype::F8_E4M3, "F8_E4M3", 8},
    {dtype::F8_E8M0, "F8_E8M0", 8},     {dtype::F8_E4M3FNUZ, "F8_E4M3FNUZ", 8},
    {dtype::F8_E5M2FNUZ, "F8_E5M2FNUZ", 8}, {dtype::I16, "I16", 16},
    {dtype::U16, "U16", 16},            {dtype::F16, "F16", 16},
    {dtype::BF16, "BF16", 16},          {dtype::I32, "I32", 32},
    {dtype::U32, "U32", 32},            {dtype::F32, "F32", 32},
    {dtype::C64, "C64", 64},            {dtype::F64, "F64", 64},
    {dtype::I64, "I64", 64},            {dtype::U64, "U64", 64},
}};
}  // namespace detail

/// The safetensors spelling ("BF16", "I32"...).
constexpr std::string_view dtype_name(dtype t) noexcept {
    return detail::dtype_table[static_cast<std::size_t>(t)].name;
}

/// Bits per element; sub-byte types (F4, F6) report 4 or 6.
constexpr unsigned dtype_bits(dtype t) noexcept {
    return detail::dtype_table[static_cast<std::size_t>(t)].bits;
}

/// Bytes per element for whole-byte types; 0 for sub-byte types.
constexpr std::size_t dtype_size(dtype t) noexcept {
    const unsigned b = dtype_bits(t);
    return b % 8 == 0 ? b / 8 : 0;
}

constexpr std::optional<dtype> dtype_from_name(std::string_view name) noexcept {
    for (const auto& info : detail::dtype_table)
        if (info.name == name) return info.type;
    return std::nullopt;
}

constexpr bool is_floating(dtype t) noexcept {
    return t == dtype::F16 || t == dtype::BF16 || t == dtype::F32 || t == dtype::F64;
}

/// Types qforge can read and write element by element (everything but F8/F4/F6/C64).
constexpr bool is_computable(dtype t) noexcept {
    switch (t) {
        case dtype::BOOL: case dtype::U8: case dtype::I8: case dtype::I16: case dtype::U16:
        case dtype::F16: case dtype::BF16: case dtype::I32: case dtype::U32: case dtype::F32:
        case dtype::F64: case dtype::I64: case dtype::U64:
            return true;
        default:
            return false;
    }
}

/// Parses a dtype name or throws a format_error naming the file and tensor.
inline dtype parse_dtype(std::string_view name, const std::string& file = {},
                         const std::string& tensor = {}) {
    if (auto t = dtype_from_name(name)) return *t;
    fail<format_error>(file, tensor, "unknown dtype \"" + std::string(name) + "\"");
}

}  // namespace qforge
