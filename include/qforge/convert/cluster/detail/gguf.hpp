// The machinery of convert/cluster/gguf.hpp (the one-process GGUF's layout, its staged sink and
// fingerprint) and the bodies of make_gguf_plan, work_gguf and finalize_gguf, included by that
// header under QFORGE_BODIES_HERE.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "qforge/convert/cluster/detail/finalize.hpp"
#include "qforge/convert/cluster/gguf.hpp"
#include "qforge/convert/gguf/detail/conversion.hpp"

namespace qforge::cluster {

namespace detail {

/// The one-process GGUF's layout: its plan, header bytes and every tensor's absolute offset.
struct gguf_layout {
    gguf::detail::gguf_plan plan;
    std::vector<std::byte> header;     ///< everything before the data section, padded
    std::vector<std::uint64_t> offsets;  ///< absolute, in the file
    std::uint64_t file_size = 0;
    std::string file;                  ///< the staging file's name (the destination's base name)

    static gguf_layout of(const checkpoint_source& src, const std::string& src_dir, const std::string& dst,
                          const gguf::convert_options& opt) {
        if (opt.imatrix)
            fail<unsupported_error>(src_dir, {}, "an importance hook cannot be fingerprinted nor sent to cluster workers; "
                                                 "give the imatrix file (--imatrix)");
        gguf_layout L;
        L.plan = gguf::detail::plan_gguf(src, src_dir, opt);
        const std::vector<gguf::tensor_decl> decls = L.plan.decls();
        std::vector<std::uint64_t> rel;
        L.header = gguf::encode_header(dst, L.plan.kvs, decls, rel);
        const std::uint64_t align = gguf::alignment_of(L.plan.kvs, dst);
        L.file_size = L.header.size();
        for (std::size_t i = 0; i < decls.size(); ++i) {
            L.offsets.push_back(L.header.size() + rel[i]);
            L.file_size = L.offsets.back() + gguf::detail::pad_to(gguf::tensor_nbytes(decls[i]), align);
        }
        std::string d = dst;
        while (d.size() > 1 && d.back() == '/') d.pop_back();
        L.file = d.substr(d.find_last_of('/') + 1);
        return L;
    }

    std::uint64_t bytes_of(std::size_t i) const { return gguf::tensor_nbytes(plan.tensors[i].decl); }

