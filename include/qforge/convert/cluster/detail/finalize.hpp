// The machinery of convert/cluster/finalize.hpp (a unit record's checks, the staged bytes'
// checksums) and the body of finalize(), included by that header under QFORGE_BODIES_HERE.
#pragma once

#include <cerrno>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>

#include "qforge/convert/cluster/detail/work.hpp"
#include "qforge/convert/cluster/finalize.hpp"
#include "qforge/io/atomic_dir.hpp"

namespace qforge::cluster {

namespace detail {

/// Checksum of bytes [offset, offset + length) of an open file, read in 4 MiB chunks.
inline std::string checksum_of(const io::input_file& f, std::uint64_t offset, std::uint64_t length) {
    checksum h;
    std::vector<std::byte> buf(static_cast<std::size_t>(std::min<std::uint64_t>(length, std::uint64_t{4} << 20)));
    for (std::uint64_t done = 0; done < length;) {
        const std::span<std::byte> b(buf.data(), static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), length - done)));
        f.read_at(offset + done, b);
        h.update(b);
        done += b.size();
    }
    return h.hex();
}

/// Why `record` does not describe unit `u` as planned (`planned`: the unit's output tensors, in
/// order), or empty; with `shards`, each tensor's bytes are also checksummed.
inline std::string record_problem(const plan_summary& s, std::size_t u, const std::vector<staged_tensor>& planned,
                                  const json& record, std::vector<io::input_file>* shards) {
    if (!record_matches(s, u, record)) return "its record belongs to another plan";
    try {
        const json::array_t& tensors = record.at("tensors").as_array();
        if (tensors.size() > planned.size()) return "its record lists more tensors than planned";
        for (std::size_t k = 0; k < planned.size(); ++k) {
            const staged_tensor& t = planned[k];
            if (k >= tensors.size() || tensors[k].at("name").as_string() != t.name || tensors[k].at("bytes").as_int() < 0 ||
                static_cast<std::uint64_t>(tensors[k].at("bytes").as_int()) != t.bytes)
                return "its record does not list tensor '" + t.name + "' as planned";
            const std::string& sum = tensors[k].at("checksum").as_string();
            if (shards && checksum_of((*shards)[t.shard], t.offset, t.bytes) != sum)
                return "tensor '" + t.name + "' in " + s.shard_files[t.shard] + " does not match its checksum";
        }
    } catch (const format_error& e) {
        return std::string("its record is malformed (") + e.what() + ")";
    }
    return {};
}

/// Why unit `u` cannot be finalized, or empty when its record and bytes match `planned`.
inline std::string unit_problem(const plan_summary& s, std::size_t u, const std::vector<staged_tensor>& planned,
                                std::vector<io::input_file>& shards, json& record, bool verify_data) {
    const std::string path = unit_record_path(s.staging, u);
    if (!io::path_exists(path)) return "not converted (no record)";
    try {
        record = io::read_json_file(path);
    } catch (const std::exception&) {
        return "its record does not parse";
    }
    return record_problem(s, u, planned, record, verify_data ? &shards : nullptr);
}

inline std::vector<std::string> string_list(const json& a) {
    std::vector<std::string> v;
    for (const json& s : a.as_array()) v.push_back(s.as_string());
    return v;
}

inline double double_of_bits(const std::string& hex) {
    const std::uint64_t b = std::stoull(hex, nullptr, 16);
    double d;
    std::memcpy(&d, &b, 8);
    return d;
}

/// Puts `from` at `to` without copying: a hard link (the staging copy stays until commit), or a
/// rename where links are not allowed (undone by the caller on failure).
inline bool link_or_rename(const std::string& from, const std::string& to) {
    if (::link(from.c_str(), to.c_str()) == 0) return false;
    io::rename_path(from, to);
    return true;
}

}  // namespace detail

