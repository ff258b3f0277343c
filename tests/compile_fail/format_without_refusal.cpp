// expect: format_refuses
// A format's traits without refusal() put into the format table: the concept names the part
// that is missing instead of an error deep inside format_refusal.
#include "qforge/convert/format.hpp"
struct half_a_format {
    static constexpr std::string_view name = "half";
    static constexpr std::array<std::string_view, 0> aliases{};
    static constexpr qforge::code_kind codes = qforge::code_kind::integer;
    static constexpr bool carries_g_idx = false;
    static constexpr bool one_scheme = false;
    static constexpr qforge::scale_policy asymmetric_minmax = qforge::scale_policy::minmax;
    static qforge::dtype default_scale_dtype(qforge::dtype d) noexcept { return d; }
};
qforge::format_entry<qforge::output_format::gptq, half_a_format> entry;
