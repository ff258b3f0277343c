// Round trips between layouts through the repack path (read -> prepare -> pack), in memory:
// identical bytes within a layout, identical decoded weights across layouts, and every
// refusal names its tensor and group.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "qforge/convert/repack.hpp"
#include "qforge/convert/repack_transpose.hpp"
#include "repack/repack_test_support.hpp"

using namespace qforge;
using namespace repack_test;

namespace {

store store_of(const std::vector<owned_tensor>& ts) {
    store st;
    for (const auto& t : ts) st.add(t);
    return st;
}

bool same_tensors(const std::vector<owned_tensor>& a, const std::vector<owned_tensor>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i].name != b[i].name || a[i].type != b[i].type || a[i].shape != b[i].shape || a[i].bytes != b[i].bytes) return false;
    return true;
}

std::vector<owned_tensor> hop(const std::vector<owned_tensor>& in, const std::string& prefix, const layer_scheme& from,
                              const repack_target& to, quantized_tensor* seen = nullptr) {
    store st = store_of(in);
    quantized_tensor q = read_quantized(make_tensor_source(st.views, "src"), prefix, from);
    q = repack_prepare(std::move(q), to);
    if (seen) *seen = q;
    return repack_pack(q, prefix, to);
}

layer_scheme gptq_scheme(int bits, std::int64_t g, bool sym, bool v2) {
    layer_scheme s;
    s.format = repack_source_format::gptq;
    s.gptq = {bits, g, sym, v2};
    return s;
}
layer_scheme ct_scheme(int bits, std::int64_t g, bool sym, ct_packing p) {
    layer_scheme s;
    s.format = repack_source_format::ct_packed;
    s.ct = {bits, sym, g};
    s.packing = p;
    return s;
}
layer_scheme awq_scheme(std::int64_t g) {
    layer_scheme s;
    s.format = repack_source_format::awq;
    s.awq = {4, g};
    return s;
}
repack_target target(output_format f, dtype model = dtype::F16, ct_packing p = ct_packing::dense_v0_18) {
    repack_target t;
    t.format = f;
    t.model_dtype = model;
    t.packing = p;
    return t;
}

}  // namespace

TEST_CASE("GPTQ -> compressed-tensors -> GPTQ: identical bytes, every bit width, sym and asym, v1 and v2") {
    const std::string p = "model.layers.0.mlp.up_proj";
    for (int bits : {2, 3, 4, 8}) {
        for (bool sym : {true, false}) {
            for (bool v2 : {false, true}) {
                CAPTURE(bits);
                CAPTURE(sym);
                CAPTURE(v2);
                // v1 cannot hold zero 0, so the v1 source has none.
                quantized_tensor q = random_qt(64, 128, bits, 32, sym, dtype::F16, 100u + static_cast<unsigned>(bits), v2);
                q.name = p;
                const auto fmt = v2 ? output_format::gptq_v2 : output_format::gptq;
                const auto original = repack_pack(repack_prepare(q, target(fmt)), p, target(fmt));
                quantized_tensor mid;
                const auto ct = hop(original, p, gptq_scheme(bits, 32, sym, v2), target(output_format::compressed_tensors), &mid);
                CHECK(same_qt(mid, q));
                const auto back = hop(ct, p, ct_scheme(bits, 32, sym, ct_packing::dense_v0_18), target(fmt));
                CHECK(same_tensors(back, original));
            }
        }
    }
}

TEST_CASE("GPTQ act-order (non-monotonic g_idx) survives compressed-tensors and is refused by AWQ") {
    const std::string p = "model.layers.1.self_attn.o_proj";
    quantized_tensor q = random_qt(64, 128, 4, 32, true, dtype::F16, 9);
    q.name = p;
    q.g_idx.resize(128);
    for (int k = 0; k < 128; ++k) q.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>((k * 37) % 128 / 32);
    const auto original = repack_pack(repack_prepare(q, target(output_format::gptq)), p, target(output_format::gptq));
    const auto ct = hop(original, p, gptq_scheme(4, 32, true, false), target(output_format::compressed_tensors));
    bool has_g_idx = false;
    for (const auto& t : ct) has_g_idx = has_g_idx || t.name == p + ".weight_g_idx";
    CHECK(has_g_idx);
    CHECK(same_tensors(hop(ct, p, ct_scheme(4, 32, true, ct_packing::dense_v0_18), target(output_format::gptq)), original));
    try {
        (void)hop(original, p, gptq_scheme(4, 32, true, false), target(output_format::awq));
        FAIL("AWQ accepted an act-order tensor");
    } catch (const unsupported_error& e) {
        CHECK(e.tensor() == p);
        CHECK(std::string(e.what()).find("AWQ has no g_idx") != std::string::npos);
    }
}

