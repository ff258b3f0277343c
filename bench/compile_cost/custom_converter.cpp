// A small custom converter (the compile-cost probe of bench/compile_cost.sh): every decoder
// linear of a bf16 Hugging Face folder to 4-bit GPTQ, MLP projections at 8 bits, lm_head kept.
//   custom_converter SRC DST
#include <cstdio>

#include "qforge/convert/converter.hpp"

int main(int argc, char** argv) {
    using namespace qforge;
    if (argc != 3) return std::fprintf(stderr, "usage: custom_converter SRC DST\n"), 2;
    const quant_spec w4{4, 128, true, scale_method::search, std::nullopt};
    const quant_spec w8{8, 128, true, scale_method::minmax, std::nullopt};
    convert_options opt;
    opt.format = output_format::gptq;
    opt.rules.quantize("self_attn.q_proj", w4)
        .quantize("self_attn.k_proj", w4)
        .quantize("self_attn.v_proj", w4)
        .quantize("self_attn.o_proj", w4)
        .quantize("mlp.gate_proj", w8)
        .quantize("mlp.up_proj", w8)
        .quantize("mlp.down_proj", w8);
    opt.threads = 2;
    opt.progress = [](const progress_event& e) {
        std::fprintf(stderr, "[%zu/%zu] %s -> %s\n", e.index, e.count, e.item->name.c_str(), e.out_type.c_str());
        return true;
    };
    try {
        const conversion_result r = convert(argv[1], argv[2], opt);
        std::printf("%zu tensors, SNR mean %.2f dB\n", r.report.tensors.size(), r.report.snr_mean());
    } catch (const error& e) {
        return std::fprintf(stderr, "custom_converter: %s\n", e.what()), 1;
    }
}
