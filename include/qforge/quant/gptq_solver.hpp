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
#include "qforge/quant/quantize.hpp"
#include "qforge/quant/quantized_tensor.hpp"
#include "qforge/quant/scale_policy.hpp"
#include "qforge/simd/dispatch.hpp"

namespace qforge {

struct gptq_solver_options {
    quant_options quant{};       ///< bits, group size, symmetry, scale policy (any, incl. custom), scale dtype
    double damp_percent = 0.01;  ///< dampening as a fraction of mean diag(H) (AutoGPTQ 0.01, transformers 0.1)
    int block_size = 128;        ///< columns per lazy-update block
    bool act_order = false;      ///< process columns by descending diag(H) (desc_act)
    bool static_groups = false;  ///< choose every group's grid from the original weights first
    int damp_retries = 6;        ///< extra attempts, each with 10x the dampening
};

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
    const auto kk = static_cast<std::size_t>(k);
    const simd::group_kernels& kern = simd::kernels(qo.isa ? *qo.isa : simd::active_isa());
    std::vector<double> h = detail::gptq_read_hessian(hessian, k, weight.name);

    gptq_solver_report rep;
    std::vector<bool> dead(kk, false);
    for (std::size_t i = 0; i < kk; ++i) {
        if (h[i * kk + i] == 0.0) {
            dead[i] = true;
            h[i * kk + i] = 1.0;
            ++rep.dead_columns;
        }
    }
    std::vector<std::size_t> perm(kk);
    std::iota(perm.begin(), perm.end(), std::size_t{0});
    if (o.act_order)
        std::stable_sort(perm.begin(), perm.end(),
                         [&](std::size_t a, std::size_t b) { return h[a * kk + a] > h[b * kk + b]; });
    std::vector<double> hp(kk * kk);
    double mean_diag = 0.0;
    for (std::size_t i = 0; i < kk; ++i) {
        for (std::size_t j = 0; j < kk; ++j) hp[i * kk + j] = h[perm[i] * kk + perm[j]];
        mean_diag += hp[i * kk + i];
    }
    mean_diag /= static_cast<double>(k);
    h.clear();
    h.shrink_to_fit();

    // Factorise, with more dampening while it fails.
    std::vector<double> u;
    double damp = o.damp_percent * mean_diag;
    bool ok = false;
    for (int attempt = 0; attempt <= o.damp_retries && !ok; ++attempt) {
        std::vector<double> a = hp;
        for (std::size_t i = 0; i < kk; ++i) a[i * kk + i] += damp;
        rep.attempts = attempt + 1;
        ok = detail::gptq_reverse_cholesky(a, kk, ex) && detail::gptq_upper_inverse(a, kk, u);
        if (!ok) damp = damp > 0.0 ? damp * 10.0 : 0.01 * mean_diag;
    }
    if (!ok)
        fail<format_error>({}, weight.name,
                           "GPTQ: the Hessian is not positive definite even with dampening " + std::to_string(damp / 10.0) +
                               " (" + std::to_string(rep.attempts) +
                               " attempts); check the calibration statistics of this layer");
    rep.damp = damp;
    std::vector<float> uf(kk * kk);
    for (std::size_t i = 0; i < kk * kk; ++i) uf[i] = static_cast<float>(u[i]);
    u.clear();
    u.shrink_to_fit();

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
    const std::int64_t g = q.group_size;
    const std::int64_t groups = q.groups();
    const bool regroup = o.act_order && !o.static_groups;
    if (regroup) {
        q.g_idx.resize(kk);
        for (std::size_t i = 0; i < kk; ++i) q.g_idx[perm[i]] = static_cast<std::int32_t>(static_cast<std::int64_t>(i) / g);
    }
    std::vector<float> imp_perm;
    if (!qo.importance.empty()) {
        imp_perm.resize(kk);
        for (std::size_t i = 0; i < kk; ++i) imp_perm[i] = qo.importance[perm[i]];
    }
    const int maxq = (1 << qo.bits) - 1;
    const std::int32_t pinned = 1 << (qo.bits - 1);

    // Block ends: at most block_size columns, and never inside a group that would continue
    // past the block (so a group's grid is chosen from fully updated values).
    std::vector<std::int64_t> block_end;
    for (std::int64_t b1 = 0; b1 < k;) {
        std::int64_t b2 = std::min<std::int64_t>(b1 + o.block_size, k);
        for (std::int64_t s = (b1 / g + 1) * g; s < b2; s += g)
            if (std::min(s + g, k) > b2) {
                b2 = s;
                break;
            }
        block_end.push_back(b2);
        b1 = b2;
    }

