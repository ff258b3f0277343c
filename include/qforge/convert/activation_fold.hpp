// Activation-aware scaling in a conversion (quant/activation_scaling.hpp does the maths): which
// linears share an input, what produces that input, and the scales each output tensor is
// multiplied (columns) or divided (rows) by. Per decoder layer of a Llama-style checkpoint:
//
//   q/k/v_proj   columns x s1   input_layernorm.weight          / s1
//   gate/up_proj columns x s2   post_attention_layernorm.weight / s2
//   down_proj    columns x s3   up_proj's rows                  / s3
//   o_proj       columns x s4   v_proj's rows                   / s4   only without a GQA repeat
//                                                                       (AutoAWQ's rule)
//
// The scales are powers of two, so every product and quotient is exact and the checkpoint
// computes in float exactly what the source did; fused partners share one scale, so they stay
// one fused matrix for the engines that fuse them. A group is scaled only when all of its
// linears are quantized whole from their own source tensor with one scheme, the imatrix has its
// input, and the producer is in the checkpoint; every group's outcome is reported.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/detail/quantize_step.hpp"
#include "qforge/core/config.hpp"
#include "qforge/convert/importance.hpp"
#include "qforge/convert/model_config.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/convert/report.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/quant/activation_scaling.hpp"

namespace qforge {

/// The scales of a conversion: by output tensor name.
struct activation_folds {
    std::map<std::string, std::shared_ptr<const std::vector<float>>> columns;  ///< x s per input column
    std::map<std::string, std::shared_ptr<const std::vector<float>>> rows;     ///< / s per row (element)
    std::vector<activation_fold_record> records;

