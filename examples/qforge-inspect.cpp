// qforge-inspect: what is in a checkpoint folder, and (with --against) how close its quantized
// layers are to the source weights.
//
//   qforge-inspect PATH                 tensors (name, dtype, shape) and quantization_config
//   qforge-inspect PATH --against SRC   decodes every quantized layer and prints its SNR
//
// The decoder here is written from the format facts alone (docs/formats.md 2.2-2.3, 3, 4.1-4.3)
// and shares no code with the converter or the layout packers, so it checks them
// independently: a packing, zero-point or scale mistake shows up as a low SNR, and any
// difference from the SNR in quantization_report.json is flagged. Exit status 1 on a mismatch.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "qforge/convert/repack_checkpoint.hpp"
#include "qforge/core/half.hpp"
#include "qforge/io/checkpoint.hpp"
#include "qforge/io/file.hpp"
#include "qforge/io/json.hpp"
#include "qforge/io/safetensors/index.hpp"

namespace {

using namespace qforge;

double element(const tensor_view& v, std::size_t i) {
    const std::byte* p = v.bytes.data() + i * dtype_size(v.type);
    std::uint16_t h;
    std::int32_t i32;
    float f;
    switch (v.type) {
        case dtype::BF16: std::memcpy(&h, p, 2); return bf16_to_float(h);
        case dtype::F16: std::memcpy(&h, p, 2); return fp16_to_float(h);
        case dtype::F32: std::memcpy(&f, p, 4); return f;
        case dtype::I32: std::memcpy(&i32, p, 4); return i32;
        default: fail<unsupported_error>({}, v.name, "inspect cannot read " + std::string(dtype_name(v.type)));
    }
}

std::uint32_t word(const tensor_view& v, std::size_t i) {
    std::uint32_t w;
    std::memcpy(&w, v.bytes.data() + i * 4, 4);
    return w;
}

/// Field `e` of a dense LSB-first bitstream of b-bit fields starting at word `base`, words
/// `stride` apart (GPTQ packs down a column, compressed-tensors >= 0.18 along a row).
std::uint32_t dense_field(const tensor_view& v, std::size_t base, std::size_t stride, std::int64_t e, int b) {
    const std::uint64_t bit = static_cast<std::uint64_t>(e) * static_cast<std::uint64_t>(b);
    const std::size_t w0 = static_cast<std::size_t>(bit / 32), s = static_cast<std::size_t>(bit % 32);
    std::uint64_t x = word(v, base + w0 * stride) >> s;
    if (s + static_cast<std::size_t>(b) > 32) x |= static_cast<std::uint64_t>(word(v, base + (w0 + 1) * stride)) << (32 - s);
    return static_cast<std::uint32_t>(x & ((1u << b) - 1));
}

/// compressed-tensors <= 0.17: 32 / b fields per word, the top bits unused.
std::uint32_t padded_field(const tensor_view& v, std::size_t base, std::size_t stride, std::int64_t e, int b) {
    const std::int64_t pf = 32 / b;
    return (word(v, base + static_cast<std::size_t>(e / pf) * stride) >> (b * (e % pf))) & ((1u << b) - 1);
}

struct decoded {
    std::int64_t rows = 0, cols = 0;
    std::vector<float> w;  ///< [rows][cols]
    std::string scheme;
};

decoded decode_gptq(const safetensors::sharded_reader& r, const std::string& m, const json& qc) {
    const int b = static_cast<int>(qc.at("bits").as_int());
    const json* fmt = qc.find("checkpoint_format");
    const bool v1 = !fmt || fmt->as_string() == "gptq";
    const tensor_view qw = r.view(m + ".qweight"), qz = r.view(m + ".qzeros"), sc = r.view(m + ".scales"),
                      gi = r.view(m + ".g_idx");
    decoded d;
    d.rows = qw.shape[1];
    d.cols = gi.shape[0];
    d.w.resize(static_cast<std::size_t>(d.rows * d.cols));
    const std::size_t N = static_cast<std::size_t>(d.rows), zw = static_cast<std::size_t>(qz.shape[1]);
    for (std::int64_t k = 0; k < d.cols; ++k) {
        const auto g = static_cast<std::size_t>(element(gi, static_cast<std::size_t>(k)));
        for (std::size_t n = 0; n < N; ++n) {
            const double q = dense_field(qw, n, N, k, b);
            const double z = dense_field(qz, g * zw, 1, static_cast<std::int64_t>(n), b) + (v1 ? 1 : 0);
            d.w[n * static_cast<std::size_t>(d.cols) + static_cast<std::size_t>(k)] =
                static_cast<float>((q - z) * element(sc, g * N + n));
        }
    }
    d.scheme = std::to_string(b) + "-bit g" + std::to_string(qc.at("group_size").as_int()) + (v1 ? " gptq v1" : " gptq v2");
    return d;
}

decoded decode_awq(const safetensors::sharded_reader& r, const std::string& m, const json& qc) {
    static constexpr int nibble_of[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // column 8c+j sits in nibble nibble_of[j]
    const tensor_view qw = r.view(m + ".qweight"), qz = r.view(m + ".qzeros"), sc = r.view(m + ".scales");
    decoded d;
    d.cols = qw.shape[0];
    d.rows = qw.shape[1] * 8;
    const std::int64_t G = sc.shape[0], g = d.cols / G, W = qw.shape[1];
    d.w.resize(static_cast<std::size_t>(d.rows * d.cols));
    for (std::int64_t k = 0; k < d.cols; ++k)
        for (std::int64_t n = 0; n < d.rows; ++n) {
            const int sh = 4 * nibble_of[n % 8];
            const double q = (word(qw, static_cast<std::size_t>(k * W + n / 8)) >> sh) & 15u;
            const double z = (word(qz, static_cast<std::size_t>((k / g) * W + n / 8)) >> sh) & 15u;
            d.w[static_cast<std::size_t>(n * d.cols + k)] =
                static_cast<float>((q - z) * element(sc, static_cast<std::size_t>((k / g) * d.rows + n)));
        }
    d.scheme = "4-bit g" + std::to_string(qc.at("group_size").as_int()) + " awq";
    return d;
}

decoded decode_ct(const safetensors::sharded_reader& r, const std::string& m, const json& qc) {
    const json* weights = nullptr;
    for (const json_member& grp : qc.at("config_groups").as_object())
        for (const json& t : grp.value.at("targets").as_array())
            if (t.as_string() == m || (!weights && t.as_string() == "Linear")) weights = &grp.value.at("weights");
    if (!weights) fail<format_error>({}, m, "no config group targets this layer");
    const int b = static_cast<int>(weights->at("num_bits").as_int());
    const bool sym = weights->at("symmetric").as_bool();
    const bool dense = qc.at("version").as_string() >= std::string("0.18");
    const tensor_view wp = r.view(m + ".weight_packed"), sc = r.view(m + ".weight_scale"), ws = r.view(m + ".weight_shape");
    std::int64_t shape[2];
    std::memcpy(shape, ws.bytes.data(), 16);
    decoded d;
    d.rows = shape[0];
    d.cols = shape[1];
    const std::int64_t G = sc.shape[1], g = (d.cols + G - 1) / G, words = wp.shape[1];
    std::optional<tensor_view> zp;
    if (!sym) zp = r.view(m + ".weight_zero_point");
    auto field = [&](const tensor_view& v, std::size_t base, std::size_t stride, std::int64_t e) {
        return dense ? dense_field(v, base, stride, e, b) : padded_field(v, base, stride, e, b);
    };
    const double offset = 1 << (b - 1);
    d.w.resize(static_cast<std::size_t>(d.rows * d.cols));
    for (std::int64_t n = 0; n < d.rows; ++n)
        for (std::int64_t k = 0; k < d.cols; ++k) {
            const std::int64_t gi = k / g;
            const double q = field(wp, static_cast<std::size_t>(n * words), 1, k);
            const double z = zp ? field(*zp, static_cast<std::size_t>(gi), static_cast<std::size_t>(G), n) : offset;
            d.w[static_cast<std::size_t>(n * d.cols + k)] =
                static_cast<float>((q - z) * element(sc, static_cast<std::size_t>(n * G + gi)));
        }
    const json& gs = weights->at("group_size");
    d.scheme = std::to_string(b) + "-bit " + (gs.is_null() ? std::string("per-channel") : "g" + std::to_string(gs.as_int())) +
               (sym ? " sym" : " asym") + " compressed-tensors";
    return d;
}

/// The source weight a quantized module came from: <m>.weight, or the tied table for lm_head.
std::optional<tensor_view> source_of(const safetensors::sharded_reader& src, const std::string& m) {
    if (src.contains(m + ".weight")) return src.view(m + ".weight");
    if (m == "lm_head")
        for (const std::string& n : src.tensor_names())
            if (n.find("embed") != std::string::npos && n.ends_with(".weight")) return src.view(n);
    return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
    std::string path, against;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--help" || a == "-h") {
            std::printf("usage: qforge-inspect PATH [--against SRC]\n");
            return 0;
        }
        if (a == "--against" && i + 1 < argc) against = argv[++i];
        else if (a.starts_with("--")) {
            std::fprintf(stderr, "qforge-inspect: unknown option %s\n", a.c_str());
            return 2;
        } else path = a;
    }
    if (path.empty()) {
        std::fprintf(stderr, "qforge-inspect: give a checkpoint folder\n");
        return 2;
    }
    try {
        safetensors::sharded_reader r(path);
        const json cfg = io::path_exists(path + "/config.json") ? io::read_config(path) : json::object();
        const json* qc = cfg.find("quantization_config");
        std::printf("%s: %zu tensors in %zu shard(s)\n", path.c_str(), r.tensor_names().size(), r.shard_count());
        std::vector<std::string> modules;
        for (const std::string& n : r.tensor_names()) {
            const auto* t = r.find(n);
            std::printf("  %-56s %-5s %s\n", n.c_str(), std::string(dtype_name(t->type)).c_str(), shape_to_string(t->shape).c_str());
            for (const char* suffix : {".qweight", ".weight_packed"})
                if (n.ends_with(suffix)) modules.push_back(n.substr(0, n.size() - std::strlen(suffix)));
        }
        std::printf("quantization_config: %s\n", qc ? qc->dump({.indent = 2}).c_str() : "none");
        if (against.empty()) return 0;
        if (!qc) fail<format_error>(path + "/config.json", {}, "no quantization_config to decode with");

        std::map<std::string, double> reported;
        if (io::path_exists(path + "/quantization_report.json")) {
            const json report = io::read_json_file(path + "/quantization_report.json");
            for (const json& t : report.at("per_tensor").as_array())
                if (t.at("snr_db").is_number())  // null: exact (infinite SNR)
                    reported[t.at("name").as_string()] = t.at("snr_db").as_double();
        }
        if (io::path_exists(against + "/config.json") && io::read_config(against).contains("quantization_config")) {
            // Two quantized checkpoints (repack): decode both, compare bit for bit.
            int differ = 0;
            for (const layer_comparison& c : compare_quantized_checkpoints(path, against)) {
                if (!c.note.empty()) std::printf("  %-48s %s\n", c.module.c_str(), c.note.c_str());
                else if (c.identical) std::printf("  %-48s bit-identical\n", c.module.c_str());
                else std::printf("  %-48s %lld weights differ, SNR %.2f dB\n", c.module.c_str(), static_cast<long long>(c.differing), c.snr_db);
                differ += !c.identical;
            }
            std::printf(differ ? "%d layer(s) differ\n" : "every layer is bit-identical\n", differ);
            return differ ? 1 : 0;
        }
        safetensors::sharded_reader src(against);
        const std::string method = qc->at("quant_method").as_string();
        double lo = 1e9, hi = -1e9, sum = 0;
        int count = 0, mismatches = 0;
        std::printf("decoded against %s:\n", against.c_str());
        for (const std::string& m : modules) {
            const decoded d = method == "gptq" ? decode_gptq(r, m, *qc) : method == "awq" ? decode_awq(r, m, *qc) : decode_ct(r, m, *qc);
            const auto s = source_of(src, m);
            if (!s || s->shape.size() != 2 || s->shape[0] != d.rows || s->shape[1] != d.cols) {
                std::printf("  %-48s %s: no source tensor of shape [%lld, %lld] (split or renamed)\n", m.c_str(),
                            d.scheme.c_str(), static_cast<long long>(d.rows), static_cast<long long>(d.cols));
                continue;
            }
            double sig = 0, err = 0;
            for (std::size_t i = 0; i < d.w.size(); ++i) {
                const double w = element(*s, i), e = w - d.w[i];
                sig += w * w;
                err += e * e;
            }
            const double db = err > 0 ? 10 * std::log10(sig / err) : INFINITY;
            std::printf("  %-48s [%lld, %lld] %s: SNR %.2f dB", m.c_str(), static_cast<long long>(d.rows),
                        static_cast<long long>(d.cols), d.scheme.c_str(), db);
            if (auto it = reported.find(m); it != reported.end()) {
                const bool same = std::fabs(it->second - db) <= 0.011;
                std::printf(same ? " (report: same)" : " (report says %.2f dB: MISMATCH)", it->second);
                mismatches += !same;
            }
            std::printf("\n");
            lo = std::min(lo, db);
            hi = std::max(hi, db);
            sum += db;
            ++count;
        }
        if (count) std::printf("%d layers decoded: SNR min %.2f / mean %.2f / max %.2f dB\n", count, lo, sum / count, hi);
        if (mismatches) {
            std::fprintf(stderr, "qforge-inspect: %d layer(s) disagree with quantization_report.json\n", mismatches);
            return 1;
        }
        return 0;
    } catch (const qforge::error& e) {
        std::fprintf(stderr, "qforge-inspect: %s\n", std::string(e.what()).substr(8).c_str());
        return 1;
    }
}
