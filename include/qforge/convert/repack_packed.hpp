// Readers for packed quantized checkpoints: GPTQ (v1/v2), AWQ GEMM and compressed-tensors
// `pack-quantized` (padded and dense packings). Each produces a quantized_tensor with no
// rounding: codes, zeros and scale patterns are the checkpoint's, moved, never recomputed.
//
// Facts: formats.md 2 (GPTQ: AG `qlinear_cuda.py QuantLinear.pack`, GM `convert_gptq_v1_to_v2`),
// 3 (AWQ: AA `gemm.py WQLinear_GEMM`), 4.1-4.3 (CT `pack_quantized.py pack_to_int32`). The bit
// word formats are the layout layer's (layout/packing.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qforge/convert/repack_ct_naive.hpp"
#include "qforge/convert/repack_source.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/packing.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

/// What a GPTQ quantization_config says about a layer.
struct gptq_args {
    int bits = 4;
    std::int64_t group_size = 128;  ///< -1 (or <= 0): one group over all of K
    bool sym = true;
    bool v2 = false;  ///< checkpoint_format / format "gptq_v2": qzeros hold the zero, not zero - 1
};

struct awq_args {
    int bits = 4;
    std::int64_t group_size = 128;
};

namespace repack_detail {

/// The I32 words of a packed tensor: read in place when the view is 4-byte aligned (a
/// mapped safetensors file always is), copied out when it is not.
struct word_span {
    std::vector<std::uint32_t> copy;
    const std::uint32_t* ptr = nullptr;
    const std::uint32_t* data() const noexcept { return ptr; }
};

inline word_span words_of(const tensor_view& t, const shape_t& shape, const std::string& file) {
    require_dtype(t, dtype::I32, file);
    require_shape(t, shape, file);
    word_span w;
    if (reinterpret_cast<std::uintptr_t>(t.bytes.data()) % alignof(std::uint32_t) == 0) {
        w.ptr = reinterpret_cast<const std::uint32_t*>(t.bytes.data());
        return w;
    }
    w.copy.resize(t.bytes.size() / 4);
    if (!w.copy.empty()) std::memcpy(w.copy.data(), t.bytes.data(), t.bytes.size());
    w.ptr = w.copy.data();
    return w;
}

inline void check_bits(int bits, const std::string& file, const std::string& name, std::initializer_list<int> allowed,
                       const char* format) {
    for (int b : allowed)
        if (b == bits) return;
    fail<unsupported_error>(file, name, std::string(format) + " does not store " + std::to_string(bits) + "-bit codes");
}

inline std::vector<std::int32_t> read_g_idx_i32(const tensor_view& t, std::int64_t K, std::int64_t groups, const std::string& file) {
    require_shape(t, {K}, file);
    if (!is_integer_dtype(t.type)) fail<format_error>(file, t.name, "g_idx must be an integer tensor");
    require_bytes(t, file);
    std::vector<std::int32_t> g(static_cast<std::size_t>(K));
    for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t v = int_at(t, static_cast<std::size_t>(k));
        if (v < 0 || v >= groups)
            fail<format_error>(file, t.name, "entry " + std::to_string(k) + " = " + std::to_string(v) + " is not one of the " +
                                                 std::to_string(groups) + " groups");
        g[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(v);
    }
    return g;
}

/// Words [W][G] packed along dim 0 (column g holds group g's N fields) -> out[n][g]. For
/// 32 % b == 0 the words are walked row by row (cache friendly), else column by column.
inline void unpack_down(const std::uint32_t* w, std::int64_t N, std::int64_t G, int b, bool dense, std::uint8_t* out) {
    if (32 % b == 0) {
        const int pf = 32 / b;
        const std::uint32_t mask = (1u << b) - 1u;
        for (std::int64_t r = 0; r * pf < N; ++r) {
            const int fields = static_cast<int>(std::min<std::int64_t>(pf, N - r * pf));
            for (std::int64_t g = 0; g < G; ++g) {
                const std::uint32_t word = w[r * G + g];
                for (int j = 0; j < fields; ++j) out[(r * pf + j) * G + g] = static_cast<std::uint8_t>((word >> (b * j)) & mask);
            }
        }
        return;
    }
    for (std::int64_t g = 0; g < G; ++g) {
        if (dense) packing::unpack_dense(w + g, G, N, b, out + g, G);
        else packing::unpack_padded(w + g, G, N, b, out + g, G);
    }
}

/// Reverse of unpack_down: z[n][g] -> words [W][G] packed along dim 0.
inline void pack_down(const std::uint8_t* z, std::int64_t N, std::int64_t G, int b, bool dense, std::uint32_t* w) {
    if (32 % b == 0) {
        const int pf = 32 / b;
        const std::uint32_t mask = (1u << b) - 1u;
        for (std::int64_t r = 0; r * pf < N; ++r) {
            const int fields = static_cast<int>(std::min<std::int64_t>(pf, N - r * pf));
            for (std::int64_t g = 0; g < G; ++g) {
                std::uint32_t word = 0;
                for (int j = 0; j < fields; ++j) word |= (z[(r * pf + j) * G + g] & mask) << (b * j);
                w[r * G + g] = word;
            }
        }
        return;
    }
    for (std::int64_t g = 0; g < G; ++g) {
        if (dense) packing::pack_dense(z + g, G, N, b, w + g, G);
        else packing::pack_padded(z + g, G, N, b, w + g, G);
    }
}

inline bool is_identity_g_idx(const std::vector<std::int32_t>& g, std::int64_t group_size) noexcept {
    for (std::size_t k = 0; k < g.size(); ++k)
        if (g[k] != static_cast<std::int64_t>(k) / group_size) return false;
    return true;
}

}  // namespace repack_detail

