// ggml's block types: the on-disk structs of GGUF tensor data.
//
// Layouts, ids and sizes: ggml `src/ggml-common.h` (block_*), `include/ggml.h` (enum ggml_type),
// formats.md 5.2. Every struct is all bytes (fp16 fields are stored as their 16-bit patterns,
// little-endian like the whole file), so the structs have no padding and can be read straight
// from a GGUF data section on a little-endian host; each size is asserted. The type ids and
// their block sizes (what the file format itself needs) are core/ggml_type.hpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "qforge/core/ggml_type.hpp"

namespace qforge::gguf {

inline constexpr int qk_legacy = 32;  // QK4_0 ... QK8_0
inline constexpr int qk_k = 256;      // QK_K, the K-quant super-block

struct block_q4_0 {
    std::uint16_t d;
    std::uint8_t qs[16];
};
struct block_q4_1 {
    std::uint16_t d;
    std::uint16_t m;
    std::uint8_t qs[16];
};
struct block_q5_0 {
    std::uint16_t d;
    std::uint8_t qh[4];
    std::uint8_t qs[16];
};
struct block_q5_1 {
    std::uint16_t d;
    std::uint16_t m;
    std::uint8_t qh[4];
    std::uint8_t qs[16];
};
struct block_q8_0 {
    std::uint16_t d;
    std::int8_t qs[32];
};
struct block_iq4_nl {
    std::uint16_t d;
    std::uint8_t qs[16];
};
struct block_q2_k {
    std::uint8_t scales[16];  // low nibble scale, high nibble min
    std::uint8_t qs[64];
    std::uint16_t d;
    std::uint16_t dmin;
};
struct block_q3_k {
    std::uint8_t hmask[32];
    std::uint8_t qs[64];
    std::uint8_t scales[12];  // 16 six-bit scales
    std::uint16_t d;
};
struct block_q4_k {
    std::uint16_t d;
    std::uint16_t dmin;
    std::uint8_t scales[12];  // 8 six-bit (scale, min) pairs
    std::uint8_t qs[128];
};
struct block_q5_k {
    std::uint16_t d;
    std::uint16_t dmin;
    std::uint8_t scales[12];
    std::uint8_t qh[32];
    std::uint8_t qs[128];
};
struct block_q6_k {
    std::uint8_t ql[128];
    std::uint8_t qh[64];
    std::int8_t scales[16];
    std::uint16_t d;
};

static_assert(sizeof(block_q4_0) == 18, "block_q4_0 size/padding");
static_assert(sizeof(block_q4_1) == 20, "block_q4_1 size/padding");
static_assert(sizeof(block_q5_0) == 22, "block_q5_0 size/padding");
static_assert(sizeof(block_q5_1) == 24, "block_q5_1 size/padding");
static_assert(sizeof(block_q8_0) == 34, "block_q8_0 size/padding");
static_assert(sizeof(block_iq4_nl) == 18, "block_iq4_nl size/padding");
static_assert(sizeof(block_q2_k) == 84, "block_q2_K size/padding");
static_assert(sizeof(block_q3_k) == 110, "block_q3_K size/padding");
static_assert(sizeof(block_q4_k) == 144, "block_q4_K size/padding");
static_assert(sizeof(block_q5_k) == 176, "block_q5_K size/padding");
static_assert(sizeof(block_q6_k) == 210, "block_q6_K size/padding");

// The type table (core/ggml_type.hpp) and the structs agree on every block's size.
static_assert(traits_of(ggml_type::q4_0).block_bytes == sizeof(block_q4_0));
static_assert(traits_of(ggml_type::q4_1).block_bytes == sizeof(block_q4_1));
static_assert(traits_of(ggml_type::q5_0).block_bytes == sizeof(block_q5_0));
static_assert(traits_of(ggml_type::q5_1).block_bytes == sizeof(block_q5_1));
static_assert(traits_of(ggml_type::q8_0).block_bytes == sizeof(block_q8_0));
static_assert(traits_of(ggml_type::iq4_nl).block_bytes == sizeof(block_iq4_nl));
static_assert(traits_of(ggml_type::q2_k).block_bytes == sizeof(block_q2_k));
static_assert(traits_of(ggml_type::q3_k).block_bytes == sizeof(block_q3_k));
static_assert(traits_of(ggml_type::q4_k).block_bytes == sizeof(block_q4_k));
static_assert(traits_of(ggml_type::q5_k).block_bytes == sizeof(block_q5_k));
static_assert(traits_of(ggml_type::q6_k).block_bytes == sizeof(block_q6_k));

}  // namespace qforge::gguf
