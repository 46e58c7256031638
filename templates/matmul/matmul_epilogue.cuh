// The matmul epilogue, one definition for every matmul kernel and the reference: bias per
// column, then the activation, then the residual, on fp32 values before C's rounding.
#pragma once

#include "common/elementwise.cuh"
#include "matmul/matmul_params.h"

namespace tilesmith {

// The epilogue of element (row, col) of batch `batch`, whose accumulated value is `value`.
template <int EPI, int KIND_OUT>
__device__ __forceinline__ float epilogue_value(const MatmulEpilogueArgs& e, int batch, int row,
                                                int col, float value) {
  if (EPI & kEpilogueBias) value += load_as_float<KIND_OUT>(e.bias, col);
  value = activate<EPI & kActMask>(value);
  if (EPI & kEpilogueResidual)
    value += load_as_float<KIND_OUT>(
        e.residual, batch * e.stride_r + static_cast<long long>(row) * e.ldr + col);
  return value;
}

// The same for two neighbouring columns (col, col + 1) of one row; the second only where
// `second` (the pair may end at C's last column).
template <int EPI, int KIND_OUT>
__device__ __forceinline__ void epilogue_pair(const MatmulEpilogueArgs& e, int batch, int row,
                                              int col, bool second, float& v0, float& v1) {
  if (EPI == kActNone) return;
  v0 = epilogue_value<EPI, KIND_OUT>(e, batch, row, col, v0);
  if (second) v1 = epilogue_value<EPI, KIND_OUT>(e, batch, row, col + 1, v1);
}

// Columns (col, col + 1) of C as one store where `paired_store` vouches for the pair's
// alignment; the second only where `both_valid`.
template <int OUT_KIND>
__device__ __forceinline__ void store_pair(void* c, long long index, float x, float y,
                                           bool both_valid, bool paired_store) {
  if (OUT_KIND == kF32) {
    float* out = static_cast<float*>(c) + index;
    if (paired_store && both_valid) {
      *reinterpret_cast<float2*>(out) = make_float2(x, y);
    } else {
      out[0] = x;
      if (both_valid) out[1] = y;
    }
  } else {
    half_bits* out = static_cast<half_bits*>(c) + index;
    if (paired_store && both_valid) {
      *reinterpret_cast<unsigned*>(out) = pack2<OUT_KIND>(x, y);
    } else {
      out[0] = from_float<OUT_KIND>(x);
      if (both_valid) out[1] = from_float<OUT_KIND>(y);
    }
  }
}

}  // namespace tilesmith
