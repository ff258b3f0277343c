// Sharded checkpoints: reading a folder of shards, planning and writing shards + index.json
// (formats.md 1.4; HH serialization/_base.py split_state_dict_into_shards_factory).
//
//   safetensors::sharded_reader in("/models/llama");      // index.json, else *.safetensors
//   tensor_view w = in.view("model.layers.0.mlp.up_proj.weight");
//
//   safetensors::sharded_writer out(dst_tmp, specs_in_state_dict_order, 5'000'000'000);
//   for (auto& s : out.plan().shards) ... out.write(name, bytes);
//   out.finish();      // finishes every shard; writes model.safetensors.index.json if > 1 shard
//
// Without an index, a folder holding model.safetensors is read from that file alone (as
// transformers does); otherwise every visible *.safetensors file is a shard.
// Path safety: shard names read from index.json must be plain file names inside the folder
// (io/safe_path.hpp: no absolute paths, "..", '/', NUL, over-long names, or symlinks resolving
// outside unless folder_options::symlinks allows it). Every shard the index names must exist,
// and every tensor it maps must be in that shard; a tensor found in two shards is refused.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safe_path.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace qforge::safetensors {

inline constexpr std::string_view index_file_name = "model.safetensors.index.json";
inline constexpr std::string_view single_file_name = "model.safetensors";
/// huggingface_hub MAX_SHARD_SIZE.
inline constexpr std::uint64_t default_max_shard_bytes = 5'000'000'000;

struct folder_options {
    read_mode mode = read_mode::mmap;
    reader_limits limits{};
    io::symlink_policy symlinks = io::symlink_policy::stay_inside;
};

class sharded_reader {
public:
    explicit sharded_reader(std::string folder, const folder_options& options = {});

    const std::string& folder() const noexcept { return folder_; }
    bool has_index() const noexcept { return has_index_; }
    std::size_t shard_count() const noexcept { return shards_.size(); }
    const reader& shard(std::size_t i) const { return *shards_.at(i); }
    /// Every tensor, shard by shard, in file order within a shard.
    const std::vector<std::string>& tensor_names() const noexcept { return names_; }
    /// Σ tensor data bytes.
    std::uint64_t total_size() const noexcept { return total_size_; }

    /// The shard holding `name`, or nullptr.
    const reader* shard_of(std::string_view name) const;
    const tensor_info* find(std::string_view name) const;
    bool contains(std::string_view name) const { return shard_of(name) != nullptr; }

    tensor_view view(std::string_view name) const { return holder(name).view(name); }
    owned_tensor read_tensor(std::string_view name) const { return holder(name).read_tensor(name); }
    void read_tensor_into(std::string_view name, std::span<std::byte> out) const;
    void read_tensor_range(std::string_view name, std::uint64_t offset, std::span<std::byte> out) const;
    void release(std::string_view name) const { holder(name).release(name); }
    void release(std::string_view name, std::uint64_t offset, std::uint64_t length) const;
    /// io_error if any shard changed size since it was validated.
    void verify_unchanged(std::string_view tensor = {}) const;

private:
    const reader& holder(std::string_view name) const;

    std::size_t open_shard(const std::string& file_name, const std::string& source, const folder_options& o);

    void open_from_index(const std::string& index, const folder_options& o);

    void open_from_listing(const folder_options& o);

    void collect_names();

    std::string folder_;
    bool has_index_ = false;
    std::vector<std::unique_ptr<reader>> shards_;
    std::unordered_map<std::string, std::size_t> shard_index_;  // file name -> shard
    std::unordered_map<std::string, std::size_t> where_;        // tensor -> shard
    std::vector<std::string> names_;
    std::uint64_t total_size_ = 0;
};

/// Which tensors go to which shard file.
struct shard_plan {
    std::vector<std::vector<tensor_spec>> shards;  ///< state-dict order within each shard
    std::vector<std::string> file_names;
    std::uint64_t total_size = 0;                  ///< Σ tensor data bytes (index metadata)
};

/// huggingface_hub's greedy split, in the given (state-dict) order: a tensor larger than the
/// maximum gets a shard of its own; otherwise a new shard starts when the next tensor would
/// push the current one past the maximum. One shard is named model.safetensors, more are
/// model-00001-of-0000N.safetensors.
QFORGE_DECL shard_plan plan_shards(const std::vector<tensor_spec>& tensors, std::uint64_t max_shard_bytes = default_max_shard_bytes);

/// {"metadata":{"total_size":N},"weight_map":{tensor: file}} (weight_map in plan order).
QFORGE_DECL json make_index(const shard_plan& plan);

/// The index as transformers writes it: json.dumps(indent=2, sort_keys=True) + "\n".
QFORGE_DECL std::string index_text(const shard_plan& plan);

