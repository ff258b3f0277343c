// llama.cpp importance matrices (`llama-imatrix` output), in both of the forms llama-quantize
// reads, turned into what llama-quantize hands its quantizers: per weight (by GGUF tensor name,
// e.g. "blk.0.ffn_down.weight"), the mean of x^2 over the tokens seen, per input column and per
// expert matrix.
//
// GGUF form (LC tools/imatrix/imatrix.cpp save_imatrix; common/imatrix-loader.cpp
// common_imatrix_load; tools/quantize/quantize.cpp load_imatrix):
//   keys imatrix.datasets (array of strings), imatrix.chunk_count, imatrix.chunk_size (UINT32);
//     llama-quantize refuses a GGUF imatrix without all three ("missing imatrix metadata");
//   per weight <name>.in_sum2 F32 ne [n_per_row, n_mat] (sum of x^2, per expert for MUL_MAT_ID)
//   and <name>.counts F32 ne [1, n_mat] (tokens seen); other tensors (.in_sum) are ignored;
//   value = in_sum2 / lround(count) per matrix, and 1 for every column of a matrix whose count
//   is 0 (an expert that never saw a token).
// Legacy .dat form (common_imatrix_load_legacy): i32 n_entries >= 1; per entry i32 name length,
//   the name, i32 ncall, i32 nval >= 1, f32[nval] = (sum x^2 / count) * ncall; then optionally
//   i32 chunk count, i32 length and the dataset name. value = stored / ncall when ncall > 0,
//   else the stored value.
//
// Only names, shapes and offsets are read when the file is opened; an entry's values are read
// (and checked) when a tensor asks for them, so memory holds one entry at a time however large
// the model. A file whose first four bytes are "GGUF" is read as GGUF (and must be a valid one); anything
// else as legacy: llama.cpp falls back to legacy on any GGUF error, which turns a damaged GGUF
// into a confusing legacy error. Where llama.cpp would crash or read garbage (a negative name
// length, a count that is not a whole number of matrices, a type that is not UINT32), qforge
// refuses with a format_error naming the file, the entry and the reason. Values must be finite
// and >= 0, as the importance-weighted quantizers require; duplicate names are refused.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/gguf/reader.hpp"

namespace qforge::gguf {

/// One weight's importance: `values` holds n_mat rows of n_per_row columns.
struct imatrix_entry {
    std::int64_t n_per_row = 0;        ///< legacy files do not say: 0, with n_mat = 1 over all values
    std::int64_t n_mat = 1;            ///< experts of a MUL_MAT_ID weight, else 1
    std::vector<float> values;         ///< mean of x^2 per input column, matrix after matrix
    std::vector<std::int64_t> counts;  ///< tokens seen per matrix (legacy: the one ncall)

    /// Whether the entry fits a weight of `n_matrices` matrices with `cols` input columns:
    /// llama-quantize's check (`it->second.size() == ne[0]*ne[2]`, LC src/llama-quant.cpp).
    bool fits(std::int64_t cols, std::int64_t n_matrices) const noexcept;
    /// The values of matrix `e` of such a weight (call fits() first).
    std::span<const float> matrix(std::int64_t e, std::int64_t cols) const;
};

namespace detail {

QFORGE_DECL void check_importance(const std::string& file, const std::string& entry, std::span<const float> v,
                                  const char* what);

QFORGE_DECL std::int64_t whole_count(const std::string& file, const std::string& entry, float c);

/// Where one entry lives in the file.
struct imatrix_slot {
    const tensor_entry* sums = nullptr;    ///< GGUF
    const tensor_entry* counts = nullptr;  ///< GGUF
    std::uint64_t offset = 0;              ///< legacy: the f32 values
    std::int32_t ncall = 0, nval = 0;      ///< legacy
};

/// Little-endian reads over a byte source, refusing to run past its end.
class legacy_cursor {
public:
    using read_fn = std::function<void(std::uint64_t, std::span<std::byte>)>;
    legacy_cursor(std::uint64_t size, read_fn read, const std::string& file)
        : size_(size), read_(std::move(read)), file_(file) {}
    std::uint64_t pos() const noexcept { return pos_; }
    std::uint64_t remaining() const noexcept { return size_ - pos_; }
    std::int32_t i32(const std::string& entry, const char* what);
    void bytes(void* out, std::uint64_t n, const std::string& entry, const char* what);
    void skip(std::uint64_t n, const std::string& entry, const char* what);
    std::string c_string(std::int32_t len, const std::string& entry, const char* what);

private:
    std::uint64_t size_;
    read_fn read_;
    const std::string& file_;
    std::uint64_t pos_ = 0;
};

QFORGE_DECL bool has_gguf_magic(std::span<const std::byte> head) noexcept;

}  // namespace detail

/// An opened importance matrix: its metadata and an index of its entries, whose values are
/// read on demand by load().
class importance_matrix {
public:
    /// Opens `path` as llama-quantize --imatrix does (see the top of this file).
    static importance_matrix open(const std::string& path);

