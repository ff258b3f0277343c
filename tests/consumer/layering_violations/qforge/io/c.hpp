// Fixture for tests/consumer/check_headers_rejects.cmake: io includes layout (sideways)
#pragma once
#include "qforge/layout/d.hpp"
