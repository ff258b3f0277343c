// The converter: a checkpoint folder in, a quantized checkpoint folder out, tensor by tensor.
//
//   qforge::convert_options opt;
//   opt.format = qforge::output_format::gptq;
//   opt.rules.default_scheme = qforge::quant_spec{4, 64, true, qforge::scale_method::search, qforge::dtype::BF16};
//   opt.progress = [](const qforge::progress_event& e) { /* print a line */ return true; };
//   qforge::conversion_result r = qforge::convert("in", "out", opt);
//
// What it guarantees:
//  - the plan is made (and every refusal raised, as one unsupported_error) before the output
//    folder exists; an existing destination is refused unless `overwrite`;
//  - all files are written into a temporary folder next to the destination and renamed into
//    place at the end; any exception (including one thrown by the progress callback) removes
//    the temporary folder and leaves a previous destination untouched;
//  - input is memory-mapped and each source tensor's pages are released after its last use;
//    a tensor is quantized in row chunks, so peak memory follows the largest tensor, not the
//    model; outputs are written with pwrite at offsets fixed by the plan;
//  - with more than one thread, each output weight is written on a helper thread while the
//    pool quantizes the next one (at most two tensors behind, so memory still follows the
//    largest tensor); its progress event comes once its bytes are written, and
//    before_tensor is called with nothing in flight; the disk write-out of each tensor is
//    started right after it (the final fsync waits less);
//  - the bytes written do not depend on `threads`;
//  - the library prints nothing: progress goes to the callback.
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
#include "qforge/convert/detail/early_writeback.hpp"
#include "qforge/convert/detail/quantize_step.hpp"
#include "qforge/convert/detail/write_behind.hpp"
#include "qforge/convert/format.hpp"
#include "qforge/convert/importance.hpp"
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
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/index.hpp"
#include "qforge/quant/detail/gptq_hessians.hpp"

