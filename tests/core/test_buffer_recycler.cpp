// buffer_recycler (core/zeroed_buffer.hpp): a buffer given back is taken again, zeroed, by
// the smallest request it holds; what it keeps stays bounded.
#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

#include "qforge/core/zeroed_buffer.hpp"

using namespace qforge;

namespace {

std::vector<std::byte> filled(std::size_t n, std::byte value) { return std::vector<std::byte>(n, value); }

bool all_zero(const std::vector<std::byte>& v) {
    for (std::byte b : v)
        if (b != std::byte{0}) return false;
    return true;
}

}  // namespace

TEST_CASE("buffer_recycler: a given-back buffer is taken again, zeroed, at the size asked") {
    buffer_recycler r(4, 1024);
    std::vector<std::byte> used = filled(8192, std::byte{0x5a});
    const std::byte* storage = used.data();
    r.give(std::move(used));
    CHECK(r.kept() == 1);
    const std::vector<std::byte> again = r.take_zeroed(6000);
    CHECK(again.data() == storage);  // the same pages, not a new allocation
    CHECK(again.size() == 6000);
    CHECK(all_zero(again));
    CHECK(r.kept() == 0);
    // Nothing kept holds the request: a new buffer, zeroed too.
    const std::vector<std::byte> fresh = r.take_zeroed(3000);
    CHECK(fresh.size() == 3000);
    CHECK(all_zero(fresh));
}

TEST_CASE("buffer_recycler: the smallest kept buffer that holds the request is taken") {
    buffer_recycler r(4, 1024);
    std::vector<std::byte> small = filled(2048, std::byte{1}), mid = filled(4096, std::byte{2}), big = filled(16384, std::byte{3});
    const std::byte* mid_storage = mid.data();
    r.give(std::move(big));
    r.give(std::move(small));
    r.give(std::move(mid));
    const std::vector<std::byte> got = r.take_zeroed(3000);
    CHECK(got.data() == mid_storage);
    CHECK(all_zero(got));
    CHECK(r.kept() == 2);
}

TEST_CASE("buffer_recycler: at most max_buffers kept, the smallest dropped; small buffers not kept") {
    buffer_recycler r(2, 1024);
    r.give(filled(512, std::byte{1}));  // below min_bytes
    CHECK(r.kept() == 0);
    std::vector<std::byte> a = filled(2048, std::byte{1}), b = filled(4096, std::byte{2}), c = filled(8192, std::byte{3});
    const std::byte* b_storage = b.data();
    const std::byte* c_storage = c.data();
    r.give(std::move(a));
    r.give(std::move(b));
    r.give(std::move(c));  // full: the 2048-byte buffer goes
    CHECK(r.kept() == 2);
    r.give(filled(1500, std::byte{4}));  // smaller than everything kept: not kept
    CHECK(r.kept() == 2);
    CHECK(r.take_zeroed(1024).data() == b_storage);
    CHECK(r.take_zeroed(1024).data() == c_storage);
    CHECK(r.kept() == 0);
}

TEST_CASE("buffer_recycler: the bytes kept stay within max_bytes, the smallest going first") {
    buffer_recycler r(8, 1024, 10000);
    std::vector<std::byte> a = filled(3000, std::byte{1}), b = filled(4000, std::byte{2}), c = filled(5000, std::byte{3});
    const std::byte* b_storage = b.data();
    const std::byte* c_storage = c.data();
    r.give(std::move(a));
    r.give(std::move(b));
    CHECK(r.kept() == 2);
    r.give(std::move(c));  // 12000 bytes would be kept: the 3000-byte buffer goes
    CHECK(r.kept() == 2);
    r.give(filled(20000, std::byte{4}));  // larger than the cap on its own: not kept
    CHECK(r.kept() == 2);
    CHECK(r.take_zeroed(3500).data() == b_storage);
    CHECK(r.take_zeroed(3500).data() == c_storage);
    r.limit_bytes(2000);
    r.give(filled(3000, std::byte{5}));  // now above the cap on its own
    CHECK(r.kept() == 0);
}

TEST_CASE("buffer_recycler: take gives a kept buffer at the size asked, its storage reused") {
    buffer_recycler r(4, 1024);
    std::vector<std::byte> used = filled(8192, std::byte{0x5a});
    const std::byte* storage = used.data();
    r.give(std::move(used));
    const std::vector<std::byte> again = r.take(6000);
    CHECK(again.data() == storage);
    CHECK(again.size() == 6000);
    CHECK(r.kept() == 0);
    CHECK(r.take(3000).size() == 3000);  // nothing kept holds it: a new buffer
}
