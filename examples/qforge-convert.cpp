// qforge-convert: a bf16/fp16 (or FP8 block-scaled) Hugging Face checkpoint in, a GPTQ / AWQ /
// compressed-tensors (integer or FP8) / native FP8 / GGUF checkpoint out.
//
//   qforge-convert SRC DST --preset w4a8-cpu
//   qforge-convert SRC DST --format compressed-tensors --bits 4 --group 128 --asym --dry-run
//
// On a cluster (convert/cluster.hpp; README "Converting on a cluster"):
//   qforge-convert plan SRC DST --units 64 --preset w4a16      # headers only: the plan file
//   qforge-convert work DST [--unit I] [--of N] [--threads T]   # each worker (Slurm array / Indexed Job)
//   qforge-convert finalize DST                                  # verify, headers, index, rename
//     (--no-verify-data: trust the unit records, do not re-read and checksum every tensor)
//   --format gguf plans a GGUF the same way (DST is the .gguf file)
//
// Options live in one table (name, argument, help, handler): a new option is one entry.
// The library prints nothing; this program prints one progress line per tensor on stderr,
// the report summary at the end, and on any refusal a single line and exit status 1.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <unistd.h>

#include "qforge/convert/cluster.hpp"
#include "qforge/convert/converter.hpp"
#include "qforge/convert/gguf/converter.hpp"
#include "qforge/convert/gguf/dry_run.hpp"
#include "qforge/convert/gpt_oss_mxfp4.hpp"
#include "qforge/convert/repack_checkpoint.hpp"
#include "qforge/convert/serving_check.hpp"

namespace {

using namespace qforge;

struct settings {
    std::string src, dst;
    std::optional<output_format> format;
    quant_spec scheme{4, 128, true, scale_method::minmax, std::nullopt};
    bool lm_head = false;
    std::vector<std::string> targets, ignore, split_qkv, split_gate_up;
    unsigned threads = 0;
    std::uint64_t max_shard = 5'000'000'000;
    bool dry_run = false, overwrite = false, quiet = false;
    std::string hessians;  // GPTQ calibration file
    gptq_solver_options gptq{};
    bool repack = false, requantize = false;  // --repack
    int qat_bits = 0;
    bool gguf = false;  // --format gguf: one streaming pass HF -> GGUF
    bool gpt_oss_mxfp4 = false;  // --format gpt-oss-mxfp4: a float gpt-oss into OpenAI's native MXFP4
    std::string gguf_type = "Q4_K_M", tokenizer_from, pre_tokenizer;
    std::string activation_amax;  // NVFP4 W4A4: calibrated input amax per layer
    std::string imatrix;  // llama-imatrix output
    std::vector<std::string> imatrix_layers;
    bool activation_scaling = false;
    std::vector<std::string> gguf_overrides;
    bool no_vocab = false;
    bool read_copy = false, read_mapped = false;
    std::vector<std::string> schemes;  // --scheme SEL=SPEC, resolved against the final scheme
    std::vector<int> tp;               // --tp 1,2,4,8: the serving check's degrees
    bool require_w4a8_cpu = false;     // the w4a8-cpu preset
    bool bits_given = false;  // --bits on the command line (the 8-bit formats default to 8)
    bool group_given = false;  // --group on the command line (NVFP4 / MXFP4 default to their group)
};

struct preset {
    std::string_view name;
    output_format format;
    quant_spec scheme;
    bool lm_head;
    std::string_view purpose;
};

const std::vector<preset>& presets() {
    static const std::vector<preset> p{
        {"w4a8-cpu", output_format::gptq, {4, 64, true, scale_method::search, dtype::BF16}, true,
         "vLLM CPU W4A8 (AMX int4_scaled_mm): the seed exporter's job, lm_head untied+quantized"},
        {"w4a16", output_format::compressed_tensors, {4, 128, true, scale_method::minmax, std::nullopt}, false,
         "llm-compressor W4A16: int4 sym g128 for vLLM WNA16 / Marlin"},
        {"w4a16-asym", output_format::compressed_tensors, {4, 128, false, scale_method::minmax, std::nullopt}, false,
         "llm-compressor W4A16_ASYM: int4 asym g128 (zero points)"},
        {"w8a16", output_format::compressed_tensors, {8, -1, true, scale_method::minmax, std::nullopt}, false,
         "llm-compressor W8A16: int8 sym per channel"},
        {"gptq-w4g128", output_format::gptq, {4, 128, true, scale_method::minmax, dtype::F16}, false,
         "AutoGPTQ/GPTQModel-style 4-bit g128 v1 checkpoint (RTN, no calibration)"},
        {"awq-w4g128", output_format::awq, {4, 128, false, scale_method::minmax, dtype::F16}, false,
         "AutoAWQ GEMM 4-bit g128 (zero points, no activation scaling)"},
        {"fp8-dynamic", output_format::compressed_tensors_fp8, {8, -1, true, scale_method::minmax, std::nullopt}, false,
         "llm-compressor FP8_DYNAMIC: E4M3 per channel, dynamic per-token FP8 activations (vLLM W8A8Fp8)"},
        {"w8a8-int8", output_format::compressed_tensors_w8a8, {8, -1, true, scale_method::minmax, std::nullopt}, false,
         "llm-compressor W8A8 (INT8): int8 sym per channel, dynamic per-token int8 activations (vLLM W8A8Int8)"},
        {"fp8-block", output_format::compressed_tensors_fp8, {8, 128, true, scale_method::minmax, std::nullopt}, false,
         "llm-compressor FP8_BLOCK: E4M3 128x128 blocks, dynamic group-128 FP8 activations"},
        {"nvfp4a16", output_format::compressed_tensors_nvfp4, {4, 16, true, scale_method::minmax, std::nullopt}, false,
         "llm-compressor NVFP4A16: E2M1, E4M3 group-16 scales, one F32 global scale per fused group (vLLM W4A16Fp4)"},
        {"nvfp4", output_format::compressed_tensors_nvfp4_w4a4, {4, 16, true, scale_method::minmax, std::nullopt}, false,
         "llm-compressor NVFP4 (W4A4): NVFP4A16's weights, FP4 activations under input_global_scale from --activation-amax (vLLM W4A4Fp4)"},
        {"mxfp4a16", output_format::compressed_tensors_mxfp4, {4, 32, true, scale_method::minmax, std::nullopt}, false,
         "llm-compressor MXFP4A16: E2M1, E8M0 group-32 scales (vLLM W4A16Mxfp4)"},
    };
    return p;
}

/// Bits per weight a scheme costs on a large layer (codes + 16-bit scales + packed zeros).
double nominal_bpw(output_format f, const quant_spec& s) {
    const double g = s.group_size > 0 ? static_cast<double>(s.group_size) : 4096.0;
    if (is_float_format(f)) return 8.0 + 16.0 / (s.group_size > 0 ? g * g : g);  // one scale per row or B x B block
    if (fixed_group_size(f)) return 4.0 + 8.0 / g;  // E2M1 + one 8-bit scale per group (NVFP4's global: 32 bits a layer)
    const bool zeros = (f != output_format::compressed_tensors && f != output_format::compressed_tensors_w8a8) || !s.symmetric;
    return s.bits + 16.0 / g + (zeros ? s.bits / g : 0.0);
}

void list_presets() {
    std::printf("%-12s %-22s %4s %6s %6s  %s\n", "preset", "format", "bits", "group", "bpw", "for");
    for (const preset& p : presets())
        std::printf("%-12.*s %-22.*s %4d %6s %6.2f  %.*s\n", static_cast<int>(p.name.size()), p.name.data(),
                    static_cast<int>(format_name(p.format).size()), format_name(p.format).data(), p.scheme.bits,
                    p.scheme.group_size > 0 ? std::to_string(p.scheme.group_size).c_str() : "chan",
                    nominal_bpw(p.format, p.scheme), static_cast<int>(p.purpose.size()), p.purpose.data());
}

[[noreturn]] void usage_error(const std::string& why) {
    std::fprintf(stderr, "qforge-convert: %s (see --help)\n", why.c_str());
    std::exit(2);
}

std::uint64_t parse_size(const std::string& s) {
    std::size_t used = 0;
    double v = 0;
    try {
        v = std::stod(s, &used);
    } catch (...) {
        usage_error("bad size '" + s + "'");
    }
    std::string unit = s.substr(used);
    for (auto& c : unit) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    double mul = 1;
    if (unit == "" || unit == "B") mul = 1;
    else if (unit == "KB") mul = 1e3;
    else if (unit == "MB") mul = 1e6;
    else if (unit == "GB") mul = 1e9;
    else if (unit == "KIB") mul = 1024.0;
    else if (unit == "MIB") mul = 1024.0 * 1024;
    else if (unit == "GIB") mul = 1024.0 * 1024 * 1024;
    else usage_error("bad size unit in '" + s + "' (B, KB, MB, GB, KiB, MiB, GiB)");
    if (v <= 0) usage_error("size must be positive: '" + s + "'");
    return static_cast<std::uint64_t>(v * mul);
}

std::vector<std::string> split_list(const std::string& s) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, ',');)
        if (!item.empty()) out.push_back(item);
    return out;
}

