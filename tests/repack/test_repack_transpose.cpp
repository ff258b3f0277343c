// The word-level repack's kernels and fast path: every transpose variant (portable, SSE2
// streaming, AVX2 streaming) writes the same bytes as a plain loop on odd shapes and at every
// offset within a cache line; the field tests agree with a field-by-field loop; and the fast
// path gives the general path's bytes, or its exact error, on the cases it hands back.
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qforge/convert/repack.hpp"
#include "qforge/convert/repack_transpose.hpp"
#include "repack/repack_test_support.hpp"

using namespace qforge;
using namespace repack_test;

namespace {

using transpose_fn = void (*)(const std::uint32_t*, std::int64_t, std::int64_t, std::uint32_t*);

/// Runs `f` on rows x cols at each word offset of a line; true when every element lands where
/// a plain loop puts it and no guard word around the destination changes.
bool transposes_exactly(transpose_fn f, std::int64_t rows, std::int64_t cols) {
    std::vector<std::uint32_t> src(static_cast<std::size_t>(rows * cols)), buf(src.size() + 32);
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::uint32_t>(i * 2654435761u + 12345u);
    bool ok = true;
    for (std::size_t shift = 0; shift < 16; ++shift) {
        std::fill(buf.begin(), buf.end(), 0xDEADBEEFu);
        std::uint32_t* dst = buf.data() + 8 + shift;
        f(src.data(), rows, cols, dst);
        for (std::int64_t r = 0; r < rows; ++r)
            for (std::int64_t c = 0; c < cols; ++c) ok = ok && dst[c * rows + r] == src[static_cast<std::size_t>(r * cols + c)];
        for (std::size_t i = 0; i < 8 + shift; ++i) ok = ok && buf[i] == 0xDEADBEEFu;
        for (std::size_t i = 8 + shift + src.size(); i < buf.size(); ++i) ok = ok && buf[i] == 0xDEADBEEFu;
    }
    return ok;
}

// Shapes that reach every branch: too small to stream, rows % 16 != 0 (tiled), columns past
// the last whole block (4 for SSE2, 8 for AVX2), passes of 64 rows with a short last pass.
const std::vector<std::pair<std::int64_t, std::int64_t>> shapes = {
    {1, 1}, {3, 7}, {16, 40}, {17, 33}, {32, 3}, {32, 4}, {32, 9}, {48, 17}, {64, 8}, {64, 36}, {80, 100}, {96, 7},
    {128, 64}, {144, 13}, {208, 31}, {300, 5}, {512, 24}, {33, 200}};

const char* forced_isa() {
    const char* f = std::getenv("QFORGE_FORCE_ISA");
    return f ? f : "";
}

}  // namespace

TEST_CASE("word transposes: the tiled, SSE2 and AVX2 paths write identical bytes on odd shapes") {
    for (const auto& shape : shapes) {
        const std::int64_t rows = shape.first, cols = shape.second;
        CAPTURE(rows);
        CAPTURE(cols);
        CHECK(transposes_exactly(&repack_detail::transpose_words_tiled, rows, cols));
        CHECK(transposes_exactly(&repack_detail::transpose_words, rows, cols));
#if defined(__SSE2__)
        CHECK(transposes_exactly(&repack_detail::transpose_words_stream_sse2, rows, cols));
#endif
#if QFORGE_REPACK_AVX2
        if (simd::cpu().avx2) CHECK(transposes_exactly(&repack_detail::transpose_words_stream_avx2, rows, cols));
#endif
    }
    // The dispatcher streams only large matrices: one of 2 MB, against the tiled path.
    CHECK(transposes_exactly(&repack_detail::transpose_words, 256, 2048 + 8));
}

TEST_CASE("word transposes: the AVX2 path is taken where the CPU has it") {
    const std::string_view f = forced_isa();
    const bool allowed = f.empty() || f == "avx2" || f == "avx512";
    CHECK(repack_detail::repack_use_avx2() == (QFORGE_REPACK_AVX2 && simd::cpu().avx2 && allowed));
}

