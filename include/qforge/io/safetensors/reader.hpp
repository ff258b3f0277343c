// Reads one .safetensors file, validating exactly what the reference Rust reader validates
// (formats.md 1.3), with configurable resource limits on top.
//
//   safetensors::reader r("model.safetensors");            // throws on any violation
//   for (const safetensors::tensor_info& t : r.tensors())   // file (offset) order
//       use(r.view(t.name));                                // zero-copy view into the mapping
//   owned_tensor w = r.read_tensor("lm_head.weight");       // pread copy, survives truncation
//   r.release("lm_head.weight");                            // drop its mapped pages
//
// Every refusal names the file, the tensor when there is one, and the rule, with the name of
// the Rust error in parentheses (HeaderTooSmall, InvalidOffset, ...), so the rejection table of
// formats.md 1.3 can be checked rule by rule. Arithmetic on untrusted numbers is
// overflow-checked; nothing is allocated from a size the file claims before that size has
// been checked against the file length and the limits.
//
// Modes: read_mode::mmap (default) maps the file read-only and view() hands out spans into it.
// read_mode::pread never maps: the header is read with pread, view() is refused, read_tensor()
// copies. A file truncated underneath a mapping can SIGBUS on view access; read_tensor() (in
// either mode) turns truncation into an io_error instead.
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
#include "qforge/io/mapped_file.hpp"

namespace qforge::safetensors {

/// ST MAX_HEADER_SIZE (safetensors/src/tensor.rs): enforced by the reference reader and writer.
inline constexpr std::uint64_t max_header_size = 100'000'000;

/// Resource limits checked before anything is allocated from the file's claims.
struct reader_limits {
    std::uint64_t max_header_bytes = max_header_size;
    std::size_t max_tensors = 1'000'000;
    std::size_t max_rank = 16;
    std::uint64_t max_elements = std::uint64_t{1} << 40;  // per tensor
};

enum class read_mode { mmap, pread };

/// One tensor entry of the header, after validation.
struct tensor_info {
    std::string name;
    dtype type = dtype::F32;
    shape_t shape;
    std::uint64_t begin = 0;  ///< data_offsets[0], relative to the data section
    std::uint64_t end = 0;    ///< data_offsets[1]

    std::uint64_t size() const noexcept { return end - begin; }
};

class reader {
public:
    explicit reader(std::string path, read_mode mode = read_mode::mmap,
                    const reader_limits& limits = {});

    const std::string& path() const noexcept { return in_.path(); }
    read_mode mode() const noexcept { return mode_; }
    std::uint64_t file_size() const noexcept { return file_size_; }
    /// N: the header length field (counts the padding).
    std::uint64_t header_size() const noexcept { return header_size_; }
    /// Absolute file offset of the data section (8 + N).
    std::uint64_t data_offset() const noexcept { return 8 + header_size_; }

    /// Tensors in data-offset order.
    const std::vector<tensor_info>& tensors() const noexcept { return tensors_; }
    /// `__metadata__` in file order (empty when absent).
    const std::vector<std::pair<std::string, std::string>>& metadata() const noexcept;
    bool has_metadata() const noexcept { return has_metadata_; }
    /// transformers refuses a file whose __metadata__ exists without "format" in
    /// {pt, tf, flax, mlx} (TF modeling_utils.load_state_dict); no __metadata__ is fine.
    bool transformers_can_load() const;

    const tensor_info* find(std::string_view name) const;
    bool contains(std::string_view name) const { return find(name) != nullptr; }
    const tensor_info& info(std::string_view name) const;

    /// Zero-copy view into the mapping (read_mode::mmap only); valid while this reader lives.
    tensor_view view(std::string_view name) const;

    /// Copies the tensor's bytes with pread into `out` (exactly info(name).size() bytes).
    void read_tensor_into(std::string_view name, std::span<std::byte> out) const;

    /// Copies bytes [offset, offset + out.size()) of the tensor with pread into `out` (a band
    /// of rows): io_error naming the file and tensor if the file got shorter, never a signal.
    void read_tensor_range(std::string_view name, std::uint64_t offset, std::span<std::byte> out) const;

    /// Copies the tensor into an owned buffer via pread (io_error if the file got shorter).
    owned_tensor read_tensor(std::string_view name) const;

    /// Drops the mapped pages of a tensor the caller is done with (no-op in pread mode).
    void release(std::string_view name) const;
    /// Drops the mapped pages of bytes [offset, offset + length) of a tensor (clamped to it):
    /// one expert's block of a fused expert tensor, once it has been copied out.
    void release(std::string_view name, std::uint64_t offset, std::uint64_t length) const;

