// What every on-disk layout policy provides, and the small helpers they share.
//
// A layout turns one `quantized_tensor` (codes [N][K], scales, zeros in code space) into the
// exact named tensors a loader expects, and turns those tensors back into the same
// quantized_tensor. It knows its tensor names and shapes as a function of (N, K, bits, group),
// refuses at compile time bit widths its format cannot hold, refuses at run time shapes and
// settings its loaders cannot read (every message names the tensor), and writes its part of
// config.json from the list of linears (see layout/checkpoint_rules.hpp).
//
//   qforge::gptq_layout<4> gptq({.format = qforge::gptq_format::v1});
//   gptq.check(q);                                   // throws before anything is written
//   auto tensors = gptq.pack(q, "model.layers.0.mlp.down_proj");
//   auto back = gptq.unpack(views, "model.layers.0.mlp.down_proj", {.group_size = 128});
#pragma once

#include <concepts>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/core/zeroed_buffer.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/detail/pack_bits.hpp"
#include "qforge/quant/quantized_tensor.hpp"
#include "qforge/quant/scale_policy.hpp"
#include "qforge/simd/family.hpp"

namespace qforge {

/// One tensor a layout writes per linear: `<prefix><suffix>`, its dtype and shape.
struct tensor_spec {
    std::string suffix;  ///< e.g. ".qweight"
    dtype type = dtype::I32;
    shape_t shape;
};

/// What a reader must know about a layer beyond its tensors (it comes from the config).
struct layer_params {
    std::int64_t group_size = 128;  ///< -1 or K: one group per row (per channel)
    bool symmetric = true;
};

/// Who asks a layout's reader for a linear, and so how its refusals are worded. `unpack`: the
/// layout reading its own output back (layout_unpacks below: the layout's shape rules, every
/// tensor it writes required). `checkpoint`: a checkpoint on disk as its own writers make it
/// (the repack path: optional tensors optional, the writers' quirks named).
enum class read_mode { unpack, checkpoint };

/// Whether a layout's checks scan every code and zero point for one out of range (and a
/// symmetric weight's zero points for one off the midpoint). `scan`: values from a caller.
/// `made_in_range`: values quantize_packed has just made, each clamped as it was made, so the
/// scans could not fail; they read every code once more and branched on every zero point
/// (4096 x 11008 RTN + GPTQ pack: 8% of the time). Every other check runs either way.
enum class value_check { scan, made_in_range };

/// The layout concept, in named parts so that a type which is not a layout fails with the part
/// it lacks ("... the concept 'layout_packs<L>' was not satisfied") rather than deep inside a
/// template. `L::bits` is a compile-time constant the layout static_asserts on.
template <class L>
concept layout_names_itself = requires {
    { L::format_name } -> std::convertible_to<std::string_view>;
    { L::bits } -> std::convertible_to<int>;
};

/// specs(n, k, group, symmetric): the tensors of one [n x k] linear, before anything is packed.
template <class L>
concept layout_plans_tensors = requires(const L& l, std::int64_t n) {
    { l.specs(n, n, n, true) } -> std::same_as<std::vector<tensor_spec>>;
};

/// check(q) refuses what the format cannot hold; pack(q, prefix) writes the tensors.
template <class L>
concept layout_packs = requires(const L& l, const quantized_tensor& q, std::string_view prefix) {
    { l.check(q) } -> std::same_as<void>;
    { l.pack(q, prefix) } -> std::same_as<std::vector<owned_tensor>>;
};

/// unpack(views, prefix, params) reads one linear back into the same quantized_tensor.
template <class L>
concept layout_unpacks = requires(const L& l, std::span<const tensor_view> views, std::string_view prefix,
                                  layer_params params) {
    { l.unpack(views, prefix, params) } -> std::same_as<quantized_tensor>;
};

/// config(linears) writes the format's `quantization_config`.
template <class L>
concept layout_writes_config = requires(const L& l, std::span<const linear_entry> linears) {
    { l.config(linears) } -> std::same_as<json>;
};

template <class L>
concept layout_policy = layout_names_itself<L> && layout_plans_tensors<L> && layout_packs<L> && layout_unpacks<L> &&
                        layout_writes_config<L>;

// ---- what an output format tells the converter (convert/format.hpp lists the formats) -------
//
// Each layout header ends with the traits of the formats it writes: their name, their code
// kind, their default scale dtype, the shapes and settings their loaders cannot read (worded
// for the plan, before anything is quantized), the layout object for a bit width known only
// at run time, their config.json fragment and their side files. The converter asks these and
// never names a format; a new integer layout is its header, its tests and one entry in the
// table of convert/format.hpp.

/// What a format stores per weight: integer codes on a grid (quantized_tensor), E4M3 codes, or
/// E2M1 (FP4) codes under E4M3 / E8M0 group scales (layout/nvfp4.hpp, layout/mxfp4.hpp). The
/// float kinds have their own quantizer and no integer grid.
enum class code_kind { integer, e4m3, e2m1 };

/// Where an integer layout keeps each output row's codes when they form one dense LSB-first
/// bitstream along K (formats.md 2.2 and 4.3, "b=3 dense == GPTQ 3-bit packing"): down column n
/// of a [K*b/32, N] tensor (GPTQ qweight) or along row n of an [N, K*b/32] tensor
/// (compressed-tensors weight_packed). When K fills whole words the two tensors are transposes
/// of each other, so a repack between the two moves words, never codes
/// (convert/repack_transpose.hpp). A format's traits say it as `packed_codes`; none: neither.
enum class k_stream { none, down_columns, along_rows };

/// The scheme of one linear as a format's refusal sees it: the plan's quant_spec without the
/// scale rule, and the weight's model dtype (`checkpoint`).
struct layout_scheme {
    int bits = 4;
    std::int64_t group_size = 128;   ///< -1: per channel
    bool symmetric = true;
    std::optional<dtype> scale_dtype;  ///< resolved by the plan (the format's default when unset)
    dtype checkpoint = dtype::BF16;
};

/// What the converter knows of a weight's fused group when an E2M1 layout quantizes it
/// (convert/fp4_global.hpp, convert/activation_amax.hpp): the members a loader fuses (q/k/v,
/// gate/up, an expert's w1/w3) must share their global scales.
struct fp4_group {
    std::optional<float> weight_amax;  ///< max |w| over the group's weights; nullopt: the weight's own
    std::optional<float> input_amax;   ///< max |x| of the group's calibrated inputs (NVFP4 W4A4)
};

/// What a format needs to build its layout object (or config) for a bit width known at run time.
struct layout_request {
    int bits = 4;
    dtype scale_dtype = dtype::F16;
    dtype checkpoint = dtype::BF16;  ///< the model dtype (compressed-tensors scales follow it)
    std::int64_t group_size = -1;    ///< the main scheme's (float formats' block size)
    dtype values = dtype::F32;       ///< the dtype of the weight's values (float formats round x / scale to it)
    bool desc_act = false;           ///< columns regrouped by act-order (formats that carry g_idx)
    int packing = 0;                 ///< the format's word-packing variant, 0 its default (compressed-tensors: a ct_packing)
};

/// What the serving check (convert/serving_check.hpp) tells a format's traits about a plan,
/// so each format words what its loaders will do differently from what is written: its
/// `vllm_scheme_warnings` (said first) and `vllm_layer_warnings` (said after the model-wide
/// ones) append to `warnings`.
struct serving_facts {
    int bits = 4;                              ///< the first quantized layer's
    bool asymmetric = false;                   ///< some quantized layer is
    bool lm_head = false;                      ///< lm_head is quantized
    bool mixed_schemes = false;                ///< quantized layers differ in bits, group or symmetry
    dtype model = dtype::BF16;                 ///< the model dtype
    dtype scales = dtype::F16;                 ///< the scale dtype written
    std::span<const linear_entry> linears;     ///< what the config describes
    bool has_config = false;                   ///< the plan built a quantization_config
    bool w4a8 = false;                         ///< the export is for vLLM CPU's W4A8 kernel (w4a8-cpu)
};

/// What the plan (convert/plan.hpp check_experts) tells a format's traits about its MoE
/// experts, for its `moe_warnings`: which kinds of expert linears the plan writes.
struct moe_facts {
    bool symmetric_experts = false;
    bool asymmetric_experts = false;
    bool dense_experts = false;
};

namespace detail {
/// vLLM keeps scales in the model dtype: GPTQ and AWQ scales of another dtype decode to
/// other weights than were measured. `advice` ends the sentence.
inline void model_dtype_scales_warning(const serving_facts& f, std::string_view advice, std::vector<std::string>& w) {
    if ((f.model == dtype::BF16 || f.model == dtype::F16) && f.scales != f.model)
        w.push_back(std::string("scales are ") + std::string(dtype_name(f.scales)) + " in a " + std::string(dtype_name(f.model)) +
                    " model: vLLM allocates scales in the dtype it serves the model in (params_dtype: "
                    "GroupQuantScaleParameter dtype=params_dtype in create_weights) and copies the stored tensor in "
                    "(parameter.py BasevLLMParameter._assert_and_load and the sharded loads: data.copy_), rounding each "
                    "scale to " + std::string(dtype_name(f.model)) +
                    ", so vLLM decodes slightly other weights than snr_db measures (quantization_report.json's "
                    "snr_db_as_loaded is the SNR of what it decodes)" + std::string(advice));
}
}  // namespace detail

/// A file a format writes beside config.json (GPTQ's quantize_config.json).
struct side_file {
    std::string name;
    json content;
};

/// The traits of one output format, in named parts (see above) so a missing member is named.
template <class T>
concept format_names_itself = requires {
    { T::name } -> std::convertible_to<std::string_view>;
    { T::aliases } -> std::convertible_to<std::span<const std::string_view>>;
    { T::codes } -> std::convertible_to<code_kind>;
};

template <class T>
concept format_states_conventions = requires(dtype d) {
    { T::default_scale_dtype(d) } -> std::same_as<dtype>;
    { T::carries_g_idx } -> std::convertible_to<bool>;      ///< act-order may regroup columns
    { T::one_scheme } -> std::convertible_to<bool>;         ///< its config states one scheme for every layer
    { T::asymmetric_minmax } -> std::convertible_to<scale_policy>;  ///< what `minmax --asym` means
};

template <class T>
concept format_refuses = requires(std::int64_t n, const layout_scheme& s) {
    { T::refusal(n, n, s) } -> std::same_as<std::optional<std::string>>;
};

template <class T>
concept format_writes_config = requires(std::span<const linear_entry> linears, const layout_request& r) {
    { T::config(linears, r) } -> std::same_as<json>;
    { T::side_files(linears, r) } -> std::same_as<std::vector<side_file>>;
};

template <class T>
concept format_traits = format_names_itself<T> && format_states_conventions<T> && format_refuses<T> &&
                        format_writes_config<T>;

/// An integer format also builds its layout_policy for a run-time bit width: with_layout(r, f)
/// calls f(layout) or refuses the width.
template <class T>
concept integer_format_traits = format_traits<T> && T::codes == code_kind::integer;

/// "model.layers.0.mlp.down_proj.weight" -> "model.layers.0.mlp.down_proj".
inline std::string module_prefix(std::string_view weight_name) {
    constexpr std::string_view suffix = ".weight";
    if (weight_name.size() > suffix.size() && weight_name.ends_with(suffix))
        weight_name.remove_suffix(suffix.size());
    return std::string(weight_name);
}

namespace detail {

/// Group size as a layer stores it: -1 and K both mean one group per row.
inline std::int64_t effective_group(std::int64_t group_size, std::int64_t cols) noexcept {
    return group_size <= 0 ? cols : group_size;
}

inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) noexcept { return (a + b - 1) / b; }

/// The tensor called `name` among `views`, or a format_error naming it.
inline const tensor_view& find_view(std::span<const tensor_view> views, const std::string& name) {
    for (const tensor_view& v : views)
        if (v.name == name) return v;
    fail<format_error>({}, name, "tensor is missing");
}

/// Checks a read tensor's dtype and shape against the layout's expectation.
inline void expect_view(const tensor_view& v, dtype type, const shape_t& shape) {
    if (v.type != type)
        fail<format_error>({}, v.name, "dtype is " + std::string(dtype_name(v.type)) +
                                           ", expected " + std::string(dtype_name(type)));
    if (v.shape != shape)
        fail<shape_error>({}, v.name, "shape is " + shape_to_string(v.shape) + ", expected " +
                                          shape_to_string(shape));
    const auto need = static_cast<std::size_t>(checked_numel(shape, {}, v.name)) * dtype_size(type);
    if (v.bytes.size() != need)
        fail<format_error>({}, v.name, "holds " + std::to_string(v.bytes.size()) +
                                           " bytes, expected " + std::to_string(need));
}

/// A tensor's elements copied out (views may be unaligned: they point into mapped files).
template <class T>
std::vector<T> copy_elements(const tensor_view& v) {
    std::vector<T> out(v.bytes.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), v.bytes.data(), out.size() * sizeof(T));
    return out;
}

