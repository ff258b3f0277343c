// expect: AWQ packs 4 bits only
#include "qforge/layout/awq.hpp"
qforge::awq_layout<3> l;
