// Converting on a cluster (convert/cluster/): plan, workers i of n, finalize give the bytes of
// the one-process conversion for every safetensors format, with and without Hessians; a unit
// killed midway is redone, a complete one is skipped; finalize refuses missing, torn or
// corrupted units and writes nothing; the worker index comes from Slurm or an Indexed Job;
// a DeepSeek-V3-shaped (671B) sparse checkpoint plans in seconds, balanced over 64 workers.
#include <doctest/doctest.h>

#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "qforge/convert/cluster.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "qforge/convert/source.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/gguf/writer.hpp"
#include "qforge/io/safetensors/writer.hpp"
#include "support/checkpoint_fixture.hpp"

using namespace qforge;

namespace {

std::string scratch(const std::string& name) {
    static const testing::scratch_root root("cluster");
    return root.fresh(name);
}

const std::string& demo_dir() {
    static const std::string d = [] {
        std::string p = scratch("demo");
        demo_options o = testing::small_demo();
        write_demo_checkpoint(p, o);
        return p;
    }();
    return d;
}

/// Every file of `a` equals the same-named file of `b`, and they hold the same names.
void check_identical(const std::string& a, const std::string& b) {
    auto la = io::list_directory(a), lb = io::list_directory(b);
    std::sort(la.begin(), la.end());
    std::sort(lb.begin(), lb.end());
    REQUIRE(la == lb);
    for (const auto& f : la) {
        CAPTURE(f);
        CHECK(io::read_file(a + "/" + f, std::uint64_t{1} << 32) == io::read_file(b + "/" + f, std::uint64_t{1} << 32));
    }
}

/// plan with `units`, the workers (`workers` of them, 0: one per unit), finalize.
conversion_result run_cluster(const std::string& src, const std::string& dst, const convert_options& o, std::size_t units,
                              std::size_t workers = 0) {
    cluster::make_plan(src, dst, o, units);
    for (std::size_t w = 0; w < (workers ? workers : units); ++w) cluster::work(dst, w, workers, o);
    return cluster::finalize(dst, o);
}

convert_options small_shards(convert_options o) {
    o.max_shard_bytes = 200'000;  // several shards, so units cross shard files
    o.threads = 2;
    return o;
}

}  // namespace

TEST_CASE("cluster: byte-identical to one process for every safetensors format") {
    struct variant {
        const char* name;
        convert_options o;
    };
    std::vector<variant> vs;
    vs.push_back({"w4a8-cpu gptq (untied head)", small_shards(testing::w4a8_cpu())});
    for (auto [name, f, scheme] : {std::tuple{"gptq-v2", output_format::gptq_v2, quant_spec{4, 64, true, scale_method::minmax, dtype::F16}},
                                   std::tuple{"awq", output_format::awq, quant_spec{4, 64, false, scale_method::minmax, dtype::F16}},
                                   std::tuple{"compressed-tensors", output_format::compressed_tensors,
                                              quant_spec{4, 64, false, scale_method::mse, std::nullopt}},
                                   std::tuple{"compressed-tensors-w8a8", output_format::compressed_tensors_w8a8,
                                              quant_spec{8, -1, true, scale_method::minmax, std::nullopt}},
                                   std::tuple{"compressed-tensors-fp8", output_format::compressed_tensors_fp8,
                                              quant_spec{8, -1, true, scale_method::minmax, std::nullopt}}}) {
        convert_options o;
        o.format = f;
        o.rules.default_scheme = scheme;
        vs.push_back({name, small_shards(o)});
    }
    for (const variant& v : vs) {
        CAPTURE(v.name);
        const std::string one = scratch("one"), many = scratch("many");
        const conversion_result a = convert(demo_dir(), one, v.o);
        const conversion_result b = run_cluster(demo_dir(), many, v.o, 5, 2);  // 5 units on 2 workers
        CHECK(a.shards == b.shards);
        check_identical(one, many);
        CHECK_FALSE(io::path_exists(cluster::staging_dir(many)));
    }
}

