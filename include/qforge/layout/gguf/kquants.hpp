// ggml's 256-element super-block quantizers Q2_K ... Q6_K: reference (`quantize_row_<t>_ref`,
// what llama-quantize runs without an imatrix), importance-weighted (`quantize_row_<t>_impl`)
// and decode, byte-identical to ggml-quants.c (llama.cpp c392e509) built with
// -ffp-contract=off.
//
// Rounding: every code and 6/4-bit scale is `nearest_int` (add 1.5*2^23, read the mantissa:
// round half to even); Q4_K/Q5_K narrow nearest_int to uint8_t before MIN(63, .); requantizing
// divides by the fp16-rounded super-block scale times the sub-block scale, and keeps the search's
// codes where that product is 0. Products feeding sums are never fused (detail/fp.hpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "qforge/core/half.hpp"
#include "qforge/layout/gguf/blocks.hpp"
#include "qforge/layout/gguf/detail/fp.hpp"
#include "qforge/layout/gguf/detail/search.hpp"
#include "qforge/simd/gguf_kernels.hpp"
#include "qforge/simd/prefetch.hpp"

namespace qforge::gguf {

namespace detail {

/// Q2_K/Q3_K 2-bit packing: per 128-element half, byte l holds elements l, l+32, l+64, l+96.
inline void pack_2bit(const std::uint8_t* L, std::uint8_t* qs) noexcept {
    for (int j = 0; j < 256; j += 128)
        for (int l = 0; l < 32; ++l)
            qs[j / 4 + l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 2) |
                                                      (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

inline float sum_squares(const float* x, int n) noexcept {
    float s = 0;
    for (int l = 0; l < n; ++l) s += mul(x[l], x[l]);
    return s;
}

// ---- Q2_K ----
/// quantize_row_q2_K_ref's search of one 16-element sub-block: its scale, *min and codes L.
inline float q2k_sub_search(const float* xs, std::uint8_t* L, float* min) noexcept {
    float weights[16];
    std::uint8_t Laux[16];
    for (int l = 0; l < 16; ++l) weights[l] = std::fabs(xs[l]);
    return make_qkx_quants<false>(16, 3, xs, weights, L, min, Laux, -0.5f, 0.1f, 15, true);
}

/// The sub-block scales a Q2_K super-block stores: d[j] = d * (sc_j & 15), dm[j] = dmin * (sc_j >> 4).
inline void q2k_sub_scales(const block_q2_k& y, float* d, float* dm) noexcept {
    const float dd = fp16_to_float(y.d);
    const float dmin = fp16_to_float(y.dmin);
    for (int j = 0; j < 16; ++j) {
        d[j] = dd * static_cast<float>(y.scales[j] & 0xF);
        dm[j] = dmin * static_cast<float>(y.scales[j] >> 4);
    }
}

inline void q2k_finish(const float* x, block_q2_k& y, std::uint8_t* L) noexcept {
    float d[16], dm[16];
    q2k_sub_scales(y, d, dm);
    for (int j = 0; j < 16; ++j) {
        if (d[j] == 0) continue;
        for (int ii = 0; ii < 16; ++ii)
            L[16 * j + ii] = static_cast<std::uint8_t>(clamp_int(nearest_int((x[16 * j + ii] + dm[j]) / d[j]), 0, 3));
    }
    pack_2bit(L, y.qs);
}

/// quantize_row_q2_K_ref's super-block step: 4-bit scales and mins against the largest.
inline void q2k_scales(const float* scales, const float* mins, block_q2_k& y) noexcept {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 16; ++j) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    if (max_scale > 0) {
        const float iscale = 15.f / max_scale;
        for (int j = 0; j < 16; ++j) y.scales[j] = static_cast<std::uint8_t>(nearest_int(iscale * scales[j]));
        y.d = float_to_fp16(max_scale / 15.f);
    } else {
        for (int j = 0; j < 16; ++j) y.scales[j] = 0;
        y.d = float_to_fp16(0.f);
    }
    if (max_min > 0) {
        const float iscale = 15.f / max_min;
        for (int j = 0; j < 16; ++j) {
            const int l = nearest_int(iscale * mins[j]);
            y.scales[j] = static_cast<std::uint8_t>(y.scales[j] | (l << 4));
        }
        y.dmin = float_to_fp16(max_min / 15.f);
    } else {
        y.dmin = float_to_fp16(0.f);
    }
}

// ---- Q3_K ----
/// ggml's packing of Q3_K's 16 6-bit scales (0..63) into 12 bytes: the low four bits of scales
/// j and j + 8 share byte j (low, high nibble), the top two of scales k, k + 4, k + 8 and k + 12
/// make byte 8 + k. Eight and four bytes at a time: no shift carries a bit into another byte,
/// so the bytes are the same at either endianness.
inline void q3k_pack_scales(const std::uint8_t* l, std::uint8_t* scales) noexcept {
    std::uint64_t first, second;
    std::memcpy(&first, l, 8);
    std::memcpy(&second, l + 8, 8);
    constexpr std::uint64_t nibbles = 0x0F0F0F0F0F0F0F0Full;
    const std::uint64_t low = (first & nibbles) | ((second & nibbles) << 4);
    std::uint32_t q[4];
    std::memcpy(q, l, 16);
    constexpr std::uint32_t two_bits = 0x03030303u;
    const std::uint32_t high = ((q[0] >> 4) & two_bits) | (((q[1] >> 4) & two_bits) << 2) |
                               (((q[2] >> 4) & two_bits) << 4) | (((q[3] >> 4) & two_bits) << 6);
    std::memcpy(scales, &low, 8);
    std::memcpy(scales + 8, &high, 4);
}
inline int q3k_get_scale(int j, const std::uint8_t* scales) noexcept {
    const int lo = j < 8 ? (scales[j] & 0xF) : (scales[j - 8] >> 4);
    return (lo | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
}

/// ggml's search of a super-block's 16 sub-block scales for the first one largest in magnitude
/// (`if (|s| > amax)`, so NaN never wins): that scale, and its magnitude in amax (0 if none).
/// Selects, not a branch: where the largest falls is a coin toss.
inline float largest_scale(const float* scales, float& amax) noexcept {
    float max_scale = 0;
    amax = 0;
    for (int j = 0; j < 16; ++j) {
        const float a = std::fabs(scales[j]);
        const bool larger = a > amax;
        max_scale = larger ? scales[j] : max_scale;
        amax = larger ? a : amax;
    }
    return max_scale;
}

/// The super-block step that Q3_K and Q6_K share up to their own clamps (what the kernel
/// simd::gguf_kernels::super_block_scales computes for many super-blocks at once): amax, the
/// largest |scale| (the first of equal ones: ggml's `if (ax > amax)` from 0), iscale = -nmax /
/// the scale at it, the fp16 d = 1 / iscale and its value, and each nearest_int(iscale * scale).
struct super_block_step {
    float amax;
    std::uint16_t d16;
    float dd;
    float q[16];
};
inline super_block_step super_block_scales(const float* scales, float nmax) noexcept {
    super_block_step s;
    const float iscale = -nmax / largest_scale(scales, s.amax);  // -inf where amax is 0: unused there
    s.d16 = float_to_fp16(1 / iscale);
    s.dd = fp16_to_float(s.d16);
    for (int j = 0; j < 16; ++j) s.q[j] = static_cast<float>(nearest_int(iscale * scales[j]));
    return s;
}

/// Q3_K's block bytes from its super-block step (`super_block_scales` at nmax 32, or the
/// kernel's): the 6-bit signed scales MAX(-32, MIN(31, (int8_t)q)) + 32 and the fp16 d, or,
/// where every scale is 0, scales of 0 (stored as -32) and d 0. d[j] = d * (6-bit scale - 32),
/// the sub-block scales the block stores, from the scales as set rather than unpacked again.
inline void q3k_stored_scales(float amax, std::uint16_t d16, float dd, const float* q, block_q3_k& y,
                              float* d) noexcept {
    std::uint8_t stored[16] = {};
    if (amax > 0) {
        for (int j = 0; j < 16; ++j) {
            const auto l8 = static_cast<std::int8_t>(static_cast<int>(q[j]));
            stored[j] = static_cast<std::uint8_t>(clamp_int(l8, -32, 31) + 32);
        }
        y.d = d16;
    } else {
        y.d = float_to_fp16(0.f);
        dd = 0.f;
    }
    q3k_pack_scales(stored, y.scales);
    for (int j = 0; j < 16; ++j) d[j] = dd * static_cast<float>(stored[j] - 32);
}

/// quantize_row_q3_K_ref's super-block step: 6-bit signed scales against the largest |scale|,
/// and the fp16 d; with `d`, also the sub-block scales the block stores (q3k_stored_scales).
inline void q3k_scales(const float* scales, block_q3_k& y, float* d = nullptr) noexcept {
    const super_block_step s = super_block_scales(scales, 32.f);
    float unused[16];
    q3k_stored_scales(s.amax, s.d16, s.dd, s.q, y, d ? d : unused);
}
/// quantize_row_q3_K_ref's search of one 16-element sub-block, for its codes L (code + 4).
inline void q3k_sub_search(const float* xs, std::uint8_t* L) noexcept {
    std::int8_t l8[16];
    (void)make_q3_quants(16, 4, xs, l8, true);
    for (int i = 0; i < 16; ++i) L[i] = static_cast<std::uint8_t>(l8[i]);
}

inline void q3k_finish(const float* x, block_q3_k& y, std::int8_t* L) noexcept {
    const float dd = fp16_to_float(y.d);
    for (int j = 0; j < 16; ++j) {
        const float d = dd * static_cast<float>(q3k_get_scale(j, y.scales));
        if (d == 0) continue;
        for (int ii = 0; ii < 16; ++ii)
            L[16 * j + ii] = static_cast<std::int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
    }
    std::memset(y.hmask, 0, 32);
    int m = 0;
    std::uint8_t hm = 1;
    std::uint8_t U[256];
    for (int j = 0; j < 256; ++j) {
        if (L[j] > 3) {
            y.hmask[m] = static_cast<std::uint8_t>(y.hmask[m] | hm);
            L[j] = static_cast<std::int8_t>(L[j] - 4);
        }
        U[j] = static_cast<std::uint8_t>(L[j]);
        if (++m == 32) {
            m = 0;
            hm = static_cast<std::uint8_t>(hm << 1);
        }
    }
    pack_2bit(U, y.qs);
}

// ---- Q4_K / Q5_K ----
/// The sub-block scales a Q4_K/Q5_K super-block stores: d[j] = d * sc_j, dm[j] = dmin * m_j.
inline void qk45_sub_scales(const std::uint8_t* scales, std::uint16_t d16, std::uint16_t dmin16, float* d,
                            float* dm) noexcept {
    const float dd = fp16_to_float(d16);
    const float dmin = fp16_to_float(dmin16);
    for (int j = 0; j < 8; ++j) {
        std::uint8_t sc, m;
        get_scale_min_k4(j, scales, sc, m);
        d[j] = dd * static_cast<float>(sc);
        dm[j] = dmin * static_cast<float>(m);
    }
}

/// Requantize each 32-sub-block against the stored 6-bit scale/min and fp16 d/dmin.
template <int Nmax>
inline void qk45_requantize(const float* x, const std::uint8_t* scales, std::uint16_t d16,
                            std::uint16_t dmin16, std::uint8_t* L) noexcept {
    float d[8], dm[8];
    qk45_sub_scales(scales, d16, dmin16, d, dm);
    for (int j = 0; j < 8; ++j) {
        if (d[j] == 0) continue;
        for (int ii = 0; ii < 32; ++ii)
            L[32 * j + ii] = static_cast<std::uint8_t>(clamp_int(nearest_int((x[32 * j + ii] + dm[j]) / d[j]), 0, Nmax));
    }
}

inline void q4k_pack(const std::uint8_t* L, std::uint8_t* q) noexcept {
    for (int j = 0; j < 256; j += 64, q += 32)
        for (int l = 0; l < 32; ++l) q[l] = static_cast<std::uint8_t>(L[j + l] | (L[j + l + 32] << 4));
}

inline void q5k_pack(const std::uint8_t* L, std::uint8_t* qh, std::uint8_t* ql) noexcept {
    std::memset(qh, 0, 32);
    std::uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < 256; n += 64, ql += 32) {
        for (int j = 0; j < 32; ++j) {
            int l1 = L[n + j];
            if (l1 > 15) {
                l1 -= 16;
                qh[j] = static_cast<std::uint8_t>(qh[j] | m1);
            }
            int l2 = L[n + j + 32];
            if (l2 > 15) {
                l2 -= 16;
                qh[j] = static_cast<std::uint8_t>(qh[j] | m2);
            }
            ql[j] = static_cast<std::uint8_t>(l1 | (l2 << 4));
        }
        m1 = static_cast<std::uint8_t>(m1 << 2);
        m2 = static_cast<std::uint8_t>(m2 << 2);
    }
}

/// The reference's search of one sub-block for Q4_K (Nmax 15) and Q5_K (Nmax 31): weights
/// av_x + |x|, make_qkx2_quants. Returns the scale; fills *min and the 32 codes L.
template <int Nmax>
inline float qk45_sub_search(const float* xs, std::uint8_t* L, float* min) noexcept {
    constexpr float rmin = Nmax == 15 ? -1.f : -0.5f;
    constexpr int nstep = Nmax == 15 ? 20 : 15;
    float weights[32];
    std::uint8_t Laux[32];
    const float av_x = std::sqrt(sum_squares(xs, 32) / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    return make_qkx_quants<false>(32, Nmax, xs, weights, L, min, Laux, rmin, 0.1f, nstep, false);
}
/// Every sub-block of a super-block: scales[8], mins[8] and L.
template <int Nmax>
inline void qk45_ref_search(const float* x, float* scales, float* mins, std::uint8_t* L) noexcept {
    for (int j = 0; j < 8; ++j) scales[j] = qk45_sub_search<Nmax>(x + 32 * j, L + 32 * j, &mins[j]);
}

/// The reference's super-block step for Q4_K/Q5_K: 6-bit scales and mins against the largest.
inline void qk45_ref_scales(const float* scales, const float* mins, std::uint8_t* packed,
                            std::uint16_t& d16, std::uint16_t& dmin16) noexcept {
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < 8; ++j) {
        auto ls = static_cast<std::uint8_t>(nearest_int(inv_scale * scales[j]));
        auto lm = static_cast<std::uint8_t>(nearest_int(inv_min * mins[j]));
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        set_scale_min_k4(j, ls, lm, packed);
    }
    d16 = float_to_fp16(max_scale / 63.f);
    dmin16 = float_to_fp16(max_min / 63.f);
}

/// The importance-weighted path's search for Q4_K/Q5_K (quantize_row_q4_K_impl).
template <int Nmax>
inline void qk45_weighted(const float* x, const float* qw, std::uint8_t* packed, std::uint16_t& d16,
                          std::uint16_t& dmin16, std::uint8_t* L) noexcept {
    float weights[32], sw[8], mins[8], scales[8];
    std::uint8_t Laux[32], Ls[8], Lm[8];
    const float sigma2 = 2 * sum_squares(x, 256) / 256;
    const float av_x = std::sqrt(sigma2);
    for (int j = 0; j < 8; ++j) {
        const float* xs = x + 32 * j;
        if (qw) {
            for (int l = 0; l < 32; ++l) weights[l] = qw[32 * j + l] * std::sqrt(sigma2 + mul(xs[l], xs[l]));
        } else {
            for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
        }
        float sumw = 0;
        for (int l = 0; l < 32; ++l) sumw += weights[l];
        sw[j] = sumw;
        scales[j] = make_qkx_quants<true>(32, Nmax, xs, weights, L + 32 * j, &mins[j], Laux, -0.9f,
                                          0.05f, 36, false);
    }
    const float d_block = make_qp_quants(8, 63, scales, Ls, sw);
    const float m_block = make_qp_quants(8, 63, mins, Lm, sw);
    for (int j = 0; j < 8; ++j) {
        const std::uint8_t ls = Ls[j] < 63 ? Ls[j] : 63;  // a no-op for Q4_K (qp codes <= 63)
        const std::uint8_t lm = Lm[j] < 63 ? Lm[j] : 63;
        set_scale_min_k4(j, ls, lm, packed);
    }
    d16 = float_to_fp16(d_block);
    dmin16 = float_to_fp16(m_block);
}

// ---- Q6_K ----
inline void q6k_pack(const std::int8_t* L, block_q6_k& y) noexcept {
    std::uint8_t* ql = y.ql;
    std::uint8_t* qh = y.qh;
    for (int j = 0; j < 256; j += 128, ql += 64, qh += 32) {
        for (int l = 0; l < 32; ++l) {
            const int a = L[j + l], b = L[j + l + 32], c = L[j + l + 64], e = L[j + l + 96];
            ql[l] = static_cast<std::uint8_t>((a & 0xF) | ((c & 0xF) << 4));
            ql[l + 32] = static_cast<std::uint8_t>((b & 0xF) | ((e & 0xF) << 4));
            qh[l] = static_cast<std::uint8_t>((a >> 4) | ((b >> 4) << 2) | ((c >> 4) << 4) | ((e >> 4) << 6));
        }
    }
}

/// Q6_K's block bytes from its super-block step (`super_block_scales` at nmax 128, or the
/// kernel's): the fp16 d and the 8-bit sub-block scales (int8_t)MIN(127, q), and d[j] = d *
/// scale_j to requantize with. Returns false (y all zero) when every sub-block scale is below
/// GROUP_MAX_EPS.
inline bool q6k_stored_scales(float amax, std::uint16_t d16, float dd, const float* q, block_q6_k& y,
                              float* d) noexcept {
    if (amax < group_max_eps) {
        std::memset(&y, 0, sizeof y);
        return false;
    }
    y.d = d16;
    for (int ib = 0; ib < 16; ++ib) {
        const int v = static_cast<int>(q[ib]);
        y.scales[ib] = static_cast<std::int8_t>(v < 127 ? v : 127);
    }
    for (int j = 0; j < 16; ++j) d[j] = dd * static_cast<float>(y.scales[j]);
    return true;
}

/// Q6_K's super-block step: the fp16 d and the 8-bit sub-block scales against the largest
/// |scale| (q6k_stored_scales).
inline bool q6k_scales(const float* scales, block_q6_k& y, float* d) noexcept {
    const super_block_step s = super_block_scales(scales, 128.f);
    return q6k_stored_scales(s.amax, s.d16, s.dd, s.q, y, d);
}

/// quantize_row_q6_K_ref's search of one 16-element sub-block, for its codes L (code + 32).
inline void q6k_sub_search(const float* xs, std::uint8_t* L) noexcept {
    std::int8_t l8[16];
    (void)make_qx_quants(16, 32, xs, l8, 1, nullptr);
    for (int i = 0; i < 16; ++i) L[i] = static_cast<std::uint8_t>(l8[i]);
}

/// Everything after the 16 sub-block searches of Q6_K (shared by ref and weighted paths).
inline void q6k_finish(const float* x, const float* scales, block_q6_k& y, std::int8_t* L) noexcept {
    float d[16];
    if (!q6k_scales(scales, y, d)) return;
    for (int j = 0; j < 16; ++j) {
        if (d[j] == 0) continue;
        for (int ii = 0; ii < 16; ++ii)
            L[16 * j + ii] = static_cast<std::int8_t>(clamp_int(nearest_int(x[16 * j + ii] / d[j]), -32, 31) + 32);
    }
    q6k_pack(L, y);
}

}  // namespace detail

// ---- reference quantizers ------------------------------------------------------------------

inline void quantize_ref(const float* x, block_q2_k* y, std::int64_t k) noexcept {
    std::uint8_t L[256];
    float mins[16], scales[16];
    for (std::int64_t i = 0; i < k / 256; ++i, x += 256) {
        for (int j = 0; j < 16; ++j) scales[j] = detail::q2k_sub_search(x + 16 * j, L + 16 * j, &mins[j]);
        detail::q2k_scales(scales, mins, y[i]);
        detail::q2k_finish(x, y[i], L);
    }
}

inline void quantize_ref(const float* x, block_q3_k* y, std::int64_t k) noexcept {
    std::int8_t L[256];
    float scales[16];
    for (std::int64_t i = 0; i < k / 256; ++i, x += 256) {
        for (int j = 0; j < 16; ++j) scales[j] = detail::make_q3_quants(16, 4, x + 16 * j, L + 16 * j, true);
        detail::q3k_scales(scales, y[i]);
        detail::q3k_finish(x, y[i], L);
    }
}

inline void quantize_ref(const float* x, block_q4_k* y, std::int64_t k) noexcept {
    std::uint8_t L[256];
    float scales[8], mins[8];
    for (std::int64_t i = 0; i < k / 256; ++i, x += 256) {
        detail::qk45_ref_search<15>(x, scales, mins, L);
        detail::qk45_ref_scales(scales, mins, y[i].scales, y[i].d, y[i].dmin);
        detail::qk45_requantize<15>(x, y[i].scales, y[i].d, y[i].dmin, L);
        detail::q4k_pack(L, y[i].qs);
    }
}

inline void quantize_ref(const float* x, block_q5_k* y, std::int64_t k) noexcept {
    std::uint8_t L[256];
    float scales[8], mins[8];
    for (std::int64_t i = 0; i < k / 256; ++i, x += 256) {
        detail::qk45_ref_search<31>(x, scales, mins, L);
        detail::qk45_ref_scales(scales, mins, y[i].scales, y[i].d, y[i].dmin);
        detail::qk45_requantize<31>(x, y[i].scales, y[i].d, y[i].dmin, L);
        detail::q5k_pack(L, y[i].qh, y[i].qs);
    }
}

inline void quantize_ref(const float* x, block_q6_k* y, std::int64_t k) noexcept {
    std::int8_t L[256];
    float scales[16];
    for (std::int64_t i = 0; i < k / 256; ++i, x += 256) {
        for (int ib = 0; ib < 16; ++ib) scales[ib] = detail::make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1, nullptr);
        detail::q6k_finish(x, scales, y[i], L);
    }
}

// ---- the reference quantizers on a SIMD path (simd/gguf_kernels.hpp) -------------------------
// The same bytes as quantize_ref above: the sub-block searches and the requantization run in the
// kernels of `kern`, the super-block scale steps here. Super-blocks go through in chunks, so
// the searches fill their lanes.
// A K-quant requantizes every sub-block against its stored scale and keeps the search's codes
// only where that scale is 0 (a quiet sub-block beside loud ones). The vector searches give no
// codes (computing and transposing them was a tenth of their time); those rare sub-blocks take
// the scalar port's search again, which gives the same codes.

namespace detail {
/// The search's codes where the quantizer keeps them: the scalar port's search(xs, L) of each
/// of the `subs` sub-blocks of `len` elements whose stored scale d[j] is 0 (see above).
template <class Search>
inline void kept_search_codes(const float* d, int subs, int len, const float* x, std::uint8_t* L, Search search) {
    for (int j = 0; j < subs; ++j)
        if (d[j] == 0) search(x + len * j, L + len * j);
}

inline constexpr std::int64_t kernel_chunk = 4;  // super-blocks per kernel call: the searches' lanes (<= 4 on AVX-512) fill, x stays in L1

/// The floats that quantize_ref_with's tiny-block scan (layout/gguf/quantize.hpp) reads ahead
/// of the kernels: 64 KB, a window the kernels then find in cache.
inline constexpr std::int64_t tiny_scan_window = 64 * 256;

/// Asks for the super-block one scan window past the one at sb, so that the scan finds it in
/// cache too. Read first by the scan, memory had been its bottleneck: the scan, which does
/// little with each line, waited on every one of them, 4-7% of a K-quant's time; asked for
/// while a window's kernels run, the lines are there when it comes (128 x 11008 rows, Intel
/// Xeon AVX2, alternated, medians of 7-9: Q2_K 156.6 -> 163.7 M weights/s, Q4_K 141.1 -> 144.3).
inline void ask_for_next_window(const float* sb) noexcept {
    simd::prefetch_lines(sb, tiny_scan_window * sizeof(float), 256 * sizeof(float));  // past the data at the end: a hint
}

template <int Nmax, class Block>
inline void qk45_ref_kernels(const simd::gguf_kernels& kern, const float* x, Block* y, std::int64_t nb) noexcept {
    constexpr float rmin = Nmax == 15 ? -1.f : -0.5f;
    constexpr int nstep = Nmax == 15 ? 20 : 15;
    float scales[8 * kernel_chunk], mins[8 * kernel_chunk];
    std::uint8_t L[256 * kernel_chunk];
    for (std::int64_t i = 0; i < nb; i += kernel_chunk) {
        const std::int64_t n = nb - i < kernel_chunk ? nb - i : kernel_chunk;
        kern.qkx2_search(x + 256 * i, static_cast<std::size_t>(8 * n), Nmax, rmin, nstep, scales, mins);
        for (std::int64_t h = 0; h < n; ++h) {
            ask_for_next_window(x + 256 * (i + h));
            Block& b = y[i + h];
            float d[8], dm[8];
            qk45_ref_scales(scales + 8 * h, mins + 8 * h, b.scales, b.d, b.dmin);
            qk45_sub_scales(b.scales, b.d, b.dmin, d, dm);
            kept_search_codes(d, 8, 32, x + 256 * (i + h), L + 256 * h, [](const float* xs, std::uint8_t* l) {
                float min;
                (void)qk45_sub_search<Nmax>(xs, l, &min);
            });
            kern.requantize(x + 256 * (i + h), 8, 32, d, dm, 0.f, static_cast<float>(Nmax), 0.f, L + 256 * h);
            if constexpr (Nmax == 15) kern.pack_q45k(L + 256 * h, false, nullptr, b.qs);
            else kern.pack_q45k(L + 256 * h, true, b.qh, b.qs);
        }
    }
}
}  // namespace detail

inline void quantize_ref(const simd::gguf_kernels& kern, const float* x, block_q4_k* y, std::int64_t k) noexcept {
    detail::qk45_ref_kernels<15>(kern, x, y, k / 256);
}

inline void quantize_ref(const simd::gguf_kernels& kern, const float* x, block_q5_k* y, std::int64_t k) noexcept {
    detail::qk45_ref_kernels<31>(kern, x, y, k / 256);
}

inline void quantize_ref(const simd::gguf_kernels& kern, const float* x, block_q2_k* y, std::int64_t k) noexcept {
    constexpr std::int64_t chunk = detail::kernel_chunk;
    float scales[16 * chunk], mins[16 * chunk], d[16 * chunk], dm[16 * chunk];
    std::uint8_t L[256 * chunk], sc[16 * chunk];
    std::uint16_t dm16[2 * chunk];
    for (std::int64_t i = 0; i < k / 256; i += chunk) {
        const std::int64_t n = k / 256 - i < chunk ? k / 256 - i : chunk;
        kern.q2k_search(x + 256 * i, static_cast<std::size_t>(16 * n), scales, mins);
        kern.q2k_scales(scales, mins, static_cast<std::size_t>(n), sc, dm16, d, dm);
        for (std::int64_t h = 0; h < n; ++h) {
            detail::ask_for_next_window(x + 256 * (i + h));
            std::memcpy(y[i + h].scales, sc + 16 * h, 16);
            y[i + h].d = dm16[2 * h];
            y[i + h].dmin = dm16[2 * h + 1];
            detail::kept_search_codes(d + 16 * h, 16, 16, x + 256 * (i + h), L + 256 * h, [](const float* xs, std::uint8_t* l) {
                float min;
                (void)detail::q2k_sub_search(xs, l, &min);
            });
            kern.requantize(x + 256 * (i + h), 16, 16, d + 16 * h, dm + 16 * h, 0.f, 3.f, 0.f, L + 256 * h);
            detail::pack_2bit(L + 256 * h, y[i + h].qs);
        }
    }
}

inline void quantize_ref(const simd::gguf_kernels& kern, const float* x, block_q3_k* y, std::int64_t k) noexcept {
    // q3_search's retry passes gather sub-blocks across a call: 1024 a call fill them, 64 did not
    constexpr std::int64_t chunk = 16 * detail::kernel_chunk;
    float scales[16 * chunk], q[16 * chunk], dd[chunk], amax[chunk];
    std::uint16_t d16[chunk];
    std::uint8_t L[256];  // one super-block's codes, requantized (or kept from its search) and packed before the next
    for (std::int64_t i = 0; i < k / 256; i += chunk) {
        const std::int64_t n = k / 256 - i < chunk ? k / 256 - i : chunk;
        kern.q3_search(x + 256 * i, static_cast<std::size_t>(16 * n), scales);
        kern.super_block_scales(scales, static_cast<std::size_t>(n), 32.f, d16, dd, q, amax);
        for (std::int64_t h = 0; h < n; ++h) {
            detail::ask_for_next_window(x + 256 * (i + h));
            float d[16];
            block_q3_k& b = y[i + h];
            detail::q3k_stored_scales(amax[h], d16[h], dd[h], q + 16 * h, b, d);
            detail::kept_search_codes(d, 16, 16, x + 256 * (i + h), L, detail::q3k_sub_search);
            kern.requantize(x + 256 * (i + h), 16, 16, d, nullptr, -4.f, 3.f, 4.f, L);
            kern.pack_q3k(L, b.hmask, b.qs);
        }
    }
}

inline void quantize_ref(const simd::gguf_kernels& kern, const float* x, block_q6_k* y, std::int64_t k) noexcept {
    constexpr std::int64_t chunk = detail::kernel_chunk;
    float scales[16 * chunk], q[16 * chunk], dd[chunk], amax[chunk];
    std::uint16_t d16[chunk];
    std::uint8_t L[256 * chunk];
    for (std::int64_t i = 0; i < k / 256; i += chunk) {
        const std::int64_t n = k / 256 - i < chunk ? k / 256 - i : chunk;
        kern.qx32_search(x + 256 * i, static_cast<std::size_t>(16 * n), scales);
        kern.super_block_scales(scales, static_cast<std::size_t>(n), 128.f, d16, dd, q, amax);
        for (std::int64_t h = 0; h < n; ++h) {
            detail::ask_for_next_window(x + 256 * (i + h));
            float d[16];
            if (!detail::q6k_stored_scales(amax[h], d16[h], dd[h], q + 16 * h, y[i + h], d)) continue;
            detail::kept_search_codes(d, 16, 16, x + 256 * (i + h), L + 256 * h, detail::q6k_sub_search);
            kern.requantize(x + 256 * (i + h), 16, 16, d, nullptr, -32.f, 31.f, 32.f, L + 256 * h);
            kern.pack_q6k(L + 256 * h, y[i + h].ql, y[i + h].qh);
        }
    }
}

// ---- importance-weighted (one row; qw has n_per_row entries) -------------------------------

inline void quantize_weighted_row(const float* x, block_q2_k* y, std::int64_t n_per_row, const float* qw) noexcept {
    std::uint8_t L[256], Laux[16], Ls[16], Lm[16];
    float mins[16], scales[16], sw[16], weight[16];
    for (std::int64_t i = 0; i < n_per_row / 256; ++i, x += 256) {
        const float sigma2 = detail::sum_squares(x, 256) / 256;
        for (int j = 0; j < 16; ++j) {
            const float* q = qw + 256 * i + 16 * j;
            for (int l = 0; l < 16; ++l) weight[l] = q[l] * std::sqrt(sigma2 + detail::mul(x[16 * j + l], x[16 * j + l]));
            sw[j] = 0;
            for (int l = 0; l < 16; ++l) sw[j] += weight[l];
            scales[j] = detail::make_qkx_quants<true>(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux,
                                                      -0.9f, 0.05f, 36, false);
        }
        const float dm = detail::make_qp_quants(16, 15, scales, Ls, sw);
        const float mm = detail::make_qp_quants(16, 15, mins, Lm, sw);
        y[i].d = float_to_fp16(dm);
        y[i].dmin = float_to_fp16(mm);
        for (int j = 0; j < 16; ++j) y[i].scales[j] = static_cast<std::uint8_t>(Ls[j] | (Lm[j] << 4));
        detail::q2k_finish(x, y[i], L);
    }
}

inline void quantize_weighted_row(const float* x, block_q3_k* y, std::int64_t n_per_row, const float* qw) noexcept {
    std::int8_t L[256], Ls[16];
    float scales[16], weight[16], sw[16];
    for (std::int64_t i = 0; i < n_per_row / 256; ++i, x += 256) {
        const float sigma2 = 2 * detail::sum_squares(x, 256) / 256;
        for (int j = 0; j < 16; ++j) {
            if (qw) {
                const float* q = qw + 256 * i + 16 * j;
                for (int l = 0; l < 16; ++l)
                    weight[l] = q[l] * std::sqrt(sigma2 + detail::mul(x[16 * j + l], x[16 * j + l]));
            } else {
                for (int l = 0; l < 16; ++l) weight[l] = x[16 * j + l] * x[16 * j + l];
            }
            float sumw = 0;
            for (int l = 0; l < 16; ++l) sumw += weight[l];
            sw[j] = sumw;
            scales[j] = detail::make_qx_quants(16, 4, x + 16 * j, L + 16 * j, 1, weight);
        }
        const float d_block = detail::make_qx_quants(16, 32, scales, Ls, 1, sw);
        detail::q3k_pack_scales(reinterpret_cast<const std::uint8_t*>(Ls), y[i].scales);  // Ls: 0..63
        y[i].d = float_to_fp16(d_block);
        detail::q3k_finish(x, y[i], L);
    }
}

inline void quantize_weighted_row(const float* x, block_q4_k* y, std::int64_t n_per_row, const float* qw) noexcept {
    std::uint8_t L[256];
    for (std::int64_t i = 0; i < n_per_row / 256; ++i, x += 256) {
        detail::qk45_weighted<15>(x, qw ? qw + 256 * i : nullptr, y[i].scales, y[i].d, y[i].dmin, L);
        detail::qk45_requantize<15>(x, y[i].scales, y[i].d, y[i].dmin, L);
        detail::q4k_pack(L, y[i].qs);
    }
}

inline void quantize_weighted_row(const float* x, block_q5_k* y, std::int64_t n_per_row, const float* qw) noexcept {
    std::uint8_t L[256];
    for (std::int64_t i = 0; i < n_per_row / 256; ++i, x += 256) {
        detail::qk45_weighted<31>(x, qw ? qw + 256 * i : nullptr, y[i].scales, y[i].d, y[i].dmin, L);
        detail::qk45_requantize<31>(x, y[i].scales, y[i].d, y[i].dmin, L);
        detail::q5k_pack(L, y[i].qh, y[i].qs);
    }
}

inline void quantize_weighted_row(const float* x, block_q6_k* y, std::int64_t n_per_row, const float* qw) noexcept {
    std::int8_t L[256];
    float scales[16];
    for (std::int64_t i = 0; i < n_per_row / 256; ++i, x += 256) {
        for (int ib = 0; ib < 16; ++ib)
            scales[ib] = detail::make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1, qw ? qw + 256 * i + 16 * ib : nullptr);
        detail::q6k_finish(x, scales, y[i], L);
    }
}

