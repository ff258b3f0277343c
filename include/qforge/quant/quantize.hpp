// quantize(): float weights in, a layout-independent quantized_tensor out. The runtime entry
// point converters call; its signature and quant_options are stable.
//
// **Example**:
//   qforge::quant_options opt;
//   opt.bits = 4;                                   // 2..8
//   opt.group_size = 128;                           // power of two, or -1 = per channel
//   opt.symmetric = true;                           // zero pinned at 2^(bits-1)
//   opt.policy = qforge::scale_policy::gptq_absmax; // see quant/scale_policy.hpp
//   opt.scale_dtype = qforge::dtype::BF16;          // F16 or BF16
//   qforge::thread_pool pool(2);
//   qforge::quantized_tensor q = qforge::quantize(view /* F32/F16/BF16 [N, K] */, opt, pool.executor());
//   double db = qforge::snr_db(view, q);            // quant/snr.hpp
//
// Guarantees:
//  * codes, scales and zeros are the same bytes for every SIMD path (scalar is the
//    definition) and every executor / thread count;
//  * codes are chosen against the scale as stored, so dequantize(q) is what a loader decodes;
//  * NaN or infinity in the weight is refused (unsupported_error naming the tensor and the
//    first bad element); bad options are refused (shape_error / unsupported_error).
//
// Extending: scale_policy::custom with quant_options::custom runs any per-group rule (a
// least-squares fit, say) through the same driver, threads and checks; group_view gives it
// the values, the importance and the kernels' exact error of any candidate.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/core/zeroed_buffer.hpp"
#include "qforge/quant/quantized_tensor.hpp"
#include "qforge/quant/scale_policy.hpp"
#include "qforge/quant/scheme.hpp"
#include "qforge/quant/snr.hpp"
#include "qforge/simd/dispatch.hpp"
#include "qforge/simd/no_contract.hpp"

