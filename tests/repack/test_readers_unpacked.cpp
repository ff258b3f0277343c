// Readers that need no packing: fake-quantized QAT weights and compressed-tensors naive.
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "qforge/convert/repack_ct_naive.hpp"
#include "qforge/convert/repack_fake_quant.hpp"
#include "repack/repack_test_support.hpp"

using namespace qforge;
using namespace repack_test;

namespace {

/// A merged QAT layer as PEQA/EfficientQAT save it: w = (q - z) * s computed in the model
/// dtype, zero points stored as floats of the model dtype.
void add_fake_quant(store& st, const quantized_tensor& q, dtype wt, const std::string& prefix) {
    std::vector<std::uint16_t> w(q.codes.size());
    std::vector<std::uint16_t> z(q.zeros.size());
    for (std::int64_t n = 0; n < q.rows; ++n)
        for (std::int64_t k = 0; k < q.cols; ++k) {
            const float v = q.dequantized(n, k);
            w[static_cast<std::size_t>(n * q.cols + k)] = wt == dtype::BF16 ? float_to_bf16(v) : float_to_fp16(v);
        }
    for (std::size_t i = 0; i < z.size(); ++i)
        z[i] = wt == dtype::BF16 ? float_to_bf16(static_cast<float>(q.zeros[i])) : float_to_fp16(static_cast<float>(q.zeros[i]));
    st.add(make(prefix + ".weight", wt, {q.rows, q.cols}, w));
    st.add(make(prefix + ".weight_scale", wt, {q.rows, q.groups()}, q.scales));
    st.add(make(prefix + ".weight_zero_point", wt, {q.rows, q.groups()}, z));
}

std::string message_of(auto&& f) {
    try {
        f();
    } catch (const qforge::error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("fake-quant QAT weights: codes recovered exactly for bits 2..8, bf16 and fp16") {
    for (dtype wt : {dtype::BF16, dtype::F16}) {
        for (int bits = 2; bits <= 8; ++bits) {
            CAPTURE(bits);
            quantized_tensor q = random_qt(12, 64, bits, 16, false, wt, 40u + static_cast<unsigned>(bits));
            store st;
            add_fake_quant(st, q, wt, "layer");
            const quantized_tensor got = read_fake_quant(make_tensor_source(st.views, "qat"), "layer", {bits, false});
            CHECK(got.scales == q.scales);
            CHECK(got.zeros == q.zeros);
            CHECK(got.group_size == 16);
            CHECK(got.scale_dtype == wt);
            // 8-bit codes far from the zero can collide in bf16; what must hold is that the
            // decoded weights are the checkpoint's, bit for bit. Below 8 bits the codes match.
            if (bits < 8 || wt == dtype::F16) CHECK(got.codes == q.codes);
            const auto& w = st.owned.at("layer.weight");
            for (std::int64_t n = 0; n < q.rows; ++n)
                for (std::int64_t k = 0; k < q.cols; ++k) {
                    const float d = got.dequantized(n, k);
                    const std::uint16_t pat = wt == dtype::BF16 ? float_to_bf16(d) : float_to_fp16(d);
                    std::uint16_t orig;
                    std::memcpy(&orig, w.bytes.data() + 2 * (n * q.cols + k), 2);
                    REQUIRE(pat == orig);
                }
        }
    }
}

TEST_CASE("fake-quant: signed (compressed-tensors) zero points map to code space") {
    quantized_tensor q = random_qt(4, 32, 4, 32, false, dtype::BF16, 7);
    store st;
    add_fake_quant(st, q, dtype::BF16, "p");
    std::vector<std::int8_t> zs(q.zeros.size());
    for (std::size_t i = 0; i < zs.size(); ++i) zs[i] = static_cast<std::int8_t>(q.zeros[i] - 8);
    st.add(make("p.weight_zero_point", dtype::I8, {4, 1}, zs));
    const quantized_tensor got = read_fake_quant(make_tensor_source(st.views), "p", {4, true});
    CHECK(got.zeros == q.zeros);
    CHECK(got.codes == q.codes);
}

TEST_CASE("fake-quant refusals: fractional zero point, off-grid weight, scale of another dtype") {
    quantized_tensor q = random_qt(8, 64, 4, 32, false, dtype::BF16, 11);
    SUBCASE("fractional zero point") {
        store st;
        add_fake_quant(st, q, dtype::BF16, "m.q_proj");
        auto& z = st.owned.at("m.q_proj.weight_zero_point");
        const std::uint16_t half = float_to_bf16(3.5f);
        std::memcpy(z.bytes.data() + 2 * 5, &half, 2);
        st.refresh();
        const std::string msg = message_of([&] { (void)read_fake_quant(make_tensor_source(st.views, "ckpt"), "m.q_proj", {4, false}); });
        CHECK(msg.find("m.q_proj.weight_zero_point") != std::string::npos);
        CHECK(msg.find("3.5 is not an integer") != std::string::npos);
        CHECK(msg.find("row 2 group 1") != std::string::npos);
        CHECK_THROWS_AS(read_fake_quant(make_tensor_source(st.views), "m.q_proj", {4, false}), unsupported_error);
    }
    SUBCASE("off-grid weight names the group and the worst deviation") {
        store st;
        add_fake_quant(st, q, dtype::BF16, "m.q_proj");
        auto& w = st.owned.at("m.q_proj.weight");
        // Move element (row 3, column 40 -> group 1) half a scale step off its grid point.
        const float s = q.scale(3, 1);
        const float off = q.dequantized(3, 40) + 0.5f * s;
        const std::uint16_t pat = float_to_bf16(off);
        std::memcpy(w.bytes.data() + 2 * (3 * 64 + 40), &pat, 2);
        st.refresh();
        const std::string msg = message_of([&] { (void)read_fake_quant(make_tensor_source(st.views, "ckpt"), "m.q_proj", {4, false}); });
        CHECK(msg.find("tensor 'm.q_proj.weight'") != std::string::npos);
        CHECK(msg.find("not on its 4-bit grid") != std::string::npos);
        CHECK(msg.find("row 3 group 1") != std::string::npos);
        CHECK(msg.find("worst deviation") != std::string::npos);
    }
    SUBCASE("scale of another dtype") {
        store st;
        add_fake_quant(st, q, dtype::BF16, "m.q_proj");
        std::vector<float> s32(q.scales.size());
        for (std::size_t i = 0; i < s32.size(); ++i) s32[i] = bf16_to_float(q.scales[i]);
        st.add(make("m.q_proj.weight_scale", dtype::F32, {8, 2}, s32));
        const std::string msg = message_of([&] { (void)read_fake_quant(make_tensor_source(st.views), "m.q_proj", {4, false}); });
        CHECK(msg.find("scale dtype F32 differs from the weight dtype BF16") != std::string::npos);
    }
    SUBCASE("zero point outside the grid") {
        store st;
        add_fake_quant(st, q, dtype::BF16, "m.q_proj");
        auto& z = st.owned.at("m.q_proj.weight_zero_point");
        const std::uint16_t big = float_to_bf16(16.0f);
        std::memcpy(z.bytes.data(), &big, 2);
        st.refresh();
        CHECK_THROWS_AS(read_fake_quant(make_tensor_source(st.views), "m.q_proj", {4, false}), unsupported_error);
    }
}

TEST_CASE("compressed-tensors naive-quantized: signed int8 codes and zero points") {
    quantized_tensor q = random_qt(6, 40, 4, 16, false, dtype::BF16, 5);  // 40 = 2.5 groups: ceil
    store st;
    std::vector<std::int8_t> w(q.codes.size()), z(q.zeros.size());
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::int8_t>(q.codes[i] - 8);
    for (std::size_t i = 0; i < z.size(); ++i) z[i] = static_cast<std::int8_t>(q.zeros[i] - 8);
    st.add(make("l.weight", dtype::I8, {6, 40}, w));
    st.add(make("l.weight_scale", dtype::BF16, {6, 3}, q.scales));
    st.add(make("l.weight_zero_point", dtype::I8, {6, 3}, z));
    const quantized_tensor got = read_ct_naive(make_tensor_source(st.views), "l", {4, false, 16});
    CHECK(got.codes == q.codes);
    CHECK(got.zeros == q.zeros);
    CHECK(got.scales == q.scales);
    CHECK_FALSE(got.symmetric);

    SUBCASE("symmetric: no zero point, zeros are 2^(b-1)") {
        const quantized_tensor s = read_ct_naive(make_tensor_source(st.views), "l", {4, true, 16});
        CHECK(s.symmetric);
        for (auto zz : s.zeros) CHECK(zz == 8);
    }
    SUBCASE("a code outside the bit range is a format error") {
        w[3] = 9;
        st.add(make("l.weight", dtype::I8, {6, 40}, w));
        CHECK_THROWS_AS(read_ct_naive(make_tensor_source(st.views), "l", {4, false, 16}), format_error);
    }
    SUBCASE("act-order g_idx kept when not the identity, dropped when it is") {
        std::vector<std::int32_t> gi(40);
        for (int k = 0; k < 40; ++k) gi[static_cast<std::size_t>(k)] = k / 16;
        st.add(make("l.weight_g_idx", dtype::I32, {40}, gi));
        CHECK(read_ct_naive(make_tensor_source(st.views), "l", {4, false, 16}).g_idx.empty());
        std::swap(gi[0], gi[39]);
        st.add(make("l.weight_g_idx", dtype::I32, {40}, gi));
        CHECK(read_ct_naive(make_tensor_source(st.views), "l", {4, false, 16}).g_idx == gi);
    }
    SUBCASE("an F32 scale is refused, not cast") {
        std::vector<float> s32(q.scales.size(), 0.01f);
        st.add(make("l.weight_scale", dtype::F32, {6, 3}, s32));
        CHECK_THROWS_AS(read_ct_naive(make_tensor_source(st.views), "l", {4, false, 16}), unsupported_error);
    }
}