// ---- decode --------------------------------------------------------------------------------

inline void dequantize(const block_q2_k* x, float* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 256; ++i) {
        const float d = fp16_to_float(x[i].d);
        const float min = fp16_to_float(x[i].dmin);
        const std::uint8_t* q = x[i].qs;
        int is = 0;
        for (int n = 0; n < 256; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; ++half) {
                    const std::uint8_t sc = x[i].scales[is++];
                    const float dl = d * static_cast<float>(sc & 0xF);
                    const float ml = min * static_cast<float>(sc >> 4);
                    for (int l = 0; l < 16; ++l)
                        *y++ = detail::mul(dl, static_cast<float>((q[l + 16 * half] >> shift) & 3)) - ml;
                }
            }
        }
    }
}

inline void dequantize(const block_q3_k* x, float* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 256; ++i) {
        const float d_all = fp16_to_float(x[i].d);
        const std::uint8_t* q = x[i].qs;
        const std::uint8_t* hm = x[i].hmask;
        std::uint8_t m = 1;
        int is = 0;
        // ggml unpacks the scales in the order 0,1 (for l<16, l>=16) of each shift step.
        for (int n = 0; n < 256; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = static_cast<std::uint8_t>(m << 1)) {
                for (int half = 0; half < 2; ++half) {
                    const float dl = d_all * static_cast<float>(detail::q3k_get_scale(is++, x[i].scales));
                    for (int l = 16 * half; l < 16 * half + 16; ++l) {
                        const int v = ((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4);
                        *y++ = dl * static_cast<float>(v);
                    }
                }
            }
        }
    }
}

