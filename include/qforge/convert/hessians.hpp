// Calibration statistics for GPTQ: a safetensors file of per-layer input Hessians.
//
// Format (one file, any number of layers):
//   <layer>.hessian   F32 or F64 [K, K]   H = sum over calibration tokens of x x^T, where x
//                                         is the layer's input (K = in_features). Any positive
//                                         multiple works (sum, mean, 2/n sum): GPTQ's result
//                                         does not depend on the scale of H.
//   <layer>.nsamples  I64/I32/F32/F64, scalar or [1]   optional: tokens accumulated (reported)
// `<layer>` is the module name, the weight's name without ".weight"
// (e.g. model.layers.0.self_attn.q_proj). Fused projections split by the converter (q/k/v,
// gate/up) share their input, so the fused module's Hessian serves every part, and a part's
// own Hessian wins when both exist.
//
// Reading the file is the converter's job (this header); the solver that uses a Hessian is
// quant/gptq_solver.hpp, which sees only the numbers. The file is never mapped: each Hessian is
// read with pread when asked for, so a file truncated underneath is an io_error naming the file
// and the tensor, never a SIGBUS (issue 20 item 3).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/config.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/io/safetensors/reader.hpp"

namespace qforge {

class hessian_file {
public:
    explicit hessian_file(std::string path);

    const std::string& path() const noexcept { return reader_.path(); }
    /// Every layer with a Hessian, in file order.
    const std::vector<std::string>& layers() const noexcept { return layers_; }

    /// The Hessian of `layer` checked against its K input columns (read with pread), or nullopt
    /// when absent.
    std::optional<owned_tensor> find(std::string_view layer, std::int64_t k) const;

    /// `<layer>.nsamples` when present.
    std::optional<double> nsamples(std::string_view layer) const;

    /// Layers whose Hessian was never asked for (a misspelt name shows up here).
    std::vector<std::string> unused() const;

private:
    template <class T>
    static T load(const tensor_view& v) {
        T x;
        std::memcpy(&x, v.bytes.data(), sizeof x);
        return x;
    }

    safetensors::reader reader_;
    std::vector<std::string> layers_;
    mutable std::set<std::string> used_;
};

}  // namespace qforge

#if QFORGE_BODIES_HERE

namespace qforge {

QFORGE_DECL hessian_file::hessian_file(std::string path) : reader_(std::move(path), safetensors::read_mode::pread) {
    for (const auto& t : reader_.tensors()) {
        const std::string_view n = t.name;
        if (n.ends_with(".hessian")) {
            if (t.type != dtype::F32 && t.type != dtype::F64)
                fail<unsupported_error>(reader_.path(), t.name, "a Hessian must be F32 or F64, not " +
                                                                    std::string(dtype_name(t.type)));
            if (t.shape.size() != 2 || t.shape[0] != t.shape[1] || t.shape[0] <= 0)
                fail<shape_error>(reader_.path(), t.name, "a Hessian must be square [K, K], got " + shape_to_string(t.shape));
            layers_.push_back(std::string(n.substr(0, n.size() - 8)));
        } else if (!n.ends_with(".nsamples")) {
            fail<format_error>(reader_.path(), t.name, "unexpected tensor: a Hessian file holds <layer>.hessian "
                                                       "and optionally <layer>.nsamples");
        }
    }
}

QFORGE_DECL std::optional<owned_tensor> hessian_file::find(std::string_view layer, std::int64_t k) const {
    const std::string name = std::string(layer) + ".hessian";
    if (!reader_.contains(name)) return std::nullopt;
    const safetensors::tensor_info& v = *reader_.find(name);
    if (v.shape[0] != k)
        fail<shape_error>(path(), name, "Hessian " + shape_to_string(v.shape) + " does not match the " +
                                            std::to_string(k) + " input columns of the layer");
    owned_tensor h = reader_.read_tensor(name);
    used_.insert(std::string(layer));
    return h;
}

QFORGE_DECL std::optional<double> hessian_file::nsamples(std::string_view layer) const {
    const std::string name = std::string(layer) + ".nsamples";
    if (!reader_.contains(name)) return std::nullopt;
    const owned_tensor t = reader_.read_tensor(name);
    const tensor_view v = t.view();
    if (v.numel() != 1) fail<shape_error>(path(), name, "nsamples must hold one value");
    switch (v.type) {
        case dtype::I64: return static_cast<double>(load<std::int64_t>(v));
        case dtype::I32: return static_cast<double>(load<std::int32_t>(v));
        case dtype::F64: return load<double>(v);
        case dtype::F32: return static_cast<double>(load<float>(v));
        default: fail<unsupported_error>(path(), name, "nsamples must be I64, I32, F32 or F64");
    }
}

QFORGE_DECL std::vector<std::string> hessian_file::unused() const {
    std::vector<std::string> out;
    for (const auto& l : layers_)
        if (!used_.count(l)) out.push_back(l);
    return out;
}

}  // namespace qforge
#endif
