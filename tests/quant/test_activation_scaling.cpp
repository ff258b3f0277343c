// Activation-aware scaling (quant/activation_scaling.hpp): power-of-two scales from the
// statistics, a fold that leaves the float model's outputs bit for bit unchanged, row scaling
// that leaves the codes unchanged, and a search that never does worse than no scaling.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "qforge/core/half.hpp"
#include "qforge/quant/activation_scaling.hpp"
#include "qforge/quant/quantize.hpp"

using namespace qforge;

namespace {

std::uint64_t mix(std::uint64_t& x) {
    x += 0x9E3779B97F4A7C15ull;
    std::uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/// bf16 weights [rows, cols] with a heavy column or two (what makes scaling worth it).
std::vector<std::uint16_t> bf16_weights(std::int64_t rows, std::int64_t cols, std::uint64_t seed) {
    std::vector<std::uint16_t> w(static_cast<std::size_t>(rows * cols));
    for (std::size_t i = 0; i < w.size(); ++i) {
        const double u = static_cast<double>(mix(seed) >> 11) / 9007199254740992.0 - 0.5;
        w[i] = float_to_bf16(static_cast<float>(0.05 * u * (i % static_cast<std::size_t>(cols) == 3 ? 8 : 1)));
    }
    return w;
}

tensor_view view(const std::vector<std::uint16_t>& w, shape_t shape, const char* name) {
    return {name, dtype::BF16, std::move(shape), std::as_bytes(std::span<const std::uint16_t>(w))};
}

std::vector<float> floats(const owned_tensor& t) {
    std::vector<float> f(static_cast<std::size_t>(t.view().numel()));
    for (std::size_t i = 0; i < f.size(); ++i) {
        if (t.type == dtype::F32) {
            std::memcpy(&f[i], t.bytes.data() + 4 * i, 4);
        } else {
            std::uint16_t h;
            std::memcpy(&h, t.bytes.data() + 2 * i, 2);
            f[i] = bf16_to_float(h);
        }
    }
    return f;
}

/// A mean-square profile with a few large columns, as activations have.
std::vector<float> activation_profile(std::int64_t cols) {
    std::vector<float> m(static_cast<std::size_t>(cols));
    for (std::int64_t k = 0; k < cols; ++k) m[k] = k % 16 == 5 ? 400.0f : 0.5f + 0.01f * static_cast<float>(k % 7);
    return m;
}

}  // namespace

TEST_CASE("activation scaling: scales are powers of two, 2^round(alpha/2 log2 m - centre)") {
    const std::vector<float> m = {1, 4, 16, 64, 0};  // log2 m / 2 = 0, 1, 2, 3; the unreached column keeps the centre
    const auto s = detail::power_of_two_scales(m, 1.0, 16);
    CHECK(s == std::vector<float>{0.25f, 0.5f, 2.0f, 4.0f, 1.0f});  // centre 1.5; std::round takes halves away from 0
    CHECK(detail::power_of_two_scales(m, 0.0, 16) == std::vector<float>(5, 1.0f));
    const auto clamped = detail::power_of_two_scales(std::vector<float>{1e-30f, 1e30f}, 1.0, 16);
    CHECK(clamped == std::vector<float>{std::ldexp(1.0f, -16), std::ldexp(1.0f, 16)});
}

TEST_CASE("activation scaling: the fold into the norm weight leaves the float outputs bit for bit unchanged") {
    const std::int64_t n = 24, k = 32;
    const auto w = bf16_weights(n, k, 1);
    std::vector<std::uint16_t> g(static_cast<std::size_t>(k));
    for (std::int64_t i = 0; i < k; ++i) g[i] = float_to_bf16(0.7f + 0.05f * static_cast<float>(i % 9));
    const auto s = detail::power_of_two_scales(activation_profile(k), 0.6, 16);
    const owned_tensor w2 = scale_columns(view(w, {n, k}, "q_proj"), s);
    const owned_tensor g2 = unscale_rows(view(g, {k}, "input_layernorm"), s);
    CHECK(g2.type == dtype::BF16);  // stays in the checkpoint's dtype
    const std::vector<float> wf = floats(owned_tensor{"", dtype::BF16, {n, k}, std::vector<std::byte>(
                                                          reinterpret_cast<const std::byte*>(w.data()),
                                                          reinterpret_cast<const std::byte*>(w.data() + w.size()))});
    const std::vector<float> w2f = floats(w2), g2f = floats(g2);
    std::uint64_t seed = 9;
    for (int t = 0; t < 8; ++t) {  // y = W (g * xhat) and y' = W' (g' * xhat), same order of operations
        std::vector<float> xhat(static_cast<std::size_t>(k));
        for (auto& x : xhat) x = static_cast<float>(static_cast<double>(mix(seed) >> 11) / 9007199254740992.0 - 0.5);
        for (std::int64_t r = 0; r < n; ++r) {
            float y = 0, y2 = 0;
            for (std::int64_t c = 0; c < k; ++c) {
                y += wf[r * k + c] * (bf16_to_float(g[c]) * xhat[c]);
                y2 += w2f[r * k + c] * (g2f[c] * xhat[c]);
            }
            std::uint32_t a, b;
            std::memcpy(&a, &y, 4);
            std::memcpy(&b, &y2, 4);
            CHECK(a == b);
        }
    }
}

TEST_CASE("activation scaling: rows divided by powers of two quantize to the same codes") {
    // down_proj's scales are divided out of up_proj's rows: that must not change up_proj's codes.
    const std::int64_t n = 32, k = 64;
    const auto w = bf16_weights(n, k, 2);
    const auto s = detail::power_of_two_scales(activation_profile(n), 0.8, 16);
    const owned_tensor up2 = unscale_rows(view(w, {n, k}, "up_proj"), s);
    for (const scale_policy p : {scale_policy::gptq_absmax, scale_policy::seed_search, scale_policy::minmax, scale_policy::mse}) {
        CAPTURE(static_cast<int>(p));
        quant_options o;
        o.bits = 4;
        o.group_size = 32;
        o.symmetric = p == scale_policy::gptq_absmax || p == scale_policy::seed_search;
        o.policy = p;
        const quantized_tensor a = quantize(view(w, {n, k}, "up_proj"), o), b = quantize(up2.view(), o);
        CHECK(a.codes == b.codes);
        CHECK(a.zeros == b.zeros);
    }
}

TEST_CASE("activation scaling: the search lowers the weighted output error, and never raises it") {
    const std::int64_t n = 48, k = 64;
    const auto q = bf16_weights(n, k, 3), kk = bf16_weights(16, k, 4);
    const std::vector<tensor_view> parts = {view(q, {n, k}, "q_proj"), view(kk, {16, k}, "k_proj")};
    activation_scaling_options o;
    o.quant.bits = 4;
    o.quant.group_size = 32;
    o.quant.symmetric = false;
    o.quant.policy = scale_policy::minmax;
    const auto m = activation_profile(k);
    const activation_scales r = search_activation_scales(parts, m, o);
    CHECK(r.alpha > 0);
    CHECK(r.error < 0.9 * r.error_unscaled);
    for (float s : r.scale) CHECK(std::exp2(std::round(std::log2(s))) == s);

    // With the same statistic in every column no scale helps: alpha stays 0, s = 1.
    const activation_scales flat = search_activation_scales(parts, std::vector<float>(static_cast<std::size_t>(k), 2.0f), o);
    CHECK(flat.alpha == 0);
    CHECK(flat.error == flat.error_unscaled);
    CHECK(flat.scale == std::vector<float>(static_cast<std::size_t>(k), 1.0f));

    CHECK_THROWS_AS(search_activation_scales(parts, std::vector<float>(8, 1.0f), o), shape_error);
    auto bad = m;
    bad[3] = -1;
    CHECK_THROWS_AS(search_activation_scales(parts, bad, o), shape_error);
}
