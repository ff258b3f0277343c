// Conversion rules: which tensors a converter quantizes, keeps, splits, unties or renames.
//
// A selector names tensors the way compressed-tensors `targets`/`ignore` and llama.cpp's
// `--tensor-type` do: an exact name, a dotted suffix ("mlp.down_proj" matches
// "model.layers.3.mlp.down_proj.weight"), or `re:<regex>` matched against the whole name
// (anchored at both ends, unlike Python's re.match, so "re:.*gate" cannot hit "gate_proj").
// Every selector is tried against the tensor name and against its module name (the tensor name
// without a trailing ".weight" or ".bias"), so "lm_head" selects "lm_head.weight".
//
// Rules are applied in two stages, and within a stage the LAST matching rule wins:
//  1. rewrites, which change which tensors exist: split (a fused q/k/v or gate/up projection
//     into its parts), untie (copy a tied embedding table into the output head) and rename;
//  2. actions on the tensors that result: quantize (with a scheme) or keep (optionally cast).
// A tensor that no action rule selects falls to the defaults (see `default_action`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/regex.hpp"
#include "qforge/core/tensor_view.hpp"

namespace qforge {

/// How a group's scale is chosen (the formulas live in the quantizer):
/// minmax = amax/((2^b-1)/2) symmetric or (max-min)/(2^b-1) asymmetric (GPTQ, compressed-tensors);
/// absmax = amax/(2^(b-1)-1), never clips; search = the seed exporter's 8 candidate factors;
/// mse = llm-compressor-like shrink grid; lsq = least-squares fit (quant/least_squares.hpp);
/// fixed = the seed exporter without search (amax * 0.875 / 2^(b-1)).
enum class scale_method { minmax, absmax, search, mse, lsq, fixed };

QFORGE_DECL std::string_view scale_method_name(scale_method m) noexcept;

QFORGE_DECL std::optional<scale_method> parse_scale_method(std::string_view s) noexcept;

/// One quantization grid. group_size -1 means one group per row (per channel).
struct quant_spec {
    int bits = 4;
    std::int64_t group_size = 128;
    bool symmetric = true;
    scale_method scale = scale_method::minmax;
    /// F16 or BF16; nullopt lets the output format choose (its loaders' convention).
    std::optional<dtype> scale_dtype;

    /// The group size for a row of `cols` weights (per-channel resolves to cols).
    std::int64_t group_for(std::int64_t cols) const noexcept { return group_size > 0 ? group_size : cols; }

    friend bool operator==(const quant_spec&, const quant_spec&) = default;
};

/// "4b g128 sym minmax" - used in plans, reports and error messages.
QFORGE_DECL std::string scheme_to_string(const quant_spec& s);

/// The module a tensor belongs to: its name without a trailing ".weight" or ".bias".
QFORGE_DECL std::string_view module_of(std::string_view tensor) noexcept;

/// Selects tensors by exact name, dotted suffix or `re:` regex (see the file comment).
class selector {
public:
    selector() = default;
    selector(std::string pattern) : pattern_(std::move(pattern)) {  // NOLINT: implicit from a string on purpose
        if (pattern_.starts_with("re:")) {
            try {
                regex_ = regex(std::string_view(pattern_).substr(3));
            } catch (const regex_error& e) {
                fail<format_error>({}, {}, "bad rule regex \"" + pattern_ + "\": " + e.what());
            }
            is_regex_ = true;
        } else if (pattern_.empty()) {
            fail<format_error>({}, {}, "empty rule selector");
        }
    }
    selector(const char* pattern) : selector(std::string(pattern)) {}  // NOLINT

    const std::string& pattern() const noexcept { return pattern_; }
    bool is_regex() const noexcept { return is_regex_; }

    bool matches(std::string_view tensor) const;

    /// The name with the selected part replaced: regex substitution ($1...) for `re:`
    /// selectors, otherwise the selected suffix (or whole name) replaced by `replacement`.
    std::string replace(const std::string& tensor, const std::string& replacement) const;

private:
    bool hits(std::string_view name) const noexcept;

