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
#include "qforge/core/tensor_source.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/detail/pack_band.hpp"
#include "qforge/layout/detail/pack_bits.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

/// What an AWQ quantization_config says about a layer (what read_awq reads it with).
struct awq_args {
    int bits = 4;
    std::int64_t group_size = 128;
};

template <int Bits = 4>
class awq_layout {
    static_assert(Bits == 4, "qforge: AWQ packs 4 bits only");

public:
    static constexpr std::string_view format_name = "awq";
    static constexpr int bits = Bits;
    /// pack_band's bands write every byte of the specs' tensors between them (whole words of
    /// qweight and qzeros, every scale): quantize_packed need not zero recycled output storage.
    static constexpr bool bands_write_every_byte = true;

    std::vector<tensor_spec> specs(std::int64_t n, std::int64_t k, std::int64_t group,
                                   bool /*symmetric*/) const {
        const std::int64_t g = detail::ceil_div(k, detail::effective_group(group, k));
        return {{".qweight", dtype::I32, {k, n / 8}},
                {".qzeros", dtype::I32, {g, n / 8}},
                {".scales", dtype::F16, {g, n}}};
    }

    /// Every refusal, before anything is packed. `first_row` is the weight row of q's row 0
    /// when q is a band of a larger weight (messages name the weight's rows). `isa`: the pack
    /// kernels the code scan runs on (simd/pack_kernels.hpp); `values`: whether the scans run.
    void check(const quantized_tensor& q, std::int64_t first_row = 0, simd::isa isa = simd::active_isa(),
               value_check values = value_check::scan) const {
        detail::check_common(q, "AWQ", first_row, isa, values);
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
        const auto scales = detail::transpose_scales(q.scales, n, groups, isa);
        out.push_back(detail::make_tensor(p + ".scales", dtype::F16, {groups, n}, scales));
        return out;
    }

    /// Band packing (see layout/quantize_packed.hpp): `out` holds the tensors of specs() for the
    /// whole weight [n, k], allocated once; `band` is rows [first_row, first_row + band.rows)
    /// of it, quantized. AWQ packs 8 output features (rows) a word, so a band on a multiple of
    /// 32 rows owns word columns first_row/8 .. of qweight and qzeros outright, and its scales
    /// columns: bands may be packed in any order or at once on different threads.
    void pack_band(const quantized_tensor& band, std::int64_t first_row, std::int64_t n,
                   std::span<owned_tensor> out, simd::isa isa = simd::active_isa(),
                   value_check values = value_check::scan) const {
        check_shape(band.name, n, band.cols, band.group_size);  // the whole weight's N, as pack() words it
        check(band, first_row, isa, values);
        detail::check_band_bounds(band, first_row, n, "AWQ");
        detail::check_band_outputs(specs(n, band.cols, band.group_size, band.symmetric), out, band.name, "AWQ");
        const std::int64_t k = band.cols, groups = band.groups(), rows = band.rows;
        detail::pack_awq4_band(band.codes.data(), rows, k, detail::words_of(out[0]) + first_row / 8, n / 8, isa);
        const std::vector<std::uint8_t> zeros(band.zeros.begin(), band.zeros.end());  // [rows][groups], 0..15
        detail::pack_awq4_band(zeros.data(), rows, groups, detail::words_of(out[1]) + first_row / 8, n / 8, isa);
        detail::transpose_scales_into(band.scales.data(), rows, groups,
                                      reinterpret_cast<std::uint16_t*>(out[2].bytes.data()) + first_row, n, isa);
    }

    quantized_tensor unpack(std::span<const tensor_view> views, std::string_view prefix,
                            layer_params params) const {
        return read(make_tensor_source(views), std::string(prefix), {Bits, params.group_size}, read_mode::unpack,
                    params.symmetric);
    }

