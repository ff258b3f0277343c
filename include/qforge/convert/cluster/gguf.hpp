// GGUF on a cluster: plan, workers i of n and finalize give the bytes of the one-process
// gguf::convert_hf_to_gguf with the same options.
//
//   qforge::cluster::make_gguf_plan("model_dir", "out.gguf", gopt, 64);
//   qforge::cluster::work_gguf("out.gguf", i, 64, gopt);            // on every node, i = 0..63
//   qforge::gguf::convert_report r = qforge::cluster::finalize_gguf("out.gguf", gopt);
//
// Why a GGUF can be split: everything before its data section (key/values, tensor infos,
// padding) follows from convert_hf_to_gguf's own plan step (gguf::detail::plan_gguf: the names,
// shapes and the type mix of llama-quantize's rules, the tokenizer and imatrix keys), and every
// tensor's offset is the running sum of its predecessors' sizes padded to general.alignment
// (io/gguf/writer.hpp encode_header), so `plan` fixes the file's layout without reading a
// tensor. The staging folder ("<parent>/.<name>.qforge-staging", convert/cluster/plan_file.hpp)
// holds one pre-sized (sparse) staging file; each worker pwrites its tensors' bytes at their
// planned offsets (the padding stays the holes' zeros, as the one-process writer's zeros);
// finalize checks every unit's record and checksums, writes the header prefix at offset 0,
// fsyncs and renames the file over the destination (one rename: atomic).
// Every tensor is quantized by the same code as one process (gguf::detail::tensor_stream), and a
// tensor's bytes depend on nothing but its own rows (and its imatrix entry), so any split gives
// the same file. An importance hook (gguf::convert_options::imatrix, a std::function) is refused:
// it cannot be fingerprinted nor shipped to other nodes; give the imatrix file instead.
#pragma once

#include <string>

#include "qforge/convert/cluster/finalize.hpp"
#include "qforge/convert/gguf/converter.hpp"
#include "qforge/core/config.hpp"

namespace qforge::cluster {

/// `plan` for a GGUF: the staging folder with plan.json, tensors.json and the pre-sized file.
QFORGE_DECL plan_summary make_gguf_plan(const std::string& src_dir, const std::string& dst_file, const gguf::convert_options& opt,
                                        std::size_t units, bool overwrite = false, json extra = json());

/// `work` for a GGUF plan: worker `worker` of `workers` (0: one per unit) converts its units.
QFORGE_DECL work_report work_gguf(const std::string& dst_file, std::size_t worker, std::size_t workers, const gguf::convert_options& opt);

/// `finalize` for a GGUF plan: checks every unit, writes the header, renames the file into place.
QFORGE_DECL gguf::convert_report finalize_gguf(const std::string& dst_file, const gguf::convert_options& opt, finalize_options fo = {},
                                               bool overwrite = false);

}  // namespace qforge::cluster

#if QFORGE_BODIES_HERE
#include "qforge/convert/cluster/detail/gguf.hpp"
#endif
