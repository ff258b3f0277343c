// Hostile GGUF input: counts and lengths that claim more than the file holds are refused
// before anything is allocated from them, zero-sized tensors are read without undefined
// behaviour, and a file truncated after it was opened gives an io_error, not a crash.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "hostile/alloc_probe.hpp"
#include "hostile/hostile_support.hpp"
#include "qforge/convert/gguf/decode.hpp"
#include "qforge/io/gguf/reader.hpp"
#include "qforge/io/gguf/writer.hpp"

namespace gg = qforge::gguf;
using namespace qforge::hostile;

namespace {

/// Little-endian GGUF bytes by hand, so a test can break exactly one rule.
struct gguf_bytes {
    std::string b;
    template <class T>
    gguf_bytes& pod(T v) {
        char raw[sizeof(T)];
        std::memcpy(raw, &v, sizeof(T));
        b.append(raw, sizeof(T));
        return *this;
    }
    gguf_bytes& str(const std::string& s) {
        pod<std::uint64_t>(s.size());
        b += s;
        return *this;
    }
    gguf_bytes& head(std::int64_t n_tensors, std::int64_t n_kv, std::uint32_t version = 3) {
        b += "GGUF";
        return pod(version).pod(n_tensors).pod(n_kv);
    }
    gguf_bytes& pad(std::size_t align = 32) {
        while (b.size() % align) b += '\0';
        return *this;
    }
    std::span<const std::byte> span() const { return std::as_bytes(std::span<const char>(b)); }
};

template <class E>
void gguf_refused(const gguf_bytes& g, const char* needle, std::size_t max_alloc = std::size_t{1} << 20) {
    alloc_probe probe;
    CHECK_THROWS_WITH_AS(gg::reader::from_memory(g.span(), "hostile.gguf"), doctest::Contains(needle), E);
    CHECK(probe.largest() <= max_alloc);
}

}  // namespace

TEST_CASE("gguf hostile: counts and lengths beyond the file are refused without allocating them") {
    gguf_refused<qforge::format_error>(gguf_bytes{}.head(INT64_MAX, 0), "tensor count");
    gguf_refused<qforge::format_error>(gguf_bytes{}.head(-1, 0), "tensor count");
    gguf_refused<qforge::format_error>(gguf_bytes{}.head(0, INT64_MAX), "key/value count");
    // A key whose string length claims 2^63 bytes.
    gguf_bytes long_key;
    long_key.head(0, 1).pod<std::uint64_t>(std::uint64_t{1} << 63).b += std::string(64, 'k');
    gguf_refused<qforge::format_error>(long_key, "runs past the end");
    // An array of 2^60 u64 elements.
    gguf_refused<qforge::format_error>(gguf_bytes{}.head(0, 1).str("k").pod<std::uint32_t>(9).pod<std::uint32_t>(10).pod<std::uint64_t>(std::uint64_t{1} << 60),
                                  "runs past the end");
    // An array of 2^40 strings (each at least 8 bytes of length).
    gguf_refused<qforge::format_error>(gguf_bytes{}.head(0, 1).str("k").pod<std::uint32_t>(9).pod<std::uint32_t>(8).pod<std::uint64_t>(std::uint64_t{1} << 40),
                                  "runs past the end");
    // Nested arrays and unknown value types.
    gguf_refused<qforge::format_error>(gguf_bytes{}.head(0, 1).str("k").pod<std::uint32_t>(9).pod<std::uint32_t>(9).pod<std::uint64_t>(0), "nested array");
    gguf_refused<qforge::format_error>(gguf_bytes{}.head(0, 1).str("k").pod<std::uint32_t>(13).pod<std::uint32_t>(0), "invalid GGUF type");
}

