// Signal-to-noise ratio of a quantized tensor against the weight it came from:
// SNR dB = 10 log10(sum w^2 / sum (w - dq)^2), dq the stored decoded value (code - zero) *
// scale. Both sums are accumulated in double, element by element in row-major order: w^2
// is exact in double and (w - dq)^2 is rounded once (never fused), so the figure is the same
// on every machine. An exact reconstruction gives +infinity.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>

#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/quant/quantized_tensor.hpp"
#include "qforge/simd/detail/no_contract.hpp"

namespace qforge {

struct snr_sums {
    double signal = 0;  ///< sum w^2
    double error = 0;   ///< sum (w - dq)^2

    void add(double w, double dq) noexcept {
        const double e = w - dq;
        signal += simd::detail::no_contract(w * w);
        error += simd::detail::no_contract(e * e);
    }
    /// 10 log10(signal / error); +inf when error is 0, -inf when only the signal is 0.
    double db() const noexcept {
        if (error == 0) return std::numeric_limits<double>::infinity();
        if (signal == 0) return -std::numeric_limits<double>::infinity();
        return 10.0 * std::log10(signal / error);
    }
};

namespace detail {
inline double element_as_double(const tensor_view& v, std::size_t i) noexcept {
    if (v.type == dtype::F32) {
        float f;
        std::memcpy(&f, v.bytes.data() + i * 4, 4);
        return f;
    }
    std::uint16_t h;
    std::memcpy(&h, v.bytes.data() + i * 2, 2);
    return v.type == dtype::BF16 ? bf16_to_float(h) : fp16_to_float(h);
}
}  // namespace detail

/// The sums for `original` (F32/F16/BF16, [rows, cols]) against `q`.
inline snr_sums snr_accumulate(const tensor_view& original, const quantized_tensor& q) {
    if (original.type != dtype::F32 && original.type != dtype::F16 && original.type != dtype::BF16)
        fail<unsupported_error>({}, original.name, "SNR needs an F32, F16 or BF16 original");
    if (original.numel() != q.rows * q.cols ||
        original.bytes.size() != static_cast<std::size_t>(original.numel()) * dtype_size(original.type))
        fail<shape_error>({}, original.name, "original " + shape_to_string(original.shape) +
                                                 " does not match the quantized [" + std::to_string(q.rows) + ", " +
                                                 std::to_string(q.cols) + "]");
    snr_sums s;
    for (std::int64_t n = 0; n < q.rows; ++n)
        for (std::int64_t k = 0; k < q.cols; ++k)
            s.add(detail::element_as_double(original, static_cast<std::size_t>(n * q.cols + k)), q.dequantized(n, k));
    return s;
}

/// SNR in dB of `q` against `original`.
inline double snr_db(const tensor_view& original, const quantized_tensor& q) { return snr_accumulate(original, q).db(); }

/// SNR in dB of `decoded` against `reference` (same length).
inline double snr_db(std::span<const float> reference, std::span<const float> decoded) {
    if (reference.size() != decoded.size()) fail<shape_error>({}, {}, "SNR of spans of different lengths");
    snr_sums s;
    for (std::size_t i = 0; i < reference.size(); ++i) s.add(reference[i], decoded[i]);
    return s.db();
}

}  // namespace qforge
