// The word-level repack between GPTQ and compressed-tensors: both store each output row's
// codes as one LSB-first bitstream along K (GPTQ down the columns of qweight [K*b/32, N],
// compressed-tensors along the rows of weight_packed [N, K*b/32]; formats.md 2.2 and 4.3,
// "b=3 dense == GPTQ 3-bit packing"). When K fills whole words the two tensors are transposes
// of each other, so the codes are never unpacked: repacking costs about a memcpy.
//
// The small tensors (scales, zero points, g_idx) still go through the reader and the rules,
// so every refusal of the general path fires here too, and the output is byte-identical to
// repack_pack of the unpacked tensor (tests/repack checks both against each other).
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "qforge/convert/repack.hpp"
#include "qforge/convert/repack_packed.hpp"
#include "qforge/convert/repack_rules.hpp"
#include "qforge/layout/detail/pack_bits.hpp"
#include "qforge/layout/layout_traits.hpp"

namespace qforge {
namespace repack_detail {

#if defined(__SSE2__)
// 4 x 4 words through four registers: SSE2 is part of the x86-64 baseline, so this needs no
// target attribute or dispatch. (A candidate for simd/ if another layer needs a transpose.)
inline void transpose4x4(const std::uint32_t* s, std::int64_t ss, std::uint32_t* d, std::int64_t ds) noexcept {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + ss));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 2 * ss));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 3 * ss));
    const __m128i ab_lo = _mm_unpacklo_epi32(a, b), ce_lo = _mm_unpacklo_epi32(c, e);
    const __m128i ab_hi = _mm_unpackhi_epi32(a, b), ce_hi = _mm_unpackhi_epi32(c, e);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm_unpacklo_epi64(ab_lo, ce_lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + ds), _mm_unpackhi_epi64(ab_lo, ce_lo));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 2 * ds), _mm_unpacklo_epi64(ab_hi, ce_hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + 3 * ds), _mm_unpackhi_epi64(ab_hi, ce_hi));
}
#else
inline void transpose4x4(const std::uint32_t* s, std::int64_t ss, std::uint32_t* d, std::int64_t ds) noexcept {
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) d[j * ds + i] = s[i * ss + j];
}
#endif

/// The general tiled transpose (any shape, any alignment).
inline void transpose_words_tiled(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) noexcept {
    constexpr std::int64_t tile = 16;
    for (std::int64_t c0 = 0; c0 < cols; c0 += tile) {
        const std::int64_t c1 = std::min(cols, c0 + tile), c4 = c0 + (c1 - c0) / 4 * 4;
        for (std::int64_t r0 = 0; r0 < rows; r0 += tile) {
            const std::int64_t r1 = std::min(rows, r0 + tile), r4 = r0 + (r1 - r0) / 4 * 4;
            for (std::int64_t c = c0; c < c4; c += 4)
                for (std::int64_t r = r0; r < r4; r += 4) transpose4x4(src + r * cols + c, cols, dst + c * rows + r, rows);
            for (std::int64_t c = c0; c < c1; ++c)
                for (std::int64_t r = (c < c4 ? r4 : r0); r < r1; ++r) dst[c * rows + r] = src[r * cols + c];
        }
    }
}

#if defined(__SSE2__)
/// 16 source rows x 4 source columns -> 4 destination rows of 16 words, each one whole 64-byte
/// line written with streaming stores: no read-for-ownership, no cache pollution, and the
/// power-of-two-ish strides of these tensors stop mattering.
inline void stream_block16x4(const std::uint32_t* s, std::int64_t ss, std::uint32_t* d, std::int64_t ds) noexcept {
    __m128i o[4][4];
    for (int q = 0; q < 4; ++q) {
        const std::uint32_t* b = s + 4 * q * ss;
        const __m128i a0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
        const __m128i a1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + ss));
        const __m128i a2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2 * ss));
        const __m128i a3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 3 * ss));
        const __m128i lo01 = _mm_unpacklo_epi32(a0, a1), lo23 = _mm_unpacklo_epi32(a2, a3);
        const __m128i hi01 = _mm_unpackhi_epi32(a0, a1), hi23 = _mm_unpackhi_epi32(a2, a3);
        o[0][q] = _mm_unpacklo_epi64(lo01, lo23);
        o[1][q] = _mm_unpackhi_epi64(lo01, lo23);
        o[2][q] = _mm_unpacklo_epi64(hi01, hi23);
        o[3][q] = _mm_unpackhi_epi64(hi01, hi23);
    }
    for (int r = 0; r < 4; ++r)
        for (int q = 0; q < 4; ++q) _mm_stream_si128(reinterpret_cast<__m128i*>(d + r * ds + 4 * q), o[r][q]);
}
#endif

