// Reader for fake-quantized float checkpoints: what a merged QAT model (PEQA, EfficientQAT)
// is saved as. Per linear a float `weight` that lies exactly on its grid, plus
// `weight_scale` and `weight_zero_point` [N, K/g]. The integer codes are recovered exactly.
//
// The checks follow the compressed-tensors export design (shared/seeds/
// compressed_tensors_export_design.txt): a zero point that is not an integer (QA-LoRA folds),
// a scale stored in another dtype than the weight (a loader would cast it), and a weight that
// is not on its grid are refused, never rounded.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/tensor_source.hpp"
#include "qforge/layout/compressed_tensors.hpp"  // ct_weight_args
#include "qforge/layout/layout_traits.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

struct fake_quant_options {
    int bits = 4;
    /// false (QAT default): zero points are unsigned, in [0, 2^b - 1], codes unsigned too.
    /// true: compressed-tensors convention, zero points in [-2^(b-1), 2^(b-1) - 1].
    bool signed_zero_point = false;
};

namespace repack_detail {
QFORGE_DECL std::string fmt_double(double v);
}  // namespace repack_detail

/// Recovers codes from `weight` [N, K] given `scale` and `zero_point` [N, G] (or [N] per
/// channel). Throws unsupported_error for a non-integer zero point, an off-grid weight (naming
/// the worst group and its deviation) or a scale dtype other than the weight's.
QFORGE_DECL quantized_tensor read_fake_quant(const tensor_view& weight, const tensor_view& scale,
                                             const tensor_view& zero_point, const fake_quant_options& opt,
                                             const std::string& file = {});

/// The same, looking up `<prefix>.weight`, `<prefix>.weight_scale`, `<prefix>.weight_zero_point`.
QFORGE_DECL quantized_tensor read_fake_quant(const tensor_source& src, const std::string& prefix, const fake_quant_options& opt);

/// Fake-quantized float weights as a repack source (convert/repack.hpp's source table): QAT
/// exports, and compressed-tensors frozen / `dense` checkpoints (signed zero points, whose
/// config group `ct` says the symmetry).
struct fake_quant_source_traits {
    static constexpr std::string_view source_name = "fake-quantized (QAT)";
    static constexpr std::array<std::string_view, 4> source_tensors{".weight", ".weight_scale", ".weight_zero_point", ".weight_g_idx"};

