// Fixture for tests/consumer/check_headers_rejects.cmake: the umbrella
#pragma once
#include "qforge/core/a.hpp"
#include "qforge/simd/b.hpp"
#include "qforge/simd/arch/f.hpp"
#include "qforge/io/c.hpp"
#include "qforge/layout/d.hpp"
#include "qforge/convert/g.hpp"
