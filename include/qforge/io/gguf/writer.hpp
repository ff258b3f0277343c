// Streaming GGUF v3 writer (GG src/gguf.cpp gguf_write_out, LC gguf-py GGUFWriter; formats.md 5.1).
//
// Everything before the data section (header, key/values, tensor infos, padding) is known up
// front: the caller declares every tensor's name, shape and type, the writer computes each
// offset as the running sum of sizes padded to `general.alignment` (default 32), writes the
// header, then takes the tensors' bytes one at a time in declaration order and pads after every
// tensor, the last included (trap 18). The file is written as `<path>.tmp` and renamed over
// `path` by finish(), so a failed conversion never leaves a truncated GGUF behind.
//
//   gguf::file_writer w(path, kvs, {{"token_embd.weight", {288, 512}, ggml_type::q8_0}});
//   w.write_tensor(bytes);   // exactly row_bytes(q8_0, 288) * 512 bytes
//   w.finish();
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/ggml_type.hpp"
#include "qforge/io/early_writeback.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/gguf/value.hpp"

namespace qforge::gguf {

inline constexpr std::uint32_t default_alignment = 32;  // GGUF_DEFAULT_ALIGNMENT
inline constexpr std::size_t max_name_bytes = 63;       // GGML_MAX_NAME = 64 incl. the NUL
inline constexpr int max_dims = 4;                      // GGML_MAX_DIMS

/// A tensor as declared to the writer: ne in ggml order (ne[0] = contiguous = PyTorch's last dim).
struct tensor_decl {
    std::string name;
    std::vector<std::int64_t> ne;
    ggml_type type = ggml_type::f32;
};

namespace detail {

inline std::uint64_t pad_to(std::uint64_t n, std::uint64_t align) noexcept { return (n + align - 1) / align * align; }

/// Serialises little-endian GGUF primitives into a byte buffer.
class byte_sink {
public:
    template <class T>
    void pod(T v) {
        static_assert(std::is_trivially_copyable_v<T>);
        const auto at = buf_.size();
        buf_.resize(at + sizeof(T));
        std::memcpy(buf_.data() + at, &v, sizeof(T));
    }
    void str(std::string_view s);
    void scalar_value(const scalar& s);
    void zeros(std::size_t n) { buf_.resize(buf_.size() + n, std::byte{0}); }
    std::vector<std::byte>& bytes() noexcept { return buf_; }

private:
    std::vector<std::byte> buf_;
};

/// Refuses what ggml's reader would refuse in a key/value (nested or mixed arrays, bad types).
QFORGE_DECL void check_value(const std::string& file, const std::string& key, const value& v);

}  // namespace detail

/// Byte size of a declared tensor (nbytes = ne0/blck*type_size * ne1*ne2*ne3).
QFORGE_DECL std::uint64_t tensor_nbytes(const tensor_decl& t);

/// The alignment a key/value list asks for: general.alignment (UINT32, power of two) or 32.
QFORGE_DECL std::uint32_t alignment_of(const kv_list& kvs, const std::string& file = {});

/// Validates and serialises everything before the data section; returns it and each offset.
QFORGE_DECL std::vector<std::byte> encode_header(const std::string& file, const kv_list& kvs,
                                                 const std::vector<tensor_decl>& tensors,
                                                 std::vector<std::uint64_t>& offsets);

/// Streaming GGUF file writer (see the top of this file).
class file_writer {
public:
    file_writer(std::string path, const kv_list& kvs, std::vector<tensor_decl> tensors);
    file_writer(const file_writer&) = delete;
    file_writer& operator=(const file_writer&) = delete;
    ~file_writer();

    /// The next tensor to write, in declaration order.
    const tensor_decl* next() const noexcept { return next_ < tensors_.size() ? &tensors_[next_] : nullptr; }
    std::size_t written() const noexcept { return next_; }

    /// Appends part of the next tensor's bytes; call end_tensor() after its last part.
    void write_part(std::span<const std::byte> bytes);

    /// Closes the current tensor: checks its size and writes the zero padding after it.
    void end_tensor();

    /// One whole tensor.
    void write_tensor(std::span<const std::byte> bytes);

