// The minifloat kernels (simd/minifloat_kernels.hpp): every ISA this machine runs (NEON under
// qemu) against core/minifloat.hpp's scalar definitions, element by element: E4M3 over every
// code, every midpoint between neighbours and the floats one ulp either side, the E2M1
// thresholds of both quotient forms, NaN, infinity, signed zeros and random rows, with the SNR
// lanes bit for bit and sentinels after every output.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "qforge/core/minifloat.hpp"
#include "qforge/simd/minifloat_kernels.hpp"
#include "qforge/simd/no_contract.hpp"
#include "support/isas.hpp"

using namespace qforge;
using namespace qforge::simd;

namespace {

std::vector<isa> minifloat_isas() { return qforge::testing::available_isas(); }

float next_up(float f) { return std::nextafter(f, std::numeric_limits<float>::infinity()); }
float next_down(float f) { return std::nextafter(f, -std::numeric_limits<float>::infinity()); }

/// Every E4M3 value, the midpoints between neighbours, one ulp either side of each, the
/// saturation edge, infinities, NaNs, zeros and subnormal floats, each with both signs.
std::vector<float> e4m3_probe() {
    std::vector<float> v;
    for (int c = 0; c < 0x7F; ++c) {
        const float a = e4m3_to_float(static_cast<std::uint8_t>(c));
        const float b = c + 1 < 0x7F ? e4m3_to_float(static_cast<std::uint8_t>(c + 1)) : 480.0f;
        const float mid = (a + b) / 2;  // exact: both are short floats
        for (float f : {a, next_up(a), next_down(a), mid, next_up(mid), next_down(mid)}) v.push_back(f);
    }
    for (float f : {447.9f, 448.0f, 464.0f, 465.0f, 1e30f, 3.4e38f, std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN(), 0x1p-149f, 0x1p-127f, 0x1p-10f, 0x1p-11f, 0.0f})
        v.push_back(f);
    const std::size_t n = v.size();
    for (std::size_t i = 0; i < n; ++i) v.push_back(-v[i]);
    std::mt19937 rng(7);
    for (int i = 0; i < 4096; ++i) v.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(rng())));
    return v;
}

/// detail::e2m1_code_of of layout/detail/fp4_rows.hpp: a NaN quotient keeps only its sign.
std::uint8_t e2m1_ref(float q) {
    if (q != q) return std::signbit(q) ? 0x8 : 0x0;
    const std::uint8_t c = float_to_e2m1(std::fmin(std::fmax(q, -6.0f), 6.0f));
    return c;
}

}  // namespace

TEST_CASE("minifloat kernels: e4m3_encode gives float_to_e4m3 on every ISA") {
    const std::vector<float> x = e4m3_probe();
    for (isa i : minifloat_isas()) {
        CAPTURE(isa_name(i));
        const minifloat_kernels& k = kernels_of<minifloat_kernels>(i);
        CHECK(k.id == i);
        for (std::size_t off : {std::size_t{0}, std::size_t{3}}) {  // a tail on every ISA
            std::vector<std::uint8_t> codes(x.size() + 1, 0xA5);
            k.e4m3_encode(x.data() + off, x.size() - off, codes.data());
            CHECK(codes[x.size() - off] == 0xA5);
            std::size_t bad = 0;
            for (std::size_t j = 0; j + off < x.size(); ++j)
                if (codes[j] != float_to_e4m3(x[j + off]) && bad++ < 5)
                    FAIL_CHECK("x=" << x[j + off] << " got " << int(codes[j]) << " want " << int(float_to_e4m3(x[j + off])));
            CHECK(bad == 0);
        }
    }
}

