// The run of a conversion behind convert/converter.hpp: the inputs opened beside the
// checkpoint, the per-tensor steps (quantize, pack, write behind), the model files written at
// the end, and the bodies of plan_conversion and convert. The cluster steps drive the same run
// (convert/cluster/). converter.hpp includes it where those bodies are compiled: header-only,
// or in the one QFORGE_IMPLEMENTATION translation unit.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "qforge/convert/activation_fold.hpp"
#include "qforge/convert/converter.hpp"
#include "qforge/convert/detail/copy_chunks.hpp"
#include "qforge/convert/detail/plan_steps.hpp"
#include "qforge/convert/detail/quantize_step.hpp"
#include "qforge/convert/detail/write_behind.hpp"
#include "qforge/convert/format.hpp"
#include "qforge/convert/fp4_global.hpp"
#include "qforge/convert/importance.hpp"
#include "qforge/convert/loaded_scales.hpp"
#include "qforge/convert/model_config.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/convert/report.hpp"
#include "qforge/convert/rule.hpp"
#include "qforge/convert/serving_check.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/io/atomic_dir.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/early_writeback.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/index.hpp"
#include "qforge/convert/hessians.hpp"
#include "qforge/convert/activation_amax.hpp"

namespace qforge {

#if QFORGE_BODIES_HERE
QFORGE_DECL plan plan_conversion(const checkpoint_source& src, const convert_options& opt) {
    const model_config cfg = model_config::from_json(src.config(), src.dir() + "/config.json");
    const fp8_source& fp8 = src.fp8();
    rule_set rules = opt.rules;
    std::vector<rule> kept;  // first: the user's rules, later, win
    for (const std::string& name : fp8.kept_dense) kept.push_back({selector(name), keep_action{}});
    rules.rules.insert(rules.rules.begin(), kept.begin(), kept.end());
    plan p = make_plan(src.model_tensors(), cfg, rules, opt.format);
    p.declared_dtype = declared_model_dtype(src.config());  // what vLLM serves it in (loaded_scales.hpp)
    p.refusals.insert(p.refusals.begin(), fp8.refusals.begin(), fp8.refusals.end());
    if (p.refused()) return p;
    for (auto& w : loader_warnings(p, cfg, opt.require_w4a8_cpu)) p.warnings.push_back(std::move(w));  // after make_plan's
    if (opt.require_w4a8_cpu)
        for (auto& r : w4a8_cpu_refusals(p, cfg)) p.refusals.push_back(std::move(r));
    return p;
}
#endif

namespace detail {

inline std::string out_type_text(const plan& p, const plan_item& it) {
    if (it.action == plan_action::keep) return std::string(dtype_name(it.out_type));
    return std::string(format_name(p.format)) + " " + scheme_to_string(it.scheme);
}

/// The inputs beside the checkpoint: GPTQ Hessians, the imatrix, and whether act-order
/// regroups columns. Opened (and their combinations refused) before the output folder exists.
/// Built in place: the importance lookup points into the imatrix.
struct conversion_inputs {
    std::optional<hessian_file> hessians;
    std::optional<gguf::importance_matrix> imatrix;
    std::optional<importance_lookup> importance;
    bool act_order = false;  ///< columns regrouped by act-order (a format that carries g_idx)
    std::map<std::size_t, float> input_amax;  ///< NVFP4 W4A4: plan item -> its fused group's input amax