/// An owned tensor holding `values` (any trivially copyable element type).
template <class T>
owned_tensor make_tensor(std::string name, dtype type, shape_t shape, const std::vector<T>& values) {
    owned_tensor t{std::move(name), type, std::move(shape), {}};
    t.bytes.resize(values.size() * sizeof(T));
    if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
    return t;
}

/// An owned tensor of `shape` with zeroed bytes, for packers to fill in place; its storage
/// comes from `storage` when given (a recycled buffer: no fresh pages to fault in), and keeps
/// that buffer's old bytes instead where `zeroed` is false (a packer that writes every byte).
inline owned_tensor alloc_tensor(std::string name, dtype type, shape_t shape, buffer_recycler* storage = nullptr,
                                 bool zeroed = true) {
    const auto n = static_cast<std::size_t>(checked_numel(shape, {}, name));
    owned_tensor t{std::move(name), type, std::move(shape), {}};
    if (storage) t.bytes = zeroed ? storage->take_zeroed(n * dtype_size(type)) : storage->take(n * dtype_size(type));
    else assign_zeros(t.bytes, n * dtype_size(type));
    return t;
}

/// Refuses band outputs that are not the tensors of the whole weight's specs (count, dtype,
/// shape, bytes): a band is written into them in place, so any other would be written past.
inline void check_band_outputs(const std::vector<tensor_spec>& specs, std::span<const owned_tensor> out,
                               const std::string& weight, std::string_view format) {
    auto fits = [](const tensor_spec& t, const owned_tensor& o) {
        return o.type == t.type && o.shape == t.shape &&
               o.bytes.size() == static_cast<std::size_t>(checked_numel(t.shape, {}, o.name)) * dtype_size(t.type);
    };
    bool ok = out.size() == specs.size();
    for (std::size_t i = 0; ok && i < specs.size(); ++i) ok = fits(specs[i], out[i]);
    if (!ok)
        fail<shape_error>({}, weight,
                          std::string(format) + ": pack_band's outputs are not the " + std::to_string(specs.size()) +
                              " tensors of the whole weight's specs() (dtype, shape and bytes)");
}

