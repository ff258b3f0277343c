// libFuzzer target: gguf::reader on arbitrary bytes (in memory and through a file), then the
// GGUF writer on whatever the reader accepted.
//
// Properties: refusals are qforge::error; the in-memory and file readers agree; every tensor
// of an accepted file can be read (and decoded, for the types qforge decodes) without reading
// out of bounds; re-writing an accepted file and reading it back gives the same header bytes
// and the same tensor bytes.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/gguf/decode.hpp"
#include "qforge/io/gguf/reader.hpp"
#include "qforge/io/gguf/writer.hpp"

namespace fs = std::filesystem;
namespace gg = qforge::gguf;

namespace {

std::vector<gg::tensor_decl> decls_of(const gg::reader& r) {
    std::vector<gg::tensor_decl> d;
    for (const auto& t : r.tensors()) d.push_back({t.name, t.ne, t.type});
    return d;
}

std::vector<std::byte> header_bytes(const gg::reader& r) {
    std::vector<std::uint64_t> offsets;
    return gg::encode_header(r.path(), r.metadata(), decls_of(r), offsets);
}

struct scratch {
    fs::path dir;
    int memfd = -1;
    scratch() {
        const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
        dir = base / ("qforge-fuzz-gguf-" + std::to_string(::getpid()));
        fs::remove_all(dir);
        fs::create_directories(dir);
        memfd = ::memfd_create("fuzz-gguf", 0);
        if (memfd < 0) std::abort();
    }
    ~scratch() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    std::string put(const std::uint8_t* data, std::size_t size) const {
        if (::ftruncate(memfd, 0) != 0) std::abort();
        if (size && ::pwrite(memfd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
        return "/proc/self/fd/" + std::to_string(memfd);
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const scratch s;
    const auto bytes = std::as_bytes(std::span<const std::uint8_t>(data, size));
    bool mem_ok = false;
    bool file_ok = false;
    try {
        const gg::reader r = gg::reader::from_memory(bytes, "fuzz.gguf");
        mem_ok = true;
        for (const auto& t : r.tensors()) {
            if (r.data_offset() + t.offset + t.nbytes > size) std::abort();
            const auto raw = r.read_bytes(t);
            if (raw.size() != t.nbytes) std::abort();
            try {
                const auto f = gg::read_f32(r, t);
                if (f.size() != static_cast<std::size_t>(t.numel())) std::abort();
            } catch (const qforge::unsupported_error&) {
            }
        }
        // Re-write what was accepted, read it back.
        const std::string out = (s.dir / "out.gguf").string();
        try {
            gg::file_writer w(out, r.metadata(), decls_of(r));
            for (const auto& t : r.tensors()) w.write_tensor(r.read_bytes(t));
            w.finish();
        } catch (const qforge::error&) {
            return 0;  // something the writer will not produce (e.g. an old version's quirk)
        }
        const gg::reader back(out);
        if (header_bytes(back) != header_bytes(r)) std::abort();
        if (back.tensors().size() != r.tensors().size()) std::abort();
        for (std::size_t i = 0; i < r.tensors().size(); ++i)
            if (back.read_bytes(back.tensors()[i]) != r.read_bytes(r.tensors()[i])) std::abort();
    } catch (const qforge::error&) {
    }
    try {
        const gg::reader f(s.put(data, size));
        file_ok = true;
        for (const auto& t : f.tensors()) (void)f.read_bytes(t);
    } catch (const qforge::error&) {
    }
    if (mem_ok != file_ok) std::abort();
    return 0;
}
