// compressed-tensors `pack-quantized` checkpoints (vLLM `CompressedTensorsWNA16`,
// transformers + compressed-tensors): per linear
//   <p>.weight_packed     int32 [N, words(K)]    codes packed along K (dim 1)
//   <p>.weight_scale      checkpoint dtype [N, G]
//   <p>.weight_zero_point int32 [words(N), G]   zeros packed along N (dim 0), only when asymmetric
//   <p>.weight_shape      int64 [2] = [N, K]
// CT quantizes to signed q in [-2^(b-1), 2^(b-1)-1] and stores q + 2^(b-1) (weights and zero
// points alike); qforge's unsigned code is that stored value, so codes and zeros pack as they
// are. Sources: CTo `compressors/quantized_compressors/pack_quantized.py pack_to_int32`, CTn
// `compressors/pack_quantized/helpers.py`, VL `schemes/compressed_tensors_wNa16.py`;
// formats.md 4.1-4.5.
//
// Packing of 3, 5, 6, 7 bits changed in compressed-tensors 0.18.0 (commit 66e631f6): before,
// floor(32/b) codes per word with the top bits zero ("padded"); from 0.18, one dense LSB-first
// bitstream. Both are offered as `ct_packing`, which also sets the config's `version`. For 2,
// 4 and 8 bits the words are the same either way.
#pragma once

#include <algorithm>
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
#include "qforge/core/tensor_source.hpp"
#include "qforge/core/tensor_view.hpp"
#include "qforge/layout/checkpoint_rules.hpp"
#include "qforge/layout/detail/ct_envelope.hpp"
#include "qforge/layout/detail/pack_band.hpp"
#include "qforge/layout/detail/pack_bits.hpp"
#include "qforge/layout/layout_traits.hpp"
#include "qforge/quant/quantized_tensor.hpp"

namespace qforge {

enum class ct_packing {
    padded_v0_12,  ///< compressed-tensors <= 0.17: 32/b codes per word; config version "0.12.2"
    dense_v0_18,   ///< compressed-tensors >= 0.18: dense bitstream; config version "0.18.0"
};

struct ct_options {
    ct_packing packing = ct_packing::padded_v0_12;
    dtype checkpoint_dtype = dtype::BF16;  ///< the model's dtype: weight_scale must be stored in it
};

inline constexpr std::string_view ct_version(ct_packing p) noexcept {
    return p == ct_packing::padded_v0_12 ? "0.12.2" : "0.18.0";
}

/// The `weights` arguments of one compressed-tensors config group that the readers need.
struct ct_weight_args {
    int bits = 4;
    bool symmetric = true;
    std::int64_t group_size = 128;  ///< <= 0 means strategy "channel" (one group per row)
};

namespace detail {

/// Words [W][G] packed along dim 0 (column g holds group g's N fields) -> out[n][g]. For
/// 32 % b == 0 the words are walked row by row (cache friendly), else column by column.
inline void unpack_down(const std::uint32_t* w, std::int64_t N, std::int64_t G, int b, bool dense, std::uint8_t* out) {
    if (32 % b == 0) {
        const int pf = 32 / b;
        const std::uint32_t mask = (1u << b) - 1u;
        for (std::int64_t r = 0; r * pf < N; ++r) {
            const int fields = static_cast<int>(std::min<std::int64_t>(pf, N - r * pf));
            for (std::int64_t g = 0; g < G; ++g) {
                const std::uint32_t word = w[r * G + g];
                for (int j = 0; j < fields; ++j) out[(r * pf + j) * G + g] = static_cast<std::uint8_t>((word >> (b * j)) & mask);
            }
        }
        return;
    }
    for (std::int64_t g = 0; g < G; ++g) {
        if (dense) unpack_dense(w + g, G, N, b, out + g, G);
        else unpack_padded(w + g, G, N, b, out + g, G);
    }
}

/// Reverse of unpack_down: z[n][g] -> words [W][G] packed along dim 0.
inline void pack_down(const std::uint8_t* z, std::int64_t N, std::int64_t G, int b, bool dense, std::uint32_t* w) {
    if (32 % b == 0) {
        const int pf = 32 / b;
        const std::uint32_t mask = (1u << b) - 1u;
        for (std::int64_t r = 0; r * pf < N; ++r) {
            const int fields = static_cast<int>(std::min<std::int64_t>(pf, N - r * pf));
            for (std::int64_t g = 0; g < G; ++g) {
                std::uint32_t word = 0;
                for (int j = 0; j < fields; ++j) word |= (z[(r * pf + j) * G + g] & mask) << (b * j);
                w[r * G + g] = word;
            }
        }
        return;
    }
    for (std::int64_t g = 0; g < G; ++g) {
        if (dense) pack_dense(z + g, G, N, b, w + g, G);
        else pack_padded(z + g, G, N, b, w + g, G);
    }
}

/// Reads `<prefix>.weight_scale` [N, G] and, for asymmetric schemes, the zero points through
/// `zero_of(i)` (already unpacked, signed CT convention); fills scales/zeros of `q`. The
/// checkpoint readers' step (packed and naive alike).
template <class ZeroOf>
void ct_fill_scales_zeros(quantized_tensor& q, const tensor_view& scale, bool symmetric, ZeroOf zero_of,
                          const std::string& file) {
    const std::int64_t G = q.groups();
    if (!(scale.rank() == 2 && scale.shape[0] == q.rows && scale.shape[1] == G))
        fail<shape_error>(file, scale.name, "shape is " + shape_to_string(scale.shape) + ", expected " +
                                                shape_to_string({q.rows, G}));
    q.scale_dtype = scale.type;
    q.scales = scale_patterns(scale, file);
    const int half = 1 << (q.bits - 1);
    q.zeros.assign(static_cast<std::size_t>(q.rows * G), half);
    if (symmetric) return;
    for (std::size_t i = 0; i < q.zeros.size(); ++i) {
        const std::int64_t z = zero_of(i);
        if (z < -half || z >= half)
            fail<format_error>(file, q.name, "zero point " + std::to_string(z) + " at row " + std::to_string(static_cast<std::int64_t>(i) / G) +
                                                 " group " + std::to_string(static_cast<std::int64_t>(i) % G) + " is outside the signed " +
                                                 std::to_string(q.bits) + "-bit range");
        q.zeros[i] = static_cast<std::int32_t>(z + half);
    }
}

/// Reads an optional `weight_g_idx` [K]; an identity one (k / group) is dropped so the
/// tensor also fits layouts without act-order.
inline void ct_read_g_idx(quantized_tensor& q, const tensor_view* g_idx, const std::string& file) {
    if (!g_idx) return;
    require_shape(*g_idx, {q.cols}, file);
    if (!is_integer_dtype(g_idx->type)) fail<format_error>(file, g_idx->name, "g_idx must be an integer tensor");
    require_bytes(*g_idx, file);
    q.g_idx.resize(static_cast<std::size_t>(q.cols));
    bool identity = true;
    for (std::int64_t k = 0; k < q.cols; ++k) {
        const std::int64_t g = int_at(*g_idx, static_cast<std::size_t>(k));
        if (g < 0 || g >= q.groups())
            fail<format_error>(file, g_idx->name, "entry " + std::to_string(k) + " = " + std::to_string(g) + " is not a group of this tensor");
        q.g_idx[static_cast<std::size_t>(k)] = static_cast<std::int32_t>(g);
        identity = identity && g == k / q.group_size;
    }
    if (identity) q.g_idx.clear();
}

}  // namespace detail

template <int Bits>
class compressed_tensors_layout {
    static_assert(Bits >= 2 && Bits <= 8, "qforge: compressed-tensors pack-quantized packs 2 to 8 bits");

public:
    static constexpr std::string_view format_name = "compressed-tensors";
    static constexpr int bits = Bits;