TEST_CASE("minifloat kernels: group_amax and e2m1_groups give the definitions' codes and SNR lanes on every ISA") {
    const float thresholds[] = {0.0f, 0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f};
    for (std::size_t gsize : {std::size_t{16}, std::size_t{32}}) {
        const std::size_t groups = 13, n = gsize * groups;  // an odd count of 16-value halves for gsize 16
        std::mt19937 rng(static_cast<std::uint32_t>(gsize));
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        std::vector<float> x(n), s(groups), m(groups);
        for (std::size_t g = 0; g < groups; ++g) {
            s[g] = g % 3 == 0 ? 0.125f : std::ldexp(1.0f + u(rng) * 0.5f, static_cast<int>(g % 5) - 3);
            m[g] = std::fabs(u(rng)) + 0.01f;
        }
        for (std::size_t j = 0; j < n; ++j) {
            const std::size_t g = j / gsize;
            const float t = thresholds[rng() % 16];
            switch (rng() % 4) {  // exact thresholds (times the divisor), their neighbours, random
                case 0: x[j] = t * s[g]; break;
                case 1: x[j] = next_up(t * s[g]); break;
                case 2: x[j] = next_down(t * s[g]); break;
                default: x[j] = u(rng) * 8.0f * s[g]; break;
            }
            if (rng() % 2) x[j] = -x[j];
        }
        x[1] = -0.0f;
        x[2] = 0.0f;
        for (e2m1_op op : {e2m1_op::divide, e2m1_op::multiply}) {
            std::vector<float> sv = s;
            if (op == e2m1_op::multiply)
                for (float& v : sv) v = 1.0f / v;
            // The definition.
            std::vector<std::uint8_t> want((n / 2) + 1, 0x5A);
            std::vector<float> wsig(gsize, 0.5f), werr(gsize, 0.25f);
            for (std::size_t j = 0; j < n; ++j) {
                const std::size_t g = j / gsize;
                const float q = op == e2m1_op::divide ? x[j] / sv[g] : x[j] * sv[g];
                const std::uint8_t c = e2m1_ref(q);
                want[j / 2] = j % 2 ? static_cast<std::uint8_t>(want[j / 2] | (c << 4)) : c;
                // Products pass no_contract: aarch64 GCC would fuse them into the adds (FMA),
                // which the kernels' separate multiply and add never do.
                const float dq = simd::no_contract(e2m1_to_float(c) * m[g]), e = x[j] - dq;
                wsig[j % gsize] += simd::no_contract(x[j] * x[j]);
                werr[j % gsize] += simd::no_contract(e * e);
            }
            std::vector<float> wamax(groups, 0.0f);
            for (std::size_t j = 0; j < n; ++j) wamax[j / gsize] = std::fmax(wamax[j / gsize], std::fabs(x[j]));
            for (isa i : minifloat_isas()) {
                CAPTURE(isa_name(i));
                CAPTURE(gsize);
                const minifloat_kernels& k = kernels_of<minifloat_kernels>(i);
                std::vector<std::uint8_t> got((n / 2) + 1, 0x5A);
                std::vector<float> sig(gsize, 0.5f), err(gsize, 0.25f);
                k.e2m1_groups(x.data(), n, gsize, sv.data(), op, m.data(), got.data(), sig.data(), err.data());
                CHECK(got == want);
                CHECK(sig == wsig);
                CHECK(err == werr);
                std::vector<std::uint8_t> bare((n / 2) + 1, 0x5A);
                k.e2m1_groups(x.data(), n, gsize, sv.data(), op, m.data(), bare.data(), nullptr, nullptr);
                CHECK(bare == want);
                std::vector<float> amax(groups + 1, -1.0f);
                k.group_amax(x.data(), n, gsize, amax.data());
                CHECK(amax[groups] == -1.0f);
                amax.pop_back();
                CHECK(amax == wamax);
            }
        }
    }
}

