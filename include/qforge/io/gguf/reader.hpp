// GGUF reader that accepts exactly what ggml's reader accepts (GG src/gguf.cpp
// gguf_init_from_file_impl) and refuses the rest with a format_error naming the file, the
// tensor when there is one, and the reason:
//   magic "GGUF"; version 2 or 3 (1 and >3 refused); tensor and key counts >= 0 and plausible
//   for the file size; every key/value type valid, arrays not nested; keys unique; strings and
//   arrays inside the file; general.alignment UINT32 and a power of two; tensor names < 64 bytes
//   and unique; 1..4 dims, each >= 0, product without overflow; a known ggml type; ne[0] a
//   multiple of the block size; offset == running sum of padded sizes; data inside the file.
//
// Only the metadata and tensor table are read up front; tensor bytes are read on demand, as
// bytes: decoding them to floats is convert/gguf/decode.hpp (it needs layout/gguf, which io
// must not include).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/ggml_type.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/gguf/value.hpp"
#include "qforge/io/gguf/writer.hpp"

namespace qforge::gguf {

/// A tensor as found in a GGUF file.
struct tensor_entry {
    std::string name;
    std::vector<std::int64_t> ne;  // ggml order
    ggml_type type = ggml_type::f32;
    std::uint64_t offset = 0;      // relative to the data section
    std::uint64_t nbytes = 0;
    std::int64_t numel() const noexcept;
};

namespace detail {

/// Sequential reads over a random-access source, refusing to run past its end.
class header_cursor {
public:
    using read_fn = std::function<void(std::uint64_t, std::span<std::byte>)>;
    header_cursor(std::string file, std::uint64_t size, read_fn read)
        : file_(std::move(file)), size_(size), read_(std::move(read)) {}

    std::uint64_t pos() const noexcept { return pos_; }
    std::uint64_t remaining() const noexcept { return size_ - pos_; }
    const std::string& file() const noexcept { return file_; }

    void bytes(void* out, std::uint64_t n, const char* what);
    template <class T>
    T pod(const char* what) {
        T v;
        bytes(&v, sizeof v, what);
        return v;
    }
    std::string str(const char* what);

private:
    void fill();
    std::string file_;
    std::uint64_t size_;
    read_fn read_;
    std::uint64_t pos_ = 0;
    std::vector<std::byte> buf_;
    std::uint64_t buf_start_ = 0;
};

QFORGE_DECL scalar read_scalar(header_cursor& c, value_type t, const std::string& key);

QFORGE_DECL value_type read_type(header_cursor& c, const std::string& key, bool element);

}  // namespace detail

/// A parsed GGUF file: metadata, tensor table, and on-demand tensor reads.
class reader {
public:
    /// Opens and validates `path`.
    explicit reader(std::string path);

    /// Parses a GGUF image held in memory (`name` is used in messages). The bytes must outlive
    /// the reader.
    static reader from_memory(std::span<const std::byte> bytes, std::string name = "<memory>");

    const std::string& path() const noexcept { return path_; }
    std::uint32_t version() const noexcept { return version_; }
    std::uint32_t alignment() const noexcept { return alignment_; }
    std::uint64_t data_offset() const noexcept { return data_offset_; }
    const kv_list& metadata() const noexcept { return kvs_; }
    const value* find(std::string_view key) const noexcept { return find_kv(kvs_, key); }
    const std::vector<tensor_entry>& tensors() const noexcept { return tensors_; }
    const tensor_entry* find_tensor(std::string_view name) const noexcept;

    /// The raw bytes of one tensor.
    std::vector<std::byte> read_bytes(const tensor_entry& t) const;

private:
    reader() = default;

    void parse(std::uint64_t size, detail::header_cursor::read_fn read);

    std::shared_ptr<io::input_file> file_;
    std::span<const std::byte> mem_;
    std::string path_;
    std::uint32_t version_ = 0;
    std::uint32_t alignment_ = default_alignment;
    std::uint64_t data_offset_ = 0;
    kv_list kvs_;
    std::vector<tensor_entry> tensors_;
};

}  // namespace qforge::gguf

#if QFORGE_BASE_BODIES_HERE

