// End-to-end conversions: every format on a generated checkpoint and on stories260k, the seed's
// fused-qkv and untie paths, refusals and failures that leave nothing behind, thread-count
// independence.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/convert/detail/quantize_step.hpp"
#include "qforge/convert/loaded_scales.hpp"
#include "qforge/convert/serving_check.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/core/half.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/gguf/writer.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/fp8.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/layout/quantize_packed.hpp"
#include "qforge/quant/quantize.hpp"
#include "support/checkpoint_fixture.hpp"
#include "support/fp8_checkpoint.hpp"

using namespace qforge;
using testing::small_demo;
using testing::w4a8;
using testing::w4a8_cpu;

namespace {

std::string scratch(const std::string& name) {
    static const testing::scratch_root root("convert");
    return root.fresh(name);
}

const std::string& demo_dir() {
    static const std::string d = [] {
        std::string p = scratch("demo");
        write_demo_checkpoint(p, small_demo());
        return p;
    }();
    return d;
}

/// Every tensor (name -> dtype, shape) of an output folder.
std::map<std::string, std::pair<dtype, shape_t>> tensors_of(const std::string& dir) {
    checkpoint_source s(dir);
    std::map<std::string, std::pair<dtype, shape_t>> out;
    for (const auto& t : s.tensors()) out[t.name] = {t.type, t.shape};
    return out;
}

bool leftovers(const std::string& dst) {
    const std::string parent = dst.substr(0, dst.rfind('/'));
    const std::string leaf = dst.substr(dst.rfind('/') + 1);
    for (const auto& f : io::list_directory(parent))
        if (f.starts_with(leaf + ".qforge-") || f.starts_with("." + leaf + ".qforge-")) return true;
    return false;
}

}  // namespace

TEST_CASE("demo checkpoint: two shards with an index, tied, heavy-tailed, deterministic") {
    const std::string& d = demo_dir();
    CHECK(io::path_exists(d + "/model-00001-of-00002.safetensors"));
    CHECK(io::path_exists(d + "/model-00002-of-00002.safetensors"));
    CHECK(io::path_exists(d + "/model.safetensors.index.json"));
    checkpoint_source s(d);
    CHECK_FALSE(s.contains("lm_head.weight"));
    const std::string again = scratch("demo-again");
    write_demo_checkpoint(again, small_demo());
    CHECK(io::read_file(again + "/model-00001-of-00002.safetensors") == io::read_file(d + "/model-00001-of-00002.safetensors"));
}

TEST_CASE("w4a8-cpu: GPTQ v1, untied quantized head, config, report, copied files") {
    const std::string out = scratch("w4a8");
    conversion_result r = convert(demo_dir(), out, w4a8_cpu());
    const auto t = tensors_of(out);
    CHECK(t.at("lm_head.qweight").second == shape_t{16, 512});
    CHECK(t.at("lm_head.scales").first == dtype::BF16);
    CHECK(t.at("model.embed_tokens.weight").first == dtype::BF16);
    CHECK(t.at("model.layers.1.mlp.down_proj.qzeros").second == shape_t{4, 16});
    CHECK(t.at("model.layers.1.mlp.down_proj.g_idx").first == dtype::I32);
    CHECK(t.count("model.layers.0.self_attn.q_proj.weight") == 0);
    const json cfg = json::parse(io::read_file(out + "/config.json"));
    CHECK(cfg.at("tie_word_embeddings").as_bool() == false);
    const json& qc = cfg.at("quantization_config");
    CHECK(qc.at("quant_method").as_string() == "gptq");
    CHECK(qc.at("group_size").as_int() == 64);
    CHECK(qc.at("lm_head").as_bool());
    CHECK(qc.at("checkpoint_format").as_string() == "gptq");
    CHECK(io::read_file(out + "/tokenizer.json") == io::read_file(demo_dir() + "/tokenizer.json"));
    CHECK(io::path_exists(out + "/generation_config.json"));
    const json rep = json::parse(io::read_file(out + "/quantization_report.json"));
    CHECK(rep.at("tensors_quantized").as_int() == 15);
    CHECK(rep.at("snr_db_min").as_double() > 15.0);
    CHECK(rep.at("per_tensor").size() == 15);
    CHECK(r.report.tensors.size() == 15);
    // v1 stores zero - 1: symmetric 4-bit qzeros words are 0x77777777 (formats.md 2.3).
    safetensors::reader shard(out + "/model.safetensors");
    const tensor_view z = shard.view("model.layers.0.mlp.up_proj.qzeros");
    std::uint32_t w;
    std::memcpy(&w, z.bytes.data(), 4);
    CHECK(w == 0x77777777u);
}

TEST_CASE("every format converts the demo checkpoint") {
    struct fmt_case {
        output_format f;
        quant_spec s;
        const char* probe;
    };
    const fmt_case cases[] = {
        {output_format::gptq_v2, {4, 128, true, scale_method::minmax, std::nullopt}, "model.layers.0.mlp.up_proj.qweight"},
        {output_format::awq, {4, 128, false, scale_method::minmax, std::nullopt}, "model.layers.0.mlp.up_proj.qzeros"},
        {output_format::compressed_tensors, {4, 128, false, scale_method::minmax, std::nullopt},
         "model.layers.0.mlp.up_proj.weight_zero_point"},
        {output_format::compressed_tensors, {8, -1, true, scale_method::mse, std::nullopt}, "model.layers.0.mlp.up_proj.weight_shape"},
    };
    int n = 0;
    for (const auto& c : cases) {
        CAPTURE(format_name(c.f));
        convert_options o;
        o.format = c.f;
        o.rules.default_scheme = c.s;
        const std::string out = scratch("fmt" + std::to_string(n++));
        convert(demo_dir(), out, o);
        const auto t = tensors_of(out);
        CHECK(t.count(c.probe) == 1);
        const json qc = json::parse(io::read_file(out + "/config.json")).at("quantization_config");
        CHECK(qc.contains("quant_method"));
        if (c.f == output_format::compressed_tensors) {
            CHECK(qc.at("ignore").at(0).as_string() == "lm_head");
            CHECK(t.at("model.layers.0.mlp.up_proj.weight_scale").first == dtype::BF16);
        }
        if (c.f == output_format::awq) CHECK(t.at("model.layers.0.mlp.up_proj.scales").first == dtype::F16);
    }
}

TEST_CASE("output bytes do not depend on the thread count") {
    convert_options o = w4a8_cpu();
    o.threads = 1;
    o.max_shard_bytes = 1 << 20;  // several shards and an index
    const std::string a = scratch("t1"), b = scratch("t2");
    convert(demo_dir(), a, o);
    o.threads = 2;
    convert(demo_dir(), b, o);
    const auto files = io::list_directory(a);
    CHECK(files.size() > 6);
    for (const auto& f : files) {
        CAPTURE(f);
        CHECK(io::read_file(a + "/" + f) == io::read_file(b + "/" + f));
    }
}

TEST_CASE("every source_read mode (pread bands, whole copies, the mapping) writes the same bytes") {
    CHECK(convert_options{}.read == source_read::pread);  // the default never reads the mapping
    // The seed model too: fused q_k_v_proj split (bands read from a row offset of the source),
    // a kept tensor cast (read and cast in chunks), two formats (GPTQ and AWQ layouts).
    demo_options d = small_demo();
    d.seed_naming = true;
    const std::string seed = scratch("seed-modes");
    write_demo_checkpoint(seed, d);
    for (const output_format f : {output_format::gptq, output_format::awq}) {
        for (const bool seeded : {false, true}) {
            CAPTURE(static_cast<int>(f));
            CAPTURE(seeded);
            const quant_spec scheme = f == output_format::awq ? quant_spec{4, 64, false, scale_method::minmax, dtype::F16} : w4a8();
            convert_options o;
            o.format = f;
            o.threads = 2;
            o.rules.default_scheme = scheme;
            if (seeded) {
                o.rules.split_qkv("q_k_v_proj").untie("model.embedding.weight").quantize("lm_head", scheme);
                o.rules.keep("re:.*norm.*", dtype::F32);
            } else {
                o.rules.untie("model.embed_tokens.weight").quantize("lm_head", scheme);
            }
            const std::string src = seeded ? seed : demo_dir();
            const std::string a = scratch("mapped"), b = scratch("copied"), c = scratch("pread");
            o.read = source_read::mapped;
            convert(src, a, o);
            o.read = source_read::copied;
            convert(src, b, o);
            o.read = source_read::pread;
            convert(src, c, o);
            const auto files = io::list_directory(a);
            CHECK(files.size() >= 5);
            for (const auto& file : files) {
                CAPTURE(file);
                const std::string bytes = io::read_file(a + "/" + file);
                CHECK(io::read_file(b + "/" + file) == bytes);
                CHECK(io::read_file(c + "/" + file) == bytes);
            }
        }
    }
}

TEST_CASE("refusals, an existing destination and a failure midway leave nothing behind") {
    SUBCASE("a refused plan writes nothing") {
        convert_options o = w4a8_cpu();
        o.rules.rules.clear();
        o.rules.quantize("lm_head", w4a8());  // tied head without untie
        const std::string out = scratch("refused");
        CHECK_THROWS_AS(convert(demo_dir(), out, o), unsupported_error);
        CHECK_FALSE(io::path_exists(out));
        CHECK_FALSE(leftovers(out));
    }
    SUBCASE("existing destination untouched without overwrite, replaced with it") {
        const std::string out = scratch("exists");
        io::make_directory(out);
        io::write_file(out + "/keep.txt", std::string("mine"));
        CHECK_THROWS_AS(convert(demo_dir(), out, w4a8_cpu()), io_error);
        CHECK(io::read_file(out + "/keep.txt") == "mine");
        convert_options o = w4a8_cpu();
        o.overwrite = true;
        convert(demo_dir(), out, o);
        CHECK_FALSE(io::path_exists(out + "/keep.txt"));
        CHECK(io::path_exists(out + "/quantization_report.json"));
        CHECK_FALSE(leftovers(out));
    }
    SUBCASE("an exception at the third tensor") {
        const std::string out = scratch("boom");
        io::make_directory(out);
        io::write_file(out + "/keep.txt", std::string("mine"));
        convert_options o = w4a8_cpu();
        o.overwrite = true;
        o.before_tensor = [](std::size_t i) {
            if (i == 2) throw std::runtime_error("injected");
        };
        CHECK_THROWS_WITH(convert(demo_dir(), out, o), "injected");
        CHECK(io::read_file(out + "/keep.txt") == "mine");
        CHECK_FALSE(leftovers(out));
    }
    SUBCASE("cancel from the progress callback") {
        const std::string out = scratch("cancel");
        convert_options o = w4a8_cpu();
        o.progress = [](const progress_event& e) { return e.index < 3; };
        CHECK_THROWS_AS(convert(demo_dir(), out, o), error);
        CHECK_FALSE(io::path_exists(out));
        CHECK_FALSE(leftovers(out));
    }
}

