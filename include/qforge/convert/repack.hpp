// Repack: move an already-quantized checkpoint (GPTQ, AWQ, compressed-tensors packed or
// naive, fake-quantized QAT) into another layout without re-quantizing. Codes, zero points
// and scales move bit for bit; the only change allowed is a scale dtype change where every
// scale converts exactly (repack_rules.hpp). What does not fit is refused with the reason, or,
// when the caller asks for it, dequantized and requantized with the SNR reported.
//
//   qforge::repack_scheme scheme = qforge::detect_repack_scheme(config_json, tensor_names);
//   for (const std::string& m : scheme.modules) {
//       qforge::quantized_tensor q = qforge::read_quantized(source, m, scheme.for_module(m));
//       q = qforge::repack_prepare(std::move(q), target);     // refusal before any write
//       auto tensors = qforge::repack_pack(q, m, target);     // the target's tensors
//   }
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "qforge/convert/format.hpp"
#include "qforge/convert/repack_ct_naive.hpp"
#include "qforge/convert/repack_fake_quant.hpp"
#include "qforge/convert/repack_packed.hpp"
#include "qforge/convert/repack_rules.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/regex.hpp"
#include "qforge/core/tensor_source.hpp"
#include "qforge/io/json.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

/// The on-disk form of a quantized input checkpoint (one row of source_table each).
enum class repack_source_format { gptq, awq, ct_packed, ct_naive, fake_quant };

/// How one quantized module of the input is stored.
struct layer_scheme {
    repack_source_format format = repack_source_format::gptq;
    gptq_args gptq;
    awq_args awq;
    ct_weight_args ct;
    ct_packing packing = ct_packing::padded_v0_12;
    fake_quant_options fake;
};

/// One row of the source table: a repack_source_format, the traits that read it
/// (`source_name`, `source_tensors`, `read_source`), and the members of layer_scheme its
/// read_source takes, in the order of its parameters.
template <repack_source_format F, class Traits, auto... Args>
struct source_entry {
    static constexpr repack_source_format id = F;
    using traits = Traits;
    static quantized_tensor read(const tensor_source& src, const std::string& prefix, const layer_scheme& s) {
        return Traits::read_source(src, prefix, (s.*Args)...);
    }
};

/// THE list of repack sources, in repack_source_format's order. The packed formats' rows are
/// their layouts' format traits (layout/gptq.hpp, awq.hpp, compressed_tensors.hpp); the
/// unpacked forms, which no layout here writes, keep theirs beside their readers
/// (repack_ct_naive.hpp, repack_fake_quant.hpp).
using source_table =
    std::tuple<source_entry<repack_source_format::gptq, gptq_format_traits<gptq_format::v1>, &layer_scheme::gptq>,
               source_entry<repack_source_format::awq, awq_format_traits, &layer_scheme::awq>,
               source_entry<repack_source_format::ct_packed, ct_format_traits, &layer_scheme::ct, &layer_scheme::packing>,
               source_entry<repack_source_format::ct_naive, ct_naive_source_traits, &layer_scheme::ct>,
               source_entry<repack_source_format::fake_quant, fake_quant_source_traits, &layer_scheme::fake, &layer_scheme::ct>>;

/// Calls `fn(entry)` with the source_table row of `f` (a value of its source_entry type);
/// false when the table has none.
template <class Fn>
bool with_source(repack_source_format f, Fn&& fn) {
    return std::apply([&](auto... e) { return ((decltype(e)::id == f ? (fn(e), true) : false) || ...); }, source_table{});
}

QFORGE_DECL std::string_view repack_source_format_name(repack_source_format f) noexcept;

/// The tensors a module of `f` consists of (what the repack consumes; the rest is copied).
QFORGE_DECL std::vector<std::string> source_tensors(repack_source_format f);

/// Whether a module of `f` says its compressed-tensors packing (the traits'
/// source_sets_packing), which a repack then keeps unless told otherwise.
QFORGE_DECL bool source_sets_packing(repack_source_format f) noexcept;

/// Where a module of `f` keeps each row's codes as one stream along K (see k_stream).
QFORGE_DECL k_stream source_k_stream(repack_source_format f) noexcept;

/// Reads one module `<prefix>` of the input into qforge's quantized form, with no rounding.
QFORGE_DECL quantized_tensor read_quantized(const tensor_source& src, const std::string& prefix, const layer_scheme& s);

