// The GGUF 32-element blocks' nibble gather from code bytes on x86 (gg_store_nibbles32, defined
// in scalar.hpp): one definition for avx2.hpp and avx512.hpp, on 128-bit halves so that either
// ISA's code stores (one 32-byte vector, or two 16-byte ones with 16 lanes) forward into the
// loads; a 32-byte load across two 16-byte stores misses store forwarding. AVX2 target
// attribute, a subset of the AVX-512 one, and always_inline, as simd/arch/detail/x86_snr.hpp.
#pragma once

#include "qforge/simd/tags.hpp"

#if QFORGE_SIMD_X86
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace qforge::simd::detail::x86_block_bits {

[[gnu::always_inline]] QFORGE_TARGET_AVX2 inline void gg_store_nibbles32(std::byte* qs, const std::uint8_t* q) noexcept {
    const __m128i low = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), low);
    const __m128i hi = _mm_and_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)), low);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qs), _mm_or_si128(lo, _mm_slli_epi16(hi, 4)));  // hi < 16: no carry across bytes
}

}  // namespace qforge::simd::detail::x86_block_bits

#endif  // QFORGE_SIMD_X86
