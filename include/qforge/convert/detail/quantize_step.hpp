// The converter's quantization step: one weight (a whole tensor or a row slice of a fused one)
// in, the quant layer's quantized_tensor and the SNR of what a loader decodes out.
//
// The user-facing scale names map onto the quant layer's exact policies
// (quant/scale_policy.hpp):
//   minmax  sym: gptq_absmax (amax / ((2^b-1)/2), GPTQ and compressed-tensors)
//           asym: minmax (range forced to hold 0), or awq_minmax for the AWQ format (AutoAWQ)
//   absmax  sym: absmax (amax / (2^(b-1)-1), never clips)
//   search  sym: seed_search (the seed exporter's 8 candidate factors)
//   mse     either: mse (llm-compressor's shrink grid)
//   fixed   sym: seed_fixed (the seed exporter's --no-search factor 0.875)
//   lsq     either: custom = the least-squares fit (quant/least_squares.hpp)
// quantize_rows_gptq runs the GPTQ solver (quant/gptq_solver.hpp) with the same policies.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>
#include <optional>
#include <string>

#include "qforge/convert/format.hpp"
#include "qforge/convert/rule.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/quant/gptq_solver.hpp"
#include "qforge/quant/least_squares.hpp"
#include "qforge/quant/quantize.hpp"
#include "qforge/quant/quantized_tensor.hpp"
#include "qforge/quant/snr.hpp"