TEST_CASE("gguf hostile: tensor tables with impossible sizes are refused") {
    auto one_tensor = [](std::vector<std::int64_t> ne, std::uint32_t type, std::uint64_t offset, std::string name = "t") {
        gguf_bytes g;
        g.head(1, 0).str(name).pod<std::uint32_t>(static_cast<std::uint32_t>(ne.size()));
        for (auto d : ne) g.pod(d);
        g.pod(type).pod(offset).pad();
        return g;
    };
    gguf_refused<qforge::format_error>(one_tensor({INT64_MAX, 4}, 0, 0), "overflows");
    gguf_refused<qforge::format_error>(one_tensor({-1}, 0, 0), "negative");
    gguf_refused<qforge::format_error>(one_tensor({1, 1, 1, 1, 1}, 0, 0), "at most 4");
    gguf_refused<qforge::format_error>(one_tensor({33}, 8, 0), "not a multiple");           // q8_0 blocks of 32
    gguf_refused<qforge::format_error>(one_tensor({32}, 4, 0), "invalid ggml type");        // removed id 4
    gguf_refused<qforge::format_error>(one_tensor({4}, 0, 32), "expected 0");                // offset not the running sum
    gguf_refused<qforge::format_error>(one_tensor({std::int64_t{1} << 40}, 0, 0), "past the end");  // 4 TiB of f32
    gguf_refused<qforge::format_error>(one_tensor({4}, 0, 0, std::string(64, 'n')), "at most 63");
    // Found by tests/fuzz/fuzz_gguf.cpp: ne[0] = 2^62 + 3 f32 elements is 2^64 + 12 bytes, which
    // wrapped to 12; the 12 bytes present then passed and read_f32 tried to allocate 2^62 floats.
    gguf_bytes wrap = one_tensor({(std::int64_t{1} << 62) + 3}, 0, 0);
    wrap.b += std::string(32, '\0');
    gguf_refused<qforge::format_error>(wrap, "overflows");
    gguf_bytes wrap_f64 = one_tensor({(std::int64_t{1} << 61) + 1}, 28, 0);  // f64: 2^64 + 8 bytes
    wrap_f64.b += std::string(32, '\0');
    gguf_refused<qforge::format_error>(wrap_f64, "overflows");
}

TEST_CASE("gguf hostile: a zero-element tensor reads as zero bytes (no memcpy on a null pointer)") {
    // Found by tests/fuzz/fuzz_gguf.cpp: read_bytes/read_f32 passed an empty vector's null
    // data() to memcpy, which UBSan reports.
    gguf_bytes g;
    g.head(1, 0).str("empty").pod<std::uint32_t>(2).pod<std::int64_t>(0).pod<std::int64_t>(4).pod<std::uint32_t>(0).pod<std::uint64_t>(0).pad();
    const auto r = gg::reader::from_memory(g.span(), "empty.gguf");
    REQUIRE(r.tensors().size() == 1);
    CHECK(r.read_bytes(r.tensors()[0]).empty());
    // Decoding may refuse an empty row, but as a qforge error (and without touching memory).
    try {
        const auto decoded = gg::read_f32(r, r.tensors()[0]);
        CHECK(decoded.empty());
    } catch (const qforge::error& e) {
        MESSAGE("read_f32 of a zero-element tensor refused: " << e.what());
    }
}

TEST_CASE("gguf hostile: a file truncated after it was opened gives an io_error, not a crash") {
    scratch_dir dir;
    const auto path = (dir / "t.gguf").string();
    {
        gg::file_writer w(path, {{"general.architecture", gg::value::str("llama")}},
                          {{"a", {64, 4}, gg::ggml_type::f32}});
        std::vector<std::byte> bytes(64 * 4 * 4, std::byte{1});
        w.write_tensor(bytes);
        w.finish();
    }
    const gg::reader r(path);
    std::filesystem::resize_file(path, r.data_offset() + 100);
    CHECK_THROWS_WITH_AS(r.read_bytes(r.tensors()[0]), doctest::Contains("truncated"), qforge::io_error);
    CHECK_THROWS_AS(gg::read_f32(r, r.tensors()[0]), qforge::io_error);
}
