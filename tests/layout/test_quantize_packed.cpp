// quantize_packed() makes a layout's tensors band by band. Its bytes must be exactly those of
// layout.pack(quantize(...)) for every bit width, symmetry, GPTQ format, executor and a shape
// that spans several bands with a short last one; its SNR must be quantize()'s; and a refusal
// must name the weight's row, not the band's.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "qforge/core/error.hpp"
#include "qforge/core/parallel.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/detail/pack_band.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/layout/quantize_packed.hpp"
#include "qforge/quant/quantize.hpp"
#include "support/synthetic.hpp"

using namespace qforge;

namespace {

template <class Layout>
void expect_same_as_pack(const Layout& layout, const tensor_view& v, quant_options o, const std::string& what) {
    thread_pool one(1), two(2);
    snr_sums ref_snr;
    const auto ref = layout.pack(quantize(v, o, {}, &ref_snr), "m.proj");
    for (int threads : {0, 1, 2}) {
        snr_sums snr{-1, -1};
        const executor ex = threads == 0 ? executor{} : threads == 1 ? one.executor() : two.executor();
        const auto got = quantize_packed(v, o, layout, "m.proj", ex, &snr);
        REQUIRE(got.size() == ref.size());
        for (std::size_t i = 0; i < ref.size(); ++i) {
            INFO(what << " tensor " << ref[i].name << " threads " << threads);
            CHECK(got[i].name == ref[i].name);
            CHECK(got[i].type == ref[i].type);
            CHECK(got[i].shape == ref[i].shape);
            CHECK(got[i].bytes == ref[i].bytes);
        }
        CHECK(snr.signal == ref_snr.signal);
        CHECK(snr.error == ref_snr.error);

        // The same bytes when every band's rows come through a band_source (the converter's
        // pread), each row read exactly once.
        std::atomic<std::int64_t> rows_read{0};
        const auto row_bytes = v.bytes.size() / static_cast<std::size_t>(v.shape[0]);
        const band_source copy_rows = [&](std::int64_t r0, std::int64_t r1, std::span<std::byte> into) {
            if (into.size() != static_cast<std::size_t>(r1 - r0) * row_bytes) throw std::logic_error("wrong band size");
            std::memcpy(into.data(), v.bytes.data() + static_cast<std::size_t>(r0) * row_bytes, into.size());
            rows_read += r1 - r0;
        };
        snr_sums sourced_snr;
        const auto sourced = quantize_packed(v, o, layout, "m.proj", ex, &sourced_snr, copy_rows);
        CHECK(rows_read.load() == v.shape[0]);
        REQUIRE(sourced.size() == ref.size());
        for (std::size_t i = 0; i < ref.size(); ++i) CHECK(sourced[i].bytes == ref[i].bytes);
        CHECK(sourced_snr.signal == ref_snr.signal);
        CHECK(sourced_snr.error == ref_snr.error);

        // The same bytes through a packed_workspace whose recycled storage and band buffers
        // still hold the last call's bytes (a converter's tensors given back once written).
        packed_workspace ws{buffer_recycler(8, 1), {}};
        for (int call = 0; call < 2; ++call) {
            auto kept = quantize_packed(v, o, layout, "m.proj", ex, nullptr, copy_rows, &ws);
            REQUIRE(kept.size() == ref.size());
            for (std::size_t i = 0; i < ref.size(); ++i) CHECK(kept[i].bytes == ref[i].bytes);
            for (owned_tensor& t : kept) {
                std::fill(t.bytes.begin(), t.bytes.end(), std::byte{0xff});
                ws.outputs.give(std::move(t.bytes));
            }
            CHECK(ws.outputs.kept() == ref.size());
        }
    }
}

}  // namespace

TEST_CASE("quantize_packed equals pack(quantize) for GPTQ: bits, symmetry, v1/v2, several bands") {
    // 2048 columns -> bands of 128 rows: 288 rows are two full bands and a 32-row tail.
    const std::int64_t rows = 288, cols = 2048;
    REQUIRE(detail::band_rows(cols) == 128);
    const auto w = testing::to_bf16(testing::student_t_floats(static_cast<std::size_t>(rows * cols), 4242));
    const tensor_view v = testing::view_of(w, rows, cols, dtype::BF16, "m.proj.weight");
    auto run = [&](auto layout, bool sym, gptq_format f) {
        quant_options o;
        o.bits = decltype(layout)::bits;
        o.group_size = 128;
        o.symmetric = sym;
        o.policy = sym ? scale_policy::seed_search : scale_policy::minmax;
        o.scale_dtype = dtype::F16;
        expect_same_as_pack(decltype(layout)(gptq_options{f, dtype::F16, false}), v, o,
                            std::to_string(o.bits) + " bits sym " + std::to_string(sym));
    };
    for (gptq_format f : {gptq_format::v1, gptq_format::v2})
        for (bool sym : {true, false}) {
            if (f == gptq_format::v1 && !sym) continue;  // minmax may give zero 0, which v1 refuses (tested below)
            run(gptq_layout<2>{}, sym, f);
            run(gptq_layout<3>{}, sym, f);
            run(gptq_layout<4>{}, sym, f);
            run(gptq_layout<8>{}, sym, f);
        }
}

