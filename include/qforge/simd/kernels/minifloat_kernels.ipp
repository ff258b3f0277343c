// Minifloat kernels, written once over one ISA's float primitives (vf, vabs, vdiv, vround,
// mf_* of simd/arch/<isa>.hpp); their contract is simd/minifloat_kernels.hpp.
//
// No include guard on purpose: simd/minifloat_kernels.hpp has simd/detail/instantiate.ipp
// compile it inside each ISA's namespace with QFORGE_KFN that ISA's target attribute + inline.
// Every step is exact (comparisons, sums of small integers, products by powers of two,
// IEEE division and round-to-nearest-even), so each ISA gives the scalar instance's bytes as
// long as its primitives match scalar.hpp's definitions. No lambdas: a lambda would not
// inherit the target attribute its primitives need.

namespace minifloat_family {

// E2M1 of a = min(|q|, 6) (NaN stays NaN and counts 0): the E2M1 magnitudes are the
// multiples of 0.5 below 2, of 1 in [2, 4) and of 2 in [4, 6], so the code rounds a to its
// binade's step, half to even (a value that rounds up to the binade's end is the next binade's
// first value, with the index that continues the count): index = offset + RNE(a * steps),
// magnitude = RNE(a * steps) / steps, both exact (powers of two). These are the thresholds
// 0.25 <, 0.75 <=, 1.25 <, 1.75 <=, 2.5 <, 3.5 <=, 5 < of float_to_e2m1 and compressed-tensors'
// cast_to_fp4, in half the operations of counting them.
struct e2m1_lanes {
    vf index;      // 0..7
    vf magnitude;  // e2m1_to_float(index)
};
QFORGE_KFN e2m1_lanes e2m1_of(vf a) noexcept {
    const vf two = vset(2.0f), four = vset(4.0f), zero = vset(0.0f);
    const vf steps = vsel_ge(a, four, vset(0.5f), vsel_ge(a, two, vset(1.0f), two));
    const vf width = vsel_ge(a, four, two, vsel_ge(a, two, vset(1.0f), vset(0.5f)));
    const vf offset = vsel_ge(a, four, four, vsel_ge(a, two, two, zero));
    const vf n = vround(vmul(a, steps));
    return {vsel_ge(a, a, vadd(offset, n), zero), vsel_ge(a, a, vmul(n, width), zero)};  // a >= a fails only for NaN
}

// One vector of a group: its codes (index + 8 for a set sign bit), and the SNR lanes.
QFORGE_KFN vf e2m1_block(const float* x, vf s, vf m, e2m1_op op, vf* signal, vf* error) noexcept {
    const vf xv = vload(x);
    const vf q = op == e2m1_op::divide ? vdiv(xv, s) : vmul(xv, s);
    const e2m1_lanes e = e2m1_of(vmin(vset(6.0f), vabs(q)));  // second operand when unordered: NaN stays
    if (signal) {
        // |x| - |dq| is the negation of x - dq when the signs agree, so its square is the same.
        const vf d = vsub(vabs(xv), vmul(e.magnitude, m));
        *signal = vadd(*signal, vmul(xv, xv));
        *error = vadd(*error, vmul(d, d));
    }
    return vadd(e.index, mf_sign_as(q, vset(8.0f)));
}

// E4M3 of one vector, in the integer domain of its bit patterns. `x` gives the sign and
// NaN-ness, `a` the magnitude to encode (|x|, or |x| already rounded to the quotient's dtype;
// whatever it holds in a NaN lane is ignored). For a >= 2^-6 (E4M3's normals) the float's
// exponent and top three mantissa bits are the code once the low 20 bits round half to even:
// (bits + 0x7FFFF + bit 20) >> 20, less the rebias (127 - 7) * 8; a carry out of the mantissa
// is the next binade's first code, as float_to_e4m3's increment is. Below, the subnormals step
// by 2^-9: a + 2^14 has ulp 2^-9, so the float adder rounds a to its step half to even, and the
// sum's bits less 2^14's are the code 0..8 (8 is 2^-6, the first normal). Codes above 126
// (464 and beyond rounds to 480, and infinity) saturate to 126 (+-448); NaN gives 127; the
// sign bit goes on top. The magnitude the code decodes to is the rounded bits with their low
// 20 cleared (normals) or the sum less 2^14 (subnormals), at most 448; NaN for NaN.
struct e4m3_lanes {
    vf code;       // 0..255 as each lane's u32 bit pattern (mb_store_bytes stores it)
    vf magnitude;  // |e4m3_to_float(code)|
};
QFORGE_KFN e4m3_lanes e4m3_of(vf x, vf a) noexcept {
    const vf xa = vabs(x);
    const vf rounded = mb_add(mb_add(a, mb_set(0x7FFFFu)), mb_and(mb_srl<20>(a), mb_set(1u)));
    const vf sum = vadd(a, vset(0x1p14f));
    const vf n = vsel_ge(a, vset(0x1p-6f), mb_sub(mb_srl<20>(rounded), mb_set(960u)), mb_sub(sum, mb_set(0x46800000u)));
    const vf code = vsel_ge(xa, xa, mb_min(n, mb_set(126u)), mb_set(127u));  // xa >= xa fails only for NaN
    const vf step = vsel_ge(a, vset(0x1p-6f), mb_and(rounded, mb_set(0xFFF00000u)), vsub(sum, vset(0x1p14f)));
    const vf mag = vsel_ge(xa, xa, vmin(step, vset(448.0f)), xa);
    return {mb_or(code, mb_and(mb_srl<24>(x), mb_set(0x80u))), mag};
}
QFORGE_KFN e4m3_lanes e4m3_of(vf x) noexcept { return e4m3_of(x, vabs(x)); }

// One element of k_e4m3_row through the definitions (tails, F16 quotients).
QFORGE_KFN void e4m3_one(float x, float m, dtype quotient, std::size_t t, std::uint8_t* code, double* snr) noexcept {
    float q = x / m;
    if (quotient == dtype::BF16) q = bf16_to_float(float_to_bf16(q));
    else if (quotient == dtype::F16) q = fp16_to_float(float_to_fp16(q));
    *code = ::qforge::float_to_e4m3(q);
    if (snr) {
        const double xd = x, e = xd - static_cast<double>(no_contract(::qforge::e4m3_to_float(*code) * m));
        snr[t % 4] += no_contract(xd * xd);
        snr[4 + t % 4] += no_contract(e * e);
    }
}

QFORGE_KFN void k_group_amax(const float* x, std::size_t n, std::size_t gsize, float* amax) noexcept {
    for (std::size_t g = 0; g < n / gsize; ++g) {
        const float* xg = x + g * gsize;
        vf acc = vabs(vload(xg));
        for (std::size_t i = lanes; i < gsize; i += lanes) acc = vmax(acc, vabs(vload(xg + i)));
        amax[g] = vhmax(acc);
    }
}

QFORGE_KFN void k_e4m3_encode(const float* x, std::size_t n, std::uint8_t* codes) noexcept {
    std::size_t i = 0;
    for (; i + lanes <= n; i += lanes) mb_store_bytes(codes + i, e4m3_of(vload(x + i)).code);
    for (; i < n; ++i) codes[i] = ::qforge::float_to_e4m3(x[i]);  // the definition itself
}

QFORGE_KFN float k_abs_max(const float* x, std::size_t n) noexcept {
    std::size_t i = 0;
    float top = 0.0f;
    if (n >= lanes) {
        vf acc = vabs(vload(x));
        for (i = lanes; i + lanes <= n; i += lanes) acc = vmax(acc, vabs(vload(x + i)));
        top = vhmax(acc);
    }
    for (; i < n; ++i) top = std::fabs(x[i]) > top ? std::fabs(x[i]) : top;
    return top;
}

// One dtype's vector load from raw bytes (the group kernels' to_f32 widenings).
template <int T>
QFORGE_KFN vf bytes_load(const std::byte* p) noexcept {
    if constexpr (T == 0) return vload_f32_bytes(p);
    else if constexpr (T == 1) return vload_f16_bytes(p);
    else return vload_bf16_bytes(p);
}

// One element of a weight row in `type` (F32, F16, BF16) as a float.
template <int T>
QFORGE_KFN float bytes_at(const std::byte* src, std::size_t i) noexcept {
    if constexpr (T == 0) {
        float v;
        std::memcpy(&v, src + i * 4, 4);
        return v;
    } else {
        std::uint16_t h;
        std::memcpy(&h, src + i * 2, 2);
        return T == 1 ? fp16_to_float(h) : bf16_to_float(h);
    }
}

// Block by block (its own divisor); within a block whole vectors, then the tail element by
// element, each element to SNR partial (offset in block) % 4 in increasing offset, so every
// ISA sums in the same order. The weight's bytes are widened as they are read (no float row).
// Whole vectors of one block; returns how many elements they took. The quotient's rounding
// and the SNR are template choices, so the loop carries no test of either.
template <int T, bool Bf16, bool Snr>
QFORGE_KFN std::size_t e4m3_vectors(const std::byte* src, std::size_t len, float mb, std::uint8_t* codes, double* snr) noexcept {
    constexpr std::size_t es = T == 0 ? 4 : 2;
    const vf mv = vset(mb);
    snr_acc acc{};
    if constexpr (Snr) acc = snr_load(snr);
    std::size_t t = 0;
    for (; t + lanes <= len; t += lanes) {
        const vf xv = bytes_load<T>(src + t * es);
        const vf q = vdiv(xv, mv);
        const e4m3_lanes e = e4m3_of(q, Bf16 ? mf_round_bf16(vabs(q)) : vabs(q));
        mb_store_bytes(codes + t, e.code);
        // |x| and |dq| carry the same sign, so the error's square is x - dq's.
        if constexpr (Snr) acc = snr_add(acc, vabs(xv), vmul(e.magnitude, mv));
    }
    if constexpr (Snr) snr_store(snr, acc);
    return t;
}

template <int T, bool Bf16, bool Snr>
QFORGE_KFN void e4m3_row_t(const std::byte* src, std::size_t n, std::size_t bc, const float* m, dtype quotient,
                           std::uint8_t* codes, double* snr) noexcept {
    constexpr std::size_t es = T == 0 ? 4 : 2;
    for (std::size_t b0 = 0, blk = 0; b0 < n; b0 += bc, ++blk) {
        const std::size_t len = bc < n - b0 ? bc : n - b0;
        std::size_t t = 0;
        if (quotient != dtype::F16) t = e4m3_vectors<T, Bf16, Snr>(src + b0 * es, len, m[blk], codes + b0, snr);
        for (; t < len; ++t) e4m3_one(bytes_at<T>(src, b0 + t), m[blk], quotient, t, codes + b0 + t, snr);
    }
}

template <int T>
QFORGE_KFN void e4m3_row_of(const std::byte* src, std::size_t n, std::size_t bc, const float* m, dtype quotient,
                            std::uint8_t* codes, double* snr) noexcept {
    const bool bf16 = quotient == dtype::BF16;
    if (bf16 && snr) e4m3_row_t<T, true, true>(src, n, bc, m, quotient, codes, snr);
    else if (bf16) e4m3_row_t<T, true, false>(src, n, bc, m, quotient, codes, snr);
    else if (snr) e4m3_row_t<T, false, true>(src, n, bc, m, quotient, codes, snr);
    else e4m3_row_t<T, false, false>(src, n, bc, m, quotient, codes, snr);
}

QFORGE_KFN void k_e4m3_row(const std::byte* src, dtype type, std::size_t n, std::size_t bc, const float* m, dtype quotient,
                           std::uint8_t* codes, double* snr) noexcept {
    if (type == dtype::F32) e4m3_row_of<0>(src, n, bc, m, quotient, codes, snr);
    else if (type == dtype::F16) e4m3_row_of<1>(src, n, bc, m, quotient, codes, snr);
    else e4m3_row_of<2>(src, n, bc, m, quotient, codes, snr);
}

// Two vectors a step (one nibble-pair store); a group spans whole vectors (gsize % 16 == 0),
// and its SNR lanes are the accumulators of its vectors' positions within the group.
QFORGE_KFN void k_e2m1_groups(const float* x, std::size_t n, std::size_t gsize, const float* s, e2m1_op op,
                              const float* m, std::uint8_t* packed, float* signal, float* error) noexcept {
    constexpr std::size_t most = max_e2m1_group / lanes > 0 ? max_e2m1_group / lanes : 1;
    const std::size_t per_group = gsize / lanes;
    vf sig[most], err[most];
    const bool sums = signal != nullptr;
    for (std::size_t b = 0; b < per_group && sums; ++b) {
        sig[b] = vload(signal + b * lanes);
        err[b] = vload(error + b * lanes);
    }
    std::size_t i = 0;
    for (; i + 2 * lanes <= n; i += 2 * lanes) {
        const std::size_t g0 = i / gsize, b0 = (i % gsize) / lanes;
        const std::size_t g1 = (i + lanes) / gsize, b1 = ((i + lanes) % gsize) / lanes;
        const vf lo = e2m1_block(x + i, vset(s[g0]), vset(m[g0]), op, sums ? &sig[b0] : nullptr, sums ? &err[b0] : nullptr);
        const vf hi =
            e2m1_block(x + i + lanes, vset(s[g1]), vset(m[g1]), op, sums ? &sig[b1] : nullptr, sums ? &err[b1] : nullptr);
        mf_store_nibbles(packed + i / 2, lo, hi);
    }
    if (i < n) {  // one vector left (16-lane ISAs, n an odd multiple of 16)
        const std::size_t g = i / gsize, b = (i % gsize) / lanes;
        const vf lo = e2m1_block(x + i, vset(s[g]), vset(m[g]), op, sums ? &sig[b] : nullptr, sums ? &err[b] : nullptr);
        std::uint8_t tmp[lanes];
        mf_store_nibbles(tmp, lo, vset(0.0f));
        std::memcpy(packed + i / 2, tmp, lanes / 2);
    }
    for (std::size_t b = 0; b < per_group && sums; ++b) {
        vstore(signal + b * lanes, sig[b]);
        vstore(error + b * lanes, err[b]);
    }
}

// Straight from the weight's bytes, without the float row to_f32 would store: a max is
// order-free, so whole vectors then the tail element by element give every ISA one answer.
template <int T>
QFORGE_KFN bool block_abs_max_t(const std::byte* src, std::size_t n, std::size_t bc, float* amax) noexcept {
    constexpr std::size_t es = T == 0 ? 4 : 2;
    bool bad = false;
    for (std::size_t b0 = 0, blk = 0; b0 < n; b0 += bc, ++blk) {
        const std::size_t len = bc < n - b0 ? bc : n - b0;
        std::size_t t = 0;
        float top = amax[blk];
        if (len >= lanes) {
            vf acc = vset(top);
            for (; t + lanes <= len; t += lanes) {
                const vf v = bytes_load<T>(src + (b0 + t) * es);
                bad |= vany_nonfinite(v);
                acc = vmax(acc, vabs(v));
            }
            top = vhmax(acc);
        }
        for (; t < len; ++t) {
            float v;
            if constexpr (T == 0) std::memcpy(&v, src + (b0 + t) * 4, 4);
            else {
                std::uint16_t h;
                std::memcpy(&h, src + (b0 + t) * 2, 2);
                v = T == 1 ? fp16_to_float(h) : bf16_to_float(h);
            }
            bad |= !(std::fabs(v) <= 3.40282347e38f);
            top = std::fabs(v) > top ? std::fabs(v) : top;
        }
        amax[blk] = top;
    }
    return bad;
}

QFORGE_KFN bool k_block_abs_max(const std::byte* src, dtype type, std::size_t n, std::size_t bc, float* amax) noexcept {
    if (type == dtype::F32) return block_abs_max_t<0>(src, n, bc, amax);
    if (type == dtype::F16) return block_abs_max_t<1>(src, n, bc, amax);
    return block_abs_max_t<2>(src, n, bc, amax);
}

// One NVFP4 group scale through the definitions (tails, F16 weights, an infinite global).
QFORGE_KFN void nvfp4_scale_one(float amax, float global, dtype values, std::uint8_t* code, float* mult) noexcept {
    float q = amax / 6.0f;
    if (values == dtype::BF16) q = bf16_to_float(float_to_bf16(q));
    else if (values == dtype::F16) q = fp16_to_float(float_to_fp16(q));
    float v = global * q;
    v = v < -448.0f ? -448.0f : (448.0f < v ? 448.0f : v);  // std::clamp: NaN stays
    std::uint8_t c = ::qforge::float_to_e4m3(v);
    if (::qforge::e4m3_to_float(c) == 0.0f) c = ::qforge::float_to_e4m3(0.125f);
    *code = c;
    *mult = ::qforge::e4m3_to_float(c) / global;
}

// Whole vectors of groups when the quotients are exact in lanes (F32, BF16) and the global is
// finite (then global * q is finite and >= 0: only the upper clamp acts); a code that decodes
// to zero has magnitude 0, the next one up 2^-9.
QFORGE_KFN void k_nvfp4_scales(const float* amax, std::size_t groups, float global, dtype values, std::uint8_t* codes,
                               float* mult) noexcept {
    std::size_t g = 0;
    if (values != dtype::F16 && global <= 3.40282347e38f) {
        const vf gv = vset(global), six = vset(6.0f), cap = vset(448.0f), tiny = vset(0x1p-10f);
        const vf eighth = vset(0.125f), eighth_code = mb_set(::qforge::float_to_e4m3(0.125f));
        for (; g + lanes <= groups; g += lanes) {
            vf q = vdiv(vload(amax + g), six);
            if (values == dtype::BF16) q = mf_round_bf16(q);
            const e4m3_lanes e = e4m3_of(vmin(cap, vmul(gv, q)));
            mb_store_bytes(codes + g, vsel_ge(e.magnitude, tiny, e.code, eighth_code));
            vstore(mult + g, vdiv(vsel_ge(e.magnitude, tiny, e.magnitude, eighth), gv));
        }
    }
    for (; g < groups; ++g) nvfp4_scale_one(amax[g], global, values, codes + g, mult + g);
}

}  // namespace minifloat_family

template <>
QFORGE_DECL const minifloat_kernels& family_table<minifloat_kernels>() noexcept {
    static constexpr minifloat_kernels table{QFORGE_KERNEL_ISA, &minifloat_family::k_group_amax,
                                             &minifloat_family::k_e4m3_encode, &minifloat_family::k_e2m1_groups, &minifloat_family::k_abs_max,
                                             &minifloat_family::k_e4m3_row, &minifloat_family::k_block_abs_max,
                                             &minifloat_family::k_nvfp4_scales};
    return table;
}
