// Packed compressed-tensors MXFP4 sources (llm-compressor MXFP4A16 / MXFP4,
// `format: mxfp4-pack-quantized`), read for a lossless repack into GGUF MXFP4 (ggml type 39).
//
// Per quantized linear <m> (CTn `compressors/mxfp4/base.py` MXFP4PackedCompressor; field-2026.md
// 1.4 (b); layout/mxfp4.hpp writes the same):
//   <m>.weight_packed  U8 [N, K/2]   two E2M1 codes per byte, low nibble = even column
//   <m>.weight_scale   U8 [N, K/32]  E8M0 biased exponents, scale 2^(e - 127)
// The GGUF block of 32 holds the same exponent byte and the same 4-bit codes with its own nibble
// order (layout/gguf/mxfp4.hpp ct_mxfp4_row_to_gguf), so the repack copies codes and exponents
// and never requantizes. What cannot be moved that way is refused here, naming the file, the
// tensor and the reason, before any tensor data is read:
//  * a config group whose weights are not {float, 4 bits, strategy group, group_size 32,
//    symmetric} in an mxfp4-pack-quantized format (NVFP4 has E4M3 group-16 scales over a
//    global scale: no E8M0 power of two holds them; an integer group is not E2M1);
//  * a packed weight that is not 2-D U8 [N, K/2] (a fused 3-D expert tensor included), K not
//    a multiple of 32, a missing / non-U8 / misshapen weight_scale, a weight_scale or a
//    weight_zero_point or weight_global_scale beside it (MXFP4 has none), a dense `.weight`
//    beside the packed one.
// Per row, at copy time: the E8M0 code 0xFF is NaN in OCP MX (CT decodes it as NaN) but 2^127 in
// ggml (GGML_E8M0_TO_FP32_HALF), so it is refused naming the row and the group.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/plan.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/json.hpp"

namespace qforge {

inline constexpr std::int64_t mxfp4_source_group = 32;

/// One packed MXFP4 linear of the source.
struct mxfp4_packed_weight {
    std::string module;            ///< <m>
    std::string packed, scale;     ///< <m>.weight_packed, <m>.weight_scale
    std::int64_t rows = 0, cols = 0;  ///< N, K (the weight it stands for)
    std::string file, scale_file;  ///< the shards (paths) of weight_packed and weight_scale
    /// Row r of the weight is row row_first + r * row_step of the packed and scale tensors seen
    /// as 2-D (K/2 and K/32 bytes a row): 0 / 1 for a whole tensor; an expert's gate or up of
    /// gpt-oss's fused blocks [E, 2I, K/32, 16] starts at e * 2I + 0 or 1 and steps by 2.
    std::int64_t row_first = 0, row_step = 1;
};

struct mxfp4_source {
    bool present = false;  ///< the config declares a compressed-tensors mxfp4-pack-quantized checkpoint
    std::vector<mxfp4_packed_weight> weights;
    std::vector<std::string> refusals;  ///< complete messages "<file>: <tensor>: <reason>"
    /// The tensors every packed weight's two tensors replaced by one `<m>.weight` [N, K] of type
    /// U8 (marked in `packed_of`): what a planner maps by name.
    std::vector<source_tensor> tensors;
    std::map<std::string, std::size_t, std::less<>> packed_of;  ///< "<m>.weight" -> weights index

