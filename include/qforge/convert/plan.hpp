// A conversion plan: the rules resolved against a checkpoint's headers before any work is done.
//
// The plan says, for every source tensor, what becomes of it (kept, cast, quantized, split into
// parts, cut per expert out of a fused 3-D expert tensor, copied into an untied head, renamed),
// which tensors are written with which dtypes, shapes and sizes, every reason the conversion
// cannot go ahead, and warnings about engines known to misread what would be written. A refused plan writes
// nothing: the converter checks `refused()` before it creates the output folder, so all
// refusals are reported at once and none halfway through a multi-gigabyte job.
//
//   qforge::plan p = qforge::make_plan(headers, config, rules, qforge::output_format::gptq);
//   if (p.refused()) { for (auto& r : p.refusals) std::cerr << r << '\n'; return 1; }
//   qforge::print_plan(std::cout, p);   // the --dry-run output
//
// The steps make_plan takes are in convert/detail/plan_steps.hpp, with the format table they
// ask: a translation unit that only reads plans (QFORGE_SEPARATE_COMPILATION) does not compile them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qforge/convert/fused_experts.hpp"
#include "qforge/convert/model_config.hpp"
#include "qforge/convert/output_format.hpp"
#include "qforge/convert/rule.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/json.hpp"
#include "qforge/layout/checkpoint_rules.hpp"

namespace qforge {

/// The dequantization multiplier of an FP8 source weight (convert/fp8_source.hpp): the
/// weight's value at [r][c] is e4m3(code) * scale[r / block_rows][c / block_cols].
/// How a quantized source weight's codes are stored: FP8 E4M3 codes in the weight's own tensor,
/// or gpt-oss's MXFP4 blocks (convert/gpt_oss_source.hpp) in a tensor of their own.
enum class source_encoding { e4m3, mxfp4 };

struct source_scale {
    std::string name;  ///< "<module>.weight_scale_inv", "<module>.weight_scale" or "<p>.gate_up_proj_scales"
    dtype type = dtype::F32;
    shape_t shape;
    std::int64_t block_rows = 1;  ///< 128 for 128 x 128 blocks, 1 per channel, N per tensor
    std::int64_t block_cols = 1;  ///< 128 for blocks, K per channel or per tensor
    dtype dequantized_type = dtype::BF16;  ///< the model dtype (config torch_dtype): kept copies and CT scales
    source_encoding encoding = source_encoding::e4m3;
    std::string codes = {};  ///< the tensor that holds the codes when it is not the weight itself (MXFP4 blocks)

    /// The dtype the weight is decoded to: F32 for FP8 (code x scale, exact in F32); BF16 for
    /// MXFP4, exact there and what transformers' `convert_moe_packed_tensors` decodes to, so
    /// the conversion is that of the bf16 checkpoint users would otherwise dequantize to.
    dtype decoded_type() const noexcept { return encoding == source_encoding::mxfp4 ? dtype::BF16 : dtype::F32; }
};

/// One tensor of the source checkpoint, as its safetensors header describes it.
struct source_tensor {
    std::string name;
    dtype type = dtype::BF16;
    shape_t shape;
    std::string file;  ///< the shard that holds it (for messages)
    /// Set for an FP8 weight read with its scale: the converter hands on its decoded F32 values.
    std::optional<source_scale> scale = std::nullopt;
};

enum class plan_action { keep, quantize };

/// One output weight: a whole source tensor or a row range of one (a split part).
struct plan_item {
    std::string name;    ///< output name after split / untie / rename
    std::string source;  ///< source tensor it is read from
    std::string source_file;
    dtype source_type = dtype::BF16;
    shape_t source_shape;
    std::optional<source_scale> scale = std::nullopt;  ///< an FP8 source weight's scale (decoded to F32 on read)
    std::int64_t row_begin = 0;  ///< rows [row_begin, row_end) of the source (dim 0)
    std::int64_t row_end = 0;
    shape_t shape;  ///< this item's shape (the source's with rows sliced, or one expert's cut)
    /// Set when the item is one expert's matrix (or bias) cut out of a fused 3-D expert tensor
    /// (convert/fused_experts.hpp); rows [row_begin, row_end) then index the cut matrix.
    std::optional<expert_cut> cut;
    plan_action action = plan_action::keep;
    quant_spec scheme;                 ///< resolved (scale dtype set) when quantized
    dtype out_type = dtype::BF16;        ///< when kept
    std::vector<planned_tensor> outputs;
    std::string decided_by;  ///< "rule <pattern>" or "default"

