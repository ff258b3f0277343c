// libFuzzer target: safetensors::reader on arbitrary file bytes, in both read modes.
//
// The bytes are put in a memfd and opened through /proc/self/fd/N, so the reader runs its
// real open/fstat/mmap/pread path without touching the disk. Properties checked:
//  - refusals are qforge::error, and mmap and pread modes refuse or accept the same files;
//  - an accepted file's tensors lie inside the file, contiguous, sizes = dtype x shape;
//  - view() bytes (mmap) and read_tensor() bytes (pread) are identical, and every byte of
//    every view is touched (an out-of-range span would fault here);
//  - writing the accepted tensors back with safetensors::writer and reading that file gives
//    the same tensors (names, dtypes, shapes, bytes).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "qforge/io/safetensors/reader.hpp"
#include "qforge/io/safetensors/writer.hpp"

#include "../support/memfile.hpp"

namespace st = qforge::safetensors;

namespace {

using qforge_fuzz::memfile;

// Small limits so that claims of many tensors / huge shapes are refused quickly; the rules
// they guard are the same code as with the defaults.
constexpr st::reader_limits limits{.max_header_bytes = 1 << 20, .max_tensors = 4096, .max_rank = 8,
                                   .max_elements = std::uint64_t{1} << 24};

void same_tensors(const st::reader& a, const st::reader& b) {
    if (a.tensors().size() != b.tensors().size()) std::abort();
    for (std::size_t i = 0; i < a.tensors().size(); ++i) {
        const auto& x = a.tensors()[i];
        const auto* y = b.find(x.name);
        if (!y || y->type != x.type || y->shape != x.shape || y->size() != x.size()) std::abort();
        if (a.read_tensor(x.name).bytes != b.read_tensor(x.name).bytes) std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const memfile input("fuzz-input");
    static const memfile output("fuzz-output");
    input.assign(data, size);

    bool mmap_ok = false;
    bool pread_ok = false;
    try {
        const st::reader r(input.path, st::read_mode::mmap, limits);
        mmap_ok = true;
        std::uint64_t expected = 0;
        unsigned sum = 0;
        for (const auto& t : r.tensors()) {
            if (t.begin != expected || r.data_offset() + t.end > r.file_size()) std::abort();
            expected = t.end;
            const qforge::tensor_view v = r.view(t.name);
            if (v.bytes.size() != t.size()) std::abort();
            for (std::byte b : v.bytes) sum += static_cast<unsigned>(b);
            const qforge::owned_tensor copy = r.read_tensor(t.name);
            if (copy.bytes.size() != v.bytes.size() ||
                (!v.bytes.empty() && std::memcmp(copy.bytes.data(), v.bytes.data(), v.bytes.size()) != 0))
                std::abort();
        }
        if (r.data_offset() + expected != r.file_size()) std::abort();
        (void)sum;

        // Write the accepted tensors back and read them again.
        std::vector<st::tensor_spec> specs;
        for (const auto& t : r.tensors()) specs.push_back({t.name, t.type, t.shape});
        st::metadata_t meta = r.metadata();
        try {
            st::writer w("/proc/self/fd/" + std::to_string(output.fd), specs, meta,
                         st::writer_options{.sync = false});
            for (const auto& t : w.order()) w.write(r.view(t.name));
            w.finish();
        } catch (const qforge::error&) {
            return 0;  // e.g. a header the writer would make larger than the limit
        }
        const st::reader back("/proc/self/fd/" + std::to_string(output.fd), st::read_mode::mmap);
        same_tensors(r, back);
        if (back.metadata() != meta) std::abort();
    } catch (const qforge::error&) {
    }
    try {
        const st::reader p(input.path, st::read_mode::pread, limits);
        pread_ok = true;
        for (const auto& t : p.tensors()) (void)p.read_tensor(t.name);
    } catch (const qforge::error&) {
    }
    if (mmap_ok != pread_ok) std::abort();
    return 0;
}
