// ggml's tensor types: their ids, names, elements and bytes per block, and the bytes of a row.
//
// Ids and sizes: ggml `include/ggml.h` (enum ggml_type) and `src/ggml.c` (type_traits),
// formats.md 5.2. This is vocabulary both sides of GGUF need: io/gguf reads and writes tensor
// tables with it (a row's byte count, a known id) without knowing how a block is laid out, and
// layout/gguf/blocks.hpp gives each block its struct.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace qforge::gguf {

/// ggml tensor types qforge writes or reads (ids from ggml.h; removed ids are absent).
enum class ggml_type : std::uint32_t {
    f32 = 0,
    f16 = 1,
    q4_0 = 2,
    q4_1 = 3,
    q5_0 = 6,
    q5_1 = 7,
    q8_0 = 8,
    q8_1 = 9,
    q2_k = 10,
    q3_k = 11,
    q4_k = 12,
    q5_k = 13,
    q6_k = 14,
    q8_k = 15,
    iq4_nl = 20,
    i8 = 24,
    i16 = 25,
    i32 = 26,
    i64 = 27,
    f64 = 28,
    bf16 = 30,
    mxfp4 = 39,  ///< block_mxfp4 (layout/gguf/mxfp4.hpp)
};

/// Elements per block and bytes per block of a ggml type (ggml `type_traits`).
struct type_traits {
    std::string_view name;
    std::int64_t block_elems;
    std::int64_t block_bytes;
};

/// Traits of a known type id, or nothing for an id ggml no longer has or qforge does not know.
constexpr std::optional<type_traits> traits_of(std::uint32_t id) noexcept {
    switch (id) {
        case 0: return type_traits{"F32", 1, 4};
        case 1: return type_traits{"F16", 1, 2};
        case 2: return type_traits{"Q4_0", 32, 18};
        case 3: return type_traits{"Q4_1", 32, 20};
        case 6: return type_traits{"Q5_0", 32, 22};
        case 7: return type_traits{"Q5_1", 32, 24};
        case 8: return type_traits{"Q8_0", 32, 34};
        case 9: return type_traits{"Q8_1", 32, 36};
        case 10: return type_traits{"Q2_K", 256, 84};
        case 11: return type_traits{"Q3_K", 256, 110};
        case 12: return type_traits{"Q4_K", 256, 144};
        case 13: return type_traits{"Q5_K", 256, 176};
        case 14: return type_traits{"Q6_K", 256, 210};
        case 15: return type_traits{"Q8_K", 256, 292};
        case 20: return type_traits{"IQ4_NL", 32, 18};
        case 24: return type_traits{"I8", 1, 1};
        case 25: return type_traits{"I16", 1, 2};
        case 26: return type_traits{"I32", 1, 4};
        case 27: return type_traits{"I64", 1, 8};
        case 28: return type_traits{"F64", 1, 8};
        case 30: return type_traits{"BF16", 1, 2};
        case 39: return type_traits{"MXFP4", 32, 17};
        default: return std::nullopt;
    }
}

constexpr type_traits traits_of(ggml_type t) noexcept {
    return *traits_of(static_cast<std::uint32_t>(t));
}

constexpr std::string_view type_name(ggml_type t) noexcept { return traits_of(t).name; }

/// The type whose ggml name is `name` (case-insensitive, "Q4_K" or "q4_k"), if any.
constexpr std::optional<ggml_type> type_from_name(std::string_view name) noexcept {
    auto upper_eq = [](std::string_view a, std::string_view b) {
        if (a.size() != b.size()) return false;
        for (std::size_t i = 0; i < a.size(); ++i) {
            char c = a[i];
            if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
            if (c != b[i]) return false;
        }
        return true;
    };
    for (std::uint32_t id = 0; id <= 39; ++id) {
        const auto t = traits_of(id);
        if (t && upper_eq(name, t->name)) return static_cast<ggml_type>(id);
    }
    return std::nullopt;
}

/// Bytes of one row of `n` elements, or -1 when n is not a whole number of blocks.
constexpr std::int64_t row_bytes(ggml_type t, std::int64_t n) noexcept {
    const auto tr = traits_of(t);
    if (n < 0 || n % tr.block_elems != 0) return -1;
    return n / tr.block_elems * tr.block_bytes;
}

}  // namespace qforge::gguf