    const std::vector<float>* column_scale(const std::string& name) const;
    const std::vector<float>* row_scale(const std::string& name) const;
};

/// Searches the scales of every layer of `p` (see the file comment), reading the weights
/// from `src` and the input statistics from `lookup`.
QFORGE_DECL activation_folds plan_activation_folds(const checkpoint_source& src, const plan& p, const model_config& cfg,
                                                   importance_lookup& lookup, const executor& run);

/// Rows [row_begin, row_end) of `v` with the folds applied: columns x s, rows / r, as F32.
QFORGE_DECL owned_tensor apply_folds(const tensor_view& v, std::int64_t row_begin, std::int64_t row_end,
                                     const std::vector<float>* columns, const std::vector<float>* rows);

/// The importance the quantizer meets after the columns were multiplied by s: m / s^2.
QFORGE_DECL std::vector<float> scaled_importance(std::span<const float> m, const std::vector<float>* columns);

#if QFORGE_BODIES_HERE
namespace detail {

struct fold_group {
    std::vector<std::string> parts;  ///< weight names that share the input
    std::string producer;            ///< tensor whose rows make that input
};

inline std::vector<fold_group> fold_groups(const std::string& layer, bool mha) {
    const std::string a = layer + "self_attn.", m = layer + "mlp.";
    std::vector<fold_group> g = {
        {{a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}, layer + "input_layernorm.weight"},
        {{m + "gate_proj.weight", m + "up_proj.weight"}, layer + "post_attention_layernorm.weight"},
        {{m + "down_proj.weight"}, m + "up_proj.weight"},
    };
    g.push_back({{a + "o_proj.weight"}, mha ? a + "v_proj.weight" : std::string()});
    return g;
}

inline const plan_item* find_item(const plan& p, const std::string& name) {
    for (const auto& it : p.items)
        if (it.name == name) return &it;
    return nullptr;
}

/// Why `g` cannot be scaled, or empty.
inline std::string fold_obstacle(const plan& p, const fold_group& g) {
    if (g.producer.empty()) return "a GQA repeat sits between v_proj and o_proj: no exact fold (AutoAWQ skips it too)";
    const plan_item* first = find_item(p, g.parts.front());
    for (const auto& name : g.parts) {
        const plan_item* it = find_item(p, name);
        if (!it || it->action != plan_action::quantize) return name + " is not quantized";
        if (!it->whole_source() || it->source != it->name) return name + " is a slice or rename of another tensor";
        if (!(it->scheme == first->scheme)) return "the group's linears have different schemes";
    }
    const plan_item* prod = find_item(p, g.producer);
    if (!prod || !prod->whole_source() || prod->source != prod->name) return "no " + g.producer + " of its own to fold into";
    return {};
}

}  // namespace detail

QFORGE_DECL activation_folds plan_activation_folds(const checkpoint_source& src, const plan& p, const model_config& cfg,
                                                   importance_lookup& lookup, const executor& run) {
    activation_folds out;
    const bool mha = cfg.num_key_value_heads == cfg.num_attention_heads && cfg.num_attention_heads > 0;
    std::map<std::string, bool, std::less<>> layers;
    for (const auto& it : p.items) {
        int layer = -1;
        std::string_view rest;
        if (gguf::detail::parse_layer(it.name, layer, rest) && rest.starts_with("self_attn."))
            layers.emplace("model.layers." + std::to_string(layer) + ".", true);
    }
    for (const auto& [layer, unused] : layers) {
        (void)unused;
        for (const auto& g : detail::fold_groups(layer, mha)) {
            activation_fold_record rec;
            for (const auto& n : g.parts) rec.layers.emplace_back(module_of(n));
            rec.folded_into = g.producer;
            rec.skipped = detail::fold_obstacle(p, g);
            const plan_item* first = detail::find_item(p, g.parts.front());
            std::vector<float> mean_sq;
            if (rec.skipped.empty()) {
                const auto m = lookup.find(g.parts.front(), first->shape[1]);
                if (m.empty()) rec.skipped = "the imatrix has no entry for its input";
                else mean_sq.assign(m.begin(), m.end());
            }
            if (rec.skipped.empty()) {
                // Read with pread, not viewed in the mapping: a source truncated meanwhile is an
                // io_error naming file and tensor, never a SIGBUS (the converter's default read).
                std::vector<owned_tensor> parts;
                for (const auto& n : g.parts) parts.push_back(src.read_tensor(n));
                std::vector<tensor_view> views;
                for (const auto& t : parts) views.push_back(t.view());
                activation_scaling_options o;
                o.quant = detail::options_for(first->scheme, p.format);
                o.quant.importance = mean_sq;  // the search policies see E[x^2] / s^2, as the converter will
                const activation_scales s = search_activation_scales(views, mean_sq, o, run);
                rec.alpha = s.alpha;
                rec.weighted_error = s.error;
                rec.weighted_error_unscaled = s.error_unscaled;
                if (s.alpha > 0) {
                    auto shared = std::make_shared<const std::vector<float>>(s.scale);
                    for (const auto& n : g.parts) out.columns[n] = shared;
                    out.rows[g.producer] = shared;
                }
            }
            out.records.push_back(std::move(rec));
        }
    }
    return out;
}

QFORGE_DECL owned_tensor apply_folds(const tensor_view& v, std::int64_t row_begin, std::int64_t row_end,
                                     const std::vector<float>* columns, const std::vector<float>* rows) {
    const tensor_view slice = detail::row_slice(v, row_begin, row_end, v.name);
    std::vector<float> s(static_cast<std::size_t>(v.shape[1]), 1.0f);
    if (columns) s = *columns;
    owned_tensor t = scale_columns(slice, s);
    if (rows) {
        const std::span<const float> r(rows->data() + row_begin, static_cast<std::size_t>(row_end - row_begin));
        t = unscale_rows(t.view(), r);
    }
    return t;
}

QFORGE_DECL std::vector<float> scaled_importance(std::span<const float> m, const std::vector<float>* columns) {
    std::vector<float> out(m.begin(), m.end());
    if (columns)
        for (std::size_t k = 0; k < out.size(); ++k) out[k] /= (*columns)[k] * (*columns)[k];
    return out;
}

#endif

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL const std::vector<float>* activation_folds::column_scale(const std::string& name) const {
    const auto it = columns.find(name);
    return it == columns.end() ? nullptr : it->second.get();
}

QFORGE_DECL const std::vector<float>* activation_folds::row_scale(const std::string& name) const {
    const auto it = rows.find(name);
    return it == rows.end() ? nullptr : it->second.get();
}

}  // namespace qforge
#endif
