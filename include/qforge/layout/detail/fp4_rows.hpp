// What the two compressed-tensors FP4 layouts (layout/nvfp4.hpp, layout/mxfp4.hpp) share: the
// checks on the float weight they take, reading its values, the E2M1 rounding of a quotient
// and the nibble packing.
//
// Nibble order: compressed-tensors `compressors/nvfp4/helpers.py pack_fp4_to_uint8` packs
// consecutive pairs along a row as `idx[:, 0] | idx[:, 1] << 4`: the low nibble is the even
// column, the high nibble the odd one. `unpack_fp4_from_uint8` reads them back in that order.
// MXFP4 uses the same packer (`compressors/mxfp4/base.py MXFP4PackedCompressor` subclasses
// NVFP4PackedCompressor and overrides only the scale).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/core/minifloat.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/fp8.hpp"
#include "qforge/quant/snr.hpp"
#include "qforge/simd/group_kernels.hpp"
#include "qforge/simd/minifloat_kernels.hpp"

namespace qforge::detail {

/// E2M1 code of a finite float, as compressed-tensors rounds it: clamp to [-6, 6], then
/// `FP4_E2M1_DATA.cast_to_fp4` (CTn `quantization/quant_args.py`: the thresholds 0.25 <,
/// 0.75 <=, 1.25 <, 1.75 <=, 2.5 <, 3.5 <=, 5.0 <, i.e. round half to the even code) and the
/// sign bit of the rounded value (`pack_fp4_to_uint8` uses torch.signbit; a negative value
/// that rounds to zero is -0.0, code 0x8). The same codes as float_to_e2m1 for every finite
/// float (tests/test_fp4.cpp checks it), written as a sum of comparisons so that the compiler
/// can vectorize the loop it sits in.
inline std::uint8_t e2m1_code_of(float q) noexcept {
    const float a = std::fabs(q);
    const unsigned m = static_cast<unsigned>(a > 0.25f) + static_cast<unsigned>(a >= 0.75f) +
                       static_cast<unsigned>(a > 1.25f) + static_cast<unsigned>(a >= 1.75f) +
                       static_cast<unsigned>(a > 2.5f) + static_cast<unsigned>(a >= 3.5f) + static_cast<unsigned>(a > 5.0f);
    return static_cast<std::uint8_t>(m | (std::signbit(q) ? 0x8u : 0x0u));
}

/// Refuses what an FP4 layout cannot take from `w` [N, K]: a dtype other than F32/BF16/F16,
/// a rank other than 2, bytes that do not match the shape, and K not a multiple of `group`
/// (K odd is named on its own: two codes share a byte).
inline void check_fp4_weight(const tensor_view& w, std::int64_t group, std::string_view format) {
    const std::string f(format);
    if ((w.type != dtype::F32 && w.type != dtype::BF16 && w.type != dtype::F16) || w.rank() != 2)
        fail<unsupported_error>({}, w.name, f + " quantization takes a 2-D F32, BF16 or F16 weight");
    const std::int64_t n = w.shape[0], k = w.shape[1];
    if (n <= 0 || k <= 0 || w.bytes.size() != static_cast<std::size_t>(n * k) * dtype_size(w.type))
        fail<shape_error>({}, w.name, "weight bytes do not match shape " + shape_to_string(w.shape));
    if (k % 2 != 0)
        fail<unsupported_error>({}, w.name, f + " packs two E2M1 codes per byte: K=" + std::to_string(k) + " is odd");
    if (k % group != 0)
        fail<unsupported_error>({}, w.name, f + " needs whole groups of " + std::to_string(group) + ": K=" +
                                                std::to_string(k) + " is not a multiple of " + std::to_string(group));
}

/// Why an FP4 layout with groups of `group` cannot hold a [n, k] weight, or empty.
inline std::string fp4_shape_refusal(std::int64_t k, std::int64_t group, std::string_view format) {
    const std::string f(format);
    if (k % 2 != 0) return f + " packs two E2M1 codes per byte: K=" + std::to_string(k) + " is odd";
    if (k % group != 0)
        return f + " needs whole groups of " + std::to_string(group) + ": K=" + std::to_string(k) + " is not a multiple of " +
               std::to_string(group);
    return {};
}

/// Row r of `w` as floats into `out` (K values); returns the column of the first NaN or
/// infinity, or -1. The dtype is switched on once per row and each loop is a plain widening
/// the compiler vectorizes; the finiteness test is one integer max over the magnitudes' bits.
inline std::int64_t load_row(const tensor_view& w, std::int64_t r, float* out) noexcept {
    const std::int64_t k = w.shape[1];
    const std::byte* src = w.bytes.data() + static_cast<std::size_t>(r * k) * dtype_size(w.type);
    if (w.type == dtype::BF16) {
        for (std::int64_t c = 0; c < k; ++c) {
            std::uint16_t h;
            std::memcpy(&h, src + 2 * c, 2);
            out[c] = std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
        }
    } else if (w.type == dtype::F16) {
        for (std::int64_t c = 0; c < k; ++c) {
            std::uint16_t h;
            std::memcpy(&h, src + 2 * c, 2);
            out[c] = fp16_to_float(h);
        }
    } else {
        std::memcpy(out, src, static_cast<std::size_t>(k) * 4);
    }
    std::uint32_t top = 0;
    for (std::int64_t c = 0; c < k; ++c) top = std::max(top, std::bit_cast<std::uint32_t>(out[c]) & 0x7FFFFFFFu);
    if (top < 0x7F800000u) return -1;
    for (std::int64_t c = 0; c < k; ++c)
        if (!std::isfinite(out[c])) return c;
    return -1;
}

/// amax |x| of n floats: for non-negative floats the bit patterns order as the values, so it
/// is an integer max (vectorizable, unlike a float max chain).
inline float abs_max(const float* x, std::int64_t n) noexcept {
    std::uint32_t top = 0;
    for (std::int64_t j = 0; j < n; ++j) top = std::max(top, std::bit_cast<std::uint32_t>(x[j]) & 0x7FFFFFFFu);
    return std::bit_cast<float>(top);
}

/// Per-column partial SNR sums of one row, reduced once per row: the quantizers add x^2 and
/// (x - dq)^2 lane by lane (no serial reduction chain per element).
template <int Lanes>
struct lane_sums {
    float signal[Lanes] = {};
    float error[Lanes] = {};
    void add(const float* x, const float* dq) noexcept {
        for (int j = 0; j < Lanes; ++j) {
            const float e = x[j] - dq[j];
            signal[j] += x[j] * x[j];
            error[j] += e * e;
        }
    }
    snr_sums reduce() const noexcept {
        snr_sums s;
        for (int j = 0; j < Lanes; ++j) {
            s.signal += static_cast<double>(signal[j]);
            s.error += static_cast<double>(error[j]);
        }
        return s;
    }
};

/// Two codes per byte, low nibble first (see the file comment).
inline void pack_nibbles(const std::uint8_t* codes, std::int64_t k, std::uint8_t* out) noexcept {
    for (std::int64_t j = 0; j < k / 2; ++j)
        out[j] = static_cast<std::uint8_t>(codes[2 * j] | (codes[2 * j + 1] << 4));
}

/// The E2M1 code of column c from a packed row.
inline std::uint8_t nibble_at(const std::uint8_t* row, std::int64_t c) noexcept {
    return static_cast<std::uint8_t>(c & 1 ? row[c / 2] >> 4 : row[c / 2] & 0xFu);
}

/// What one row of an FP4 quantizer works with: the row as floats, the amax of each of its
/// groups, the per-group quotient operand and dequantization multiplier e2m1_groups takes, and
/// the row's SNR lanes.
template <std::int64_t Group>
struct fp4_row {
    std::vector<float> x, amax, s, m;
    lane_sums<Group> sums;
    explicit fp4_row(std::int64_t k)
        : x(static_cast<std::size_t>(k)), amax(static_cast<std::size_t>(k / Group)), s(amax.size()), m(amax.size()) {}
};

/// The loop both compressed-tensors FP4 layouts share: each row of `w` [N, K] (checked by
/// check_fp4_weight) converted to float (the group kernels' to_f32), its groups' amax
/// (minifloat kernels), then `scales(r, row)` fills the row's scale bytes and row.s / row.m,
/// and e2m1_groups (with `op`) writes its K/2 packed bytes at packed + r * K/2. Both tables
/// are looked up once per tensor, so QFORGE_FORCE_ISA reaches them. NaN or infinity is
/// refused naming the first such element; the SNR sums (when asked for) are reduced row by row.
template <std::int64_t Group, class Scales>
void quantize_fp4_rows(const tensor_view& w, simd::e2m1_op op, std::uint8_t* packed, const executor& ex, snr_sums* snr,
                       Scales&& scales) {
    const std::int64_t n = w.shape[0], k = w.shape[1];
    const std::size_t es = dtype_size(w.type);
    const simd::group_kernels& conv = simd::active_kernels<simd::group_kernels>();
    const simd::minifloat_kernels& mf = simd::active_kernels<simd::minifloat_kernels>();
    std::vector<snr_sums> row_snr(static_cast<std::size_t>(n));
    std::vector<std::int64_t> bad(static_cast<std::size_t>(n), -1);
    parallel_for(ex, 0, static_cast<std::size_t>(n), 16, [&](std::size_t lo, std::size_t hi) {
        fp4_row<Group> row(k);
        for (std::size_t r = lo; r < hi; ++r) {
            bad[r] = conv.to_f32(w.bytes.data() + r * static_cast<std::size_t>(k) * es, w.type, static_cast<std::size_t>(k),
                                 row.x.data());
            if (bad[r] >= 0) continue;
            mf.group_amax(row.x.data(), static_cast<std::size_t>(k), Group, row.amax.data());
            scales(r, row);
            row.sums = {};
            mf.e2m1_groups(row.x.data(), static_cast<std::size_t>(k), Group, row.s.data(), op, row.m.data(),
                           packed + r * static_cast<std::size_t>(k / 2), snr ? row.sums.signal : nullptr,
                           snr ? row.sums.error : nullptr);
            if (snr) row_snr[r] = row.sums.reduce();
        }
    });
    for (std::size_t r = 0; r < bad.size(); ++r)
        if (bad[r] >= 0)
            fail<unsupported_error>({}, w.name, "weight holds NaN or infinity at row " + std::to_string(r) + ", column " +
                                                    std::to_string(bad[r]));
    if (snr) {
        *snr = {};
        for (const snr_sums& s : row_snr) snr->add_row(s);
    }
}

/// The `targets` of an FP4 layout's one config group: every quantized linear, after the
/// checkpoint rules both layouts apply (untied, one scheme per fused group); none is refused.
inline json fp4_config_targets(std::span<const linear_entry> linears, std::string_view format) {
    const std::string f(format);
    check_untied(linears, f);
    check_fused_share_scheme(linears, f);
    json targets = json::array();
    for (const linear_entry& e : linears)
        if (e.quantized) targets.push_back(e.name);
    if (targets.size() == 0) fail<unsupported_error>({}, {}, f + ": no quantized layer to export");
    return targets;
}

}  // namespace qforge::detail
