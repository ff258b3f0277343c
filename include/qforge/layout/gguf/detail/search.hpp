// The scale searches shared by ggml's K-quant and importance-weighted quantizers.
//
// Each function repeats the arithmetic of the ggml function it names (ggerganov/llama.cpp
// c392e509, ggml/src/ggml-quants.c; algorithm summary in formats.md 5.3) operation for
// operation: the same evaluation order, int->float conversions at the same points, and every
// product that feeds a sum rounded on its own (`mul`, see fp.hpp). Integer results are stored
// with the same narrowing as the C code (uint8_t/int8_t arrays wrap), because later steps read
// them back.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "qforge/core/half.hpp"
#include "qforge/layout/gguf/detail/fp.hpp"

namespace qforge::gguf::detail {

inline constexpr float group_max_eps = 1e-15f;  // GROUP_MAX_EPS

inline int clamp_int(int v, int lo, int hi) noexcept { return v < lo ? lo : (v > hi ? hi : v); }

/// ggml GGML_FP32_TO_FP16 then GGML_FP16_TO_FP32: what a stored fp16 scale reads back as.
inline float fp16_round_trip(float f) noexcept { return fp16_to_float(float_to_fp16(f)); }

/// ggml `make_qx_quants`: symmetric grid [-nmax, nmax-1] with a 19-step scale search
/// (rmse_type 1: weights x^2, or qw when given). L receives codes + nmax. Returns the scale.
inline float make_qx_quants(int n, int nmax, const float* x, std::int8_t* L, int rmse_type,
                            const float* qw) noexcept {
    float max = 0;
    float amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < group_max_eps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = static_cast<float>(-nmax) / max;
    if (rmse_type == 0) {
        for (int i = 0; i < n; ++i) {
            const int l = nearest_int(iscale * x[i]);
            L[i] = static_cast<std::int8_t>(nmax + clamp_int(l, -nmax, nmax - 1));
        }
        return 1 / iscale;
    }
    bool return_early = false;
    if (rmse_type < 0) {
        rmse_type = -rmse_type;
        return_early = true;
    }
    auto weight = [&](int i) -> float {
        if (qw) return qw[i];
        switch (rmse_type) {
            case 1: return x[i] * x[i];
            case 2: return 1.f;
            case 3: return std::fabs(x[i]);
            default: return std::sqrt(std::fabs(x[i]));
        }
    };
    float sumlx = 0;
    float suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<std::int8_t>(l + nmax);
        const float w = weight(i);
        const auto fl = static_cast<float>(l);
        sumlx += mul(w * x[i], fl);
        suml2 += mul(w * fl, fl);
    }
    float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
    if (return_early) return suml2 > 0 ? 0.5f * (scale + 1 / iscale) : 1 / iscale;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(static_cast<float>(nmax) + mul(0.1f, static_cast<float>(is))) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = weight(i);
            const auto fl = static_cast<float>(l);
            sumlx += mul(w * x[i], fl);
            suml2 += mul(w * fl, fl);
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                const int l = nearest_int(iscale * x[i]);
                L[i] = static_cast<std::int8_t>(nmax + clamp_int(l, -nmax, nmax - 1));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/// ggml `make_q3_quants` (Q3_K reference): grid [-nmax, nmax-1], optional coordinate descent
/// on x^2-weighted error. L receives codes + nmax.
inline float make_q3_quants(int n, int nmax, const float* x, std::int8_t* L, bool do_rmse) noexcept {
    float max = 0;
    float amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < group_max_eps) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    const float iscale = static_cast<float>(-nmax) / max;
    if (do_rmse) {
        float sumlx = 0;
        float suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            L[i] = static_cast<std::int8_t>(l);
            const float w = x[i] * x[i];
            const auto fl = static_cast<float>(l);
            sumlx += mul(w * x[i], fl);
            suml2 += mul(w * fl, fl);
        }
        for (int itry = 0; itry < 5; ++itry) {
            int n_changed = 0;
            for (int i = 0; i < n; ++i) {
                const float w = x[i] * x[i];
                const auto li = static_cast<float>(L[i]);
                float slx = sumlx - mul(w * x[i], li);
                if (slx > 0) {
                    float sl2 = suml2 - mul(w * li, li);
                    int new_l = nearest_int(x[i] * sl2 / slx);
                    new_l = clamp_int(new_l, -nmax, nmax - 1);
                    if (new_l != L[i]) {
                        const auto fn = static_cast<float>(new_l);
                        slx += mul(w * x[i], fn);
                        sl2 += mul(w * fn, fn);
                        if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                            L[i] = static_cast<std::int8_t>(new_l);
                            sumlx = slx;
                            suml2 = sl2;
                            ++n_changed;
                        }
                    }
                }
            }
            if (!n_changed) break;
        }
        for (int i = 0; i < n; ++i) L[i] = static_cast<std::int8_t>(L[i] + nmax);
        return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
    }
    for (int i = 0; i < n; ++i) {
        const int l = clamp_int(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = static_cast<std::int8_t>(l + nmax);
    }
    return 1 / iscale;
}

