// A real full disk: conversions onto a tiny tmpfs mounted by the test (needs root and mount
// permission; otherwise skipped with a visible MESSAGE). For every size from one page up to
// the first size that fits, the conversion must either refuse with an io_error (ENOSPC) leaving
// the file system as it was, or produce exactly the checkpoint it produces on a roomy disk.
#include <doctest/doctest.h>

#include <sys/mount.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "hostile/hostile_checkpoint.hpp"
#include "hostile/hostile_support.hpp"
#include "qforge/convert/converter.hpp"

using namespace qforge::hostile;

namespace {

/// A tmpfs of `kib` KiB mounted on a fresh folder; mounted() is false when not permitted.
class small_tmpfs {
public:
    small_tmpfs(const fs::path& where, std::size_t kib) : dir_(where) {
        fs::create_directories(dir_);
        const std::string opts = "size=" + std::to_string(kib) + "k,mode=0755";
        if (::mount("qforge-hostile", dir_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) == 0)
            mounted_ = true;
        else
            why_ = std::strerror(errno);
    }
    ~small_tmpfs() {
        if (mounted_) ::umount2(dir_.c_str(), MNT_DETACH);
        std::error_code ec;
        fs::remove(dir_, ec);
    }
    small_tmpfs(const small_tmpfs&) = delete;
    small_tmpfs& operator=(const small_tmpfs&) = delete;
    bool mounted() const { return mounted_; }
    const std::string& why() const { return why_; }
    const fs::path& path() const { return dir_; }

private:
    fs::path dir_;
    bool mounted_ = false;
    std::string why_;
};

bool can_mount(const fs::path& where) {
    if (::geteuid() != 0) {
        MESSAGE("SKIPPED full-disk test: not root (a tmpfs cannot be mounted)");
        return false;
    }
    small_tmpfs probe(where / "probe", 64);
    if (!probe.mounted()) MESSAGE("SKIPPED full-disk test: mounting a tmpfs failed: " << probe.why());
    return probe.mounted();
}

}  // namespace

TEST_CASE("full disk: a conversion onto a tmpfs too small refuses cleanly at every size") {
    scratch_dir root("fulldisk");
    if (!can_mount(root.path())) return;
    const fs::path src = root / "src";
    qforge::write_demo_checkpoint(src.string(), tiny_demo());
    const fs::path reference = root / "reference";
    qforge::convert(src.string(), reference.string(), tiny_gptq());
    const auto expected = snapshot(reference);

    int refused = 0;
    bool fitted = false;
    for (std::size_t kib = 4; kib <= 1024 && !fitted; kib += 4) {
        CAPTURE(kib);
        small_tmpfs disk(root / "disk", kib);
        REQUIRE(disk.mounted());
        const fs::path dst = disk.path() / "out";
        try {
            qforge::convert(src.string(), dst.string(), tiny_gptq());
            fitted = true;
            CHECK(snapshot(dst) == expected);
            CHECK(entries_except(disk.path(), {"out"}).empty());
        } catch (const qforge::io_error& e) {
            ++refused;
            CHECK(std::string(e.what()).find("No space left") != std::string::npos);
            CHECK(fs::is_empty(disk.path()));  // no temporary folder, no partial output
        }
    }
    CHECK(fitted);
    CHECK(refused > 3);
    MESSAGE("full disk: " << refused << " tmpfs sizes refused with ENOSPC and left empty, then the output fitted");
}

TEST_CASE("full disk: overwriting an old checkpoint on a full tmpfs leaves it intact") {
    scratch_dir root("fulldisk-old");
    if (!can_mount(root.path())) return;
    const fs::path src = root / "src";
    qforge::write_demo_checkpoint(src.string(), tiny_demo());
    auto old_opts = tiny_gptq();
    old_opts.rules.default_scheme->bits = 8;
    const fs::path old_ref = root / "old";
    qforge::convert(src.string(), old_ref.string(), old_opts);

    int refused = 0;
    bool fitted = false;
    for (std::size_t kib = 64; kib <= 2048 && !fitted; kib += 8) {
        CAPTURE(kib);
        small_tmpfs disk(root / "disk", kib);
        REQUIRE(disk.mounted());
        const fs::path dst = disk.path() / "out";
        try {
            fs::copy(old_ref, dst, fs::copy_options::recursive);
        } catch (const fs::filesystem_error&) {
            continue;  // not even the old checkpoint fits yet
        }
        const auto before = snapshot(dst);
        auto opts = tiny_gptq();
        opts.overwrite = true;
        try {
            qforge::convert(src.string(), dst.string(), opts);
            fitted = true;
            CHECK(snapshot(dst) != before);
            CHECK(entries_except(disk.path(), {"out"}).empty());
        } catch (const qforge::io_error& e) {
            ++refused;
            CHECK(std::string(e.what()).find("No space left") != std::string::npos);
            CHECK(snapshot(dst) == before);
            CHECK(entries_except(disk.path(), {"out"}).empty());
        }
    }
    CHECK(fitted);
    CHECK(refused > 0);
    MESSAGE("full disk with an old checkpoint: " << refused << " sizes refused, old checkpoint intact each time");
}