TEST_CASE("minifloat kernels: a NaN or infinite quotient (an all-zero NVFP4 group under an infinite global) codes as the definition does") {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::vector<float> x(32, 0.0f), s(2, nan), m(2, nan);
    x[3] = -0.0f;
    x[20] = 1.0f;
    s[1] = 0.0f;  // x / 0: +-inf saturates to +-6, 0 / 0 is NaN
    x[17] = -2.0f;
    std::vector<std::uint8_t> want(16);
    for (std::size_t j = 0; j < 32; ++j) {
        const std::uint8_t c = e2m1_ref(x[j] / s[j / 16]);
        want[j / 2] = j % 2 ? static_cast<std::uint8_t>(want[j / 2] | (c << 4)) : c;
    }
    (void)inf;
    for (isa i : minifloat_isas()) {
        CAPTURE(isa_name(i));
        std::vector<std::uint8_t> got(16);
        kernels_of<minifloat_kernels>(i).e2m1_groups(x.data(), 32, 16, s.data(), e2m1_op::divide, m.data(), got.data(),
                                                     nullptr, nullptr);
        CHECK(got == want);
    }
}

namespace {

/// x in `t`'s bytes (F32, F16, BF16), and the values those bytes hold.
std::vector<std::byte> row_bytes(const std::vector<float>& x, dtype t, std::vector<float>& value) {
    std::vector<std::byte> bytes(x.size() * dtype_size(t));
    value.resize(x.size());
    for (std::size_t j = 0; j < x.size(); ++j) {
        if (t == dtype::F32) {
            std::memcpy(bytes.data() + 4 * j, &x[j], 4);
            value[j] = x[j];
        } else {
            const std::uint16_t h = t == dtype::F16 ? float_to_fp16(x[j]) : float_to_bf16(x[j]);
            std::memcpy(bytes.data() + 2 * j, &h, 2);
            value[j] = t == dtype::F16 ? fp16_to_float(h) : bf16_to_float(h);
        }
    }
    return bytes;
}

}  // namespace

TEST_CASE("minifloat kernels: e4m3_row and abs_max give the definitions' codes, and one SNR order, on every ISA") {
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const std::vector<float> probe = e4m3_probe();
    for (std::size_t bc : {std::size_t{128}, std::size_t{37}, std::size_t{300}}) {
        const std::size_t n = 300;  // ragged last block for 128 and 37
        std::vector<float> x(n), m((n + bc - 1) / bc);
        for (float& v : m) v = std::fabs(u(rng)) * 0.01f + 1e-4f;
        for (std::size_t j = 0; j < n; ++j) {
            const float mj = m[j / bc];
            // E4M3 values, midpoints and random quotients times the divisor (finite probes only)
            float q = probe[rng() % (probe.size() - 4096)];
            if (!std::isfinite(q) || std::fabs(q) > 1e4f) q = u(rng) * 500.0f;
            x[j] = rng() % 3 ? q * mj : u(rng);
        }
        x[5] = -0.0f;
        for (dtype source : {dtype::F32, dtype::BF16, dtype::F16})
            for (dtype quotient : {dtype::F32, dtype::BF16, dtype::F16}) {
                std::vector<float> value;
                const std::vector<std::byte> bytes = row_bytes(x, source, value);
                std::vector<std::uint8_t> want(n + 1, 0xA5);
                for (std::size_t j = 0; j < n; ++j) {
                    float q = value[j] / m[j / bc];
                    if (quotient == dtype::BF16) q = bf16_to_float(float_to_bf16(q));
                    if (quotient == dtype::F16) q = fp16_to_float(float_to_fp16(q));
                    want[j] = float_to_e4m3(q);
                }
                std::vector<double> first;
                for (isa i : minifloat_isas()) {
                    CAPTURE(isa_name(i));
                    CAPTURE(bc);
                    CAPTURE(dtype_name(source));
                    const minifloat_kernels& k = kernels_of<minifloat_kernels>(i);
                    std::vector<std::uint8_t> got(n + 1, 0xA5);
                    std::vector<double> snr(8, 0.0);
                    k.e4m3_row(bytes.data(), source, n, bc, m.data(), quotient, got.data(), snr.data());
                    CHECK(got == want);
                    double sig = 0, err = 0, want_sig = 0, want_err = 0;
                    for (int p = 0; p < 4; ++p) sig += snr[p], err += snr[4 + p];
                    for (std::size_t j = 0; j < n; ++j) {
                        const double e =
                            static_cast<double>(value[j]) - static_cast<double>(e4m3_to_float(want[j]) * m[j / bc]);
                        want_sig += static_cast<double>(value[j]) * value[j];
                        want_err += e * e;
                    }
                    CHECK(sig == doctest::Approx(want_sig).epsilon(1e-12));
                    CHECK(err == doctest::Approx(want_err).epsilon(1e-12));
                    if (first.empty()) first = snr;
                    CHECK(snr == first);  // the same partials on every ISA
                    std::vector<std::uint8_t> bare(n + 1, 0xA5);
                    k.e4m3_row(bytes.data(), source, n, bc, m.data(), quotient, bare.data(), nullptr);
                    CHECK(bare == want);
                    float top = 0;
                    for (std::size_t j = 0; j < std::min(bc, n - 3); ++j) top = std::fmax(top, std::fabs(x[j + 3]));
                    CHECK(k.abs_max(x.data() + 3, std::min(bc, n - 3)) == top);
                    CHECK(k.abs_max(x.data(), 0) == 0.0f);
                }
            }
    }
}