TEST_CASE("16-bit transpose: odd shapes, unaligned source") {
    for (const auto& shape : std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1}, {7, 9}, {8, 8}, {16, 24}, {9, 100}, {33, 17}, {32, 344}}) {
        const std::int64_t rows = shape.first, cols = shape.second;
        CAPTURE(rows);
        CAPTURE(cols);
        for (std::size_t offset : {0, 1, 2, 6}) {
            CAPTURE(offset);
            std::vector<std::byte> raw(static_cast<std::size_t>(rows * cols) * 2 + offset);
            for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::byte>(i * 37u + 11u);
            const std::byte* src = raw.data() + offset;
            std::vector<std::uint16_t> dst(static_cast<std::size_t>(rows * cols) + 8, 0xBEEF);
            repack_detail::transpose_u16(src, rows, cols, dst.data());
            bool ok = true;
            for (std::int64_t r = 0; r < rows; ++r)
                for (std::int64_t c = 0; c < cols; ++c) {
                    std::uint16_t v;
                    std::memcpy(&v, src + 2 * (r * cols + c), 2);
                    ok = ok && dst[static_cast<std::size_t>(c * rows + r)] == v;
                }
            for (std::size_t i = static_cast<std::size_t>(rows * cols); i < dst.size(); ++i) ok = ok && dst[i] == 0xBEEF;
            CHECK(ok);
        }
    }
}

TEST_CASE("field test on words agrees with a loop over the fields") {
    std::mt19937 rng(5);
    for (int b : {2, 4, 8}) {
        const repack_detail::word_fields f(b);
        const std::uint32_t mask = (1u << b) - 1u;
        for (int i = 0; i < 20000; ++i) {
            std::uint32_t w = rng();
            if (i % 3 == 0) w |= f.ones * mask & rng();  // mostly high fields
            if (i % 5 == 0) w &= ~(mask << (b * static_cast<int>(rng() % static_cast<unsigned>(32 / b))));  // one zero field
            const std::uint32_t v = rng() & mask;
            bool loop = false;
            for (int s = 0; s < 32; s += b) loop = loop || ((w >> s) & mask) == v;
            REQUIRE(f.any_field_is(w, f.every(v)) == loop);
        }
    }
}

namespace {

store transpose_store_of(const std::vector<owned_tensor>& ts) {
    store st;
    for (const auto& t : ts) st.add(t);
    return st;
}

bool same_transposed(const std::vector<owned_tensor>& a, const std::vector<owned_tensor>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i].name != b[i].name || a[i].type != b[i].type || a[i].shape != b[i].shape || a[i].bytes != b[i].bytes) return false;
    return true;
}

layer_scheme gptq_in(int bits, std::int64_t g, bool sym, bool v2) {
    layer_scheme s;
    s.format = repack_source_format::gptq;
    s.gptq = {bits, g, sym, v2};
    return s;
}
layer_scheme ct_in(int bits, std::int64_t g, bool sym) {
    layer_scheme s;
    s.format = repack_source_format::ct_packed;
    s.ct = {bits, sym, g};
    s.packing = ct_packing::dense_v0_18;
    return s;
}
repack_target to(output_format f, dtype model = dtype::F16) {
    repack_target t;
    t.format = f;
    t.model_dtype = model;
    return t;
}

/// The general path's result for `s` -> `t`, or its error message.
std::string general(const tensor_source& src, const std::string& p, const layer_scheme& s, const repack_target& t,
                    std::vector<owned_tensor>& out) {
    try {
        out = repack_pack(repack_prepare(read_quantized(src, p, s), t, src.file), p, t);
        return {};
    } catch (const error& e) {
        return e.what();
    }
}

