// AWQ GEMM checkpoints (AutoAWQ `WQLinear_GEMM`, vLLM `awq` / `awq_marlin`): per linear
//   <p>.qweight int32 [K, N/8]  codes packed along N, nibble i of word c = column 8c + [0,2,4,6,1,3,5,7][i]
//   <p>.qzeros  int32 [G, N/8]  real zeros (no -1), same order
//   <p>.scales  F16 [G, N]
// Sources: AA `awq/modules/linear/gemm.py WQLinear_GEMM.__init__/from_linear` (order_map),
// AA `awq/utils/packing_utils.py`, VL `quant_utils.awq_pack`; formats.md 3.
// Only 4 bits exist (AutoAWQ raises NotImplementedError otherwise), groups are contiguous
// (no g_idx tensor), N % 8 == 0 and K % group == 0.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/detail/pack_band.hpp"
#include "qforge/layout/detail/pack_bits.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

template <int Bits = 4>
class awq_layout {
    static_assert(Bits == 4, "qforge: AWQ packs 4 bits only");

public:
    static constexpr std::string_view format_name = "awq";
    static constexpr int bits = Bits;

    std::vector<tensor_spec> specs(std::int64_t n, std::int64_t k, std::int64_t group,
                                   bool /*symmetric*/) const {
        const std::int64_t g = detail::ceil_div(k, detail::effective_group(group, k));
        return {{".qweight", dtype::I32, {k, n / 8}},
                {".qzeros", dtype::I32, {g, n / 8}},
                {".scales", dtype::F16, {g, n}}};
    }

    /// Every refusal, before anything is packed. `first_row` is the weight row of q's row 0
    /// when q is a band of a larger weight (messages name the weight's rows). `isa`: the pack
    /// kernels the code scan runs on (simd/pack_kernels.hpp).
    void check(const quantized_tensor& q, std::int64_t first_row = 0, simd::isa isa = simd::active_isa()) const {
        detail::check_common(q, "AWQ", first_row, isa);
        if (q.bits != Bits)
            fail<unsupported_error>({}, q.name, "AWQ packs 4 bits only; got a " +
                                                    std::to_string(q.bits) + "-bit weight");
        detail::check_scale_dtype(q, dtype::F16, "AWQ");
        check_shape(q.name, q.rows, q.cols, q.group_size);
        for (std::int64_t k = 0; k < q.cols; ++k)
            if (q.group_of(k) != k / q.group_size)
                fail<unsupported_error>({}, q.name,
                                        "AWQ has no g_idx: groups must be contiguous, but column " +
                                            std::to_string(k) + " is in group " +
                                            std::to_string(q.group_of(k)));
    }

    /// The tensors of one linear; the packers run on the pack kernels of `isa`.
    std::vector<owned_tensor> pack(const quantized_tensor& q, std::string_view prefix,
                                   simd::isa isa = simd::active_isa()) const {
        check(q, 0, isa);
        const std::string p(prefix);
        const std::int64_t n = q.rows, k = q.cols, groups = q.groups();
        // qweight row k gathers column k of every code row: the source is read transposed.
        std::vector<owned_tensor> out;
        out.push_back(detail::alloc_tensor(p + ".qweight", dtype::I32, {k, n / 8}));
        detail::pack_awq4(q.codes.data(), 1, k, k, n, detail::words_of(out.back()), isa);
        std::vector<std::uint8_t> zeros(q.zeros.begin(), q.zeros.end());  // [n][groups], 0..15
        out.push_back(detail::alloc_tensor(p + ".qzeros", dtype::I32, {groups, n / 8}));
        detail::pack_awq4(zeros.data(), 1, groups, groups, n, detail::words_of(out.back()), isa);
        const auto scales = detail::transpose_scales(q.scales, n, groups);
        out.push_back(detail::make_tensor(p + ".scales", dtype::F16, {groups, n}, scales));
        return out;
    }

    /// Band packing (see layout/quantize_packed.hpp): `out` holds the tensors of specs() for the
    /// whole weight [n, k], allocated once; `band` is rows [first_row, first_row + band.rows)
    /// of it, quantized. AWQ packs 8 output features (rows) a word, so a band on a multiple of
    /// 32 rows owns word columns first_row/8 .. of qweight and qzeros outright, and its scales
    /// columns: bands may be packed in any order or at once on different threads.
    void pack_band(const quantized_tensor& band, std::int64_t first_row, std::int64_t n,
                   std::span<owned_tensor> out, simd::isa isa = simd::active_isa()) const {
        check_shape(band.name, n, band.cols, band.group_size);  // the whole weight's N, as pack() words it
        check(band, first_row, isa);
        detail::check_band_bounds(band, first_row, n, "AWQ");
        const std::int64_t k = band.cols, groups = band.groups(), rows = band.rows;
        detail::pack_awq4_band(band.codes.data(), rows, k, detail::words_of(out[0]) + first_row / 8, n / 8, isa);
        const std::vector<std::uint8_t> zeros(band.zeros.begin(), band.zeros.end());  // [rows][groups], 0..15
        detail::pack_awq4_band(zeros.data(), rows, groups, detail::words_of(out[1]) + first_row / 8, n / 8, isa);
        detail::transpose_into(band.scales.data(), rows, groups,
                               reinterpret_cast<std::uint16_t*>(out[2].bytes.data()) + first_row, n);
    }

