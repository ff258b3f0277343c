// The output formats a converter writes, as one table over the layouts' own traits
// (layout/layout_traits.hpp `format_traits`): each layout header says which tensors a quantized
// linear becomes, which shapes its loaders cannot read, which scale dtype it uses when the user
// does not say, and which config it writes. This file lists the formats and asks them; it holds
// only the rules every format of one code kind shares (integer grids, E4M3 codes).
//
// Facts from docs/formats.md: GPTQ 2.1-2.3 (AutoGPTQ qlinear_cuda.py, vLLM gptq_marlin.py),
// AWQ 3 (AutoAWQ gemm.py), compressed-tensors 4.1 (compressed_tensors pack_quantized.py,
// vLLM compressed_tensors_wNa16.py), FP8 field-2026.md 1.1-1.2 (layout/fp8.hpp). The packing
// itself is the layout layer's job.
//
// A float layout (E4M3, E2M1) has its own quantizer: its traits say `codes` and the
// converter's quantization step (convert/detail/quantize_step.hpp) calls it.
//
// Adding an integer layout: its header (the layout_policy, a `<name>_format_traits` struct),
// its tests, one enumerator of output_format and one entry of `format_table` below.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "qforge/convert/output_format.hpp"
#include "qforge/convert/rule.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/ct_int8.hpp"
#include "qforge/layout/fp8.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/layout/mxfp4.hpp"
#include "qforge/layout/nvfp4.hpp"

