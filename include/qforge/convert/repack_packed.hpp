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
#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/layout/packing.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {


namespace repack_detail {

using detail::word_span;
using detail::words_of;
using detail::check_bits;
using detail::read_g_idx_i32;
using detail::is_identity_g_idx;

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

}  // namespace repack_detail

// read_gptq is the GPTQ layout's reader (layout/gptq.hpp), in its checkpoint mode.

// read_awq is the AWQ layout's reader (layout/awq.hpp), in its checkpoint mode.

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