TEST_CASE("quantize_packed: per-channel and small shapes, one band") {
    const std::int64_t rows = 40, cols = 96;
    const auto w = testing::student_t_floats(static_cast<std::size_t>(rows * cols), 99);
    const tensor_view v = testing::view_of(w, rows, cols, dtype::F32, "small.weight");
    quant_options o;
    o.bits = 4;
    o.group_size = -1;
    o.policy = scale_policy::gptq_absmax;
    expect_same_as_pack(gptq_layout<4>{}, v, o, "per channel");
    o.group_size = 32;
    o.symmetric = false;
    o.policy = scale_policy::minmax;
    expect_same_as_pack(gptq_layout<4>(gptq_options{gptq_format::v2, dtype::F16, false}), v, o, "asym g32");
}

static_assert(band_packing_layout<gptq_layout<4>>);
static_assert(band_packing_layout<awq_layout<4>>);
static_assert(band_packing_layout<compressed_tensors_layout<3>>);

TEST_CASE("quantize_packed: AWQ and compressed-tensors in one band") {
    const std::int64_t rows = 64, cols = 256;
    const auto w = testing::to_bf16(testing::student_t_floats(static_cast<std::size_t>(rows * cols), 5));
    const tensor_view v = testing::view_of(w, rows, cols, dtype::BF16, "x.weight");
    quant_options o;
    o.bits = 4;
    o.group_size = 64;
    o.symmetric = false;
    o.policy = scale_policy::awq_minmax;
    expect_same_as_pack(awq_layout<4>{}, v, o, "awq");
    o.policy = scale_policy::minmax;
    o.scale_dtype = dtype::BF16;  // the compressed-tensors default
    expect_same_as_pack(compressed_tensors_layout<4>{}, v, o, "compressed-tensors");
}

TEST_CASE("quantize_packed refusals name the weight's row and leave the shape check first") {
    const std::int64_t rows = 288, cols = 2048;
    std::vector<float> w(static_cast<std::size_t>(rows * cols), 0.5f);  // all positive: minmax zero is 0
    const tensor_view v = testing::view_of(w, rows, cols, dtype::F32, "z.weight");
    quant_options o;
    o.bits = 4;
    o.group_size = 128;
    o.symmetric = false;
    o.policy = scale_policy::minmax;
    try {
        (void)quantize_packed(v, o, gptq_layout<4>{}, "z");
        FAIL("v1 must refuse zero point 0");
    } catch (const unsupported_error& e) {
        CHECK(std::string(e.what()).find("zero point 0 at row 0,") != std::string::npos);
    }
    // A band other than the first: rows 130.. hold the only zero-0 groups.
    for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t c = 0; c < cols; ++c) w[static_cast<std::size_t>(r * cols + c)] = r >= 130 ? 0.5f : (c % 2 ? 0.5f : -0.5f);
    try {
        (void)quantize_packed(v, o, gptq_layout<4>{}, "z");
        FAIL("v1 must refuse zero point 0");
    } catch (const unsupported_error& e) {
        CHECK(std::string(e.what()).find("zero point 0 at row 130,") != std::string::npos);
    }
    const tensor_view narrow = testing::view_of(w, 36, cols, dtype::F32, "n.weight");  // 36 rows: not whole words of 3 bits
    o.bits = 3;
    o.symmetric = true;
    o.policy = scale_policy::gptq_absmax;
    CHECK_THROWS_AS((void)quantize_packed(narrow, o, gptq_layout<3>{}, "n"), shape_error);
}

