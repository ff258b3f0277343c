// A custom converter in qforge's terms: the first seed exporter (gptq_w4a8_exporter.py, see
// docs/seeds.md) for its "Spark-X2.5" naming - a fused self_attn.q_k_v_proj, self_attn.out_proj,
// mlp.{gate,up,down}_proj and model.embedding.weight tied to the head - written as rules.
//
//   seed-exporter SRC DST [--group G] [--no-search] [--no-lm-head]
//
// Same tensors, names, shapes and dtypes as the script, but correct where it was not: v1
// qzeros store zero - 1 (0x77777777), codes are chosen against the bf16 scales that are
// stored, and the model is streamed tensor by tensor instead of loaded whole.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "qforge/convert/converter.hpp"

int main(int argc, char** argv) {
    using namespace qforge;
    if (argc < 3) {
        std::fprintf(stderr, "usage: seed-exporter SRC DST [--group G] [--no-search] [--no-lm-head]\n");
        return 2;
    }
    quant_spec w4{4, 64, true, scale_method::search, dtype::BF16};  // zero pinned at 8, bf16 scales
    bool lm_head = true;
    for (int i = 3; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--group" && i + 1 < argc) w4.group_size = std::atoi(argv[++i]);
        else if (a == "--no-search") w4.scale = scale_method::fixed;  // the script's fixed factor 0.875
        else if (a == "--no-lm-head") lm_head = false;
        else {
            std::fprintf(stderr, "seed-exporter: unknown option %s\n", a.c_str());
            return 2;
        }
    }

    convert_options opt;
    opt.format = output_format::gptq;  // checkpoint_format "gptq": qweight, qzeros, scales, g_idx
    opt.rules.split_qkv("q_k_v_proj")  // -> q_proj, k_proj, v_proj by heads x head_dim
        .quantize("self_attn.q_proj", w4)
        .quantize("self_attn.k_proj", w4)
        .quantize("self_attn.v_proj", w4)
        .quantize("self_attn.out_proj", w4)
        .quantize("mlp.gate_proj", w4)
        .quantize("mlp.up_proj", w4)
        .quantize("mlp.down_proj", w4);
    if (lm_head)  // the head is the largest read of a decode step: quantize it, keep the table bf16
        opt.rules.untie("model.embedding.weight").quantize("lm_head", w4);
    opt.progress = [](const progress_event& e) {
        std::fprintf(stderr, "[%zu/%zu] %s -> %s\n", e.index, e.count, e.item->name.c_str(), e.out_type.c_str());
        return true;
    };

    try {
        const conversion_result r = convert(argv[1], argv[2], opt);
        std::printf("%s\n", r.report.summary().dump({.indent = 2}).c_str());
    } catch (const error& e) {
        std::fprintf(stderr, "seed-exporter: %s\n", e.what());
        return 1;
    }
    return 0;
}