namespace qforge {

/// One finished output weight (tensor i of n), for progress lines like llama-quantize's.
struct progress_event {
    std::size_t index = 0;  ///< 1-based
    std::size_t count = 0;
    const plan_item* item = nullptr;  ///< name, shape, action, scheme, outputs
    std::string in_type;              ///< "BF16"
    std::string out_type;             ///< "BF16", or "gptq 4b g64 sym search BF16"
    std::uint64_t in_bytes = 0;
    std::uint64_t out_bytes = 0;
    std::optional<double> snr_db;  ///< quantized tensors only
};

/// How source tensors are read.
/// `pread` (the default) never reads the memory mapping: each band of rows the quantizer
/// works on is read with pread into that task's buffer, which is still in cache when it is
/// quantized (as fast as the mapping, bench/convert.cpp); tensors kept as they are go to the
/// output in 4 MiB pread chunks, and GPTQ-solved ones (which need the whole weight) are read
/// whole. A source truncated (or unreadable) at any moment is an io_error naming the file and
/// tensor, never a SIGBUS.
/// `mapped` quantizes straight from the mapping, with every shard's size re-checked before
/// each tensor; a file truncated *while* a tensor is being read can raise SIGBUS.
/// `copied` reads each source tensor whole with pread into one buffer first (SIGBUS-free too,
/// at one copy of the tensor and its memory).
enum class source_read { pread, mapped, copied };

struct convert_options {
    output_format format = output_format::gptq;
    source_read read = source_read::pread;
    rule_set rules;
    unsigned threads = std::max(1u, std::thread::hardware_concurrency());
    std::uint64_t max_shard_bytes = 5'000'000'000;  ///< huggingface_hub's default
    bool overwrite = false;
    /// Called after each output weight; return false to cancel (nothing is left behind).
    std::function<bool(const progress_event&)> progress;
    /// Called before each output weight with its 0-based index (a test hook: throw to simulate
    /// a failure midway).
    std::function<void(std::size_t)> before_tensor;
    /// GPTQ calibration (quant/detail/gptq_hessians.hpp): a safetensors file of
    /// <layer>.hessian [K, K]. Layers with one are solved by GPTQ (`gptq`: dampening,
    /// act-order, static groups; its quant field is filled per layer from the scheme), the
    /// others fall back to round-to-nearest with the same scale rule; conversion_result lists both.
    std::string hessians;
    gptq_solver_options gptq{};
    /// A llama-imatrix file (GGUF or legacy .dat, io/gguf/imatrix.hpp): each layer it has an
    /// entry for (convert/importance.hpp names it) weights the errors of its scale search by
    /// the mean x^2 of each input column, as llm-compressor's imatrix_mse observer does. Only
    /// the search policies (search, mse, lsq) look at errors; under GPTQ the same weights
    /// choose each group's grid. conversion_result lists the layers with and without an entry.
    std::string imatrix;
    /// Which layers the imatrix weights, by weight name (a name, a substring, or "re:" a regex,
    /// as rules select): empty is every layer it has an entry for. The others are quantized as
    /// without an imatrix and listed in neither list of conversion_result.
    std::vector<selector> imatrix_layers;
    /// Activation-aware scaling from the imatrix (convert/activation_fold.hpp): per decoder
    /// layer, power-of-two input-column scales searched on the imatrix-weighted output error and
    /// folded exactly into the norm weights or producing rows; every group's alpha (0 when it
    /// did not help) goes to quantization_report.json. Needs `imatrix`; not with `hessians`.
    bool activation_scaling = false;
    /// The export exists for vLLM CPU's W4A8 kernel (the w4a8-cpu preset): a layer that kernel
    /// cannot take (shapes, bits) is refused at plan time instead of converting and failing to
    /// load, and an fp16 model is warned about (vLLM would take its W4A16 path).
    bool require_w4a8_cpu = false;
};

struct conversion_result {
    plan the_plan;
    conversion_report report;
    std::vector<std::string> shards;
    std::vector<std::string> copied_files;
    std::vector<std::string> gptq_layers;  ///< solved by GPTQ under their Hessian (--hessians)
    std::vector<std::string> rtn_layers;   ///< with --hessians: quantized without one (round-to-nearest)
    std::vector<std::string> imatrix_layers;          ///< with an imatrix: weighted by their entry
    std::vector<std::string> layers_without_imatrix;  ///< with an imatrix: it had no entry for them
};

/// The plan for converting `src` with `opt` (no file is written). Does not throw for refusals:
/// look at plan::refusals.
/// The plan carries the loader warnings (serving_check.hpp loader_warnings). An FP8 source
/// (convert/fp8_source.hpp) is planned from its decoded weights: its scale tensors are folded
/// in, the linears it left dense stay dense unless a later rule of `opt` quantizes them, and
/// its refusals are the plan's.
QFORGE_DECL plan plan_conversion(const checkpoint_source& src, const convert_options& opt);
#if QFORGE_BODIES_HERE
QFORGE_DECL plan plan_conversion(const checkpoint_source& src, const convert_options& opt) {
    const model_config cfg = model_config::from_json(src.config(), src.dir() + "/config.json");
    const fp8_source& fp8 = src.fp8();
    rule_set rules = opt.rules;
    std::vector<rule> kept;  // first: the user's rules, later, win
    for (const std::string& name : fp8.kept_dense) kept.push_back({selector(name), keep_action{}});
    rules.rules.insert(rules.rules.begin(), kept.begin(), kept.end());
    plan p = make_plan(src.model_tensors(), cfg, rules, opt.format);
    p.refusals.insert(p.refusals.begin(), fp8.refusals.begin(), fp8.refusals.end());
    if (p.refused()) return p;
    for (auto& w : loader_warnings(p, cfg, opt.require_w4a8_cpu)) p.warnings.push_back(std::move(w));  // after make_plan's
    if (opt.require_w4a8_cpu)
        for (auto& r : w4a8_cpu_refusals(p, cfg)) p.refusals.push_back(std::move(r));
    return p;
}
#endif

namespace detail {

inline float load_float(const std::byte* p, dtype t) noexcept {
    std::uint16_t h;
    switch (t) {
        case dtype::BF16: std::memcpy(&h, p, 2); return bf16_to_float(h);
        case dtype::F16: std::memcpy(&h, p, 2); return fp16_to_float(h);
        case dtype::F64: {
            double d;
            std::memcpy(&d, p, 8);
            return static_cast<float>(d);
        }
        default: {
            float f;
            std::memcpy(&f, p, 4);
            return f;
        }
    }
}

/// Casts a float tensor's bytes to another float dtype (round to nearest even).
inline std::vector<std::byte> cast_floats(std::span<const std::byte> in, dtype from, dtype to) {
    const std::size_t n = in.size() / dtype_size(from);
    std::vector<std::byte> out(n * dtype_size(to));
    for (std::size_t i = 0; i < n; ++i) {
        const float f = load_float(in.data() + i * dtype_size(from), from);
        std::byte* dst = out.data() + i * dtype_size(to);
        if (to == dtype::BF16 || to == dtype::F16) {
            const std::uint16_t h = to == dtype::BF16 ? float_to_bf16(f) : float_to_fp16(f);
            std::memcpy(dst, &h, 2);
        } else if (to == dtype::F32) {
            std::memcpy(dst, &f, 4);
        } else {
            const double d = f;
            std::memcpy(dst, &d, 8);
        }
    }
    return out;
}

/// Copies bytes [offset, offset + length) of source tensor `name` to output tensor `out_name`
/// in pread chunks (cast to `to` when it differs from `from`): no mapping is read, and memory
/// is one chunk.
template <class Source, class Writer>
void copy_through_pread(const Source& src, const std::string& name, std::uint64_t offset, std::uint64_t length,
                        dtype from, dtype to, Writer& writer, const std::string& out_name) {
    constexpr std::uint64_t chunk = std::uint64_t{4} << 20;  // a multiple of every dtype size
    std::vector<std::byte> buf(static_cast<std::size_t>(std::min(chunk, length)));
    for (std::uint64_t done = 0; done < length;) {
        const std::span<std::byte> b(buf.data(), static_cast<std::size_t>(std::min(chunk, length - done)));
        src.read_tensor_range(name, offset + done, b);
        if (from == to) writer.write(out_name, b);
        else writer.write(out_name, cast_floats(b, from, to));
        done += b.size();
    }
}

inline std::string out_type_text(const plan& p, const plan_item& it) {
    if (it.action == plan_action::keep) return std::string(dtype_name(it.out_type));
    return std::string(format_name(p.format)) + " " + scheme_to_string(it.scheme);
}

}  // namespace detail

/// Converts the checkpoint folder `src_dir` into `dst_dir` (see the file comment).
QFORGE_DECL conversion_result convert(const std::string& src_dir, const std::string& dst_dir, const convert_options& opt);
#if QFORGE_BODIES_HERE
QFORGE_DECL conversion_result convert(const std::string& src_dir, const std::string& dst_dir, const convert_options& opt) {
    if (io::path_exists(dst_dir) && !opt.overwrite)
        fail<io_error>(dst_dir, {}, "destination exists (pass --overwrite to replace it)");
    checkpoint_source src(src_dir);
    conversion_result result;
    result.the_plan = plan_conversion(src, opt);
    const plan& p = result.the_plan;
    p.throw_if_refused();
    std::optional<hessian_file> hessians;
    if (!opt.hessians.empty()) hessians.emplace(opt.hessians);
    const bool gptq_format = p.format == output_format::gptq || p.format == output_format::gptq_v2;
    if (hessians && opt.gptq.act_order && !opt.gptq.static_groups && !gptq_format)
        fail<unsupported_error>(opt.hessians, {}, "act-order regroups columns through g_idx, which only the GPTQ formats carry");
    const bool act_order = hessians && gptq_format && opt.gptq.act_order && !opt.gptq.static_groups;
    std::optional<gguf::importance_matrix> imatrix;
    if (!opt.imatrix.empty()) imatrix.emplace(gguf::importance_matrix::open(opt.imatrix));
    std::optional<importance_lookup> importance;
    if (imatrix) importance.emplace(*imatrix);
    if (opt.activation_scaling && !imatrix)
        fail<unsupported_error>(src_dir, {}, "activation scaling needs the input statistics of an imatrix (--imatrix)");
    if (opt.activation_scaling && hessians)
        fail<unsupported_error>(opt.hessians, {}, "activation scaling with GPTQ Hessians is not supported: GPTQ already uses the full input statistics");
    if (hessians && is_float_format(p.format))
        fail<unsupported_error>(opt.hessians, {}, std::string(format_name(p.format)) + " has no integer grid for the GPTQ solver");

    io::atomic_output_dir out(dst_dir, opt.overwrite);
    std::vector<safetensors::tensor_spec> all;
    for (const auto& it : p.items)
        for (const auto& t : it.outputs) all.push_back({t.name, t.type, t.shape});
    safetensors::sharded_writer writer(out.path(), all, opt.max_shard_bytes);

    std::map<std::string, std::size_t> last_use;
    for (std::size_t i = 0; i < p.items.size(); ++i) last_use[p.items[i].source] = i;

    thread_pool pool(std::max(1u, opt.threads));
    const executor run = pool.executor();
    conversion_report& report = result.report;
    report.format = p.format;
    report.bits_per_weight = p.bits_per_weight();
    report.quantized_bits_per_weight = p.quantized_bits_per_weight();
    std::optional<activation_folds> folds;
    if (opt.activation_scaling) {
        folds.emplace(plan_activation_folds(src, p, model_config::from_json(src.config(), src.dir() + "/config.json"),
                                            *importance, run));
        report.activation_folds = folds->records;
    }
    report.loader_warnings = p.warnings;

    // Pack + write of an output weight runs behind the quantization of the next one (with
    // more than one thread): the pool's cores do not wait on the serial pack and pwrite. Its
    // progress event is sent once its bytes are written. Declared after `writer`, so an
    // exception waits for the job before the writer and the output folder are removed.
    std::map<std::string, std::string, std::less<>> shard_path;  // output tensor -> its shard file
    for (std::size_t k = 0; k < writer.plan().shards.size(); ++k)
        for (const auto& t : writer.plan().shards[k]) shard_path[t.name] = out.path() + "/" + writer.plan().file_names[k];
    detail::early_writeback writeback;  // used by the jobs behind only
    detail::write_behind behind(opt.threads > 1);
    const auto emit = [&](const progress_event& e) {
        if (opt.progress && !opt.progress(e)) fail<error>(dst_dir, e.item->name, "conversion cancelled");
    };

    // source_read::copied, and pread for GPTQ-solved or folded weights: the current source
    // tensor, read whole (split parts share it).
    owned_tensor copied;
    const bool by_pread = opt.read == source_read::pread;
    for (std::size_t i = 0; i < p.items.size(); ++i) {
        const plan_item& it = p.items[i];
        if (opt.before_tensor) {
            behind.drain();  // the hook sees nothing in flight (it may truncate the shards, as a test does)
            opt.before_tensor(i);
        }
        src.verify_unchanged(it.source);  // a shard truncated underneath us: an io_error, not a SIGBUS
        const std::string module(module_of(it.name));
        std::optional<tensor_view> h;
        if (hessians && it.action != plan_action::keep) {
            h = hessians->find(module, it.shape[1]);
            if (!h) h = hessians->find(module_of(it.source), it.shape[1]);  // a fused source's input
            (h ? result.gptq_layers : result.rtn_layers).push_back(module);
        }
        // An FP8 weight already on the output's grid is copied (codes and scales); any other FP8
        // weight is decoded into float32 once (split parts share it). A weight folded by
        // activation scaling, solved by GPTQ, or quantized into a float format is read whole.
        const bool copy_fp8 = !folds && it.scale && it.whole_source() && fp8_copy_applies(*it.scale, p.format, it.scheme, it.shape[1]);
        const bool decode_fp8 = it.scale && !copy_fp8;
        const bool folded_here = folds && (folds->row_scale(it.name) || folds->column_scale(it.name));
        const bool whole = decode_fp8 || opt.read == source_read::copied ||
                           (by_pread && (h || folded_here || copy_fp8 || (is_float_format(p.format) && it.action != plan_action::keep)));
        if (copied.name != it.source && !copied.name.empty()) {
            behind.drain();           // a job behind may still be writing from the buffer
            copied = owned_tensor{};  // the previous source's buffer goes before the next is read
        }
        if (whole && copied.name != it.source)
            copied = decode_fp8 ? src.decode(it.source, opt.read != source_read::mapped) : src.read_tensor(it.source);
        // Under pread without `whole`, full's bytes (the mapping) only give sizes and offsets,
        // except for one expert of a fused 3-D tensor, still gathered from the mapping (one
        // expert in memory): the one read under pread that can SIGBUS on a truncated source.
        const tensor_view full = whole ? copied.view() : src.view(it.source);
        // One expert of a fused 3-D tensor: its matrix gathered on its own (one expert in memory).
        owned_tensor expert;
        if (it.cut) {
            expert = gather_expert(full, *it.cut, it.name, it.shape);
            // The expert's block of the fused tensor is copied out: once its last piece is, drop
            // its pages, so resident memory follows one expert, not the whole fused tensor.
            const plan_item* next = i + 1 < p.items.size() ? &p.items[i + 1] : nullptr;
            if (!whole && (!next || !next->cut || next->source != it.source || next->cut->expert != it.cut->expert))
                src.release(it.source, expert_block_bytes(full) * static_cast<std::uint64_t>(it.cut->expert),
                            expert_block_bytes(full));
        }
        const tensor_view v = it.cut ? expert.view() : full;
        progress_event ev{i + 1, p.items.size(), &it, std::string(dtype_name(it.source_type)),
                          detail::out_type_text(p, it), it.in_bytes(), it.out_bytes(), std::nullopt};
        if (it.action == plan_action::keep && it.cut) {
            behind.submit(
                [&src, &writer, &writeback, &shard_path, &it, data = std::move(expert), release = last_use[it.source] == i] {
                    if (it.out_type == it.source_type) writer.write(it.name, data.bytes);
                    else writer.write(it.name, detail::cast_floats(data.bytes, it.source_type, it.out_type));
                    if (release) src.release(it.source);
                    writeback.start(shard_path.find(it.name)->second);
                },
                [&emit, ev = std::move(ev)] { emit(ev); });
            continue;
        }
        if (it.action == plan_action::keep) {
            // Written behind too: a dense embedding is 125 MiB of pwrite, and the quantization
            // of the untied head that follows reads the same source anyway.
            const std::size_t row_bytes =
                it.source_shape.empty() ? v.bytes.size()
                                        : v.bytes.size() / static_cast<std::size_t>(std::max<std::int64_t>(1, it.source_shape[0]));
            auto slice = it.whole_source()
                             ? v.bytes
                             : v.bytes.subspan(static_cast<std::size_t>(it.row_begin) * row_bytes,
                                               static_cast<std::size_t>(it.row_end - it.row_begin) * row_bytes);
            if (by_pread && !whole) {
                const auto offset = static_cast<std::uint64_t>(slice.data() - v.bytes.data());
                behind.submit(
                    [&src, &writer, &writeback, &shard_path, &it, offset, length = std::uint64_t{slice.size()},
                     release = last_use[it.source] == i] {
                        detail::copy_through_pread(src, it.source, offset, length, it.source_type, it.out_type, writer, it.name);
                        if (release) src.release(it.source);
                        writeback.start(shard_path.find(it.name)->second);
                    },
                    [&emit, ev = std::move(ev)] { emit(ev); });
                continue;
            }
            std::vector<std::byte> folded;  // a norm weight divided by its layer's activation scales
            if (const std::vector<float>* r = folds ? folds->row_scale(it.name) : nullptr) {
                folded = unscale_rows(v, *r).bytes;
                slice = folded;
            }
            behind.submit(
                [&src, &writer, &writeback, &shard_path, &it, slice, folded = std::move(folded), release = last_use[it.source] == i] {
                    if (it.out_type == it.value_type()) writer.write(it.name, slice);
                    else writer.write(it.name, detail::cast_floats(slice, it.value_type(), it.out_type));
                    if (release) src.release(it.source);
                    writeback.start(shard_path.find(it.name)->second);
                },
                [&emit, ev = std::move(ev)] { emit(ev); });
            continue;
        }
        std::span<const float> imp;  // valid until the next lookup: the quantizer is done with it by then
        const bool imatrix_selected =
            opt.imatrix_layers.empty() ||
            std::any_of(opt.imatrix_layers.begin(), opt.imatrix_layers.end(), [&](const selector& s) { return s.matches(it.name); });
        if (importance && imatrix_selected) {
            imp = importance->find(it.name, it.shape[1]);
            (imp.empty() ? result.layers_without_imatrix : result.imatrix_layers).push_back(module);
        }
        // Activation scaling: the quantizer takes diag(1/r) W diag(s) and meets inputs x / s.
        // (A folded weight is read whole, so v holds its bytes: see `whole`.)
        tensor_view qv = v;
        std::int64_t qb = it.row_begin, qe = it.row_end;
        owned_tensor folded;
        std::vector<float> folded_imp;
        const std::vector<float>* cs = folds ? folds->column_scale(it.name) : nullptr;
        const std::vector<float>* rs = folds ? folds->row_scale(it.name) : nullptr;
        if (cs || rs) {
            folded = apply_folds(v, it.row_begin, it.row_end, cs, rs);
            qv = folded.view();
            qb = 0;
            qe = it.row_end - it.row_begin;
            folded_imp = scaled_importance(imp, cs);
            imp = folded_imp;
        }
        // Without a Hessian: quantized and packed together, band by band, on the pool. With
        // one: the GPTQ solver's codes, packed on the helper thread.
        std::optional<quantized_tensor> solved;
        std::vector<owned_tensor> packed;
        double snr = 0;
        if (copy_fp8) {  // already on the output's grid: codes and scales copied, nothing rounded
            for (const planned_tensor& t : it.outputs) {
                if (t.type == dtype::F8_E4M3) {
                    packed.push_back({t.name, t.type, t.shape, std::vector<std::byte>(v.bytes.begin(), v.bytes.end())});
                } else {
                    owned_tensor scale = by_pread ? src.read_tensor(it.scale->name) : owned_tensor{};
                    const tensor_view from = by_pread ? scale.view() : src.view(it.scale->name);
                    packed.push_back({t.name, t.type, t.shape, std::vector<std::byte>(from.bytes.begin(), from.bytes.end())});
                }
            }
            snr = std::numeric_limits<double>::infinity();
        } else if (h) {
            detail::quantize_result q =
                detail::quantize_rows_gptq(qv, qb, qe, it.scheme, p.format, run, it.name, *h, opt.gptq, imp);
            solved = std::move(q.q);
            snr = q.snr_db;
        } else {
            band_source rows;
            if (by_pread && !whole && !it.cut) {  // qv is v, the mapping, used for its sizes only
                const std::uint64_t row_bytes = static_cast<std::uint64_t>(v.shape.at(1)) * dtype_size(v.type);
                rows = [&src, &it, row_bytes](std::int64_t r0, std::int64_t r1, std::span<std::byte> into) {
                    (void)r1;  // `into` holds exactly rows [r0, r1)
                    src.read_tensor_range(it.source, static_cast<std::uint64_t>(it.row_begin + r0) * row_bytes, into);
                };
            }
            detail::packed_result q = detail::quantize_rows_packed(qv, qb, qe, it.scheme, p.format, it.model_type(), run,
                                                                   it.name, module, imp, rows);
            packed = std::move(q.tensors);
            snr = q.snr_db;
        }
        report.tensors.push_back({module, it.shape, it.scheme, snr});
        ev.snr_db = snr;
        // Captures only what outlives the loop body (the plan item lives in the plan).
        behind.submit([&src, &writer, &writeback, &shard_path, &p, &it, act_order, module, solved = std::move(solved),
                       tensors = std::move(packed), release = last_use[it.source] == i]() mutable {
            if (release) src.release(it.source);  // madvise of a whole tensor: not on the pool's time
            if (solved) {
                auto pack = [&](const auto& layout) { return layout.pack(*solved, module); };
                tensors = act_order ? with_gptq_layout(it.scheme.bits,
                                                       gptq_options{p.format == output_format::gptq ? gptq_format::v1
                                                                                                    : gptq_format::v2,
                                                                    *it.scheme.scale_dtype, true},
                                                       pack)
                                    : with_layout(p.format, it.scheme.bits, *it.scheme.scale_dtype, it.model_type(), pack);
                solved.reset();  // the codes go before the writes: less held behind
            }
            for (const owned_tensor& t : tensors) {
                writer.write(t.name, t.bytes);
                writeback.start(shard_path.find(t.name)->second);
            }
        }, [&emit, ev = std::move(ev)] { emit(ev); });
    }
    behind.drain();
    writer.finish();
    result.shards = writer.plan().file_names;

    json cfg = src.config();
    if (!cfg.is_object()) cfg = json::object();
    if (p.untied) cfg.set("tie_word_embeddings", false);
    // GPTQ act-order leaves g_idx non-monotonic: loaders must be told (vLLM reads desc_act).
    const bool desc_act = act_order && !result.gptq_layers.empty();
    json qc = p.quantization_config;
    if (desc_act && qc.is_object()) qc.set("desc_act", true);
    cfg.set("quantization_config", qc);
    io::write_config(out.path(), cfg);
    if (p.format == output_format::gptq || p.format == output_format::gptq_v2) {
        const auto s = *p.main_scheme();
        const json side = with_gptq_layout(majority_scheme(p.linears)->bits,
                                           gptq_options{p.format == output_format::gptq ? gptq_format::v1 : gptq_format::v2,
                                                        *s.scale_dtype, desc_act},
                                           [&](const auto& layout) { return layout.side_file(p.linears); });
        io::write_json_file(out.file("quantize_config.json"), side);
    }
    result.copied_files = io::copy_side_files(src.dir(), out.path());
    io::write_json_file(out.file("quantization_report.json"), report.to_json());
    out.commit();
    return result;
}
#endif

}  // namespace qforge
