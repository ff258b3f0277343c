// End-to-end conversions: every format on a generated checkpoint and on stories260k, the seed's
// fused-qkv and untie paths, refusals and failures that leave nothing behind, thread-count
// independence.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/converter.hpp"
#include "qforge/core/half.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/gguf/writer.hpp"
#include "qforge/io/safetensors/reader.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/quant/quantize.hpp"
#include "support/checkpoint_fixture.hpp"

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
