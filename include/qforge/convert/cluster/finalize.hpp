// `finalize`: the staging folder of a cluster conversion becomes the destination, atomically.
//
//   qforge::conversion_result r = qforge::cluster::finalize("out", opt);
//
// Before anything is written: the plan is made again and its fingerprint checked, and every
// unit's record is checked against the plan (fingerprint, item range, the exact list of output
// tensors and sizes) and every tensor's bytes in the staging shards re-read and checksummed.
// Any missing or bad unit refuses the whole finalize (one unsupported_error naming each unit
// and why); the destination is left as it was. Then: the safetensors headers go into the
// staging shards, the shards are hard-linked into an io::atomic_output_dir (renamed when the
// file system has no links), the index, config.json, the GPTQ side file, the side files of the
// source and quantization_report.json are written exactly as convert() writes them, and the
// folder is fsynced and renamed into place. The staging folder is removed afterwards.
// The result is byte-identical to convert() with the same options (tests/convert/test_cluster.cpp).
#pragma once

#include <string>

#include "qforge/convert/cluster/work.hpp"
#include "qforge/core/config.hpp"

namespace qforge::cluster {

struct finalize_options {
    bool verify_data = true;  ///< re-read and checksum every tensor (false: trust the records)
};

/// Finalizes the cluster conversion of `dst_dir` (see the file comment).
QFORGE_DECL conversion_result finalize(const std::string& dst_dir, const convert_options& opt, finalize_options fo = {});

}  // namespace qforge::cluster

#if QFORGE_BODIES_HERE
#include "qforge/convert/cluster/detail/finalize.hpp"
#endif