/// Reads `<prefix>.qweight`, `.qzeros`, `.scales`, `.g_idx` (optional). K comes from g_idx
/// when present, else from qweight's rows. A v1 field of 2^b - 1 (zero 2^b, which is how
/// AutoGPTQ and GPTQModel write a zero of 0, and on which loaders disagree) is refused.
/// With `unpack_codes` false the codes are left empty (the word-level repack moves qweight
/// as words); every other check still runs.
inline quantized_tensor read_gptq(const repack_source& src, const std::string& prefix, const gptq_args& args,
                                  bool unpack_codes = true) {
    using namespace detail;
    using namespace repack_detail;
    const std::string& file = src.file;
    const tensor_view& qw = src.require(prefix + ".qweight");
    check_bits(args.bits, file, qw.name, {2, 3, 4, 8}, "GPTQ");
    if (qw.rank() != 2) fail<shape_error>(file, qw.name, "qweight must be 2-D, shape " + shape_to_string(qw.shape));
    const int b = args.bits;
    const std::int64_t N = qw.shape[1];
    const tensor_view* gi = src.optional(prefix + ".g_idx");
    std::int64_t K = 0;
    if (gi && gi->rank() == 1) K = gi->shape[0];
    else if (qw.shape[0] * 32 % b == 0) K = qw.shape[0] * 32 / b;
    else fail<shape_error>(file, qw.name, "qweight rows " + std::to_string(qw.shape[0]) + " do not hold whole " + std::to_string(b) + "-bit columns");
    if (N <= 0 || K <= 0) fail<shape_error>(file, qw.name, "empty weight");
    const std::int64_t g = args.group_size > 0 ? args.group_size : K;
    quantized_tensor q;
    q.name = prefix;
    q.bits = b;
    q.rows = N;
    q.cols = K;
    q.group_size = g > K ? K : g;
    q.symmetric = args.sym;
    const std::int64_t G = q.groups();

    const auto words = words_of(qw, {packing::dense_words(K, b), N}, file);
    const auto zwords = words_of(src.require(prefix + ".qzeros"), {G, packing::dense_words(N, b)}, file);
    const tensor_view& sc = src.require(prefix + ".scales");
    require_shape(sc, {G, N}, file);
    const auto spat = scale_patterns(sc, file);

    // qweight is packed along K (dim 0): column n of the words is the stream of row n's codes.
    if (K * b % 32 != 0)
        for (std::int64_t n = 0; n < N; ++n)
            if (packing::dense_has_stray_bits(words.data() + n, N, K, b))
                fail<format_error>(file, qw.name, "bits set past the last code of column " + std::to_string(n));
    if (unpack_codes) {
        q.codes.resize(static_cast<std::size_t>(N * K));
        for (std::int64_t n = 0; n < N; ++n) packing::unpack_dense(words.data() + n, N, K, b, q.codes.data() + n * K, 1);
    }
    // qzeros [G][N] packed along N; transpose into zeros[n][g].
    std::vector<std::uint8_t> zf(static_cast<std::size_t>(G * N));
    for (std::int64_t gg = 0; gg < G; ++gg)
        packing::unpack_dense(zwords.data() + gg * packing::dense_words(N, b), 1, N, b, zf.data() + gg * N, 1);
    const int maxq = (1 << b) - 1;
    q.zeros.resize(static_cast<std::size_t>(N * G));
    q.scales.resize(static_cast<std::size_t>(N * G));
    q.scale_dtype = sc.type;
    // Row by row: writes of [N][G] are sequential, the G rows read stay in L1. The loop only
    // flags a bad zero; the rescan below names the first one (kept out of the hot loop).
    const int add = args.v2 ? 0 : 1, mid = 1 << (b - 1);
    bool bad = false;
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t gg = 0; gg < G; ++gg) {
            const int field = zf[static_cast<std::size_t>(gg * N + n)];
            bad |= (add == 1 && field == maxq) || (args.sym && field + add != mid);
            q.zeros[static_cast<std::size_t>(n * G + gg)] = field + add;
            q.scales[static_cast<std::size_t>(n * G + gg)] = spat[static_cast<std::size_t>(gg * N + n)];
        }
    for (std::int64_t n = 0; bad && n < N; ++n)
        for (std::int64_t gg = 0; gg < G; ++gg) {
            const int field = zf[static_cast<std::size_t>(gg * N + n)];
            if (!args.v2 && field == maxq)
                fail<unsupported_error>(file, prefix + ".qzeros",
                                        "GPTQ v1 zero field " + std::to_string(field) + " in group " + std::to_string(gg) + " column " +
                                            std::to_string(n) + " decodes to zero " + std::to_string(maxq + 1) +
                                            ", outside the grid (a zero point 0 written by a v1 packer; loaders disagree on it)");
            const int zero = args.v2 ? field : field + 1;
            if (args.sym && zero != 1 << (b - 1))
                fail<format_error>(file, prefix + ".qzeros",
                                   "config says sym but group " + std::to_string(gg) + " column " + std::to_string(n) + " has zero " +
                                       std::to_string(zero) + " (expected " + std::to_string(1 << (b - 1)) +
                                       "; is checkpoint_format " + (args.v2 ? "gptq_v2" : "gptq (v1)") + " right?)");
        }
    if (gi) {
        q.g_idx = read_g_idx_i32(*gi, K, G, file);
        if (is_identity_g_idx(q.g_idx, q.group_size)) q.g_idx.clear();
    }
    if (unpack_codes) q.validate();
    return q;
}

