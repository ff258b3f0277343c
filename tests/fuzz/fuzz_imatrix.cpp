// libFuzzer target: gguf::importance_matrix (llama.cpp imatrix, GGUF and legacy .dat) on
// arbitrary bytes, in memory and through a file.
//
// Properties: refusals are qforge::error; the in-memory and file readers agree on what they
// accept, on the metadata and on every entry's values; every accepted entry's values are finite
// and >= 0, GGUF entries hold n_mat * n_per_row of them, and fits() agrees with that shape.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "qforge/io/gguf/imatrix.hpp"

#include "../support/memfile.hpp"

namespace gg = qforge::gguf;

namespace {

struct memfd_file : qforge_fuzz::memfile {
    memfd_file() : memfile("fuzz-imatrix") {}
};

/// Everything an opened matrix yields, or nothing when it (or one of its entries) is refused.
struct outcome {
    bool legacy = false;
    std::vector<std::string> datasets;
    std::uint32_t chunk_count = 0, chunk_size = 0;
    std::vector<std::string> names;
    std::vector<gg::imatrix_entry> entries;
};

std::optional<outcome> run(const gg::importance_matrix& m) {
    outcome o{m.legacy(), m.datasets(), m.chunk_count(), m.chunk_size(), m.names(), {}};
    if (o.names.size() != m.size()) std::abort();
    for (const auto& n : o.names) {
        std::optional<gg::imatrix_entry> e;
        try {
            e = m.load(n);
        } catch (const qforge::error&) {
            return std::nullopt;
        }
        if (!e) std::abort();
        for (float v : e->values)
            if (!(v >= 0.0f) || !std::isfinite(v)) std::abort();
        if (!m.legacy()) {
            if (static_cast<std::int64_t>(e->values.size()) != e->n_per_row * e->n_mat) std::abort();
            if (!e->fits(e->n_per_row, e->n_mat) || e->fits(e->n_per_row + 1, e->n_mat)) std::abort();
            if (static_cast<std::int64_t>(e->counts.size()) != e->n_mat) std::abort();
        }
        o.entries.push_back(std::move(*e));
    }
    return o;
}

bool same(const outcome& a, const outcome& b) {
    if (a.legacy != b.legacy || a.datasets != b.datasets || a.chunk_count != b.chunk_count ||
        a.chunk_size != b.chunk_size || a.names != b.names || a.entries.size() != b.entries.size())
        return false;
    for (std::size_t i = 0; i < a.entries.size(); ++i)
        if (a.entries[i].values != b.entries[i].values || a.entries[i].counts != b.entries[i].counts) return false;
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const memfd_file f;
    std::optional<outcome> mem, file;
    try {
        mem = run(gg::importance_matrix::from_memory(std::as_bytes(std::span<const std::uint8_t>(data, size)), "fuzz.imatrix"));
    } catch (const qforge::error&) {
    }
    try {
        file = run(gg::importance_matrix::open(f.put(data, size)));
    } catch (const qforge::error&) {
    }
    if (mem.has_value() != file.has_value()) std::abort();
    if (mem && !same(*mem, *file)) std::abort();
    return 0;
}
