// Dense linear algebra the GPTQ solver needs, in double: Cholesky and the upper Cholesky
// factor of an inverse. Row-major K x K matrices; every sum runs in increasing index order, so
// results depend only on the input.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace qforge::detail {

/// In place: the lower triangle of `a` becomes L with a = L L^T (the upper triangle is left
/// as it was). Returns false at the first pivot that is not positive and finite.
inline bool gptq_cholesky(std::vector<double>& a, std::size_t k) {
    for (std::size_t j = 0; j < k; ++j) {
        double* rj = a.data() + j * k;
        double d = rj[j];
        for (std::size_t p = 0; p < j; ++p) d -= rj[p] * rj[p];
        if (!(d > 0.0) || !std::isfinite(d)) return false;
        const double l = std::sqrt(d);
        rj[j] = l;
        for (std::size_t i = j + 1; i < k; ++i) {
            double* ri = a.data() + i * k;
            double s = ri[j];
            for (std::size_t p = 0; p < j; ++p) s -= ri[p] * rj[p];
            ri[j] = s / l;
        }
    }
    return true;
}

/// U (upper, row-major, K x K) with H^-1 = U^T U, from L (lower triangle of `l`, H = L L^T).
/// Returns false when the inverse is not numerically positive definite.
inline bool gptq_upper_inverse_factor(const std::vector<double>& l, std::size_t k, std::vector<double>& u) {
    // T = (L^-1)^T, upper: column j of L^-1 by forward substitution, stored as row j of T.
    std::vector<double> t(k * k, 0.0);
    std::vector<double> col(k);
    for (std::size_t j = 0; j < k; ++j) {
        for (std::size_t i = 0; i < j; ++i) col[i] = 0.0;
        for (std::size_t i = j; i < k; ++i) {
            double s = i == j ? 1.0 : 0.0;
            const double* ri = l.data() + i * k;
            for (std::size_t p = j; p < i; ++p) s -= ri[p] * col[p];
            col[i] = s / ri[i];
        }
        for (std::size_t i = j; i < k; ++i) t[j * k + i] = col[i];
    }
    // H^-1 [i][j] = sum over p >= max(i, j) of T[i][p] T[j][p]; only the lower triangle is used.
    std::vector<double> hinv(k * k, 0.0);
    for (std::size_t i = 0; i < k; ++i) {
        for (std::size_t j = 0; j <= i; ++j) {
            double s = 0.0;
            const double* ti = t.data() + i * k;
            const double* tj = t.data() + j * k;
            for (std::size_t p = i; p < k; ++p) s += ti[p] * tj[p];
            hinv[i * k + j] = s;
        }
    }
    if (!gptq_cholesky(hinv, k)) return false;
    u.assign(k * k, 0.0);
    for (std::size_t i = 0; i < k; ++i)
        for (std::size_t j = 0; j <= i; ++j) u[j * k + i] = hinv[i * k + j];
    return true;
}

}  // namespace qforge::detail
