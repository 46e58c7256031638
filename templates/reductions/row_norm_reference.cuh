// The trusted reference of row_norm.cuh: a warp per row, every sum in fp64, two passes over
// global memory. p.y is the fp32 reference buffer: y (rows x cols, packed), then mean (layernorm
// with kRowStats), then rstd (with kRowStats), one value per row each.
#pragma once

#include "common/elementwise.cuh"
#include "reductions/row_norm_params.h"

namespace tilesmith {

template <int OP, int KIND_IN, int KIND_OUT, int FLAGS>
__global__ void row_norm_reference(const RowParams p) {
  const long long row = blockIdx.x * (long long)(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= p.rows) return;  // whole warps only
  const int cols = p.cols;
  const long long x_row = row * p.x_stride;
  auto x = [&](int col) { return (double)load_as_float<KIND_IN>(p.x, x_row + col); };
  auto warp_sum = [](double value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
  };
  double shift = 0, scale = 1;
  if (OP == kRowSoftmax) {
    double row_max = __longlong_as_double(0xfff0000000000000ll);  // -inf
    for (int col = lane; col < cols; col += 32) row_max = fmax(row_max, x(col));
    for (int offset = 16; offset > 0; offset /= 2)
      row_max = fmax(row_max, __shfl_xor_sync(0xffffffffu, row_max, offset));
    double sum = 0;
    for (int col = lane; col < cols; col += 32) sum += exp(x(col) - row_max);
    shift = row_max;
    scale = 1 / warp_sum(sum);
  } else if (OP == kRowLayerNorm) {
    double sum = 0;
    for (int col = lane; col < cols; col += 32) sum += x(col);
    shift = warp_sum(sum) / cols;
    double squares = 0;
    for (int col = lane; col < cols; col += 32) squares += (x(col) - shift) * (x(col) - shift);
    scale = 1 / sqrt(warp_sum(squares) / cols + (double)p.epsilon);
  } else {
    double squares = 0;
    for (int col = lane; col < cols; col += 32) squares += x(col) * x(col);
    scale = 1 / sqrt(warp_sum(squares) / cols + (double)p.epsilon);
  }
  float* out = static_cast<float*>(p.y);
  for (int col = lane; col < cols; col += 32) {
    double y = OP == kRowSoftmax ? exp(x(col) - shift) * scale : (x(col) - shift) * scale;
    if (FLAGS & kRowWeight) y *= load_as_float<KIND_IN>(p.weight, col);
    if (FLAGS & kRowBias) y += load_as_float<KIND_IN>(p.bias, col);
    y = activate<FLAGS & kActMask>((float)y);
    if (FLAGS & kRowResidual)
      y += load_as_float<KIND_OUT>(p.residual, row * p.residual_stride + col);
    out[row * cols + col] = (float)y;
  }
  if ((FLAGS & kRowStats) && lane == 0) {
    const long long stats = p.rows * (long long)cols;
    if (OP == kRowLayerNorm) {
      out[stats + row] = (float)shift;
      out[stats + p.rows + row] = (float)scale;
    } else {
      out[stats + row] = (float)scale;
    }
  }
}

}  // namespace tilesmith