/// Reads AWQ GEMM `<prefix>.qweight` [K, N/8], `.qzeros` [K/g, N/8], `.scales` [K/g, N].
/// AWQ always stores real zeros, so the result is asymmetric.
inline quantized_tensor read_awq(const repack_source& src, const std::string& prefix, const awq_args& args) {
    using namespace detail;
    using namespace repack_detail;
    const std::string& file = src.file;
    const tensor_view& qw = src.require(prefix + ".qweight");
    check_bits(args.bits, file, qw.name, {4}, "AWQ GEMM");
    if (qw.rank() != 2) fail<shape_error>(file, qw.name, "qweight must be 2-D, shape " + shape_to_string(qw.shape));
    const std::int64_t K = qw.shape[0], N = qw.shape[1] * 8;
    if (N <= 0 || K <= 0) fail<shape_error>(file, qw.name, "empty weight");
    const std::int64_t g = args.group_size > 0 ? args.group_size : K;
    if (K % g != 0) fail<shape_error>(file, qw.name, "group size " + std::to_string(g) + " does not divide K = " + std::to_string(K));
    const std::int64_t G = K / g;
    quantized_tensor q;
    q.name = prefix;
    q.bits = 4;
    q.rows = N;
    q.cols = K;
    q.group_size = g;
    q.symmetric = false;
    const auto words = words_of(qw, {K, N / 8}, file);
    const auto zwords = words_of(src.require(prefix + ".qzeros"), {G, N / 8}, file);
    const tensor_view& sc = src.require(prefix + ".scales");
    require_shape(sc, {G, N}, file);
    const auto spat = scale_patterns(sc, file);
    q.scale_dtype = sc.type;
    q.codes.resize(static_cast<std::size_t>(N * K));
    // words [K][N/8] hold codes[k][n]: write them transposed into codes[n][k].
    packing::unpack_awq4(words.data(), K, N, q.codes.data(), 1, K);
    q.zeros.resize(static_cast<std::size_t>(N * G));
    std::vector<std::uint8_t> zt(static_cast<std::size_t>(N * G));
    packing::unpack_awq4(zwords.data(), G, N, zt.data(), 1, G);
    for (std::size_t i = 0; i < zt.size(); ++i) q.zeros[i] = zt[i];
    q.scales.resize(static_cast<std::size_t>(N * G));
    for (std::int64_t gg = 0; gg < G; ++gg)
        for (std::int64_t n = 0; n < N; ++n)
            q.scales[static_cast<std::size_t>(n * G + gg)] = spat[static_cast<std::size_t>(gg * N + n)];
    q.validate();
    return q;
}

