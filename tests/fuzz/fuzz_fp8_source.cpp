// libFuzzer target: the FP8 source reader (convert/fp8_source.hpp) on an arbitrary config.json
// and safetensors file. The input is the config's bytes, one NUL byte, then the file's bytes
// (put in a memfd and read through /proc/self/fd/N, the reader's real path). Properties:
//  - refusals are qforge::error (read_fp8_source itself never throws: it returns refusals);
//  - no scale tensor survives as a tensor of its own; every FP8 weight that carries a scale is
//    a 2-D F8_E4M3 weight (or a fused 3-D expert tensor [E, N, K], one grid per expert) whose
//    scale grid, (E x) ceil(N / block_rows) x ceil(K / block_cols), is the element count of a
//    scale tensor of the file with the recorded dtype;
//  - decode_fp8_weight either refuses or returns N x K finite floats (2-D weights).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/fp8_source.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/reader.hpp"

#include "../support/memfile.hpp"

namespace st = qforge::safetensors;

namespace {

using qforge_fuzz::memfile;

constexpr st::reader_limits limits{.max_header_bytes = 1 << 20, .max_tensors = 4096, .max_rank = 8,
                                   .max_elements = std::uint64_t{1} << 22};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const memfile input("fuzz-fp8");
    const auto* nul = static_cast<const std::uint8_t*>(std::memchr(data, 0, size));
    if (!nul) return 0;
    const std::string_view config_text(reinterpret_cast<const char*>(data), static_cast<std::size_t>(nul - data));
    qforge::json cfg;
    try {
        cfg = qforge::json::parse(config_text, "config.json");
    } catch (const qforge::error&) {
        return 0;
    }
    input.assign(nul + 1, size - static_cast<std::size_t>(nul + 1 - data));
    try {
        const st::reader r(input.path, st::read_mode::mmap, limits);
        std::vector<qforge::source_tensor> tensors;
        for (const auto& t : r.tensors()) tensors.push_back({t.name, t.type, t.shape, "model.safetensors"});
        const qforge::fp8_source f = qforge::read_fp8_source(cfg, "config.json", tensors, "m");
        for (const qforge::source_tensor& t : f.tensors)
            for (const qforge::source_tensor& u : f.tensors)
                if (u.scale && u.scale->name == t.name) std::abort();  // a scale is never carried over
        for (const qforge::source_tensor& t : f.tensors) {
            if (!t.scale) continue;
            const bool fused = t.shape.size() == 3 && qforge::is_fused_expert_tensor(t.name);
            if (t.type != qforge::dtype::F8_E4M3 || (t.shape.size() != 2 && !fused)) std::abort();
            const qforge::source_scale& s = *t.scale;
            if (s.block_rows <= 0 || s.block_cols <= 0) std::abort();
            const std::int64_t e = fused ? t.shape[0] : 1, n = t.shape[t.shape.size() - 2], k = t.shape.back();
            const std::int64_t grid = e * ((n + s.block_rows - 1) / s.block_rows) * ((k + s.block_cols - 1) / s.block_cols);
            const st::tensor_info* si = r.find(s.name);
            if (!si || si->type != s.type || qforge::checked_numel(si->shape) != grid) std::abort();
            if (fused) continue;  // decoded expert by expert by checkpoint_source::read_expert
            try {
                const qforge::owned_tensor d = qforge::decode_fp8_weight(r.view(t.name), r.view(s.name), s, "w", "s");
                if (d.bytes.size() != static_cast<std::size_t>(n * k) * 4) std::abort();
                for (std::size_t i = 0; i < d.bytes.size() / 4; ++i) {
                    float x;
                    std::memcpy(&x, d.bytes.data() + 4 * i, 4);
                    if (!std::isfinite(x)) std::abort();
                }
            } catch (const qforge::error&) {
            }
        }
    } catch (const qforge::error&) {
    }
    return 0;
}
