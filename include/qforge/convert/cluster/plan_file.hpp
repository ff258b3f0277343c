// A conversion split for a cluster: the plan file that `plan` writes and `work` / `finalize`
// read (field-2026.md section 5: peers convert in one process and start over when it dies).
//
//   qforge::cluster::plan_summary s = qforge::cluster::make_plan("in", "out", opt, 64);
//   // then, on any node sharing the file system, for i in 0..63 (a Slurm array, an Indexed Job):
//   qforge::cluster::work("out", i, 64, opt);        // convert/cluster/work.hpp
//   qforge::cluster::finalize("out", opt);            // convert/cluster/finalize.hpp
//
// Everything lives in the staging folder "<parent>/.<name>.qforge-staging" beside the
// destination (same file system, so finalize's renames are atomic):
//   plan.json     format, fingerprint, shard files and sizes, work units (item ranges, costs)
//                 and whatever the caller stores in `extra` (qforge-convert keeps its arguments);
//   tensors.json  every output tensor: item, source, scheme, shard, byte offset, size;
//   model-*.safetensors  the shards, pre-sized (sparse) at plan time; workers pwrite their
//                 tensors' bytes at the planned offsets; finalize writes the headers;
//   units/unit-NNNNN.json  a unit's record, written (atomically) once its bytes are durable.
//
// Why the headers can be fixed up front: the output dtype and shape of every tensor follow from
// the plan (quantized sizes are a function of shapes and scheme), and the shard split and the
// safetensors layout are functions of those alone (io/safetensors/index.hpp plan_shards,
// writer.hpp plan_file), so each worker computes the same offsets as the one-process writer.
//
// The fingerprint covers the source headers (tensor names, dtypes, shapes, shard sizes and
// mtimes), config.json, the resolved plan (every output's name, dtype, shape, scheme) and the
// options that change bytes (format, shard size, Hessian/imatrix files, GPTQ settings). A worker
// or finalize whose own planning gives another fingerprint refuses: the source or the options
// changed since `plan`. Work units are contiguous item ranges balanced by estimated cost.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <sys/stat.h>
#include <unistd.h>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/detail/conversion_run.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/index.hpp"

namespace qforge::cluster {

/// A 64-bit checksum over a byte stream fed in parts of any size (FNV-1a over 64-bit words,
/// then a final mix): cheap enough to run on every byte a worker writes and finalize re-reads.
class checksum {
public:
    void update(std::span<const std::byte> bytes) noexcept {
        std::size_t i = 0;
        while (i < bytes.size() && fill_ != 0 && fill_ < 8) carry_[fill_++] = bytes[i++];
        if (fill_ == 8) {
            word(carry_);
            fill_ = 0;
        }
        for (; i + 8 <= bytes.size(); i += 8) word(bytes.data() + i);
        for (; i < bytes.size(); ++i) carry_[fill_++] = bytes[i];
        length_ += bytes.size();
    }
    void update(std::string_view text) noexcept { update(std::as_bytes(std::span<const char>(text))); }
    std::uint64_t value() const noexcept {
        std::uint64_t h = h_;
        for (std::size_t k = 0; k < fill_; ++k) h = (h ^ static_cast<std::uint64_t>(carry_[k])) * prime;
        h ^= length_;
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        return h;
    }
    std::string hex() const { return to_hex(value()); }
    static std::string to_hex(std::uint64_t v) {
        char buf[17];
        std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
        return buf;
    }

private:
    static constexpr std::uint64_t prime = 0x100000001b3ull;
    void word(const std::byte* p) noexcept {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        h_ = (h_ ^ w) * prime;
        h_ ^= h_ >> 29;
    }
    std::uint64_t h_ = 0xcbf29ce484222325ull;
    std::uint64_t length_ = 0;
    std::byte carry_[8]{};
    std::size_t fill_ = 0;
};

/// "<parent>/.<name>.qforge-staging": where plan, workers and finalize meet.
inline std::string staging_dir(std::string destination) {
    while (destination.size() > 1 && destination.back() == '/') destination.pop_back();
    const auto slash = destination.rfind('/');
    const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "" : destination.substr(0, slash);
    const std::string base = slash == std::string::npos ? destination : destination.substr(slash + 1);
    return parent + "/." + base + ".qforge-staging";
}

inline std::string unit_record_path(const std::string& staging, std::size_t unit) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "/units/unit-%05zu.json", unit);
    return staging + buf;
}

