// expect: compressed-tensors pack-quantized packs 2 to 8 bits
#include "qforge/layout/compressed_tensors.hpp"
qforge::compressed_tensors_layout<9> l;