/// The words of an I32 tensor made by alloc_tensor (operator new aligns the storage for them).
inline std::uint32_t* words_of(owned_tensor& t) noexcept {
    return reinterpret_cast<std::uint32_t*>(t.bytes.data());
}

/// quantized_tensor::validate(), with the one pass over every code done as one OR of them
/// all (or_bytes: a code fits b bits iff it has no bit above them); on any doubt the full
/// validate() runs and words the refusal. The OR runs on the pack kernels of `isa`. Values
/// made_in_range skip it and the zero points' range (see value_check).
inline void validate_fast(const quantized_tensor& q, simd::isa isa = simd::active_isa(),
                          value_check values = value_check::scan) {
    const bool sizes_ok = q.bits >= 2 && q.bits <= 8 && q.rows > 0 && q.cols > 0 && q.group_size > 0 &&
                          q.group_size <= q.cols && q.codes.size() == static_cast<std::size_t>(q.rows * q.cols);
    const std::uint8_t any = sizes_ok && values == value_check::scan ? or_bytes(q.codes.data(), q.codes.size(), isa) : 0;
    if (!sizes_ok || (any & static_cast<std::uint8_t>(~((1u << q.bits) - 1u))) != 0) {
        q.validate();  // throws, naming the element
        fail<shape_error>({}, q.name, "inconsistent quantized tensor");
    }
    // validate() minus the code scan: everything left is O(rows * groups + cols).
    auto bad = [&](const std::string& why) { fail<shape_error>({}, q.name, why); };
    if (q.scale_dtype != dtype::F16 && q.scale_dtype != dtype::BF16) bad("scale dtype must be F16 or BF16");
    const auto n_groups = static_cast<std::size_t>(q.rows * q.groups());
    if (q.scales.size() != n_groups || q.zeros.size() != n_groups) bad("scales/zeros size mismatch");
    if (!q.g_idx.empty() && q.g_idx.size() != static_cast<std::size_t>(q.cols)) bad("g_idx size mismatch");
    const int maxq = (1 << q.bits) - 1;
    if (values == value_check::scan)
        for (std::size_t i = 0; i < q.zeros.size(); ++i)
            if (q.zeros[i] < 0 || q.zeros[i] > maxq) bad("zero point out of range at group " + std::to_string(i));
    for (std::int32_t g : q.g_idx)
        if (g < 0 || g >= q.groups()) bad("g_idx entry out of range");
}

