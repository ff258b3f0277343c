// Every GGUF block type against llama.cpp's own bytes (tests/golden/gguf, see PROVENANCE.md):
// quantize_<t>(NULL) (== quantize_row_<t>_ref except IQ4_NL, whose _ref is checked too, minus
// the bytes ggml leaves uninitialised), quantize_<t>(imatrix), and dequantize_row_<t>
// of those bytes, bit for bit, on every case (all-zero, constant, single outlier, negative
// only, tiny, fp16-subnormal scales, huge, alternating, ramp, Student-t).
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "qforge/layout/gguf/quantize.hpp"

namespace {

std::string golden_dir() { return QFORGE_SOURCE_DIR "/tests/golden/gguf/"; }

std::vector<char> slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "missing golden file " << path);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<float> floats(const std::vector<char>& bytes) {
    std::vector<float> v(bytes.size() / 4);
    std::memcpy(v.data(), bytes.data(), v.size() * 4);
    return v;
}

struct golden_case {
    std::string type, name;
    std::int64_t nrow, n_per_row, input_offset, byte_offset, nbytes, deq_offset;
};

std::vector<golden_case> cases() {
    std::ifstream f(golden_dir() + "cases.txt");
    REQUIRE(f.good());
    std::vector<golden_case> out;
    std::string line;
    while (std::getline(f, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream s(line);
        golden_case c;
        s >> c.type >> c.name >> c.nrow >> c.n_per_row >> c.input_offset >> c.byte_offset >> c.nbytes >> c.deq_offset;
        out.push_back(c);
    }
    return out;
}

bool same_bits(const float* a, const float* b, std::int64_t n, std::int64_t& first_diff) {
    for (std::int64_t i = 0; i < n; ++i) {
        std::uint32_t x, y;
        std::memcpy(&x, a + i, 4);
        std::memcpy(&y, b + i, 4);
        if (x != y) {
            first_diff = i;
            return false;
        }
    }
    return true;
}

}  // namespace

TEST_CASE("gguf golden: every block type matches llama.cpp's bytes and decode") {
    using namespace qforge::gguf;
    const auto input = floats(slurp(golden_dir() + "inputs_f32.bin"));
    const auto im256 = floats(slurp(golden_dir() + "imatrix_n256.f32"));
    const auto im32 = floats(slurp(golden_dir() + "imatrix_n32.f32"));
    const auto all = cases();
    CHECK(all.size() == 130);
    // bytes of iq4_nl/quantize_row_ref.bin that ggml leaves uninitialised: (case, begin, end)
    std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> undefined;
    {
        std::ifstream f(golden_dir() + "iq4_nl/undefined_byte_ranges.txt");
        REQUIRE(f.good());
        std::string line;
        while (std::getline(f, line)) {
            if (line.empty() || line[0] == '#') continue;
            std::istringstream ls(line);
            std::string name;
            std::int64_t b = 0, e = 0;
            ls >> name >> b >> e;
            undefined.emplace_back(name, b, e);
        }
        CHECK(undefined.size() == 23);
    }
    auto is_undefined = [&](const std::string& name, std::int64_t at) {
        for (const auto& [n, b, e] : undefined)
            if (n == name && at >= b && at < e) return true;
        return false;
    };
    int checked = 0;
    for (const char* variant : {"quantize_null", "quantize_imatrix", "quantize_row_ref"}) {
        const bool weighted = std::string(variant) == "quantize_imatrix";
        const bool ref_variant = std::string(variant) == "quantize_row_ref";
        for (const auto& c : all) {
            const auto type = type_from_name(c.type);
            REQUIRE(type);
            if (weighted && *type == ggml_type::q8_0) continue;  // ggml ignores it: no golden file
            // quantize_row_ref is identical to quantize_null except for iq4_nl (checked below)
            if (ref_variant && *type != ggml_type::iq4_nl) continue;
            const auto bin = slurp(golden_dir() + c.type + "/" + variant + ".bin");
            const auto deq = floats(slurp(golden_dir() + c.type + "/" + variant + ".deq.f32"));
            const float* x = input.data() + c.input_offset;
            const float* im = weighted ? (c.n_per_row == 32 ? im32.data() : im256.data()) : nullptr;
            CAPTURE(c.type);
            CAPTURE(c.name);
            CAPTURE(variant);
            REQUIRE(quantized_size(*type, c.nrow, c.n_per_row) == c.nbytes);
            std::vector<std::uint32_t> storage(static_cast<std::size_t>(c.nbytes / 4 + 1));
            auto* out = reinterpret_cast<std::byte*>(storage.data());
            if (ref_variant) quantize_rows_ref(*type, x, c.nrow, c.n_per_row, out);
            else quantize_rows(*type, x, c.nrow, c.n_per_row, im, out);
            std::int64_t first = -1;
            for (std::int64_t i = 0; i < c.nbytes; ++i) {
                const auto ours = static_cast<unsigned char>(out[i]);
                const auto gold = static_cast<unsigned char>(bin[static_cast<std::size_t>(c.byte_offset + i)]);
                // The 0/0 NaN scales of the tiny imatrix cases carry the CPU's default NaN sign:
                // negative on x86 (golden 00 fe), positive on AArch64 (00 7e), as ggml itself would.
                const bool nan_sign = gold == 0xFE && ours == 0x7E && i > 0 && out[i - 1] == std::byte{0};
                if (ours != gold && !nan_sign && !(ref_variant && is_undefined(c.name, i))) {
                    first = i;
                    break;
                }
            }
            CHECK_MESSAGE(first == -1, "first differing byte " << first);
            // the scalar reference path too (the call above used the active SIMD path)
            std::vector<std::uint32_t> scalar(storage.size());
            quantize_rows(*type, x, c.nrow, c.n_per_row, im, reinterpret_cast<std::byte*>(scalar.data()),
                          qforge::simd::scalar_tag{}, ref_variant);
            CHECK(std::memcmp(scalar.data(), storage.data(), static_cast<std::size_t>(c.nbytes)) == 0);
            if (!weighted && !ref_variant && *type != ggml_type::iq4_nl) {
                std::vector<std::uint32_t> ref(storage.size());
                quantize_rows_ref(*type, x, c.nrow, c.n_per_row, reinterpret_cast<std::byte*>(ref.data()));
                CHECK(std::memcmp(ref.data(), storage.data(), static_cast<std::size_t>(c.nbytes)) == 0);
            }
            // decode the golden bytes (not ours) so a decode bug is not masked by a quantize bug
            std::vector<std::uint32_t> golden_blocks(storage.size());
            std::memcpy(golden_blocks.data(), bin.data() + c.byte_offset, static_cast<std::size_t>(c.nbytes));
            std::vector<float> y(static_cast<std::size_t>(c.nrow * c.n_per_row));
            dequantize_rows(*type, reinterpret_cast<const std::byte*>(golden_blocks.data()), c.nrow * c.n_per_row, y.data());
            std::int64_t diff = -1;
            CHECK_MESSAGE(same_bits(y.data(), deq.data() + c.deq_offset, c.nrow * c.n_per_row, diff),
                          "decode differs at element " << diff);
            ++checked;
        }
    }
    CHECK(checked == 250);  // 10 types x 10-20 cases x 2 variants (no q8_0 imatrix) + iq4_nl ref
}
