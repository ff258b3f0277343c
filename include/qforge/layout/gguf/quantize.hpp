// One entry point per direction for every GGUF tensor type: quantize rows of float32 into a
// type's blocks (as llama-quantize would), and decode blocks back to float32.
//
// `quantize_rows` is ggml's `quantize_<t>(src, dst, nrow, n_per_row, imatrix)`: with no imatrix
// it runs the reference quantizer, with one it runs the importance-weighted path (Q8_0 ignores
// it, as ggml does). `quantize_rows_ref` always runs `quantize_row_<t>_ref`.
// F32/F16/BF16 are passthrough conversions (ggml's fp16 and bf16 rounding: RNE).
//
// Every call takes an optional SIMD path (a simd::isa or tag: simd::scalar_tag, simd::avx2_tag,
// ...); without one it uses simd::active_isa() (QFORGE_FORCE_ISA or the best the CPU has). The
// path chooses the table of the gguf kernel family (simd/gguf_kernels.hpp), through which the
// reference quantizers of every K-quant and 32-element type run; every ISA's table gives the scalar
// table's bytes, and those are the scalar port's (kquants.hpp, legacy.hpp) and ggml's.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/layout/gguf/blocks.hpp"
#include "qforge/layout/gguf/kquants.hpp"
#include "qforge/layout/gguf/legacy.hpp"
#include "qforge/layout/gguf/mxfp4.hpp"
#include "qforge/simd/family.hpp"
#include "qforge/simd/gguf_kernels.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::gguf {

/// The types qforge can quantize to and decode from.
constexpr bool can_quantize(ggml_type t) noexcept {
    switch (t) {
        case ggml_type::f32: case ggml_type::f16: case ggml_type::bf16:
        case ggml_type::q4_0: case ggml_type::q4_1: case ggml_type::q5_0: case ggml_type::q5_1:
        case ggml_type::q8_0: case ggml_type::q2_k: case ggml_type::q3_k: case ggml_type::q4_k:
        case ggml_type::q5_k: case ggml_type::q6_k: case ggml_type::iq4_nl:
        case ggml_type::mxfp4:
            return true;
        default:
            return false;
    }
}