/// A contiguous range of plan items, converted by one worker.
struct work_unit {
    std::size_t begin = 0, end = 0;  ///< items [begin, end)
    std::uint64_t cost = 0;          ///< estimated, in byte-equivalents of an RTN pass
};

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

/// Splits items of the given costs into `n` contiguous units of about equal cost (cut where the
/// running sum crosses k/n of the total; a unit may be empty when one item outweighs a share).
inline std::vector<work_unit> split_costs(const std::vector<std::uint64_t>& cost, std::size_t n) {
    if (n == 0) fail<unsupported_error>({}, {}, "a cluster plan needs at least one work unit");
    long double total = 0;
    for (std::uint64_t c : cost) total += static_cast<long double>(c);
    std::vector<work_unit> units(n);
    std::size_t i = 0;
    long double running = 0;
    for (std::size_t u = 0; u < n; ++u) {
        units[u].begin = i;
        const long double target = total * static_cast<long double>(u + 1) / static_cast<long double>(n);
        // Take the next item while that brings the running sum closer to this unit's target.
        while (i < cost.size() && (u + 1 == n || running + static_cast<long double>(cost[i]) / 2 <= target)) {
            running += static_cast<long double>(cost[i]);
            units[u].cost += cost[i++];
        }
        units[u].end = i;
    }
    return units;
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

/// plan.json, as read back by workers and finalize.
struct plan_summary {
    std::string source;       ///< the source folder
    std::string destination;  ///< the final folder
    std::string staging;      ///< staging_dir(destination)
    std::string format;
    std::string fingerprint;
    std::vector<std::string> shard_files;
    std::vector<std::uint64_t> shard_sizes;
    std::vector<work_unit> units;
    std::size_t tensors = 0;
    json extra;  ///< the caller's (qforge-convert: its command line)

    json to_json() const {
        json u = json::array();
        for (const work_unit& w : units)
            u.push_back(json::object({{"items", json::array({json(w.begin), json(w.end)})}, {"cost", json(w.cost)}}));
        json sh = json::array();
        for (std::size_t k = 0; k < shard_files.size(); ++k)
            sh.push_back(json::object({{"file", json(shard_files[k])}, {"bytes", json(shard_sizes[k])}}));
        return json::object({{"qforge_cluster_plan", json(1)},
                             {"source", json(source)},
                             {"destination", json(destination)},
                             {"format", json(format)},
                             {"fingerprint", json(fingerprint)},
                             {"tensors", json(tensors)},
                             {"shards", std::move(sh)},
                             {"units", std::move(u)},
                             {"extra", extra}});
    }

    /// Reads plan.json, refusing (format_error naming `file`) what workers could misuse: a count
    /// that is negative, units that do not tile the items from 0 in order, a shard file name
    /// that is not a plain name inside the staging folder (it is joined to the staging path).
    static plan_summary from_json(const json& j, const std::string& file) {
        if (!j.is_object() || !j.contains("qforge_cluster_plan"))
            fail<format_error>(file, {}, "not a qforge cluster plan (run `qforge-convert plan` first)");
        if (!j.at("qforge_cluster_plan").is_int() || j.at("qforge_cluster_plan").as_int() != 1)
            fail<format_error>(file, {}, "cluster plan version is not 1 (made by another qforge: plan again)");
        auto count = [&](const json& v, const char* what) {
            const std::int64_t n = v.as_int();
            if (n < 0) fail<format_error>(file, {}, std::string(what) + " is negative");
            return static_cast<std::uint64_t>(n);
        };
        plan_summary s;
        s.source = j.at("source").as_string();
        s.destination = j.at("destination").as_string();
        if (s.source.empty() || s.destination.empty()) fail<format_error>(file, {}, "source or destination is empty");
        s.staging = staging_dir(s.destination);
        s.format = j.at("format").as_string();
        s.fingerprint = j.at("fingerprint").as_string();
        s.tensors = static_cast<std::size_t>(count(j.at("tensors"), "the tensor count"));
        std::set<std::string> names;
        for (const json& f : j.at("shards").as_array()) {
            const std::string name = f.at("file").as_string();
            if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.find('\0') != std::string::npos ||
                name == "plan.json" || name == "tensors.json" || name == "units" || name.find(".tmp-") != std::string::npos)
                fail<format_error>(file, {}, "shard file name '" + name + "' is not a plain file name of the staging folder");
            if (!names.insert(name).second) fail<format_error>(file, {}, "shard file '" + name + "' is listed twice");
            s.shard_files.push_back(name);
            s.shard_sizes.push_back(count(f.at("bytes"), "a shard size"));
        }
        for (const json& u : j.at("units").as_array()) {
            const json& items = u.at("items");
            if (items.size() != 2) fail<format_error>(file, {}, "a unit's items must be [begin, end]");
            const work_unit w{static_cast<std::size_t>(count(items.at(0), "a unit's first item")),
                              static_cast<std::size_t>(count(items.at(1), "a unit's end")), count(u.at("cost"), "a unit's cost")};
            if (w.begin != (s.units.empty() ? 0 : s.units.back().end) || w.end < w.begin)
                fail<format_error>(file, {}, "unit " + std::to_string(s.units.size()) + " does not start where the previous one ends");
            s.units.push_back(w);
        }
        if (s.units.empty()) fail<format_error>(file, {}, "the plan has no work units");
        if (const json* e = j.find("extra")) s.extra = *e;
        return s;
    }

    /// Refuses a plan whose units do not cover exactly `items` items (the plan made again).
    void check_items(std::size_t items) const {
        if (units.back().end != items)
            fail<format_error>(staging + "/plan.json", {}, "its units cover " + std::to_string(units.back().end) + " items, the plan has " +
                                                               std::to_string(items) + " (plan again)");
    }

    /// max / mean of the unit costs (1.0 is perfect balance).
    double imbalance() const {
        std::uint64_t mx = 0;
        long double sum = 0;
        for (const work_unit& u : units) {
            mx = std::max(mx, u.cost);
            sum += static_cast<long double>(u.cost);
        }
        return sum > 0 ? static_cast<double>(static_cast<long double>(mx) * static_cast<long double>(units.size()) / sum) : 1.0;
    }
};

