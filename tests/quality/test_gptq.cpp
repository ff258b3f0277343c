// GPTQ solver: error compensation beats round-to-nearest on correlated inputs, identity
// Hessians reproduce round-to-nearest exactly, act-order decodes through g_idx, and bad
// Hessians are refused with a named error.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "qforge/layout/gptq.hpp"
#include "qforge/quant/gptq_solver.hpp"
#include "qforge/quant/least_squares.hpp"
#include "qforge/quant/quantize.hpp"
#include "quality/quality_support.hpp"
#include "support/synthetic.hpp"

using namespace qforge;
using qforge::quality_test::ar_inputs;
using qforge::quality_test::hessian_of;
using qforge::quality_test::output_error;

namespace {

constexpr std::int64_t N = 48;
constexpr std::int64_t K = 256;
constexpr std::size_t M = 768;

struct layer {
    std::vector<float> w = testing::student_t_floats(static_cast<std::size_t>(N * K), 91);
    std::vector<double> h = hessian_of(ar_inputs(M, K, 0.9, 17), M, K);
    tensor_view view() const { return testing::view_of(w, N, K, dtype::F32, "layers.0.mlp.down_proj.weight"); }
};

const layer& fixture() {
    static const layer l;
    return l;
}

gptq_solver_options opts(bool symmetric, scale_policy p, bool act_order) {
    gptq_solver_options o;
    o.quant.bits = 4;
    o.quant.group_size = 128;
    o.quant.symmetric = symmetric;
    o.quant.policy = p;
    o.act_order = act_order;
    return o;
}

bool same_bytes(const quantized_tensor& a, const quantized_tensor& b) {
    return a.codes == b.codes && a.scales == b.scales && a.zeros == b.zeros && a.g_idx == b.g_idx;
}

}  // namespace

TEST_CASE("GPTQ output error is at least 30% below round-to-nearest at 4 bits, group 128") {
    const layer& l = fixture();
    for (bool sym : {true, false}) {
        const scale_policy p = sym ? scale_policy::gptq_absmax : scale_policy::minmax;
        quant_options rtn_opt = opts(sym, p, false).quant;
        const double rtn = output_error(l.w, quantize(l.view(), rtn_opt), l.h);
        for (bool act : {false, true}) {
            CAPTURE(sym);
            CAPTURE(act);
            gptq_solver_report rep;
            const quantized_tensor q = gptq_quantize(l.view(), l.h, opts(sym, p, act), {}, &rep);
            q.validate();
            const double err = output_error(l.w, q, l.h);
            MESSAGE("sym " << sym << " act_order " << act << ": gptq/rtn output error = " << err / rtn);
            CHECK(err < 0.7 * rtn);
            CHECK(rep.attempts == 1);
            CHECK(rep.loss > 0.0);
        }
    }
}

TEST_CASE("GPTQ with the least-squares policy choosing each group's grid") {
    const layer& l = fixture();
    gptq_solver_options o = opts(false, scale_policy::custom, true);
    o.quant.custom = make_lsq_policy();
    const double rtn = output_error(l.w, quantize(l.view(), opts(false, scale_policy::minmax, false).quant), l.h);
    const double err = output_error(l.w, gptq_quantize(l.view(), l.h, o), l.h);
    CHECK(err < 0.7 * rtn);
}

TEST_CASE("GPTQ with H = identity is round-to-nearest, code for code") {
    const layer& l = fixture();
    std::vector<double> eye(static_cast<std::size_t>(K * K), 0.0);
    for (std::int64_t i = 0; i < K; ++i) eye[static_cast<std::size_t>(i * K + i)] = 1.0;
    for (bool sym : {true, false})
        for (bool act : {false, true})
            for (int group : {32, 128, -1}) {
                CAPTURE(sym);
                CAPTURE(act);
                CAPTURE(group);
                gptq_solver_options o = opts(sym, sym ? scale_policy::gptq_absmax : scale_policy::minmax, act);
                o.quant.group_size = group;
                const quantized_tensor g = gptq_quantize(l.view(), eye, o);
                const quantized_tensor r = quantize(l.view(), o.quant);
                CHECK(g.codes == r.codes);
                CHECK(g.scales == r.scales);
                CHECK(g.zeros == r.zeros);
                // Equal diagonals keep the column order, so act-order's g_idx is k / g.
                for (std::int64_t k = 0; k < K; ++k) CHECK(g.group_of(k) == r.group_of(k));
            }
    // And with the least-squares policy (a custom policy through both drivers).
    gptq_solver_options o = opts(false, scale_policy::custom, false);
    o.quant.custom = make_lsq_policy();
    CHECK(same_bytes(gptq_quantize(l.view(), eye, o), quantize(l.view(), o.quant)));
}

