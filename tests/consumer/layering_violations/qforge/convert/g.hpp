// Fixture for tests/consumer/check_headers_rejects.cmake: convert includes layout's nested detail/ (and io, which is allowed)
#pragma once
#include "qforge/layout/gguf/detail/h.hpp"
#include "qforge/io/c.hpp"
