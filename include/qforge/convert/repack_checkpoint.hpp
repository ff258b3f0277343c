// Whole-checkpoint repack (`qforge-convert SRC DST --format X --repack`) and the comparison of
// two quantized checkpoints (`qforge-inspect A --against B`).
//
//   qforge::repack_options o;
//   o.format = qforge::output_format::compressed_tensors;
//   qforge::repack_report r = qforge::repack_checkpoint("llama-gptq", "llama-ct", o);
//
// The input's format comes from config.json `quantization_config` (repack.hpp). Every module
// is read and checked against the target first - a refusal leaves no output at all, not even
// a temporary folder - then the output is written through io::atomic_output_dir: quantized
// modules repacked (word-level where the layouts allow, else codes unpacked and packed), every
// other tensor copied byte for byte, config.json given the target's quantization_config,
// tokenizer files copied. With `requantize`, modules the target cannot hold exactly are
// dequantized and quantized again and their SNR against the input's decoded weights reported.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/format.hpp"
#include "qforge/convert/repack.hpp"
#include "qforge/convert/repack_rules.hpp"
#include "qforge/convert/repack_transpose.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/atomic_dir.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/index.hpp"
#include "qforge/io/safetensors/writer.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/quant/dequantize.hpp"
#include "qforge/quant/quantize.hpp"
#include "qforge/quant/snr.hpp"

namespace qforge {

struct repack_options {
    output_format format = output_format::compressed_tensors;
    std::optional<dtype> scale_dtype;        ///< nullopt: the target's convention (repack_rules.hpp)
    std::optional<dtype> model_dtype;        ///< nullopt: config.json torch_dtype, else the first float tensor
    std::optional<ct_packing> packing;       ///< nullopt: the input's packing if compressed-tensors, else padded (0.12)
    bool requantize = false;                 ///< dequantize + quantize what does not fit, reporting SNR
    int fake_bits = 0;                       ///< bits of a fake-quantized input without quantization_config
    bool overwrite = false;
    std::uint64_t max_shard_bytes = safetensors::default_max_shard_bytes;
    std::function<void(std::size_t i, std::size_t n, const std::string& module, const std::string& how)> progress;
};

/// What happened to one quantized module.
struct repack_layer {
    std::string module;
    std::string how;  ///< "words" (transposed), "codes" (unpacked + packed), "requantized"
    double snr_db = std::numeric_limits<double>::infinity();  ///< infinite: bit-exact
    std::string reason;  ///< why it was requantized
};

struct repack_report {
    std::string source_format;
    std::string target_format;
    std::vector<repack_layer> layers;
    std::vector<std::string> copied_tensors;
    std::vector<std::string> shards;
    bool exact() const noexcept;
};

namespace repack_detail {

QFORGE_DECL std::optional<dtype> dtype_from_torch_name(const json* v);

/// An open quantized checkpoint: shards, config, detected scheme, and a tensor_source over it.
struct open_checkpoint {
    std::string folder;
    safetensors::sharded_reader reader;
    json config;
    repack_scheme scheme;
    // A module's tensors are read with pread (never from the mapping: a source truncated
    // underneath is an io_error naming file and tensor, not a SIGBUS) and kept until release().
    struct cached_tensor {
        owned_tensor data;
        tensor_view view;
    };
    std::shared_ptr<std::map<std::string, cached_tensor>> cache = std::make_shared<std::map<std::string, cached_tensor>>();

    open_checkpoint(const std::string& dir, int fake_bits);

