// The GGUF 32-element blocks' bit gathers on eight bytes at a time in 64-bit integers: the
// definition of gg_store_nibbles32 and gg_store_code_fields5 for scalar.hpp, and NEON's fifth
// bits (it has no byte movemask). Plain C++, one copy for both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace qforge::simd::detail::byte_bits {

inline std::uint64_t load8(const std::uint8_t* p) noexcept {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

/// 16 bytes: low nibble of byte j = code j, high nibble = code j + 16 (ggml's qs).
inline void nibbles32(std::byte* qs, const std::uint8_t* q) noexcept {
    constexpr std::uint64_t low = 0x0F0F0F0F0F0F0F0FULL;
    for (std::size_t k = 0; k < 16; k += 8) {
        const std::uint64_t s = (load8(q + k) & low) | ((load8(q + 16 + k) & low) << 4);
        std::memcpy(qs + k, &s, 8);
    }
}

/// Bit j = bit 4 of code j (ggml's qh of Q5_0 / Q5_1).
inline std::uint32_t fifth_bits32(const std::uint8_t* q) noexcept {
    std::uint32_t h = 0;
    for (std::size_t k = 0; k < 4; ++k) {
        // one bit per byte at bits 8 i; the product gathers byte i's at bit 56 + i (no carries)
        const std::uint64_t t = (load8(q + 8 * k) >> 4) & 0x0101010101010101ULL;
        h |= static_cast<std::uint32_t>((t * 0x0102040810204080ULL) >> 56) << (8 * k);
    }
    return h;
}

}  // namespace qforge::simd::detail::byte_bits
