// Fixture for tests/consumer/check_headers_rejects.cmake: allowed: simd includes core and its own detail
#pragma once
#include "qforge/core/a.hpp"
#include "qforge/simd/detail/e.hpp"