    std::uint64_t in_bytes() const;
    std::uint64_t out_bytes() const;
    bool whole_source() const;
    /// The dtype of the values the converter works on: F32 for a decoded FP8 weight, BF16 for
    /// decoded MXFP4 (source_scale::decoded_type).
    dtype value_type() const noexcept { return scale ? scale->decoded_type() : source_type; }
    /// The model's dtype for this weight: what it is kept in, and what compressed-tensors
    /// scales follow (an FP8 weight's is the config's torch_dtype).
    dtype model_type() const noexcept { return scale ? scale->dequantized_type : source_type; }
};

struct plan {
    output_format format = output_format::gptq;
    std::vector<plan_item> items;
    std::vector<std::string> refusals;  ///< complete messages ("qforge: file: tensor 'x': why")
    /// The conversion goes ahead, but a named engine is known to misread or refuse the output;
    /// serving_check.hpp loader_warnings adds what loaders do differently from what is written
    /// (which engines refuse it, which kernel they take, what they decode).
    std::vector<std::string> warnings;
    bool untied = false;                ///< an untie rule fired: write tie_word_embeddings false
    std::vector<linear_entry> linears;  ///< every linear of the output model, quantized or not
    json quantization_config;           ///< the layout's config.json fragment (null if refused)
    std::uint64_t source_bytes = 0;     ///< every source tensor once
    /// config.json's torch_dtype (plan_conversion sets it; nullopt when absent or the plan was
    /// made from tensor headers alone): the dtype vLLM serves the model in (loaded_scales.hpp).
    std::optional<dtype> declared_dtype;

    bool refused() const noexcept { return !refusals.empty(); }

    /// Throws unsupported_error carrying the first refusal (and how many more there are).
    void throw_if_refused() const;

