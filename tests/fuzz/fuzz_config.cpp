// libFuzzer target: config.json handling - parse, read the model facts a plan needs, then
// modify and write it back the way a converter does (quantization_config added, unknown keys
// kept in order), and read it as the GGUF writer does (hyperparameters, every architecture's
// checks, gpt-oss's and the RoPE scaling keys). Refusals must be qforge::error; an accepted
// config must survive the rewrite.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "qforge/convert/fused_experts.hpp"
#include "qforge/convert/gguf/converter.hpp"
#include "qforge/convert/model_config.hpp"
#include "qforge/io/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    try {
        qforge::json cfg = qforge::json::parse(text, "config.json");
        const auto m = qforge::model_config::from_json(cfg, "config.json");
        // Values a plan divides or multiplies by: negative never comes out of from_json.
        if (m.hidden_size < 0 || m.num_attention_heads < 0 || m.num_key_value_heads < 0 ||
            m.head_dim < 0 || m.intermediate_size < 0 || m.num_experts < 0)
            std::abort();
        // The fused-expert rule reads model_type / architectures and checks a header's shape
        // against the config: it refuses with a reason or cuts pieces that lie inside the tensor.
        const std::int64_t e = m.num_experts % 64, i = m.moe_intermediate_size % 512, h = m.hidden_size % 512;
        for (const char* name : {"model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj",
                                 "model.layers.0.mlp.experts.gate_up_proj_bias"}) {
            const bool bias = std::string_view(name).ends_with("_bias");
            const qforge::shape_t shape = bias ? qforge::shape_t{e, 2 * i} : qforge::shape_t{e, 2 * i, h};
            std::string why;
            for (const auto& piece : qforge::split_fused_experts(name, shape, m, why)) {
                const std::int64_t rows = piece.shape.at(0);
                const std::int64_t last = piece.cut.first + (rows - 1) * piece.cut.step;
                const std::int64_t bound = (piece.cut.transposed && !bias) ? shape[2] : shape[1];  // the dim the cut walks
                if (piece.cut.expert < 0 || piece.cut.expert >= e || rows <= 0 || last >= bound) std::abort();
            }
        }
        try {
            const auto h = qforge::gguf::detail::read_hparams(cfg, "config.json");
            const qforge::gguf::kv_list kvs = qforge::gguf::detail::model_kvs(h, cfg, "config.json", "model", {});
            if (kvs.empty() || h.n_embd <= 0 || h.n_layer <= 0) std::abort();
        } catch (const qforge::error&) {
        }
        if (!cfg.is_object()) return 0;
        const std::size_t keys = cfg.size();
        cfg.set("quantization_config",
                qforge::json::object({{"bits", 4}, {"group_size", 128}, {"quant_method", "gptq"}}));
        const std::string out = cfg.dump({.indent = 2});
        const qforge::json back = qforge::json::parse(out, "config.json (rewritten)");
        if (!(back == cfg)) std::abort();
        if (back.size() != keys && back.size() != keys + 1) std::abort();
    } catch (const qforge::error&) {
    }
    return 0;
}
