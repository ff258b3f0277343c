// Least-squares scale/zero policy: never worse than min/max on any group, identical bytes on
// every SIMD path and thread count, codes chosen against the stored scale.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "qforge/quant/least_squares.hpp"
#include "qforge/quant/quantize.hpp"
#include "qforge/quant/snr.hpp"
#include "support/synthetic.hpp"

using namespace qforge;

namespace {

std::vector<simd::isa> runnable_isas() {
    std::vector<simd::isa> out;
    for (simd::isa i : {simd::isa::scalar, simd::isa::avx2, simd::isa::avx512, simd::isa::neon})
        if (simd::available(i)) out.push_back(i);
    return out;
}

// Group values of several shapes: Student-t, one-sided, with a huge outlier, constant, tiny.
std::vector<float> random_group(testing::splitmix64& rng, std::size_t n, int kind) {
    std::vector<float> v(n);
    for (auto& x : v) {
        const double t = rng.student_t(4) * 0.02;
        switch (kind) {
            case 0: x = static_cast<float>(t); break;
            case 1: x = static_cast<float>(std::fabs(t)); break;
            case 2: x = static_cast<float>(-std::fabs(t) * 1e-3); break;
            case 3: x = static_cast<float>(t * 1e-6); break;
            default: x = 0.25f; break;
        }
    }
    if (kind == 0 && n > 3) v[n / 2] = 0.5f;  // an outlier
    return v;
}

}  // namespace

TEST_CASE("least squares is never worse than min/max on any group") {
    testing::splitmix64 rng(2024);
    std::vector<std::uint8_t> codes(256);
    int strictly_better = 0, total = 0;
    for (int trial = 0; trial < 1500; ++trial) {
        const int bits = 2 + trial % 7;
        const bool sym = (trial / 7) % 2 == 1;
        const dtype sd = (trial / 14) % 2 ? dtype::BF16 : dtype::F16;
        const std::size_t n = std::size_t{1} + rng.next() % 200;
        const int kind = static_cast<int>(rng.next() % 5);
        const std::vector<float> x = random_group(rng, n, kind);
        std::vector<float> w;
        if (trial % 3 == 0) {
            w.resize(n);
            for (auto& v : w) v = static_cast<float>(rng.uniform() * 4.0);
        }
        lsq_options o;
        o.bits = bits;
        o.symmetric = sym;
        o.scale_dtype = sd;
        for (simd::isa isa : runnable_isas()) {
            CAPTURE(trial);
            CAPTURE(simd::isa_name(isa));
            const group_fit mm = minmax_fit_group(x, w, bits, sym, sd, codes, isa);
            const group_fit ls = lsq_fit_group(x, w, o, codes, isa);
            CHECK(ls.error <= mm.error);
            if (sym) CHECK(ls.grid.zero == (1 << (bits - 1)));
            for (std::size_t i = 0; i < n; ++i) CHECK(codes[i] <= (1 << bits) - 1);
            strictly_better += ls.error < mm.error;
            ++total;
        }
    }
    MESSAGE("least squares strictly better on " << strictly_better << " of " << total << " groups");
    CHECK(strictly_better > total / 2);
}