TEST_CASE("GPTQ with a diagonal H (an imatrix) is the importance-weighted round-to-nearest, code for code") {
    // Why qforge does not turn an imatrix into a diagonal Hessian: GPTQ's feedback runs through
    // the off-diagonal terms of H^-1, so under diag(m) it adds nothing to weighting the scale
    // search by m, which --imatrix already does (README, "An importance matrix from llama.cpp").
    const layer& l = fixture();
    std::vector<double> diag(static_cast<std::size_t>(K * K), 0.0);
    std::vector<float> m(static_cast<std::size_t>(K));
    for (std::int64_t i = 0; i < K; ++i) {
        m[i] = i % 16 == 5 ? 400.0f : 0.5f + 0.01f * static_cast<float>(i % 7);
        diag[static_cast<std::size_t>(i * K + i)] = m[i];
    }
    for (bool sym : {true, false})
        for (int group : {32, 128})
            for (double damp : {0.0, 0.01}) {  // dampening adds to the diagonal only
                CAPTURE(sym);
                CAPTURE(group);
                CAPTURE(damp);
                gptq_solver_options o = opts(sym, scale_policy::mse, false);
                o.quant.group_size = group;
                o.quant.importance = m;
                o.damp_percent = damp;
                CHECK(same_bytes(gptq_quantize(l.view(), diag, o), quantize(l.view(), o.quant)));
            }
}

TEST_CASE("act-order: g_idx groups columns by descending diag(H) and decodes through the GPTQ layout") {
    const layer& l = fixture();
    const quantized_tensor q = gptq_quantize(l.view(), l.h, opts(true, scale_policy::gptq_absmax, true));
    REQUIRE(q.g_idx.size() == static_cast<std::size_t>(K));
    // Each group holds exactly group_size columns, and its columns have the largest diagonals first.
    std::vector<int> count(static_cast<std::size_t>(q.groups()), 0);
    for (std::int32_t g : q.g_idx) ++count[static_cast<std::size_t>(g)];
    for (int c : count) CHECK(c == 128);
    double min_g0 = 1e300, max_g1 = 0;
    for (std::int64_t k = 0; k < K; ++k) {
        const double d = l.h[static_cast<std::size_t>(k * K + k)];
        if (q.g_idx[static_cast<std::size_t>(k)] == 0) min_g0 = std::min(min_g0, d);
        else max_g1 = std::max(max_g1, d);
    }
    CHECK(min_g0 >= max_g1);
    const bool monotonic = std::is_sorted(q.g_idx.begin(), q.g_idx.end());
    CHECK_FALSE(monotonic);

    // Through the GPTQ checkpoint tensors and back: same codes, scales, zeros and g_idx.
    gptq_layout<4> lay(qforge::gptq_options{gptq_format::v1, dtype::F16, true});
    const std::vector<owned_tensor> packed = lay.pack(q, "model.layers.0.mlp.down_proj");
    std::vector<tensor_view> views;
    for (const auto& t : packed) views.push_back(t.view());
    const quantized_tensor back = lay.unpack(views, "model.layers.0.mlp.down_proj", layer_params{128, true});
    CHECK(back.codes == q.codes);
    CHECK(back.scales == q.scales);
    CHECK(back.zeros == q.zeros);
    for (std::int64_t k = 0; k < K; ++k) CHECK(back.group_of(k) == q.group_of(k));

    // Decoding through g_idx is what makes the result right: ignoring it is far worse.
    const double with = output_error(l.w, back, l.h);
    quantized_tensor ignored = back;
    ignored.g_idx.clear();
    CHECK(with < 0.5 * output_error(l.w, ignored, l.h));
}

TEST_CASE("static groups keep g_idx = k / g under act-order") {
    const layer& l = fixture();
    gptq_solver_options o = opts(true, scale_policy::gptq_absmax, true);
    o.static_groups = true;
    const quantized_tensor q = gptq_quantize(l.view(), l.h, o);
    CHECK(q.g_idx.empty());
    const double rtn = output_error(l.w, quantize(l.view(), o.quant), l.h);
    CHECK(output_error(l.w, q, l.h) < 0.7 * rtn);
}

