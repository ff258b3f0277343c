// Calibrated input activation ranges for NVFP4 W4A4 (`--preset nvfp4`): the layer's
// input_global_scale is 448 * 6 / amax, where amax is max |x| over the calibration tokens of
// the layer's input (compressed-tensors `quantization/utils/helpers.py generate_gparam` over
// the `static_minmax` observer's range; CTn `quant_scheme.py` NVFP4). A data-free converter
// cannot know it; whoever calibrated gives it as one of:
//
//   JSON         {"model.layers.0.self_attn.q_proj": 7.25, ...}   module -> amax
//   safetensors  <module>.input_amax   F32, BF16 or F16, scalar or [1]
//
// The file is told apart by its bytes: a safetensors file starts with its header length
// (8 bytes, little-endian) followed by '{', which no JSON text does. `<module>` is the weight's
// name without ".weight". Every amax must be a positive finite number; every entry must name
// a linear of the model (an entry for a linear that stays dense is allowed and unused), and
// every quantized linear needs an entry: its own, or that of the fused source module it was
// split from (q/k/v and gate/up share their input). Members of a fused group (q/k/v, gate/up,
// an expert's w1/w3) get the max of their amaxes, because vLLM keeps one input_global_scale
// per fused layer (`compressed_tensors_w4a4_nvfp4.py CompressedTensorsW4A4Fp4.
// process_weights_after_loading`: `input_global_scale.max()`, warning when the shards differ);
// the max keeps every member's inputs in range. Every refusal names the file and the entry.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include "qforge/convert/fp4_global.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/reader.hpp"

namespace qforge {

class activation_amax_file {
public:
    /// Reads `path` (JSON or safetensors, see above); a malformed file or entry is a
    /// format_error naming the file and the entry.
    static activation_amax_file open(const std::string& path);

    const std::string& path() const noexcept { return path_; }
    /// module -> amax, sorted by name.
    const std::map<std::string, float, std::less<>>& entries() const noexcept { return amax_; }

    std::optional<float> find(std::string_view module) const;

private:
    static constexpr std::string_view suffix = ".input_amax";

    static bool is_safetensors(const std::string& path);

    void add(const std::string& module, double amax, const std::string& entry);

    void read_json();

    void read_safetensors();

    double value_of(const owned_tensor& t) const;

