// A Hugging Face checkpoint folder opened for reading: its config.json and every tensor of its
// safetensors shards (through model.safetensors.index.json, else every *.safetensors; see
// io/safetensors/index.hpp), memory-mapped, as zero-copy views.
//
//   qforge::checkpoint_source src("path/to/model");
//   for (const auto& t : src.tensors()) { auto v = src.view(t.name); ...; src.release(t.name); }
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/fp8_source.hpp"
#include "qforge/convert/fused_experts.hpp"
#include "qforge/convert/gpt_oss_source.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/index.hpp"

namespace qforge {

class checkpoint_source {
public:
    explicit checkpoint_source(std::string dir);

    const std::string& dir() const noexcept { return dir_; }
    const json& config() const noexcept { return config_; }
    /// Every tensor, shard by shard, in each shard's data order (the cheapest order to read).
    const std::vector<source_tensor>& tensors() const noexcept { return tensors_; }
    bool contains(std::string_view name) const { return shards_.contains(name); }
    /// The tensors as a converter reads them (convert/fp8_source.hpp): an FP8 weight carries
    /// its scale and the scale tensors are gone; gpt-oss's MXFP4 blocks and scales are one fused
    /// tensor each (convert/gpt_oss_source.hpp); for any other checkpoint, tensors().
    const std::vector<source_tensor>& model_tensors() const noexcept { return fp8_.tensors; }
    /// The FP8 facts of the source: its kind, refusals, and the linears it left dense.
    const fp8_source& fp8() const noexcept { return fp8_; }
    /// The scale of an FP8 weight, or null for any other tensor.
    const source_scale* scale_of(std::string_view name) const;
    /// An FP8 weight decoded with its scale into float32 (the values a converter works on),
    /// read from the mapping, or with pread when `copied` (see read_tensor).
    owned_tensor decode(std::string_view name, bool copied = false) const;
    std::uint64_t total_bytes() const noexcept { return shards_.total_size(); }

    /// One expert's piece `name` [shape] of the fused 3-D tensor `fused` (convert/fused_experts.hpp):
    /// only that expert's block [A, B] is read, with pread when `copied` (a file truncated
    /// underneath is an io_error naming file and tensor, never a SIGBUS), else from the mapping
    /// (its pages dropped after). An FP8 fused tensor is decoded with its expert's scale block.
    owned_tensor read_expert(std::string_view fused, const expert_cut& cut, const std::string& name, const shape_t& shape,
                             bool copied) const;

    /// The largest |value| of rows [r0, r1) of one expert's cut of the fused MXFP4 tensor
    /// `fused`, read from the expert's blocks with pread and not decoded (mxfp4_row_abs_max):
    /// the amax of those rows of read_expert's BF16 cut, exactly. nullopt when `fused` is not
    /// MXFP4, the cut does not fit it, or a group of those rows has a scale that may decode to
    /// infinity or NaN (read_expert refuses those, naming the group).
    std::optional<float> mxfp4_cut_abs_max(std::string_view fused, const expert_cut& cut, const shape_t& shape, std::int64_t r0,
                                           std::int64_t r1) const;

    /// The tensor's bytes, zero-copy. A fused MXFP4 tensor's bytes are its blocks, in the
    /// blocks' order (its values come from read_expert).
    tensor_view view(std::string_view name) const;
    /// A copy of the tensor read with pread: a file truncated underneath gives an io_error
    /// naming file and tensor instead of a SIGBUS (the cost is one copy of the tensor).
    owned_tensor read_tensor(std::string_view name) const;
    /// Bytes [offset, offset + out.size()) of a tensor (a band of its rows) read with pread
    /// into `out`: an io_error naming file and tensor if the file shrank, never a SIGBUS.
    void read_tensor_range(std::string_view name, std::uint64_t offset, std::span<std::byte> out) const;
    /// Drops the mapped pages of a tensor we are done with, so resident memory stays flat.
    void release(std::string_view name) const;
    /// The same for bytes [offset, offset + length) of the tensor only.
    void release(std::string_view name, std::uint64_t offset, std::uint64_t length) const;
    /// io_error if a shard changed size since it was opened: a view into a file that shrank
    /// would SIGBUS when touched, so the converter checks before taking each view.
    void verify_unchanged(std::string_view tensor = {}) const { shards_.verify_unchanged(stored(tensor)); }

private:
    /// The shard tensor that holds `name`'s bytes: its MXFP4 blocks for a fused MXFP4 tensor.
    std::string_view stored(std::string_view name) const;

    std::string file_of(std::string_view t) const { return shards_.shard_of(stored(t))->path(); }

