// Hugging Face (Llama, Mistral, Qwen2, Qwen3, Mixtral, Qwen3-MoE, gpt-oss) -> GGUF in one streaming pass.
//
//   gguf::convert_options o;
//   o.type = *gguf::parse_file_type("Q4_K_M");
//   o.tokenizer_from = "ref.gguf";              // or o.pre_tokenizer = "llama-bpe" + tokenizer.json
//   gguf::convert_report r = gguf::convert_hf_to_gguf("model_dir", "model.gguf", o, progress);
//
// The whole plan (names, shapes, types, fallbacks, metadata) is fixed before any tensor is
// read; then each tensor is read from its (memory-mapped) shard a chunk of rows at a time,
// converted to float32, permuted (Q/K of Llama/Mistral/Mixtral), quantized with the byte-exact
// ggml kernels and appended to the GGUF, and its pages are released. MoE experts are stacked
// into ffn_{gate,up,down}_exps 3-D tensors by writing expert 0's rows, then expert 1's, ...
// (ne[2] is the slowest dimension), one source tensor mapped at a time, so memory stays at one
// chunk even for the stacked tensors (llama.cpp's converter holds every expert of a layer).
// Metadata keys and their types are those llama.cpp checks (formats.md 5.4, trap 19).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "qforge/convert/gguf/type_choice.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/ggml_type.hpp"
#include "qforge/core/parallel.hpp"

namespace qforge::gguf {

struct convert_options {
    file_type type = *parse_file_type("Q8_0");
    std::vector<type_override> overrides;
    std::string tokenizer_from;   // template GGUF whose tokenizer.* keys are copied
    std::string tokenizer_json;   // default: <src>/tokenizer.json (needs pre_tokenizer)
    std::string pre_tokenizer;    // llama.cpp pre-tokenizer name for tokenizer.json conversion (checked)
    /// Write tokenizer.ggml.model = "no_vocab" when there is no tokenizer. Such a file is
    /// token-id only: llama.cpp loads it (LC src/llama-vocab.cpp load: vocab type NONE with
    /// {arch}.vocab_size dummy tokens), but every front end that tokenizes text (llama-cli,
    /// llama-server, node-llama-cpp) stops at GGML_ASSERT "Tokenizer not initialized".
    bool allow_no_vocab = false;
    std::string model_name;       // general.name (default: the source folder's name)
    /// Importance vector (ne[0] floats) for a GGUF tensor name, or null: a hook for importance
    /// from elsewhere. For a llama.cpp imatrix file use imatrix_file.
    std::function<const std::vector<float>*(const std::string&)> imatrix;
    /// A llama-imatrix file (GGUF or legacy .dat, io/gguf/imatrix.hpp), used as
    /// `llama-quantize --imatrix` uses it: every quantized tensor with an entry of ne[0] values
    /// gets them, a tensor without one is quantized without and reported, an entry of another
    /// size is refused (llama-quantize ignores it for token_embd only), and the output records
    /// quantize.imatrix.{file,dataset,entries_count,chunks_count}.
    std::string imatrix_file;
    std::int64_t chunk_rows = 256;
    /// false (the default): each chunk's source rows are read with pread into a buffer, so a
    /// source truncated or unreadable during the conversion is an io_error naming the file and
    /// tensor. true: rows are read straight from the memory mapping (zero-copy; a source
    /// truncated meanwhile can kill the process with SIGBUS).
    bool read_mapped = false;
    /// true (--repack): the source is packed compressed-tensors MXFP4 (convert/mxfp4_source.hpp) and
    /// each of its packed linears is copied into GGUF MXFP4 blocks, codes and E8M0 exponents bit
    /// for bit (a nibble permutation, layout/gguf/mxfp4.hpp ct_mxfp4_row_to_gguf), whatever
    /// type the mix gives the others; an override asking another type for one is refused, and so
    /// is any source that is not packed MXFP4 (nothing else is lossless in GGUF). The dense
    /// tensors (norms, embeddings, ignored linears) are converted as without --repack.
    bool repack = false;
    /// Runs the rows of a chunk in parallel (e.g. thread_pool::executor()); null: this thread.
    /// The output bytes never depend on it (rows are independent).
    executor exec;
};

struct tensor_report {
    std::string hf_name, gguf_name;
    std::vector<std::int64_t> ne;
    ggml_type requested = ggml_type::f32, chosen = ggml_type::f32;
    std::string fallback;
    std::uint64_t bytes = 0;
    double snr_db = std::numeric_limits<double>::infinity();  // 10 log10(sum x^2 / sum err^2)
    bool permuted = false;
    std::string imatrix;  // with an imatrix file: "used", or why the tensor was quantized without
    bool repacked = false;  // --repack: codes and exponents copied from the packed MXFP4 source
};

struct convert_report {
    std::string arch;
    std::vector<tensor_report> tensors;
    std::uint64_t total_elements = 0, total_bytes = 0;
    double bits_per_weight() const { return total_elements ? 8.0 * static_cast<double>(total_bytes) / static_cast<double>(total_elements) : 0; }
    /// With an imatrix file: the quantized tensors it had no usable entry for, and why.
    std::vector<std::string> without_imatrix() const;
    std::vector<std::string> fallbacks() const;
};

/// Called after each tensor: (tensors done, tensors total, GGUF name just written).
using progress_fn = std::function<void(std::size_t, std::size_t, const std::string&)>;

/// Converts the checkpoint folder `src_dir` to the GGUF file `dst_file` (see the top of the file).
QFORGE_DECL convert_report convert_hf_to_gguf(const std::string& src_dir, const std::string& dst_file,
                                              const convert_options& opt, const progress_fn& progress = {});

}  // namespace qforge::gguf

#if QFORGE_BODIES_HERE
#include "qforge/convert/gguf/detail/conversion.hpp"  // convert_hf_to_gguf, its plan and its tensor stream

namespace qforge::gguf {

QFORGE_DECL std::vector<std::string> convert_report::without_imatrix() const {
    std::vector<std::string> out;
    for (const auto& t : tensors)
        if (!t.imatrix.empty() && t.imatrix != "used") out.push_back(t.gguf_name + ": " + t.imatrix);
    return out;
}

QFORGE_DECL std::vector<std::string> convert_report::fallbacks() const {
    std::vector<std::string> out;
    for (const auto& t : tensors)
        if (!t.fallback.empty()) out.push_back(t.gguf_name + ": " + t.fallback);
    return out;
}

}  // namespace qforge::gguf
#endif
