// Every ISA this CPU runs produces the same bytes as the scalar reference: kernels one by
// one (including quotients that sit on rounding ties) and whole tensors over every bits x
// group x symmetry x policy combination and odd widths.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "qforge/quant/quantize.hpp"
#include "qforge/quant/snr.hpp"
#include "qforge/simd/no_contract.hpp"
#include "qforge/simd/dispatch.hpp"
#include "support/guarded_span.hpp"
#include "support/isas.hpp"
#include "support/synthetic.hpp"

using namespace qforge;

namespace {

std::vector<simd::isa> other_isas() { return qforge::testing::available_isas(qforge::testing::with_scalar::no); }

std::uint32_t bits_of(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

// Values that sit exactly on code ties (k + 0.5) * s, next to them, zeros, and Student-t.
std::vector<float> nasty_values(std::size_t n, float s, std::uint64_t seed) {
    auto t = testing::student_t_floats(n, seed, 5, 0.02);
    testing::splitmix64 rng(seed ^ 0xABCDEFull);
    for (std::size_t i = 0; i < n; ++i) {
        const auto kind = rng.next() % 6;
        const float k = static_cast<float>(static_cast<int>(rng.next() % 17) - 8);
        if (kind == 0) t[i] = (k + 0.5f) * s;
        if (kind == 1) t[i] = std::nextafter((k + 0.5f) * s, 1.0f);
        if (kind == 2) t[i] = std::nextafter((k + 0.5f) * s, -1.0f);
        if (kind == 3) t[i] = 0.0f;
    }
    return t;
}

}  // namespace

TEST_CASE("group kernels: every ISA equals scalar bit for bit") {
    const auto& ref = simd::kernels(simd::isa::scalar);
    for (simd::isa i : other_isas()) {
        CAPTURE(simd::isa_name(i));
        const auto& k = simd::kernels(i);
        for (std::size_t n : {1u, 7u, 8u, 15u, 16u, 17u, 31u, 33u, 64u, 127u, 129u, 300u}) {
            CAPTURE(n);
            // Scales are always stored F16/BF16 values (the kernels rely on <= 11 significant bits).
            for (float s : {fp16_to_float(float_to_fp16(0.0125f)), fp16_to_float(float_to_fp16(0.003f)),
                            bf16_to_float(float_to_bf16(0.0137f)), fp16_to_float(float_to_fp16(1e-6f))}) {
                const auto w = nasty_values(n, s, n * 7 + 1);
                const auto imp = testing::student_t_floats(n, n + 3);
                std::vector<float> impabs(n);
                for (std::size_t j = 0; j < n; ++j) impabs[j] = std::fabs(imp[j]) * 50;
                float a0, a1, b0, b1;
                ref.min_max(w.data(), n, &a0, &a1);
                k.min_max(w.data(), n, &b0, &b1);
                CHECK(a0 == b0);
                CHECK(a1 == b1);
                for (float z : {0.0f, 3.0f, 8.0f, 128.0f}) {
                    for (float maxq : {3.0f, 15.0f, 255.0f}) {
                        if (z > maxq) continue;
                        for (float norm : {2.0f, 2.4f, 1.0f, 3.0f}) {
                            const simd::grid_params p{s, 1.0f / s, z, maxq, norm};
                            CHECK(bits_of(ref.error(w.data(), nullptr, n, p)) == bits_of(k.error(w.data(), nullptr, n, p)));
                            CHECK(bits_of(ref.error(w.data(), impabs.data(), n, p)) ==
                                  bits_of(k.error(w.data(), impabs.data(), n, p)));
                        }
                        const simd::grid_params p{s, 1.0f / s, z, maxq, 2.0f};
                        std::vector<std::uint8_t> ca(n), cb(n);
                        ref.encode(w.data(), n, p, ca.data());
                        k.encode(w.data(), n, p, cb.data());
                        CHECK(ca == cb);
                    }
                }
            }
        }
    }
}

TEST_CASE("encode is round_half_even of the IEEE quotient, ties included") {
    // s = fp16(0.1) (not a power of two): w = (k + 0.5) * s computed in float lands a hair above or
    // below the tie; the code must follow the float quotient w / s exactly.
    for (simd::isa i : {simd::isa::scalar}) {
        const auto& k = simd::kernels(i);
        const float s = fp16_to_float(float_to_fp16(0.1f));
        std::vector<float> w;
        for (int j = -9; j <= 9; ++j) w.push_back((static_cast<float>(j) + 0.5f) * s);
        std::vector<std::uint8_t> c(w.size());
        k.encode(w.data(), w.size(), {s, 1.0f / s, 8.0f, 15.0f, 2.0f}, c.data());
        for (std::size_t j = 0; j < w.size(); ++j) {
            double q = std::nearbyint(static_cast<double>(w[j] / s)) + 8;
            q = q < 0 ? 0 : q > 15 ? 15 : q;
            CHECK(static_cast<int>(c[j]) == static_cast<int>(q));
        }
    }
    for (simd::isa i : other_isas()) {
        const auto& k = simd::kernels(i);
        const auto& ref = simd::kernels(simd::isa::scalar);
        // A million tie-prone quotients across scales.
        for (float s : {fp16_to_float(float_to_fp16(0.1f)), bf16_to_float(float_to_bf16(0.0137f)),
                        fp16_to_float(float_to_fp16(3.3e-3f))}) {
            std::vector<float> w;
            for (int j = -130; j <= 130; ++j)
                for (int d = -3; d <= 3; ++d) {
                    float v = (static_cast<float>(j) + 0.5f) * s;
                    for (int m = 0; m < (d < 0 ? -d : d); ++m) v = std::nextafter(v, d < 0 ? -1.0f : 1.0f);
                    w.push_back(v);
                }
            std::vector<std::uint8_t> ca(w.size()), cb(w.size());
            ref.encode(w.data(), w.size(), {s, 1.0f / s, 128.0f, 255.0f, 2.0f}, ca.data());
            k.encode(w.data(), w.size(), {s, 1.0f / s, 128.0f, 255.0f, 2.0f}, cb.data());
            CHECK(ca == cb);
        }
    }
}

TEST_CASE("encode equals clamp(nearbyint(w / s) + z) on tie-prone values, every ISA") {
    testing::splitmix64 rng(77);
    std::vector<float> w;
    for (int rep = 0; rep < 120; ++rep) {
        const bool bf = rep % 2;
        const float raw = static_cast<float>(rng.uniform() * 0.05 + 1e-5);
        const float s = bf ? bf16_to_float(float_to_bf16(raw)) : fp16_to_float(float_to_fp16(raw));
        w.clear();
        for (int j = -140; j <= 140; ++j) {
            const float tie = (static_cast<float>(j) + 0.5f) * s;
            w.push_back(tie);
            w.push_back(std::nextafter(tie, 1.0f));
            w.push_back(std::nextafter(tie, -1.0f));
            w.push_back(static_cast<float>(j) * s);
        }
        for (float z : {0.0f, 8.0f, 128.0f}) {
            const float maxq = z == 8.0f ? 15.0f : 255.0f;
            for (simd::isa i : {simd::isa::scalar, simd::isa::avx2, simd::isa::avx512, simd::isa::neon}) {
                if (!simd::available(i)) continue;
                std::vector<std::uint8_t> c(w.size());
                simd::kernels(i).encode(w.data(), w.size(), {s, 1.0f / s, z, maxq, 2.0f}, c.data());
                int wrong = 0;
                for (std::size_t j = 0; j < w.size(); ++j) {
                    float q = std::nearbyint(w[j] / s) + z;
                    q = q < 0 ? 0 : q > maxq ? maxq : q;
                    wrong += static_cast<int>(c[j]) != static_cast<int>(q);
                }
                CHECK(wrong == 0);
            }
        }
    }
}

TEST_CASE("to_f32: exact conversion and the first non-finite index on every ISA") {
    const auto f = testing::student_t_floats(77, 5);
    const auto b = testing::to_bf16(f);
    const auto h = testing::to_fp16(f);
    for (simd::isa i : {simd::isa::scalar, simd::isa::avx2, simd::isa::avx512, simd::isa::neon}) {
        if (!simd::available(i)) continue;
        CAPTURE(simd::isa_name(i));
        const auto& k = simd::kernels(i);
        std::vector<float> out(77);
        CHECK(k.to_f32(reinterpret_cast<const std::byte*>(b.data()), dtype::BF16, 77, out.data()) == -1);
        for (std::size_t j = 0; j < 77; ++j) CHECK(out[j] == bf16_to_float(b[j]));
        CHECK(k.to_f32(reinterpret_cast<const std::byte*>(h.data()), dtype::F16, 77, out.data()) == -1);
        for (std::size_t j = 0; j < 77; ++j) CHECK(out[j] == fp16_to_float(h[j]));
        for (std::size_t bad : {0u, 9u, 63u, 64u, 76u}) {
            auto hb = h;
            hb[bad] = 0x7C00;  // +inf
            if (bad + 3 < 77) hb[bad + 3] = 0x7E00;  // a later NaN does not matter
            CHECK(k.to_f32(reinterpret_cast<const std::byte*>(hb.data()), dtype::F16, 77, out.data()) ==
                  static_cast<std::int64_t>(bad));
            auto fb = f;
            fb[bad] = std::nanf("");
            CHECK(k.to_f32(reinterpret_cast<const std::byte*>(fb.data()), dtype::F32, 77, out.data()) ==
                  static_cast<std::int64_t>(bad));
        }
    }
}

TEST_CASE("whole tensors: every bits x group x symmetry x policy x width equals scalar") {
    const auto others = other_isas();
    if (others.empty()) return;
    int compared = 0;
    const std::int64_t rows = 2;
    for (std::int64_t cols : {1, 7, 31, 33, 127, 129}) {
        const auto w = testing::to_bf16(testing::student_t_floats(static_cast<std::size_t>(rows * cols), cols));
        const auto v = testing::view_of(w, rows, cols, dtype::BF16);
        std::vector<float> imp(static_cast<std::size_t>(cols));
        for (std::size_t j = 0; j < imp.size(); ++j) imp[j] = 0.5f + static_cast<float>(j % 5);
        for (int bits = 2; bits <= 8; ++bits) {
            for (int group : {-1, 8, 32, 64, 128}) {
                if (group > cols) continue;
                for (scale_policy p : all_scale_policies) {
                    if (p == scale_policy::custom) continue;
                    for (bool sym : {true, false}) {
                        if (!policy_supports(p, sym)) continue;
                        for (int variant = 0; variant < (p == scale_policy::mse ? 3 : 2); ++variant) {
                            quant_options o;
                            o.bits = bits;
                            o.group_size = group;
                            o.symmetric = sym;
                            o.policy = p;
                            o.scale_dtype = (bits + variant) % 2 ? dtype::BF16 : dtype::F16;
                            if (variant == 1) o.importance = imp;
                            if (p == scale_policy::mse) o.search.norm = variant == 2 ? 2.0f : 2.4f;
                            o.isa = simd::isa::scalar;
                            const auto ref = quantize(v, o);
                            for (simd::isa i : others) {
                                o.isa = i;
                                const auto q = quantize(v, o);
                                const bool same = q.codes == ref.codes && q.scales == ref.scales && q.zeros == ref.zeros;
                                if (!same)
                                    FAIL_CHECK(simd::isa_name(i) << " differs: cols " << cols << " bits " << bits << " group "
                                                                 << group << " " << policy_name(p) << " sym " << sym
                                                                 << " variant " << variant);
                                ++compared;
                            }
                        }
                    }
                }
            }
        }
    }
    MESSAGE("tensors compared: " << compared);
    CHECK(compared > 0);
}

TEST_CASE("make_grids: every ISA equals the scalar store_scale rules, edges included") {
    const auto others = other_isas();
    // Raw inputs around every edge: zero and subnormal scales (raised to the smallest
    // pattern), rounding ties of F16 and BF16, values near each dtype's overflow, AWQ's 1e-5.
    std::vector<float> a, b;
    testing::splitmix64 rng(2024);
    for (int i = 0; i < 4000; ++i) {
        const int kind = static_cast<int>(rng.next() % 6);
        float x = std::ldexp(static_cast<float>(rng.next() % 100000) / 100000.0f + 0.5f, static_cast<int>(rng.next() % 60) - 40);
        if (kind == 1) x = std::ldexp(1.0f + 0x1p-11f, -static_cast<int>(rng.next() % 30));  // F16 tie
        if (kind == 2) x = std::ldexp(1.0f + 0x1p-8f, static_cast<int>(rng.next() % 60) - 30);  // BF16 tie
        if (kind == 3) x = (rng.next() % 2 ? 65519.0f : 65520.0f) * 7.5f;
        if (kind == 4) x = std::ldexp(1.0f, -140 + static_cast<int>(rng.next() % 20));  // tiny
        a.push_back(-x * static_cast<float>(rng.next() % 3) / 2.0f);
        b.push_back(kind == 5 ? a.back() + 1e-6f : x);
    }
    int compared = 0;
    for (simd::grid_rule rule : {simd::grid_rule::symmetric, simd::grid_rule::range, simd::grid_rule::awq_range})
        for (bool bf16 : {false, true})
            for (int bits : {2, 4, 8}) {
                simd::grid_recipe r;
                r.rule = rule;
                r.bits = bits;
                r.div = 7.5f;
                r.bf16 = bf16;
                r.norm = 2.4f;
                std::vector<float> sym(a.size());
                for (std::size_t i = 0; i < a.size(); ++i) sym[i] = std::fabs(b[i]);  // symmetric: a = amax >= 0
                const float* in_a = rule == simd::grid_rule::symmetric ? sym.data() : a.data();
                for (std::size_t count : {a.size(), std::size_t{1}, std::size_t{13}}) {
                    std::vector<std::uint16_t> ref_bits(count);
                    std::vector<simd::grid_params> ref(count);
                    const auto ref_over = simd::kernels(simd::isa::scalar).make_grids(in_a, b.data(), count, r, ref_bits.data(), ref.data());
                    // The scalar kernel is the formula: check a few lanes against store_scale directly.
                    for (std::size_t i = 0; i < count; i += 97) {
                        const auto stored = store_scale(rule == simd::grid_rule::symmetric ? in_a[i] / 7.5f
                                                        : rule == simd::grid_rule::range
                                                            ? (b[i] - a[i]) / static_cast<float>((1 << bits) - 1)
                                                            : std::max(b[i] - a[i], 1e-5f) / static_cast<float>((1 << bits) - 1),
                                                        bf16 ? dtype::BF16 : dtype::F16);
                        if (stored) CHECK(ref_bits[i] == *stored);
                    }
                    for (simd::isa i : others) {
                        std::vector<std::uint16_t> got_bits(count);
                        std::vector<simd::grid_params> got(count);
                        const auto over = simd::kernels(i).make_grids(in_a, b.data(), count, r, got_bits.data(), got.data());
                        CHECK(over == ref_over);
                        CHECK(got_bits == ref_bits);
                        for (std::size_t j = 0; j < count; ++j) {
                            if ((ref_bits[j] & 0x7FFF) >= (bf16 ? 0x7F80 : 0x7C00)) continue;  // overflowed: no grid
                            const bool same = bits_of(got[j].scale) == bits_of(ref[j].scale) &&
                                              bits_of(got[j].rinv) == bits_of(ref[j].rinv) && got[j].zero == ref[j].zero &&
                                              got[j].maxq == ref[j].maxq && got[j].norm == ref[j].norm;
                            if (!same) FAIL_CHECK(simd::isa_name(i) << " grid " << j << " differs");
                        }
                        ++compared;
                    }
                }
            }
    MESSAGE("make_grids runs compared: " << compared);
}

TEST_CASE("to_f32_min_max_groups equals to_f32 then min_max_groups, non-finite values included, every ISA") {
    const std::size_t n = 301;  // several groups of each size plus a short last one
    const auto f = testing::student_t_floats(n, 11);
    const auto b = testing::to_bf16(f);
    const auto h = testing::to_fp16(f);
    for (simd::isa i : {simd::isa::scalar, simd::isa::avx2, simd::isa::avx512, simd::isa::neon}) {
        if (!simd::available(i)) continue;
        CAPTURE(simd::isa_name(i));
        const auto& k = simd::kernels(i);
        for (std::size_t gsize : {1u, 2u, 8u, 64u, 128u, 512u}) {
            CAPTURE(gsize);
            const std::size_t groups = (n + gsize - 1) / gsize;
            auto run = [&](const void* src, dtype t) {
                std::vector<float> d1(n), d2(n), mn1(groups), mx1(groups), mn2(groups), mx2(groups);
                const auto* p = static_cast<const std::byte*>(src);
                const std::int64_t r1 = k.to_f32(p, t, n, d1.data());
                const std::int64_t r2 = k.to_f32_min_max_groups(p, t, n, gsize, d2.data(), mn2.data(), mx2.data());
                CHECK(r1 == r2);
                if (r1 >= 0) return;
                CHECK(std::memcmp(d1.data(), d2.data(), n * sizeof(float)) == 0);
                k.min_max_groups(d1.data(), n, gsize, mn1.data(), mx1.data());
                for (std::size_t g = 0; g < groups; ++g) {
                    CHECK(bits_of(mn1[g]) == bits_of(mn2[g]));
                    CHECK(bits_of(mx1[g]) == bits_of(mx2[g]));
                }
            };
            run(b.data(), dtype::BF16);
            run(h.data(), dtype::F16);
            run(f.data(), dtype::F32);
            for (std::size_t bad : {0u, 7u, 64u, 300u}) {
                auto fb = f;
                fb[bad] = bad % 2 ? -std::numeric_limits<float>::infinity() : std::nanf("");
                run(fb.data(), dtype::F32);
                auto bb = b;
                bb[bad] = 0x7F80;
                run(bb.data(), dtype::BF16);
            }
        }
    }
}

TEST_CASE("to_f32_min_max_groups reads a weight that ends where its mapping ends, every ISA") {
    // The convert pass prefetches 2 KB past what it reads; past the end of the data that must
    // not fault, and the results are those of the same bytes anywhere else.
    const std::size_t n = 1000;
    const auto f = testing::student_t_floats(n, 12);
    const auto b = testing::to_bf16(f);
    for (simd::isa i : testing::available_isas()) {
        CAPTURE(simd::isa_name(i));
        const auto& k = simd::kernels(i);
        for (std::size_t gsize : {64u, 1000u}) {
            CAPTURE(gsize);
            auto check_at_end = [&](std::span<const std::byte> bytes, dtype t) {
                const testing::guarded_span at_end(bytes);
                const std::size_t groups = (n + gsize - 1) / gsize;
                std::vector<float> d1(n), d2(n), mn1(groups), mx1(groups), mn2(groups), mx2(groups);
                CHECK(k.to_f32_min_max_groups(bytes.data(), t, n, gsize, d1.data(), mn1.data(), mx1.data()) == -1);
                CHECK(k.to_f32_min_max_groups(at_end.data(), t, n, gsize, d2.data(), mn2.data(), mx2.data()) == -1);
                CHECK(std::memcmp(d1.data(), d2.data(), n * sizeof(float)) == 0);
                CHECK(std::memcmp(mn1.data(), mn2.data(), groups * sizeof(float)) == 0);
                CHECK(std::memcmp(mx1.data(), mx2.data(), groups * sizeof(float)) == 0);
            };
            check_at_end(std::as_bytes(std::span(b)), dtype::BF16);
            check_at_end(std::as_bytes(std::span(f)), dtype::F32);
        }
    }
}

TEST_CASE("error kernel = the squared error of encode's codes in the documented order, ties and clamps included") {
    // The kernel's fast path rounds x * (1/s) and checks the distance to ties; this pins it to
    // the definition: codes as encode() makes them (the IEEE quotient rounded half to even),
    // error terms (dq - w)^2 * imp, element i to partial i % 8, ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)).
    for (simd::isa i : {simd::isa::scalar, simd::isa::avx2, simd::isa::avx512, simd::isa::neon}) {
        if (!simd::available(i)) continue;
        CAPTURE(simd::isa_name(i));
        const auto& k = simd::kernels(i);
        for (std::size_t n : {5u, 64u, 129u}) {
            for (float s : {fp16_to_float(float_to_fp16(0.0125f)), bf16_to_float(float_to_bf16(0.0137f)),
                            fp16_to_float(float_to_fp16(1e-6f))}) {  // 1e-6: most quotients beyond the code range
                auto w = nasty_values(n, s, n * 13 + 5);
                const auto imp = testing::student_t_floats(n, n + 9);
                for (float z : {0.0f, 8.0f}) {
                    const simd::grid_params p{s, 1.0f / s, z, 15.0f, 2.0f};
                    std::vector<std::uint8_t> codes(n);
                    k.encode(w.data(), n, p, codes.data());
                    for (bool weighted : {false, true}) {
                        float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                        for (std::size_t j = 0; j < n; ++j) {
                            const float e = simd::detail::no_contract((static_cast<float>(codes[j]) - z) * s) - w[j];
                            float term = simd::detail::no_contract(e * e);
                            if (weighted) term = simd::detail::no_contract(term * std::fabs(imp[j]));
                            part[j % 8] += term;
                        }
                        const float want = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
                        std::vector<float> ia(n);
                        for (std::size_t j = 0; j < n; ++j) ia[j] = std::fabs(imp[j]);
                        CHECK(bits_of(k.error(w.data(), weighted ? ia.data() : nullptr, n, p)) == bits_of(want));
                    }
                }
            }
        }
    }
}

TEST_CASE("errors of a batch of candidates equal each candidate's error, bit for bit, every ISA") {
    // errors runs candidates side by side (four accumulators a pass for the square, added by
    // acc_sum4); each result must still be error's, whose order the test above pins.
    for (simd::isa i : {simd::isa::scalar, simd::isa::avx2, simd::isa::avx512, simd::isa::neon}) {
        if (!simd::available(i)) continue;
        CAPTURE(simd::isa_name(i));
        const auto& k = simd::kernels(i);
        for (std::size_t n : {5u, 64u, 129u}) {
            const auto w = testing::student_t_floats(n, n * 3 + 1, 5, 0.02);
            const auto imp = testing::student_t_floats(n, n + 11);
            std::vector<float> ia(n);
            for (std::size_t j = 0; j < n; ++j) ia[j] = std::fabs(imp[j]);
            for (float norm : {2.0f, 2.4f}) {
                std::vector<simd::grid_params> g;
                for (int c = 0; c < 9; ++c) {  // two passes of four and one left over
                    const float s = fp16_to_float(float_to_fp16(0.006f * (1.0f + 0.07f * static_cast<float>(c))));
                    g.push_back({s, 1.0f / s, c % 3 == 0 ? 8.0f : static_cast<float>(c), 15.0f, norm});
                }
                for (bool weighted : {false, true}) {
                    const float* ip = weighted ? ia.data() : nullptr;
                    std::vector<float> out(g.size());
                    k.errors(w.data(), ip, n, g.data(), g.size(), out.data());
                    for (std::size_t c = 0; c < g.size(); ++c)
                        CHECK(bits_of(out[c]) == bits_of(k.error(w.data(), ip, n, g[c])));
                }
            }
        }
    }
}

TEST_CASE("snr_sums: the documented order (element i to partial i % 4, in double, unfused) on every ISA") {
    // Lengths around every lane count's tails, added onto partials that already hold sums.
    for (std::size_t n : {1u, 3u, 4u, 7u, 8u, 15u, 16u, 17u, 33u, 100u, 11008u}) {
        const auto x = testing::student_t_floats(n, 40 + n, 5, 0.02);
        auto y = x;
        testing::splitmix64 rng(n);
        for (float& v : y) v += static_cast<float>(static_cast<int>(rng.next() % 9) - 4) * 0x1p-9f;
        double want[8] = {1, 2, 3, 4, 5, 6, 7, 8}, from_zero[8] = {};
        for (std::size_t i = 0; i < n; ++i) {
            const double xd = x[i], e = xd - static_cast<double>(y[i]);
            for (double* p : {want, from_zero}) {
                p[i % 4] += simd::no_contract(xd * xd);
                p[4 + i % 4] += simd::no_contract(e * e);
            }
        }
        for (simd::isa i : {simd::isa::scalar, simd::isa::avx2, simd::isa::avx512, simd::isa::neon}) {
            if (!simd::available(i)) continue;
            CAPTURE(simd::isa_name(i));
            CAPTURE(n);
            double got[8] = {1, 2, 3, 4, 5, 6, 7, 8};
            simd::kernels(i).snr_sums(x.data(), y.data(), n, got);
            for (int j = 0; j < 8; ++j) CHECK(got[j] == want[j]);
            const snr_sums row = snr_sums_of(x, y, i);
            CHECK(row.signal == (from_zero[0] + from_zero[1]) + (from_zero[2] + from_zero[3]));
            CHECK(row.error == (from_zero[4] + from_zero[5]) + (from_zero[6] + from_zero[7]));
        }
    }
}