/// ggml `make_qkx2_quants` (weights required) and `make_qkx3_quants` (weights, or x^2 when
/// null; `max <= min` instead of `==`): asymmetric grid [0, nmax] with a min, searching
/// nstep+1 scales. Writes -min to *the_min and returns the scale.
template <bool Qkx3>
inline float make_qkx_quants(int n, int nmax, const float* x, const float* weights, std::uint8_t* L,
                             float* the_min, std::uint8_t* Laux, float rmin, float rdelta,
                             int nstep, bool use_mad) noexcept {
    auto weight = [&](int i) -> float {
        if constexpr (Qkx3) {
            if (!weights) return x[i] * x[i];
        }
        return weights[i];
    };
    float min = x[0];
    float max = x[0];
    float sum_w = weight(0);
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weight(i);
        sum_w += w;
        sum_x += mul(w, x[i]);
    }
    if (min > 0) min = 0;
    if (Qkx3 ? (max <= min) : (max == min)) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = static_cast<float>(nmax) / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = static_cast<std::uint8_t>(clamp_int(l, 0, nmax));
        float diff = mul(scale, static_cast<float>(L[i])) + min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        best_error += mul(weight(i), diff);
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + mul(rdelta, static_cast<float>(is)) + static_cast<float>(nmax)) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = static_cast<std::uint8_t>(l);
            const float w = weight(i);
            const auto fl = static_cast<float>(l);
            sum_l += mul(w, fl);
            sum_l2 += mul(w * fl, fl);
            sum_xl += mul(w * fl, x[i]);
        }
        const float D = mul(sum_w, sum_l2) - mul(sum_l, sum_l);
        if (D > 0) {
            float this_scale = (mul(sum_w, sum_xl) - mul(sum_x, sum_l)) / D;
            float this_min = (mul(sum_l2, sum_x) - mul(sum_l, sum_xl)) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = mul(this_scale, static_cast<float>(Laux[i])) + this_min - x[i];
                diff = use_mad ? std::fabs(diff) : diff * diff;
                cur_error += mul(weight(i), diff);
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

/// ggml `make_qp_quants` as of c392e509: positive-only grid [0, nmax] for the super-block scales of the
/// importance-weighted K-quants, with a 9-step search and coordinate descent.
inline float make_qp_quants(int n, int nmax, const float* x, std::uint8_t* L,
                            const float* quant_weights) noexcept {
    float max = 0;
    for (int i = 0; i < n; ++i) max = max > x[i] ? max : x[i];  // MAX(max, x[i])
    if (max == 0) {  // c392e509 tests `!max` here (newer ggml: GROUP_MAX_EPS)
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = static_cast<float>(nmax) / max;
    for (int i = 0; i < n; ++i) L[i] = static_cast<std::uint8_t>(nearest_int(iscale * x[i]));
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - mul(scale, static_cast<float>(L[i]));
        best_mse += mul(quant_weights[i] * diff, diff);
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (mul(0.1f, static_cast<float>(is)) + static_cast<float>(nmax)) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            const float diff = x[i] - mul(scale_is, static_cast<float>(l));
            mse += mul(quant_weights[i] * diff, diff);
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0;
    float suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = static_cast<std::uint8_t>(l);
        const float w = quant_weights[i];
        const auto fl = static_cast<float>(l);  // the int, not the narrowed L[i], as in ggml
        sumlx += mul(w * x[i], fl);
        suml2 += mul(w * fl, fl);
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = quant_weights[i];
            const auto li = static_cast<float>(L[i]);
            float slx = sumlx - mul(w * x[i], li);
            float sl2 = suml2 - mul(w * li, li);
            if (slx > 0 && sl2 > 0) {
                int new_l = nearest_int(x[i] * sl2 / slx);
                new_l = new_l < nmax ? new_l : nmax;
                if (new_l != L[i]) {
                    const auto fn = static_cast<float>(new_l);
                    slx += mul(w * x[i], fn);
                    sl2 += mul(w * fn, fn);
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<std::uint8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    // Unguarded in c392e509: all-zero weights (x^2 underflow) give 0/0 = NaN, stored as an fp16
    // NaN scale (golden q*_K tiny_n256 imatrix cases). Newer ggml returns 0 here.
    return sumlx / suml2;
}

/// ggml `get_scale_min_k4`: the j-th 6-bit (scale, min) pair of a Q4_K/Q5_K scales[12].
inline void get_scale_min_k4(int j, const std::uint8_t* q, std::uint8_t& d, std::uint8_t& m) noexcept {
    if (j < 4) {
        d = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        d = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        m = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
    }
}

/// The inverse: store 6-bit pair (ls, lm) for sub-block j into a Q4_K/Q5_K scales[12]
/// that was zeroed for j < 4 before (ggml writes j < 4 first, then ORs the high bits in).
inline void set_scale_min_k4(int j, std::uint8_t ls, std::uint8_t lm, std::uint8_t* q) noexcept {
    if (j < 4) {
        q[j] = ls;
        q[j + 4] = lm;
    } else {
        q[j + 4] = static_cast<std::uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
        q[j - 4] = static_cast<std::uint8_t>(q[j - 4] | ((ls >> 4) << 6));
        q[j - 0] = static_cast<std::uint8_t>(q[j] | ((lm >> 4) << 6));
    }
}

}  // namespace qforge::gguf::detail
