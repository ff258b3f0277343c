/* bench_gguf's link to ggml's own quantizers (built only with -DQFORGE_LLAMA_CPP_DIR). It is C so
 * that ggml.h's global names never meet qforge's. ggml_init fills ggml's fp16 tables, which the
 * K-quant reference quantizers read back their scales through (ggml/src/ggml.c, ggml_init). */
#include <ggml.h>
#include <stdint.h>

size_t qforge_bench_ggml_quantize(int type, const float* src, void* dst, int64_t nrows, int64_t n_per_row);

size_t qforge_bench_ggml_quantize(int type, const float* src, void* dst, int64_t nrows, int64_t n_per_row) {
    static int ready = 0;
    if (!ready) {
        struct ggml_init_params params = {0, NULL, true};
        ggml_free(ggml_init(params));
        ready = 1;
    }
    return ggml_quantize_chunk((enum ggml_type)type, src, dst, 0, nrows, n_per_row, NULL);
}
