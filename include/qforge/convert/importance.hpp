// Per-input-column importance of a Hugging Face weight, from a llama.cpp imatrix
// (io/gguf/imatrix.hpp): which imatrix entry holds a weight's statistics, and which of its
// matrices. An imatrix is keyed by GGUF names, and llama.cpp stacks an MoE layer's experts
// into one 3-D weight, so expert e of `model.layers.L.mlp.experts.e.gate_proj` is matrix e of
// `blk.L.ffn_gate_exps.weight` (LC gguf-py/gguf/tensor_mapping.py MODEL_TENSOR.FFN_*_EXP,
// FFN_*_SHEXP, FFN_GATE_INP; Mixtral's w1/w3/w2 are gate/up/down). Dense names follow
// convert/gguf/name_map.hpp. The importance of column k is the mean of x_k^2 over the
// calibration tokens, the same for every output row and for every part of a fused q/k/v or
// gate/up (they share their input).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/gguf/name_map.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/gguf/imatrix.hpp"

namespace qforge {

/// Where a weight's statistics live in an imatrix.
struct imatrix_location {
    std::string entry;         ///< GGUF weight name, e.g. "blk.3.ffn_up_exps.weight"
    std::int64_t expert = -1;  ///< matrix of a stacked-experts entry, -1 for a plain weight
};

namespace detail {

struct expert_suffix {
    std::string_view hf, gguf;
};

/// "<prefix><e>.<rest>" with e a decimal number: e and rest.
QFORGE_DECL bool split_expert(std::string_view s, std::string_view prefix, std::int64_t& e, std::string_view& rest);

QFORGE_DECL std::optional<imatrix_location> moe_location(int layer, std::string_view rest);

}  // namespace detail

/// The imatrix entry of an HF weight name, or nothing for a tensor llama.cpp has no name for.
QFORGE_DECL std::optional<imatrix_location> imatrix_location_of(std::string_view hf_weight);

/// THE imatrix lookup, for both converters: entries read from the file once and kept until
/// another is asked for (the experts of one stacked entry come one after another in a
/// conversion, and a GGUF conversion asks for each tensor's entry once). The safetensors
/// converter asks by Hugging Face weight name (find); the GGUF converter by GGUF name (entry),
/// applying llama-quantize's rules to what it gets (convert/gguf/converter.hpp).
class importance_lookup {
public:
    explicit importance_lookup(const gguf::importance_matrix& m) : m_(&m) {}

    const gguf::importance_matrix& matrix() const noexcept { return *m_; }

    /// The entry of GGUF weight `gguf_name`, or null when the imatrix has none. Valid until
    /// the next lookup.
    const gguf::imatrix_entry* entry(std::string_view gguf_name);

    /// The importance of the `cols` input columns of `hf_weight`, or an empty span when the
    /// imatrix has no entry for it (the caller reports the weight as quantized without one).
    /// An entry of the wrong size is a shape_error naming the imatrix and the entry, as in
    /// llama-quantize ("imatrix size %d is different from tensor size %d", LC src/llama-quant.cpp).
    std::span<const float> find(std::string_view hf_weight, std::int64_t cols);

private:
    const gguf::importance_matrix* m_;
    std::string cached_name_;
    std::optional<gguf::imatrix_entry> cached_;
};

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {
namespace detail {

QFORGE_DECL bool split_expert(std::string_view s, std::string_view prefix, std::int64_t& e, std::string_view& rest) {
    if (!s.starts_with(prefix)) return false;
    s.remove_prefix(prefix.size());
    const auto dot = s.find('.');
    if (dot == 0 || dot == std::string_view::npos || dot > 6) return false;
    e = 0;
    for (char c : s.substr(0, dot)) {
        if (c < '0' || c > '9') return false;
        e = e * 10 + (c - '0');
    }
    rest = s.substr(dot + 1);
    return true;
}

QFORGE_DECL std::optional<imatrix_location> moe_location(int layer, std::string_view rest) {
    const std::string blk = "blk." + std::to_string(layer) + ".";
    static constexpr expert_suffix experts[] = {
        {"gate_proj.weight", "ffn_gate_exps.weight"}, {"up_proj.weight", "ffn_up_exps.weight"},
        {"down_proj.weight", "ffn_down_exps.weight"}, {"w1.weight", "ffn_gate_exps.weight"},
        {"w3.weight", "ffn_up_exps.weight"},          {"w2.weight", "ffn_down_exps.weight"}};
    for (std::string_view prefix : {std::string_view("mlp.experts."), std::string_view("block_sparse_moe.experts.")}) {
        std::int64_t e = 0;
        std::string_view tail;
        if (!split_expert(rest, prefix, e, tail)) continue;
        for (const auto& x : experts)
            if (tail == x.hf) return imatrix_location{blk + std::string(x.gguf), e};
        return std::nullopt;
    }
    static constexpr expert_suffix shared[] = {{"gate_proj.weight", "ffn_gate_shexp.weight"},
                                               {"up_proj.weight", "ffn_up_shexp.weight"},
                                               {"down_proj.weight", "ffn_down_shexp.weight"}};
    for (std::string_view prefix : {std::string_view("mlp.shared_expert."), std::string_view("mlp.shared_experts.")})
        if (rest.starts_with(prefix))
            for (const auto& x : shared)
                if (rest.substr(prefix.size()) == x.hf) return imatrix_location{blk + std::string(x.gguf), -1};
    if (rest == "mlp.gate.weight" || rest == "block_sparse_moe.gate.weight")
        return imatrix_location{blk + "ffn_gate_inp.weight", -1};
    return std::nullopt;
}

}  // namespace detail

QFORGE_DECL std::optional<imatrix_location> imatrix_location_of(std::string_view hf_weight) {
    // The permutation and head counts do not matter for names.
    if (auto m = gguf::map_hf_name(hf_weight, gguf::hf_arch::qwen2, 1, 1)) return imatrix_location{m->gguf, -1};
    int layer = -1;
    std::string_view rest;
    if (!gguf::detail::parse_layer(hf_weight, layer, rest)) return std::nullopt;
    return detail::moe_location(layer, rest);
}


QFORGE_DECL const gguf::imatrix_entry* importance_lookup::entry(std::string_view gguf_name) {
    if (!m_->contains(gguf_name)) return nullptr;
    if (!cached_ || cached_name_ != gguf_name) {
        cached_ = m_->load(gguf_name);
        cached_name_ = std::string(gguf_name);
    }
    return cached_ ? &*cached_ : nullptr;
}

QFORGE_DECL std::span<const float> importance_lookup::find(std::string_view hf_weight, std::int64_t cols) {
    const auto loc = imatrix_location_of(hf_weight);
    const gguf::imatrix_entry* found = loc ? entry(loc->entry) : nullptr;
    if (!found) return {};
    const gguf::imatrix_entry& e = *found;
    const auto n = static_cast<std::int64_t>(e.values.size());
    const std::int64_t mats = e.n_per_row > 0 ? e.n_mat : (cols > 0 && n % cols == 0 ? n / cols : 0);
    const std::int64_t want = loc->expert < 0 ? 0 : loc->expert;
    if (!e.fits(cols, mats) || (loc->expert < 0 && mats != 1) || want >= mats)
        fail<shape_error>(m_->path(), loc->entry,
                          "imatrix has " + std::to_string(n) + " values, but " + std::string(hf_weight) + " needs " +
                              std::to_string(cols) + " per matrix" +
                              (loc->expert >= 0 ? " for expert " + std::to_string(loc->expert) : std::string()));
    return e.matrix(want, cols);
}

}  // namespace qforge
#endif
