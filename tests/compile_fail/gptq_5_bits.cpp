// expect: GPTQ packs 2, 3, 4 or 8 bits
#include "qforge/layout/gptq.hpp"
qforge::gptq_layout<5> l;