/// Writes every shard of a plan at once (any tensor order), then the index when sharded.
class sharded_writer {
public:
    sharded_writer(std::string folder, const std::vector<tensor_spec>& tensors,
                   std::uint64_t max_shard_bytes = default_max_shard_bytes,
                   const metadata_t& metadata = default_metadata(), writer_options options = {})
        : folder_(std::move(folder)), plan_(plan_shards(tensors, max_shard_bytes)) {
        writers_.reserve(plan_.shards.size());
        for (std::size_t i = 0; i < plan_.shards.size(); ++i) {
            writers_.emplace_back(folder_ + "/" + plan_.file_names[i], plan_.shards[i], metadata, options);
            for (const tensor_spec& t : plan_.shards[i])
                if (!shard_of_.emplace(t.name, i).second)
                    fail<format_error>(folder_, t.name, "tensor name given twice");
        }
    }

    const shard_plan& plan() const noexcept { return plan_; }
    /// The writer of one shard (its order() is the sequential order for that file).
    writer& shard(std::size_t i) { return writers_.at(i); }

    void write(std::string_view name, std::span<const std::byte> bytes) { holder(name).write(name, bytes); }
    void write(const tensor_view& t) { holder(t.name).write(t); }

    void finish();

private:
    writer& holder(std::string_view name);

    std::string folder_;
    shard_plan plan_;
    std::vector<writer> writers_;
    std::unordered_map<std::string, std::size_t> shard_of_;
};

}  // namespace qforge::safetensors

#if QFORGE_BASE_BODIES_HERE

