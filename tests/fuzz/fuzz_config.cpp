// libFuzzer target: config.json handling - parse, read the model facts a plan needs, then
// modify and write it back the way a converter does (quantization_config added, unknown keys
// kept in order). Refusals must be qforge::error; an accepted config must survive the rewrite.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

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
