#include "all_headers.hpp"

int other_translation_unit() {
    return qforge::version_major * 10000 + qforge::version_minor * 100 + qforge::version_patch;
}