    conversion_inputs(const std::string& src_dir, const convert_options& opt, const plan& p) {
        if (!opt.hessians.empty()) hessians.emplace(opt.hessians);
        const bool regroups = hessians && opt.gptq.act_order && !opt.gptq.static_groups;
        if (regroups && !carries_g_idx(p.format))
            fail<unsupported_error>(opt.hessians, {}, "act-order regroups columns through g_idx, which only the GPTQ formats carry");
        act_order = regroups;
        if (!opt.imatrix.empty()) imatrix.emplace(gguf::importance_matrix::open(opt.imatrix));
        if (imatrix) importance.emplace(*imatrix);
        if (importance) check_imatrix_sizes(opt, p);
        if (opt.activation_scaling && !imatrix)
            fail<unsupported_error>(src_dir, {}, "activation scaling needs the input statistics of an imatrix (--imatrix)");
        if (opt.activation_scaling && hessians)
            fail<unsupported_error>(opt.hessians, {}, "activation scaling with GPTQ Hessians is not supported: GPTQ already uses the full input statistics");
        if (hessians && has_own_quantizer(p.format))
            fail<unsupported_error>(opt.hessians, {}, std::string(format_name(p.format)) + " has no integer grid for the GPTQ solver");
        open_activation_amax(src_dir, opt, p);
        // The fused group's global amax is that of the weights as read, not of folded ones.
        if (opt.activation_scaling && shares_fused_global_scale(p.format))
            fail<unsupported_error>(src_dir, {}, std::string(format_name(p.format)) +
                                                     ": activation scaling is not supported (the fused groups' global scales come from the unfolded weights)");
    }
    /// Every weight the imatrix will weight, against its entry's size, before any output
    /// exists (as the GGUF converter's check_imatrix_sizes): a wrong-sized entry is refused
    /// here with the lookup's own shape_error, not when its tensor's turn comes.
    void check_imatrix_sizes(const convert_options& opt, const plan& p) {
        for (const plan_item& it : p.items)
            if (it.action == plan_action::quantize && it.shape.size() == 2 && imatrix_selected(opt, it.name))
                (void)importance->find(it.name, it.shape[1]);
    }

    /// The activation amaxes a W4A4 format needs, checked against every quantized layer.
    void open_activation_amax(const std::string& src_dir, const convert_options& opt, const plan& p) {
        if (opt.activation_amax.empty()) {
            if (needs_input_amax(p.format))
                fail<unsupported_error>(src_dir, {}, std::string(format_name(p.format)) +
                                                         " needs each layer's calibrated input amax (activation_amax: a file of "
                                                         "<module> -> max |x|) for its input_global_scale");
            return;
        }
        if (!needs_input_amax(p.format))
            fail<unsupported_error>(opt.activation_amax, {}, std::string(format_name(p.format)) +
                                                                 " quantizes no activations under a calibrated scale: the activation amax file is not used");
        input_amax = input_amax_per_item(activation_amax_file::open(opt.activation_amax), p);
    }

    /// Whether `--imatrix-layers` (none: every layer) lets the imatrix weight `name`.
    static bool imatrix_selected(const convert_options& opt, const std::string& name) {
        return opt.imatrix_layers.empty() ||
               std::any_of(opt.imatrix_layers.begin(), opt.imatrix_layers.end(), [&](const selector& s) { return s.matches(name); });
    }