/// dst[c][r] = src[r][c] for a rows x cols matrix of 32-bit words. When every destination row
/// starts at the same offset within a cache line (rows % 16 == 0) the blocks are aligned to
/// whole lines and streamed; otherwise a tiled transpose through the cache.
inline void transpose_words(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) noexcept {
#if defined(__SSE2__)
    const auto addr = reinterpret_cast<std::uintptr_t>(dst);
    if (rows % 16 == 0 && cols % 4 == 0 && addr % 16 == 0 && rows >= 32) {
        const std::int64_t first = static_cast<std::int64_t>((64 - addr % 64) % 64 / 4);  // rows before a line starts
        const std::int64_t last = first + (rows - first) / 16 * 16;
        for (std::int64_t r = 0; r < first; ++r)
            for (std::int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
        for (std::int64_t r = first; r < last; r += 16)
            for (std::int64_t c = 0; c < cols; c += 4) stream_block16x4(src + r * cols + c, cols, dst + c * rows + r, rows);
        for (std::int64_t r = last; r < rows; ++r)
            for (std::int64_t c = 0; c < cols; ++c) dst[c * rows + r] = src[r * cols + c];
        _mm_sfence();  // streaming stores are weakly ordered: publish them before returning
        return;
    }
#endif
    transpose_words_tiled(src, rows, cols, dst);
}

/// Writes the transpose of `v` into `out`, reusing its storage (a converter repacking layer
/// after layer of one shape allocates the big buffer once).
inline void transposed_words(const tensor_view& v, std::string name, std::int64_t rows, std::int64_t cols,
                             const std::string& file, owned_tensor& out) {
    const word_span w = words_of(v, {rows, cols}, file);
    out.name = std::move(name);
    out.type = dtype::I32;
    out.shape = {cols, rows};
    out.bytes.resize(static_cast<std::size_t>(rows * cols) * 4);
    transpose_words(w.data(), rows, cols, reinterpret_cast<std::uint32_t*>(out.bytes.data()));
}

/// Keeps out[0] (the big packed tensor, reused) and drops the rest.
inline void reset_outputs(std::vector<owned_tensor>& out) {
    if (out.empty()) out.emplace_back();
    out.resize(1);
}

}  // namespace repack_detail

