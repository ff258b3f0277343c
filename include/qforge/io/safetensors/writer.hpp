// Streaming .safetensors writer, byte-identical to the reference writer's recipe
// (formats.md 1.1; ST safetensors/src/tensor.rs `prepare`, `serialize`).
//
//   std::vector<safetensors::tensor_spec> specs = {{"w", dtype::F16, {2, 3}}, ...};
//   safetensors::writer out("model.safetensors", specs);   // header written now
//   out.write("w", bytes_of_w);       // any tensor order; each tensor's bytes in one call or
//   out.write("w", more_bytes);       //   in consecutive parts, checked against dtype x shape
//   out.finish();                     // every tensor complete? fsync, close
//   safetensors::save(path, {view_a, view_b});   // small files in one call
//
// Because the header (and so every tensor's offset) is computed up front from the list of
// (name, dtype, shape), the writer buffers nothing: each part goes straight to its place in
// the file with pwrite. Writing tensors in order() makes the I/O purely sequential.
// Recipe: tensors sorted by dtype descending (declaration order of the Rust enum), ties by
// name bytewise; data_offsets cumulative without gaps; compact serde_json header with
// "__metadata__" first (omitted when the metadata is empty), space-padded to a multiple of 8.
// A writer destroyed before finish() removes its partial file.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/reader.hpp"

namespace qforge::safetensors {

/// What the writer must know about a tensor before any byte is written.
struct tensor_spec {
    std::string name;
    dtype type = dtype::F32;
    shape_t shape;
};

using metadata_t = std::vector<std::pair<std::string, std::string>>;

/// What transformers writes and requires: {"format":"pt"}.
inline metadata_t default_metadata() { return {{"format", "pt"}}; }

/// Bytes of dtype x shape, refusing negative dims, overflow and partial bytes.
QFORGE_DECL std::uint64_t tensor_bytes(const tensor_spec& t, const std::string& file = {});

/// The file's layout, computed from the specs alone.
struct file_layout {
    std::vector<tensor_spec> order;     ///< canonical file order
    std::vector<std::uint64_t> begins;  ///< data_offsets[0] of order[i]
    std::vector<std::uint64_t> sizes;   ///< byte size of order[i]
    std::string header;                 ///< padded JSON header (N = header.size())
    std::uint64_t data_size = 0;

    std::uint64_t data_offset() const noexcept { return 8 + header.size(); }
    std::uint64_t file_size() const noexcept { return data_offset() + data_size; }
    /// The 8 + N bytes that start the file.
    std::string prefix() const;
};

/// Sorts, assigns offsets and serializes the header exactly as the reference writer does.
QFORGE_DECL file_layout plan_file(std::vector<tensor_spec> specs, const metadata_t& metadata = default_metadata(),
                                  const std::string& file = {});

struct writer_options {
    bool sync = true;  ///< fsync the file in finish()
};

class writer {
public:
    writer(std::string path, std::vector<tensor_spec> specs, const metadata_t& metadata = default_metadata(),
           writer_options options = {})
        : layout_(plan_file(std::move(specs), metadata, path)), options_(options) {
        for (std::size_t i = 0; i < layout_.order.size(); ++i) index_.emplace(layout_.order[i].name, i);
        written_.assign(layout_.order.size(), 0);
        out_ = io::output_file::create(std::move(path));
        out_.write(layout_.prefix());
    }
    writer(writer&&) = default;
    writer& operator=(writer&&) = delete;
    writer(const writer&) = delete;
    writer& operator=(const writer&) = delete;
    ~writer();

    const std::string& path() const noexcept { return out_.path(); }
    /// Canonical file order; writing in this order is sequential I/O.
    const std::vector<tensor_spec>& order() const noexcept { return layout_.order; }
    const file_layout& layout() const noexcept { return layout_; }

    /// Appends `bytes` to tensor `name` (a whole tensor, or the next part of it).
    void write(std::string_view name, std::span<const std::byte> bytes);

    /// Writes a whole tensor, checking its dtype and shape against the declared ones.
    void write(const tensor_view& t);

    /// Checks every tensor is complete, fsyncs (writer_options::sync) and closes.
    void finish();

private:
    std::size_t slot(std::string_view name) const;

    file_layout layout_;
    writer_options options_;
    std::unordered_map<std::string, std::size_t> index_;
    std::vector<std::uint64_t> written_;
    io::output_file out_;
};

/// Writes a whole file from in-memory tensors in one call (tests, small outputs).
QFORGE_DECL void save(const std::string& path, const std::vector<tensor_view>& tensors,
                      const metadata_t& metadata = default_metadata(), writer_options options = {});

}  // namespace qforge::safetensors

#if QFORGE_BASE_BODIES_HERE

