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

// E2M1 of a = min(|q|, 6) (NaN stays NaN and counts 0): the code's magnitude index is the
// number of the seven rounding thresholds a passes (each midpoint goes to the even code, as
// float_to_e2m1 and compressed-tensors' cast_to_fp4 round), and the magnitude itself the sum
// of the steps between the values 0, 0.5, 1, 1.5, 2, 3, 4, 6.
struct e2m1_lanes {
    vf index;      // 0..7
    vf magnitude;  // e2m1_to_float(index)
};
QFORGE_KFN e2m1_lanes e2m1_of(vf a) noexcept {
    const vf c1 = mf_gt01(a, vset(0.25f)), c2 = mf_ge01(a, vset(0.75f)), c3 = mf_gt01(a, vset(1.25f));
    const vf c4 = mf_ge01(a, vset(1.75f)), c5 = mf_gt01(a, vset(2.5f)), c6 = mf_ge01(a, vset(3.5f));
    const vf c7 = mf_gt01(a, vset(5.0f));
    const vf low = vadd(vadd(c1, c2), vadd(c3, c4)), mid = vadd(c5, c6);
    return {vadd(vadd(low, mid), c7), vadd(vadd(vmul(low, vset(0.5f)), mid), vadd(c7, c7))};
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

// E4M3 of one vector: for |x| below 448, with e = max(floor(log2 |x|), -6) the value's
// exponent (the subnormals share -6), n = RNE(|x| * 2^(3 - e)) in [0, 16] counts its steps of
// 2^(e - 3) and the code is 8 (e + 7) + n - 8 (n = 16 carries into the next exponent, as the
// bit pattern's increment does); beyond, 126 (+-448); NaN 127; the sign bit on top. The
// magnitude the code decodes to is n * 2^(e - 3) (at most 448; NaN for NaN).
struct e4m3_lanes {
    vf code;       // 0..255
    vf magnitude;  // |e4m3_to_float(code)|
};
QFORGE_KFN e4m3_lanes e4m3_of(vf x) noexcept {
    const vf a = vabs(x);
    const vf e = vmax(mf_exponent(a), vset(-6.0f));
    const vf n = vround(vmul(a, mf_pow2(vsub(vset(3.0f), e))));
    const vf code = vadd(vmul(vadd(e, vset(7.0f)), vset(8.0f)), vsub(n, vset(8.0f)));
    const vf sat = vsel_ge(a, a, vmin(code, vset(126.0f)), vset(127.0f));  // a >= a fails only for NaN
    const vf mag = vsel_ge(a, a, vmin(vmul(n, mf_pow2(vsub(e, vset(3.0f)))), vset(448.0f)), a);
    return {vadd(sat, mf_sign_as(x, vset(128.0f))), mag};
}

// The quotient's rounding to the weight's dtype (BF16 here; F16 goes through the definition).
QFORGE_KFN vf round_bf16_keep_nan(vf q) noexcept {
    const vf a = vabs(q);
    return vsel_ge(a, a, mf_round_bf16(q), q);
}

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
    for (; i + lanes <= n; i += lanes) vstore_codes(codes + i, e4m3_of(vload(x + i)).code);
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

// Block by block (its own divisor); within a block whole vectors, then the tail element by
// element, each element to SNR partial (offset in block) % 4 in increasing offset, so every
// ISA sums in the same order.
QFORGE_KFN void k_e4m3_row(const float* x, std::size_t n, std::size_t bc, const float* m, dtype quotient,
                           std::uint8_t* codes, double* snr) noexcept {
    for (std::size_t b0 = 0, blk = 0; b0 < n; b0 += bc, ++blk) {
        const std::size_t len = bc < n - b0 ? bc : n - b0;
        const float mb = m[blk];
        std::size_t t = 0;
        if (quotient != dtype::F16) {
            const vf mv = vset(mb);
            snr_acc acc{};
            if (snr) acc = snr_load(snr);
            for (; t + lanes <= len; t += lanes) {
                const vf xv = vload(x + b0 + t);
                vf q = vdiv(xv, mv);
                if (quotient == dtype::BF16) q = round_bf16_keep_nan(q);
                const e4m3_lanes e = e4m3_of(q);
                vstore_codes(codes + b0 + t, e.code);
                // |x| and |dq| carry the same sign, so the error's square is x - dq's.
                if (snr) acc = snr_add(acc, vabs(xv), vmul(e.magnitude, mv));
            }
            if (snr) snr_store(snr, acc);
        }
        for (; t < len; ++t) e4m3_one(x[b0 + t], mb, quotient, t, codes + b0 + t, snr);
    }
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

// One dtype's vector load from raw bytes (the group kernels' to_f32 widenings).
template <int T>
QFORGE_KFN vf bytes_load(const std::byte* p) noexcept {
    if constexpr (T == 0) return vload_f32_bytes(p);
    else if constexpr (T == 1) return vload_f16_bytes(p);
    else return vload_bf16_bytes(p);
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

}  // namespace minifloat_family

template <>
inline const minifloat_kernels& family_table<minifloat_kernels>() noexcept {
    static constexpr minifloat_kernels table{QFORGE_KERNEL_ISA, &minifloat_family::k_group_amax,
                                             &minifloat_family::k_e4m3_encode, &minifloat_family::k_e2m1_groups, &minifloat_family::k_abs_max,
                                             &minifloat_family::k_e4m3_row, &minifloat_family::k_block_abs_max};
    return table;
}
