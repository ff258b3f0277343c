// The minifloat kernels (simd/kernels/minifloat_kernels.ipp): the element encoders of the FP4
// and FP8 layouts (layout/nvfp4.hpp, layout/mxfp4.hpp, layout/fp8.hpp) over whole rows, as
// one table of function pointers instantiated for every ISA.
//
// Every entry gives the bytes of core/minifloat.hpp's scalar definitions on every ISA (the
// scalar instance walks the same 8-lane steps; tests/simd/test_minifloat_kernels.cpp checks
// each ISA against it and against core/minifloat.hpp). The caller looks the table up once per
// tensor (kernels_of<minifloat_kernels>, so QFORGE_FORCE_ISA reaches it) and calls it once per
// row. Kernels never allocate and never throw; callers validate shapes first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "qforge/core/dtype.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/minifloat.hpp"
#include "qforge/simd/no_contract.hpp"
#include "qforge/simd/family.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::simd {

/// The largest group e2m1_groups takes (MXFP4's 32).
inline constexpr std::size_t max_e2m1_group = 32;

/// How e2m1_groups forms the quotient of element i of group g.
enum class e2m1_op : std::uint8_t {
    divide,    ///< x_i / s[g] (NVFP4: x / (scale / global), IEEE division)
    multiply,  ///< x_i * s[g] (MXFP4: x * 2^(127 - e), exact)
};

struct minifloat_kernels {
    static constexpr std::string_view family_name = "minifloat";
    isa id = isa::scalar;

    /// amax[g] = max |x_i| over group g (gsize values, gsize % 16 == 0) of x[0..n), n % gsize
    /// == 0. The values are finite (callers refuse NaN and infinity first).
    void (*group_amax)(const float* x, std::size_t n, std::size_t gsize, float* amax) noexcept;

    /// codes[i] = float_to_e4m3(x[i]) (core/minifloat.hpp: RNE, saturating to +-448, NaN to
    /// 0x7F with its sign) for i < n, any n.
    void (*e4m3_encode)(const float* x, std::size_t n, std::uint8_t* codes) noexcept;

    /// The E2M1 codes of x[0..n) (n % 16 == 0, gsize % 16 == 0, gsize <= max_e2m1_group, n %
    /// gsize == 0): code_i = float_to_e2m1 of clamp(q_i, -6, 6) with q_i = x_i op s[g], except
    /// that a NaN quotient gives 0 or 8 by its sign bit (detail::e2m1_code_of of
    /// layout/detail/fp4_rows.hpp, which the FP4 layouts define their codes by), packed two a
    /// byte, the even element in the low nibble: packed[i / 2]. With `signal` and `error`
    /// (gsize floats each) it also adds, element i to lane i % gsize in increasing i, x_i^2 and
    /// (x_i - dq_i)^2 with dq_i = e2m1_to_float(code_i) * m[g], in float, never fused.
    void (*e2m1_groups)(const float* x, std::size_t n, std::size_t gsize, const float* s, e2m1_op op, const float* m,
                        std::uint8_t* packed, float* signal, float* error) noexcept;

    /// max |x_i| over x[0..n), any n (0 for n == 0); the values are finite.
    float (*abs_max)(const float* x, std::size_t n) noexcept;

    /// One FP8 row of n weights read straight from `src` in `type` (F32, F16, BF16): codes[i] =
    /// float_to_e4m3(round(x_i / m[i / bc], quotient)) for i < n (bc >= 1), round to the
    /// quotient dtype (F32: none; BF16, F16: RNE, as core/half.hpp rounds). With `snr` (8 doubles: signal partials 0-3, error partials 4-7) the element at
    /// offset t of its block adds x^2 and (x - e4m3_to_float(code) * m)^2 in double to partial
    /// t % 4, in increasing t, never fused (the same order on every ISA).
    void (*e4m3_row)(const std::byte* src, dtype type, std::size_t n, std::size_t bc, const float* m, dtype quotient,
                     std::uint8_t* codes, double* snr) noexcept;

    /// amax[j] = max(amax[j], max |x_i| over block j) for the blocks of bc >= 1 columns of the
    /// n values (the last block ragged) read straight from `src` in `type` (F32, F16, BF16);
    /// true when a value is NaN or infinite (amax is then unspecified: the caller goes back to
    /// to_f32 for the element's position). One pass, no float row stored.
    bool (*block_abs_max)(const std::byte* src, dtype type, std::size_t n, std::size_t bc, float* amax) noexcept;

    /// NVFP4's group scales (layout/nvfp4.hpp nvfp4_group_scale) for g < groups, any count:
    /// codes[g] = float_to_e4m3(clamp(global * round(amax[g] / 6, values), -448, 448)) (round
    /// to BF16 or F16 as core/half.hpp does, none for F32), a code that decodes to zero
    /// replaced by 0.125's, and mult[g] = e4m3_to_float(codes[g]) / global. The amaxes are
    /// finite and >= 0; `global` is > 0 (an infinite one goes through the definitions).
    void (*nvfp4_scales)(const float* amax, std::size_t groups, float global, dtype values, std::uint8_t* codes,
                         float* mult) noexcept;
};

}  // namespace qforge::simd

#define QFORGE_FAMILY_IPP "qforge/simd/kernels/minifloat_kernels.ipp"
#define QFORGE_FAMILY_TABLE minifloat_kernels
#include "qforge/simd/detail/instantiate.ipp"
#undef QFORGE_FAMILY_TABLE
#undef QFORGE_FAMILY_IPP
