// A value the compiler must treat as opaque, so a product is never fused into a later add.
//
// With -ffp-contract=fast (GCC's default in GNU modes) `a * b + c` may become one FMA with a
// single rounding, and whether it does depends on the target, the optimizer and the ISA.
// qforge's results must be the same bytes on every ISA, so every product that feeds an add
// passes through no_contract(): an empty asm that claims to modify its operand in place.
// Public because quant/'s scalar formulas (scale_policy, snr) must round as the kernels do.
#pragma once

namespace qforge::simd {

inline float no_contract(float v) noexcept {
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
    __asm__("" : "+x"(v));
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
    __asm__("" : "+w"(v));
#else
    volatile float keep = v;
    v = keep;
#endif
    return v;
}

inline double no_contract(double v) noexcept {
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
    __asm__("" : "+x"(v));
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
    __asm__("" : "+w"(v));
#else
    volatile double keep = v;
    v = keep;
#endif
    return v;
}

// The kernels' spelling (simd::detail::no_contract), kept so the arch files and kernel
// families read as before.
namespace detail {
using simd::no_contract;
}  // namespace detail

}  // namespace qforge::simd