    conversion_inputs(const conversion_inputs&) = delete;
    conversion_inputs& operator=(const conversion_inputs&) = delete;
};

/// How one plan item's source is read.
enum class item_read {
    streamed,  ///< under pread: rows or chunks read when needed; the mapping's view gives sizes only
    mapped,    ///< straight from the memory mapping (source_read::mapped)
    whole,     ///< the source tensor read whole first (shared by split parts): source_read::copied, or
               ///< under pread a weight that is GPTQ-solved, folded, FP8-copied or quantized to E4M3
    decoded,   ///< an FP8 source weight decoded into float32 values first (shared by split parts)
};

constexpr bool held_whole(item_read r) noexcept { return r == item_read::whole || r == item_read::decoded; }

/// What the quantization step made of one weight: packed tensors, or (under GPTQ) the
/// solver's codes, which the job behind packs.
struct quantized_item {
    std::optional<quantized_tensor> solved;
    std::vector<owned_tensor> packed;
    double snr_db = 0;
};

/// The rows the quantizer takes: the item's rows of the source, or (activation scaling)
/// diag(1/r) W diag(s) with the importance scaled to match.
struct weight_rows {
    tensor_view view;
    std::int64_t begin = 0, end = 0;
    std::span<const float> importance;
    owned_tensor folded;  ///< the folded rows, when there are folds
    std::vector<float> folded_importance;
};

inline std::vector<safetensors::tensor_spec> output_specs(const plan& p) {
    std::vector<safetensors::tensor_spec> all;
    for (const auto& it : p.items)
        for (const auto& t : it.outputs) all.push_back({t.name, t.type, t.shape});
    return all;
}

using shard_path_map = std::map<std::string, std::string, std::less<>>;  ///< output tensor -> its shard file

/// Where each output tensor's shard lies once the shards in `shards` are written into `folder`.
inline shard_path_map shard_paths(const std::string& folder, const safetensors::shard_plan& shards) {
    shard_path_map paths;
    for (std::size_t k = 0; k < shards.shards.size(); ++k)
        for (const auto& t : shards.shards[k]) paths[t.name] = folder + "/" + shards.file_names[k];
    return paths;
}

/// The report's plan-wide fields (the per-tensor entries come from conversion_run).
inline void start_report(conversion_report& report, const plan& p) {
    report.format = p.format;
    report.bits_per_weight = p.bits_per_weight();
    report.quantized_bits_per_weight = p.quantized_bits_per_weight();
    report.loader_warnings = p.warnings;
}

/// After the last tensor: config.json (with the format's quantization_config), the format's
/// side files, the copied files and the report, written into `folder`.
inline void write_model_files(const std::string& folder, const checkpoint_source& src, const plan& p, bool act_order,
                              conversion_result& result) {
    json cfg = src.config();
    if (!cfg.is_object()) cfg = json::object();
    if (p.untied) cfg.set("tie_word_embeddings", false);
    // Act-order leaves g_idx non-monotonic: loaders must be told (GPTQ's desc_act).
    const bool desc_act = act_order && !result.gptq_layers.empty();
    json qc = desc_act ? format_config(p.format, p.linears, main_layout_request(p, true)) : p.quantization_config;
    cfg.set("quantization_config", qc);
    io::write_config(folder, cfg);
    for (const side_file& f : format_side_files(p.format, p.linears, main_layout_request(p, desc_act)))
        io::write_json_file(folder + "/" + f.name, f.content);
    result.copied_files = io::copy_side_files(src.dir(), folder);
    io::write_json_file(folder + "/quantization_report.json", result.report.to_json());
}

/// One conversion's tensors in named steps: each plan item read, (kept or) quantized and
/// handed to the job behind, its bytes going to `writer.write(name, bytes)` (a tensor's parts
/// in order) and the write-back of its file in `shard_path` started. convert() runs every item
/// into the output shards; a cluster worker (convert/cluster/work.hpp) runs its unit's items
/// into pre-sized staging shards. The caller owns the writer and the output folder, declared
/// before this run, so an exception waits for the job behind before the buffers it reads, the
/// writer and the output folder go.
template <class Writer>
class conversion_run {
public:
    conversion_run(checkpoint_source& src, const std::string& dst_dir, const convert_options& opt,
                   conversion_inputs& in, conversion_result& result, const plan& p, Writer& writer,
                   shard_path_map shard_path)
        : src_(src), dst_dir_(dst_dir), opt_(opt), in_(in), result_(result), p_(p), writer_(writer),
          pool_(std::max(1u, opt.threads)), run_(pool_.executor()), shard_path_(std::move(shard_path)),
          behind_(opt.threads > 1) {
        std::uint64_t largest = 0;
        for (std::size_t i = 0; i < p_.items.size(); ++i) {
            last_use_[p_.items[i].source] = i;
            largest = std::max(largest, p_.items[i].in_bytes());
        }
        // Kept buffers hold at most one source tensor's bytes (or 64 MiB): peak memory still
        // follows the largest tensor, not the model.
        workspace_.outputs.limit_bytes(static_cast<std::size_t>(std::max<std::uint64_t>(largest, std::uint64_t{64} << 20)));
        start_report();
    }

    /// Plan item i: read, kept or quantized, and handed to the job behind.
    void convert_item(std::size_t i) {
        const plan_item& it = p_.items[i];
        if (opt_.before_tensor) {
            behind_.drain();  // the hook sees nothing in flight (it may truncate the shards, as a test does)
            opt_.before_tensor(i);
        }
        src_.verify_unchanged(it.source);  // a shard truncated underneath us: an io_error, not a SIGBUS
        const std::string module(module_of(it.name));
        const std::optional<owned_tensor> h = find_hessian(it, module);  // read with pread
        const bool copy_fp8 = copies_fp8(it);
        const item_read how = choose_read(it, h.has_value(), copy_fp8);
        const tensor_view full = load_source(it, how);
        owned_tensor expert;  // one expert of a fused 3-D tensor: its matrix gathered on its own
        if (it.cut) expert = cut_expert(i, full, how);
        const tensor_view v = it.cut ? expert.view() : full;
        progress_event ev{i + 1, p_.items.size(), &it, std::string(dtype_name(it.source_type)),
                          detail::out_type_text(p_, it), it.in_bytes(), it.out_bytes(), std::nullopt};
        if (it.action == plan_action::keep) return write_kept(i, v, how, std::move(expert), std::move(ev));
        weight_rows rows = fold_rows(it, v, item_importance(it, module));
        quantized_item q = copy_fp8 ? copy_fp8_tensors(it, v)
                           : h      ? solve_gptq(it, rows, h->view())
                                    : quantize_packed_rows(i, rows, v, how, module);
        result_.report.tensors.push_back({module, it.shape, it.scheme, q.snr_db, loaded_snr(it, rows, how, q, module)});
        ev.snr_db = q.snr_db;
        submit_quantized(i, module, std::move(q), std::move(ev));
    }