/// The GPTQ <-> compressed-tensors repack done on words into `out` (whose first tensor's
/// storage is reused); false when this pair (or shape) has no word-level path and the caller
/// should use read_quantized + repack_pack.
inline bool repack_words(const repack_source& src, const std::string& prefix, const layer_scheme& s, const repack_target& t,
                         std::vector<owned_tensor>& out) {
    using namespace detail;
    using namespace repack_detail;
    const bool to_ct = t.format == output_format::compressed_tensors;
    const bool to_gptq = t.format == output_format::gptq || t.format == output_format::gptq_v2;
    if (s.format == repack_source_format::gptq && to_ct) {
        const int b = s.gptq.bits;
        if (32 % b != 0 && t.packing != ct_packing::dense_v0_18) return false;
        quantized_tensor q = read_gptq(src, prefix, s.gptq, /*unpack_codes=*/false);
        if (q.cols * b % 32 != 0) return false;
        q = repack_prepare(std::move(q), t, src.file);
        const std::int64_t N = q.rows, K = q.cols, G = q.groups(), W = K * b / 32;
        reset_outputs(out);
        transposed_words(src.require(prefix + ".qweight"), prefix + ".weight_packed", W, N, src.file, out[0]);
        out.push_back(make_tensor(prefix + ".weight_scale", q.scale_dtype, {N, G}, q.scales));
        if (!q.symmetric) {
            const bool dense = t.packing == ct_packing::dense_v0_18;
            const std::int64_t nw = dense ? dense_words(N, b) : padded_words(N, b);
            const std::vector<std::uint8_t> z(q.zeros.begin(), q.zeros.end());
            std::vector<std::uint32_t> zw(static_cast<std::size_t>(nw * G));
            pack_down(z.data(), N, G, b, dense, zw.data());
            out.push_back(make_tensor(prefix + ".weight_zero_point", dtype::I32, {nw, G}, zw));
        }
        out.push_back(make_tensor(prefix + ".weight_shape", dtype::I64, {2}, std::vector<std::int64_t>{N, K}));
        if (!q.g_idx.empty()) out.push_back(make_tensor(prefix + ".weight_g_idx", dtype::I32, {K}, q.g_idx));
        return true;
    }
    if (s.format == repack_source_format::ct_packed && to_gptq) {
        const int b = s.ct.bits;
        if (b != 2 && b != 3 && b != 4 && b != 8) return false;  // the rules refuse it
        if (32 % b != 0 && s.packing != ct_packing::dense_v0_18) return false;
        quantized_tensor q = read_ct_packed(src, prefix, s.ct, s.packing, /*unpack_codes=*/false);
        if (q.cols * b % 32 != 0) return false;
        q = repack_prepare(std::move(q), t, src.file);
        const std::int64_t N = q.rows, K = q.cols, G = q.groups(), W = K * b / 32, NW = N * b / 32;
        reset_outputs(out);
        transposed_words(src.require(prefix + ".weight_packed"), prefix + ".qweight", N, W, src.file, out[0]);
        const std::int32_t offset = t.format == output_format::gptq ? 1 : 0;  // v1 stores zero - 1
        std::vector<std::uint8_t> stored(static_cast<std::size_t>(G * N));  // [G][N], filled row by row of q
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t g = 0; g < G; ++g) stored[static_cast<std::size_t>(g * N + n)] = static_cast<std::uint8_t>(q.zero(n, g) - offset);
        std::vector<std::uint32_t> qzeros(static_cast<std::size_t>(G * NW));
        for (std::int64_t g = 0; g < G; ++g) pack_dense(stored.data() + g * N, 1, N, b, qzeros.data() + g * NW, 1);
        out.push_back(make_tensor(prefix + ".qzeros", dtype::I32, {G, NW}, qzeros));
        std::vector<std::uint16_t> scales(static_cast<std::size_t>(G * N));
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t g = 0; g < G; ++g)
                scales[static_cast<std::size_t>(g * N + n)] = q.scales[static_cast<std::size_t>(n * G + g)];
        out.push_back(make_tensor(prefix + ".scales", q.scale_dtype, {G, N}, scales));
        out.push_back(make_tensor(prefix + ".g_idx", dtype::I32, {K}, full_g_idx(q)));
        return true;
    }
    return false;
}

/// One module of the input in the target layout: the word-level path where it exists, else
/// read -> prepare -> pack. Refusals are unsupported_error, thrown before anything is returned.
/// `out` may hold the previous module's tensors: their storage is reused where it can be.
inline void repack_module(const repack_source& src, const std::string& prefix, const layer_scheme& s, const repack_target& t,
                          std::vector<owned_tensor>& out) {
    if (repack_words(src, prefix, s, t, out)) return;
    quantized_tensor q = repack_prepare(read_quantized(src, prefix, s), t, src.file);
    out = repack_pack(q, prefix, t);
}

inline std::vector<owned_tensor> repack_module(const repack_source& src, const std::string& prefix, const layer_scheme& s,
                                               const repack_target& t) {
    std::vector<owned_tensor> out;
    repack_module(src, prefix, s, t, out);
    return out;
}

}  // namespace qforge
