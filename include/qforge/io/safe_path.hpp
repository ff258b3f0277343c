// Path safety for names that come from files (index.json shard names, side-file names): such
// a name may only ever designate a plain file directly inside a folder qforge was given.
//
//   io::check_plain_file_name(shard, "model.safetensors.index.json");  // throws format_error
//   std::string p = io::child_path(folder, shard, index_path);         // + symlink containment
//
// Refused, each with its own message: empty names, "." and "..", any '/' or '\\' (so no
// absolute paths and no climbing), NUL and other control characters, names longer than 255
// bytes (NAME_MAX), and (in child_path) a symlink whose target resolves outside the folder,
// unless symlink_policy::follow_outside is asked for (Hugging Face cache snapshots are symlinks
// into ../../blobs; a caller that opens one on purpose opts in).
#pragma once

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <sys/stat.h>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/io/file.hpp"

namespace qforge::io {

inline constexpr std::size_t max_file_name_bytes = 255;  // NAME_MAX on Linux file systems

enum class symlink_policy { stay_inside, follow_outside };

/// Throws format_error (naming `source`, the file the name came from) unless `name` is a plain
/// file name that can only mean a child of a folder.
QFORGE_DECL void check_plain_file_name(std::string_view name, const std::string& source,
                                       std::string_view what = "file name");

/// realpath() as a string, or an io_error.
QFORGE_DECL std::string real_path(const std::string& path);

/// folder + "/" + name after check_plain_file_name; if that entry is a symlink, its target must
/// resolve inside `folder` (unless `policy` is follow_outside).
QFORGE_DECL std::string child_path(const std::string& folder, std::string_view name, const std::string& source,
                                   symlink_policy policy = symlink_policy::stay_inside);

}  // namespace qforge::io

#if QFORGE_BASE_BODIES_HERE

namespace qforge::io {

QFORGE_DECL void check_plain_file_name(std::string_view name, const std::string& source,
                                       std::string_view what) {
    auto refuse = [&](const std::string& why) {
        std::string shown;
        for (char c : name.substr(0, 80)) shown += (static_cast<unsigned char>(c) < 0x20) ? '?' : c;
        fail<format_error>(source, {}, std::string(what) + " \"" + shown + "\" refused: " + why);
    };
    if (name.empty()) refuse("empty");
    if (name == "." || name == "..") refuse("it names a folder, not a file");
    if (name.size() > max_file_name_bytes)
        refuse("longer than " + std::to_string(max_file_name_bytes) + " bytes");
    for (char c : name) {
        if (c == '\0') refuse("contains a NUL byte");
        if (c == '/' || c == '\\') refuse("contains a path separator (only plain names inside the folder are allowed)");
        if (static_cast<unsigned char>(c) < 0x20) refuse("contains a control character");
    }
}

QFORGE_DECL std::string real_path(const std::string& path) {
    std::unique_ptr<char, decltype(&std::free)> p(::realpath(path.c_str(), nullptr), &std::free);
    if (!p) fail_errno(path, "cannot resolve path", errno);
    return p.get();
}

QFORGE_DECL std::string child_path(const std::string& folder, std::string_view name, const std::string& source,
                                   symlink_policy policy) {
    check_plain_file_name(name, source);
    std::string path = folder + "/" + std::string(name);
    struct stat st {};
    if (policy == symlink_policy::stay_inside && ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
        const std::string root = real_path(folder);
        std::unique_ptr<char, decltype(&std::free)> target(::realpath(path.c_str(), nullptr), &std::free);
        const std::string resolved = target ? target.get() : std::string();
        if (!target || resolved.size() <= root.size() || resolved.compare(0, root.size(), root) != 0 ||
            resolved[root.size()] != '/')
            fail<format_error>(source, {}, "\"" + std::string(name) + "\" is a symlink resolving outside " + folder +
                                               (target ? " (to " + resolved + ")" : " (dangling)") +
                                               "; refused (symlink_policy::follow_outside allows it)");
    }
    return path;
}

}  // namespace qforge::io
#endif