    /// The one AWQ GEMM reader: `<prefix>.qweight` [K, N/8], `.qzeros` [K/g, N/8], `.scales`
    /// [K/g, N], checked in `mode`'s words (see read_mode). AWQ stores real zeros: a
    /// checkpoint reads as asymmetric; unpack keeps the symmetry the config states.
    static quantized_tensor read(const tensor_source& src, const std::string& prefix, const awq_args& args,
                                 read_mode mode, bool symmetric = false) {
        const std::string& file = src.file;
        const tensor_view& qw = src.require(prefix + ".qweight");
        if (qw.rank() != 2)
            fail<shape_error>(file, qw.name, mode == read_mode::unpack ? std::string("AWQ qweight must be 2-D")
                                                                       : "qweight must be 2-D, shape " + shape_to_string(qw.shape));
        const std::int64_t K = qw.shape[0], N = qw.shape[1] * 8;
        const std::int64_t g = mode == read_mode::unpack ? detail::effective_group(args.group_size, K)
                                                         : (args.group_size > 0 ? args.group_size : K);
        if (mode == read_mode::unpack) check_shape(qw.name, N, K, g);
        else if (N <= 0 || K <= 0) fail<shape_error>(file, qw.name, "empty weight");
        else if (K % g != 0)
            fail<shape_error>(file, qw.name, "group size " + std::to_string(g) + " does not divide K = " + std::to_string(K));
        const std::int64_t G = K / g;
        detail::word_span words, zwords;
        const tensor_view* sc = nullptr;
        if (mode == read_mode::unpack) {
            const tensor_view& qz = src.require(prefix + ".qzeros");
            sc = &src.require(prefix + ".scales");
            detail::expect_view(qw, dtype::I32, {K, N / 8});
            detail::expect_view(qz, dtype::I32, {G, N / 8});
            detail::expect_view(*sc, dtype::F16, {G, N});
            words = detail::words_of(qw, qw.shape, file);
            zwords = detail::words_of(qz, qz.shape, file);
        } else {
            words = detail::words_of(qw, {K, N / 8}, file);
            zwords = detail::words_of(src.require(prefix + ".qzeros"), {G, N / 8}, file);
            sc = &src.require(prefix + ".scales");
            detail::require_shape(*sc, {G, N}, file);
        }
        const auto spat = detail::scale_patterns(*sc, file);
        quantized_tensor q = quantized_tensor::with_header(prefix, Bits, N, K, g, mode == read_mode::unpack && symmetric,
                                                           sc->type, quantized_tensor::storage::codes);
        // words [K][N/8] hold codes[k][n]: write them transposed into codes[n][k].
        detail::unpack_awq4(words.data(), K, N, q.codes.data(), 1, K);
        std::vector<std::uint8_t> zeros(static_cast<std::size_t>(N * G));
        detail::unpack_awq4(zwords.data(), G, N, zeros.data(), 1, G);
        q.zeros.assign(zeros.begin(), zeros.end());
        q.scales = detail::transpose_scales(spat, G, N, simd::active_isa());
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

/// Reads AWQ GEMM `<prefix>.qweight` [K, N/8], `.qzeros` [K/g, N/8], `.scales` [K/g, N] of a
/// checkpoint. AWQ always stores real zeros, so the result is asymmetric.
inline quantized_tensor read_awq(const tensor_source& src, const std::string& prefix, const awq_args& args) {
    detail::check_bits(args.bits, src.file, src.require(prefix + ".qweight").name, {4}, "AWQ GEMM");
    return awq_layout<4>::read(src, prefix, args, read_mode::checkpoint);
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

    // ---- as a repack source (convert/repack.hpp's source table reads it) ----
    static constexpr std::string_view source_name = "awq";
    static constexpr std::array<std::string_view, 3> source_tensors{".qweight", ".qzeros", ".scales"};
    static quantized_tensor read_source(const tensor_source& src, const std::string& prefix, const awq_args& a) {
        return read_awq(src, prefix, a);
    }

    /// A requantization into AWQ: 4 bits; AWQ stores zero points always (asymmetric, and vLLM
    /// picks its zero-point kernels).
    static constexpr int nearest_bits(int /*bits*/) noexcept { return 4; }
    static constexpr bool stores_zero_points = true;

    // ---- what vLLM and the AWQ readers do with it (convert/serving_check.hpp asks) ----

    /// AWQ packs N: qweight [K, N/8], qzeros [G, N/8] (AWQLinearMethod.create_weights:
    /// output_size_per_partition % pack_factor).
    static constexpr std::int64_t vllm_n_pack_factor = 8;
    static constexpr std::string_view display_name = "AWQ";

    /// `AutoAWQConfig.TYPE_MAP` holds 4 bits (auto_awq.py @0043d6b5).
    static std::optional<std::string> vllm_config_refusal(const layout_scheme& s) {
        if (s.bits != 4) return std::string("vLLM refuses the config: AutoAWQConfig supports 4 bits only");
        return std::nullopt;
    }

    /// AWQ on CPU: `AutoAWQConfig.override_quantization_method` leaves CPU to cpu_awq
    /// (auto_awq.py @0043d6b5), whose `cpu_wna16.py CPUAWQLinearMethod.process_weights_after_loading`
    /// regroups the unpacked columns into blocks of 16 output channels (view(K, -1, 16 // 8)):
    /// N per rank a multiple of 16; 4 bits only (CPUAWQConfig asserts weight_bits == 4).
    static constexpr std::string_view vllm_cpu_kernel = "vLLM CPUAWQLinearMethod";
    static constexpr std::string_view vllm_cpu_loads = "loads (cpu_awq)";
    static std::optional<std::string> vllm_cpu_refusal(int bits, std::int64_t n, std::int64_t /*k*/, std::int64_t /*group*/) {
        if (bits != 4) return std::string("CPU AWQ holds 4 bits only");
        if (n % 16 != 0) return "output size " + std::to_string(n) + " (of the fused partition) is not a multiple of 16";
        return std::nullopt;
    }

    static void vllm_scheme_warnings(const serving_facts& f, std::vector<std::string>& w) {
        detail::model_dtype_scales_warning(f, "; AWQ readers expect F16 scales: serve with --dtype float16 to decode them as stored", w);
    }

    static void vllm_layer_warnings(const serving_facts& f, std::vector<std::string>& w) {
        if (f.lm_head)
            w.push_back("quantized lm_head: vLLM reads \"lm_head\": true (AutoAWQConfig.from_config); transformers' AwqQuantizer "
                        "always keeps the output embedding dense (get_modules_to_not_convert(add_default_skips=True)) and "
                        "AutoAWQ replaces block linears only: both leave lm_head.weight missing");
        if (!f.has_config) return;
        const auto skip = awq_layout<4>::awq_modules_to_not_convert(f.linears);
        for (const auto& m : skip.autoawq_misses)
            w.push_back("AutoAWQ matches modules_to_not_convert against block-relative names (awq/utils/module.py "
                        "exclude_layers_to_not_quantize), which cannot keep '" + m +
                        "' dense while other blocks quantize it: AutoAWQ would load it as WQLinear_GEMM; vLLM and "
                        "transformers load it dense");
    }

    /// Why AWQ cannot hold the codes of `q` exactly as they are, or nullopt.
    static std::optional<std::string> repack_refusal(const quantized_tensor& q) {
        if (q.bits != 4) return "AWQ stores 4 bits only; " + q.name + " has " + std::to_string(q.bits) + "-bit codes";
        if (!detail::g_idx_is_contiguous(q))
            return "AWQ has no g_idx, but " + q.name + " is act-order (its g_idx is not k / " +
                   std::to_string(q.group_size) + "); use GPTQ or compressed-tensors, which keep it";
        return std::nullopt;
    }

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
