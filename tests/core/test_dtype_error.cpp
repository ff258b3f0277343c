#include <doctest/doctest.h>

#include <string>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/tensor_view.hpp"

using namespace qforge;

TEST_CASE("dtype names round-trip and sizes match safetensors") {
    for (const auto& info : detail::dtype_table) {
        CHECK(dtype_from_name(info.name) == info.type);
        CHECK(dtype_name(info.type) == info.name);
    }
    CHECK(dtype_size(dtype::BF16) == 2);
    CHECK(dtype_size(dtype::I64) == 8);
    CHECK(dtype_size(dtype::BOOL) == 1);
    CHECK(dtype_size(dtype::F4) == 0);
    CHECK(dtype_bits(dtype::F6_E3M2) == 6);
    CHECK_FALSE(dtype_from_name("bf16").has_value());  // names are case-sensitive
    CHECK_FALSE(is_computable(dtype::F8_E4M3));
    CHECK(is_computable(dtype::BF16));
    // The canonical writer sorts by this order (formats.md 1.2).
    CHECK(dtype::BOOL < dtype::U8);
    CHECK(dtype::F16 < dtype::BF16);
    CHECK(dtype::BF16 < dtype::I32);
    CHECK(dtype::F32 < dtype::I64);
}

TEST_CASE("errors carry file, tensor and reason in one message shape") {
    try {
        parse_dtype("Q4", "model.safetensors", "model.layers.0.mlp.up_proj.weight");
        FAIL("no throw");
    } catch (const format_error& e) {
        CHECK(e.file() == "model.safetensors");
        CHECK(e.tensor() == "model.layers.0.mlp.up_proj.weight");
        CHECK(e.reason() == "unknown dtype \"Q4\"");
        CHECK(std::string(e.what()) ==
              "qforge: model.safetensors: tensor 'model.layers.0.mlp.up_proj.weight': unknown dtype \"Q4\"");
    }
    const error e("f.json", "", "expected '}'");
    CHECK(std::string(e.what()) == "qforge: f.json: expected '}'");
    CHECK_THROWS_AS(fail<io_error>("x", "", "disk full"), error);
}

TEST_CASE("tensor shapes: overflow and negative dimensions are refused") {
    CHECK(checked_numel({2, 3, 4}) == 24);
    CHECK(checked_numel({}) == 1);
    CHECK(checked_numel({5, 0}) == 0);
    CHECK_THROWS_AS(checked_numel({-1, 2}), shape_error);
    CHECK_THROWS_AS(checked_numel({1ll << 40, 1ll << 40}), limit_error);
    CHECK(shape_to_string({3, 4}) == "[3, 4]");
}
