// Activation-aware scaling (AWQ's idea, from statistics instead of a calibration run): a
// per-input-column scale s multiplies a linear's columns before quantization and is divided
// out of whatever produces that input (the preceding RMSNorm weight for q/k/v and gate/up,
// up_proj's rows for down_proj, v_proj's rows for o_proj when no GQA repeat sits between), so
// the model computes the same function while the columns that carry large inputs get a finer
// grid.
//
//   s_k = 2^round(alpha/2 * log2(E[x_k^2]) - c)     alpha searched on a grid, per layer
//
// E[x_k^2] is the imatrix value of column k; c centres the exponents (AutoAWQ divides by
// sqrt(max * min) for the same reason, AA awq/quantize/quantizer.py _search_best_scale).
// Unlike AutoAWQ the scales are powers of two, so that both the multiplication of the columns
// and the division of the bf16/fp16 norm weights or rows are exact: the folded checkpoint
// computes, in float, exactly what the source did, and a row scaled by 2^n quantizes to the
// same codes with its scales times 2^n. alpha = 0 is s = 1, plain round-to-nearest, so the
// search can only lower the error it minimises:
//
//   E = sum_k E[x_k^2] sum_n (w_nk - dq(w s)_nk / s_k)^2
//
// the imatrix-weighted output error of the layer (over every weight of a fused group, which
// shares one s so that its parts stay one fused matrix). The quantizer sees the scaled columns'
// importance E[x_k^2] / s_k^2, since the input the scaled weight meets is x / s.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/quant/dequantize.hpp"
#include "qforge/quant/quantize.hpp"

namespace qforge {

struct activation_scaling_options {
    quant_options quant;  ///< the scheme the layer will be quantized with (its importance is ignored)
    /// The alphas tried; 0 (no scaling) is always tried first. AutoAWQ's grid is 20 steps of 0.05.
    std::vector<double> alphas = {0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5,
                                  0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 1.0};
    int max_exponent = 8;  ///< |log2 s| at most this: folded weights and fp16 scales stay normal numbers
};

struct activation_scales {
    double alpha = 0;             ///< 0: no scaling was better
    std::vector<float> scale;     ///< s_k, powers of two, one per input column
    double error = 0;             ///< E at the chosen alpha
    double error_unscaled = 0;    ///< E at alpha = 0 (round-to-nearest with the same scheme)
};

namespace detail {

inline std::vector<float> weight_floats(const tensor_view& w) {
    std::vector<float> out(static_cast<std::size_t>(w.numel()));
    for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h = 0;
        switch (w.type) {
            case dtype::F32: std::memcpy(&out[i], w.bytes.data() + 4 * i, 4); break;
            case dtype::BF16: std::memcpy(&h, w.bytes.data() + 2 * i, 2); out[i] = bf16_to_float(h); break;
            case dtype::F16: std::memcpy(&h, w.bytes.data() + 2 * i, 2); out[i] = fp16_to_float(h); break;
            default: fail<unsupported_error>({}, w.name, "activation scaling takes F32, F16 or BF16 weights");
        }
    }
    return out;
}

/// Power-of-two scales for one alpha: exponents round(alpha/2 log2 m_k), centred on the
/// midpoint of their range and clamped to +-max_exponent.
inline std::vector<float> power_of_two_scales(std::span<const float> mean_sq, double alpha, int max_exponent) {
    std::vector<double> e(mean_sq.size());
    double lo = 1e300, hi = -1e300;
    for (std::size_t k = 0; k < e.size(); ++k) {
        // A column no token reached has no say: it keeps the centre.
        e[k] = mean_sq[k] > 0 ? alpha / 2 * std::log2(static_cast<double>(mean_sq[k])) : std::nan("");
        if (!std::isnan(e[k])) lo = std::min(lo, e[k]), hi = std::max(hi, e[k]);
    }
    const double centre = lo <= hi ? (lo + hi) / 2 : 0.0;
    std::vector<float> s(e.size());
    for (std::size_t k = 0; k < e.size(); ++k) {
        const double x = std::isnan(e[k]) ? 0.0 : std::round(e[k] - centre);
        s[k] = std::ldexp(1.0f, static_cast<int>(std::clamp(x, -double(max_exponent), double(max_exponent))));
    }
    return s;
}

/// E of one weight quantized with its columns scaled by s.
inline double scaled_error(const std::vector<float>& w, const tensor_view& shape_of, std::span<const float> s,
                           std::span<const float> mean_sq, const quant_options& q, const executor& ex) {
    const std::int64_t rows = shape_of.shape[0], cols = shape_of.shape[1];
    std::vector<float> scaled(w.size());
    std::vector<float> imp(static_cast<std::size_t>(cols));
    for (std::int64_t k = 0; k < cols; ++k) imp[k] = mean_sq[k] / (s[k] * s[k]);
    for (std::int64_t n = 0; n < rows; ++n)
        for (std::int64_t k = 0; k < cols; ++k) scaled[n * cols + k] = w[n * cols + k] * s[k];
    quant_options o = q;
    if (!q.importance.empty()) o.importance = imp;
    const tensor_view v{shape_of.name, dtype::F32, shape_of.shape, std::as_bytes(std::span<const float>(scaled))};
    const std::vector<float> dq = dequantize(quantize(v, o, ex));
    double err = 0;
    for (std::int64_t n = 0; n < rows; ++n)
        for (std::int64_t k = 0; k < cols; ++k) {
            const double d = static_cast<double>(w[n * cols + k]) - static_cast<double>(dq[n * cols + k]) / s[k];
            err += static_cast<double>(mean_sq[k]) * d * d;
        }
    return err;
}

}  // namespace detail

