#include <doctest/doctest.h>

#include <cerrno>
#include <string>

#include "io_test_support.hpp"
#include "qforge/io/fault_injector.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/mapped_file.hpp"

using namespace qforge;
using qforge_test::get_file;
using qforge_test::put_file;
using qforge_test::temp_dir;

TEST_CASE("file errors are io_errors naming the file and the errno text") {
    temp_dir dir;
    CHECK_THROWS_WITH_AS(io::input_file(dir / "missing"),
                         doctest::Contains("missing: cannot open for reading: No such file or directory (errno 2)"),
                         io_error);
    CHECK_THROWS_WITH_AS(io::output_file::create(dir / "no/such/dir"), doctest::Contains("cannot create"), io_error);
    CHECK_THROWS_WITH_AS(io::input_file(dir.path), doctest::Contains("not a regular file"), io_error);
    put_file(dir / "x", "abc");
    CHECK_THROWS_WITH_AS(io::output_file::create(dir / "x", true), doctest::Contains("File exists"), io_error);
}

TEST_CASE("output_file: sequential and positional writes; write_file; copy_file") {
    temp_dir dir;
    {
        auto f = io::output_file::create(dir / "o");
        f.write("hello ");
        f.write("world");
        f.write_at(0, qforge_test::as_bytes("J"));
        CHECK(f.position() == 11);
        f.sync();
        f.close();
    }
    CHECK(get_file(dir / "o") == "Jello world");
    std::string big(5 << 20, '\0');
    for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
    io::write_file(dir / "big", big);
    io::copy_file(dir / "big", dir / "copy");
    CHECK(get_file(dir / "copy") == big);
    io::write_file(dir / "empty", "");
    io::copy_file(dir / "empty", dir / "empty2");
    CHECK(get_file(dir / "empty2").empty());
}

TEST_CASE("read_file refuses files over the limit before allocating") {
    temp_dir dir;
    put_file(dir / "f", std::string(100, 'x'));
    CHECK(io::read_file(dir / "f").size() == 100);
    CHECK_THROWS_WITH_AS(io::read_file(dir / "f", 99), doctest::Contains("exceeds the limit of 99"), limit_error);
}

TEST_CASE("input_file::read_at: short read is an io_error naming the tensor") {
    temp_dir dir;
    put_file(dir / "f", "0123456789");
    io::input_file in(dir / "f");
    std::string buf(4, '\0');
    in.read_at(6, std::as_writable_bytes(std::span<char>(buf)));
    CHECK(buf == "6789");
    CHECK_THROWS_WITH_AS(in.read_at(8, std::as_writable_bytes(std::span<char>(buf)), "t0"),
                         doctest::Contains("tensor 't0': unexpected end of file"), io_error);
}

TEST_CASE("mapped_file: maps, releases pages, handles empty files") {
    temp_dir dir;
    std::string content(3 * 4096 + 17, '\0');
    for (std::size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i % 251);
    put_file(dir / "m", content);
    io::mapped_file m(dir / "m");
    REQUIRE(m.size() == content.size());
    CHECK(std::string(reinterpret_cast<const char*>(m.bytes().data()), m.size()) == content);
    m.release(0, m.size());
    m.release(5, 10);
    m.release(m.size() + 10, 5);
    CHECK(std::string(reinterpret_cast<const char*>(m.bytes().data()), m.size()) == content);  // paged back in
    io::mapped_file moved = std::move(m);
    CHECK(moved.size() == content.size());
    CHECK(m.size() == 0);
    put_file(dir / "e", "");
    io::mapped_file e(dir / "e");
    CHECK(e.bytes().empty());
}

TEST_CASE("remove_tree removes nested folders and symlinks, not their targets") {
    temp_dir dir, keep;
    put_file(keep / "target", "keep me");
    io::make_directory(dir / "t");
    io::make_directory(dir / "t/sub");
    put_file(dir / "t/sub/f", "x");
    REQUIRE(::symlink(keep.path.c_str(), (dir / "t/link").c_str()) == 0);
    io::remove_tree(dir / "t");
    CHECK_FALSE(io::path_exists(dir / "t"));
    CHECK(get_file(keep / "target") == "keep me");
    io::remove_tree(dir / "never-existed");  // absent is fine
}

TEST_CASE("every output operation kind is routed through the fault hook") {
    temp_dir dir;
    const std::pair<io::file_op, std::string> kinds[] = {
        {io::file_op::create, "cannot create"}, {io::file_op::write, "write failed"},
        {io::file_op::fsync, "fsync failed"},   {io::file_op::rename, "cannot rename"},
        {io::file_op::mkdir, "cannot create folder"}, {io::file_op::remove, "cannot remove"},
    };
    for (const auto& k : kinds) {
        CAPTURE(k.second);
        io::fault_injector::arm(1, EIO, static_cast<unsigned>(k.first));
        try {
            io::write_file(dir / "f", "data");
            io::rename_path(dir / "f", dir / "g");
            io::make_directory(dir / "d");
            io::remove_tree(dir / "d");
            io::remove_file(dir / "g");
            FAIL("no fault injected");
        } catch (const io_error& e) {
            CHECK(std::string(e.what()).find(k.second) != std::string::npos);
            CHECK(std::string(e.what()).find("Input/output error") != std::string::npos);
        }
        CHECK(io::fault_injector::fired());
        io::fault_injector::reset();
        io::remove_tree(dir / "f");
        io::remove_tree(dir / "g");
        io::remove_tree(dir / "d");
    }
}