inline plan_summary read_plan(const std::string& destination) {
    const std::string path = staging_dir(destination) + "/plan.json";
    if (!io::path_exists(path))
        fail<io_error>(path, {}, "no cluster plan for " + destination + " (run `qforge-convert plan SRC " + destination + "` first)");
    return plan_summary::from_json(io::read_json_file(path), path);
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

/// Checks that the options can run on a cluster (refused before anything is written). Every
/// option runs today; activation scaling too: its folds are decided per decoder layer from the
/// weights and the imatrix, and plan reads no tensor data, so each worker unit searches them
/// again (deterministic: the same scales as one process) before converting its items, and
/// finalize once more for the report. That costs one layer search per unit, not per tensor.
inline void check_cluster_options(const convert_options& opt, const std::string& src_dir) {
    (void)opt;
    (void)src_dir;
}

/// `plan`: resolves the rules against the source headers, refuses what convert() refuses, and
/// writes the staging folder (plan.json, tensors.json, pre-sized shards, units/). An existing
/// plan for the same destination is replaced only when its fingerprint differs or `units`
/// changed (units already recorded under the same plan are kept: re-running plan is safe).
QFORGE_DECL plan_summary make_plan(const std::string& src_dir, const std::string& dst_dir, const convert_options& opt,
                                   std::size_t units, json extra = json());
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
