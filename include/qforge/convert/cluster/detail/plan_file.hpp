// The machinery of convert/cluster/plan_file.hpp and the body of make_plan: the plan's cost
// split, output layout, fingerprint and staging files. Included by that header under
// QFORGE_BODIES_HERE (convert/converter.hpp's pattern): a caller's translation unit in the
// separate mode parses the plan file's types, not the conversion run behind them.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qforge/convert/cluster/plan_file.hpp"
#include "qforge/convert/detail/conversion_run.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/index.hpp"

namespace qforge::cluster {
/// Estimated work of one item, in byte-equivalents of round-to-nearest: a kept tensor is read
/// and written once; a scale search tries several grids per group; GPTQ solves a K x K system.
/// Only the balance of the units depends on it, never the bytes.
inline std::uint64_t item_cost(const plan_item& it, const convert_options& opt) {
    const std::uint64_t io = it.in_bytes() + it.out_bytes();
    if (it.action == plan_action::keep) return io;
    std::uint64_t factor = 2;
    switch (it.scheme.scale) {
        case scale_method::search: factor = 12; break;
        case scale_method::mse: factor = 8; break;
        case scale_method::lsq: factor = 16; break;
        default: break;
    }
    if (!opt.hessians.empty()) factor += static_cast<std::uint64_t>(std::max<std::int64_t>(1, it.shape.back() / 64));
    return io + it.in_bytes() * factor;
}

/// The plan's items split into `n` units by item_cost.
inline std::vector<work_unit> split_units(const plan& p, const convert_options& opt, std::size_t n) {
    std::vector<std::uint64_t> cost(p.items.size());
    for (std::size_t i = 0; i < p.items.size(); ++i) cost[i] = item_cost(p.items[i], opt);
    return split_costs(cost, n);
}

/// Where every output tensor lands: the same split and layout the one-process writer computes.
struct output_layout {
    safetensors::shard_plan shards;
    std::vector<safetensors::file_layout> files;  ///< per shard
    struct place {
        std::size_t shard = 0;
        std::uint64_t offset = 0;  ///< absolute, in the shard file
        std::uint64_t bytes = 0;
    };
    std::map<std::string, place, std::less<>> where;

    static output_layout of(const plan& p, std::uint64_t max_shard_bytes) {
        output_layout L;
        L.shards = safetensors::plan_shards(qforge::detail::output_specs(p), max_shard_bytes);
        for (std::size_t k = 0; k < L.shards.shards.size(); ++k) {
            L.files.push_back(safetensors::plan_file(L.shards.shards[k], safetensors::default_metadata(), L.shards.file_names[k]));
            const auto& f = L.files.back();
            for (std::size_t t = 0; t < f.order.size(); ++t)
                L.where[f.order[t].name] = {k, f.data_offset() + f.begins[t], f.sizes[t]};
        }
        return L;
    }
};

namespace detail {

inline void hash_shape(checksum& h, const shape_t& s) {
    for (std::int64_t d : s) h.update(std::to_string(d) + ",");
    h.update(";");
}

inline void hash_file_identity(checksum& h, const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
        h.update("missing " + path);
        return;
    }
    h.update(path + " " + std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
             std::to_string(st.st_mtim.tv_nsec) + ";");
}

/// The source's tensor headers, the identity (size, mtime) of its shard files, its config.json.
inline void hash_source(checksum& h, const checkpoint_source& src) {
    std::set<std::string> files;
    for (const source_tensor& t : src.tensors()) {
        h.update(t.name + " " + std::string(dtype_name(t.type)) + " " + t.file + " ");
        hash_shape(h, t.shape);
        files.insert(t.file);
    }
    for (const std::string& f : files) hash_file_identity(h, src.dir() + "/" + f);
    h.update(src.config().dump());
}

}  // namespace detail

/// The fingerprint of a conversion: source headers, config, resolved plan, byte-changing options.
inline std::string fingerprint(const checkpoint_source& src, const plan& p, const convert_options& opt) {
    checksum h;
    h.update("qforge-cluster-plan 1;");
    h.update(std::string(format_name(p.format)) + ";" + std::to_string(opt.max_shard_bytes) + ";");
    detail::hash_source(h, src);
    for (const plan_item& it : p.items) {
        h.update(it.name + "<" + it.source + " " + std::to_string(it.row_begin) + ":" + std::to_string(it.row_end) + " " +
                 (it.cut ? std::to_string(it.cut->expert) : std::string("-")) + " " +
                 (it.action == plan_action::quantize ? scheme_to_string(it.scheme) : std::string(dtype_name(it.out_type))));
        for (const planned_tensor& t : it.outputs) {
            h.update(t.name + " " + std::string(dtype_name(t.type)));
            detail::hash_shape(h, t.shape);
        }
    }
    h.update(p.quantization_config.dump());
    for (const std::string* f : {&opt.hessians, &opt.imatrix, &opt.activation_amax})
        if (!f->empty()) detail::hash_file_identity(h, *f);
    char g[160];
    std::snprintf(g, sizeof g, "gptq %.17g %d %d %d %d;", opt.gptq.damp_percent, opt.gptq.block_size, opt.gptq.act_order,
                  opt.gptq.static_groups, opt.gptq.damp_retries);
    h.update(g);
    for (const selector& s : opt.imatrix_layers) h.update("imatrix-layer " + s.pattern() + ";");
    h.update(opt.activation_scaling ? "fold;" : "nofold;");
    return h.hex();
}


