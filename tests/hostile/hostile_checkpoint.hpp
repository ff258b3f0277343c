// A tiny real checkpoint for the hostile tests: the demo generator's Llama shape at the
// smallest sizes the quantizers accept (K = 64 = one group), two shards + index.json,
// config.json and tokenizer files. Converting it does a few hundred file operations.
#pragma once

#include <string>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"

namespace qforge::hostile {

inline demo_options tiny_demo() {
    demo_options o;
    o.hidden = 64;
    o.intermediate = 128;
    o.layers = 1;
    o.heads = 2;
    o.kv_heads = 1;
    o.vocab = 64;
    o.shards = 2;
    return o;
}

inline convert_options tiny_gptq() {
    convert_options o;
    o.format = output_format::gptq;
    o.rules.default_scheme = quant_spec{4, 64, true, scale_method::minmax, dtype::F16};
    o.threads = 1;
    return o;
}

}  // namespace qforge::hostile
