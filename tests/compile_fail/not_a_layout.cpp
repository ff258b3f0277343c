// expect: layout_policy
// A type that is not a layout (no pack/unpack/config) handed to quantize_packed: the
// concept check names what is missing instead of an error deep inside the template.
#include "qforge/layout/quantize_packed.hpp"
struct not_a_layout {
    static constexpr int bits = 4;
};
void f(const qforge::tensor_view& w) { (void)qforge::quantize_packed(w, qforge::quant_options{}, not_a_layout{}, "x"); }
