// dequantize(): the float values a loader decodes from a quantized_tensor,
// w[n][k] = (code - zero) * scale, row-major [rows][cols]. Exact: (code - zero) * scale fits
// a float without rounding for 16-bit scales and codes of at most 8 bits.
#pragma once

#include <cstddef>
#include <vector>

#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

inline std::vector<float> dequantize(const quantized_tensor& q) {
    q.validate();
    std::vector<float> out(static_cast<std::size_t>(q.rows * q.cols));
    for (std::int64_t n = 0; n < q.rows; ++n)
        for (std::int64_t k = 0; k < q.cols; ++k) out[static_cast<std::size_t>(n * q.cols + k)] = q.dequantized(n, k);
    return out;
}

}  // namespace qforge