namespace {

quant_options opts_for(int bits, std::int64_t group, bool sym, dtype scale_dtype) {
    quant_options o;
    o.bits = bits;
    o.group_size = static_cast<int>(group);
    o.symmetric = sym;
    o.policy = sym ? scale_policy::gptq_absmax : scale_policy::minmax;
    o.scale_dtype = scale_dtype;
    return o;
}

std::string what(int bits, std::int64_t group, bool sym, const char* extra = "") {
    return std::to_string(bits) + " bits g" + std::to_string(group) + (sym ? " sym" : " asym") + extra;
}

template <int B>
void ct_sweep(const tensor_view& v, std::initializer_list<std::int64_t> groups, std::initializer_list<bool> syms) {
    for (ct_packing p : {ct_packing::padded_v0_12, ct_packing::dense_v0_18})
        for (std::int64_t g : groups)
            for (bool sym : syms)
                expect_same_as_pack(compressed_tensors_layout<B>(ct_options{p, dtype::BF16}), v,
                                    opts_for(B, g, sym, dtype::BF16),
                                    what(B, g, sym, p == ct_packing::dense_v0_18 ? " dense" : " padded"));
}

}  // namespace

TEST_CASE("quantize_packed with a band_source: its errors pass through, refusals name the weight's row") {
    const std::int64_t rows = 288, cols = 2048;
    std::vector<float> w(static_cast<std::size_t>(rows * cols), 0.25f);
    w[static_cast<std::size_t>(200 * cols + 5)] = std::numeric_limits<float>::quiet_NaN();  // in the second band
    const tensor_view v = testing::view_of(w, rows, cols, dtype::F32, "nan.weight");
    quant_options o;
    o.bits = 4;
    o.group_size = 128;
    o.symmetric = true;
    o.policy = scale_policy::gptq_absmax;
    const band_source copy_rows = [&](std::int64_t r0, std::int64_t, std::span<std::byte> into) {
        std::memcpy(into.data(), v.bytes.data() + static_cast<std::size_t>(r0 * cols) * 4, into.size());
    };
    CHECK_THROWS_WITH_AS((void)quantize_packed(v, o, gptq_layout<4>{}, "nan", {}, nullptr, copy_rows),
                         doctest::Contains("(row 200, column 5)"), unsupported_error);
    const band_source failing = [](std::int64_t, std::int64_t, std::span<std::byte>) {
        fail<io_error>("src.safetensors", "nan.weight", "unexpected end of file");
    };
    CHECK_THROWS_WITH_AS((void)quantize_packed(v, o, gptq_layout<4>{}, "nan", {}, nullptr, failing),
                         doctest::Contains("src.safetensors: tensor 'nan.weight': unexpected end of file"), io_error);
}

TEST_CASE("quantize_packed equals pack(quantize) for compressed-tensors: 2-8 bits, both packings, odd N") {
    // 2048 columns -> bands of 128 rows; 291 rows: two full bands and a 35-row tail. 128 is no
    // multiple of the 10, 6 and 5 codes a padded 3/5/6-bit zero-point word holds, so bands
    // share those words.
    const std::int64_t rows = 291, cols = 2048;
    REQUIRE(detail::band_rows(cols) == 128);
    const auto w = testing::to_bf16(testing::student_t_floats(static_cast<std::size_t>(rows * cols), 777));
    const tensor_view v = testing::view_of(w, rows, cols, dtype::BF16, "m.proj.weight");
    ct_sweep<2>(v, {128, -1}, {true, false});
    ct_sweep<3>(v, {128, -1}, {true, false});
    ct_sweep<4>(v, {128, 32, -1}, {true, false});
    ct_sweep<5>(v, {128, -1}, {false});
    ct_sweep<6>(v, {128, -1}, {false});
    ct_sweep<7>(v, {128, -1}, {false});
    ct_sweep<8>(v, {128, -1}, {true, false});
}

TEST_CASE("quantize_packed equals pack(quantize) for AWQ: groups, symmetry, several bands") {
    // 296 rows (N % 8 == 0 as AWQ requires): bands of 128, 128 and 40 rows.
    const std::int64_t rows = 296, cols = 2048;
    const auto w = testing::to_fp16(testing::student_t_floats(static_cast<std::size_t>(rows * cols), 31));
    const tensor_view v = testing::view_of(w, rows, cols, dtype::F16, "m.proj.weight");
    for (std::int64_t g : {128, 64, -1})
        for (bool sym : {true, false}) {
            quant_options o = opts_for(4, g, sym, dtype::F16);
            if (!sym) o.policy = scale_policy::awq_minmax;
            expect_same_as_pack(awq_layout<4>{}, v, o, what(4, g, sym));
        }
}

