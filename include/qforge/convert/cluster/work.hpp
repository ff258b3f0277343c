// `work`: one cluster worker converts its work units into the staging folder.
//
//   qforge::cluster::work("out", 3, 64, opt);   // worker 3 of 64 (the plan's unit 3 when it has 64)
//   auto [i, n] = qforge::cluster::worker_from_environment(std::nullopt, std::nullopt, plan_units);
//
// The worker plans again from the source headers (cheap, no tensor data) and refuses unless
// the fingerprint equals the plan file's; then each of its units runs the one-process code
// (qforge::detail::convert_items) on the unit's items, with a writer that pwrites every output
// tensor at its planned offset in the pre-sized staging shard and checksums the bytes. Once the
// unit's bytes are fsynced its record (units/unit-NNNNN.json: fingerprint, items, every
// tensor's size and checksum, the SNRs and layer lists the report needs) is written
// atomically. A unit with a valid record is skipped: a re-run does nothing; a unit killed
// midway has no record and is converted again from the start (its ranges are overwritten).
// Workers write disjoint byte ranges of the same files, which POSIX file systems (and the
// shared ones clusters use: NFS, Lustre, GPFS) allow from many nodes at once.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qforge/convert/cluster/plan_file.hpp"
#include "qforge/core/config.hpp"

namespace qforge::cluster {

/// The units worker `worker` of `workers` converts: the contiguous block
/// [worker * U / workers, (worker + 1) * U / workers) of the plan's U units.
QFORGE_DECL std::pair<std::size_t, std::size_t> units_of_worker(std::size_t worker, std::size_t workers, std::size_t units);

/// Which worker this process is: `unit` when given, else SLURM_ARRAY_TASK_ID (a Slurm job
/// array), else JOB_COMPLETION_INDEX (a Kubernetes Indexed Job). The count is `of` when given,
/// else QFORGE_WORKERS, else the plan's unit count: not SLURM_ARRAY_TASK_COUNT, which is 1 for
/// a task resubmitted alone (sbatch --array=5), while its index still names unit 5.
QFORGE_DECL std::pair<std::size_t, std::size_t> worker_from_environment(std::optional<std::size_t> unit, std::optional<std::size_t> of,
                                                                        std::size_t plan_units);

/// Whether `r` is a record of unit `u` of this plan (its fingerprint and item range).
QFORGE_DECL bool record_matches(const plan_summary& s, std::size_t u, const json& r) noexcept;

/// Whether unit `u`'s record is there, parses, and belongs to this plan.
QFORGE_DECL bool unit_recorded(const plan_summary& s, std::size_t u);

/// A GGUF plan has its own worker and finalize (convert/cluster/gguf.hpp).
QFORGE_DECL void check_not_gguf(const plan_summary& s);

struct work_report {
    std::vector<std::size_t> converted;  ///< units converted now
    std::vector<std::size_t> skipped;    ///< units already recorded
};

/// Converts the units of worker `worker` of `workers` (0: as many workers as units) of the plan
/// for `dst_dir`; `opt` must be the options the plan was made with (threads may differ).
QFORGE_DECL work_report work(const std::string& dst_dir, std::size_t worker, std::size_t workers, const convert_options& opt);

}  // namespace qforge::cluster

#if QFORGE_BODIES_HERE

namespace qforge::cluster {

QFORGE_DECL std::pair<std::size_t, std::size_t> units_of_worker(std::size_t worker, std::size_t workers, std::size_t units) {
    if (workers == 0 || worker >= workers)
        fail<unsupported_error>({}, {}, "worker " + std::to_string(worker) + " of " + std::to_string(workers) + " does not exist");
    return {worker * units / workers, (worker + 1) * units / workers};
}

QFORGE_DECL std::pair<std::size_t, std::size_t> worker_from_environment(std::optional<std::size_t> unit, std::optional<std::size_t> of,
                                                                        std::size_t plan_units) {
    auto number = [](const char* var) -> std::optional<std::size_t> {
        const char* v = std::getenv(var);
        if (!v || !*v) return std::nullopt;
        char* end = nullptr;
        const unsigned long long n = std::strtoull(v, &end, 10);
        if (*end != '\0') fail<unsupported_error>({}, {}, std::string(var) + "='" + v + "' is not a number");
        return static_cast<std::size_t>(n);
    };
    if (!unit) unit = number("SLURM_ARRAY_TASK_ID");
    if (!unit) unit = number("JOB_COMPLETION_INDEX");
    if (!unit)
        fail<unsupported_error>({}, {}, "which worker? give --unit I, or run as a Slurm array task (SLURM_ARRAY_TASK_ID) or "
                                        "a Kubernetes Indexed Job pod (JOB_COMPLETION_INDEX)");
    if (!of) of = number("QFORGE_WORKERS");
    if (!of) of = plan_units;
    return {*unit, *of};
}

QFORGE_DECL bool record_matches(const plan_summary& s, std::size_t u, const json& r) noexcept {
    try {
        return u < s.units.size() && r.at("fingerprint").as_string() == s.fingerprint && r.at("unit").as_int() >= 0 &&
               static_cast<std::size_t>(r.at("unit").as_int()) == u && r.at("items").size() == 2 &&
               r.at("items").at(0).as_int() >= 0 && r.at("items").at(1).as_int() >= 0 &&
               static_cast<std::size_t>(r.at("items").at(0).as_int()) == s.units[u].begin &&
               static_cast<std::size_t>(r.at("items").at(1).as_int()) == s.units[u].end;
    } catch (const std::exception&) {
        return false;  // foreign
    }
}

QFORGE_DECL bool unit_recorded(const plan_summary& s, std::size_t u) {
    const std::string path = unit_record_path(s.staging, u);
    if (!io::path_exists(path)) return false;
    try {
        return record_matches(s, u, io::read_json_file(path));
    } catch (const std::exception&) {
        return false;  // torn: converted again
    }
}

QFORGE_DECL void check_not_gguf(const plan_summary& s) {
    if (s.format == "gguf")
        fail<unsupported_error>(s.staging + "/plan.json", {}, "this is a GGUF plan: run its workers and finalize with the GGUF options "
                                                              "(cluster::work_gguf, cluster::finalize_gguf)");
}

}  // namespace qforge::cluster

#include "qforge/convert/cluster/detail/work.hpp"
#endif