/// The target layout's tensors for one prepared tensor (see repack_prepare).
QFORGE_DECL std::vector<owned_tensor> repack_pack(const quantized_tensor& q, const std::string& prefix, const repack_target& t);

// ---------------------------------------------------------------------------------------------
// Detecting the input's scheme from config.json `quantization_config` and its tensor names.

namespace repack_detail {

QFORGE_DECL const json* find_any(const json& o, std::initializer_list<std::string_view> keys);

QFORGE_DECL std::int64_t int_or(const json& o, std::initializer_list<std::string_view> keys, std::int64_t def);

/// "0.18.0" -> true when the version is at least 0.18 (dense 3/5/6/7-bit packing).
QFORGE_DECL bool ct_version_dense(const json& qc);

struct ct_group {
    std::vector<std::string> targets;
    std::string format;
    ct_weight_args args;
};

/// compressed-tensors / vLLM target match: a full name, `re:` regex (anchored both ends, as
/// qforge's rules do), or a class name ("Linear" matches every quantized linear here).
QFORGE_DECL bool ct_target_matches(const std::string& target, const std::string& module);

}  // namespace repack_detail

/// The input checkpoint's quantization, per module.
struct repack_scheme {
    std::string quant_method;           ///< "gptq", "awq", "compressed-tensors", "" (fake-quant)
    std::vector<std::string> modules;   ///< quantized modules found among the tensors, sorted
    layer_scheme common;                ///< GPTQ / AWQ / fake-quant: one scheme for all
    std::vector<repack_detail::ct_group> ct_groups;
    std::vector<std::string> ct_ignore;

    layer_scheme for_module(const std::string& module) const;
};

/// Reads `quantization_config` of config.json (`model_config`) and finds the quantized modules
/// among `tensor_names`. Without a quantization_config, float weights with `weight_scale` and
/// `weight_zero_point` are read as fake-quantized at `fake_bits` bits (0: refuse, bits unknown).
QFORGE_DECL repack_scheme detect_repack_scheme(const json& model_config, const std::vector<std::string>& tensor_names,
                                               int fake_bits = 0);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL std::string_view repack_source_format_name(repack_source_format f) noexcept {
    std::string_view name = "?";
    with_source(f, [&](auto e) { name = decltype(e)::traits::source_name; });
    return name;
}

QFORGE_DECL std::vector<std::string> source_tensors(repack_source_format f) {
    std::vector<std::string> out;
    with_source(f, [&](auto e) {
        for (std::string_view suffix : decltype(e)::traits::source_tensors) out.emplace_back(suffix);
    });
    return out;
}

QFORGE_DECL bool source_sets_packing(repack_source_format f) noexcept {
    bool sets = false;
    with_source(f, [&](auto e) {
        if constexpr (requires { decltype(e)::traits::source_sets_packing; }) sets = decltype(e)::traits::source_sets_packing;
    });
    return sets;
}

QFORGE_DECL k_stream source_k_stream(repack_source_format f) noexcept {
    k_stream k = k_stream::none;
    with_source(f, [&](auto e) {
        if constexpr (requires { decltype(e)::traits::packed_codes; }) k = decltype(e)::traits::packed_codes;
    });
    return k;
}

QFORGE_DECL quantized_tensor read_quantized(const tensor_source& src, const std::string& prefix, const layer_scheme& s) {
    quantized_tensor q;
    if (with_source(s.format, [&](auto e) { q = decltype(e)::read(src, prefix, s); })) return q;
    fail<unsupported_error>(src.file, prefix, "unknown source format");
}

QFORGE_DECL std::vector<owned_tensor> repack_pack(const quantized_tensor& q, const std::string& prefix, const repack_target& t) {
    // Scales stay in the dtype repack_prepare gave them (compressed-tensors scales are stored
    // in the request's checkpoint dtype); act-order is the tensor's own g_idx.
    layout_request r{q.bits, q.scale_dtype, q.scale_dtype};
    r.desc_act = !q.g_idx.empty();
    r.packing = static_cast<int>(t.packing);
    return format_pack(t.format, q, prefix, r);
}