TEST_CASE("the seed model: fused q_k_v_proj split, out_proj kept by name, embedding untied into lm_head") {
    demo_options d = small_demo();
    d.seed_naming = true;
    const std::string src = scratch("seed");
    write_demo_checkpoint(src, d);
    convert_options o;
    o.format = output_format::gptq;
    o.rules.default_scheme = w4a8();
    o.rules.split_qkv("q_k_v_proj").untie("model.embedding.weight").quantize("lm_head", w4a8());
    const std::string out = scratch("seed-out");
    convert(src, out, o);
    const auto t = tensors_of(out);
    // What gptq_w4a8_exporter.py writes: per linear qweight [K/8, N], qzeros [K/g, N/8],
    // scales bf16 [K/g, N], g_idx [K]; q/k/v split by heads * head_dim; the table stays bf16.
    const std::string p = "model.layers.0.self_attn.";
    CHECK(t.at(p + "q_proj.qweight") == std::pair<dtype, shape_t>{dtype::I32, {16, 128}});
    CHECK(t.at(p + "k_proj.qweight") == std::pair<dtype, shape_t>{dtype::I32, {16, 64}});
    CHECK(t.at(p + "v_proj.qzeros") == std::pair<dtype, shape_t>{dtype::I32, {2, 8}});
    CHECK(t.at(p + "v_proj.scales") == std::pair<dtype, shape_t>{dtype::BF16, {2, 64}});
    CHECK(t.at(p + "out_proj.g_idx") == std::pair<dtype, shape_t>{dtype::I32, {128}});
    CHECK(t.at("lm_head.qweight") == std::pair<dtype, shape_t>{dtype::I32, {16, 512}});
    CHECK(t.at("model.embedding.weight") == std::pair<dtype, shape_t>{dtype::BF16, {512, 128}});
    CHECK(t.count(p + "q_k_v_proj.qweight") == 0);
    const json cfg = json::parse(io::read_file(out + "/config.json"));
    CHECK_FALSE(cfg.at("tie_word_embeddings").as_bool());

    // k_proj holds exactly the fused tensor's rows [128, 192) (after q's 4 heads x 32), quantized and packed.
    checkpoint_source in(src), written(out);
    const tensor_view fused = in.view("model.layers.0.self_attn.q_k_v_proj.weight");
    const std::size_t row = 128 * 2;
    const tensor_view k_rows{"k", dtype::BF16, {64, 128}, fused.bytes.subspan(128 * row, 64 * row)};
    const quantized_tensor q = quantize(k_rows, detail::options_for(w4a8(), output_format::gptq));
    const auto packed = gptq_layout<4>({gptq_format::v1, dtype::BF16, false}).pack(q, p + "k_proj");
    for (const owned_tensor& t : packed) {
        CAPTURE(t.name);
        const tensor_view v = written.view(t.name);
        CHECK(std::equal(t.bytes.begin(), t.bytes.end(), v.bytes.begin(), v.bytes.end()));
    }
}

TEST_CASE("--imatrix: each layer's scale search is weighted by its imatrix entry (mean x^2), others by nothing") {
    // llama-imatrix entry of layer 0's q_proj input (K = 128): sums over 4 tokens, so the
    // importance handed to the quantizer is sums / 4 (io/gguf/imatrix.hpp).
    std::vector<float> sums(128), expected(128);
    for (std::size_t k = 0; k < sums.size(); ++k) {
        expected[k] = k % 16 == 0 ? 64.0f : 0.25f * static_cast<float>(1 + k % 3);
        sums[k] = 4.0f * expected[k];
    }
    const std::string im = scratch("imatrix.gguf");
    {
        gguf::file_writer w(im, {{"imatrix.datasets", gguf::value::array_of<std::string>(gguf::value_type::string, {"c.txt"})},
                                 {"imatrix.chunk_count", gguf::value::u32(1)},
                                 {"imatrix.chunk_size", gguf::value::u32(512)}},
                            {{"blk.0.attn_q.weight.in_sum2", {128, 1}, gguf::ggml_type::f32},
                             {"blk.0.attn_q.weight.counts", {1, 1}, gguf::ggml_type::f32}});
        const float count = 4.0f;
        w.write_tensor(std::as_bytes(std::span<const float>(sums)));
        w.write_tensor(std::as_bytes(std::span<const float>(&count, 1)));
        w.finish();
    }
    convert_options o = w4a8_cpu();
    o.imatrix = im;
    const std::string out_with = scratch("out-imatrix"), out_without = scratch("out-no-imatrix");
    const auto r = convert(demo_dir(), out_with, o);
    CHECK(r.imatrix_layers == std::vector<std::string>{"model.layers.0.self_attn.q_proj"});
    CHECK(r.layers_without_imatrix.size() == r.report.tensors.size() - 1);
    (void)convert(demo_dir(), out_without, w4a8_cpu());

    // The converter's bytes are those of the quantizer given that importance, and differ from
    // the unweighted search's.
    checkpoint_source src(demo_dir());
    const tensor_view q = src.view("model.layers.0.self_attn.q_proj.weight");
    thread_pool pool(1);
    const auto direct = detail::quantize_rows_packed(q, 0, q.shape[0], w4a8(), output_format::gptq, dtype::BF16,
                                                     pool.executor(), q.name, "model.layers.0.self_attn.q_proj", expected);
    const checkpoint_source with(out_with), without(out_without);
    for (const owned_tensor& t : direct.tensors) {
        CAPTURE(t.name);
        const auto a = with.view(t.name).bytes;
        CHECK(std::equal(a.begin(), a.end(), t.bytes.begin(), t.bytes.end()));
    }
    const auto sw = with.view("model.layers.0.self_attn.q_proj.scales").bytes;
    const auto so = without.view("model.layers.0.self_attn.q_proj.scales").bytes;
    CHECK_FALSE(std::equal(sw.begin(), sw.end(), so.begin(), so.end()));
    const auto kw = with.view("model.layers.0.self_attn.k_proj.qweight").bytes;
    const auto ko = without.view("model.layers.0.self_attn.k_proj.qweight").bytes;
    CHECK(std::equal(kw.begin(), kw.end(), ko.begin(), ko.end()));  // no entry: unweighted

    // imatrix_layers selects which layers it weights: q_proj left out is the unweighted search.
    o.imatrix_layers = {selector("k_proj")};
    const std::string out_selected = scratch("out-imatrix-k-only");
    const auto sel = convert(demo_dir(), out_selected, o);
    CHECK(sel.imatrix_layers.empty());
    CHECK(sel.layers_without_imatrix ==
          std::vector<std::string>{"model.layers.0.self_attn.k_proj", "model.layers.1.self_attn.k_proj"});
    const checkpoint_source selected(out_selected);
    const auto qs = selected.view("model.layers.0.self_attn.q_proj.scales").bytes;
    CHECK(std::equal(qs.begin(), qs.end(), so.begin(), so.end()));
}

