// What both reference tools of tests/gguf/llama_logits_test.sh read and write: the token list
// argument and the JSON that llama_logits.mjs holds llama.cpp's logits against.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

namespace qforge::testing {

/// "1,403,28,..." as token ids.
inline std::vector<int> parse_token_list(const char* arg) {
    std::vector<int> tokens;
    for (const char* p = arg; *p;) {
        char* end = nullptr;
        tokens.push_back(static_cast<int>(std::strtol(p, &end, 10)));
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p) throw std::runtime_error("bad token list");
    }
    return tokens;
}

/// {"weights": {"min_snr_db": x, "tensor": name}, "logits": [[...], ...]} on stdout (an exact
/// match, infinite SNR, printed as 999).
inline void print_reference(double min_snr_db, const std::string& worst, const std::vector<std::vector<float>>& logits) {
    std::printf("{\"weights\": {\"min_snr_db\": %.3f, \"tensor\": \"%s\"}, \"logits\": [", std::isinf(min_snr_db) ? 999.0 : min_snr_db,
                worst.c_str());
    for (std::size_t t = 0; t < logits.size(); ++t) {
        std::printf("%s[", t ? ", " : "");
        for (std::size_t i = 0; i < logits[t].size(); ++i) std::printf("%s%.7g", i ? "," : "", static_cast<double>(logits[t][i]));
        std::printf("]");
    }
    std::printf("]}\n");
}

}  // namespace qforge::testing