TEST_CASE("pack_band with 32-row bands: AWQ and padded compressed-tensors zero points") {
    // The smallest bands pack_band takes (quantize_packed's are at least 128 rows): every
    // boundary of a padded 3-bit stream (32 = 3 * 10 + 2) falls inside a word. Each band is
    // quantized on its own (rows are independent) and packed into tensors for the whole weight.
    const std::int64_t cols = 1024;
    auto banded = [&](const auto& layout, const tensor_view& v, const quant_options& o, const std::string& what) {
        const std::int64_t n = v.shape[0];
        std::vector<owned_tensor> out;
        for (const tensor_spec& t : layout.specs(n, cols, o.group_size, o.symmetric))
            out.push_back(detail::alloc_tensor("m.proj" + t.suffix, t.type, t.shape));
        const std::size_t es = dtype_size(v.type);
        for (std::int64_t r0 = 0; r0 < n; r0 += 32) {
            const std::int64_t r1 = std::min<std::int64_t>(n, r0 + 32);
            const tensor_view part{v.name, v.type, {r1 - r0, cols},
                                   v.bytes.subspan(static_cast<std::size_t>(r0 * cols) * es,
                                                   static_cast<std::size_t>((r1 - r0) * cols) * es)};
            layout.pack_band(quantize(part, o), r0, n, out);
        }
        const auto ref = layout.pack(quantize(v, o), "m.proj");
        REQUIRE(out.size() == ref.size());
        for (std::size_t i = 0; i < ref.size(); ++i) {
            INFO(what << " tensor " << ref[i].name);
            CHECK(out[i].name == ref[i].name);
            CHECK(out[i].shape == ref[i].shape);
            CHECK(out[i].bytes == ref[i].bytes);
        }
    };
    const auto w = testing::to_bf16(testing::student_t_floats(static_cast<std::size_t>(99 * cols), 8));
    const tensor_view ct_v = testing::view_of(w, 99, cols, dtype::BF16, "m.proj.weight");  // 32+32+32+3
    for (std::int64_t g : {128, -1}) {
        const compressed_tensors_layout<3> ct3(ct_options{ct_packing::padded_v0_12, dtype::BF16});
        banded(ct3, ct_v, opts_for(3, g, false, dtype::BF16), "ct 3-bit padded g" + std::to_string(g));
    }
    const compressed_tensors_layout<7> ct7(ct_options{ct_packing::padded_v0_12, dtype::BF16});
    banded(ct7, ct_v, opts_for(7, -1, false, dtype::BF16), "ct 7-bit padded");
    const auto wf = testing::to_fp16(testing::student_t_floats(static_cast<std::size_t>(104 * cols), 8));
    const tensor_view awq_v = testing::view_of(wf, 104, cols, dtype::F16, "m.proj.weight");  // 32+32+32+8
    quant_options o = opts_for(4, 128, false, dtype::F16);
    o.policy = scale_policy::awq_minmax;
    banded(awq_layout<4>{}, awq_v, o, "awq 32-row bands");
}

TEST_CASE("band kernels: pack_awq4_band and pack_padded_part give the whole-weight kernels' words") {
    std::mt19937 rng(12);
    std::uniform_int_distribution<int> code(0, 255);  // bits above b must be masked, as pack_* do
    // AWQ: a band of rows written into a wider [cols][n/8] matrix, column tails included.
    // 40 rows: five word columns, four through the SSE2 4x4 transpose and one alone; 8 rows:
    // one; 61 and 45 columns: 16-column steps, then 8-column gathers, then single columns.
    for (std::int64_t rows : {24, 40, 32, 8})
        for (std::int64_t cols : {64, 61, 45, 13, 1})
            for (bool simd_ok : {true, false}) {
                const std::int64_t n = 64, first = 16;
                std::vector<std::uint8_t> src(static_cast<std::size_t>(rows * cols));
                for (auto& c : src) c = static_cast<std::uint8_t>(code(rng));
                std::vector<std::uint32_t> ref(static_cast<std::size_t>(cols * rows / 8));
                detail::pack_awq4(src.data(), 1, cols, cols, rows, ref.data());
                std::vector<std::uint32_t> got(static_cast<std::size_t>(cols * n / 8), 0xDEADBEEFu);
                detail::pack_awq4_band(src.data(), rows, cols, got.data() + first / 8, n / 8, simd_ok);
                for (std::int64_t c = 0; c < cols; ++c)
                    for (std::int64_t j = 0; j < n / 8; ++j) {
                        INFO("rows " << rows << " cols " << cols << " simd " << simd_ok << " col " << c << " word " << j);
                        const bool mine = j >= first / 8 && j < (first + rows) / 8;
                        CHECK(got[static_cast<std::size_t>(c * n / 8 + j)] ==
                              (mine ? ref[static_cast<std::size_t>(c * rows / 8 + j - first / 8)] : 0xDEADBEEFu));
                    }
            }
    // Padded streams cut into parts at arbitrary points, packed in reverse order: the bytes
    // of one pack_padded over the whole stream.
    for (int bits : {3, 5, 6, 7, 2, 4, 8}) {
        const std::int64_t total = 157, stride = 3;
        std::vector<std::uint8_t> src(static_cast<std::size_t>(total * stride));
        for (auto& c : src) c = static_cast<std::uint8_t>(code(rng));
        std::vector<std::uint32_t> ref(static_cast<std::size_t>(detail::padded_words(total, bits) * 2));
        std::vector<std::uint32_t> got(ref.size());
        detail::pack_padded(src.data() + 1, stride, total, bits, ref.data() + 1, 2);
        const std::vector<std::int64_t> cuts{0, 1, 2, 32, 33, 64, 96, 100, 157};
        for (std::size_t i = cuts.size() - 1; i > 0; --i)
            detail::pack_padded_part(src.data() + 1 + cuts[i - 1] * stride, stride, cuts[i - 1], cuts[i] - cuts[i - 1],
                                     total, bits, got.data() + 1, 2);
        INFO("bits " << bits);
        CHECK(got == ref);
    }
}

