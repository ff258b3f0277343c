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
#include <string>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/core/zeroed_buffer.hpp"
#include "qforge/quant/quant_options.hpp"
#include "qforge/quant/quantized_tensor.hpp"
#include "qforge/quant/scale_policy.hpp"
#include "qforge/quant/scheme.hpp"
#include "qforge/quant/snr.hpp"
#include "qforge/simd/dispatch.hpp"
#include "qforge/simd/no_contract.hpp"

namespace qforge {

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

/// The row loop of quantize_rows in named steps. Rows are converted a block of whole groups at
/// a time (about 8 KB of floats), so the group passes read L1-resident data; a group wider than
/// that is its own block. Per block: every group's min/max in one kernel call, then the scale
/// choices (fixed rule: one make_grids call; search: one search_groups call; else group by
/// group), then every group's codes (and SNR terms) in one call; each group's result is what
/// the single-group kernels give.
class row_quantizer {
public:
    row_quantizer(const row_scheme& S, const tensor_view& w, const quant_options& o, const simd::group_kernels& k,
                  row_target out)
        : S_(S), w_(w), o_(o), k_(k), out_(out), q_(*out.q), cols_(q_.cols), groups_(q_.groups()),
          es_(dtype_size(w.type)), block_(std::min(cols_, S.gsize >= 2048 ? S.gsize : (2048 / S.gsize) * S.gsize)),
          block_groups_(static_cast<std::size_t>((block_ + S.gsize - 1) / S.gsize)), buf_(static_cast<std::size_t>(block_)),
          mn_(block_groups_), mx_(block_groups_), grids_(block_groups_), fixed_(is_fixed_rule(o.policy)),
          recipe_(fixed_ ? fixed_recipe(o.policy, S.bits, o.scale_dtype) : simd::grid_recipe{}),
          ga_(fixed_ ? block_groups_ : 0), gb_(fixed_ ? block_groups_ : 0), gs_(fixed_ ? block_groups_ : 0),
          search_(fixed_ || o.policy == scale_policy::custom ? std::nullopt
                                                              : plan_search(o.policy, S.bits, S.symmetric, o.scale_dtype, o.search)),
          snr_in_kernel_(S.gsize % 4 == 0) {
        if (search_) gs_.resize(block_groups_);
        g_.bits = S.bits;
        g_.symmetric = S.symmetric;
        g_.scale_dtype = o.scale_dtype;
        g_.tensor = &w.name;
        g_.kernels = &k;
    }

    /// Row r of the weight; false (first_bad set to its element) on a non-finite weight.
    bool row(std::int64_t r, std::int64_t& first_bad) {
        g_.row = r;
        const std::int64_t qr = r - out_.first_row;
        double part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        detail::snr_partials slow;
        for (std::int64_t b0 = 0; b0 < cols_; b0 += block_) {
            const std::int64_t nb = std::min(block_, cols_ - b0);
            const std::int64_t bad =
                k_.to_f32_min_max_groups(w_.bytes.data() + static_cast<std::size_t>(r * cols_ + b0) * es_, w_.type,
                                         static_cast<std::size_t>(nb), static_cast<std::size_t>(S_.gsize), buf_.data(),
                                         mn_.data(), mx_.data());
            if (bad >= 0) {
                first_bad = r * cols_ + b0 + bad;
                return false;
            }
            const auto ng = static_cast<std::size_t>((nb + S_.gsize - 1) / S_.gsize);  // groups in this block
            const auto block_gi = static_cast<std::size_t>(qr * groups_ + b0 / S_.gsize);
            if (fixed_) fixed_grids(b0, ng, block_gi);
            if (search_) searched_grids(b0, nb, ng, block_gi);
            if (!fixed_ && !search_) chosen_grids(qr, b0, nb);
            encode(qr, b0, nb, part, slow);
        }
        if (out_.snr) {
            if (snr_in_kernel_)
                for (int i = 0; i < 4; ++i) slow.sig[i] = part[i], slow.err[i] = part[4 + i];
            out_.snr[qr] = slow.total();
        }
        return true;
    }

private:
    /// Fixed-rule policies: every group's scale of the block in one make_grids call.
    void fixed_grids(std::int64_t b0, std::size_t ng, std::size_t block_gi) {
        for (std::size_t jj = 0; jj < ng; ++jj) fixed_inputs(o_.policy, mn_[jj], mx_[jj], ga_[jj], gb_[jj]);
        const std::int64_t over = k_.make_grids(ga_.data(), gb_.data(), ng, recipe_, gs_.data(), grids_.data());
        if (over >= 0) {  // the scalar rule words the refusal
            const auto jj = static_cast<std::size_t>(over);
            g_.group = b0 / S_.gsize + over;
            g_.mn = mn_[jj];
            g_.mx = mx_[jj];
            (void)choose_group(o_.policy, g_, o_.search);
        }
        store_block_grids(q_, block_gi, gs_.data(), grids_.data(), ng);
    }