    explicit compressed_tensors_layout(ct_options options = {}) : opt_(options) {}
    const ct_options& options() const noexcept { return opt_; }

    /// Words a run of `count` codes takes in this packing.
    std::int64_t words(std::int64_t count) const noexcept {
        return opt_.packing == ct_packing::dense_v0_18 ? detail::dense_words(count, Bits)
                                                       : detail::padded_words(count, Bits);
    }

    std::vector<tensor_spec> specs(std::int64_t n, std::int64_t k, std::int64_t group,
                                   bool symmetric) const {
        const std::int64_t g = detail::ceil_div(k, detail::effective_group(group, k));
        std::vector<tensor_spec> s{{".weight_packed", dtype::I32, {n, words(k)}},
                                   {".weight_scale", opt_.checkpoint_dtype, {n, g}}};
        if (!symmetric) s.push_back({".weight_zero_point", dtype::I32, {words(n), g}});
        s.push_back({".weight_shape", dtype::I64, {2}});
        return s;
    }

    /// Every refusal, before anything is packed. `first_row` is the weight row of q's row 0
    /// when q is a band of a larger weight (messages name the weight's rows). `isa`: the pack
    /// kernels the code scan runs on (simd/pack_kernels.hpp); `values`: whether the scans run.
    void check(const quantized_tensor& q, std::int64_t first_row = 0, simd::isa isa = simd::active_isa(),
               value_check values = value_check::scan) const {
        detail::check_common(q, "compressed-tensors", first_row, isa, values);
        if (q.bits != Bits)
            fail<unsupported_error>({}, q.name, "compressed-tensors layout for " + std::to_string(Bits) +
                                                    " bits given a " + std::to_string(q.bits) +
                                                    "-bit weight");
        detail::check_scale_dtype(q, opt_.checkpoint_dtype, "compressed-tensors");
        if (!q.g_idx.empty())
            for (std::int64_t k = 0; k < q.cols; ++k)
                if (q.group_of(k) != k / q.group_size)
                    fail<unsupported_error>({}, q.name,
                                            "compressed-tensors: qforge writes contiguous groups "
                                            "only (no weight_g_idx / actorder), but column " +
                                                std::to_string(k) + " is in group " +
                                                std::to_string(q.group_of(k)));
    }