    /// The same over bytes in memory (`name` is used in messages); they must outlive the object.
    static importance_matrix from_memory(std::span<const std::byte> bytes, std::string name = "<memory>");

    const std::string& path() const noexcept { return path_; }
    bool legacy() const noexcept { return !gguf_; }
    const std::vector<std::string>& datasets() const noexcept { return datasets_; }
    std::uint32_t chunk_count() const noexcept { return chunk_count_; }  ///< 0: not recorded
    std::uint32_t chunk_size() const noexcept { return chunk_size_; }
    std::size_t size() const noexcept { return slots_.size(); }
    bool contains(std::string_view gguf_name) const noexcept { return slots_.find(gguf_name) != slots_.end(); }
    std::vector<std::string> names() const;

    /// How many values the entry for `gguf_name` holds (all its matrices), from the index alone;
    /// nullopt when the file has none.
    std::optional<std::int64_t> value_count(std::string_view gguf_name) const noexcept;

    /// The entry for a GGUF weight name, read from the file and checked now; nullopt when the
    /// file has none. Safe to call from several threads.
    std::optional<imatrix_entry> load(std::string_view gguf_name) const;

private:
    importance_matrix() = default;

    void index_gguf();

    std::uint32_t required_u32(const char* key) const;

    detail::imatrix_slot gguf_slot(const std::string& name) const;

    std::vector<float> gguf_f32(const tensor_entry& t) const;

    imatrix_entry load_gguf(const std::string& name, const detail::imatrix_slot& s) const;

    void index_legacy(std::uint64_t size);

    imatrix_entry load_legacy(const std::string& name, const detail::imatrix_slot& s) const;

    std::string path_;
    std::shared_ptr<reader> gguf_;
    detail::legacy_cursor::read_fn read_;
    std::vector<std::string> datasets_;
    std::uint32_t chunk_count_ = 0, chunk_size_ = 0;
    std::map<std::string, detail::imatrix_slot, std::less<>> slots_;
};

}  // namespace qforge::gguf

#if QFORGE_BASE_BODIES_HERE