int parse_int(const std::string& s, const char* what) {
    try {
        std::size_t used = 0;
        const int v = std::stoi(s, &used);
        if (used == s.size()) return v;
    } catch (...) {
    }
    usage_error(std::string("bad ") + what + " '" + s + "'");
}

struct option {
    std::string_view name;
    std::string_view arg;  ///< empty: a flag
    std::string_view help;
    std::function<void(settings&, const std::string&)> apply;
};

const std::vector<option>& options() {
    static const std::vector<option> o{
        {"--format", "F", "gptq | gptq-v2 | awq | compressed-tensors | compressed-tensors-w8a8 | compressed-tensors-fp8 | fp8 | "
                          "compressed-tensors-nvfp4 | compressed-tensors-nvfp4-w4a4 | compressed-tensors-mxfp4 | gguf | gpt-oss-mxfp4 "
                          "(gpt-oss's experts as OpenAI ships them, the rest as it is)",
         [](settings& s, const std::string& v) {
             s.gguf = v == "gguf";
             s.gpt_oss_mxfp4 = v == "gpt-oss-mxfp4";
             if (s.gpt_oss_mxfp4) s.format.reset();  // a preset given before it no longer applies
             if (s.gguf || s.gpt_oss_mxfp4) return;
             s.format = parse_format(v);
             if (!s.format) usage_error("unknown format '" + v + "'");
         }},
        {"--bits", "N", "bits per weight, 2..8 (default 4; 8 for the FP8 and W8A8 formats)",
         [](settings& s, const std::string& v) {
             s.scheme.bits = parse_int(v, "bit width");
             s.bits_given = true;
         }},
        {"--group", "G", "group size, a power of two, or -1 for per channel (default 128; NVFP4 16, MXFP4 32); FP8 formats: B x B blocks",
         [](settings& s, const std::string& v) {
             s.scheme.group_size = parse_int(v, "group size");
             s.group_given = true;
         }},
        {"--sym", "", "symmetric grid, zero pinned at 2^(bits-1) (default)", [](settings& s, const std::string&) { s.scheme.symmetric = true; }},
        {"--asym", "", "asymmetric grid with integer zero points", [](settings& s, const std::string&) { s.scheme.symmetric = false; }},
        {"--scale", "M", "minmax | absmax | search | mse | lsq (default minmax; lsq = least-squares fit)",
         [](settings& s, const std::string& v) {
             const auto m = parse_scale_method(v);
             if (!m) usage_error("unknown scale rule '" + v + "'");
             s.scheme.scale = *m;
         }},
        {"--hessians", "FILE", "GPTQ: safetensors of <layer>.hessian [K,K]; layers without one use round-to-nearest",
         [](settings& s, const std::string& v) { s.hessians = v; }},
        {"--act-order", "", "GPTQ: columns by descending Hessian diagonal (desc_act, g_idx)",
         [](settings& s, const std::string&) { s.gptq.act_order = true; }},
        {"--static-groups", "", "GPTQ: group scales from the original weights (g_idx stays k/g)",
         [](settings& s, const std::string&) { s.gptq.static_groups = true; }},
        {"--damp", "F", "GPTQ: dampening, a fraction of mean diag(H) (default 0.01)",
         [](settings& s, const std::string& v) {
             char* end = nullptr;
             s.gptq.damp_percent = std::strtod(v.c_str(), &end);
             if (end == v.c_str() || *end != '\0' || !(s.gptq.damp_percent >= 0)) usage_error("bad --damp '" + v + "'");
         }},
        {"--scale-dtype", "T", "auto | bf16 | fp16 (auto: fp16 for GPTQ/AWQ, the model dtype for compressed-tensors)",
         [](settings& s, const std::string& v) {
             if (v == "auto") s.scheme.scale_dtype.reset();
             else if (v == "bf16" || v == "BF16") s.scheme.scale_dtype = dtype::BF16;
             else if (v == "fp16" || v == "F16" || v == "f16") s.scheme.scale_dtype = dtype::F16;
             else usage_error("unknown scale dtype '" + v + "'");
         }},
        {"--lm-head", "", "quantize lm_head too (a tied head is untied: the table stays dense)",
         [](settings& s, const std::string&) { s.lm_head = true; }},
        {"--targets", "LIST", "quantize only these (comma list: exact name, dotted suffix or re:regex)",
         [](settings& s, const std::string& v) { for (auto& t : split_list(v)) s.targets.push_back(t); }},
        {"--ignore", "LIST", "keep these dense (comma list; applied last, so they win)",
         [](settings& s, const std::string& v) { for (auto& t : split_list(v)) s.ignore.push_back(t); }},
        {"--scheme", "SEL=SPEC", "give the selected linears their own scheme (repeatable, last match wins), e.g. "
                                 "'re:.*down_proj=8b,per-channel' or 'mlp.up_proj=g64,asym'; SPEC: Nb | gN | per-channel | "
                                 "sym | asym | a scale rule | dense; unnamed fields come from --bits/--group/--sym/--scale",
         [](settings& s, const std::string& v) { s.schemes.push_back(v); }},
        {"--tp", "LIST", "serving check: for each tensor-parallel degree (e.g. 1,2,4,8) whether vLLM's kernels take every shard",
         [](settings& s, const std::string& v) {
             for (const auto& t : split_list(v)) {
                 const int n = parse_int(t, "tensor-parallel degree");
                 if (n < 1) usage_error("--tp degrees must be at least 1");
                 s.tp.push_back(n);
             }
         }},
        {"--split-qkv", "NAME", "split a fused q/k/v projection (e.g. qkv_proj) by the config's head counts",
         [](settings& s, const std::string& v) { s.split_qkv.push_back(v); }},
        {"--split-gate-up", "NAME", "split a fused gate/up projection (e.g. gate_up_proj)",
         [](settings& s, const std::string& v) { s.split_gate_up.push_back(v); }},
        {"--preset", "NAME", "start from a preset (see --list-presets); later options override it", nullptr},
        {"--threads", "N", "worker threads (default: all cores)",
         [](settings& s, const std::string& v) {
             const int n = parse_int(v, "thread count");
             if (n < 1) usage_error("--threads must be at least 1");
             s.threads = static_cast<unsigned>(n);
         }},
        {"--max-shard-size", "SIZE", "largest output shard, e.g. 5GB, 500MB, 2GiB (default 5GB)",
         [](settings& s, const std::string& v) { s.max_shard = parse_size(v); }},
        {"--dry-run", "", "print the plan (per tensor in -> out, totals, bits per weight; with --format gguf the type per tensor and, with --tp, the block rule per degree) and stop",
         [](settings& s, const std::string&) { s.dry_run = true; }},
        {"--overwrite", "", "replace an existing destination (only once the new one is complete)",
         [](settings& s, const std::string&) { s.overwrite = true; }},
        {"--quiet", "", "no progress lines", [](settings& s, const std::string&) { s.quiet = true; }},
        {"--type", "T", "with --format gguf: Q4_K_M (default), Q8_0, Q4_0, Q6_K, ... (llama-quantize names)",
         [](settings& s, const std::string& v) { s.gguf_type = v; }},
        {"--type-override", "NAME=T", "with --format gguf: a GGUF tensor name or re:regex given its own type (repeatable)",
         [](settings& s, const std::string& v) { s.gguf_overrides.push_back(v); }},
        {"--tokenizer-from", "FILE", "with --format gguf: copy every tokenizer.* key from this GGUF",
         [](settings& s, const std::string& v) { s.tokenizer_from = v; }},
        {"--pre-tokenizer", "NAME", "with --format gguf: convert SRC/tokenizer.json (byte-level BPE) with this llama.cpp pre-tokenizer (llama-bpe, qwen2, gpt-2, ...; an unknown name is refused with the list)",
         [](settings& s, const std::string& v) { s.pre_tokenizer = v; }},
        {"--no-vocab", "", "with --format gguf: write no tokenizer (tokenizer.ggml.model = no_vocab): token-id use only, llama.cpp front ends that tokenize text abort (\"Tokenizer not initialized\")",
         [](settings& s, const std::string&) { s.no_vocab = true; }},
        {"--activation-amax", "FILE", "NVFP4 W4A4 (preset nvfp4): each layer's calibrated input max |x|, JSON {\"<module>\": amax} or safetensors <module>.input_amax",
         [](settings& s, const std::string& v) { s.activation_amax = v; }},
        {"--imatrix", "FILE", "a llama-imatrix file (GGUF or .dat): GGUF uses it as llama-quantize --imatrix does; the other formats weight the scale search (--scale search|mse|lsq) by it",
         [](settings& s, const std::string& v) { s.imatrix = v; }},
        {"--imatrix-layers", "SEL", "with --imatrix: only these layers (a name, a substring or re:REGEX; repeatable) are weighted by it",
         [](settings& s, const std::string& v) { s.imatrix_layers.push_back(v); }},
        {"--activation-scaling", "", "with --imatrix: per-layer power-of-two input scales (AWQ's idea), folded exactly into the norms and producing rows",
         [](settings& s, const std::string&) { s.activation_scaling = true; }},
        {"--read-copy", "", "read each source tensor whole with pread before quantizing it (the default reads it band by band, also with pread; both turn a file truncated underneath into an error, never a SIGBUS)",
         [](settings& s, const std::string&) { s.read_copy = true; }},
        {"--read-mapped", "", "quantize straight from the memory mapping (zero-copy; a source truncated while it is read can kill the process with SIGBUS)",
         [](settings& s, const std::string&) { s.read_mapped = true; }},
        {"--repack", "", "SRC is already quantized (GPTQ, AWQ, compressed-tensors, fake-quant QAT, FP8): move its codes into --format bit for bit, or refuse with the reason; with --format gguf: MXFP4 codes (compressed-tensors, gpt-oss native experts) into GGUF MXFP4",
         [](settings& s, const std::string&) { s.repack = true; }},
        {"--requantize", "", "with --repack: dequantize and quantize again the layers --format cannot hold exactly (SNR reported)",
         [](settings& s, const std::string&) { s.requantize = true; }},
        {"--qat-bits", "N", "with --repack: bits of a fake-quantized checkpoint that has no quantization_config",
         [](settings& s, const std::string& v) { s.qat_bits = parse_int(v, "bit width"); }},
    };
    return o;
}

