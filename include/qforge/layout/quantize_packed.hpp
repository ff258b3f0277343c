// quantize_packed(): quantize a weight straight into a layout's tensors, one band of rows at
// a time, instead of quantize() then pack().
//
// quantize() materialises every code of the weight (one byte per weight: 45 MB for a
// 4096 x 11008 layer), which then has to be zero-filled, written, read back and packed. Here
// each task quantizes a band of rows into a buffer that stays in cache and packs it at once
// into the output tensors, allocated once at their final size. The bytes are those of
// layout.pack(quantize(w, opt)), for every executor (tested); the SNR, when asked for, is
// the one quantize(..., &snr) measures.
//
//   qforge::gptq_layout<4> gptq;
//   qforge::snr_sums snr;
//   auto tensors = qforge::quantize_packed(view, opt, gptq, "model.layers.0.mlp.up_proj",
//                                          pool.executor(), &snr);
//
// Layouts opt in with pack_band() (band_packing_layout); any other layout_policy goes
// through quantize() + pack() with the same result.
//
// With a band_source, each task reads its band's rows through it (the converter: pread from
// the source file) into a buffer of its own instead of from weight.bytes, which is then never
// touched: a file truncated underneath is the source's io_error, never a SIGBUS, and the band
// is in cache when quantized.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/parallel.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/quant/quantize.hpp"
#include "qforge/quant/snr.hpp"
#include "qforge/simd/dispatch.hpp"