    /// The tensors of one linear; the packers run on the pack kernels of `isa`.
    std::vector<owned_tensor> pack(const quantized_tensor& q, std::string_view prefix,
                                   simd::isa isa = simd::active_isa()) const {
        check(q, 0, isa);
        const std::string p(prefix);
        const std::int64_t n = q.rows, k = q.cols, groups = q.groups();
        const std::int64_t wk = words(k);
        std::vector<owned_tensor> out;
        out.push_back(detail::alloc_tensor(p + ".weight_packed", dtype::I32, {n, wk}));
        std::uint32_t* packed = detail::words_of(out.back());
        for (std::int64_t r = 0; r < n; ++r) pack_run(q.codes.data() + r * k, 1, k, packed + r * wk, 1);
        out.push_back(detail::make_tensor(p + ".weight_scale", q.scale_dtype, {n, groups}, q.scales));
        if (!q.symmetric) {
            // Column g of the zeros [n][groups] is one run along N, written down column g.
            std::vector<std::uint8_t> zeros(q.zeros.begin(), q.zeros.end());
            out.push_back(detail::alloc_tensor(p + ".weight_zero_point", dtype::I32, {words(n), groups}));
            std::uint32_t* zp = detail::words_of(out.back());
            for (std::int64_t g = 0; g < groups; ++g) pack_run(zeros.data() + g, groups, n, zp + g, groups);
        }
        out.push_back(detail::make_tensor(p + ".weight_shape", dtype::I64, {2}, std::vector<std::int64_t>{n, k}));
        return out;
    }

    /// Band packing (see layout/quantize_packed.hpp): `out` holds the tensors of specs() for the
    /// whole weight [n, k], allocated (zeroed) once; `band` is rows [first_row, first_row +
    /// band.rows) of it, quantized. weight_packed and weight_scale rows are the band's own;
    /// weight_zero_point packs along N, where a band on a multiple of 32 rows closes its dense
    /// words but may share a padded word (10 codes a word for 3 bits) with a neighbour, whose
    /// fields go in atomically (detail::pack_padded_part). Bands may be packed in any order or
    /// at once on different threads.
    void pack_band(const quantized_tensor& band, std::int64_t first_row, std::int64_t n,
                   std::span<owned_tensor> out, simd::isa isa = simd::active_isa(),
                   value_check values = value_check::scan) const {
        check(band, first_row, isa, values);
        detail::check_band_bounds(band, first_row, n, "compressed-tensors");
        detail::check_band_outputs(specs(n, band.cols, band.group_size, band.symmetric), out, band.name, "compressed-tensors");
        const std::int64_t k = band.cols, groups = band.groups(), rows = band.rows, wk = words(k);
        std::uint32_t* packed = detail::words_of(out[0]) + first_row * wk;
        for (std::int64_t r = 0; r < rows; ++r) pack_run(band.codes.data() + r * k, 1, k, packed + r * wk, 1);
        std::memcpy(out[1].bytes.data() + first_row * groups * sizeof(std::uint16_t), band.scales.data(),
                    band.scales.size() * sizeof(std::uint16_t));
        std::size_t shape_at = 2;
        if (!band.symmetric) {
            const std::vector<std::uint8_t> zeros(band.zeros.begin(), band.zeros.end());
            std::uint32_t* zp = detail::words_of(out[2]);
            for (std::int64_t g = 0; g < groups; ++g) {
                if (opt_.packing == ct_packing::dense_v0_18)  // first_row * b bits is a word boundary
                    detail::pack_dense(zeros.data() + g, groups, rows, Bits, zp + first_row * Bits / 32 * groups + g, groups);
                else
                    detail::pack_padded_part(zeros.data() + g, groups, first_row, rows, n, Bits, zp + g, groups);
            }
            shape_at = 3;
        }
        if (first_row == 0) {
            const std::int64_t nk[2] = {n, k};
            std::memcpy(out[shape_at].bytes.data(), nk, sizeof nk);
        }
    }

    /// Reads one linear back; N and K come from weight_shape, the group size and symmetry from
    /// the config group that names the layer.
    quantized_tensor unpack(std::span<const tensor_view> views, std::string_view prefix,
                            layer_params params) const {
        return read(make_tensor_source(views), std::string(prefix), {Bits, params.symmetric, params.group_size},
                    read_mode::unpack);
    }