namespace repack_detail {

QFORGE_DECL const json* find_any(const json& o, std::initializer_list<std::string_view> keys) {
    for (std::string_view k : keys)
        if (const json* v = o.find(k); v && !v->is_null()) return v;
    return nullptr;
}

QFORGE_DECL std::int64_t int_or(const json& o, std::initializer_list<std::string_view> keys, std::int64_t def) {
    const json* v = find_any(o, keys);
    return v ? v->as_int() : def;
}

QFORGE_DECL bool ct_version_dense(const json& qc) {
    const json* v = qc.find("version");
    if (!v || !v->is_string()) return false;
    int major = 0, minor = 0;
    const std::string& s = v->as_string();
    std::size_t i = 0;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') major = major * 10 + (s[i++] - '0');
    if (i < s.size() && s[i] == '.') ++i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') minor = minor * 10 + (s[i++] - '0');
    return major > 0 || minor >= 18;
}

QFORGE_DECL bool ct_target_matches(const std::string& target, const std::string& module) {
    if (target.rfind("re:", 0) == 0) {
        try {
            return regex(std::string_view(target).substr(3)).matches(module);
        } catch (const regex_error&) {  // a config's pattern is input: refuse it as such
            fail<format_error>("config.json", module, "target \"" + target + "\" is not a valid regular expression");
        }
    }
    if (target == module) return true;
    return target.find("Linear") != std::string::npos;
}

}  // namespace repack_detail