void print_help() {
    std::printf(
        "usage: qforge-convert SRC DST [--preset NAME | --format F] [options]\n"
        "       qforge-convert plan SRC DST --units N [options]   (cluster: then work, finalize)\n"
        "       qforge-convert work DST [--unit I] [--of N] [--threads T]\n"
        "       qforge-convert finalize DST [--threads T] [--verify-data (the default) | --no-verify-data]\n"
        "Converts a bf16/fp16 Hugging Face checkpoint folder SRC into a quantized checkpoint DST.\n"
        "Defaults: the linears of the decoder blocks are quantized; embeddings, norms, biases, MoE\n"
        "routers and lm_head stay dense. Rules: last match wins; names are exact, dotted suffixes\n"
        "or re:<regex> matched against the whole name.\n\noptions:\n");
    for (const option& o : options()) {
        std::string left(o.name);
        if (!o.arg.empty()) left += " " + std::string(o.arg);
        std::printf("  %-22s %.*s\n", left.c_str(), static_cast<int>(o.help.size()), o.help.data());
    }
    std::printf("  %-22s %s\n  %-22s %s\n", "--list-presets", "print the presets", "--help", "this text");
}

settings parse(int argc, char** argv) {
    settings s;
    std::vector<std::string> args(argv + 1, argv + argc);
    // A preset first, wherever it is given, so explicit options override it.
    for (std::size_t i = 0; i < args.size(); ++i)
        if (args[i] == "--preset") {
            if (i + 1 >= args.size()) usage_error("--preset needs a name");
            const preset* found = nullptr;
            for (const preset& p : presets())
                if (p.name == args[i + 1]) found = &p;
            if (!found) usage_error("unknown preset '" + args[i + 1] + "' (see --list-presets)");
            s.format = found->format;
            s.scheme = found->scheme;
            s.lm_head = found->lm_head;
            s.require_w4a8_cpu = found->name == "w4a8-cpu";
        }
    std::vector<std::string> positional;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        if (a == "--help" || a == "-h") {
            print_help();
            std::exit(0);
        }
        if (a == "--list-presets") {
            list_presets();
            std::exit(0);
        }
        if (!a.starts_with("--")) {
            positional.push_back(a);
            continue;
        }
        const option* opt = nullptr;
        for (const option& o : options())
            if (o.name == a) opt = &o;
        if (!opt) usage_error("unknown option " + a);
        std::string value;
        if (!opt->arg.empty()) {
            if (i + 1 >= args.size()) usage_error(a + " needs a value");
            value = args[++i];
        }
        if (opt->apply) opt->apply(s, value);
    }
    if (positional.size() != 2) usage_error("expected SRC and DST");
    s.src = positional[0];
    s.dst = positional[1];
    if (!s.format && !s.gguf && !s.gpt_oss_mxfp4) usage_error("give --format or --preset");
    if (s.gpt_oss_mxfp4 && (s.repack || s.bits_given || s.group_given || !s.targets.empty() || !s.ignore.empty() || !s.schemes.empty() ||
                            !s.imatrix.empty() || !s.hessians.empty() || !s.activation_amax.empty()))
        usage_error("--format gpt-oss-mxfp4 has no options of its own: its experts are MXFP4 (32-input groups, E8M0 scales) "
                    "and everything else is copied; only --threads, --max-shard-size, --overwrite, --dry-run and --quiet apply");
    if (s.format && needs_input_amax(*s.format) && s.activation_amax.empty())
        usage_error(std::string(format_name(*s.format)) + " (W4A4) needs each layer's input_global_scale = 448*6 / amax of its "
                    "activations, which only calibration gives (an imatrix holds mean squares, not amax): give --activation-amax FILE, "
                    "or use nvfp4a16");
    if (!s.activation_amax.empty() && (!s.format || !needs_input_amax(*s.format)))
        usage_error("--activation-amax is for NVFP4 W4A4 (--preset nvfp4)");
    if (s.gguf && s.requantize) usage_error("--requantize is not offered with --format gguf (--repack copies MXFP4 codes or refuses)");
    if (s.activation_scaling && (s.imatrix.empty() || s.gguf))
        usage_error("--activation-scaling takes the statistics of --imatrix, for the safetensors formats");
    if (!s.imatrix.empty() && !s.gguf && s.scheme.scale != scale_method::search && s.scheme.scale != scale_method::mse &&
        s.scheme.scale != scale_method::lsq)
        usage_error("--imatrix weights the errors of a scale search: use --scale search, mse or lsq");
    if (s.format && (is_float_format(*s.format) || *s.format == output_format::compressed_tensors_w8a8) && !s.bits_given)
        s.scheme.bits = 8;
    if (s.format && !s.group_given)
        if (const auto g = fixed_group_size(*s.format)) s.scheme.group_size = *g;
    return s;
}

