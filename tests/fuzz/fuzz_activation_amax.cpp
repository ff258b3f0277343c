// libFuzzer target: activation_amax_file (NVFP4 W4A4's calibrated input amaxes, JSON or
// safetensors, convert/activation_amax.hpp) on arbitrary bytes through a file.
//
// Properties: refusals are qforge::error; an accepted file holds at least one entry, every
// module name is non-empty and every amax a positive finite float (what the converter turns
// into 448 * 6 / amax: finite and positive too); opening the same bytes twice gives the same
// entries.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include "qforge/convert/activation_amax.hpp"

#include "../support/memfile.hpp"

namespace {

using entries = std::map<std::string, float, std::less<>>;

std::optional<entries> open(const std::string& path) {
    try {
        return qforge::activation_amax_file::open(path).entries();
    } catch (const qforge::error&) {
        return std::nullopt;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const qforge_fuzz::memfile f("fuzz-activation-amax");
    const std::string& path = f.put(data, size);
    const std::optional<entries> a = open(path);
    if (!a) return 0;
    if (a->empty()) std::abort();
    for (const auto& [module, amax] : *a) {
        if (module.empty() || !std::isfinite(amax) || !(amax > 0.0f)) std::abort();
        const float scale = 448.0f * 6.0f / amax;
        if (!std::isfinite(scale) || !(scale > 0.0f)) std::abort();
    }
    if (open(path) != a) std::abort();
    return 0;
}
