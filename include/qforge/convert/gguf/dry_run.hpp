// `qforge-convert SRC DST --format gguf --dry-run [--tp 1,2,4,8]`: what convert_hf_to_gguf
// would write, without writing it. The plan is convert_hf_to_gguf's own plan step
// (read_hparams, plan_tensors, choose_types), so the types printed are the types the file would
// get; nothing is read but config.json and the safetensors headers. Each tensor also gets the
// serving check's GGUF block rule (serving_check.hpp gguf_shard_refusal): a row-parallel tensor
// (attn_output, ffn_down: vLLM's RowParallelLinear, and llama.cpp's split over K) must keep whole
// quant blocks in every rank's share of K.
//
//   gguf::dry_run_report r = gguf::dry_run_hf_to_gguf("model_dir", o, {1, 2, 4});
//   gguf::print_dry_run(std::cout, r);
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/gguf/converter.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/ggml_type.hpp"

namespace qforge::gguf {

/// One tensor of the planned file.
struct dry_run_tensor {
    std::string hf_name, gguf_name;         // hf_name: the first source part (expert 0 of a stack)
    std::vector<std::int64_t> ne;
    ggml_type requested = ggml_type::f32, chosen = ggml_type::f32;
    std::string fallback;                   // why chosen differs from requested (empty: it does not)
    std::uint64_t bytes = 0;
    bool row_parallel = false;              // K is split across tensor-parallel ranks
    std::vector<std::optional<std::string>> tp_refusals;  // per degree of dry_run_report::tp
};

struct dry_run_report {
    std::string arch;
    std::vector<int> tp;
    std::vector<dry_run_tensor> tensors;
    std::uint64_t total_elements = 0, total_bytes = 0;
    double bits_per_weight() const { return total_elements ? 8.0 * static_cast<double>(total_bytes) / static_cast<double>(total_elements) : 0; }
};

/// The GGUF plan of `src_dir` under `opt`: every tensor's name, shape, chosen type and why
/// it fell back, and for each tensor-parallel degree in `tp` whether a row-parallel shard
/// would cut a quant block. Reads the source's headers only.
QFORGE_DECL dry_run_report dry_run_hf_to_gguf(const std::string& src_dir, const convert_options& opt, std::span<const int> tp = {});

/// The report as qforge-convert --dry-run prints it.
QFORGE_DECL void print_dry_run(std::ostream& os, const dry_run_report& r);

}  // namespace qforge::gguf

#if QFORGE_BODIES_HERE
#include "qforge/convert/gguf/detail/dry_run.hpp"
#endif