namespace qforge::gguf {
namespace detail {

QFORGE_DECL scalar read_scalar(header_cursor& c, value_type t, const std::string& key) {
    switch (t) {
        case value_type::u8: return c.pod<std::uint8_t>("value");
        case value_type::i8: return c.pod<std::int8_t>("value");
        case value_type::u16: return c.pod<std::uint16_t>("value");
        case value_type::i16: return c.pod<std::int16_t>("value");
        case value_type::u32: return c.pod<std::uint32_t>("value");
        case value_type::i32: return c.pod<std::int32_t>("value");
        case value_type::f32: return c.pod<float>("value");
        case value_type::boolean: {
            const auto b = c.pod<std::uint8_t>("value");
            if (b > 1) fail<format_error>(c.file(), "", "key '" + key + "': BOOL value " + std::to_string(b) + " is not 0 or 1");
            return b != 0;
        }
        case value_type::string: return c.str("string value");
        case value_type::u64: return c.pod<std::uint64_t>("value");
        case value_type::i64: return c.pod<std::int64_t>("value");
        case value_type::f64: return c.pod<double>("value");
        default: fail<format_error>(c.file(), "", "key '" + key + "' has an invalid GGUF type");
    }
}

QFORGE_DECL value_type read_type(header_cursor& c, const std::string& key, bool element) {
    const auto t = c.pod<std::uint32_t>("value type");
    if (t > 12 || (element && t == 9))
        fail<format_error>(c.file(), "", "key '" + key + "' has invalid GGUF type " + std::to_string(t) +
                                             (element && t == 9 ? " (nested array)" : ""));
    return static_cast<value_type>(t);
}

}  // namespace detail

QFORGE_DECL std::int64_t tensor_entry::numel() const noexcept {
    std::int64_t n = 1;
    for (auto d : ne) n *= d;
    return n;
}

namespace detail {

QFORGE_DECL void header_cursor::bytes(void* out, std::uint64_t n, const char* what) {
    if (n > remaining())
        fail<format_error>(file_, "", std::string("truncated file: ") + what + " runs past the end at offset " +
                                          std::to_string(pos_));
    auto* dst = static_cast<std::byte*>(out);
    while (n > 0) {
        if (pos_ < buf_start_ || pos_ >= buf_start_ + buf_.size()) fill();
        const auto avail = buf_start_ + buf_.size() - pos_;
        const auto take = std::min<std::uint64_t>(avail, n);
        std::memcpy(dst, buf_.data() + (pos_ - buf_start_), static_cast<std::size_t>(take));
        dst += take;
        pos_ += take;
        n -= take;
    }
}

QFORGE_DECL std::string header_cursor::str(const char* what) {
    const auto n = pod<std::uint64_t>(what);
    if (n > remaining())
        fail<format_error>(file_, "", std::string(what) + ": string length " + std::to_string(n) +
                                          " runs past the end of the file");
    std::string s(static_cast<std::size_t>(n), '\0');
    bytes(s.data(), n, what);
    return s;
}

QFORGE_DECL void header_cursor::fill() {
    buf_start_ = pos_;
    buf_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(std::uint64_t{1} << 20, size_ - pos_)));
    read_(buf_start_, buf_);
}

}  // namespace detail

QFORGE_DECL reader::reader(std::string path) : file_(std::make_shared<io::input_file>(path)), path_(std::move(path)) {
    auto f = file_;
    parse(f->size(), [f](std::uint64_t off, std::span<std::byte> out) { f->read_at(off, out); });
}

QFORGE_DECL reader reader::from_memory(std::span<const std::byte> bytes, std::string name) {
    reader r;
    r.path_ = std::move(name);
    r.mem_ = bytes;
    r.parse(bytes.size(), [bytes](std::uint64_t off, std::span<std::byte> out) {
        if (!out.empty()) std::memcpy(out.data(), bytes.data() + off, out.size());
    });
    return r;
}

