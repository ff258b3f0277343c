// Readers for packed quantized checkpoints: GPTQ (v1/v2), AWQ GEMM and compressed-tensors
// `pack-quantized` (padded and dense packings). Each produces a quantized_tensor with no
// rounding: codes, zeros and scale patterns are the checkpoint's, moved, never recomputed.
//
// Each reader is its layout's one reader in its checkpoint mode (read_mode::checkpoint), so
// the layout's unpack and the repack run the same code: read_gptq (layout/gptq.hpp), read_awq
// (layout/awq.hpp), read_ct_packed (layout/compressed_tensors.hpp). Facts: formats.md 2 (GPTQ:
// AG `qlinear_cuda.py QuantLinear.pack`, GM `convert_gptq_v1_to_v2`), 3 (AWQ: AA `gemm.py
// WQLinear_GEMM`), 4.1-4.3 (CT `pack_quantized.py pack_to_int32`). The bit word formats are the
// layout layer's (layout/packing.hpp).
#pragma once

#include "qforge/convert/repack_ct_naive.hpp"
#include "qforge/core/tensor_source.hpp"
#include "qforge/layout/awq.hpp"
#include "qforge/layout/compressed_tensors.hpp"
#include "qforge/layout/gptq.hpp"
#include "qforge/layout/packing.hpp"
#include "qforge/quant/quantized_tensor.hpp"
