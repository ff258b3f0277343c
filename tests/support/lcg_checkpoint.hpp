// Synthetic checkpoints whose weights are an LCG's bf16 values in [-0.05, 0.05): reproducible
// from a seed, written in the tensors' order. The GGUF converter tests build their Qwen3 and
// MoE checkpoints with it (only names and shapes differ between them).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "qforge/core/half.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace qforge::testing {

/// An empty folder at `dir` (whatever was there removed).
inline void fresh_dir(const std::string& dir) {
    if (io::path_exists(dir)) io::remove_tree(dir);
    io::make_directory(dir);
}

/// `path` as a safetensors file of `specs` (BF16), each element the next LCG value from `seed`.
inline void write_lcg_bf16(const std::string& path, const std::vector<safetensors::tensor_spec>& specs, std::uint32_t seed) {
    safetensors::writer w(path, specs, safetensors::default_metadata(), {.sync = false});
    std::uint32_t state = seed;
    for (const auto& s : specs) {
        std::vector<std::uint16_t> v(static_cast<std::size_t>(checked_numel(s.shape)));
        for (auto& x : v) {
            state = state * 1664525u + 1013904223u;
            x = float_to_bf16((static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * 0.1f);
        }
        w.write(s.name, std::as_bytes(std::span<const std::uint16_t>(v)));
    }
    w.finish();
}

}  // namespace qforge::testing