namespace qforge::safetensors {

QFORGE_DECL shard_plan plan_shards(const std::vector<tensor_spec>& tensors, std::uint64_t max_shard_bytes) {
    if (max_shard_bytes == 0) fail<shape_error>({}, {}, "max shard size must be positive");
    shard_plan plan;
    std::vector<tensor_spec> current;
    std::uint64_t current_size = 0;
    for (const tensor_spec& t : tensors) {
        const std::uint64_t size = tensor_bytes(t);
        plan.total_size += size;
        if (size > max_shard_bytes) {
            plan.shards.push_back({t});
            continue;
        }
        if (current_size + size > max_shard_bytes) {
            plan.shards.push_back(std::move(current));
            current = {};
            current_size = 0;
        }
        current.push_back(t);
        current_size += size;
    }
    if (!current.empty() || plan.shards.empty()) plan.shards.push_back(std::move(current));
    const std::size_t n = plan.shards.size();
    auto five = [](std::size_t v) {
        std::string s = std::to_string(v);
        return std::string(s.size() < 5 ? 5 - s.size() : 0, '0') + s;
    };
    for (std::size_t i = 0; i < n; ++i)
        plan.file_names.push_back(n == 1 ? std::string(single_file_name)
                                         : "model-" + five(i + 1) + "-of-" + five(n) + ".safetensors");
    return plan;
}

QFORGE_DECL json make_index(const shard_plan& plan) {
    json map = json::object();
    for (std::size_t i = 0; i < plan.shards.size(); ++i)
        for (const tensor_spec& t : plan.shards[i]) map.as_object().push_back({t.name, json(plan.file_names[i])});
    return json::object({{"metadata", json::object({{"total_size", json(plan.total_size)}})},
                         {"weight_map", std::move(map)}});
}

QFORGE_DECL std::string index_text(const shard_plan& plan) {
    return make_index(plan).dump({.indent = 2, .sort_keys = true}) + "\n";
}


QFORGE_DECL sharded_reader::sharded_reader(std::string folder, const folder_options& options) : folder_(std::move(folder)) {
    while (folder_.size() > 1 && folder_.back() == '/') folder_.pop_back();
    const std::string index = folder_ + "/" + std::string(index_file_name);
    if (io::path_exists(index)) {
        open_from_index(index, options);
    } else {
        open_from_listing(options);
    }
}

QFORGE_DECL const reader* sharded_reader::shard_of(std::string_view name) const {
    const auto it = where_.find(std::string(name));
    return it == where_.end() ? nullptr : shards_[it->second].get();
}

QFORGE_DECL const tensor_info* sharded_reader::find(std::string_view name) const {
    const reader* r = shard_of(name);
    return r ? r->find(name) : nullptr;
}

QFORGE_DECL void sharded_reader::read_tensor_into(std::string_view name, std::span<std::byte> out) const {
    holder(name).read_tensor_into(name, out);
}

QFORGE_DECL void sharded_reader::read_tensor_range(std::string_view name, std::uint64_t offset, std::span<std::byte> out) const {
    holder(name).read_tensor_range(name, offset, out);
}

QFORGE_DECL void sharded_reader::release(std::string_view name, std::uint64_t offset, std::uint64_t length) const {
    holder(name).release(name, offset, length);
}

QFORGE_DECL void sharded_reader::verify_unchanged(std::string_view tensor) const {
    for (const auto& r : shards_) r->verify_unchanged(tensor);
}

QFORGE_DECL const reader& sharded_reader::holder(std::string_view name) const {
    if (const reader* r = shard_of(name)) return *r;
    fail<format_error>(folder_, std::string(name), "no such tensor in this checkpoint");
}

QFORGE_DECL std::size_t sharded_reader::open_shard(const std::string& file_name, const std::string& source, const folder_options& o) {
    const auto it = shard_index_.find(file_name);
    if (it != shard_index_.end()) return it->second;
    const std::string path = io::child_path(folder_, file_name, source, o.symlinks);
    if (!io::path_exists(path))
        fail<format_error>(source, {}, "shard \"" + file_name + "\" named in the index does not exist");
    shards_.push_back(std::make_unique<reader>(path, o.mode, o.limits));
    shard_index_.emplace(file_name, shards_.size() - 1);
    return shards_.size() - 1;
}

QFORGE_DECL void sharded_reader::open_from_index(const std::string& index, const folder_options& o) {
    has_index_ = true;
    const json doc = io::read_json_file(index);
    const json* map = doc.is_object() ? doc.find("weight_map") : nullptr;
    if (!map || !map->is_object())
        fail<format_error>(index, {}, "expected an object with a \"weight_map\" object");
    if (map->size() > o.limits.max_tensors)
        fail<limit_error>(index, {}, "weight_map lists more than " + std::to_string(o.limits.max_tensors) + " tensors");
    for (const json_member& m : map->as_object()) {
        if (!m.value.is_string())
            fail<format_error>(index, m.key, "weight_map value is " + std::string(json::kind_name(m.value.type())) +
                                                 ", expected a shard file name");
        const std::size_t s = open_shard(m.value.as_string(), index, o);
        if (!shards_[s]->contains(m.key))
            fail<format_error>(index, m.key, "index maps it to \"" + m.value.as_string() +
                                                 "\" but that shard does not hold it");
        where_.emplace(m.key, s);
    }
    // Tensors a shard holds beyond the weight_map are still reachable, if unambiguous
    // (for mapped tensors the weight_map decides).
    std::unordered_map<std::string, std::size_t> extras;
    for (std::size_t s = 0; s < shards_.size(); ++s)
        for (const tensor_info& t : shards_[s]->tensors()) {
            if (where_.count(t.name) && !extras.count(t.name)) continue;
            if (!extras.emplace(t.name, s).second)
                fail<format_error>(folder_, t.name, "tensor is in two shards and not in the weight_map");
            where_.emplace(t.name, s);
        }
    collect_names();
}

QFORGE_DECL void sharded_reader::open_from_listing(const folder_options& o) {
    std::vector<std::string> files;
    const std::string single(single_file_name);
    if (io::path_exists(folder_ + "/" + single)) {
        files.push_back(single);
    } else {
        for (std::string& name : io::list_directory(folder_))
            if (name.size() > 12 && name.ends_with(".safetensors") && name.front() != '.') files.push_back(std::move(name));
        std::sort(files.begin(), files.end());
    }
    if (files.empty()) fail<io_error>(folder_, {}, "no model.safetensors.index.json and no *.safetensors file");
    for (const std::string& f : files) {
        const std::size_t s = open_shard(f, folder_, o);
        for (const tensor_info& t : shards_[s]->tensors())
            if (!where_.emplace(t.name, s).second)
                fail<format_error>(folder_, t.name, "tensor is in two shards (" +
                                                        files[where_.at(t.name)] + " and " + f + ")");
    }
    collect_names();
}

QFORGE_DECL void sharded_reader::collect_names() {
    for (std::size_t s = 0; s < shards_.size(); ++s)
        for (const tensor_info& t : shards_[s]->tensors())
            if (where_.at(t.name) == s) {
                names_.push_back(t.name);
                total_size_ += t.size();
            }
}

QFORGE_DECL void sharded_writer::finish() {
    for (writer& w : writers_) w.finish();
    if (plan_.shards.size() > 1)
        io::write_file(folder_ + "/" + std::string(index_file_name), index_text(plan_));
}

QFORGE_DECL writer& sharded_writer::holder(std::string_view name) {
    const auto it = shard_of_.find(std::string(name));
    if (it == shard_of_.end()) fail<format_error>(folder_, std::string(name), "tensor was not declared to this writer");
    return writers_[it->second];
}

}  // namespace qforge::safetensors
#endif