namespace detail {

/// ".tmp-<host>-<pid>": unique across the nodes that share the staging folder (a requeued task
/// may run on two nodes at once for a moment, with the same pid by chance).
inline std::string temp_suffix() {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
    return ".tmp-" + std::string(host) + "-" + std::to_string(::getpid());
}

/// Writes a small file atomically: a temporary sibling, fsync, rename, fsync of the folder.
inline void write_file_atomically(const std::string& path, std::string_view text) {
    const std::string tmp = path + temp_suffix();
    io::write_file(tmp, text);
    io::rename_path(tmp, path);
    io::sync_directory(path.substr(0, path.rfind('/')));
}

/// A JSON array written one row per line, streamed (a 671B plan has ~10^5 rows: no tree), then
/// renamed into place. `each(emit)` calls emit(row) for every row.
template <class EachRow>
void write_json_lines(const std::string& path, EachRow each) {
    io::output_file out = io::output_file::create(path + temp_suffix());
    std::string buf = "[\n";
    bool first = true;
    each([&](const json& row) {
        if (!first) buf += ",\n";
        first = false;
        buf += row.dump();
        if (buf.size() > (1u << 20)) {
            out.write(buf);
            buf.clear();
        }
    });
    buf += "\n]\n";
    out.write(buf);
    out.sync();
    out.close();
    io::rename_path(out.path(), path);
}

inline json shape_json(const std::vector<std::int64_t>& s) {
    json shape = json::array();
    for (std::int64_t d : s) shape.push_back(json(d));
    return shape;
}

/// tensors.json, one line per output tensor.
inline void write_tensor_table(const std::string& path, const plan& p, const output_layout& L) {
    write_json_lines(path, [&](auto emit) {
        for (std::size_t i = 0; i < p.items.size(); ++i) {
            const plan_item& it = p.items[i];
            for (const planned_tensor& t : it.outputs) {
                const auto& w = L.where.find(t.name)->second;
                emit(json::object({{"name", json(t.name)},
                                   {"item", json(i)},
                                   {"source", json(it.source)},
                                   {"scheme", json(it.action == plan_action::quantize ? scheme_to_string(it.scheme) : std::string("keep"))},
                                   {"dtype", json(dtype_name(t.type))},
                                   {"shape", shape_json(t.shape)},
                                   {"shard", json(L.shards.file_names[w.shard])},
                                   {"offset", json(w.offset)},
                                   {"bytes", json(w.bytes)}}));
            }
        }
    });
}

/// Creates (or keeps) a shard file at exactly `size` bytes; the data stays a hole until written.
inline void presize(const std::string& path, std::uint64_t size) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) io::fail_errno(path, "cannot create", errno);
    io::unique_fd guard(fd);
    if (io::file_size_of(fd, path) != size && ::ftruncate(fd, static_cast<off_t>(size)) != 0)
        io::fail_errno(path, "cannot size the shard file", errno);
}

/// Makes the staging folder for plan `s`: an existing one is kept when it holds the same plan
/// (same fingerprint and unit count: its recorded units stay valid), else replaced; the shard
/// files are pre-sized.
inline void open_staging(const plan_summary& s) {
    if (io::path_exists(s.staging + "/plan.json")) {
        const plan_summary old = plan_summary::from_json(io::read_json_file(s.staging + "/plan.json"), s.staging + "/plan.json");
        const bool same = old.fingerprint == s.fingerprint && old.units.size() == s.units.size();
        if (!same) io::remove_tree(s.staging);
    }
    if (!io::is_directory(s.staging)) io::make_directory(s.staging);
    if (!io::is_directory(s.staging + "/units")) io::make_directory(s.staging + "/units");
    for (std::size_t k = 0; k < s.shard_files.size(); ++k) presize(s.staging + "/" + s.shard_files[k], s.shard_sizes[k]);
}

}  // namespace detail

#if QFORGE_BODIES_HERE
QFORGE_DECL plan_summary make_plan(const std::string& src_dir, const std::string& dst_dir, const convert_options& opt,
                                   std::size_t units, json extra) {
    if (io::path_exists(dst_dir) && !opt.overwrite)
        fail<io_error>(dst_dir, {}, "destination exists (pass --overwrite to replace it)");
    check_cluster_options(opt, src_dir);
    checkpoint_source src(src_dir);
    const plan p = plan_conversion(src, opt);
    p.throw_if_refused();
    {
        qforge::detail::conversion_inputs in(src_dir, opt, p);  // the same refusals as convert(), now rather than in every worker
    }
    const output_layout L = output_layout::of(p, opt.max_shard_bytes);
    plan_summary s;
    s.source = src_dir;
    s.destination = dst_dir;
    s.staging = staging_dir(dst_dir);
    s.format = std::string(format_name(p.format));
    s.fingerprint = fingerprint(src, p, opt);
    s.shard_files = L.shards.file_names;
    for (const auto& f : L.files) s.shard_sizes.push_back(f.file_size());
    s.units = split_units(p, opt, units);
    for (const plan_item& it : p.items) s.tensors += it.outputs.size();
    s.extra = std::move(extra);

    detail::open_staging(s);
    detail::write_tensor_table(s.staging + "/tensors.json", p, L);
    detail::write_file_atomically(s.staging + "/plan.json", s.to_json().dump({.indent = 1}) + "\n");
    return s;
}
#endif

}  // namespace qforge::cluster
