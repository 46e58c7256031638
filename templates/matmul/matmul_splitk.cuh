// Split-K's second launch: C = the sum of the fp32 partial products that the K slices of a
// matmul wrote to the workspace, converted to C's type. Grids with fewer output tiles than SMs
// (1000^3 in 128x128 tiles, decode shapes, K-heavy 512x512x16384) split K so every SM works.
//
// launch: block 256 threads, grid up to 8 blocks per SM (a grid-stride loop covers the rest).
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_sm90_params.h"

namespace tilesmith {

template <int KIND_OUT>
__global__ void __launch_bounds__(256) splitk_reduce(const SplitKReduceParams p) {
  const long long count = static_cast<long long>(p.m) * p.n;
  const long long slice = count;  // the partial products of one K slice: m x n, rows n apart
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < count; i += gridDim.x * 256ll) {
    float sum = 0.f;
    for (int s = 0; s < p.splits; ++s) sum += p.partials[s * slice + i];
    const long long row = i / p.n, col = i - row * p.n;
    if (KIND_OUT == kF32)
      static_cast<float*>(p.c)[row * p.ldc + col] = sum;
    else
      static_cast<half_bits*>(p.c)[row * p.ldc + col] = from_float<KIND_OUT>(sum);
  }
}

}  // namespace tilesmith
