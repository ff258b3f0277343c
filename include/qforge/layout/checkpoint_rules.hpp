// Checkpoint-level rules every layout shares: the list of linears an export describes, the
// layers a loader fuses, the integer zero-point check, the tied-weight check and the config
// write. They live once here so GPTQ, AWQ and compressed-tensors refuse the same things with
// the same words (the compressed-tensors exporter in ../shared/seeds did this refactor for the
// same reason).
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/core/regex.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

/// One linear layer of the exported model, as its config describes it.
struct linear_entry {
    std::string name;               ///< full module name, "model.layers.0.self_attn.q_proj"
    bool quantized = true;          ///< false: kept in the model dtype (must be listed as such)
    int bits = 4;
    std::int64_t group_size = 128;  ///< columns per group; -1 or `cols`: per channel
    bool symmetric = true;
    std::int64_t rows = 0;          ///< N
    std::int64_t cols = 0;          ///< K
    std::string tied_to;            ///< non-empty: this weight is shared with that tensor
    /// An MoE router or shared-expert gate: dense in every format, listed where the format lists
    /// dense modules, and not one of the block linears a GPTQ config must quantize.
    bool router = false;
};

/// "<p>.experts" for a per-expert module "<p>.experts.<e>.<leaf>" (Qwen-MoE
/// `mlp.experts.3.gate_proj`, Mixtral `block_sparse_moe.experts.3.w1`), else empty: the
/// modules an engine stacks into one fused-MoE layer.
QFORGE_DECL std::string_view expert_parent(std::string_view module) noexcept;

/// The entry a quantized tensor contributes (module = name without ".weight").
QFORGE_DECL linear_entry linear_entry_of(const quantized_tensor& q, std::string module);

/// Linears a loader fuses into one module (vLLM `packed_modules_mapping`): leaf names that
/// must share one scheme when they sit under the same parent.
struct fused_set {
    std::string_view fused;
    std::vector<std::string_view> parts;
};

QFORGE_DECL const std::vector<fused_set>& default_fused_sets();

namespace detail {

QFORGE_DECL std::pair<std::string_view, std::string_view> split_leaf(std::string_view name);

/// Per-channel layers store one group per row; compare schemes on that footing.
QFORGE_DECL std::int64_t entry_group(const linear_entry& e) noexcept;

QFORGE_DECL bool same_scheme(const linear_entry& a, const linear_entry& b) noexcept;

QFORGE_DECL std::string scheme_text(const linear_entry& e);

}  // namespace detail

/// Groups of entries that one loader module fuses (members of the same parent and fused set).
QFORGE_DECL std::vector<std::vector<const linear_entry*>> fused_groups(
    std::span<const linear_entry> linears,
    const std::vector<fused_set>& sets = default_fused_sets());

/// Refuses an export where layers a loader fuses (q/k/v, gate/up of one block) do not share
/// one scheme: vLLM raises "Found a different quantization schemes" (formats.md 4.5).
QFORGE_DECL void check_fused_share_scheme(std::span<const linear_entry> linears, std::string_view format);

/// Refuses a quantized layer whose weight is tied to another tensor: the loader would either
/// re-tie it (dropping the quantized copy) or quantize the shared table. Untie it first.
QFORGE_DECL void check_untied(std::span<const linear_entry> linears, std::string_view format);

/// Zero points given as floats (trained or read from elsewhere) as integers in code space,
/// or an unsupported_error naming the first fractional one: every integer layout stores
/// integers, and rounding here would change the decoded weights (QA-LoRA folds give such
/// zeros). `zeros` is [rows][groups] row-major.
QFORGE_DECL std::vector<std::int32_t> integer_zero_points(std::span<const float> zeros, int bits,
                                                     std::int64_t groups, const std::string& tensor);

/// The one group size a GPTQ/AWQ config can state for all quantized layers, or a refusal
/// naming two layers that disagree. Per-channel layers fit a stated g only when K == g;
/// returns -1 when every layer is per channel.
QFORGE_DECL std::int64_t common_group_size(std::span<const linear_entry> linears, std::string_view format);