    /// The one compressed-tensors `pack-quantized` reader, in this layout's packing:
    /// `<prefix>.weight_packed` [N, words(K)], `.weight_shape`, `.weight_scale` [N, G],
    /// `.weight_zero_point` [words(N), G] (asymmetric only) and, in a checkpoint,
    /// `.weight_g_idx` (actorder "group"), moved into a quantized_tensor with no rounding.
    /// `mode` says who asks (see read_mode): `unpack` requires what pack() writes and refuses a
    /// zero point beside a symmetric scheme; `checkpoint` reads any writer's files, where for
    /// 3/5/6/7 bits the word count tells the two packings apart and must agree with this
    /// layout's. The stored field is signed code + 2^(b-1), which is qforge's unsigned code
    /// (formats.md 4.2). With `unpack_codes` false the codes are left empty (the word-level
    /// repack moves weight_packed as words); every check still runs.
    quantized_tensor read(const tensor_source& src, const std::string& prefix, const ct_weight_args& args,
                          read_mode mode, bool unpack_codes = true) const {
        const read_views v = mode == read_mode::unpack ? unpack_views(src, prefix, args) : checkpoint_views(src, prefix, args);
        quantized_tensor q = quantized_tensor::with_header(
            prefix, Bits, v.n, v.k, v.group, args.symmetric, v.scales ? v.scales->type : dtype::F16,
            unpack_codes ? quantized_tensor::storage::codes : quantized_tensor::storage::none);
        read_codes(q, v, src.file, unpack_codes);
        if (mode == read_mode::unpack) {
            unpack_zeros_scales(q, src, prefix, *v.scales);
        } else {
            checkpoint_zeros_scales(q, src, prefix);
            detail::ct_read_g_idx(q, src.optional(prefix + ".weight_g_idx"), src.file);
        }
        if (unpack_codes) q.validate();
        return q;
    }

    /// `quantization_config`: one config group per (bits, group size, symmetry) naming its
    /// layers, `ignore` naming every unquantized linear. Emits only keys compressed-tensors
    /// 0.12 accepts (its QuantizationArgs forbid extra keys; formats.md 4.4). The fragment
    /// covers the layers of this layout's bit width; mixed widths go through
    /// ct_config(linears, options) directly.
    json config(std::span<const linear_entry> linears) const;

private:
    struct read_views {
        std::int64_t n = 0, k = 0, group = 0;
        const tensor_view* packed = nullptr;
        const tensor_view* scales = nullptr;  ///< checked up front in unpack mode only
        detail::word_span words;
    };

    /// unpack mode: weight_shape, then weight_packed and weight_scale exactly as pack() writes
    /// them (a group wider than K refused).
    read_views unpack_views(const tensor_source& src, const std::string& prefix, const ct_weight_args& args) const {
        const tensor_view& ws = src.require(prefix + ".weight_shape");
        detail::expect_view(ws, dtype::I64, {2});
        const auto nk = detail::copy_elements<std::int64_t>(ws);
        const std::int64_t n = nk[0], k = nk[1];
        if (n <= 0 || k <= 0 || n > (std::int64_t{1} << 40) || k > (std::int64_t{1} << 40))
            fail<shape_error>(src.file, ws.name, "weight_shape [" + std::to_string(n) + ", " +
                                                     std::to_string(k) + "] is not a weight shape");
        const std::int64_t group = detail::effective_group(args.group_size, k);
        if (group > k) fail<shape_error>(src.file, ws.name, "group size exceeds K");
        const std::int64_t groups = detail::ceil_div(k, group);
        const tensor_view& wp = src.require(prefix + ".weight_packed");
        const tensor_view& sc = src.require(prefix + ".weight_scale");
        detail::expect_view(wp, dtype::I32, {n, words(k)});
        if (sc.type != dtype::F16 && sc.type != dtype::BF16)
            fail<unsupported_error>(src.file, sc.name, "weight_scale must be F16 or BF16 for qforge, got " +
                                                           std::string(dtype_name(sc.type)));
        detail::expect_view(sc, sc.type, {n, groups});
        return {n, k, group, &wp, &sc, detail::words_of(wp, wp.shape, src.file)};
    }

    /// checkpoint mode: weight_packed, weight_shape (any integer dtype), and a word count that
    /// holds [N, K] in either packing and agrees with this layout's where they differ. A group
    /// wider than K is one group per row, as the writers read it.
    read_views checkpoint_views(const tensor_source& src, const std::string& prefix, const ct_weight_args& args) const {
        const std::string& file = src.file;
        const tensor_view& wp = src.require(prefix + ".weight_packed");
        const tensor_view& ws = src.require(prefix + ".weight_shape");
        if (!detail::is_integer_dtype(ws.type)) fail<format_error>(file, ws.name, "weight_shape must be an integer tensor");
        detail::require_shape(ws, {2}, file);
        detail::require_bytes(ws, file);
        const std::int64_t N = detail::int_at(ws, 0), K = detail::int_at(ws, 1);
        if (N <= 0 || K <= 0 || N > (std::int64_t{1} << 40) || K > (std::int64_t{1} << 40))
            fail<shape_error>(file, ws.name, "weight shape [" + std::to_string(N) + ", " + std::to_string(K) + "] is not a usable 2-D shape");
        const std::int64_t dense_k = detail::dense_words(K, Bits), padded_k = detail::padded_words(K, Bits);
        if (!(wp.rank() == 2 && wp.shape[0] == N && (wp.shape[1] == dense_k || wp.shape[1] == padded_k)))
            fail<shape_error>(file, wp.name, "shape " + shape_to_string(wp.shape) + " does not hold [" + std::to_string(N) + ", " +
                                                 std::to_string(K) + "] " + std::to_string(Bits) + "-bit codes");
        if (dense_k != padded_k) {
            const ct_packing by_shape = wp.shape[1] == dense_k ? ct_packing::dense_v0_18 : ct_packing::padded_v0_12;
            if (by_shape != opt_.packing)
                fail<format_error>(file, wp.name, std::string("word count matches the ") + (by_shape == ct_packing::dense_v0_18 ? "dense (>= 0.18)" : "padded (<= 0.17)") +
                                                      " packing but the config's version says the other one");
        }
        const std::int64_t group = args.group_size > 0 ? (args.group_size > K ? K : args.group_size) : K;
        return {N, K, group, &wp, nullptr, detail::words_of(wp, wp.shape, file)};
    }