TEST_CASE("AWQ -> GPTQ v2 -> AWQ: identical bytes; -> compressed-tensors asym decodes the same") {
    const std::string p = "model.layers.2.mlp.down_proj";
    quantized_tensor q = random_qt(64, 256, 4, 64, false, dtype::F16, 21);
    q.zeros[0] = 0;  // AWQ and v2 store a zero of 0; v1 could not
    q.name = p;
    const auto original = awq_layout<4>().pack(q, p);
    quantized_tensor got;
    const auto v2 = hop(original, p, awq_scheme(64), target(output_format::gptq_v2), &got);
    CHECK(same_qt(got, q));
    const auto back = hop(v2, p, gptq_scheme(4, 64, false, true), target(output_format::awq));
    CHECK(same_tensors(back, original));

    quantized_tensor via_ct;
    const auto ct = hop(original, p, awq_scheme(64), target(output_format::compressed_tensors));
    store st = store_of(ct);
    via_ct = read_quantized(make_tensor_source(st.views), p, ct_scheme(4, 64, false, ct_packing::dense_v0_18));
    CHECK(same_decoded(via_ct, q));
    CHECK(same_tensors(hop(ct, p, ct_scheme(4, 64, false, ct_packing::dense_v0_18), target(output_format::awq)), original));

    SUBCASE("AWQ -> GPTQ v1 refuses the zero point 0, naming tensor and group") {
        try {
            (void)hop(original, p, awq_scheme(64), target(output_format::gptq));
            FAIL("v1 accepted zero 0");
        } catch (const unsupported_error& e) {
            CHECK(std::string(e.what()).find("GPTQ v1 cannot store zero point 0 found in model.layers.2.mlp.down_proj group 0") !=
                  std::string::npos);
        }
    }
}

TEST_CASE("compressed-tensors naive -> packed: identical decoded weights; packed -> packed identical bytes") {
    const std::string p = "model.layers.0.self_attn.k_proj";
    for (int bits = 2; bits <= 8; ++bits) {
        for (ct_packing packing : {ct_packing::padded_v0_12, ct_packing::dense_v0_18}) {
            CAPTURE(bits);
            quantized_tensor q = random_qt(24, 96, bits, 32, false, dtype::BF16, 300u + static_cast<unsigned>(bits));
            q.name = p;
            store st;
            std::vector<std::int8_t> w(q.codes.size()), z(q.zeros.size());
            const int half = 1 << (bits - 1);
            for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::int8_t>(q.codes[i] - half);
            for (std::size_t i = 0; i < z.size(); ++i) z[i] = static_cast<std::int8_t>(q.zeros[i] - half);
            st.add(make(p + ".weight", dtype::I8, {24, 96}, w));
            st.add(make(p + ".weight_scale", dtype::BF16, {24, 3}, q.scales));
            st.add(make(p + ".weight_zero_point", dtype::I8, {24, 3}, z));
            layer_scheme naive;
            naive.format = repack_source_format::ct_naive;
            naive.ct = {bits, false, 32};
            const auto t = target(output_format::compressed_tensors, dtype::BF16, packing);
            const auto packed = hop({st.owned.at(p + ".weight"), st.owned.at(p + ".weight_scale"), st.owned.at(p + ".weight_zero_point")}, p,
                                    naive, t);
            store ps = store_of(packed);
            const quantized_tensor back = read_quantized(make_tensor_source(ps.views), p, ct_scheme(bits, 32, false, packing));
            CHECK(same_decoded(back, q));
            CHECK(same_qt(back, q));
            CHECK(same_tensors(hop(packed, p, ct_scheme(bits, 32, false, packing), t), packed));
        }
    }
}