/// A --scheme value "SEL=SPEC" as a rule: the selector, and the scheme (nullopt: keep dense).
/// Fields SPEC leaves out are the base scheme's.
std::pair<std::string, std::optional<quant_spec>> parse_scheme_override(const std::string& v, const quant_spec& base) {
    const auto eq = v.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == v.size())
        usage_error("--scheme needs SELECTOR=SPEC, e.g. 're:.*down_proj=8b,per-channel' (got '" + v + "')");
    const std::string sel = v.substr(0, eq);
    quant_spec q = base;
    for (const std::string& tok : split_list(v.substr(eq + 1))) {
        auto number = [&](const std::string& digits, const char* what) { return parse_int(digits, what); };
        if (tok == "dense" || tok == "keep") return {sel, std::nullopt};
        if (tok == "sym") q.symmetric = true;
        else if (tok == "asym") q.symmetric = false;
        else if (tok == "per-channel" || tok == "channel" || tok == "g-1") q.group_size = -1;
        else if (tok.size() > 1 && tok.back() == 'b' && std::isdigit(static_cast<unsigned char>(tok[0]))) q.bits = number(tok.substr(0, tok.size() - 1), "bit width");
        else if (tok.starts_with("bits=")) q.bits = number(tok.substr(5), "bit width");
        else if (tok.size() > 1 && tok[0] == 'g' && std::isdigit(static_cast<unsigned char>(tok[1]))) q.group_size = number(tok.substr(1), "group size");
        else if (tok.starts_with("group=")) q.group_size = number(tok.substr(6), "group size");
        else if (auto m = parse_scale_method(tok.starts_with("scale=") ? tok.substr(6) : tok)) q.scale = *m;
        else usage_error("--scheme '" + v + "': unknown field '" + tok + "' (Nb, gN, per-channel, sym, asym, a scale rule, dense)");
    }
    return {sel, q};
}

