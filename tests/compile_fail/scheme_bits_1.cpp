// expect: scheme Bits must be at least 2
#include "qforge/quant/scheme.hpp"
qforge::scheme<1, 64, qforge::symmetry::asymmetric> s;