// The integer-domain rounding of the kernels against the definition on every float whose low
// 12 bits are one of five patterns: every sign, exponent and top 11 mantissa bits, so every
// E4M3 step, tie and saturation edge and every way the bits below can break a tie, through
// the plain encoder and through a row whose quotient (divisor 1) rounds to BF16 first.
TEST_CASE("minifloat kernels: e4m3_encode and e4m3_row round every float of 11 leading mantissa bits as the definition on every ISA") {
    std::vector<float> x;
    x.reserve(std::size_t{5} << 20);
    for (std::uint32_t hi = 0; hi < (1u << 20); ++hi)
        for (std::uint32_t lo : {0u, 1u, 0x7FFu, 0x800u, 0xFFFu}) x.push_back(std::bit_cast<float>(hi << 12 | lo));
    std::vector<std::uint8_t> want(x.size()), want_bf16(x.size());
    for (std::size_t j = 0; j < x.size(); ++j) {
        want[j] = float_to_e4m3(x[j]);
        want_bf16[j] = float_to_e4m3(bf16_to_float(float_to_bf16(x[j])));
    }
    const std::byte* bytes = reinterpret_cast<const std::byte*>(x.data());
    const float one = 1.0f;
    for (isa i : minifloat_isas()) {
        CAPTURE(isa_name(i));
        const minifloat_kernels& k = kernels_of<minifloat_kernels>(i);
        std::vector<std::uint8_t> got(x.size());
        k.e4m3_encode(x.data(), x.size(), got.data());
        CHECK(std::equal(got.begin(), got.end(), want.begin()));
        k.e4m3_row(bytes, dtype::F32, x.size(), x.size(), &one, dtype::BF16, got.data(), nullptr);
        CHECK(std::equal(got.begin(), got.end(), want_bf16.begin()));
    }
}