    /// io_error if the file's size is no longer what was validated (truncated or grown since).
    /// `tensor`: the one about to be read, named in the error.
    void verify_unchanged(std::string_view tensor = {}) const;

private:
    [[noreturn]] void reject(const std::string& tensor, const std::string& reason) const;

    // Always pread, in mmap mode too: a file truncated while it is being opened is then an
    // io_error, where a copy out of the mapping would SIGBUS.
    std::string read_header_bytes(std::uint64_t offset, std::uint64_t n) const;

    void parse(const reader_limits& limits);

    void read_entries(const json& header, const reader_limits& limits);

    void read_metadata(const json& v);

    std::uint64_t read_count(const std::string& name, const json& v, std::string_view what) const;

    tensor_info read_tensor_entry(const std::string& name, const json& v, const reader_limits& limits) const;

    /// numel x bits / 8 with every product overflow-checked (ST Metadata::validate).
    std::uint64_t element_bytes(const tensor_info& t, const reader_limits& limits) const;

    void validate_offsets();

    read_mode mode_;
    io::input_file in_;
    io::mapped_file map_;
    std::uint64_t file_size_ = 0;
    std::uint64_t header_size_ = 0;
    std::vector<tensor_info> tensors_;
    std::vector<std::pair<std::string, std::string>> metadata_;
    bool has_metadata_ = false;
    std::unordered_map<std::string, std::size_t> by_name_;
};

}  // namespace qforge::safetensors

#if QFORGE_BASE_BODIES_HERE

