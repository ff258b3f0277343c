// Fixture for tests/consumer/check_headers_rejects.cmake: a nested detail header
#pragma once
