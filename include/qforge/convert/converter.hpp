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
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "qforge/convert/output_format.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/convert/report.hpp"
#include "qforge/convert/rule.hpp"
#include "qforge/core/config.hpp"
#include "qforge/quant/quant_options.hpp"

namespace qforge {

class checkpoint_source;  // convert/source.hpp

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
    /// GPTQ calibration (convert/hessians.hpp): a safetensors file of
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
    /// NVFP4 W4A4 (output_format::compressed_tensors_nvfp4_w4a4): a file of each layer's
    /// calibrated input amax (convert/activation_amax.hpp, JSON or safetensors); the layer's
    /// input_global_scale is 448 * 6 / amax, shared by the members of a fused group. Needed by
    /// that format and refused by every other.
    std::string activation_amax;
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

/// Converts the checkpoint folder `src_dir` into `dst_dir` (see the file comment).
QFORGE_DECL conversion_result convert(const std::string& src_dir, const std::string& dst_dir, const convert_options& opt);

}  // namespace qforge

#if QFORGE_BODIES_HERE
#include "qforge/convert/detail/conversion_run.hpp"  // plan_conversion and convert, and the run they drive
#endif