TEST_CASE("scale dtype changes only when every scale converts exactly") {
    const std::string p = "model.layers.0.mlp.gate_proj";
    quantized_tensor q = random_qt(32, 64, 4, 32, true, dtype::BF16, 5);
    q.name = p;
    // BF16 scales of normal magnitude are exact in F16 (7 < 10 mantissa bits): GPTQ takes them.
    const auto gptq = repack_prepare(q, target(output_format::gptq));
    CHECK(gptq.scale_dtype == dtype::F16);
    CHECK(same_decoded(gptq, q));
    // F16 scales with more than 7 mantissa bits do not fit a BF16 model's compressed-tensors.
    quantized_tensor f = random_qt(32, 64, 4, 32, true, dtype::F16, 6);
    f.name = p;
    f.scales[5] = float_to_fp16(0.0123f);
    try {
        (void)repack_prepare(f, target(output_format::compressed_tensors, dtype::BF16));
        FAIL("inexact scale conversion accepted");
    } catch (const unsupported_error& e) {
        CHECK(std::string(e.what()).find("not exactly representable in BF16") != std::string::npos);
        CHECK(std::string(e.what()).find(p + " group") != std::string::npos);
    }
    // A tiny BF16 scale (below F16's range) is refused for GPTQ.
    q.scales[3] = float_to_bf16(1e-9f);
    CHECK_THROWS_AS((void)repack_prepare(q, target(output_format::gptq)), unsupported_error);
}

TEST_CASE("bits a target cannot store are refused by name") {
    quantized_tensor q = random_qt(32, 64, 3, 32, false, dtype::F16, 8, false);
    q.name = "m.v_proj";
    CHECK_THROWS_WITH_AS((void)repack_prepare(q, target(output_format::awq)), doctest::Contains("AWQ stores 4 bits only; m.v_proj has 3-bit codes"),
                         unsupported_error);
    quantized_tensor q5 = random_qt(32, 64, 5, 32, false, dtype::F16, 8, false);
    q5.name = "m.v_proj";
    CHECK_THROWS_WITH_AS((void)repack_prepare(q5, target(output_format::gptq_v2)), doctest::Contains("GPTQ stores 2, 3, 4 or 8 bits"),
                         unsupported_error);
    CHECK_NOTHROW((void)repack_prepare(q5, target(output_format::compressed_tensors, dtype::F16)));
}

TEST_CASE("fake-quant QAT layer -> compressed-tensors decodes to the input weights exactly") {
    const std::string p = "model.layers.0.mlp.up_proj";
    for (dtype wt : {dtype::BF16, dtype::F16}) {
        for (int bits : {2, 3, 4, 5, 8}) {
            CAPTURE(bits);
            quantized_tensor q = random_qt(32, 128, bits, 64, false, wt, 50u + static_cast<unsigned>(bits));
            store st;
            std::vector<std::uint16_t> w(q.codes.size()), z(q.zeros.size());
            for (std::int64_t n = 0; n < q.rows; ++n)
                for (std::int64_t k = 0; k < q.cols; ++k) {
                    const float v = q.dequantized(n, k);
                    w[static_cast<std::size_t>(n * q.cols + k)] = wt == dtype::BF16 ? float_to_bf16(v) : float_to_fp16(v);
                }
            for (std::size_t i = 0; i < z.size(); ++i)
                z[i] = wt == dtype::BF16 ? float_to_bf16(static_cast<float>(q.zeros[i])) : float_to_fp16(static_cast<float>(q.zeros[i]));
            st.add(make(p + ".weight", wt, {32, 128}, w));
            st.add(make(p + ".weight_scale", wt, {32, 2}, q.scales));
            st.add(make(p + ".weight_zero_point", wt, {32, 2}, z));
            layer_scheme fq;
            fq.format = repack_source_format::fake_quant;
            fq.fake = {bits, false};
            const auto t = target(output_format::compressed_tensors, wt);
            const auto packed = hop({st.owned.at(p + ".weight"), st.owned.at(p + ".weight_scale"), st.owned.at(p + ".weight_zero_point")}, p,
                                    fq, t);
            store ps = store_of(packed);
            const quantized_tensor back = read_quantized(make_tensor_source(ps.views), p, ct_scheme(bits, 64, false, ct_packing::dense_v0_18));
            for (std::int64_t n = 0; n < q.rows; ++n)
                for (std::int64_t k = 0; k < q.cols; ++k) {
                    const float d = back.dequantized(n, k);
                    const std::uint16_t pat = wt == dtype::BF16 ? float_to_bf16(d) : float_to_fp16(d);
                    REQUIRE(pat == w[static_cast<std::size_t>(n * q.cols + k)]);
                }
        }
    }
}

