// A Hugging Face checkpoint folder opened for reading: its config.json and every tensor of its
// safetensors shards (through model.safetensors.index.json, else every *.safetensors; see
// io/safetensors/index.hpp), memory-mapped, as zero-copy views.
//
//   qforge::checkpoint_source src("path/to/model");
//   for (const auto& t : src.tensors()) { auto v = src.view(t.name); ...; src.release(t.name); }
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/fp8_source.hpp"
#include "qforge/convert/plan.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/index.hpp"

namespace qforge {

class checkpoint_source {
public:
    explicit checkpoint_source(std::string dir) : dir_(check_dir(std::move(dir))), shards_(dir_) {
        config_ = io::path_exists(dir_ + "/config.json") ? io::read_config(dir_) : json::object();
        for (const std::string& name : shards_.tensor_names()) {
            const safetensors::tensor_info* t = shards_.find(name);
            const std::string& path = shards_.shard_of(name)->path();
            tensors_.push_back({name, t->type, t->shape, path.substr(path.rfind('/') + 1)});
        }
        if (shards_.shard_count() == 0) fail<io_error>(dir_, {}, "no *.safetensors file in the folder");
        fp8_ = read_fp8_source(config_, dir_ + "/config.json", tensors_, dir_);
        for (const source_tensor& t : fp8_.tensors)
            if (t.scale) scales_.emplace(t.name, *t.scale);
    }

    const std::string& dir() const noexcept { return dir_; }
    const json& config() const noexcept { return config_; }
    /// Every tensor, shard by shard, in each shard's data order (the cheapest order to read).
    const std::vector<source_tensor>& tensors() const noexcept { return tensors_; }
    bool contains(std::string_view name) const { return shards_.contains(name); }
    /// The tensors as a converter reads them (convert/fp8_source.hpp): an FP8 weight carries
    /// its scale and the scale tensors are gone; for any other checkpoint, tensors().
    const std::vector<source_tensor>& model_tensors() const noexcept { return fp8_.tensors; }
    /// The FP8 facts of the source: its kind, refusals, and the linears it left dense.
    const fp8_source& fp8() const noexcept { return fp8_; }
    /// The scale of an FP8 weight, or null for any other tensor.
    const source_scale* scale_of(std::string_view name) const {
        const auto it = scales_.find(name);
        return it == scales_.end() ? nullptr : &it->second;
    }
    /// An FP8 weight decoded with its scale into float32 (the values a converter works on),
    /// read from the mapping, or with pread when `copied` (see read_tensor).
    owned_tensor decode(std::string_view name, bool copied = false) const {
        const source_scale* s = scale_of(name);
        if (!s) fail<format_error>(dir_, std::string(name), "not an FP8 weight with a scale");
        auto file = [&](std::string_view t) { return shards_.shard_of(t)->path(); };
        if (copied) {
            const owned_tensor w = read_tensor(name), sc = read_tensor(s->name);
            return decode_fp8_weight(w.view(), sc.view(), *s, file(name), file(s->name));
        }
        return decode_fp8_weight(view(name), view(s->name), *s, file(name), file(s->name));
    }
    std::uint64_t total_bytes() const noexcept { return shards_.total_size(); }

    tensor_view view(std::string_view name) const { return shards_.view(name); }
    /// A copy of the tensor read with pread: a file truncated underneath gives an io_error
    /// naming file and tensor instead of a SIGBUS (the cost is one copy of the tensor).
    owned_tensor read_tensor(std::string_view name) const { return shards_.read_tensor(name); }
    /// Bytes [offset, offset + out.size()) of a tensor (a band of its rows) read with pread
    /// into `out`: an io_error naming file and tensor if the file shrank, never a SIGBUS.
    void read_tensor_range(std::string_view name, std::uint64_t offset, std::span<std::byte> out) const {
        shards_.read_tensor_range(name, offset, out);
    }
    /// Drops the mapped pages of a tensor we are done with, so resident memory stays flat.
    void release(std::string_view name) const {
        shards_.release(name);
        if (const source_scale* s = scale_of(name)) shards_.release(s->name);
    }
    /// The same for bytes [offset, offset + length) of the tensor only.
    void release(std::string_view name, std::uint64_t offset, std::uint64_t length) const {
        shards_.release(name, offset, length);
    }
    /// io_error if a shard changed size since it was opened: a view into a file that shrank
    /// would SIGBUS when touched, so the converter checks before taking each view.
    void verify_unchanged(std::string_view tensor = {}) const { shards_.verify_unchanged(tensor); }

private:
    static std::string check_dir(std::string d) {
        while (d.size() > 1 && d.back() == '/') d.pop_back();
        if (!io::is_directory(d)) fail<io_error>(d, {}, "not a checkpoint folder");
        return d;
    }

    std::string dir_;
    safetensors::sharded_reader shards_;
    json config_;
    std::vector<source_tensor> tensors_;
    fp8_source fp8_;
    std::map<std::string, source_scale, std::less<>> scales_;
};

}  // namespace qforge