namespace detail {
template <bool Five, class Block>
inline void dequantize_k45(const Block* x, float* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 256; ++i) {
        const float d = fp16_to_float(x[i].d);
        const float min = fp16_to_float(x[i].dmin);
        const std::uint8_t* q = x[i].qs;
        std::uint8_t u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < 256; j += 64, q += 32, is += 2) {
            std::uint8_t sc, m;
            get_scale_min_k4(is + 0, x[i].scales, sc, m);
            const float d1 = d * static_cast<float>(sc), m1 = min * static_cast<float>(m);
            get_scale_min_k4(is + 1, x[i].scales, sc, m);
            const float d2 = d * static_cast<float>(sc), m2 = min * static_cast<float>(m);
            for (int l = 0; l < 32; ++l) {
                int v = q[l] & 0xF;
                if constexpr (Five) v += (x[i].qh[l] & u1) ? 16 : 0;
                *y++ = mul(d1, static_cast<float>(v)) - m1;
            }
            for (int l = 0; l < 32; ++l) {
                int v = q[l] >> 4;
                if constexpr (Five) v += (x[i].qh[l] & u2) ? 16 : 0;
                *y++ = mul(d2, static_cast<float>(v)) - m2;
            }
            u1 = static_cast<std::uint8_t>(u1 << 2);
            u2 = static_cast<std::uint8_t>(u2 << 2);
        }
    }
}
}  // namespace detail

