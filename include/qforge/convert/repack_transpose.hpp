// The word-level repack between GPTQ and compressed-tensors: both store each output row's
// codes as one LSB-first bitstream along K (GPTQ down the columns of qweight [K*b/32, N],
// compressed-tensors along the rows of weight_packed [N, K*b/32]; formats.md 2.2 and 4.3,
// "b=3 dense == GPTQ 3-bit packing"). When K fills whole words the two tensors are transposes
// of each other, so the codes are never unpacked: repacking costs about a memcpy.
//
// For 2, 4 and 8 bits with whole words along N and K (the common case) the small tensors move
// as words too: zero points are transposed and shifted field-wise, scales transposed as 16-bit
// patterns, every output written into storage `out` already has. That fast path only checks
// and declines; anything it declines goes through the reader and the rules, so every refusal
// of the general path fires here too, word for word, and the output is byte-identical to
// repack_pack of the unpacked tensor (tests/repack checks all three against each other).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "qforge/convert/repack.hpp"
#include "qforge/convert/repack_packed.hpp"
#include "qforge/convert/repack_rules.hpp"
#include "qforge/core/config.hpp"
#include "qforge/layout/packing.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/simd/family.hpp"
#include "qforge/simd/tags.hpp"
#include "qforge/simd/transpose_kernels.hpp"

// QFORGE_REPACK_AVX2: whether this build has the x86 transposes (tests/repack names it).
#define QFORGE_REPACK_AVX2 QFORGE_SIMD_X86

