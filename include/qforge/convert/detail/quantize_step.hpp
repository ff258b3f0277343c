// The converter's quantization step: one weight (a whole tensor or a row slice) in, a
// quantized_tensor and the SNR of what a loader decodes out.
//
// Rows are quantized in fixed chunks handed to the executor, so the result never depends on
// the thread count, and each chunk converts only its own rows to float (no whole-tensor
// float copy: peak memory stays near the size of the input tensor).
//
// Scale rules (b bits, maxq = 2^b - 1, zero z = 2^(b-1) when symmetric):
//   minmax sym:  s = amax / (maxq / 2)            (GPTQ / compressed-tensors, amax/7.5 at 4 bits)
//   absmax sym:  s = amax / (2^(b-1) - 1)          (never clips)
//   search sym:  s = amax * f / 2^(b-1), f in {1.06, 1, .95, .9, .875, .85, .8, .75}, lowest
//                squared error wins, earliest on ties (the seed exporter's gptq_tensors)
//   mse:         s shrunk by p = 1 - i/100, i = 0..20, lowest squared error wins
//   asym:        range forced to contain 0, s = (max - min) / maxq, z = round(-min / s)
// Codes are always chosen against the scale as stored (rounded to bf16/fp16 first):
//   code = clamp(round_half_even(w / s) + z, 0, maxq).
// An all-zero group gets scale 1 and every code at its zero, which decodes to exactly 0.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/rule.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge::detail {

struct quantize_result {
    quantized_tensor q;
    double snr_db = 0;
};

inline float load_weight(const std::byte* p, dtype t) noexcept {
    std::uint16_t h;
    switch (t) {
        case dtype::BF16: std::memcpy(&h, p, 2); return bf16_to_float(h);
        case dtype::F16: std::memcpy(&h, p, 2); return fp16_to_float(h);
        default: {
            float f;
            std::memcpy(&f, p, 4);
            return f;
        }
    }
}

inline std::uint16_t store_scale(float s, dtype sd) noexcept { return sd == dtype::BF16 ? float_to_bf16(s) : float_to_fp16(s); }
inline float stored_value(std::uint16_t h, dtype sd) noexcept { return sd == dtype::BF16 ? bf16_to_float(h) : fp16_to_float(h); }

/// Squared error of a group quantized with stored scale `s` and zero `z`; fills `codes`.
inline double group_error(const float* w, std::int64_t n, float s, int z, int maxq, std::uint8_t* codes) noexcept {
    double err = 0;
    for (std::int64_t i = 0; i < n; ++i) {
        const float q = std::nearbyint(w[i] / s) + static_cast<float>(z);
        const int c = static_cast<int>(std::clamp(q, 0.0f, static_cast<float>(maxq)));
        codes[i] = static_cast<std::uint8_t>(c);
        const double d = static_cast<double>(w[i]) - static_cast<double>(static_cast<float>(c - z) * s);
        err += d * d;
    }
    return err;
}

