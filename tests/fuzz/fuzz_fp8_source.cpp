// libFuzzer target: the FP8 source reader (convert/fp8_source.hpp) on an arbitrary config.json
// and safetensors file. The input is the config's bytes, one NUL byte, then the file's bytes
// (put in a memfd and read through /proc/self/fd/N, the reader's real path). Properties:
//  - refusals are qforge::error (read_fp8_source itself never throws: it returns refusals);
//  - no scale tensor survives as a tensor of its own; every FP8 weight that carries a scale is
//    a 2-D F8_E4M3 weight (or a fused 3-D expert tensor [E, N, K], one grid per expert) whose
//    scale grid, (E x) ceil(N / block_rows) x ceil(K / block_cols), is the element count of a
//    scale tensor of the file with the recorded dtype;
//  - decode_fp8_weight either refuses or returns N x K finite floats (2-D weights).
// The same input feeds the packed compressed-tensors MXFP4 reader (convert/mxfp4_source.hpp,
// the GGUF --repack source), whose properties are:
//  - read_mxfp4_source never throws (refusals are returned);
//  - every packed weight it accepts is a U8 [N, K/2] weight_packed with a U8 [N, K/32]
//    weight_scale of the file, K a positive multiple of 32; its `tensors` list carries it as one
//    U8 <m>.weight [N, K] and neither of its two tensors;
//  - repacking a row into GGUF MXFP4 blocks (ct_mxfp4_row_to_gguf) and decoding them with
//    ggml's dequantize_row_mxfp4 gives, element for element, the compressed-tensors value
//    e2m1(code) * 2^(e - 127) wherever the exponent is not the E8M0 NaN 0xFF.
// With quant_method "mxfp4" the same reader takes gpt-oss's native experts (convert/
// gpt_oss_source.hpp), whose properties are:
//  - every tensor that carries an MXFP4 scale is a fused expert tensor [E, K, N] of dtype F4 whose
//    blocks are a U8 [E, N, K/32, 16] and whose scales a U8 [E, N, K/32] tensor of the file, and
//    neither of those two is listed itself;
//  - decode_mxfp4_row on expert 0's first row gives e2m1(code) * 2^(e - 127) for every element,
//    and reports a group exactly when one of its values is not finite.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/fp8_source.hpp"
#include "qforge/convert/mxfp4_source.hpp"
#include "qforge/core/minifloat.hpp"
#include "qforge/layout/gguf/mxfp4.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/reader.hpp"

#include "../support/memfile.hpp"

namespace st = qforge::safetensors;