    /// weight_packed rows -> q.codes (when `unpack_codes`), each row checked for bits outside
    /// its code fields (none can be set when K fills whole words of whole fields).
    void read_codes(quantized_tensor& q, const read_views& v, const std::string& file, bool unpack_codes) const {
        const std::int64_t N = q.rows, K = q.cols, wk = words(K);
        const bool whole_words = K * Bits % 32 == 0 && 32 % Bits == 0;
        for (std::int64_t n = 0; n < N; ++n) {
            const std::uint32_t* row = v.words.data() + n * wk;
            if (!whole_words && has_stray_bits(row, 1, K))
                fail<format_error>(file, v.packed->name, "row " + std::to_string(n) + " has bits set outside its code fields");
            if (unpack_codes) unpack_run(row, 1, K, q.codes.data() + n * K, 1);
        }
    }

    /// unpack mode: the scales as checked by unpack_views; zeros packed along N for an
    /// asymmetric scheme, none allowed for a symmetric one (vLLM refuses to load it).
    void unpack_zeros_scales(quantized_tensor& q, const tensor_source& src, const std::string& prefix,
                             const tensor_view& sc) const {
        const std::int64_t n = q.rows, groups = q.groups();
        q.scales = detail::copy_elements<std::uint16_t>(sc);
        q.zeros.assign(static_cast<std::size_t>(n * groups), 1 << (Bits - 1));
        if (q.symmetric) {
            if (const tensor_view* zp = src.optional(prefix + ".weight_zero_point"))
                fail<format_error>(src.file, zp->name, "a symmetric scheme must not carry a zero point "
                                                       "(vLLM refuses to load it)");
            return;
        }
        const tensor_view& zp = src.require(prefix + ".weight_zero_point");
        detail::expect_view(zp, dtype::I32, {words(n), groups});
        const detail::word_span zw = detail::words_of(zp, zp.shape, src.file);
        std::vector<std::uint8_t> zeros(static_cast<std::size_t>(n * groups));
        detail::unpack_down(zw.data(), n, groups, Bits, opt_.packing == ct_packing::dense_v0_18, zeros.data());
        q.zeros.assign(zeros.begin(), zeros.end());
    }

    /// checkpoint mode: zeros packed along N (asymmetric only; each group's stream checked for
    /// stray bits), then weight_scale and the zeros through the checkpoint readers' one step.
    void checkpoint_zeros_scales(quantized_tensor& q, const tensor_source& src, const std::string& prefix) const {
        const std::string& file = src.file;
        const std::int64_t N = q.rows, G = q.groups();
        std::vector<std::uint8_t> zf;
        if (!q.symmetric) {
            const auto zw = detail::words_of(src.require(prefix + ".weight_zero_point"), {words(N), G}, file);
            zf.resize(static_cast<std::size_t>(N * G));
            // Packed along dim 0 (N): column g of the words is the stream of group g's zeros.
            if (!(N * Bits % 32 == 0 && 32 % Bits == 0))
                for (std::int64_t gg = 0; gg < G; ++gg)
                    if (has_stray_bits(zw.data() + gg, G, N))
                        fail<format_error>(file, prefix + ".weight_zero_point", "group " + std::to_string(gg) + " has bits set outside its fields");
            detail::unpack_down(zw.data(), N, G, Bits, opt_.packing == ct_packing::dense_v0_18, zf.data());
        }
        constexpr int half = 1 << (Bits - 1);
        detail::ct_fill_scales_zeros(q, src.require(prefix + ".weight_scale"), q.symmetric,
                                     [&](std::size_t i) { return static_cast<std::int64_t>(zf[i]) - half; }, file);
    }

    void pack_run(const std::uint8_t* src, std::ptrdiff_t ss, std::int64_t count, std::uint32_t* dst,
                  std::ptrdiff_t ds) const noexcept {
        if (opt_.packing == ct_packing::dense_v0_18) detail::pack_dense(src, ss, count, Bits, dst, ds);
        else detail::pack_padded(src, ss, count, Bits, dst, ds);
    }
    void unpack_run(const std::uint32_t* src, std::ptrdiff_t ss, std::int64_t count, std::uint8_t* dst,
                    std::ptrdiff_t ds) const noexcept {
        if (opt_.packing == ct_packing::dense_v0_18) detail::unpack_dense(src, ss, count, Bits, dst, ds);
        else detail::unpack_padded(src, ss, count, Bits, dst, ds);
    }
    bool has_stray_bits(const std::uint32_t* src, std::ptrdiff_t ss, std::int64_t count) const noexcept {
        return opt_.packing == ct_packing::dense_v0_18 ? detail::dense_has_stray_bits(src, ss, count, Bits)
                                                       : detail::padded_has_stray_bits(src, ss, count, Bits);
    }

