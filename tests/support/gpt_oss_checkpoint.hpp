// gpt-oss's native MXFP4 checkpoint and its dequantized twin, written from a bf16 gpt-oss
// checkpoint (the generator's demo_moe::gpt_oss) for the tests.
//
// The native one stores each fused expert tensor as transformers' Mxfp4GptOssExperts loads it
// (src/transformers/integrations/mxfp4.py): `<p>.gate_up_proj_blocks` U8 [E, 2I, H/32, 16] and
// `<p>.gate_up_proj_scales` U8 [E, 2I, H/32] (rows are output features, gate and up
// interleaved), `down_proj_*` [E, H, I/32, 16] / [E, H, I/32], under quantization_config
// {"quant_method": "mxfp4", "modules_to_not_convert": [...]} as openai/gpt-oss-20b's config.json
// has it. Codes and scales are drawn from a fixed LCG, not quantized from the bf16 weights.
// The twin is the bf16 checkpoint transformers' `convert_moe_packed_tensors` makes of it:
// w = lut[code] * 2^(scale - 127), low nibble first, then [E, N, K] transposed to [E, K, N].
// It is decoded here from that definition, not by qforge, and it is exact in BF16 (an E2M1
// value has two significant bits). Every other tensor is the bf16 source's, byte for byte.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "qforge/convert/source.hpp"
#include "qforge/core/half.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace qforge::testing {

struct gpt_oss_native_options {
    std::uint32_t seed = 2026;
    int scale_lo = 116, scale_hi = 124;  ///< E8M0 codes drawn from [lo, hi]
    /// Put E8M0 code `bad_scale` at expert 1, row 3, group 1 of the first layer's down_proj
    /// (0: none), e.g. 0xFF (NaN) or 0xFE (6 * 2^127 overflows float32).
    std::uint8_t bad_scale = 0;
};

/// E2M1 by definition (OCP MX v1.0 table 5): sign, two exponent bits, one mantissa bit.
inline float e2m1_by_definition(unsigned code) {
    static constexpr float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    return (code & 8u ? -1.0f : 1.0f) * magnitude[code & 7u];
}

/// Writes the native checkpoint into `native` and its twin into `twin` (both created, must not
/// exist) from the bf16 gpt-oss checkpoint `bf16`.
inline void write_gpt_oss_pair(const std::string& bf16, const std::string& native, const std::string& twin,
                               const gpt_oss_native_options& o = {}) {
    const checkpoint_source src(bf16);
    std::uint32_t state = o.seed;
    auto next = [&state] {
        state = state * 1664525u + 1013904223u;
        return state >> 8;
    };
    std::vector<safetensors::tensor_spec> nspecs, tspecs;
    std::vector<std::vector<std::byte>> nbytes, tbytes;
    for (const auto& t : src.tensors()) {
        const tensor_view v = src.view(t.name);
        const bool gate_up = t.name.ends_with(".experts.gate_up_proj"), down = t.name.ends_with(".experts.down_proj");
        if (!gate_up && !down) {
            nspecs.push_back({t.name, t.type, t.shape});
            tspecs.push_back({t.name, t.type, t.shape});
            nbytes.emplace_back(v.bytes.begin(), v.bytes.end());
            tbytes.emplace_back(v.bytes.begin(), v.bytes.end());
            continue;
        }
        const std::int64_t E = t.shape[0], K = t.shape[1], N = t.shape[2], G = K / 32;  // bf16 [E, K, N]
        std::vector<std::byte> blocks(static_cast<std::size_t>(E * N * G * 16)), scales(static_cast<std::size_t>(E * N * G));
        for (auto& b : blocks) b = static_cast<std::byte>(next() & 0xFFu);
        for (auto& s : scales) s = static_cast<std::byte>(o.scale_lo + static_cast<int>(next() % static_cast<std::uint32_t>(o.scale_hi - o.scale_lo + 1)));
        if (down && t.name.starts_with("model.layers.0.") && o.bad_scale)
            scales[static_cast<std::size_t>((1 * N + 3) * G + 1)] = static_cast<std::byte>(o.bad_scale);
        std::vector<std::byte> dense(static_cast<std::size_t>(E * K * N) * 2);
        for (std::int64_t e = 0; e < E; ++e)
            for (std::int64_t n = 0; n < N; ++n)
                for (std::int64_t k = 0; k < K; ++k) {
                    const auto byte = std::to_integer<unsigned>(blocks[static_cast<std::size_t>(((e * N + n) * G + k / 32) * 16 + (k % 32) / 2)]);
                    const unsigned code = k % 2 ? byte >> 4 : byte & 15u;
                    const int s = std::to_integer<int>(scales[static_cast<std::size_t>((e * N + n) * G + k / 32)]);
                    const float w = s == 0xFF ? 0.0f : static_cast<float>(std::ldexp(e2m1_by_definition(code), s - 127));
                    const std::uint16_t h = float_to_bf16(w);
                    std::memcpy(dense.data() + static_cast<std::size_t>((e * K + k) * N + n) * 2, &h, 2);  // [E, K, N]
                }
        nspecs.push_back({t.name + "_blocks", dtype::U8, {E, N, G, 16}});
        nspecs.push_back({t.name + "_scales", dtype::U8, {E, N, G}});
        nbytes.push_back(std::move(blocks));
        nbytes.push_back(std::move(scales));
        tspecs.push_back({t.name, t.type, t.shape});
        tbytes.push_back(std::move(dense));
    }
    for (const std::string& dir : {native, twin}) {
        io::make_directory(dir);
        for (const auto& f : io::list_directory(bf16))
            if (!f.ends_with(".safetensors") && !f.ends_with(".safetensors.index.json") && f != "config.json")
                io::copy_file(bf16 + "/" + f, dir + "/" + f);
        const bool is_native = dir == native;
        safetensors::writer w(dir + "/model.safetensors", is_native ? nspecs : tspecs, safetensors::default_metadata(), {.sync = false});
        const auto& specs = is_native ? nspecs : tspecs;
        const auto& bytes = is_native ? nbytes : tbytes;
        for (std::size_t i = 0; i < specs.size(); ++i) w.write(specs[i].name, bytes[i]);
        w.finish();
        json cfg = src.config();
        if (is_native)
            cfg.set("quantization_config",
                    json::object({{"quant_method", "mxfp4"},
                                  {"modules_to_not_convert", json::array({"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                          "model.embed_tokens", "lm_head"})}}));
        io::write_file(dir + "/config.json", cfg.dump({.indent = 2}));
    }
}

}  // namespace qforge::testing
