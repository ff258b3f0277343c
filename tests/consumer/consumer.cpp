// A user's program: includes the umbrella header and uses the core types.
#include <qforge/qforge.hpp>

#include <cstdio>

int main() {
    const auto bits = qforge::float_to_fp16(1.5f);
    std::printf("qforge %s: fp16(1.5) = 0x%04x\n", qforge::version_string, bits);
    return bits == 0x3E00 ? 0 : 1;
}
