// gpt-oss written as OpenAI ships it: a float gpt-oss checkpoint (a fine-tune in bf16, say) in,
// the native MXFP4 checkpoint (`quantization_config.quant_method: "mxfp4"`) out, the one layout
// of quantized gpt-oss experts that the engines serving gpt-oss load.
//
//   qforge::gpt_oss_mxfp4_options o;
//   o.threads = 8;
//   qforge::gpt_oss_mxfp4_result r = qforge::convert_gpt_oss_mxfp4("gpt-oss-bf16", "gpt-oss-mxfp4", o);
//
// Why a layout of its own: vLLM's gpt-oss model reads quantized experts only as fused tensors.
// model_executor/models/gpt_oss.py GptOssModel.load_weights sends quant_method "mxfp4" to its
// MXFP4 loader, which maps `<p>.gate_up_proj_blocks` / `_scales` / `down_proj_blocks` /
// `_scales` to the FusedMoE parameters w13_weight / w13_weight_scale / w2_weight /
// w2_weight_scale that layers/quantization/mxfp4.py Mxfp4MoEMethod.create_weights makes: U8
// [E, 2I, H/2], U8 [E, 2I, H/32], U8 [E, H, I/2], U8 [E, H, I/32], biases bf16 [E, 2I] / [E, H];
// every other quant_method reads experts only as the fused bf16 gate_up_proj / down_proj, and
// skips per-expert names without an error (convert/serving_check.hpp). Mxfp4Config quantizes
// no linear layer (get_quant_method: LinearBase -> UnquantizedLinearMethod), so attention,
// router, embeddings and head stay as the source has them. transformers reads the same names
// (integrations/mxfp4.py, the blocks / scales of GptOssExperts).
//
// Per MoE layer <p> = "<layer>.mlp.experts", from the source's gate_up_proj [E, H, 2I] and
// down_proj [E, I, H] ([in, out], gate/up interleaved along 2I: convert/fused_experts.hpp):
//   <p>.gate_up_proj_blocks  U8 [E, 2I, H/32, 16]   row j = column j of gate_up_proj
//   <p>.gate_up_proj_scales  U8 [E, 2I, H/32]       E8M0
//   <p>.down_proj_blocks     U8 [E, H, I/32, 16]
//   <p>.down_proj_scales     U8 [E, H, I/32]
// Each expert's [N, K] rows are quantized as compressed-tensors' MXFP4 (layout/mxfp4.hpp: one
// E8M0 scale per 32 inputs, two E2M1 codes a byte, low nibble first), whose packed bytes are
// gpt-oss's blocks (convert/gpt_oss_source.hpp reads them back). Every other tensor is copied
// byte for byte; config.json gets openai/gpt-oss-20b's quantization_config.
//
// Streaming: one expert's matrix is read (with pread), quantized and appended to the fused
// output tensors at a time, so memory follows one expert, not the layer. Like convert(): all
// refusals come before the output folder exists (a model that is not gpt-oss, a quantized
// source, a dimension not a multiple of 32, an expert tensor of the wrong shape or dtype), each
// naming the file, the tensor and the reason; the output is written in a temporary folder and
// renamed into place, so a refused or failed conversion leaves nothing, and an existing
// destination is replaced only with `overwrite`.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "qforge/convert/detail/copy_chunks.hpp"
#include "qforge/convert/fused_experts.hpp"
#include "qforge/convert/gpt_oss_source.hpp"
#include "qforge/convert/model_config.hpp"
#include "qforge/convert/output_format.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/atomic_dir.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/index.hpp"
#include "qforge/layout/mxfp4.hpp"
#include "qforge/quant/snr.hpp"