    std::string pattern_;
    regex regex_;
    bool is_regex_ = false;
};

/// Quantize the selected linear weights (rank-2 "*.weight") with `scheme`. On anything else
/// (a bias, a norm) the rule does not apply and earlier rules or the defaults decide.
struct quantize_action {
    quant_spec scheme;
};

/// Keep the selected tensors dense, optionally cast to another float dtype.
struct keep_action {
    std::optional<dtype> cast;
};

/// Split a fused projection along its rows into named parts. `qkv` uses the config's head
/// counts and head_dim (q = heads * head_dim, k = v = kv_heads * head_dim); `gate_up` splits in
/// two halves of intermediate_size. `fused` is the name piece replaced by each part's name.
struct split_action {
    enum class kind { qkv, gate_up };
    kind what = kind::qkv;
    std::string fused;  ///< e.g. "q_k_v_proj", "qkv_proj", "gate_up_proj"
};

/// Untie: the selected embedding table stays as it is and a copy named `head` is added (and is
/// then subject to the action rules, e.g. quantized); the output config gets
/// tie_word_embeddings = false.
struct untie_action {
    std::string head = "lm_head.weight";
};

/// Rename the selected tensors (see selector::replace).
struct rename_action {
    std::string replacement;
};

using rule_action = std::variant<quantize_action, keep_action, split_action, untie_action, rename_action>;

struct rule {
    selector select;
    rule_action action;
};

/// An ordered rule list plus the defaults' scheme. Builder methods return *this so a custom
/// converter reads as one statement.
struct rule_set {
    std::vector<rule> rules;
    /// Scheme for the default targets (the linears inside decoder blocks); nullopt = the
    /// defaults quantize nothing and only explicit quantize rules do.
    std::optional<quant_spec> default_scheme;

    rule_set& quantize(selector s, quant_spec scheme);
    rule_set& keep(selector s, std::optional<dtype> cast = std::nullopt);
    rule_set& split_qkv(std::string fused = "qkv_proj");
    rule_set& split_gate_up(std::string fused = "gate_up_proj");
    rule_set& untie(selector embedding, std::string head = "lm_head.weight");
    rule_set& rename(selector s, std::string replacement);

