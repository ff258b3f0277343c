// Deterministic synthetic weights for tests, benches and demo checkpoints.
//
// splitmix64 drives everything (no <random> distribution, whose output differs between
// standard libraries); normals come from Box-Muller on 53-bit uniforms, and Student-t(df)
// is z / sqrt(chi2_df / df) with chi2_df a sum of df squared normals (df integral), scaled
// so its standard deviation is `std` (the t variance is df / (df - 2)). Same seed, same
// bytes, on every platform with IEEE double and a correctly rounded libm sqrt/log/cos.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/tensor_view.hpp"

namespace qforge::testing {

struct splitmix64 {
    std::uint64_t state;
    explicit splitmix64(std::uint64_t seed) : state(seed) {}
    std::uint64_t next() noexcept {
        std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    /// Uniform in (0, 1): 53 random bits, never exactly 0.
    double uniform() noexcept { return (static_cast<double>(next() >> 11) + 0.5) * 0x1p-53; }
    double normal() noexcept {
        const double u1 = uniform(), u2 = uniform();
        return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
    }
    double student_t(int df) noexcept {
        const double z = normal();
        double chi2 = 0;
        for (int i = 0; i < df; ++i) {
            const double n = normal();
            chi2 += n * n;
        }
        return z / std::sqrt(chi2 / df);
    }
};

/// n Student-t(df) floats with standard deviation `std`.
inline std::vector<float> student_t_floats(std::size_t n, std::uint64_t seed, int df = 5, double stddev = 0.02) {
    splitmix64 rng(seed);
    const double unit_std = df > 2 ? std::sqrt(static_cast<double>(df) / (df - 2)) : 1.0;
    std::vector<float> out(n);
    for (auto& v : out) v = static_cast<float>(rng.student_t(df) * stddev / unit_std);
    return out;
}

/// The same values as BF16 bit patterns (round half to even).
inline std::vector<std::uint16_t> to_bf16(const std::vector<float>& v) {
    std::vector<std::uint16_t> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = float_to_bf16(v[i]);
    return out;
}
inline std::vector<std::uint16_t> to_fp16(const std::vector<float>& v) {
    std::vector<std::uint16_t> out(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) out[i] = float_to_fp16(v[i]);
    return out;
}

/// The benches' weight matrix: rows x cols BF16 Student-t(df 5, std 0.02), made as 16
/// slices of rows / 16 rows, slice s seeded 0x5EED0000 + s and generated on its own thread
/// (the values do not depend on the threads). rows must be a multiple of 16.
inline std::vector<std::uint16_t> bench_bf16_matrix(std::int64_t rows, std::int64_t cols) {
    std::vector<std::uint16_t> out(static_cast<std::size_t>(rows * cols));
    const auto slice = static_cast<std::size_t>(rows / 16 * cols);
    std::vector<std::thread> th;
    for (std::size_t s = 0; s < 16; ++s)
        th.emplace_back([&out, s, slice] {
            const auto f = student_t_floats(slice, 0x5EED0000u + s, 5, 0.02);
            for (std::size_t i = 0; i < f.size(); ++i) out[s * slice + i] = float_to_bf16(f[i]);
        });
    for (auto& t : th) t.join();
    return out;
}

/// A [rows, cols] view over `data` (which must outlive it).
template <class T>
tensor_view view_of(const std::vector<T>& data, std::int64_t rows, std::int64_t cols, dtype type,
                    std::string name = "w") {
    return tensor_view{std::move(name), type, {rows, cols},
                       std::span<const std::byte>(reinterpret_cast<const std::byte*>(data.data()), data.size() * sizeof(T))};
}

}  // namespace qforge::testing