convert_options to_options(const settings& s, const checkpoint_source& src) {
    convert_options o;
    o.format = *s.format;
    o.threads = s.threads ? s.threads : std::max(1u, std::thread::hardware_concurrency());
    o.max_shard_bytes = s.max_shard;
    o.overwrite = s.overwrite;
    o.read = s.read_copy ? source_read::copied : s.read_mapped ? source_read::mapped : source_read::pread;
    o.hessians = s.hessians;
    o.gptq = s.gptq;
    o.imatrix = s.imatrix;
    o.activation_amax = s.activation_amax;
    for (const auto& sel : s.imatrix_layers) o.imatrix_layers.emplace_back(sel);
    o.activation_scaling = s.activation_scaling;
    for (const auto& f : s.split_qkv) o.rules.split_qkv(f);
    for (const auto& f : s.split_gate_up) o.rules.split_gate_up(f);
    if (s.targets.empty()) o.rules.default_scheme = s.scheme;
    for (const auto& t : s.targets) o.rules.quantize(t, s.scheme);
    if (s.lm_head) {
        const model_config cfg = model_config::from_json(src.config());
        if (cfg.tie_word_embeddings && !src.contains("lm_head.weight")) {
            std::string table;
            for (const auto& t : src.tensors())
                if (t.shape.size() == 2 && module_of(t.name).find("embed") != std::string_view::npos) table = t.name;
            if (table.empty()) throw unsupported_error(src.dir(), {}, "--lm-head: the head is tied but no embedding table was found");
            o.rules.untie(table);
        }
        o.rules.quantize("lm_head", s.scheme);
    }
    for (const auto& v : s.schemes) {
        auto [sel, scheme] = parse_scheme_override(v, s.scheme);
        if (scheme) o.rules.quantize(sel, *scheme);
        else o.rules.keep(sel);
    }
    for (const auto& t : s.ignore) o.rules.keep(t);
    o.require_w4a8_cpu = s.require_w4a8_cpu;
    return o;
}

std::string mib(std::uint64_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MiB", static_cast<double>(b) / (1 << 20));
    return buf;
}

// --repack: an already-quantized SRC moved into --format without re-quantizing.
int run_repack(const settings& s) {
    repack_options o;
    o.format = *s.format;
    o.scale_dtype = s.scheme.scale_dtype;
    o.requantize = s.requantize;
    o.fake_bits = s.qat_bits;
    o.overwrite = s.overwrite;
    o.max_shard_bytes = s.max_shard;
    if (!s.quiet)
        o.progress = [](std::size_t i, std::size_t n, const std::string& m, const std::string& how) {
            std::fprintf(stderr, "[%zu/%zu] %-48s %s\n", i, n, m.c_str(), how.c_str());
        };
    const repack_report r = repack_checkpoint(s.src, s.dst, o);
    for (const repack_layer& l : r.layers)
        if (l.how == "requantized") std::fprintf(stderr, "requantized %s (%s): SNR %.2f dB\n", l.module.c_str(), l.reason.c_str(), l.snr_db);
    std::printf("repacked %zu layer(s) %s -> %s (%s), %zu tensor(s) copied, %zu shard(s)\n", r.layers.size(), r.source_format.c_str(),
                r.target_format.c_str(), r.exact() ? "bit-exact" : "some layers requantized", r.copied_tensors.size(), r.shards.size());
    return 0;
}

