// Which engines will load a plan's checkpoint, with which kernel, at which tensor-parallel
// degree, and what they will decode: the plan-time serving check behind `qforge-convert --dry-run
// --tp 1,2,4,8`, and the loader warnings every plan carries.
//
// Every rule here is a loader's, read in its source (cited at each rule; tests/convert/
// test_serving_check.cpp pins them on generated checkpoints). Sharding is vLLM's: q/k/v,
// gate/up and lm_head are column-parallel (N split by tp; q/k/v and gate/up fused into one
// partition, qkv N = (heads/tp + 2 * max(1, kv_heads/tp)) * head_dim), o_proj and down_proj
// row-parallel (K split by tp). Nothing is padded except where a loader says it pads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/format.hpp"
#include "qforge/convert/loaded_scales.hpp"
#include "qforge/convert/model_config.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/regex.hpp"
#include "qforge/layout/checkpoint_rules.hpp"

namespace qforge {

/// One kernel's (or weight loader's) verdict on one rank's partition of a linear.
struct kernel_verdict {
    std::string kernel;  ///< "vLLM Marlin", "vLLM CPUWNA16LinearKernel", "vLLM weight loader"
    bool ok = true;
    std::string why;     ///< the loader's failing condition, with the numbers
};

/// One linear (vLLM's fused name for q/k/v and gate/up) at one tensor-parallel degree.
struct shard_check {
    std::string module;
    int tp = 1;
    bool row_parallel = false;
    std::int64_t n = 0, k = 0;  ///< one rank's partition: output (fused parts summed) and input size
    std::vector<kernel_verdict> kernels;
    bool loads_gpu = true;   ///< vLLM on CUDA loads it (Marlin or another kernel)
    bool marlin = true;      ///< ... with the Marlin kernel
    bool loads_cpu = true;   ///< vLLM on CPU loads it (CPUWNA16LinearKernel)
};

struct serving_report {
    output_format format = output_format::gptq;
    std::vector<int> tps;
    std::size_t moe_experts_skipped = 0;  ///< expert linears: FusedMoE has its own rules (not checked here)
    std::vector<shard_check> shards;
    std::vector<std::string> config_refusals;  ///< the whole config refused by an engine (no tp helps)