inline void dequantize(const block_q4_k* x, float* y, std::int64_t k) noexcept { detail::dequantize_k45<false>(x, y, k); }
inline void dequantize(const block_q5_k* x, float* y, std::int64_t k) noexcept { detail::dequantize_k45<true>(x, y, k); }

inline void dequantize(const block_q6_k* x, float* y, std::int64_t k) noexcept {
    for (std::int64_t i = 0; i < k / 256; ++i) {
        const float d = fp16_to_float(x[i].d);
        const std::uint8_t* ql = x[i].ql;
        const std::uint8_t* qh = x[i].qh;
        const std::int8_t* sc = x[i].scales;
        for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
                y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
                y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
                y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
            }
        }
    }
}

// The K-quants' dequantization with the products on a gguf kernel table (dequantize_rows):
// the same floats as the scalar definitions above, on every ISA.
namespace detail {
/// dequantize_k45's values with the products on `kern`'s ISA: each block's codes unpacked to
/// bytes and its sub-block factors computed here, as dequantize_k45 computes them.
template <bool Five, class Block>
inline void dequantize_k45_with(const simd::gguf_kernels& kern, const Block* x, float* y, std::int64_t k) noexcept {
    std::uint8_t codes[256];
    float d[8], m[8];
    for (std::int64_t i = 0; i < k / 256; ++i, y += 256) {
        const float dd = fp16_to_float(x[i].d), min = fp16_to_float(x[i].dmin);
        for (int j = 0; j < 8; ++j) {
            std::uint8_t sc, mn;
            get_scale_min_k4(j, x[i].scales, sc, mn);
            d[j] = dd * static_cast<float>(sc);
            m[j] = min * static_cast<float>(mn);
        }
        for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l) {
                const std::uint8_t q = x[i].qs[32 * c + l];
                codes[64 * c + l] = q & 0xF;
                codes[64 * c + 32 + l] = q >> 4;
                if constexpr (Five) {
                    codes[64 * c + l] |= ((x[i].qh[l] >> (2 * c)) & 1) << 4;
                    codes[64 * c + 32 + l] |= ((x[i].qh[l] >> (2 * c + 1)) & 1) << 4;
                }
            }
        kern.dequantize_codes(codes, 8, 32, d, m, 0.f, y);
    }
}
}  // namespace detail

