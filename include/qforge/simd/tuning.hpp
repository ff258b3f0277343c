// Per-CPU tuning of the AVX2 kernels: which of two equivalent instruction sequences a kernel
// runs. The bytes are the same either way (the tests run every setting on AVX2); only the
// speed differs, by vendor and generation. Each knob is chosen from the CPU once, read at each
// call, and may be set by tests and benches.
#pragma once

#include <atomic>

#include "qforge/simd/cpu_features.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::simd::detail {

/// How many vectors of eight sub-blocks the AVX2 searches (qkx2_search, q2k_search,
/// qx32_search) take a step: 4 on an AMD CPU with AVX-512 (Zen 4, Zen 5: the AVX2 path runs
/// there only when asked for), 2 elsewhere.
/// Four vectors keep more independent chains in flight but need more of AVX2's 16 registers
/// than there are (g++ 12's Q4_K search touches the stack 272 times at four, 53 at two, the
/// same arrays there in both): a Zen 4 ran four 3-10% faster than two (2026-12-05); an Intel
/// Xeon (Sapphire Rapids class, 2026-12-06) ran them 7-12% slower, and so did a Zen 3 (AMD
/// EPYC family 25 model 1, AVX2 only, 2026-12-07: 6-8%, Q2_K, Q4_K, Q5_K, Q6_K), the machine
/// class whose users take the AVX2 path. (Q3_K's search has no such knob: its groups stay two
/// vectors, and which steps it takes is fixed by the ISA's width, q3_check_first.)
inline std::atomic<int>& avx2_search_vectors() noexcept {
    static std::atomic<int> vectors{cpu().vendor == cpu_vendor::amd && cpu().avx512f ? 4 : 2};
    return vectors;
}

/// Whether the AVX2 scale searches (the GGUF searches above at two vectors; the seed and
/// square-error searches' unwatched sums, k_square_step_free) round their clamped codes with
/// the round instruction (vround) instead of adding and taking away 1.5 2^23 (vround_small):
/// on AMD. An Intel core runs the round instruction as two micro-ops on the ports of the
/// multiplies these loops are full of, and the adds beside them (Intel Xeon, seed search
/// 0.44-0.45 -> 0.49-0.50 G weights/s with the adds); a Zen 3 runs it as one micro-op on the
/// ports of the adds, min and max, where the adds took two (2026-12-07, alternated medians of
/// 7: Q4_K 140 -> 155 M weights/s, Q5_K 174 -> 191, Q2_K 159 -> 172, Q6_K 278 -> 300; the
/// seed search 0.483 -> 0.513 G weights/s). The four-vector searches keep the adds they were
/// measured with.
inline std::atomic<bool>& avx2_round_by_instruction() noexcept {
    static std::atomic<bool> by_instruction{cpu().vendor == cpu_vendor::amd};
    return by_instruction;
}

/// Whether ISA i's kernels have the two roundings to choose from: AVX2 only (every other ISA's
/// vround_small is its vround, so each compiles one form).
constexpr bool has_rounding_forms(isa i) noexcept { return i == isa::avx2; }

}  // namespace qforge::simd::detail