    const std::size_t chunk = 16;  // rows per task: fixed, so the split never depends on threads
    const std::size_t n_chunks = (static_cast<std::size_t>(n_rows) + chunk - 1) / chunk;
    std::vector<double> chunk_loss(n_chunks, 0.0);
    std::vector<std::int64_t> first_bad(n_chunks, -1);
    parallel_for(ex, 0, static_cast<std::size_t>(n_rows), chunk, [&](std::size_t lo, std::size_t hi) {
        const std::size_t rows = hi - lo;
        const std::size_t es = dtype_size(weight.type);
        std::vector<float> orig(kk), w(rows * kk);
        group_view gv;
        gv.bits = qo.bits;
        gv.symmetric = qo.symmetric;
        gv.scale_dtype = qo.scale_dtype;
        gv.tensor = &weight.name;
        gv.kernels = &kern;
        auto choose = [&](const float* vals, const float* imp, std::size_t n, std::int64_t row, std::int64_t grp) {
            gv.w = vals;
            gv.imp = imp;
            gv.n = n;
            gv.row = row;
            gv.group = grp;
            kern.min_max(vals, n, &gv.mn, &gv.mx);
            const group_choice c = qo.policy == scale_policy::custom ? qo.custom(gv) : choose_group(qo.policy, gv, qo.search);
            if ((qo.symmetric && c.zero != pinned) || c.zero < 0 || c.zero > maxq)
                fail<unsupported_error>({}, weight.name, "scale policy returned zero " + std::to_string(c.zero) +
                                                             " out of range for this scheme");
            return c;
        };
        for (std::size_t r = 0; r < rows; ++r) {
            const auto row = static_cast<std::int64_t>(lo + r);
            const std::int64_t bad = kern.to_f32(weight.bytes.data() + static_cast<std::size_t>(row) * kk * es,
                                                 weight.type, kk, orig.data());
            if (bad >= 0) {
                first_bad[lo / chunk] = row * k + bad;
                return;
            }
            for (std::size_t i = 0; i < kk; ++i)
                if (dead[i]) orig[i] = 0.0f;
            if (o.static_groups) {
                for (std::int64_t j = 0; j < groups; ++j) {
                    const std::int64_t c0 = j * g;
                    const auto n = static_cast<std::size_t>(std::min(g, k - c0));
                    const group_choice c =
                        choose(orig.data() + c0, qo.importance.empty() ? nullptr : qo.importance.data() + c0, n, row, j);
                    q.scales[static_cast<std::size_t>(row * groups + j)] = c.scale;
                    q.zeros[static_cast<std::size_t>(row * groups + j)] = c.zero;
                }
            }
            for (std::size_t i = 0; i < kk; ++i) w[r * kk + i] = orig[perm[i]];
        }

        std::vector<float> err(rows * static_cast<std::size_t>(o.block_size));
        std::vector<float> cur_scale(rows);
        std::vector<std::int32_t> cur_zero(rows);
        double loss = 0.0;
        std::int64_t b1 = 0;
        for (std::int64_t b2 : block_end) {
            const auto bw = static_cast<std::size_t>(b2 - b1);
            for (std::size_t r = 0; r < rows; ++r) {
                const auto row = static_cast<std::int64_t>(lo + r);
                float* wr = w.data() + r * kk;
                float* er = err.data() + r * static_cast<std::size_t>(o.block_size);
                for (std::int64_t i = b1; i < b2; ++i) {
                    const auto iu = static_cast<std::size_t>(i);
                    float s;
                    std::int32_t z;
                    if (o.static_groups) {
                        const auto gi = static_cast<std::size_t>(row * groups + static_cast<std::int64_t>(perm[iu]) / g);
                        s = scale_value(q.scales[gi], qo.scale_dtype);
                        z = q.zeros[gi];
                    } else {
                        if (i % g == 0) {
                            const auto n = static_cast<std::size_t>(std::min(g, k - i));
                            const group_choice c =
                                choose(wr + i, imp_perm.empty() ? nullptr : imp_perm.data() + i, n, row, i / g);
                            const auto gi = static_cast<std::size_t>(row * groups + i / g);
                            q.scales[gi] = c.scale;
                            q.zeros[gi] = c.zero;
                            cur_scale[r] = scale_value(c.scale, qo.scale_dtype);
                            cur_zero[r] = c.zero;
                        }
                        s = cur_scale[r];
                        z = cur_zero[r];
                    }
                    const std::uint8_t code = detail::gptq_code(wr[iu], s, z, maxq);
                    q.codes[static_cast<std::size_t>(row) * kk + perm[iu]] = code;
                    const float dq = static_cast<float>(static_cast<std::int32_t>(code) - z) * s;
                    const float* ui = uf.data() + iu * kk;
                    const float e = (wr[iu] - dq) / ui[iu];
                    loss += 0.5 * static_cast<double>(e) * static_cast<double>(e);
                    for (std::size_t j = iu + 1; j < static_cast<std::size_t>(b2); ++j) wr[j] -= e * ui[j];
                    er[iu - static_cast<std::size_t>(b1)] = e;
                }
            }
            // The lazy update of every later column, row by row, block columns in order.
            if (b2 < k) {
                for (std::size_t bi = 0; bi < bw; ++bi) {
                    const float* ui = uf.data() + (static_cast<std::size_t>(b1) + bi) * kk;
                    for (std::size_t r = 0; r < rows; ++r) {
                        const float e = err[r * static_cast<std::size_t>(o.block_size) + bi];
                        float* wr = w.data() + r * kk;
                        for (std::size_t j = static_cast<std::size_t>(b2); j < kk; ++j) wr[j] -= e * ui[j];
                    }
                }
            }
            b1 = b2;
        }
        chunk_loss[lo / chunk] = loss;
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