    static quantized_tensor read_source(const tensor_source& src, const std::string& prefix, const fake_quant_options& fake,
                                        const ct_weight_args& ct);
};

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {
namespace repack_detail {

QFORGE_DECL std::string fmt_double(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    return buf;
}

}  // namespace repack_detail

QFORGE_DECL quantized_tensor read_fake_quant(const tensor_view& weight, const tensor_view& scale,
                                             const tensor_view& zero_point, const fake_quant_options& opt,
                                             const std::string& file) {
    using namespace detail;
    using namespace repack_detail;
    const std::string& name = weight.name;
    if (opt.bits < 2 || opt.bits > 8) fail<unsupported_error>(file, name, "bits must be 2..8, got " + std::to_string(opt.bits));
    if (weight.type != dtype::F16 && weight.type != dtype::BF16 && weight.type != dtype::F32)
        fail<unsupported_error>(file, name, "fake-quantized weight must be F16, BF16 or F32, got " + std::string(dtype_name(weight.type)));
    if (weight.rank() != 2) fail<shape_error>(file, name, "weight must be 2-D, shape " + shape_to_string(weight.shape));
    require_bytes(weight, file);
    if (scale.type != weight.type)
        fail<unsupported_error>(file, scale.name, "scale dtype " + std::string(dtype_name(scale.type)) + " differs from the weight dtype " +
                                                      std::string(dtype_name(weight.type)) + "; a loader would cast it, so the grid would change");
    const std::int64_t N = weight.shape[0], K = weight.shape[1];
    if (N <= 0 || K <= 0) fail<shape_error>(file, name, "empty weight");
    std::int64_t G = 0;
    if (scale.rank() == 1 && scale.shape[0] == N) G = 1;
    else if (scale.rank() == 2 && scale.shape[0] == N) G = scale.shape[1];
    else fail<shape_error>(file, scale.name, "scale shape " + shape_to_string(scale.shape) + " does not fit weight " + shape_to_string(weight.shape));
    if (G <= 0 || K % G != 0)
        fail<shape_error>(file, scale.name, std::to_string(G) + " groups do not divide " + std::to_string(K) + " input columns");
    if (zero_point.shape != scale.shape)
        fail<shape_error>(file, zero_point.name, "zero point shape " + shape_to_string(zero_point.shape) + " differs from scale shape " + shape_to_string(scale.shape));
    const std::vector<std::uint16_t> patterns = scale_patterns(scale, file);  // F16/BF16 only
    require_bytes(zero_point, file);
    if (!is_integer_dtype(zero_point.type) && !is_floating(zero_point.type))
        fail<unsupported_error>(file, zero_point.name, "zero point dtype " + std::string(dtype_name(zero_point.type)) + " cannot be read");

    quantized_tensor q;
    q.name = name;
    q.bits = opt.bits;
    q.rows = N;
    q.cols = K;
    q.group_size = K / G;
    q.symmetric = false;  // trained zero points are the point of QAT; keep them
    q.scale_dtype = scale.type;
    q.scales = patterns;
    q.zeros.resize(static_cast<std::size_t>(N * G));
    q.codes.resize(static_cast<std::size_t>(N * K));

    const int maxq = (1 << opt.bits) - 1;
    const int offset = opt.signed_zero_point ? (1 << (opt.bits - 1)) : 0;
    for (std::size_t i = 0; i < q.zeros.size(); ++i) {
        double z = is_integer_dtype(zero_point.type) ? static_cast<double>(int_at(zero_point, i)) : float_at(zero_point, i);
        const auto n = static_cast<std::int64_t>(i) / G, g = static_cast<std::int64_t>(i) % G;
        const std::string where = " at row " + std::to_string(n) + " group " + std::to_string(g);
        if (!std::isfinite(z) || z != std::nearbyint(z))
            fail<unsupported_error>(file, zero_point.name, "zero point " + fmt_double(z) + " is not an integer" + where +
                                                               " (fractional zero points cannot be stored as codes)");
        const double zu = z + offset;
        if (zu < 0 || zu > maxq)
            fail<unsupported_error>(file, zero_point.name, "zero point " + fmt_double(z) + where + " is outside the " +
                                                               std::to_string(opt.bits) + "-bit grid");
        q.zeros[i] = static_cast<std::int32_t>(zu);
    }

    // Worst deviation from the grid, over the whole tensor, reported with its group.
    double worst = -1, worst_in_scales = 0;
    std::int64_t worst_n = 0, worst_g = 0, off_grid = 0;
    for (std::int64_t n = 0; n < N; ++n) {
        for (std::int64_t k = 0; k < K; ++k) {
            const std::int64_t g = k / q.group_size;
            const auto gi = static_cast<std::size_t>(n * G + g);
            const float s = scale_of_pattern(patterns[gi], scale.type);
            const std::int32_t z = q.zeros[gi];
            const auto wi = static_cast<std::size_t>(n * K + k);
            const double w = float_at(weight, wi);
            if (!std::isfinite(s) || !std::isfinite(w))
                fail<unsupported_error>(file, name, "non-finite weight or scale at row " + std::to_string(n) + " column " + std::to_string(k));
            long c = z;
            if (s != 0.0f) c = std::lround(std::nearbyint(w / static_cast<double>(s))) + z;
            if (c < 0) c = 0;
            if (c > maxq) c = maxq;
            // The loader decodes (code - zero) * scale in the weight dtype; the product of a
            // small integer and a 16-bit scale is exact in float, then rounded once.
            const float decoded = round_to_dtype(static_cast<float>(c - z) * s, weight.type);
            if (static_cast<double>(decoded) != w) {
                ++off_grid;
                const double dev = std::fabs(w - static_cast<double>(c - z) * s);
                if (dev > worst) {
                    worst = dev;
                    worst_in_scales = s != 0.0f ? dev / std::fabs(static_cast<double>(s)) : 0.0;
                    worst_n = n;
                    worst_g = g;
                }
            }
            q.codes[wi] = static_cast<std::uint8_t>(c);
        }
    }
    if (off_grid > 0)
        fail<unsupported_error>(file, name, "weight is not on its " + std::to_string(opt.bits) + "-bit grid: " + std::to_string(off_grid) +
                                                " element(s) off; worst deviation " + fmt_double(worst) + " (" + fmt_double(worst_in_scales) +
                                                " scale steps) in row " + std::to_string(worst_n) + " group " + std::to_string(worst_g));
    return q;
}

QFORGE_DECL quantized_tensor read_fake_quant(const tensor_source& src, const std::string& prefix, const fake_quant_options& opt) {
    return read_fake_quant(src.require(prefix + ".weight"), src.require(prefix + ".weight_scale"),
                           src.require(prefix + ".weight_zero_point"), opt, src.file);
}


QFORGE_DECL quantized_tensor fake_quant_source_traits::read_source(const tensor_source& src, const std::string& prefix, const fake_quant_options& fake, const ct_weight_args& ct) {
    const tensor_view& w = src.require(prefix + ".weight");
    const tensor_view& sc = src.require(prefix + ".weight_scale");
    const tensor_view* zp = src.optional(prefix + ".weight_zero_point");
    quantized_tensor q;
    if (zp) {
        q = read_fake_quant(w, sc, *zp, fake, src.file);
    } else if (fake.signed_zero_point && ct.symmetric) {
        // compressed-tensors symmetric: no zero point tensor, the signed zero is 0.
        const std::vector<std::int8_t> zeros(static_cast<std::size_t>(checked_numel(sc.shape, src.file, sc.name)), 0);
        owned_tensor z = detail::make_tensor(prefix + ".weight_zero_point", dtype::I8, sc.shape, zeros);
        q = read_fake_quant(w, sc, z.view(), fake, src.file);
        q.symmetric = true;
    } else {
        fail<format_error>(src.file, prefix + ".weight_zero_point", "tensor is missing");
    }
    q.name = prefix;
    return q;
}

}  // namespace qforge
#endif