namespace qforge::gguf {
namespace detail {

QFORGE_DECL void check_importance(const std::string& file, const std::string& entry, std::span<const float> v,
                                  const char* what) {
    for (std::size_t i = 0; i < v.size(); ++i)
        if (!(v[i] >= 0.0f) || !std::isfinite(v[i]))
            fail<format_error>(file, entry, std::string(what) + " value " + std::to_string(i) +
                                                " is negative, NaN or infinite");
}

QFORGE_DECL std::int64_t whole_count(const std::string& file, const std::string& entry, float c) {
    // lround of NaN or of a count past 2^53 is not a count llama-imatrix could have written.
    if (!(c >= 0.0f) || !(c <= 9007199254740992.0f))
        fail<format_error>(file, entry, "count " + std::to_string(c) + " is negative, NaN or too large");
    return std::lround(c);
}

QFORGE_DECL bool has_gguf_magic(std::span<const std::byte> head) noexcept {
    return head.size() >= 4 && std::memcmp(head.data(), "GGUF", 4) == 0;
}

}  // namespace detail

QFORGE_DECL bool imatrix_entry::fits(std::int64_t cols, std::int64_t n_matrices) const noexcept {
    return cols > 0 && n_matrices > 0 && static_cast<std::int64_t>(values.size()) == cols * n_matrices;
}

QFORGE_DECL std::span<const float> imatrix_entry::matrix(std::int64_t e, std::int64_t cols) const {
    return std::span<const float>(values).subspan(static_cast<std::size_t>(e * cols), static_cast<std::size_t>(cols));
}

namespace detail {

QFORGE_DECL std::int32_t legacy_cursor::i32(const std::string& entry, const char* what) {
    std::int32_t v = 0;
    bytes(&v, sizeof v, entry, what);
    return v;
}

QFORGE_DECL void legacy_cursor::bytes(void* out, std::uint64_t n, const std::string& entry, const char* what) {
    if (n > remaining())
        fail<format_error>(file_, entry, std::string("truncated legacy imatrix: ") + what + " runs past the end");
    read_(pos_, std::span<std::byte>(static_cast<std::byte*>(out), static_cast<std::size_t>(n)));
    pos_ += n;
}

QFORGE_DECL void legacy_cursor::skip(std::uint64_t n, const std::string& entry, const char* what) {
    if (n > remaining())
        fail<format_error>(file_, entry, std::string("truncated legacy imatrix: ") + what + " runs past the end");
    pos_ += n;
}

QFORGE_DECL std::string legacy_cursor::c_string(std::int32_t len, const std::string& entry, const char* what) {
    std::string s(static_cast<std::size_t>(len), '\0');
    bytes(s.data(), s.size(), entry, what);
    s.resize(std::strlen(s.c_str()));  // llama.cpp reads names and datasets as C strings
    return s;
}

}  // namespace detail

QFORGE_DECL importance_matrix importance_matrix::open(const std::string& path) {
    importance_matrix m;
    m.path_ = path;
    auto f = std::make_shared<io::input_file>(path);
    std::byte head[4] = {};
    if (f->size() >= 4) f->read_at(0, head);
    if (detail::has_gguf_magic(head)) {
        m.gguf_ = std::make_shared<reader>(path);
        m.index_gguf();
    } else {
        m.read_ = [f](std::uint64_t off, std::span<std::byte> out) { f->read_at(off, out); };
        m.index_legacy(f->size());
    }
    return m;
}

QFORGE_DECL importance_matrix importance_matrix::from_memory(std::span<const std::byte> bytes, std::string name) {
    importance_matrix m;
    m.path_ = std::move(name);
    if (detail::has_gguf_magic(bytes)) {
        m.gguf_ = std::make_shared<reader>(reader::from_memory(bytes, m.path_));
        m.index_gguf();
    } else {
        m.read_ = [bytes](std::uint64_t off, std::span<std::byte> out) {
            if (!out.empty()) std::memcpy(out.data(), bytes.data() + off, out.size());
        };
        m.index_legacy(bytes.size());
    }
    return m;
}

QFORGE_DECL std::vector<std::string> importance_matrix::names() const {
    std::vector<std::string> out;
    for (const auto& [name, slot] : slots_) out.push_back(name);
    return out;
}

QFORGE_DECL std::optional<std::int64_t> importance_matrix::value_count(std::string_view gguf_name) const noexcept {
    const auto it = slots_.find(gguf_name);
    if (it == slots_.end()) return std::nullopt;
    return it->second.sums ? it->second.sums->numel() : std::int64_t{it->second.nval};
}

QFORGE_DECL std::optional<imatrix_entry> importance_matrix::load(std::string_view gguf_name) const {
    const auto it = slots_.find(gguf_name);
    if (it == slots_.end()) return std::nullopt;
    return gguf_ ? load_gguf(it->first, it->second) : load_legacy(it->first, it->second);
}

QFORGE_DECL void importance_matrix::index_gguf() {
    const reader& r = *gguf_;
    if (!r.find("imatrix.datasets")) fail<format_error>(path_, "", "missing imatrix metadata: no imatrix.datasets");
    const value* ds = r.find("imatrix.datasets");
    if (ds->is_array() && ds->elem_type == value_type::string)
        for (const scalar& s : ds->elems) datasets_.push_back(std::get<std::string>(s));
    chunk_count_ = required_u32("imatrix.chunk_count");
    chunk_size_ = required_u32("imatrix.chunk_size");
    for (const tensor_entry& t : r.tensors())
        for (std::string_view suffix : {std::string_view(".in_sum2"), std::string_view(".counts")})
            if (t.name.size() > suffix.size() && t.name.ends_with(suffix)) {
                const std::string base = t.name.substr(0, t.name.size() - suffix.size());
                if (!slots_.contains(base)) slots_.emplace(base, gguf_slot(base));
            }
    if (slots_.empty()) fail<format_error>(path_, "", "no data: no <name>.in_sum2 / <name>.counts tensors");
}

QFORGE_DECL std::uint32_t importance_matrix::required_u32(const char* key) const {
    const value* v = gguf_->find(key);
    if (!v) fail<format_error>(path_, "", std::string("missing imatrix metadata: no ") + key);
    const auto u = v->as<std::uint32_t>();
    if (!u) fail<format_error>(path_, "", std::string(key) + " must be UINT32");
    return *u;
}

QFORGE_DECL detail::imatrix_slot importance_matrix::gguf_slot(const std::string& name) const {
    detail::imatrix_slot s{gguf_->find_tensor(name + ".in_sum2"), gguf_->find_tensor(name + ".counts")};
    if (!s.sums || !s.counts) fail<format_error>(path_, name, "has in_sum2 or counts but not both");
    if (s.sums->type != ggml_type::f32 || s.counts->type != ggml_type::f32)
        fail<format_error>(path_, name, "in_sum2 and counts must be F32");
    if (s.sums->ne.empty() || s.sums->ne.size() > 2 || s.sums->ne[0] < 1)
        fail<format_error>(path_, name, "in_sum2 must be [n_per_row, n_mat]");
    const std::int64_t n_mat = s.sums->ne.size() == 2 ? s.sums->ne[1] : 1;
    if (n_mat < 1 || s.counts->numel() != n_mat)
        fail<format_error>(path_, name, "counts has " + std::to_string(s.counts->numel()) + " entries for " +
                                            std::to_string(n_mat) + " matrices of in_sum2");
    return s;
}

QFORGE_DECL std::vector<float> importance_matrix::gguf_f32(const tensor_entry& t) const {
    const auto raw = gguf_->read_bytes(t);
    std::vector<float> out(raw.size() / sizeof(float));
    if (!out.empty()) std::memcpy(out.data(), raw.data(), out.size() * sizeof(float));
    return out;
}

QFORGE_DECL imatrix_entry importance_matrix::load_gguf(const std::string& name, const detail::imatrix_slot& s) const {
    imatrix_entry e;
    e.n_per_row = s.sums->ne[0];
    e.n_mat = s.counts->numel();
    const std::vector<float> sum = gguf_f32(*s.sums), cnt = gguf_f32(*s.counts);
    detail::check_importance(path_, name, sum, "in_sum2");
    e.values.resize(sum.size());
    const auto cols = static_cast<std::size_t>(e.n_per_row);
    for (std::size_t m = 0; m < cnt.size(); ++m) {
        e.counts.push_back(detail::whole_count(path_, name, cnt[m]));
        const float c = static_cast<float>(e.counts.back());
        for (std::size_t i = m * cols; i < (m + 1) * cols; ++i) e.values[i] = c > 0.0f ? sum[i] / c : 1.0f;
    }
    return e;
}

QFORGE_DECL void importance_matrix::index_legacy(std::uint64_t size) {
    detail::legacy_cursor c(size, read_, path_);
    const std::int32_t n = c.i32("", "entry count");
    // Each entry takes at least 4 + 1 + 4 + 4 + 4 bytes.
    if (n < 1 || static_cast<std::uint64_t>(n) > c.remaining() / 17)
        fail<format_error>(path_, "", "entry count " + std::to_string(n) + " is impossible for this file (no data?)");
    for (std::int32_t i = 0; i < n; ++i) {
        const std::int32_t len = c.i32("", "name length");
        if (len < 1 || static_cast<std::uint64_t>(len) > c.remaining())
            fail<format_error>(path_, "", "entry " + std::to_string(i) + ": name length " + std::to_string(len) +
                                              " is not in 1..the rest of the file");
        std::string name = c.c_string(len, "", "name");
        if (slots_.contains(name)) fail<format_error>(path_, name, "entry appears twice");
        detail::imatrix_slot s;
        s.ncall = c.i32(name, "ncall");
        s.nval = c.i32(name, "value count");
        if (s.nval < 1 || static_cast<std::uint64_t>(s.nval) > c.remaining() / sizeof(float))
            fail<format_error>(path_, name, "value count " + std::to_string(s.nval) +
                                                " is not in 1..the rest of the file");
        s.offset = c.pos();
        c.skip(static_cast<std::uint64_t>(s.nval) * sizeof(float), name, "values");
        slots_.emplace(std::move(name), s);
    }
    if (c.remaining() >= 4) {  // optional trailer; llama.cpp ignores a partial one, and so do we
        chunk_count_ = static_cast<std::uint32_t>(std::max<std::int32_t>(0, c.i32("", "chunk count")));
        const std::int32_t len = c.remaining() >= 4 ? c.i32("", "dataset length") : 0;
        if (len > 0 && static_cast<std::uint64_t>(len) <= c.remaining()) datasets_.push_back(c.c_string(len, "", "dataset"));
    }
}

QFORGE_DECL imatrix_entry importance_matrix::load_legacy(const std::string& name, const detail::imatrix_slot& s) const {
    imatrix_entry e;
    std::vector<float> stored(static_cast<std::size_t>(s.nval));
    read_(s.offset, std::as_writable_bytes(std::span<float>(stored)));
    detail::check_importance(path_, name, stored, "stored");
    e.counts = {s.ncall};
    e.values.resize(stored.size());
    for (std::size_t i = 0; i < stored.size(); ++i)
        e.values[i] = s.ncall > 0 ? stored[i] / static_cast<float>(s.ncall) : stored[i];
    return e;
}

}  // namespace qforge::gguf
#endif