#if QFORGE_BODIES_HERE
QFORGE_DECL conversion_result finalize(const std::string& dst_dir, const convert_options& opt, finalize_options fo) {
    const plan_summary s = read_plan(dst_dir);
    check_not_gguf(s);
    if (io::path_exists(dst_dir) && !opt.overwrite)
        fail<io_error>(dst_dir, {}, "destination exists (pass --overwrite to replace it)");
    check_cluster_options(opt, s.source);
    checkpoint_source src(s.source);
    conversion_result result;
    result.the_plan = plan_conversion(src, opt);
    const plan& p = result.the_plan;
    p.throw_if_refused();
    if (fingerprint(src, p, opt) != s.fingerprint)
        fail<unsupported_error>(s.staging + "/plan.json", {}, "the source checkpoint or the options changed since `plan`; plan again");
    s.check_items(p.items.size());
    const output_layout L = output_layout::of(p, opt.max_shard_bytes);
    if (s.shard_files != L.shards.file_names)
        fail<format_error>(s.staging + "/plan.json", {}, "its shard files are not the plan's (plan again)");
    std::vector<io::input_file> shards;
    for (const std::string& f : s.shard_files) shards.emplace_back(s.staging + "/" + f);

    std::vector<json> records(s.units.size());
    std::string bad;
    for (std::size_t u = 0; u < s.units.size(); ++u)
        if (std::string why = detail::unit_problem(s, u, detail::tensors_of_unit(p, L, s.units[u]), shards, records[u], fo.verify_data); !why.empty())
            bad += (bad.empty() ? "" : "; ") + std::string("unit ") + std::to_string(u) + ": " + why;
    if (!bad.empty())
        fail<unsupported_error>(s.staging, {}, "finalize refused, re-run the workers of these units: " + bad);

    qforge::detail::start_report(result.report, p);
    for (std::size_t u = 0; u < s.units.size(); ++u) {
        const json& r = records[u];
        const json::array_t& snr = r.at("snr_bits").as_array();
        const json* loaded_json = r.find("snr_as_loaded_bits");
        const json::array_t* loaded = loaded_json && loaded_json->is_array() ? &loaded_json->as_array() : nullptr;
        std::size_t q = 0;
        for (std::size_t i = s.units[u].begin; i < s.units[u].end; ++i) {
            const plan_item& it = p.items[i];
            if (it.action != plan_action::quantize) continue;
            if (q >= snr.size()) fail<format_error>(unit_record_path(s.staging, u), it.name, "record has fewer SNRs than quantized items");
            const double as_loaded = loaded && q < loaded->size() ? detail::double_of_bits((*loaded)[q].as_string())
                                                                  : std::numeric_limits<double>::quiet_NaN();
            result.report.tensors.push_back({std::string(module_of(it.name)), it.shape, it.scheme, detail::double_of_bits(snr[q++].as_string()),
                                             as_loaded});
        }
        for (auto [key, list] : {std::pair{"gptq_layers", &result.gptq_layers}, std::pair{"rtn_layers", &result.rtn_layers},
                                 std::pair{"imatrix_layers", &result.imatrix_layers},
                                 std::pair{"layers_without_imatrix", &result.layers_without_imatrix}})
            for (auto& m : detail::string_list(r.at(key))) list->push_back(std::move(m));
    }
    qforge::detail::conversion_inputs in(s.source, opt, p);
    if (opt.activation_scaling) {  // the report's fold records: the search the workers made
        thread_pool pool(std::max(1u, opt.threads));
        result.report.activation_folds =
            plan_activation_folds(src, p, model_config::from_json(src.config(), src.dir() + "/config.json"), *in.importance,
                                  pool.executor())
                .records;
    }

    // The headers: the only bytes of the shards no worker wrote.
    for (std::size_t k = 0; k < L.files.size(); ++k) {
        const std::string path = s.staging + "/" + s.shard_files[k];
        const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) io::fail_errno(path, "cannot open", errno);
        io::unique_fd guard(fd);
        const std::string prefix = L.files[k].prefix();
        io::write_at(fd, path, std::as_bytes(std::span<const char>(prefix)), 0);
        io::sync_file(fd, path);
    }
    io::atomic_output_dir out(dst_dir, opt.overwrite);
    std::vector<std::string> renamed;  // moved out of staging: put back if anything below fails
    try {
        for (const std::string& f : s.shard_files)
            if (detail::link_or_rename(s.staging + "/" + f, out.file(f))) renamed.push_back(f);
        if (L.shards.shards.size() > 1)
            io::write_file(out.path() + "/" + std::string(safetensors::index_file_name), safetensors::index_text(L.shards));
        result.shards = L.shards.file_names;
        qforge::detail::write_model_files(out.path(), src, p, in.act_order, result);
        out.commit();
    } catch (...) {
        if (!out.committed())
            for (const std::string& f : renamed) (void)io::rename_path_noexcept(out.file(f), s.staging + "/" + f);
        throw;
    }
    io::remove_tree_noexcept(s.staging);
    return result;
}
#endif

}  // namespace qforge::cluster
