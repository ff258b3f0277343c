// QFORGE_FORCE_ISA reaches the transpose and least-squares families through the library's own
// entry points (a repack, a least-squares fit), never a private choice of theirs. ctest and
// meson also run this case under QFORGE_FORCE_ISA=scalar (every lookup then records the
// scalar definition) and =bogus (an unknown name: every entry point throws, none falls back).
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/convert/repack.hpp"
#include "qforge/layout/gguf/quantize.hpp"
#include "qforge/layout/nvfp4.hpp"
#include "qforge/quant/quantize.hpp"
#include "qforge/simd/gguf_kernels.hpp"
#include "qforge/simd/group_kernels.hpp"
#include "qforge/simd/pack_kernels.hpp"
#include "qforge/convert/repack_transpose.hpp"
#include "qforge/quant/least_squares.hpp"
#include "qforge/simd/lsq_kernels.hpp"
#include "qforge/simd/minifloat_kernels.hpp"
#include "qforge/simd/transpose_kernels.hpp"
#include "repack/repack_test_support.hpp"

using namespace qforge;
using namespace repack_test;

namespace {

/// One GPTQ -> compressed-tensors repack of a small layer (the word-level fast path: one
/// word transpose, one of the zero points, one of the scales).
void repack_one_layer() {
    const std::string p = "model.layers.0.mlp.up_proj";
    quantized_tensor q = random_qt(64, 256, 4, 64, false, dtype::F16, 3, false);
    q.name = p;
    repack_target gptq;
    gptq.format = output_format::gptq;
    store st;
    for (auto& t : repack_pack(repack_prepare(q, gptq), p, gptq)) st.add(std::move(t));
    layer_scheme s;
    s.format = repack_source_format::gptq;
    s.gptq = {4, 64, false, false};
    repack_target ct;
    ct.format = output_format::compressed_tensors;
    ct.model_dtype = dtype::F16;
    std::vector<owned_tensor> out;
    repack_module(make_tensor_source(st.views, "in"), p, s, ct, out);
    CHECK(out.size() >= 3);
}

void fit_one_group() {
    std::vector<float> x(64);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i * 37 % 29) - 14) * 0.01f;
    std::vector<std::uint8_t> codes(x.size());
    (void)lsq_fit_group(x, {}, lsq_options{}, codes);
}

bool getenv_is_scalar() {
    const char* env = std::getenv("QFORGE_FORCE_ISA");
    return env != nullptr && std::string_view(env) == "scalar";
}

/// A quantization through the group kernels, and a GGUF Q4_K row through the gguf kernels.
void quantize_one_layer() {
    std::vector<float> w(8 * 256);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(static_cast<int>(i * 37 % 29) - 14) * 0.01f;
    const tensor_view v{"model.layers.0.mlp.up_proj", dtype::F32, {8, 256},
                        std::as_bytes(std::span<const float>(w))};
    quant_options o;
    o.group_size = 64;
    if (quantize(v, o).rows != 8) FAIL("quantize lost rows");
    std::vector<std::uint16_t> blocks(static_cast<std::size_t>(gguf::quantized_size(gguf::ggml_type::q4_k, 8, 256) / 2));
    gguf::quantize_rows(gguf::ggml_type::q4_k, w.data(), 8, 256, nullptr, reinterpret_cast<std::byte*>(blocks.data()));
    if (nvfp4_layout().quantize(v, "model.layers.0.mlp.up_proj").size() != 3) FAIL("NVFP4 lost a tensor");  // minifloat kernels
}

template <class... Families>
void forget_all() {
    (simd::forget_last_isa<Families>(), ...);
}

}  // namespace

// Every kernel family of simd/ (group, pack, gguf, transpose, least squares, minifloat) is reached by a
// library entry point that takes no ISA: each then ran the ISA QFORGE_FORCE_ISA names (under
// =scalar, the scalar definition), and an unknown name stops every one of them.
TEST_CASE("QFORGE_FORCE_ISA reaches every kernel family through the library's entry points") {
    using namespace simd;
    bool refused = false;
    try {
        (void)active_isa();
    } catch (const unsupported_error&) {
        refused = true;
    }
    if (refused) {
        CHECK_THROWS_AS(quantize_one_layer(), unsupported_error);
        CHECK_THROWS_AS(repack_one_layer(), unsupported_error);
        return;
    }
    forget_all<group_kernels, pack_kernels, gguf_kernels, transpose_kernels, lsq_kernels, minifloat_kernels>();
    quantize_one_layer();
    repack_one_layer();  // packs (GPTQ) and transposes (to compressed-tensors)
    fit_one_group();
    const isa want = getenv_is_scalar() ? isa::scalar : active_isa();
    CHECK(last_isa_of<group_kernels>() == want);
    CHECK(last_isa_of<pack_kernels>() == want);
    CHECK(last_isa_of<gguf_kernels>() == want);
    CHECK(last_isa_of<transpose_kernels>() == want);
    CHECK(last_isa_of<lsq_kernels>() == want);
    CHECK(last_isa_of<minifloat_kernels>() == want);
}

TEST_CASE("QFORGE_FORCE_ISA reaches the transpose and least-squares families") {
    const char* env = std::getenv("QFORGE_FORCE_ISA");
    const std::string_view forced = env ? env : "";
    bool refused = false;
    try {
        (void)simd::active_isa();
    } catch (const unsupported_error&) {
        refused = true;
    }
    if (refused) {  // an unknown name, or an ISA this CPU lacks: an error everywhere
        CHECK_FALSE(forced.empty());
        std::vector<std::uint32_t> src(64 * 40), dst(src.size());
        CHECK_THROWS_AS(repack_detail::transpose_words(src.data(), 64, 40, dst.data()), unsupported_error);
        CHECK_THROWS_AS(repack_one_layer(), unsupported_error);
        CHECK_THROWS_AS(fit_one_group(), unsupported_error);
        return;
    }
    simd::forget_last_isa<simd::transpose_kernels>();
    simd::forget_last_isa<simd::lsq_kernels>();
    repack_one_layer();
    fit_one_group();
    CHECK(simd::last_isa_of<simd::transpose_kernels>() == simd::active_isa());
    CHECK(simd::last_isa_of<simd::lsq_kernels>() == simd::active_isa());
    if (forced == "scalar") {
        CHECK(simd::last_isa_of<simd::transpose_kernels>() == simd::isa::scalar);
        CHECK(simd::last_isa_of<simd::lsq_kernels>() == simd::isa::scalar);
        CHECK_FALSE(repack_detail::repack_use_avx2());
    }
    // A caller that names its ISA gets that ISA's kernels.
    std::vector<float> x(40, 0.5f);
    x[3] = -1.0f;
    std::vector<std::uint8_t> codes(x.size());
    (void)lsq_fit_group(x, {}, lsq_options{}, codes, simd::isa::scalar);
    CHECK(simd::last_isa_of<simd::lsq_kernels>() == simd::isa::scalar);
}
