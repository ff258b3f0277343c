// stories260k (a real trained Llama in bf16, ../shared/fixtures) through every format.
//
// Its MLP is 172 wide, which is not a multiple of 8, 32, 64 or 128. What each format does:
//  - GPTQ 4-bit: refused. qzeros pack N along int32 words (172 x 4 bits is not a multiple of
//    32) and g64 does not divide K = 172 for down_proj; a GPTQ config cannot leave block linears
//    dense either. GPTQ 8-bit per channel fits every shape (172 x 8 = 43 words) and converts.
//  - AWQ: refused (AWQ packs N in words of 8; 172 is not a multiple of 8).
//  - compressed-tensors: per channel converts everything; g64 is refused for down_proj
//    (K = 172 is not whole groups) unless a rule keeps down_proj dense, which then appears in
//    `ignore`.
// Every refusal names the tensor and leaves no folder.
#include <doctest/doctest.h>

#include <string>
#include <unistd.h>

#include "qforge/convert/converter.hpp"
#include "qforge/io/file.hpp"

using namespace qforge;

namespace {

const std::string stories = QFORGE_SOURCE_DIR "/tests/golden/fixtures/stories260k";

/// An output path under /tmp, removed again when the test case ends.
struct fresh {
    std::string path;
    explicit fresh(const std::string& name) : path("/tmp/qforge-test-stories-" + std::to_string(::getpid()) + "-" + name) {
        if (io::path_exists(path)) io::remove_tree(path);
    }
    ~fresh() {
        try {
            if (io::path_exists(path)) io::remove_tree(path);
        } catch (...) {
        }
    }
    operator const std::string&() const { return path; }
};

convert_options with(output_format f, quant_spec s) {
    convert_options o;
    o.format = f;
    o.rules.default_scheme = s;
    o.threads = 2;
    return o;
}

std::string refusal_of(const convert_options& o, const std::string& out) {
    try {
        convert(stories, out, o);
    } catch (const unsupported_error& e) {
        return e.what();
    }
    return {};
}

}  // namespace

TEST_CASE("stories260k: GPTQ 4-bit and AWQ refuse the 172-wide MLP, naming it") {
    const fresh out("refused");
    const std::string gptq = refusal_of(with(output_format::gptq, {4, 64, true, scale_method::search, dtype::BF16}), out);
    CHECK(gptq.find("mlp.") != std::string::npos);
    CHECK(gptq.find("172") != std::string::npos);
    const std::string awq = refusal_of(with(output_format::awq, {4, 64, false, scale_method::minmax, std::nullopt}), out);
    CHECK(awq.find("N=172 is not a multiple of 8") != std::string::npos);
    const std::string ct = refusal_of(with(output_format::compressed_tensors, {4, 64, true, scale_method::minmax, std::nullopt}), out);
    CHECK(ct.find("mlp.down_proj") != std::string::npos);
    CHECK(ct.find("K=172") != std::string::npos);
    CHECK_FALSE(io::path_exists(out.path));
}

TEST_CASE("stories260k: GPTQ 8-bit per channel and compressed-tensors convert") {
    SUBCASE("gptq 8-bit per channel") {
        const fresh out("gptq8");
        const auto r = convert(stories, out, with(output_format::gptq, {8, -1, true, scale_method::minmax, std::nullopt}));
        CHECK(r.report.tensors.size() == 35);
        CHECK(r.report.snr_min() > 30.0);
        MESSAGE("stories260k gptq 8-bit per channel: SNR min " << r.report.snr_min() << " mean " << r.report.snr_mean() << " dB");
    }
    SUBCASE("compressed-tensors 4-bit per channel, asymmetric") {
        const fresh out("ct4");
        const auto r = convert(stories, out, with(output_format::compressed_tensors, {4, -1, false, scale_method::mse, std::nullopt}));
        CHECK(r.report.tensors.size() == 35);
        CHECK(r.report.snr_min() > 10.0);
        MESSAGE("stories260k CT 4-bit per channel asym mse: SNR min " << r.report.snr_min() << " mean " << r.report.snr_mean()
                                                                     << " dB");
    }
    SUBCASE("compressed-tensors g64 with down_proj kept dense by rule") {
        const fresh out("ct64");
        convert_options o = with(output_format::compressed_tensors, {4, 64, true, scale_method::search, std::nullopt});
        o.rules.keep("mlp.down_proj");
        const auto r = convert(stories, out, o);
        CHECK(r.report.tensors.size() == 30);
        const json qc = json::parse(io::read_file(out.path + "/config.json")).at("quantization_config");
        const json& ignore = qc.at("ignore");
        REQUIRE(ignore.size() == 6);  // five down_proj and the tied lm_head
        CHECK(ignore.at(0).as_string() == "model.layers.0.mlp.down_proj");
        CHECK(ignore.at(5).as_string() == "lm_head");
    }
}