namespace qforge::detail {

/// The quant policy for a scheme, or nullopt when the combination has none.
inline std::optional<scale_policy> policy_for(const quant_spec& s, output_format f) noexcept {
    switch (s.scale) {
        case scale_method::minmax:
            if (s.symmetric) return scale_policy::gptq_absmax;
            return f == output_format::awq ? scale_policy::awq_minmax : scale_policy::minmax;
        case scale_method::absmax: return s.symmetric ? std::optional(scale_policy::absmax) : std::nullopt;
        case scale_method::search: return s.symmetric ? std::optional(scale_policy::seed_search) : std::nullopt;
        case scale_method::mse: return scale_policy::mse;
        case scale_method::lsq: return scale_policy::custom;
        case scale_method::fixed: return s.symmetric ? std::optional(scale_policy::seed_fixed) : std::nullopt;
    }
    return std::nullopt;
}

inline quant_options options_for(const quant_spec& s, output_format f) {
    quant_options o;
    o.bits = s.bits;
    o.group_size = s.group_size > 0 ? static_cast<int>(s.group_size) : per_channel;
    o.symmetric = s.symmetric;
    o.policy = policy_for(s, f).value_or(scale_policy::minmax);
    o.scale_dtype = s.scale_dtype.value_or(dtype::F16);
    if (s.scale == scale_method::lsq) use_least_squares(o);
    return o;
}

/// SNR in dB of what a loader decodes from `q` against `w` (10 log10 of signal over error
/// energy, in double), computed in fixed chunks of rows on the executor and summed in row
/// order, so it is the same for every thread count. Same definition as quant/snr.hpp's
/// snr_db, which walks the tensor on one thread.
inline double parallel_snr_db(const tensor_view& w, const quantized_tensor& q, const executor& run) {
    const std::int64_t rows = q.rows, cols = q.cols, groups = q.groups();
    const std::size_t esize = dtype_size(w.type);
    std::vector<double> sig(static_cast<std::size_t>(rows)), err(static_cast<std::size_t>(rows));
    constexpr std::int64_t chunk = 16;
    const auto tasks = static_cast<std::size_t>((rows + chunk - 1) / chunk);
    const auto body = [&](std::size_t t) {
        std::vector<float> x(static_cast<std::size_t>(cols));
        const std::int64_t r0 = static_cast<std::int64_t>(t) * chunk, r1 = std::min(rows, r0 + chunk);
        for (std::int64_t n = r0; n < r1; ++n) {
            const std::byte* src = w.bytes.data() + static_cast<std::size_t>(n * cols) * esize;
            for (std::int64_t k = 0; k < cols; ++k) {
                std::uint16_t h;
                float f;
                const std::byte* p = src + static_cast<std::size_t>(k) * esize;
                if (w.type == dtype::F32) std::memcpy(&f, p, 4);
                else {
                    std::memcpy(&h, p, 2);
                    f = w.type == dtype::BF16 ? bf16_to_float(h) : fp16_to_float(h);
                }
                x[static_cast<std::size_t>(k)] = f;
            }
            double s = 0, e = 0;
            if (q.g_idx.empty()) {
                for (std::int64_t g = 0; g < groups; ++g) {
                    const float scale = q.scale(n, g);
                    const std::int32_t zero = q.zero(n, g);
                    const std::int64_t k1 = std::min(cols, (g + 1) * q.group_size);
                    for (std::int64_t k = g * q.group_size; k < k1; ++k) {
                        const double v = x[static_cast<std::size_t>(k)];
                        const double d = v - static_cast<float>(static_cast<std::int32_t>(q.code(n, k)) - zero) * scale;
                        s += v * v;
                        e += d * d;
                    }
                }
            } else {
                for (std::int64_t k = 0; k < cols; ++k) {
                    const double v = x[static_cast<std::size_t>(k)], d = v - q.dequantized(n, k);
                    s += v * v;
                    e += d * d;
                }
            }
            sig[static_cast<std::size_t>(n)] = s;
            err[static_cast<std::size_t>(n)] = e;
        }
    };
    if (run) run(tasks, body);
    else
        for (std::size_t t = 0; t < tasks; ++t) body(t);
    double s = 0, e = 0;
    for (std::int64_t n = 0; n < rows; ++n) {
        s += sig[static_cast<std::size_t>(n)];
        e += err[static_cast<std::size_t>(n)];
    }
    if (e == 0) return std::numeric_limits<double>::infinity();  // as snr_sums::db()
    if (s == 0) return -std::numeric_limits<double>::infinity();
    return 10.0 * std::log10(s / e);
}

struct quantize_result {
    quantized_tensor q;
    double snr_db = 0;
};

/// Quantizes rows [row_begin, row_end) of the rank-2 view `v` as the weight `name`.
inline quantize_result quantize_rows(const tensor_view& v, std::int64_t row_begin, std::int64_t row_end,
                                     const quant_spec& scheme, output_format f, const executor& run,
                                     const std::string& name) {
    const std::int64_t cols = v.shape.at(1);
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * dtype_size(v.type);
    tensor_view rows{name, v.type, {row_end - row_begin, cols},
                     v.bytes.subspan(static_cast<std::size_t>(row_begin) * row_bytes,
                                     static_cast<std::size_t>(row_end - row_begin) * row_bytes)};
    quantize_result r{quantize(rows, options_for(scheme, f), run), 0};
    r.snr_db = parallel_snr_db(rows, r.q, run);
    return r;
}

/// quantize_rows with GPTQ under the layer's input Hessian `h` [K, K] (issue 9).
inline quantize_result quantize_rows_gptq(const tensor_view& v, std::int64_t row_begin, std::int64_t row_end,
                                          const quant_spec& scheme, output_format f, const executor& run,
                                          const std::string& name, const tensor_view& h, gptq_solver_options g) {
    const std::int64_t cols = v.shape.at(1);
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * dtype_size(v.type);
    tensor_view rows{name, v.type, {row_end - row_begin, cols},
                     v.bytes.subspan(static_cast<std::size_t>(row_begin) * row_bytes,
                                     static_cast<std::size_t>(row_end - row_begin) * row_bytes)};
    g.quant = options_for(scheme, f);
    quantize_result r{gptq_quantize(rows, h, g, run), 0};
    r.snr_db = snr_db(rows, r.q);
    return r;
}

}  // namespace qforge::detail