/// Shape checks every layout shares (the quantized_tensor itself must be consistent).
inline void check_common(const quantized_tensor& q, std::string_view format, std::int64_t first_row = 0,
                         simd::isa isa = simd::active_isa(), value_check values = value_check::scan) {
    validate_fast(q, isa, values);
    if (q.symmetric && values == value_check::scan) {
        const std::int32_t mid = 1 << (q.bits - 1);
        for (std::size_t i = 0; i < q.zeros.size(); ++i)
            if (q.zeros[i] != mid)
                fail<shape_error>({}, q.name,
                                  std::string(format) + ": symmetric weight with zero point " +
                                      std::to_string(q.zeros[i]) + " at row " +
                                      std::to_string(first_row + static_cast<std::int64_t>(i) / q.groups()) +
                                      ", group " +
                                      std::to_string(static_cast<std::int64_t>(i) % q.groups()) +
                                      " (symmetric means every zero is " + std::to_string(mid) + ")");
    }
}

/// Refuses a scale dtype other than the one the export asked for: converting here would
/// change the decoded weights behind the quantizer's back (the rounding belongs to it).
inline void check_scale_dtype(const quantized_tensor& q, dtype wanted, std::string_view format) {
    if (q.scale_dtype != wanted)
        fail<unsupported_error>({}, q.name,
                                std::string(format) + ": scales are " +
                                    std::string(dtype_name(q.scale_dtype)) + " but the export asks for " +
                                    std::string(dtype_name(wanted)) +
                                    "; quantize with that scale dtype (qforge never casts scales "
                                    "silently)");
}

