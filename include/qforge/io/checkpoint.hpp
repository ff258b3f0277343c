// Hugging Face checkpoint folders: config.json and the files a converter carries over as-is.
//
//   json cfg = io::read_config(src);                            // src/config.json, keys in order
//   cfg["quantization_config"] = json::object({{"bits", 4}});   // unknown keys stay where they were
//   io::atomic_output_dir out(dst);
//   io::write_config(out.path(), cfg);                          // indent 2 + "\n"
//   io::copy_side_files(src, out.path());                       // tokenizer etc., byte for byte
//   ... weights ...; out.commit();
//
// config.json is written the way transformers shapes it (json.dumps(indent=2) + "\n", raw
// UTF-8) but with the keys in their original order, so a diff against the source shows only
// what the converter changed. Side files are only the known names below (and chat_template.*):
// the list is fixed here, so no name read from a file decides what is copied; a side file that
// is a symlink resolving outside the source folder is refused unless symlink_policy allows it.
#pragma once

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/error.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safe_path.hpp"

namespace qforge::io {

/// Tokenizer and generation files copied byte for byte when present.
inline constexpr std::array<std::string_view, 9> side_file_names = {
    "tokenizer.json",   "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json",
    "generation_config.json", "vocab.json",     "merges.txt",      "added_tokens.json",
    "preprocessor_config.json",
};

/// Side files plus chat_template.* are what copy_side_files carries over.
inline bool is_side_file(std::string_view name) {
    if (std::find(side_file_names.begin(), side_file_names.end(), name) != side_file_names.end()) return true;
    return name.starts_with("chat_template.");
}

/// Largest JSON file qforge reads whole (config.json, index.json...): 256 MiB.
inline constexpr std::uint64_t max_json_file_bytes = std::uint64_t{256} << 20;

/// Reads and parses a JSON file; errors name the file.
inline json read_json_file(const std::string& path, const json_limits& limits = {}) {
    const std::string text = read_file(path, max_json_file_bytes);
    return json::parse(text, path, limits);
}

/// Writes `value` as indented JSON plus a final newline (create, write, fsync, close).
inline void write_json_file(const std::string& path, const json& value, const json_dump_options& options = {.indent = 2}) {
    write_file(path, value.dump(options) + "\n");
}

inline json read_config(const std::string& folder) {
    json cfg = read_json_file(folder + "/config.json");
    if (!cfg.is_object())
        fail<format_error>(folder + "/config.json", {}, "config.json holds " + std::string(json::kind_name(cfg.type())) +
                                                            ", expected an object");
    return cfg;
}

inline void write_config(const std::string& folder, const json& config) {
    write_json_file(folder + "/config.json", config);
}

/// Copies the side files present in `from` into `to`; returns their names (sorted).
inline std::vector<std::string> copy_side_files(const std::string& from, const std::string& to,
                                                symlink_policy policy = symlink_policy::stay_inside) {
    std::vector<std::string> names;
    for (const std::string& name : list_directory(from))
        if (is_side_file(name)) names.push_back(name);
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
        const std::string src = child_path(from, name, from, policy);
        if (is_directory(src)) fail<format_error>(src, {}, "expected a file, found a folder");
        copy_file(src, child_path(to, name, to));
    }
    return names;
}

}  // namespace qforge::io