namespace {

/// A llama-imatrix GGUF with the given entries (sums over 4 tokens of the values given).
void write_imatrix(const std::string& path, const std::vector<std::pair<std::string, std::vector<float>>>& entries) {
    std::vector<gguf::tensor_decl> decls;
    for (const auto& [name, mean] : entries) {
        decls.push_back({name + ".in_sum2", {static_cast<std::int64_t>(mean.size()), 1}, gguf::ggml_type::f32});
        decls.push_back({name + ".counts", {1, 1}, gguf::ggml_type::f32});
    }
    gguf::file_writer w(path, {{"imatrix.datasets", gguf::value::array_of<std::string>(gguf::value_type::string, {"c.txt"})},
                               {"imatrix.chunk_count", gguf::value::u32(1)},
                               {"imatrix.chunk_size", gguf::value::u32(512)}},
                        decls);
    const float count = 4.0f;
    for (const auto& [name, mean] : entries) {
        std::vector<float> sums(mean);
        for (auto& x : sums) x *= count;
        w.write_tensor(std::as_bytes(std::span<const float>(sums)));
        w.write_tensor(std::as_bytes(std::span<const float>(&count, 1)));
    }
    w.finish();
}

std::vector<float> outlier_profile(std::size_t k) {
    std::vector<float> m(k);
    for (std::size_t i = 0; i < k; ++i) m[i] = i % 16 == 5 ? 400.0f : 0.5f + 0.01f * static_cast<float>(i % 7);
    return m;
}

std::vector<float> bf16_values(const tensor_view& v) {
    std::vector<float> f(static_cast<std::size_t>(v.numel()));
    for (std::size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_float(v.data<std::uint16_t>()[i]);
    return f;
}

/// sum_k m_k sum_n (w - dq / s)^2 of one GPTQ v1 layer of an output folder.
double weighted_error(const checkpoint_source& out, const tensor_view& w, const std::string& module,
                      const std::vector<float>& m, const std::vector<float>& s) {
    std::vector<tensor_view> views;
    for (const char* suffix : {".qweight", ".qzeros", ".scales", ".g_idx"}) views.push_back(out.view(module + suffix));
    const quantized_tensor q = gptq_layout<4>({.format = gptq_format::v1, .scale_dtype = dtype::BF16})
                                   .unpack(views, module, {.group_size = 64, .symmetric = true});
    const std::vector<float> src = bf16_values(w);
    double e = 0;
    for (std::int64_t n = 0; n < q.rows; ++n)
        for (std::int64_t k = 0; k < q.cols; ++k) {
            const double d = src[n * q.cols + k] - static_cast<double>(q.dequantized(n, k)) / s[k];
            e += m[k] * d * d;
        }
    return e;
}

}  // namespace

TEST_CASE("--imatrix: an entry of the wrong size is refused at plan time, before any tensor or output exists") {
    const std::string im = scratch("imatrix-wrong-size.gguf");
    write_imatrix(im, {{"blk.0.attn_q.weight", std::vector<float>(64, 1.0f)}});  // q_proj has K = 128
    convert_options o = w4a8_cpu();
    o.imatrix = im;
    std::size_t tensors_started = 0;
    o.before_tensor = [&](std::size_t) { ++tensors_started; };
    const std::string out = scratch("out-imatrix-wrong-size");
    CHECK_THROWS_WITH_AS(convert(demo_dir(), out, o),
                         doctest::Contains("imatrix has 64 values, but model.layers.0.self_attn.q_proj.weight needs 128"),
                         shape_error);
    CHECK(tensors_started == 0);
    CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("activation scaling: power-of-two scales folded exactly into the norms, lower weighted output error, reported") {
    const std::string im = scratch("imatrix-scaling.gguf");
    const std::vector<float> m = outlier_profile(128), m_down = outlier_profile(256);
    write_imatrix(im, {{"blk.0.attn_q.weight", m}, {"blk.0.attn_k.weight", m}, {"blk.0.attn_v.weight", m},
                       {"blk.0.attn_output.weight", m}, {"blk.0.ffn_gate.weight", m}, {"blk.0.ffn_up.weight", m},
                       {"blk.0.ffn_down.weight", m_down}});
    convert_options o = w4a8_cpu();
    o.imatrix = im;
    const std::string plain_dir = scratch("out-imatrix-only"), scaled_dir = scratch("out-scaled");
    (void)convert(demo_dir(), plain_dir, o);
    o.activation_scaling = true;
    const auto r = convert(demo_dir(), scaled_dir, o);

    // Every group of both layers is reported; layer 1 has no statistics, o_proj sits after a GQA repeat.
    REQUIRE(r.report.activation_folds.size() == 8);
    const auto& qkv = r.report.activation_folds[0];
    CHECK(qkv.folded_into == "model.layers.0.input_layernorm.weight");
    CHECK(qkv.skipped.empty());
    CHECK(qkv.alpha > 0);
    CHECK(qkv.weighted_error < qkv.weighted_error_unscaled);
    CHECK(r.report.activation_folds[3].skipped.find("GQA") != std::string::npos);
    CHECK(r.report.activation_folds[4].skipped == "the imatrix has no entry for its input");
    CHECK(r.report.to_json().find("activation_scaling") != nullptr);

    // The fold is exact: source norm = output norm x s, s a power of two for every column.
    const checkpoint_source src(demo_dir()), plain(plain_dir), scaled(scaled_dir);
    const auto g = bf16_values(src.view("model.layers.0.input_layernorm.weight"));
    const auto g2 = bf16_values(scaled.view("model.layers.0.input_layernorm.weight"));
    std::vector<float> s(g.size());
    bool some_scaled = false;
    for (std::size_t k = 0; k < g.size(); ++k) {
        s[k] = g[k] / g2[k];
        CHECK(std::exp2(std::round(std::log2(s[k]))) == s[k]);
        CHECK(g2[k] * s[k] == g[k]);
        some_scaled = some_scaled || s[k] != 1.0f;
    }
    CHECK(some_scaled);
    // What the loaders decode, divided back by s, has less imatrix-weighted output error than
    // the unscaled conversion, and the report's figure is that error.
    const std::vector<float> ones(128, 1.0f);
    double scaled_err = 0, plain_err = 0;
    for (const char* lin : {"q_proj", "k_proj", "v_proj"}) {
        const std::string module = std::string("model.layers.0.self_attn.") + lin;
        const tensor_view w = src.view(module + ".weight");
        scaled_err += weighted_error(scaled, w, module, m, s);
        plain_err += weighted_error(plain, w, module, m, ones);
    }
    CHECK(scaled_err < plain_err);
    CHECK(scaled_err == doctest::Approx(qkv.weighted_error).epsilon(1e-6));
    // o_proj was left alone.
    const auto a = scaled.view("model.layers.0.self_attn.o_proj.qweight").bytes;
    const auto b = plain.view("model.layers.0.self_attn.o_proj.qweight").bytes;
    CHECK(std::equal(a.begin(), a.end(), b.begin(), b.end()));

    convert_options no_imatrix = w4a8_cpu();
    no_imatrix.activation_scaling = true;
    CHECK_THROWS_WITH_AS(convert(demo_dir(), scratch("out-refused"), no_imatrix), doctest::Contains("needs the input statistics"),
                         unsupported_error);
}

// ---- FP8 sources (issue 16 item 1; convert/fp8_source.hpp) --------------------------------

namespace {

std::string fp8_checkpoint(const testing::fp8_fixture& f, const std::string& name) {
    const std::string p = scratch(name);
    testing::write_fp8_checkpoint(p, f);
    return p;
}

bool same_file(const std::string& a, const std::string& b) { return io::read_file(a) == io::read_file(b); }

}  // namespace

TEST_CASE("FP8 block-scaled source (quant_method fp8, ragged 128x128 grid): GPTQ v1/v2 and AWQ write the bytes of its dequantized twin") {
    // The twin holds e4m3(code) * scale_inv as F32, computed by the fixture from the E4M3
    // definition: converting the FP8 source must give the very bytes converting the twin gives
    // (same tensors, same report SNRs: the SNR is against the dequantized source).
    for (dtype scale_type : {dtype::F32, dtype::BF16}) {
        CAPTURE(dtype_name(scale_type));
        testing::fp8_fixture f;
        f.scale_type = scale_type;
        const std::string tag = std::string(dtype_name(scale_type));
        const std::string src = fp8_checkpoint(f, "fp8-" + tag);
        f.twin = true;
        const std::string twin = fp8_checkpoint(f, "fp8-twin-" + tag);
        struct fmt_case {
            output_format f;
            quant_spec s;
        };
        const fmt_case cases[] = {{output_format::gptq, {4, 64, true, scale_method::minmax, std::nullopt}},
                                  {output_format::gptq_v2, {8, -1, true, scale_method::search, std::nullopt}},
                                  {output_format::awq, {4, 64, false, scale_method::minmax, std::nullopt}}};
        for (const auto& c : cases) {
            CAPTURE(format_name(c.f));
            convert_options o;
            o.format = c.f;
            o.rules.default_scheme = c.s;
            o.threads = 2;
            const std::string a = scratch("fp8-out-" + tag), b = scratch("fp8-twin-out-" + tag);
            const conversion_result r = convert(src, a, o);
            convert(twin, b, o);
            CHECK(r.report.tensors.size() == 7);
            CHECK(same_file(a + "/model.safetensors", b + "/model.safetensors"));
            CHECK(same_file(a + "/quantization_report.json", b + "/quantization_report.json"));
            for (const auto& [name, t] : tensors_of(a)) {
                CHECK_FALSE(name.ends_with("_scale_inv"));
                CHECK(t.first != dtype::F8_E4M3);
            }
            // The source's quantization_config is replaced, not merged.
            const json qc = json::parse(io::read_file(a + "/config.json")).at("quantization_config");
            CHECK(qc.at("quant_method").as_string() == (c.f == output_format::awq ? "awq" : "gptq"));
            CHECK_FALSE(qc.contains("weight_block_size"));
            CHECK_FALSE(qc.contains("fmt"));
            CHECK_FALSE(qc.contains("activation_scheme"));
        }
    }
}

// transformers' FP8Expert keeps the fused experts of a Qwen3-MoE FP8 checkpoint as
// `gate_up_proj [E, 2I, H]` F8_E4M3 with `gate_up_proj_scales_inv [E, 2I/128, H/128]`
// (src/transformers/integrations/finegrained_fp8.py FP8Expert.__init__, Fp8Quantize.convert).
// Each expert is read and decoded on its own under its own grid: the output is the bytes of the
// F32 twin's, under pread (the default), the mapping and whole copies alike.
TEST_CASE("FP8 fused 3-D experts (transformers FP8Expert): the bytes of the dequantized twin, every read mode") {
    testing::fp8_fixture f;
    f.fused_experts = 4;
    const std::string src = fp8_checkpoint(f, "fp8-fused");
    f.twin = true;
    const std::string twin = fp8_checkpoint(f, "fp8-fused-twin");
    for (const output_format fmt : {output_format::gptq, output_format::awq}) {
        CAPTURE(format_name(fmt));
        convert_options o;
        o.format = fmt;
        o.rules.default_scheme = quant_spec{4, 64, fmt == output_format::gptq, scale_method::minmax, std::nullopt};
        o.threads = 2;
        const std::string b = scratch("fp8-fused-twin-out");
        convert(twin, b, o);
        for (const source_read mode : {source_read::pread, source_read::mapped, source_read::copied}) {
            CAPTURE(static_cast<int>(mode));
            o.read = mode;
            const std::string a = scratch("fp8-fused-out");
            const conversion_result r = convert(src, a, o);
            CHECK(r.report.tensors.size() == 4 + 3 * 4);  // attention + every expert's gate, up and down
            CHECK(same_file(a + "/model.safetensors", b + "/model.safetensors"));
            CHECK(same_file(a + "/quantization_report.json", b + "/quantization_report.json"));
            for (const auto& [name, t] : tensors_of(a)) {
                CHECK_FALSE(name.ends_with("_scales_inv"));
                CHECK(t.second.size() <= 2);  // never a fused 3-D quantized tensor
            }
        }
    }
}

TEST_CASE("FP8 source read through pread copies gives the bytes of the mapped read") {
    const std::string src = fp8_checkpoint({}, "fp8-read");
    convert_options o;
    o.format = output_format::gptq_v2;
    o.rules.default_scheme = quant_spec{4, 64, true, scale_method::minmax, std::nullopt};
    const std::string a = scratch("fp8-mapped"), b = scratch("fp8-copied");
    convert(src, a, o);
    o.read = source_read::copied;
    convert(src, b, o);
    CHECK(same_file(a + "/model.safetensors", b + "/model.safetensors"));
}

TEST_CASE("FP8 sources -> compressed-tensors: each layer is the quantization of the dequantized source; dense layers carried over") {
    struct src_case {
        testing::fp8_layout layout;
        dtype scale_type;
    };
    const src_case cases[] = {{testing::fp8_layout::native_block, dtype::F32},
                              {testing::fp8_layout::ct_block, dtype::BF16},
                              {testing::fp8_layout::ct_channel, dtype::BF16}};
    int n = 0;
    for (const auto& c : cases) {
        CAPTURE(n);
        testing::fp8_fixture f;
        f.layout = c.layout;
        f.scale_type = c.scale_type;
        f.dense = {"model.layers.0.self_attn.o_proj"};  // modules_to_not_convert / ignore
        const std::string src = fp8_checkpoint(f, "fp8-ct-src" + std::to_string(n));
        f.twin = true;
        const std::string twin = fp8_checkpoint(f, "fp8-ct-twin" + std::to_string(n));
        const std::string out = scratch("fp8-ct-out" + std::to_string(n++));
        convert_options o;
        o.format = output_format::compressed_tensors;
        const quant_spec scheme{4, 64, true, scale_method::minmax, std::nullopt};
        o.rules.default_scheme = scheme;
        const conversion_result r = convert(src, out, o);

        checkpoint_source written(out), expected_from(twin), source(src);
        quant_spec resolved = scheme;
        resolved.scale_dtype = dtype::BF16;  // compressed-tensors: the model dtype (torch_dtype), not the scales'
        const compressed_tensors_layout<4> layout(ct_options{ct_packing::padded_v0_12, dtype::BF16});
        std::size_t checked = 0;
        for (const std::string& m : testing::fp8_fixture_linears()) {
            CAPTURE(m);
            if (m.ends_with("o_proj")) continue;
            snr_sums snr;
            const auto want = quantize_packed(expected_from.view(m + ".weight"),
                                              detail::options_for(resolved, output_format::compressed_tensors), layout, m, {},
                                              &snr);
            for (const owned_tensor& t : want) {
                CAPTURE(t.name);
                const tensor_view v = written.view(t.name);
                CHECK(v.type == t.type);
                CHECK(std::equal(t.bytes.begin(), t.bytes.end(), v.bytes.begin(), v.bytes.end()));
            }
            for (const auto& rt : r.report.tensors)
                if (rt.name == m) CHECK(rt.snr_db == doctest::Approx(snr.db()).epsilon(1e-12));
            ++checked;
        }
        CHECK(checked == 6);
        // The dense linear stays as the source has it, and is listed in ignore with lm_head.
        const tensor_view dense = written.view("model.layers.0.self_attn.o_proj.weight");
        const tensor_view orig = source.view("model.layers.0.self_attn.o_proj.weight");
        CHECK(dense.type == dtype::BF16);
        CHECK(std::equal(dense.bytes.begin(), dense.bytes.end(), orig.bytes.begin(), orig.bytes.end()));
        const json qc = json::parse(io::read_file(out + "/config.json")).at("quantization_config");
        CHECK(qc.at("format").as_string() == "pack-quantized");
        std::vector<std::string> ignore;
        for (const json& e : qc.at("ignore").as_array()) ignore.push_back(e.as_string());
        std::sort(ignore.begin(), ignore.end());
        CHECK(ignore == std::vector<std::string>{"lm_head", "model.layers.0.self_attn.o_proj"});
        for (const auto& [name, t] : tensors_of(out)) {
            CHECK_FALSE(name.ends_with("_scale_inv"));
            CHECK(t.first != dtype::F8_E4M3);
        }
    }
}

TEST_CASE("FP8 source: a kept FP8 linear is written dequantized in the model dtype, its scale dropped") {
    const std::string src = fp8_checkpoint({}, "fp8-keep");
    testing::fp8_fixture f;
    f.twin = true;
    const std::string twin = fp8_checkpoint(f, "fp8-keep-twin");
    convert_options o;
    o.format = output_format::compressed_tensors;
    o.rules.default_scheme = quant_spec{8, -1, true, scale_method::minmax, std::nullopt};
    o.rules.keep("model.layers.0.mlp.down_proj");
    const std::string out = scratch("fp8-keep-out");
    convert(src, out, o);
    checkpoint_source written(out), t(twin);
    const tensor_view v = written.view("model.layers.0.mlp.down_proj.weight");
    const tensor_view w = t.view("model.layers.0.mlp.down_proj.weight");
    REQUIRE(v.type == dtype::BF16);
    REQUIRE(v.bytes.size() * 2 == w.bytes.size());
    bool all = true;
    for (std::size_t i = 0; i < v.bytes.size() / 2; ++i) {
        std::uint16_t h;
        float x;
        std::memcpy(&h, v.bytes.data() + 2 * i, 2);
        std::memcpy(&x, w.bytes.data() + 4 * i, 4);
        all = all && h == float_to_bf16(x);
    }
    CHECK(all);
    CHECK_FALSE(written.contains("model.layers.0.mlp.down_proj.weight_scale_inv"));
}

TEST_CASE("FP8 source: the plan shows the source precision; GPTQ refuses a dense decoder linear; a NaN code is refused naming file and tensor") {
    testing::fp8_fixture f;
    f.dense = {"model.layers.0.self_attn.o_proj"};
    const std::string src = fp8_checkpoint(f, "fp8-plan");
    checkpoint_source s(src);
    convert_options o;
    o.format = output_format::compressed_tensors;
    o.rules.default_scheme = quant_spec{4, 64, true, scale_method::minmax, std::nullopt};
    std::ostringstream text;
    const plan p = plan_conversion(s, o);
    print_plan(text, p);
    CHECK_FALSE(p.refused());
    CHECK(text.str().find("model.layers.0.mlp.down_proj.weight [192, 320] F8_E4M3 x F32 scale per 128x128 block -> quantize") !=
          std::string::npos);
    CHECK(text.str().find("_scale_inv") == std::string::npos);
    CHECK(text.str().find("model.layers.0.self_attn.o_proj.weight [192, 192] BF16 -> keep") != std::string::npos);
    CHECK(p.quantized_count() == 6);

    o.format = output_format::gptq;
    const plan g = plan_conversion(s, o);
    REQUIRE(g.refused());
    CHECK(g.refusals.front().find("model.layers.0.self_attn.o_proj") != std::string::npos);

    testing::fp8_fixture bad;
    bad.nan_code = true;
    const std::string nan_src = fp8_checkpoint(bad, "fp8-nan");
    const std::string out = scratch("fp8-nan-out");
    o.format = output_format::compressed_tensors;
    CHECK_THROWS_WITH_AS(convert(nan_src, out, o),
                         (nan_src + "/model.safetensors: tensor 'model.layers.0.mlp.down_proj.weight': E4M3 NaN code 0x7F at row 1, column 2")
                             .insert(0, "qforge: ")
                             .c_str(),
                         format_error);
    CHECK_FALSE(io::path_exists(out));
    CHECK_FALSE(leftovers(out));
}

// ---------------------------------------------------------------------------------------------
// Loader contracts (issue 15): each case builds a checkpoint from the demo generator, converts or
// plans it, and checks the written config / tensors against the rule the loader's source states.

namespace {

json config_of(const std::string& dir) { return json::parse(io::read_file(dir + "/config.json")); }

bool has_warning(const plan& p, std::string_view words) {
    for (const auto& w : p.warnings)
        if (w.find(words) != std::string::npos) return true;
    return false;
}

convert_options with_scheme(output_format f, quant_spec s) {
    convert_options o;
    o.format = f;
    o.rules.default_scheme = s;
    o.threads = 2;
    return o;
}

const quant_spec awq_g64{4, 64, false, scale_method::minmax, std::nullopt};
const quant_spec gptq_g64{4, 64, true, scale_method::minmax, std::nullopt};

/// head_dim 40 (320 / 8) with one kv head: the fused qkv partition is (8 + 2) x 40 = 400 rows.
const std::string& head_dim_40_dir() {
    static const std::string d = [] {
        std::string p = scratch("demo-hd40");
        demo_options o;
        o.hidden = 320;
        o.intermediate = 256;
        o.layers = 1;
        o.heads = 8;
        o.kv_heads = 1;
        o.vocab = 64;
        write_demo_checkpoint(p, o);
        return p;
    }();
    return d;
}

model_config demo_config(const std::string& dir) { return model_config::from_json(checkpoint_source(dir).config()); }

const plan_item& item_named(const plan& p, std::string_view name) {
    for (const auto& it : p.items)
        if (it.name == name) return it;
    FAIL("no plan item " << name);
    return p.items.front();
}

}  // namespace

// vLLM `quantization/auto_awq.py AutoAWQConfig.from_config` reads "lm_head" (default False) and
// `get_quant_method` builds a quantized ParallelLMHead only `if ... self.lm_head_quantized`
// (vllm-project/vllm @0043d6b5). transformers `quantizers/quantizer_awq.py` (gptqmodel backend)
// calls `get_modules_to_not_convert(..., add_default_skips=True)`, which always adds the output
// embedding (`quantizers/base.py get_keys_to_not_convert`); AutoAWQ replaces block linears only.
TEST_CASE("loader contract: AWQ --lm-head writes \"lm_head\": true and warns about transformers and AutoAWQ") {
    auto o = with_scheme(output_format::awq, awq_g64);
    o.rules.untie("model.embed_tokens.weight").quantize("lm_head", awq_g64);
    const std::string out = scratch("awq-lmhead");
    const conversion_result r = convert(demo_dir(), out, o);
    const json qc = config_of(out).at("quantization_config");
    CHECK(qc.at("lm_head").as_bool());
    CHECK(qc.at("modules_to_not_convert").is_null());  // nothing in it would match lm_head's prefix
    const auto t = tensors_of(out);
    CHECK(t.at("lm_head.qweight").second == shape_t{128, 512 / 8});  // [K, N/8], N = vocab
    CHECK(t.count("lm_head.weight") == 0);
    CHECK(has_warning(r.the_plan, "transformers' AwqQuantizer always keeps the output embedding dense"));
    const json rep = json::parse(io::read_file(out + "/quantization_report.json"));
    CHECK(rep.at("loader_warnings").size() == r.the_plan.warnings.size());
}

// vLLM: `utils/quant_utils.py is_layer_skipped(skip_with_substr=True)` substring of the full name
// (@01693a61); transformers: `quantizers_utils.py should_convert_module` (re.match prefix or
// endswith); AutoAWQ: `awq/utils/module.py exclude_layers_to_not_quantize`, `key in name` with the
// block-relative names of `awq/models/base.py _load_quantized_modules` (@88e4c76).
TEST_CASE("loader contract: AWQ partial export lists names that vLLM, transformers and AutoAWQ match exactly") {
    auto o = with_scheme(output_format::awq, awq_g64);
    o.rules.keep("mlp.down_proj");
    const std::string out = scratch("awq-partial");
    const conversion_result r = convert(demo_dir(), out, o);
    const json names = config_of(out).at("quantization_config").at("modules_to_not_convert");
    bool relative = false;
    for (const auto& n : names.as_array()) relative = relative || n.as_string() == "mlp.down_proj";
    CHECK(relative);
    // Every block linear of the written checkpoint: packed (quantized) or a dense .weight.
    int checked = 0;
    for (const auto& [name, info] : tensors_of(out)) {
        const bool packed = name.ends_with(".qweight");
        const bool dense = name.ends_with(".weight") && info.second.size() == 2 && name.find("layers.") != std::string::npos;
        if (!packed && !dense) continue;
        const std::string module = name.substr(0, name.rfind('.'));
        const auto block = loader_match::split_block(module);
        REQUIRE(block);
        bool vllm = false, tf = false, aa = false;
        for (const auto& n : names.as_array()) {
            vllm = vllm || loader_match::vllm_skips(n.as_string(), module);
            tf = tf || loader_match::transformers_skips(n.as_string(), module);
            aa = aa || loader_match::autoawq_skips(n.as_string(), block->second);
        }
        CHECK_MESSAGE(vllm == dense, module);
        CHECK_MESSAGE(tf == dense, module);
        CHECK_MESSAGE(aa == dense, module);
        ++checked;
    }
    CHECK(checked == 14);
    CHECK_FALSE(has_warning(r.the_plan, "AutoAWQ matches"));
    // One block's MLP dense: no block-relative name can say so; AutoAWQ is warned about by name.
    auto one = with_scheme(output_format::awq, awq_g64);
    one.rules.keep("re:model\\.layers\\.0\\.mlp\\..*");
    const plan p = plan_conversion(checkpoint_source(demo_dir()), one);
    REQUIRE_FALSE(p.refused());
    CHECK(has_warning(p, "cannot keep 'model.layers.0.mlp.down_proj' dense"));
    CHECK(p.quantization_config.at("modules_to_not_convert").size() == 4);  // 3 full names + lm_head
}

// vLLM `quantization/auto_gptq.py AutoGPTQConfig.__init__` (@055e47c2): TYPE_MAP holds (4, True)
// and (8, True) only, else ValueError "Unsupported quantization config: bits=4, sym=False".
// compressed-tensors asym loads (`schemes/compressed_tensors_wNa16.py` registers
// weight_zero_point for asymmetric schemes).
TEST_CASE("loader contract: gptq-v2 --asym is announced as GPTQModel-only and points at compressed-tensors asym") {
    quant_spec asym = gptq_g64;
    asym.symmetric = false;
    const checkpoint_source src(demo_dir());
    const model_config cfg = demo_config(demo_dir());
    const plan p = plan_conversion(src, with_scheme(output_format::gptq_v2, asym));
    REQUIRE_FALSE(p.refused());
    CHECK(has_warning(p, "asymmetric GPTQ loads in GPTQModel only:"));
    CHECK(has_warning(p, "wraps a zero of 0"));
    CHECK(has_warning(p, "--format compressed-tensors --asym"));
    const std::vector<int> tp1{1};
    const serving_report r = check_serving(p, cfg, tp1);
    CHECK_FALSE(r.loads_gpu(1));
    CHECK_FALSE(r.loads_cpu(1));
    REQUIRE_FALSE(r.config_refusals.empty());
    CHECK(r.config_refusals[0].find("bits=4, sym=False") != std::string::npos);
    CHECK(p.quantization_config.at("sym").as_bool() == false);
    CHECK(p.quantization_config.at("checkpoint_format").as_string() == "gptq_v2");
    // v1 asym: AutoGPTQ reads it too.
    CHECK(has_warning(plan_conversion(src, with_scheme(output_format::gptq, asym)), "GPTQModel only and AutoGPTQ"));
    // The pointer's target: compressed-tensors asym is served by vLLM, no such warning.
    const plan ct = plan_conversion(src, with_scheme(output_format::compressed_tensors, asym));
    CHECK_FALSE(has_warning(ct, "asymmetric GPTQ"));
    CHECK(check_serving(ct, cfg, tp1).loads_gpu(1));
    CHECK(item_named(ct, "model.layers.0.mlp.up_proj.weight").outputs.size() == 4);  // weight_packed, weight_scale, weight_zero_point, weight_shape
}

// vLLM allocates GPTQ/AWQ scales in the model dtype (`auto_gptq.py AutoGPTQLinearMethod.create_weights`
// GroupQuantScaleParameter dtype=params_dtype @055e47c2; `awq.py AWQLinearMethod.create_weights`)
// and copies the checkpoint's scales into them, rounding F16 to BF16. CPU W4A8 needs bf16
// activations (`kernels/linear/mixed_precision/cpu.py process_weights_after_loading`: use_w4a8 =
// ... and act_type == torch.bfloat16).
TEST_CASE("loader contract: scale dtype vs the model dtype vLLM decodes with") {
    const checkpoint_source src(demo_dir());
    const plan f16 = plan_conversion(src, with_scheme(output_format::gptq, gptq_g64));  // GPTQ default: F16 scales
    CHECK(has_warning(f16, "scales are F16 in a BF16 model"));
    CHECK(has_warning(f16, "--scale-dtype bf16"));
    CHECK(item_named(f16, "model.layers.0.mlp.up_proj.weight").outputs[2].type == dtype::F16);
    quant_spec bf = gptq_g64;
    bf.scale_dtype = dtype::BF16;
    const plan kept = plan_conversion(src, with_scheme(output_format::gptq, bf));
    CHECK_FALSE(has_warning(kept, "scales are"));
    CHECK(item_named(kept, "model.layers.0.mlp.up_proj.weight").outputs[2].type == dtype::BF16);
    CHECK(has_warning(plan_conversion(src, with_scheme(output_format::awq, awq_g64)), "--dtype float16"));
    CHECK_FALSE(has_warning(plan_conversion(src, with_scheme(output_format::compressed_tensors, gptq_g64)), "scales are"));
    // w4a8-cpu on an fp16 model: the W4A16 path, said so (the headers of the demo, as F16).
    auto h = src.tensors();
    for (auto& t : h) t.type = dtype::F16;
    const model_config cfg = demo_config(demo_dir());
    const plan p = make_plan(h, cfg, w4a8_cpu().rules, output_format::gptq);
    REQUIRE_FALSE(p.refused());
    const auto w = loader_warnings(p, cfg, true);
    bool w4a16 = false, scales = false;
    for (const auto& s : w) {
        w4a16 = w4a16 || s.find("W4A16 path") != std::string::npos;
        scales = scales || s.find("scales are BF16 in a F16 model") != std::string::npos;
    }
    CHECK(w4a16);
    CHECK(scales);
    CHECK(loader_warnings(plan_conversion(src, w4a8_cpu()), cfg, true).empty());  // the bf16 seed: silent
}

namespace {

/// The demo checkpoint as an fp16 model: every BF16 tensor rounded to F16 (exact widening then
/// nearest even), one shard, config.json's torch_dtype "float16".
const std::string& loaded_fp16_demo_dir() {
    static const std::string d = [] {
        const std::string p = scratch("demo-fp16");
        std::filesystem::create_directories(p);
        const safetensors::sharded_reader in(demo_dir());
        checkpoint_source src(demo_dir());
        std::vector<owned_tensor> ts;
        for (const auto& t : src.tensors()) {
            const tensor_view v = in.view(t.name);
            owned_tensor o{t.name, v.type, v.shape, std::vector<std::byte>(v.bytes.begin(), v.bytes.end())};
            if (v.type == dtype::BF16) {
                o.type = dtype::F16;
                for (std::size_t i = 0; i + 1 < o.bytes.size(); i += 2) {
                    std::uint16_t h;
                    std::memcpy(&h, o.bytes.data() + i, 2);
                    h = float_to_fp16(bf16_to_float(h));
                    std::memcpy(o.bytes.data() + i, &h, 2);
                }
            }
            ts.push_back(std::move(o));
        }
        std::vector<safetensors::tensor_spec> specs;
        for (const auto& t : ts) specs.push_back({t.name, t.type, t.shape});
        safetensors::writer w(p + "/model.safetensors", specs, safetensors::default_metadata(), {.sync = false});
        for (const auto& t : ts) w.write(t.name, t.bytes);
        w.finish();
        json cfg = src.config();
        cfg.set("torch_dtype", "float16");
        io::write_config(p, cfg);
        return p;
    }();
    return d;
}

const json* loaded_entry(const json& rep, const std::string& module) {
    for (const json& t : rep.at("per_tensor").as_array())
        if (t.at("name").as_string() == module) return &t;
    return nullptr;
}

}  // namespace

// The dtype vLLM serves a model in decides what it keeps of the scales. vllm/config/model.py
// _resolve_auto_dtype: config torch_dtype, "Downcast for float32 models" to the platform's
// first supported dtype (bfloat16: platforms/cuda.py CudaPlatformBase.supported_dtypes on sm80+,
// platforms/cpu.py CpuPlatform.supported_dtypes on x86/aarch64). The scales parameter is
// allocated in that dtype (auto_gptq.py AutoGPTQLinearMethod.create_weights, auto_awq.py
// AutoAWQMarlinLinearMethod.create_weights, compressed_tensors_wNa16.py
// CompressedTensorsWNA16.create_weights: dtype=params_dtype) and the stored tensor copied in
// (parameter.py BasevLLMParameter._assert_and_load: data.copy_).
TEST_CASE("loader contract: vLLM's params_dtype and which stored scale dtypes it re-rounds") {
    CHECK(vllm_params_dtype(dtype::BF16, dtype::F32) == dtype::BF16);
    CHECK(vllm_params_dtype(dtype::F16, dtype::BF16) == dtype::F16);
    CHECK(vllm_params_dtype(dtype::F32, dtype::F32) == dtype::BF16);  // float32 downcast
    CHECK(vllm_params_dtype(std::nullopt, dtype::F16) == dtype::F16);  // no torch_dtype: the weights'
    CHECK(declared_model_dtype(json::parse(R"({"torch_dtype": "float16"})")) == dtype::F16);
    CHECK(declared_model_dtype(json::parse(R"({"dtype": "bfloat16"})")) == dtype::BF16);
    CHECK_FALSE(declared_model_dtype(json::parse(R"({"hidden_size": 8})")));
    for (output_format f : {output_format::gptq, output_format::gptq_v2, output_format::awq, output_format::compressed_tensors}) {
        CAPTURE(format_name(f));
        CHECK(vllm_rounds_scales_to(f, dtype::BF16, dtype::F16) == dtype::BF16);
        CHECK(vllm_rounds_scales_to(f, dtype::F16, dtype::BF16) == dtype::F16);
        CHECK_FALSE(vllm_rounds_scales_to(f, dtype::BF16, dtype::BF16));
    }
    // The float formats have scale rules of their own (not this one).
    CHECK_FALSE(vllm_rounds_scales_to(output_format::compressed_tensors_fp8, dtype::BF16, dtype::F16));
    CHECK_FALSE(vllm_rounds_scales_to(output_format::compressed_tensors_nvfp4, dtype::BF16, dtype::F16));
    // plan_conversion records config.json's torch_dtype.
    CHECK(plan_conversion(checkpoint_source(demo_dir()), with_scheme(output_format::gptq, gptq_g64)).declared_dtype == dtype::BF16);
    CHECK(plan_conversion(checkpoint_source(loaded_fp16_demo_dir()), with_scheme(output_format::gptq, gptq_g64)).declared_dtype ==
          dtype::F16);
}

// quantization_report.json's snr_db_as_loaded, held against a decode written here from the GPTQ
// v1 formula (w = (q - (z + 1)) * s; q packed 8 per int32 down K, z 8 per int32 along N, as
// auto_gptq.py AutoGPTQLinearMethod.create_weights declares qweight packed_dim=0 and qzeros
// packed_dim=1) with each F16 scale rounded to bf16 as torch's copy_ rounds it.
TEST_CASE("loader contract: snr_db_as_loaded is the SNR of what vLLM decodes after re-rounding the scales") {
    const std::string out = scratch("gptq-as-loaded");
    auto o = with_scheme(output_format::gptq, gptq_g64);
    o.threads = 2;
    const conversion_result r = convert(demo_dir(), out, o);
    const json rep = json::parse(io::read_file(out + "/quantization_report.json"));
    const safetensors::sharded_reader got(out), src(demo_dir());
    const std::string m = "model.layers.0.mlp.down_proj";
    const tensor_view qw = got.view(m + ".qweight"), qz = got.view(m + ".qzeros"), sc = got.view(m + ".scales"),
                      w = src.view(m + ".weight");
    REQUIRE(sc.type == dtype::F16);
    REQUIRE(w.type == dtype::BF16);
    const std::int64_t N = w.shape[0], K = w.shape[1];
    auto word = [](const tensor_view& t, std::int64_t i) {
        std::uint32_t x;
        std::memcpy(&x, t.bytes.data() + i * 4, 4);
        return x;
    };
    double sig = 0, err = 0, err_stored = 0;
    for (std::int64_t n = 0; n < N; ++n)
        for (std::int64_t k = 0; k < K; ++k) {
            const std::int64_t g = k / 64;
            const double q = (word(qw, (k / 8) * N + n) >> (4 * (k % 8))) & 15u;
            const double z = ((word(qz, g * (N / 8) + n / 8) >> (4 * (n % 8))) & 15u) + 1;
            std::uint16_t s16, w16;
            std::memcpy(&s16, sc.bytes.data() + (g * N + n) * 2, 2);
            std::memcpy(&w16, w.bytes.data() + (n * K + k) * 2, 2);
            const double kept = bf16_to_float(float_to_bf16(fp16_to_float(s16)));
            const double x = bf16_to_float(w16);
            sig += x * x;
            err += (x - (q - z) * kept) * (x - (q - z) * kept);
            err_stored += (x - (q - z) * fp16_to_float(s16)) * (x - (q - z) * fp16_to_float(s16));
        }
    const json* t = loaded_entry(rep, m);
    REQUIRE(t);
    REQUIRE(t->find("snr_db_as_loaded"));
    CHECK(t->at("snr_db").as_double() == doctest::Approx(10 * std::log10(sig / err_stored)).epsilon(1e-3));
    CHECK(t->at("snr_db_as_loaded").as_double() == doctest::Approx(10 * std::log10(sig / err)).epsilon(1e-3));
    CHECK(t->at("snr_db_as_loaded").as_double() <= t->at("snr_db").as_double() + 0.01);
    for (const auto& e : r.report.tensors) CHECK_FALSE(std::isnan(e.snr_db_as_loaded));
    CHECK(rep.find("snr_db_mean_as_loaded"));
    CHECK(rep.at("snr_db_mean_as_loaded").as_double() <= rep.at("snr_db_mean").as_double() + 0.01);
    // AWQ (F16 scales too): the same figure.
    const std::string awq = scratch("awq-as-loaded");
    for (const auto& e : convert(demo_dir(), awq, with_scheme(output_format::awq, awq_g64)).report.tensors)
        CHECK_FALSE(std::isnan(e.snr_db_as_loaded));
    // Scales stored as vLLM holds them: no second figure, and the report says nothing new.
    quant_spec bf = gptq_g64;
    bf.scale_dtype = dtype::BF16;
    const std::string kept = scratch("gptq-bf16-scales");
    for (const auto& e : convert(demo_dir(), kept, with_scheme(output_format::gptq, bf)).report.tensors)
        CHECK(std::isnan(e.snr_db_as_loaded));
    CHECK(io::read_file(kept + "/quantization_report.json").find("as_loaded") == std::string::npos);
    // compressed-tensors writes the model dtype: nothing re-rounded.
    const std::string ct = scratch("ct-as-loaded");
    for (const auto& e : convert(demo_dir(), ct, with_scheme(output_format::compressed_tensors, gptq_g64)).report.tensors)
        CHECK(std::isnan(e.snr_db_as_loaded));
}

// The FP8-source twin identity (test "FP8 block-scaled source ... write the bytes of its
// dequantized twin") holds with the as-loaded figure in the report: both twins declare
// torch_dtype bfloat16, which is what vLLM serves them in (ModelConfig dtype from config.json,
// not from the stored F8_E4M3 or F32 weights), so both get the same warning and the same figure.
TEST_CASE("loader contract: an FP8 source and its F32 twin are served in their declared bf16, and reported alike") {
    testing::fp8_fixture f;
    const std::string src = fp8_checkpoint(f, "fp8-as-loaded");
    f.twin = true;
    const std::string twin = fp8_checkpoint(f, "fp8-twin-as-loaded");
    const convert_options o = with_scheme(output_format::gptq, gptq_g64);
    const std::string a = scratch("fp8-as-loaded-out"), b = scratch("fp8-twin-as-loaded-out");
    const conversion_result ra = convert(src, a, o);
    convert(twin, b, o);
    CHECK(io::read_file(a + "/quantization_report.json") == io::read_file(b + "/quantization_report.json"));
    CHECK(has_warning(ra.the_plan, "scales are F16 in a BF16 model"));
    const json rep = json::parse(io::read_file(a + "/quantization_report.json"));
    REQUIRE(loaded_entry(rep, "model.layers.0.mlp.down_proj"));
    CHECK(loaded_entry(rep, "model.layers.0.mlp.down_proj")->find("snr_db_as_loaded"));
}

// w4a8-cpu on a real fp16 checkpoint (torch_dtype float16): vLLM serves it in fp16, so
// AutoGPTQLinearMethod.create_weights passes act_type=float16 and CPUWNA16LinearKernel
// .process_weights_after_loading (kernels/linear/mixed_precision/cpu.py) leaves use_w4a8 false
// (it needs act_type == torch.bfloat16): cpu_gemm_wna16 runs, with _get_isa_hint giving "vec"
// for the fp16 scales. The warning names the kernel, the reason and what to do instead.
TEST_CASE("loader contract: w4a8-cpu on an fp16 model warns it lands on vLLM CPU's W4A16 path, and reports what vLLM decodes") {
    auto o = w4a8_cpu();
    o.require_w4a8_cpu = true;
    const std::string out = scratch("w4a8-fp16");
    const conversion_result r = convert(loaded_fp16_demo_dir(), out, o);
    CHECK(has_warning(r.the_plan, "vLLM CPU takes the W4A16 path (cpu_gemm_wna16), not W4A8, for a F16 model"));
    CHECK(has_warning(r.the_plan, "act_type=params_dtype"));
    CHECK(has_warning(r.the_plan, "_get_isa_hint"));
    CHECK(has_warning(r.the_plan, "Serve with --dtype bfloat16 to get W4A8"));
    CHECK(has_warning(r.the_plan, "scales are BF16 in a F16 model"));
    CHECK_FALSE(has_warning(r.the_plan, "--scale-dtype fp16"));  // fp16 scales would not give W4A8 either
    const json rep = json::parse(io::read_file(out + "/quantization_report.json"));
    bool warned = false;
    for (const json& l : rep.at("loader_warnings").as_array()) warned = warned || l.as_string().find("W4A16 path") != std::string::npos;
    CHECK(warned);
    // BF16 -> F16 is exact for normal scales: what vLLM decodes is what was measured.
    for (const auto& t : r.report.tensors) {
        CAPTURE(t.name);
        REQUIRE_FALSE(std::isnan(t.snr_db_as_loaded));
        CHECK(t.snr_db_as_loaded == doctest::Approx(t.snr_db).epsilon(1e-9));
    }
    // The same preset on the bf16 demo: silent, no second figure.
    const std::string seed = scratch("w4a8-bf16");
    const conversion_result s = convert(demo_dir(), seed, o);
    CHECK_FALSE(has_warning(s.the_plan, "W4A16 path"));
    for (const auto& t : s.report.tensors) CHECK(std::isnan(t.snr_db_as_loaded));
}

// vLLM `kernels/linear/mixed_precision/cpu.py CPUWNA16LinearKernel.can_implement`: partition
// input and output sizes (the fused qkv / gate_up partition for N) multiples of 32.
TEST_CASE("loader contract: w4a8-cpu refuses a head_dim-40 model at plan time, naming vLLM CPU's kernel") {
    auto o = w4a8_cpu();
    o.require_w4a8_cpu = true;
    const std::string out = scratch("w4a8-hd40");
    CHECK_THROWS_WITH_AS(convert(head_dim_40_dir(), out, o),
                         doctest::Contains("model.layers.0.self_attn.qkv_proj': w4a8-cpu: vLLM CPU cannot load this layer "
                                           "(vLLM CPUWNA16LinearKernel: output size 400 (of the fused partition) is not a multiple of 32"),
                         unsupported_error);
    CHECK_FALSE(io::path_exists(out));
    // Another GPTQ export of the same model converts, with the warning.
    const plan p = plan_conversion(checkpoint_source(head_dim_40_dir()), with_scheme(output_format::gptq, gptq_g64));
    REQUIRE_FALSE(p.refused());
    CHECK(has_warning(p, "vLLM CPU cannot load model.layers.0.self_attn.qkv_proj"));
    // The seed's own model passes.
    auto seed = w4a8_cpu();
    seed.require_w4a8_cpu = true;
    const plan ok = plan_conversion(checkpoint_source(demo_dir()), seed);
    CHECK_FALSE(ok.refused());
    CHECK(ok.warnings.empty());
}

// vLLM PR #37291 (merged 2026-03-30) added the ParallelLMHead branch to
// `compressed_tensors.py CompressedTensorsConfig.get_quant_method`; @be696453 (mid-2025) has none.
TEST_CASE("loader contract: compressed-tensors --lm-head names the vLLM versions that build a quantized head") {
    auto o = with_scheme(output_format::compressed_tensors, gptq_g64);
    o.rules.untie("model.embed_tokens.weight").quantize("lm_head", gptq_g64);
    const plan p = plan_conversion(checkpoint_source(demo_dir()), o);
    REQUIRE_FALSE(p.refused());
    CHECK(has_warning(p, "PR #37291"));
    CHECK(p.quantization_config.at("config_groups").at("group_0").at("targets").dump().find("\"lm_head\"") != std::string::npos);
    CHECK_FALSE(has_warning(plan_conversion(checkpoint_source(demo_dir()), with_scheme(output_format::compressed_tensors, gptq_g64)),
                            "PR #37291"));
}

// The serving check against vLLM's sharding and kernel rules:
//  column-parallel N / tp, QKVParallelLinear kv heads replicated when tp > kv_heads;
//  row-parallel K / tp and whole groups per rank (`auto_gptq.py create_weights`
//  scales_and_zp_size = input_size_per_partition // group_size);
//  Marlin `utils/marlin_utils.py verify_marlin_supports_shape` (@007d5005): N % 64, K % 128;
//  CPU `CPUWNA16LinearKernel.can_implement`: K % 32, N % 32;
//  AWQ `awq.py AWQLinearMethod.create_weights`: output_size_per_partition % pack_factor (8).
TEST_CASE("serving check: per tensor and tensor-parallel degree, which vLLM kernels take the shards") {
    const model_config cfg = demo_config(demo_dir());  // hidden 128, intermediate 256, 4 heads, 2 kv heads, head_dim 32
    const plan p = plan_conversion(checkpoint_source(demo_dir()), with_scheme(output_format::gptq, gptq_g64));
    REQUIRE_FALSE(p.refused());
    const std::vector<int> tps{1, 2, 4, 8};
    const serving_report r = check_serving(p, cfg, tps);
    auto at = [&](const std::string& m, int tp) -> const shard_check& {
        for (const auto& s : r.shards)
            if (s.module == m && s.tp == tp) return s;
        FAIL("no shard " << m << " at tp " << tp);
        return r.shards.front();
    };
    const std::string qkv = "model.layers.0.self_attn.qkv_proj", o_proj = "model.layers.0.self_attn.o_proj",
                      down = "model.layers.1.mlp.down_proj", gate_up = "model.layers.0.mlp.gate_up_proj";
    CHECK(at(qkv, 1).n == 256);                  // (4 + 2 x 2) x 32
    CHECK(at(qkv, 2).n == 128);                  // (2 + 2 x 1) x 32
    CHECK(at(qkv, 4).n == 96);                   // (1 + 2 x 1) x 32: kv heads replicated
    CHECK_FALSE(at(qkv, 4).marlin);              // 96 % 64
    CHECK(at(qkv, 4).loads_cpu);                 // 96 % 32 == 0
    CHECK_FALSE(at(qkv, 8).loads_gpu);           // 4 heads over 8 ranks
    CHECK(at(gate_up, 2).n == 256);
    CHECK(at(o_proj, 2).k == 64);
    CHECK(at(o_proj, 2).loads_gpu);
    CHECK_FALSE(at(o_proj, 2).marlin);           // K 64 % 128
    CHECK_FALSE(at(o_proj, 4).loads_gpu);        // K 32 is not whole groups of 64
    CHECK(at(down, 2).marlin);                   // K 128
    CHECK(at(down, 4).loads_cpu);                // K 64: CPU yes, Marlin no
    CHECK_FALSE(at(down, 4).marlin);
    CHECK(r.loads_gpu(1));
    CHECK(r.marlin(1));
    CHECK(r.loads_cpu(1));
    CHECK(r.loads_gpu(2));
    CHECK_FALSE(r.marlin(2));
    CHECK_FALSE(r.loads_gpu(4));
    CHECK_FALSE(r.loads_gpu(8));
    std::ostringstream os;
    print_serving(os, r);
    CHECK(os.str().find("serving: tp 4 model.layers.0.self_attn.o_proj (and 1 more like it) [128 x 32 per rank, row-parallel]: "
                        "vLLM weight loader: K per rank 32 is not a multiple of group 64;") != std::string::npos);
    CHECK(os.str().find("serving: tp 1: vLLM GPU loads (Marlin), vLLM CPU loads (CPUWNA16)") != std::string::npos);
    // AWQ packs N in eights; a GGUF row-parallel shard must hold whole blocks.
    const std::vector<std::int64_t> parts{100};
    const auto awq = vllm_kernel_rules(output_format::awq, awq_g64, 100, 128, 128, parts, false);
    CHECK_FALSE(awq[0].ok);
    CHECK(awq[0].why.find("pack factor 8") != std::string::npos);
    // AWQ on CPU is cpu_awq's CPUAWQLinearMethod (blocks of 16 output channels), not CPUWNA16:
    // K = 96 (not a multiple of 32) is fine there, N = 40 is not.
    const std::vector<std::int64_t> p48{48}, p40{40};
    const auto awq_cpu = vllm_kernel_rules(output_format::awq, awq_g64, 48, 96, 96, p48, false);
    CHECK(awq_cpu[2].kernel == "vLLM CPUAWQLinearMethod");
    CHECK(awq_cpu[2].ok);
    CHECK_FALSE(vllm_kernel_rules(output_format::awq, awq_g64, 40, 96, 96, p40, false)[2].ok);
    CHECK_FALSE(vllm_kernel_rules(output_format::gptq, gptq_g64, 48, 96, 96, p48, false)[2].ok);  // CPUWNA16: K % 32
    CHECK_FALSE(gguf_shard_refusal(4096, 256, 8));
    CHECK(gguf_shard_refusal(11008, 256, 4).value_or("").find("2752 is not a multiple of the 256-weight block") != std::string::npos);
    CHECK_FALSE(gguf_shard_refusal(11008, 32, 4));
    // MoE experts are vLLM FusedMoE layers with their own rules: not judged by the dense ones.
    std::vector<source_tensor> moe{{"model.layers.0.mlp.experts.0.gate_proj.weight", dtype::BF16, {256, 128}, "m"},
                                   {"model.layers.0.mlp.experts.0.up_proj.weight", dtype::BF16, {256, 128}, "m"},
                                   {"model.layers.0.mlp.experts.0.down_proj.weight", dtype::BF16, {128, 256}, "m"},
                                   {"model.layers.0.self_attn.o_proj.weight", dtype::BF16, {128, 128}, "m"}};
    rule_set moe_rules;
    moe_rules.default_scheme = gptq_g64;
    const plan mp = make_plan(moe, cfg, moe_rules, output_format::compressed_tensors);
    REQUIRE_FALSE(mp.refused());
    const serving_report mr = check_serving(mp, cfg, tps);
    CHECK(mr.moe_experts_skipped == 3);
    CHECK(mr.shards.size() == 4);  // o_proj at four degrees
    // Config-level refusals no degree helps: GPTQ 3-bit and asym (auto_gptq.py TYPE_MAP), AWQ != 4 bits.
    CHECK(vllm_config_refusal(output_format::gptq, {3, 64, true, scale_method::minmax, std::nullopt}));
    CHECK_FALSE(vllm_config_refusal(output_format::gptq, {8, 64, true, scale_method::minmax, std::nullopt}));
    CHECK_FALSE(vllm_config_refusal(output_format::compressed_tensors, {4, 64, false, scale_method::minmax, std::nullopt}));
}

// GPTQ: GPTQModel `dynamic` (quantization/config.py dynamic_get) read by vLLM's
// `gptq_utils.py get_dynamic_override`; compressed-tensors: one config group per scheme
// (`compressed_tensors.py` target_scheme_map); AWQ: `AutoAWQConfig` has one scheme.
TEST_CASE("per-layer schemes: GPTQ `dynamic`, compressed-tensors groups, AWQ refused") {
    const quant_spec down{8, -1, true, scale_method::minmax, std::nullopt};
    auto o = with_scheme(output_format::gptq, gptq_g64);
    o.rules.quantize("re:.*down_proj", down);
    const std::string out = scratch("gptq-mixed");
    const conversion_result r = convert(demo_dir(), out, o);
    const json qc = config_of(out).at("quantization_config");
    CHECK(qc.at("bits").as_int() == 4);
    CHECK(qc.at("dynamic").dump() == R"({"+:(?:(?:.*\\.)?mlp\\.down_proj)$":{"bits":8,"group_size":-1,"sym":true}})");
    CHECK(json::parse(io::read_file(out + "/quantize_config.json")).at("dynamic").dump() == qc.at("dynamic").dump());
    const auto t = tensors_of(out);
    CHECK(t.at("model.layers.0.mlp.down_proj.qweight").second == shape_t{256 * 8 / 32, 128});
    CHECK(t.at("model.layers.0.mlp.down_proj.scales").second == shape_t{1, 128});
    CHECK(t.at("model.layers.0.mlp.up_proj.qweight").second == shape_t{128 * 4 / 32, 256});
    CHECK(has_warning(r.the_plan, "GPTQModel `dynamic` overrides"));
    // compressed-tensors: the same rules give two config groups.
    auto ct = with_scheme(output_format::compressed_tensors, gptq_g64);
    ct.rules.quantize("re:.*down_proj", down);
    const plan c = plan_conversion(checkpoint_source(demo_dir()), ct);
    REQUIRE_FALSE(c.refused());
    const json& groups = c.quantization_config.at("config_groups");
    REQUIRE(groups.size() == 2);
    for (const auto& g : groups.as_object()) {
        const bool eight = g.value.at("weights").at("num_bits").as_int() == 8;
        CHECK(g.value.at("targets").size() == (eight ? 2u : 12u));  // two down_proj; q/k/v/o/gate/up of two blocks
        if (eight) CHECK(g.value.at("targets").at(0).as_string().ends_with("mlp.down_proj"));
    }
    // AWQ: one scheme per checkpoint, refused naming the reader.
    auto awq = with_scheme(output_format::awq, awq_g64);
    awq.rules.quantize("re:.*down_proj", quant_spec{4, 128, false, scale_method::minmax, std::nullopt});
    const plan a = plan_conversion(checkpoint_source(demo_dir()), awq);
    REQUIRE(a.refused());
    CHECK(a.refusals[0].find("AutoAWQ and vLLM's AutoAWQConfig read one bits/group_size/zero_point") != std::string::npos);
}

// ---- FP8 outputs (issue 17 item 2; layout/fp8.hpp) ----------------------------------------

namespace {

/// The E4M3 code nearest to x by real distance (ties to the even code), saturating at 448:
/// computed from the definition (testing::e4m3_by_definition), not by qforge's encoder.
std::uint8_t nearest_e4m3(float x) {
    const double a = std::fabs(static_cast<double>(x));
    unsigned best = 0;
    for (unsigned c = 1; c <= 0x7E; ++c) {
        const double dc = std::fabs(testing::e4m3_by_definition(static_cast<std::uint8_t>(c)) - a);
        const double db = std::fabs(testing::e4m3_by_definition(static_cast<std::uint8_t>(best)) - a);
        if (dc < db || (dc == db && c % 2 == 0)) best = c;
    }
    return static_cast<std::uint8_t>((std::signbit(x) ? 0x80u : 0u) | best);
}

float bf16_at(const tensor_view& v, std::size_t i) {
    std::uint16_t h;
    std::memcpy(&h, v.bytes.data() + 2 * i, 2);
    return bf16_to_float(h);
}

float scale_at(const tensor_view& v, std::size_t i) {
    if (v.type == dtype::F32) {
        float f;
        std::memcpy(&f, v.bytes.data() + 4 * i, 4);
        return f;
    }
    return bf16_at(v, i);
}

/// vLLM's CompressedTensorsW8A8Fp8 selection, as vllm-project/vllm
/// vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py
/// `_is_fp8_w8a8` reads a config group: float weights and float input activations, symmetric
/// static weights, strategy tensor / channel / block (dynamic inputs always accepted).
bool vllm_is_fp8_w8a8(const json& group) {
    const json& w = group.at("weights");
    const json& in = group.at("input_activations");
    if (w.is_null() || in.is_null()) return false;
    const std::string strategy = w.at("strategy").as_string();
    return w.at("type").as_string() == "float" && in.at("type").as_string() == "float" && w.at("symmetric").as_bool() &&
           !w.at("dynamic").as_bool() && (strategy == "tensor" || strategy == "channel" || strategy == "block") &&
           in.at("dynamic").as_bool();
}

}  // namespace

TEST_CASE("FP8 outputs from bf16: fp8-dynamic (per channel), fp8-block (128x128) and native fp8, every code and scale re-derived") {
    struct fp8_case {
        output_format f;
        std::int64_t block;
        const char* scale_suffix;
        dtype scale_type;
    };
    const fp8_case cases[] = {{output_format::compressed_tensors_fp8, -1, ".weight_scale", dtype::BF16},
                              {output_format::compressed_tensors_fp8, 128, ".weight_scale", dtype::BF16},
                              {output_format::fp8, 128, ".weight_scale_inv", dtype::F32}};
    int n = 0;
    for (const auto& c : cases) {
        CAPTURE(format_name(c.f));
        CAPTURE(c.block);
        convert_options o;
        o.format = c.f;
        o.rules.default_scheme = quant_spec{8, c.block, true, scale_method::minmax, std::nullopt};
        o.threads = 2;
        const std::string out = scratch("fp8-out" + std::to_string(n++));
        const conversion_result r = convert(demo_dir(), out, o);
        CHECK(r.report.tensors.size() == 14);
        checkpoint_source src(demo_dir()), written(out);
        const auto t = tensors_of(out);
        CHECK(t.at("model.embed_tokens.weight").first == dtype::BF16);  // dense as for the integer formats
        CHECK(t.at("model.norm.weight").first == dtype::BF16);
        std::size_t layers = 0;
        for (const auto& rt : r.report.tensors) {
            CAPTURE(rt.name);
            const tensor_view x = src.view(rt.name + ".weight");
            const tensor_view w = written.view(rt.name + ".weight");
            const tensor_view s = written.view(rt.name + c.scale_suffix);
            const std::int64_t rows = x.shape[0], cols = x.shape[1];
            const std::int64_t br = c.block > 0 ? c.block : 1, bc = c.block > 0 ? c.block : cols;
            const std::int64_t sc = (cols + bc - 1) / bc;
            REQUIRE(w.type == dtype::F8_E4M3);
            REQUIRE(w.shape == x.shape);
            REQUIRE(s.type == c.scale_type);
            REQUIRE(s.shape == shape_t{(rows + br - 1) / br, sc});
            bool scales_ok = true, codes_ok = true;
            double sig = 0, err = 0;
            for (std::int64_t b = 0; b < s.shape[0]; ++b)
                for (std::int64_t j = 0; j < sc; ++j) {
                    // compressed-tensors calculate_qparams: amax / ((448 - -448) / 2) in the scale dtype
                    float amax = 0;
                    for (std::int64_t rr = b * br; rr < std::min(rows, (b + 1) * br); ++rr)
                        for (std::int64_t cc = j * bc; cc < std::min(cols, (j + 1) * bc); ++cc)
                            amax = std::max(amax, std::fabs(bf16_at(x, static_cast<std::size_t>(rr * cols + cc))));
                    float want = amax / 448.0f;
                    if (c.scale_type == dtype::BF16) want = bf16_to_float(float_to_bf16(want));
                    const float got = scale_at(s, static_cast<std::size_t>(b * sc + j));
                    scales_ok = scales_ok && got == want;
                    for (std::int64_t rr = b * br; rr < std::min(rows, (b + 1) * br); ++rr)
                        for (std::int64_t cc = j * bc; cc < std::min(cols, (j + 1) * bc); ++cc) {
                            const auto i = static_cast<std::size_t>(rr * cols + cc);
                            const float xv = bf16_at(x, i);
                            // forward.py _quantize: x / scale in the weight dtype (bf16), then to E4M3
                            const std::uint8_t code = nearest_e4m3(bf16_to_float(float_to_bf16(xv / got)));
                            const auto stored = static_cast<std::uint8_t>(w.bytes[i]);
                            codes_ok = codes_ok && stored == code;
                            const double e = static_cast<double>(xv) - testing::e4m3_by_definition(stored) * static_cast<double>(got);
                            sig += static_cast<double>(xv) * xv;
                            err += e * e;
                        }
                }
            CHECK(scales_ok);
            CHECK(codes_ok);
            CHECK(rt.snr_db == doctest::Approx(10 * std::log10(sig / err)).epsilon(1e-6));  // summed in another order
            ++layers;
        }
        CHECK(layers == 14);
        const json qc = json::parse(io::read_file(out + "/config.json")).at("quantization_config");
        if (c.f == output_format::fp8) {
            // What vLLM's Fp8Config and llama.cpp's dequant_model read (field-2026.md 1.1).
            CHECK(qc.at("quant_method").as_string() == "fp8");
            CHECK(qc.at("fmt").as_string() == "e4m3");
            CHECK(qc.at("activation_scheme").as_string() == "dynamic");
            CHECK(qc.at("weight_block_size") == json::array({128, 128}));
            CHECK(qc.at("modules_to_not_convert") == json::array({"lm_head"}));
        } else {
            CHECK(qc.at("quant_method").as_string() == "compressed-tensors");
            CHECK(qc.at("format").as_string() == "float-quantized");
            const json& g = qc.at("config_groups").at("group_0");
            CHECK(vllm_is_fp8_w8a8(g));
            CHECK(g.at("targets").size() == 14);
            CHECK(g.at("weights").at("num_bits").as_int() == 8);
            // quant_scheme.py FP8_DYNAMIC / FP8_BLOCK
            CHECK(g.at("weights").at("strategy").as_string() == (c.block > 0 ? "block" : "channel"));
            CHECK(g.at("weights").at("block_structure") == (c.block > 0 ? json::array({128, 128}) : json()));
            CHECK(g.at("input_activations").at("strategy").as_string() == (c.block > 0 ? "group" : "token"));
            CHECK(g.at("input_activations").at("group_size") == (c.block > 0 ? json(128) : json()));
            CHECK(qc.at("ignore") == json::array({"lm_head"}));
        }
    }
}

TEST_CASE("FP8 outputs from an FP8 source: fp8-block and native fp8 decode close to the dequantized source") {
    const std::string src = fp8_checkpoint({}, "fp8-to-fp8");
    testing::fp8_fixture f;
    f.twin = true;
    const std::string twin = fp8_checkpoint(f, "fp8-to-fp8-twin");
    for (output_format fmt : {output_format::compressed_tensors_fp8, output_format::fp8}) {
        CAPTURE(format_name(fmt));
        convert_options o;
        o.format = fmt;
        o.rules.default_scheme = quant_spec{8, 128, true, scale_method::minmax, std::nullopt};
        const std::string out = scratch(std::string("fp8-to-fp8-out-") + std::string(format_name(fmt)));
        const conversion_result r = convert(src, out, o);
        REQUIRE(r.report.tensors.size() == 7);
        checkpoint_source written(out), expected(twin), source(src);
        const fp8_layout layout(fp8_options_for(fmt, {8, 128, true, scale_method::minmax,
                                                      fmt == output_format::fp8 ? dtype::F32 : dtype::BF16}, dtype::F32));
        for (const auto& rt : r.report.tensors) {
            CAPTURE(rt.name);
            const std::vector<tensor_view> views{written.view(rt.name + ".weight"),
                                                 written.view(rt.name + std::string(layout.scale_suffix()))};
            const std::vector<float> dq = layout.decode(views, rt.name);
            const tensor_view x = expected.view(rt.name + ".weight");
            double sig = 0, err = 0;
            for (std::size_t i = 0; i < dq.size(); ++i) {
                float xv;
                std::memcpy(&xv, x.bytes.data() + 4 * i, 4);
                sig += static_cast<double>(xv) * xv;
                err += (static_cast<double>(xv) - dq[i]) * (static_cast<double>(xv) - dq[i]);
            }
            if (fmt == output_format::fp8) {
                // Same 128x128 grid, same F32 scale dtype: a copy of the source's codes and scales.
                CHECK(std::isinf(rt.snr_db));
                CHECK(err == 0);
                const tensor_view a = source.view(rt.name + ".weight"), b = written.view(rt.name + ".weight");
                const tensor_view sa = source.view(rt.name + ".weight_scale_inv"), sb = written.view(rt.name + ".weight_scale_inv");
                CHECK(std::equal(a.bytes.begin(), a.bytes.end(), b.bytes.begin(), b.bytes.end()));
                CHECK(std::equal(sa.bytes.begin(), sa.bytes.end(), sb.bytes.begin(), sb.bytes.end()));
            } else {
                // BF16 scales (the model dtype): requantized from the decoded values.
                CHECK(rt.snr_db == doctest::Approx(10 * std::log10(sig / err)).epsilon(1e-6));
                CHECK(rt.snr_db > 25.0);
            }
        }
    }
}

// Issue 17 item 4 for compressed-tensors sources: FP8_BLOCK (BF16 128x128 scales, ragged edges)
// -> fp8-block and FP8_DYNAMIC (BF16 per-channel scales) -> fp8-dynamic are on the same grid in
// the same scale dtype (the model's, BF16), so codes and scales are copied byte for byte.
TEST_CASE("FP8 compressed-tensors source -> the same FP8 scheme: codes and scales copied byte for byte") {
    for (const bool block : {true, false}) {
        CAPTURE(block);
        testing::fp8_fixture f;
        f.layout = block ? testing::fp8_layout::ct_block : testing::fp8_layout::ct_channel;
        f.scale_type = dtype::BF16;
        const std::string src = fp8_checkpoint(f, block ? "fp8-ct-copy-block" : "fp8-ct-copy-channel");
        convert_options o;
        o.format = output_format::compressed_tensors_fp8;
        o.rules.default_scheme = quant_spec{8, block ? 128 : -1, true, scale_method::minmax, std::nullopt};
        const std::string out = scratch(block ? "fp8-ct-copy-block-out" : "fp8-ct-copy-channel-out");
        const conversion_result r = convert(src, out, o);
        REQUIRE(r.report.tensors.size() == 7);
        checkpoint_source written(out), source(src);
        for (const auto& rt : r.report.tensors) {
            CAPTURE(rt.name);
            CHECK(std::isinf(rt.snr_db));
            for (const char* suffix : {".weight", ".weight_scale"}) {
                const tensor_view a = source.view(rt.name + suffix), b = written.view(rt.name + suffix);
                CHECK(a.type == b.type);
                CHECK(a.shape == b.shape);
                CHECK(std::equal(a.bytes.begin(), a.bytes.end(), b.bytes.begin(), b.bytes.end()));
            }
        }
    }
}

TEST_CASE("FP8 outputs refuse what they cannot hold, naming the tensor") {
    auto refusal = [&](output_format f, quant_spec s) {
        convert_options o;
        o.format = f;
        o.rules.default_scheme = s;
        checkpoint_source src(demo_dir());
        const plan p = plan_conversion(src, o);
        return p.refusals.empty() ? std::string() : p.refusals.front();
    };
    CHECK(refusal(output_format::compressed_tensors_fp8, {4, -1, true, scale_method::minmax, std::nullopt})
              .find("FP8 weights are 8 bits (E4M3), not 4") != std::string::npos);
    CHECK(refusal(output_format::compressed_tensors_fp8, {8, -1, false, scale_method::minmax, std::nullopt})
              .find("FP8 weights are symmetric") != std::string::npos);
    CHECK(refusal(output_format::compressed_tensors_fp8, {8, -1, true, scale_method::search, std::nullopt})
              .find("FP8 scales are amax / 448 (minmax), not search") != std::string::npos);
    CHECK(refusal(output_format::compressed_tensors_fp8, {8, -1, true, scale_method::minmax, dtype::F16})
              .find("compressed-tensors keeps scales in the checkpoint dtype (BF16)") != std::string::npos);
    const std::string native = refusal(output_format::fp8, {8, -1, true, scale_method::minmax, std::nullopt});
    CHECK(native.find("model.layers.0.") != std::string::npos);
    CHECK(native.find("block scales only") != std::string::npos);
    convert_options o;
    o.format = output_format::fp8;
    o.rules.default_scheme = quant_spec{8, 128, true, scale_method::minmax, std::nullopt};
    o.hessians = "/nonexistent.safetensors";
    const std::string out = scratch("fp8-hessians");
    CHECK_THROWS_AS(convert(demo_dir(), out, o), error);
    CHECK_FALSE(io::path_exists(out));
}

TEST_CASE("W8A8 int8 (compressed-tensors int-quantized): I8 codes and model-dtype scales of the int8 quantizer; dynamic per-token activations") {
    convert_options o;
    o.format = output_format::compressed_tensors_w8a8;
    const quant_spec scheme{8, -1, true, scale_method::minmax, std::nullopt};
    o.rules.default_scheme = scheme;
    const std::string out = scratch("w8a8");
    const conversion_result r = convert(demo_dir(), out, o);
    REQUIRE(r.report.tensors.size() == 14);
    checkpoint_source src(demo_dir()), written(out);
    quant_spec resolved = scheme;
    resolved.scale_dtype = dtype::BF16;
    for (const auto& rt : r.report.tensors) {
        CAPTURE(rt.name);
        // compressed-tensors calculate_qparams for int8: scale = amax / (255 / 2), q = code - 128.
        const quantized_tensor q = quantize(src.view(rt.name + ".weight"), detail::options_for(resolved, output_format::compressed_tensors));
        const tensor_view w = written.view(rt.name + ".weight"), s = written.view(rt.name + ".weight_scale");
        REQUIRE(w.type == dtype::I8);
        REQUIRE(s.type == dtype::BF16);
        REQUIRE(s.shape == shape_t{q.rows, 1});
        bool same = true;
        for (std::size_t i = 0; i < q.codes.size(); ++i)
            same = same && static_cast<int>(static_cast<std::int8_t>(w.bytes[i])) == static_cast<int>(q.codes[i]) - 128;
        CHECK(same);
        CHECK(std::memcmp(s.bytes.data(), q.scales.data(), s.bytes.size()) == 0);
        CHECK(written.contains(rt.name + ".weight_zero_point") == false);
    }
    const json qc = json::parse(io::read_file(out + "/config.json")).at("quantization_config");
    CHECK(qc.at("format").as_string() == "int-quantized");
    const json& g = qc.at("config_groups").at("group_0");
    // vLLM vllm/model_executor/layers/quantization/compressed_tensors/compressed_tensors.py
    // `_is_dynamic_token_w8a8`: 8-bit weights and inputs, weight strategy tensor or channel,
    // input strategy token, both symmetric, static weights and dynamic inputs.
    const json& w = g.at("weights");
    const json& in = g.at("input_activations");
    CHECK(w.at("num_bits").as_int() == 8);
    CHECK(in.at("num_bits").as_int() == 8);
    CHECK(w.at("strategy").as_string() == "channel");
    CHECK(in.at("strategy").as_string() == "token");
    CHECK(w.at("symmetric").as_bool());
    CHECK(in.at("symmetric").as_bool());
    CHECK_FALSE(w.at("dynamic").as_bool());
    CHECK(in.at("dynamic").as_bool());
    CHECK(w.at("type").as_string() == "int");
    CHECK(qc.at("ignore") == json::array({"lm_head"}));

    convert_options bad = o;
    bad.rules.default_scheme = quant_spec{4, -1, true, scale_method::minmax, std::nullopt};
    const plan p = plan_conversion(src, bad);
    REQUIRE(p.refused());
    CHECK(p.refusals.front().find("W8A8 holds 8-bit symmetric weights, not 4-bit sym") != std::string::npos);
}
