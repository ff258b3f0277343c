// The body of convert/gguf/dry_run.hpp, included by that header under QFORGE_BODIES_HERE:
// the plan and type choices of the GGUF converter, without its tensor stream.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/gguf/detail/conversion.hpp"
#include "qforge/convert/gguf/dry_run.hpp"
#include "qforge/convert/serving_check.hpp"
#include "qforge/io/gguf/writer.hpp"

namespace qforge::gguf {

namespace detail {

/// Tensors whose input dimension (ne[0]) vLLM's GGUF loader and llama.cpp's row split shard.
inline bool is_row_parallel(const std::string& gguf_name) {
    return gguf_name.find("attn_output.") != std::string::npos || gguf_name.find("ffn_down") != std::string::npos;
}

inline dry_run_tensor dry_run_entry(const planned_tensor& p, std::span<const int> tp) {
    dry_run_tensor t{p.parts.front(), p.decl.name, p.decl.ne, p.decision.requested, p.decision.chosen,
                     p.decision.fallback, tensor_nbytes(p.decl), is_row_parallel(p.decl.name), {}};
    const std::int64_t block = traits_of(t.chosen).block_elems;
    for (const int d : tp)
        t.tp_refusals.push_back(t.row_parallel && t.ne.size() >= 2 ? gguf_shard_refusal(t.ne[0], block, d) : std::nullopt);
    return t;
}

}  // namespace detail

/// The plan of convert_hf_to_gguf(src_dir, ..., opt) and the block check for each degree of `tp`.
#if QFORGE_BODIES_HERE
QFORGE_DECL dry_run_report dry_run_hf_to_gguf(const std::string& src_dir, const convert_options& opt, std::span<const int> tp) {
    const checkpoint_source src(src_dir);
    const detail::model_hparams h = detail::read_hparams(src.config(), src_dir + "/config.json");
    std::int64_t n_vocab = 0;
    std::vector<detail::planned_tensor> plan = detail::plan_tensors(src, h, src_dir, n_vocab);
    detail::choose_types(plan, h, opt);
    dry_run_report r{h.arch_name, std::vector<int>(tp.begin(), tp.end()), {}, 0, 0};
    for (const auto& p : plan) {
        r.tensors.push_back(detail::dry_run_entry(p, tp));
        std::int64_t n = 1;
        for (auto d : p.decl.ne) n *= d;
        r.total_elements += static_cast<std::uint64_t>(n);
        r.total_bytes += r.tensors.back().bytes;
    }
    return r;
}

/// One line per tensor (name, ne, type, fallback), then per degree the tensors whose shards
/// break a block and a verdict line.
QFORGE_DECL void print_dry_run(std::ostream& os, const dry_run_report& r) {
    os << "GGUF plan (" << r.arch << "): " << r.tensors.size() << " tensors, " << r.bits_per_weight() << " bits per weight\n";
    for (const auto& t : r.tensors) {
        std::string ne;
        for (auto d : t.ne) ne += (ne.empty() ? "" : "x") + std::to_string(d);
        os << "  " << t.gguf_name << " [" << ne << "] " << type_name(t.chosen);
        if (!t.fallback.empty()) os << " (fallback: " << t.fallback << ")";
        os << "\n";
    }
    for (std::size_t i = 0; i < r.tp.size(); ++i) {
        std::size_t bad = 0;
        for (const auto& t : r.tensors)
            if (t.tp_refusals[i]) {
                os << "serving tp=" << r.tp[i] << ": " << t.gguf_name << " (" << type_name(t.chosen) << "): " << *t.tp_refusals[i] << "\n";
                ++bad;
            }
        os << "serving tp=" << r.tp[i] << ": "
           << (bad ? std::to_string(bad) + " row-parallel tensor(s) break a quant block" : std::string("every row-parallel shard holds whole blocks"))
           << "\n";
    }
}
#endif

}  // namespace qforge::gguf
