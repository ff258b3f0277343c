// Instruction-set tags: each ISA qforge has kernels for is a type.
//
// Tags inherit from the tag below them (avx512_tag -> avx2_tag -> scalar_tag, neon_tag ->
// scalar_tag), so an overload written for a lower tag also accepts a higher one. Each tag says
// whether its kernels were compiled into this build (`compiled()`, a constant) and whether the
// running CPU can execute them (`available()`, detected once at run time).
//
// The x86 kernels are compiled with function-level target attributes, so a plain `-O2`
// build of a consumer still contains the AVX2 and AVX-512 paths and picks them at run time.
#pragma once

#include <array>
#include <concepts>
#include <string_view>

#include "qforge/simd/cpu_features.hpp"

#if defined(__x86_64__) || defined(_M_X64)
#define QFORGE_SIMD_X86 1
#else
#define QFORGE_SIMD_X86 0
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define QFORGE_SIMD_NEON 1
#else
#define QFORGE_SIMD_NEON 0
#endif

// Function attributes that let one function use an ISA the translation unit was not
// compiled for. Every primitive and every kernel of that ISA carries the same one, so
// they inline into each other.
#if QFORGE_SIMD_X86 && (defined(__GNUC__) || defined(__clang__))
#define QFORGE_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define QFORGE_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#else
#define QFORGE_TARGET_AVX2
#define QFORGE_TARGET_AVX512
#endif

namespace qforge::simd {

/// Runtime names of the tags. The order of `all_tags` below, not this enum, is the order
/// dispatch prefers them.
enum class isa { avx512, avx2, neon, scalar };

/// Portable C++: the reference definition every other tag must reproduce bit for bit.
struct scalar_tag {
    static constexpr isa id = isa::scalar;
    static constexpr std::string_view name() noexcept { return "scalar"; }
    static constexpr bool compiled() noexcept { return true; }
    static bool available() noexcept { return true; }
};

/// x86-64 AVX2 + FMA + F16C (Haswell, Zen 1 and later).
struct avx2_tag : scalar_tag {
    static constexpr isa id = isa::avx2;
    static constexpr std::string_view name() noexcept { return "avx2"; }
    static constexpr bool compiled() noexcept { return QFORGE_SIMD_X86 != 0; }
    static bool available() noexcept { return compiled() && cpu().avx2 && cpu().fma && cpu().f16c; }
};

/// x86-64 AVX-512 F + BW + VL (Skylake-X, Ice Lake, Zen 4 and later).
struct avx512_tag : avx2_tag {
    static constexpr isa id = isa::avx512;
    static constexpr std::string_view name() noexcept { return "avx512"; }
    static constexpr bool compiled() noexcept { return QFORGE_SIMD_X86 != 0; }
    static bool available() noexcept {
        return compiled() && avx2_tag::available() && cpu().avx512f && cpu().avx512bw && cpu().avx512vl;
    }
};

/// AArch64 Advanced SIMD (always present on AArch64).
struct neon_tag : scalar_tag {
    static constexpr isa id = isa::neon;
    static constexpr std::string_view name() noexcept { return "neon"; }
    static constexpr bool compiled() noexcept { return QFORGE_SIMD_NEON != 0; }
    static bool available() noexcept { return compiled() && cpu().neon; }
};

/// A SIMD tag: a type that names itself and says whether it can run here.
template <class T>
concept simd_tag = requires {
    { T::id } -> std::convertible_to<isa>;
    { T::name() } -> std::convertible_to<std::string_view>;
    { T::compiled() } -> std::convertible_to<bool>;
    { T::available() } -> std::convertible_to<bool>;
};

/// A list of tags, best first; `for_each` visits them in order.
template <simd_tag... Tags>
struct tag_list {
    static constexpr std::array<isa, sizeof...(Tags)> ids{Tags::id...};
    template <class F>
    static constexpr void for_each(F&& f) {
        (f(Tags{}), ...);
    }
};

/// Where each ISA's kernel tables live: simd/arch/<isa>.hpp specializes arch_of<its tag> with
/// `template <class Table> static const Table& table()`, which returns the table that
/// simd/detail/instantiate.ipp compiled for that ISA.
template <class Tag>
struct arch_of;

// The one ISA list, best first. Names, availability, the best-ISA choice, QFORGE_FORCE_ISA
// parsing (simd/dispatch.hpp), every kernel family's dispatch (simd/family.hpp) and the tests'
// ISA lists all derive from it. Adding an ISA: its tag here and in this list, its feature probe
// in cpu_features.hpp, its primitives in simd/arch/<isa>.hpp and its block in
// simd/detail/instantiate.ipp.
using all_tags = tag_list<avx512_tag, avx2_tag, neon_tag, scalar_tag>;

/// The name of `i` ("avx512", "avx2", "neon", "scalar").
constexpr std::string_view isa_name(isa i) noexcept {
    std::string_view name = "?";
    all_tags::for_each([&](auto tag) {
        if (tag.id == i) name = tag.name();
    });
    return name;
}

/// Is `i` compiled into this build and available on this CPU?
inline bool available(isa i) noexcept {
    bool yes = false;
    all_tags::for_each([&](auto tag) {
        if (tag.id == i) yes = tag.available();
    });
    return yes;
}

/// Every ISA of the list, best first (available or not).
inline constexpr auto all_isas = all_tags::ids;

}  // namespace qforge::simd