namespace qforge::safetensors {

QFORGE_DECL std::uint64_t tensor_bytes(const tensor_spec& t, const std::string& file) {
    std::uint64_t numel = 1;
    for (std::int64_t d : t.shape) {
        if (d < 0) fail<shape_error>(file, t.name, "negative dimension in " + shape_to_string(t.shape));
        const auto ud = static_cast<std::uint64_t>(d);
        if (ud != 0 && numel > UINT64_MAX / ud) fail<limit_error>(file, t.name, "element count overflows 64 bits");
        numel *= ud;
    }
    const std::uint64_t bits = dtype_bits(t.type);
    if (numel > UINT64_MAX / bits) fail<limit_error>(file, t.name, "size overflows 64 bits");
    if ((numel * bits) % 8 != 0)
        fail<shape_error>(file, t.name, std::to_string(numel) + " elements of " + std::string(dtype_name(t.type)) +
                                            " do not fill whole bytes");
    return numel * bits / 8;
}

QFORGE_DECL file_layout plan_file(std::vector<tensor_spec> specs, const metadata_t& metadata,
                                  const std::string& file) {
    std::stable_sort(specs.begin(), specs.end(), [](const tensor_spec& a, const tensor_spec& b) {
        if (a.type != b.type) return a.type > b.type;
        return a.name < b.name;
    });
    {
        std::vector<std::string_view> names;
        names.reserve(specs.size());
        for (const auto& s : specs) names.push_back(s.name);
        std::sort(names.begin(), names.end());
        if (const auto dup = std::adjacent_find(names.begin(), names.end()); dup != names.end())
            fail<format_error>(file, std::string(*dup), "tensor name given twice");
    }
    file_layout L;
    json header = json::object();
    if (!metadata.empty()) {
        json meta = json::object();
        for (const auto& [k, v] : metadata) {
            if (meta.contains(k)) fail<format_error>(file, {}, "__metadata__ key \"" + k + "\" given twice");
            meta.as_object().push_back({k, json(v)});
        }
        header.as_object().push_back({"__metadata__", std::move(meta)});
    }
    for (const tensor_spec& s : specs) {
        if (s.name == "__metadata__") fail<format_error>(file, s.name, "reserved name cannot be a tensor");
        const std::uint64_t size = tensor_bytes(s, file);
        if (L.data_size > UINT64_MAX - size) fail<limit_error>(file, s.name, "total data size overflows 64 bits");
        json shape = json::array();
        for (std::int64_t d : s.shape) shape.as_array().emplace_back(d);
        header.as_object().push_back(
            {s.name, json::object({{"dtype", json(dtype_name(s.type))},
                                   {"shape", std::move(shape)},
                                   {"data_offsets", json::array({json(L.data_size), json(L.data_size + size)})}})});
        L.begins.push_back(L.data_size);
        L.sizes.push_back(size);
        L.data_size += size;
    }
    L.header = header.dump();
    L.header.resize((L.header.size() + 7) / 8 * 8, ' ');
    if (L.header.size() > max_header_size)
        fail<limit_error>(file, {}, "header of " + std::to_string(L.header.size()) +
                                        " bytes exceeds the safetensors maximum of 100,000,000");
    L.order = std::move(specs);
    return L;
}

QFORGE_DECL void save(const std::string& path, const std::vector<tensor_view>& tensors,
                      const metadata_t& metadata, writer_options options) {
    std::vector<tensor_spec> specs;
    specs.reserve(tensors.size());
    for (const tensor_view& t : tensors) specs.push_back({t.name, t.type, t.shape});
    writer w(path, std::move(specs), metadata, options);
    for (const tensor_view& t : tensors) w.write(t);
    w.finish();
}


QFORGE_DECL std::string file_layout::prefix() const {
    std::string p(8, '\0');
    std::uint64_t n = header.size();
    for (std::size_t k = 0; k < 8; ++k, n >>= 8) p[k] = static_cast<char>(n & 0xFF);
    return p + header;
}

QFORGE_DECL writer::~writer() {
    if (out_.is_open()) {  // abandoned: do not leave a file that looks complete
        const std::string p = out_.path();
        out_ = io::output_file();
        (void)io::detail::sys_unlink(p.c_str());
    }
}

QFORGE_DECL void writer::write(std::string_view name, std::span<const std::byte> bytes) {
    const std::size_t i = slot(name);
    const std::uint64_t size = layout_.sizes[i];
    if (bytes.size() > size - written_[i])
        fail<shape_error>(path(), std::string(name),
                          "got " + std::to_string(written_[i] + bytes.size()) + " bytes, " +
                              std::string(dtype_name(layout_.order[i].type)) + " " +
                              shape_to_string(layout_.order[i].shape) + " holds " + std::to_string(size));
    out_.write_at(layout_.data_offset() + layout_.begins[i] + written_[i], bytes);
    written_[i] += bytes.size();
}

QFORGE_DECL void writer::write(const tensor_view& t) {
    const tensor_spec& s = layout_.order[slot(t.name)];
    if (s.type != t.type || s.shape != t.shape)
        fail<shape_error>(path(), t.name, "declared " + std::string(dtype_name(s.type)) + " " +
                                              shape_to_string(s.shape) + ", given " +
                                              std::string(dtype_name(t.type)) + " " + shape_to_string(t.shape));
    if (written_[slot(t.name)] != 0) fail<shape_error>(path(), t.name, "tensor already (partly) written");
    if (t.bytes.size() != layout_.sizes[slot(t.name)])
        fail<shape_error>(path(), t.name, "view holds " + std::to_string(t.bytes.size()) + " bytes, expected " +
                                              std::to_string(layout_.sizes[slot(t.name)]));
    write(t.name, t.bytes);
}

QFORGE_DECL void writer::finish() {
    for (std::size_t i = 0; i < written_.size(); ++i)
        if (written_[i] != layout_.sizes[i])
            fail<shape_error>(path(), layout_.order[i].name,
                              "only " + std::to_string(written_[i]) + " of " + std::to_string(layout_.sizes[i]) +
                                  " bytes written before finish()");
    if (options_.sync) out_.sync();
    out_.close();
}

QFORGE_DECL std::size_t writer::slot(std::string_view name) const {
    const auto it = index_.find(std::string(name));
    if (it == index_.end()) fail<format_error>(path(), std::string(name), "tensor was not declared to this writer");
    return it->second;
}

}  // namespace qforge::safetensors
#endif
