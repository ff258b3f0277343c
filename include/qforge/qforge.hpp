// Umbrella header: includes every public qforge header. (tests/CMakeLists.txt checks that
// none is missing.)
#pragma once

#include "qforge/version.hpp"
#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/quant/quantized_tensor.hpp"
