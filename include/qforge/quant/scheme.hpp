// Quantization schemes fixed at compile time: scheme<Bits, GroupSize, Symmetry>.
//
// A scheme says how many bits a code has, how many input columns share one scale, and
// whether the zero point is pinned at 2^(Bits-1) (symmetric) or chosen per group
// (asymmetric). Converters learn bits and group size at run time, so with_scheme() maps the
// runtime triple onto one of the supported compile-time schemes, once per tensor.
//
// **Example**:
//   using w4g128 = qforge::scheme<4, 128, qforge::symmetry::symmetric>;
//   static_assert(w4g128::maxq == 15 && w4g128::pinned_zero == 8);
//   qforge::with_scheme(4, 128, true, [](auto s) { using S = decltype(s); ... });
#pragma once

#include <concepts>
#include <cstdint>
#include <string>

#include "qforge/core/error.hpp"

namespace qforge {

enum class symmetry { symmetric, asymmetric };

/// GroupSize value for one group spanning all input columns (one scale per output row).
inline constexpr int per_channel = -1;
/// GroupSize value for "a power of two known only at run time" (sizes with no dedicated
/// instantiation).
inline constexpr int dynamic_group = 0;

template <int Bits>
concept supported_bits = Bits >= 2 && Bits <= 8;

template <int GroupSize>
concept supported_group_size =
    GroupSize == per_channel || GroupSize == dynamic_group || (GroupSize > 0 && (GroupSize & (GroupSize - 1)) == 0);

template <int Bits, int GroupSize, symmetry Sym>
struct scheme {
    static_assert(Bits >= 2, "qforge: scheme Bits must be at least 2 (a 1-bit grid has no zero point)");
    static_assert(Bits <= 8, "qforge: scheme Bits must be at most 8 (codes are stored one per byte)");
    static_assert(supported_group_size<GroupSize>,
                  "qforge: scheme GroupSize must be a power of two, per_channel (-1) or dynamic_group (0)");

    static constexpr int bits = Bits;
    static constexpr int group_size = GroupSize;
    static constexpr symmetry sym = Sym;
    static constexpr bool is_symmetric = Sym == symmetry::symmetric;
    static constexpr int maxq = (1 << Bits) - 1;
    /// The zero point a symmetric scheme pins: 2^(Bits-1) (8 for 4 bits).
    static constexpr int pinned_zero = 1 << (Bits - 1);

    /// Columns per group for a weight with `cols` input columns.
    static constexpr std::int64_t columns_per_group(std::int64_t cols, std::int64_t runtime_group) noexcept {
        if constexpr (GroupSize == per_channel) {
            return cols;
        } else if constexpr (GroupSize == dynamic_group) {
            return runtime_group;
        } else {
            (void)runtime_group;
            return GroupSize;
        }
    }
};

/// Any instantiation of scheme<>.
template <class S>
concept scheme_like = requires {
    { S::bits } -> std::convertible_to<int>;
    { S::group_size } -> std::convertible_to<int>;
    { S::sym } -> std::convertible_to<symmetry>;
} && supported_bits<S::bits> && supported_group_size<S::group_size>;

namespace detail {

template <int Bits, symmetry Sym, class F>
decltype(auto) with_group(int group, F&& f) {
    switch (group) {
        case per_channel: return f(scheme<Bits, per_channel, Sym>{});
        case 32: return f(scheme<Bits, 32, Sym>{});
        case 64: return f(scheme<Bits, 64, Sym>{});
        case 128: return f(scheme<Bits, 128, Sym>{});
        default: return f(scheme<Bits, dynamic_group, Sym>{});
    }
}

template <int Bits, class F>
decltype(auto) with_symmetry(int group, bool symmetric, F&& f) {
    if (symmetric) return with_group<Bits, symmetry::symmetric>(group, f);
    return with_group<Bits, symmetry::asymmetric>(group, f);
}

}  // namespace detail

/// Calls f(scheme<bits, G, sym>{}) for the runtime (bits, group, symmetric). Groups 32, 64, 128
/// and per-channel (-1) have their own instantiation; any other power of two runs as
/// dynamic_group. Throws shape_error for bits outside 2..8 or a group that is neither -1 nor a
/// power of two.
template <class F>
decltype(auto) with_scheme(int bits, int group, bool symmetric, F&& f) {
    if (group != per_channel && (group <= 0 || (group & (group - 1)) != 0))
        fail<shape_error>({}, {}, "group size must be a power of two or -1 (per channel), got " + std::to_string(group));
    switch (bits) {
        case 2: return detail::with_symmetry<2>(group, symmetric, f);
        case 3: return detail::with_symmetry<3>(group, symmetric, f);
        case 4: return detail::with_symmetry<4>(group, symmetric, f);
        case 5: return detail::with_symmetry<5>(group, symmetric, f);
        case 6: return detail::with_symmetry<6>(group, symmetric, f);
        case 7: return detail::with_symmetry<7>(group, symmetric, f);
        case 8: return detail::with_symmetry<8>(group, symmetric, f);
        default: fail<shape_error>({}, {}, "bits must be 2..8, got " + std::to_string(bits));
    }
}

}  // namespace qforge
