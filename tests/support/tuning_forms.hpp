// The forms of the AVX2 kernels (simd/tuning.hpp) a kernel test runs, and bench_gguf times:
// on AVX2 every form (two vectors rounding by two adds, two rounding by the instruction, four
// vectors), so that each machine runs them all whatever it would pick; on another ISA the one
// form it has. The settings are put back when the object goes out of scope.
#pragma once

#include <ostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "qforge/simd/tags.hpp"
#include "qforge/simd/tuning.hpp"

namespace qforge::testing {

struct avx2_form {
    int vectors = 2;
    bool by_instruction = false;

    bool operator==(const avx2_form&) const = default;
    std::string name() const {
        std::ostringstream os;
        os << *this;
        return os.str();
    }
    friend std::ostream& operator<<(std::ostream& os, const avx2_form& f) {
        return os << f.vectors << " vectors, rounding by " << (f.by_instruction ? "the instruction" : "two adds");
    }
};

class avx2_forms {
public:
    avx2_forms() = default;
    avx2_forms(const avx2_forms&) = delete;
    avx2_forms& operator=(const avx2_forms&) = delete;
    ~avx2_forms() { use(saved_); }

    std::vector<avx2_form> of(simd::isa i) const {
        if (i == simd::isa::avx2) return {{2, false}, {2, true}, {4, false}};
        return {saved_};
    }
    /// The form the AVX2 searches take now, as one of of(avx2): four vectors round by the adds
    /// whatever the rounding setting says.
    static avx2_form current() {
        const int v = simd::detail::avx2_search_vectors().load();
        return {v, v == 2 && simd::detail::avx2_round_by_instruction().load()};
    }
    /// Each ISA of `isas` with each of its forms.
    std::vector<std::pair<simd::isa, avx2_form>> with(const std::vector<simd::isa>& isas) const {
        std::vector<std::pair<simd::isa, avx2_form>> out;
        for (simd::isa i : isas)
            for (const avx2_form& f : of(i)) out.emplace_back(i, f);
        return out;
    }
    static void use(const avx2_form& f) {
        simd::detail::avx2_search_vectors().store(f.vectors);
        simd::detail::avx2_round_by_instruction().store(f.by_instruction);
    }

private:
    avx2_form saved_{simd::detail::avx2_search_vectors().load(), simd::detail::avx2_round_by_instruction().load()};
};

}  // namespace qforge::testing
