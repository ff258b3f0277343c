// The named step "fused global amax": ONE global scale per fused group, for a format whose
// siblings a loader fuses share it (NVFP4; convert/format.hpp shares_fused_global_scale).
//
// vLLM loads q/k/v (and gate/up) into one fused linear and keeps one global scale for it:
// `model_executor/layers/quantization/compressed_tensors/schemes/compressed_tensors_w4a16_nvfp4.py`
// CompressedTensorsW4A16Fp4.process_weights_after_loading takes `layer.weight_global_scale.max()`
// over the shards (compressed_tensors_w4a4_nvfp4.py does the same), and
// `compressed_tensors_moe.py` CompressedTensorsW4A4Nvfp4MoEMethod.process_weights_after_loading
// keeps `w13_weight_global_scale[:, 0]` (w1's) and only warns "w1_weight_global_scale must match
// w3_weight_global_scale. Accuracy may be affected.". A sibling quantized under its own global
// scale is then decoded under another one (field-2026.md 1.3, "The NVFP4 fusion trap").
//
// So the global scale comes from the amax over every member of the group, known before any
// member is quantized. 448 * 6 / max(amax_i) is exactly llm-compressor's `torch.min` over the
// members' global scales (`entrypoints/model_free/process.py`): the division rounds
// monotonically. The amaxes are read lazily, the first time a member is quantized (one extra
// source tensor in memory at a time, each source read once for every group it holds), so a
// cluster worker that holds one member of a group computes the same number as every other.
//
// Groups (per parent module): q_proj/k_proj/v_proj (qkv_proj in vLLM), gate_proj/up_proj
// (gate_up_proj: dense MLPs, shared experts and each expert `experts.<e>.gate_proj/up_proj`),
// w1/w3 (Mixtral experts, vLLM w13), and DeepSeek's q_a_proj/kv_a_proj_with_mqa (vLLM
// `deepseek_v2.py` fused_qkv_a_proj, a MergedColumnParallelLinear).
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

#include "qforge/convert/fused_experts.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/layout/nvfp4.hpp"

namespace qforge {

/// The fused-group key of an output weight name ("<parent>.qkv", "<parent>.gate_up",
/// "<parent>.w13", "<parent>.qkv_a"), or empty when the weight has no fused siblings.
QFORGE_DECL std::string fused_group_key(std::string_view name);

namespace detail {

/// amax |x| of rows [r0, r1) of the 2-D float view `v`, by the layout's vector reduction
/// (NaN is ignored here and left to the quantizer, which refuses it).
QFORGE_DECL float rows_amax(const tensor_view& v, std::int64_t r0, std::int64_t r1);

}  // namespace detail

/// The fused groups' amaxes of one plan, computed when first asked. Reading a source tensor
/// accounts for every group member it holds, so a fused 3-D expert tensor (all experts'
/// gate/up in one source) is read once for all its experts' groups, not once per expert.
class fused_amax_cache {
public:
    /// The amax of the fused group of quantized item `i` of `p`, read from `src` (an FP8 source
    /// weight decoded as the converter decodes it), or nullopt when the item is alone.
    template <class Source>
    std::optional<float> group_amax(const Source& src, const plan& p, std::size_t i) {
        const std::string key = fused_group_key(p.items.at(i).name);
        if (key.empty()) return std::nullopt;
        if (!indexed_) index(p);
        const std::vector<std::size_t>& members = members_[key];
        if (members.size() < 2) return std::nullopt;
        for (std::size_t j : members)
            if (!scanned_.contains(p.items[j].source)) scan(src, p, p.items[j].source);
        return partial_[key];
    }

private:
    /// Every quantized item's group, and the group members each source holds, in one pass.
    void index(const plan& p);

    /// Reads `source` once and folds the amax of every group member it holds into its group.
    /// A fused 3-D expert tensor is read one member's cut at a time (checkpoint_source::
    /// read_expert, FP8 or MXFP4 decoded there), so memory follows one expert matrix.
    template <class Source>
    void scan(const Source& src, const plan& p, const std::string& source) {
        const std::vector<std::size_t>& held_items = by_source_[source];
        const plan_item& first = p.items[held_items.front()];
        owned_tensor held;
        if (!first.cut) held = first.scale ? src.decode(source, true) : src.read_tensor(source);
        for (std::size_t j : held_items) {
            const plan_item& m = p.items[j];
            float a;
            if (m.cut) {
                std::optional<float> direct;  // an MXFP4 source's amax, read from its codes
                if constexpr (requires { src.mxfp4_cut_abs_max(source, *m.cut, m.shape, m.row_begin, m.row_end); })
                    direct = src.mxfp4_cut_abs_max(source, *m.cut, m.shape, m.row_begin, m.row_end);
                if (direct) {
                    a = *direct;
                } else {
                    const owned_tensor e = src.read_expert(source, *m.cut, m.name, m.shape, true);
                    a = detail::rows_amax(e.view(), m.row_begin, m.row_end);
                }
            } else {
                a = detail::rows_amax(held.view(), m.row_begin, m.row_end);
            }
            float& g = partial_[fused_group_key(m.name)];
            g = std::max(g, a);
        }
        scanned_.insert(source);
    }

    bool indexed_ = false;
    std::map<std::string, std::vector<std::size_t>, std::less<>> members_;    ///< group key -> items
    std::map<std::string, std::vector<std::size_t>, std::less<>> by_source_;  ///< source -> member items
    std::map<std::string, float, std::less<>> partial_;                       ///< group key -> amax so far
    std::set<std::string, std::less<>> scanned_;                              ///< sources read
};

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL std::string fused_group_key(std::string_view name) {
    static constexpr std::pair<std::string_view, std::string_view> members[] = {
        {".q_proj.weight", "qkv"},        {".k_proj.weight", "qkv"},  {".v_proj.weight", "qkv"},
        {".gate_proj.weight", "gate_up"}, {".up_proj.weight", "gate_up"},
        {".w1.weight", "w13"},            {".w3.weight", "w13"},
        {".q_a_proj.weight", "qkv_a"},    {".kv_a_proj_with_mqa.weight", "qkv_a"}};
    for (const auto& [suffix, family] : members)
        if (name.ends_with(suffix)) return std::string(name.substr(0, name.size() - suffix.size())) + "." + std::string(family);
    return {};
}

namespace detail {

QFORGE_DECL float rows_amax(const tensor_view& v, std::int64_t r0, std::int64_t r1) {
    const std::int64_t k = v.shape.at(1);
    const std::size_t row_bytes = static_cast<std::size_t>(k) * dtype_size(v.type);
    const tensor_view rows{v.name, v.type, {r1 - r0, k},
                           v.bytes.subspan(static_cast<std::size_t>(r0) * row_bytes, static_cast<std::size_t>(r1 - r0) * row_bytes)};
    return nvfp4_layout::amax_of(rows);
}

}  // namespace detail

QFORGE_DECL void fused_amax_cache::index(const plan& p) {
    for (std::size_t j = 0; j < p.items.size(); ++j)
        if (p.items[j].action == plan_action::quantize)
            if (std::string key = fused_group_key(p.items[j].name); !key.empty()) {
                members_[key].push_back(j);
                by_source_[p.items[j].source].push_back(j);
            }
    indexed_ = true;
}

}  // namespace qforge
#endif