    const mxfp4_packed_weight* find(std::string_view weight_name) const;
};

namespace detail {

QFORGE_DECL std::string mx_refusal(const std::string& file, const std::string& tensor, const std::string& why);

/// The refusal of one config group, or empty when its weights are MXFP4 as GGUF holds it.
QFORGE_DECL std::string mxfp4_group_refusal(const std::string& name, const json& group, const std::string& top_format);

/// The two tensors of packed weight <m>, checked; refusals appended.
QFORGE_DECL std::optional<mxfp4_packed_weight> read_mxfp4_weight(const std::string& module, const source_tensor& packed,
                                                             const source_tensor* scale, const std::string& dir,
                                                             std::vector<std::string>& refusals);

}  // namespace detail

/// Reads the MXFP4 facts of a checkpoint (config.json's `quantization_config` and the tensor
/// list); never throws: malformed input gives refusals. Not compressed-tensors, or no group in
/// an FP4 pack format: present == false and `tensors` is the input.
QFORGE_DECL mxfp4_source read_mxfp4_source(const json& config, const std::string& config_file, std::span<const source_tensor> in,
                                           const std::string& dir);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {
namespace detail {

QFORGE_DECL std::string mx_refusal(const std::string& file, const std::string& tensor, const std::string& why) {
    return file + ": " + tensor + ": " + why;
}

QFORGE_DECL std::string mxfp4_group_refusal(const std::string& name, const json& group, const std::string& top_format) {
    if (!group.is_object()) return "config group " + name + " is not an object";
    const json* f = group.find("format");
    const std::string format = f && f->is_string() ? f->as_string() : top_format;
    const json* w = group.find("weights");
    if (!w || !w->is_object()) return "config group " + name + " has no weights";
    auto str = [&](const char* key) {
        const json* v = w->find(key);
        return v && v->is_string() ? v->as_string() : std::string();
    };
    auto num = [&](const char* key) {
        const json* v = w->find(key);
        return v && v->is_int() ? v->as_int() : std::int64_t{-1};
    };
    const std::string why = "config group " + name + " (" + format + ", " + str("type") + " " + std::to_string(num("num_bits")) +
                            "-bit, " + str("strategy") + " " + std::to_string(num("group_size")) + ")";
    if (format != "mxfp4-pack-quantized")
        return why + " cannot be repacked losslessly into GGUF MXFP4: only mxfp4-pack-quantized (E2M1 codes with E8M0 "
                     "group-32 scales) is the same quantization";
    if (str("type") != "float" || num("num_bits") != 4)
        return why + ": GGUF MXFP4 holds 4-bit float (E2M1) codes only";
    if (str("strategy") != "group" || num("group_size") != mxfp4_source_group)
        return why + ": GGUF MXFP4 blocks are groups of 32 along a row";
    if (const json* s = w->find("symmetric"); s && !(s->is_bool() && s->as_bool()))
        return why + ": GGUF MXFP4 has no zero points";
    return {};
}

QFORGE_DECL std::optional<mxfp4_packed_weight> read_mxfp4_weight(const std::string& module, const source_tensor& packed,
                                                             const source_tensor* scale, const std::string& dir,
                                                             std::vector<std::string>& refusals) {
    const std::string where = dir + "/" + packed.file;
    auto refuse = [&](const std::string& file, const std::string& tensor, const std::string& why) {
        refusals.push_back(mx_refusal(file, tensor, why));
        return std::nullopt;
    };
    if (packed.type != dtype::U8 || packed.shape.size() != 2)
        return refuse(where, packed.name, "a packed MXFP4 weight must be 2-D U8 [N, K/2], got " + std::string(dtype_name(packed.type)) +
                                              " " + shape_to_string(packed.shape) +
                                              (packed.shape.size() == 3 ? " (fused 3-D experts are not repacked)" : ""));
    const std::int64_t n = packed.shape[0], k = 2 * packed.shape[1];
    if (n <= 0 || k <= 0 || k % mxfp4_source_group != 0)
        return refuse(where, packed.name, "K = " + std::to_string(k) + " is not a positive multiple of 32 (GGUF MXFP4 blocks)");
    if (!scale) return refuse(where, module + ".weight_scale", "missing: a packed MXFP4 weight needs its E8M0 scales");
    const std::string swhere = dir + "/" + scale->file;
    if (scale->type != dtype::U8)
        return refuse(swhere, scale->name, "E8M0 scales must be U8, got " + std::string(dtype_name(scale->type)) +
                                               " (a float scale is not a power-of-two exponent)");
    const shape_t want{n, k / mxfp4_source_group};
    if (scale->shape != want)
        return refuse(swhere, scale->name, "expected " + shape_to_string(want) + " (one exponent per 32 columns), got " +
                                               shape_to_string(scale->shape) + ": not group-32 scales");
    return mxfp4_packed_weight{module, packed.name, scale->name, n, k, where, swhere};
}

}  // namespace detail

QFORGE_DECL mxfp4_source read_mxfp4_source(const json& config, const std::string& config_file, std::span<const source_tensor> in,
                                           const std::string& dir) {
    mxfp4_source r;
    r.tensors.assign(in.begin(), in.end());
    const json* qc = config.is_object() ? config.find("quantization_config") : nullptr;
    if (!qc || !qc->is_object()) return r;
    const json* qm = qc->find("quant_method");
    if (!qm || !qm->is_string() || qm->as_string() != "compressed-tensors") return r;
    const json* tf = qc->find("format");
    const std::string top = tf && tf->is_string() ? tf->as_string() : "";
    const json* groups = qc->find("config_groups");
    bool fp4_pack = top == "mxfp4-pack-quantized" || top == "nvfp4-pack-quantized";
    if (groups && groups->is_object())
        for (const auto& [name, g] : groups->as_object())
            if (const json* f = g.is_object() ? g.find("format") : nullptr;
                f && f->is_string() && (f->as_string() == "mxfp4-pack-quantized" || f->as_string() == "nvfp4-pack-quantized"))
                fp4_pack = true;
    if (!fp4_pack) return r;
    r.present = true;
    if (!groups || !groups->is_object() || groups->as_object().empty()) {
        r.refusals.push_back(detail::mx_refusal(config_file, "", "quantization_config has no config_groups"));
        return r;
    }
    for (const auto& [name, g] : groups->as_object())
        if (std::string why = detail::mxfp4_group_refusal(name, g, top); !why.empty())
            r.refusals.push_back(detail::mx_refusal(config_file, "", why));

    std::map<std::string, const source_tensor*, std::less<>> by_name;
    for (const source_tensor& t : in) by_name.emplace(t.name, &t);
    auto find = [&](const std::string& n) -> const source_tensor* {
        const auto it = by_name.find(n);
        return it == by_name.end() ? nullptr : it->second;
    };
    constexpr std::string_view packed_suffix = ".weight_packed";
    std::map<std::string, bool, std::less<>> consumed;  // tensors folded into a packed weight
    std::map<std::string, source_tensor, std::less<>> replaced;  // <m>.weight_packed -> its <m>.weight
    for (const source_tensor& t : in) {
        if (!t.name.ends_with(packed_suffix)) continue;
        const std::string m = t.name.substr(0, t.name.size() - packed_suffix.size());
        const std::string where = dir + "/" + t.file;
        for (const char* extra : {".weight_global_scale", ".weight_zero_point", ".weight"})
            if (const source_tensor* x = find(m + extra))
                r.refusals.push_back(detail::mx_refusal(dir + "/" + x->file, x->name,
                                                        std::string(extra) == ".weight"
                                                            ? "a dense weight beside " + t.name + ": which one is the layer?"
                                                            : "MXFP4 has no " + std::string(extra + 1) + " (an NVFP4 or asymmetric layer cannot be repacked into GGUF MXFP4)"));
        const source_tensor* sc = find(m + ".weight_scale");
        consumed[t.name] = true;
        if (sc) consumed[sc->name] = true;
        auto w = detail::read_mxfp4_weight(m, t, sc, dir, r.refusals);
        if (!w) continue;
        r.packed_of.emplace(m + ".weight", r.weights.size());
        replaced.emplace(t.name, source_tensor{m + ".weight", dtype::U8, {w->rows, w->cols}, t.file});
        r.weights.push_back(std::move(*w));
    }
    for (const source_tensor& t : in)
        if (t.name.ends_with(".weight_scale") && !consumed.count(t.name))
            r.refusals.push_back(detail::mx_refusal(dir + "/" + t.file, t.name, "a scale without its weight_packed"));
    r.tensors.clear();
    for (const source_tensor& t : in) {
        if (const auto it = replaced.find(t.name); it != replaced.end()) r.tensors.push_back(it->second);
        else if (!consumed.count(t.name)) r.tensors.push_back(t);
    }
    return r;
}


QFORGE_DECL const mxfp4_packed_weight* mxfp4_source::find(std::string_view weight_name) const {
    const auto it = packed_of.find(weight_name);
    return it == packed_of.end() ? nullptr : &weights[it->second];
}

}  // namespace qforge
#endif