/// The one (bits, symmetric) pair of all quantized layers, or a refusal naming the odd one.
QFORGE_DECL const linear_entry& common_scheme(std::span<const linear_entry> linears, std::string_view format);

/// The quantized entry whose scheme (bits, group, symmetry) most layers share (the first such
/// on a tie): the base a GPTQ config states, the others becoming `dynamic` overrides.
QFORGE_DECL const linear_entry* majority_scheme(std::span<const linear_entry> linears);

/// Names of the linears left unquantized, in model order.
QFORGE_DECL json unquantized_names(std::span<const linear_entry> linears);

/// How each loader matches an entry of a skip list (AWQ `modules_to_not_convert`) against a
/// module name. These are the loaders' rules, not qforge's: a list is only right when every
/// loader that reads it matches exactly the modules meant.
namespace loader_match {

/// vLLM: `quant_utils.is_layer_skipped(prefix, ignored, fused_mapping, skip_with_substr=True)`
/// (vllm-project/vllm model_executor/layers/quantization/utils/quant_utils.py @01693a61, called
/// so by `auto_awq.py AutoAWQConfig.get_quant_method` @0043d6b5): `any(layer in prefix ...)`,
/// a plain substring test against the full module name.
QFORGE_DECL bool vllm_skips(std::string_view entry, std::string_view module);

/// transformers: `quantizers_utils.should_convert_module(full_name, patterns)`: the entry is a
/// Python regex matched at the start of the full name (`re.match(key)`, which covers the
/// `key\.` form too), or the full name ends with it.
QFORGE_DECL bool transformers_skips(std::string_view entry, std::string_view module);

/// AutoAWQ: `awq/utils/module.py exclude_layers_to_not_quantize` keeps a linear unless
/// `any(key in name ...)`, where `name` comes from `get_named_linears(layer)` of one decoder
/// block (`awq/models/base.py _load_quantized_modules`, casper-hansen/AutoAWQ @88e4c76):
/// block-relative ("mlp.up_proj"). Linears outside the blocks are never replaced.
QFORGE_DECL bool autoawq_skips(std::string_view entry, std::string_view block_relative);

/// (block prefix "model.layers.3", block-relative name "mlp.up_proj") of a module inside a
/// numbered decoder block, or nullopt for one outside (lm_head, embeddings).
QFORGE_DECL std::optional<std::pair<std::string, std::string>> split_block(std::string_view module);

}  // namespace loader_match

/// Puts a layout's fragment into a model config as `quantization_config`, replacing any
/// previous one in place (config.json keeps its key order).
QFORGE_DECL void set_quantization_config(json& model_config, json fragment);

}  // namespace qforge

#if QFORGE_BASE_BODIES_HERE