TEST_CASE("cluster: byte-identical with GPTQ Hessians and act-order") {
    const std::string model = scratch("hmodel"), hess = scratch("h.safetensors");
    demo_options d = testing::small_demo();
    d.layers = 1;
    d.shards = 1;
    write_demo_checkpoint(model, d);
    {
        const std::int64_t k = d.hidden;
        std::vector<double> h(static_cast<std::size_t>(k * k));
        for (std::int64_t r = 0; r < k; ++r)
            for (std::int64_t c = 0; c < k; ++c)
                h[static_cast<std::size_t>(r * k + c)] = (r == c ? 2.0 + 0.01 * static_cast<double>(r % 7) : 0.0) + 0.3 / (1.0 + static_cast<double>(std::abs(r - c)));
        std::vector<safetensors::tensor_spec> specs;
        for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "mlp.up_proj"})
            specs.push_back({std::string("model.layers.0.") + m + ".hessian", dtype::F64, {k, k}});
        safetensors::writer w(hess, specs);
        for (const auto& s : specs) w.write(s.name, std::as_bytes(std::span(h)));
        w.finish();
    }
    convert_options o;
    o.format = output_format::gptq;
    o.rules.default_scheme = quant_spec{4, 64, true, scale_method::minmax, dtype::F16};
    o.hessians = hess;
    o.gptq.act_order = true;
    o = small_shards(o);
    const std::string one = scratch("hone"), many = scratch("hmany");
    const conversion_result a = convert(model, one, o);
    const conversion_result b = run_cluster(model, many, o, 3);
    CHECK(a.gptq_layers == b.gptq_layers);
    CHECK(a.rtn_layers == b.rtn_layers);
    CHECK(b.gptq_layers.size() == 3);
    check_identical(one, many);
}

TEST_CASE("cluster: a unit killed midway is redone, a complete one skipped; finalize refuses until all are there") {
    const convert_options o = small_shards(testing::w4a8_cpu());
    const std::string one = scratch("k-one"), dst = scratch("k-many");
    convert(demo_dir(), one, o);
    const cluster::plan_summary s = cluster::make_plan(demo_dir(), dst, o, 4);
    REQUIRE(s.units.size() == 4);
    for (std::size_t u : {0u, 1u, 3u}) CHECK(cluster::work(dst, u, 4, o).converted == std::vector<std::size_t>{u});

    // Unit 2 dies after its first tensor: bytes half written, no record.
    convert_options dying = o;
    std::size_t seen = 0;
    dying.before_tensor = [&](std::size_t) {
        if (seen++ == 1) throw std::runtime_error("killed");
    };
    CHECK_THROWS_WITH(cluster::work(dst, 2, 4, dying), "killed");
    CHECK_FALSE(io::path_exists(cluster::unit_record_path(s.staging, 2)));
    try {
        cluster::finalize(dst, o);
        FAIL("finalize went ahead with a unit missing");
    } catch (const unsupported_error& e) {
        CHECK(std::string(e.what()).find("unit 2: not converted") != std::string::npos);
    }
    CHECK_FALSE(io::path_exists(dst));

    // Re-running every worker: 0, 1, 3 do nothing, 2 is converted again.
    for (std::size_t u = 0; u < 4; ++u) {
        const cluster::work_report r = cluster::work(dst, u, 4, o);
        CHECK(r.converted.size() == (u == 2 ? 1u : 0u));
        CHECK(r.skipped.size() == (u == 2 ? 0u : 1u));
    }
    cluster::finalize(dst, o);
    check_identical(one, dst);
}