TEST_CASE("word-level GPTQ <-> compressed-tensors repack is byte-identical to unpack + pack") {
    const std::string p = "model.layers.5.mlp.up_proj";
    for (int bits : {2, 3, 4, 8}) {
        for (bool sym : {true, false}) {
            for (bool act_order : {false, true}) {
                for (ct_packing packing : {ct_packing::padded_v0_12, ct_packing::dense_v0_18}) {
                    CAPTURE(bits);
                    CAPTURE(sym);
                    CAPTURE(act_order);
                    quantized_tensor q = random_qt(96, 256, bits, 64, sym, dtype::F16, 700u + static_cast<unsigned>(bits), false);
                    q.name = p;
                    if (act_order) {
                        q.g_idx.resize(256);
                        for (int k = 0; k < 256; ++k) q.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>((k * 97) % 256 / 64);
                    }
                    const auto gt = target(output_format::gptq);
                    const auto ct = target(output_format::compressed_tensors, dtype::F16, packing);
                    const auto gptq = repack_pack(repack_prepare(q, gt), p, gt);
                    store gs = store_of(gptq);
                    const auto slow_ct = repack_pack(repack_prepare(read_quantized(make_tensor_source(gs.views), p, gptq_scheme(bits, 64, sym, false)), ct), p, ct);
                    std::vector<owned_tensor> fast_ct;
                    const bool fast = repack_words(make_tensor_source(gs.views), p, gptq_scheme(bits, 64, sym, false), ct, fast_ct);
                    if (bits == 3 && packing == ct_packing::padded_v0_12) {
                        CHECK_FALSE(fast);  // padded 3-bit words differ from GPTQ's
                        continue;
                    }
                    REQUIRE(fast);
                    CHECK(same_tensors(fast_ct, slow_ct));
                    store cs = store_of(fast_ct);
                    std::vector<owned_tensor> back = slow_ct;  // reused storage of another shape
                    REQUIRE(repack_words(make_tensor_source(cs.views), p, ct_scheme(bits, 64, sym, packing), gt, back));
                    CHECK(same_tensors(back, gptq));
                    CHECK(same_tensors(repack_module(make_tensor_source(cs.views), p, ct_scheme(bits, 64, sym, packing), gt), gptq));
                }
            }
        }
    }
}

TEST_CASE("word-level path refuses what the general path refuses") {
    const std::string p = "model.layers.3.mlp.up_proj";
    quantized_tensor q = random_qt(64, 128, 4, 32, false, dtype::F16, 77, false);
    q.name = p;
    q.zeros[2 * 4 + 1] = 0;  // row 2, group 1
    const auto v2 = target(output_format::gptq_v2);
    store gs = store_of(repack_pack(repack_prepare(q, v2), p, v2));
    const auto ct = target(output_format::compressed_tensors);
    std::vector<owned_tensor> ct_out;
    REQUIRE(repack_words(make_tensor_source(gs.views), p, gptq_scheme(4, 32, false, true), ct, ct_out));
    store cs = store_of(ct_out);
    CHECK_THROWS_WITH_AS(repack_module(make_tensor_source(cs.views, "in"), p, ct_scheme(4, 32, false, ct_packing::dense_v0_18), target(output_format::gptq)),
                         doctest::Contains("GPTQ v1 cannot store zero point 0 found in model.layers.3.mlp.up_proj group 1 (row 2)"), unsupported_error);
}

TEST_CASE("transpose_words: every shape class (tiles, 4x4 blocks and scalar edges)") {
    for (const auto& shape : {std::pair<std::int64_t, std::int64_t>{1, 1}, {3, 7}, {4, 4}, {5, 300}, {300, 5}, {17, 33}, {260, 18},
                              {18, 520}, {513, 9}, {12, 1030}, {32, 4}, {64, 36}, {48, 1000}, {1024, 8}}) {
        const std::int64_t rows = shape.first, cols = shape.second;
        CAPTURE(rows);
        CAPTURE(cols);
        std::vector<std::uint32_t> src(static_cast<std::size_t>(rows * cols)), buf(src.size() + 16);
        for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint32_t>(i * 2654435761u);
        for (std::size_t shift = 0; shift < 16; ++shift) {  // every offset within a cache line
            CAPTURE(shift);
            std::fill(buf.begin(), buf.end(), 0xDEADBEEF);
            std::uint32_t* dst = buf.data() + shift;
            repack_detail::transpose_words(src.data(), rows, cols, dst);
            bool ok = true;
            for (std::int64_t r = 0; r < rows; ++r)
                for (std::int64_t c = 0; c < cols; ++c) ok = ok && dst[c * rows + r] == src[static_cast<std::size_t>(r * cols + c)];
            for (std::size_t i = 0; i < shift; ++i) ok = ok && buf[i] == 0xDEADBEEF;
            for (std::size_t i = shift + src.size(); i < buf.size(); ++i) ok = ok && buf[i] == 0xDEADBEEF;
            CHECK(ok);
        }
    }
}
