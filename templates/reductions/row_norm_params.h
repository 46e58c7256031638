// The by-value argument of the row kernels (row_norm.cuh) and their reference, and the codes of
// their template arguments. Included by the kernel source (NVRTC) and by the host descriptor.
#pragma once

#include "common/activation.h"

namespace tilesmith {

// OP template argument: what is computed over each row of `cols` elements.
enum RowOp {
  kRowSoftmax = 0,  // y = exp(x - max) / sum(exp(x - max))
  kRowLayerNorm = 1,  // y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + epsilon)
  kRowRmsNorm = 2,    // y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + epsilon)
};

// FLAGS template argument: an activation after the norm (bits 0-1, ActivationCode) and which of
// the optional tensors are present.
enum RowFlags {
  kRowWeight = 4,     // weight: cols elements of x's type
  kRowBias = 8,       // bias: cols elements of x's type (layernorm)
  kRowResidual = 16,  // y = act(norm(x)) + residual; residual of y's type, rows residual_stride apart
  kRowStats = 32,     // writes mean (layernorm) and rstd per row, fp32
};

struct RowParams {
  const void* x;
  void* y;
  const void* weight;
  const void* bias;
  const void* residual;
  float* mean;
  float* rstd;
  long long rows;
  long long x_stride, y_stride, residual_stride;  // elements from one row to the next
  int cols;
  float epsilon;
};

}  // namespace tilesmith
