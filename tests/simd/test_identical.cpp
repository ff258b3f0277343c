// Every ISA this CPU runs produces the same bytes as the scalar reference: kernels one by
// one (including quotients that sit on rounding ties) and whole tensors over every bits x
// group x symmetry x policy combination and odd widths.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qforge/quant/quantize.hpp"
#include "qforge/simd/dispatch.hpp"
#include "support/synthetic.hpp"

using namespace qforge;

namespace {

std::vector<simd::isa> other_isas() {
    std::vector<simd::isa> out;
    for (simd::isa i : {simd::isa::avx512, simd::isa::avx2, simd::isa::neon}) {
        if (simd::available(i)) out.push_back(i);
        else MESSAGE("skipped: " << simd::isa_name(i) << " not available on this CPU");
    }
    return out;
}

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
