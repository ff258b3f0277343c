// A tiny real checkpoint for the hostile tests (support/checkpoint_fixture.hpp's tiny_demo:
// the demo generator's Llama shape at the smallest sizes the quantizers accept, two shards +
// index.json, config.json and tokenizer files) and the export they convert it with.
#pragma once

#include <string>

#include "qforge/convert/converter.hpp"
#include "qforge/convert/demo_checkpoint.hpp"
#include "support/checkpoint_fixture.hpp"

namespace qforge::hostile {

// The checkpoint itself and the leftover listing are shared with the convert tests.
using testing::entries_except;
using testing::tiny_demo;

inline convert_options tiny_gptq() {
    convert_options o;
    o.format = output_format::gptq;
    o.rules.default_scheme = quant_spec{4, 64, true, scale_method::minmax, dtype::F16};
    o.threads = 1;
    return o;
}

}  // namespace qforge::hostile
