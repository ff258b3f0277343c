// Dense linear algebra the GPTQ solver needs, in double, on row-major K x K matrices.
//
// GPTQ needs U, the upper Cholesky factor of H^-1 (H^-1 = U^T U). Reference implementations
// invert H and factor the inverse again. The same U comes cheaper and without factoring an
// ill-conditioned inverse: factor H "from the bottom" as H = Y Y^T with Y upper triangular
// (Cholesky of H with rows and columns reversed), then H^-1 = (Y^-1)^T Y^-1 and Y^-1 is upper
// triangular with a positive diagonal, so by uniqueness U = Y^-1. About 2/3 K^3 flops.
//
// Every sum has a fixed order (four interleaved partial sums, then (s0+s1)+(s2+s3), then the
// tail), and the parallel loops split rows into chunks whose results do not depend on each
// other, so the factor depends only on H, never on the executor.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "qforge/core/parallel.hpp"

namespace qforge::detail {

/// sum a[p] b[p] for p in [0, n), in the fixed order described above.
inline double gptq_dot(const double* a, const double* b, std::size_t n) noexcept {
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    std::size_t p = 0;
    for (; p + 4 <= n; p += 4) {
        s0 += a[p] * b[p];
        s1 += a[p + 1] * b[p + 1];
        s2 += a[p + 2] * b[p + 2];
        s3 += a[p + 3] * b[p + 3];
    }
    double s = (s0 + s1) + (s2 + s3);
    for (; p < n; ++p) s += a[p] * b[p];
    return s;
}

/// In place: the upper triangle of `a` becomes Y with a = Y Y^T, Y upper triangular (the
/// strict lower triangle is left as it was). Returns false at the first pivot that is not
/// positive and finite.
inline bool gptq_reverse_cholesky(std::vector<double>& a, std::size_t k, const executor& ex = {}) {
    for (std::size_t j = k; j-- > 0;) {
        double* rj = a.data() + j * k;
        const double d = rj[j] - gptq_dot(rj + j + 1, rj + j + 1, k - j - 1);
        if (!(d > 0.0) || !std::isfinite(d)) return false;
        const double y = std::sqrt(d);
        rj[j] = y;
        // Rows above j are independent of each other at this step.
        parallel_for(ex, 0, j, 256, [&](std::size_t lo, std::size_t hi) {
            for (std::size_t i = lo; i < hi; ++i) {
                double* ri = a.data() + i * k;
                ri[j] = (ri[j] - gptq_dot(ri + j + 1, rj + j + 1, k - j - 1)) / y;
            }
        });
    }
    return true;
}

/// U = Y^-1 for Y upper triangular (upper triangle of `y`): row i of U is
/// -(1 / Y_ii) sum over p > i of Y_ip U_p, with U_ii = 1 / Y_ii. Output is K x K, zero below
/// the diagonal. Returns false on a non-finite entry.
inline bool gptq_upper_inverse(const std::vector<double>& y, std::size_t k, std::vector<double>& u) {
    u.assign(k * k, 0.0);
    for (std::size_t i = k; i-- > 0;) {
        const double* yi = y.data() + i * k;
        double* ui = u.data() + i * k;
        for (std::size_t p = i + 1; p < k; ++p) {
            const double c = yi[p];
            const double* up = u.data() + p * k;
            for (std::size_t j = p; j < k; ++j) ui[j] += c * up[j];
        }
        const double inv = 1.0 / yi[i];
        for (std::size_t j = i + 1; j < k; ++j) ui[j] *= -inv;
        ui[i] = inv;
        for (std::size_t j = i; j < k; ++j)
            if (!std::isfinite(ui[j])) return false;
    }
    return true;
}

}  // namespace qforge::detail
