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
#include <set>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/converter.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"

namespace qforge::cluster {

/// A 64-bit checksum over a byte stream fed in parts of any size (FNV-1a over 64-bit words,
/// then a final mix): cheap enough to run on every byte a worker writes and finalize re-reads.
class checksum {
public:
    void update(std::span<const std::byte> bytes) noexcept;
    void update(std::string_view text) noexcept { update(std::as_bytes(std::span<const char>(text))); }
    std::uint64_t value() const noexcept;
    std::string hex() const { return to_hex(value()); }
    static std::string to_hex(std::uint64_t v);

private:
    static constexpr std::uint64_t prime = 0x100000001b3ull;
    void word(const std::byte* p) noexcept;
    std::uint64_t h_ = 0xcbf29ce484222325ull;
    std::uint64_t length_ = 0;
    std::byte carry_[8]{};
    std::size_t fill_ = 0;
};

/// "<parent>/.<name>.qforge-staging": where plan, workers and finalize meet.
QFORGE_DECL std::string staging_dir(std::string destination);

QFORGE_DECL std::string unit_record_path(const std::string& staging, std::size_t unit);

/// A contiguous range of plan items, converted by one worker.
struct work_unit {
    std::size_t begin = 0, end = 0;  ///< items [begin, end)
    std::uint64_t cost = 0;          ///< estimated, in byte-equivalents of an RTN pass
};

/// Splits items of the given costs into `n` contiguous units of about equal cost (cut where the
/// running sum crosses k/n of the total; a unit may be empty when one item outweighs a share).
QFORGE_DECL std::vector<work_unit> split_costs(const std::vector<std::uint64_t>& cost, std::size_t n);

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

    json to_json() const;

    /// Reads plan.json, refusing (format_error naming `file`) what workers could misuse: a count
    /// that is negative, units that do not tile the items from 0 in order, a shard file name
    /// that is not a plain name inside the staging folder (it is joined to the staging path).
    static plan_summary from_json(const json& j, const std::string& file);

    /// Refuses a plan whose units do not cover exactly `items` items (the plan made again).
    void check_items(std::size_t items) const;

    /// max / mean of the unit costs (1.0 is perfect balance).
    double imbalance() const;
};

QFORGE_DECL plan_summary read_plan(const std::string& destination);

/// Checks that the options can run on a cluster (refused before anything is written). Every
/// option runs today; activation scaling too: its folds are decided per decoder layer from the
/// weights and the imatrix, and plan reads no tensor data, so each worker unit searches them
/// again (deterministic: the same scales as one process) before converting its items, and
/// finalize once more for the report. That costs one layer search per unit, not per tensor.
QFORGE_DECL void check_cluster_options(const convert_options& opt, const std::string& src_dir);

/// `plan`: resolves the rules against the source headers, refuses what convert() refuses, and
/// writes the staging folder (plan.json, tensors.json, pre-sized shards, units/). An existing
/// plan for the same destination is replaced only when its fingerprint differs or `units`
/// changed (units already recorded under the same plan are kept: re-running plan is safe).
QFORGE_DECL plan_summary make_plan(const std::string& src_dir, const std::string& dst_dir, const convert_options& opt,
                                   std::size_t units, json extra = json());

}  // namespace qforge::cluster

#if QFORGE_BODIES_HERE

namespace qforge::cluster {

QFORGE_DECL std::string staging_dir(std::string destination) {
    while (destination.size() > 1 && destination.back() == '/') destination.pop_back();
    const auto slash = destination.rfind('/');
    const std::string parent = slash == std::string::npos ? "." : slash == 0 ? "" : destination.substr(0, slash);
    const std::string base = slash == std::string::npos ? destination : destination.substr(slash + 1);
    return parent + "/." + base + ".qforge-staging";
}

QFORGE_DECL std::string unit_record_path(const std::string& staging, std::size_t unit) {
    char buf[48];
    std::snprintf(buf, sizeof buf, "/units/unit-%05zu.json", unit);
    return staging + buf;
}

QFORGE_DECL std::vector<work_unit> split_costs(const std::vector<std::uint64_t>& cost, std::size_t n) {
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

QFORGE_DECL plan_summary read_plan(const std::string& destination) {
    const std::string path = staging_dir(destination) + "/plan.json";
    if (!io::path_exists(path))
        fail<io_error>(path, {}, "no cluster plan for " + destination + " (run `qforge-convert plan SRC " + destination + "` first)");
    return plan_summary::from_json(io::read_json_file(path), path);
}

QFORGE_DECL void check_cluster_options(const convert_options& opt, const std::string& src_dir) {
    (void)opt;
    (void)src_dir;
}

}  // namespace qforge::cluster

#include "qforge/convert/cluster/detail/plan_file.hpp"

namespace qforge::cluster {

QFORGE_DECL void checksum::update(std::span<const std::byte> bytes) noexcept {
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

QFORGE_DECL std::uint64_t checksum::value() const noexcept {
    std::uint64_t h = h_;
    for (std::size_t k = 0; k < fill_; ++k) h = (h ^ static_cast<std::uint64_t>(carry_[k])) * prime;
    h ^= length_;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

QFORGE_DECL std::string checksum::to_hex(std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

QFORGE_DECL void checksum::word(const std::byte* p) noexcept {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    h_ = (h_ ^ w) * prime;
    h_ ^= h_ >> 29;
}

QFORGE_DECL json plan_summary::to_json() const {
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

QFORGE_DECL plan_summary plan_summary::from_json(const json& j, const std::string& file) {
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

QFORGE_DECL void plan_summary::check_items(std::size_t items) const {
    if (units.back().end != items)
        fail<format_error>(staging + "/plan.json", {}, "its units cover " + std::to_string(units.back().end) + " items, the plan has " +
                                                           std::to_string(items) + " (plan again)");
}

QFORGE_DECL double plan_summary::imbalance() const {
    std::uint64_t mx = 0;
    long double sum = 0;
    for (const work_unit& u : units) {
        mx = std::max(mx, u.cost);
        sum += static_cast<long double>(u.cost);
    }
    return sum > 0 ? static_cast<double>(static_cast<long double>(mx) * static_cast<long double>(units.size()) / sum) : 1.0;
}

}  // namespace qforge::cluster
#endif