    std::uint64_t out_bytes() const;
    std::size_t quantized_count() const;
    std::uint64_t quantized_weights() const;
    /// Bits per quantized weight, everything a loader reads counted (codes, scales, zeros,
    /// g_idx, weight_shape): 8 * output bytes of quantized linears / their weight count.
    double quantized_bits_per_weight() const;
    /// Bits per weight of the whole model: 8 * every output byte / every weight the outputs
    /// hold (embeddings, kept linears, experts, norms included), so weights left dense, on
    /// purpose or not, show in the figure (llama.cpp's bits per weight counts the same way).
    double bits_per_weight() const;
    /// Weight matrices (rank >= 2 floats) kept dense, and their weight count: what the plan
    /// prints so that an unquantized matrix never passes unnoticed.
    std::pair<std::size_t, std::uint64_t> kept_matrices() const;
    /// The single scheme GPTQ/AWQ configs describe (the first quantized item's).
    std::optional<quant_spec> main_scheme() const;
};

namespace detail {

QFORGE_DECL std::string refusal(const std::string& file, const std::string& tensor, const std::string& why);

}  // namespace detail

/// Resolves `rules` against the checkpoint's tensors. Never throws for a bad combination:
/// every problem becomes a refusal in the returned plan (a bad regex throws when the rule is made).
QFORGE_DECL plan make_plan(const std::vector<source_tensor>& sources, const model_config& cfg, const rule_set& rules,
                           output_format format);

namespace detail {
QFORGE_DECL std::string human_bytes(std::uint64_t b);
}  // namespace detail

/// The --dry-run output: one line per item (in -> out), the totals, then every refusal.
QFORGE_DECL void print_plan(std::ostream& os, const plan& p);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {
namespace detail {

QFORGE_DECL std::string refusal(const std::string& file, const std::string& tensor, const std::string& why) {
    return format_error_message(file, tensor, why);
}

QFORGE_DECL std::string human_bytes(std::uint64_t b) {
    char buf[32];
    if (b >= (std::uint64_t{1} << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(b) / (1 << 30));
    else if (b >= (std::uint64_t{1} << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1 << 20));
    else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", static_cast<double>(b) / 1024);
    else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
    return buf;
}

}  // namespace detail

QFORGE_DECL void print_plan(std::ostream& os, const plan& p) {
    os << "plan: " << p.items.size() << " tensors -> " << format_name(p.format) << "\n";
    std::size_t i = 0;
    for (const auto& it : p.items) {
        os << "  [" << ++i << "/" << p.items.size() << "] " << it.name << " " << shape_to_string(it.shape) << " "
           << dtype_name(it.source_type);
        if (it.scale && it.scale->encoding == source_encoding::mxfp4) {
            os << " (MXFP4 blocks) x E8M0 scale per 32 columns";
        } else if (it.scale) {
            os << " x " << dtype_name(it.scale->type) << " scale ";
            if (it.scale->block_rows == 1) os << "per row";
            else if (it.scale->block_rows >= it.source_shape[it.source_shape.size() - 2] && it.scale->block_cols >= it.source_shape.back()) os << "per tensor";
            else os << "per " << it.scale->block_rows << "x" << it.scale->block_cols << " block";
        }
        if (it.name != it.source || !it.whole_source()) {
            os << " (from " << it.source;
            if (it.cut) os << " expert " << it.cut->expert;
            else if (!it.whole_source()) os << " rows " << it.row_begin << ".." << it.row_end;
            os << ")";
        }
        if (it.action == plan_action::quantize) os << " -> quantize " << scheme_to_string(it.scheme) << ":";
        else os << " -> keep:";
        for (const auto& t : it.outputs) {
            const std::string_view leaf = std::string_view(t.name).substr(t.name.rfind('.') + 1);
            os << " " << (it.action == plan_action::quantize ? leaf : std::string_view("")) << (it.action == plan_action::quantize ? " " : "")
               << dtype_name(t.type) << " " << shape_to_string(t.shape);
        }
        os << ", " << detail::human_bytes(it.in_bytes()) << " -> " << detail::human_bytes(it.out_bytes()) << "  ["
           << it.decided_by << "]\n";
    }
    char bpw[32], all[32];
    std::snprintf(bpw, sizeof bpw, "%.3f", p.quantized_bits_per_weight());
    std::snprintf(all, sizeof all, "%.3f", p.bits_per_weight());
    const auto [kept_n, kept_w] = p.kept_matrices();
    os << "total: " << detail::human_bytes(p.source_bytes) << " -> " << detail::human_bytes(p.out_bytes()) << "; "
       << p.quantized_count() << " quantized linears (" << p.quantized_weights() << " weights) at " << bpw
       << " bits per weight; " << p.items.size() - p.quantized_count() << " kept dense, of them " << kept_n
       << " weight matrices (" << kept_w << " weights); " << all << " bits per weight over the whole model";
    if (p.untied) os << "; head untied";
    os << "\n";
    for (const auto& w : p.warnings) os << "warning: " << w << "\n";
    for (const auto& r : p.refusals) os << "refused: " << r << "\n";
}

}  // namespace qforge

#include "qforge/convert/detail/plan_steps.hpp"  // make_plan's body (and, header-only, format_name's)

namespace qforge {

QFORGE_DECL std::uint64_t plan_item::in_bytes() const {
    return static_cast<std::uint64_t>(checked_numel(shape, source_file, source)) * dtype_bits(source_type) / 8;
}

QFORGE_DECL std::uint64_t plan_item::out_bytes() const {
    std::uint64_t n = 0;
    for (const auto& t : outputs) n += t.bytes();
    return n;
}

QFORGE_DECL bool plan_item::whole_source() const {
    return !cut && row_begin == 0 && (source_shape.empty() || row_end == source_shape[0]);
}

QFORGE_DECL void plan::throw_if_refused() const {
    if (refusals.empty()) return;
    std::string why = refusals.front();
    if (why.starts_with("qforge: ")) why.erase(0, 8);
    if (refusals.size() > 1) why += " (and " + std::to_string(refusals.size() - 1) + " more refusals)";
    fail<unsupported_error>({}, {}, "conversion refused: " + why);
}

QFORGE_DECL std::uint64_t plan::out_bytes() const {
    std::uint64_t n = 0;
    for (const auto& it : items) n += it.out_bytes();
    return n;
}

QFORGE_DECL std::size_t plan::quantized_count() const {
    return static_cast<std::size_t>(std::count_if(items.begin(), items.end(),
                                                   [](const plan_item& i) { return i.action == plan_action::quantize; }));
}

QFORGE_DECL std::uint64_t plan::quantized_weights() const {
    std::uint64_t n = 0;
    for (const auto& it : items)
        if (it.action == plan_action::quantize) n += static_cast<std::uint64_t>(checked_numel(it.shape));
    return n;
}

QFORGE_DECL double plan::quantized_bits_per_weight() const {
    std::uint64_t bytes = 0;
    for (const auto& it : items)
        if (it.action == plan_action::quantize) bytes += it.out_bytes();
    const std::uint64_t w = quantized_weights();
    return w ? 8.0 * static_cast<double>(bytes) / static_cast<double>(w) : 0.0;
}

QFORGE_DECL double plan::bits_per_weight() const {
    std::uint64_t w = 0;
    for (const auto& it : items) w += static_cast<std::uint64_t>(checked_numel(it.shape));
    return w ? 8.0 * static_cast<double>(out_bytes()) / static_cast<double>(w) : 0.0;
}

QFORGE_DECL std::pair<std::size_t, std::uint64_t> plan::kept_matrices() const {
    std::pair<std::size_t, std::uint64_t> n{0, 0};
    for (const auto& it : items)
        if (it.action == plan_action::keep && it.shape.size() >= 2 && is_floating(it.source_type)) {
            ++n.first;
            n.second += static_cast<std::uint64_t>(checked_numel(it.shape));
        }
    return n;
}

QFORGE_DECL std::optional<quant_spec> plan::main_scheme() const {
    for (const auto& it : items)
        if (it.action == plan_action::quantize) return it.scheme;
    return std::nullopt;
}

}  // namespace qforge
#endif
