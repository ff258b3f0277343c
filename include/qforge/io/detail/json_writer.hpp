// Serializer behind json::dump. Compact output follows serde_json's ser.rs byte for byte
// (escape table, lowercase hex, raw UTF-8; formats.md 1.1 item 6); indented output follows
// CPython's json encoder with indent=N and separators (',', ': ').
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"

namespace qforge::detail {

/// Shortest round-trip digits written as CPython's float repr writes them: fixed notation
/// with at least one fractional digit when the decimal exponent is in [-4, 16), else
/// d[.ddd]e[+-]XX. (serde_json would print 1e-5 where Python prints 1e-05; config.json files
/// are written by Python, safetensors headers never hold floats.)
QFORGE_DECL void append_python_float(std::string& out, double d);

QFORGE_DECL void append_u_escape(std::string& out, std::uint32_t unit);

/// Decodes the (already valid) UTF-8 sequence at s[i], advancing i.
QFORGE_DECL std::uint32_t decode_utf8(std::string_view s, std::size_t& i);

QFORGE_DECL void append_json_string(std::string& out, std::string_view s, bool ensure_ascii);

struct json_writer {
    std::string& out;
    const json_dump_options& opt;

    void newline(std::size_t level);

    void write(const json& v, std::size_t level);

    void write_array(const json::array_t& a, std::size_t level);

    void write_object(const json::object_t& o, std::size_t level);
};

}  // namespace qforge::detail

#if QFORGE_BASE_BODIES_HERE

namespace qforge::detail {

QFORGE_DECL void append_python_float(std::string& out, double d) {
    if (!std::isfinite(d))
        fail<format_error>({}, {}, "JSON cannot hold NaN or infinity");
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    std::string_view sci(buf, static_cast<std::size_t>(r.ptr - buf));
    if (sci.front() == '-') {
        out += '-';
        sci.remove_prefix(1);
    }
    const std::size_t e_pos = sci.find('e');
    std::string digits(sci.substr(0, e_pos));
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    int exp = 0;
    std::string_view e_text = sci.substr(e_pos + 1);
    if (e_text.front() == '+') e_text.remove_prefix(1);
    std::from_chars(e_text.data(), e_text.data() + e_text.size(), exp);

    if (exp < -4 || exp >= 16) {
        out += digits[0];
        if (digits.size() > 1) {
            out += '.';
            out.append(digits, 1);
        }
        out += 'e';
        out += exp < 0 ? '-' : '+';
        const int a = exp < 0 ? -exp : exp;
        if (a < 10) out += '0';
        out += std::to_string(a);
    } else if (exp < 0) {
        out += "0.";
        out.append(static_cast<std::size_t>(-exp - 1), '0');
        out += digits;
    } else {
        const auto int_len = static_cast<std::size_t>(exp) + 1;
        if (digits.size() <= int_len) {
            out += digits;
            out.append(int_len - digits.size(), '0');
            out += ".0";
        } else {
            out.append(digits, 0, int_len);
            out += '.';
            out.append(digits, int_len);
        }
    }
}

QFORGE_DECL void append_u_escape(std::string& out, std::uint32_t unit) {
    constexpr char hex[] = "0123456789abcdef";
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += hex[(unit >> shift) & 15];
}

QFORGE_DECL std::uint32_t decode_utf8(std::string_view s, std::size_t& i) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    const std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) fail<format_error>({}, {}, "JSON string is not valid UTF-8");
    std::uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1Fu) : n == 3 ? (b0 & 0x0Fu) : (b0 & 0x07u);
    for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3Fu);
    i += n;
    return cp;
}

QFORGE_DECL void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
    out += '"';
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x80) {
            if (!ensure_ascii) {
                const std::size_t n = utf8_sequence_length(s, i);
                if (n == 0) fail<format_error>({}, {}, "JSON string is not valid UTF-8");
                out.append(s.substr(i, n));
                i += n;
                continue;
            }
            const std::uint32_t cp = decode_utf8(s, i);
            if (cp >= 0x10000) {
                append_u_escape(out, 0xD800 + ((cp - 0x10000) >> 10));
                append_u_escape(out, 0xDC00 + ((cp - 0x10000) & 0x3FF));
            } else {
                append_u_escape(out, cp);
            }
            continue;
        }
        ++i;
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\b': out += "\\b"; break;
            case '\t': out += "\\t"; break;
            case '\n': out += "\\n"; break;
            case '\f': out += "\\f"; break;
            case '\r': out += "\\r"; break;
            default:
                if (c < 0x20 || (c == 0x7F && ensure_ascii)) append_u_escape(out, c);
                else out += static_cast<char>(c);
        }
    }
    out += '"';
}


QFORGE_DECL void json_writer::newline(std::size_t level) {
    out += '\n';
    out.append(level * static_cast<std::size_t>(opt.indent), ' ');
}

QFORGE_DECL void json_writer::write(const json& v, std::size_t level) {
    switch (v.type()) {
        case json::kind::null: out += "null"; return;
        case json::kind::boolean: out += v.as_bool() ? "true" : "false"; return;
        case json::kind::integer: out += std::to_string(v.as_int()); return;
        case json::kind::number: append_python_float(out, v.as_double()); return;
        case json::kind::string: append_json_string(out, v.as_string(), opt.ensure_ascii); return;
        case json::kind::array: write_array(v.as_array(), level); return;
        case json::kind::object: write_object(v.as_object(), level); return;
    }
}

QFORGE_DECL void json_writer::write_array(const json::array_t& a, std::size_t level) {
    if (a.empty()) {
        out += "[]";
        return;
    }
    out += '[';
    for (std::size_t k = 0; k < a.size(); ++k) {
        if (k) out += ',';
        if (opt.indent >= 0) newline(level + 1);
        write(a[k], level + 1);
    }
    if (opt.indent >= 0) newline(level);
    out += ']';
}

QFORGE_DECL void json_writer::write_object(const json::object_t& o, std::size_t level) {
    if (o.empty()) {
        out += "{}";
        return;
    }
    std::vector<const json_member*> order;
    order.reserve(o.size());
    for (const auto& m : o) order.push_back(&m);
    if (opt.sort_keys)
        std::stable_sort(order.begin(), order.end(),
                         [](const json_member* a, const json_member* b) { return a->key < b->key; });
    out += '{';
    for (std::size_t k = 0; k < order.size(); ++k) {
        if (k) out += ',';
        if (opt.indent >= 0) newline(level + 1);
        append_json_string(out, order[k]->key, opt.ensure_ascii);
        out += opt.indent >= 0 ? ": " : ":";
        write(order[k]->value, level + 1);
    }
    if (opt.indent >= 0) newline(level);
    out += '}';
}

}  // namespace qforge::detail
#endif
