// A Hugging Face checkpoint folder opened for reading: its config.json and every tensor of its
// safetensors shards (found through model.safetensors.index.json, else every *.safetensors),
// memory-mapped, as zero-copy views.
//
//   qforge::checkpoint_source src("path/to/model");
//   for (const auto& t : src.tensors()) { auto v = src.view(t.name); ...; src.release(t.name); }
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/plan.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/reader.hpp"

namespace qforge {

class checkpoint_source {
public:
    explicit checkpoint_source(std::string dir) : dir_(std::move(dir)) {
        if (!io::is_directory(dir_)) fail<io_error>(dir_, {}, "not a checkpoint folder");
        const std::string cfg = dir_ + "/config.json";
        if (io::path_exists(cfg)) config_ = json::parse(io::read_file(cfg, 64u << 20), cfg);
        else config_ = json::object();
        for (const std::string& f : shard_names()) {
            auto r = std::make_unique<safetensors::reader>(dir_ + "/" + f);
            for (const auto& t : r->tensors()) {
                if (where_.contains(t.name))
                    fail<format_error>(r->path(), t.name, "tensor appears in more than one shard");
                where_[t.name] = readers_.size();
                tensors_.push_back({t.name, t.type, t.shape, f});
            }
            readers_.push_back(std::move(r));
        }
        if (readers_.empty()) fail<io_error>(dir_, {}, "no *.safetensors file in the folder");
    }

    const std::string& dir() const noexcept { return dir_; }
    const json& config() const noexcept { return config_; }
    /// Every tensor, shard by shard, in each shard's data order (the cheapest order to read).
    const std::vector<source_tensor>& tensors() const noexcept { return tensors_; }
    bool contains(std::string_view name) const { return where_.contains(std::string(name)); }

    tensor_view view(const std::string& name) const { return reader_of(name).view(name); }
    /// Drops the mapped pages of a tensor we are done with, so resident memory stays flat.
    void release(const std::string& name) const { reader_of(name).release(name); }

private:
    const safetensors::reader& reader_of(const std::string& name) const {
        auto it = where_.find(name);
        if (it == where_.end()) fail<format_error>(dir_, name, "no such tensor in the checkpoint");
        return *readers_[it->second];
    }

    /// Shards named by the index (first appearance order), or every *.safetensors sorted.
    std::vector<std::string> shard_names() const {
        std::vector<std::string> names;
        const std::string index = dir_ + "/model.safetensors.index.json";
        if (io::path_exists(index)) {
            const json idx = json::parse(io::read_file(index, 256u << 20), index);
            const json* map = idx.find("weight_map");
            if (!map || !map->is_object()) fail<format_error>(index, {}, "no \"weight_map\" object");
            for (const json_member& m : map->as_object()) {
                const std::string& f = m.value.as_string();
                if (f.find('/') != std::string::npos || f == "..")
                    fail<format_error>(index, m.key, "shard name \"" + f + "\" leaves the folder");
                if (std::find(names.begin(), names.end(), f) == names.end()) names.push_back(f);
            }
            return names;
        }
        for (const std::string& f : io::list_directory(dir_))
            if (f.size() > 12 && f.ends_with(".safetensors")) names.push_back(f);
        std::sort(names.begin(), names.end());
        return names;
    }

    std::string dir_;
    json config_;
    std::vector<std::unique_ptr<safetensors::reader>> readers_;
    std::map<std::string, std::size_t> where_;
    std::vector<source_tensor> tensors_;
};

}  // namespace qforge
