// The word formats of the integer layouts, for code outside layout/ that reads or writes
// packed words itself (convert/'s checkpoint readers and word-level repacks).
//
//   dense   one LSB-first bitstream of b-bit codes, dense_words(count, b) words
//           (GPTQ, compressed-tensors >= 0.18)
//   padded  floor(32/b) fields per word, top bits zero, padded_words(count, b) words
//           (compressed-tensors <= 0.17); the same words as dense for b in {2, 4, 8}
//   awq4    AutoAWQ GEMM's eight interleaved nibbles per word
//
// The kernels themselves, and what each guarantees, are layout/detail/pack_bits.hpp; this
// header is the part of them other layers may name. Every function is noexcept and trusts its
// arguments: callers check shapes, and a stray-bits test, before they unpack.
#pragma once

#include "qforge/layout/detail/pack_bits.hpp"

namespace qforge::packing {

using detail::dense_words;
using detail::padded_words;

using detail::pack_dense;
using detail::unpack_dense;
using detail::pack_padded;
using detail::unpack_padded;
using detail::dense_has_stray_bits;
using detail::padded_has_stray_bits;

using detail::pack_awq4;
using detail::unpack_awq4;

}  // namespace qforge::packing
