// Small helpers shared by the repack tests: build tensors in memory, seeded values.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "qforge/core/tensor_view.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace repack_test {

using qforge::dtype;
using qforge::owned_tensor;
using qforge::shape_t;

template <class T>
owned_tensor make(std::string name, dtype t, shape_t shape, const std::vector<T>& values) {
    owned_tensor o;
    o.name = std::move(name);
    o.type = t;
    o.shape = std::move(shape);
    o.bytes.resize(values.size() * sizeof(T));
    if (!values.empty()) std::memcpy(o.bytes.data(), values.data(), o.bytes.size());
    return o;
}

/// Owns tensors and hands out the name -> view map the readers take.
struct store {
    std::map<std::string, owned_tensor> owned;
    std::map<std::string, qforge::tensor_view> views;

    void add(owned_tensor t) {
        std::string n = t.name;
        owned[n] = std::move(t);
        views[n] = owned[n].view();
    }
    void refresh() {
        views.clear();
        for (auto& [n, t] : owned) views[n] = t.view();
    }
};

inline std::vector<std::byte> read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<std::byte> out(c.size());
    if (!c.empty()) std::memcpy(out.data(), c.data(), c.size());
    return out;
}

template <class T>
std::vector<T> read_array(const std::string& path) {
    const auto b = read_file(path);
    std::vector<T> out(b.size() / sizeof(T));
    if (!out.empty()) std::memcpy(out.data(), b.data(), out.size() * sizeof(T));
    return out;
}

/// A random quantized tensor (seeded), asymmetric unless `symmetric`.
inline qforge::quantized_tensor random_qt(std::int64_t N, std::int64_t K, int bits, std::int64_t group, bool symmetric,
                                          dtype scale_dtype, std::uint32_t seed, bool zero_zero_allowed = true) {
    std::mt19937 rng(seed);
    qforge::quantized_tensor q;
    q.name = "model.layers.0.mlp.up_proj";
    q.bits = bits;
    q.rows = N;
    q.cols = K;
    q.group_size = group;
    q.symmetric = symmetric;
    q.scale_dtype = scale_dtype;
    const int maxq = (1 << bits) - 1;
    q.codes.resize(static_cast<std::size_t>(N * K));
    for (auto& c : q.codes) c = static_cast<std::uint8_t>(rng() % static_cast<unsigned>(maxq + 1));
    const auto G = static_cast<std::size_t>(N * q.groups());
    q.scales.resize(G);
    q.zeros.resize(G);
    std::uniform_real_distribution<float> sd(1e-3f, 2e-2f);
    for (std::size_t i = 0; i < G; ++i) {
        const float s = sd(rng);
        q.scales[i] = scale_dtype == dtype::BF16 ? qforge::float_to_bf16(s) : qforge::float_to_fp16(s);
        if (symmetric) q.zeros[i] = 1 << (bits - 1);
        else q.zeros[i] = static_cast<std::int32_t>(zero_zero_allowed ? rng() % static_cast<unsigned>(maxq + 1)
                                                                       : 1 + rng() % static_cast<unsigned>(maxq));
    }
    return q;
}

inline bool same_decoded(const qforge::quantized_tensor& a, const qforge::quantized_tensor& b) {
    if (a.rows != b.rows || a.cols != b.cols) return false;
    for (std::int64_t n = 0; n < a.rows; ++n)
        for (std::int64_t k = 0; k < a.cols; ++k) {
            const float x = a.dequantized(n, k), y = b.dequantized(n, k);
            if (std::memcmp(&x, &y, sizeof x) != 0) return false;
        }
    return true;
}

inline bool same_qt(const qforge::quantized_tensor& a, const qforge::quantized_tensor& b) {
    return a.bits == b.bits && a.rows == b.rows && a.cols == b.cols && a.group_size == b.group_size &&
           a.symmetric == b.symmetric && a.scale_dtype == b.scale_dtype && a.codes == b.codes && a.scales == b.scales &&
           a.zeros == b.zeros && a.g_idx == b.g_idx;
}

}  // namespace repack_test
