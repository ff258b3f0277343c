// Recursive-descent JSON parser behind json::parse (RFC 8259, strict). Depth is bounded by
// json_limits::max_depth so hostile nesting cannot exhaust the stack, and memory by the input:
// a structural pre-scan counts each container's children so every array and object is
// allocated once at its exact size (vector doubling alone would cost up to 3x more).
#pragma once

#include <charconv>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"

namespace qforge::detail {

/// Appends code point `cp` (already validated: <= 0x10FFFF, not a surrogate) as UTF-8.
QFORGE_DECL void append_utf8(std::string& out, std::uint32_t cp);

/// Length of the well-formed UTF-8 sequence at s[i] (Unicode table 3-7: no overlongs, no
/// surrogates, nothing above U+10FFFF), or 0 when it is malformed.
QFORGE_DECL std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept;

QFORGE_DECL bool is_valid_utf8(std::string_view s) noexcept;

class json_reader {
public:
    json_reader(std::string_view text, std::string_view file, const json_limits& limits)
        : s_(text), file_(file), limits_(limits) {}

    json parse_document();

private:
    [[noreturn]] void error(std::string_view expected) const;

    void skip_ws() noexcept;

    bool consume(std::string_view lit) noexcept;

    // The pre-scan: children_[k] is the number of elements (array) or members (object) of the
    // k-th container in document order, counted without validating. For valid JSON it is exact;
    // for invalid JSON every counted child still needs 2 bytes of its own text (an element: the
    // ',' or '[' before it and its first byte; a member: ',' or '{', a key of >= 2 bytes and
    // its ':'), so the reservations made from it stay within 20 bytes per byte of input.
    void scan_shape();

    static bool is_structural(char c) noexcept;

    // The reserve for the next container the parser opens (containers open in document order
    // in both passes, so the k-th one opened is children_[k]).
    std::size_t next_container_size() noexcept;

    void count_value();

    json parse_value(std::size_t depth);

    void check_depth(std::size_t depth);

    json parse_object(std::size_t depth);

    // Member indices by key hash (open addressing, load <= 1/2): 4-8 bytes per member where a
    // node-based set of copied keys cost 50-100, so a large object's duplicate check stays
    // within the input's memory bound.
    class key_index {
    public:
        // Whether `key` is already among members[0..size); if not, records index size() for it.
        bool insert(const json::object_t& members, const std::string& key) {
            if ((members.size() + 1) * 2 > slots_.size()) rebuild(members, (members.size() + 1) * 2);
            for (std::size_t h = slot_of(key);; h = (h + 1) & (slots_.size() - 1)) {
                if (slots_[h] == 0) {
                    slots_[h] = static_cast<std::uint32_t>(members.size() + 1);
                    return false;
                }
                if (members[slots_[h] - 1].key == key) return true;
            }
        }

    private:
        std::size_t slot_of(std::string_view key) const noexcept {
            return std::hash<std::string_view>{}(key) & (slots_.size() - 1);
        }
        void rebuild(const json::object_t& members, std::size_t at_least) {
            std::size_t size = 64;
            while (size < at_least) size *= 2;
            slots_.assign(size, 0);
            for (std::size_t m = 0; m < members.size(); ++m) {
                std::size_t h = slot_of(members[m].key);
                while (slots_[h] != 0) h = (h + 1) & (size - 1);
                slots_[h] = static_cast<std::uint32_t>(m + 1);
            }
        }
        std::vector<std::uint32_t> slots_;  // member index + 1; 0 = empty
    };

    // Linear search while small (config objects), the index once large (weight_map).
    static bool is_duplicate(const json::object_t& members, key_index& seen,
                             const std::string& key);

    json parse_array(std::size_t depth);

    std::uint32_t parse_hex4();

    std::string parse_string();

    // Index of the quote closing a string whose text starts at `from` (the input's size when
    // unterminated): the first '"' not preceded by an odd run of backslashes.
    std::size_t raw_string_end(std::size_t from) const noexcept;

    void parse_escape(std::string& out);

    static std::string hex4(std::uint32_t v);

    json parse_number();

    std::string_view s_;
    std::string_view file_;
    json_limits limits_;
    std::size_t i_ = 0;
    std::vector<std::uint32_t> children_;  // from scan_shape
    std::size_t next_container_ = 0;
    std::size_t values_ = 0;
};

}  // namespace qforge::detail