/// Reads compressed-tensors `pack-quantized` `<prefix>.weight_packed` [N, words(K)],
/// `.weight_shape`, `.weight_scale` [N, G], `.weight_zero_point` [words(N), G] (asymmetric
/// only), `.weight_g_idx` (actorder group only). For 3/5/6/7 bits the word count tells the two
/// packings apart where it can; `packing` decides where it cannot (and must agree otherwise).
inline quantized_tensor read_ct_packed(const repack_source& src, const std::string& prefix, const ct_weight_args& args,
                                       ct_packing packing, bool unpack_codes = true) {
    using namespace detail;
    using namespace repack_detail;
    const std::string& file = src.file;
    const tensor_view& wp = src.require(prefix + ".weight_packed");
    check_bits(args.bits, file, wp.name, {2, 3, 4, 5, 6, 7, 8}, "compressed-tensors pack-quantized");
    const int b = args.bits;
    const tensor_view& ws = src.require(prefix + ".weight_shape");
    if (!is_integer_dtype(ws.type)) fail<format_error>(file, ws.name, "weight_shape must be an integer tensor");
    require_shape(ws, {2}, file);
    require_bytes(ws, file);
    const std::int64_t N = int_at(ws, 0), K = int_at(ws, 1);
    if (N <= 0 || K <= 0 || N > (std::int64_t{1} << 40) || K > (std::int64_t{1} << 40))
        fail<shape_error>(file, ws.name, "weight shape [" + std::to_string(N) + ", " + std::to_string(K) + "] is not a usable 2-D shape");
    const std::int64_t dense_k = packing::dense_words(K, b), padded_k = packing::padded_words(K, b);
    if (!(wp.rank() == 2 && wp.shape[0] == N && (wp.shape[1] == dense_k || wp.shape[1] == padded_k)))
        fail<shape_error>(file, wp.name, "shape " + shape_to_string(wp.shape) + " does not hold [" + std::to_string(N) + ", " +
                                             std::to_string(K) + "] " + std::to_string(b) + "-bit codes");
    if (dense_k != padded_k) {
        const ct_packing by_shape = wp.shape[1] == dense_k ? ct_packing::dense_v0_18 : ct_packing::padded_v0_12;
        if (by_shape != packing)
            fail<format_error>(file, wp.name, std::string("word count matches the ") + (by_shape == ct_packing::dense_v0_18 ? "dense (>= 0.18)" : "padded (<= 0.17)") +
                                                  " packing but the config's version says the other one");
    }
    const bool dense = packing == ct_packing::dense_v0_18;
    quantized_tensor q;
    q.name = prefix;
    q.bits = b;
    q.rows = N;
    q.cols = K;
    q.group_size = args.group_size > 0 ? (args.group_size > K ? K : args.group_size) : K;
    q.symmetric = args.symmetric;
    const std::int64_t G = q.groups();
    const auto words = words_of(wp, wp.shape, file);
    const std::int64_t wk = wp.shape[1];
    if (unpack_codes) q.codes.resize(static_cast<std::size_t>(N * K));
    const bool whole_words = K * b % 32 == 0 && 32 % b == 0;  // no field can hold stray bits
    for (std::int64_t n = 0; n < N; ++n) {
        const std::uint32_t* row = words.data() + n * wk;
        if (!whole_words && (dense ? packing::dense_has_stray_bits(row, 1, K, b) : packing::padded_has_stray_bits(row, 1, K, b)))
            fail<format_error>(file, wp.name, "row " + std::to_string(n) + " has bits set outside its code fields");
        // Stored field = signed code + 2^(b-1) = qforge's unsigned code (formats.md 4.2).
        if (!unpack_codes) continue;
        if (dense) packing::unpack_dense(row, 1, K, b, q.codes.data() + n * K, 1);
        else packing::unpack_padded(row, 1, K, b, q.codes.data() + n * K, 1);
    }
    std::vector<std::uint8_t> zf;
    if (!args.symmetric) {
        const std::int64_t zn = dense ? packing::dense_words(N, b) : packing::padded_words(N, b);
        const auto zw = words_of(src.require(prefix + ".weight_zero_point"), {zn, G}, file);
        zf.resize(static_cast<std::size_t>(N * G));
        // Packed along dim 0 (N): column g of the words is the stream of group g's zeros.
        if (!(N * b % 32 == 0 && 32 % b == 0))
            for (std::int64_t gg = 0; gg < G; ++gg)
                if (dense ? packing::dense_has_stray_bits(zw.data() + gg, G, N, b) : packing::padded_has_stray_bits(zw.data() + gg, G, N, b))
                    fail<format_error>(file, prefix + ".weight_zero_point", "group " + std::to_string(gg) + " has bits set outside its fields");
        unpack_down(zw.data(), N, G, b, dense, zf.data());
    }
    const int half = 1 << (b - 1);
    ct_fill_scales_zeros(q, src.require(prefix + ".weight_scale"), args.symmetric,
                         [&](std::size_t i) { return static_cast<std::int64_t>(zf[i]) - half; }, file);
    ct_read_g_idx(q, src.optional(prefix + ".weight_g_idx"), file);
    if (unpack_codes) q.validate();
    return q;
}

}  // namespace qforge