namespace detail {

inline void check_rows(ggml_type t, std::int64_t nrow, std::int64_t n_per_row, const void* blocks) {
    if (!can_quantize(t))
        fail<unsupported_error>("", "", "GGUF type " + std::string(type_name(t)) + " is not supported");
    if (nrow < 0 || n_per_row <= 0 || row_bytes(t, n_per_row) < 0)
        fail<shape_error>("", "", "row length " + std::to_string(n_per_row) + " is not a multiple of the " +
                                      std::string(type_name(t)) + " block size " +
                                      std::to_string(traits_of(t).block_elems));
    if (reinterpret_cast<std::uintptr_t>(blocks) % alignof(std::uint16_t) != 0)
        fail<unsupported_error>("", "", "GGUF block buffer is not 2-byte aligned");
}

/// quantize_row_<t>_ref over k elements: through the kernels of `kern` where the type has
/// them (an overload of quantize_ref taking the table), else the scalar port itself.
/// A K-quant super-block with some 16 values all below 2^-60 in magnitude and not all zero
/// (subnormal noise, never a trained weight) goes through the scalar port either way
/// (kern.first_tiny_block finds them; blocks are independent): there ggml's reciprocal scales
/// overflow to infinity and its (int8_t) casts of +-inf and NaN give code 0 (x86 cvttss2si
/// keeps the low byte of INT32_MIN), which the vector kernels' conversions do not reproduce.
template <class Block, std::int64_t Elems>
inline void quantize_ref_with(const simd::gguf_kernels& kern, const float* src, Block* y, std::int64_t k) {
    if constexpr (requires { quantize_ref(kern, src, y, k); } && Elems == 32) {
        quantize_ref(kern, src, y, k);  // the 32-element types: their kernels give code 0 under an infinite 1 / d
    } else if constexpr (requires { quantize_ref(kern, src, y, k); }) {
        // The scan goes a window ahead of the kernels, not over all k first: the window's 64 KB
        // are still in cache when the kernels read them (a whole-matrix scan streamed it twice).
        constexpr std::int64_t window = tiny_scan_window / Elems;  // the K-quants' kernels ask for the next one
        static_assert(window > 0, "a window holds at least one block");
        const std::int64_t nb = k / Elems;
        for (std::int64_t run = 0; run < nb;) {  // run: first block the kernels take
            const std::int64_t span = nb - run < window ? nb - run : window;
            const std::int64_t b = run + kern.first_tiny_block(src + run * Elems, span, Elems);
            if (b > run) quantize_ref(kern, src + run * Elems, y + run, (b - run) * Elems);
            if (b == run + span) {
                run = b;
                continue;
            }
            quantize_ref(src + b * Elems, y + b, Elems);
            run = b + 1;
        }
    } else {
        quantize_ref(src, y, k);
    }
}

template <class Block, std::int64_t Elems>
inline void quantize_blocks(const float* src, std::byte* dst, std::int64_t nrow, std::int64_t n_per_row,
                            const float* imatrix, const simd::gguf_kernels& kern, bool ref_only) {
    auto* y = reinterpret_cast<Block*>(dst);
    if constexpr (std::is_same_v<Block, block_q8_0>) {
        quantize_ref_with<Block, Elems>(kern, src, y, nrow * n_per_row);  // quantize_q8_0 ignores the imatrix
    } else {
        // quantize_iq4_nl searches (ntry 7) with or without an imatrix; only _ref does not
        const bool weighted_path = imatrix != nullptr || (std::is_same_v<Block, block_iq4_nl> && !ref_only);
        if (ref_only || !weighted_path) {
            quantize_ref_with<Block, Elems>(kern, src, y, nrow * n_per_row);
            return;
        }
        const std::int64_t blocks_per_row = n_per_row / Elems;
        for (std::int64_t r = 0; r < nrow; ++r)
            quantize_weighted_row(src + r * n_per_row, y + r * blocks_per_row, n_per_row, imatrix);
    }
}

/// Calls f(block_tag<Block, Elems>) for the block type of t (quantized types only).
template <class Block, std::int64_t Elems>
struct block_tag {
    using block = Block;
    static constexpr std::int64_t elems = Elems;
};

template <class F>
inline void with_block_type(ggml_type t, F&& f) {
    switch (t) {
        case ggml_type::q4_0: return f(block_tag<block_q4_0, 32>{});
        case ggml_type::q4_1: return f(block_tag<block_q4_1, 32>{});
        case ggml_type::q5_0: return f(block_tag<block_q5_0, 32>{});
        case ggml_type::q5_1: return f(block_tag<block_q5_1, 32>{});
        case ggml_type::q8_0: return f(block_tag<block_q8_0, 32>{});
        case ggml_type::q2_k: return f(block_tag<block_q2_k, 256>{});
        case ggml_type::q3_k: return f(block_tag<block_q3_k, 256>{});
        case ggml_type::q4_k: return f(block_tag<block_q4_k, 256>{});
        case ggml_type::q5_k: return f(block_tag<block_q5_k, 256>{});
        case ggml_type::q6_k: return f(block_tag<block_q6_k, 256>{});
        case ggml_type::iq4_nl: return f(block_tag<block_iq4_nl, 32>{});
        case ggml_type::mxfp4: return f(block_tag<block_mxfp4, 32>{});
        default: fail<unsupported_error>("", "", "GGUF type " + std::string(type_name(t)) + " is not supported");
    }
}

inline bool passthrough(ggml_type t) noexcept {
    return t == ggml_type::f32 || t == ggml_type::f16 || t == ggml_type::bf16;
}

inline void convert_out(ggml_type t, const float* src, std::byte* dst, std::int64_t n) noexcept {
    for (std::int64_t i = 0; i < n; ++i) {
        if (t == ggml_type::f32) {
            std::memcpy(dst + 4 * i, &src[i], 4);
        } else {
            const std::uint16_t h = t == ggml_type::f16 ? float_to_fp16(src[i]) : float_to_bf16(src[i]);
            std::memcpy(dst + 2 * i, &h, 2);
        }
    }
}

inline void convert_in(ggml_type t, const std::byte* src, float* dst, std::int64_t n) noexcept {
    for (std::int64_t i = 0; i < n; ++i) {
        if (t == ggml_type::f32) {
            std::memcpy(&dst[i], src + 4 * i, 4);
        } else {
            std::uint16_t h;
            std::memcpy(&h, src + 2 * i, 2);
            dst[i] = t == ggml_type::f16 ? fp16_to_float(h) : bf16_to_float(h);
        }
    }
}

}  // namespace detail

