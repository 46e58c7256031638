// The trusted reference of multi_sum.cuh: a warp per tensor, the sum in fp64, fp32 out.
#pragma once

#include "common/elementwise.cuh"
#include "reductions/multi_sum_params.h"

namespace tilesmith {

template <int KIND, int MEAN>
__global__ void multi_sum_reference(const MultiSumParams p) {
  const long long t = blockIdx.x * (blockDim.x / 32ll) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (t >= p.count) return;  // whole warps only
  const MultiSumEntry entry = p.table[t];
  double sum = 0;
  for (long long i = lane; i < entry.length; i += 32) sum += load_as_float<KIND>(entry.data, i);
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) static_cast<float*>(p.out)[t] = static_cast<float>(MEAN ? sum / entry.length : sum);
}

}  // namespace tilesmith