namespace qforge::safetensors {

QFORGE_DECL reader::reader(std::string path, read_mode mode, const reader_limits& limits) : mode_(mode), in_(std::move(path)) {
    if (mode_ == read_mode::mmap) map_ = io::mapped_file(in_.path());
    file_size_ = mode_ == read_mode::mmap ? map_.size() : in_.size();
    parse(limits);
}

QFORGE_DECL const std::vector<std::pair<std::string, std::string>>& reader::metadata() const noexcept {
    return metadata_;
}

QFORGE_DECL bool reader::transformers_can_load() const {
    if (!has_metadata_) return true;
    for (const auto& [k, v] : metadata_)
        if (k == "format") return v == "pt" || v == "tf" || v == "flax" || v == "mlx";
    return false;
}

QFORGE_DECL const tensor_info* reader::find(std::string_view name) const {
    const auto it = by_name_.find(std::string(name));
    return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

QFORGE_DECL const tensor_info& reader::info(std::string_view name) const {
    if (const tensor_info* t = find(name)) return *t;
    fail<format_error>(path(), std::string(name), "no such tensor in this file");
}

QFORGE_DECL tensor_view reader::view(std::string_view name) const {
    const tensor_info& t = info(name);
    if (mode_ != read_mode::mmap)
        fail<unsupported_error>(path(), t.name, "view() needs read_mode::mmap; use read_tensor()");
    const auto all = map_.bytes();
    return {t.name, t.type, t.shape, all.subspan(static_cast<std::size_t>(data_offset() + t.begin),
                                                 static_cast<std::size_t>(t.size()))};
}

QFORGE_DECL void reader::read_tensor_into(std::string_view name, std::span<std::byte> out) const {
    const tensor_info& t = info(name);
    if (out.size() != t.size())
        fail<shape_error>(path(), t.name, "destination holds " + std::to_string(out.size()) +
                                              " bytes, tensor has " + std::to_string(t.size()));
    in_.read_at(data_offset() + t.begin, out, t.name);
}

QFORGE_DECL void reader::read_tensor_range(std::string_view name, std::uint64_t offset, std::span<std::byte> out) const {
    const tensor_info& t = info(name);
    if (offset > t.size() || out.size() > t.size() - offset)
        fail<shape_error>(path(), t.name, "bytes [" + std::to_string(offset) + ", " +
                                              std::to_string(offset + out.size()) + ") are outside the " +
                                              std::to_string(t.size()) + "-byte tensor");
    in_.read_at(data_offset() + t.begin + offset, out, t.name);
}

QFORGE_DECL owned_tensor reader::read_tensor(std::string_view name) const {
    const tensor_info& t = info(name);
    owned_tensor out{t.name, t.type, t.shape, std::vector<std::byte>(static_cast<std::size_t>(t.size()))};
    in_.read_at(data_offset() + t.begin, out.bytes, t.name);
    return out;
}

QFORGE_DECL void reader::release(std::string_view name) const {
    const tensor_info& t = info(name);
    map_.release(data_offset() + t.begin, t.size());
}

QFORGE_DECL void reader::release(std::string_view name, std::uint64_t offset, std::uint64_t length) const {
    const tensor_info& t = info(name);
    if (offset >= t.size()) return;
    map_.release(data_offset() + t.begin + offset, std::min<std::uint64_t>(length, t.size() - offset));
}

QFORGE_DECL void reader::verify_unchanged(std::string_view tensor) const {
    const std::uint64_t now = io::file_size_of(in_.fd(), path());
    if (now != file_size_)
        fail<io_error>(path(), std::string(tensor), "file changed size from " + std::to_string(file_size_) +
                                       " to " + std::to_string(now) + " bytes while open");
}

QFORGE_DECL void reader::reject(const std::string& tensor, const std::string& reason) const {
    fail<format_error>(path(), tensor, reason);
}

QFORGE_DECL std::string reader::read_header_bytes(std::uint64_t offset, std::uint64_t n) const {
    std::string text(static_cast<std::size_t>(n), '\0');
    in_.read_at(offset, std::as_writable_bytes(std::span<char>(text)));
    return text;
}

QFORGE_DECL void reader::parse(const reader_limits& limits) {
    if (file_size_ < 8)
        reject({}, "file of " + std::to_string(file_size_) +
                       " bytes is too small to hold the 8-byte header length (HeaderTooSmall)");
    const std::string len_bytes = read_header_bytes(0, 8);
    std::uint64_t n = 0;
    for (int k = 7; k >= 0; --k) n = (n << 8) | static_cast<unsigned char>(len_bytes[static_cast<std::size_t>(k)]);
    const std::uint64_t header_limit = std::min(limits.max_header_bytes, max_header_size);
    if (n > header_limit)
        fail<limit_error>(path(), {}, "header length " + std::to_string(n) + " exceeds the limit of " +
                                          std::to_string(header_limit) + " bytes (HeaderTooLarge)");
    if (n > file_size_ - 8)
        reject({}, "header length " + std::to_string(n) + " runs past the end of the " +
                       std::to_string(file_size_) + "-byte file (InvalidHeaderLength)");
    header_size_ = n;
    const std::string text = read_header_bytes(8, n);
    if (!qforge::detail::is_valid_utf8(text)) reject({}, "header is not valid UTF-8 (InvalidHeader)");
    json header;
    try {
        header = json::parse(text, {}, {.max_depth = 128, .max_bytes = text.size()});
    } catch (const qforge::error& e) {
        reject({}, "header is not valid JSON (InvalidHeaderDeserialization): " + e.reason());
    }
    if (!header.is_object())
        reject({}, "header is " + std::string(json::kind_name(header.type())) +
                       ", expected a JSON object (InvalidHeaderDeserialization)");
    read_entries(header, limits);
    validate_offsets();
}

QFORGE_DECL void reader::read_entries(const json& header, const reader_limits& limits) {
    for (const json_member& m : header.as_object()) {
        if (m.key == "__metadata__") {
            read_metadata(m.value);
            continue;
        }
        if (tensors_.size() >= limits.max_tensors)
            fail<limit_error>(path(), {}, "more than " + std::to_string(limits.max_tensors) +
                                              " tensors (reader_limits::max_tensors)");
        tensors_.push_back(read_tensor_entry(m.key, m.value, limits));
    }
}

QFORGE_DECL void reader::read_metadata(const json& v) {
    if (v.is_null()) return;  // Option<HashMap<..>> = None
    if (!v.is_object())
        reject({}, "__metadata__ is " + std::string(json::kind_name(v.type())) +
                       ", expected an object of strings (InvalidHeaderDeserialization)");
    has_metadata_ = true;
    for (const json_member& kv : v.as_object()) {
        if (!kv.value.is_string())
            reject({}, "__metadata__ value of \"" + kv.key + "\" is " +
                           std::string(json::kind_name(kv.value.type())) +
                           ", expected a string (InvalidHeaderDeserialization)");
        metadata_.emplace_back(kv.key, kv.value.as_string());
    }
}

QFORGE_DECL std::uint64_t reader::read_count(const std::string& name, const json& v, std::string_view what) const {
    if (!v.is_int() || v.as_int() < 0)
        reject(name, std::string(what) + " must be a non-negative integer, got " +
                         (v.is_int() ? std::to_string(v.as_int()) : std::string(json::kind_name(v.type()))) +
                         " (InvalidHeaderDeserialization)");
    return static_cast<std::uint64_t>(v.as_int());
}

QFORGE_DECL tensor_info reader::read_tensor_entry(const std::string& name, const json& v, const reader_limits& limits) const {
    if (!v.is_object())
        reject(name, "entry is " + std::string(json::kind_name(v.type())) +
                         ", expected an object with dtype, shape, data_offsets (InvalidHeaderDeserialization)");
    tensor_info t;
    t.name = name;
    const json* dt = v.find("dtype");
    const json* shape = v.find("shape");
    const json* offsets = v.find("data_offsets");
    if (!dt || !shape || !offsets)
        reject(name, std::string("missing field \"") + (!dt ? "dtype" : !shape ? "shape" : "data_offsets") +
                         "\" (InvalidHeaderDeserialization)");
    if (!dt->is_string()) reject(name, "dtype must be a string (InvalidHeaderDeserialization)");
    const auto type = dtype_from_name(dt->as_string());
    if (!type) reject(name, "unknown dtype \"" + dt->as_string() + "\" (InvalidHeaderDeserialization)");
    t.type = *type;
    if (!shape->is_array()) reject(name, "shape must be an array (InvalidHeaderDeserialization)");
    if (shape->size() > limits.max_rank)
        fail<limit_error>(path(), name, "rank " + std::to_string(shape->size()) + " exceeds the limit of " +
                                            std::to_string(limits.max_rank) + " (reader_limits::max_rank)");
    for (const json& d : shape->as_array())
        t.shape.push_back(static_cast<std::int64_t>(read_count(name, d, "shape dimension")));
    if (!offsets->is_array() || offsets->size() != 2)
        reject(name, "data_offsets must be an array of two integers (InvalidHeaderDeserialization)");
    t.begin = read_count(name, offsets->as_array()[0], "data_offsets[0]");
    t.end = read_count(name, offsets->as_array()[1], "data_offsets[1]");
    (void)element_bytes(t, limits);  // overflow and element limits before anything else
    return t;
}

QFORGE_DECL std::uint64_t reader::element_bytes(const tensor_info& t, const reader_limits& limits) const {
    std::uint64_t numel = 1;
    for (std::int64_t d : t.shape) {
        const auto ud = static_cast<std::uint64_t>(d);
        if (ud != 0 && numel > UINT64_MAX / ud)
            reject(t.name, "element count of shape " + shape_to_string(t.shape) +
                               " overflows 64 bits (ValidationOverflow)");
        numel *= ud;
    }
    if (numel > limits.max_elements)
        fail<limit_error>(path(), t.name, std::to_string(numel) + " elements exceed the limit of " +
                                              std::to_string(limits.max_elements) +
                                              " (reader_limits::max_elements)");
    const std::uint64_t bits = dtype_bits(t.type);
    if (numel > UINT64_MAX / bits)
        reject(t.name, "size in bits of shape " + shape_to_string(t.shape) + " overflows 64 bits (ValidationOverflow)");
    if ((numel * bits) % 8 != 0)
        reject(t.name, std::to_string(numel) + " elements of " + std::string(dtype_name(t.type)) +
                           " do not fill whole bytes (MisalignedSlice)");
    return numel * bits / 8;
}

QFORGE_DECL void reader::validate_offsets() {
    std::stable_sort(tensors_.begin(), tensors_.end(), [](const tensor_info& a, const tensor_info& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    std::uint64_t expected = 0;
    for (const tensor_info& t : tensors_) {
        if (t.begin != expected || t.end < t.begin)
            reject(t.name, "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                               "] do not " + (t.end < t.begin ? "form a range" : "start where the previous tensor ends (" + std::to_string(expected) + ")") +
                               " (InvalidOffset)");
        const std::uint64_t want = element_bytes(t, reader_limits{.max_elements = UINT64_MAX});
        if (t.size() != want)
            reject(t.name, "data_offsets span " + std::to_string(t.size()) + " bytes but " +
                               std::string(dtype_name(t.type)) + " " + shape_to_string(t.shape) + " needs " +
                               std::to_string(want) + " (TensorInvalidInfo)");
        expected = t.end;
    }
    const std::uint64_t data_size = file_size_ - 8 - header_size_;
    if (expected != data_size)
        reject({}, "tensor data ends at " + std::to_string(expected) + " but the data section holds " +
                       std::to_string(data_size) + " bytes: " +
                       (expected < data_size ? "trailing bytes" : "file too short") +
                       " (MetadataIncompleteBuffer)");
    by_name_.reserve(tensors_.size());
    for (std::size_t i = 0; i < tensors_.size(); ++i) by_name_.emplace(tensors_[i].name, i);
}

}  // namespace qforge::safetensors
#endif
