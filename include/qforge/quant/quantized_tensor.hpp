// The quantized form of one linear weight, independent of any on-disk layout.
//
// Quantizers produce it, layouts pack it into a format's tensors and unpack it back, and
// readers of already-quantized checkpoints build it from their files. One convention serves
// every format:
//
//   weight [N rows = out features][K cols = in features]
//   w[n][k] = (codes[n][k] - zeros[n][g]) * scale[n][g],   g = g_idx[k] (or k / group_size)
//
// Codes and zeros are unsigned, in [0, 2^bits - 1]. A symmetric scheme pins the zero at
// 2^(bits-1). Scales are held as the 16-bit pattern of their storage dtype (F16 or BF16), so
// the value a loader decodes is exactly the value qforge chose codes against.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/half.hpp"

namespace qforge {

struct quantized_tensor {
    std::string name;                 ///< source tensor name (for error messages)
    int bits = 4;                     ///< 2..8
    std::int64_t rows = 0;            ///< N, output features
    std::int64_t cols = 0;            ///< K, input features
    std::int64_t group_size = 0;      ///< columns per group; equal to cols for per-channel
    bool symmetric = true;            ///< zeros all equal 2^(bits-1)
    dtype scale_dtype = dtype::F16;   ///< F16 or BF16: the dtype scales are stored in
    std::vector<std::uint8_t> codes;  ///< [rows * cols], row-major
    std::vector<std::uint16_t> scales;  ///< [rows * groups()], storage bit patterns
    std::vector<std::int32_t> zeros;    ///< [rows * groups()], in code space
    std::vector<std::int32_t> g_idx;    ///< [cols] group of each input column; empty = k / group_size

    /// Which storage with_header / size_storage size to the header's shape.
    enum class storage { none, codes, codes_scales_zeros };

    /// Sets every field that describes the weight and its grid (name, bits, rows, cols,
    /// group_size, symmetric, scale_dtype) and leaves the vectors alone. Quantizers, unpackers
    /// and the word-level repack all start a tensor here, so they cannot disagree on what a
    /// header holds.
    void set_header(const std::string& tensor, int b, std::int64_t n, std::int64_t k, std::int64_t group, bool sym,
                    dtype sdt) {
        name = tensor;
        bits = b;
        rows = n;
        cols = k;
        group_size = group;
        symmetric = sym;
        scale_dtype = sdt;
    }

    /// Resizes the storage `s` names to the header's shape: codes to rows * cols, scales and
    /// zeros to rows * groups(). Elements already there keep their values (a reused buffer is
    /// not cleared), new ones are zero.
    void size_storage(storage s) {
        if (s == storage::none) return;
        codes.resize(static_cast<std::size_t>(rows * cols));
        if (s == storage::codes) return;
        scales.resize(static_cast<std::size_t>(rows * groups()));
        zeros.resize(scales.size());
    }

    /// A new tensor with its header set, the storage `s` names sized (zero-filled) and `gi` as
    /// its g_idx; everything else empty.
    static quantized_tensor with_header(const std::string& tensor, int b, std::int64_t n, std::int64_t k,
                                        std::int64_t group, bool sym, dtype sdt, storage s = storage::none,
                                        std::vector<std::int32_t> gi = {}) {
        quantized_tensor q;
        q.set_header(tensor, b, n, k, group, sym, sdt);
        q.size_storage(s);
        q.g_idx = std::move(gi);
        return q;
    }

    std::int64_t groups() const noexcept {
        return group_size > 0 ? (cols + group_size - 1) / group_size : 0;
    }
    std::int32_t group_of(std::int64_t k) const noexcept {
        return g_idx.empty() ? static_cast<std::int32_t>(k / group_size) : g_idx[static_cast<std::size_t>(k)];
    }
    std::uint8_t code(std::int64_t n, std::int64_t k) const noexcept {
        return codes[static_cast<std::size_t>(n * cols + k)];
    }
    float scale(std::int64_t n, std::int64_t g) const noexcept {
        const std::uint16_t bits16 = scales[static_cast<std::size_t>(n * groups() + g)];
        return scale_dtype == dtype::BF16 ? bf16_to_float(bits16) : fp16_to_float(bits16);
    }
    std::int32_t zero(std::int64_t n, std::int64_t g) const noexcept {
        return zeros[static_cast<std::size_t>(n * groups() + g)];
    }
    /// The value a loader decodes for element (n, k), in float.
    float dequantized(std::int64_t n, std::int64_t k) const noexcept {
        const std::int32_t g = group_of(k);
        return static_cast<float>(static_cast<std::int32_t>(code(n, k)) - zero(n, g)) * scale(n, g);
    }

    /// Throws a shape_error naming the tensor when sizes or ranges are inconsistent.
    /// Whether every code is <= maxq (2^bits - 1): no code has a bit above `bits`, tested on the
    /// OR of the codes eight bytes at a time (the byte loop that names the element runs only
    /// when this fails).
    bool codes_fit(int maxq) const noexcept {
        const std::uint64_t high = 0x0101010101010101ull * static_cast<std::uint8_t>(~maxq);
        std::uint64_t any = 0;
        std::size_t i = 0;
        for (; i + 8 <= codes.size(); i += 8) {
            std::uint64_t w;
            std::memcpy(&w, codes.data() + i, 8);
            any |= w;
        }
        for (; i < codes.size(); ++i) any |= codes[i];
        return (any & high) == 0;
    }

    void validate() const {
        auto bad = [&](const std::string& why) { fail<shape_error>({}, name, why); };
        if (bits < 2 || bits > 8) bad("bits must be 2..8, got " + std::to_string(bits));
        if (rows <= 0 || cols <= 0) bad("empty weight");
        if (group_size <= 0 || group_size > cols) bad("group size out of range");
        if (scale_dtype != dtype::F16 && scale_dtype != dtype::BF16)
            bad("scale dtype must be F16 or BF16");
        const auto n_codes = static_cast<std::size_t>(rows * cols);
        const auto n_groups = static_cast<std::size_t>(rows * groups());
        if (codes.size() != n_codes) bad("codes size mismatch");
        if (scales.size() != n_groups || zeros.size() != n_groups) bad("scales/zeros size mismatch");
        if (!g_idx.empty() && g_idx.size() != static_cast<std::size_t>(cols)) bad("g_idx size mismatch");
        const int maxq = (1 << bits) - 1;
        if (!codes_fit(maxq))
            for (std::size_t i = 0; i < codes.size(); ++i)
                if (codes[i] > maxq) bad("code out of range at element " + std::to_string(i));
        for (std::size_t i = 0; i < zeros.size(); ++i)
            if (zeros[i] < 0 || zeros[i] > maxq) bad("zero point out of range at group " + std::to_string(i));
        for (std::int32_t g : g_idx)
            if (g < 0 || g >= groups()) bad("g_idx entry out of range");
    }
};

}  // namespace qforge
