// GPTQ: quantize a linear weight column by column, pushing each column's rounding error onto
// the columns not yet quantized, weighted by the layer's input Hessian H = X^T X (from the
// user's calibration run; qforge never runs the model).
//
// The published algorithm (Frantar et al. 2022; AutoGPTQ quantization/gptq.py fasterquant):
//   * dead inputs (H_ii = 0) get H_ii = 1 and their weights set to 0 (the input is always 0);
//   * act-order (optional): columns are processed by descending diag(H) (stable order);
//   * dampening: H += damp_percent * mean(diag H) * I; when a Cholesky step still fails the
//     dampening is multiplied by 10 and retried, and after `damp_retries` failures the layer
//     is refused with a format_error naming it;
//   * U = the upper Cholesky factor of H^-1 (H^-1 = U^T U), in double (detail/gptq_linalg.hpp),
//     then used in float;
//   * column i (in processing order): a group's grid is chosen by the scale policy when its
//     first column is reached, from the group's current (already error-compensated) values
//     (or up front from the original weights, `static_groups`); q = code of w_i on the grid,
//     err = (w_i - dequant(q)) / U_ii, and w_j -= err * U_ij for the later columns j: at once
//     inside the current block of `block_size` columns, lazily (one pass per block) after it.
// Blocks end early where a group would straddle their end, so a group's grid always sees
// fully updated values. With act-order the group of each column is recorded in g_idx in the
// GPTQ layout (formats.md 2.4: codes stay in the original column order, g_idx[k] = the group
// of column k; static groups keep g_idx[k] = k / g).
//
// Rows are independent (they share only U), so they are split into fixed chunks of rows
// processed in parallel; each row's arithmetic is the same whatever the chunking, so the
// bytes never depend on the executor. With H = identity nothing is propagated and the result
// is round-to-nearest with the same policy, code for code.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/quant/detail/gptq_linalg.hpp"
#include "qforge/quant/quant_options.hpp"
#include "qforge/quant/quantize.hpp"
#include "qforge/quant/quantized_tensor.hpp"
#include "qforge/quant/scale_policy.hpp"
#include "qforge/simd/dispatch.hpp"

