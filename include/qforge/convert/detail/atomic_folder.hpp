// An output folder that appears complete or not at all.
//
// Everything is written into "<dst>.qforge-tmp-<pid>" next to the destination; commit()
// fsyncs it and renames it into place (moving an existing destination aside first when
// overwriting, and removing it only after the new folder is in place). Destroying an
// uncommitted folder removes the temporary folder, so an exception anywhere leaves nothing
// behind and any previous destination untouched.
#pragma once

#include <string>

#include <unistd.h>

#include "qforge/core/error.hpp"
#include "qforge/io/file.hpp"

namespace qforge::detail {

class atomic_folder {
public:
    atomic_folder(std::string dst, bool overwrite) : dst_(strip_slash(std::move(dst))) {
        if (io::path_exists(dst_) && !overwrite)
            fail<io_error>(dst_, {}, "destination exists (pass --overwrite to replace it)");
        if (io::path_exists(dst_) && !io::is_directory(dst_))
            fail<io_error>(dst_, {}, "destination exists and is not a folder");
        tmp_ = dst_ + ".qforge-tmp-" + std::to_string(::getpid());
        if (io::path_exists(tmp_)) io::remove_tree(tmp_);  // a crashed run of ours with this pid
        io::make_directory(tmp_);
    }
    atomic_folder(const atomic_folder&) = delete;
    atomic_folder& operator=(const atomic_folder&) = delete;
    ~atomic_folder() {
        if (committed_) return;
        try {
            io::remove_tree(tmp_);
        } catch (...) {  // nothing sensible to do in a destructor; the name says what it is
        }
    }

    /// Where to write the files.
    const std::string& path() const noexcept { return tmp_; }
    const std::string& destination() const noexcept { return dst_; }

    void commit() {
        io::sync_directory(tmp_);
        std::string old;
        if (io::path_exists(dst_)) {
            old = dst_ + ".qforge-old-" + std::to_string(::getpid());
            if (io::path_exists(old)) io::remove_tree(old);
            io::rename_path(dst_, old);
        }
        try {
            io::rename_path(tmp_, dst_);
        } catch (...) {
            if (!old.empty()) io::rename_path(old, dst_);  // put the previous destination back
            throw;
        }
        committed_ = true;
        io::sync_directory(parent_of(dst_));
        if (!old.empty()) io::remove_tree(old);
    }

private:
    static std::string strip_slash(std::string p) {
        while (p.size() > 1 && p.back() == '/') p.pop_back();
        if (p.empty()) fail<io_error>({}, {}, "empty destination path");
        return p;
    }
    static std::string parent_of(const std::string& p) {
        const auto slash = p.rfind('/');
        if (slash == std::string::npos) return ".";
        return slash == 0 ? "/" : p.substr(0, slash);
    }

    std::string dst_;
    std::string tmp_;
    bool committed_ = false;
};

}  // namespace qforge::detail
