// The steps of make_plan (convert/plan.hpp): rewrites, actions, and the format's checks on
// every quantized item. Included by convert/plan.hpp where make_plan's body is compiled
// (header-only, or the QFORGE_IMPLEMENTATION translation unit), and by the converter's steps.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "qforge/convert/format.hpp"
#include "qforge/convert/fused_experts.hpp"
#include "qforge/convert/model_config.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/convert/rule.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/json.hpp"
#include "qforge/layout/checkpoint_rules.hpp"

namespace qforge {

namespace detail {
inline bool is_embedding_name(std::string_view name) {
    const std::string_view m = module_of(name);
    return m.find("embed") != std::string_view::npos || m.ends_with("wte");
}

/// Names a loader fuses back into one layer (vLLM's qkv_proj, gate_up_proj): the family key
/// "<block>.self_attn.qkv" / "<block>.mlp.gate_up", or empty for any other tensor.
inline std::string fused_family(std::string_view name) {
    static constexpr std::pair<std::string_view, std::string_view> members[] = {
        {".q_proj.weight", "qkv"}, {".k_proj.weight", "qkv"}, {".v_proj.weight", "qkv"},
        {".gate_proj.weight", "gate_up"}, {".up_proj.weight", "gate_up"}};
    for (const auto& [suffix, family] : members)
        if (name.ends_with(suffix))
            return std::string(name.substr(0, name.size() - suffix.size())) + "." + std::string(family);
    return {};
}

/// Split parts of a fused tensor with `rows` rows: (part name piece, row count).
inline std::vector<std::pair<std::string, std::int64_t>> split_parts(const split_action& s, const model_config& c,
                                                                     std::int64_t rows, std::string& why) {
    if (s.what == split_action::kind::qkv) {
        if (c.num_attention_heads <= 0 || c.head_dim <= 0) {
            why = "splitting a fused q/k/v projection needs num_attention_heads and head_dim in config.json";
            return {};
        }
        const std::int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
        if (rows != q + 2 * kv) {
            why = "fused q/k/v has " + std::to_string(rows) + " rows but the config says " + std::to_string(q) +
                  " + 2 x " + std::to_string(kv) + " = " + std::to_string(q + 2 * kv) + " (heads " +
                  std::to_string(c.num_attention_heads) + ", kv heads " + std::to_string(c.num_key_value_heads) +
                  ", head_dim " + std::to_string(c.head_dim) + ")";
            return {};
        }
        return {{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}};
    }
    if (c.intermediate_size <= 0) {
        why = "splitting a fused gate/up projection needs intermediate_size in config.json";
        return {};
    }
    if (rows != 2 * c.intermediate_size) {
        why = "fused gate/up has " + std::to_string(rows) + " rows but the config says 2 x intermediate_size = " +
              std::to_string(2 * c.intermediate_size);
        return {};
    }
    return {{"gate_proj", c.intermediate_size}, {"up_proj", c.intermediate_size}};
}

inline std::string replace_last(const std::string& name, const std::string& piece, const std::string& with) {
    const std::size_t at = name.rfind(piece);
    if (at == std::string::npos) return name;
    return name.substr(0, at) + with + name.substr(at + piece.size());
}

inline bool quantizable(const plan_item& it) {
    return it.shape.size() == 2 && it.name.ends_with(".weight") && is_floating(it.value_type());
}

/// Decide keep / quantize for one item; returns a refusal reason or empty.
inline std::string decide(plan_item& it, const rule_set& rules, const model_config& cfg) {
    const rule* chosen = nullptr;
    for (const rule& r : rules.rules) {
        if (!r.select.matches(it.name)) continue;
        if (std::holds_alternative<keep_action>(r.action) ||
            (std::holds_alternative<quantize_action>(r.action) && quantizable(it)))
            chosen = &r;
    }
    it.out_type = it.model_type();
    if (chosen) {
        it.decided_by = "rule " + chosen->select.pattern();
        if (const auto* q = std::get_if<quantize_action>(&chosen->action)) {
            it.action = plan_action::quantize;
            it.scheme = q->scheme;
        } else {
            const auto& k = std::get<keep_action>(chosen->action);
            it.action = plan_action::keep;
            if (k.cast) {
                if (!is_floating(it.value_type()) || !is_floating(*k.cast) || !is_computable(*k.cast))
                    return "can only cast between float types, not " + std::string(dtype_name(it.source_type)) +
                           " to " + std::string(dtype_name(*k.cast));
                it.out_type = *k.cast;
            }
        }
        return {};
    }
    switch (default_action(it.name, it.value_type(), it.shape, cfg.num_experts)) {
        case default_decision::quantize:
            if (rules.default_scheme) {
                it.action = plan_action::quantize;
                it.scheme = *rules.default_scheme;
                it.decided_by = "default (decoder linear)";
            } else {
                it.action = plan_action::keep;
                it.decided_by = "default (not targeted)";
            }
            return {};
        case default_decision::keep:
            it.action = plan_action::keep;
            it.decided_by = "default (dense)";
            return {};
        case default_decision::uncovered:
            break;
    }
    if (it.shape.size() >= 3)
        return "this " + shape_to_string(it.shape) +
               " float tensor holds weights that no output format stores as one quantized tensor (fused experts "
               "of an unknown layout? a convolution?); keep it dense on purpose with a keep rule (e.g. --ignore) "
               "or convert it elsewhere";
    return "no rule and no default covers this " + shape_to_string(it.shape) +
           " matrix outside the decoder blocks; add a rule for it (quantize or keep, e.g. --ignore)";
}

/// MoE rules that hold in every safetensors format. Every expert of one MoE block is stacked by
/// the engines into one fused layer with one quantization method (vLLM compressed_tensors_moe.py
/// CompressedTensorsMoEMethod.get_moe_method: "All MoE projections need to have same
/// quantization scheme"; auto_gptq.py AutoGPTQMoEMethod and auto_awq.py take the config's single
/// scheme), and older vLLM resolves every MoE layer of a compressed-tensors checkpoint through
/// the one `"Linear"` target (get_moe_method(quant_config, layer) reads
/// target_scheme_map["Linear"]), so all quantized experts share one scheme, and an MoE block is
/// quantized whole or kept whole. Then the warnings about engines that misread what is written.
inline void check_experts(plan& p, output_format format) {
    const plan_item* first = nullptr;
    std::map<std::string, const plan_item*, std::less<>> block_first;
    bool symmetric_experts = false, asymmetric_experts = false, dense_experts = false;
    for (const auto& it : p.items) {
        if (it.shape.size() != 2 || !it.name.ends_with(".weight")) continue;
        const std::string_view block = expert_parent(module_of(it.name));
        if (block.empty()) continue;
        auto [pos, inserted] = block_first.emplace(std::string(block), &it);
        const plan_item& a = *pos->second;
        if (!inserted && (a.action != it.action || (a.action == plan_action::quantize && a.scheme != it.scheme))) {
            p.refusals.push_back(refusal(
                it.source_file, it.name,
                "engines stack every expert of '" + std::string(block) +
                    "' into one fused-MoE layer with one scheme (vLLM get_moe_method: \"All MoE projections need to "
                    "have same quantization scheme\"), but this one is " +
                    (it.action == plan_action::quantize ? scheme_to_string(it.scheme) : std::string("kept dense")) +
                    " and '" + a.name + "' " +
                    (a.action == plan_action::quantize ? scheme_to_string(a.scheme) : std::string("kept dense"))));
            continue;
        }
        if (it.action != plan_action::quantize) {
            dense_experts = true;
            continue;
        }
        (it.scheme.symmetric ? symmetric_experts : asymmetric_experts) = true;
        if (!first) {
            first = &it;
        } else if (it.scheme != first->scheme && inserted) {
            p.refusals.push_back(refusal(
                it.source_file, it.name,
                "all MoE experts must share one scheme: older vLLM resolves every fused-MoE layer through one "
                "config entry (compressed-tensors target_scheme_map[\"Linear\"]; GPTQ/AWQ state one scheme), but "
                "this one is " + scheme_to_string(it.scheme) + " and '" + first->name + "' " +
                    scheme_to_string(first->scheme)));
        }
    }
    const moe_facts facts{symmetric_experts, asymmetric_experts, dense_experts};
    visit_format(format, [&](auto t) {  // what engines misread of this format's experts
        if constexpr (requires { decltype(t)::moe_warnings(facts, p.warnings); }) decltype(t)::moe_warnings(facts, p.warnings);
    });
}

}  // namespace detail

/// The request a plan's format builds its config and side files from: the first quantized
/// item's scheme (formats that state one scheme take the one most layers use) and the model
/// dtype of the quantized items (the last one's).
inline layout_request main_layout_request(const plan& p, bool desc_act = false) {
    const quant_spec scheme = *p.main_scheme();
    dtype model_type = dtype::BF16;
    for (const auto& it : p.items)
        if (it.action == plan_action::quantize) model_type = it.model_type();
    return layout_request_for(scheme, model_type, model_type, desc_act);
}

namespace detail {

/// Every source once: a name in two shards is refused; source_bytes counts them.
inline void count_sources(plan& p, const std::vector<source_tensor>& sources, std::set<std::string>& names) {
    for (const auto& s : sources) {
        if (!names.insert(s.name).second) p.refusals.push_back(refusal(s.file, s.name, "tensor appears in more than one shard"));
        p.source_bytes += static_cast<std::uint64_t>(checked_numel(s.shape, s.file, s.name)) * dtype_bits(s.type) / 8;
    }
}

/// The item a source tensor becomes when nothing rewrites it.
inline plan_item whole_item(const source_tensor& s) {
    plan_item whole;
    whole.name = s.name;
    whole.source = s.name;
    whole.source_file = s.file;
    whole.source_type = s.type;
    whole.source_shape = s.shape;
    whole.scale = s.scale;
    whole.shape = s.shape;
    whole.row_end = s.shape.empty() ? 0 : s.shape[0];
    return whole;
}

/// The experts of a fused 3-D expert tensor, each its own item (convert/fused_experts.hpp).
inline std::vector<plan_item> expert_items(const plan_item& whole, const model_config& cfg, std::string& why) {
    std::vector<plan_item> parts;
    for (const expert_piece& piece : split_fused_experts(whole.source, whole.source_shape, cfg, why)) {
        plan_item part = whole;
        part.name = piece.name;
        part.shape = piece.shape;
        part.cut = piece.cut;
        part.row_begin = 0;
        part.row_end = piece.shape[0];
        parts.push_back(std::move(part));
    }
    return parts;
}

/// The row ranges a split rule cuts a fused q/k/v or gate/up tensor into.
inline std::vector<plan_item> split_items(const plan_item& whole, const split_action& sp, const model_config& cfg,
                                          std::string& why) {
    std::vector<plan_item> parts;
    const shape_t& shape = whole.source_shape;
    if (shape.empty() || shape.size() > 2) {
        why = "only a matrix or a bias can be split, not shape " + shape_to_string(shape);
        return parts;
    }
    std::int64_t row = 0;
    for (const auto& [piece, n] : split_parts(sp, cfg, shape[0], why)) {
        plan_item part = whole;
        part.name = replace_last(whole.source, sp.fused, piece);
        part.row_begin = row;
        part.row_end = row + n;
        part.shape[0] = n;
        row += n;
        parts.push_back(std::move(part));
    }
    return parts;
}

/// A fused expert's piece, or a renamed tensor, whose output name the checkpoint also holds
/// as a tensor of its own (per-expert and fused experts of one block, a v5 router beside the
/// original): which of the two is the model would be a guess. Returns the reason, or empty.
inline std::string twice_in_source(const std::vector<plan_item>& parts, const std::string& source,
                                   const std::set<std::string>& source_names) {
    for (const auto& part : parts)
        if (part.name != source && source_names.contains(part.name))
            return "the checkpoint also holds '" + part.name + "', which this tensor becomes" +
                   (part.cut ? " (its expert " + std::to_string(part.cut->expert) + ")" : std::string(" (its loader name)")) +
                   ": the same weights twice, in the fused and the per-expert naming; which one is the model would be a guess";
    return {};
}

/// Stage 1 for one source: the rewrites (expert cut, split, untie, rename) that turn it into
/// output items, appended to p.items; every problem is a refusal.
inline void rewrite_source(plan& p, const source_tensor& s, const model_config& cfg, const rule_set& rules,
                           const std::set<std::string>& source_names) {
    for (std::string_view q : {".qweight", ".weight_packed", ".qzeros", ".weight_scale"})
        if (std::string_view(s.name).ends_with(q)) {
            p.refusals.push_back(
                refusal(s.file, s.name, "the checkpoint is already quantized (convert a bf16/fp16 checkpoint, or repack it)"));
            break;
        }
    plan_item whole = whole_item(s);
    whole.name = loader_tensor_name(s.name, cfg);  // a v5 rename undone (Mixtral's router)
    std::vector<plan_item> parts;
    std::string why;
    if ((is_floating(s.type) || s.scale) && is_fused_expert_tensor(s.name)) parts = expert_items(whole, cfg, why);
    else if (const rule* r = rules.last_match<split_action>(s.name)) parts = split_items(whole, std::get<split_action>(r->action), cfg, why);
    else parts.push_back(whole);
    if (why.empty()) why = twice_in_source(parts, s.name, source_names);
    if (!why.empty()) {
        p.refusals.push_back(refusal(s.file, s.name, why));
        return;
    }
    if (const rule* r = rules.last_match<untie_action>(s.name)) {
        const auto& u = std::get<untie_action>(r->action);
        if (!cfg.tie_word_embeddings)
            p.refusals.push_back(refusal(s.file, s.name, "untie asked but config.json does not tie the embeddings"));
        else if (source_names.contains(u.head))
            p.refusals.push_back(refusal(s.file, s.name, "untie asked but '" + u.head + "' already exists"));
        plan_item head = whole;
        head.name = u.head;
        parts.push_back(std::move(head));
        p.untied = true;
    }
    for (auto& part : parts) {
        if (const rule* r = rules.last_match<rename_action>(part.name))
            part.name = r->select.replace(part.name, std::get<rename_action>(r->action).replacement);
        p.items.push_back(std::move(part));
    }
}

/// Stage 2 for one item: its action, then the format's checks on a quantized item and the
/// tensors it becomes. Returns the refusal, or empty.
inline std::string resolve_item(plan_item& it, const rule_set& rules, const model_config& cfg, bool tied,
                                output_format format) {
    if (std::string why = decide(it, rules, cfg); !why.empty()) return why;
    if (it.action == plan_action::keep) {
        it.outputs = {{it.name, it.out_type, it.shape}};
        return {};
    }
    if (tied && is_embedding_name(it.name))
        return "this embedding table is tied to the output head; quantizing it needs an untie rule (the head is "
               "quantized, the table stays dense)";
    if (it.value_type() != dtype::BF16 && it.value_type() != dtype::F16 && it.value_type() != dtype::F32)
        return "cannot quantize " + std::string(dtype_name(it.source_type)) + " weights";
    if (!it.scheme.scale_dtype) it.scheme.scale_dtype = default_scale_dtype(format, it.model_type());
    if (!policy_for(it.scheme, format))
        return std::string("scale rule '") + std::string(scale_method_name(it.scheme.scale)) +
               "' is for symmetric schemes; use minmax or mse with --asym";
    if (auto why = format_refusal(format, it.shape[0], it.shape[1], it.scheme, it.model_type()))
        return std::string(format_name(format)) + ": " + *why;
    it.outputs = format_tensors(format, module_of(it.name), it.shape[0], it.shape[1], it.scheme, it.model_type());
    return {};
}

/// A quantize rule that selects a tied head that does not exist in the file.
inline void check_tied_head(plan& p, const rule_set& rules) {
    const rule* head = rules.last_match<quantize_action>("lm_head.weight");
    const rule* keep = rules.last_match<keep_action>("lm_head.weight");
    auto index_of = [&](const rule* r) { return r ? r - rules.rules.data() : -1; };
    if (head && index_of(head) > index_of(keep))
        p.refusals.push_back(refusal({}, "lm_head.weight",
                                     "lm_head is tied to the embedding table (tie_word_embeddings, no lm_head in the "
                                     "file); quantizing it needs an untie rule"));
}

/// A format whose config states one scheme for every quantized layer (AWQ: AutoAWQConfig has
/// no per-module override) refuses a second scheme. GPTQ configs carry the other layers'
/// bits / group / symmetry as GPTQModel `dynamic` overrides (layout/gptq.hpp gptq_dynamic).
inline void check_one_scheme(plan& p, output_format format) {
    if (!states_one_scheme(format)) return;
    const plan_item* first = nullptr;
    for (const auto& it : p.items) {
        if (it.action != plan_action::quantize || it.outputs.empty()) continue;
        if (!first) {
            first = &it;
        } else if (it.scheme != first->scheme) {
            p.refusals.push_back(refusal(
                it.source_file, it.name,
                std::string(format_name(format)) + " describes one scheme per checkpoint (AutoAWQ and vLLM's "
                    "AutoAWQConfig read one bits/group_size/zero_point): " +
                    scheme_to_string(it.scheme) + " here, " + scheme_to_string(first->scheme) + " for '" +
                    first->name + "' (use compressed-tensors, or GPTQ's per-module overrides, for mixed schemes)"));
            return;
        }
    }
}

/// Layers a loader fuses (q/k/v, gate/up) must share one scheme or all stay dense.
inline void check_fused_families(plan& p) {
    std::map<std::string, const plan_item*> family_first;
    for (const auto& it : p.items) {
        const std::string fam = fused_family(it.name);
        if (fam.empty()) continue;
        auto [pos, inserted] = family_first.emplace(fam, &it);
        if (inserted) continue;
        const plan_item& a = *pos->second;
        const bool same = a.action == it.action && (a.action == plan_action::keep || a.scheme == it.scheme);
        if (!same)
            p.refusals.push_back(refusal(
                it.source_file, it.name,
                "loaders fuse this layer with '" + a.name +
                    "' and need one scheme for both (vLLM: \"all to use the same scheme\"); give them the same rule"));
    }
}

/// Every linear of the output model, quantized or not, as the layout's config sees them.
inline void collect_linears(plan& p, const model_config& cfg, bool tied) {
    for (const auto& it : p.items) {
        if (it.shape.size() != 2 || !it.name.ends_with(".weight") || !is_floating(it.value_type())) continue;
        const bool router = it.action == plan_action::keep && is_router(it.name, it.shape, cfg.num_experts);
        const bool linear = it.action == plan_action::quantize ||
                            default_action(it.name, it.value_type(), it.shape, cfg.num_experts) == default_decision::quantize ||
                            module_of(it.name).ends_with("lm_head") || router;
        if (!linear) continue;
        linear_entry e{std::string(module_of(it.name)), it.action == plan_action::quantize, it.scheme.bits,
                       it.scheme.group_size, it.scheme.symmetric, it.shape[0], it.shape[1], {}};
        e.router = router;
        p.linears.push_back(std::move(e));
    }
    if (tied) p.linears.push_back({"lm_head", false, 4, -1, true, 0, 0, {}});
}

/// The layout's config: its checks (one scheme, every block linear quantized for GPTQ, fused
/// layers, tied layers) become refusals now rather than after the work.
inline void make_quantization_config(plan& p) {
    if (p.quantized_count() == 0) {
        p.refusals.push_back(refusal({}, {}, "no tensor is selected for quantization"));
        return;
    }
    if (!p.refusals.empty()) return;
    try {
        p.quantization_config = format_config(p.format, p.linears, main_layout_request(p));
    } catch (const error& e) {
        p.refusals.push_back(e.what());
    }
}

inline void check_output_names(plan& p) {
    std::set<std::string> out_names;
    for (const auto& it : p.items)
        for (const auto& t : it.outputs)
            if (!out_names.insert(t.name).second)
                p.refusals.push_back(refusal({}, t.name, "two rules write the same output tensor name"));
}

}  // namespace detail

#if QFORGE_BODIES_HERE
QFORGE_DECL plan make_plan(const std::vector<source_tensor>& sources, const model_config& cfg, const rule_set& rules,
                           output_format format) {
    plan p;
    p.format = format;
    std::set<std::string> source_names;
    detail::count_sources(p, sources, source_names);
    // Stage 1: rewrites (split, untie, rename) turn source tensors into output items.
    for (const auto& s : sources) detail::rewrite_source(p, s, cfg, rules, source_names);
    // Stage 2: actions, then the format's checks on every quantized item.
    const bool head_in_source = std::any_of(sources.begin(), sources.end(),
                                            [](const source_tensor& s) { return module_of(s.name).ends_with("lm_head"); });
    const bool tied = cfg.tie_word_embeddings && !head_in_source && !p.untied;
    for (auto& it : p.items)
        if (std::string why = detail::resolve_item(it, rules, cfg, tied, format); !why.empty())
            p.refusals.push_back(detail::refusal(it.source_file, it.name, why));
    if (tied) detail::check_tied_head(p, rules);
    detail::check_one_scheme(p, format);
    detail::check_fused_families(p);
    detail::collect_linears(p, cfg, tied);
    detail::check_experts(p, format);
    detail::make_quantization_config(p);
    detail::check_output_names(p);
    return p;
}
#endif

}  // namespace qforge