namespace qforge {

/// What the solver did, for reports.
struct gptq_solver_report {
    double damp = 0.0;                ///< dampening added to the diagonal (absolute)
    int attempts = 0;                 ///< factorisations tried (1 = the first worked)
    std::int64_t dead_columns = 0;    ///< inputs with H_ii = 0
    double loss = 0.0;                ///< sum over rows and columns of err^2 / 2 (GPTQ's own loss)
};

namespace detail {

inline void gptq_check(const gptq_solver_options& o, const std::string& name) {
    if (!(o.damp_percent >= 0.0 && o.damp_percent < 1e6))
        fail<shape_error>({}, name, "GPTQ damp_percent must be >= 0, got " + std::to_string(o.damp_percent));
    if (o.block_size < 1 || o.block_size > 65536)
        fail<shape_error>({}, name, "GPTQ block size must be 1..65536, got " + std::to_string(o.block_size));
    if (o.damp_retries < 0 || o.damp_retries > 30)
        fail<shape_error>({}, name, "GPTQ damp_retries must be 0..30");
}

/// The Hessian as a symmetric double matrix; throws on a bad shape, dtype or value.
inline std::vector<double> gptq_read_hessian(const tensor_view& h, std::int64_t k, const std::string& layer) {
    if (h.type != dtype::F32 && h.type != dtype::F64)
        fail<unsupported_error>({}, h.name, "Hessian must be F32 or F64, not " + std::string(dtype_name(h.type)));
    if (h.rank() != 2 || h.shape[0] != k || h.shape[1] != k)
        fail<shape_error>({}, h.name, "Hessian shape " + shape_to_string(h.shape) + " does not match the " +
                                          std::to_string(k) + " input columns of '" + layer + "'");
    const auto kk = static_cast<std::size_t>(k);
    if (h.bytes.size() != kk * kk * dtype_size(h.type))
        fail<shape_error>({}, h.name, "Hessian holds " + std::to_string(h.bytes.size()) + " bytes, shape needs " +
                                          std::to_string(kk * kk * dtype_size(h.type)));
    std::vector<double> a(kk * kk);
    for (std::size_t i = 0; i < kk * kk; ++i) {
        if (h.type == dtype::F64) {
            std::memcpy(&a[i], h.bytes.data() + i * 8, 8);
        } else {
            float f;
            std::memcpy(&f, h.bytes.data() + i * 4, 4);
            a[i] = f;
        }
        if (!std::isfinite(a[i]))
            fail<format_error>({}, h.name, "non-finite Hessian entry at (" + std::to_string(i / kk) + ", " +
                                               std::to_string(i % kk) + ")");
    }
    for (std::size_t i = 0; i < kk; ++i) {
        if (a[i * kk + i] < 0.0)
            fail<format_error>({}, h.name, "negative Hessian diagonal at " + std::to_string(i) +
                                               " (a Hessian X^T X is positive semi-definite)");
        for (std::size_t j = 0; j < i; ++j) {  // symmetrize: accumulation order can break symmetry slightly
            const double m = 0.5 * (a[i * kk + j] + a[j * kk + i]);
            a[i * kk + j] = a[j * kk + i] = m;
        }
    }
    return a;
}

inline std::uint8_t gptq_code(float x, float scale, std::int32_t zero, int maxq) noexcept {
    const float q = round_half_even(x / scale) + static_cast<float>(zero);  // simd encode()'s definition
    return static_cast<std::uint8_t>(q < 0.0f ? 0.0f : (q > static_cast<float>(maxq) ? static_cast<float>(maxq) : q));
}

}  // namespace detail

namespace detail {

/// The Hessian made ready for the solver: dead inputs (H_ii = 0) marked and given H_ii = 1,
/// columns in processing order (`perm`: descending diag(H) under act-order), and U, the
/// upper Cholesky factor of the dampened inverse, in float.
struct gptq_factor {
    std::vector<bool> dead;
    std::vector<std::size_t> perm;
    std::vector<float> u;
};

/// H permuted into processing order, and the mean of its diagonal.
inline std::vector<double> gptq_permuted(std::vector<double>& h, std::size_t kk, bool act_order, gptq_factor& f,
                                         double& mean_diag) {
    f.perm.resize(kk);
    std::iota(f.perm.begin(), f.perm.end(), std::size_t{0});
    if (act_order)
        std::stable_sort(f.perm.begin(), f.perm.end(),
                         [&](std::size_t a, std::size_t b) { return h[a * kk + a] > h[b * kk + b]; });
    std::vector<double> hp(kk * kk);
    mean_diag = 0.0;
    for (std::size_t i = 0; i < kk; ++i) {
        for (std::size_t j = 0; j < kk; ++j) hp[i * kk + j] = h[f.perm[i] * kk + f.perm[j]];
        mean_diag += hp[i * kk + i];
    }
    mean_diag /= static_cast<double>(kk);
    h.clear();
    h.shrink_to_fit();
    return hp;
}

/// Reads, permutes and factorises the Hessian, with more dampening while it fails.
inline gptq_factor gptq_factorise(const tensor_view& hessian, std::int64_t k, const std::string& layer,
                                  const gptq_solver_options& o, const executor& ex, gptq_solver_report& rep) {
    const auto kk = static_cast<std::size_t>(k);
    std::vector<double> h = gptq_read_hessian(hessian, k, layer);
    gptq_factor f;
    f.dead.assign(kk, false);
    for (std::size_t i = 0; i < kk; ++i) {
        if (h[i * kk + i] == 0.0) {
            f.dead[i] = true;
            h[i * kk + i] = 1.0;
            ++rep.dead_columns;
        }
    }
    double mean_diag = 0.0;
    const std::vector<double> hp = gptq_permuted(h, kk, o.act_order, f, mean_diag);
    std::vector<double> u;
    double damp = o.damp_percent * mean_diag;
    bool ok = false;
    for (int attempt = 0; attempt <= o.damp_retries && !ok; ++attempt) {
        std::vector<double> a = hp;
        for (std::size_t i = 0; i < kk; ++i) a[i * kk + i] += damp;
        rep.attempts = attempt + 1;
        ok = gptq_reverse_cholesky(a, kk, ex) && gptq_upper_inverse(a, kk, u);
        if (!ok) damp = damp > 0.0 ? damp * 10.0 : 0.01 * mean_diag;
    }
    if (!ok)
        fail<format_error>({}, layer,
                           "GPTQ: the Hessian is not positive definite even with dampening " + std::to_string(damp / 10.0) +
                               " (" + std::to_string(rep.attempts) +
                               " attempts); check the calibration statistics of this layer");
    rep.damp = damp;
    f.u.resize(kk * kk);
    for (std::size_t i = 0; i < kk * kk; ++i) f.u[i] = static_cast<float>(u[i]);
    return f;
}

/// The quantized_tensor the solver fills (codes, scales and zeros zeroed), with g_idx when
/// act-order regroups columns.
inline quantized_tensor gptq_output(const tensor_view& weight, const quant_options& qo, const std::vector<std::size_t>& perm,
                                    bool regroup) {
    const std::int64_t n_rows = weight.shape[0], k = weight.shape[1];
    const auto kk = static_cast<std::size_t>(k);
    quantized_tensor q;
    q.name = weight.name;
    q.bits = qo.bits;
    q.rows = n_rows;
    q.cols = k;
    q.group_size = qo.group_size == per_channel ? k : qo.group_size;
    q.symmetric = qo.symmetric;
    q.scale_dtype = qo.scale_dtype;
    q.codes.assign(static_cast<std::size_t>(n_rows) * kk, 0);
    q.scales.assign(static_cast<std::size_t>(n_rows * q.groups()), 0);
    q.zeros.assign(q.scales.size(), 0);
    if (regroup) {
        q.g_idx.resize(kk);
        for (std::size_t i = 0; i < kk; ++i)
            q.g_idx[perm[i]] = static_cast<std::int32_t>(static_cast<std::int64_t>(i) / q.group_size);
    }
    return q;
}

/// Block ends: at most block_size columns, and never inside a group that would continue
/// past the block (so a group's grid is chosen from fully updated values).
inline std::vector<std::int64_t> gptq_block_ends(std::int64_t k, std::int64_t g, int block_size) {
    std::vector<std::int64_t> block_end;
    for (std::int64_t b1 = 0; b1 < k;) {
        std::int64_t b2 = std::min<std::int64_t>(b1 + block_size, k);
        for (std::int64_t s = (b1 / g + 1) * g; s < b2; s += g)
            if (std::min(s + g, k) > b2) {
                b2 = s;
                break;
            }
        block_end.push_back(b2);
        b1 = b2;
    }
    return block_end;
}

/// The solver over one chunk of rows [lo, hi): rows are independent (they share only U), so
/// each chunk runs on its own; its arithmetic never depends on the chunking.
class gptq_rows {
public:
    gptq_rows(const tensor_view& weight, const gptq_solver_options& o, const simd::group_kernels& kern,
              const gptq_factor& f, std::span<const float> imp_perm, const std::vector<std::int64_t>& block_end,
              quantized_tensor& q)
        : weight_(weight), o_(o), qo_(o.quant), kern_(kern), f_(f), imp_perm_(imp_perm), block_end_(block_end), q_(q),
          k_(weight.shape[1]), kk_(static_cast<std::size_t>(k_)), g_(q.group_size), groups_(q.groups()),
          maxq_((1 << qo_.bits) - 1), pinned_(1 << (qo_.bits - 1)) {}

