// Fixture for tests/consumer/check_headers_rejects.cmake: core includes simd (upward)
#pragma once
#include "qforge/simd/b.hpp"