TEST_CASE("cluster: finalize refuses corrupted bytes and foreign records, naming the unit; nothing is written") {
    const convert_options o = small_shards(testing::w4a8_cpu());
    const std::string dst = scratch("c-many");
    const cluster::plan_summary s = cluster::make_plan(demo_dir(), dst, o, 3);
    for (std::size_t u = 0; u < 3; ++u) cluster::work(dst, u, 3, o);
    // Flip one byte of the last tensor of unit 1 (a torn write on a shared file system).
    const std::string table = io::read_file(s.staging + "/tensors.json");
    const json rows = json::parse(table);
    const json* victim = nullptr;
    for (const json& r : rows.as_array())
        if (static_cast<std::size_t>(r.at("item").as_int()) < s.units[1].end &&
            static_cast<std::size_t>(r.at("item").as_int()) >= s.units[1].begin)
            victim = &r;
    REQUIRE(victim);
    {
        const std::string path = s.staging + "/" + victim->at("shard").as_string();
        const int fd = ::open(path.c_str(), O_RDWR);
        REQUIRE(fd >= 0);
        unsigned char b = 0;
        const off_t at = static_cast<off_t>(victim->at("offset").as_int());
        REQUIRE(::pread(fd, &b, 1, at) == 1);
        b ^= 0x40;
        REQUIRE(::pwrite(fd, &b, 1, at) == 1);
        ::close(fd);
    }
    // And unit 0's record replaced by garbage.
    io::write_file(cluster::unit_record_path(s.staging, 0), "{\"unit\": 0");
    try {
        cluster::finalize(dst, o);
        FAIL("finalize accepted corrupted units");
    } catch (const unsupported_error& e) {
        const std::string why = e.what();
        CHECK(why.find("unit 0: its record does not parse") != std::string::npos);
        CHECK(why.find("unit 1: tensor '" + victim->at("name").as_string() + "'") != std::string::npos);
        CHECK(why.find("unit 2") == std::string::npos);
    }
    CHECK_FALSE(io::path_exists(dst));
    // The torn record makes unit 0 redo; unit 1's record is valid, so its worker would skip it:
    // corrupted data needs the record removed (finalize said which unit).
    (void)::unlink(cluster::unit_record_path(s.staging, 1).c_str());
    for (std::size_t u = 0; u < 3; ++u) cluster::work(dst, u, 3, o);
    const std::string one = scratch("c-one");
    convert(demo_dir(), one, o);
    cluster::finalize(dst, o);
    check_identical(one, dst);
}

