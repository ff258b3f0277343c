// libFuzzer target: qforge::json::parse on arbitrary bytes.
//
// Property checked beyond "no crash, no sanitizer report": whatever the parser accepts, the
// writer must write as text the parser accepts again, and compact / indented / ensure_ascii
// dumps must all read back to the same value (a value that cannot round-trip would make
// qforge write a config.json or safetensors header no other tool can read).
// Anything it refuses must be a qforge::error (never another exception type).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "qforge/io/json.hpp"

namespace {

void check_round_trip(const qforge::json& v, const qforge::json_dump_options& options) {
    const std::string text = v.dump(options);
    const qforge::json again = qforge::json::parse(text, "round-trip");
    if (!options.sort_keys && !(again == v)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    qforge::json v;
    try {
        // A small depth limit keeps deep-nesting inputs fast; the default (128) is covered by
        // the corpus too since the limit path is the same code.
        v = qforge::json::parse(text, "fuzz.json", qforge::json_limits{.max_depth = 64,
                                                                       .max_bytes = 1 << 20});
    } catch (const qforge::error&) {
        return 0;  // a clean refusal
    }
    // Accepted: the writer's output must be accepted again, equal to the original.
    check_round_trip(v, {});
    check_round_trip(v, {.indent = 2});
    check_round_trip(v, {.indent = 0, .ensure_ascii = true});
    check_round_trip(v, {.indent = -1, .ensure_ascii = false, .sort_keys = true});
    // Typed accessors on whatever came out must refuse, not crash.
    try {
        if (v.is_object())
            for (const auto& m : v.as_object()) (void)m.value.size();
        (void)v.at("x");
    } catch (const qforge::error&) {
    }
    return 0;
}
