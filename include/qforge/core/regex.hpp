// Regular expressions for names: std::regex (ECMAScript) behind one pointer, so that <regex>
// and its instantiations are compiled in one place.
//
// qforge matches tensor names against patterns users and checkpoint configs give (rule
// selectors `re:...`, GGUF type overrides, compressed-tensors targets, GPTQModel `dynamic`
// keys). std::regex is the engine; this wrapper only fixes one iterator type (const char*) for
// every use and keeps <regex> out of the other headers: with QFORGE_SEPARATE_COMPILATION
// (core/config.hpp) only the TU defining QFORGE_IMPLEMENTATION (or QFORGE_IMPLEMENTATION_BASE)
// includes it. Errors std::regex raises, at construction or while matching, come out as
// qforge::regex_error with the same what().
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/config.hpp"

#if QFORGE_BASE_BODIES_HERE
#include <iterator>
#include <regex>
#endif

namespace qforge {

/// std::regex_error, carried out of the wrapper with its message.
class regex_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

/// An ECMAScript regular expression (std::regex::ECMAScript). Copies share the compiled form.
class regex {
public:
    regex() = default;
    /// Throws regex_error when `pattern` is not a valid ECMAScript regex.
    QFORGE_DECL explicit regex(std::string_view pattern);

    /// std::regex_match: the whole of `s` matches.
    QFORGE_DECL bool matches(std::string_view s) const;
    /// std::regex_match with the text of each capture group (groups[0] the whole match;
    /// an unmatched group is empty). `groups` is left as it was when there is no match.
    QFORGE_DECL bool matches(std::string_view s, std::vector<std::string>& groups) const;
    /// std::regex_search with match_continuous: a prefix of `s` matches (Python's re.match).
    QFORGE_DECL bool matches_prefix(std::string_view s) const;
    /// std::regex_replace: every match in `s` replaced by `format` ($1, $&, ... as ECMAScript).
    QFORGE_DECL std::string replace(std::string_view s, const std::string& format) const;

private:
    struct impl;
    std::shared_ptr<const impl> impl_;
};

#if QFORGE_BASE_BODIES_HERE
struct regex::impl {
    std::regex re;
};

namespace detail {
template <class F>
auto regex_call(F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (const std::regex_error& e) {
        throw regex_error(e.what());
    }
}
}  // namespace detail

QFORGE_DECL regex::regex(std::string_view pattern) {
    detail::regex_call([&] {
        impl_.reset(new impl{std::regex(pattern.data(), pattern.data() + pattern.size(), std::regex::ECMAScript)});
        return 0;
    });
}

QFORGE_DECL bool regex::matches(std::string_view s) const {
    return detail::regex_call([&] { return std::regex_match(s.data(), s.data() + s.size(), impl_->re); });
}

QFORGE_DECL bool regex::matches(std::string_view s, std::vector<std::string>& groups) const {
    return detail::regex_call([&] {
        std::cmatch m;
        if (!std::regex_match(s.data(), s.data() + s.size(), m, impl_->re)) return false;
        groups.clear();
        for (const auto& g : m) groups.push_back(g.str());
        return true;
    });
}

QFORGE_DECL bool regex::matches_prefix(std::string_view s) const {
    return detail::regex_call([&] {
        return std::regex_search(s.data(), s.data() + s.size(), impl_->re, std::regex_constants::match_continuous);
    });
}

QFORGE_DECL std::string regex::replace(std::string_view s, const std::string& format) const {
    return detail::regex_call([&] {
        std::string out;
        std::regex_replace(std::back_inserter(out), s.data(), s.data() + s.size(), impl_->re, format);
        return out;
    });
}
#endif

}  // namespace qforge