// The GGUF converter's options from the command line (one process and cluster modes).
gguf::convert_options gguf_options(const settings& s) {
    gguf::convert_options o;
    const auto type = gguf::parse_file_type(s.gguf_type);
    if (!type) usage_error("unknown GGUF type '" + s.gguf_type + "'");
    o.type = *type;
    for (const auto& spec : s.gguf_overrides) o.overrides.push_back(gguf::parse_override(spec));
    o.tokenizer_from = s.tokenizer_from;
    o.pre_tokenizer = s.pre_tokenizer;
    o.allow_no_vocab = s.no_vocab;
    o.imatrix_file = s.imatrix;
    o.read_mapped = s.read_mapped;
    o.repack = s.repack;
    return o;
}

// --format gpt-oss-mxfp4: a float gpt-oss checkpoint into the native MXFP4 one vLLM and
// transformers load (convert/gpt_oss_mxfp4.hpp).
int run_gpt_oss_mxfp4(const settings& s) {
    if (s.dry_run) {
        const gpt_oss_mxfp4_plan p = plan_gpt_oss_mxfp4(checkpoint_source(s.src));
        for (const auto& it : p.items)
            for (const auto& t : it.outputs)
                std::printf("%-56s %-16s %s%s\n", t.name.c_str(), shape_to_string(t.shape).c_str(), std::string(dtype_name(t.type)).c_str(),
                            it.experts ? "  (MXFP4)" : "");
        for (const auto& r : p.refusals) std::printf("refused: %s\n", r.c_str());
        return p.refusals.empty() ? 0 : 1;
    }
    gpt_oss_mxfp4_options o;
    o.threads = s.threads ? s.threads : o.threads;
    o.max_shard_bytes = s.max_shard;
    o.overwrite = s.overwrite;
    if (!s.quiet)
        o.progress = [](const std::string& name, std::size_t i, std::size_t n) {
            std::fprintf(stderr, "[%zu/%zu] %s\n", i, n, name.c_str());
            return true;
        };
    const gpt_oss_mxfp4_result r = convert_gpt_oss_mxfp4(s.src, s.dst, o);
    std::printf("wrote %s: %zu shard(s), quant_method mxfp4\n", s.dst.c_str(), r.shards.size());
    for (const auto& [name, snr] : r.snr_db) std::printf("  %s: MXFP4, SNR %.2f dB\n", name.c_str(), snr);
    return 0;
}

// --format gguf: Hugging Face -> GGUF in one streaming pass, llama.cpp's bytes.
int run_gguf(const settings& s) {
    // --dry-run: the converter's own plan step (types, fallbacks) and the block rule per --tp
    // degree; --tp alone prints the block rule to stderr and converts.
    if (s.dry_run || !s.tp.empty()) {
        const gguf::dry_run_report plan = gguf::dry_run_hf_to_gguf(s.src, gguf_options(s), s.tp);
        gguf::print_dry_run(s.dry_run ? std::cout : std::cerr, plan);
        if (s.dry_run) return 0;
    }
    if (io::path_exists(s.dst) && !s.overwrite)
        throw unsupported_error(s.dst, {}, "destination exists (pass --overwrite to replace it)");
    gguf::convert_options o = gguf_options(s);
    thread_pool pool(s.threads ? s.threads : std::max(1u, std::thread::hardware_concurrency()));
    o.exec = pool.executor();
    gguf::progress_fn progress;
    if (!s.quiet)
        progress = [](std::size_t i, std::size_t n, const std::string& name) { std::fprintf(stderr, "[%zu/%zu] %s\n", i, n, name.c_str()); };
    const gguf::convert_report r = gguf::convert_hf_to_gguf(s.src, s.dst, o, progress);
    double snr_min = 1e300, snr_sum = 0;
    std::size_t quantized = 0;
    for (const auto& t : r.tensors)
        if (t.snr_db < 1e300) {
            snr_min = std::min(snr_min, t.snr_db);
            snr_sum += t.snr_db;
            ++quantized;
        }
    std::printf("wrote %s: %zu tensors (%s), %.3f bits per weight", s.dst.c_str(), r.tensors.size(), r.arch.c_str(), r.bits_per_weight());
    if (quantized) std::printf(", SNR min %.2f dB, mean %.2f dB", snr_min, snr_sum / static_cast<double>(quantized));
    std::printf("\n");
    const auto repacked = std::count_if(r.tensors.begin(), r.tensors.end(), [](const auto& t) { return t.repacked; });
    if (repacked) std::printf("repacked %zu tensor(s) from packed MXFP4, codes and exponents bit for bit\n", static_cast<std::size_t>(repacked));
    for (const auto& f : r.fallbacks()) std::printf("fallback: %s\n", f.c_str());
    for (const auto& f : r.without_imatrix()) std::printf("without imatrix: %s\n", f.c_str());
    return 0;
}


// plan / work / finalize. `plan` keeps its command line in the plan file, so that
// `work DST` and `finalize DST` rebuild the very same options (only --threads may differ).
std::size_t parse_count(const std::string& v, const char* what) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || v[0] == '-') usage_error(std::string("bad ") + what + " '" + v + "'");
    return static_cast<std::size_t>(n);
}