    /// After the last item: every job behind done.
    void finish() { behind_.drain(); }

private:
    void start_report() {
        conversion_report& report = result_.report;
        detail::start_report(report, p_);
        if (opt_.activation_scaling) {
            folds_.emplace(plan_activation_folds(src_, p_, model_config::from_json(src_.config(), src_.dir() + "/config.json"),
                                                 *in_.importance, run_));
            report.activation_folds = folds_->records;
        }
    }

    void emit(const progress_event& e) const {
        if (opt_.progress && !opt_.progress(e)) fail<error>(dst_dir_, e.item->name, "conversion cancelled");
    }

    /// With Hessians: the layer's (or its fused source's) Hessian, recorded in the result.
    std::optional<owned_tensor> find_hessian(const plan_item& it, const std::string& module) {
        if (!in_.hessians || it.action == plan_action::keep) return std::nullopt;
        std::optional<owned_tensor> h = in_.hessians->find(module, it.shape[1]);
        if (!h) h = in_.hessians->find(module_of(it.source), it.shape[1]);  // a fused source's input
        (h ? result_.gptq_layers : result_.rtn_layers).push_back(module);
        return h;
    }

    /// An FP8 weight already on the output's grid is copied (codes and scales), not requantized.
    bool copies_fp8(const plan_item& it) const {
        return !folds_ && it.scale && it.whole_source() && fp8_copy_applies(*it.scale, p_.format, it.scheme, it.shape[1]);
    }

    bool folded(const plan_item& it) const {
        return folds_ && (folds_->row_scale(it.name) || folds_->column_scale(it.name));
    }

    item_read choose_read(const plan_item& it, bool solved, bool copy_fp8) const {
        // One expert of a fused 3-D tensor: its block alone is read (and decoded), see cut_expert.
        if (it.cut) return opt_.read == source_read::mapped ? item_read::mapped : item_read::streamed;
        if (it.scale && !copy_fp8) return item_read::decoded;
        if (opt_.read == source_read::copied) return item_read::whole;
        if (opt_.read == source_read::mapped) return item_read::mapped;
        const bool own_quantizer = has_own_quantizer(p_.format) && it.action != plan_action::keep;  // E4M3, E2M1
        return solved || folded(it) || copy_fp8 || own_quantizer ? item_read::whole : item_read::streamed;
    }

    /// The item's source as a view: the buffer read whole (split parts share it), or the
    /// mapping. Under pread without a whole read, the mapping's bytes only give sizes and
    /// offsets (one expert of a fused 3-D tensor is read on its own by cut_expert).
    tensor_view load_source(const plan_item& it, item_read how) {
        if (copied_.name != it.source && !copied_.name.empty()) {
            behind_.drain();  // a job behind may still be writing from the buffer
            workspace_.outputs.give(std::move(copied_.bytes));  // the previous source's buffer goes before the next is read
            copied_ = owned_tensor{};
        }
        if (!held_whole(how)) return src_.view(it.source);
        if (copied_.name != it.source)
            copied_ = how == item_read::decoded ? src_.decode(it.source, opt_.read != source_read::mapped) : read_whole(it.source);
        return copied_.view();
    }

    /// The source tensor read with pread, into a recycled buffer (its mapping gives the sizes
    /// only: no page of it is read).
    owned_tensor read_whole(const std::string& name) {
        const tensor_view sizes = src_.view(name);
        owned_tensor t{sizes.name, sizes.type, sizes.shape, workspace_.outputs.take(sizes.bytes.size())};
        src_.read_tensor_range(name, 0, t.bytes);
        return t;
    }