    /// Checks every tensor was written, fsyncs, and renames the file into place.
    void finish();

private:
    std::string path_, tmp_;
    std::vector<tensor_decl> tensors_;
    std::vector<std::uint64_t> offsets_;
    std::uint32_t align_ = default_alignment;
    io::output_file out_;
    io::early_writeback writeback_;  ///< flushes the file behind the writes (finish() fsyncs)
    std::uint64_t data_start_ = 0;
    std::size_t next_ = 0;
    std::uint64_t part_ = 0;
    bool finished_ = false;
};

}  // namespace qforge::gguf

#if QFORGE_BASE_BODIES_HERE

namespace qforge::gguf {
namespace detail {

QFORGE_DECL void check_value(const std::string& file, const std::string& key, const value& v) {
    const auto t = static_cast<std::uint32_t>(v.type);
    if (t > 12) fail<format_error>(file, "", "key '" + key + "' has an invalid GGUF type");
    if (!v.is_array()) {
        if (v.one.index() != t) fail<format_error>(file, "", "key '" + key + "' holds a value of another type");
        return;
    }
    const auto e = static_cast<std::uint32_t>(v.elem_type);
    if (e > 12 || v.elem_type == value_type::array)
        fail<unsupported_error>(file, "", "key '" + key + "': nested arrays are not allowed in GGUF");
    for (const auto& s : v.elems)
        if (s.index() != e)
            fail<format_error>(file, "", "key '" + key + "': array element is not " + std::string(value_type_name(v.elem_type)));
}

}  // namespace detail

QFORGE_DECL std::uint64_t tensor_nbytes(const tensor_decl& t) {
    std::uint64_t rows = 1;
    for (std::size_t i = 1; i < t.ne.size(); ++i) rows *= static_cast<std::uint64_t>(t.ne[i]);
    return static_cast<std::uint64_t>(row_bytes(t.type, t.ne.empty() ? 1 : t.ne[0])) * rows;
}

QFORGE_DECL std::uint32_t alignment_of(const kv_list& kvs, const std::string& file) {
    const value* a = find_kv(kvs, "general.alignment");
    if (!a) return default_alignment;
    const auto v = a->as<std::uint32_t>();
    if (!v) fail<format_error>(file, "", "general.alignment must be UINT32, not " + std::string(value_type_name(a->type)));
    if (*v == 0 || (*v & (*v - 1)) != 0)
        fail<format_error>(file, "", "general.alignment " + std::to_string(*v) + " is not a power of two");
    return *v;
}

QFORGE_DECL std::vector<std::byte> encode_header(const std::string& file, const kv_list& kvs,
                                                 const std::vector<tensor_decl>& tensors,
                                                 std::vector<std::uint64_t>& offsets) {
    const std::uint32_t align = alignment_of(kvs, file);
    detail::byte_sink out;
    out.pod<std::uint32_t>(0x46554747u);  // "GGUF"
    out.pod<std::uint32_t>(3);
    out.pod<std::int64_t>(static_cast<std::int64_t>(tensors.size()));
    out.pod<std::int64_t>(static_cast<std::int64_t>(kvs.size()));
    std::set<std::string, std::less<>> keys;
    for (const auto& [k, v] : kvs) {
        if (!keys.insert(k).second) fail<format_error>(file, "", "duplicate key '" + k + "'");
        detail::check_value(file, k, v);
        out.str(k);
        out.pod<std::uint32_t>(static_cast<std::uint32_t>(v.type));
        if (v.is_array()) {
            out.pod<std::uint32_t>(static_cast<std::uint32_t>(v.elem_type));
            out.pod<std::uint64_t>(v.elems.size());
            for (const auto& s : v.elems) out.scalar_value(s);
        } else {
            out.scalar_value(v.one);
        }
    }
    std::set<std::string, std::less<>> names;
    offsets.clear();
    std::uint64_t running = 0;
    for (const auto& t : tensors) {
        if (t.name.size() > max_name_bytes)
            fail<format_error>(file, t.name, "tensor name is " + std::to_string(t.name.size()) + " bytes; GGUF allows at most 63");
        if (!names.insert(t.name).second) fail<format_error>(file, t.name, "duplicate tensor name");
        if (t.ne.empty() || t.ne.size() > max_dims)
            fail<shape_error>(file, t.name, "a GGUF tensor has 1 to 4 dimensions, not " + std::to_string(t.ne.size()));
        if (!traits_of(static_cast<std::uint32_t>(t.type)))
            fail<unsupported_error>(file, t.name, "unknown ggml type id " + std::to_string(static_cast<std::uint32_t>(t.type)));
        for (auto n : t.ne)
            if (n <= 0) fail<shape_error>(file, t.name, "dimension " + std::to_string(n) + " is not positive");
        if (row_bytes(t.type, t.ne[0]) < 0)
            fail<shape_error>(file, t.name, "ne[0] = " + std::to_string(t.ne[0]) + " is not a multiple of the " +
                                                std::string(type_name(t.type)) + " block size " +
                                                std::to_string(traits_of(t.type).block_elems));
        out.str(t.name);
        out.pod<std::uint32_t>(static_cast<std::uint32_t>(t.ne.size()));
        for (auto n : t.ne) out.pod<std::int64_t>(n);
        out.pod<std::uint32_t>(static_cast<std::uint32_t>(t.type));
        out.pod<std::uint64_t>(running);
        offsets.push_back(running);
        running += detail::pad_to(tensor_nbytes(t), align);
    }
    out.zeros(static_cast<std::size_t>(detail::pad_to(out.bytes().size(), align) - out.bytes().size()));
    return std::move(out.bytes());
}

namespace detail {

QFORGE_DECL void byte_sink::str(std::string_view s) {
    pod<std::uint64_t>(s.size());
    const auto at = buf_.size();
    buf_.resize(at + s.size());
    if (!s.empty()) std::memcpy(buf_.data() + at, s.data(), s.size());
}

QFORGE_DECL void byte_sink::scalar_value(const scalar& s) {
    std::visit(
        [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::string>) str(v);
            else if constexpr (std::is_same_v<T, bool>) pod<std::uint8_t>(v ? 1 : 0);
            else if constexpr (std::is_same_v<T, array_placeholder>) {}
            else pod<T>(v);
        },
        s);
}

}  // namespace detail