    std::string path_;
    std::map<std::string, float, std::less<>> amax_;
};

/// Each quantized item of `p` (by index) -> the input amax of its fused group, from `f`. A
/// quantized linear without an entry (its own or its source module's) is an unsupported_error,
/// an entry naming no linear of the model a format_error, both naming the file and the module.
QFORGE_DECL std::map<std::size_t, float> input_amax_per_item(const activation_amax_file& f, const plan& p);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL std::map<std::size_t, float> input_amax_per_item(const activation_amax_file& f, const plan& p) {
    std::set<std::string, std::less<>> known;
    for (const linear_entry& l : p.linears) known.insert(l.name);
    for (const plan_item& it : p.items) {
        known.insert(module_prefix(it.name));
        known.insert(module_prefix(it.source));
    }
    for (const auto& [module, amax] : f.entries())
        if (!known.contains(module)) fail<format_error>(f.path(), module, "names no linear of the model");

    std::map<std::size_t, float> own;
    std::map<std::string, float> group;  // fused group key -> max amax of its members
    for (std::size_t i = 0; i < p.items.size(); ++i) {
        const plan_item& it = p.items[i];
        if (it.action != plan_action::quantize) continue;
        const std::string module = module_prefix(it.name);
        std::optional<float> a = f.find(module);
        if (!a) a = f.find(module_prefix(it.source));
        if (!a)
            fail<unsupported_error>(f.path(), module, "no activation amax for this quantized linear (NVFP4 W4A4 needs "
                                                      "each layer's input amax for its input_global_scale)");
        own[i] = *a;
        if (std::string key = fused_group_key(it.name); !key.empty()) group[key] = std::max(group[key], *a);
    }
    for (auto& [i, a] : own)
        if (std::string key = fused_group_key(p.items[i].name); !key.empty()) a = group[key];
    return own;
}


QFORGE_DECL activation_amax_file activation_amax_file::open(const std::string& path) {
    activation_amax_file f;
    f.path_ = path;
    if (is_safetensors(path)) f.read_safetensors();
    else f.read_json();
    if (f.amax_.empty()) fail<format_error>(path, {}, "holds no activation amax");
    return f;
}

QFORGE_DECL std::optional<float> activation_amax_file::find(std::string_view module) const {
    const auto it = amax_.find(module);
    if (it == amax_.end()) return std::nullopt;
    return it->second;
}

QFORGE_DECL bool activation_amax_file::is_safetensors(const std::string& path) {
    const io::input_file in(path);
    if (in.size() < 9) return false;
    unsigned char head[9];
    in.read_at(0, std::as_writable_bytes(std::span<unsigned char>(head)));
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | head[i];
    return head[8] == '{' && n <= in.size() - 8;
}

QFORGE_DECL void activation_amax_file::add(const std::string& module, double amax, const std::string& entry) {
    if (module.empty()) fail<format_error>(path_, entry, "an entry needs a module name");
    if (!std::isfinite(amax) || !(amax > 0.0) || amax > 3.4e38)
        fail<format_error>(path_, entry, "activation amax " + std::to_string(amax) + " is not a positive finite float");
    // As a float32 it must stay positive and leave 448 * 6 / amax finite (a tiny double
    // would become 0 or an infinite input_global_scale).
    const float a = static_cast<float>(amax);
    if (!(a > 0.0f) || !std::isfinite(448.0f * 6.0f / a))
        fail<format_error>(path_, entry, "activation amax " + std::to_string(amax) + " is too small: 448 * 6 / amax overflows float32");
    if (!amax_.emplace(module, a).second) fail<format_error>(path_, entry, "module given twice");
}

QFORGE_DECL void activation_amax_file::read_json() {
    const json doc = json::parse(io::read_file(path_, std::uint64_t{64} << 20), path_);
    if (!doc.is_object()) fail<format_error>(path_, {}, "expected a JSON object of module -> amax");
    for (const auto& [key, value] : doc.as_object()) {
        if (!value.is_number()) fail<format_error>(path_, key, "an activation amax must be a number");
        add(key, value.as_double(), key);
    }
}

QFORGE_DECL void activation_amax_file::read_safetensors() {
    const safetensors::reader r(path_, safetensors::read_mode::pread);
    for (const safetensors::tensor_info& t : r.tensors()) {
        if (!std::string_view(t.name).ends_with(suffix))
            fail<format_error>(path_, t.name, "unexpected tensor: an activation amax file holds <module>.input_amax");
        if (t.shape.size() > 1 || (t.shape.size() == 1 && t.shape[0] != 1))
            fail<shape_error>(path_, t.name, "an activation amax is one value, got " + shape_to_string(t.shape));
        add(t.name.substr(0, t.name.size() - suffix.size()), value_of(r.read_tensor(t.name)), t.name);
    }
}

QFORGE_DECL double activation_amax_file::value_of(const owned_tensor& t) const {
    std::uint16_t h;
    float f;
    switch (t.type) {
        case dtype::F32: std::memcpy(&f, t.bytes.data(), 4); return f;
        case dtype::BF16: std::memcpy(&h, t.bytes.data(), 2); return bf16_to_float(h);
        case dtype::F16: std::memcpy(&h, t.bytes.data(), 2); return fp16_to_float(h);
        default:
            fail<format_error>(path_, t.name, "an activation amax must be F32, BF16 or F16, not " + std::string(dtype_name(t.type)));
    }
}

}  // namespace qforge
#endif