#if QFORGE_BASE_BODIES_HERE

namespace qforge::detail {

QFORGE_DECL void append_utf8(std::string& out, std::uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

QFORGE_DECL std::size_t utf8_sequence_length(std::string_view s, std::size_t i) noexcept {
    auto byte = [&](std::size_t k) -> unsigned {
        return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0x100u;
    };
    auto cont = [&](std::size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
        const unsigned b = byte(k);
        return b >= lo && b <= hi;
    };
    const unsigned b0 = byte(0);
    if (b0 < 0x80) return 1;
    if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
    if (b0 == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
    if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) return cont(1) && cont(2) ? 3 : 0;
    if (b0 == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
    if (b0 == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
    if (b0 >= 0xF1 && b0 <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
    if (b0 == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
    return 0;
}

QFORGE_DECL bool is_valid_utf8(std::string_view s) noexcept {
    for (std::size_t i = 0; i < s.size();) {
        const std::size_t n = utf8_sequence_length(s, i);
        if (n == 0) return false;
        i += n;
    }
    return true;
}


QFORGE_DECL json json_reader::parse_document() {
    if (s_.size() > limits_.max_bytes)
        fail<limit_error>(std::string(file_), {},
                          "JSON text of " + std::to_string(s_.size()) +
                              " bytes exceeds the limit of " +
                              std::to_string(limits_.max_bytes));
    scan_shape();
    children_.shrink_to_fit();  // 4 bytes per container while the tree is built
    skip_ws();
    json v = parse_value(0);
    skip_ws();
    if (i_ != s_.size()) error("end of input after the top-level value");
    return v;
}

QFORGE_DECL void json_reader::error(std::string_view expected) const {
    std::string found = "end of input";
    if (i_ < s_.size()) {
        const auto c = static_cast<unsigned char>(s_[i_]);
        if (c >= 0x20 && c < 0x7F) {
            found = "'";
            found += static_cast<char>(c);
            found += "'";
        } else {
            constexpr char hex[] = "0123456789abcdef";
            found = "byte 0x";
            found += hex[c >> 4];
            found += hex[c & 15];
        }
    }
    fail<format_error>(std::string(file_), {},
                       "invalid JSON at byte " + std::to_string(i_) + ": expected " +
                           std::string(expected) + ", found " + found);
}

QFORGE_DECL void json_reader::skip_ws() noexcept {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
        ++i_;
}

QFORGE_DECL bool json_reader::consume(std::string_view lit) noexcept {
    if (s_.substr(i_, lit.size()) != lit) return false;
    i_ += lit.size();
    return true;
}

QFORGE_DECL void json_reader::scan_shape() {
    std::vector<std::uint32_t> open;  // children_ indices of the open containers
    std::vector<bool> in_object;
    bool expecting = false;           // just after '[' / '{' / ','
    const std::size_t n = s_.size();
    auto count_child = [&] {
        if (!open.empty() && expecting) ++children_[open.back()];
        expecting = false;
    };
    for (std::size_t i = 0; i < n; ++i) {
        const char c = s_[i];
        switch (c) {
            case ' ': case '\t': case '\n': case '\r': break;
            case '"':
                if (open.empty() || !in_object.back()) count_child();
                i = raw_string_end(i + 1);
                break;
            case ':':
                if (!open.empty() && in_object.back()) count_child();
                break;
            case ',': expecting = true; break;
            case '[': case '{':
                if (open.empty() || !in_object.back()) count_child();
                // Deeper than the limit: the parser refuses there, nothing further to size.
                if (open.size() >= limits_.max_depth) return;
                open.push_back(static_cast<std::uint32_t>(children_.size()));
                in_object.push_back(c == '{');
                children_.push_back(0);
                expecting = true;
                break;
            case ']': case '}':
                if (!open.empty()) {
                    open.pop_back();
                    in_object.pop_back();
                }
                expecting = false;
                break;
            default:
                if (open.empty() || !in_object.back()) count_child();
                while (i + 1 < n && !is_structural(s_[i + 1])) ++i;
        }
    }
}

QFORGE_DECL bool json_reader::is_structural(char c) noexcept {
    switch (c) {
        case ' ': case '\t': case '\n': case '\r': case '"': case ':': case ',':
        case '[': case ']': case '{': case '}': return true;
        default: return false;
    }
}

QFORGE_DECL std::size_t json_reader::next_container_size() noexcept {
    return next_container_ < children_.size() ? children_[next_container_++] : 0;
}

QFORGE_DECL void json_reader::count_value() {
    if (++values_ > limits_.max_values)
        fail<limit_error>(std::string(file_), {},
                          "more than " + std::to_string(limits_.max_values) +
                              " JSON values at byte " + std::to_string(i_) +
                              " (json_limits::max_values)");
}

QFORGE_DECL json json_reader::parse_value(std::size_t depth) {
    if (i_ >= s_.size()) error("a value");
    count_value();
    switch (s_[i_]) {
        case '{': return parse_object(depth + 1);
        case '[': return parse_array(depth + 1);
        case '"': return json(parse_string());
        case 't': if (consume("true")) return json(true); break;
        case 'f': if (consume("false")) return json(false); break;
        case 'n': if (consume("null")) return json(nullptr); break;
        default:
            if (s_[i_] == '-' || (s_[i_] >= '0' && s_[i_] <= '9')) return parse_number();
    }
    error("a value (object, array, string, number, true, false or null)");
}

QFORGE_DECL void json_reader::check_depth(std::size_t depth) {
    if (depth > limits_.max_depth)
        fail<limit_error>(std::string(file_), {},
                          "JSON nesting deeper than " + std::to_string(limits_.max_depth) +
                              " at byte " + std::to_string(i_));
}

QFORGE_DECL json json_reader::parse_object(std::size_t depth) {
    check_depth(depth);
    ++i_;  // '{'
    json::object_t members;
    members.reserve(next_container_size());
    key_index seen;  // only filled for large objects
    skip_ws();
    if (i_ < s_.size() && s_[i_] == '}') {
        ++i_;
        return json(std::move(members));
    }
    for (;;) {
        skip_ws();
        if (i_ >= s_.size() || s_[i_] != '"') error("'\"' starting an object key");
        const std::size_t key_at = i_;
        std::string key = parse_string();
        if (is_duplicate(members, seen, key)) {
            i_ = key_at;
            error("a key not already in this object (duplicate key \"" + key + "\")");
        }
        skip_ws();
        if (i_ >= s_.size() || s_[i_] != ':') error("':' after an object key");
        ++i_;
        skip_ws();
        members.push_back({std::move(key), parse_value(depth)});
        skip_ws();
        if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            continue;
        }
        if (i_ < s_.size() && s_[i_] == '}') {
            ++i_;
            return json(std::move(members));
        }
        error("',' or '}' after an object member");
    }
}

QFORGE_DECL bool json_reader::is_duplicate(const json::object_t& members, key_index& seen, const std::string& key) {
    constexpr std::size_t linear_limit = 16;
    if (members.size() < linear_limit) {
        for (const auto& m : members)
            if (m.key == key) return true;
        return false;
    }
    return seen.insert(members, key);
}

QFORGE_DECL json json_reader::parse_array(std::size_t depth) {
    check_depth(depth);
    ++i_;  // '['
    json::array_t items;
    items.reserve(next_container_size());
    skip_ws();
    if (i_ < s_.size() && s_[i_] == ']') {
        ++i_;
        return json(std::move(items));
    }
    for (;;) {
        skip_ws();
        items.push_back(parse_value(depth));
        skip_ws();
        if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            continue;
        }
        if (i_ < s_.size() && s_[i_] == ']') {
            ++i_;
            return json(std::move(items));
        }
        error("',' or ']' after an array element");
    }
}

QFORGE_DECL std::uint32_t json_reader::parse_hex4() {
    std::uint32_t v = 0;
    for (int k = 0; k < 4; ++k, ++i_) {
        if (i_ >= s_.size()) error("4 hex digits after \\u");
        const char c = s_[i_];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= static_cast<std::uint32_t>(c - '0');
        else if (c >= 'a' && c <= 'f') v |= static_cast<std::uint32_t>(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= static_cast<std::uint32_t>(c - 'A' + 10);
        else error("4 hex digits after \\u");
    }
    return v;
}

QFORGE_DECL std::string json_reader::parse_string() {
    ++i_;  // opening quote
    std::string out;
    // Decoded text is never longer than the raw text: one exact allocation, no doubling.
    out.reserve(raw_string_end(i_) - i_);
    for (;;) {
        if (i_ >= s_.size()) error("'\"' closing the string");
        const auto c = static_cast<unsigned char>(s_[i_]);
        if (c == '"') {
            ++i_;
            return out;
        }
        if (c < 0x20) error("an escape for a control character inside a string");
        if (c == '\\') {
            parse_escape(out);
            continue;
        }
        if (c < 0x80) {
            out += static_cast<char>(c);
            ++i_;
            continue;
        }
        const std::size_t n = utf8_sequence_length(s_, i_);
        if (n == 0) error("valid UTF-8 inside a string");
        out.append(s_.substr(i_, n));
        i_ += n;
    }
}

QFORGE_DECL std::size_t json_reader::raw_string_end(std::size_t from) const noexcept {
    for (std::size_t at = from; at < s_.size(); ++at) {
        const void* q = std::memchr(s_.data() + at, '"', s_.size() - at);
        if (!q) break;
        at = static_cast<std::size_t>(static_cast<const char*>(q) - s_.data());
        std::size_t slashes = 0;
        while (at - slashes > from && s_[at - slashes - 1] == '\\') ++slashes;
        if (slashes % 2 == 0) return at;
    }
    return s_.size();
}

QFORGE_DECL void json_reader::parse_escape(std::string& out) {
    ++i_;  // backslash
    if (i_ >= s_.size()) error("an escape character after '\\'");
    const char e = s_[i_++];
    switch (e) {
        case '"': out += '"'; return;
        case '\\': out += '\\'; return;
        case '/': out += '/'; return;
        case 'b': out += '\b'; return;
        case 'f': out += '\f'; return;
        case 'n': out += '\n'; return;
        case 'r': out += '\r'; return;
        case 't': out += '\t'; return;
        case 'u': break;
        default:
            --i_;
            error("a valid escape (\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u) after '\\'");
    }
    std::uint32_t cp = parse_hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
        i_ -= 6;
        error("a high surrogate before a low surrogate (lone \\u" + hex4(cp) + ")");
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (!consume("\\u")) error("\\u low surrogate after high surrogate \\u" + hex4(cp));
        const std::uint32_t lo = parse_hex4();
        if (lo < 0xDC00 || lo > 0xDFFF) {
            i_ -= 6;
            error("a low surrogate (\\udc00-\\udfff) after \\u" + hex4(cp));
        }
        cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    append_utf8(out, cp);
}

QFORGE_DECL std::string json_reader::hex4(std::uint32_t v) {
    constexpr char hex[] = "0123456789abcdef";
    std::string s(4, '0');
    for (int k = 3; k >= 0; --k, v >>= 4) s[static_cast<std::size_t>(k)] = hex[v & 15];
    return s;
}

QFORGE_DECL json json_reader::parse_number() {
    const std::size_t start = i_;
    bool integral = true;
    if (s_[i_] == '-') ++i_;
    auto digits = [&] {
        const std::size_t from = i_;
        while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
        return i_ - from;
    };
    if (i_ < s_.size() && s_[i_] == '0') {
        ++i_;
    } else if (digits() == 0) {
        error("a digit");
    }
    if (i_ < s_.size() && s_[i_] == '.') {
        integral = false;
        ++i_;
        if (digits() == 0) error("a digit after the decimal point");
    }
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
        integral = false;
        ++i_;
        if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
        if (digits() == 0) error("a digit in the exponent");
    }
    const char* first = s_.data() + start;
    const char* last = s_.data() + i_;
    if (integral) {
        std::int64_t v = 0;
        const auto r = std::from_chars(first, last, v);
        if (r.ec == std::errc() && r.ptr == last) return json(v);
        // Beyond int64: kept as a double, as Python would give a float-sized int.
    }
    double d = 0;
    const auto r = std::from_chars(first, last, d);
    if (r.ec != std::errc() || r.ptr != last) {
        i_ = start;
        error("a number within the range of a double");
    }
    return json(d);
}

}  // namespace qforge::detail
#endif
