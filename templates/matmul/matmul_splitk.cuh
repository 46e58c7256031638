// Split-K's second launch: C = the sum of the fp32 partial products that the K slices of a
// matmul wrote to the workspace, through the epilogue, converted to C's type. Grids with fewer
// output tiles than SMs (1000^3 in 128x128 tiles, decode shapes, K-heavy 512x512x16384) split K
// so every SM works.
//
// launch: block 256 threads, grid up to 8 blocks per SM (a grid-stride loop covers the rest).
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_epilogue.cuh"
#include "matmul/matmul_sm90_params.h"

namespace tilesmith {

template <int KIND_OUT, int EPI>
__global__ void __launch_bounds__(256) splitk_reduce(const SplitKReduceParams p) {
  const long long matrix = static_cast<long long>(p.m) * p.n;
  const long long count = matrix * p.batch;  // one K slice's partial products
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < count; i += gridDim.x * 256ll) {
    float sum = 0.f;
    for (int s = 0; s < p.splits; ++s) sum += p.partials[s * count + i];
    const int batch = static_cast<int>(i / matrix);
    const long long in_matrix = i - batch * matrix;
    const int row = static_cast<int>(in_matrix / p.n), col = static_cast<int>(in_matrix % p.n);
    sum = epilogue_value<EPI, KIND_OUT>(p.epilogue, batch, row, col, sum);
    const long long at = batch * p.stride_c + static_cast<long long>(row) * p.ldc + col;
    if (KIND_OUT == kF32)
      static_cast<float*>(p.c)[at] = sum;
    else
      static_cast<half_bits*>(p.c)[at] = from_float<KIND_OUT>(sum);
  }
}

}  // namespace tilesmith