namespace {

using qforge_fuzz::memfile;

constexpr st::reader_limits limits{.max_header_bytes = 1 << 20, .max_tensors = 4096, .max_rank = 8,
                                   .max_elements = std::uint64_t{1} << 22};

/// The MXFP4 reader's properties (the file comment) on the tensors of `r`.
void check_mxfp4_source(const qforge::json& cfg, const st::reader& r, const std::vector<qforge::source_tensor>& tensors) {
    qforge::mxfp4_source m;
    try {
        m = qforge::read_mxfp4_source(cfg, "config.json", tensors, "m");
    } catch (...) {
        std::abort();  // the reader returns refusals, never throws
    }
    for (const qforge::mxfp4_packed_weight& w : m.weights) {
        const st::tensor_info* p = r.find(w.packed);
        const st::tensor_info* s = r.find(w.scale);
        if (!p || !s || p->type != qforge::dtype::U8 || s->type != qforge::dtype::U8 || w.rows <= 0 || w.cols <= 0 || w.cols % 32 != 0)
            std::abort();
        if (p->shape != qforge::shape_t{w.rows, w.cols / 2} || s->shape != qforge::shape_t{w.rows, w.cols / 32}) std::abort();
        const qforge::source_tensor* seen = nullptr;
        for (const qforge::source_tensor& t : m.tensors) {
            if (t.name == w.packed || t.name == w.scale) std::abort();
            if (t.name == w.module + ".weight") seen = &t;
        }
        if (!seen || seen->type != qforge::dtype::U8 || seen->shape != qforge::shape_t{w.rows, w.cols} || m.find(seen->name) != &w)
            std::abort();
        const auto packed = r.view(w.packed), scale = r.view(w.scale);
        const auto* codes = reinterpret_cast<const std::uint8_t*>(packed.bytes.data());
        const auto* exps = reinterpret_cast<const std::uint8_t*>(scale.bytes.data());
        std::vector<qforge::gguf::block_mxfp4> blocks(static_cast<std::size_t>(w.cols / 32));
        std::vector<float> back(static_cast<std::size_t>(w.cols));
        for (std::int64_t row = 0; row < std::min<std::int64_t>(w.rows, 4); ++row) {
            const std::uint8_t* c = codes + row * (w.cols / 2);
            const std::uint8_t* e = exps + row * (w.cols / 32);
            qforge::gguf::ct_mxfp4_row_to_gguf(c, e, w.cols, blocks.data());
            qforge::gguf::dequantize(blocks.data(), back.data(), w.cols);
            for (std::int64_t col = 0; col < w.cols; ++col) {
                if (e[col / 32] == 0xFF) continue;
                const std::uint8_t code = col % 2 ? c[col / 2] >> 4 : c[col / 2] & 0xF;
                if (back[static_cast<std::size_t>(col)] != qforge::e2m1_to_float(code) * qforge::e8m0_to_float(e[col / 32])) std::abort();
            }
        }
    }
}

/// The gpt-oss reader's properties (the file comment) for fused MXFP4 tensor `t`.
void check_gpt_oss_tensor(const st::reader& r, const qforge::fp8_source& f, const qforge::source_tensor& t) {
    const qforge::source_scale& s = *t.scale;
    const st::tensor_info* b = r.find(s.codes);
    const st::tensor_info* e = r.find(s.name);
    if (!b || !e || b->type != qforge::dtype::U8 || e->type != qforge::dtype::U8 || t.type != qforge::dtype::F4) std::abort();
    if (b->shape.size() != 4 || b->shape[3] != 16 || t.shape != qforge::shape_t{b->shape[0], b->shape[2] * 32, b->shape[1]} ||
        e->shape != qforge::shape_t{b->shape[0], b->shape[1], b->shape[2]} || !qforge::is_fused_expert_tensor(t.name))
        std::abort();
    for (const qforge::source_tensor& u : f.tensors)
        if (u.name == s.codes || u.name == s.name) std::abort();
    const std::int64_t groups = b->shape[2];
    const auto blocks = r.view(s.codes), scales = r.view(s.name);
    const auto* c = reinterpret_cast<const std::uint8_t*>(blocks.bytes.data());
    const auto* x = reinterpret_cast<const std::uint8_t*>(scales.bytes.data());
    std::vector<float> row(static_cast<std::size_t>(groups * 32));
    const std::int64_t bad = qforge::decode_mxfp4_row(c, x, groups, row.data());
    std::int64_t first_bad = -1;
    for (std::int64_t i = 0; i < groups * 32; ++i) {
        const std::uint8_t code = i % 2 ? c[i / 2] >> 4 : c[i / 2] & 0xF;
        const float want = qforge::e2m1_to_float(code) * qforge::e8m0_to_float(x[i / 32]);
        const float got = row[static_cast<std::size_t>(i)];
        if (!(got == want || (std::isnan(got) && std::isnan(want)))) std::abort();
        if (first_bad < 0 && !std::isfinite(got)) first_bad = i / 32;
    }
    if (bad != first_bad) std::abort();
}

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
        check_mxfp4_source(cfg, r, tensors);
        const qforge::fp8_source f = qforge::read_fp8_source(cfg, "config.json", tensors, "m");
        for (const qforge::source_tensor& t : f.tensors)
            for (const qforge::source_tensor& u : f.tensors)
                if (u.scale && u.scale->name == t.name) std::abort();  // a scale is never carried over
        for (const qforge::source_tensor& t : f.tensors) {
            if (t.scale && t.scale->encoding == qforge::source_encoding::mxfp4) {
                check_gpt_oss_tensor(r, f, t);
                continue;
            }
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