QFORGE_DECL const tensor_entry* reader::find_tensor(std::string_view name) const noexcept {
    for (const auto& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

QFORGE_DECL std::vector<std::byte> reader::read_bytes(const tensor_entry& t) const {
    std::vector<std::byte> out(static_cast<std::size_t>(t.nbytes));
    if (out.empty()) return out;  // no memcpy through an empty vector's null data()
    if (file_) {
        file_->read_at(data_offset_ + t.offset, out, t.name);
    } else {
        std::memcpy(out.data(), mem_.data() + data_offset_ + t.offset, out.size());
    }
    return out;
}

namespace detail {

/// The value of header key `key` (just read): its type, then one scalar or an array.
inline value read_kv_value(header_cursor& c, const std::string& path, const std::string& key) {
    const auto t = detail::read_type(c, key, false);
    value v;
    v.type = t;
    if (t == value_type::array) {
        v.elem_type = detail::read_type(c, key, true);
        const auto n = c.pod<std::uint64_t>("array length");
        const auto min_elem = v.elem_type == value_type::string ? 8 : value_type_size(v.elem_type);
        if (n > c.remaining() / min_elem)
            fail<format_error>(path, "", "key '" + key + "': array of " + std::to_string(n) + " elements runs past the end of the file");
        v.elems.reserve(static_cast<std::size_t>(n));
        for (std::uint64_t j = 0; j < n; ++j) v.elems.push_back(detail::read_scalar(c, v.elem_type, key));
    } else {
        v.one = detail::read_scalar(c, t, key);
    }
    return v;
}

/// One tensor info, checked in the file's order: name length, a name not in `names` (then
/// added), rank, dimensions, type, block divisibility and a byte size that cannot overflow.
/// Offsets are the caller's to check.
inline tensor_entry read_tensor_info(header_cursor& c, const std::string& path, std::set<std::string, std::less<>>& names) {
    tensor_entry t;
    t.name = c.str("tensor name");
    if (t.name.size() > max_name_bytes)
        fail<format_error>(path, t.name, "tensor name is " + std::to_string(t.name.size()) + " bytes; GGUF allows at most 63");
    if (!names.insert(t.name).second) fail<format_error>(path, t.name, "duplicate tensor name");
    const auto n_dims = c.pod<std::uint32_t>("n_dims");
    if (n_dims > static_cast<std::uint32_t>(max_dims))
        fail<format_error>(path, t.name, "tensor has " + std::to_string(n_dims) + " dimensions; at most 4");
    std::int64_t numel = 1;
    for (std::uint32_t d = 0; d < n_dims; ++d) {
        const auto n = c.pod<std::int64_t>("ne");
        if (n < 0) fail<format_error>(path, t.name, "dimension " + std::to_string(d) + " is negative");
        if (n != 0 && numel > std::numeric_limits<std::int64_t>::max() / n)
            fail<format_error>(path, t.name, "element count overflows int64");
        numel *= n;
        t.ne.push_back(n);
    }
    const auto type_id = c.pod<std::uint32_t>("tensor type");
    const auto tr = traits_of(type_id);
    if (!tr) fail<format_error>(path, t.name, "invalid ggml type " + std::to_string(type_id));
    t.type = static_cast<ggml_type>(type_id);
    const std::int64_t ne0 = t.ne.empty() ? 1 : t.ne[0];
    if (ne0 % tr->block_elems != 0)
        fail<format_error>(path, t.name, "ne[0] = " + std::to_string(ne0) + " is not a multiple of the " + std::string(tr->name) +
                        " block size " + std::to_string(tr->block_elems));
    t.offset = c.pod<std::uint64_t>("tensor offset");
    const auto rows = ne0 == 0 ? 0 : numel / ne0;
    const auto blocks = static_cast<std::uint64_t>(ne0 / tr->block_elems);
    if (blocks > std::numeric_limits<std::uint64_t>::max() / static_cast<std::uint64_t>(tr->block_bytes))
        fail<format_error>(path, t.name, "tensor byte size overflows");  // e.g. 2^62 f32: 2^64 bytes would wrap to 0
    const auto row = blocks * static_cast<std::uint64_t>(tr->block_bytes);
    if (rows != 0 && row > std::numeric_limits<std::uint64_t>::max() / 2 / static_cast<std::uint64_t>(rows))
        fail<format_error>(path, t.name, "tensor byte size overflows");
    t.nbytes = row * static_cast<std::uint64_t>(rows);
    return t;
}

}  // namespace detail

QFORGE_DECL void reader::parse(std::uint64_t size, detail::header_cursor::read_fn read) {
    detail::header_cursor c(path_, size, std::move(read));
    const auto bad = [&](const std::string& tensor, const std::string& why) { fail<format_error>(path_, tensor, why); };
    char magic[4];
    c.bytes(magic, 4, "magic");
    if (std::memcmp(magic, "GGUF", 4) != 0) bad("", "not a GGUF file (bad magic)");
    version_ = c.pod<std::uint32_t>("version");
    if ((version_ & 0x0000FFFFu) == 0) bad("", "GGUF version has the wrong byte order (big-endian file?)");
    if (version_ == 1) bad("", "GGUF version 1 is not supported");
    if (version_ > 3) bad("", "GGUF version " + std::to_string(version_) + " is newer than 3");
    const auto n_tensors = c.pod<std::int64_t>("tensor count");
    const auto n_kv = c.pod<std::int64_t>("key/value count");
    // Each tensor info takes at least 8+4+4+8 bytes, each key/value at least 8+4+1.
    if (n_tensors < 0 || static_cast<std::uint64_t>(n_tensors) > c.remaining() / 24)
        bad("", "tensor count " + std::to_string(n_tensors) + " is impossible for this file");
    if (n_kv < 0 || static_cast<std::uint64_t>(n_kv) > c.remaining() / 13)
        bad("", "key/value count " + std::to_string(n_kv) + " is impossible for this file");

    std::set<std::string, std::less<>> keys;
    for (std::int64_t i = 0; i < n_kv; ++i) {
        std::string key = c.str("key");
        if (!keys.insert(key).second) bad("", "duplicate key '" + key + "'");
        value v = detail::read_kv_value(c, path_, key);
        kvs_.emplace_back(std::move(key), std::move(v));
    }
    alignment_ = alignment_of(kvs_, path_);

    std::set<std::string, std::less<>> names;
    for (std::int64_t i = 0; i < n_tensors; ++i) {
        tensors_.push_back(detail::read_tensor_info(c, path_, names));
    }
    data_offset_ = detail::pad_to(c.pos(), alignment_);
    std::uint64_t running = 0;
    for (const auto& t : tensors_) {
        if (t.offset != running)
            bad(t.name, "tensor has offset " + std::to_string(t.offset) + ", expected " + std::to_string(running));
        if (t.nbytes > size || running > size - t.nbytes)  // cheap overflow guard before padding
            bad(t.name, "tensor data runs past the end of the file");
        running += detail::pad_to(t.nbytes, alignment_);
    }
    if (data_offset_ > size || running > size - data_offset_)
        bad("", "data section needs " + std::to_string(running) + " bytes at offset " + std::to_string(data_offset_) +
                    " but the file has " + std::to_string(size));
}

}  // namespace qforge::gguf
#endif