QFORGE_DECL file_writer::file_writer(std::string path, const kv_list& kvs, std::vector<tensor_decl> tensors) : path_(std::move(path)), tmp_(path_ + ".tmp"), tensors_(std::move(tensors)) {
    align_ = alignment_of(kvs, path_);
    const auto header = encode_header(path_, kvs, tensors_, offsets_);
    out_ = io::output_file::create(tmp_);
    out_.write(header);
    data_start_ = out_.position();
}

QFORGE_DECL file_writer::~file_writer() {
    if (!finished_) {
        out_ = io::output_file();
        (void)io::remove_tree_noexcept(tmp_);
    }
}

QFORGE_DECL void file_writer::write_part(std::span<const std::byte> bytes) {
    if (next_ >= tensors_.size()) fail<format_error>(path_, "", "more tensors written than declared");
    const auto want = tensor_nbytes(tensors_[next_]);
    if (part_ + bytes.size() > want)
        fail<shape_error>(path_, tensors_[next_].name, "tensor data exceeds its declared " + std::to_string(want) + " bytes");
    out_.write(bytes);
    part_ += bytes.size();
}

QFORGE_DECL void file_writer::end_tensor() {
    const auto& t = tensors_.at(next_);
    const auto want = tensor_nbytes(t);
    if (part_ != want)
        fail<shape_error>(path_, t.name, "tensor data is " + std::to_string(part_) + " bytes, declared " + std::to_string(want));
    const std::vector<std::byte> pad(static_cast<std::size_t>(detail::pad_to(want, align_) - want), std::byte{0});
    out_.write(pad);
    if (out_.position() != data_start_ + offsets_[next_] + detail::pad_to(want, align_))
        fail<io_error>(path_, t.name, "internal: data position does not match the declared offset");
    ++next_;
    part_ = 0;
    writeback_.start(tmp_);
}

QFORGE_DECL void file_writer::write_tensor(std::span<const std::byte> bytes) {
    write_part(bytes);
    end_tensor();
}

QFORGE_DECL void file_writer::finish() {
    if (next_ != tensors_.size())
        fail<format_error>(path_, "", std::to_string(tensors_.size() - next_) + " declared tensors were not written");
    out_.sync();
    out_.close();
    io::rename_path(tmp_, path_);
    finished_ = true;
}

}  // namespace qforge::gguf
#endif
