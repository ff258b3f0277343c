// Helpers shared by the hostile-input tests: scratch folders, raw file bytes, whole-tree
// snapshots (to prove a failed conversion left a destination exactly as it was), and a
// safetensors byte builder that does NOT go through qforge's writer, so a test can make files
// that break exactly one rule.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace qforge::hostile {

namespace fs = std::filesystem;

/// Where memory-backed scratch folders go: /dev/shm when it is a usable folder (fsync there
/// costs nothing, so sweeps over hundreds of conversions stay fast), else the temp dir.
inline fs::path memory_temp_dir() {
    std::error_code ec;
    if (fs::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
    return fs::temp_directory_path();
}

/// A fresh folder under the system temp dir (or memory_temp_dir()), removed (with everything
/// in it) at scope exit.
class scratch_dir {
public:
    explicit scratch_dir(std::string_view tag = "hostile", bool in_memory = false) {
        static std::atomic<unsigned> counter{0};
        path_ = (in_memory ? memory_temp_dir() : fs::temp_directory_path()) /
                ("qforge-" + std::string(tag) + "-" + std::to_string(::getpid()) + "-" +
                 std::to_string(counter++));
        fs::remove_all(path_);
        fs::create_directories(path_);
    }
    scratch_dir(const scratch_dir&) = delete;
    scratch_dir& operator=(const scratch_dir&) = delete;
    ~scratch_dir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    const fs::path& path() const { return path_; }
    fs::path operator/(const fs::path& p) const { return path_ / p; }

private:
    fs::path path_;
};

inline void write_bytes(const fs::path& p, std::string_view bytes) {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

inline std::string le64(std::uint64_t v) {
    std::string s(8, '\0');
    for (int i = 0; i < 8; ++i) s[static_cast<std::size_t>(i)] = static_cast<char>(v >> (8 * i));
    return s;
}

/// u64 LE length + header (padded with spaces to a multiple of 8 unless `pad` is false) + data.
inline std::string safetensors_bytes(std::string header, std::string_view data, bool pad = true) {
    if (pad)
        while (header.size() % 8) header += ' ';
    return le64(header.size()) + header + std::string(data);
}

/// Every regular file and symlink under `root`, relative path -> bytes (or "-> target").
/// Two equal snapshots mean the tree is byte for byte the same.
inline std::map<std::string, std::string> snapshot(const fs::path& root) {
    std::map<std::string, std::string> out;
    if (!fs::exists(fs::symlink_status(root))) return out;
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator();
         ++it) {
        const auto rel = fs::relative(it->path(), root).string();
        if (it->is_symlink())
            out[rel] = "-> " + fs::read_symlink(it->path()).string();
        else if (it->is_regular_file())
            out[rel] = read_bytes(it->path());
        else if (it->is_directory())
            out[rel + "/"] = "";
    }
    return out;
}

}  // namespace qforge::hostile
