// qforge-make-demo: writes the deterministic demo checkpoint (Llama-like, bf16, two shards
// with an index, tied embeddings, Student-t weights, config.json, tokenizer and generation
// files) that scripts/demo.sh converts.
//
//   qforge-make-demo DIR [--layers N] [--hidden N] [--intermediate N] [--vocab N] [--seed-naming]
//                        [--moe qwen|qwen-shared|mixtral|qwen-fused|gpt-oss|gpt-oss-mxfp4] [--experts N]
//                        [--moe-intermediate N]
#include <cstdio>
#include <cstdlib>
#include <string>

#include "qforge/convert/demo_checkpoint.hpp"

int main(int argc, char** argv) {
    qforge::demo_options o;
    std::string dir;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto value = [&]() -> std::int64_t {
            if (i + 1 >= argc) {
                std::fprintf(stderr, "qforge-make-demo: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return std::atoll(argv[++i]);
        };
        if (a == "--help" || a == "-h") {
            std::printf("usage: qforge-make-demo DIR [--layers N] [--hidden N] [--intermediate N] [--vocab N] "
                        "[--seed-naming] [--moe qwen|qwen-shared|mixtral|qwen-fused|gpt-oss|gpt-oss-mxfp4] [--experts N] "
                        "[--moe-intermediate N]\n");
            return 0;
        } else if (a == "--moe") {
            const std::string style = i + 1 < argc ? argv[++i] : "";
            if (style == "qwen" || style == "qwen-shared") o.moe = qforge::demo_moe::qwen_moe;
            else if (style == "mixtral") o.moe = qforge::demo_moe::mixtral;
            else if (style == "qwen-fused") o.moe = qforge::demo_moe::qwen_moe_fused;
            else if (style == "gpt-oss") o.moe = qforge::demo_moe::gpt_oss;
            else if (style == "gpt-oss-mxfp4") o.moe = qforge::demo_moe::gpt_oss_mxfp4;
            else {
                std::fprintf(stderr, "qforge-make-demo: --moe takes qwen, qwen-shared, mixtral, qwen-fused, gpt-oss or gpt-oss-mxfp4\n");
                return 2;
            }
            o.shared_expert = style == "qwen-shared";
        } else if (a == "--experts") o.experts = value();
        else if (a == "--moe-intermediate") o.moe_intermediate = value();
        else if (a == "--layers") o.layers = value();
        else if (a == "--hidden") o.hidden = value();
        else if (a == "--intermediate") o.intermediate = value();
        else if (a == "--vocab") o.vocab = value();
        else if (a == "--seed-naming") o.seed_naming = true;
        else if (a.starts_with("--")) {
            std::fprintf(stderr, "qforge-make-demo: unknown option %s\n", a.c_str());
            return 2;
        } else dir = a;
    }
    if (dir.empty() || o.layers < 1 || o.hidden < o.heads || o.hidden % o.heads != 0 || o.intermediate < 1 || o.vocab < 1 ||
        o.experts < 1 || o.moe_intermediate < 1) {
        std::fprintf(stderr, "qforge-make-demo: give a DIR and positive sizes (hidden a multiple of %lld)\n",
                     static_cast<long long>(o.heads));
        return 2;
    }
    try {
        qforge::write_demo_checkpoint(dir, o);
    } catch (const qforge::error& e) {
        std::fprintf(stderr, "qforge-make-demo: %s\n", e.what());
        return 1;
    }
    std::uint64_t bytes = 0;
    for (const auto& t : qforge::demo_tensors(o)) bytes += t.bytes();
    std::printf("wrote %s: %zu tensors, %.1f MiB of bf16 weights\n", dir.c_str(), qforge::demo_tensors(o).size(),
                static_cast<double>(bytes) / (1 << 20));
    return 0;
}
