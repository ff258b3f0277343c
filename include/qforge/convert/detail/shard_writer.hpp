// Output shards whose full layout is known before any tensor is computed.
//
// The plan fixes every output tensor's name, dtype and shape, so each shard's header (the
// canonical safetensors recipe of formats.md 1.1: dtype-descending then name order, compact
// JSON, {"format":"pt"} metadata, space padding to 8) and each tensor's file offset are known
// up front. Tensors can then be written in any order with pwrite as soon as they are ready,
// and the converter never holds more than the tensor it is working on.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qforge/convert/format.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"

namespace qforge::detail {

class shard_writer {
public:
    /// Splits `tensors` (in the given order) greedily into shards of at most `max_shard_bytes`
    /// of tensor data (a larger tensor goes alone), as huggingface_hub does.
    shard_writer(std::string dir, const std::vector<planned_tensor>& tensors, std::uint64_t max_shard_bytes)
        : dir_(std::move(dir)) {
        std::vector<std::vector<const planned_tensor*>> groups(1);
        std::uint64_t in_shard = 0;
        for (const planned_tensor& t : tensors) {
            const std::uint64_t b = t.bytes();
            if (!groups.back().empty() && max_shard_bytes > 0 && in_shard + b > max_shard_bytes) {
                groups.emplace_back();
                in_shard = 0;
            }
            groups.back().push_back(&t);
            in_shard += b;
        }
        const std::size_t n = groups.size();
        for (std::size_t s = 0; s < n; ++s) {
            char name[64];
            if (n == 1) std::snprintf(name, sizeof name, "model.safetensors");
            else std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, n);
            layout_shard(name, groups[s]);
        }
    }

    std::size_t shard_count() const noexcept { return shards_.size(); }

    /// Creates every shard file and writes its header.
    void open() {
        for (shard& s : shards_) {
            s.file = io::output_file::create(dir_ + "/" + s.name, true);
            s.file.write(std::as_bytes(std::span<const char>(s.header)));
        }
    }

    /// Writes one planned tensor's bytes at its place (any order, once each).
    void write(const std::string& name, std::span<const std::byte> bytes) {
        auto it = slots_.find(name);
        if (it == slots_.end()) fail<format_error>({}, name, "tensor is not in the output plan");
        slot& sl = it->second;
        if (bytes.size() != sl.size)
            fail<shape_error>({}, name, "produced " + std::to_string(bytes.size()) + " bytes, the plan says " +
                                            std::to_string(sl.size));
        if (sl.written) fail<format_error>({}, name, "tensor written twice");
        shards_[sl.shard].file.write_at(sl.offset, bytes);
        sl.written = true;
    }

    /// Checks every tensor was written, fsyncs and closes the shards, writes the index when
    /// there is more than one shard.
    void finish() {
        for (const auto& [name, sl] : slots_)
            if (!sl.written) fail<format_error>({}, name, "planned tensor was never written");
        for (shard& s : shards_) {
            s.file.sync();
            s.file.close();
        }
        if (shards_.size() > 1) io::write_file(dir_ + "/model.safetensors.index.json", index_json());
    }

    /// model.safetensors.index.json as transformers writes it (indent 2, sorted keys, newline).
    std::string index_json() const {
        std::uint64_t total = 0;
        json map = json::object();
        std::vector<std::pair<std::string, std::string>> entries;
        for (const auto& [name, sl] : slots_) {
            total += sl.size;
            entries.emplace_back(name, shards_[sl.shard].name);
        }
        std::sort(entries.begin(), entries.end());
        for (auto& [name, file] : entries) map.set(name, file);
        json idx = json::object({{"metadata", json::object({{"total_size", total}})}, {"weight_map", map}});
        return idx.dump({.indent = 2, .ensure_ascii = false, .sort_keys = true}) + "\n";
    }

    std::vector<std::string> shard_names() const {
        std::vector<std::string> out;
        for (const shard& s : shards_) out.push_back(s.name);
        return out;
    }

private:
    struct shard {
        std::string name;
        std::string header;  ///< 8-byte length + padded JSON
        io::output_file file;
    };
    struct slot {
        std::size_t shard = 0;
        std::uint64_t offset = 0;  ///< absolute file offset
        std::uint64_t size = 0;
        bool written = false;
    };

    void layout_shard(std::string name, std::vector<const planned_tensor*> ts) {
        // ST `prepare`: dtype descending in enum order, ties by name ascending (bytewise).
        std::sort(ts.begin(), ts.end(), [](const planned_tensor* a, const planned_tensor* b) {
            if (a->type != b->type) return a->type > b->type;
            return a->name < b->name;
        });
        json header = json::object({{"__metadata__", json::object({{"format", "pt"}})}});
        std::uint64_t off = 0;
        for (const planned_tensor* t : ts) {
            json shape = json::array();
            for (std::int64_t d : t->shape) shape.push_back(d);
            const std::uint64_t b = t->bytes();
            header.set(t->name, json::object({{"dtype", std::string(dtype_name(t->type))},
                                              {"shape", shape},
                                              {"data_offsets", json::array({off, off + b})}}));
            off += b;
        }
        std::string text = header.dump();
        text.resize((text.size() + 7) / 8 * 8, ' ');
        std::string full(8, '\0');
        for (int i = 0; i < 8; ++i) full[static_cast<std::size_t>(i)] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
        full += text;
        const std::size_t index = shards_.size();
        const std::uint64_t data_start = full.size();
        off = 0;
        for (const planned_tensor* t : ts) {
            if (slots_.contains(t->name)) fail<format_error>({}, t->name, "output tensor planned twice");
            slots_[t->name] = {index, data_start + off, t->bytes(), false};
            off += t->bytes();
        }
        shards_.push_back({std::move(name), std::move(full), {}});
    }

    std::string dir_;
    std::vector<shard> shards_;
    std::map<std::string, slot> slots_;
};

}  // namespace qforge::detail
