// Every public header, included here and in other.cpp: duplicate definitions fail to link.
#include "all_headers.hpp"

int other_translation_unit();

int main() {
    // Both TUs must agree on the version and on core conversions.
    if (other_translation_unit() != QFORGE_VERSION_MAJOR * 10000 + QFORGE_VERSION_MINOR * 100 + QFORGE_VERSION_PATCH)
        return 1;
    return qforge::float_to_bf16(1.0f) == 0x3F80 ? 0 : 1;
}