    ct_options opt_;
};

namespace detail {

/// The targets of an MoE export, in the shape llm-compressor writes (its MoE examples target
/// "Linear" and ignore the routers and lm_head), which is what every vLLM MoE path resolves:
///  - older vLLM: CompressedTensorsMoEMethod.get_moe_method(quant_config, layer) reads
///    quant_config.target_scheme_map["Linear"] (KeyError without that target);
///  - newer vLLM: get_moe_method looks up "<moe prefix>.0.gate_proj/up_proj/down_proj"
///    through get_scheme_dict -> utils.find_matched_target (layer name, then the module's
///    class name by substring, then fused shards), after _add_fused_moe_to_target_scheme_map
///    copied the "Linear" scheme to "FusedMoE": Mixtral's w1/w2/w3 experts never match by
///    name, so only the class target finds them;
///  - transformers (integrations/compressed_tensors.py get_scheme / get_experts_scheme): a
///    name target first, else the group holding "Linear"; the experts' group is the first one
///    with a non-regex target, so it is written first.
/// One config group: targets ["Linear"], every dense linear in `ignore` (the caller's list).
/// Several groups: the experts' group keeps its names and adds "Linear", and it must hold every
/// fused layer (q/k/v, dense gate/up): vLLM matches a fused layer's class name ("Linear" in
/// "QKVParallelLinear") before its shards' names, so a fused layer in another group would get
/// the experts' scheme. Returns the order to write the groups in (experts' group first).
template <class GroupOf>
std::vector<std::size_t> ct_moe_targets(std::span<const linear_entry> linears, std::size_t groups,
                                        std::vector<json>& targets, GroupOf group_of) {
    std::vector<std::size_t> order(groups);
    for (std::size_t i = 0; i < groups; ++i) order[i] = i;
    const linear_entry* expert = nullptr;
    for (const linear_entry& e : linears)
        if (e.quantized && !expert_parent(e.name).empty()) {
            if (expert && group_of(e) != group_of(*expert))
                fail<unsupported_error>({}, e.name,
                                        "compressed-tensors: every MoE expert must share one scheme (older vLLM "
                                        "resolves all fused-MoE layers through the one \"Linear\" target), but '" +
                                            expert->name + "' has another");
            expert = &e;
        }
    if (!expert) return order;
    const std::size_t g = group_of(*expert);
    if (groups == 1) {
        targets[0] = json::array({"Linear"});
        return order;
    }
    for (const auto& fused : fused_groups(linears))
        for (const linear_entry* m : fused)
            if (m->quantized && expert_parent(m->name).empty() && group_of(*m) != g)
                fail<unsupported_error>({}, m->name,
                                        "compressed-tensors MoE with several schemes: the experts' config group "
                                        "targets \"Linear\", and vLLM's find_matched_target matches a fused "
                                        "layer's class name before its shards' names, so this fused layer would "
                                        "get the experts' scheme; give it the experts' scheme or keep it dense");
    targets[g].push_back("Linear");
    order.erase(order.begin() + static_cast<std::ptrdiff_t>(g));
    order.insert(order.begin(), g);
    return order;
}

}  // namespace detail

/// The compressed-tensors `quantization_config` for a whole model (any mix of 2..8 bits,
/// group sizes and symmetry): refuses tied quantized layers, unsupported bits and fused layers
/// with different schemes, naming the layers.
inline json ct_config(std::span<const linear_entry> linears, const ct_options& options) {
    check_untied(linears, "compressed-tensors");
    check_fused_share_scheme(linears, "compressed-tensors");
    struct group_key {
        int bits;
        std::int64_t group;
        bool symmetric;
    };
    std::vector<group_key> keys;
    std::vector<json> targets;
    for (const linear_entry& e : linears) {
        if (!e.quantized) continue;
        if (e.bits < 2 || e.bits > 8)
            fail<unsupported_error>({}, e.name, "compressed-tensors pack-quantized holds 2 to 8 bits, got " +
                                                    std::to_string(e.bits));
        const group_key key{e.bits, detail::entry_group(e), e.symmetric};
        std::size_t i = 0;
        while (i < keys.size() && !(keys[i].bits == key.bits && keys[i].group == key.group &&
                                    keys[i].symmetric == key.symmetric))
            ++i;
        if (i == keys.size()) {
            keys.push_back(key);
            targets.push_back(json::array());
        }
        targets[i].push_back(e.name);
    }
    if (keys.empty()) fail<unsupported_error>({}, {}, "compressed-tensors: no quantized layer to export");
    const std::vector<std::size_t> order = detail::ct_moe_targets(linears, keys.size(), targets, [&](const linear_entry& e) {
        const group_key key{e.bits, detail::entry_group(e), e.symmetric};
        std::size_t i = 0;
        while (!(keys[i].bits == key.bits && keys[i].group == key.group && keys[i].symmetric == key.symmetric)) ++i;
        return i;
    });

    json groups = json::object();
    for (std::size_t n = 0; n < keys.size(); ++n) {
        const std::size_t i = order[n];
        const bool channel = keys[i].group < 0;
        json weights = detail::ct_quantization_args("int", keys[i].bits, channel ? "channel" : "group", keys[i].symmetric,
                                                    false, channel ? json() : json(keys[i].group), nullptr, "minmax");
        groups.set("group_" + std::to_string(n),
                   detail::ct_config_group("pack-quantized", nullptr, std::move(targets[i]), std::move(weights)));
    }
    return detail::ct_envelope(std::move(groups), "pack-quantized", unquantized_names(linears), ct_version(options.packing));
}

template <int Bits>
json compressed_tensors_layout<Bits>::config(std::span<const linear_entry> linears) const {
    for (const linear_entry& e : linears)
        if (e.quantized && e.bits != Bits)
            fail<unsupported_error>({}, e.name, "compressed-tensors layout for " + std::to_string(Bits) +
                                                    " bits given a " + std::to_string(e.bits) +
                                                    "-bit layer; use ct_config for mixed widths");
    return ct_config(linears, opt_);
}

/// Runs `f(compressed_tensors_layout<b>)` for a bit width known only at run time, or refuses it.
template <class F>
decltype(auto) with_ct_layout(int bits, ct_options options, F&& f) {
    switch (bits) {
        case 2: return f(compressed_tensors_layout<2>(options));
        case 3: return f(compressed_tensors_layout<3>(options));
        case 4: return f(compressed_tensors_layout<4>(options));
        case 5: return f(compressed_tensors_layout<5>(options));
        case 6: return f(compressed_tensors_layout<6>(options));
        case 7: return f(compressed_tensors_layout<7>(options));
        case 8: return f(compressed_tensors_layout<8>(options));
        default:
            fail<unsupported_error>({}, {}, "compressed-tensors pack-quantized holds 2 to 8 bits, got " +
                                                std::to_string(bits));
    }
}

/// Reads a compressed-tensors `pack-quantized` checkpoint's `<prefix>.weight_packed`,
/// `.weight_shape`, `.weight_scale`, `.weight_zero_point` (asymmetric only) and `.weight_g_idx`
/// (actorder group only), written in `packing` (the config's version). With `unpack_codes`
/// false the codes are left empty; every other check still runs.
inline quantized_tensor read_ct_packed(const tensor_source& src, const std::string& prefix, const ct_weight_args& args,
                                       ct_packing packing, bool unpack_codes = true) {
    detail::check_bits(args.bits, src.file, src.require(prefix + ".weight_packed").name, {2, 3, 4, 5, 6, 7, 8},
                       "compressed-tensors pack-quantized");
    return with_ct_layout(args.bits, ct_options{packing}, [&](const auto& layout) {
        return layout.read(src, prefix, args, read_mode::checkpoint, unpack_codes);
    });
}

/// compressed-tensors `pack-quantized` as the converter's format table sees it
/// (convert/format.hpp): scales in the checkpoint dtype, any mix of 2..8 bits, group sizes and
/// symmetry in one config (one config group per scheme), written in the 0.12 packing.
struct ct_format_traits {
    static constexpr std::string_view name = "compressed-tensors";
    static constexpr std::array<std::string_view, 2> aliases{"ct", "compressed_tensors"};
    static constexpr code_kind codes = code_kind::integer;
    static constexpr bool carries_g_idx = false;
    static constexpr bool one_scheme = false;
    static constexpr scale_policy asymmetric_minmax = scale_policy::minmax;