TEST_CASE("AWQ and compressed-tensors pack_band: refusals name the weight's row and write nothing") {
    const std::int64_t rows = 64, cols = 256, n = 160, first = 64;
    const auto w = testing::student_t_floats(static_cast<std::size_t>(rows * cols), 3);
    const tensor_view v = testing::view_of(w, rows, cols, dtype::F32, "b.weight");
    auto refuse = [&](const auto& layout, dtype scale_dtype) {
        quantized_tensor band = quantize(v, opts_for(4, 64, true, scale_dtype));
        band.zeros[static_cast<std::size_t>(37 * band.groups() + 2)] = 3;  // row 37 of the band, group 2
        std::vector<owned_tensor> out;
        for (const tensor_spec& t : layout.specs(n, cols, 64, true))
            out.push_back(detail::alloc_tensor("b" + t.suffix, t.type, t.shape));
        try {
            layout.pack_band(band, first, n, out);
            FAIL("a symmetric band with a zero point other than 8 must be refused");
        } catch (const shape_error& e) {
            CHECK(std::string(e.what()).find("zero point 3 at row 101, group 2") != std::string::npos);
        }
        for (const owned_tensor& t : out)
            for (std::byte b : t.bytes) REQUIRE(b == std::byte{0});
        band.zeros[static_cast<std::size_t>(37 * band.groups() + 2)] = 8;
        CHECK_THROWS_AS(layout.pack_band(band, 16, n, out), shape_error);  // not on a 32-row boundary
        CHECK_THROWS_AS(layout.pack_band(band, 128, n, out), shape_error);  // runs past N
        layout.pack_band(band, first, n, out);                               // and the repaired band packs
        bool any = false;
        for (std::byte b : out[0].bytes) any = any || b != std::byte{0};
        CHECK(any);
    };
    refuse(awq_layout<4>{}, dtype::F16);
    refuse(compressed_tensors_layout<4>{}, dtype::BF16);
}