// What `qforge-convert SRC DST --format compressed-tensors --group 32 --scheme
// 're:.*down_proj=8b,per-channel'` maps to (the CLI's --scheme is a quantize rule after the
// defaults): down_proj (K = 172) gets its own config group, which vLLM's
// CompressedTensorsConfig resolves per layer (`target_scheme_map`, one entry per config group).
TEST_CASE("stories260k: a per-layer scheme from the command line makes g32 compressed-tensors convert") {
    const fresh out("ct32-mixed");
    convert_options o = with(output_format::compressed_tensors, {4, 32, true, scale_method::minmax, std::nullopt});
    CHECK(refusal_of(o, out).find("mlp.down_proj") != std::string::npos);  // K = 172 is not whole groups of 32
    o.rules.quantize("re:.*down_proj", {8, -1, true, scale_method::minmax, std::nullopt});
    const auto r = convert(stories, out, o);
    CHECK(r.report.tensors.size() == 35);
    const json groups = json::parse(io::read_file(out.path + "/config.json")).at("quantization_config").at("config_groups");
    REQUIRE(groups.size() == 2);
    CHECK(groups.at("group_0").at("weights").at("group_size").as_int() == 32);
    CHECK(groups.at("group_1").at("weights").at("strategy").as_string() == "channel");
    CHECK(groups.at("group_1").at("weights").at("num_bits").as_int() == 8);
    CHECK(groups.at("group_1").at("targets").size() == 5);
    CHECK(groups.at("group_1").at("targets").at(0).as_string() == "model.layers.0.mlp.down_proj");
}

TEST_CASE("stories260k: FP8 per channel and 128x128 blocks against INT8 per channel, same weights") {
    // The issue asks FP8 block/channel to beat INT8 per channel on SNR, or say why not. It does
    // not, by construction: E4M3 keeps 3 mantissa bits, so every weight is stored with a
    // relative error of up to 2^-4 whatever the scale (about 31 dB on any bell-shaped row),
    // while INT8 per channel spends 255 uniform steps on [-amax, amax] of each row (about 40 dB
    // unless a row's amax is far beyond its spread). FP8 wins only on rows dominated by
    // outliers, and a 128x128 block (one scale for many rows) gives up even that margin. What
    // FP8 buys is the activation side (vLLM's FP8 GEMM, dynamic per-token scales), not weight SNR.
    const fresh int8_out("int8"), chan_out("fp8chan"), block_out("fp8block");
    const auto int8 = convert(stories, int8_out, with(output_format::compressed_tensors, {8, -1, true, scale_method::minmax, std::nullopt}));
    const auto chan = convert(stories, chan_out, with(output_format::compressed_tensors_fp8, {8, -1, true, scale_method::minmax, std::nullopt}));
    const auto block = convert(stories, block_out, with(output_format::compressed_tensors_fp8, {8, 128, true, scale_method::minmax, std::nullopt}));
    REQUIRE(chan.report.tensors.size() == 35);
    REQUIRE(block.report.tensors.size() == 35);
    MESSAGE("stories260k SNR mean / min dB: INT8 per channel " << int8.report.snr_mean() << " / " << int8.report.snr_min()
            << "; FP8 per channel " << chan.report.snr_mean() << " / " << chan.report.snr_min() << "; FP8 128x128 "
            << block.report.snr_mean() << " / " << block.report.snr_min());
    CHECK(chan.report.snr_min() > 28.0);  // E4M3's relative precision, whatever the scale
    CHECK(block.report.snr_min() > 28.0);
    CHECK(int8.report.snr_mean() > chan.report.snr_mean());  // the explanation above, measured
    CHECK(chan.report.snr_mean() >= block.report.snr_mean() - 0.5);
}

// NVFP4A16 / MXFP4A16 on the same weights: the MLP's down_proj (K = 172, not whole groups of
// 16 or 32) is refused unless a rule keeps it dense, which then appears in `ignore` beside the
// tied lm_head. NVFP4's E4M3 group-16 scales follow each group's amax more closely than MXFP4's
// power-of-two group-32 scales, so it must measure higher.
TEST_CASE("stories260k: NVFP4A16 and MXFP4A16 SNR beside FP8 / INT8, down_proj kept dense by rule") {
    const fresh nv_out("nvfp4"), mx_out("mxfp4");
    convert_options nv = with(output_format::compressed_tensors_nvfp4, {4, 16, true, scale_method::minmax, std::nullopt});
    convert_options mx = with(output_format::compressed_tensors_mxfp4, {4, 32, true, scale_method::minmax, std::nullopt});
    CHECK(refusal_of(nv, nv_out).find("mlp.down_proj") != std::string::npos);
    nv.rules.keep("mlp.down_proj");
    mx.rules.keep("mlp.down_proj");
    const auto n = convert(stories, nv_out, nv);
    const auto m = convert(stories, mx_out, mx);
    REQUIRE(n.report.tensors.size() == 30);
    REQUIRE(m.report.tensors.size() == 30);
    MESSAGE("stories260k SNR mean / min dB: NVFP4A16 " << n.report.snr_mean() << " / " << n.report.snr_min() << "; MXFP4A16 "
            << m.report.snr_mean() << " / " << m.report.snr_min());
    CHECK(n.report.snr_min() > 14.0);
    CHECK(m.report.snr_min() > 12.0);
    CHECK(n.report.snr_mean() > m.report.snr_mean());
    const json ignore = json::parse(io::read_file(nv_out.path + "/config.json")).at("quantization_config").at("ignore");
    REQUIRE(ignore.size() == 6);  // five down_proj and the tied lm_head
    CHECK(ignore.at(5).as_string() == "lm_head");
}