    quantized_tensor unpack(std::span<const tensor_view> views, std::string_view prefix,
                            layer_params params) const {
        const std::string p(prefix);
        const tensor_view& qw = detail::find_view(views, p + ".qweight");
        if (qw.rank() != 2) fail<shape_error>({}, qw.name, "AWQ qweight must be 2-D");
        const std::int64_t k = qw.shape[0], n = qw.shape[1] * 8;
        const std::int64_t group = detail::effective_group(params.group_size, k);
        check_shape(qw.name, n, k, group);
        const std::int64_t groups = k / group;
        const tensor_view& qz = detail::find_view(views, p + ".qzeros");
        const tensor_view& sc = detail::find_view(views, p + ".scales");
        detail::expect_view(qw, dtype::I32, {k, n / 8});
        detail::expect_view(qz, dtype::I32, {groups, n / 8});
        detail::expect_view(sc, dtype::F16, {groups, n});

        quantized_tensor q = detail::unpacked_header(p, Bits, n, k, group, params.symmetric, dtype::F16);
        const auto words = detail::copy_elements<std::uint32_t>(qw);
        detail::unpack_awq4(words.data(), k, n, q.codes.data(), 1, k);
        std::vector<std::uint8_t> zeros(static_cast<std::size_t>(n * groups));
        const auto zwords = detail::copy_elements<std::uint32_t>(qz);
        detail::unpack_awq4(zwords.data(), groups, n, zeros.data(), 1, groups);
        q.zeros.assign(zeros.begin(), zeros.end());
        q.scales = detail::transpose_scales(detail::copy_elements<std::uint16_t>(sc), groups, n);
        q.validate();
        return q;
    }

    /// `quantization_config` as AutoAWQ's `AwqConfig.to_transformers_dict` writes it.
    json config(std::span<const linear_entry> linears) const {
        check_untied(linears, "AWQ");
        check_fused_share_scheme(linears, "AWQ");
        const linear_entry& scheme = common_scheme(linears, "AWQ");
        if (scheme.bits != Bits)
            fail<unsupported_error>({}, scheme.name, "AWQ packs 4 bits only; layers are " +
                                                         std::to_string(scheme.bits) + "-bit");
        const std::int64_t group = common_group_size(linears, "AWQ");
        if (group <= 0)
            fail<unsupported_error>({}, scheme.name,
                                    "AWQ: every layer is per channel, but AWQ configs state one "
                                    "group size; quantize with a group size that divides K");
        json skip = awq_modules_to_not_convert(linears).names;
        json c = json::object({{"quant_method", "awq"},
                               {"zero_point", true},
                               {"group_size", group},
                               {"bits", Bits},
                               {"version", "gemm"},
                               {"modules_to_not_convert", skip.size() ? skip : json()}});
        // vLLM builds a quantized ParallelLMHead only when the config says so:
        // `AutoAWQConfig.from_config` reads `lm_head` (default False) and `get_quant_method`
        // quantizes ParallelLMHead only `if ... self.lm_head_quantized` (auto_awq.py @0043d6b5).
        // Written only when true, so exports without a quantized head keep their bytes.
        for (const linear_entry& e : linears)
            if (e.quantized && detail::split_leaf(e.name).second == "lm_head") c.set("lm_head", true);
        return c;
    }

