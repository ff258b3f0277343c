// The least-squares family (simd/lsq_kernels.hpp) at the simd layer, so that the NEON stage of
// scripts/test.sh (which builds the core, quant, simd and layout tests) runs it under qemu:
// every ISA returns the scalar definition's floats, errors2 is the group kernels' error() to
// the bit, and AVX-512 runs the AVX2 instance of lanes(). (tests/quality/test_least_squares.cpp
// checks the fit built on them.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "qforge/core/half.hpp"
#include "qforge/simd/group_kernels.hpp"
#include "support/isas.hpp"
#include "qforge/simd/lsq_kernels.hpp"
#include "support/synthetic.hpp"

using namespace qforge::simd;

namespace {

std::vector<isa> runnable_isas() { return qforge::testing::available_isas(); }

/// A grid of stored (F16) scale 1 / m roughly, zero z.
grid_params grid(float m, float z, float maxq) {
    const float s = qforge::fp16_to_float(qforge::float_to_fp16(1.0f / m));
    return {s, 1.0f / s, z, maxq, 2.0f};
}

}  // namespace

TEST_CASE("least-squares kernels: every ISA returns the scalar floats; errors2 is error() to the bit") {
    qforge::testing::splitmix64 rng(7);
    const lsq_kernels& ref = kernels_of<lsq_kernels>(isa::scalar);
    for (int trial = 0; trial < 120; ++trial) {
        const std::size_t n = 1 + rng.next() % 150;
        std::vector<float> x(n), w(n);
        for (auto& v : x) v = static_cast<float>(rng.student_t(4) * (trial % 7 == 0 ? 1e-6 : 0.02));
        for (auto& v : w) v = static_cast<float>(rng.uniform() * 3.0);
        const float* wp = trial % 2 ? w.data() : nullptr;
        const int maxq = trial % 3 ? 15 : 255;
        float f[lsq_pass_lanes], d[lsq_pass_lanes];
        for (std::size_t c = 0; c < lsq_pass_lanes; ++c) {  // empty (3), mirrored (5) and out-of-range (6) lanes
            f[c] = c == 3 ? 0.0f : static_cast<float>((0.8 + 0.4 * rng.uniform()) * (c == 5 ? -1.0 : 1.0));
            d[c] = static_cast<float>(static_cast<int>(rng.next() % 5) - 2 + (c == 6 ? 300 : 0));
        }
        float amax = 0.0f;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        const float m = amax > 0.0f ? static_cast<float>(maxq) / (2.0f * amax) : 1.0f;
        const float z0 = static_cast<float>(maxq / 2);
        const bool bf16 = trial % 4 == 1;
        const grid_params g[2] = {grid(m, z0, static_cast<float>(maxq)), grid(m * 1.1f, z0 - 1, static_cast<float>(maxq))};
        lsq_lane_fits rl;
        float rs[2], re[2];
        ref.lanes(x.data(), wp, n, f, d, m, z0, static_cast<float>(maxq), bf16, rl);
        ref.refit(x.data(), wp, n, m, maxq / 2, maxq, rs);
        ref.errors2(x.data(), wp, n, g, re);
        CHECK(rl.gain[3] == 0.0f);
        CHECK(rl.gain[6] == 0.0f);
        for (isa i : runnable_isas()) {
            CAPTURE(trial);
            CAPTURE(std::string(isa_name(i)));
            const lsq_kernels& k = kernels_of<lsq_kernels>(i);
            CHECK(k.id == i);
            lsq_lane_fits l;
            float s[2], e[2];
            k.lanes(x.data(), wp, n, f, d, m, z0, static_cast<float>(maxq), bf16, l);
            k.refit(x.data(), wp, n, m, maxq / 2, maxq, s);
            k.errors2(x.data(), wp, n, g, e);
            for (std::size_t c = 0; c < lsq_pass_lanes; ++c) {
                CHECK(l.a[c] == rl.a[c]);
                CHECK(l.b[c] == rl.b[c]);
                CHECK(l.gain[c] == rl.gain[c]);
                CHECK(l.scale[c] == rl.scale[c]);
                CHECK(l.rinv[c] == rl.rinv[c]);
                CHECK(l.bits[c] == rl.bits[c]);
            }
            CHECK(s[0] == rs[0]);
            CHECK(s[1] == rs[1]);
            CHECK(e[0] == re[0]);
            CHECK(e[1] == re[1]);
            CHECK(e[0] == kernels_of<group_kernels>(i).error(x.data(), wp, n, g[0]));
            CHECK(e[1] == kernels_of<group_kernels>(i).error(x.data(), wp, n, g[1]));
        }
    }
}

TEST_CASE("least-squares kernels: AVX-512 runs the AVX2 lanes(); kernels_of records the ISA") {
    if (available(isa::avx512)) {
        const bool same = kernels_of<lsq_kernels>(isa::avx512).lanes == kernels_of<lsq_kernels>(isa::avx2).lanes;
        CHECK(same);
    }
    forget_last_isa<lsq_kernels>();
    CHECK_FALSE(last_isa_of<lsq_kernels>().has_value());
    for (isa i : all_isas) {
        if (available(i)) {
            CHECK(kernels_of<lsq_kernels>(i).id == i);
            CHECK(last_isa_of<lsq_kernels>() == i);
        } else {
            CHECK_THROWS_WITH_AS(kernels_of<lsq_kernels>(i), doctest::Contains("least-squares kernels is not available"),
                                 qforge::unsupported_error);
        }
    }
    CHECK(kernels_of<lsq_kernels>(isa::scalar).id == isa::scalar);
    CHECK(last_isa_of<lsq_kernels>() == isa::scalar);
}