/// The values of dequantize(const block_q6_k*) with the products on `kern`'s ISA.
inline void dequantize_with(const simd::gguf_kernels& kern, const block_q6_k* x, float* y, std::int64_t k) noexcept {
    std::uint8_t codes[256];  // code + 32, 0..63
    float d[16];
    for (std::int64_t i = 0; i < k / 256; ++i, y += 256) {
        const float dd = fp16_to_float(x[i].d);
        for (int j = 0; j < 16; ++j) d[j] = dd * static_cast<float>(x[i].scales[j]);
        for (int h = 0; h < 2; ++h) {
            const std::uint8_t* ql = x[i].ql + 64 * h;
            const std::uint8_t* qh = x[i].qh + 32 * h;
            std::uint8_t* c = codes + 128 * h;
            for (int l = 0; l < 32; ++l) {
                c[l] = static_cast<std::uint8_t>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4));
                c[l + 32] = static_cast<std::uint8_t>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4));
                c[l + 64] = static_cast<std::uint8_t>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4));
                c[l + 96] = static_cast<std::uint8_t>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4));
            }
        }
        kern.dequantize_codes(codes, 16, 16, d, nullptr, 32.f, y);
    }
}
inline void dequantize_with(const simd::gguf_kernels& kern, const block_q4_k* x, float* y, std::int64_t k) noexcept {
    detail::dequantize_k45_with<false>(kern, x, y, k);
}
inline void dequantize_with(const simd::gguf_kernels& kern, const block_q5_k* x, float* y, std::int64_t k) noexcept {
    detail::dequantize_k45_with<true>(kern, x, y, k);
}

}  // namespace qforge::gguf
