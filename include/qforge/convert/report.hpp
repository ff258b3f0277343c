// quantization_report.json: what was quantized and how well, as the seed exporter wrote it
// (per tensor name, shape, SNR in dB; summary count, min/max/mean SNR, bits per weight of the
// whole model and of the quantized linears) plus the scheme of each tensor and the format.
//
// SNR = 10 log10(sum w^2 / sum (w - w_hat)^2) of the values a loader decodes (codes against
// the stored scales) against the source weights, accumulated in double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "qforge/convert/output_format.hpp"
#include "qforge/convert/rule.hpp"
#include "qforge/core/config.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/json.hpp"

namespace qforge {

struct tensor_report {
    std::string name;  ///< module name, e.g. "model.layers.0.mlp.down_proj"
    shape_t shape;     ///< [N, K] of the weight
    quant_spec scheme;
    double snr_db = 0;
    /// The SNR of what vLLM decodes once it has rounded the scales to the dtype it serves the
    /// model in (convert/loaded_scales.hpp); NaN when vLLM keeps them as stored. Written as
    /// "snr_db_as_loaded" only when set.
    double snr_db_as_loaded = std::numeric_limits<double>::quiet_NaN();
};

/// One fused group's outcome, for quantization_report.json.
struct activation_fold_record {
    std::vector<std::string> layers;  ///< the modules whose columns were scaled
    std::string folded_into;          ///< the tensor whose rows (or elements) were divided
    double alpha = 0;                 ///< 0: scaling did not lower the error; nothing changed
    double weighted_error = 0, weighted_error_unscaled = 0;
    std::string skipped;              ///< why the group was left alone, or empty

    json to_json() const;
};

struct conversion_report {
    output_format format = output_format::gptq;
    std::vector<tensor_report> tensors;  ///< quantized tensors, in plan order
    double bits_per_weight = 0;            ///< over every weight of the model (plan::bits_per_weight)
    double quantized_bits_per_weight = 0;  ///< over the quantized linears only
    /// Activation-aware scaling (convert/activation_fold.hpp), one record per fused group; the
    /// SNR of a scaled layer is that of its stored (scaled) weight.
    std::vector<activation_fold_record> activation_folds;
    /// What loaders do differently from what was written (plan::warnings); written as
    /// "loader_warnings" only when there is one.
    std::vector<std::string> loader_warnings;

    double snr_min() const;
    double snr_max() const;
    double snr_mean() const;

    /// (min, mean) over every tensor of the SNR vLLM decodes (snr_db_as_loaded where set,
    /// snr_db where vLLM keeps the stored scales); nullopt when no tensor has an as-loaded figure.
    std::optional<std::pair<double, double>> as_loaded_means() const;

    /// The summary without per-tensor entries (what the command line prints).
    /// (Built with set() rather than initializer lists: GCC 12 reports a false
    /// maybe-uninitialized on nested json initializer lists at -O2.)
    json summary() const;

    json to_json() const;

private:
    /// Two decimals; an exact (infinite SNR) or all-zero tensor is written as null, since
    /// JSON has no infinity.
    static json round2(double x) { return std::isfinite(x) ? json(std::round(x * 100) / 100) : json(); }
};

}  // namespace qforge

#if QFORGE_BODIES_HERE
#include "qforge/convert/format.hpp"  // header-only: format_name's body

namespace qforge {

QFORGE_DECL json activation_fold_record::to_json() const {
    json e = json::object();
    json::array_t names;
    for (const auto& l : layers) names.emplace_back(l);
    e.set("layers", json(std::move(names)));
    e.set("folded_into", folded_into);
    if (!skipped.empty()) {
        e.set("skipped", skipped);
        return e;
    }
    e.set("alpha", alpha);
    e.set("weighted_error", weighted_error);
    e.set("weighted_error_unscaled", weighted_error_unscaled);
    return e;
}

QFORGE_DECL double conversion_report::snr_min() const {
    double m = tensors.empty() ? 0 : tensors.front().snr_db;
    for (const auto& t : tensors) m = std::min(m, t.snr_db);
    return m;
}

QFORGE_DECL double conversion_report::snr_max() const {
    double m = tensors.empty() ? 0 : tensors.front().snr_db;
    for (const auto& t : tensors) m = std::max(m, t.snr_db);
    return m;
}

QFORGE_DECL double conversion_report::snr_mean() const {
    double s = 0;
    for (const auto& t : tensors) s += t.snr_db;
    return tensors.empty() ? 0 : s / static_cast<double>(tensors.size());
}

QFORGE_DECL std::optional<std::pair<double, double>> conversion_report::as_loaded_means() const {
    bool any = false;
    double m = 0, s = 0;
    for (const auto& t : tensors) {
        const double x = std::isnan(t.snr_db_as_loaded) ? t.snr_db : t.snr_db_as_loaded;
        any = any || !std::isnan(t.snr_db_as_loaded);
        m = &t == &tensors.front() ? x : std::min(m, x);
        s += x;
    }
    if (!any) return std::nullopt;
    return std::pair{m, s / static_cast<double>(tensors.size())};
}

QFORGE_DECL json conversion_report::summary() const {
    json out = json::object();
    out.set("format", std::string(format_name(format)));
    out.set("tensors_quantized", static_cast<std::int64_t>(tensors.size()));
    out.set("snr_db_min", round2(snr_min()));
    out.set("snr_db_max", round2(snr_max()));
    out.set("snr_db_mean", round2(snr_mean()));
    if (const auto l = as_loaded_means()) {  // only where vLLM re-rounds some scales
        out.set("snr_db_min_as_loaded", round2(l->first));
        out.set("snr_db_mean_as_loaded", round2(l->second));
    }
    out.set("bits_per_weight", std::round(bits_per_weight * 1000) / 1000);
    out.set("quantized_bits_per_weight", std::round(quantized_bits_per_weight * 1000) / 1000);
    return out;
}

QFORGE_DECL json conversion_report::to_json() const {
    json out = summary();
    json per = json::array();
    for (const auto& t : tensors) {
        json::array_t shape;
        for (auto d : t.shape) shape.emplace_back(d);
        json e = json::object();
        e.set("name", t.name);
        e.set("shape", json(std::move(shape)));
        e.set("scheme", scheme_to_string(t.scheme));
        e.set("snr_db", round2(t.snr_db));
        if (!std::isnan(t.snr_db_as_loaded)) e.set("snr_db_as_loaded", round2(t.snr_db_as_loaded));
        per.push_back(std::move(e));
    }
    out.set("per_tensor", std::move(per));
    if (!activation_folds.empty()) {
        json folds = json::array();
        for (const auto& f : activation_folds) folds.push_back(f.to_json());
        out.set("activation_scaling", std::move(folds));
    }
    if (!loader_warnings.empty()) {
        json lw = json::array();
        for (const auto& l : loader_warnings) lw.push_back(l);
        out.set("loader_warnings", std::move(lw));
    }
    return out;
}

}  // namespace qforge
#endif