namespace qforge {

struct gpt_oss_mxfp4_options {
    unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    std::uint64_t max_shard_bytes = 5'000'000'000;  ///< huggingface_hub's default
    bool overwrite = false;
    /// Called after each output tensor (name, 1-based index, count); return false to cancel
    /// (nothing is left behind).
    std::function<bool(const std::string&, std::size_t, std::size_t)> progress;
};

/// One source tensor and what it becomes.
struct gpt_oss_mxfp4_item {
    source_tensor source;
    bool experts = false;                ///< a fused expert weight: quantized into its blocks and scales
    std::vector<planned_tensor> outputs;  ///< {blocks, scales}, or the tensor itself
};

struct gpt_oss_mxfp4_plan {
    std::vector<gpt_oss_mxfp4_item> items;  ///< in the source's order
    std::vector<std::string> refusals;      ///< complete messages, as plan::refusals
    json quantization_config;
};

struct gpt_oss_mxfp4_result {
    gpt_oss_mxfp4_plan the_plan;
    std::vector<std::string> shards;
    std::vector<std::string> copied_files;
    /// Per fused expert tensor: the SNR in dB of what a loader decodes against the source.
    std::vector<std::pair<std::string, double>> snr_db;
};

/// openai/gpt-oss-20b's quantization_config: quant_method mxfp4, every non-expert module dense.
QFORGE_DECL json gpt_oss_mxfp4_config();

namespace detail {

/// The fused expert weight a gpt-oss tensor name is ("gate_up_proj" or "down_proj"), or empty.
QFORGE_DECL std::string_view gpt_oss_expert_weight(std::string_view name);

/// The expert's [N, K] matrix of a fused [E, K, N] ([in, out]) tensor: a transposed cut of all
/// of its columns, in order (gate/up stay interleaved, as the native rows are).
inline expert_cut gpt_oss_native_rows(std::int64_t expert) { return {expert, true, 0, 1}; }

/// The outputs of fused expert weight `t` [E, K, N], or the reason it cannot be written.
QFORGE_DECL std::string gpt_oss_expert_outputs(const source_tensor& t, std::string_view weight, const model_config& cfg,
                                               std::vector<planned_tensor>& out);

/// Why the source as a whole cannot be written so, or empty.
QFORGE_DECL std::string gpt_oss_source_refusal(const checkpoint_source& src, const model_config& cfg);

QFORGE_DECL std::vector<safetensors::tensor_spec> gpt_oss_output_specs(const gpt_oss_mxfp4_plan& p);

/// One fused expert weight, expert by expert: its rows read with pread, quantized on the pool
/// and appended to the blocks and scales tensors. Returns the SNR over all experts.
template <class Writer>
double write_gpt_oss_experts(const checkpoint_source& src, const gpt_oss_mxfp4_item& it, const executor& ex, Writer& writer) {
    const std::int64_t E = it.source.shape[0], k = it.source.shape[1], n = it.source.shape[2];
    snr_sums total;
    for (std::int64_t e = 0; e < E; ++e) {
        const std::string module = it.source.name + "[" + std::to_string(e) + "]";
        const owned_tensor rows = src.read_expert(it.source.name, gpt_oss_native_rows(e), module, {n, k}, true);
        snr_sums one;
        std::vector<owned_tensor> q;
        try {
            q = mxfp4_layout().quantize(rows.view(), module, ex, &one);
        } catch (const unsupported_error& bad) {  // NaN or infinity: named with the shard that holds it
            fail<unsupported_error>(it.source.file, bad.tensor(), bad.reason());
        }
        writer.write(it.outputs[0].name, q[0].bytes);  // weight_packed [N, K/2] is the expert's blocks
        writer.write(it.outputs[1].name, q[1].bytes);  // weight_scale [N, K/32] its scales
        total.add_row(one);
    }
    src.release(it.source.name);
    return total.db();
}

}  // namespace detail

/// What converting `src` to gpt-oss's native MXFP4 would write, and every reason it cannot.
QFORGE_DECL gpt_oss_mxfp4_plan plan_gpt_oss_mxfp4(const checkpoint_source& src);

/// Converts the float gpt-oss checkpoint `src_dir` into its native MXFP4 form in `dst_dir`
/// (see the file comment).
QFORGE_DECL gpt_oss_mxfp4_result convert_gpt_oss_mxfp4(const std::string& src_dir, const std::string& dst_dir,
                                                       const gpt_oss_mxfp4_options& opt = {});

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL json gpt_oss_mxfp4_config() {
    return json::object({{"modules_to_not_convert", json::array({"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                  "model.embed_tokens", "lm_head"})},
                         {"quant_method", "mxfp4"}});
}

namespace detail {

QFORGE_DECL std::string_view gpt_oss_expert_weight(std::string_view name) {
    for (std::string_view w : {std::string_view("gate_up_proj"), std::string_view("down_proj")})
        if (name.ends_with(w) && name.substr(0, name.size() - w.size()).ends_with(".mlp.experts."))
            return w;
    return {};
}

QFORGE_DECL std::string gpt_oss_expert_outputs(const source_tensor& t, std::string_view weight, const model_config& cfg,
                                               std::vector<planned_tensor>& out) {
    if (t.type != dtype::BF16 && t.type != dtype::F16 && t.type != dtype::F32)
        return "expert weights must be BF16, F16 or F32 to quantize, not " + std::string(dtype_name(t.type));
    const std::int64_t H = cfg.hidden_size, I = cfg.intermediate_size, E = cfg.num_experts;
    const shape_t want = weight == "gate_up_proj" ? shape_t{E, H, 2 * I} : shape_t{E, I, H};
    if (t.shape != want)
        return "expected " + shape_to_string(want) + " (num_local_experts, " +
               (weight == "gate_up_proj" ? "hidden_size, 2 * intermediate_size" : "intermediate_size, hidden_size") +
               " of config.json), got " + shape_to_string(t.shape);
    const std::int64_t k = t.shape[1], n = t.shape[2];
    if (k % mxfp4_group_size != 0)
        return "MXFP4 groups 32 inputs: the input dimension " + std::to_string(k) + " is not a multiple of 32";
    const std::string base = t.name;
    out = {{base + "_blocks", dtype::U8, {E, n, k / mxfp4_group_size, mxfp4_group_bytes}},
           {base + "_scales", dtype::U8, {E, n, k / mxfp4_group_size}}};
    return {};
}

QFORGE_DECL std::string gpt_oss_source_refusal(const checkpoint_source& src, const model_config& cfg) {
    if (!is_architecture(cfg, "gpt_oss", "GptOssForCausalLM"))
        return "the native MXFP4 layout is gpt-oss's (model_type gpt_oss, GptOssForCausalLM), not model_type '" +
               cfg.model_type + "'";
    if (src.fp8().kind == fp8_source_kind::gpt_oss_mxfp4)
        return "the checkpoint is already gpt-oss's native MXFP4 (quant_method mxfp4): it is what this conversion writes";
    if (src.fp8().kind != fp8_source_kind::none || src.config().contains("quantization_config"))
        return "the checkpoint is already quantized (config.json has a quantization_config); convert a bf16, fp16 or "
               "fp32 gpt-oss";
    if (cfg.hidden_size <= 0 || cfg.intermediate_size <= 0 || cfg.num_experts <= 0)
        return "config.json needs hidden_size, intermediate_size and num_local_experts";
    return {};
}

QFORGE_DECL std::vector<safetensors::tensor_spec> gpt_oss_output_specs(const gpt_oss_mxfp4_plan& p) {
    std::vector<safetensors::tensor_spec> all;
    for (const gpt_oss_mxfp4_item& it : p.items)
        for (const planned_tensor& t : it.outputs) all.push_back({t.name, t.type, t.shape});
    return all;
}

}  // namespace detail

QFORGE_DECL gpt_oss_mxfp4_plan plan_gpt_oss_mxfp4(const checkpoint_source& src) {
    gpt_oss_mxfp4_plan p;
    const std::string config_file = src.dir() + "/config.json";
    const model_config cfg = model_config::from_json(src.config(), config_file);
    if (std::string why = detail::gpt_oss_source_refusal(src, cfg); !why.empty()) {
        p.refusals.push_back(detail::format_error_message(config_file, {}, why));
        return p;
    }
    std::size_t fused = 0;
    for (const source_tensor& t : src.tensors()) {
        gpt_oss_mxfp4_item it{t, false, {{t.name, t.type, t.shape}}};
        if (const std::string_view w = detail::gpt_oss_expert_weight(t.name); !w.empty()) {
            it.experts = true;
            ++fused;
            if (std::string why = detail::gpt_oss_expert_outputs(t, w, cfg, it.outputs); !why.empty())
                p.refusals.push_back(detail::format_error_message(t.file, t.name, why));
        } else if (t.name.find(".mlp.experts.") != std::string::npos && !t.name.ends_with("_bias")) {
            p.refusals.push_back(detail::format_error_message(
                t.file, t.name, "not a fused expert tensor of gpt-oss (<layer>.mlp.experts.gate_up_proj / down_proj and their _bias)"));
        }
        p.items.push_back(std::move(it));
    }
    if (fused == 0)
        p.refusals.push_back(detail::format_error_message(src.dir(), {}, "no fused expert weight (<layer>.mlp.experts.gate_up_proj / down_proj) to quantize"));
    if (p.refusals.empty()) p.quantization_config = gpt_oss_mxfp4_config();
    return p;
}

QFORGE_DECL gpt_oss_mxfp4_result convert_gpt_oss_mxfp4(const std::string& src_dir, const std::string& dst_dir,
                                                       const gpt_oss_mxfp4_options& opt) {
    if (io::path_exists(dst_dir) && !opt.overwrite)
        fail<io_error>(dst_dir, {}, "destination exists (pass --overwrite to replace it)");
    const checkpoint_source src(src_dir);
    gpt_oss_mxfp4_result result;
    result.the_plan = plan_gpt_oss_mxfp4(src);
    const gpt_oss_mxfp4_plan& p = result.the_plan;
    if (!p.refusals.empty()) {
        std::string why = p.refusals.front();
        if (why.starts_with("qforge: ")) why.erase(0, 8);
        if (p.refusals.size() > 1) why += " (and " + std::to_string(p.refusals.size() - 1) + " more refusals)";
        fail<unsupported_error>({}, {}, "conversion refused: " + why);
    }
    io::atomic_output_dir out(dst_dir, opt.overwrite);
    safetensors::sharded_writer writer(out.path(), detail::gpt_oss_output_specs(p), opt.max_shard_bytes);
    thread_pool pool(std::max(1u, opt.threads));
    for (std::size_t i = 0; i < p.items.size(); ++i) {
        const gpt_oss_mxfp4_item& it = p.items[i];
        src.verify_unchanged(it.source.name);
        if (it.experts) result.snr_db.emplace_back(it.source.name, detail::write_gpt_oss_experts(src, it, pool.executor(), writer));
        else {
            detail::copy_through_pread(src, it.source.name, 0, it.outputs[0].bytes(), it.source.type, it.source.type, writer,
                                       it.outputs[0].name);
            src.release(it.source.name);
        }
        if (opt.progress && !opt.progress(it.source.name, i + 1, p.items.size()))
            fail<error>(dst_dir, it.source.name, "conversion cancelled");
    }
    writer.finish();
    result.shards = writer.plan().file_names;
    json cfg = src.config();
    cfg.set("quantization_config", p.quantization_config);
    io::write_config(out.path(), cfg);
    result.copied_files = io::copy_side_files(src.dir(), out.path());
    out.commit();
    return result;
}

}  // namespace qforge
#endif