    /// `modules_to_not_convert` that vLLM, transformers and AutoAWQ all read as meant, and the
    /// unquantized linears AutoAWQ cannot be told about. Every unquantized linear is listed by
    /// full name (vLLM and transformers match those; AutoAWQ never does, as it compares against
    /// block-relative names). A block-relative name ("mlp.down_proj") is added too when that
    /// linear is unquantized in every block and the entry matches no quantized module under any
    /// of the three rules (see loader_match); otherwise AutoAWQ cannot keep it dense and the
    /// module is reported in `autoawq_misses`. A full name that would skip a quantized module in
    /// vLLM or transformers is refused.
    struct skip_list {
        json names = json::array();
        std::vector<std::string> autoawq_misses;
    };
    static skip_list awq_modules_to_not_convert(std::span<const linear_entry> linears) {
        skip_list out;
        std::vector<std::string> quantized_full, quantized_rel;
        for (const linear_entry& e : linears) {
            if (!e.quantized) continue;
            quantized_full.push_back(e.name);
            if (auto b = loader_match::split_block(e.name)) quantized_rel.push_back(b->second);
        }
        auto over_match = [&](const std::string& entry, bool relative) -> std::string {
            for (const std::string& q : quantized_full)
                if (loader_match::vllm_skips(entry, q) || loader_match::transformers_skips(entry, q)) return q;
            if (relative)
                for (const std::string& r : quantized_rel)
                    if (loader_match::autoawq_skips(entry, r)) return r;
            return {};
        };
        std::vector<std::string> relatives;
        for (const linear_entry& e : linears) {
            if (e.quantized) continue;
            if (const std::string hit = over_match(e.name, false); !hit.empty())
                fail<unsupported_error>({}, e.name,
                                        "AWQ: modules_to_not_convert entry '" + e.name + "' would also keep the quantized '" +
                                            hit + "' dense (vLLM matches entries as substrings, transformers as prefixes)");
            out.names.push_back(e.name);
            if (auto b = loader_match::split_block(e.name)) {
                bool seen = false;
                for (const auto& r : relatives) seen = seen || r == b->second;
                if (!seen) relatives.push_back(b->second);
            }
        }
        for (const std::string& rel : relatives) {
            bool everywhere = true;  // unquantized in every block that has it
            for (const std::string& q : quantized_rel) everywhere = everywhere && q != rel;
            if (everywhere && over_match(rel, true).empty()) {
                out.names.push_back(rel);
                continue;
            }
            for (const linear_entry& e : linears)
                if (!e.quantized)
                    if (auto b = loader_match::split_block(e.name); b && b->second == rel) out.autoawq_misses.push_back(e.name);
        }
        return out;
    }

private:
    static void check_shape(const std::string& tensor, std::int64_t n, std::int64_t k,
                            std::int64_t group) {
        if (n % 8 != 0)
            fail<shape_error>({}, tensor, "AWQ packs N in words of 8 columns; N = " + std::to_string(n));
        if (group <= 0 || k % group != 0)
            fail<shape_error>({}, tensor, "AWQ needs K (" + std::to_string(k) +
                                              ") to be a multiple of the group size (" +
                                              std::to_string(group) + ")");
    }
};

/// Runs `f(awq_layout<4>)` or refuses any other bit width.
template <class F>
decltype(auto) with_awq_layout(int bits, F&& f) {
    if (bits != 4)
        fail<unsupported_error>({}, {}, "AWQ packs 4 bits only; got " + std::to_string(bits));
    return f(awq_layout<4>());
}

/// AWQ as the converter's format table sees it (convert/format.hpp): F16 scales (AutoAWQ
/// writes .half()), contiguous groups, one scheme per checkpoint (AutoAWQConfig has no
/// per-module override), and `minmax --asym` is AutoAWQ's own zero-point rule (awq_minmax).
struct awq_format_traits {
    static constexpr std::string_view name = "awq";
    static constexpr std::array<std::string_view, 0> aliases{};
    static constexpr code_kind codes = code_kind::integer;
    static constexpr bool carries_g_idx = false;
    static constexpr bool one_scheme = true;
    static constexpr scale_policy asymmetric_minmax = scale_policy::awq_minmax;

    static dtype default_scale_dtype(dtype /*checkpoint*/) noexcept { return dtype::F16; }

    /// Why AWQ cannot hold a [n x k] weight under `s` (the plan's wording; the layout's
    /// check_shape refuses the same shapes when a weight is packed).
    static std::optional<std::string> refusal(std::int64_t n, std::int64_t k, const layout_scheme& s) {
        const std::int64_t g = detail::effective_group(s.group_size, k);
        if (s.bits != 4) return "AWQ packs 4 bits only, not " + std::to_string(s.bits);
        if (k % g != 0)
            return "AWQ needs whole groups: K=" + std::to_string(k) + " is not a multiple of group " + std::to_string(g);
        if (n % 8 != 0) return "AWQ packs N in words of 8: N=" + std::to_string(n) + " is not a multiple of 8";
        return std::nullopt;
    }

    template <class F>
    static decltype(auto) with_layout(const layout_request& r, F&& f) {
        return with_awq_layout(r.bits, std::forward<F>(f));
    }

    static json config(std::span<const linear_entry> linears, layout_request r) {
        if (const linear_entry* base = majority_scheme(linears)) r.bits = base->bits;
        return with_layout(r, [&](const auto& layout) { return layout.config(linears); });
    }

    static std::vector<side_file> side_files(std::span<const linear_entry>, const layout_request&) { return {}; }
};

}  // namespace qforge
