// gpt-oss's native MXFP4 experts (`quantization_config.quant_method: "mxfp4"`), read as the
// float weights they stand for, one expert at a time, so that every output format converts
// from them. The values are decoded into BF16 (exact: an E2M1 value times a power of two has two
// significant bits), the dtype transformers' `convert_moe_packed_tensors` decodes to, so a
// conversion writes what converting the bf16 dequantization would.
//
// The layout (transformers src/transformers/integrations/mxfp4.py `convert_moe_packed_tensors`;
// field-2026.md 1.4 (a)): per MoE layer <p> = "<layer>.mlp.experts"
//   <p>.gate_up_proj_blocks  U8 [E, 2I, H/32, 16]   rows are output features, gate/up interleaved
//   <p>.gate_up_proj_scales  U8 [E, 2I, H/32]       E8M0, the group's scale is 2^(s - 127)
//   <p>.down_proj_blocks     U8 [E, H, I/32, 16]
//   <p>.down_proj_scales     U8 [E, H, I/32]
// and the biases `<p>.gate_up_proj_bias` / `down_proj_bias` in the model dtype. In each byte the
// low nibble is element 2j and the high nibble element 2j+1 (`sub[:, 0::2] = lut[idx_lo]`), and
// w = e2m1(code) * 2^(s - 127) (`torch.ldexp`). transformers then transposes the [E, 2I, H]
// result to [E, H, 2I], the orientation of the bf16 checkpoint (convert/fused_experts.hpp,
// gpt_oss), whose even columns are gate and odd ones up; llama.cpp's conversion/gpt_oss.py
// splits `blocks[:, ::2]` / `blocks[:, 1::2]` the same way.
//
// So each pair becomes one fused tensor `<p>.gate_up_proj` / `<p>.down_proj` of that bf16
// orientation and dtype F4 (its bytes are the blocks: numel / 2), carrying a source_scale with
// encoding mxfp4 that names the blocks and scales tensors. The expert cut of the bf16 layout then
// applies unchanged, and checkpoint_source::read_expert decodes the rows of one expert's cut only
// (memory follows one expert matrix). Everything else of the checkpoint is bf16 and read as it
// is. What cannot be read so is refused, naming the file, the tensor and the reason, before any
// tensor data is read: blocks that are not U8 [E, N, K/32, 16] under a fused expert name, scales
// missing, not U8 or not [E, N, K/32], scales without blocks, a dense tensor of the same name
// beside the blocks. At decode time a scale of 0xFF (NaN in OCP MX, and so in transformers'
// decode) or a value that overflows float32 is refused naming the expert, the row and the group.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/fused_experts.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/minifloat.hpp"