    /// The expert's piece of the fused tensor, read on its own (checkpoint_source::read_expert:
    /// with pread unless the conversion reads the mapping, an FP8 block decoded with its
    /// expert's scales), so memory follows one expert and a source truncated underneath is an
    /// io_error naming file and tensor, never a SIGBUS.
    owned_tensor cut_expert(std::size_t i, const tensor_view& full, item_read how) {
        const plan_item& it = p_.items[i];
        if (held_whole(how)) return gather_expert(full, *it.cut, it.name, it.shape);
        return src_.read_expert(it.source, *it.cut, it.name, it.shape, how != item_read::mapped);
    }

    /// A kept tensor, written behind too: a dense embedding is 125 MiB of pwrite, and the
    /// quantization of the untied head that follows reads the same source anyway.
    void write_kept(std::size_t i, const tensor_view& v, item_read how, owned_tensor expert, progress_event ev) {
        const plan_item& it = p_.items[i];
        const bool release = last_use_[it.source] == i;
        if (it.cut) {
            behind_.submit(
                [this, &it, data = std::move(expert), release] {
                    if (it.out_type == it.value_type()) writer_.write(it.name, data.bytes);
                    else writer_.write(it.name, detail::cast_floats(data.bytes, it.value_type(), it.out_type));
                    if (release) src_.release(it.source);
                    writeback_.start(shard_path_.find(it.name)->second);
                },
                [this, ev = std::move(ev)] { emit(ev); });
            return;
        }
        const std::size_t row_bytes =
            it.source_shape.empty() ? v.bytes.size()
                                    : v.bytes.size() / static_cast<std::size_t>(std::max<std::int64_t>(1, it.source_shape[0]));
        auto slice = it.whole_source() ? v.bytes
                                       : v.bytes.subspan(static_cast<std::size_t>(it.row_begin) * row_bytes,
                                                         static_cast<std::size_t>(it.row_end - it.row_begin) * row_bytes);
        if (how == item_read::streamed) {
            const auto offset = static_cast<std::uint64_t>(slice.data() - v.bytes.data());
            behind_.submit(
                [this, &it, offset, length = std::uint64_t{slice.size()}, release] {
                    detail::copy_through_pread(src_, it.source, offset, length, it.source_type, it.out_type, writer_, it.name);
                    if (release) src_.release(it.source);
                    writeback_.start(shard_path_.find(it.name)->second);
                },
                [this, ev = std::move(ev)] { emit(ev); });
            return;
        }
        std::vector<std::byte> unscaled;  // a norm weight divided by its layer's activation scales
        if (const std::vector<float>* r = folds_ ? folds_->row_scale(it.name) : nullptr) {
            unscaled = unscale_rows(v, *r).bytes;
            slice = unscaled;
        }
        behind_.submit(
            [this, &it, slice, unscaled = std::move(unscaled), release] {
                if (it.out_type == it.value_type()) writer_.write(it.name, slice);
                else writer_.write(it.name, detail::cast_floats(slice, it.value_type(), it.out_type));
                if (release) src_.release(it.source);
                writeback_.start(shard_path_.find(it.name)->second);
            },
            [this, ev = std::move(ev)] { emit(ev); });
    }

    /// The imatrix weights of the item's input columns (valid until the next lookup: the
    /// quantizer is done with them by then), when the imatrix covers the item.
    std::span<const float> item_importance(const plan_item& it, const std::string& module) {
        if (!in_.importance || !conversion_inputs::imatrix_selected(opt_, it.name)) return {};
        const std::span<const float> imp = in_.importance->find(it.name, it.shape[1]);
        (imp.empty() ? result_.layers_without_imatrix : result_.imatrix_layers).push_back(module);
        return imp;
    }