    static dtype default_scale_dtype(dtype checkpoint) noexcept { return detail::ct_scale_dtype(checkpoint); }

    /// weight_packed [N, words(K)]: row n's codes are one stream along K, along row n (dense
    /// for 2, 4, 8 bits and in the 0.18 packing).
    static constexpr k_stream packed_codes = k_stream::along_rows;

    // ---- as a repack source (convert/repack.hpp's source table reads it) ----
    static constexpr std::string_view source_name = "compressed-tensors pack-quantized";
    static constexpr std::array<std::string_view, 5> source_tensors{".weight_packed", ".weight_scale", ".weight_zero_point",
                                                                    ".weight_shape", ".weight_g_idx"};
    static quantized_tensor read_source(const tensor_source& src, const std::string& prefix, const ct_weight_args& a,
                                        ct_packing packing) {
        return read_ct_packed(src, prefix, a, packing);
    }
    /// The config's version says the input's packing, which a repack into compressed-tensors
    /// keeps unless told otherwise.
    static constexpr bool source_sets_packing = true;

    // ---- what vLLM does with it (convert/serving_check.hpp asks) ----

    /// weight_zero_point packs N (PackedvLLMParameter), and exists only for asymmetric schemes.
    static constexpr bool vllm_zeros_along_n(bool symmetric) noexcept { return !symmetric; }

