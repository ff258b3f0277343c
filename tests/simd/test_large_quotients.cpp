// Quotients w / scale far outside the code range (beyond +-512, and so large that w * (1/s)
// overflows to infinity) must clamp exactly like the defining formula on every ISA: the fast
// path does not clamp its quotient before rounding (group_kernels.ipp, k_round_quotient).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "qforge/simd/no_contract.hpp"
#include "qforge/simd/dispatch.hpp"

using namespace qforge::simd;

namespace {

// clamp(round_half_even(w / s) + zero, 0, maxq), with the quotient taken in double (exact
// enough here: every case is far from a tie or an exact tie).
std::uint8_t reference_code(float w, const grid_params& p) {
    double t = static_cast<double>(w) / static_cast<double>(p.scale);
    t = std::fmax(-1000.0, std::fmin(1000.0, t));
    const double c = std::nearbyint(t) + p.zero;  // default rounding: ties to even
    return static_cast<std::uint8_t>(std::fmax(0.0, std::fmin(static_cast<double>(p.maxq), c)));
}

// kernel_table.hpp's error definition, term by term: 8 partials, then the fixed tree.
float reference_error(const std::vector<float>& w, const grid_params& p) {
    float part[8] = {};
    for (std::size_t i = 0; i < w.size(); ++i) {
        const float q = static_cast<float>(reference_code(w[i], p)) - p.zero;
        const float e = qforge::simd::detail::no_contract(q * p.scale) - w[i];
        part[i % 8] += qforge::simd::detail::no_contract(e * e);
    }
    return ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
}

// w repeated to 128 values: groups of 32 and 64 go through encode's four-step loop (whose
// codes are clamped in saturating integer packs), shorter ones only through its tail.
std::vector<float> tiled(const std::vector<float>& w) {
    std::vector<float> t(128);
    for (std::size_t j = 0; j < t.size(); ++j) t[j] = w[j % w.size()];
    return t;
}

void check_codes(const std::vector<float>& w, const grid_params& p) {
    for (isa i : {isa::scalar, isa::avx2, isa::avx512, isa::neon}) {
        if (!available(i)) continue;
        CAPTURE(isa_name(i));
        std::vector<std::uint8_t> codes(w.size());
        kernels(i).encode(w.data(), w.size(), p, codes.data());
        for (std::size_t m = 0; m < w.size(); ++m) {
            CAPTURE(w[m]);
            CHECK(int(codes[m]) == int(reference_code(w[m], p)));
        }
    }
}

void check_grid(const std::vector<float>& w, const grid_params& p) {
    check_codes(tiled(w), p);
    for (isa i : {isa::scalar, isa::avx2, isa::avx512, isa::neon}) {
        if (!available(i)) continue;
        CAPTURE(isa_name(i));
        const group_kernels& k = kernels(i);
        std::vector<std::uint8_t> codes(w.size());
        k.encode(w.data(), w.size(), p, codes.data());
        for (std::size_t j = 0; j < w.size(); ++j) {
            CAPTURE(w[j]);
            CHECK(int(codes[j]) == int(reference_code(w[j], p)));
        }
        const float e = k.error(w.data(), nullptr, w.size(), p);
        const float want = reference_error(w, p);
        CHECK((e == want || (std::isnan(e) && std::isnan(want))));
    }
}

}  // namespace

TEST_CASE("quotients beyond the code range clamp like the division on every ISA") {
    // scale 1 (exact in F16 and BF16), 4-bit symmetric: half-integer quotients past 512 take
    // the near-tie path, the rest the plain rounding.
    const std::vector<float> w{513.5f,  -513.5f, 1000.5f, -700.25f, 600.0f,  7.5f,    -8.5f, 1e15f,
                               -1e15f,  2.5f,    511.5f,  -512.5f,  8.49f,   -9.5f,   0.0f,  4096.5f,
                               -4095.5f, 3.0f,   65535.5f};
    check_grid(w, {1.0f, 1.0f, 8.0f, 15.0f, 2.0f});
    // 8-bit asymmetric, zero 3.
    check_grid(w, {1.0f, 1.0f, 3.0f, 255.0f, 2.0f});
    // The smallest BF16 scale: w * (1/s) overflows to +-infinity for the large values.
    const float s = 0x1p-126f;
    const std::vector<float> big{1e38f, -1e38f, 3.4e38f, -3.4e38f, 1.0f, -1.0f, 0x1p-126f, -0x1p-125f, 0.0f};
    const grid_params p{s, 1.0f / s, 8.0f, 15.0f, 2.0f};
    check_codes(big, p);
    check_codes(tiled(big), p);
    check_codes(tiled(big), {s, 1.0f / s, 0.0f, 255.0f, 2.0f});  // 8-bit, zero 0: +inf to 255
    // The error with infinite quotients: their lanes' distance to the rounded value is NaN,
    // which the fast path's running maximum keeps, sending the group to the tie check.
    const std::vector<float> finite{100.0f, -100.0f, 1.0f, -1.0f, 0x1p-126f, -0x1p-125f, 0.0f, 5e-38f, 1e19f};
    for (isa i : {isa::scalar, isa::avx2, isa::avx512, isa::neon}) {
        if (!available(i)) continue;
        CAPTURE(isa_name(i));
        CHECK(kernels(i).error(finite.data(), nullptr, finite.size(), p) == reference_error(finite, p));
    }
}

TEST_CASE("an infinite quotient does not hide a tie in its lane of the same four steps, every ISA") {
    // encode tests four steps at once for a lane near a tie; an infinite quotient's distance
    // to its rounding is NaN, which must not stand for its lane's other steps (as a float max
    // of the four would let it). s = 7 2^-126: 1 / s is inexact, so the exact tie
    // 6.5 s gets a product just above 6.5, which rounds to 7 unless the steps take the exact
    // path (6, even); 3e38 * (1 / s) overflows. Sixteen of each in turn put both kinds in the
    // same lane of one four-step chunk at 8 and at 16 lanes a vector.
    const float s = 0x1.cp-124f;
    const grid_params p{s, 1.0f / s, 8.0f, 15.0f, 2.0f};
    std::vector<float> w(128);
    for (std::size_t j = 0; j < w.size(); ++j) w[j] = (j / 16) % 2 == 0 ? 3e38f : 6.5f * s;
    REQUIRE(std::nearbyint(6.5f * s * p.rinv) == 7.0f);  // the fast rounding alone is wrong here
    REQUIRE(std::isinf(3e38f * p.rinv));
    REQUIRE(reference_code(6.5f * s, p) == 14);
    check_codes(w, p);
}
