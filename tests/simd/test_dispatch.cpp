// Tags, CPU detection and QFORGE_FORCE_ISA.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "qforge/simd/dispatch.hpp"

using namespace qforge::simd;

static_assert(simd_tag<scalar_tag> && simd_tag<avx2_tag> && simd_tag<avx512_tag> && simd_tag<neon_tag>);
static_assert(std::is_base_of_v<avx2_tag, avx512_tag> && std::is_base_of_v<scalar_tag, avx2_tag> &&
              std::is_base_of_v<scalar_tag, neon_tag>);

TEST_CASE("the best available ISA is the first available in preference order") {
    const isa best = best_available();
    CHECK(available(best));
    if (avx512_tag::available()) CHECK(best == isa::avx512);
    else if (avx2_tag::available()) CHECK(best == isa::avx2);
    CHECK(kernels(best).id == best);
    CHECK(kernels(isa::scalar).id == isa::scalar);
#if defined(__aarch64__)
    CHECK(neon_tag::available());
    CHECK(!avx2_tag::available());
#endif
#if defined(__x86_64__)
    CHECK(!neon_tag::available());
    CHECK_THROWS_AS(kernels(isa::neon), qforge::unsupported_error);
#endif
}

TEST_CASE("cpuid agrees with /proc/cpuinfo") {
#if defined(__x86_64__) && defined(__linux__)
    std::ifstream f("/proc/cpuinfo");
    std::string line, flags, vendor;
    while (std::getline(f, line)) {
        if (line.rfind("vendor_id", 0) == 0 && vendor.empty()) vendor = line.substr(line.find(':') + 2);
        if (line.rfind("flags", 0) == 0) {
            flags = line + " ";
            break;
        }
    }
    if (flags.empty()) return;
    // the vendor tunes the AVX2 GGUF searches' width (simd/gguf_kernels.hpp)
    const cpu_vendor expected = vendor == "GenuineIntel"                                  ? cpu_vendor::intel
                                : vendor == "AuthenticAMD" || vendor == "HygonGenuine" ? cpu_vendor::amd
                                                                                        : cpu_vendor::other;
    CAPTURE(vendor);
    CHECK(cpu().vendor == expected);
    auto has = [&](const char* name) { return flags.find(std::string(" ") + name + " ") != std::string::npos; };
    CHECK(cpu().avx2 == has("avx2"));
    CHECK(cpu().fma == has("fma"));
    CHECK(cpu().f16c == has("f16c"));
    CHECK(cpu().avx512f == has("avx512f"));
    CHECK(cpu().avx512bw == has("avx512bw"));
    CHECK(cpu().avx512vl == has("avx512vl"));
#endif
}

TEST_CASE("QFORGE_FORCE_ISA values: known and available, or a loud error") {
    CHECK(resolve_isa(nullptr) == best_available());
    CHECK(resolve_isa("") == best_available());
    CHECK(resolve_isa("scalar") == isa::scalar);
    // The message lists every ISA of the one list, best first.
    CHECK_THROWS_WITH_AS(resolve_isa("sse9"), doctest::Contains("not one of avx512, avx2, neon, scalar"),
                         qforge::unsupported_error);
    for (isa i : all_isas) {
        const std::string name(isa_name(i));
        if (available(i)) CHECK(resolve_isa(name.c_str()) == i);
        else CHECK_THROWS_WITH_AS(resolve_isa(name.c_str()), doctest::Contains(("lacks " + name).c_str()),
                                  qforge::unsupported_error);
    }
    int calls = 0;
    dispatch([&](auto tag) {
        CHECK(decltype(tag)::id == active_isa());
        ++calls;
    });
    CHECK(calls == 1);
}

TEST_CASE("the ISA list: names, availability and dispatch all derive from all_tags") {
    CHECK(all_isas.size() == 4);
    CHECK(all_isas.front() == isa::avx512);
    CHECK(all_isas.back() == isa::scalar);
    all_tags::for_each([](auto tag) {
        CHECK(isa_name(tag.id) == tag.name());
        CHECK(available(tag.id) == tag.available());
        const auto seen = dispatch(tag.id, [](auto t) { return decltype(t)::id; });
        CHECK(seen == tag.id);
    });
    CHECK(isa_name(best_available()) != "?");
}

TEST_CASE("kernels_of records the ISA each family last ran with, and refuses an unavailable one") {
    forget_last_isa<group_kernels>();
    CHECK_FALSE(last_isa_of<group_kernels>().has_value());
    CHECK(kernels_of<group_kernels>(isa::scalar).id == isa::scalar);
    CHECK(last_isa_of<group_kernels>() == isa::scalar);
    for (isa i : all_isas) {
        if (available(i)) {
            CHECK(kernels_of<group_kernels>(i).id == i);
            CHECK(last_isa_of<group_kernels>() == i);
        } else {
            CHECK_THROWS_WITH_AS(kernels_of<group_kernels>(i), doctest::Contains("group kernels is not available"),
                                 qforge::unsupported_error);
        }
    }
}