    /// Activation scaling: the quantizer takes diag(1/r) W diag(s) and meets inputs x / s.
    /// (A folded weight is read whole, so v holds its bytes: see choose_read.)
    weight_rows fold_rows(const plan_item& it, const tensor_view& v, std::span<const float> imp) const {
        weight_rows w{v, it.row_begin, it.row_end, imp, {}, {}};
        const std::vector<float>* cs = folds_ ? folds_->column_scale(it.name) : nullptr;
        const std::vector<float>* rs = folds_ ? folds_->row_scale(it.name) : nullptr;
        if (!cs && !rs) return w;
        w.folded = apply_folds(v, it.row_begin, it.row_end, cs, rs);
        w.view = w.folded.view();
        w.begin = 0;
        w.end = it.row_end - it.row_begin;
        w.folded_importance = scaled_importance(imp, cs);
        w.importance = w.folded_importance;
        return w;
    }

    /// quantization_report.json's snr_db_as_loaded (loaded_scales.hpp): the SNR once vLLM has
    /// rounded the scales to the dtype it serves the model in; NaN when it keeps them as
    /// stored. A streamed item's rows are read again with pread (its view gives sizes only).
    double loaded_snr(const plan_item& it, const weight_rows& w, item_read how, const quantized_item& q,
                      const std::string& module) {
        const auto kept = vllm_rounds_scales_to(p_.format, vllm_params_dtype(p_), *it.scheme.scale_dtype);
        if (!kept) return std::numeric_limits<double>::quiet_NaN();
        tensor_view rows = detail::row_slice(w.view, w.begin, w.end, it.name);
        owned_tensor read;
        if (how == item_read::streamed && w.folded.bytes.empty() && !it.cut) {
            read = {it.name, rows.type, rows.shape, workspace_.outputs.take(rows.bytes.size())};
            const std::uint64_t row_bytes = static_cast<std::uint64_t>(rows.shape.at(1)) * dtype_size(rows.type);
            src_.read_tensor_range(it.source, static_cast<std::uint64_t>(w.begin) * row_bytes, read.bytes);
            rows = read.view();
        }
        const double db = q.solved ? snr_db_as_loaded(rows, *q.solved, *kept, run_)
                                   : snr_db_as_loaded(rows, q.packed, module, p_.format, it.scheme, *kept, run_);
        workspace_.outputs.give(std::move(read.bytes));
        return db;
    }

    /// Already on the output's grid: codes and scales copied, nothing rounded.
    quantized_item copy_fp8_tensors(const plan_item& it, const tensor_view& v) const {
        quantized_item q;
        const bool by_pread = opt_.read == source_read::pread;
        for (const planned_tensor& t : it.outputs) {
            if (t.type == dtype::F8_E4M3) {
                q.packed.push_back({t.name, t.type, t.shape, std::vector<std::byte>(v.bytes.begin(), v.bytes.end())});
            } else {
                owned_tensor scale = by_pread ? src_.read_tensor(it.scale->name) : owned_tensor{};
                const tensor_view from = by_pread ? scale.view() : src_.view(it.scale->name);
                q.packed.push_back({t.name, t.type, t.shape, std::vector<std::byte>(from.bytes.begin(), from.bytes.end())});
            }
        }
        q.snr_db = std::numeric_limits<double>::infinity();
        return q;
    }

    /// The GPTQ solver's codes under the layer's Hessian `h`, packed by the job behind.
    quantized_item solve_gptq(const plan_item& it, const weight_rows& w, const tensor_view& h) const {
        detail::quantize_result r =
            detail::quantize_rows_gptq(w.view, w.begin, w.end, it.scheme, p_.format, run_, it.name, h, opt_.gptq, w.importance);
        quantized_item q;
        q.solved = std::move(r.q);
        q.snr_db = r.snr_db;
        return q;
    }

    /// Quantized and packed together, band by band, on the pool; a streamed item's bands are
    /// read with pread (w.view is the mapping, used for its sizes only).
    quantized_item quantize_packed_rows(std::size_t i, const weight_rows& w, const tensor_view& v, item_read how,
                                        const std::string& module) {
        const plan_item& it = p_.items[i];
        band_source rows;
        if (how == item_read::streamed && !it.cut) {
            const std::uint64_t row_bytes = static_cast<std::uint64_t>(v.shape.at(1)) * dtype_size(v.type);
            rows = [this, &it, row_bytes](std::int64_t r0, std::int64_t r1, std::span<std::byte> into) {
                (void)r1;  // `into` holds exactly rows [r0, r1)
                src_.read_tensor_range(it.source, static_cast<std::uint64_t>(it.row_begin + r0) * row_bytes, into);
            };
        }
        // step "fused global amax" (convert/fp4_global.hpp): siblings share one global scale
        fp4_group group;
        if (shares_fused_global_scale(p_.format)) group.weight_amax = fused_amax_.group_amax(src_, p_, i);
        if (const auto a = in_.input_amax.find(i); a != in_.input_amax.end()) group.input_amax = a->second;  // W4A4
        detail::packed_result r = detail::quantize_rows_packed(w.view, w.begin, w.end, it.scheme, p_.format, it.model_type(),
                                                               run_, it.name, module, w.importance, rows, group, &workspace_);
        quantized_item q;
        q.packed = std::move(r.tensors);
        q.snr_db = r.snr_db;
        return q;
    }

