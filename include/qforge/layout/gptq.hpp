// GPTQ checkpoints (AutoGPTQ / GPTQModel / vLLM `gptq`, `gptq_marlin`): per linear
//   <p>.qweight int32 [K*b/32, N]  codes packed along K (dim 0), dense LSB-first
//   <p>.qzeros  int32 [G, N*b/32]  zeros packed along N (dim 1), v1: zero-1, v2: zero
//   <p>.scales  F16 (default) or BF16 [G, N]
//   <p>.g_idx   int32 [K]          group of each input column
// Sources: AG `nn_modules/qlinear/qlinear_cuda.py QuantLinear.__init__/pack`, GM `pack_block`,
// VL `gptq.py`/`gptq_marlin.py`; formats.md 2.1-2.5.
//
// v1 vs v2 (formats.md 2.3): `checkpoint_format: gptq` readers add 1 to every stored zero, so
// v1 stores zero-1 (symmetric 4-bit qzeros 0x77777777); `gptq_v2` stores the zero
// (0x88888888). An asymmetric zero of 0 has no v1 encoding: AutoGPTQ writes -1 as 0xFFFFFFFF
// into the word (corrupting the fields above it) and GPTQModel borrows across fields. qforge
// refuses it, naming the layer, row and group, and points at v2; it never writes such a word.
//
// Shapes: K and N must fill whole words (K*b and N*b multiples of 32, and multiples of 32 for
// 3 bits whose words span 32 codes), and K a multiple of the group size.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "qforge/core/dtype.hpp"
#include "qforge/core/error.hpp"
#include "qforge/core/json_value.hpp"
#include "qforge/core/regex.hpp"
#include "qforge/core/tensor_source.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/detail/pack_band.hpp"
#include "qforge/layout/detail/pack_bits.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/layout/packing.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

