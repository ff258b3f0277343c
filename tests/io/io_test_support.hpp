// Helpers shared by the io tests: a scratch folder and raw file builders.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "qforge/io/file.hpp"

namespace qforge_test {

/// A fresh folder under $TMPDIR (or /tmp), removed with everything in it at scope exit.
struct temp_dir {
    std::string path;
    temp_dir() {
        const char* base = std::getenv("TMPDIR");
        std::string tmpl = std::string(base && *base ? base : "/tmp") + "/qforge-io-test-XXXXXX";
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
        path = tmpl;
    }
    ~temp_dir() { qforge::io::remove_tree_noexcept(path); }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    std::string operator/(const std::string& name) const { return path + "/" + name; }
};

inline void put_file(const std::string& path, const std::string& bytes) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!f) throw std::runtime_error("cannot write " + path);
}

inline std::string get_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

/// 8-byte little-endian length + header text (as given, no padding) + data.
inline std::string safetensors_bytes(const std::string& header, const std::string& data,
                                     std::uint64_t claimed_length = UINT64_MAX) {
    std::uint64_t n = claimed_length == UINT64_MAX ? header.size() : claimed_length;
    std::string out(8, '\0');
    for (int k = 0; k < 8; ++k, n >>= 8) out[static_cast<std::size_t>(k)] = static_cast<char>(n & 0xFF);
    return out + header + data;
}

inline std::span<const std::byte> as_bytes(const std::string& s) {
    return std::as_bytes(std::span<const char>(s));
}

}  // namespace qforge_test