    /// The rows of one expert's cut of a fused MXFP4 tensor (convert/gpt_oss_source.hpp), decoded
    /// into BF16 (source_scale::decoded_type): the cut's rows are rows of the blocks' [N, K] (the fused tensor is their
    /// [K, N] transpose), so only that expert's blocks and scales are read.
    owned_tensor read_mxfp4_expert(std::string_view fused, const source_scale& s, const expert_cut& cut, const std::string& name,
                                   const shape_t& shape, bool copied) const;

    /// The tensor's header as a view: its bytes are the mapping's, touched only when read mapped.
    tensor_view view_or_header(std::string_view name) const { return shards_.view(name); }

    /// Bytes [at, at + n) of tensor `name` as an owned tensor (pread, or copied from the mapping
    /// whose pages are then dropped).
    /// Bytes [at, at + n) of tensor `name` in `buffer` (grown when too small, never shrunk), with
    /// pread when `copied`, else from the mapping (whose pages are dropped after).
    std::span<const std::byte> expert_block_into(std::string_view name, const tensor_view& full, std::uint64_t at,
                                                 std::uint64_t n, bool copied, std::vector<std::byte>& buffer) const;

    owned_tensor expert_block(std::string_view name, const tensor_view& full, std::uint64_t at, std::uint64_t n,
                              bool copied) const;

    static std::string check_dir(std::string d);

