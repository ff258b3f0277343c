// The machinery of convert/cluster/work.hpp (a unit's staged tensors and writer) and the body
// of work(), included by that header under QFORGE_BODIES_HERE.
#pragma once

#include <cerrno>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "qforge/convert/cluster/detail/plan_file.hpp"
#include "qforge/convert/cluster/work.hpp"

namespace qforge::cluster {

namespace detail {

/// One output tensor of a work unit: where its bytes go in the staging files.
struct staged_tensor {
    std::string name;
    std::size_t shard = 0;
    std::uint64_t offset = 0, bytes = 0;
};

/// The output tensors of plan items [u.begin, u.end), in item order.
inline std::vector<staged_tensor> tensors_of_unit(const plan& p, const output_layout& L, const work_unit& u) {
    std::vector<staged_tensor> v;
    for (std::size_t i = u.begin; i < u.end; ++i)
        for (const planned_tensor& t : p.items[i].outputs) {
            const auto& w = L.where.find(t.name)->second;
            v.push_back({t.name, w.shard, w.offset, w.bytes});
        }
    return v;
}

/// The Writer that convert_items writes a unit's tensors through: pwrite at the planned offset
/// of the staging shard, a running checksum per tensor.
class staged_writer {
public:
    staged_writer(std::string staging, std::vector<std::string> files, const std::vector<staged_tensor>& tensors)
        : staging_(std::move(staging)), files_names_(std::move(files)) {
        for (const staged_tensor& t : tensors) {
            tensors_.emplace(t.name, state{t.shard, t.offset, t.bytes, 0, {}});
            order_.push_back(t.name);
        }
    }
    staged_writer(std::string staging, const output_layout& L, const plan& p, const work_unit& u)
        : staged_writer(std::move(staging), L.shards.file_names, tensors_of_unit(p, L, u)) {}

    void write(std::string_view name, std::span<const std::byte> bytes) {
        const auto it = tensors_.find(name);
        if (it == tensors_.end()) fail<format_error>(staging_, std::string(name), "tensor is not in this work unit");
        state& s = it->second;
        if (bytes.size() > s.bytes - s.written)
            fail<shape_error>(staging_, std::string(name), "more bytes than the plan holds for it");
        const int fd = file(s.shard);
        const std::string& path = path_of(s.shard);
        io::write_at(fd, path, bytes, s.offset + s.written);
        s.sum.update(bytes);
        s.written += bytes.size();
    }

    /// Every tensor complete? Then fsync the files written (the record must not outlive the data).
    json finish() {
        json list = json::array();
        for (const std::string& name : order_) {
            const state& s = tensors_.find(name)->second;
            if (s.written != s.bytes)
                fail<shape_error>(staging_, name, "only " + std::to_string(s.written) + " of " + std::to_string(s.bytes) + " bytes written");
            list.push_back(json::object({{"name", json(name)}, {"bytes", json(s.bytes)}, {"checksum", json(s.sum.hex())}}));
        }
        for (auto& [shard, fd] : files_)
            io::sync_file(fd.get(), path_of(shard));
        return list;
    }

private:
    struct state {
        std::size_t shard;
        std::uint64_t offset, bytes, written;
        checksum sum;
    };
    std::string path_of(std::size_t shard) const { return staging_ + "/" + files_names_.at(shard); }
    int file(std::size_t shard) {
        auto it = files_.find(shard);
        if (it == files_.end()) {
            const std::string path = path_of(shard);
            const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);  // pre-sized by plan: never truncated here
            if (fd < 0) io::fail_errno(path, "cannot open the staging shard (run `qforge-convert plan` again?)", errno);
            it = files_.emplace(shard, io::unique_fd(fd)).first;
        }
        return it->second.get();
    }

    std::string staging_;
    std::vector<std::string> files_names_;
    std::map<std::string, state, std::less<>> tensors_;
    std::vector<std::string> order_;
    std::map<std::size_t, io::unique_fd> files_;
};

inline std::string bits_of(double d) {
    std::uint64_t b;
    std::memcpy(&b, &d, 8);
    return checksum::to_hex(b);
}

inline json strings(const std::vector<std::string>& v) {
    json a = json::array();
    for (const auto& s : v) a.push_back(json(s));
    return a;
}

}  // namespace detail

#if QFORGE_BODIES_HERE
QFORGE_DECL work_report work(const std::string& dst_dir, std::size_t worker, std::size_t workers, const convert_options& opt) {
    const plan_summary s = read_plan(dst_dir);
    check_not_gguf(s);
    const auto [first, last] = units_of_worker(worker, workers ? workers : s.units.size(), s.units.size());
    work_report rep;
    std::vector<std::size_t> todo;
    for (std::size_t u = first; u < last; ++u) (unit_recorded(s, u) ? rep.skipped : todo).push_back(u);
    if (todo.empty()) return rep;

    check_cluster_options(opt, s.source);
    checkpoint_source src(s.source);
    const plan p = plan_conversion(src, opt);
    p.throw_if_refused();
    if (fingerprint(src, p, opt) != s.fingerprint)
        fail<unsupported_error>(s.staging + "/plan.json", {}, "the source checkpoint or the options changed since `plan`; plan again");
    s.check_items(p.items.size());
    const output_layout L = output_layout::of(p, opt.max_shard_bytes);
    qforge::detail::conversion_inputs in(s.source, opt, p);
    thread_pool pool(std::max(1u, opt.threads));
    const executor run = pool.executor();
    const qforge::detail::shard_path_map paths = qforge::detail::shard_paths(s.staging, L.shards);
    for (std::size_t u : todo) {
        const work_unit& unit = s.units[u];
        detail::staged_writer writer(s.staging, L, p, unit);
        conversion_result r;
        {
            qforge::detail::conversion_run run(src, dst_dir, opt, in, r, p, writer, paths);
            for (std::size_t i = unit.begin; i < unit.end; ++i) run.convert_item(i);
            run.finish();
        }
        json tensors = writer.finish();
        json snr = json::array();
        json as_loaded = json::array();  // report.hpp snr_db_as_loaded (NaN: not set), carried like snr_db
        for (const tensor_report& t : r.report.tensors) {
            snr.push_back(json(detail::bits_of(t.snr_db)));
            as_loaded.push_back(json(detail::bits_of(t.snr_db_as_loaded)));
        }
        const json record = json::object({{"unit", json(u)},
                                          {"fingerprint", json(s.fingerprint)},
                                          {"items", json::array({json(unit.begin), json(unit.end)})},
                                          {"tensors", std::move(tensors)},
                                          {"snr_bits", std::move(snr)},
                                          {"snr_as_loaded_bits", std::move(as_loaded)},
                                          {"gptq_layers", detail::strings(r.gptq_layers)},
                                          {"rtn_layers", detail::strings(r.rtn_layers)},
                                          {"imatrix_layers", detail::strings(r.imatrix_layers)},
                                          {"layers_without_imatrix", detail::strings(r.layers_without_imatrix)}});
        detail::write_file_atomically(unit_record_path(s.staging, u), record.dump() + "\n");
        rep.converted.push_back(u);
    }
    return rep;
}
#endif

}  // namespace qforge::cluster
