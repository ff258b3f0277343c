// A bf16 tensor's values as float32 (exact), read from its bytes as stored (little endian).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "qforge/core/half.hpp"
#include "qforge/core/tensor_view.hpp"

namespace qforge::testing {

inline std::vector<float> bf16_values(const tensor_view& v) {
    std::vector<float> out(static_cast<std::size_t>(v.numel()));
    for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h;
        std::memcpy(&h, v.bytes.data() + 2 * i, 2);
        out[i] = bf16_to_float(h);
    }
    return out;
}

}  // namespace qforge::testing