/// repack_words' `info` carries what read + prepare give, codes, scales and zeros aside.
bool same_shape_info(const tensor_source& src, const std::string& p, const layer_scheme& s, const repack_target& t) {
    quantized_tensor info;
    std::vector<owned_tensor> out;
    if (!repack_words(src, p, s, t, out, &info)) return false;
    const quantized_tensor q = repack_prepare(read_quantized(src, p, s), t, src.file);
    return info.name == q.name && info.bits == q.bits && info.rows == q.rows && info.cols == q.cols && info.group_size == q.group_size &&
           info.symmetric == q.symmetric && info.scale_dtype == q.scale_dtype && info.g_idx == q.g_idx;
}

/// repack_module's result (fast path first) or its error message.
std::string module(const tensor_source& src, const std::string& p, const layer_scheme& s, const repack_target& t,
                   std::vector<owned_tensor>& out) {
    try {
        repack_module(src, p, s, t, out);
        return {};
    } catch (const error& e) {
        return e.what();
    }
}

}  // namespace

TEST_CASE("fast path = general path: large layers (streamed), scale dtype changes, shapes and values it hands back") {
    const std::string p = "model.layers.1.self_attn.o_proj";
    struct case_t {
        std::int64_t N, K, g;
        int bits;
        bool sym, v2;
        dtype scale;
        output_format gptq_target;
        dtype ct_model;
        bool fast;  ///< the fast path takes it (else it hands it to the general path)
    };
    const std::vector<case_t> cases = {
        {1024, 2048, 128, 4, true, false, dtype::F16, output_format::gptq, dtype::F16, true},      // streamed qweight
        {1024, 2048, 128, 4, false, false, dtype::F16, output_format::gptq, dtype::F16, true},
        {512, 4096, 128, 8, false, true, dtype::F16, output_format::gptq_v2, dtype::F16, true},
        {64, 512, 64, 2, false, true, dtype::BF16, output_format::gptq_v2, dtype::BF16, true},      // BF16 -> F16 for GPTQ
        {64, 512, 64, 4, true, false, dtype::F16, output_format::gptq, dtype::BF16, false},          // F16 -> BF16: refused
        {100, 256, 64, 4, false, false, dtype::F16, output_format::gptq, dtype::F16, false},         // N * b % 32 != 0
        {48, 256, 256, 2, true, false, dtype::F16, output_format::gptq, dtype::F16, true},
    };
    for (const case_t& c : cases) {
        CAPTURE(c.N);
        CAPTURE(c.K);
        CAPTURE(c.bits);
        CAPTURE(c.sym);
        quantized_tensor q = random_qt(c.N, c.K, c.bits, c.g, c.sym, c.scale, static_cast<std::uint32_t>(c.N + c.K), false);
        q.name = p;
        std::vector<owned_tensor> slow;
        if (c.N * c.bits % 32 == 0) {  // else GPTQ cannot hold it: only the compressed-tensors input exists
            repack_target keep = to(c.v2 ? output_format::gptq_v2 : output_format::gptq, c.scale);
            keep.scale_dtype = c.scale;  // the input keeps its scale dtype
            store gs = transpose_store_of(repack_pack(repack_prepare(q, keep), p, keep));
            const tensor_source gsrc = make_tensor_source(gs.views, "in");
            std::vector<owned_tensor> fast{owned_tensor{}};
            const std::string slow_err = general(gsrc, p, gptq_in(c.bits, c.g, c.sym, c.v2), to(output_format::compressed_tensors, c.ct_model), slow);
            const std::string fast_err = module(gsrc, p, gptq_in(c.bits, c.g, c.sym, c.v2), to(output_format::compressed_tensors, c.ct_model), fast);
            CHECK(fast_err == slow_err);
            std::vector<owned_tensor> probe;
            CHECK(repack_detail::fast_gptq_to_ct(gsrc, p, gptq_in(c.bits, c.g, c.sym, c.v2).gptq, to(output_format::compressed_tensors, c.ct_model), probe) == c.fast);
            if (!slow_err.empty()) continue;
            CHECK(same_transposed(fast, slow));
            CHECK(same_shape_info(gsrc, p, gptq_in(c.bits, c.g, c.sym, c.v2), to(output_format::compressed_tensors, c.ct_model)));
        }

        repack_target ck = to(output_format::compressed_tensors, c.ct_model);
        ck.scale_dtype = c.scale;
        store cs = transpose_store_of(repack_pack(repack_prepare(q, ck), p, ck));
        const tensor_source csrc = make_tensor_source(cs.views, "in");
        std::vector<owned_tensor> slow2, fast2 = slow;  // reused storage of other shapes
        const std::string e1 = general(csrc, p, ct_in(c.bits, c.g, c.sym), to(c.gptq_target), slow2);
        const std::string e2 = module(csrc, p, ct_in(c.bits, c.g, c.sym), to(c.gptq_target), fast2);
        CHECK(e1 == e2);
        std::vector<owned_tensor> probe;
        CHECK(repack_detail::fast_ct_to_gptq(csrc, p, ct_in(c.bits, c.g, c.sym).ct, to(c.gptq_target), probe) == c.fast);
        if (!e1.empty()) continue;
        CHECK(same_transposed(fast2, slow2));
        CHECK(same_shape_info(csrc, p, ct_in(c.bits, c.g, c.sym), to(c.gptq_target)));
    }
}