/// g_idx as written: explicit when the quantizer gave one, else k / group_size.
inline std::vector<std::int32_t> full_g_idx(const quantized_tensor& q) {
    std::vector<std::int32_t> g(static_cast<std::size_t>(q.cols));
    for (std::int64_t k = 0; k < q.cols; ++k) g[static_cast<std::size_t>(k)] = q.group_of(k);
    return g;
}

/// "<name> group g (row r)" for element i of q's [rows][groups] scales or zeros.
inline std::string where_group(const quantized_tensor& q, std::size_t i) {
    return q.name + " group " + std::to_string(static_cast<std::int64_t>(i) % q.groups()) + " (row " +
           std::to_string(static_cast<std::int64_t>(i) / q.groups()) + ")";
}

/// Whether q's groups are the plain k / group_size ones (no act-order regrouping).
inline bool g_idx_is_contiguous(const quantized_tensor& q) noexcept {
    for (std::int64_t k = 0; k < q.cols; ++k)
        if (q.group_of(k) != k / q.group_size) return false;
    return true;
}

/// Keeps a read g_idx only when it is not the plain k / group_size map.
inline std::vector<std::int32_t> canonical_g_idx(std::vector<std::int32_t> g, std::int64_t group_size,
                                                 const std::string& tensor, std::int64_t groups) {
    bool plain = true;
    for (std::size_t k = 0; k < g.size(); ++k) {
        if (g[k] < 0 || g[k] >= groups)
            fail<format_error>({}, tensor, "g_idx entry " + std::to_string(g[k]) + " at " +
                                               std::to_string(k) + " is not a group index");
        if (g[k] != static_cast<std::int32_t>(static_cast<std::int64_t>(k) / group_size)) plain = false;
    }
    if (plain) g.clear();
    return g;
}

/// dst[c * dst_stride + r] = src[r * cols + c] (dst_stride defaults to rows). Done in 32 x 32
/// tiles: a plain double loop writes each element `rows` apart, one cache line per element,
/// and on [4096 x 172] scales that cost as much as packing all the codes.
template <class T>
void transpose_into(const T* src, std::int64_t rows, std::int64_t cols, T* dst, std::int64_t dst_stride = -1) noexcept {
    if (dst_stride < 0) dst_stride = rows;
    constexpr std::int64_t tile = 32;
    for (std::int64_t r0 = 0; r0 < rows; r0 += tile) {
        const std::int64_t r1 = r0 + tile < rows ? r0 + tile : rows;
        for (std::int64_t c0 = 0; c0 < cols; c0 += tile) {
            const std::int64_t c1 = c0 + tile < cols ? c0 + tile : cols;
            for (std::int64_t c = c0; c < c1; ++c)
                for (std::int64_t r = r0; r < r1; ++r) dst[c * dst_stride + r] = src[r * cols + c];
        }
    }
}

/// The quantized_tensor an unpacker fills: shape, grid and scale dtype set, codes sized.
inline quantized_tensor unpacked_header(const std::string& name, int bits, std::int64_t rows, std::int64_t cols,
                                        std::int64_t group_size, bool symmetric, dtype scale_dtype) {
    return quantized_tensor::with_header(name, bits, rows, cols, group_size, symmetric, scale_dtype,
                                         quantized_tensor::storage::codes);
}

}  // namespace detail
}  // namespace qforge
