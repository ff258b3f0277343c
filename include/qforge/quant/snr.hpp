// Signal-to-noise ratio of a quantized tensor against the weight it came from:
// SNR dB = 10 log10(sum w^2 / sum (w - dq)^2), dq the stored decoded value (code - zero) *
// scale (exact in float). Both sums are accumulated in double: w^2 is exact in double and
// (w - dq)^2 is rounded once (never fused into the add). The order is fixed, so the figure is
// the same on every machine, ISA and thread count: within each row, column c goes to partial
// sum c % 4, partials in increasing c, the row's sums are (p0 + p1) + (p2 + p3); the rows' sums
// are then added in row order. Rows being independent lets the quantizer measure the SNR
// while it encodes (quantize(..., &sums)), in parallel, with the same result as
// snr_accumulate(). An exact reconstruction gives +infinity.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "qforge/core/error.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/quant/quantized_tensor.hpp"
#include "qforge/simd/no_contract.hpp"
#include "qforge/simd/dispatch.hpp"

namespace qforge {

struct snr_sums {
    double signal = 0;  ///< sum w^2
    double error = 0;   ///< sum (w - dq)^2

    /// Adds one row's sums (rows are added in row order).
    void add_row(const snr_sums& r) noexcept {
        signal += r.signal;
        error += r.error;
    }

    /// 10 log10(signal / error); +inf when error is 0, -inf when only the signal is 0.
    double db() const noexcept {
        if (error == 0) return std::numeric_limits<double>::infinity();
        if (signal == 0) return -std::numeric_limits<double>::infinity();
        return 10.0 * std::log10(signal / error);
    }
};

namespace detail {

/// The four partial sums of the documented order.
struct snr_partials {
    double sig[4] = {0, 0, 0, 0};
    double err[4] = {0, 0, 0, 0};

    void add(std::size_t i, double w, double dq) noexcept {
        const double e = w - dq;
        sig[i & 3] += simd::no_contract(w * w);
        err[i & 3] += simd::no_contract(e * e);
    }
    snr_sums total() const noexcept {
        return {(sig[0] + sig[1]) + (sig[2] + sig[3]), (err[0] + err[1]) + (err[2] + err[3])};
    }
};

}  // namespace detail

/// The sums for `original` (F32/F16/BF16, [rows, cols]) against `q`; rows in parallel on `ex`,
/// their sums added in row order, so the result is the same on any executor.
inline snr_sums snr_accumulate(const tensor_view& original, const quantized_tensor& q, const executor& ex = {}) {
    if (original.type != dtype::F32 && original.type != dtype::F16 && original.type != dtype::BF16)
        fail<unsupported_error>({}, original.name, "SNR needs an F32, F16 or BF16 original");
    if (original.numel() != q.rows * q.cols ||
        original.bytes.size() != static_cast<std::size_t>(original.numel()) * dtype_size(original.type))
        fail<shape_error>({}, original.name, "original " + shape_to_string(original.shape) +
                                                 " does not match the quantized [" + std::to_string(q.rows) + ", " +
                                                 std::to_string(q.cols) + "]");
    q.validate();
    // Conversion to float is exact on every ISA, so the fastest one is used.
    const simd::group_kernels& k = simd::kernels(simd::active_isa());
    const auto cols = static_cast<std::size_t>(q.cols);
    const std::size_t es = dtype_size(original.type);
    std::vector<snr_sums> rows(static_cast<std::size_t>(q.rows));
    parallel_for(ex, 0, rows.size(), 16, [&](std::size_t lo_row, std::size_t hi_row) {
        std::vector<float> row(cols);
        for (std::size_t n = lo_row; n < hi_row; ++n) {
            (void)k.to_f32(original.bytes.data() + n * cols * es, original.type, cols, row.data());
            const std::uint8_t* codes = q.codes.data() + n * cols;
            const auto r = static_cast<std::int64_t>(n);
            detail::snr_partials p;
            if (q.g_idx.empty()) {
                for (std::int64_t g = 0; g < q.groups(); ++g) {
                    const float s = q.scale(r, g);
                    const std::int32_t z = q.zero(r, g);
                    const auto lo = static_cast<std::size_t>(g * q.group_size);
                    const std::size_t hi = std::min(cols, lo + static_cast<std::size_t>(q.group_size));
                    for (std::size_t c = lo; c < hi; ++c)
                        p.add(c, row[c], simd::no_contract(static_cast<float>(static_cast<std::int32_t>(codes[c]) - z) * s));
                }
            } else {
                for (std::size_t c = 0; c < cols; ++c) p.add(c, row[c], q.dequantized(r, static_cast<std::int64_t>(c)));
            }
            rows[n] = p.total();
        }
    });
    snr_sums total;
    for (const snr_sums& r : rows) total.add_row(r);
    return total;
}

/// SNR in dB of `q` against `original` (rows in parallel on `ex`: the same figure).
inline double snr_db(const tensor_view& original, const quantized_tensor& q, const executor& ex = {}) {
    return snr_accumulate(original, q, ex).db();
}

/// The sums of `decoded` against `reference` (same length), in the order above: one row's, for
/// a caller that adds rows itself. Run on the group kernels of `isa` (the sums are the same on
/// every ISA).
inline snr_sums snr_sums_of(std::span<const float> reference, std::span<const float> decoded,
                            simd::isa isa = simd::active_isa()) {
    if (reference.size() != decoded.size()) fail<shape_error>({}, {}, "SNR of spans of different lengths");
    double partials[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    simd::kernels(isa).snr_sums(reference.data(), decoded.data(), reference.size(), partials);
    return {(partials[0] + partials[1]) + (partials[2] + partials[3]), (partials[4] + partials[5]) + (partials[6] + partials[7])};
}

/// SNR in dB of `decoded` against `reference` (same length).
inline double snr_db(std::span<const float> reference, std::span<const float> decoded) {
    return snr_sums_of(reference, decoded).db();
}

}  // namespace qforge
