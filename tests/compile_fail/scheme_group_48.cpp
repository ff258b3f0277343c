// expect: GroupSize must be a power of two
#include "qforge/quant/scheme.hpp"
qforge::scheme<4, 48, qforge::symmetry::symmetric> s;