    /// Solves rows [lo, hi); returns GPTQ's loss over them, or sets `first_bad` to the first
    /// non-finite weight element (row * K + column) and returns 0.
    double solve(std::size_t lo, std::size_t hi, std::int64_t& first_bad) const {
        const std::size_t rows = hi - lo;
        std::vector<float> w(rows * kk_);
        group_view gv;
        gv.bits = qo_.bits;
        gv.symmetric = qo_.symmetric;
        gv.scale_dtype = qo_.scale_dtype;
        gv.tensor = &weight_.name;
        gv.kernels = &kern_;
        if (!load(lo, rows, w, gv, first_bad)) return 0.0;
        const auto bs = static_cast<std::size_t>(o_.block_size);
        std::vector<float> err(rows * bs);
        std::vector<float> cur_scale(rows);
        std::vector<std::int32_t> cur_zero(rows);
        double loss = 0.0;
        std::int64_t b1 = 0;
        for (std::int64_t b2 : block_end_) {
            for (std::size_t r = 0; r < rows; ++r)
                loss += quantize_block(static_cast<std::int64_t>(lo + r), w.data() + r * kk_, err.data() + r * bs, b1, b2,
                                       cur_scale[r], cur_zero[r], gv);
            if (b2 < k_) update_later(w, err, rows, b1, b2);
            b1 = b2;
        }
        return loss;
    }

private:
    /// A group's grid by the scheme's policy (a custom policy's zero checked).
    group_choice choose(group_view& gv, const float* vals, const float* imp, std::size_t n, std::int64_t row,
                        std::int64_t grp) const {
        gv.w = vals;
        gv.imp = imp;
        gv.n = n;
        gv.row = row;
        gv.group = grp;
        kern_.min_max(vals, n, &gv.mn, &gv.mx);
        const group_choice c = qo_.policy == scale_policy::custom ? qo_.custom(gv) : choose_group(qo_.policy, gv, qo_.search);
        if ((qo_.symmetric && c.zero != pinned_) || c.zero < 0 || c.zero > maxq_)
            fail<unsupported_error>({}, weight_.name, "scale policy returned zero " + std::to_string(c.zero) +
                                                          " out of range for this scheme");
        return c;
    }