namespace detail {

inline std::string regex_escape(std::string_view name) {
    std::string out;
    for (char c : name) {
        if (std::string_view(".^$|?*+()[]{}\\").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out;
}

/// re.match semantics (anchored at the start only), as GPTQModel and vLLM apply a `dynamic` key.
inline bool python_re_match(const std::string& pattern, std::string_view name) {
    return regex(pattern).matches_prefix(name);
}

}  // namespace detail

/// GPTQModel's `dynamic`: {"+:<regex>": {"bits", "group_size", "sym"}} for every quantized
/// layer whose scheme differs from `base` (whose group is `base_group`, -1 per channel).
/// Readers: GPTQModel `quantization/config.py dynamic_get` (ModelCloud/GPTQModel @f4c327a1) and
/// vLLM `utils/gptq_utils.py get_dynamic_override` / `override_config` (vllm-project/vllm
/// @02239f5e), both `re.match(pattern.removeprefix("+:"), module)` with the FIRST matching key
/// winning. So each key here matches exactly its own layers and nothing else: a compact
/// `.*\.mlp\.down_proj$` where that is exact, else the full names; vLLM asks with its fused
/// names (`...self_attn.qkv_proj`, `...mlp.gate_up_proj`), which are matched as well.
inline json gptq_dynamic(std::span<const linear_entry> linears, const linear_entry& base, std::int64_t base_group) {
    auto fits_base = [&](const linear_entry& e) {
        if (e.bits != base.bits || e.symmetric != base.symmetric) return false;
        const std::int64_t g = detail::entry_group(e);
        return g == base_group || (g < 0 && e.cols == base_group) || (base_group < 0 && g == e.cols);
    };
    auto fused_name = [](std::string_view name) -> std::string {
        const auto [parent, leaf] = detail::split_leaf(name);
        for (const fused_set& s : default_fused_sets())
            for (std::string_view part : s.parts)
                if (part == leaf) return std::string(parent) + "." + std::string(s.fused);
        return {};
    };
    std::vector<std::string> all;  // every name a reader may ask about
    for (const linear_entry& e : linears) {
        all.push_back(e.name);
        if (std::string f = fused_name(e.name); !f.empty()) all.push_back(f);
    }
    struct override_group {
        const linear_entry* scheme;
        std::vector<std::string> names;
    };
    std::vector<override_group> groups;
    for (const linear_entry& e : linears) {
        if (!e.quantized || fits_base(e)) continue;
        override_group* g = nullptr;
        for (auto& o : groups)
            if (detail::same_scheme(*o.scheme, e)) g = &o;
        if (!g) g = &groups.emplace_back(override_group{&e, {}});
        g->names.push_back(e.name);
        if (std::string f = fused_name(e.name); !f.empty()) {
            bool seen = false;
            for (const auto& n : g->names) seen = seen || n == f;
            if (!seen) g->names.push_back(f);
        }
    }
    auto exact = [&](const std::string& pattern, const std::vector<std::string>& meant) {
        const regex re(pattern);
        for (const std::string& n : all) {
            bool in = false;
            for (const auto& m : meant) in = in || m == n;
            if (re.matches_prefix(n) != in) return false;
        }
        return true;
    };
    json dynamic = json::object();
    for (const override_group& g : groups) {
        // Compact form: one alternative per leaf path ("mlp.down_proj") when it is exact.
        std::vector<std::string> tails;
        for (const std::string& n : g.names) {
            const auto b = loader_match::split_block(n);
            const std::string tail = b ? b->second : n;
            bool seen = false;
            for (const auto& t : tails) seen = seen || t == tail;
            if (!seen) tails.push_back(tail);
        }
        std::string compact = "(?:";
        for (std::size_t i = 0; i < tails.size(); ++i)
            compact += (i ? "|" : "") + std::string("(?:.*\\.)?") + detail::regex_escape(tails[i]);
        compact += ")$";
        std::string pattern = compact;
        if (!exact(pattern, g.names)) {
            pattern = "(?:";
            for (std::size_t i = 0; i < g.names.size(); ++i) pattern += (i ? "|" : "") + detail::regex_escape(g.names[i]);
            pattern += ")$";
        }
        const linear_entry& s = *g.scheme;
        dynamic.set("+:" + pattern, json::object({{"bits", s.bits},
                                                  {"group_size", detail::entry_group(s)},
                                                  {"sym", s.symmetric}}));
    }
    return dynamic;
}

enum class gptq_format {
    v1,  ///< `checkpoint_format: "gptq"`: qzeros store zero - 1 (every GPTQ reader's default)
    v2,  ///< `checkpoint_format: "gptq_v2"`: qzeros store the zero (GPTQModel)
};

struct gptq_options {
    gptq_format format = gptq_format::v1;
    dtype scale_dtype = dtype::F16;  ///< F16: what GPTQ loaders expect; BF16 on request (vLLM CPU W4A8)
    bool desc_act = false;           ///< written to the config; g_idx is written either way
};

/// What a GPTQ quantization_config says about a layer (what read_gptq reads it with).
struct gptq_args {
    int bits = 4;
    std::int64_t group_size = 128;  ///< -1 (or <= 0): one group over all of K
    bool sym = true;
    bool v2 = false;  ///< checkpoint_format / format "gptq_v2": qzeros hold the zero, not zero - 1
};

template <int Bits>
class gptq_layout {
    static_assert(Bits == 2 || Bits == 3 || Bits == 4 || Bits == 8,
                  "qforge: GPTQ packs 2, 3, 4 or 8 bits");

public:
    static constexpr std::string_view format_name = "gptq";
    static constexpr int bits = Bits;
    /// pack_band's bands write every byte of the specs' tensors between them (whole words of
    /// qweight and qzeros, every scale, g_idx with the first band): quantize_packed need not
    /// zero recycled output storage first.
    static constexpr bool bands_write_every_byte = true;

    explicit gptq_layout(gptq_options options = {}) : opt_(options) {}
    const gptq_options& options() const noexcept { return opt_; }

    /// The tensors of one linear: N out features, K in features, group size (-1: per channel).
    std::vector<tensor_spec> specs(std::int64_t n, std::int64_t k, std::int64_t group,
                                   bool /*symmetric*/) const {
        const std::int64_t g = detail::ceil_div(k, detail::effective_group(group, k));
        return {{".qweight", dtype::I32, {k * Bits / 32, n}},
                {".qzeros", dtype::I32, {g, n * Bits / 32}},
                {".scales", opt_.scale_dtype, {g, n}},
                {".g_idx", dtype::I32, {k}}};
    }

    /// Every refusal, before anything is packed. `first_row` is the weight row of q's row 0
    /// when q is a band of a larger weight (messages name the weight's rows). `isa`: the pack
    /// kernels the code scan runs on (simd/pack_kernels.hpp); `values`: whether the scans run.
    void check(const quantized_tensor& q, std::int64_t first_row = 0, simd::isa isa = simd::active_isa(),
               value_check values = value_check::scan) const {
        detail::check_common(q, "GPTQ", first_row, isa, values);
        if (q.bits != Bits)
            fail<unsupported_error>({}, q.name, "GPTQ layout for " + std::to_string(Bits) +
                                                    " bits given a " + std::to_string(q.bits) +
                                                    "-bit weight");
        detail::check_scale_dtype(q, opt_.scale_dtype, "GPTQ");
        check_shape(q.name, q.rows, q.cols, q.group_size);
        // Without desc_act, GPTQ loaders (vLLM gptq_marlin: has_g_idx = desc_act) never read
        // g_idx and decode column k with group k / g: an act-order g_idx would be ignored.
        if (!opt_.desc_act && !q.g_idx.empty())  // an empty g_idx is k / group_size by definition
            for (std::int64_t k = 0; k < q.cols; ++k)
                if (q.group_of(k) != k / q.group_size)
                    fail<unsupported_error>({}, q.name,
                                            "GPTQ: column " + std::to_string(k) + " is in group " +
                                                std::to_string(q.group_of(k)) +
                                                " (act-order g_idx) but desc_act is off, so loaders "
                                                "would ignore g_idx; export with desc_act");
        // a symmetric weight's zero points are all the midpoint, never 0 (check_common refused
        // any other, or the quantizer made them so)
        if (opt_.format == gptq_format::v1 && !q.symmetric)
            for (std::size_t i = 0; i < q.zeros.size(); ++i)
                if (q.zeros[i] == 0)
                    fail<unsupported_error>(
                        {}, q.name,
                        "GPTQ v1 (checkpoint_format \"gptq\") stores zero-1 and cannot hold the "
                        "zero point 0 at row " + std::to_string(first_row + static_cast<std::int64_t>(i) / q.groups()) +
                            ", group " + std::to_string(static_cast<std::int64_t>(i) % q.groups()) +
                            "; write gptq_v2 or quantize without a zero of 0");
    }

    /// The tensors of one linear; the packers run on the pack kernels of `isa`.
    std::vector<owned_tensor> pack(const quantized_tensor& q, std::string_view prefix,
                                   simd::isa isa = simd::active_isa()) const {
        check(q, 0, isa);
        const std::string p(prefix);
        const std::int64_t n = q.rows, k = q.cols, groups = q.groups();

        std::vector<owned_tensor> out;
        // qweight[w][n]: row n of the codes is one dense stream along K, written down column n.
        out.push_back(detail::alloc_tensor(p + ".qweight", dtype::I32, {k * Bits / 32, n}));
        detail::pack_dense_transposed(q.codes.data(), n, k, Bits, detail::words_of(out.back()), isa);

        // qzeros[g][c]: the stored zeros of group g along N.
        const std::int32_t offset = opt_.format == gptq_format::v1 ? 1 : 0;
        std::vector<std::uint8_t> stored(q.zeros.size());
        for (std::size_t i = 0; i < stored.size(); ++i) stored[i] = static_cast<std::uint8_t>(q.zeros[i] - offset);
        std::vector<std::uint8_t> by_group(stored.size());  // [g][n]
        detail::transpose_into(stored.data(), n, groups, by_group.data());
        out.push_back(detail::alloc_tensor(p + ".qzeros", dtype::I32, {groups, n * Bits / 32}));
        std::uint32_t* qzeros = detail::words_of(out.back());
        for (std::int64_t g = 0; g < groups; ++g)
            detail::pack_dense(by_group.data() + g * n, 1, n, Bits, qzeros + g * (n * Bits / 32), 1);

        const auto scales = detail::transpose_scales(q.scales, n, groups, isa);  // [g][n]
        out.push_back(detail::make_tensor(p + ".scales", q.scale_dtype, {groups, n}, scales));
        out.push_back(detail::make_tensor(p + ".g_idx", dtype::I32, {k}, detail::full_g_idx(q)));
        return out;
    }

    /// Band packing (see layout/quantize_packed.hpp): `out` holds the tensors of specs() for the
    /// whole weight [n, k], allocated once; `band` is rows [first_row, first_row + band.rows) of
    /// it, quantized. Bands start on a multiple of 32 rows, so their qzeros fill whole words,
    /// and may be packed in any order or at once on different threads (they share no word).
    void pack_band(const quantized_tensor& band, std::int64_t first_row, std::int64_t n,
                   std::span<owned_tensor> out, simd::isa isa = simd::active_isa(),
                   value_check values = value_check::scan) const {
        check_shape(band.name, n, band.cols, band.group_size);
        check(band, first_row, isa, values);
        detail::check_band_bounds(band, first_row, n, "GPTQ");
        detail::check_band_outputs(specs(n, band.cols, band.group_size, band.symmetric), out, band.name, "GPTQ");
        const std::int64_t k = band.cols, groups = band.groups(), rows = band.rows;
        detail::pack_dense_transposed(band.codes.data(), rows, k, Bits, detail::words_of(out[0]) + first_row, isa, n);
        pack_band_zeros(band, first_row, n, detail::words_of(out[1]));
        detail::transpose_scales_into(band.scales.data(), rows, groups,
                                      reinterpret_cast<std::uint16_t*>(out[2].bytes.data()) + first_row, n, isa);
        if (first_row == 0) {
            const auto g_idx = detail::full_g_idx(band);
            std::memcpy(out[3].bytes.data(), g_idx.data(), g_idx.size() * sizeof(std::int32_t));
        }
    }

    /// Reads one linear back. N comes from qweight, K from g_idx, the group size and
    /// symmetry from the config (`params`).
    quantized_tensor unpack(std::span<const tensor_view> views, std::string_view prefix,
                            layer_params params) const {
        const gptq_args args{Bits, params.group_size, params.symmetric, opt_.format == gptq_format::v2};
        return read(make_tensor_source(views), std::string(prefix), args, read_mode::unpack);
    }

    /// The one GPTQ reader: `<prefix>.qweight`, `.qzeros`, `.scales`, `.g_idx`, checked and
    /// moved into a quantized_tensor with no rounding. `mode` says who asks (see read_mode):
    /// the checks are the same steps, worded for that caller. With `unpack_codes` false the
    /// codes are left empty (the word-level repack moves qweight as words); every other check
    /// still runs.
    static quantized_tensor read(const tensor_source& src, const std::string& prefix, const gptq_args& args,
                                 read_mode mode, bool unpack_codes = true) {
        const tensor_view& qw = src.require(prefix + ".qweight");
        const tensor_view* gi = mode == read_mode::unpack ? &src.require(prefix + ".g_idx") : src.optional(prefix + ".g_idx");
        quantized_tensor q = read_header(src, qw, gi, prefix, args, mode, unpack_codes);
        const std::int64_t N = q.rows, K = q.cols, G = q.groups();
        const auto [words, zwords, sc] = read_views(src, qw, gi, prefix, q, mode);
        // qweight is packed along K (dim 0): column n of the words is the stream of row n's codes.
        if (K * Bits % 32 != 0)
            for (std::int64_t n = 0; n < N; ++n)
                if (packing::dense_has_stray_bits(words.data() + n, N, K, Bits))
                    fail<format_error>(src.file, qw.name, "bits set past the last code of column " + std::to_string(n));
        if (unpack_codes) {
            if (K * Bits % 32 == 0) detail::unpack_dense_transposed(words.data(), N, K, Bits, q.codes.data());
            else
                for (std::int64_t n = 0; n < N; ++n) packing::unpack_dense(words.data() + n, N, K, Bits, q.codes.data() + n * K, 1);
        }
        read_zeros_scales(q, zwords, *sc, prefix, args, mode, src.file);
        if (gi && mode == read_mode::unpack) {
            q.g_idx = detail::canonical_g_idx(detail::copy_elements<std::int32_t>(*gi), q.group_size, gi->name, G);
        } else if (gi) {
            q.g_idx = detail::read_g_idx_i32(*gi, K, G, src.file);
            if (detail::is_identity_g_idx(q.g_idx, q.group_size)) q.g_idx.clear();
        }
        if (unpack_codes) q.validate();
        return q;
    }

    /// `quantization_config` for config.json. Every linear must be quantized with one scheme
    /// except `lm_head`, which GPTQ describes with the `lm_head` flag.
    ///
    /// Layers with another scheme (bits, group, symmetry) than the one most layers use are
    /// described by GPTQModel's `dynamic` per-module overrides (see gptq_dynamic); a
    /// one-scheme export has no `dynamic` key and keeps its bytes.
    json config(std::span<const linear_entry> linears) const {
        check_untied(linears, "GPTQ");
        check_fused_share_scheme(linears, "GPTQ");
        const linear_entry* first = majority_scheme(linears);
        if (!first) fail<unsupported_error>({}, {}, "GPTQ: no quantized layer to export");
        std::int64_t group = 0;
        json dynamic;
        try {
            common_scheme(linears, "GPTQ");
            group = common_group_size(linears, "GPTQ");
        } catch (const unsupported_error&) {  // mixed schemes: the one most layers use is the base
            group = detail::entry_group(*first);
            dynamic = gptq_dynamic(linears, *first, group);
        }
        const linear_entry& scheme = *first;
        if (scheme.bits != Bits)
            fail<unsupported_error>({}, scheme.name, "GPTQ layout for " + std::to_string(Bits) +
                                                         " bits given " + std::to_string(scheme.bits) +
                                                         "-bit layers");
        bool lm_head = false;
        for (const linear_entry& e : linears) {
            const bool is_head = detail::split_leaf(e.name).second == "lm_head";
            if (is_head) lm_head = e.quantized;
            else if (!e.quantized && !e.router)
                fail<unsupported_error>({}, e.name,
                                        "GPTQ: a GPTQ config quantizes every linear of the blocks; "
                                        "this one is left unquantized (use compressed-tensors, whose "
                                        "`ignore` can list it)");
        }
        json c = json::object({{"quant_method", "gptq"},
                               {"bits", Bits},
                               {"group_size", group},
                               {"desc_act", opt_.desc_act},
                               {"sym", scheme.symmetric},
                               {"lm_head", lm_head},
                               {"checkpoint_format", checkpoint_format()}});
        // Router skips ("-:") first: both readers take the first matching key, and the scheme
        // overrides are checked never to match a router anyway.
        json d = dense_routers(linears);
        if (!d.is_object()) d = json::object();
        if (dynamic.is_object())
            for (const auto& kv : dynamic.as_object()) d.set(kv.key, kv.value);
        if (d.size()) c.set("dynamic", std::move(d));
        return c;
    }

    /// GPTQ has no list of dense modules; MoE routers are kept dense through GPTQModel's
    /// `dynamic` negative matches, one "-:<name regex>" per router: vLLM auto_gptq.py
    /// (get_linear_quant_method / get_moe_quant_method via gptq_utils.get_dynamic_override,
    /// re.match on the module name) then builds them unquantized, and GPTQModel skips them
    /// ("-:" = skip quantization init, as the AutoGPTQConfig comment documents). Null when the
    /// model has no router (dense models are written as before).
    static json dense_routers(std::span<const linear_entry> linears) {
        json d = json::object();
        for (const linear_entry& e : linears) {
            if (!e.router || e.quantized) continue;
            std::string re = "-:";
            for (char ch : e.name) {
                const bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_';
                if (!plain) re += '\\';
                re += ch;
            }
            d.set(re + "$", json::object());
        }
        return d;
    }

    /// `quantize_config.json`, the side file older readers (AutoGPTQ) look for. It holds only
    /// AutoGPTQ's own keys (formats.md 2.5); `lm_head` stays in config.json.
    json side_file(std::span<const linear_entry> linears) const {
        json c = config(linears);
        json side = json::object({{"bits", Bits},
                                  {"group_size", c.at("group_size")},
                                  {"desc_act", opt_.desc_act},
                                  {"sym", c.at("sym")},
                                  {"quant_method", "gptq"},
                                  {"checkpoint_format", checkpoint_format()}});
        // GPTQModel reads quantize_config.json first: the router skips must be there too.
        if (const json* d = c.find("dynamic")) side.set("dynamic", *d);
        return side;
    }

    std::string_view checkpoint_format() const noexcept {
        return opt_.format == gptq_format::v1 ? "gptq" : "gptq_v2";
    }

private:
    /// N, K and the group: K from g_idx (always there in unpack mode, whose rank and shape
    /// rules are the layout's), else from qweight's rows.
    static quantized_tensor read_header(const tensor_source& src, const tensor_view& qw, const tensor_view* gi,
                                        const std::string& prefix, const gptq_args& args, read_mode mode,
                                        bool unpack_codes) {
        const std::string& file = src.file;
        std::int64_t N = 0, K = 0, group = 0;
        if (mode == read_mode::unpack) {
            if (qw.rank() != 2 || gi->rank() != 1)
                fail<shape_error>(file, qw.name, "GPTQ qweight must be 2-D and g_idx 1-D");
            N = qw.shape[1];
            K = gi->shape[0];
            group = detail::effective_group(args.group_size, K);
            check_shape(prefix + ".qweight", N, K, group);
        } else {
            if (qw.rank() != 2) fail<shape_error>(file, qw.name, "qweight must be 2-D, shape " + shape_to_string(qw.shape));
            N = qw.shape[1];
            if (gi && gi->rank() == 1) K = gi->shape[0];
            else if (qw.shape[0] * 32 % Bits == 0) K = qw.shape[0] * 32 / Bits;
            else fail<shape_error>(file, qw.name, "qweight rows " + std::to_string(qw.shape[0]) + " do not hold whole " + std::to_string(Bits) + "-bit columns");
            if (N <= 0 || K <= 0) fail<shape_error>(file, qw.name, "empty weight");
            group = args.group_size > 0 ? (args.group_size > K ? K : args.group_size) : K;
        }
        return quantized_tensor::with_header(prefix, Bits, N, K, group, args.sym, dtype::F16,
                                             unpack_codes ? quantized_tensor::storage::codes : quantized_tensor::storage::none);
    }

    struct read_tensors {
        detail::word_span words, zwords;
        const tensor_view* scales;
    };

    /// qweight, qzeros and scales checked against q's shape, in the order and words of `mode`.
    static read_tensors read_views(const tensor_source& src, const tensor_view& qw, const tensor_view* gi,
                                   const std::string& prefix, quantized_tensor& q, read_mode mode) {
        const std::string& file = src.file;
        const std::int64_t N = q.rows, K = q.cols, G = q.groups();
        read_tensors r;
        if (mode == read_mode::unpack) {
            const tensor_view& qz = src.require(prefix + ".qzeros");
            const tensor_view& sc = src.require(prefix + ".scales");
            detail::expect_view(qw, dtype::I32, {K * Bits / 32, N});
            detail::expect_view(*gi, dtype::I32, {K});
            detail::expect_view(qz, dtype::I32, {G, N * Bits / 32});
            if (sc.type != dtype::F16 && sc.type != dtype::BF16)
                fail<format_error>(file, sc.name, "GPTQ scales must be F16 or BF16");
            detail::expect_view(sc, sc.type, {G, N});
            r.words = detail::words_of(qw, qw.shape, file);
            r.zwords = detail::words_of(qz, qz.shape, file);
            r.scales = &sc;
        } else {
            r.words = detail::words_of(qw, {packing::dense_words(K, Bits), N}, file);
            r.zwords = detail::words_of(src.require(prefix + ".qzeros"), {G, packing::dense_words(N, Bits)}, file);
            r.scales = &src.require(prefix + ".scales");
            detail::require_shape(*r.scales, {G, N}, file);
        }
        q.scale_dtype = r.scales->type;
        return r;
    }

    /// qzeros [G][N] packed along N and scales [G][N] -> q.zeros and q.scales [n][g]. Row by
    /// row: writes of [N][G] are sequential, the G rows read stay in L1. The loop only flags a
    /// bad zero; the rescan names the first one (kept out of the hot loop), in `mode`'s words.
    static void read_zeros_scales(quantized_tensor& q, const detail::word_span& zwords, const tensor_view& sc,
                                  const std::string& prefix, const gptq_args& args, read_mode mode,
                                  const std::string& file) {
        const std::int64_t N = q.rows, G = q.groups();
        const auto spat = detail::scale_patterns(sc, file);
        std::vector<std::uint8_t> zf(static_cast<std::size_t>(G * N));
        for (std::int64_t gg = 0; gg < G; ++gg)
            packing::unpack_dense(zwords.data() + gg * packing::dense_words(N, Bits), 1, N, Bits, zf.data() + gg * N, 1);
        constexpr int maxq = (1 << Bits) - 1, mid = 1 << (Bits - 1);
        const int add = args.v2 ? 0 : 1;
        const bool check_sym = args.sym && mode == read_mode::checkpoint;
        q.zeros.resize(static_cast<std::size_t>(N * G));
        q.scales.resize(static_cast<std::size_t>(N * G));
        bool bad = false;
        for (std::int64_t n = 0; n < N; ++n)
            for (std::int64_t gg = 0; gg < G; ++gg) {
                const int field = zf[static_cast<std::size_t>(gg * N + n)];
                bad |= (add == 1 && field == maxq) || (check_sym && field + add != mid);
                q.zeros[static_cast<std::size_t>(n * G + gg)] = field + add;
                q.scales[static_cast<std::size_t>(n * G + gg)] = spat[static_cast<std::size_t>(gg * N + n)];
            }
        if (bad && mode == read_mode::unpack)
            for (std::int64_t gg = 0; gg < G; ++gg)
                for (std::int64_t n = 0; n < N; ++n)
                    if (const int field = zf[static_cast<std::size_t>(gg * N + n)]; add == 1 && field == maxq)
                        fail<format_error>(file, prefix + ".qzeros",
                                           "v1 zero field " + std::to_string(field) + " at row " + std::to_string(n) +
                                               ", group " + std::to_string(gg) +
                                               " decodes to a zero outside the code range (a corrupted zero-0 word?)");
        for (std::int64_t n = 0; bad && mode == read_mode::checkpoint && n < N; ++n)
            for (std::int64_t gg = 0; gg < G; ++gg) {
                const int field = zf[static_cast<std::size_t>(gg * N + n)];
                if (!args.v2 && field == maxq)
                    fail<unsupported_error>(file, prefix + ".qzeros",
                                            "GPTQ v1 zero field " + std::to_string(field) + " in group " + std::to_string(gg) + " column " +
                                                std::to_string(n) + " decodes to zero " + std::to_string(maxq + 1) +
                                                ", outside the grid (a zero point 0 written by a v1 packer; loaders disagree on it)");
                const int zero = field + add;
                if (args.sym && zero != mid)
                    fail<format_error>(file, prefix + ".qzeros",
                                       "config says sym but group " + std::to_string(gg) + " column " + std::to_string(n) + " has zero " +
                                           std::to_string(zero) + " (expected " + std::to_string(mid) +
                                           "; is checkpoint_format " + (args.v2 ? "gptq_v2" : "gptq (v1)") + " right?)");
            }
    }

    /// A band's part of qzeros [groups][n * Bits / 32]: its rows' words in every group's row.
    /// A symmetric band's zero points are all the midpoint (check refused any other, or the
    /// quantizer made them so), so one packed row serves every group; packing each group's
    /// column of zero points was 3% of RTN 4-bit + pack.
    void pack_band_zeros(const quantized_tensor& band, std::int64_t first_row, std::int64_t n,
                         std::uint32_t* qzeros) const {
        const std::int64_t groups = band.groups(), rows = band.rows, words = rows * Bits / 32, row_words = n * Bits / 32;
        const std::int32_t offset = opt_.format == gptq_format::v1 ? 1 : 0;
        std::uint32_t* dst = qzeros + first_row * Bits / 32;
        if (band.symmetric) {
            const std::vector<std::uint8_t> mid(static_cast<std::size_t>(rows), static_cast<std::uint8_t>((1 << (Bits - 1)) - offset));
            std::vector<std::uint32_t> row(static_cast<std::size_t>(words));
            detail::pack_dense(mid.data(), 1, rows, Bits, row.data(), 1);
            for (std::int64_t g = 0; g < groups; ++g) std::memcpy(dst + g * row_words, row.data(), row.size() * sizeof(std::uint32_t));
            return;
        }
        std::vector<std::uint8_t> stored(band.zeros.size()), by_group(band.zeros.size());
        const std::int32_t* zeros = band.zeros.data();
        std::uint8_t* st = stored.data();  // a byte store may alias the vector's own pointer: keep it in a local
        for (std::size_t i = 0; i < stored.size(); ++i) st[i] = static_cast<std::uint8_t>(zeros[i] - offset);
        detail::transpose_into(stored.data(), rows, groups, by_group.data());
        for (std::int64_t g = 0; g < groups; ++g) detail::pack_dense(by_group.data() + g * rows, 1, rows, Bits, dst + g * row_words, 1);
    }

    static void check_shape(const std::string& tensor, std::int64_t n, std::int64_t k,
                            std::int64_t group) {
        const std::int64_t unit = Bits == 3 ? 32 : 32 / Bits;  // codes per whole number of words
        if (k % unit != 0)
            fail<shape_error>({}, tensor, "GPTQ " + std::to_string(Bits) + "-bit packs K in units of " +
                                              std::to_string(unit) + "; K = " + std::to_string(k));
        if (n % unit != 0)
            fail<shape_error>({}, tensor, "GPTQ " + std::to_string(Bits) + "-bit packs qzeros along N in units of " +
                                              std::to_string(unit) + "; N = " + std::to_string(n));
        if (group <= 0 || k % group != 0)
            fail<shape_error>({}, tensor, "GPTQ needs K (" + std::to_string(k) +
                                              ") to be a multiple of the group size (" +
                                              std::to_string(group) + ")");
    }

    gptq_options opt_;
};

/// Runs `f(gptq_layout<b>)` for a bit width known only at run time, or refuses it.
template <class F>
decltype(auto) with_gptq_layout(int bits, gptq_options options, F&& f) {
    switch (bits) {
        case 2: return f(gptq_layout<2>(options));
        case 3: return f(gptq_layout<3>(options));
        case 4: return f(gptq_layout<4>(options));
        case 8: return f(gptq_layout<8>(options));
        default:
            fail<unsupported_error>({}, {}, "GPTQ packs 2, 3, 4 or 8 bits; " + std::to_string(bits) +
                                                " bits is not a GPTQ layout");
    }
}

/// Reads a GPTQ checkpoint's `<prefix>.qweight`, `.qzeros`, `.scales`, `.g_idx` (optional).
/// K comes from g_idx when present, else from qweight's rows. A v1 field of 2^b - 1 (zero 2^b,
/// which is how AutoGPTQ and GPTQModel write a zero of 0, and on which loaders disagree) is
/// refused. With `unpack_codes` false the codes are left empty; every other check still runs.
inline quantized_tensor read_gptq(const tensor_source& src, const std::string& prefix, const gptq_args& args,
                                  bool unpack_codes = true) {
    detail::check_bits(args.bits, src.file, src.require(prefix + ".qweight").name, {2, 3, 4, 8}, "GPTQ");
    return with_gptq_layout(args.bits, {}, [&](const auto& layout) {
        return layout.read(src, prefix, args, read_mode::checkpoint, unpack_codes);
    });
}

/// The GPTQ formats as the converter's format table sees them (convert/format.hpp): v1
/// (`checkpoint_format: "gptq"`) and v2. Scales default to F16, what AutoGPTQ and GPTQModel
/// write (.half()); g_idx carries act-order; the config states the scheme most layers use and
/// describes the rest as `dynamic` overrides; quantize_config.json goes beside config.json.
template <gptq_format V>
struct gptq_format_traits {
    static constexpr std::string_view name = V == gptq_format::v1 ? "gptq" : "gptq-v2";
    static constexpr std::array<std::string_view, V == gptq_format::v1 ? 0 : 1> aliases =
        [] {
            if constexpr (V == gptq_format::v1) return std::array<std::string_view, 0>{};
            else return std::array<std::string_view, 1>{"gptq_v2"};
        }();
    static constexpr code_kind codes = code_kind::integer;
    static constexpr bool carries_g_idx = true;
    static constexpr bool one_scheme = false;
    static constexpr scale_policy asymmetric_minmax = scale_policy::minmax;

    static dtype default_scale_dtype(dtype /*checkpoint*/) noexcept { return dtype::F16; }

    /// The width a requantization into GPTQ uses for `bits` codes: 5 to 7 bits have no GPTQ
    /// packing, so they go up to 8.
    static constexpr int nearest_bits(int bits) noexcept { return bits >= 5 && bits <= 7 ? 8 : bits; }
    /// v1 cannot store a zero of 0, which minmax gives any group without negative weights: a
    /// requantization into v1 is symmetric.
    static constexpr bool requantizes_symmetric = V == gptq_format::v1;

    /// qweight [K*b/32, N]: row n's codes are one dense stream along K, down column n.
    static constexpr k_stream packed_codes = k_stream::down_columns;
    /// qzeros store zero - 1 in v1 (`checkpoint_format: "gptq"`), the zero itself in v2.
    static constexpr int stored_zero_offset = V == gptq_format::v1 ? 1 : 0;

    // ---- as a repack source (convert/repack.hpp's source table reads it) ----
    // One source row serves both versions: gptq_args::v2 carries the config's checkpoint_format.

    static constexpr std::string_view source_name = "gptq";
    static constexpr std::array<std::string_view, 4> source_tensors{".qweight", ".qzeros", ".scales", ".g_idx"};
    static quantized_tensor read_source(const tensor_source& src, const std::string& prefix, const gptq_args& a) {
        return read_gptq(src, prefix, a);
    }

    // ---- what vLLM and the GPTQ readers do with it (convert/serving_check.hpp asks) ----

    /// Codes per int32 word along the packed dimension: 32 codes per 3 words at 3 bits.
    static constexpr std::int64_t vllm_pack_unit(int bits) noexcept { return bits == 3 ? 32 : 32 / bits; }

    /// `AutoGPTQConfig.TYPE_MAP` holds (4, sym) and (8, sym) only and `__init__` raises
    /// "Unsupported quantization config: bits=4, sym=False" (auto_gptq.py @055e47c2).
    static std::optional<std::string> vllm_config_refusal(const layout_scheme& s) {
        if ((s.bits == 4 || s.bits == 8) && s.symmetric) return std::nullopt;
        return std::string("vLLM refuses the config: AutoGPTQConfig (auto_gptq.py @055e47c2) supports (4, sym) and (8, sym) only") +
               (s.symmetric && s.bits == 2 ? " (later trees add 2-bit uint2b2)" : "") + ": "
               "\"Unsupported quantization config: bits=" + std::to_string(s.bits) + ", sym=" + (s.symmetric ? "True" : "False") + "\"";
    }

    static void vllm_scheme_warnings(const serving_facts& f, std::vector<std::string>& w) {
        if (f.asymmetric)
            w.push_back(std::string("asymmetric GPTQ loads in GPTQModel only") + (V == gptq_format::v1 ? " and AutoGPTQ" : "") +
                        ": vLLM refuses it at config load (auto_gptq.py AutoGPTQConfig.TYPE_MAP holds (4, sym) and (8, sym): "
                        "\"Unsupported quantization config: bits=" + std::to_string(f.bits) + ", sym=False\")" +
                        (V == gptq_format::v2
                             ? "; AutoGPTQ converts gptq_v2 to v1 by subtracting 1 from each packed zero, which wraps a zero of 0"
                             : "") +
                        ". For vLLM use compressed-tensors asym (--format compressed-tensors --asym, preset w4a16-asym): "
                        "CompressedTensorsWNA16 reads weight_zero_point");
        // w4a8-cpu on an fp16 model: the W4A8 kernel needs bf16 params, so the advice is the
        // serving dtype (serving_check.hpp loader_warnings says why), not fp16 scales.
        detail::model_dtype_scales_warning(
            f,
            f.w4a8 && f.model == dtype::F16
                ? std::string("; for W4A8 keep these BF16 scales and serve with --dtype bfloat16, under which vLLM keeps them as written")
                : std::string("; --scale-dtype ") + (f.model == dtype::BF16 ? "bf16" : "fp16") + " stores what vLLM keeps",
            w);
    }

    /// gptq-v2 symmetric experts: vLLM's CPU MoE path adds 1 to every stored zero.
    static void moe_warnings(const moe_facts& f, std::vector<std::string>& w) {
        if (V == gptq_format::v2 && f.symmetric_experts)
            w.push_back(
                "gptq-v2 symmetric MoE: vLLM's CPU MoE path decodes every expert weight one step off. vLLM does not "
                "read checkpoint_format (auto_gptq.py AutoGPTQConfig.from_config), passes the stored qzeros to the CPU "
                "kernel (AutoGPTQMoEMethod.get_fused_moe_quant_config: use_zp on the CPU backend), and that kernel "
                "adds 1 to every stored zero (cpu_moe.py prepare_int4_moe_layer_for_cpu), so v2's zero 8 decodes as "
                "9. GPU vLLM and GPTQModel decode it correctly; --format gptq (v1, stored zero 7) decodes correctly "
                "on all three");
    }

    static void vllm_layer_warnings(const serving_facts& f, std::vector<std::string>& w) {
        if (f.mixed_schemes)
            w.push_back("mixed GPTQ schemes are written as GPTQModel `dynamic` overrides: GPTQModel (config.py dynamic_get) and "
                        "vLLM (gptq_utils.py get_dynamic_override, 4/8-bit sym only) read them; AutoGPTQ and optimum ignore "
                        "`dynamic` and build every layer with the base scheme");
    }

    /// Why GPTQ cannot hold the codes of `q` exactly as they are (a repack moves codes,
    /// zeros and scales unchanged), or nullopt. Shapes are refusal()'s.
    static std::optional<std::string> repack_refusal(const quantized_tensor& q) {
        if (q.bits != 2 && q.bits != 3 && q.bits != 4 && q.bits != 8)
            return "GPTQ stores 2, 3, 4 or 8 bits; " + q.name + " has " + std::to_string(q.bits) + "-bit codes";
        if (V == gptq_format::v1 && !q.symmetric)
            for (std::size_t i = 0; i < q.zeros.size(); ++i)
                if (q.zeros[i] == 0)
                    return "GPTQ v1 cannot store zero point 0 found in " + detail::where_group(q, i) +
                           " (it stores zero - 1); use --format gptq-v2 or compressed-tensors";
        return std::nullopt;
    }

    /// Why GPTQ cannot hold a [n x k] weight under `s` (the plan's wording; the layout's
    /// check_shape refuses the same shapes when a weight is packed).
    static std::optional<std::string> refusal(std::int64_t n, std::int64_t k, const layout_scheme& s) {
        const std::string K = std::to_string(k), N = std::to_string(n), b = std::to_string(s.bits);
        const std::int64_t g = detail::effective_group(s.group_size, k);
        if (s.bits != 2 && s.bits != 3 && s.bits != 4 && s.bits != 8) return "GPTQ stores 2, 3, 4 or 8 bits, not " + b;
        if (k % g != 0) return "GPTQ needs whole groups: K=" + K + " is not a multiple of group " + std::to_string(g);
        if ((k * s.bits) % 32 != 0)
            return "GPTQ packs K along int32 words: K=" + K + " x " + b + " bits is not a multiple of 32";
        if ((n * s.bits) % 32 != 0)
            return "GPTQ packs qzeros along N: N=" + N + " x " + b + " bits is not a multiple of 32";
        return std::nullopt;
    }

    template <class F>
    static decltype(auto) with_layout(const layout_request& r, F&& f) {
        return with_gptq_layout(r.bits, gptq_options{V, r.scale_dtype, r.desc_act}, std::forward<F>(f));
    }

    /// The config states the scheme most layers use (majority_scheme), at `r`'s scale dtype.
    static json config(std::span<const linear_entry> linears, const layout_request& r) {
        return with_layout(base_request(linears, r), [&](const auto& layout) { return layout.config(linears); });
    }

    static std::vector<side_file> side_files(std::span<const linear_entry> linears, const layout_request& r) {
        json side = with_layout(base_request(linears, r), [&](const auto& layout) { return layout.side_file(linears); });
        std::vector<side_file> out;
        out.push_back({"quantize_config.json", std::move(side)});
        return out;
    }

private:
    static layout_request base_request(std::span<const linear_entry> linears, layout_request r) {
        if (const linear_entry* base = majority_scheme(linears)) r.bits = base->bits;
        return r;
    }
};

}  // namespace qforge
