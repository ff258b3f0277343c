// expect: scheme Bits must be at most 8
#include "qforge/quant/scheme.hpp"
qforge::scheme<9, 64, qforge::symmetry::symmetric> s;