QFORGE_DECL repack_scheme detect_repack_scheme(const json& model_config, const std::vector<std::string>& tensor_names,
                                               int fake_bits) {
    using namespace detail;
    using namespace repack_detail;
    repack_scheme r;
    const json* qc = model_config.find("quantization_config");
    std::vector<std::string> sorted = tensor_names;
    std::sort(sorted.begin(), sorted.end());
    auto has_sorted = [&](const std::string& n) { return std::binary_search(sorted.begin(), sorted.end(), n); };
    auto modules_with = [&](std::string_view suffix, std::string_view sibling) {
        std::vector<std::string> out;
        for (const std::string& n : sorted)
            if (n.size() > suffix.size() && n.ends_with(suffix)) {
                std::string m = n.substr(0, n.size() - suffix.size());
                if (sibling.empty() || has_sorted(m + std::string(sibling))) out.push_back(m);
            }
        return out;
    };

    if (!qc || qc->is_null()) {
        r.modules = modules_with(".weight_zero_point", ".weight_scale");
        if (r.modules.empty())
            fail<unsupported_error>("config.json", {}, "no quantization_config and no fake-quantized layers (weight + weight_scale + weight_zero_point): nothing to repack");
        if (fake_bits < 2 || fake_bits > 8)
            fail<unsupported_error>("config.json", {}, "fake-quantized layers found but no quantization_config gives their bits; pass the bit width");
        r.common.format = repack_source_format::fake_quant;
        r.common.fake.bits = fake_bits;
        return r;
    }
    const std::string method = qc->find("quant_method") && qc->at("quant_method").is_string() ? qc->at("quant_method").as_string() : "";
    r.quant_method = method;
    if (method == "gptq") {
        r.common.format = repack_source_format::gptq;
        r.common.gptq.bits = static_cast<int>(int_or(*qc, {"bits", "w_bit"}, 4));
        r.common.gptq.group_size = int_or(*qc, {"group_size", "q_group_size"}, 128);
        const json* sym = qc->find("sym");
        r.common.gptq.sym = !sym || sym->is_null() || sym->as_bool();  // AutoGPTQ: missing sym => True
        const json* fmt = find_any(*qc, {"checkpoint_format", "format"});
        const std::string f = fmt && fmt->is_string() ? fmt->as_string() : "gptq";
        if (f == "gptq_v2") r.common.gptq.v2 = true;
        else if (f != "gptq")
            fail<unsupported_error>("config.json", {}, "GPTQ checkpoint_format \"" + f + "\" is not one qforge reads (gptq, gptq_v2)");
        r.modules = modules_with(".qweight", ".qzeros");
    } else if (method == "awq") {
        r.common.format = repack_source_format::awq;
        r.common.awq.bits = static_cast<int>(int_or(*qc, {"bits", "w_bit"}, 4));
        r.common.awq.group_size = int_or(*qc, {"group_size", "q_group_size"}, 128);
        const json* ver = qc->find("version");
        if (ver && ver->is_string() && ver->as_string() != "gemm" && ver->as_string() != "GEMM")
            fail<unsupported_error>("config.json", {}, "AWQ version \"" + ver->as_string() + "\" is not GEMM; qforge reads AWQ GEMM only");
        const json* zp = qc->find("zero_point");
        if (zp && zp->is_bool() && !zp->as_bool())
            fail<unsupported_error>("config.json", {}, "AWQ without zero points is not a GEMM checkpoint");
        r.modules = modules_with(".qweight", ".qzeros");
    } else if (method == "compressed-tensors") {
        const std::string top = qc->find("format") && qc->at("format").is_string() ? qc->at("format").as_string() : "";
        const json* status = qc->find("quantization_status");
        const bool compressed = !status || !status->is_string() || status->as_string() == "compressed";
        r.common.packing = ct_version_dense(*qc) ? ct_packing::dense_v0_18 : ct_packing::padded_v0_12;
        if (const json* ig = qc->find("ignore"); ig && ig->is_array())
            for (const json& v : ig->as_array()) r.ct_ignore.push_back(v.as_string());
        const json& groups = qc->at("config_groups");
        for (const json_member& m : groups.as_object()) {
            ct_group g;
            const json* f = m.value.find("format");
            g.format = f && f->is_string() ? f->as_string() : top;
            for (const json& t : m.value.at("targets").as_array()) g.targets.push_back(t.as_string());
            const json* w = m.value.find("weights");
            if (!w || w->is_null()) continue;  // activation-only group
            if (const json* ty = w->find("type"); ty && ty->is_string() && ty->as_string() != "int")
                fail<unsupported_error>("config.json", {}, "config group " + m.key + ": weights of type \"" + ty->as_string() + "\" are not integer");
            g.args.bits = static_cast<int>(int_or(*w, {"num_bits"}, 8));
            const json* sym = w->find("symmetric");
            g.args.symmetric = !sym || sym->is_null() || sym->as_bool();
            const json* strategy = w->find("strategy");
            const std::string st = strategy && strategy->is_string() ? strategy->as_string() : "";
            g.args.group_size = st == "channel" ? -1 : int_or(*w, {"group_size"}, -1);
            if (st == "tensor" || st == "block" || st == "token")
                fail<unsupported_error>("config.json", {}, "config group " + m.key + ": strategy \"" + st + "\" is not group or channel");
            r.ct_groups.push_back(std::move(g));
        }
        if (!compressed || top == "dense") {
            // Frozen / fake-quant status: float weights on the grid, signed zero points.
            r.common.format = repack_source_format::fake_quant;
            r.common.fake.signed_zero_point = true;
            r.modules = modules_with(".weight_scale", ".weight");
        } else {
            r.common.format = repack_source_format::ct_packed;
            r.modules = modules_with(".weight_scale", "");
        }
    } else {
        fail<unsupported_error>("config.json", {}, "quant_method \"" + method + "\" is not one qforge repacks (gptq, awq, compressed-tensors)");
    }
    if (r.modules.empty()) fail<format_error>("config.json", {}, "quantization_config says " + method + " but no quantized layer was found");
    return r;
}


QFORGE_DECL layer_scheme repack_scheme::for_module(const std::string& module) const {
    if (ct_groups.empty()) return common;
    for (const std::string& ig : ct_ignore)
        if (repack_detail::ct_target_matches(ig, module) && ig.find("Linear") == std::string::npos)
            fail<format_error>("config.json", module, "module has quantized tensors but is listed in `ignore`");
    for (const auto& g : ct_groups)
        for (const std::string& t : g.targets)
            if (repack_detail::ct_target_matches(t, module)) {
                layer_scheme s = common;
                s.ct = g.args;
                s.fake.bits = g.args.bits;
                if (g.format == "naive-quantized" || g.format == "int-quantized") s.format = repack_source_format::ct_naive;
                else if (g.format == "pack-quantized") s.format = repack_source_format::ct_packed;
                else if (s.format != repack_source_format::fake_quant)
                    fail<unsupported_error>("config.json", module, "compressed-tensors format \"" + g.format + "\" is not one qforge repacks");
                return s;
            }
    fail<format_error>("config.json", module, "no compressed-tensors config group targets this module");
}

}  // namespace qforge
#endif
