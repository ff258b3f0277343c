// Shared helpers of the quality tests: correlated calibration inputs, their Hessian, and the
// output error a quantized weight causes on them.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "qforge/quant/quantized_tensor.hpp"
#include "support/synthetic.hpp"

namespace qforge::quality_test {

/// m samples of k inputs from a seeded AR(1) process along the input dimension
/// (x_j = rho x_{j-1} + sqrt(1 - rho^2) e_j), with per-channel gains spread over ~2 decades
/// like real activations. Row-major [m][k].
inline std::vector<double> ar_inputs(std::size_t m, std::size_t k, double rho, std::uint64_t seed) {
    testing::splitmix64 rng(seed);
    std::vector<double> gain(k);
    for (auto& g : gain) g = std::exp(2.0 * rng.uniform() - 1.0) * (rng.uniform() < 0.05 ? 8.0 : 1.0);
    std::vector<double> x(m * k);
    const double c = std::sqrt(1.0 - rho * rho);
    for (std::size_t s = 0; s < m; ++s) {
        double prev = rng.normal();
        for (std::size_t j = 0; j < k; ++j) {
            prev = rho * prev + c * rng.normal();
            x[s * k + j] = prev * gain[j];
        }
    }
    return x;
}

/// H = X^T X, [k][k] row-major.
inline std::vector<double> hessian_of(const std::vector<double>& x, std::size_t m, std::size_t k) {
    std::vector<double> h(k * k, 0.0);
    for (std::size_t s = 0; s < m; ++s) {
        const double* r = x.data() + s * k;
        for (std::size_t i = 0; i < k; ++i)
            for (std::size_t j = 0; j <= i; ++j) h[i * k + j] += r[i] * r[j];
    }
    for (std::size_t i = 0; i < k; ++i)
        for (std::size_t j = 0; j < i; ++j) h[j * k + i] = h[i * k + j];
    return h;
}

/// ||X W^T - X What^T||^2 = sum over rows n of d_n^T H d_n with d_n = w_n - what_n.
inline double output_error(const std::vector<float>& w, const quantized_tensor& q, const std::vector<double>& h) {
    const auto k = static_cast<std::size_t>(q.cols);
    double total = 0.0;
    std::vector<double> d(k);
    for (std::int64_t n = 0; n < q.rows; ++n) {
        for (std::size_t j = 0; j < k; ++j)
            d[j] = static_cast<double>(w[static_cast<std::size_t>(n) * k + j]) -
                   static_cast<double>(q.dequantized(n, static_cast<std::int64_t>(j)));
        for (std::size_t i = 0; i < k; ++i) {
            double s = 0.0;
            for (std::size_t j = 0; j < k; ++j) s += h[i * k + j] * d[j];
            total += d[i] * s;
        }
    }
    return total;
}

}  // namespace qforge::quality_test