    /// The chunk's rows in float, dead inputs zeroed, permuted into w (static groups choose
    /// every grid from these original values first). False on a non-finite weight.
    bool load(std::size_t lo, std::size_t rows, std::vector<float>& w, group_view& gv, std::int64_t& first_bad) const {
        const std::size_t es = dtype_size(weight_.type);
        std::vector<float> orig(kk_);
        for (std::size_t r = 0; r < rows; ++r) {
            const auto row = static_cast<std::int64_t>(lo + r);
            const std::int64_t bad =
                kern_.to_f32(weight_.bytes.data() + static_cast<std::size_t>(row) * kk_ * es, weight_.type, kk_, orig.data());
            if (bad >= 0) {
                first_bad = row * k_ + bad;
                return false;
            }
            for (std::size_t i = 0; i < kk_; ++i)
                if (f_.dead[i]) orig[i] = 0.0f;
            if (o_.static_groups) {
                for (std::int64_t j = 0; j < groups_; ++j) {
                    const std::int64_t c0 = j * g_;
                    const auto n = static_cast<std::size_t>(std::min(g_, k_ - c0));
                    const group_choice c =
                        choose(gv, orig.data() + c0, qo_.importance.empty() ? nullptr : qo_.importance.data() + c0, n, row, j);
                    q_.scales[static_cast<std::size_t>(row * groups_ + j)] = c.scale;
                    q_.zeros[static_cast<std::size_t>(row * groups_ + j)] = c.zero;
                }
            }
            for (std::size_t i = 0; i < kk_; ++i) w[r * kk_ + i] = orig[f_.perm[i]];
        }
        return true;
    }

    /// Columns [b1, b2) of one row: each quantized on its group's grid, its error propagated
    /// to the block's later columns and kept in `er` for the lazy update. Returns the loss.
    double quantize_block(std::int64_t row, float* wr, float* er, std::int64_t b1, std::int64_t b2, float& cur_scale,
                          std::int32_t& cur_zero, group_view& gv) const {
        double loss = 0.0;
        for (std::int64_t i = b1; i < b2; ++i) {
            const auto iu = static_cast<std::size_t>(i);
            float s;
            std::int32_t z;
            if (o_.static_groups) {
                const auto gi = static_cast<std::size_t>(row * groups_ + static_cast<std::int64_t>(f_.perm[iu]) / g_);
                s = scale_value(q_.scales[gi], qo_.scale_dtype);
                z = q_.zeros[gi];
            } else {
                if (i % g_ == 0) {
                    const auto n = static_cast<std::size_t>(std::min(g_, k_ - i));
                    const group_choice c =
                        choose(gv, wr + i, imp_perm_.empty() ? nullptr : imp_perm_.data() + i, n, row, i / g_);
                    const auto gi = static_cast<std::size_t>(row * groups_ + i / g_);
                    q_.scales[gi] = c.scale;
                    q_.zeros[gi] = c.zero;
                    cur_scale = scale_value(c.scale, qo_.scale_dtype);
                    cur_zero = c.zero;
                }
                s = cur_scale;
                z = cur_zero;
            }
            const std::uint8_t code = gptq_code(wr[iu], s, z, maxq_);
            q_.codes[static_cast<std::size_t>(row) * kk_ + f_.perm[iu]] = code;
            const float dq = static_cast<float>(static_cast<std::int32_t>(code) - z) * s;
            const float* ui = f_.u.data() + iu * kk_;
            const float e = (wr[iu] - dq) / ui[iu];
            loss += 0.5 * static_cast<double>(e) * static_cast<double>(e);
            for (std::size_t j = iu + 1; j < static_cast<std::size_t>(b2); ++j) wr[j] -= e * ui[j];
            er[iu - static_cast<std::size_t>(b1)] = e;
        }
        return loss;
    }