namespace qforge {

/// Elements per MXFP4 group (one E8M0 scale), and the bytes a group's codes take.
inline constexpr std::int64_t mxfp4_group_size = 32;
inline constexpr std::int64_t mxfp4_group_bytes = 16;

/// The source's tensors once each blocks / scales pair is one fused tensor, and the refusals.
struct gpt_oss_mxfp4_tensors {
    std::vector<source_tensor> tensors;
    std::vector<std::string> refusals;  ///< complete messages, as plan::refusals
};

namespace detail {

inline constexpr std::string_view mxfp4_blocks_suffix = "_blocks";
inline constexpr std::string_view mxfp4_scales_suffix = "_scales";

/// The reason blocks `b` with scales `s` (null: absent) cannot be read, or empty.
QFORGE_DECL std::string mxfp4_pair_refusal(const source_tensor& b, const source_tensor* s);

}  // namespace detail

/// The tensors of a gpt-oss native checkpoint with every MXFP4 pair replaced by its fused tensor
/// (see above); `model` is the dtype its weights stand in (config torch_dtype) and `dir` prefixes
/// the shard names in messages. Never throws: malformed input gives refusals.
QFORGE_DECL gpt_oss_mxfp4_tensors read_gpt_oss_mxfp4(const std::vector<source_tensor>& in, dtype model, const std::string& dir);

/// Decodes row `row` (K = groups * 32 values) of an MXFP4 [N, K/32, 16] block matrix into `out`:
/// out[c] = e2m1(code c) * 2^(scale[c / 32] - 127), the low nibble of byte j being element 2j.
/// Exact: an E2M1 value has two significant bits. Returns the first group with a value that is
/// not finite (its scale is 0xFF, NaN, or the product overflows float32), or -1.
QFORGE_DECL std::int64_t decode_mxfp4_row(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t groups, float* out);

namespace detail {

/// The 16 BF16 patterns of e2m1(code) * 2^(scale - 127). For scales 2..252 every nonzero value
/// stays a normal BF16 (0.5 * 2^-125 to 6 * 2^125), so its pattern is the code's own with the
/// exponent field raised by scale - 127; other scales (subnormal, overflowing, NaN) go through
/// the float product. Exact either way: an E2M1 value has two significant bits.
QFORGE_DECL void mxfp4_bf16_table(std::uint8_t scale, std::uint16_t lut[16]);

}  // namespace detail

/// decode_mxfp4_row into BF16 bit patterns, the dtype transformers decodes gpt-oss to (exact:
/// two significant bits): each group's 16 values are made once (detail::mxfp4_bf16_table) and
/// its 32 looked up. The same values and the same returned group as decode_mxfp4_row (a group
/// is not finite when a value it holds decodes to infinity or NaN, which only scales 0xFD and
/// up can do).
QFORGE_DECL std::int64_t decode_mxfp4_row_bf16(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t groups,
                                               std::uint16_t* out);

/// The largest |value| of one MXFP4 row (K = groups * 32), read from its codes without decoding:
/// E2M1 magnitudes order as their 3-bit codes, so each group's largest is its largest code's
/// value times its scale, exactly decode_mxfp4_row's. -1 when a group's scale is 0xFD or more
/// (its values may be infinite or NaN: decode_mxfp4_row names the group).
QFORGE_DECL float mxfp4_row_abs_max(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t groups);

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {
namespace detail {

QFORGE_DECL std::string mxfp4_pair_refusal(const source_tensor& b, const source_tensor* s) {
    if (b.type != dtype::U8 || b.shape.size() != 4 || b.shape[3] != mxfp4_group_bytes)
        return "MXFP4 blocks must be U8 [E, N, K/32, 16], got " + std::string(dtype_name(b.type)) + " " + shape_to_string(b.shape);
    for (const std::int64_t d : b.shape)
        if (d <= 0) return "MXFP4 blocks cannot have an empty dimension: " + shape_to_string(b.shape);
    if (b.shape[0] > max_fused_experts || b.shape[1] > (std::int64_t{1} << 24) || b.shape[2] > (std::int64_t{1} << 24))
        return "MXFP4 blocks " + shape_to_string(b.shape) + " are larger than any model qforge reads";
    if (!s) return "MXFP4 blocks without their E8M0 scales '" + b.name.substr(0, b.name.size() - mxfp4_blocks_suffix.size()) +
                   std::string(mxfp4_scales_suffix) + "'";
    const shape_t want{b.shape[0], b.shape[1], b.shape[2]};
    if (s->type != dtype::U8 || s->shape != want)
        return "its E8M0 scales '" + s->name + "' must be U8 " + shape_to_string(want) + " (one per 32 columns), got " +
               std::string(dtype_name(s->type)) + " " + shape_to_string(s->shape);
    return {};
}

}  // namespace detail

QFORGE_DECL gpt_oss_mxfp4_tensors read_gpt_oss_mxfp4(const std::vector<source_tensor>& in, dtype model, const std::string& dir) {
    gpt_oss_mxfp4_tensors out;
    std::map<std::string, const source_tensor*, std::less<>> by_name;
    for (const source_tensor& t : in) by_name.emplace(t.name, &t);
    auto find = [&](const std::string& n) -> const source_tensor* {
        const auto it = by_name.find(n);
        return it == by_name.end() ? nullptr : it->second;
    };
    auto file_of = [&](const source_tensor& t) { return dir.empty() ? t.file : dir + "/" + t.file; };
    auto refuse = [&](const source_tensor& t, const std::string& why) {
        out.refusals.push_back(detail::format_error_message(file_of(t), t.name, why));
    };
    std::map<std::string, source_tensor, std::less<>> fused_of;  // blocks name -> its fused tensor
    std::map<std::string, bool, std::less<>> paired;             // scales that belong to blocks
    for (const source_tensor& t : in) {
        if (!t.name.ends_with(detail::mxfp4_blocks_suffix)) continue;
        const std::string fused = t.name.substr(0, t.name.size() - detail::mxfp4_blocks_suffix.size());
        const source_tensor* s = find(fused + std::string(detail::mxfp4_scales_suffix));
        if (s) paired[s->name] = true;
        if (!is_fused_expert_tensor(fused) || fused.ends_with("_bias")) {
            refuse(t, "MXFP4 blocks are only read for gpt-oss's fused experts '<layer>.mlp.experts.gate_up_proj_blocks' "
                      "and 'down_proj_blocks'");
            continue;
        }
        if (const source_tensor* dense = find(fused)) {
            refuse(*dense, "a dense tensor beside its MXFP4 blocks '" + t.name + "': which one is the layer would be a guess");
            continue;
        }
        if (std::string why = detail::mxfp4_pair_refusal(t, s); !why.empty()) {
            refuse(t, why);
            continue;
        }
        const std::int64_t E = t.shape[0], n = t.shape[1], k = t.shape[2] * mxfp4_group_size;
        source_scale sc{s->name, dtype::U8, s->shape, 1, mxfp4_group_size, model};
        sc.encoding = source_encoding::mxfp4;
        sc.codes = t.name;
        // the bf16 orientation [E, K, N] ([in, out]): what transformers' decode transposes to
        fused_of.emplace(t.name, source_tensor{fused, dtype::F4, {E, k, n}, t.file, std::move(sc)});
    }
    for (const source_tensor& t : in) {
        if (t.name.ends_with(detail::mxfp4_scales_suffix) && !paired.contains(t.name) && t.name.find(".experts.") != std::string::npos)
            refuse(t, "E8M0 scales without their MXFP4 blocks");
    }
    for (const source_tensor& t : in) {
        if (paired.contains(t.name)) continue;
        if (const auto it = fused_of.find(t.name); it != fused_of.end()) out.tensors.push_back(it->second);
        else if (!t.name.ends_with(detail::mxfp4_blocks_suffix)) out.tensors.push_back(t);
    }
    return out;
}

QFORGE_DECL std::int64_t decode_mxfp4_row(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t groups, float* out) {
    std::int64_t bad = -1;
    for (std::int64_t g = 0; g < groups; ++g) {
        const float scale = e8m0_to_float(scales[g]);
        const std::uint8_t* b = blocks + g * mxfp4_group_bytes;
        float* o = out + g * mxfp4_group_size;
        for (std::int64_t j = 0; j < mxfp4_group_bytes; ++j) {
            o[2 * j] = e2m1_to_float(b[j] & 0x0Fu) * scale;
            o[2 * j + 1] = e2m1_to_float(static_cast<std::uint8_t>(b[j] >> 4)) * scale;
        }
        if (bad >= 0) continue;
        for (std::int64_t c = 0; c < mxfp4_group_size; ++c)
            if (!std::isfinite(o[c])) bad = g;
    }
    return bad;
}

namespace detail {

QFORGE_DECL void mxfp4_bf16_table(std::uint8_t scale, std::uint16_t lut[16]) {
    static constexpr std::uint16_t unit[8] = {0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0};
    if (scale >= 2 && scale <= 252) {
        const auto shift = static_cast<std::uint16_t>((scale - 127) * 128);  // wraps for a lower scale, as intended
        for (int c = 0; c < 8; ++c) {
            lut[c] = c == 0 ? 0 : static_cast<std::uint16_t>(unit[c] + shift);
            lut[c + 8] = static_cast<std::uint16_t>(lut[c] | 0x8000u);
        }
        return;
    }
    const float f = e8m0_to_float(scale);
    for (std::uint8_t c = 0; c < 16; ++c) lut[c] = float_to_bf16(e2m1_to_float(c) * f);
}

}  // namespace detail

QFORGE_DECL std::int64_t decode_mxfp4_row_bf16(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t groups,
                                               std::uint16_t* out) {
    std::int64_t bad = -1;
    for (std::int64_t g = 0; g < groups; ++g) {
        std::uint16_t lut[16];
        detail::mxfp4_bf16_table(scales[g], lut);
        const std::uint8_t* b = blocks + g * mxfp4_group_bytes;
        std::uint16_t* o = out + g * mxfp4_group_size;
        for (std::int64_t j = 0; j < mxfp4_group_bytes; ++j) {
            o[2 * j] = lut[b[j] & 0x0Fu];
            o[2 * j + 1] = lut[b[j] >> 4];
        }
        if (bad >= 0 || scales[g] <= 252) continue;
        for (std::int64_t c = 0; c < mxfp4_group_size; ++c)
            if ((o[c] & 0x7F80u) == 0x7F80u) bad = g;
    }
    return bad;
}

QFORGE_DECL float mxfp4_row_abs_max(const std::uint8_t* blocks, const std::uint8_t* scales, std::int64_t groups) {
    float top = 0.0f;
    for (std::int64_t g = 0; g < groups; ++g) {
        if (scales[g] > 252) return -1.0f;
        const std::uint8_t* b = blocks + g * mxfp4_group_bytes;
        std::uint8_t lo = 0, hi = 0;  // the largest low / high nibble without its sign bit
        for (std::int64_t j = 0; j < mxfp4_group_bytes; ++j) {
            const auto l = static_cast<std::uint8_t>(b[j] & 0x07u), h = static_cast<std::uint8_t>(b[j] & 0x70u);
            lo = l > lo ? l : lo;
            hi = h > hi ? h : hi;
        }
        const auto code = static_cast<std::uint8_t>(std::max<unsigned>(lo, hi >> 4));
        top = std::max(top, e2m1_to_float(code) * e8m0_to_float(scales[g]));
    }
    return top;
}

}  // namespace qforge
#endif