namespace qforge {

/// One row of the format table: an output_format and the traits of the layout that writes it.
template <output_format F, format_traits Traits>
struct format_entry {
    static constexpr output_format id = F;
    using traits = Traits;
};

/// THE list of output formats (in output_format's order; parse_format tries them in this order).
using format_table = std::tuple<format_entry<output_format::gptq, gptq_format_traits<gptq_format::v1>>,
                                format_entry<output_format::gptq_v2, gptq_format_traits<gptq_format::v2>>,
                                format_entry<output_format::awq, awq_format_traits>,
                                format_entry<output_format::compressed_tensors, ct_format_traits>,
                                format_entry<output_format::compressed_tensors_fp8, fp8_format_traits<fp8_flavour::compressed_tensors>>,
                                format_entry<output_format::fp8, fp8_format_traits<fp8_flavour::native>>,
                                format_entry<output_format::compressed_tensors_w8a8, ct_int8_format_traits>,
                                format_entry<output_format::compressed_tensors_nvfp4, nvfp4_format_traits>,
                                format_entry<output_format::compressed_tensors_mxfp4, mxfp4_format_traits>,
                                format_entry<output_format::compressed_tensors_nvfp4_w4a4, nvfp4_w4a4_format_traits>>;

/// Calls `fn(traits)` (a value of the format's traits type) for format `f`; every call of fn
/// must return the same type. An output_format outside the table is an unsupported_error.
template <class Fn, std::size_t I = 0>
decltype(auto) visit_format(output_format f, Fn&& fn) {
    using entry = std::tuple_element_t<I, format_table>;
    if constexpr (I + 1 < std::tuple_size_v<format_table>) {
        if (f == entry::id) return fn(typename entry::traits{});
        return visit_format<Fn, I + 1>(f, std::forward<Fn>(fn));
    } else {
        if (f != entry::id) fail<unsupported_error>({}, {}, "unknown format");
        return fn(typename entry::traits{});
    }
}

/// Calls `fn(output_format)` for every format of the table, in its order.
template <class Fn>
void for_each_format(Fn&& fn) {
    std::apply([&](auto... entry) { (fn(decltype(entry)::id), ...); }, format_table{});
}

constexpr bool is_float_format(output_format f) noexcept {
    bool e4m3 = false;
    std::apply([&](auto... entry) { ((e4m3 = e4m3 || (decltype(entry)::id == f && decltype(entry)::traits::codes == code_kind::e4m3)), ...); },
               format_table{});
    return e4m3;
}

/// Whether format `f` has its own quantizer instead of an integer grid (E4M3 or E2M1 codes):
/// no GPTQ solver, and its weights are read whole.
QFORGE_DECL bool has_own_quantizer(output_format f);

/// The name of the float codes format `f` holds ("E4M3", "E2M1"), for refusals that tell a user
/// why integer codes cannot move into it; empty for an integer format.
QFORGE_DECL std::string_view float_codes_name(output_format f);

/// Whether format `f` gives the members of a fused group (q/k/v, gate/up, an expert's w1/w3)
/// one global scale, computed from the group's amax before any member is quantized (NVFP4).
QFORGE_DECL bool shares_fused_global_scale(output_format f);

/// Whether format `f` quantizes activations under a calibrated per-layer scale, so a
/// conversion needs each quantized layer's input amax (NVFP4 W4A4: convert/activation_amax.hpp).
QFORGE_DECL bool needs_input_amax(output_format f);

/// The group size an E2M1 format fixes (NVFP4 16, MXFP4 32), or nullopt for formats that take
/// the scheme's.
QFORGE_DECL std::optional<std::int64_t> fixed_group_size(output_format f);

/// Whether format `f`'s tensors carry g_idx, so act-order may regroup columns (GPTQ).
QFORGE_DECL bool carries_g_idx(output_format f);

/// Whether format `f`'s config states one scheme for every quantized layer (AWQ).
QFORGE_DECL bool states_one_scheme(output_format f);

/// What `minmax` with an asymmetric scheme means in format `f` (quant/scale_policy.hpp).
QFORGE_DECL scale_policy asymmetric_minmax_policy(output_format f);

namespace detail {

/// The quant policy for a scheme, or nullopt when the combination has none.
QFORGE_DECL std::optional<scale_policy> policy_for(const quant_spec& s, output_format f) noexcept;

}  // namespace detail

QFORGE_DECL std::optional<output_format> parse_format(std::string_view s) noexcept;

/// The scale dtype a format uses when the scheme leaves it open (each format's traits say):
/// GPTQ and AWQ loaders expect fp16 (AutoGPTQ/GPTQModel/AutoAWQ write .half());
/// compressed-tensors keeps the checkpoint's dtype (nothing is cast), which an F32 checkpoint
/// cannot satisfy with 16-bit scales. compressed-tensors FP8 keeps the model dtype too (F32
/// included), the native FP8 layout F32 (DeepSeek's weight_scale_inv).
QFORGE_DECL dtype default_scale_dtype(output_format f, dtype checkpoint) noexcept;

/// The FP8 layout options of a float format for scheme `s` (scale dtype resolved); `values` is
/// the dtype of the weight's values, which the quotient x / scale is rounded to first.
QFORGE_DECL fp8_options fp8_options_for(output_format f, const quant_spec& s, dtype values) noexcept;

/// The request a format builds its layout (or config) from, for scheme `s` (scale dtype
/// resolved) of a weight whose model dtype is `checkpoint` and whose values are `values`.
QFORGE_DECL layout_request layout_request_for(const quant_spec& s, dtype checkpoint, dtype values, bool desc_act = false);

namespace detail {

/// The rules every E4M3 format shares: 8 bits, symmetric, amax / 448 scales.
QFORGE_DECL std::optional<std::string> e4m3_refusal(const quant_spec& s);

/// The rules every E2M1 format shares: 4 bits, symmetric, amax-derived scales, the format's
/// own group size and scale dtype.
template <class T>
std::optional<std::string> e2m1_refusal(const quant_spec& s) {
    const std::string f(T::element);
    if (s.bits != 4) return f + " weights are 4 bits (E2M1), not " + std::to_string(s.bits);
    if (!s.symmetric) return f + " weights are symmetric (no zero point)";
    if (s.scale != scale_method::minmax)
        return f + " scales follow the group's amax (minmax), not " + std::string(scale_method_name(s.scale));
    if (s.group_size != T::group)
        return f + " groups are " + std::to_string(T::group) + " columns, not " + std::to_string(s.group_size);
    if (s.scale_dtype && *s.scale_dtype != T::scale_dtype)
        return f + " scales are " + std::string(dtype_name(T::scale_dtype)) + ", not " + std::string(dtype_name(*s.scale_dtype));
    return std::nullopt;
}

/// The rules every integer grid shares: 2..8 bits, power-of-two groups within K, 16-bit scales.
QFORGE_DECL std::optional<std::string> integer_grid_refusal(std::int64_t cols, const quant_spec& s);

}  // namespace detail

/// Why `format` cannot hold a [rows x cols] weight quantized with `s` (s.scale_dtype
/// resolved), or nullopt when it can. `checkpoint` is the source weight's dtype.
QFORGE_DECL std::optional<std::string> format_refusal(output_format f, std::int64_t rows, std::int64_t cols,
                                                      const quant_spec& s, dtype checkpoint);

/// Runs `fn(layout)` with the integer layout object of `r`'s format (layout/layout_traits.hpp
/// layout_request: bits, scale dtype, checkpoint dtype, act-order). A float format has none.
template <class F>
decltype(auto) with_layout(output_format f, const layout_request& r, F&& fn) {
    using result = decltype(fn(std::declval<const compressed_tensors_layout<4>&>()));
    return visit_format(f, [&](auto t) -> result {
        using T = decltype(t);
        if constexpr (T::codes == code_kind::integer) return T::with_layout(r, fn);
        else fail<unsupported_error>({}, {}, std::string(T::name) + " has no integer layout");  // E4M3 / E2M1: own quantizer
    });
}

/// Runs `fn(layout)` with the layout object of `f` for `bits` (scales stored as `scale_dtype`,
/// compressed-tensors scales in the `checkpoint` dtype). The layouts live in qforge/layout/.
template <class F>
decltype(auto) with_layout(output_format f, int bits, dtype scale_dtype, dtype checkpoint, F&& fn) {
    return with_layout(f, layout_request{bits, scale_dtype, checkpoint}, std::forward<F>(fn));
}

/// The tensors one quantized linear `<module>.weight` [rows x cols] becomes.
QFORGE_DECL std::vector<planned_tensor> format_tensors(output_format f, std::string_view module, std::int64_t rows,
                                                       std::int64_t cols, const quant_spec& s, dtype checkpoint);

/// The `quantization_config` of format `f` for the model's `linears`, built from `main` (the
/// first quantized layer's scheme, scale dtype resolved; formats that state one scheme take
/// the one most layers use) and the model dtype `checkpoint`.
QFORGE_DECL json format_config(output_format f, std::span<const linear_entry> linears, const layout_request& main);

/// The files format `f` writes beside config.json (GPTQ's quantize_config.json), or none.
QFORGE_DECL std::vector<side_file> format_side_files(output_format f, std::span<const linear_entry> linears,
                                                     const layout_request& main);

// ---- what a repack (convert/repack*.hpp) asks: codes moved, not recomputed ----------------
// Each rule below is a member of the format's traits where the format has one, with the
// default of a format that has none; the repack itself never names a format.

/// Why format `f` cannot hold the integer codes of `q` exactly as they are (bits, zero points,
/// act-order), or nullopt; shapes are format_refusal's.
QFORGE_DECL std::optional<std::string> format_codes_refusal(output_format f, const quantized_tensor& q);

/// The tensors of the prepared tensor `q` in format `f`: the format's own pack(q, prefix, r)
/// where it has one (compressed-tensors adds act-order's weight_g_idx), else its layout's.
QFORGE_DECL std::vector<owned_tensor> format_pack(output_format f, const quantized_tensor& q, std::string_view prefix,
                                                  const layout_request& r);

/// The scale dtype a repack into `f` writes when the user leaves it open: the format's
/// repack_scale_dtype(model) where it has one, else F16 (what GPTQ and AWQ loaders expect).
QFORGE_DECL dtype repack_scale_dtype(output_format f, dtype model) noexcept;

/// The g_idx tensor suffix every module must carry once one module is act-order, for a
/// format whose config states one actorder for all (compressed-tensors), else nullopt.
QFORGE_DECL std::optional<std::string_view> act_order_g_idx_suffix(output_format f) noexcept;

/// Where format `f` keeps each row's codes as one stream along K (its traits' packed_codes),
/// k_stream::none for a format that does not: the word-level repack moves words between two
/// formats with opposite streams.
QFORGE_DECL k_stream format_k_stream(output_format f) noexcept;

/// What format `f` subtracts from a zero point before storing it (its traits'
/// stored_zero_offset: GPTQ v1 stores zero - 1), 0 for a format that stores the zero itself.
QFORGE_DECL int format_stored_zero_offset(output_format f) noexcept;

/// The width a requantization into `f` uses for `bits`-bit codes (the format's nearest_bits).
QFORGE_DECL int requantize_bits(output_format f, int bits) noexcept;

/// Whether a requantization into `f` of a `symmetric` tensor is symmetric: formats may force
/// it (requantizes_symmetric: GPTQ v1) or forbid it (stores_zero_points: AWQ).
QFORGE_DECL bool requantize_symmetric(output_format f, bool symmetric) noexcept;

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL std::string_view format_name(output_format f) noexcept {
    std::string_view name = "?";
    for_each_format([&](output_format g) {
        if (g == f) name = visit_format(g, [](auto t) { return std::string_view(decltype(t)::name); });
    });
    return name;
}

QFORGE_DECL bool has_own_quantizer(output_format f) {
    return visit_format(f, [](auto t) { return decltype(t)::codes != code_kind::integer; });
}

QFORGE_DECL std::string_view float_codes_name(output_format f) {
    return visit_format(f, [](auto t) -> std::string_view {
        if constexpr (decltype(t)::codes == code_kind::e4m3) return "E4M3";
        else if constexpr (decltype(t)::codes == code_kind::e2m1) return "E2M1";
        else return {};
    });
}

QFORGE_DECL bool shares_fused_global_scale(output_format f) {
    return visit_format(f, [](auto t) {
        if constexpr (decltype(t)::codes == code_kind::e2m1) return decltype(t)::fused_global_scale;
        else return false;
    });
}

QFORGE_DECL bool needs_input_amax(output_format f) {
    return visit_format(f, [](auto t) {
        if constexpr (decltype(t)::codes == code_kind::e2m1) return decltype(t)::calibrated_inputs;
        else return false;
    });
}

QFORGE_DECL std::optional<std::int64_t> fixed_group_size(output_format f) {
    return visit_format(f, [](auto t) -> std::optional<std::int64_t> {
        if constexpr (decltype(t)::codes == code_kind::e2m1) return decltype(t)::group;
        else return std::nullopt;
    });
}

QFORGE_DECL bool carries_g_idx(output_format f) {
    return visit_format(f, [](auto t) { return decltype(t)::carries_g_idx; });
}

QFORGE_DECL bool states_one_scheme(output_format f) {
    return visit_format(f, [](auto t) { return decltype(t)::one_scheme; });
}

QFORGE_DECL scale_policy asymmetric_minmax_policy(output_format f) {
    return visit_format(f, [](auto t) { return decltype(t)::asymmetric_minmax; });
}

namespace detail {

QFORGE_DECL std::optional<scale_policy> policy_for(const quant_spec& s, output_format f) noexcept {
    switch (s.scale) {
        case scale_method::minmax:
            if (s.symmetric) return scale_policy::gptq_absmax;
            return asymmetric_minmax_policy(f);  // the format's own asymmetric rule (AWQ: awq_minmax)
        case scale_method::absmax: return s.symmetric ? std::optional(scale_policy::absmax) : std::nullopt;
        case scale_method::search: return s.symmetric ? std::optional(scale_policy::seed_search) : std::nullopt;
        case scale_method::mse: return scale_policy::mse;
        case scale_method::lsq: return scale_policy::custom;
        case scale_method::fixed: return s.symmetric ? std::optional(scale_policy::seed_fixed) : std::nullopt;
    }
    return std::nullopt;
}

}  // namespace detail

QFORGE_DECL std::optional<output_format> parse_format(std::string_view s) noexcept {
    std::optional<output_format> found, alias;
    for_each_format([&](output_format f) {
        visit_format(f, [&](auto t) {
            if (!found && decltype(t)::name == s) found = f;
            for (std::string_view a : decltype(t)::aliases)
                if (!alias && a == s) alias = f;
        });
    });
    return found ? found : alias;
}

QFORGE_DECL dtype default_scale_dtype(output_format f, dtype checkpoint) noexcept {
    return visit_format(f, [&](auto t) { return decltype(t)::default_scale_dtype(checkpoint); });
}

QFORGE_DECL fp8_options fp8_options_for(output_format f, const quant_spec& s, dtype values) noexcept {
    return visit_format(f, [&](auto t) -> fp8_options {
        using T = decltype(t);
        if constexpr (T::codes == code_kind::e4m3) return T::options(s.group_size, s.scale_dtype, values);
        else return {fp8_flavour::compressed_tensors, s.group_size, s.scale_dtype.value_or(dtype::F32), values};
    });
}

QFORGE_DECL layout_request layout_request_for(const quant_spec& s, dtype checkpoint, dtype values, bool desc_act) {
    return {s.bits, s.scale_dtype.value_or(dtype::F16), checkpoint, s.group_size, values, desc_act};
}

namespace detail {

QFORGE_DECL std::optional<std::string> e4m3_refusal(const quant_spec& s) {
    if (s.bits != 8) return "FP8 weights are 8 bits (E4M3), not " + std::to_string(s.bits);
    if (!s.symmetric) return "FP8 weights are symmetric (no zero point)";
    if (s.scale != scale_method::minmax)
        return std::string("FP8 scales are amax / 448 (minmax), not ") + std::string(scale_method_name(s.scale));
    return std::nullopt;
}

QFORGE_DECL std::optional<std::string> integer_grid_refusal(std::int64_t cols, const quant_spec& s) {
    if (s.bits < 2 || s.bits > 8) return "bits must be 2..8, got " + std::to_string(s.bits);
    if (s.group_size == 0 || s.group_size < -1 || (s.group_size > 0 && (s.group_size & (s.group_size - 1)) != 0))
        return "group size must be a power of two or -1 (per channel), not " + std::to_string(s.group_size);
    const std::int64_t g = s.group_for(cols);
    if (g > cols)
        return "group size " + std::to_string(g) + " is larger than the " + std::to_string(cols) + " input columns";
    if (!s.scale_dtype || (*s.scale_dtype != dtype::F16 && *s.scale_dtype != dtype::BF16))
        return "scale dtype must be F16 or BF16";
    return std::nullopt;
}

}  // namespace detail

QFORGE_DECL std::optional<std::string> format_refusal(output_format f, std::int64_t rows, std::int64_t cols,
                                                      const quant_spec& s, dtype checkpoint) {
    return visit_format(f, [&](auto t) -> std::optional<std::string> {
        using T = decltype(t);
        std::optional<std::string> why;
        if constexpr (T::codes == code_kind::e2m1) why = detail::e2m1_refusal<T>(s);
        else why = T::codes == code_kind::e4m3 ? detail::e4m3_refusal(s) : detail::integer_grid_refusal(cols, s);
        if (why) return why;
        return T::refusal(rows, cols, layout_scheme{s.bits, s.group_size, s.symmetric, s.scale_dtype, checkpoint});
    });
}

QFORGE_DECL std::vector<planned_tensor> format_tensors(output_format f, std::string_view module, std::int64_t rows,
                                                       std::int64_t cols, const quant_spec& s, dtype checkpoint) {
    quant_spec resolved = s;
    resolved.scale_dtype = s.scale_dtype.value_or(default_scale_dtype(f, checkpoint));
    const layout_request r = layout_request_for(resolved, checkpoint, checkpoint);
    const auto specs = visit_format(f, [&](auto t) {
        using T = decltype(t);
        if constexpr (T::codes == code_kind::e4m3) return fp8_layout(T::options(s.group_size, resolved.scale_dtype, checkpoint)).specs(rows, cols);
        else if constexpr (T::codes == code_kind::e2m1) return T::specs(rows, cols);
        else return T::with_layout(r, [&](const auto& layout) { return layout.specs(rows, cols, s.group_size, s.symmetric); });
    });
    std::vector<planned_tensor> out;
    for (const tensor_spec& t : specs) out.push_back({std::string(module) + t.suffix, t.type, t.shape});
    return out;
}

QFORGE_DECL json format_config(output_format f, std::span<const linear_entry> linears, const layout_request& main) {
    return visit_format(f, [&](auto t) { return decltype(t)::config(linears, main); });
}

QFORGE_DECL std::vector<side_file> format_side_files(output_format f, std::span<const linear_entry> linears,
                                                     const layout_request& main) {
    return visit_format(f, [&](auto t) { return decltype(t)::side_files(linears, main); });
}

QFORGE_DECL std::optional<std::string> format_codes_refusal(output_format f, const quantized_tensor& q) {
    return visit_format(f, [&](auto t) -> std::optional<std::string> {
        using T = decltype(t);
        if constexpr (T::codes != code_kind::integer)
            return std::string(T::name) + " holds " + std::string(float_codes_name(f)) + " codes, which integer codes of " + q.name +
                   " do not map onto bit for bit; convert the float checkpoint instead";
        else if constexpr (requires { T::repack_refusal(q); }) return T::repack_refusal(q);
        else return std::nullopt;
    });
}

QFORGE_DECL std::vector<owned_tensor> format_pack(output_format f, const quantized_tensor& q, std::string_view prefix,
                                                  const layout_request& r) {
    return visit_format(f, [&](auto t) -> std::vector<owned_tensor> {
        using T = decltype(t);
        if constexpr (T::codes != code_kind::integer)
            fail<unsupported_error>({}, std::string(prefix), std::string(T::name) + " holds " + std::string(float_codes_name(f)) +
                                                                 " codes: integer codes do not repack into it");
        else if constexpr (requires { T::pack(q, prefix, r); }) return T::pack(q, prefix, r);
        else return T::with_layout(r, [&](const auto& layout) { return layout.pack(q, prefix); });
    });
}

QFORGE_DECL dtype repack_scale_dtype(output_format f, dtype model) noexcept {
    return visit_format(f, [&](auto t) -> dtype {
        if constexpr (requires { decltype(t)::repack_scale_dtype(model); }) return decltype(t)::repack_scale_dtype(model);
        else return dtype::F16;
    });
}

QFORGE_DECL std::optional<std::string_view> act_order_g_idx_suffix(output_format f) noexcept {
    return visit_format(f, [&](auto t) -> std::optional<std::string_view> {
        if constexpr (requires { decltype(t)::act_order_g_idx; }) return decltype(t)::act_order_g_idx;
        else return std::nullopt;
    });
}

QFORGE_DECL k_stream format_k_stream(output_format f) noexcept {
    return visit_format(f, [&](auto t) -> k_stream {
        if constexpr (requires { decltype(t)::packed_codes; }) return decltype(t)::packed_codes;
        else return k_stream::none;
    });
}

QFORGE_DECL int format_stored_zero_offset(output_format f) noexcept {
    return visit_format(f, [&](auto t) -> int {
        if constexpr (requires { decltype(t)::stored_zero_offset; }) return decltype(t)::stored_zero_offset;
        else return 0;
    });
}

QFORGE_DECL int requantize_bits(output_format f, int bits) noexcept {
    return visit_format(f, [&](auto t) -> int {
        if constexpr (requires { decltype(t)::nearest_bits(bits); }) return decltype(t)::nearest_bits(bits);
        else return bits;
    });
}

QFORGE_DECL bool requantize_symmetric(output_format f, bool symmetric) noexcept {
    return visit_format(f, [&](auto t) -> bool {
        using T = decltype(t);
        if constexpr (requires { T::stores_zero_points; }) return false;
        else if constexpr (requires { T::requantizes_symmetric; }) return symmetric || T::requantizes_symmetric;
        else return symmetric;
    });
}

}  // namespace qforge
#endif