namespace qforge {

QFORGE_DECL std::string_view expert_parent(std::string_view module) noexcept {
    const std::size_t at = module.rfind(".experts.");
    if (at == std::string_view::npos) return {};
    std::size_t i = at + 9, digits = 0;
    while (i < module.size() && module[i] >= '0' && module[i] <= '9') ++i, ++digits;
    if (digits == 0 || i >= module.size() || module[i] != '.' || module.find('.', i + 1) != std::string_view::npos)
        return {};
    return module.substr(0, at + 8);
}

QFORGE_DECL linear_entry linear_entry_of(const quantized_tensor& q, std::string module) {
    return {std::move(module), true, q.bits, q.group_size, q.symmetric, q.rows, q.cols, {}};
}

QFORGE_DECL const std::vector<fused_set>& default_fused_sets() {
    static const std::vector<fused_set> sets{{"qkv_proj", {"q_proj", "k_proj", "v_proj"}},
                                             {"gate_up_proj", {"gate_proj", "up_proj"}}};
    return sets;
}

namespace detail {

QFORGE_DECL std::pair<std::string_view, std::string_view> split_leaf(std::string_view name) {
    const auto dot = name.rfind('.');
    if (dot == std::string_view::npos) return {{}, name};
    return {name.substr(0, dot), name.substr(dot + 1)};
}

QFORGE_DECL std::int64_t entry_group(const linear_entry& e) noexcept {
    return e.group_size <= 0 || e.group_size >= e.cols ? -1 : e.group_size;
}

QFORGE_DECL bool same_scheme(const linear_entry& a, const linear_entry& b) noexcept {
    if (a.quantized != b.quantized) return false;
    if (!a.quantized) return true;
    return a.bits == b.bits && entry_group(a) == entry_group(b) && a.symmetric == b.symmetric;
}

QFORGE_DECL std::string scheme_text(const linear_entry& e) {
    if (!e.quantized) return "unquantized";
    return std::to_string(e.bits) + "-bit " + (e.symmetric ? "sym" : "asym") + " group " +
           std::to_string(entry_group(e));
}

}  // namespace detail

QFORGE_DECL std::vector<std::vector<const linear_entry*>> fused_groups(
    std::span<const linear_entry> linears,
    const std::vector<fused_set>& sets) {
    std::vector<std::vector<const linear_entry*>> groups;
    std::vector<std::pair<std::string, std::size_t>> keys;  // (parent + fused name, group index)
    for (const linear_entry& e : linears) {
        const auto [parent, leaf] = detail::split_leaf(e.name);
        for (const fused_set& s : sets) {
            bool member = false;
            for (std::string_view p : s.parts) member = member || p == leaf;
            if (!member) continue;
            const std::string key = std::string(parent) + "." + std::string(s.fused);
            std::size_t idx = groups.size();
            for (const auto& [k, i] : keys)
                if (k == key) idx = i;
            if (idx == groups.size()) {
                keys.emplace_back(key, idx);
                groups.emplace_back();
            }
            groups[idx].push_back(&e);
        }
    }
    return groups;
}

QFORGE_DECL void check_fused_share_scheme(std::span<const linear_entry> linears, std::string_view format) {
    for (const auto& group : fused_groups(linears)) {
        for (const linear_entry* e : group) {
            if (detail::same_scheme(*e, *group.front())) continue;
            std::string names;
            for (const linear_entry* m : group)
                names += (names.empty() ? "" : ", ") + m->name + " (" + detail::scheme_text(*m) + ")";
            fail<unsupported_error>({}, e->name,
                                    std::string(format) +
                                        ": layers a loader fuses must share one scheme: " + names);
        }
    }
}

QFORGE_DECL void check_untied(std::span<const linear_entry> linears, std::string_view format) {
    for (const linear_entry& e : linears)
        if (e.quantized && !e.tied_to.empty())
            fail<unsupported_error>({}, e.name,
                                    std::string(format) + ": quantized layer's weight is tied to '" +
                                        e.tied_to + "'; untie it or leave it unquantized");
}

QFORGE_DECL std::vector<std::int32_t> integer_zero_points(std::span<const float> zeros, int bits,
                                                     std::int64_t groups, const std::string& tensor) {
    std::vector<std::int32_t> out(zeros.size());
    const float maxq = static_cast<float>((1 << bits) - 1);
    for (std::size_t i = 0; i < zeros.size(); ++i) {
        const float z = zeros[i];
        const auto where = "row " + std::to_string(static_cast<std::int64_t>(i) / groups) +
                           ", group " + std::to_string(static_cast<std::int64_t>(i) % groups);
        if (!std::isfinite(z) || z != std::nearbyint(z))
            fail<unsupported_error>({}, tensor, "fractional zero point " + std::to_string(z) +
                                                    " at " + where +
                                                    "; integer layouts cannot store it");
        if (z < 0.0f || z > maxq)
            fail<unsupported_error>({}, tensor, "zero point " + std::to_string(z) + " at " + where +
                                                    " is outside the " + std::to_string(bits) +
                                                    "-bit code range");
        out[i] = static_cast<std::int32_t>(z);
    }
    return out;
}

QFORGE_DECL std::int64_t common_group_size(std::span<const linear_entry> linears, std::string_view format) {
    const linear_entry* grouped = nullptr;
    for (const linear_entry& e : linears)
        if (e.quantized && detail::entry_group(e) > 0) {
            if (grouped && grouped->group_size != e.group_size)
                fail<unsupported_error>({}, e.name,
                                        std::string(format) + ": one group size for all layers, but '" +
                                            grouped->name + "' uses " +
                                            std::to_string(grouped->group_size) + " and this one " +
                                            std::to_string(e.group_size));
            grouped = &e;
        }
    if (!grouped) return -1;
    for (const linear_entry& e : linears)
        if (e.quantized && detail::entry_group(e) < 0 && e.cols != grouped->group_size)
            fail<unsupported_error>({}, e.name,
                                    std::string(format) + ": per-channel layer (K " +
                                        std::to_string(e.cols) + ") cannot share the config's group size " +
                                        std::to_string(grouped->group_size) + " of '" + grouped->name + "'");
    return grouped->group_size;
}

QFORGE_DECL const linear_entry& common_scheme(std::span<const linear_entry> linears, std::string_view format) {
    const linear_entry* first = nullptr;
    for (const linear_entry& e : linears) {
        if (!e.quantized) continue;
        if (!first) {
            first = &e;
            continue;
        }
        if (e.bits != first->bits || e.symmetric != first->symmetric)
            fail<unsupported_error>({}, e.name,
                                    std::string(format) + ": one scheme for all layers, but '" +
                                        first->name + "' is " + detail::scheme_text(*first) +
                                        " and this one " + detail::scheme_text(e));
    }
    if (!first) fail<unsupported_error>({}, {}, std::string(format) + ": no quantized layer to export");
    return *first;
}

QFORGE_DECL const linear_entry* majority_scheme(std::span<const linear_entry> linears) {
    const linear_entry* best = nullptr;
    std::size_t best_count = 0;
    for (const linear_entry& e : linears) {
        if (!e.quantized) continue;
        std::size_t n = 0;
        for (const linear_entry& o : linears) n += o.quantized && detail::same_scheme(o, e) ? 1 : 0;
        if (n > best_count) {
            best = &e;
            best_count = n;
        }
    }
    return best;
}

QFORGE_DECL json unquantized_names(std::span<const linear_entry> linears) {
    json names = json::array();
    for (const linear_entry& e : linears)
        if (!e.quantized) names.push_back(e.name);
    return names;
}

namespace loader_match {

QFORGE_DECL bool vllm_skips(std::string_view entry, std::string_view module) {
    return module.find(entry) != std::string_view::npos;
}

QFORGE_DECL bool transformers_skips(std::string_view entry, std::string_view module) {
    if (module.ends_with(entry)) return true;
    bool plain = true;  // a module name: letters, digits, '_' and '.', where '.' is any character
    for (char c : entry) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.');
    if (plain) {
        if (module.size() < entry.size()) return false;
        for (std::size_t i = 0; i < entry.size(); ++i)
            if (entry[i] != '.' && entry[i] != module[i]) return false;
        return true;
    }
    try {
        return regex(entry).matches_prefix(module);
    } catch (const regex_error&) {
        return module.starts_with(entry);  // not a regex Python would accept either: literal prefix
    }
}

QFORGE_DECL bool autoawq_skips(std::string_view entry, std::string_view block_relative) {
    return block_relative.find(entry) != std::string_view::npos;
}

QFORGE_DECL std::optional<std::pair<std::string, std::string>> split_block(std::string_view module) {
    static const regex block(R"(((?:.*\.)?(?:layers|h|blocks|block|layer)\.[0-9]+)\.(.+))");
    std::vector<std::string> m;
    if (!block.matches(module, m)) return std::nullopt;
    return std::pair<std::string, std::string>{m[1], m[2]};
}

}  // namespace loader_match

QFORGE_DECL void set_quantization_config(json& model_config, json fragment) {
    model_config.set("quantization_config", std::move(fragment));
}

}  // namespace qforge
#endif