namespace qforge {

struct quant_options {
    int bits = 4;                                      ///< 2..8
    int group_size = 128;                              ///< power of two <= K, or -1 (per channel)
    bool symmetric = true;                             ///< zero pinned at 2^(bits-1)
    scale_policy policy = scale_policy::gptq_absmax;   ///< must suit `symmetric` (policy_supports)
    dtype scale_dtype = dtype::F16;                    ///< F16 or BF16
    search_params search{};                            ///< mse: norm, grid, max_shrink
    std::span<const float> importance{};               ///< empty, or one weight >= 0 per input column
    std::optional<simd::isa> isa{};                    ///< empty: simd::active_isa()
    group_policy custom{};                             ///< used when policy == custom
};

namespace detail {


inline void check_options(const tensor_view& w, const quant_options& o) {
    auto bad_shape = [&](const std::string& why) { fail<shape_error>({}, w.name, why); };
    auto bad = [&](const std::string& why) { fail<unsupported_error>({}, w.name, why); };
    if (w.type != dtype::F32 && w.type != dtype::F16 && w.type != dtype::BF16)
        bad("quantize takes F32, F16 or BF16 weights, not " + std::string(dtype_name(w.type)));
    if (w.rank() != 2) bad_shape("quantize takes a 2-D [out, in] weight, got shape " + shape_to_string(w.shape));
    if (w.shape[0] <= 0 || w.shape[1] <= 0) bad_shape("empty weight " + shape_to_string(w.shape));
    const auto need = static_cast<std::size_t>(w.numel()) * dtype_size(w.type);
    if (w.bytes.size() != need)
        bad_shape("holds " + std::to_string(w.bytes.size()) + " bytes, shape needs " + std::to_string(need));
    if (o.bits < 2 || o.bits > 8) bad_shape("bits must be 2..8, got " + std::to_string(o.bits));
    if (o.group_size != per_channel) {
        if (o.group_size <= 0 || (o.group_size & (o.group_size - 1)) != 0)
            bad_shape("group size must be a power of two or -1 (per channel), got " + std::to_string(o.group_size));
        if (o.group_size > w.shape[1])
            bad_shape("group size " + std::to_string(o.group_size) + " exceeds the " + std::to_string(w.shape[1]) +
                      " input columns");
    }
    if (o.scale_dtype != dtype::F16 && o.scale_dtype != dtype::BF16)
        bad("scale dtype must be F16 or BF16, not " + std::string(dtype_name(o.scale_dtype)));
    if (!policy_supports(o.policy, o.symmetric))
        bad("policy " + std::string(policy_name(o.policy)) + " is not defined for " +
            (o.symmetric ? "symmetric" : "asymmetric") + " schemes");
    if (o.policy == scale_policy::custom && !o.custom) bad("policy custom needs quant_options::custom");
    if (o.policy == scale_policy::mse) {
        const auto& s = o.search;
        if (!(s.norm >= 1.0f && s.norm <= 3.0f)) bad("mse norm must be in [1, 3], got " + std::to_string(s.norm));
        if (s.grid <= 0 || !(s.max_shrink > 0.0f && s.max_shrink <= 1.0f) ||
            static_cast<int>(static_cast<double>(s.max_shrink) * s.grid) < 1)
            bad("mse grid must be positive and max_shrink in (0, 1] with at least one candidate");
    }
    if (!o.importance.empty()) {
        if (o.importance.size() != static_cast<std::size_t>(w.shape[1]))
            bad_shape("importance has " + std::to_string(o.importance.size()) + " entries for " +
                      std::to_string(w.shape[1]) + " input columns");
        for (std::size_t i = 0; i < o.importance.size(); ++i)
            if (!(o.importance[i] >= 0.0f && o.importance[i] <= std::numeric_limits<float>::max()))
                bad("importance entry " + std::to_string(i) + " is negative or not finite");
    }
}

/// Where quantize_rows writes: rows [row_lo, row_hi) of the weight go to rows
/// [row_lo - first_row, ...) of `q` (the whole tensor, or a tile of it); `snr`, when set, gets
/// each row's SNR sums at [r - first_row].
struct row_target {
    quantized_tensor* q = nullptr;
    std::int64_t first_row = 0;
    snr_sums* snr = nullptr;
};

/// What quantize_rows needs of a scheme, as values: the row loop runs the same kernels for
/// every scheme, so one copy of it serves them all (a copy per scheme instance made every
/// translation unit that includes this header several seconds slower to build).
struct row_scheme {
    int bits;
    bool symmetric;
    std::int64_t gsize;  ///< columns per group
    int maxq() const noexcept { return (1 << bits) - 1; }
    int pinned_zero() const noexcept { return 1 << (bits - 1); }
};

/// Stores the scales and zeros a block-wide kernel chose for groups [first, first + n) of
/// q's storage (both the fixed-rule and the search path end here).
inline void store_block_grids(quantized_tensor& q, std::size_t first, const std::uint16_t* scales,
                              const simd::grid_params* grids, std::size_t n) noexcept {
    for (std::size_t jj = 0; jj < n; ++jj) {
        q.scales[first + jj] = scales[jj];
        q.zeros[first + jj] = static_cast<std::int32_t>(grids[jj].zero);
    }
}

inline void quantize_rows_with(const row_scheme& S, const tensor_view& w, const quant_options& o,
                               const simd::group_kernels& k, row_target out, std::int64_t row_lo, std::int64_t row_hi,
                               std::int64_t& first_bad);

template <scheme_like S>
void quantize_rows(const tensor_view& w, const quant_options& o, const simd::group_kernels& k, row_target out,
                   std::int64_t row_lo, std::int64_t row_hi, std::int64_t& first_bad) {
    quantize_rows_with({S::bits, S::is_symmetric, S::columns_per_group(out.q->cols, o.group_size)}, w, o, k, out,
                       row_lo, row_hi, first_bad);
}

inline void quantize_rows_with(const row_scheme& S, const tensor_view& w, const quant_options& o,
                               const simd::group_kernels& k, row_target out, std::int64_t row_lo, std::int64_t row_hi,
                               std::int64_t& first_bad) {
    quantized_tensor& q = *out.q;
    const std::int64_t cols = q.cols;
    const std::int64_t gsize = S.gsize;
    const std::int64_t groups = q.groups();
    const std::size_t es = dtype_size(w.type);
    // Rows are converted a block of whole groups at a time (about 8 KB of floats), so the
    // group passes read L1-resident data; a group wider than that is its own block.
    const std::int64_t block = std::min(cols, gsize >= 2048 ? gsize : (2048 / gsize) * gsize);
    const auto block_groups = static_cast<std::size_t>((block + gsize - 1) / gsize);
    std::vector<float> buf(static_cast<std::size_t>(block));
    // Per block: every group's min/max in one kernel call, then the (scalar) scale choices,
    // then every group's codes (and SNR terms) in one call; each group's result is what the
    // single-group kernels give.
    std::vector<float> mn(block_groups), mx(block_groups);
    std::vector<simd::grid_params> grids(block_groups);
    // Fixed-rule policies: every group's scale of a block in one make_grids call.
    const bool fixed = is_fixed_rule(o.policy);
    const simd::grid_recipe recipe = fixed ? fixed_recipe(o.policy, S.bits, o.scale_dtype) : simd::grid_recipe{};
    std::vector<float> ga(fixed ? block_groups : 0), gb(fixed ? block_groups : 0);
    std::vector<std::uint16_t> gs(fixed ? block_groups : 0);
    // Search policies: every group's search of a block in one search_groups call.
    const auto search = fixed || o.policy == scale_policy::custom
                            ? std::nullopt
                            : plan_search(o.policy, S.bits, S.symmetric, o.scale_dtype, o.search);
    if (search) gs.resize(block_groups);
    const bool snr_in_kernel = gsize % 4 == 0;
    group_view g;
    g.bits = S.bits;
    g.symmetric = S.symmetric;
    g.scale_dtype = o.scale_dtype;
    g.tensor = &w.name;
    g.kernels = &k;
    for (std::int64_t r = row_lo; r < row_hi; ++r) {
        g.row = r;
        const std::int64_t qr = r - out.first_row;
        double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        detail::snr_partials slow;
        for (std::int64_t b0 = 0; b0 < cols; b0 += block) {
            const std::int64_t nb = std::min(block, cols - b0);
            const std::int64_t bad =
                k.to_f32_min_max_groups(w.bytes.data() + static_cast<std::size_t>(r * cols + b0) * es, w.type,
                                        static_cast<std::size_t>(nb), static_cast<std::size_t>(gsize), buf.data(),
                                        mn.data(), mx.data());
            if (bad >= 0) {
                first_bad = r * cols + b0 + bad;
                return;
            }
            const auto ng = static_cast<std::size_t>((nb + gsize - 1) / gsize);  // groups in this block
            const auto block_gi = static_cast<std::size_t>(qr * groups + b0 / gsize);
            if (fixed) {
                for (std::size_t jj = 0; jj < ng; ++jj) fixed_inputs(o.policy, mn[jj], mx[jj], ga[jj], gb[jj]);
                const std::int64_t over = k.make_grids(ga.data(), gb.data(), ng, recipe, gs.data(), grids.data());
                if (over >= 0) {  // the scalar rule words the refusal
                    const auto jj = static_cast<std::size_t>(over);
                    g.group = b0 / gsize + over;
                    g.mn = mn[jj];
                    g.mx = mx[jj];
                    (void)choose_group(o.policy, g, o.search);
                }
                store_block_grids(q, block_gi, gs.data(), grids.data(), ng);
            }
            if (search) {
                const std::int64_t over = k.search_groups(
                    buf.data(), o.importance.empty() ? nullptr : o.importance.data() + b0, static_cast<std::size_t>(nb),
                    static_cast<std::size_t>(gsize), mn.data(), mx.data(), search->factors.data(),
                    search->factors.size(), search->recipe, gs.data(), grids.data());
                if (over >= 0) {  // the group-by-group rule words the refusal
                    const auto jj = static_cast<std::size_t>(over);
                    g.group = b0 / gsize + over;
                    g.w = buf.data() + jj * static_cast<std::size_t>(gsize);
                    g.n = static_cast<std::size_t>(std::min(gsize, cols - b0 - over * gsize));
                    g.mn = mn[jj];
                    g.mx = mx[jj];
                    (void)choose_group(o.policy, g, o.search);
                }
                store_block_grids(q, block_gi, gs.data(), grids.data(), ng);
            }
            std::size_t jj = 0;
            for (std::int64_t c0 = b0; c0 < b0 + nb && !fixed && !search; c0 += gsize, ++jj) {
                const std::int64_t j = c0 / gsize;
                g.w = buf.data() + (c0 - b0);
                g.imp = o.importance.empty() ? nullptr : o.importance.data() + c0;
                g.n = static_cast<std::size_t>(std::min(gsize, cols - c0));
                g.group = j;
                g.mn = mn[jj];
                g.mx = mx[jj];
                const group_choice c = o.policy == scale_policy::custom ? o.custom(g) : choose_group(o.policy, g, o.search);
                if (S.symmetric) {
                    if (c.zero != S.pinned_zero())
                        fail<unsupported_error>({}, w.name, "custom policy returned zero " + std::to_string(c.zero) +
                                                                " for a symmetric scheme (must be " +
                                                                std::to_string(S.pinned_zero()) + ")");
                }
                if (c.zero < 0 || c.zero > S.maxq())
                    fail<unsupported_error>({}, w.name, "zero point " + std::to_string(c.zero) + " out of range");
                const auto gi = static_cast<std::size_t>(qr * groups + j);
                q.scales[gi] = c.scale;
                q.zeros[gi] = c.zero;
                grids[jj] = g.grid(c.scale, c.zero);
            }
            std::uint8_t* codes = q.codes.data() + qr * cols + b0;
            k.encode_groups(buf.data(), static_cast<std::size_t>(nb), static_cast<std::size_t>(gsize), grids.data(),
                            codes, out.snr && snr_in_kernel ? part : nullptr);
            if (out.snr && !snr_in_kernel)  // groups of 1 or 2: the scalar stream order
                for (std::int64_t c = 0; c < nb; ++c) {
                    const simd::grid_params& gp = grids[static_cast<std::size_t>(c / gsize)];
                    slow.add(static_cast<std::size_t>(b0 + c), buf[static_cast<std::size_t>(c)],
                             simd::no_contract((static_cast<float>(codes[c]) - gp.zero) * gp.scale));
                }
        }
        if (out.snr) {
            if (snr_in_kernel)
                for (int i = 0; i < 4; ++i) slow.sig[i] = part[i], slow.err[i] = part[4 + i];
            out.snr[qr] = slow.total();
        }
    }
}

/// Sets q's header for `rows` x w's columns under opt's grid (per channel: one group of all
/// columns); its storage is left to the caller.
inline void set_quantized_header(quantized_tensor& q, const tensor_view& w, const quant_options& opt,
                                 std::int64_t rows) {
    const std::int64_t cols = w.shape[1];
    q.set_header(w.name, opt.bits, rows, cols, opt.group_size == per_channel ? cols : opt.group_size, opt.symmetric,
                 opt.scale_dtype);
}

/// The refusal for a non-finite weight at flat index `bad`.
// `bad` indexes w's elements; the message counts from element `base` of the weight w is a band
// of (0 when w is the whole weight).
[[noreturn]] inline void refuse_non_finite(const tensor_view& w, const simd::group_kernels& k, std::int64_t bad,
                                           std::int64_t base = 0) {
    float v = 0;
    const std::int64_t cols = w.shape[1];
    k.to_f32(w.bytes.data() + static_cast<std::size_t>(bad) * dtype_size(w.type), w.type, 1, &v);
    bad += base;
    fail<unsupported_error>({}, w.name,
                            std::string(v != v ? "NaN" : "infinity") + " at element " + std::to_string(bad) +
                                " (row " + std::to_string(bad / cols) + ", column " + std::to_string(bad % cols) +
                                "); refusing to quantize non-finite weights");
}

/// Quantizes rows [row_lo, row_hi) of `weight` into `band` (resized, reusing its storage) on
/// the calling thread, with each row's SNR sums in rows_snr[r - row_lo] when given. The
/// options must have passed check_options(weight, opt). `weight` may itself be a band of a
/// larger weight starting at row `first_row` of it: a refusal then names the larger weight's row.
inline void quantize_band(const tensor_view& weight, const quant_options& opt, const simd::group_kernels& k,
                          std::int64_t row_lo, std::int64_t row_hi, quantized_tensor& band, snr_sums* rows_snr,
                          std::int64_t first_row = 0) {
    set_quantized_header(band, weight, opt, row_hi - row_lo);
    band.g_idx.clear();
    band.size_storage(quantized_tensor::storage::codes_scales_zeros);  // every element is overwritten
    std::int64_t first_bad = -1;
    with_scheme(opt.bits, opt.group_size, opt.symmetric, [&](auto s) {
        quantize_rows<decltype(s)>(weight, opt, k, row_target{&band, row_lo, rows_snr}, row_lo, row_hi, first_bad);
    });
    if (first_bad >= 0) refuse_non_finite(weight, k, first_bad, first_row * weight.shape[1]);
}

}  // namespace detail

/// Quantizes a 2-D [N out, K in] F32/F16/BF16 weight (see the top of this header). With `snr`,
/// also measures the result's SNR against the weight while encoding: the same sums as
/// snr_accumulate(weight, result), at a fraction of its cost.
inline quantized_tensor quantize(const tensor_view& weight, const quant_options& opt, const executor& ex = {},
                                 snr_sums* snr = nullptr) {
    detail::check_options(weight, opt);
    const simd::group_kernels& k = simd::kernels(opt.isa ? *opt.isa : simd::active_isa());
    quantized_tensor q;
    detail::set_quantized_header(q, weight, opt, weight.shape[0]);
    assign_zeros(q.codes, static_cast<std::size_t>(q.rows * q.cols));
    assign_zeros(q.scales, static_cast<std::size_t>(q.rows * q.groups()));
    assign_zeros(q.zeros, q.scales.size());
    std::vector<snr_sums> rows_snr(snr ? static_cast<std::size_t>(q.rows) : 0);

    // Chunks of rows sized from the shape alone, so the work split never depends on threads.
    const auto grain = static_cast<std::size_t>(std::max<std::int64_t>(1, 16384 / q.cols));
    const std::size_t chunks = (static_cast<std::size_t>(q.rows) + grain - 1) / grain;
    std::vector<std::int64_t> first_bad(chunks, -1);
    const detail::row_target out{&q, 0, snr ? rows_snr.data() : nullptr};
    with_scheme(opt.bits, opt.group_size, opt.symmetric, [&](auto s) {
        using S = decltype(s);
        parallel_for(ex, 0, static_cast<std::size_t>(q.rows), grain, [&](std::size_t lo, std::size_t hi) {
            detail::quantize_rows<S>(weight, opt, k, out, static_cast<std::int64_t>(lo), static_cast<std::int64_t>(hi),
                                     first_bad[lo / grain]);
        });
    });
    for (std::int64_t bad : first_bad)
        if (bad >= 0) detail::refuse_non_finite(weight, k, bad);
    if (snr) {
        *snr = {};
        for (const snr_sums& r : rows_snr) snr->add_row(r);
    }
    return q;
}

}  // namespace qforge