    tensor_source source() const;
    void release(const std::string& module);
};

QFORGE_DECL quant_options requant_options(const quantized_tensor& q, const repack_target& t);

/// Dequantizes `q` and quantizes it again for `t`; the SNR is against q's decoded weights.
QFORGE_DECL quantized_tensor requantize_for(const quantized_tensor& q, const repack_target& t, double& snr);

/// One module into `out`. `info` receives the tensor without codes (for the config).
QFORGE_DECL std::string repack_one(const tensor_source& src, const std::string& m, const layer_scheme& s, const repack_target& t,
                                   bool requantize, std::vector<owned_tensor>& out, quantized_tensor& info, repack_layer& layer);

/// What the target's config is built from: the first quantized module's width, the target's
/// scale dtype, whether every module carries act-order's g_idx, and the target's packing.
QFORGE_DECL layout_request repack_config_request(const repack_target& t, const linear_entry& first, bool act_order);

/// The target's quantization_config for the repacked modules.
QFORGE_DECL json repack_quantization_config(const repack_target& t, const std::vector<linear_entry>& linears, bool act_order,
                                            json* gptq_side_file);

/// The files the target writes beside config.json (GPTQ's quantize_config.json), or none.
QFORGE_DECL std::vector<side_file> repack_side_files(const repack_target& t, const std::vector<linear_entry>& linears, bool act_order);

}  // namespace repack_detail

/// Repacks the quantized checkpoint folder `src_dir` into `dst_dir` (see the top of the file).
QFORGE_DECL repack_report repack_checkpoint(const std::string& src_dir, const std::string& dst_dir, const repack_options& opt);

// ---------------------------------------------------------------------------------------------

/// One module of two quantized checkpoints, decoded and compared.
struct layer_comparison {
    std::string module;
    bool identical = false;          ///< every decoded weight has the same float bits
    std::int64_t differing = 0;      ///< elements whose decoded value differs
    double snr_db = std::numeric_limits<double>::infinity();  ///< B against A
    std::string note;                ///< "missing in B", "shape differs", ...
};

/// Decodes every quantized module of `a_dir` and of `b_dir` (any supported formats) and
/// compares them element by element, as a loader would decode them.
QFORGE_DECL std::vector<layer_comparison> compare_quantized_checkpoints(const std::string& a_dir, const std::string& b_dir, int fake_bits = 0);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {
namespace repack_detail {

QFORGE_DECL std::optional<dtype> dtype_from_torch_name(const json* v) {
    if (!v || !v->is_string()) return std::nullopt;
    const std::string& s = v->as_string();
    if (s == "bfloat16" || s == "torch.bfloat16") return dtype::BF16;
    if (s == "float16" || s == "half" || s == "torch.float16") return dtype::F16;
    if (s == "float32" || s == "float" || s == "torch.float32") return dtype::F32;
    return std::nullopt;
}

QFORGE_DECL quant_options requant_options(const quantized_tensor& q, const repack_target& t) {
    quant_options o;
    o.bits = q.bits;
    o.bits = requantize_bits(t.format, q.bits);
    o.group_size = q.group_size >= q.cols ? -1 : static_cast<int>(q.group_size);
    if (o.group_size > 0 && (o.group_size & (o.group_size - 1)) != 0) o.group_size = 128;
    if (o.group_size > q.cols) o.group_size = -1;
    // The format may force the symmetry (GPTQ v1 cannot store a zero of 0; AWQ stores zeros).
    o.symmetric = requantize_symmetric(t.format, q.symmetric);
    o.policy = o.symmetric ? scale_policy::gptq_absmax : scale_policy::minmax;
    o.scale_dtype = target_scale_dtype(t);
    return o;
}

QFORGE_DECL quantized_tensor requantize_for(const quantized_tensor& q, const repack_target& t, double& snr) {
    const std::vector<float> w = dequantize(q);
    tensor_view v{q.name, dtype::F32, {q.rows, q.cols},
                  std::span<const std::byte>(reinterpret_cast<const std::byte*>(w.data()), w.size() * sizeof(float))};
    quantized_tensor r = quantize(v, requant_options(q, t));
    r.name = q.name;
    r = repack_prepare(std::move(r), t);
    const std::vector<float> back = dequantize(r);
    snr = snr_db(w, back);
    return r;
}

QFORGE_DECL std::string repack_one(const tensor_source& src, const std::string& m, const layer_scheme& s, const repack_target& t,
                                   bool requantize, std::vector<owned_tensor>& out, quantized_tensor& info, repack_layer& layer) {
    layer.module = m;
    if (repack_words(src, m, s, t, out, &info)) {  // info comes back prepared: no second read of the small tensors
        layer.how = "words";
        return layer.how;
    }
    quantized_tensor q = read_quantized(src, m, s);
    layer.how = "codes";
    if (!requantize) {
        q = repack_prepare(std::move(q), t, src.file);
    } else {
        try {
            q = repack_prepare(quantized_tensor(q), t, src.file);  // q stays intact for a retry
        } catch (const unsupported_error& e) {
            layer.reason = e.reason();
            q = requantize_for(q, t, layer.snr_db);
            layer.how = "requantized";
        }
    }
    out = repack_pack(q, m, t);
    info = std::move(q);
    info.codes.clear();
    return layer.how;
}

QFORGE_DECL layout_request repack_config_request(const repack_target& t, const linear_entry& first, bool act_order) {
    layout_request r{first.bits, target_scale_dtype(t), target_scale_dtype(t)};
    r.desc_act = act_order;
    r.packing = static_cast<int>(t.packing);
    return r;
}

QFORGE_DECL json repack_quantization_config(const repack_target& t, const std::vector<linear_entry>& linears, bool act_order,
                                            json* gptq_side_file) {
    const linear_entry* first = nullptr;
    for (const auto& e : linears)
        if (e.quantized) {
            first = &e;
            break;
        }
    if (!first) fail<unsupported_error>({}, {}, "no quantized module to repack");
    if (has_own_quantizer(t.format))
        fail<unsupported_error>({}, {}, std::string(format_name(t.format)) + " holds " + std::string(float_codes_name(t.format)) +
                                            " codes: integer codes do not repack into it");
    const layout_request r = repack_config_request(t, *first, act_order);
    if (gptq_side_file)
        for (side_file& f : format_side_files(t.format, linears, r)) *gptq_side_file = std::move(f.content);
    return format_config(t.format, linears, r);
}

QFORGE_DECL std::vector<side_file> repack_side_files(const repack_target& t, const std::vector<linear_entry>& linears, bool act_order) {
    for (const auto& e : linears)
        if (e.quantized) return format_side_files(t.format, linears, repack_config_request(t, e, act_order));
    return {};
}

}  // namespace repack_detail

namespace repack_detail {

/// The layout to write: the options', with the model dtype from the options, else config.json,
/// else the first floating tensor, and the source's packing where it states one.
inline repack_target repack_target_of(const open_checkpoint& in, const repack_options& opt) {
    repack_target t;
    t.format = opt.format;
    t.scale_dtype = opt.scale_dtype;
    if (opt.model_dtype) t.model_dtype = *opt.model_dtype;
    else if (auto d = dtype_from_torch_name(find_any(in.config, {"torch_dtype", "dtype"}))) t.model_dtype = *d;
    else
        for (const std::string& n : in.reader.tensor_names())
            if (const auto* info = in.reader.find(n); info && is_floating(info->type)) {
                t.model_dtype = info->type;
                break;
            }
    t.packing = opt.packing ? *opt.packing
                            : (source_sets_packing(in.scheme.common.format) ? in.scheme.common.packing : ct_packing::padded_v0_12);
    return t;
}

/// What the first pass learns about the modules, before anything is written.
struct repack_modules {
    std::map<std::string, std::string> owner;  ///< input tensor -> its module
    std::map<std::string, layer_scheme> schemes;
    std::map<std::string, std::vector<safetensors::tensor_spec>> specs;  ///< each module's outputs
    std::vector<linear_entry> linears;
    bool act_order = false;
    /// Set when the format's config states one actorder for all (compressed-tensors' config
    /// group): every module then gets a g_idx once one is act-order, the identity where it has none.
    std::optional<std::string_view> g_idx_suffix;
};

/// Which input tensor belongs to which module.
inline void index_modules(const open_checkpoint& in, repack_modules& m) {
    for (const std::string& module : in.scheme.modules) {
        m.schemes[module] = in.scheme.for_module(module);
        for (const std::string& suffix : source_tensors(m.schemes[module].format))
            if (in.reader.contains(module + suffix)) m.owner[module + suffix] = module;
    }
}

/// Pass 1: every module read and checked, its output specs collected; nothing is written.
inline void check_modules(open_checkpoint& in, const tensor_source& src, const repack_target& t,
                          const repack_options& opt, repack_modules& m, repack_report& report) {
    std::vector<owned_tensor> out;
    for (const std::string& module : in.scheme.modules) {
        quantized_tensor info;
        repack_layer layer;
        repack_one(src, module, m.schemes[module], t, opt.requantize, out, info, layer);
        auto& specs = m.specs[module];
        for (const owned_tensor& o : out) specs.push_back({o.name, o.type, o.shape});
        m.act_order = m.act_order || !info.g_idx.empty();
        m.linears.push_back(linear_entry_of(info, module));
        report.layers.push_back(std::move(layer));
        in.release(module);
    }
    m.g_idx_suffix = m.act_order ? act_order_g_idx_suffix(t.format) : std::nullopt;
    if (m.g_idx_suffix)
        for (const linear_entry& e : m.linears) {
            auto& specs = m.specs[e.name];
            bool has = false;
            const std::string g_idx_name = e.name + std::string(*m.g_idx_suffix);
            for (const auto& s : specs) has = has || s.name == g_idx_name;
            if (!has) specs.push_back({g_idx_name, dtype::I32, {e.cols}});
        }
    for (const std::string& n : in.reader.tensor_names())
        if (!m.owner.count(n) && n.ends_with(".weight") && n.rfind("lm_head", 0) == 0)
            m.linears.push_back({module_prefix(n), false, 0, 0, true, 0, 0, {}});
}

/// One output entry: a module's outputs or a tensor copied as it is.
struct repack_output {
    bool is_module = false;
    std::string name;
};

/// Output tensors in the input's order, each module's outputs where its first tensor was;
/// `all` receives every output's spec in that order.
inline std::vector<repack_output> output_order(const open_checkpoint& in, const repack_modules& m,
                                               std::vector<safetensors::tensor_spec>& all) {
    std::vector<repack_output> order;
    std::set<std::string> placed;
    for (const std::string& n : in.reader.tensor_names()) {
        auto it = m.owner.find(n);
        if (it == m.owner.end()) {
            const auto* info = in.reader.find(n);
            all.push_back({n, info->type, info->shape});
            order.push_back({false, n});
        } else if (placed.insert(it->second).second) {
            for (const auto& s : m.specs.at(it->second)) all.push_back(s);
            order.push_back({true, it->second});
        }
    }
    return order;
}

/// Copies one tensor in pread chunks, never from the mapping (see open_checkpoint::cached_tensor).
inline void copy_tensor(open_checkpoint& in, const std::string& name, safetensors::sharded_writer& writer) {
    const std::uint64_t size = in.reader.find(name)->size();
    constexpr std::uint64_t chunk = std::uint64_t{4} << 20;
    std::vector<std::byte> buf(static_cast<std::size_t>(std::min(chunk, size)));
    for (std::uint64_t at = 0; at < size; at += chunk) {
        const std::span<std::byte> b(buf.data(), static_cast<std::size_t>(std::min(chunk, size - at)));
        in.reader.read_tensor_range(name, at, b);
        writer.write(name, b);
    }
    in.reader.release(name);
}

/// Pass 2: every output written in `order`, each module repacked again (pass 1 kept nothing).
inline void write_outputs(open_checkpoint& in, const tensor_source& src, const repack_target& t, const repack_options& opt,
                          const repack_modules& m, const std::vector<repack_output>& order,
                          safetensors::sharded_writer& writer, repack_report& report) {
    std::vector<owned_tensor> out;
    std::size_t done = 0;
    for (const repack_output& o : order) {
        if (!o.is_module) {
            copy_tensor(in, o.name, writer);
            report.copied_tensors.push_back(o.name);
            continue;
        }
        quantized_tensor info;
        repack_layer layer;
        const std::string how = repack_one(src, o.name, m.schemes.at(o.name), t, opt.requantize, out, info, layer);
        for (const owned_tensor& w : out) writer.write(w.name, w.bytes);
        if (m.g_idx_suffix && info.g_idx.empty()) {
            const std::string g_idx_name = o.name + std::string(*m.g_idx_suffix);
            writer.write(g_idx_name, detail::make_tensor(g_idx_name, dtype::I32, {info.cols}, detail::full_g_idx(info)).bytes);
        }
        in.release(o.name);
        if (opt.progress) opt.progress(++done, in.scheme.modules.size(), o.name, how);
    }
}

}  // namespace repack_detail

QFORGE_DECL repack_report repack_checkpoint(const std::string& src_dir, const std::string& dst_dir, const repack_options& opt) {
    using namespace detail;
    using namespace repack_detail;
    if (io::path_exists(dst_dir) && !opt.overwrite)
        fail<io_error>(dst_dir, {}, "destination exists (pass --overwrite to replace it)");
    open_checkpoint in(src_dir, opt.fake_bits);
    const tensor_source src = in.source();
    const repack_target t = repack_target_of(in, opt);

    repack_report report;
    report.source_format = std::string(repack_source_format_name(in.scheme.common.format));
    report.target_format = std::string(format_name(t.format));
    repack_modules m;
    index_modules(in, m);
    check_modules(in, src, t, opt, m, report);
    const json qconfig = repack_quantization_config(t, m.linears, m.act_order, nullptr);
    std::vector<safetensors::tensor_spec> all;
    const std::vector<repack_output> order = output_order(in, m, all);

    io::atomic_output_dir dir(dst_dir, opt.overwrite);
    safetensors::sharded_writer writer(dir.path(), all, opt.max_shard_bytes);
    write_outputs(in, src, t, opt, m, order, writer, report);
    writer.finish();
    report.shards = writer.plan().file_names;

    json cfg = in.config;
    cfg.set("quantization_config", qconfig);
    io::write_config(dir.path(), cfg);
    for (const side_file& f : repack_side_files(t, m.linears, m.act_order)) io::write_json_file(dir.file(f.name), f.content);
    io::copy_side_files(src_dir, dir.path());
    dir.commit();
    return report;
}

QFORGE_DECL std::vector<layer_comparison> compare_quantized_checkpoints(const std::string& a_dir, const std::string& b_dir, int fake_bits) {
    repack_detail::open_checkpoint a(a_dir, fake_bits), b(b_dir, fake_bits);
    const tensor_source sa = a.source(), sb = b.source();
    const std::set<std::string> in_b(b.scheme.modules.begin(), b.scheme.modules.end());
    std::vector<layer_comparison> out;
    for (const std::string& m : a.scheme.modules) {
        layer_comparison c;
        c.module = m;
        if (!in_b.count(m)) {
            c.note = "missing in " + b_dir;
            out.push_back(c);
            continue;
        }
        const quantized_tensor qa = read_quantized(sa, m, a.scheme.for_module(m));
        const quantized_tensor qb = read_quantized(sb, m, b.scheme.for_module(m));
        a.release(m);
        b.release(m);
        if (qa.rows != qb.rows || qa.cols != qb.cols) {
            c.note = "shape differs";
            out.push_back(c);
            continue;
        }
        const std::vector<float> da = dequantize(qa), db = dequantize(qb);
        for (std::size_t i = 0; i < da.size(); ++i)
            if (std::memcmp(&da[i], &db[i], sizeof(float)) != 0) ++c.differing;
        c.identical = c.differing == 0;
        if (!c.identical) c.snr_db = snr_db(da, db);
        out.push_back(c);
    }
    for (const std::string& m : b.scheme.modules)
        if (std::find(a.scheme.modules.begin(), a.scheme.modules.end(), m) == a.scheme.modules.end())
            out.push_back({m, false, 0, std::numeric_limits<double>::infinity(), "missing in " + a_dir});
    return out;
}


QFORGE_DECL bool repack_report::exact() const noexcept {
    for (const auto& l : layers)
        if (l.how == "requantized") return false;
    return true;
}

namespace repack_detail {

QFORGE_DECL open_checkpoint::open_checkpoint(const std::string& dir, int fake_bits) : folder(dir), reader(dir), config(io::read_config(dir)) {
    std::vector<std::string> names = reader.tensor_names();
    scheme = detect_repack_scheme(config, names, fake_bits);
}

QFORGE_DECL tensor_source open_checkpoint::source() const {
    tensor_source s;
    s.file = folder;
    auto c = cache;
    const safetensors::sharded_reader* r = &reader;
    s.find = [c, r](const std::string& name) -> const tensor_view* {
        auto it = c->find(name);
        if (it != c->end()) return &it->second.view;
        if (!r->contains(name)) return nullptr;
        cached_tensor& e = (*c)[name];
        e.data = r->read_tensor(name);
        e.view = e.data.view();  // map nodes do not move: the view stays valid
        return &e.view;
    };
    return s;
}

QFORGE_DECL void open_checkpoint::release(const std::string& module) {
    for (const std::string& suffix : source_tensors(scheme.for_module(module).format)) {
        const std::string n = module + suffix;
        cache->erase(n);
        if (reader.contains(n)) reader.release(n);
    }
}

}  // namespace repack_detail
}  // namespace qforge
#endif