settings parse_args(std::vector<std::string> args) {
    std::vector<char*> argv{const_cast<char*>("qforge-convert")};
    for (auto& a : args) argv.push_back(a.data());
    return parse(static_cast<int>(argv.size()), argv.data());
}

// work / finalize of a GGUF plan (convert/cluster/gguf.hpp).
int run_cluster_gguf(const std::string& mode, const settings& s, const cluster::plan_summary& p, std::optional<std::size_t> unit,
                     std::optional<std::size_t> of, const cluster::finalize_options& fo) {
    gguf::convert_options o = gguf_options(s);
    thread_pool pool(s.threads ? s.threads : std::max(1u, std::thread::hardware_concurrency()));
    o.exec = pool.executor();
    if (mode == "work") {
        const auto [i, n] = cluster::worker_from_environment(unit, of, p.units.size());
        const auto t0 = std::chrono::steady_clock::now();
        const cluster::work_report r = cluster::work_gguf(s.dst, i, n, o);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("worker %zu of %zu: %zu unit(s) converted, %zu already done, in %.2f s\n", i, n, r.converted.size(),
                    r.skipped.size(), secs);
        return 0;
    }
    const gguf::convert_report r = cluster::finalize_gguf(s.dst, o, fo, s.overwrite);
    std::printf("wrote %s: %zu tensors (%s), %.3f bits per weight\n", s.dst.c_str(), r.tensors.size(), r.arch.c_str(), r.bits_per_weight());
    for (const auto& f : r.fallbacks()) std::printf("fallback: %s\n", f.c_str());
    for (const auto& f : r.without_imatrix()) std::printf("without imatrix: %s\n", f.c_str());
    return 0;
}

