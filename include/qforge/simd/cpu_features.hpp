// What the running CPU can execute, detected once.
//
// x86: cpuid leaf 1 (FMA, F16C, OSXSAVE) and leaf 7 (AVX2, AVX-512 F/BW/VL), plus xgetbv to
// check that the OS saves the YMM (and for AVX-512 the opmask/ZMM) state: a CPU bit alone is
// not enough under an OS or hypervisor that disabled it. AArch64: Advanced SIMD is part of the
// base architecture; getauxval(AT_HWCAP) is still read so a kernel that hides it is honoured.
// The x86 vendor (cpuid leaf 0) is read too: it tunes, never selects, a kernel (bytes are the
// same either way; simd/gguf_kernels.hpp).
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#endif
#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif

namespace qforge::simd {

/// Hygon's CPUs are AMD's Zen cores and count as AMD.
enum class cpu_vendor { other, intel, amd };

struct cpu_features {
    bool avx2 = false, fma = false, f16c = false;
    bool avx512f = false, avx512bw = false, avx512vl = false;
    bool neon = false;
    cpu_vendor vendor = cpu_vendor::other;
};

namespace detail {

#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
inline std::uint64_t read_xcr0() noexcept {
    std::uint32_t lo = 0, hi = 0;
    // xgetbv with ecx = 0, spelled as bytes so no -mxsave is needed.
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

/// The vendor string of cpuid leaf 0, in ebx, edx, ecx order.
inline cpu_vendor read_vendor() noexcept {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return cpu_vendor::other;
    char name[13] = {};
    std::memcpy(name, &b, 4);
    std::memcpy(name + 4, &d, 4);
    std::memcpy(name + 8, &c, 4);
    const std::string_view v(name, 12);
    if (v == "GenuineIntel") return cpu_vendor::intel;
    if (v == "AuthenticAMD" || v == "HygonGenuine") return cpu_vendor::amd;
    return cpu_vendor::other;
}
inline cpu_features detect_cpu() noexcept {
    cpu_features f;
    f.vendor = read_vendor();
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
    const bool osxsave = (c >> 27) & 1u;
    const bool fma = (c >> 12) & 1u;
    const bool f16c = (c >> 29) & 1u;
    const bool avx = (c >> 28) & 1u;
    if (!osxsave || !avx) return f;
    const std::uint64_t xcr0 = read_xcr0();
    const bool ymm_saved = (xcr0 & 0x6u) == 0x6u;               // SSE + AVX state
    const bool zmm_saved = (xcr0 & 0xE6u) == 0xE6u;             // + opmask, ZMM_Hi256, Hi16_ZMM
    if (!ymm_saved) return f;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return f;
    f.avx2 = (b >> 5) & 1u;
    f.fma = fma;
    f.f16c = f16c;
    if (zmm_saved) {
        f.avx512f = (b >> 16) & 1u;
        f.avx512bw = (b >> 30) & 1u;
        f.avx512vl = (b >> 31) & 1u;
    }
    return f;
}
#elif defined(__aarch64__)
inline cpu_features detect_cpu() noexcept {
    cpu_features f;
#if defined(__linux__) && defined(HWCAP_ASIMD)
    f.neon = (getauxval(AT_HWCAP) & HWCAP_ASIMD) != 0;
#else
    f.neon = true;
#endif
    return f;
}
#else
inline cpu_features detect_cpu() noexcept { return {}; }
#endif

}  // namespace detail

/// The features of this CPU, detected on first use and cached for the process.
inline const cpu_features& cpu() noexcept {
    static const cpu_features features = detail::detect_cpu();
    return features;
}

}  // namespace qforge::simd