    /// The job behind: solved codes packed (in the format's layout, act-order's g_idx kept),
    /// then every tensor written. Captures only what outlives the loop body (the plan item
    /// lives in the plan).
    void submit_quantized(std::size_t i, const std::string& module, quantized_item q, progress_event ev) {
        const plan_item& it = p_.items[i];
        behind_.submit([this, &it, module, solved = std::move(q.solved), tensors = std::move(q.packed),
                        release = last_use_[it.source] == i]() mutable {
            if (release) src_.release(it.source);  // madvise of a whole tensor: not on the pool's time
            if (solved) {
                const layout_request r{it.scheme.bits, *it.scheme.scale_dtype, it.model_type(), it.scheme.group_size,
                                       it.value_type(), in_.act_order};
                tensors = with_layout(p_.format, r, [&](const auto& layout) { return layout.pack(*solved, module); });
                solved.reset();  // the codes go before the writes: less held behind
            }
            for (owned_tensor& t : tensors) {
                writer_.write(t.name, t.bytes);
                writeback_.start(shard_path_.find(t.name)->second);
                workspace_.outputs.give(std::move(t.bytes));  // the next weight's tensors reuse its pages
            }
        }, [this, ev = std::move(ev)] { emit(ev); });
    }

    checkpoint_source& src_;
    const std::string& dst_dir_;
    const convert_options& opt_;
    conversion_inputs& in_;
    conversion_result& result_;
    const plan& p_;
    Writer& writer_;
    std::map<std::string, std::size_t> last_use_;
    thread_pool pool_;
    executor run_;
    std::optional<activation_folds> folds_;
    fused_amax_cache fused_amax_;  ///< NVFP4: each fused group's amax, read when first needed
    shard_path_map shard_path_;
    /// source_read::copied, and whole reads under pread: the current source tensor (split
    /// parts share it). Before behind_, so an exception waits for the job that reads it.
    owned_tensor copied_;
    io::early_writeback writeback_;  // used by the jobs behind only
    /// The quantizer's band buffers and the output tensors' storage, given back by the job
    /// behind once written. Before behind_, so it outlives every job.
    packed_workspace workspace_;
    /// Pack + write of an output weight runs behind the quantization of the next one (with
    /// more than one thread): the pool's cores do not wait on the serial pack and pwrite. Its
    /// progress event is sent once its bytes are written.
    write_behind behind_;
};

}  // namespace detail

#if QFORGE_BODIES_HERE
QFORGE_DECL conversion_result convert(const std::string& src_dir, const std::string& dst_dir, const convert_options& opt) {
    if (io::path_exists(dst_dir) && !opt.overwrite)
        fail<io_error>(dst_dir, {}, "destination exists (pass --overwrite to replace it)");
    checkpoint_source src(src_dir);
    conversion_result result;
    result.the_plan = plan_conversion(src, opt);
    result.the_plan.throw_if_refused();
    detail::conversion_inputs in(src_dir, opt, result.the_plan);
    const plan& p = result.the_plan;
    io::atomic_output_dir out(dst_dir, opt.overwrite);
    safetensors::sharded_writer writer(out.path(), detail::output_specs(p), opt.max_shard_bytes);
    {
        detail::conversion_run run(src, dst_dir, opt, in, result, p, writer, detail::shard_paths(out.path(), writer.plan()));
        for (std::size_t i = 0; i < p.items.size(); ++i) run.convert_item(i);
        run.finish();
    }
    writer.finish();
    result.shards = writer.plan().file_names;
    detail::write_model_files(out.path(), src, p, in.act_order, result);
    out.commit();
    return result;
}
#endif

}  // namespace qforge
