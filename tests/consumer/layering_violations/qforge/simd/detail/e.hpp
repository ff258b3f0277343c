// Fixture for tests/consumer/check_headers_rejects.cmake: a detail header
#pragma once