int run_cluster(const std::string& mode, std::vector<std::string> args) {
    if (mode == "plan") {
        std::size_t units = 0;
        std::vector<std::string> kept;
        for (std::size_t i = 0; i < args.size(); ++i) {
            if (args[i] == "--units") {
                if (i + 1 >= args.size()) usage_error("--units needs a count");
                units = parse_count(args[++i], "unit count");
            } else {
                kept.push_back(args[i]);
            }
        }
        if (units == 0) usage_error("plan needs --units N (the number of work units: the size of the job array)");
        const settings s = parse_args(kept);
        if (s.repack || s.dry_run) usage_error("plan splits conversions (not --repack or --dry-run)");
        json stored = json::array();
        for (const auto& a : kept) stored.push_back(json(a));
        // Workers start in other folders (a job's working directory, a pod's): relative paths
        // in the stored command line are taken from the folder plan ran in.
        std::vector<char> cwd(4096);
        if (!::getcwd(cwd.data(), cwd.size())) usage_error("cannot read the current folder");
        json extra = json::object({{"args", std::move(stored)}, {"cwd", json(std::string(cwd.data()))}});
        const cluster::plan_summary p = s.gguf ? cluster::make_gguf_plan(s.src, s.dst, gguf_options(s), units, s.overwrite, std::move(extra))
                                               : cluster::make_plan(s.src, s.dst, to_options(s, checkpoint_source(s.src)), units,
                                                                    std::move(extra));
        std::uint64_t mx = 0;
        for (const auto& u : p.units) mx = std::max(mx, u.cost);
        std::printf("planned %s: %zu tensors in %zu shard(s), %zu work units (largest/mean cost %.3f) in %s\n", s.dst.c_str(),
                    p.tensors, p.shard_files.size(), p.units.size(), p.imbalance(), p.staging.c_str());
        return 0;
    }
    std::optional<std::size_t> unit, of;
    unsigned threads = 0;
    cluster::finalize_options fo;
    std::vector<std::string> positional;
    for (std::size_t i = 0; i < args.size(); ++i) {
        const std::string& a = args[i];
        auto value = [&]() -> const std::string& {
            if (i + 1 >= args.size()) usage_error(a + " needs a value");
            return args[++i];
        };
        if (a == "--unit" && mode == "work") unit = parse_count(value(), "unit");
        else if (a == "--of" && mode == "work") of = parse_count(value(), "worker count");
        else if (a == "--verify-data" && mode == "finalize") fo.verify_data = true;
        else if (a == "--no-verify-data" && mode == "finalize") fo.verify_data = false;
        else if (a == "--threads") threads = static_cast<unsigned>(parse_count(value(), "thread count"));
        else if (a.starts_with("--")) usage_error("unknown option " + a + " for " + mode);
        else positional.push_back(a);
    }
    if (positional.size() != 1) usage_error(mode + " expects DST, the destination given to plan");
    const cluster::plan_summary p = cluster::read_plan(positional[0]);
    const json* stored = p.extra.is_object() ? p.extra.find("args") : nullptr;
    if (!stored) usage_error("the plan of " + positional[0] + " was not made by qforge-convert plan");
    std::vector<std::string> args0;
    for (const json& a : stored->as_array()) args0.push_back(a.as_string());
    if (const json* cwd = p.extra.find("cwd"); cwd && ::chdir(cwd->as_string().c_str()) != 0)
        throw io_error(cwd->as_string(), {}, "cannot enter the folder plan ran in");
    settings s = parse_args(args0);  // from here on, paths are the plan's (s.dst is DST)
    if (threads) s.threads = threads;
    if (s.gguf) return run_cluster_gguf(mode, s, p, unit, of, fo);
    checkpoint_source src(s.src);
    convert_options o = to_options(s, src);
    if (mode == "work") {
        const auto [i, n] = cluster::worker_from_environment(unit, of, p.units.size());
        // Test hook (tests/cluster/slurm_test.sh): QFORGE_CONVERT_STALL=U:N stops the worker of
        // unit U before its N-th tensor, once bytes are written and before its record, so a test
        // can kill the task "midway" at a known point instead of racing a timer.
        if (const char* stall = std::getenv("QFORGE_CONVERT_STALL")) {
            const std::string v = stall;
            const std::size_t colon = v.find(':');
            if (colon == std::string::npos) usage_error("QFORGE_CONVERT_STALL is UNIT:TENSORS");
            const std::size_t stall_unit = parse_count(v.substr(0, colon), "stall unit");
            const std::size_t after = parse_count(v.substr(colon + 1), "stall count");
            const auto [u0, u1] = cluster::units_of_worker(i, n, p.units.size());
            if (stall_unit >= u0 && stall_unit < u1)
                o.before_tensor = [after, seen = std::size_t{0}](std::size_t) mutable {
                    if (seen++ == after) {
                        std::fprintf(stderr, "qforge-convert work: stalled (QFORGE_CONVERT_STALL)\n");
                        for (;;) ::pause();
                    }
                };
        }
        const auto t0 = std::chrono::steady_clock::now();
        const cluster::work_report r = cluster::work(s.dst, i, n, o);
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("worker %zu of %zu: %zu unit(s) converted, %zu already done, in %.2f s\n", i, n, r.converted.size(),
                    r.skipped.size(), secs);
        return 0;
    }
    const conversion_result r = cluster::finalize(s.dst, o, fo);
    for (const auto& w : r.the_plan.warnings) std::fprintf(stderr, "qforge-convert: warning: %s\n", w.c_str());
    std::cout << r.report.summary().dump({.indent = 2}) << "\n";
    std::fprintf(stderr, "wrote %s: %zu shard(s), %s of weights\n", positional[0].c_str(), r.shards.size(),
                 mib(r.the_plan.out_bytes()).c_str());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc > 1 && (std::string_view(argv[1]) == "plan" || std::string_view(argv[1]) == "work" ||
                     std::string_view(argv[1]) == "finalize")) {
        try {
            return run_cluster(argv[1], std::vector<std::string>(argv + 2, argv + argc));
        } catch (const qforge::error& e) {
            std::fprintf(stderr, "qforge-convert %s: %s\n", argv[1], std::string(e.what()).substr(8).c_str());
            return 1;
        } catch (const std::exception& e) {
            std::fprintf(stderr, "qforge-convert %s: %s\n", argv[1], e.what());
            return 1;
        }
    }
    const settings s = parse(argc, argv);
    try {
        // An FP8 source "repacks" through the converter: on the same grid its codes and scales
        // are copied bit for bit (convert/fp8_source.hpp fp8_copy_applies), else requantized.
        // --format gguf --repack: packed compressed-tensors MXFP4 copied into GGUF MXFP4 (the
        // GGUF converter refuses any other source).
        if (s.gguf) return run_gguf(s);
        if (s.gpt_oss_mxfp4) return run_gpt_oss_mxfp4(s);
        if (s.repack && checkpoint_source(s.src).fp8().kind == fp8_source_kind::none) return run_repack(s);
        const auto t0 = std::chrono::steady_clock::now();
        checkpoint_source src(s.src);
        convert_options o = to_options(s, src);
        if (s.dry_run || !s.tp.empty()) {
            const plan p = plan_conversion(src, o);
            if (s.dry_run) print_plan(std::cout, p);
            if (!s.tp.empty() && !p.refused()) {
                const serving_report r = check_serving(p, model_config::from_json(src.config()), s.tp);
                print_serving(s.dry_run ? std::cout : std::cerr, r);
            }
            if (s.dry_run) return p.refused() ? 1 : 0;
        }
        if (!s.quiet)
            o.progress = [](const progress_event& e) {
                const int w = static_cast<int>(std::to_string(e.count).size());
                std::fprintf(stderr, "[%*zu/%*zu] %-48s %-14s %s -> %s, %s -> %s", w, e.index, w, e.count,
                             e.item->name.c_str(), shape_to_string(e.item->shape).c_str(), e.in_type.c_str(),
                             e.out_type.c_str(), mib(e.in_bytes).c_str(), mib(e.out_bytes).c_str());
                if (e.snr_db) std::fprintf(stderr, ", SNR %.2f dB", *e.snr_db);
                std::fputc('\n', stderr);
                return true;
            };
        const conversion_result r = convert(s.src, s.dst, o);
        // Warnings name an engine known to misread this output: printed even with --quiet.
        for (const auto& w : r.the_plan.warnings) std::fprintf(stderr, "qforge-convert: warning: %s\n", w.c_str());
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::cout << r.report.summary().dump({.indent = 2}) << "\n";
        if (!s.quiet && !s.hessians.empty()) {
            std::fprintf(stderr, "GPTQ (--hessians): %zu layer(s) solved, %zu without a Hessian (round-to-nearest)%s\n",
                         r.gptq_layers.size(), r.rtn_layers.size(), r.rtn_layers.empty() ? "" : ":");
            for (const auto& l : r.rtn_layers) std::fprintf(stderr, "  round-to-nearest: %s\n", l.c_str());
        }
        if (!s.quiet && !s.imatrix.empty()) {
            std::fprintf(stderr, "imatrix: %zu layer(s) weighted by it, %zu without an entry%s\n", r.imatrix_layers.size(),
                         r.layers_without_imatrix.size(), r.layers_without_imatrix.empty() ? "" : ":");
            for (const auto& l : r.layers_without_imatrix) std::fprintf(stderr, "  without imatrix: %s\n", l.c_str());
        }
        if (!s.quiet)
            std::fprintf(stderr, "wrote %s: %zu shard(s), %s of weights in %.2f s\n", s.dst.c_str(), r.shards.size(),
                         mib(r.the_plan.out_bytes()).c_str(), secs);
        return 0;
    } catch (const qforge::error& e) {
        std::fprintf(stderr, "qforge-convert: %s\n", std::string(e.what()).substr(8).c_str());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "qforge-convert: %s\n", e.what());
        return 1;
    }
}