namespace qforge {

/// A layout that can pack a band of rows into tensors allocated for the whole weight.
template <class L>
concept band_packing_layout = layout_policy<L> && requires(const L& l, const quantized_tensor& band,
                                                            std::int64_t n, std::span<owned_tensor> out) {
    l.pack_band(band, n, n, out);
};

/// Fills `into` with rows [row_begin, row_end) of the weight (its dtype, row-major), or throws.
using band_source = std::function<void(std::int64_t row_begin, std::int64_t row_end, std::span<std::byte> into)>;

namespace detail {

/// Rows per band: a multiple of 32 (so every layout's words along N close inside a band), at
/// least 128, and about 256 K weights when rows are short, so a band's codes stay in L2. The
/// 128-row minimum matters for wide weights: outputs laid out along N (GPTQ qweight, AWQ
/// words) then get whole cache lines per band instead of a quarter line (measured, 4096 x
/// 11008: RTN + GPTQ pack 8% faster, AWQ and compressed-tensors 12-18%). A function of the
/// shape only.
inline std::int64_t band_rows(std::int64_t cols) noexcept {
    const std::int64_t units = std::max<std::int64_t>(1, (std::int64_t{1} << 18) / (32 * std::max<std::int64_t>(1, cols)));
    return std::max<std::int64_t>(128, 32 * units);
}

/// Whether L's bands write every byte of its outputs between them (L::bands_write_every_byte),
/// so that recycled output storage is taken as it is, not zeroed first.
template <class L>
inline constexpr bool bands_write_every_byte = requires { requires L::bands_write_every_byte; };

/// What one task works in: the band's codes and, with a band_source, its source rows.
struct band_work {
    quantized_tensor codes;
    std::vector<std::byte> rows;
};

/// Band buffers handed from task to task, so each thread reuses one instead of allocating.
class band_buffers {
public:
    std::unique_ptr<band_work> take() {
        std::lock_guard<std::mutex> lock(m_);
        if (free_.empty()) return std::make_unique<band_work>();
        auto b = std::move(free_.back());
        free_.pop_back();
        return b;
    }
    void give(std::unique_ptr<band_work> b) {
        std::lock_guard<std::mutex> lock(m_);
        free_.push_back(std::move(b));
    }

private:
    std::mutex m_;
    std::vector<std::unique_ptr<band_work>> free_;
};

/// layout.pack(q, prefix), on the pack kernels of `isa` when the layout takes one (the
/// in-tree layouts do; a user's layout_policy need not).
template <layout_policy L>
std::vector<owned_tensor> pack_on(const L& layout, const quantized_tensor& q, std::string_view prefix, simd::isa isa) {
    if constexpr (requires { layout.pack(q, prefix, isa); }) return layout.pack(q, prefix, isa);
    else return layout.pack(q, prefix);
}

/// layout.pack_band(...) of a band quantize_band has just made, on the pack kernels of `isa`
/// and without the scans of its codes and zero points where the layout takes value_check (the
/// in-tree layouts do).
template <band_packing_layout L>
void pack_band_on(const L& layout, const quantized_tensor& band, std::int64_t first_row, std::int64_t n,
                  std::span<owned_tensor> out, simd::isa isa) {
    if constexpr (requires { layout.pack_band(band, first_row, n, out, isa, value_check::made_in_range); })
        layout.pack_band(band, first_row, n, out, isa, value_check::made_in_range);
    else if constexpr (requires { layout.pack_band(band, first_row, n, out, isa); })
        layout.pack_band(band, first_row, n, out, isa);
    else layout.pack_band(band, first_row, n, out);
}

}  // namespace detail

/// What quantize_packed may keep from one call to the next, for a caller that quantizes many
/// weights (a converter): each task's band buffers, and the storage of output tensors given
/// back once written (`outputs.give(std::move(tensor.bytes))`). Neither changes a byte; both
/// spare the fresh pages a new allocation faults in. Thread-safe as quantize_packed uses it;
/// one call at a time.
struct packed_workspace {
    buffer_recycler outputs;
    detail::band_buffers bands;
};

/// The tensors of `layout.pack(quantize(weight, opt, ex), prefix)`, made band by band (see the
/// top of this header). With `snr`, the SNR sums of what a loader decodes against `weight`.
/// With `source`, the rows are read through it (weight's bytes are only sized, never read).
/// Quantizing and packing run on opt.isa (else simd::active_isa()). With `workspace`, band
/// buffers and output storage come from it (see packed_workspace).
template <layout_policy L>
std::vector<owned_tensor> quantize_packed(const tensor_view& weight, const quant_options& opt, const L& layout,
                                          std::string_view prefix, const executor& ex = {}, snr_sums* snr = nullptr,
                                          const band_source& source = {}, packed_workspace* workspace = nullptr) {
    const simd::isa isa = opt.isa ? *opt.isa : simd::active_isa();
    if constexpr (!band_packing_layout<L>) {
        if (!source) return detail::pack_on(layout, quantize(weight, opt, ex, snr), prefix, isa);
        detail::check_options(weight, opt);
        std::vector<std::byte> rows(weight.bytes.size());  // no bands here: the whole weight at once
        source(0, weight.shape[0], rows);
        return detail::pack_on(layout, quantize(tensor_view{weight.name, weight.type, weight.shape, rows}, opt, ex, snr),
                               prefix, isa);
    } else {
        detail::check_options(weight, opt);
        const simd::group_kernels& k = simd::kernels(isa);
        const std::int64_t n = weight.shape[0], cols = weight.shape[1];
        const std::string p(prefix);
        std::vector<owned_tensor> out;
        for (const tensor_spec& t : layout.specs(n, cols, opt.group_size, opt.symmetric))
            out.push_back(detail::alloc_tensor(p + t.suffix, t.type, t.shape, workspace ? &workspace->outputs : nullptr,
                                               !detail::bands_write_every_byte<L>));
        const std::int64_t band = detail::band_rows(cols);
        std::vector<snr_sums> rows_snr(snr ? static_cast<std::size_t>(n) : 0);
        detail::band_buffers local_buffers;
        detail::band_buffers& buffers = workspace ? workspace->bands : local_buffers;
        parallel_for(ex, 0, static_cast<std::size_t>(n), static_cast<std::size_t>(band), [&](std::size_t lo, std::size_t hi) {
            auto b = buffers.take();
            const auto r0 = static_cast<std::int64_t>(lo), r1 = static_cast<std::int64_t>(hi);
            snr_sums* band_snr = snr ? rows_snr.data() + r0 : nullptr;
            if (source) {
                b->rows.resize(static_cast<std::size_t>((r1 - r0) * cols) * dtype_size(weight.type));
                source(r0, r1, b->rows);
                const tensor_view rows{weight.name, weight.type, {r1 - r0, cols}, b->rows};
                detail::quantize_band(rows, opt, k, 0, r1 - r0, b->codes, band_snr, r0);
            } else {
                detail::quantize_band(weight, opt, k, r0, r1, b->codes, band_snr);
            }
            detail::pack_band_on(layout, b->codes, r0, n, out, isa);
            buffers.give(std::move(b));
        });
        if (snr) {
            *snr = {};
            for (const snr_sums& r : rows_snr) snr->add_row(r);
        }
        return out;
    }
}

}  // namespace qforge