TEST_CASE("fast path hands malformed zero points to the general path, which names them") {
    const std::string p = "model.layers.2.mlp.down_proj";
    quantized_tensor q = random_qt(64, 256, 4, 64, false, dtype::F16, 9, false);
    q.name = p;
    const auto v1 = to(output_format::gptq);
    store gs = transpose_store_of(repack_pack(repack_prepare(q, v1), p, v1));
    auto& qz = gs.owned.at(p + ".qzeros");
    std::uint32_t w;
    std::memcpy(&w, qz.bytes.data() + 4 * 3, 4);
    w |= 0xFu << 8;  // a v1 field of 15: zero 16, outside the grid
    std::memcpy(qz.bytes.data() + 4 * 3, &w, 4);
    gs.refresh();
    const tensor_source src = make_tensor_source(gs.views, "in");
    std::vector<owned_tensor> a, b;
    const std::string e1 = general(src, p, gptq_in(4, 64, false, false), to(output_format::compressed_tensors), a);
    const std::string e2 = module(src, p, gptq_in(4, 64, false, false), to(output_format::compressed_tensors), b);
    CHECK(e1.find("GPTQ v1 zero field 15") != std::string::npos);
    CHECK(e1 == e2);
    // The same words declared symmetric: every zero must be 8.
    const std::string e3 = module(src, p, gptq_in(4, 64, true, false), to(output_format::compressed_tensors), b);
    CHECK(e3.find("config says sym") != std::string::npos);
}

TEST_CASE("reuse_slot: a big buffer is allocated once (huge pages offered) and kept across layers") {
    std::vector<owned_tensor> out;
    std::byte* p = repack_detail::reuse_slot(out, 0, "a.qweight", dtype::I32, {1024, 1280});  // 5 MB
    REQUIRE(out.size() == 1);
    REQUIRE(out[0].bytes.size() == std::size_t{1024} * 1280 * 4);
    std::memset(p, 7, out[0].bytes.size());
    std::byte* q = repack_detail::reuse_slot(out, 0, "b.qweight", dtype::I32, {1280, 1024});
    CHECK(q == p);
    CHECK(out[0].name == "b.qweight");
    CHECK(out[0].shape == shape_t{1280, 1024});
    CHECK(out[0].bytes[12345] == std::byte{7});
    repack_detail::reuse_slot(out, 2, "b.scales", dtype::F16, {8, 3});
    CHECK(out.size() == 3);
    CHECK(out[2].bytes.size() == 48);
}