TEST_CASE("minifloat kernels: block_abs_max reads each dtype's bytes to the definitions' block amaxes on every ISA") {
    std::mt19937 rng(23);
    std::uniform_real_distribution<float> u(-3.0f, 3.0f);
    const std::size_t n = 301;  // vectors and a tail in every block size below
    std::vector<float> x(n);
    for (float& v : x) v = u(rng);
    x[7] = -0.0f;
    x[200] = -5.5f;
    for (dtype t : {dtype::F32, dtype::F16, dtype::BF16}) {
        std::vector<std::byte> bytes(n * dtype_size(t));
        std::vector<float> value(n);
        for (std::size_t j = 0; j < n; ++j) {
            if (t == dtype::F32) {
                std::memcpy(bytes.data() + 4 * j, &x[j], 4);
                value[j] = x[j];
            } else {
                const std::uint16_t h = t == dtype::F16 ? float_to_fp16(x[j]) : float_to_bf16(x[j]);
                std::memcpy(bytes.data() + 2 * j, &h, 2);
                value[j] = t == dtype::F16 ? fp16_to_float(h) : bf16_to_float(h);
            }
        }
        for (std::size_t bc : {std::size_t{1}, std::size_t{16}, std::size_t{37}, std::size_t{128}, n}) {
            const std::size_t blocks = (n + bc - 1) / bc;
            std::vector<float> want(blocks, 0.25f);  // folds into what the caller holds
            for (std::size_t j = 0; j < n; ++j) want[j / bc] = std::fmax(want[j / bc], std::fabs(value[j]));
            for (isa i : minifloat_isas()) {
                CAPTURE(isa_name(i));
                CAPTURE(bc);
                const minifloat_kernels& k = kernels_of<minifloat_kernels>(i);
                std::vector<float> got(blocks, 0.25f);
                CHECK_FALSE(k.block_abs_max(bytes.data(), t, n, bc, got.data()));
                CHECK(got == want);
                for (std::size_t at : {std::size_t{3}, std::size_t{298}}) {  // in a vector, in the tail
                    std::vector<std::byte> bad = bytes;
                    const float inf = at == 3 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
                    if (t == dtype::F32) std::memcpy(bad.data() + 4 * at, &inf, 4);
                    else {
                        const std::uint16_t h = t == dtype::F16 ? float_to_fp16(inf) : float_to_bf16(inf);
                        std::memcpy(bad.data() + 2 * at, &h, 2);
                    }
                    CHECK(k.block_abs_max(bad.data(), t, n, bc, got.data()));
                }
            }
        }
    }
}

TEST_CASE("minifloat kernels: nvfp4_scales gives the definition's E4M3 scale codes and multipliers on every ISA") {
    // The definition (layout/nvfp4.hpp nvfp4_group_scale, compressed-tensors calculate_qparams):
    // e4m3(clamp(global * round(amax / 6, weight dtype), +-448)), zero -> 0.125's code, and the
    // multiplier e4m3(code) / global that the E2M1 step divides by.
    std::mt19937 rng(31);
    std::uniform_real_distribution<float> u(0.0f, 4.0f);
    std::vector<float> amax(203);  // vectors and a tail on every ISA
    for (float& a : amax) a = u(rng) * u(rng);
    amax[0] = 0.0f;
    amax[5] = 1e-30f;        // rounds to a zero scale: 0.125's
    amax[17] = 3.0e38f;      // saturates at 448
    amax[40] = 6.0f * 0x1p-9f;  // the smallest subnormal scale under global 1
    amax[41] = 6.0f * 0x1p-10f; // its midpoint with zero: ties to even, zero, then 0.125
    for (float global : {1.0f, 448.0f * 6.0f / 7.3f, 448.0f * 6.0f / 0.004f, 3.0e38f, std::numeric_limits<float>::infinity()})
        for (dtype values : {dtype::F32, dtype::BF16, dtype::F16}) {
            std::vector<std::uint8_t> want(amax.size());
            std::vector<float> want_m(amax.size());
            for (std::size_t g = 0; g < amax.size(); ++g) {
                float q = amax[g] / 6.0f;
                if (values == dtype::BF16) q = bf16_to_float(float_to_bf16(q));
                if (values == dtype::F16) q = fp16_to_float(float_to_fp16(q));
                std::uint8_t c = float_to_e4m3(std::clamp(global * q, -448.0f, 448.0f));
                if (e4m3_to_float(c) == 0.0f) c = float_to_e4m3(0.125f);
                want[g] = c;
                want_m[g] = e4m3_to_float(c) / global;
            }
            for (isa i : minifloat_isas()) {
                CAPTURE(isa_name(i));
                CAPTURE(global);
                CAPTURE(dtype_name(values));
                std::vector<std::uint8_t> got(amax.size() + 1, 0xAB);
                std::vector<float> m(amax.size() + 1, -1.0f);
                kernels_of<minifloat_kernels>(i).nvfp4_scales(amax.data(), amax.size(), global, values, got.data(), m.data());
                CHECK(got.back() == 0xAB);  // nothing past the last group
                got.pop_back();
                CHECK(m.back() == -1.0f);
                m.pop_back();
                CHECK(got == want);
                CHECK(std::memcmp(m.data(), want_m.data(), m.size() * 4) == 0);
            }
        }
}