TEST_CASE("cluster: a changed source or changed options are refused by workers and finalize") {
    const std::string src = scratch("ch-src"), dst = scratch("ch-dst");
    write_demo_checkpoint(src, testing::small_demo());
    const convert_options o = small_shards(testing::w4a8_cpu());
    cluster::make_plan(src, dst, o, 2);
    convert_options other = o;
    other.rules.default_scheme->group_size = 128;
    CHECK_THROWS_AS(cluster::work(dst, 0, 2, other), unsupported_error);
    cluster::work(dst, 0, 2, o);
    cluster::work(dst, 1, 2, o);
    // The source rewritten (new mtimes) after the work: finalize refuses.
    ::usleep(20'000);
    io::remove_tree(src);
    write_demo_checkpoint(src, testing::small_demo());
    CHECK_THROWS_WITH_AS(cluster::finalize(dst, o), doctest::Contains("changed since `plan`"), unsupported_error);
    CHECK_FALSE(io::path_exists(dst));
}

TEST_CASE("cluster: the worker index from the command line, Slurm or a Kubernetes Indexed Job") {
    ::unsetenv("SLURM_ARRAY_TASK_ID");
    ::unsetenv("JOB_COMPLETION_INDEX");
    ::unsetenv("QFORGE_WORKERS");
    CHECK_THROWS_AS(cluster::worker_from_environment(std::nullopt, std::nullopt, 8), unsupported_error);
    CHECK(cluster::worker_from_environment(3, std::nullopt, 8) == std::pair<std::size_t, std::size_t>{3, 8});
    ::setenv("JOB_COMPLETION_INDEX", "5", 1);
    CHECK(cluster::worker_from_environment(std::nullopt, std::nullopt, 8) == std::pair<std::size_t, std::size_t>{5, 8});
    ::setenv("QFORGE_WORKERS", "6", 1);
    CHECK(cluster::worker_from_environment(std::nullopt, std::nullopt, 8) == std::pair<std::size_t, std::size_t>{5, 6});
    ::setenv("SLURM_ARRAY_TASK_ID", "2", 1);  // Slurm wins; its TASK_COUNT is 1 on a resubmitted task
    ::setenv("SLURM_ARRAY_TASK_COUNT", "1", 1);
    CHECK(cluster::worker_from_environment(std::nullopt, 4, 8) == std::pair<std::size_t, std::size_t>{2, 4});
    ::setenv("JOB_COMPLETION_INDEX", "x", 1);
    ::unsetenv("SLURM_ARRAY_TASK_ID");
    CHECK_THROWS_AS(cluster::worker_from_environment(std::nullopt, std::nullopt, 8), unsupported_error);
    for (const char* v : {"SLURM_ARRAY_TASK_COUNT", "JOB_COMPLETION_INDEX", "QFORGE_WORKERS"}) ::unsetenv(v);
    // Worker blocks: 8 units over 3 workers.
    CHECK(cluster::units_of_worker(0, 3, 8) == std::pair<std::size_t, std::size_t>{0, 2});
    CHECK(cluster::units_of_worker(2, 3, 8) == std::pair<std::size_t, std::size_t>{5, 8});
    CHECK_THROWS_AS(cluster::units_of_worker(3, 3, 8), unsupported_error);
}

TEST_CASE("cluster: refused plans write no staging folder") {
    const std::string dst = scratch("r-dst");
    convert_options o = testing::w4a8_cpu();
    o.rules.rules.clear();  // the tied embedding quantized without an untie: refused
    o.rules.quantize("model.embed_tokens.weight", testing::w4a8());
    CHECK_THROWS_AS(cluster::make_plan(demo_dir(), dst, o, 2), unsupported_error);
    CHECK_FALSE(io::path_exists(cluster::staging_dir(dst)));
    CHECK_THROWS_WITH_AS(cluster::work(dst, 0, 2, testing::w4a8_cpu()), doctest::Contains("no cluster plan"), io_error);
}

namespace {

/// A DeepSeek-V3-shaped checkpoint (671B: 61 layers, hidden 7168, MLA attention, 3 dense
/// layers then 58 MoE layers of 256 routed experts + 1 shared, vocab 129280) in bf16, 163
/// shards like the bf16 release: real headers, data left as holes (ftruncate), so it costs a
/// few MiB of disk. Names and shapes: DeepSeek-V3 config.json and model.safetensors.index.json.
void write_deepseek_v3_sparse(const std::string& dir) {
    io::make_directory(dir);
    const std::int64_t H = 7168, I = 18432, MI = 2048, E = 256, V = 129280, L = 61, dense = 3;
    std::vector<safetensors::tensor_spec> all;
    auto add = [&](std::string name, shape_t shape) { all.push_back({std::move(name), dtype::BF16, std::move(shape)}); };
    add("model.embed_tokens.weight", {V, H});
    for (std::int64_t l = 0; l < L; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        add(p + "input_layernorm.weight", {H});
        add(p + "post_attention_layernorm.weight", {H});
        add(p + "self_attn.q_a_proj.weight", {1536, H});
        add(p + "self_attn.q_a_layernorm.weight", {1536});
        add(p + "self_attn.q_b_proj.weight", {128 * 192, 1536});
        add(p + "self_attn.kv_a_proj_with_mqa.weight", {576, H});
        add(p + "self_attn.kv_a_layernorm.weight", {512});
        add(p + "self_attn.kv_b_proj.weight", {128 * 256, 512});
        add(p + "self_attn.o_proj.weight", {H, 128 * 128});
        if (l < dense) {
            add(p + "mlp.gate_proj.weight", {I, H});
            add(p + "mlp.up_proj.weight", {I, H});
            add(p + "mlp.down_proj.weight", {H, I});
            continue;
        }
        add(p + "mlp.gate.weight", {E, H});
        add(p + "mlp.gate.e_score_correction_bias", {E});
        for (std::int64_t e = 0; e < E; ++e) {
            const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
            add(x + "gate_proj.weight", {MI, H});
            add(x + "up_proj.weight", {MI, H});
            add(x + "down_proj.weight", {H, MI});
        }
        add(p + "mlp.shared_experts.gate_proj.weight", {MI, H});
        add(p + "mlp.shared_experts.up_proj.weight", {MI, H});
        add(p + "mlp.shared_experts.down_proj.weight", {H, MI});
    }
    add("model.norm.weight", {H});
    add("lm_head.weight", {V, H});
    const safetensors::shard_plan shards = safetensors::plan_shards(all, 8'300'000'000);  // 163 shards, as the bf16 release has
    for (std::size_t k = 0; k < shards.shards.size(); ++k) {
        const safetensors::file_layout f = safetensors::plan_file(shards.shards[k]);
        const std::string path = dir + "/" + shards.file_names[k];
        io::write_file(path, f.prefix());
        REQUIRE(::truncate(path.c_str(), static_cast<off_t>(f.file_size())) == 0);
    }
    io::write_file(dir + "/" + std::string(safetensors::index_file_name), safetensors::index_text(shards));
    io::write_file(dir + "/config.json",
                   R"({"architectures":["DeepseekV3ForCausalLM"],"model_type":"deepseek_v3","hidden_size":7168,)"
                   R"("intermediate_size":18432,"moe_intermediate_size":2048,"num_hidden_layers":61,)"
                   R"("num_attention_heads":128,"num_key_value_heads":128,"n_routed_experts":256,"n_shared_experts":1,)"
                   R"("num_experts_per_tok":8,"first_k_dense_replace":3,"q_lora_rank":1536,"kv_lora_rank":512,)"
                   R"("qk_nope_head_dim":128,"qk_rope_head_dim":64,"v_head_dim":128,"vocab_size":129280,)"
                   R"("tie_word_embeddings":false,"torch_dtype":"bfloat16"})");
}

double cpu_seconds() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

long peak_rss_kib() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
}

}  // namespace

TEST_CASE("cluster: a 671B DeepSeek-V3-shaped plan (tens of thousands of tensors, 163 shards) over 64 workers") {
    const std::string src = scratch("dsv3"), dst = scratch("dsv3-out");
    write_deepseek_v3_sparse(src);
    convert_options o;
    o.format = output_format::compressed_tensors;
    o.rules.default_scheme = quant_spec{4, 128, true, scale_method::minmax, std::nullopt};
    const long rss0 = peak_rss_kib();
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = cpu_seconds();
    const cluster::plan_summary s = cluster::make_plan(src, dst, o, 64);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = cpu_seconds() - cpu0;
    const long rss1 = peak_rss_kib();
    checkpoint_source in(src);
    std::size_t source_shards = 0;
    for (const auto& f : io::list_directory(src)) source_shards += f.ends_with(".safetensors");
    MESSAGE("671B plan: " << in.tensors().size() << " source tensors in " << source_shards << " shards -> " << s.tensors
                          << " output tensors in " << s.shard_files.size() << " shards, 64 units, imbalance (max/mean cost) "
                          << s.imbalance() << ", " << secs << " s (" << cpu << " s of CPU), peak RSS grew by " << (rss1 - rss0) / 1024 << " MiB");
    CHECK(source_shards == 163);
    CHECK(in.tensors().size() > 40'000);
    CHECK(s.units.size() == 64);
    CHECK(s.imbalance() < 1.1);
    CHECK(cpu < 60);  // about 2 s at -O2; generous for sanitizer builds (CPU time: CI machines are shared)
#if defined(__SANITIZE_ADDRESS__)
    constexpr long rss_limit_kib = 3l << 20;  // AddressSanitizer's redzones and quarantine
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    constexpr long rss_limit_kib = 3l << 20;
#else
    constexpr long rss_limit_kib = 1l << 20;
#endif
#else
    constexpr long rss_limit_kib = 1l << 20;
#endif
    CHECK(rss1 - rss0 < rss_limit_kib);  // < 1 GiB (no tensor data is read): 170 MiB at -O2
    std::uint64_t bytes = 0;
    for (auto b : s.shard_sizes) bytes += b;
    CHECK(bytes > 300'000'000'000ull);  // ~0.37 TB of int4 output, all of it holes
    io::remove_tree(s.staging);
}

namespace {

/// A llama-imatrix GGUF file (LC tools/imatrix: "<weight>.in_sum2" {ne0, n_mat} and
/// "<weight>.counts" {1, n_mat}), the form tests/gguf/test_imatrix.cpp writes.
std::string write_imatrix(const std::string& path, const std::vector<std::pair<std::string, std::vector<std::int64_t>>>& entries) {
    std::vector<gguf::tensor_decl> decls;
    std::vector<std::vector<float>> data;
    for (const auto& [name, ne] : entries) {
        std::vector<float> sums(static_cast<std::size_t>(ne[0] * ne[1]));
        for (std::size_t i = 0; i < sums.size(); ++i)  // outlier columns, so activation scaling finds scales
            sums[i] = 4.0f * (i % 16 == 5 ? 400.0f : 0.1f + static_cast<float>((i * 7919) % 1000) / 250.0f);
        decls.push_back({name + ".in_sum2", ne, gguf::ggml_type::f32});
        data.push_back(std::move(sums));
        decls.push_back({name + ".counts", {1, ne[1]}, gguf::ggml_type::f32});
        data.push_back(std::vector<float>(static_cast<std::size_t>(ne[1]), 4.0f));
    }
    gguf::file_writer w(path,
                        {{"general.type", gguf::value::str("imatrix")},
                         {"imatrix.datasets", gguf::value::array_of<std::string>(gguf::value_type::string, {"calibration.txt"})},
                         {"imatrix.chunk_count", gguf::value::u32(45)},
                         {"imatrix.chunk_size", gguf::value::u32(512)}},
                        decls);
    for (const auto& d : data) w.write_tensor(std::as_bytes(std::span<const float>(d)));
    w.finish();
    return path;
}

const std::string stories260k = QFORGE_SOURCE_DIR "/tests/golden/fixtures/stories260k";

/// The demo checkpoint as a Mixtral (stacked ffn_*_exps), wide enough for the K-quants.
const std::string& moe_demo_dir() {
    static const std::string d = [] {
        std::string p = scratch("moe-demo");
        demo_options o = testing::small_demo();
        o.hidden = 256;
        o.heads = 4;
        o.kv_heads = 2;
        o.moe = demo_moe::mixtral;
        o.experts = 4;
        o.moe_intermediate = 256;
        write_demo_checkpoint(p, o);
        return p;
    }();
    return d;
}

gguf::convert_report run_gguf_cluster(const std::string& src, const std::string& dst, const gguf::convert_options& o,
                                      std::size_t units, std::size_t workers) {
    cluster::make_gguf_plan(src, dst, o, units);
    for (std::size_t w = 0; w < workers; ++w) cluster::work_gguf(dst, w, workers, o);
    return cluster::finalize_gguf(dst, o);
}

}  // namespace

TEST_CASE("cluster GGUF: byte-identical to convert_hf_to_gguf (Q8_0, Q4_K_M, with and without an imatrix, MoE)") {
    const std::string im_dense = write_imatrix(scratch("im.gguf"), {{"blk.0.ffn_gate.weight", {64, 1}}, {"blk.1.attn_q.weight", {64, 1}}});
    const std::string im_moe = write_imatrix(scratch("im-moe.gguf"), {{"blk.0.ffn_up_exps.weight", {256, 4}},
                                                                     {"blk.1.attn_v.weight", {256, 1}},
                                                                     {"blk.1.ffn_down_exps.weight", {256, 4}}});
    thread_pool pool(2);
    for (const std::string* src : {&stories260k, &moe_demo_dir()})
        for (const std::string type : {"Q8_0", "Q4_K_M"})
            for (const bool with_imatrix : {false, true}) {
                CAPTURE(*src);
                CAPTURE(type);
                CAPTURE(with_imatrix);
                gguf::convert_options o;
                o.type = *gguf::parse_file_type(type);
                o.allow_no_vocab = true;
                o.chunk_rows = 100;  // chunks that do not divide the row counts
                o.exec = pool.executor();
                if (with_imatrix) o.imatrix_file = src == &stories260k ? im_dense : im_moe;
                const std::string one = scratch("one.gguf"), many = scratch("many.gguf");
                const gguf::convert_report a = gguf::convert_hf_to_gguf(*src, one, o);
                const gguf::convert_report b = run_gguf_cluster(*src, many, o, 5, 2);  // 5 units on 2 workers
                CHECK(io::read_file(one) == io::read_file(many));
                CHECK_FALSE(io::path_exists(cluster::staging_dir(many)));
                REQUIRE(a.tensors.size() == b.tensors.size());
                CHECK(a.total_bytes == b.total_bytes);
                CHECK(a.total_elements == b.total_elements);
                CHECK(a.without_imatrix() == b.without_imatrix());
                CHECK(a.fallbacks() == b.fallbacks());
                for (std::size_t i = 0; i < a.tensors.size(); ++i) {
                    CHECK(a.tensors[i].gguf_name == b.tensors[i].gguf_name);
                    CHECK(a.tensors[i].chosen == b.tensors[i].chosen);
                    CHECK(a.tensors[i].snr_db == b.tensors[i].snr_db);
                    CHECK(a.tensors[i].imatrix == b.tensors[i].imatrix);
                }
                if (with_imatrix)
                    CHECK(std::any_of(b.tensors.begin(), b.tensors.end(), [](const gguf::tensor_report& t) { return t.imatrix == "used"; }));
                if (src == &moe_demo_dir()) CHECK(io::read_file(one).find("ffn_down_exps.weight") != std::string::npos);
            }
}

TEST_CASE("cluster GGUF: a unit killed midway is redone; corrupted bytes refused unless --no-verify-data; changes refused") {
    gguf::convert_options o;
    o.type = *gguf::parse_file_type("Q4_K_M");
    o.allow_no_vocab = true;
    const std::string one = scratch("g-one.gguf"), dst = scratch("g-many.gguf");
    gguf::convert_hf_to_gguf(moe_demo_dir(), one, o);
    const cluster::plan_summary s = cluster::make_gguf_plan(moe_demo_dir(), dst, o, 3);
    CHECK(s.format == "gguf");
    CHECK_THROWS_WITH_AS(cluster::work(dst, 0, 3, testing::w4a8_cpu()), doctest::Contains("GGUF plan"), unsupported_error);
    cluster::work_gguf(dst, 0, 3, o);
    cluster::work_gguf(dst, 2, 3, o);
    CHECK_THROWS_WITH_AS(cluster::finalize_gguf(dst, o), doctest::Contains("unit 1: not converted"), unsupported_error);
    gguf::convert_options other = o;
    other.type = *gguf::parse_file_type("Q8_0");
    CHECK_THROWS_WITH_AS(cluster::work_gguf(dst, 1, 3, other), doctest::Contains("changed since `plan`"), unsupported_error);
    other = o;
    other.imatrix = [](const std::string&) -> const std::vector<float>* { return nullptr; };
    CHECK_THROWS_WITH_AS(cluster::work_gguf(dst, 1, 3, other), doctest::Contains("importance hook"), unsupported_error);
    CHECK(cluster::work_gguf(dst, 1, 3, o).converted == std::vector<std::size_t>{1});
    CHECK(cluster::work_gguf(dst, 1, 3, o).skipped == std::vector<std::size_t>{1});

    // One byte of unit 1's first tensor flipped: refused with verification, trusted without.
    const json rows = json::parse(io::read_file(s.staging + "/tensors.json"));
    const json& victim = rows.as_array()[s.units[1].begin];
    const std::string path = s.staging + "/" + victim.at("shard").as_string();
    auto flip = [&] {
        const int fd = ::open(path.c_str(), O_RDWR);
        REQUIRE(fd >= 0);
        unsigned char b = 0;
        const off_t at = static_cast<off_t>(victim.at("offset").as_int());
        REQUIRE(::pread(fd, &b, 1, at) == 1);
        b ^= 0x40;
        REQUIRE(::pwrite(fd, &b, 1, at) == 1);
        ::close(fd);
    };
    flip();
    CHECK_THROWS_WITH_AS(cluster::finalize_gguf(dst, o), doctest::Contains(doctest::String(("unit 1: tensor '" + victim.at("name").as_string() + "'").c_str())),
                         unsupported_error);
    CHECK_FALSE(io::path_exists(dst));
    flip();  // restored: --no-verify-data trusts the records and gives the same file
    cluster::finalize_gguf(dst, o, {.verify_data = false});
    CHECK(io::read_file(one) == io::read_file(dst));
    CHECK_THROWS_WITH_AS(cluster::make_gguf_plan(moe_demo_dir(), dst, o, 3), doctest::Contains("destination exists"), io_error);
}

TEST_CASE("cluster: activation scaling across workers: each unit searches the folds again, byte-identical to one process") {
    const std::string im = write_imatrix(scratch("im-fold.gguf"), {{"blk.0.attn_q.weight", {128, 1}},
                                                                  {"blk.0.attn_k.weight", {128, 1}},
                                                                  {"blk.0.attn_v.weight", {128, 1}},
                                                                  {"blk.0.attn_output.weight", {128, 1}},
                                                                  {"blk.0.ffn_gate.weight", {128, 1}},
                                                                  {"blk.0.ffn_up.weight", {128, 1}},
                                                                  {"blk.0.ffn_down.weight", {256, 1}}});
    convert_options o = small_shards(testing::w4a8_cpu());
    o.imatrix = im;
    o.activation_scaling = true;
    const std::string one = scratch("f-one"), many = scratch("f-many");
    const conversion_result a = convert(demo_dir(), one, o);
    const conversion_result b = run_cluster(demo_dir(), many, o, 4, 2);
    REQUIRE(a.report.activation_folds.size() == b.report.activation_folds.size());
    CHECK(std::any_of(a.report.activation_folds.begin(), a.report.activation_folds.end(),
                      [](const activation_fold_record& r) { return r.alpha > 0; }));
    check_identical(one, many);
}
