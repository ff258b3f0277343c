// Fixture for tests/consumer/check_headers_rejects.cmake: an arch header
#pragma once