    /// What older vLLM, transformers and SGLang misread of compressed-tensors MoE experts.
    static void moe_warnings(const moe_facts& f, std::vector<std::string>& w) {
        if (f.dense_experts)
            w.push_back(
                std::string("compressed-tensors with MoE experts kept dense: older vLLM's CompressedTensorsMoEMethod."
                            "get_moe_method reads target_scheme_map[\"Linear\"] for every fused-MoE layer and checks no "
                            "ignore list, so ") +
                (f.symmetric_experts || f.asymmetric_experts
                     ? "it gives the dense blocks the quantized experts' scheme and cannot load them"
                     : "it fails with KeyError 'Linear' (no group targets Linear when no expert is quantized)") +
                "; newer vLLM finds Qwen-named dense experts in `ignore` (UnquantizedFusedMoEMethod) but looks "
                "Mixtral-named ones up as <prefix>.0.gate_proj, which no ignore entry names. Quantize every expert, "
                "or serve with a recent vLLM and Qwen-style names");
        if (f.asymmetric_experts)
            w.push_back(
                "compressed-tensors asymmetric MoE: transformers (v5, whose MoE models hold the experts as fused 3-D "
                "parameters) cannot load these experts. Its fused-expert decompression (integrations/compressed_tensors.py DecompressExperts, components of "
                "_EXPERT_COMPONENTS_BY_FORMAT[\"pack-quantized\"] = weight_packed, weight_scale, weight_shape) never "
                "collects weight_zero_point, and compressed-tensors' PackedQuantizationCompressor.decompress asserts "
                "a zero point for an asymmetric scheme. vLLM loads them (CompressedTensorsWNA16MarlinMoEMethod "
                "registers w13/w2_weight_zero_point); SGLang's CompressedTensorsWNA16MoE asserts a symmetric scheme. "
                "For transformers and SGLang use a symmetric scheme");
    }

    static void vllm_layer_warnings(const serving_facts& f, std::vector<std::string>& w) {
        if (f.lm_head)
            w.push_back("quantized lm_head loads only in vLLM with PR #37291 (merged 2026-03-30; v0.19.0 at the earliest): "
                        "older CompressedTensorsConfig.get_quant_method handles LinearBase, Attention and FusedMoE only and "
                        "builds a dense head that cannot take lm_head.weight_packed");
    }

    /// The config states one actorder for a config group: once a module is act-order, every
    /// module carries this tensor (the identity where it has no g_idx of its own).
    static constexpr std::string_view act_order_g_idx = ".weight_g_idx";

    /// A repack keeps 16-bit scales in the model's dtype (it keeps scales in the checkpoint's
    /// dtype, formats.md 4.1), F16 for any other model dtype.
    static dtype repack_scale_dtype(dtype model) noexcept {
        return model == dtype::F16 || model == dtype::BF16 ? model : dtype::F16;
    }

    /// Why compressed-tensors cannot hold a [n x k] weight under `s` (n is free: rows pack alone).
    static std::optional<std::string> refusal(std::int64_t /*n*/, std::int64_t k, const layout_scheme& s) {
        if (auto why = detail::ct_scale_refusal(s, true)) return why;
        const std::int64_t g = detail::effective_group(s.group_size, k);
        if (k % g != 0)
            return "vLLM's WNA16 kernels need whole groups: K=" + std::to_string(k) + " is not a multiple of group " +
                   std::to_string(g) + " (use --group -1 for per-channel)";
        return std::nullopt;
    }

    template <class F>
    static decltype(auto) with_layout(const layout_request& r, F&& f) {
        return with_ct_layout(r.bits, ct_options{static_cast<ct_packing>(r.packing), r.checkpoint}, std::forward<F>(f));
    }

    /// Every layer's scheme, whatever its width (ct_config). With act-order every module
    /// carries weight_g_idx (formats.md 4.1, actorder "group").
    static json config(std::span<const linear_entry> linears, const layout_request& r) {
        json c = with_layout(r, [&](const auto& layout) { return ct_config(linears, layout.options()); });
        if (r.desc_act)
            for (json_member& g : c.at("config_groups").as_object()) g.value.at("weights").set("actorder", "group");
        return c;
    }

    /// The tensors of `q` (act-order included): the layout writes contiguous groups, and
    /// act-order is the same words plus `weight_g_idx` (compressed-tensors actorder "group",
    /// formats.md 4.1), which the codes' packing does not depend on.
    static std::vector<owned_tensor> pack(const quantized_tensor& q, std::string_view prefix, const layout_request& r) {
        quantized_tensor contiguous_view;
        const quantized_tensor* src = &q;
        if (!q.g_idx.empty()) {
            contiguous_view = q;
            contiguous_view.g_idx.clear();
            src = &contiguous_view;
        }
        auto out = with_layout(r, [&](const auto& layout) { return layout.pack(*src, prefix); });
        if (!q.g_idx.empty())
            out.push_back(detail::make_tensor(std::string(prefix) + std::string(act_order_g_idx), dtype::I32, {q.cols}, q.g_idx));
        return out;
    }

    static std::vector<side_file> side_files(std::span<const linear_entry>, const layout_request&) { return {}; }
};

}  // namespace qforge
