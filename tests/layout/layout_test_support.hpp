// Helpers for the layout tests: raw file reading, SHA-256 of golden files, seeded
// quantized tensors and a view list over packed tensors.
#pragma once

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "qforge/core/half.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace layout_test {

inline std::vector<std::uint8_t> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + path);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

template <class T>
std::vector<T> as(const std::vector<std::uint8_t>& bytes) {
    std::vector<T> out(bytes.size() / sizeof(T));
    std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
    return out;
}

// FIPS 180-4 SHA-256, only to check golden files against their manifest.
inline std::string sha256_hex(const std::vector<std::uint8_t>& data) {
    static constexpr std::uint32_t k[64] = {
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
        0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
        0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
        0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
        0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
        0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
        0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
    std::uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                          0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    std::vector<std::uint8_t> m = data;
    const std::uint64_t bit_len = static_cast<std::uint64_t>(data.size()) * 8;
    m.push_back(0x80);
    while (m.size() % 64 != 56) m.push_back(0);
    for (int i = 7; i >= 0; --i) m.push_back(static_cast<std::uint8_t>(bit_len >> (8 * i)));
    auto rotr = [](std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
    for (std::size_t off = 0; off < m.size(); off += 64) {
        std::uint32_t w[64];
        for (int i = 0; i < 16; ++i)
            w[i] = static_cast<std::uint32_t>(m[off + 4 * i]) << 24 | static_cast<std::uint32_t>(m[off + 4 * i + 1]) << 16 |
                   static_cast<std::uint32_t>(m[off + 4 * i + 2]) << 8 | m[off + 4 * i + 3];
        for (int i = 16; i < 64; ++i) {
            const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
            const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16] + s0 + w[i - 7] + s1;
        }
        std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
        for (int i = 0; i < 64; ++i) {
            const std::uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
            const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
            hh = g; g = f; f = e; e = d + t1; d = c; c = b; b = a; a = t1 + t2;
        }
        h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e; h[5] += f; h[6] += g; h[7] += hh;
    }
    std::string hex;
    char buf[9];
    for (std::uint32_t v : h) {
        std::snprintf(buf, sizeof buf, "%08x", v);
        hex += buf;
    }
    return hex;
}

/// A consistent quantized tensor with seeded codes, zeros and scales.
inline qforge::quantized_tensor random_qt(int bits, std::int64_t rows, std::int64_t cols,
                                          std::int64_t group, bool symmetric, std::uint32_t seed,
                                          qforge::dtype scale_dtype = qforge::dtype::F16) {
    qforge::quantized_tensor q;
    q.name = "layer." + std::to_string(bits) + "b.weight";
    q.bits = bits;
    q.rows = rows;
    q.cols = cols;
    q.group_size = group;
    q.symmetric = symmetric;
    q.scale_dtype = scale_dtype;
    std::mt19937 rng(seed);
    const int maxq = (1 << bits) - 1;
    q.codes.resize(static_cast<std::size_t>(rows * cols));
    for (auto& c : q.codes) c = static_cast<std::uint8_t>(rng() % (maxq + 1));
    const auto n_groups = static_cast<std::size_t>(rows * q.groups());
    q.zeros.resize(n_groups);
    q.scales.resize(n_groups);
    for (std::size_t i = 0; i < n_groups; ++i) {
        q.zeros[i] = symmetric ? (1 << (bits - 1)) : static_cast<std::int32_t>(rng() % (maxq + 1));
        const float s = 1e-3f + static_cast<float>(rng() % 1000) * 2e-5f;
        q.scales[i] = scale_dtype == qforge::dtype::BF16 ? qforge::float_to_bf16(s) : qforge::float_to_fp16(s);
    }
    return q;
}

inline std::vector<qforge::tensor_view> views_of(const std::vector<qforge::owned_tensor>& ts) {
    std::vector<qforge::tensor_view> v;
    for (const auto& t : ts) v.push_back(t.view());
    return v;
}

inline const qforge::owned_tensor& named(const std::vector<qforge::owned_tensor>& ts, const std::string& name) {
    for (const auto& t : ts)
        if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
}

template <class T>
std::vector<T> elements(const qforge::owned_tensor& t) {
    std::vector<T> out(t.bytes.size() / sizeof(T));
    std::memcpy(out.data(), t.bytes.data(), out.size() * sizeof(T));
    return out;
}

inline void expect_same(const qforge::quantized_tensor& a, const qforge::quantized_tensor& b) {
    if (a.bits != b.bits || a.rows != b.rows || a.cols != b.cols || a.group_size != b.group_size ||
        a.symmetric != b.symmetric || a.scale_dtype != b.scale_dtype || a.codes != b.codes ||
        a.scales != b.scales || a.zeros != b.zeros || a.g_idx != b.g_idx)
        throw std::runtime_error("quantized tensors differ: " + a.name);
}

}  // namespace layout_test
