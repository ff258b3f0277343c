// Choosing the ISA: the best one this CPU has, unless QFORGE_FORCE_ISA says otherwise.
//
// QFORGE_FORCE_ISA=scalar|avx2|avx512|neon pins the choice for the process (useful to compare
// paths and to reproduce a bug); naming an ISA the CPU lacks, or an unknown name, throws an
// unsupported_error instead of silently falling back. The choice is made once and cached.
//
// **Example**:
//   const auto& k = qforge::simd::kernels(qforge::simd::active_isa());
//   qforge::simd::dispatch([](auto tag) { std::puts(decltype(tag)::name().data()); });
#pragma once

#include <cstdlib>
#include <string>
#include <string_view>

#include "qforge/core/error.hpp"
#include "qforge/simd/arch/avx2.hpp"
#include "qforge/simd/arch/avx512.hpp"
#include "qforge/simd/arch/neon.hpp"
#include "qforge/simd/arch/scalar.hpp"
#include "qforge/simd/kernel_table.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::simd {

/// The best ISA of this CPU, in the order avx512, avx2, neon, scalar.
inline isa best_available() noexcept {
    if (avx512_tag::available()) return isa::avx512;
    if (avx2_tag::available()) return isa::avx2;
    if (neon_tag::available()) return isa::neon;
    return isa::scalar;
}

/// The ISA named by `forced` (a QFORGE_FORCE_ISA value; null or empty = best available).
inline isa resolve_isa(const char* forced) {
    if (forced == nullptr || *forced == '\0') return best_available();
    const std::string_view want(forced);
    for (isa i : {isa::avx512, isa::avx2, isa::neon, isa::scalar}) {
        if (isa_name(i) != want) continue;
        if (!available(i))
            fail<unsupported_error>({}, {}, "QFORGE_FORCE_ISA=" + std::string(want) + " but this CPU or build lacks " +
                                                std::string(want));
        return i;
    }
    fail<unsupported_error>({}, {}, "QFORGE_FORCE_ISA=" + std::string(want) +
                                        " is not one of scalar, avx2, avx512, neon");
}

/// The ISA qforge uses: QFORGE_FORCE_ISA or the best available, resolved on first call.
inline isa active_isa() {
    static const isa chosen = resolve_isa(std::getenv("QFORGE_FORCE_ISA"));
    return chosen;
}

/// The kernel table of `i`; throws when `i` cannot run here.
inline const group_kernels& kernels(isa i) {
    if (!available(i))
        fail<unsupported_error>({}, {}, "SIMD path " + std::string(isa_name(i)) + " is not available on this CPU");
    switch (i) {
#if QFORGE_SIMD_X86
        case isa::avx512: return detail::avx512_isa::kernel_table();
        case isa::avx2: return detail::avx2_isa::kernel_table();
#endif
#if QFORGE_SIMD_NEON
        case isa::neon: return detail::neon_isa::kernel_table();
#endif
        default: return detail::scalar_isa::kernel_table();
    }
}

/// Calls f(tag) with the tag of active_isa() and returns its result.
template <class F>
decltype(auto) dispatch(F&& f) {
    switch (active_isa()) {
        case isa::avx512: return f(avx512_tag{});
        case isa::avx2: return f(avx2_tag{});
        case isa::neon: return f(neon_tag{});
        default: return f(scalar_tag{});
    }
}

}  // namespace qforge::simd
