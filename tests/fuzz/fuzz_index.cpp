// libFuzzer target: model.safetensors.index.json handling. The input is the index file of a
// folder that also holds two valid shards, a symlink resolving outside the folder and a file
// outside it; safetensors::sharded_reader opens the folder in both read modes.
//
// Properties: refusals are qforge::error; when the folder is accepted, every shard that was
// opened is a file inside the folder (never the outside file, whatever the index says), every
// tensor name resolves to a shard that holds it, and total_size is the sum of tensor sizes.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "qforge/io/safetensors/index.hpp"
#include "qforge/io/safetensors/writer.hpp"

namespace fs = std::filesystem;
namespace st = qforge::safetensors;

namespace {

void make_shard(const fs::path& p, const std::vector<std::string>& names) {
    std::vector<st::tensor_spec> specs;
    for (const auto& n : names) specs.push_back({n, qforge::dtype::U8, {3}});
    st::writer w(p.string(), specs, st::default_metadata(), {.sync = false});
    for (const auto& n : names) w.write(n, std::as_bytes(std::span<const char>("xyz", 3)));
    w.finish();
}

struct folder {
    fs::path root;
    fs::path model;
    std::string real_model;
    folder() {
        // /dev/shm when available: the index is rewritten on every input.
        const fs::path base = fs::exists("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
        root = base / ("qforge-fuzz-index-" + std::to_string(::getpid()));
        fs::remove_all(root);
        model = root / "model";
        fs::create_directories(model);
        make_shard(model / "model-00001-of-00002.safetensors", {"a", "b"});
        make_shard(model / "model-00002-of-00002.safetensors", {"c", "lm_head.weight"});
        make_shard(root / "outside.safetensors", {"a", "secret"});
        fs::create_symlink("../outside.safetensors", model / "link.safetensors");
        real_model = fs::canonical(model).string();
    }
    ~folder() {
        std::error_code ec;
        fs::remove_all(root, ec);
    }
};

void check(const st::sharded_reader& r, const std::string& real_model) {
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < r.shard_count(); ++i) {
        const std::string p = fs::canonical(r.shard(i).path()).string();
        if (p.compare(0, real_model.size() + 1, real_model + "/") != 0) std::abort();  // escaped!
    }
    for (const auto& name : r.tensor_names()) {
        const auto* s = r.shard_of(name);
        if (!s || !s->contains(name)) std::abort();
        total += r.find(name)->size();
        (void)r.read_tensor(name);
    }
    if (total != r.total_size()) std::abort();
    if (r.contains("secret")) std::abort();  // only the outside file holds it
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const folder f;
    {
        std::ofstream out(f.model / "model.safetensors.index.json", std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    }
    for (const st::read_mode mode : {st::read_mode::mmap, st::read_mode::pread}) {
        try {
            const st::sharded_reader r(f.model.string(), {.mode = mode, .limits = {.max_tensors = 1024}});
            check(r, f.real_model);
        } catch (const qforge::error&) {
        }
    }
    return 0;
}