    bool loads_gpu(int tp) const { return all(tp, &shard_check::loads_gpu) && gpu_config_ok; }
    bool loads_cpu(int tp) const { return all(tp, &shard_check::loads_cpu) && cpu_config_ok; }
    bool marlin(int tp) const { return all(tp, &shard_check::marlin) && gpu_config_ok; }
    bool gpu_config_ok = true, cpu_config_ok = true;

private:
    bool all(int tp, bool shard_check::*flag) const;
};

namespace detail {

/// vLLM's parallel linear of a module: column (N split) or row (K split).
QFORGE_DECL bool is_row_parallel(std::string_view module);

/// The fused partition a column-parallel module belongs to: (vLLM name, its parts).
QFORGE_DECL std::optional<std::pair<std::string, std::vector<std::string_view>>> fused_of(std::string_view module);

/// vLLM pads the vocabulary of ParallelLMHead to a multiple of 64
/// (vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE, pad_vocab_size) before splitting it.
inline std::int64_t padded_vocab(std::int64_t v) { return (v + 63) / 64 * 64; }

inline std::string num(std::int64_t v) { return std::to_string(v); }

}  // namespace detail

/// The vLLM rules for one rank's partition [n x k] of a linear quantized with `s` in `f`
/// (`parts_n`: each fused part's N on this rank; `k_full`: the unsplit K).
QFORGE_DECL std::vector<kernel_verdict> vllm_kernel_rules(output_format f, const quant_spec& s, std::int64_t n,
                                                          std::int64_t k, std::int64_t k_full,
                                                          std::span<const std::int64_t> parts_n, bool row_parallel);

/// Why vLLM refuses the whole config before any shape is looked at, or nullopt: the format's
/// vllm_config_refusal (GPTQ: AutoGPTQConfig.TYPE_MAP; AWQ: AutoAWQConfig.TYPE_MAP).
QFORGE_DECL std::optional<std::string> vllm_config_refusal(output_format f, const quant_spec& s);

/// The serving check: every quantized linear of `p` at every degree in `tps`.
QFORGE_DECL serving_report check_serving(const plan& p, const model_config& cfg, std::span<const int> tps);

/// llama.cpp / vLLM GGUF: a row-parallel shard must hold whole quant blocks along K (32 weights
/// for Q4_0/Q8_0, 256 for the K-quants; ggml.c type_traits blck_size).
QFORGE_DECL std::optional<std::string> gguf_shard_refusal(std::int64_t k, std::int64_t block, int tp);

/// The --dry-run table: one line per linear and degree that some engine refuses, then a
/// summary per degree (which vLLM targets load it, with which kernel).
/// Blocks whose linear fails the same way are one line ("model.layers.0.mlp.down_proj and 4
/// more like it").
QFORGE_DECL void print_serving(std::ostream& os, const serving_report& r);

namespace detail {

/// gpt-oss's experts written one expert at a time (convert/fused_experts.hpp cuts the fused
/// [E, H, 2I] tensors into `<L>.mlp.experts.<e>.gate_proj/up_proj/down_proj`), which neither
/// engine that serves gpt-oss reads back:
///  - vLLM model_executor/models/gpt_oss.py (@1ad84fea, 2026-07): GptOssModel.load_weights
///    sends every quant_method but "mxfp4" and "quark" (and an unquantized model) to
///    _load_weights_other, which loads experts only as the fused `.w13_weight` / `.w2_weight`
///    that GptOssForCausalLM.hf_to_vllm_mapper makes of `experts.gate_up_proj` / `down_proj`
///    (sliced per rank, then copied whole); any name not in params_dict is skipped
///    (`if name not in params_dict: continue`), and model_loader/default_loader.py tracks
///    missing weights only for an unquantized model, so a quantized model loads with its
///    experts never written. get_expert_mapping is "only used for quark".
///  - transformers: conversion_mapping.py has no gpt_oss rule that gathers per-expert names
///    into GptOssExperts' fused parameters (qwen2_moe's MergeModulelist + Concatenate has no
///    gpt_oss twin), and quantizer_compressed_tensors.py update_weight_conversions only
///    extends a model's existing expert converters, so they load as unexpected keys and the
///    fused experts stay at their initialization.
QFORGE_DECL std::string gpt_oss_per_expert_warning();

}  // namespace detail

/// What loaders will do differently from what the plan writes, one sentence per fact, each
/// naming the engine and the loader rule. Empty for a checkpoint every engine it names reads as
/// written. `require_w4a8`: the plan is the w4a8-cpu preset's (vLLM CPU W4A8 is the point).
QFORGE_DECL std::vector<std::string> loader_warnings(const plan& p, const model_config& cfg, bool require_w4a8 = false);

/// Refusals for a plan that must load in vLLM CPU's W4A8 kernel (the w4a8-cpu preset): every
/// linear the CPU kernel cannot take at tp 1, with the engine and the reason.
QFORGE_DECL std::vector<std::string> w4a8_cpu_refusals(const plan& p, const model_config& cfg);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {
namespace detail {

QFORGE_DECL bool is_row_parallel(std::string_view module) {
    const std::string_view leaf = split_leaf(module).second;
    return leaf == "o_proj" || leaf == "down_proj" || leaf == "dense" || leaf == "out_proj" || leaf == "w2" ||
           leaf == "c_proj" || leaf == "dense_4h_to_h";
}

QFORGE_DECL std::optional<std::pair<std::string, std::vector<std::string_view>>> fused_of(std::string_view module) {
    const auto [parent, leaf] = split_leaf(module);
    for (const fused_set& s : default_fused_sets())
        for (std::string_view part : s.parts)
            if (part == leaf) return std::pair{std::string(parent) + "." + std::string(s.fused), s.parts};
    return std::nullopt;
}

/// Codes per int32 word along the packed dimension: the format's vllm_pack_unit (GPTQ 3-bit:
/// 32 codes per 3 words), else floor(32/b) (dense 2/4/8 bits, compressed-tensors' padded rows).
inline std::int64_t pack_unit(output_format f, int bits) {
    return visit_format(f, [&](auto t) -> std::int64_t {
        if constexpr (requires { decltype(t)::vllm_pack_unit(bits); }) return decltype(t)::vllm_pack_unit(bits);
        else return 32 / bits;
    });
}

/// The format's name in prose (its display_name, e.g. "AWQ"), else its table name.
inline std::string_view display_name(output_format f) {
    return visit_format(f, [](auto t) -> std::string_view {
        if constexpr (requires { decltype(t)::display_name; }) return decltype(t)::display_name;
        else return decltype(t)::name;
    });
}

/// AWQ-style formats pack N (their vllm_n_pack_factor), not K; 0 for a format that packs K.
inline std::int64_t n_pack_factor(output_format f) {
    return visit_format(f, [](auto t) -> std::int64_t {
        if constexpr (requires { decltype(t)::vllm_n_pack_factor; }) return decltype(t)::vllm_n_pack_factor;
        else return 0;
    });
}

/// Whether the zero points of `f` pack along N for a scheme of this symmetry (GPTQ qzeros
/// always; compressed-tensors weight_zero_point only when asymmetric).
inline bool zeros_along_n(output_format f, bool symmetric) {
    return visit_format(f, [&](auto t) -> bool {
        if constexpr (requires { decltype(t)::vllm_zeros_along_n(symmetric); }) return decltype(t)::vllm_zeros_along_n(symmetric);
        else return true;
    });
}

/// Whether `f` stores zero points whatever the scheme's symmetry (AWQ).
inline bool stores_zero_points(output_format f) {
    return visit_format(f, [](auto t) -> bool {
        if constexpr (requires { decltype(t)::stores_zero_points; }) return decltype(t)::stores_zero_points;
        else return false;
    });
}

/// The format's own vLLM CPU kernel rule (AWQ's cpu_awq), or nullopt for CPUWNA16.
inline std::optional<kernel_verdict> own_cpu_kernel(output_format f, const quant_spec& s, std::int64_t n, std::int64_t k,
                                                    std::int64_t g) {
    return visit_format(f, [&](auto t) -> std::optional<kernel_verdict> {
        using T = decltype(t);
        if constexpr (requires { T::vllm_cpu_refusal(s.bits, n, k, g); }) {
            kernel_verdict v{std::string(T::vllm_cpu_kernel), true, {}};
            if (auto why = T::vllm_cpu_refusal(s.bits, n, k, g)) {
                v.ok = false;
                v.why = std::move(*why);
            }
            return v;
        } else {
            return std::nullopt;
        }
    });
}

/// How the report names a CPU load of `f`: its own kernel's words, else CPUWNA16's.
inline std::string_view cpu_loads_text(output_format f) {
    return visit_format(f, [](auto t) -> std::string_view {
        if constexpr (requires { decltype(t)::vllm_cpu_loads; }) return decltype(t)::vllm_cpu_loads;
        else return "loads (CPUWNA16)";
    });
}

/// A module's name with its block and expert numbers replaced by N: the key that groups the
/// same linear of every block in messages.
inline std::string numbered_as_n(std::string_view module) {
    static const regex number(R"(\.[0-9]+(?=\.|$))");
    return number.replace(module, ".N");
}

}  // namespace detail

QFORGE_DECL std::vector<kernel_verdict> vllm_kernel_rules(output_format f, const quant_spec& s, std::int64_t n,
                                                          std::int64_t k, std::int64_t k_full,
                                                          std::span<const std::int64_t> parts_n, bool row_parallel) {
    std::vector<kernel_verdict> out;
    const std::int64_t g = s.group_size > 0 && s.group_size < k_full ? s.group_size : -1;
    const std::int64_t unit = detail::pack_unit(f, s.bits);
    // Weight loader: scales and zeros are sharded by whole groups along K
    // (auto_gptq.py AutoGPTQLinearMethod.create_weights: scales_and_zp_size =
    // input_size_per_partition // group_size; awq.py AWQLinearMethod.create_weights raises
    // "The input size is not aligned with the quantized weight shape").
    kernel_verdict loader{"vLLM weight loader", true, {}};
    auto refuse = [](kernel_verdict& v, std::string why) {
        if (!v.ok) return;
        v.ok = false;
        v.why = std::move(why);
    };
    if (row_parallel && g > 0 && k % g != 0)
        refuse(loader, "K per rank " + detail::num(k) + " is not a multiple of group " + detail::num(g));
    if (const std::int64_t npf = detail::n_pack_factor(f)) {
        // The format packs N (AWQ: qweight [K, N/8], qzeros [G, N/8]).
        for (std::int64_t pn : parts_n)
            if (pn % npf != 0)
                refuse(loader, "N per rank " + detail::num(pn) + " is not a multiple of " + std::string(detail::display_name(f)) +
                                   "'s pack factor " + detail::num(npf));
    } else {
        // GPTQ qweight and compressed-tensors weight_packed pack K (PackedvLLMParameter packed_dim
        // along the input); GPTQ qzeros and CT asym weight_zero_point pack N.
        if (row_parallel && k % unit != 0)
            refuse(loader, "K per rank " + detail::num(k) + " does not fill whole int32 words of " + detail::num(unit) + " codes");
        if (detail::zeros_along_n(f, s.symmetric))
            for (std::int64_t pn : parts_n)
                if (pn % unit != 0)
                    refuse(loader, "N per rank " + detail::num(pn) + " does not fill whole int32 words of packed zeros (" +
                                       detail::num(unit) + " per word)");
    }
    out.push_back(loader);
    // Marlin (utils/marlin_utils.py verify_marlin_supports_shape @007d5005): N per rank a
    // multiple of GPTQ_MARLIN_MIN_THREAD_N = 64, K per rank of GPTQ_MARLIN_MIN_THREAD_K = 128,
    // and of the group; MARLIN_SUPPORTED_GROUP_SIZES = [-1, 32, 64, 128]; types uint4b8 /
    // uint8b128 without zero points, uint4 with them (query_marlin_supported_quant_types).
    kernel_verdict marlin{"vLLM Marlin", true, {}};
    const bool zp = detail::stores_zero_points(f) || !s.symmetric;
    if (zp ? s.bits != 4 : (s.bits != 4 && s.bits != 8))
        refuse(marlin, std::string("no Marlin type for ") + detail::num(s.bits) + "-bit " + (zp ? "with zero points" : "symmetric"));
    if (g > 0 && g != 32 && g != 64 && g != 128) refuse(marlin, "group " + detail::num(g) + " is not in [-1, 32, 64, 128]");
    if (n % 64 != 0) refuse(marlin, "N per rank " + detail::num(n) + " is not a multiple of min_thread_n 64");
    if (k % 128 != 0) refuse(marlin, "K per rank " + detail::num(k) + " is not a multiple of min_thread_k 128");
    out.push_back(marlin);
    if (auto own = detail::own_cpu_kernel(f, s, n, k, g)) {  // AWQ: cpu_awq (layout/awq.hpp)
        out.push_back(std::move(*own));
        return out;
    }
    // CPU (kernels/linear/mixed_precision/cpu.py CPUWNA16LinearKernel.can_implement): uint4 or
    // uint4b8 only, group even or -1, partition K and N (fused) multiples of 32.
    kernel_verdict cpu{"vLLM CPUWNA16LinearKernel", true, {}};
    if (s.bits != 4) refuse(cpu, "CPUWNA16 holds 4-bit types only, not " + detail::num(s.bits) + "-bit");
    if (g > 0 && g % 2 != 0) refuse(cpu, "group " + detail::num(g) + " is odd");
    if (k % 32 != 0) refuse(cpu, "input size " + detail::num(k) + " is not a multiple of 32");
    if (n % 32 != 0) refuse(cpu, "output size " + detail::num(n) + " (of the fused partition) is not a multiple of 32");
    out.push_back(cpu);
    return out;
}

QFORGE_DECL std::optional<std::string> vllm_config_refusal(output_format f, const quant_spec& s) {
    return visit_format(f, [&](auto t) -> std::optional<std::string> {
        const layout_scheme ls{s.bits, s.group_size, s.symmetric, s.scale_dtype};
        if constexpr (requires { decltype(t)::vllm_config_refusal(ls); }) return decltype(t)::vllm_config_refusal(ls);
        else return std::nullopt;
    });
}

QFORGE_DECL serving_report check_serving(const plan& p, const model_config& cfg, std::span<const int> tps) {
    serving_report r;
    r.format = p.format;
    r.tps.assign(tps.begin(), tps.end());
    struct unit {
        std::string module;
        bool row = false;
        std::vector<const plan_item*> parts;
    };
    std::vector<unit> units;
    for (const auto& it : p.items) {
        if (it.action != plan_action::quantize || it.shape.size() != 2) continue;
        const std::string module(module_of(it.name));
        if (module.find(".experts.") != std::string::npos) {
            ++r.moe_experts_skipped;
            continue;
        }
        if (auto v = vllm_config_refusal(p.format, it.scheme)) {
            const std::string line = module + ": " + *v;
            if (std::find(r.config_refusals.begin(), r.config_refusals.end(), line) == r.config_refusals.end())
                r.config_refusals.push_back(line);
            r.gpu_config_ok = r.cpu_config_ok = false;
        }
        const auto fused = detail::is_row_parallel(module) ? std::nullopt : detail::fused_of(module);
        const std::string name = fused ? fused->first : module;
        auto u = std::find_if(units.begin(), units.end(), [&](const unit& x) { return x.module == name; });
        if (u == units.end()) {
            units.push_back({name, detail::is_row_parallel(module), {}});
            u = units.end() - 1;
        }
        u->parts.push_back(&it);
    }
    for (int tp : tps) {
        for (const unit& u : units) {
            shard_check c;
            c.module = u.module;
            c.tp = tp;
            c.row_parallel = u.row;
            const plan_item& first = *u.parts.front();
            const std::int64_t k_full = first.shape[1];
            std::vector<std::int64_t> parts_n;
            kernel_verdict split{"vLLM tensor parallel", true, {}};
            auto refuse = [&](std::string why) {
                if (split.ok) split = {"vLLM tensor parallel", false, std::move(why)};
            };
            if (u.row) {
                if (k_full % tp != 0) refuse("K " + detail::num(k_full) + " does not split into " + detail::num(tp) + " ranks");
                c.k = k_full / tp;
                c.n = first.shape[0];
                parts_n.push_back(c.n);
            } else {
                c.k = k_full;
                for (const plan_item* part : u.parts) {
                    const std::string_view leaf = detail::split_leaf(module_of(part->name)).second;
                    std::int64_t rows = part->shape[0];
                    if (detail::split_leaf(module_of(part->name)).second == "lm_head") rows = detail::padded_vocab(rows);
                    std::int64_t per_rank = rows / tp;
                    // QKVParallelLinear: heads split by tp; kv heads split, or replicated when
                    // tp > kv_heads (then tp must be a multiple of kv_heads).
                    if ((leaf == "k_proj" || leaf == "v_proj") && cfg.num_key_value_heads > 0 && cfg.head_dim > 0 &&
                        tp > cfg.num_key_value_heads) {
                        if (tp % cfg.num_key_value_heads != 0)
                            refuse(detail::num(tp) + " ranks are not a multiple of " + detail::num(cfg.num_key_value_heads) + " kv heads");
                        per_rank = cfg.head_dim;
                    } else if (rows % tp != 0) {
                        refuse(std::string(leaf) + " N " + detail::num(rows) + " does not split into " + detail::num(tp) + " ranks");
                    }
                    if (leaf == "q_proj" && cfg.num_attention_heads > 0 && cfg.num_attention_heads % tp != 0)
                        refuse(detail::num(cfg.num_attention_heads) + " attention heads do not split into " + detail::num(tp) + " ranks");
                    parts_n.push_back(per_rank);
                    c.n += per_rank;
                }
            }
            c.kernels.push_back(split);
            for (auto& v : vllm_kernel_rules(p.format, first.scheme, c.n, c.k, k_full, parts_n, u.row)) c.kernels.push_back(v);
            c.loads_gpu = c.kernels[0].ok && c.kernels[1].ok;
            c.marlin = c.loads_gpu && c.kernels[2].ok;
            c.loads_cpu = c.loads_gpu && c.kernels[3].ok;
            r.shards.push_back(std::move(c));
        }
    }
    return r;
}

QFORGE_DECL std::optional<std::string> gguf_shard_refusal(std::int64_t k, std::int64_t block, int tp) {
    if (k % tp != 0) return "K " + detail::num(k) + " does not split into " + detail::num(tp) + " ranks";
    if ((k / tp) % block != 0)
        return "K per rank " + detail::num(k / tp) + " is not a multiple of the " + detail::num(block) + "-weight block";
    return std::nullopt;
}

QFORGE_DECL void print_serving(std::ostream& os, const serving_report& r) {
    for (const auto& line : r.config_refusals) os << "serving: " << line << "\n";
    struct line {
        int tp;
        std::string key, text, first;
        int more = 0;
    };
    std::vector<line> lines;
    for (const auto& s : r.shards) {
        std::string text;
        for (const auto& k : s.kernels)
            if (!k.ok) text += " " + k.kernel + ": " + k.why + ";";
        if (text.empty()) continue;
        text = " [" + detail::num(s.n) + " x " + detail::num(s.k) + " per rank, " + (s.row_parallel ? "row" : "column") +
               "-parallel]:" + text;
        const std::string key = detail::numbered_as_n(s.module) + text;
        auto it = std::find_if(lines.begin(), lines.end(), [&](const line& l) { return l.tp == s.tp && l.key == key; });
        if (it == lines.end()) lines.push_back({s.tp, key, text, s.module, 0});
        else ++it->more;
    }
    for (const auto& l : lines) {
        os << "serving: tp " << l.tp << " " << l.first;
        if (l.more) os << " (and " << l.more << " more like it)";
        os << l.text << "\n";
    }
    if (r.moe_experts_skipped)
        os << "serving: " << r.moe_experts_skipped << " MoE expert linears not checked here (FusedMoE has its own rules)\n";
    for (int tp : r.tps) {
        os << "serving: tp " << tp << ": vLLM GPU " << (r.loads_gpu(tp) ? (r.marlin(tp) ? "loads (Marlin)" : "loads (Marlin refused on some layers: another kernel)") : "refused")
           << ", vLLM CPU "
           << (r.loads_cpu(tp) ? detail::cpu_loads_text(r.format) : "refused") << "\n";
    }
}

namespace detail {

/// w4a8-cpu on a model vLLM serves in fp16: the W4A16 kernel runs, not the preset's W4A8.
/// AutoGPTQLinearMethod.create_weights passes act_type=params_dtype (auto_gptq.py @055e47c2);
/// CPUWNA16LinearKernel.process_weights_after_loading sets use_w4a8 = VLLM_CPU_INT4_W4A8 and
/// not has_g_idx and act_type == torch.bfloat16 and AMX (kernels/linear/mixed_precision/cpu.py),
/// else _process_gptq_weights_w4a16 + cpu_gemm_wna16 with _get_isa_hint(scales dtype), "amx"
/// for bfloat16 scales only.
inline std::string w4a8_on_fp16_warning(dtype model) {
    return "vLLM CPU takes the W4A16 path (cpu_gemm_wna16), not W4A8, for a " + std::string(dtype_name(model)) +
           " model: vLLM serves it in " + std::string(dtype_name(model)) +
           " (params_dtype from torch_dtype), AutoGPTQLinearMethod.create_weights passes act_type=params_dtype, and "
           "CPUWNA16LinearKernel sets use_w4a8 only when the activation dtype is bfloat16 (cpu.py "
           "process_weights_after_loading); the BF16 scales are also rounded to " + std::string(dtype_name(model)) +
           ", which sends cpu_gemm_wna16 to its 'vec' ISA, not AMX (_get_isa_hint). Serve with --dtype bfloat16 to get "
           "W4A8 (int4_scaled_mm_cpu, with the scales as written and the report's SNR what it decodes; the fp16 dense "
           "weights are then rounded to bf16), or export with --preset gptq-w4g128 for an fp16 GPU/CPU W4A16 checkpoint";
}

QFORGE_DECL std::string gpt_oss_per_expert_warning() {
    return "no engine loads gpt-oss experts written per expert (<layer>.mlp.experts.<e>.gate_proj/up_proj/down_proj), "
           "as this checkpoint writes them: vLLM's gpt-oss loader (model_executor/models/gpt_oss.py "
           "_load_weights_other) reads its experts only as the fused experts.gate_up_proj / down_proj and skips "
           "other names without an error (a quantized model then serves experts that were never loaded), and "
           "transformers maps no per-expert names back into GptOssExperts. Serve gpt-oss from its native MXFP4 "
           "checkpoint, which convert_gpt_oss_mxfp4 (qforge-convert --format gpt-oss-mxfp4) writes from a float gpt-oss";
}

}  // namespace detail

QFORGE_DECL std::vector<std::string> loader_warnings(const plan& p, const model_config& cfg, bool require_w4a8) {
    std::vector<std::string> w;
    const bool gpt_oss_cut =
        cfg.model_type == "gpt_oss" && std::any_of(p.items.begin(), p.items.end(), [](const plan_item& it) { return it.cut.has_value(); });
    if (gpt_oss_cut) w.push_back(detail::gpt_oss_per_expert_warning());
    const plan_item* first = nullptr;
    bool asym = false, lm_head = false, mixed = false;
    for (const auto& it : p.items) {
        if (it.action != plan_action::quantize) continue;
        if (!first) first = &it;
        asym = asym || !it.scheme.symmetric;
        lm_head = lm_head || detail::split_leaf(module_of(it.name)).second == "lm_head";
        mixed = mixed || it.scheme.bits != first->scheme.bits || it.scheme.group_size != first->scheme.group_size ||
                it.scheme.symmetric != first->scheme.symmetric;
    }
    if (!first) return w;
    // vLLM's params_dtype (loaded_scales.hpp): config.json's torch_dtype, float32 served as
    // bfloat16; the dtype the source tensors are stored in (FP8, an F32 twin) does not decide it.
    const dtype model = vllm_params_dtype(p);
    const dtype scales = first->scheme.scale_dtype.value_or(default_scale_dtype(p.format, model));
    serving_facts facts;
    facts.bits = first->scheme.bits;
    facts.asymmetric = asym;
    facts.lm_head = lm_head;
    facts.mixed_schemes = mixed;
    facts.model = model;
    facts.scales = scales;
    facts.linears = p.linears;
    facts.has_config = p.quantization_config.is_object();
    facts.w4a8 = require_w4a8;
    visit_format(p.format, [&](auto t) {
        if constexpr (requires { decltype(t)::vllm_scheme_warnings(facts, w); }) decltype(t)::vllm_scheme_warnings(facts, w);
    });
    if (require_w4a8 && model != dtype::BF16) w.push_back(detail::w4a8_on_fp16_warning(model));
    visit_format(p.format, [&](auto t) {
        if constexpr (requires { decltype(t)::vllm_layer_warnings(facts, w); }) decltype(t)::vllm_layer_warnings(facts, w);
    });
    // vLLM's CPU kernel at tp 1 (a warning: GPU kernels may still serve it).
    const int one = 1;
    const serving_report r = check_serving(p, cfg, std::span<const int>(&one, 1));
    if (r.gpu_config_ok) {
        std::vector<std::pair<std::string, int>> seen;  // (block-relative name + reason, index into w)
        for (const auto& s : r.shards) {
            if (!s.loads_gpu || s.loads_cpu || s.kernels[3].why.find("4-bit types only") != std::string::npos ||
                s.kernels[3].why.find("4 bits only") != std::string::npos)
                continue;
            const auto b = loader_match::split_block(s.module);
            const std::string key = detail::numbered_as_n(s.module) + s.kernels[3].why;
            auto at = std::find_if(seen.begin(), seen.end(), [&](const auto& x) { return x.first == key; });
            if (at != seen.end()) continue;
            seen.emplace_back(key, static_cast<int>(w.size()));
            w.push_back("vLLM CPU cannot load " + s.module + (b ? " (and the same linear of the other blocks that share its shape)" : "") +
                        ": " + s.kernels[3].kernel + ": " + s.kernels[3].why);
        }
    }
    return w;
}

QFORGE_DECL std::vector<std::string> w4a8_cpu_refusals(const plan& p, const model_config& cfg) {
    std::vector<std::string> out;
    const int one = 1;
    const serving_report r = check_serving(p, cfg, std::span<const int>(&one, 1));
    for (const auto& line : r.config_refusals) out.push_back(detail::refusal({}, {}, "w4a8-cpu: " + line));
    for (const auto& s : r.shards)
        if (!s.loads_cpu) {
            std::string why;
            for (const auto& k : s.kernels)
                if (!k.ok && k.kernel != "vLLM Marlin") why += (why.empty() ? "" : "; ") + k.kernel + ": " + k.why;
            out.push_back(detail::refusal({}, s.module,
                                               "w4a8-cpu: vLLM CPU cannot load this layer (" + why +
                                                   "); the preset's kernel needs K and N of each (fused) partition "
                                                   "multiples of 32"));
        }
    return out;
}


QFORGE_DECL bool serving_report::all(int tp, bool shard_check::*flag) const {
    for (const auto& s : shards)
        if (s.tp == tp && !(s.*flag)) return false;
    return true;
}

}  // namespace qforge
#endif
