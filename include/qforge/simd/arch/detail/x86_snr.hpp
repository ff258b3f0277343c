// The SNR partial sums of the x86 kernels, in double on 256-bit vectors: one definition for
// avx2.hpp and avx512.hpp, whose encode kernels both keep 4 signal and 4 error partials (see
// quant/snr.hpp) and differ in how a step's terms are made (their own snr_add: AVX2 by
// 4-float quarters with snr_add4, AVX-512 eight at a time). They carry the AVX2 target
// attribute, a subset of the AVX-512 one, and are always_inline: without it clang 14 kept a
// callee of that narrower target holding an inline asm with vector operands (dmul's) out of
// line in the AVX-512 encode, while g++ inlined it either way.
#pragma once

#include "qforge/simd/tags.hpp"

#if QFORGE_SIMD_X86
#include <immintrin.h>

namespace qforge::simd::detail::x86_snr {

// Lane j = partial j: sig holds the signal partials, err the error partials.
struct snr_acc {
    __m256d sig, err;
};
[[gnu::always_inline]] QFORGE_TARGET_AVX2 inline snr_acc snr_load(const double* p) noexcept { return {_mm256_loadu_pd(p), _mm256_loadu_pd(p + 4)}; }
[[gnu::always_inline]] QFORGE_TARGET_AVX2 inline void snr_store(double* p, const snr_acc& a) noexcept {
    _mm256_storeu_pd(p, a.sig);
    _mm256_storeu_pd(p + 4, a.err);
}
[[gnu::always_inline]] QFORGE_TARGET_AVX2 inline __m256d dmul(__m256d a, __m256d b) noexcept {
    __m256d r = _mm256_mul_pd(a, b);
    __asm__("" : "+x"(r));  // never fused into a later add (see simd/no_contract.hpp)
    return r;
}
// Four floats' terms, float i to partial i: w^2 to sig, (w - dq)^2 to err.
[[gnu::always_inline]] QFORGE_TARGET_AVX2 inline snr_acc snr_add4(snr_acc a, __m128 w, __m128 dq) noexcept {
    const __m256d x = _mm256_cvtps_pd(w), e = _mm256_sub_pd(x, _mm256_cvtps_pd(dq));
    return {_mm256_add_pd(a.sig, dmul(x, x)), _mm256_add_pd(a.err, dmul(e, e))};
}

}  // namespace qforge::simd::detail::x86_snr

#endif  // QFORGE_SIMD_X86
