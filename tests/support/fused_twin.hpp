// The transformers v5 twin of a per-expert MoE checkpoint, as a v5 save (save_original_format
// False) writes it: transformers src/transformers/conversion_mapping.py
// _build_checkpoint_conversion_mapping stacks each layer's experts with MergeModulelist(dim=0)
// and concatenates gate and up with Concatenate(dim=1), so
//   gate_up_proj [E, 2I, H] = for each expert e: its gate rows, then its up rows;
//   down_proj    [E, H, I]  = the experts' down matrices in turn,
// the same bytes, no transpose. Qwen naming (`mlp.experts.E.gate_proj/up_proj/down_proj`) keeps
// its block; Mixtral's `block_sparse_moe.experts.E.w1` (gate) / `w3` (up) / `w2` (down) become
// `mlp.experts.gate_up_proj` / `down_proj`, and its router `block_sparse_moe.gate` is renamed
// `mlp.gate` ("mixtral": WeightRenaming(".block_sparse_moe.gate", ".mlp.gate")). Converting the
// twin must give, tensor for tensor, what converting the per-expert checkpoint gives.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "qforge/convert/source.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace qforge::testing {

/// Writes into `dir` (created; must not exist) the v5 twin of the per-expert checkpoint in
/// `per_expert` (Qwen or Mixtral naming, by config.json's model_type): one model.safetensors,
/// every other file (config.json, tokenizer files) copied unchanged.
inline void write_fused_twin(const std::string& per_expert, const std::string& dir) {
    const checkpoint_source src(per_expert);
    const bool mixtral = src.config().at("model_type").as_string() == "mixtral";
    const std::string block = mixtral ? ".block_sparse_moe." : ".mlp.";
    const char* gate = mixtral ? "w1" : "gate_proj";
    const char* up = mixtral ? "w3" : "up_proj";
    const char* down = mixtral ? "w2" : "down_proj";
    const json* n = src.config().find(mixtral ? "num_local_experts" : "num_experts");
    const std::int64_t E = n->as_int();
    io::make_directory(dir);
    for (const auto& f : io::list_directory(per_expert))
        if (!f.ends_with(".safetensors") && !f.ends_with(".safetensors.index.json")) io::copy_file(per_expert + "/" + f, dir + "/" + f);
    // Tensor order: the source's, with each layer's experts replaced by its two fused tensors.
    std::vector<safetensors::tensor_spec> specs;
    std::map<std::string, std::vector<std::string>> parts;  // fused name -> per-expert sources in order
    for (const auto& t : src.tensors()) {
        const std::size_t at = t.name.find(block + "experts.");
        if (at == std::string::npos) {
            std::string name = t.name;
            if (mixtral && name.ends_with(".block_sparse_moe.gate.weight"))
                name = name.substr(0, name.size() - std::string(".block_sparse_moe.gate.weight").size()) + ".mlp.gate.weight";
            specs.push_back({name, t.type, t.shape});
            parts[name] = {t.name};
            continue;
        }
        const std::string layer = t.name.substr(0, at), x = layer + block + "experts.";
        const std::string fused = layer + ".mlp.experts.";
        if (parts.contains(fused + "gate_up_proj")) continue;  // this layer's experts are planned
        const shape_t g = src.view(x + "0." + gate + ".weight").shape;  // [I, H]
        specs.push_back({fused + "gate_up_proj", t.type, {E, 2 * g[0], g[1]}});
        specs.push_back({fused + "down_proj", t.type, {E, g[1], g[0]}});
        for (std::int64_t e = 0; e < E; ++e) {
            const std::string p = x + std::to_string(e) + ".";
            parts[fused + "gate_up_proj"].push_back(p + gate + ".weight");
            parts[fused + "gate_up_proj"].push_back(p + up + ".weight");
            parts[fused + "down_proj"].push_back(p + down + ".weight");
        }
    }
    safetensors::writer w(dir + "/model.safetensors", specs, safetensors::default_metadata(), {.sync = false});
    for (const auto& s : specs) {
        std::vector<std::byte> bytes;
        for (const auto& from : parts.at(s.name)) {
            const tensor_view v = src.view(from);
            bytes.insert(bytes.end(), v.bytes.begin(), v.bytes.end());
        }
        w.write(s.name, bytes);
    }
    w.finish();
}

}  // namespace qforge::testing
