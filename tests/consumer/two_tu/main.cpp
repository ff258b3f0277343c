// Every public header, included here and in other.cpp: duplicate definitions fail to link.
// Built twice: header-only (test_two_tu) and with QFORGE_SEPARATE_COMPILATION
// (test_two_tu_separate, linked with the one TU that defines QFORGE_IMPLEMENTATION).
#include "all_headers.hpp"

int other_translation_unit();

#if defined(QFORGE_SEPARATE_COMPILATION)
// Declarations only here: the link needs the implementation TU's one definition of each.
static_assert(!QFORGE_BODIES_HERE);
// Pointers with external linkage: emitted whatever the optimiser does, so they must resolve.
auto* convert_fn = &qforge::convert;
auto* plan_conversion_fn = &qforge::plan_conversion;
auto* make_plan_fn = &qforge::make_plan;
auto* repack_checkpoint_fn = &qforge::repack_checkpoint;
auto* check_serving_fn = &qforge::check_serving;
auto* write_demo_checkpoint_fn = &qforge::write_demo_checkpoint;
auto* convert_hf_to_gguf_fn = &qforge::gguf::convert_hf_to_gguf;
#endif

int main() {
#if defined(QFORGE_SEPARATE_COMPILATION)
    if (!convert_fn || !plan_conversion_fn || !make_plan_fn || !repack_checkpoint_fn || !check_serving_fn ||
        !write_demo_checkpoint_fn || !convert_hf_to_gguf_fn)
        return 1;
#endif
    // Both TUs must agree on the version and on core conversions.
    if (other_translation_unit() != QFORGE_VERSION_MAJOR * 10000 + QFORGE_VERSION_MINOR * 100 + QFORGE_VERSION_PATCH)
        return 1;
    return qforge::float_to_bf16(1.0f) == 0x3F80 ? 0 : 1;
}