namespace qforge {
namespace repack_detail {

// ---------------------------------------------------------------------------------------------
// The transposes (simd/transpose_kernels.hpp), of the ISA simd::active_isa() chose
// (QFORGE_FORCE_ISA or the best this CPU has; an unknown or unavailable name throws).

/// The transpose kernels a repack runs with.
inline const simd::transpose_kernels& transposes() { return simd::kernels_of<simd::transpose_kernels>(simd::active_isa()); }

/// dst[c][r] = src[r][c] for a rows x cols matrix of 32-bit words (dst 4-byte aligned): through
/// the cache when small, streamed when large.
QFORGE_DECL void transpose_words(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst);

/// dst[c][r] = pattern (r, c) of the rows x cols matrix of 16-bit patterns at `src` (any alignment).
QFORGE_DECL void transpose_u16(const std::byte* src, std::int64_t rows, std::int64_t cols, std::uint16_t* dst);

// The names tests/repack checks each path by: the tiled and streamed transposes of the active
// ISA, the streamed one of the scalar definition (once SSE2, the portable path) and of AVX2.
QFORGE_DECL void transpose_words_tiled(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst);
QFORGE_DECL void transpose_words_stream_sse2(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst);
#if QFORGE_REPACK_AVX2
inline void transpose_words_stream_avx2(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) {
    simd::kernels_of<simd::transpose_kernels>(simd::isa::avx2).words_streamed(src, rows, cols, dst);
}
#endif

/// Whether the repack transposes with the AVX2 kernels (which AVX-512 runs too).
QFORGE_DECL bool repack_use_avx2();

/// Writes the transpose of `v` into `out`, reusing its storage (a converter repacking layer
/// after layer of one shape allocates the big buffer once).
QFORGE_DECL void transposed_words(const tensor_view& v, std::string name, std::int64_t rows, std::int64_t cols,
                                  const std::string& file, owned_tensor& out);

/// Keeps out[0] (the big packed tensor, reused) and drops the rest.
QFORGE_DECL void reset_outputs(std::vector<owned_tensor>& out);

// ---------------------------------------------------------------------------------------------
// The fast path: 2, 4 and 8 bits with whole words along N and K, the common case. It reads the
// small tensors as words too (zero points are transposed and shifted field-wise, scales are
// transposed as 16-bit patterns) and writes every output into `out`'s existing storage. It
// only ever answers "not this case" (false): anything unusual (a malformed tensor, a zero
// point or scale the rules refuse, an unaligned view) is left to the path below, which reads
// through the general reader and throws the general path's error, word for word.

/// Dimensions a fast path accepts before multiplying them (a hostile header may say 2^62).
inline constexpr std::int64_t fast_dim_limit = std::int64_t{1} << 40;

/// The element count of `shape`, or -1 when a dimension is negative or the count would pass
/// 2^62 (no overflow on hostile shapes).
QFORGE_DECL std::int64_t safe_numel(const shape_t& shape) noexcept;

/// Grows `bytes` to n bytes. A buffer of many megabytes is new storage offered to the kernel
/// for transparent huge pages before its first touch (Linux, THP in "madvise" mode): the
/// transpose writes one line to each of hundreds of 4 KB pages per pass, and with 2 MB pages
/// those writes stop missing the TLB (GPTQ -> compressed-tensors transpose about 10% faster
/// on Zen 4). Only where the pages come from changes, never the bytes.
QFORGE_DECL void grow_buffer(std::vector<std::byte>& bytes, std::size_t n);

/// `out[i]` as a tensor of `type` and `shape`, its storage kept (no allocation, and no zero
/// fill when the size is unchanged: every byte is written by the caller).
QFORGE_DECL std::byte* reuse_slot(std::vector<owned_tensor>& out, std::size_t i, std::string name, dtype type, shape_t shape);

inline std::uint32_t* word_ptr(std::byte* p) noexcept { return reinterpret_cast<std::uint32_t*>(p); }

/// An I32 tensor of exactly `shape` whose bytes can be read in place as words, else nullptr.
QFORGE_DECL const std::uint32_t* aligned_words(const tensor_view* t, const shape_t& shape) noexcept;

QFORGE_DECL bool is_scale_tensor(const tensor_view* t, const shape_t& shape) noexcept;

/// The b-bit fields of a word (b divides 32): a 1 in each field, and each field's top bit.
struct word_fields {
    std::uint32_t ones = 0, highs = 0;
    explicit word_fields(int b) noexcept;
    std::uint32_t every(std::uint32_t value) const noexcept { return ones * value; }
    /// Whether some field of w equals the field value repeated in `value_everywhere`. The SWAR
    /// zero-field test on w ^ value_everywhere is exact: subtracting 1 from every field borrows
    /// into a field's top bit only at a zero field.
    bool any_field_is(std::uint32_t w, std::uint32_t value_everywhere) const noexcept;
};

/// An optional g_idx tensor as read_g_idx_i32 / ct_read_g_idx read it (an identity map
/// dropped); false where they would throw.
QFORGE_DECL bool quiet_g_idx(const tensor_view* t, std::int64_t K, std::int64_t group_size, std::int64_t G, std::vector<std::int32_t>& g);

/// Converts n 16-bit scale patterns in place from `from` to `to` as convert_scales_exactly
/// does; false (some scale does not convert exactly) leaves the refusal to the general path.
QFORGE_DECL bool convert_patterns_exactly(std::uint16_t* p, std::size_t n, dtype from, dtype to) noexcept;

/// The shape of the layer as the rules see it (no codes, scales or zeros: the value checks
/// the rules make on those are made on the words by the callers).
QFORGE_DECL quantized_tensor layer_shape(const std::string& prefix, int b, std::int64_t N, std::int64_t K, std::int64_t group_size, bool sym,
                                         dtype scale_dtype, std::vector<std::int32_t> g_idx);

/// GPTQ qweight/qzeros/scales/g_idx -> compressed-tensors, on words. See read_gptq for what
/// each check mirrors.
QFORGE_DECL bool fast_gptq_to_ct(const tensor_source& src, const std::string& prefix, const gptq_args& a, const repack_target& t,
                                 std::vector<owned_tensor>& out, quantized_tensor* info = nullptr);

/// compressed-tensors weight_packed/weight_shape/weight_scale/weight_zero_point/weight_g_idx
/// -> GPTQ, on words. See read_ct_packed (layout/compressed_tensors.hpp) for what each check mirrors.
QFORGE_DECL bool fast_ct_to_gptq(const tensor_source& src, const std::string& prefix, const ct_weight_args& a, const repack_target& t,
                                 std::vector<owned_tensor>& out, quantized_tensor* info = nullptr);

}  // namespace repack_detail

/// The GPTQ <-> compressed-tensors repack done on words into `out` (whose tensors' storage is
/// reused); false when this pair (or shape) has no word-level path and the caller should use
/// read_quantized + repack_pack. `info`, when given, receives the prepared tensor without its
/// codes (bits, shape, group, symmetry, scale dtype, g_idx; scales and zeros may be empty).
QFORGE_DECL bool repack_words(const tensor_source& src, const std::string& prefix, const layer_scheme& s, const repack_target& t,
                              std::vector<owned_tensor>& out, quantized_tensor* info = nullptr);

/// One module of the input in the target layout: the word-level path where it exists, else
/// read -> prepare -> pack. Refusals are unsupported_error, thrown before anything is returned.
/// `out` may hold the previous module's tensors: their storage is reused where it can be.
QFORGE_DECL void repack_module(const tensor_source& src, const std::string& prefix, const layer_scheme& s, const repack_target& t,
                               std::vector<owned_tensor>& out);

QFORGE_DECL std::vector<owned_tensor> repack_module(const tensor_source& src, const std::string& prefix, const layer_scheme& s,
                                                    const repack_target& t);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {
namespace repack_detail {

QFORGE_DECL void transpose_words(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) {
    transposes().words(src, rows, cols, dst);
}

QFORGE_DECL void transpose_u16(const std::byte* src, std::int64_t rows, std::int64_t cols, std::uint16_t* dst) {
    transposes().patterns16(src, rows, cols, dst, rows);
}

QFORGE_DECL void transpose_words_tiled(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) {
    transposes().words_tiled(src, rows, cols, dst);
}

QFORGE_DECL void transpose_words_stream_sse2(const std::uint32_t* src, std::int64_t rows, std::int64_t cols, std::uint32_t* dst) {
    simd::kernels_of<simd::transpose_kernels>(simd::isa::scalar).words_streamed(src, rows, cols, dst);
}

QFORGE_DECL bool repack_use_avx2() {
    const simd::isa i = simd::active_isa();
    return i == simd::isa::avx2 || i == simd::isa::avx512;
}

QFORGE_DECL void transposed_words(const tensor_view& v, std::string name, std::int64_t rows, std::int64_t cols,
                                  const std::string& file, owned_tensor& out) {
    const detail::word_span w = detail::words_of(v, {rows, cols}, file);
    out.name = std::move(name);
    out.type = dtype::I32;
    out.shape = {cols, rows};
    out.bytes.resize(static_cast<std::size_t>(rows * cols) * 4);
    transposes().words(w.data(), rows, cols, reinterpret_cast<std::uint32_t*>(out.bytes.data()));
}

QFORGE_DECL void reset_outputs(std::vector<owned_tensor>& out) {
    if (out.empty()) out.emplace_back();
    out.resize(1);
}

QFORGE_DECL std::int64_t safe_numel(const shape_t& shape) noexcept {
    std::int64_t n = 1;
    for (std::int64_t d : shape) {
        if (d < 0 || (d > 0 && n > (std::int64_t{1} << 62) / d)) return -1;
        n *= d;
    }
    return n;
}

QFORGE_DECL void grow_buffer(std::vector<std::byte>& bytes, std::size_t n) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    constexpr std::uintptr_t huge = std::uintptr_t{1} << 21;
    if (n >= 2 * huge && bytes.capacity() < n) {
        std::vector<std::byte> fresh;
        fresh.reserve(n);
        const auto lo = reinterpret_cast<std::uintptr_t>(fresh.data());
        const std::uintptr_t a = (lo + huge - 1) & ~(huge - 1), b = (lo + n) & ~(huge - 1);
        if (b > a) (void)madvise(reinterpret_cast<void*>(a), b - a, MADV_HUGEPAGE);  // advice only: failure is harmless
        fresh.resize(n);
        bytes = std::move(fresh);
        return;
    }
#endif
    bytes.resize(n);
}

QFORGE_DECL std::byte* reuse_slot(std::vector<owned_tensor>& out, std::size_t i, std::string name, dtype type, shape_t shape) {
    if (out.size() <= i) out.resize(i + 1);
    owned_tensor& o = out[i];
    const std::int64_t n = safe_numel(shape);  // the callers' shapes are bounded by their inputs'
    o.name = std::move(name);
    o.type = type;
    o.shape = std::move(shape);
    grow_buffer(o.bytes, static_cast<std::size_t>(n) * dtype_size(type));
    return o.bytes.data();
}

QFORGE_DECL const std::uint32_t* aligned_words(const tensor_view* t, const shape_t& shape) noexcept {
    if (!t || t->type != dtype::I32 || t->shape != shape) return nullptr;
    const std::int64_t n = safe_numel(shape);
    if (n < 0 || t->bytes.size() != static_cast<std::size_t>(n) * 4 || reinterpret_cast<std::uintptr_t>(t->bytes.data()) % 4 != 0)
        return nullptr;
    return reinterpret_cast<const std::uint32_t*>(t->bytes.data());
}

QFORGE_DECL bool is_scale_tensor(const tensor_view* t, const shape_t& shape) noexcept {
    const std::int64_t n = safe_numel(shape);
    return t && (t->type == dtype::F16 || t->type == dtype::BF16) && t->shape == shape && n >= 0 &&
           t->bytes.size() == static_cast<std::size_t>(n) * 2;
}

QFORGE_DECL bool quiet_g_idx(const tensor_view* t, std::int64_t K, std::int64_t group_size, std::int64_t G, std::vector<std::int32_t>& g) {
    g.clear();
    if (!t) return true;
    if (t->shape != shape_t{K} || !detail::is_integer_dtype(t->type) || t->bytes.size() != static_cast<std::size_t>(K) * dtype_size(t->type))
        return false;
    g.resize(static_cast<std::size_t>(K));
    bool identity = true;
    for (std::int64_t k = 0; k < K; ++k) {
        const std::int64_t v = detail::int_at(*t, static_cast<std::size_t>(k));
        if (v < 0 || v >= G) return false;
        g[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(v);
        identity = identity && v == k / group_size;
    }
    if (identity) g.clear();
    return true;
}

QFORGE_DECL bool convert_patterns_exactly(std::uint16_t* p, std::size_t n, dtype from, dtype to) noexcept {
    if (from == to) return true;
    for (std::size_t i = 0; i < n; ++i) {
        const float v = detail::scale_of_pattern(p[i], from);
        const std::uint16_t c = to == dtype::BF16 ? float_to_bf16(v) : float_to_fp16(v);
        const float back = detail::scale_of_pattern(c, to);
        if (!(back == v || (std::isnan(back) && std::isnan(v)))) return false;
        p[i] = c;
    }
    return true;
}

QFORGE_DECL quantized_tensor layer_shape(const std::string& prefix, int b, std::int64_t N, std::int64_t K, std::int64_t group_size, bool sym,
                                         dtype scale_dtype, std::vector<std::int32_t> g_idx) {
    return quantized_tensor::with_header(prefix, b, N, K, group_size, sym, scale_dtype, quantized_tensor::storage::none,
                                         std::move(g_idx));
}

QFORGE_DECL bool fast_gptq_to_ct(const tensor_source& src, const std::string& prefix, const gptq_args& a, const repack_target& t,
                                 std::vector<owned_tensor>& out, quantized_tensor* info) {
    const int b = a.bits;
    if (b != 2 && b != 4 && b != 8) return false;
    const tensor_view* qw = src.optional(prefix + ".qweight");
    const tensor_view* gi = src.optional(prefix + ".g_idx");
    if (!qw || qw->rank() != 2 || qw->shape[0] > fast_dim_limit) return false;
    const std::int64_t N = qw->shape[1];
    const std::int64_t K = gi && gi->rank() == 1 ? gi->shape[0] : qw->shape[0] * 32 / b;
    if (N <= 0 || K <= 0 || N > fast_dim_limit || K > fast_dim_limit || K * b % 32 != 0 || N * b % 32 != 0) return false;
    const std::int64_t gs = std::min(a.group_size > 0 ? a.group_size : K, K), G = (K + gs - 1) / gs;
    const std::int64_t W = K * b / 32, NW = N * b / 32;
    const std::uint32_t* words = aligned_words(qw, {W, N});
    const std::uint32_t* zwords = aligned_words(src.optional(prefix + ".qzeros"), {G, NW});
    const tensor_view* sc = src.optional(prefix + ".scales");
    if (!words || !zwords || !is_scale_tensor(sc, {G, N})) return false;
    std::vector<std::int32_t> g_idx;
    if (!quiet_g_idx(gi, K, gs, G, g_idx)) return false;
    const dtype sdt = target_scale_dtype(t);
    if (repack_refusal(layer_shape(prefix, b, N, K, gs, a.sym, sdt, g_idx), t)) return false;

    // qzeros fields hold zero - 1 (v1) or zero (v2); compressed-tensors stores zero itself
    // (signed zero + 2^(b-1)). A v1 field of 2^b - 1 and, when sym, any zero but 2^(b-1) are
    // refused by the reader.
    const word_fields f(b);
    const std::uint32_t add = a.v2 ? 0u : 1u, maxq = (1u << b) - 1u, mid = 1u << (b - 1);
    const std::size_t nz = static_cast<std::size_t>(G * NW);
    if (a.sym) {
        for (std::size_t i = 0; i < nz; ++i)
            if (zwords[i] != f.every(mid - add)) return false;
    } else if (!a.v2) {
        for (std::size_t i = 0; i < nz; ++i)
            if (f.any_field_is(zwords[i], f.every(maxq))) return false;
    }

    const simd::transpose_kernels& tk = transposes();
    std::size_t slot = 1;
    auto* scales = reinterpret_cast<std::uint16_t*>(reuse_slot(out, slot++, prefix + ".weight_scale", sdt, {N, G}));
    tk.patterns16(sc->bytes.data(), G, N, scales, G);
    if (!convert_patterns_exactly(scales, static_cast<std::size_t>(N * G), sc->type, sdt)) return false;
    tk.words(words, W, N, word_ptr(reuse_slot(out, 0, prefix + ".weight_packed", dtype::I32, {N, W})));
    if (!a.sym) {
        std::uint32_t* z = word_ptr(reuse_slot(out, slot++, prefix + ".weight_zero_point", dtype::I32, {NW, G}));
        tk.words(zwords, G, NW, z);
        for (std::size_t i = 0; i < nz; ++i) z[i] += f.every(add);  // no carry: no field is 2^b - 1
    }
    const std::int64_t shape[2] = {N, K};
    std::memcpy(reuse_slot(out, slot++, prefix + ".weight_shape", dtype::I64, {2}), shape, sizeof shape);
    if (!g_idx.empty())
        std::memcpy(reuse_slot(out, slot++, prefix + ".weight_g_idx", dtype::I32, {K}), g_idx.data(), g_idx.size() * 4);
    out.resize(slot);
    if (info) *info = layer_shape(prefix, b, N, K, gs, a.sym, sdt, std::move(g_idx));
    return true;
}

QFORGE_DECL bool fast_ct_to_gptq(const tensor_source& src, const std::string& prefix, const ct_weight_args& a, const repack_target& t,
                                 std::vector<owned_tensor>& out, quantized_tensor* info) {
    const int b = a.bits;
    if (b != 2 && b != 4 && b != 8) return false;
    const tensor_view* ws = src.optional(prefix + ".weight_shape");
    if (!ws || !detail::is_integer_dtype(ws->type) || ws->shape != shape_t{2} || ws->bytes.size() != 2 * dtype_size(ws->type)) return false;
    const std::int64_t N = detail::int_at(*ws, 0), K = detail::int_at(*ws, 1);
    if (N <= 0 || K <= 0 || N > fast_dim_limit || K > fast_dim_limit || K * b % 32 != 0 || N * b % 32 != 0) return false;
    const std::int64_t gs = a.group_size > 0 ? std::min(a.group_size, K) : K, G = (K + gs - 1) / gs;
    const std::int64_t W = K * b / 32, NW = N * b / 32;
    const std::uint32_t* words = aligned_words(src.optional(prefix + ".weight_packed"), {N, W});
    const tensor_view* sc = src.optional(prefix + ".weight_scale");
    if (!words || !is_scale_tensor(sc, {N, G})) return false;
    const std::uint32_t* zwords = nullptr;
    if (!a.symmetric && !(zwords = aligned_words(src.optional(prefix + ".weight_zero_point"), {NW, G}))) return false;
    std::vector<std::int32_t> g_idx;
    if (!quiet_g_idx(src.optional(prefix + ".weight_g_idx"), K, gs, G, g_idx)) return false;
    const dtype sdt = target_scale_dtype(t);
    if (repack_refusal(layer_shape(prefix, b, N, K, gs, a.symmetric, sdt, g_idx), t)) return false;

    // The zero point fields hold zero (signed zero + 2^(b-1)); GPTQ v1 stores zero - 1, so a
    // zero of 0 is refused there (repack_refusal names it).
    const word_fields f(b);
    const bool v1 = format_stored_zero_offset(t.format) == 1;
    const std::uint32_t offset = v1 ? 1u : 0u, mid = 1u << (b - 1);
    const std::size_t nz = static_cast<std::size_t>(G * NW);
    if (!a.symmetric && v1)
        for (std::size_t i = 0; i < nz; ++i)
            if (f.any_field_is(zwords[i], 0)) return false;

    const simd::transpose_kernels& tk = transposes();
    auto* scales = reinterpret_cast<std::uint16_t*>(reuse_slot(out, 2, prefix + ".scales", sdt, {G, N}));
    tk.patterns16(sc->bytes.data(), N, G, scales, N);
    if (!convert_patterns_exactly(scales, static_cast<std::size_t>(N * G), sc->type, sdt)) return false;
    tk.words(words, N, W, word_ptr(reuse_slot(out, 0, prefix + ".qweight", dtype::I32, {W, N})));
    std::uint32_t* z = word_ptr(reuse_slot(out, 1, prefix + ".qzeros", dtype::I32, {G, NW}));
    if (a.symmetric) {
        std::fill(z, z + nz, f.every(mid - offset));
    } else {
        tk.words(zwords, NW, G, z);
        for (std::size_t i = 0; i < nz; ++i) z[i] -= f.every(offset);  // no borrow: no field is 0 for v1
    }
    auto* g = reinterpret_cast<std::int32_t*>(reuse_slot(out, 3, prefix + ".g_idx", dtype::I32, {K}));
    for (std::int64_t k = 0; k < K; ++k) g[k] = g_idx.empty() ? static_cast<std::int32_t>(k / gs) : g_idx[static_cast<std::size_t>(k)];
    out.resize(4);
    if (info) *info = layer_shape(prefix, b, N, K, gs, a.symmetric, sdt, std::move(g_idx));
    return true;
}

}  // namespace repack_detail

QFORGE_DECL bool repack_words(const tensor_source& src, const std::string& prefix, const layer_scheme& s, const repack_target& t,
                              std::vector<owned_tensor>& out, quantized_tensor* info) {
    using namespace detail;
    using namespace repack_detail;
    // Down columns (GPTQ qweight) -> along rows (compressed-tensors weight_packed), and back.
    const k_stream from = source_k_stream(s.format), to = format_k_stream(t.format);
    if (from == k_stream::down_columns && to == k_stream::along_rows) {
        if (fast_gptq_to_ct(src, prefix, s.gptq, t, out, info)) return true;
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
            const std::int64_t nw = dense ? packing::dense_words(N, b) : packing::padded_words(N, b);
            const std::vector<std::uint8_t> z(q.zeros.begin(), q.zeros.end());
            std::vector<std::uint32_t> zw(static_cast<std::size_t>(nw * G));
            pack_down(z.data(), N, G, b, dense, zw.data());
            out.push_back(make_tensor(prefix + ".weight_zero_point", dtype::I32, {nw, G}, zw));
        }
        out.push_back(make_tensor(prefix + ".weight_shape", dtype::I64, {2}, std::vector<std::int64_t>{N, K}));
        if (!q.g_idx.empty()) out.push_back(make_tensor(prefix + ".weight_g_idx", dtype::I32, {K}, q.g_idx));
        if (info) *info = std::move(q);
        return true;
    }
    if (from == k_stream::along_rows && to == k_stream::down_columns) {
        if (fast_ct_to_gptq(src, prefix, s.ct, t, out, info)) return true;
        const int b = s.ct.bits;
        if (b != 2 && b != 3 && b != 4 && b != 8) return false;  // the rules refuse it
        if (32 % b != 0 && s.packing != ct_packing::dense_v0_18) return false;
        quantized_tensor q = read_ct_packed(src, prefix, s.ct, s.packing, /*unpack_codes=*/false);
        if (q.cols * b % 32 != 0) return false;
        q = repack_prepare(std::move(q), t, src.file);
        const std::int64_t N = q.rows, K = q.cols, G = q.groups(), W = K * b / 32, NW = N * b / 32;
        reset_outputs(out);
        transposed_words(src.require(prefix + ".weight_packed"), prefix + ".qweight", N, W, src.file, out[0]);
        const std::int32_t offset = format_stored_zero_offset(t.format);  // v1 stores zero - 1
        std::vector<std::uint8_t> stored(static_cast<std::size_t>(G * N));  // [G][N], filled row by row of q
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t g = 0; g < G; ++g) stored[static_cast<std::size_t>(g * N + n)] = static_cast<std::uint8_t>(q.zero(n, g) - offset);
        std::vector<std::uint32_t> qzeros(static_cast<std::size_t>(G * NW));
        for (std::int64_t g = 0; g < G; ++g) packing::pack_dense(stored.data() + g * N, 1, N, b, qzeros.data() + g * NW, 1);
        out.push_back(make_tensor(prefix + ".qzeros", dtype::I32, {G, NW}, qzeros));
        std::vector<std::uint16_t> scales(static_cast<std::size_t>(G * N));
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t g = 0; g < G; ++g)
                scales[static_cast<std::size_t>(g * N + n)] = q.scales[static_cast<std::size_t>(n * G + g)];
        out.push_back(make_tensor(prefix + ".scales", q.scale_dtype, {G, N}, scales));
        out.push_back(make_tensor(prefix + ".g_idx", dtype::I32, {K}, full_g_idx(q)));
        if (info) *info = std::move(q);
        return true;
    }
    return false;
}

QFORGE_DECL void repack_module(const tensor_source& src, const std::string& prefix, const layer_scheme& s, const repack_target& t,
                               std::vector<owned_tensor>& out) {
    if (repack_words(src, prefix, s, t, out)) return;
    quantized_tensor q = repack_prepare(read_quantized(src, prefix, s), t, src.file);
    out = repack_pack(q, prefix, t);
}

QFORGE_DECL std::vector<owned_tensor> repack_module(const tensor_source& src, const std::string& prefix, const layer_scheme& s,
                                                    const repack_target& t) {
    std::vector<owned_tensor> out;
    repack_module(src, prefix, s, t, out);
    return out;
}

namespace repack_detail {

QFORGE_DECL word_fields::word_fields(int b) noexcept {
    for (int s = 0; s < 32; s += b) ones |= 1u << s;
    highs = ones << (b - 1);
}

QFORGE_DECL bool word_fields::any_field_is(std::uint32_t w, std::uint32_t value_everywhere) const noexcept {
    const std::uint32_t x = w ^ value_everywhere;
    return ((x - ones) & ~x & highs) != 0;
}

}  // namespace repack_detail
}  // namespace qforge
#endif