    /// Search policies: every group's search of the block in one search_groups call.
    void searched_grids(std::int64_t b0, std::int64_t nb, std::size_t ng, std::size_t block_gi) {
        const std::int64_t over = k_.search_groups(
            buf_.data(), o_.importance.empty() ? nullptr : o_.importance.data() + b0, static_cast<std::size_t>(nb),
            static_cast<std::size_t>(S_.gsize), mn_.data(), mx_.data(), search_->factors.data(), search_->factors.size(),
            search_->recipe, gs_.data(), grids_.data());
        if (over >= 0) {  // the group-by-group rule words the refusal
            const auto jj = static_cast<std::size_t>(over);
            g_.group = b0 / S_.gsize + over;
            g_.w = buf_.data() + jj * static_cast<std::size_t>(S_.gsize);
            g_.n = static_cast<std::size_t>(std::min(S_.gsize, cols_ - b0 - over * S_.gsize));
            g_.mn = mn_[jj];
            g_.mx = mx_[jj];
            (void)choose_group(o_.policy, g_, o_.search);
        }
        store_block_grids(q_, block_gi, gs_.data(), grids_.data(), ng);
    }

    /// The other policies (custom included): group by group, their zero points checked.
    void chosen_grids(std::int64_t qr, std::int64_t b0, std::int64_t nb) {
        const std::int64_t gsize = S_.gsize;
        std::size_t jj = 0;
        for (std::int64_t c0 = b0; c0 < b0 + nb; c0 += gsize, ++jj) {
            const std::int64_t j = c0 / gsize;
            g_.w = buf_.data() + (c0 - b0);
            g_.imp = o_.importance.empty() ? nullptr : o_.importance.data() + c0;
            g_.n = static_cast<std::size_t>(std::min(gsize, cols_ - c0));
            g_.group = j;
            g_.mn = mn_[jj];
            g_.mx = mx_[jj];
            const group_choice c = o_.policy == scale_policy::custom ? o_.custom(g_) : choose_group(o_.policy, g_, o_.search);
            if (S_.symmetric) {
                if (c.zero != S_.pinned_zero())
                    fail<unsupported_error>({}, w_.name, "custom policy returned zero " + std::to_string(c.zero) +
                                                             " for a symmetric scheme (must be " +
                                                             std::to_string(S_.pinned_zero()) + ")");
            }
            if (c.zero < 0 || c.zero > S_.maxq())
                fail<unsupported_error>({}, w_.name, "zero point " + std::to_string(c.zero) + " out of range");
            const auto gi = static_cast<std::size_t>(qr * groups_ + j);
            q_.scales[gi] = c.scale;
            q_.zeros[gi] = c.zero;
            grids_[jj] = g_.grid(c.scale, c.zero);
        }
    }

    /// The block's codes, and its SNR terms (in the kernel, or for groups of 1 or 2 in the
    /// scalar stream order).
    void encode(std::int64_t qr, std::int64_t b0, std::int64_t nb, double* part, detail::snr_partials& slow) {
        std::uint8_t* codes = q_.codes.data() + qr * cols_ + b0;
        k_.encode_groups(buf_.data(), static_cast<std::size_t>(nb), static_cast<std::size_t>(S_.gsize), grids_.data(), codes,
                         out_.snr && snr_in_kernel_ ? part : nullptr);
        if (out_.snr && !snr_in_kernel_)
            for (std::int64_t c = 0; c < nb; ++c) {
                const simd::grid_params& gp = grids_[static_cast<std::size_t>(c / S_.gsize)];
                slow.add(static_cast<std::size_t>(b0 + c), buf_[static_cast<std::size_t>(c)],
                         simd::no_contract((static_cast<float>(codes[c]) - gp.zero) * gp.scale));
            }
    }

    const row_scheme& S_;
    const tensor_view& w_;
    const quant_options& o_;
    const simd::group_kernels& k_;
    row_target out_;
    quantized_tensor& q_;
    std::int64_t cols_, groups_;
    std::size_t es_;
    std::int64_t block_;
    std::size_t block_groups_;
    std::vector<float> buf_, mn_, mx_;
    std::vector<simd::grid_params> grids_;
    bool fixed_;
    simd::grid_recipe recipe_;
    std::vector<float> ga_, gb_;
    std::vector<std::uint16_t> gs_;
    std::optional<search_plan> search_;
    bool snr_in_kernel_;
    group_view g_;
};

inline void quantize_rows_with(const row_scheme& S, const tensor_view& w, const quant_options& o,
                               const simd::group_kernels& k, row_target out, std::int64_t row_lo, std::int64_t row_hi,
                               std::int64_t& first_bad) {
    row_quantizer rows(S, w, o, k, out);
    for (std::int64_t r = row_lo; r < row_hi; ++r)
        if (!rows.row(r, first_bad)) return;
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
