// Small synthetic checkpoints for tests, and the folders they are written into: the demo
// model sizes the convert and hostile tests convert, the scheme most convert tests use, a
// one-tensor shard, and the listings that prove a failure left nothing behind. One copy, so
// the tests that share a checkpoint cannot drift apart.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace qforge::testing {

/// A folder for this test process, /tmp/qforge-test-<tag>-<pid>: created empty, removed with
/// everything in it when the object is destroyed (keep it in a function-local static to live
/// until the program exits).
struct scratch_root {
    std::string path;
    explicit scratch_root(std::string_view tag)
        : path("/tmp/qforge-test-" + std::string(tag) + "-" + std::to_string(::getpid())) {
        if (io::path_exists(path)) io::remove_tree(path);
        io::make_directory(path);
    }
    scratch_root(const scratch_root&) = delete;
    scratch_root& operator=(const scratch_root&) = delete;
    ~scratch_root() {
        try {
            io::remove_tree(path);
        } catch (...) {
        }
    }
    /// path/name, removed first if it exists.
    std::string fresh(const std::string& name) const {
        const std::string p = path + "/" + name;
        if (io::path_exists(p)) io::remove_tree(p);
        return p;
    }
};

/// config.json of the checkpoint in `dir` with each compressed-tensors group's `targets` sorted:
/// the list follows the data order of the shards, and loaders read it as a set.
inline std::string config_with_sorted_targets(const std::string& dir) {
    json cfg = json::parse(io::read_file(dir + "/config.json"));
    if (json* qc = cfg.find("quantization_config"))
        if (json* groups = qc->find("config_groups"))
            for (auto& g : groups->as_object())
                if (json* targets = g.value.find("targets")) {
                    std::vector<std::string> names;
                    for (const json& t : targets->as_array()) names.push_back(t.as_string());
                    std::sort(names.begin(), names.end());
                    json sorted = json::array();
                    for (const auto& n : names) sorted.push_back(n);
                    *targets = sorted;
                }
    return cfg.dump({.indent = 2});
}

/// The demo model the convert tests use: two layers, K = 128 (two groups of 64), two shards.
inline demo_options small_demo() {
    demo_options o;
    o.hidden = 128;
    o.intermediate = 256;
    o.layers = 2;
    o.heads = 4;
    o.kv_heads = 2;
    o.vocab = 512;
    return o;
}

/// The smallest demo the quantizers accept (K = 64 = one group), two shards + index.json:
/// converting it does a few hundred file operations, so fault sweeps over it stay fast.
inline demo_options tiny_demo() {
    demo_options o;
    o.hidden = 64;
    o.intermediate = 128;
    o.layers = 1;
    o.heads = 2;
    o.kv_heads = 1;
    o.vocab = 64;
    o.shards = 2;
    return o;
}

/// The seed's w4a8 weight scheme: 4-bit symmetric, groups of 64, searched scales, BF16.
inline quant_spec w4a8() { return {4, 64, true, scale_method::search, dtype::BF16}; }

/// The seed's w4a8-cpu export: GPTQ v1, the tied embedding untied into a quantized lm_head,
/// two threads.
inline convert_options w4a8_cpu() {
    convert_options o;
    o.format = output_format::gptq;
    o.rules.default_scheme = w4a8();
    o.rules.untie("model.embed_tokens.weight").quantize("lm_head", w4a8());
    o.threads = 2;
    return o;
}

/// A valid safetensors file holding one U8 [4] tensor "abcd" called `tensor`.
inline void write_one_tensor_shard(const std::filesystem::path& path, const std::string& tensor) {
    safetensors::writer w(path.string(), {{tensor, dtype::U8, {4}}}, safetensors::default_metadata(), {.sync = false});
    const std::string bytes = "abcd";
    w.write(tensor, std::as_bytes(std::span<const char>(bytes)));
    w.finish();
}

/// Names in `dir` (not recursive) other than those listed: leftovers such as temp folders.
inline std::vector<std::string> entries_except(const std::filesystem::path& dir,
                                               const std::vector<std::string>& expected) {
    std::vector<std::string> extra;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const auto name = e.path().filename().string();
        bool known = false;
        for (const auto& x : expected) known = known || x == name;
        if (!known) extra.push_back(name);
    }
    return extra;
}

}  // namespace qforge::testing
