// qforge::json as text: json::parse and json::dump (serde_json and Python json.dump bytes) for
// the value of core/json_value.hpp, and config_file_text.
//
//   qforge::json cfg = qforge::json::parse(text, "config.json");   // format_error on bad input
//   std::int64_t h = cfg.at("hidden_size").as_int();
//   cfg["quantization_config"] = qforge::json::object({{"bits", 4}, {"quant_method", "gptq"}});
//   std::string compact = cfg.dump();                     // serde_json bytes (safetensors)
//   std::string pretty  = cfg.dump({.indent = 2});        // Python json.dump(indent=2) shape
//
// Guarantees: objects keep key order (insertion / file order); integers are int64-exact
// (an integer literal beyond int64 becomes a double); doubles round-trip (shortest digits,
// written the way Python's repr writes them, e.g. 1e-05, 10000.0); strings are validated UTF-8
// with \u escapes and surrogate pairs decoded. Parsing refuses duplicate keys, lone surrogates,
// NaN/Infinity, trailing garbage, nesting deeper than json_limits::max_depth, inputs larger
// than json_limits::max_bytes and more values than json_limits::max_values; every refusal is a format_error (limit_error for the limits)
// naming the file, the byte offset and what was expected.
#pragma once

#include <string>
#include <string_view>

#include "qforge/core/config.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/io/detail/json_reader.hpp"
#include "qforge/io/detail/json_writer.hpp"

namespace qforge {

/// What json::parse and json::dump call (core/json_value.hpp declares them).
struct json_io {
    static json parse(std::string_view text, std::string_view file, const json_limits& limits);
    static std::string dump(const json& value, const json_dump_options& options);
};

/// A JSON file's bytes the way transformers' save_pretrained writes them
/// (`json.dumps(obj, indent=2, sort_keys=True) + "\n"`).
QFORGE_DECL std::string config_file_text(const json& value);

}  // namespace qforge

#if QFORGE_BASE_BODIES_HERE

namespace qforge {

QFORGE_DECL std::string config_file_text(const json& value) {
    return value.dump({.indent = 2, .ensure_ascii = false, .sort_keys = true}) + "\n";
}


QFORGE_DECL json json_io::parse(std::string_view text, std::string_view file, const json_limits& limits) {
    return detail::json_reader(text, file, limits).parse_document();
}

QFORGE_DECL std::string json_io::dump(const json& value, const json_dump_options& options) {
    std::string out;
    detail::json_writer{out, options}.write(value, 0);
    return out;
}

}  // namespace qforge
#endif