/// Searches alpha for the weights of one fused group (every part has the same input columns,
/// `mean_sq.size()` of them) and returns the power-of-two scales with the lowest E. When
/// `quant.importance` is non-empty the quantizer is also given the importance (scaled as the
/// file comment says); otherwise only the search over alpha uses it.
inline activation_scales search_activation_scales(std::span<const tensor_view> parts, std::span<const float> mean_sq,
                                                  const activation_scaling_options& opt, const executor& ex = {}) {
    if (parts.empty()) fail<shape_error>({}, {}, "activation scaling needs at least one weight");
    for (const tensor_view& p : parts)
        if (p.rank() != 2 || p.shape[1] != static_cast<std::int64_t>(mean_sq.size()))
            fail<shape_error>({}, p.name, "has " + (p.rank() == 2 ? std::to_string(p.shape[1]) : std::string("no")) +
                                              " input columns, the statistics have " + std::to_string(mean_sq.size()));
    for (std::size_t k = 0; k < mean_sq.size(); ++k)
        if (!(mean_sq[k] >= 0.0f) || !std::isfinite(mean_sq[k]))
            fail<shape_error>({}, parts[0].name, "input statistic " + std::to_string(k) + " is negative or not finite");
    std::vector<std::vector<float>> w;
    for (const tensor_view& p : parts) w.push_back(detail::weight_floats(p));
    auto error_at = [&](std::span<const float> s) {
        double e = 0;
        for (std::size_t i = 0; i < parts.size(); ++i) e += detail::scaled_error(w[i], parts[i], s, mean_sq, opt.quant, ex);
        return e;
    };
    activation_scales best;
    best.scale.assign(mean_sq.size(), 1.0f);
    best.error = best.error_unscaled = error_at(best.scale);
    for (const double a : opt.alphas) {
        std::vector<float> s = detail::power_of_two_scales(mean_sq, a, opt.max_exponent);
        const double e = error_at(s);
        if (e < best.error) best = {a, std::move(s), e, best.error_unscaled};
    }
    return best;
}

/// w diag(s): each input column k multiplied by s_k (exact for powers of two, in any of the
/// float dtypes, while the results stay normal numbers).
inline owned_tensor scale_columns(const tensor_view& w, std::span<const float> s) {
    if (w.rank() != 2 || w.shape[1] != static_cast<std::int64_t>(s.size()))
        fail<shape_error>({}, w.name, "column scales do not match the weight's input columns");
    std::vector<float> f = detail::weight_floats(w);
    for (std::size_t i = 0; i < f.size(); ++i) f[i] *= s[i % s.size()];
    owned_tensor out{w.name, dtype::F32, w.shape, std::vector<std::byte>(f.size() * 4)};
    std::memcpy(out.bytes.data(), f.data(), out.bytes.size());
    return out;
}

/// diag(1/s) w for a weight whose rows produce the scaled inputs (norm weights are one row per
/// column, a rank-1 tensor): each row (element) r divided by s_r, in w's own dtype, exactly.
inline owned_tensor unscale_rows(const tensor_view& w, std::span<const float> s) {
    const std::int64_t rows = w.shape.empty() ? 0 : w.shape[0];
    if (rows != static_cast<std::int64_t>(s.size()))
        fail<shape_error>({}, w.name, "row scales do not match the tensor's rows");
    std::vector<float> f = detail::weight_floats(w);
    const std::size_t per_row = f.size() / static_cast<std::size_t>(std::max<std::int64_t>(1, rows));
    for (std::size_t i = 0; i < f.size(); ++i) f[i] /= s[i / per_row];
    owned_tensor out{w.name, w.type, w.shape, std::vector<std::byte>(w.bytes.size())};
    for (std::size_t i = 0; i < f.size(); ++i) {
        if (w.type == dtype::F32) {
            std::memcpy(out.bytes.data() + 4 * i, &f[i], 4);
        } else {
            const std::uint16_t h = w.type == dtype::BF16 ? float_to_bf16(f[i]) : float_to_fp16(f[i]);
            std::memcpy(out.bytes.data() + 2 * i, &h, 2);
        }
    }
    return out;
}

}  // namespace qforge