TEST_CASE("pack_band scans codes and zero points unless they were made in range; the other checks run either way") {
    // quantize_packed passes made_in_range for the bands it has just made; a caller's band
    // keeps the scans by default.
    const std::int64_t rows = 64, cols = 256, n = 128;
    const auto w = testing::student_t_floats(static_cast<std::size_t>(rows * cols), 5);
    const tensor_view v = testing::view_of(w, rows, cols, dtype::F32, "c.weight");
    const simd::isa isa = simd::active_isa();
    auto scan = [&](const auto& layout, dtype scale_dtype, dtype other_dtype) {
        std::vector<owned_tensor> out;
        for (const tensor_spec& t : layout.specs(n, cols, 64, true))
            out.push_back(detail::alloc_tensor("c" + t.suffix, t.type, t.shape));
        const quantized_tensor good = quantize(v, opts_for(4, 64, true, scale_dtype));
        quantized_tensor band = good;
        band.codes[static_cast<std::size_t>(5 * cols + 7)] = 16;  // row 5, column 7: past 4 bits
        CHECK_THROWS_AS(layout.pack_band(band, 0, n, out), shape_error);
        CHECK_THROWS_AS(layout.pack_band(band, 0, n, out, isa, value_check::scan), shape_error);
        CHECK_NOTHROW(layout.pack_band(band, 0, n, out, isa, value_check::made_in_range));
        band = good;
        band.zeros[3] = 3;  // a symmetric weight's zero point off the midpoint 8
        CHECK_THROWS_AS(layout.pack_band(band, 0, n, out), shape_error);
        CHECK_NOTHROW(layout.pack_band(band, 0, n, out, isa, value_check::made_in_range));
        band = good;
        band.zeros[3] = 16;  // past 4 bits
        CHECK_THROWS_AS(layout.pack_band(band, 0, n, out), shape_error);
        CHECK_NOTHROW(layout.pack_band(band, 0, n, out, isa, value_check::made_in_range));
        // what the quantizer does not decide is checked either way
        CHECK_THROWS_AS(layout.pack_band(good, 96, n, out, isa, value_check::made_in_range),
                        shape_error);  // runs past N
        std::vector<owned_tensor> fewer(out.begin(), out.end() - 1);  // not the specs' tensors: refused, not written past
        CHECK_THROWS_AS(layout.pack_band(good, 0, n, fewer, isa, value_check::made_in_range), shape_error);
        std::vector<owned_tensor> short_first = out;
        short_first[0].bytes.resize(short_first[0].bytes.size() / 2);
        CHECK_THROWS_AS(layout.pack_band(good, 0, n, short_first), shape_error);
        const quantized_tensor other = quantize(v, opts_for(4, 64, true, other_dtype));
        CHECK_THROWS_AS(layout.pack_band(other, 0, n, out, isa, value_check::made_in_range), unsupported_error);
    };
    scan(gptq_layout<4>{}, dtype::F16, dtype::BF16);
    scan(awq_layout<4>{}, dtype::F16, dtype::BF16);
    scan(compressed_tensors_layout<4>{}, dtype::BF16, dtype::F16);
    // GPTQ v1 cannot store a zero point of 0: a format's limit, refused whoever made the band
    quantized_tensor zero0 = quantize(v, opts_for(4, 64, false, dtype::F16));
    zero0.zeros[3] = 0;
    std::vector<owned_tensor> out;
    const gptq_layout<4> v1;
    for (const tensor_spec& t : v1.specs(n, cols, 64, false)) out.push_back(detail::alloc_tensor("c" + t.suffix, t.type, t.shape));
    CHECK_THROWS_AS(v1.pack_band(zero0, 0, n, out, isa, value_check::made_in_range), unsupported_error);
}

TEST_CASE("AWQ and compressed-tensors: quantize_packed refuses what pack(quantize) refuses, in its words") {
    const std::int64_t cols = 256;
    const auto w36 = testing::student_t_floats(static_cast<std::size_t>(36 * cols), 4);
    const auto w40 = testing::student_t_floats(static_cast<std::size_t>(40 * cols), 4);
    auto same_refusal = [&](const auto& layout, const tensor_view& v, const quant_options& o, auto error) {
        using E = typename decltype(error)::type;
        std::string ref, got;
        try {
            (void)layout.pack(quantize(v, o), "r");
        } catch (const E& e) {
            ref = e.what();
        }
        try {
            (void)quantize_packed(v, o, layout, "r");
        } catch (const E& e) {
            got = e.what();
        }
        CHECK(!ref.empty());
        CHECK(got == ref);
    };
    const tensor_view v36 = testing::view_of(w36, 36, cols, dtype::F32, "r.weight");
    const tensor_view v40 = testing::view_of(w40, 40, cols, dtype::F32, "r.weight");
    same_refusal(awq_layout<4>{}, v36, opts_for(4, 64, true, dtype::F16), std::type_identity<shape_error>{});  // N % 8
    same_refusal(awq_layout<4>{}, v40, opts_for(4, 64, true, dtype::BF16), std::type_identity<unsupported_error>{});
    same_refusal(awq_layout<4>{}, v40, opts_for(3, 64, true, dtype::F16), std::type_identity<unsupported_error>{});
    same_refusal(compressed_tensors_layout<4>{}, v40, opts_for(4, 64, true, dtype::F16), std::type_identity<unsupported_error>{});
    same_refusal(compressed_tensors_layout<4>{}, v40, opts_for(5, 64, false, dtype::BF16), std::type_identity<unsupported_error>{});
}
