// The README's usage example, built with the other programs so it cannot rot.
//   quickstart SRC DST   converts SRC (a bf16 Hugging Face folder) to a 4-bit GPTQ checkpoint.
#include <qforge/qforge.hpp>

#include <cstdio>

int main(int argc, char** argv) {
    if (argc != 3) return std::fprintf(stderr, "usage: quickstart SRC DST\n"), 2;
    qforge::convert_options opt;                  // decoder linears quantized, the rest kept
    opt.format = qforge::output_format::gptq;     // or gptq_v2, awq, compressed_tensors
    opt.rules.default_scheme = {4, 64, /*symmetric=*/true, qforge::scale_method::search,
                                /*scale_dtype: the format's convention*/ std::nullopt};
    opt.threads = 2;                              // output bytes do not depend on it
    opt.progress = [](const qforge::progress_event& e) {
        std::fprintf(stderr, "[%zu/%zu] %s\n", e.index, e.count, e.item->name.c_str());
        return true;                              // false cancels; nothing is left behind
    };
    try {
        const qforge::conversion_result r = qforge::convert(argv[1], argv[2], opt);
        std::printf("%zu tensors, SNR mean %.2f dB\n", r.report.tensors.size(), r.report.snr_mean());
    } catch (const qforge::error& e) {            // names the file, the tensor and the reason
        return std::fprintf(stderr, "%s\n", e.what()), 1;
    }
}