/// Bytes `quantize_rows` writes: nrow * row_bytes(t, n_per_row).
inline std::int64_t quantized_size(ggml_type t, std::int64_t nrow, std::int64_t n_per_row) {
    detail::check_rows(t, nrow, n_per_row, nullptr);
    return nrow * row_bytes(t, n_per_row);
}

/// llama-quantize's quantize_<t>: `imatrix` (n_per_row floats, the same for every row) or null.
/// dst must hold quantized_size(t, nrow, n_per_row) bytes, 2-byte aligned. `i` picks the SIMD
/// path of the gguf kernels (simd/gguf_kernels.hpp), which must be available on this CPU. Any
/// src alignment gives the same bytes; src on a 64-byte boundary (cache_aligned_vector,
/// core/cache_aligned.hpp) runs the 32-element types faster, as their blocks stream through.
/// Rows of the 32-element types (Q4_0 ... Q8_0) with infinities give ggml's bytes too, as ggml
/// computes them on x86; a NaN in a row may not (ggml's codes there come from casts of NaN
/// that C leaves undefined). The converters refuse tensors with either.
inline void quantize_rows(ggml_type t, const float* src, std::int64_t nrow, std::int64_t n_per_row,
                          const float* imatrix, std::byte* dst, simd::isa i, bool ref_only = false) {
    detail::check_rows(t, nrow, n_per_row, dst);
    const auto& kern = simd::kernels_of<simd::gguf_kernels>(i);
    if (detail::passthrough(t)) return detail::convert_out(t, src, dst, nrow * n_per_row);
    detail::with_block_type(t, [&](auto block) {
        using block_t = decltype(block);
        detail::quantize_blocks<typename block_t::block, block_t::elems>(src, dst, nrow, n_per_row, imatrix, kern,
                                                                         ref_only);
    });
}

/// As above, on the path of a tag (simd::scalar_tag, simd::avx2_tag, ...).
template <simd::simd_tag Tag>
inline void quantize_rows(ggml_type t, const float* src, std::int64_t nrow, std::int64_t n_per_row,
                          const float* imatrix, std::byte* dst, Tag, bool ref_only = false) {
    quantize_rows(t, src, nrow, n_per_row, imatrix, dst, Tag::id, ref_only);
}

/// As above, on simd::active_isa()'s path.
inline void quantize_rows(ggml_type t, const float* src, std::int64_t nrow, std::int64_t n_per_row,
                          const float* imatrix, std::byte* dst) {
    quantize_rows(t, src, nrow, n_per_row, imatrix, dst, simd::active_isa());
}

/// ggml's quantize_row_<t>_ref over nrow*n_per_row elements (differs from quantize_rows
/// without an imatrix only for IQ4_NL, whose _ref skips the scale search).
inline void quantize_rows_ref(ggml_type t, const float* src, std::int64_t nrow, std::int64_t n_per_row,
                              std::byte* dst) {
    quantize_rows(t, src, nrow, n_per_row, nullptr, dst, simd::active_isa(), true);
}

/// ggml's dequantize_row_<t> (bit-identical float32), n elements (a multiple of the block size).
/// Q4_K, Q5_K and Q6_K multiply on the gguf kernels of `i` (the same floats on every ISA).
inline void dequantize_rows(ggml_type t, const std::byte* src, std::int64_t n, float* dst, simd::isa i) {
    detail::check_rows(t, 1, n, src);
    if (detail::passthrough(t)) return detail::convert_in(t, src, dst, n);
    detail::with_block_type(t, [&](auto tag) {
        using block = typename decltype(tag)::block;
        const auto* blocks = reinterpret_cast<const block*>(src);
        if constexpr (requires { dequantize_with(simd::kernels_of<simd::gguf_kernels>(i), blocks, dst, n); })
            dequantize_with(simd::kernels_of<simd::gguf_kernels>(i), blocks, dst, n);
        else
            dequantize(blocks, dst, n);
    });
}

/// As above, on simd::active_isa()'s kernels.
inline void dequantize_rows(ggml_type t, const std::byte* src, std::int64_t n, float* dst) {
    dequantize_rows(t, src, n, dst, simd::active_isa());
}

}  // namespace qforge::gguf
