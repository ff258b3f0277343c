// libFuzzer target: the cluster's own readers (convert/cluster/). The input is a plan.json, then
// optionally one NUL and a unit record (units/unit-NNNNN.json). Property: a plan that
// plan_summary::from_json accepts is written back (to_json) and read again to the very same
// text, its units tile the items from 0 and its shard names stay inside the staging folder;
// a record is judged against unit 0 by record_matches / record_problem (a reason or "fine",
// never a crash). Every refusal is a qforge::error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/cluster/finalize.hpp"

using namespace qforge;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view all(reinterpret_cast<const char*>(data), size);
    const std::size_t nul = all.find('\0');
    const std::string_view plan_text = all.substr(0, nul);
    cluster::plan_summary s;
    try {
        s = cluster::plan_summary::from_json(json::parse(plan_text, "plan.json"), "plan.json");
    } catch (const qforge::error&) {
        return 0;
    }
    // Accepted: the invariants workers rely on, and an identical rewrite.
    if (s.units.empty() || s.units.front().begin != 0) std::abort();
    for (std::size_t u = 1; u < s.units.size(); ++u)
        if (s.units[u].begin != s.units[u - 1].end || s.units[u].end < s.units[u].begin) std::abort();
    for (const std::string& f : s.shard_files)
        if (f.empty() || f.find('/') != std::string::npos || f == "..") std::abort();
    if (s.shard_files.size() != s.shard_sizes.size()) std::abort();
    const std::string out = s.to_json().dump({.indent = 1});
    try {
        const cluster::plan_summary back = cluster::plan_summary::from_json(json::parse(out, "plan.json (rewritten)"), "plan.json");
        if (back.to_json().dump({.indent = 1}) != out || back.staging != s.staging) std::abort();
    } catch (const qforge::error&) {
        std::abort();  // what it accepted it must read back
    }
    (void)s.imbalance();
    if (nul == std::string_view::npos) return 0;
    try {
        const json record = json::parse(all.substr(nul + 1), "unit-00000.json");
        const std::vector<cluster::detail::staged_tensor> planned = {{"model.embed_tokens.weight", 0, 0, 16},
                                                                     {"lm_head.weight", 0, 16, 32}};
        const bool matches = cluster::record_matches(s, 0, record);
        const std::string why = cluster::detail::record_problem(s, 0, planned, record, nullptr);
        if (!matches && why.empty()) std::abort();  // a foreign record is never accepted
    } catch (const qforge::error&) {
    }
    return 0;
}