TEST_CASE("least-squares kernels: identical on every SIMD path, errors2 is simd error() to the bit") {
    testing::splitmix64 rng(99);
    for (int trial = 0; trial < 300; ++trial) {
        const std::size_t n = std::size_t{1} + rng.next() % 150;
        const std::vector<float> x = random_group(rng, n, static_cast<int>(rng.next() % 5));
        std::vector<float> w(n);
        for (auto& v : w) v = static_cast<float>(rng.uniform() * 3.0);
        const float* wp = trial % 2 ? w.data() : nullptr;
        const int maxq = trial % 3 ? 15 : 255;
        // Seeds with zeros inside and outside 0..maxq, mirrored and empty lanes.
        float f[detail::lsq_pass_lanes], d[detail::lsq_pass_lanes];
        for (std::size_t c = 0; c < detail::lsq_pass_lanes; ++c) {
            f[c] = c == 3 ? 0.0f : static_cast<float>((0.8 + 0.4 * rng.uniform()) * (c == 5 ? -1.0 : 1.0));
            d[c] = static_cast<float>(static_cast<int>(rng.next() % 5) - 2 + (c == 6 ? 300 : 0));
        }
        float amax = 0.0f;
        for (float v : x) amax = std::max(amax, std::fabs(v));
        const float m = amax > 0.0f ? static_cast<float>(maxq) / (2.0f * amax) : 1.0f;
        const float z0 = static_cast<float>(maxq / 2);
        const auto& ref = detail::lsq_kernels(simd::isa::scalar);
        const bool bf16 = trial % 4 == 1;
        detail::lsq_lane_fits rl;
        float rs[2], re[2];
        ref.lanes(x.data(), wp, n, f, d, m, z0, static_cast<float>(maxq), bf16, rl);
        ref.refit(x.data(), wp, n, m, maxq / 2, maxq, rs);
        const group_grid g0 = detail::make_grid(1.0f / m, maxq / 2, dtype::F16);
        const group_grid g1 = detail::make_grid(0.9f / m, maxq / 2 - 1, dtype::F16);
        const simd::grid_params p[2] = {detail::lsq_params(g0, 1.0f / g0.scale, maxq),
                                        detail::lsq_params(g1, 1.0f / g1.scale, maxq)};
        ref.errors2(x.data(), wp, n, p, re);
        CHECK(rl.gain[3] == 0.0f);  // an empty lane
        CHECK(rl.gain[6] == 0.0f);  // a zero outside 0..maxq
        for (std::size_t c = 0; c < detail::lsq_pass_lanes; ++c) {
            if (!(rl.gain[c] > 0.0f)) continue;
            // The stored refit scale is make_grid's rounding of |a/b|.
            const group_grid mg = detail::make_grid(std::fabs(rl.a[c] / rl.b[c]), 0, bf16 ? dtype::BF16 : dtype::F16);
            CHECK(rl.scale[c] == mg.scale);
            CHECK(rl.bits[c] == mg.scale_bits);
            CHECK(rl.rinv[c] == 1.0f / mg.scale);
        }
        for (simd::isa isa : runnable_isas()) {
            CAPTURE(trial);
            CAPTURE(simd::isa_name(isa));
            const auto& k = detail::lsq_kernels(isa);
            detail::lsq_lane_fits l;
            float s[2], e[2];
            k.lanes(x.data(), wp, n, f, d, m, z0, static_cast<float>(maxq), bf16, l);
            k.refit(x.data(), wp, n, m, maxq / 2, maxq, s);
            k.errors2(x.data(), wp, n, p, e);
            for (std::size_t c = 0; c < detail::lsq_pass_lanes; ++c) {
                CHECK(l.a[c] == rl.a[c]);
                CHECK(l.b[c] == rl.b[c]);
                CHECK(l.gain[c] == rl.gain[c]);
                CHECK(l.scale[c] == rl.scale[c]);
                CHECK(l.rinv[c] == rl.rinv[c]);
                CHECK(l.bits[c] == rl.bits[c]);
            }
            CHECK(s[0] == rs[0]);
            CHECK(s[1] == rs[1]);
            const simd::group_kernels& gk = simd::kernels(isa);
            CHECK(e[0] == gk.error(x.data(), wp, n, p[0]));
            CHECK(e[1] == gk.error(x.data(), wp, n, p[1]));
            CHECK(e[0] == re[0]);
            CHECK(e[1] == re[1]);
        }
    }
}