TEST_CASE("GPTQ is deterministic across thread counts, SIMD paths and block sizes that split groups") {
    const layer& l = fixture();
    const gptq_solver_options o = opts(false, scale_policy::minmax, true);
    const quantized_tensor a = gptq_quantize(l.view(), l.h, o);
    thread_pool pool(3);
    CHECK(same_bytes(a, gptq_quantize(l.view(), l.h, o, pool.executor())));
    for (simd::isa isa : {simd::isa::scalar, simd::isa::avx2, simd::isa::avx512, simd::isa::neon}) {
        if (!simd::available(isa)) continue;
        gptq_solver_options on = o;
        on.quant.isa = isa;
        on.quant.policy = scale_policy::custom;
        on.quant.custom = make_lsq_policy();
        gptq_solver_options ref = on;
        ref.quant.isa = simd::isa::scalar;
        CHECK(same_bytes(gptq_quantize(l.view(), l.h, on), gptq_quantize(l.view(), l.h, ref)));
    }
    gptq_solver_options odd = o;
    odd.block_size = 48;  // blocks end early so no group straddles a block end
    odd.quant.group_size = 64;
    const quantized_tensor b = gptq_quantize(l.view(), l.h, odd);
    b.validate();
    CHECK(output_error(l.w, b, l.h) < 0.7 * output_error(l.w, quantize(l.view(), odd.quant), l.h));
}

TEST_CASE("dead inputs: H_ii = 0 columns quantize to 0 and do not break the factorisation") {
    const layer& l = fixture();
    std::vector<double> h = l.h;
    for (std::int64_t dead : {3, 100, 255}) {
        for (std::int64_t j = 0; j < K; ++j) {
            h[static_cast<std::size_t>(dead * K + j)] = 0.0;
            h[static_cast<std::size_t>(j * K + dead)] = 0.0;
        }
    }
    gptq_solver_report rep;
    const quantized_tensor q = gptq_quantize(l.view(), h, opts(false, scale_policy::minmax, true), {}, &rep);
    CHECK(rep.dead_columns == 3);
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t dead : {3, 100, 255}) CHECK(q.dequantized(n, dead) == 0.0f);
}

TEST_CASE("refusals name the layer and the reason") {
    const layer& l = fixture();
    const gptq_solver_options o = opts(true, scale_policy::gptq_absmax, false);
    // Indefinite: a strongly negative eigenvalue no dampening of 10^6 x mean(diag) repairs.
    std::vector<double> bad(static_cast<std::size_t>(K * K), 0.0);
    for (std::int64_t i = 0; i < K; ++i) bad[static_cast<std::size_t>(i * K + i)] = 1.0;
    bad[1] = bad[static_cast<std::size_t>(K)] = 1e12;
    gptq_solver_options few = o;
    few.damp_retries = 2;
    CHECK_THROWS_WITH_AS(gptq_quantize(l.view(), bad, few),
                         doctest::Contains("not positive definite even with dampening"), format_error);
    CHECK_THROWS_WITH_AS(gptq_quantize(l.view(), bad, few), doctest::Contains("down_proj"), format_error);
    // Wrong shape.
    const std::vector<double> small(16, 1.0);
    const tensor_view hv{"layers.0.mlp.down_proj.hessian", dtype::F64, {4, 4}, std::as_bytes(std::span(small))};
    CHECK_THROWS_AS(gptq_quantize(l.view(), hv, o), shape_error);
    // Negative diagonal and NaN.
    std::vector<double> neg = l.h;
    neg[0] = -1.0;
    CHECK_THROWS_WITH_AS(gptq_quantize(l.view(), neg, o), doctest::Contains("negative Hessian diagonal"), format_error);
    std::vector<double> nan = l.h;
    nan[5] = std::nan("");
    CHECK_THROWS_AS(gptq_quantize(l.view(), nan, o), format_error);
    // A singular but PSD Hessian (rank-deficient X) works thanks to dampening.
    const std::vector<double> x = ar_inputs(64, K, 0.5, 3);  // 64 samples < 256 inputs
    const quantized_tensor q = gptq_quantize(l.view(), hessian_of(x, 64, K), o);
    q.validate();
}