    std::string dir_;
    safetensors::sharded_reader shards_;
    json config_;
    std::vector<source_tensor> tensors_;
    fp8_source fp8_;
    std::map<std::string, source_scale, std::less<>> scales_;
    std::map<std::string, source_tensor, std::less<>> encoded_;  ///< fused MXFP4 tensors (their codes live elsewhere)
};

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL checkpoint_source::checkpoint_source(std::string dir) : dir_(check_dir(std::move(dir))), shards_(dir_) {
    config_ = io::path_exists(dir_ + "/config.json") ? io::read_config(dir_) : json::object();
    for (const std::string& name : shards_.tensor_names()) {
        const safetensors::tensor_info* t = shards_.find(name);
        const std::string& path = shards_.shard_of(name)->path();
        tensors_.push_back({name, t->type, t->shape, path.substr(path.rfind('/') + 1)});
    }
    if (shards_.shard_count() == 0) fail<io_error>(dir_, {}, "no *.safetensors file in the folder");
    fp8_ = read_fp8_source(config_, dir_ + "/config.json", tensors_, dir_);
    for (const source_tensor& t : fp8_.tensors) {
        if (t.scale) scales_.emplace(t.name, *t.scale);
        if (t.scale && !t.scale->codes.empty()) encoded_.emplace(t.name, t);
    }
}

QFORGE_DECL const source_scale* checkpoint_source::scale_of(std::string_view name) const {
    const auto it = scales_.find(name);
    return it == scales_.end() ? nullptr : &it->second;
}

QFORGE_DECL owned_tensor checkpoint_source::decode(std::string_view name, bool copied) const {
    const source_scale* s = scale_of(name);
    if (!s) fail<format_error>(dir_, std::string(name), "not an FP8 weight with a scale");
    if (s->encoding == source_encoding::mxfp4)
        fail<format_error>(file_of(name), std::string(name), "MXFP4 experts are decoded one expert at a time (read_expert)");
    auto file = [&](std::string_view t) { return shards_.shard_of(t)->path(); };
    if (copied) {
        const owned_tensor w = read_tensor(name), sc = read_tensor(s->name);
        return decode_fp8_weight(w.view(), sc.view(), *s, file(name), file(s->name));
    }
    return decode_fp8_weight(view(name), view(s->name), *s, file(name), file(s->name));
}

QFORGE_DECL owned_tensor checkpoint_source::read_expert(std::string_view fused, const expert_cut& cut, const std::string& name, const shape_t& shape, bool copied) const {
    const source_scale* s = scale_of(fused);
    if (s && s->encoding == source_encoding::mxfp4) return read_mxfp4_expert(fused, *s, cut, name, shape, copied);
    const tensor_view full = view_or_header(fused);
    if (full.shape.size() < 2 || cut.expert < 0 || cut.expert >= full.shape[0])
        fail<shape_error>(file_of(fused), std::string(fused), "expert cut outside the fused tensor");
    const std::uint64_t block = expert_block_bytes(full), at = block * static_cast<std::uint64_t>(cut.expert);
    if (!s && !cut.transposed && cut.step == 1 && full.shape.size() == 3 && shape.size() == 2) {
        // rows [first, first + rows) of the expert's [A, B] block: one contiguous range
        const std::uint64_t row = block / static_cast<std::uint64_t>(full.shape[1]);
        if (cut.first < 0 || cut.first + shape[0] > full.shape[1] || shape[1] != full.shape[2])
            fail<shape_error>(file_of(fused), std::string(fused), "expert cut outside the fused tensor");
        owned_tensor rows = expert_block(fused, full, at + row * static_cast<std::uint64_t>(cut.first),
                                         row * static_cast<std::uint64_t>(shape[0]), copied);
        return owned_tensor{name, full.type, shape, std::move(rows.bytes)};
    }
    shape_t one = full.shape;
    one[0] = 1;
    expert_cut local = cut;
    local.expert = 0;
    if (!s) {
        // The block is read into a buffer this thread reuses, expert after expert: a fresh
        // one per expert cost a page fault and a zero fill per page (half the time of an
        // MXFP4 export).
        thread_local std::vector<std::byte> block_buffer;
        const std::span<const std::byte> bytes = expert_block_into(fused, full, at, block, copied, block_buffer);
        return gather_expert(tensor_view{std::string(fused), full.type, one, bytes}, local, name, shape);
    }
    owned_tensor codes = expert_block(fused, full, at, block, copied);
    const tensor_view sfull = view_or_header(s->name);
    const std::uint64_t sblock = expert_block_bytes(sfull);
    const owned_tensor sc = expert_block(s->name, sfull, sblock * static_cast<std::uint64_t>(cut.expert), sblock, copied);
    const shape_t mat{full.shape[1], full.shape.size() == 3 ? full.shape[2] : 1};
    const shape_t smat{sfull.shape.size() == 3 ? sfull.shape[1] : 1, sfull.shape.size() == 3 ? sfull.shape[2] : 1};
    source_scale s2 = *s;
    s2.shape = smat;
    codes = decode_fp8_weight(tensor_view{codes.name, codes.type, mat, codes.bytes},
                              tensor_view{sc.name, sc.type, smat, sc.bytes}, s2, file_of(fused), file_of(s->name));
    return gather_expert(tensor_view{codes.name, codes.type, one, codes.bytes}, local, name, shape);
}

QFORGE_DECL std::optional<float> checkpoint_source::mxfp4_cut_abs_max(std::string_view fused, const expert_cut& cut, const shape_t& shape, std::int64_t r0, std::int64_t r1) const {
    const source_scale* s = scale_of(fused);
    if (!s || s->encoding != source_encoding::mxfp4 || shape.size() != 2 || !cut.transposed || r0 < 0 || r1 > shape[0])
        return std::nullopt;
    const tensor_view blocks = view_or_header(s->codes), scales = view_or_header(s->name);
    const std::int64_t E = blocks.shape.at(0), n = blocks.shape.at(1), groups = blocks.shape.at(2);
    if (cut.expert < 0 || cut.expert >= E || cut.first < 0 || cut.step <= 0 || shape[1] != groups * mxfp4_group_size ||
        cut.first + (shape[0] - 1) * cut.step >= n)
        return std::nullopt;
    const std::uint64_t row_bytes = static_cast<std::uint64_t>(groups * mxfp4_group_bytes);
    const std::uint64_t code_block = row_bytes * static_cast<std::uint64_t>(n), scale_block = static_cast<std::uint64_t>(groups * n);
    const owned_tensor codes = expert_block(s->codes, blocks, code_block * static_cast<std::uint64_t>(cut.expert), code_block, true);
    const owned_tensor exps = expert_block(s->name, scales, scale_block * static_cast<std::uint64_t>(cut.expert), scale_block, true);
    const auto* c = reinterpret_cast<const std::uint8_t*>(codes.bytes.data());
    const auto* e = reinterpret_cast<const std::uint8_t*>(exps.bytes.data());
    float top = 0.0f;
    for (std::int64_t r = r0; r < r1; ++r) {
        const std::int64_t row = cut.first + r * cut.step;
        const float a = mxfp4_row_abs_max(c + static_cast<std::uint64_t>(row) * row_bytes, e + row * groups, groups);
        if (a < 0) return std::nullopt;
        top = std::max(top, a);
    }
    return top;
}

QFORGE_DECL tensor_view checkpoint_source::view(std::string_view name) const {
    const auto it = encoded_.find(name);
    if (it == encoded_.end()) return shards_.view(name);
    const tensor_view codes = shards_.view(it->second.scale->codes);
    return tensor_view{it->second.name, it->second.type, it->second.shape, codes.bytes};
}

QFORGE_DECL owned_tensor checkpoint_source::read_tensor(std::string_view name) const {
    const auto it = encoded_.find(name);
    if (it == encoded_.end()) return shards_.read_tensor(name);
    owned_tensor codes = shards_.read_tensor(it->second.scale->codes);
    return owned_tensor{it->second.name, it->second.type, it->second.shape, std::move(codes.bytes)};
}

QFORGE_DECL void checkpoint_source::read_tensor_range(std::string_view name, std::uint64_t offset, std::span<std::byte> out) const {
    shards_.read_tensor_range(stored(name), offset, out);
}

QFORGE_DECL void checkpoint_source::release(std::string_view name) const {
    shards_.release(stored(name));
    if (const source_scale* s = scale_of(name)) shards_.release(s->name);
}

QFORGE_DECL void checkpoint_source::release(std::string_view name, std::uint64_t offset, std::uint64_t length) const {
    shards_.release(stored(name), offset, length);
}

QFORGE_DECL std::string_view checkpoint_source::stored(std::string_view name) const {
    const auto it = encoded_.find(name);
    return it == encoded_.end() ? name : std::string_view(it->second.scale->codes);
}

QFORGE_DECL owned_tensor checkpoint_source::read_mxfp4_expert(std::string_view fused, const source_scale& s, const expert_cut& cut, const std::string& name, const shape_t& shape, bool copied) const {
    const tensor_view blocks = view_or_header(s.codes), scales = view_or_header(s.name);
    const std::int64_t E = blocks.shape.at(0), n = blocks.shape.at(1), groups = blocks.shape.at(2);
    const std::int64_t k = groups * mxfp4_group_size;
    const bool bias = shape.size() != 2;
    if (bias || !cut.transposed || cut.expert < 0 || cut.expert >= E || cut.first < 0 || cut.step <= 0 ||
        shape[1] != k || cut.first + (shape[0] - 1) * cut.step >= n)
        fail<shape_error>(file_of(fused), std::string(fused), "expert cut outside the fused MXFP4 tensor");
    const std::uint64_t row_bytes = static_cast<std::uint64_t>(groups * mxfp4_group_bytes);
    const std::uint64_t code_block = row_bytes * static_cast<std::uint64_t>(n), scale_block = static_cast<std::uint64_t>(groups * n);
    const owned_tensor codes = expert_block(s.codes, blocks, code_block * static_cast<std::uint64_t>(cut.expert), code_block, copied);
    const owned_tensor exps = expert_block(s.name, scales, scale_block * static_cast<std::uint64_t>(cut.expert), scale_block, copied);
    owned_tensor out{name, s.decoded_type(), shape, std::vector<std::byte>(static_cast<std::size_t>(shape[0] * k) * 2)};
    const auto* c = reinterpret_cast<const std::uint8_t*>(codes.bytes.data());
    const auto* e = reinterpret_cast<const std::uint8_t*>(exps.bytes.data());
    std::vector<std::uint16_t> values(static_cast<std::size_t>(k));
    for (std::int64_t r = 0; r < shape[0]; ++r) {
        const std::int64_t row = cut.first + r * cut.step;
        const std::uint8_t* scale_row = e + row * groups;
        const std::int64_t bad =
            decode_mxfp4_row_bf16(c + static_cast<std::uint64_t>(row) * row_bytes, scale_row, groups, values.data());
        std::memcpy(out.bytes.data() + static_cast<std::size_t>(r * k) * 2, values.data(), values.size() * 2);
        if (bad >= 0)
            fail<format_error>(file_of(s.name), s.name, "expert " + std::to_string(cut.expert) + ", row " + std::to_string(row) +
                                                            ", group " + std::to_string(bad) + ": " +
                                                            (scale_row[bad] == 0xFFu ? "E8M0 scale 0xFF is NaN"
                                                                                     : "the values overflow float32"));
    }
    return out;
}

QFORGE_DECL std::span<const std::byte> checkpoint_source::expert_block_into(std::string_view name, const tensor_view& full, std::uint64_t at, std::uint64_t n, bool copied, std::vector<std::byte>& buffer) const {
    if (buffer.size() < n) buffer.resize(static_cast<std::size_t>(n));
    const std::span<std::byte> into(buffer.data(), static_cast<std::size_t>(n));
    if (copied) {
        shards_.read_tensor_range(name, at, into);
    } else {
        verify_unchanged(name);
        std::memcpy(into.data(), full.bytes.data() + at, static_cast<std::size_t>(n));
        shards_.release(name, at, n);
    }
    return into;
}

QFORGE_DECL owned_tensor checkpoint_source::expert_block(std::string_view name, const tensor_view& full, std::uint64_t at, std::uint64_t n, bool copied) const {
    owned_tensor out{std::string(name), full.type, {}, {}};
    (void)expert_block_into(name, full, at, n, copied, out.bytes);
    return out;
}

QFORGE_DECL std::string checkpoint_source::check_dir(std::string d) {
    while (d.size() > 1 && d.back() == '/') d.pop_back();
    if (!io::is_directory(d)) fail<io_error>(d, {}, "not a checkpoint folder");
    return d;
}

}  // namespace qforge
#endif
