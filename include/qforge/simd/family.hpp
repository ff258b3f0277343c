// Choosing the ISA, and the one dispatch every kernel family goes through.
//
// The choice is the best ISA of this CPU, unless QFORGE_FORCE_ISA=scalar|avx2|avx512|neon pins
// it for the process (useful to compare paths and to reproduce a bug); naming an ISA the CPU
// lacks, or an unknown name, throws an unsupported_error instead of silently falling back. The
// choice is made once and cached.
//
// A kernel family is a table of function pointers (a struct with `isa id` and a
// `family_name`), written once in simd/kernels/<family>.ipp and instantiated for every ISA of
// the list by simd/detail/instantiate.ipp. kernels_of<Table>(i) is the only way to get one,
// and it records which ISA each family last ran with, so a test can prove that a forced ISA
// reaches every family.
//
// **Example**:
//   const auto& k = qforge::simd::kernels_of<qforge::simd::group_kernels>(qforge::simd::active_isa());
//   qforge::simd::dispatch([](auto tag) { std::puts(decltype(tag)::name().data()); });
#pragma once

#include <atomic>
#include <concepts>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "qforge/core/error.hpp"
#include "qforge/simd/tags.hpp"

namespace qforge::simd {

/// The best ISA of this CPU: the first available one of the list.
inline isa best_available() noexcept {
    for (isa i : all_isas)
        if (available(i)) return i;
    return isa::scalar;
}

/// The ISA named by `forced` (a QFORGE_FORCE_ISA value; null or empty = best available).
inline isa resolve_isa(const char* forced) {
    if (forced == nullptr || *forced == '\0') return best_available();
    const std::string_view want(forced);
    std::string names;
    for (isa i : all_isas) {
        names += (names.empty() ? "" : ", ") + std::string(isa_name(i));
        if (isa_name(i) != want) continue;
        if (!available(i))
            fail<unsupported_error>({}, {}, "QFORGE_FORCE_ISA=" + std::string(want) + " but this CPU or build lacks " +
                                                std::string(want));
        return i;
    }
    fail<unsupported_error>({}, {}, "QFORGE_FORCE_ISA=" + std::string(want) + " is not one of " + names);
}

/// The ISA qforge uses: QFORGE_FORCE_ISA or the best available, resolved on first call.
inline isa active_isa() {
    static const isa chosen = resolve_isa(std::getenv("QFORGE_FORCE_ISA"));
    return chosen;
}

namespace detail {
template <class First, class... Rest, class F>
decltype(auto) visit_tag(isa i, F& f) {
    if constexpr (sizeof...(Rest) == 0) {
        return f(First{});
    } else {
        if (First::id == i) return f(First{});
        return visit_tag<Rest...>(i, f);
    }
}
}  // namespace detail

/// Calls f(tag) with the tag of `i` and returns its result.
template <class F>
decltype(auto) dispatch(isa i, F&& f) {
    return [&]<class... Tags>(tag_list<Tags...>) -> decltype(auto) {
        return detail::visit_tag<Tags...>(i, f);
    }(all_tags{});
}

/// Calls f(tag) with the tag of active_isa() and returns its result.
template <class F>
decltype(auto) dispatch(F&& f) {
    return dispatch(active_isa(), std::forward<F>(f));
}

/// A table of one kernel family: its ISA and its name (for messages and the per-family record).
template <class Table>
concept kernel_family = requires(const Table& t) {
    { Table::family_name } -> std::convertible_to<std::string_view>;
    { t.id } -> std::convertible_to<isa>;
};

namespace detail {
template <class Table>
inline std::atomic<int> family_last_isa{-1};
}  // namespace detail

/// The table of family `Table` for ISA `i`. Throws unsupported_error when `i` is not compiled in
/// or the CPU lacks it. Records `i` as the ISA this family last ran with.
template <kernel_family Table>
const Table& kernels_of(isa i) {
    const Table* table = nullptr;
    all_tags::for_each([&](auto tag) {
        using tag_t = decltype(tag);
        if constexpr (tag_t::compiled())
            if (tag_t::id == i && tag_t::available()) table = &arch_of<tag_t>::template table<Table>();
    });
    if (table == nullptr)
        fail<unsupported_error>({}, {}, "SIMD path " + std::string(isa_name(i)) + " of the " +
                                            std::string(Table::family_name) + " kernels is not available on this CPU");
    // Written only when it changes: a family looked up once per group (the least-squares
    // policy) from many threads would otherwise have them all write one cache line.
    if (detail::family_last_isa<Table>.load(std::memory_order_relaxed) != static_cast<int>(i))
        detail::family_last_isa<Table>.store(static_cast<int>(i), std::memory_order_relaxed);
    return *table;
}

/// The table of family `Table` for active_isa().
template <kernel_family Table>
const Table& active_kernels() {
    return kernels_of<Table>(active_isa());
}

/// The ISA family `Table` was last looked up for (nullopt before its first use).
template <kernel_family Table>
std::optional<isa> last_isa_of() noexcept {
    const int i = detail::family_last_isa<Table>.load(std::memory_order_relaxed);
    if (i < 0) return std::nullopt;
    return static_cast<isa>(i);
}

/// Forgets every lookup of family `Table` (tests clear the record before a run).
template <kernel_family Table>
void forget_last_isa() noexcept {
    detail::family_last_isa<Table>.store(-1, std::memory_order_relaxed);
}

}  // namespace qforge::simd