    std::vector<staged_tensor> tensors_of_unit(const work_unit& u) const {
        std::vector<staged_tensor> v;
        for (std::size_t i = u.begin; i < u.end; ++i) v.push_back({plan.tensors[i].decl.name, 0, offsets[i], bytes_of(i)});
        return v;
    }
};

/// Estimated work of one GGUF tensor in byte-equivalents (balance only, never bytes): read and
/// written once; a K-quant or i-quant searches its scales.
inline std::uint64_t gguf_tensor_cost(const gguf::detail::planned_tensor& p) {
    const std::uint64_t n = gguf::detail::element_count(p);
    using gguf::ggml_type;
    const ggml_type t = p.decl.type;
    const bool plain = t == ggml_type::f32 || t == ggml_type::f16 || t == ggml_type::bf16 || t == ggml_type::q8_0;
    return n * dtype_size(p.src_type) + gguf::tensor_nbytes(p.decl) + n * (plain ? 2 : 8);
}

inline std::string gguf_fingerprint(const checkpoint_source& src, const gguf_layout& L, const gguf::convert_options& opt) {
    checksum h;
    h.update("qforge-cluster-plan 1 gguf;");
    hash_source(h, src);
    // The header holds every key (tokenizer and imatrix records included) and every tensor's
    // name, shape, type and offset: the whole of the type choice.
    h.update(std::span<const std::byte>(L.header));
    for (const auto& p : L.plan.tensors) {
        h.update(p.decl.name + "<" + std::to_string(p.map.permute_heads) + ":");
        for (const std::string& part : p.parts) h.update(part + ",");
    }
    for (const std::string* f : {&opt.imatrix_file, &opt.tokenizer_from, &opt.tokenizer_json})
        if (!f->empty()) hash_file_identity(h, *f);
    return h.hex();
}

/// The GGUF writer interface of tensor_stream over a staged_writer: the tensor being written is
/// named by select() before tensor_stream::write.
class gguf_staged_sink {
public:
    explicit gguf_staged_sink(staged_writer& w) : w_(w) {}
    void select(std::string name) { name_ = std::move(name); }
    void write_part(std::span<const std::byte> bytes) { w_.write(name_, bytes); }
    void end_tensor() {}  // the size is checked by staged_writer::finish

private:
    staged_writer& w_;
    std::string name_;
};

/// Reads the plan of `dst` and checks it is a GGUF one whose fingerprint the current source
/// and options reproduce.
inline plan_summary read_gguf_plan(const std::string& dst, const checkpoint_source* src = nullptr, const gguf_layout* L = nullptr,
                                   const gguf::convert_options* opt = nullptr) {
    plan_summary s = read_plan(dst);
    if (s.format != "gguf")
        fail<unsupported_error>(s.staging + "/plan.json", {}, "this plan is for " + s.format + ", not GGUF (use work/finalize)");
    if (src && gguf_fingerprint(*src, *L, *opt) != s.fingerprint)
        fail<unsupported_error>(s.staging + "/plan.json", {}, "the source checkpoint or the options changed since `plan`; plan again");
    if (src) s.check_items(L->plan.tensors.size());
    if (src && (s.shard_files.size() != 1 || s.shard_files.front() != L->file))
        fail<format_error>(s.staging + "/plan.json", {}, "a GGUF plan has one staging file, " + L->file);
    return s;
}

}  // namespace detail

#if QFORGE_BODIES_HERE
QFORGE_DECL plan_summary make_gguf_plan(const std::string& src_dir, const std::string& dst_file, const gguf::convert_options& opt,
                                        std::size_t units, bool overwrite, json extra) {
    if (io::path_exists(dst_file) && !overwrite) fail<io_error>(dst_file, {}, "destination exists (pass --overwrite to replace it)");
    checkpoint_source src(src_dir);
    const detail::gguf_layout L = detail::gguf_layout::of(src, src_dir, dst_file, opt);
    plan_summary s;
    s.source = src_dir;
    s.destination = dst_file;
    s.staging = staging_dir(dst_file);
    s.format = "gguf";
    s.fingerprint = detail::gguf_fingerprint(src, L, opt);
    s.shard_files = {L.file};
    s.shard_sizes = {L.file_size};
    std::vector<std::uint64_t> cost;
    for (const auto& p : L.plan.tensors) cost.push_back(detail::gguf_tensor_cost(p));
    s.units = split_costs(cost, units);
    s.tensors = L.plan.tensors.size();
    s.extra = std::move(extra);
    detail::open_staging(s);
    detail::write_json_lines(s.staging + "/tensors.json", [&](auto emit) {
        for (std::size_t i = 0; i < L.plan.tensors.size(); ++i) {
            const auto& p = L.plan.tensors[i];
            emit(json::object({{"name", json(p.decl.name)},
                               {"item", json(i)},
                               {"source", json(p.parts.front())},
                               {"scheme", json(std::string(gguf::type_name(p.decl.type)))},
                               {"dtype", json(std::string(gguf::type_name(p.decl.type)))},
                               {"shape", detail::shape_json(p.decl.ne)},
                               {"shard", json(L.file)},
                               {"offset", json(L.offsets[i])},
                               {"bytes", json(L.bytes_of(i))}}));
        }
    });
    detail::write_file_atomically(s.staging + "/plan.json", s.to_json().dump({.indent = 1}) + "\n");
    return s;
}

QFORGE_DECL work_report work_gguf(const std::string& dst_file, std::size_t worker, std::size_t workers, const gguf::convert_options& opt) {
    const plan_summary s0 = detail::read_gguf_plan(dst_file);
    const auto [first, last] = units_of_worker(worker, workers ? workers : s0.units.size(), s0.units.size());
    work_report rep;
    std::vector<std::size_t> todo;
    for (std::size_t u = first; u < last; ++u) (unit_recorded(s0, u) ? rep.skipped : todo).push_back(u);
    if (todo.empty()) return rep;

    checkpoint_source src(s0.source);
    const detail::gguf_layout L = detail::gguf_layout::of(src, s0.source, s0.destination, opt);
    const plan_summary s = detail::read_gguf_plan(dst_file, &src, &L, &opt);
    std::optional<importance_lookup> lookup;
    if (L.plan.imatrix) lookup.emplace(*L.plan.imatrix);
    for (std::size_t u : todo) {
        const work_unit& unit = s.units[u];
        detail::staged_writer writer(s.staging, s.shard_files, L.tensors_of_unit(unit));
        detail::gguf_staged_sink sink(writer);
        gguf::detail::tensor_stream stream(src, s.source, opt, lookup ? &*lookup : nullptr, sink);
        json snr = json::array(), imatrix = json::array();
        for (std::size_t i = unit.begin; i < unit.end; ++i) {
            sink.select(L.plan.tensors[i].decl.name);
            const gguf::tensor_report t = stream.write(L.plan.tensors[i]);
            snr.push_back(json(detail::bits_of(t.snr_db)));
            imatrix.push_back(json(t.imatrix));
        }
        json tensors = writer.finish();
        const json record = json::object({{"unit", json(u)},
                                          {"fingerprint", json(s.fingerprint)},
                                          {"items", json::array({json(unit.begin), json(unit.end)})},
                                          {"tensors", std::move(tensors)},
                                          {"snr_bits", std::move(snr)},
                                          {"imatrix", std::move(imatrix)}});
        detail::write_file_atomically(unit_record_path(s.staging, u), record.dump() + "\n");
        rep.converted.push_back(u);
    }
    return rep;
}

QFORGE_DECL gguf::convert_report finalize_gguf(const std::string& dst_file, const gguf::convert_options& opt, finalize_options fo,
                                               bool overwrite) {
    const plan_summary s0 = detail::read_gguf_plan(dst_file);
    if (io::path_exists(dst_file) && !overwrite) fail<io_error>(dst_file, {}, "destination exists (pass --overwrite to replace it)");
    checkpoint_source src(s0.source);
    const detail::gguf_layout L = detail::gguf_layout::of(src, s0.source, s0.destination, opt);
    const plan_summary s = detail::read_gguf_plan(dst_file, &src, &L, &opt);
    const std::string path = s.staging + "/" + L.file;
    std::vector<io::input_file> files;
    files.emplace_back(path);
    if (files.front().size() != L.file_size) fail<format_error>(path, {}, "the staging file is not the planned size");

    std::vector<json> records(s.units.size());
    std::string bad;
    for (std::size_t u = 0; u < s.units.size(); ++u)
        if (std::string why = detail::unit_problem(s, u, L.tensors_of_unit(s.units[u]), files, records[u], fo.verify_data); !why.empty())
            bad += (bad.empty() ? "" : "; ") + std::string("unit ") + std::to_string(u) + ": " + why;
    if (!bad.empty()) fail<unsupported_error>(s.staging, {}, "finalize refused, re-run the workers of these units: " + bad);

    gguf::convert_report report;
    report.arch = L.plan.h.arch_name;
    for (std::size_t u = 0; u < s.units.size(); ++u) {
        const json::array_t& snr = records[u].at("snr_bits").as_array();
        const json::array_t& im = records[u].at("imatrix").as_array();
        if (snr.size() != s.units[u].end - s.units[u].begin || im.size() != snr.size())
            fail<format_error>(unit_record_path(s.staging, u), {}, "the record's report does not cover its tensors");
        for (std::size_t i = s.units[u].begin; i < s.units[u].end; ++i) {
            const auto& p = L.plan.tensors[i];
            const std::size_t k = i - s.units[u].begin;
            report.tensors.push_back({p.hf, p.decl.name, p.decl.ne, p.decision.requested, p.decl.type, p.decision.fallback,
                                      L.bytes_of(i), detail::double_of_bits(snr[k].as_string()), p.map.permute_heads > 0,
                                      im[k].as_string()});
            report.total_elements += gguf::detail::element_count(p);
            report.total_bytes += L.bytes_of(i);
        }
    }
    files.clear();
    {
        const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) io::fail_errno(path, "cannot open", errno);
        io::unique_fd guard(fd);
        io::write_at(fd, path, L.header, 0);  // the only bytes no worker wrote
        io::sync_file(fd, path);
    }
    io::rename_path(path, dst_file);
    const auto slash = dst_file.find_last_of('/');
    io::sync_directory(slash == std::string::npos ? "." : slash == 0 ? "/" : dst_file.substr(0, slash));
    io::remove_tree_noexcept(s.staging);
    return report;
}
#endif

}  // namespace qforge::cluster