    /// The lazy update of every later column, row by row, block columns in order.
    void update_later(std::vector<float>& w, const std::vector<float>& err, std::size_t rows, std::int64_t b1,
                      std::int64_t b2) const {
        const auto bw = static_cast<std::size_t>(b2 - b1);
        for (std::size_t bi = 0; bi < bw; ++bi) {
            const float* ui = f_.u.data() + (static_cast<std::size_t>(b1) + bi) * kk_;
            for (std::size_t r = 0; r < rows; ++r) {
                const float e = err[r * static_cast<std::size_t>(o_.block_size) + bi];
                float* wr = w.data() + r * kk_;
                for (std::size_t j = static_cast<std::size_t>(b2); j < kk_; ++j) wr[j] -= e * ui[j];
            }
        }
    }

    const tensor_view& weight_;
    const gptq_solver_options& o_;
    const quant_options& qo_;
    const simd::group_kernels& kern_;
    const gptq_factor& f_;
    std::span<const float> imp_perm_;
    const std::vector<std::int64_t>& block_end_;
    quantized_tensor& q_;  // rows of one chunk are written by that chunk only
    std::int64_t k_;
    std::size_t kk_;
    std::int64_t g_, groups_;
    int maxq_;
    std::int32_t pinned_;
};

}  // namespace detail

/// Quantizes `weight` (F32/F16/BF16 [N, K]) with GPTQ under the Hessian `hessian` (F32/F64
/// [K, K], symmetric positive semi-definite). Returns the quantized tensor (with g_idx when
/// act-order regroups columns); fills `report` when given.
inline quantized_tensor gptq_quantize(const tensor_view& weight, const tensor_view& hessian, const gptq_solver_options& o,
                                      const executor& ex = {}, gptq_solver_report* report = nullptr) {
    const quant_options& qo = o.quant;
    detail::check_options(weight, qo);
    detail::gptq_check(o, weight.name);
    const std::int64_t n_rows = weight.shape[0];
    const std::int64_t k = weight.shape[1];
    const simd::group_kernels& kern = simd::kernels(qo.isa ? *qo.isa : simd::active_isa());
    gptq_solver_report rep;
    const detail::gptq_factor f = detail::gptq_factorise(hessian, k, weight.name, o, ex, rep);
    quantized_tensor q = detail::gptq_output(weight, qo, f.perm, o.act_order && !o.static_groups);
    std::vector<float> imp_perm;
    if (!qo.importance.empty()) {
        imp_perm.resize(static_cast<std::size_t>(k));
        for (std::size_t i = 0; i < imp_perm.size(); ++i) imp_perm[i] = qo.importance[f.perm[i]];
    }
    const std::vector<std::int64_t> block_end = detail::gptq_block_ends(k, q.group_size, o.block_size);
    const detail::gptq_rows solver(weight, o, kern, f, imp_perm, block_end, q);

    const std::size_t chunk = 16;  // rows per task: fixed, so the split never depends on threads
    const std::size_t n_chunks = (static_cast<std::size_t>(n_rows) + chunk - 1) / chunk;
    std::vector<double> chunk_loss(n_chunks, 0.0);
    std::vector<std::int64_t> first_bad(n_chunks, -1);
    parallel_for(ex, 0, static_cast<std::size_t>(n_rows), chunk, [&](std::size_t lo, std::size_t hi) {
        chunk_loss[lo / chunk] = solver.solve(lo, hi, first_bad[lo / chunk]);
    });
    for (std::int64_t bad : first_bad)
        if (bad >= 0)
            fail<unsupported_error>({}, weight.name, "non-finite weight at element " + std::to_string(bad) +
                                                         "; refusing to quantize non-finite weights");
    for (double l : chunk_loss) rep.loss += l;
    if (report) *report = rep;
    return q;
}

/// The same with the Hessian given as K*K row-major doubles.
inline quantized_tensor gptq_quantize(const tensor_view& weight, std::span<const double> hessian, const gptq_solver_options& o,
                                      const executor& ex = {}, gptq_solver_report* report = nullptr) {
    const std::int64_t k = weight.rank() == 2 ? weight.shape[1] : 0;
    const tensor_view hv{weight.name + ".hessian", dtype::F64, {k, k}, std::as_bytes(hessian)};
    return gptq_quantize(weight, hv, o, ex, report);
}

}  // namespace qforge
