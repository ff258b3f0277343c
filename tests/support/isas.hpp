// The ISAs the kernel-family tests compare: every ISA of simd::all_isas this machine runs (the
// scalar definition included, or not), each one it cannot run named in a doctest MESSAGE so a
// run on a machine without AVX-512 (or under qemu, without x86) says what it skipped.
#pragma once

#include <doctest/doctest.h>

#include <vector>

#include "qforge/simd/tags.hpp"

namespace qforge::testing {

enum class with_scalar : bool { no, yes };

inline std::vector<simd::isa> available_isas(with_scalar scalar = with_scalar::yes) {
    std::vector<simd::isa> out;
    for (simd::isa i : simd::all_isas) {
        if (i == simd::isa::scalar && scalar == with_scalar::no) continue;
        if (simd::available(i)) out.push_back(i);
        else MESSAGE("skipped: " << simd::isa_name(i) << " not available on this CPU");
    }
    return out;
}

}  // namespace qforge::testing