TEST_CASE("least squares through quantize(): same bytes on every SIMD path and thread count") {
    const std::int64_t rows = 37, cols = 512;
    const std::vector<float> w = testing::student_t_floats(static_cast<std::size_t>(rows * cols), 7);
    const std::vector<std::uint16_t> wb = testing::to_bf16(w);
    const tensor_view v = testing::view_of(wb, rows, cols, dtype::BF16, "layers.1.self_attn.o_proj.weight");
    std::vector<float> imp(static_cast<std::size_t>(cols));
    for (std::size_t i = 0; i < imp.size(); ++i) imp[i] = 0.5f + static_cast<float>(i % 7);
    for (bool sym : {false, true})
        for (int group : {32, 128, -1})
            for (bool weighted : {false, true}) {
                CAPTURE(sym);
                CAPTURE(group);
                quant_options o;
                o.bits = 4;
                o.group_size = group;
                o.symmetric = sym;
                o.scale_dtype = dtype::BF16;
                use_least_squares(o);
                if (weighted) o.importance = imp;
                o.isa = simd::isa::scalar;
                const quantized_tensor ref = quantize(v, o);
                ref.validate();
                for (simd::isa isa : runnable_isas()) {
                    o.isa = isa;
                    thread_pool pool(3);
                    const quantized_tensor q = quantize(v, o, pool.executor());
                    CHECK(q.codes == ref.codes);
                    CHECK(q.scales == ref.scales);
                    CHECK(q.zeros == ref.zeros);
                }
                if (weighted) continue;  // importance changes the objective; SNR is unweighted
                // Better than the min/max policy of the same scheme, as a whole.
                quant_options mm = o;
                mm.policy = sym ? scale_policy::gptq_absmax : scale_policy::minmax;
                mm.custom = {};
                CHECK(snr_db(v, ref) > snr_db(v, quantize(v, mm)));
            }
}

TEST_CASE("least squares beats the 100-step shrink search on Student-t groups of 64") {
    const std::int64_t rows = 64, cols = 1024;
    const std::vector<float> w = testing::student_t_floats(static_cast<std::size_t>(rows * cols), 11);
    const tensor_view v = testing::view_of(w, rows, cols, dtype::F32);
    quant_options o;
    o.bits = 4;
    o.group_size = 64;
    o.symmetric = false;
    o.policy = scale_policy::mse;
    o.search = search_params{2.0f, 100, 1.0f};
    const double mse = snr_db(v, quantize(v, o));
    use_least_squares(o);
    const double lsq = snr_db(v, quantize(v, o));
    MESSAGE("g64 asym: mse100 " << mse << " dB, least squares " << lsq << " dB");
    CHECK(lsq > mse);
}

TEST_CASE("symmetric least squares keeps the pinned zero and may mirror the grid") {
    const std::vector<float> x = {0.9f, 0.1f, -0.2f, 0.3f, -0.05f, 0.0f, 0.45f, -0.3f};
    std::vector<std::uint8_t> codes(x.size());
    lsq_options o;
    o.symmetric = true;
    const group_fit f = lsq_fit_group(x, {}, o, codes);
    CHECK(f.grid.zero == 8);
    // The largest value is positive: the mirrored grid puts it on the long side (code 0).
    CHECK(f.grid.scale < 0.0f);
    CHECK(codes[0] == 0);
    o.signed_scale = false;
    const group_fit p = lsq_fit_group(x, {}, o, codes);
    CHECK(p.grid.scale > 0.0f);
    CHECK(f.error <= p.error);
}

TEST_CASE("bad input is refused") {
    std::vector<std::uint8_t> codes(4);
    const std::vector<float> x = {1.0f, std::nanf(""), 0.0f, 2.0f};
    CHECK_THROWS_AS(lsq_fit_group(x, {}, lsq_options{}, codes), format_error);
    const std::vector<float> ok = {1.0f, 0.5f, 0.0f, 2.0f};
    const std::vector<float> short_w = {1.0f};
    CHECK_THROWS_AS(lsq_fit_group(ok, short_w, lsq_options{}, codes), shape_error);
    lsq_options bad;
    bad.seeds.clear();
    CHECK_THROWS_AS(lsq_fit_group(ok, {}, bad, codes), shape_error);
    bad = {};
    bad.bits = 9;
    CHECK_THROWS_AS(lsq_fit_group(ok, {}, bad, codes), shape_error);
}