/// Quantizes rows [row_begin, row_end) of `v` (rank 2) with `scheme` (scale dtype resolved).
inline quantize_result quantize_rows(const tensor_view& v, std::int64_t row_begin, std::int64_t row_end,
                                     const quant_scheme& scheme, const executor& run, const std::string& name) {
    const std::int64_t rows = row_end - row_begin, cols = v.shape[1];
    const std::int64_t g = scheme.group_for(cols), groups = (cols + g - 1) / g;
    const int b = scheme.bits, maxq = (1 << b) - 1;
    const dtype sd = scheme.scale_dtype.value_or(dtype::F16);
    quantize_result r;
    quantized_tensor& q = r.q;
    q.name = name;
    q.bits = b;
    q.rows = rows;
    q.cols = cols;
    q.group_size = g;
    q.symmetric = scheme.symmetric;
    q.scale_dtype = sd;
    q.codes.resize(static_cast<std::size_t>(rows * cols));
    q.scales.resize(static_cast<std::size_t>(rows * groups));
    q.zeros.resize(static_cast<std::size_t>(rows * groups));
    std::vector<double> signal(static_cast<std::size_t>(rows)), error(static_cast<std::size_t>(rows));
    const std::size_t esize = dtype_size(v.type);
    const std::byte* base = v.bytes.data() + static_cast<std::size_t>(row_begin * cols) * esize;

    constexpr std::int64_t chunk = 16;  // rows per task: fixed, so bytes never depend on threads
    const auto tasks = static_cast<std::size_t>((rows + chunk - 1) / chunk);
    run(tasks, [&](std::size_t t) {
        std::vector<float> w(static_cast<std::size_t>(cols));
        std::vector<std::uint8_t> trial(static_cast<std::size_t>(g));
        const std::int64_t r0 = static_cast<std::int64_t>(t) * chunk, r1 = std::min(rows, r0 + chunk);
        for (std::int64_t row = r0; row < r1; ++row) {
            const std::byte* src = base + static_cast<std::size_t>(row * cols) * esize;
            for (std::int64_t k = 0; k < cols; ++k) {
                w[static_cast<std::size_t>(k)] = load_weight(src + static_cast<std::size_t>(k) * esize, v.type);
                if (!std::isfinite(w[static_cast<std::size_t>(k)]))
                    fail<format_error>({}, name, "non-finite weight at row " + std::to_string(row + row_begin) +
                                                     ", column " + std::to_string(k));
            }
            double sig = 0, err = 0;
            for (std::int64_t gi = 0; gi < groups; ++gi) {
                const std::int64_t k0 = gi * g, n = std::min(g, cols - k0);
                const float* gw = w.data() + k0;
                std::uint8_t* codes = q.codes.data() + row * cols + k0;
                float lo = 0, hi = 0;
                for (std::int64_t i = 0; i < n; ++i) {
                    lo = std::min(lo, gw[i]);
                    hi = std::max(hi, gw[i]);
                    sig += static_cast<double>(gw[i]) * gw[i];
                }
                const float amax = std::max(-lo, hi);
                std::uint16_t best_s = store_scale(1.0f, sd);
                int best_z = scheme.symmetric ? 1 << (b - 1) : 0;
                double best = std::numeric_limits<double>::infinity();
                auto consider = [&](float s_real, int z) {
                    const std::uint16_t hs = store_scale(s_real, sd);
                    const float s = stored_value(hs, sd);
                    if (!(s > 0) || !std::isfinite(s)) return;
                    const double e = group_error(gw, n, s, z, maxq, trial.data());
                    if (e < best) {
                        best = e;
                        best_s = hs;
                        best_z = z;
                        std::copy(trial.begin(), trial.begin() + n, codes);
                    }
                };
                if (amax == 0) {
                    std::fill(codes, codes + n, static_cast<std::uint8_t>(best_z));
                    best = 0;
                } else if (scheme.symmetric) {
                    const int z = 1 << (b - 1);
                    switch (scheme.scale) {
                        case scale_method::minmax: consider(amax / (static_cast<float>(maxq) / 2), z); break;
                        case scale_method::absmax: consider(amax / static_cast<float>(z - 1), z); break;
                        case scale_method::search:
                            for (float f : {1.06f, 1.0f, 0.95f, 0.9f, 0.875f, 0.85f, 0.8f, 0.75f})
                                consider(amax * f / static_cast<float>(z), z);
                            break;
                        case scale_method::mse:
                            for (int i = 0; i <= 20; ++i)
                                consider((1.0f - static_cast<float>(i) / 100) * amax / (static_cast<float>(maxq) / 2), z);
                            break;
                    }
                } else {
                    const int steps = scheme.scale == scale_method::mse ? 20 : 0;
                    for (int i = 0; i <= steps; ++i) {
                        const float p = 1.0f - static_cast<float>(i) / 100;
                        const float s = (hi - lo) * p / static_cast<float>(maxq);
                        const float zf = std::nearbyint(-lo * p / stored_value(store_scale(s, sd), sd));
                        consider(s, static_cast<int>(std::clamp(zf, 0.0f, static_cast<float>(maxq))));
                    }
                }
                if (!std::isfinite(best)) {  // scale underflowed the storage dtype
                    std::fill(codes, codes + n, static_cast<std::uint8_t>(best_z));
                    best = 0;
                    for (std::int64_t i = 0; i < n; ++i) best += static_cast<double>(gw[i]) * gw[i];
                }
                q.scales[static_cast<std::size_t>(row * groups + gi)] = best_s;
                q.zeros[static_cast<std::size_t>(row * groups + gi)] = best_z;
                err += best;
            }
            signal[static_cast<std::size_t>(row)] = sig;
            error[static_cast<std::size_t>(row)] = err;
        }
    });
    double sig = 0, err = 0;
    for (std::int64_t row = 0; row < rows; ++row) {
        sig += signal[static_cast<std::size_t>(row)];
        err += error[static_cast<std::size_t>(row)];
    }
    r.snr_db = err > 0 ? 10 * std::log10(sig / err) : 300.0;
    return r;
}

}  // namespace qforge::detail
