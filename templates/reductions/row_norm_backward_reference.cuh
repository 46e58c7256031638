// The trusted reference of row_norm_backward.cuh, every sum in fp64: CTAs below
// `row_blocks` give a warp to each row and write dx; the CTAs after them give a thread to each
// column and write dweight and dbias over all rows. p.dx is the fp32 reference buffer: dx
// (rows x cols, packed), then dweight (with kRowWeight), then dbias (with kRowBias).
#pragma once

#include "common/elementwise.cuh"
#include "reductions/row_norm_params.h"

namespace tilesmith {

template <int OP, int KIND_IN, int KIND_OUT, int FLAGS>
__global__ void row_norm_backward_reference(const RowBackwardParams p) {
  constexpr int KIND_X = OP == kRowSoftmax ? KIND_OUT : KIND_IN;
  constexpr bool WEIGHT = OP != kRowSoftmax && (FLAGS & kRowWeight) != 0;
  constexpr bool BIAS = OP == kRowLayerNorm && (FLAGS & kRowBias) != 0;
  const int cols = p.cols;
  const long long row_blocks = (p.rows + 7) / 8;
  float* out = static_cast<float*>(p.dx);
  auto x = [&](long long row, int col) {
    return (double)load_as_float<KIND_X>(p.x, row * p.x_stride + col);
  };
  auto dy = [&](long long row, int col) {
    return (double)load_as_float<KIND_OUT>(p.dy, row * p.dy_stride + col);
  };
  auto xhat = [&](long long row, int col) {
    if (OP == kRowSoftmax) return x(row, col);
    const double shift = OP == kRowLayerNorm ? (double)p.mean[row] : 0.0;
    return (x(row, col) - shift) * (double)p.rstd[row];
  };
  auto g = [&](long long row, int col) {
    return WEIGHT ? dy(row, col) * load_as_float<KIND_IN>(p.weight, col) : dy(row, col);
  };

  if (blockIdx.x < row_blocks) {
    const long long row = blockIdx.x * 8ll + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= p.rows) return;  // whole warps only
    double sum_g = 0, sum_gx = 0;
    for (int col = lane; col < cols; col += 32) {
      sum_g += g(row, col);
      sum_gx += g(row, col) * xhat(row, col);
    }
    for (int offset = 16; offset > 0; offset /= 2) {
      sum_g += __shfl_xor_sync(0xffffffffu, sum_g, offset);
      sum_gx += __shfl_xor_sync(0xffffffffu, sum_gx, offset);
    }
    for (int col = lane; col < cols; col += 32) {
      double dx;
      if (OP == kRowSoftmax)
        dx = x(row, col) * (dy(row, col) - sum_gx);
      else if (OP == kRowRmsNorm)
        dx = p.rstd[row] * (g(row, col) - xhat(row, col) * sum_gx / cols);
      else
        dx = p.rstd[row] * (g(row, col) - sum_g / cols - xhat(row, col) * sum_gx / cols);
      out[row * cols + col] = (float)dx;
    }
    return;
  }
  const long long col = (blockIdx.x - row_blocks) * (long long)blockDim.x + threadIdx.x;
  if (col >= cols) return;
  double dweight = 0, dbias = 0;
  for (long long row = 0; row < p.rows; ++row) {
    dweight += dy(row, (int)col) * xhat(row, (int)col);
    dbias += dy(row, (int)col);
  }
  float* sums = out + p.rows * (long long)cols;
  if (WEIGHT) sums[col] = (float)dweight;
  if (BIAS) sums[(WEIGHT ? cols : 0) + col] = (float)dbias;
}

}  // namespace tilesmith
