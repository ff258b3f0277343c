// Fixture for tests/consumer/check_headers_rejects.cmake: layout includes simd's detail/ and simd/arch/
#pragma once
#include "qforge/simd/detail/e.hpp"
#include "qforge/simd/arch/f.hpp"