    /// The last rule of type A selecting `name`, if any.
    template <class A>
    const rule* last_match(std::string_view name) const {
        const rule* found = nullptr;
        for (const rule& r : rules)
            if (std::holds_alternative<A>(r.action) && r.select.matches(name)) found = &r;
        return found;
    }
};

/// What the defaults decide for a tensor no action rule selects.
enum class default_decision {
    quantize,   ///< a linear inside a decoder block: quantized with rule_set::default_scheme
    keep,       ///< embeddings, norms, biases, routers, lm_head, integer buffers
    uncovered,  ///< a matrix the defaults do not recognise: the plan refuses it
};

/// True when `name` lies inside a numbered decoder block ("...layers.3.", "...h.3.", "...blocks.3.").
QFORGE_DECL bool in_decoder_block(std::string_view name);

/// An MoE routing linear, kept dense by every format and listed where the format lists dense
/// modules: a router (`mlp.gate` of Qwen-MoE, `block_sparse_moe.gate` of Mixtral, gpt-oss'
/// `mlp.router`) whose rows equal the expert count, or a shared-expert gate [1, H]
/// (`mlp.shared_expert_gate`, transformers qwen2_moe `nn.Linear(hidden_size, 1)`).
QFORGE_DECL bool is_router(std::string_view name, const shape_t& shape, std::int64_t num_experts);

/// The defaults for Llama-, Qwen- and Mistral-style checkpoints: the weights of the linears in
/// decoder blocks are quantized; embeddings, norms, biases, MoE routers (is_router) and lm_head
/// stay dense. A float tensor of rank 3 or more is weights no format stores as one quantized
/// tensor: uncovered, so the plan refuses it unless a rule keeps it on purpose (fused experts of
/// a known layout never get here: the plan cuts them per expert first). `num_experts` is 0 for
/// dense models.
QFORGE_DECL default_decision default_action(std::string_view name, dtype type, const shape_t& shape,
                                            std::int64_t num_experts);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL std::string_view scale_method_name(scale_method m) noexcept {
    switch (m) {
        case scale_method::minmax: return "minmax";
        case scale_method::absmax: return "absmax";
        case scale_method::search: return "search";
        case scale_method::mse: return "mse";
        case scale_method::lsq: return "lsq";
        case scale_method::fixed: return "fixed";
    }
    return "?";
}

QFORGE_DECL std::optional<scale_method> parse_scale_method(std::string_view s) noexcept {
    for (auto m : {scale_method::minmax, scale_method::absmax, scale_method::search, scale_method::mse, scale_method::lsq,
                   scale_method::fixed})
        if (scale_method_name(m) == s) return m;
    return std::nullopt;
}

QFORGE_DECL std::string scheme_to_string(const quant_spec& s) {
    std::string out = std::to_string(s.bits) + "b ";
    out += s.group_size > 0 ? "g" + std::to_string(s.group_size) : std::string("per-channel");
    out += s.symmetric ? " sym " : " asym ";
    out += scale_method_name(s.scale);
    if (s.scale_dtype) {
        out += ' ';
        out += dtype_name(*s.scale_dtype);
    }
    return out;
}

QFORGE_DECL std::string_view module_of(std::string_view tensor) noexcept {
    for (std::string_view suffix : {std::string_view(".weight"), std::string_view(".bias")})
        if (tensor.size() > suffix.size() && tensor.ends_with(suffix))
            return tensor.substr(0, tensor.size() - suffix.size());
    return tensor;
}

QFORGE_DECL bool in_decoder_block(std::string_view name) {
    static const regex block(R"((^|.*\.)(layers|h|blocks|block|layer)\.[0-9]+\..*)");
    return block.matches(name);
}

QFORGE_DECL bool is_router(std::string_view name, const shape_t& shape, std::int64_t num_experts) {
    if (shape.size() != 2 || !name.ends_with(".weight")) return false;
    const std::string_view module = module_of(name);
    const std::string_view leaf = module.substr(module.rfind('.') == std::string_view::npos ? 0 : module.rfind('.') + 1);
    if (leaf == "shared_expert_gate") return shape[0] == 1;
    return (leaf == "gate" || leaf == "router") && num_experts > 0 && shape[0] == num_experts;
}

QFORGE_DECL default_decision default_action(std::string_view name, dtype type, const shape_t& shape,
                                            std::int64_t num_experts) {
    if (!is_floating(type)) return default_decision::keep;
    if (shape.size() >= 3) return default_decision::uncovered;
    if (shape.size() != 2 || !name.ends_with(".weight")) return default_decision::keep;
    const std::string_view module = module_of(name);
    const std::string_view leaf = module.substr(module.rfind('.') == std::string_view::npos ? 0 : module.rfind('.') + 1);
    if (module.find("embed") != std::string_view::npos || module.find("norm") != std::string_view::npos ||
        module == "lm_head" || module.ends_with(".lm_head") || leaf == "wte" || leaf == "wpe")
        return default_decision::keep;
    if (is_router(name, shape, num_experts)) return default_decision::keep;
    if (in_decoder_block(name)) return default_decision::quantize;
    return default_decision::uncovered;
}


QFORGE_DECL bool selector::matches(std::string_view tensor) const {
    const std::string_view module = module_of(tensor);
    if (is_regex_)
        return regex_.matches(tensor) || (module.size() != tensor.size() && regex_.matches(module));
    return hits(tensor) || hits(module);
}

QFORGE_DECL std::string selector::replace(const std::string& tensor, const std::string& replacement) const {
    if (is_regex_) {
        if (regex_.matches(tensor)) return regex_.replace(tensor, replacement);
        const std::string module(module_of(tensor));
        return regex_.replace(module, replacement) + tensor.substr(module.size());
    }
    const std::size_t at = tensor.rfind(pattern_);
    if (at == std::string::npos) return tensor;
    return tensor.substr(0, at) + replacement + tensor.substr(at + pattern_.size());
}

QFORGE_DECL bool selector::hits(std::string_view name) const noexcept {
    if (name == pattern_) return true;
    return name.size() > pattern_.size() && name.ends_with(pattern_) &&
           name[name.size() - pattern_.size() - 1] == '.';
}

QFORGE_DECL rule_set& rule_set::quantize(selector s, quant_spec scheme) {
    rules.push_back({std::move(s), quantize_action{scheme}});
    return *this;
}

QFORGE_DECL rule_set& rule_set::keep(selector s, std::optional<dtype> cast) {
    rules.push_back({std::move(s), keep_action{cast}});
    return *this;
}

QFORGE_DECL rule_set& rule_set::split_qkv(std::string fused) {
    rules.push_back({selector(fused), split_action{split_action::kind::qkv, fused}});
    return *this;
}

QFORGE_DECL rule_set& rule_set::split_gate_up(std::string fused) {
    rules.push_back({selector(fused), split_action{split_action::kind::gate_up, fused}});
    return *this;
}

QFORGE_DECL rule_set& rule_set::untie(selector embedding, std::string head) {
    rules.push_back({std::move(embedding), untie_action{std::move(head)}});
    return *this;
}

QFORGE_DECL rule_set& rule_set::rename(selector s, std::string replacement) {
    rules.push_back({std::move(s), rename_action{std::move(replacement)}});
    return *this;
}

}  // namespace qforge
#endif
