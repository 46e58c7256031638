// The online softmax of both attention kernels, on the accumulator layout they share: mma.sync's
// m16n8 tiles and wgmma's m64nN (a warp's 16 rows of it) give each thread, per 8-column tile,
// columns 2 (lane % 4) + {0, 1} of row lane / 4 (elements 0, 1) and of row lane / 4 + 8
// (elements 2, 3). A block of scores is float[TILES][4]: TILES tiles of 8 keys.
#pragma once

#include "common/tile_primitives.cuh"

namespace tilesmith {

// The four lanes of a quad hold one row.
__device__ __forceinline__ float quad_max(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 1));
  return fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 2));
}
__device__ __forceinline__ float quad_sum(float value) {
  value += __shfl_xor_sync(0xffffffffu, value, 1);
  return value + __shfl_xor_sync(0xffffffffu, value, 2);
}

__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }

// Scores to log2 units (scale * log2 e), then -inf where a key is past seq_k or, causal, past
// the row's diagonal. `row` is this thread's first row (elements 0, 1), `key0` the block's first
// key; only blocks on an edge (`edge`) pay for the comparisons.
template <int TILES, int CAUSAL>
__device__ __forceinline__ void scale_and_mask(float (&s)[TILES][4], float scale_log2, bool edge,
                                               int row, int key0, int seq_k, int diagonal) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float value = s[t][e] * scale_log2;
      if (edge) {
        const int key = key0 + t * 8 + 2 * (lane % 4) + e % 2;
        if (key >= seq_k || (CAUSAL && key > row + (e / 2) * 8 + diagonal)) value = negative_infinity();
      }
      s[t][e] = value;
    }
}

// One row (r = 0: elements 0, 1; r = 1: elements 2, 3) of a block of scaled scores through the
// online softmax: the scores become exp2(score - max), the running max and this thread's share
// of the running sum move on, and the factor the row's output so far must be scaled by is
// returned.
template <int TILES>
__device__ __forceinline__ float online_softmax_row(float (&s)[TILES][4], int r, float& row_max,
                                                    float& row_sum) {
  float block_max = negative_infinity();
#pragma unroll
  for (int t = 0; t < TILES; ++t) block_max = fmaxf(block_max, fmaxf(s[t][2 * r], s[t][2 * r + 1]));
  const float new_max = fmaxf(row_max, quad_max(block_max));
  // A row that has seen only masked keys keeps -inf; 0 keeps exp2 from making NaN.
  const float shift = new_max == negative_infinity() ? 0.f : new_max;
  const float rescale = exp2f(row_max - shift);
  row_max = new_max;
  float sum = 0.f;
#pragma unroll
  for (int t = 0; t < TILES; ++t)
#pragma unroll
    for (int e = 2 * r; e < 2 * r + 2; ++e) {
      s[t][e] = exp2f(s[t][e] - shift);
      sum += s[t][e];
    }
  row_sum = row_sum * rescale + sum;
  return rescale;
}

// Keys 16 kt .. 16 kt + 15 of a block of probabilities as the A operand of the next product
// (m16n8k16's A fragment, which wgmma's register form reads too).
template <int KIND, int TILES>
__device__ __forceinline__ void probability_fragment(const float (&s)[TILES][4], int kt, unsigned (&a)[4]) {
  a[0] = pack2<KIND>(s[2 * kt][0], s[2 * kt][1]);
  a[1] = pack2<KIND>(s[2 * kt][2], s[2 * kt][3]);
  a[2] = pack2<KIND>(s[2 * kt + 1][0], s[2 * kt + 1][1]);
  a[3] = pack2<KIND>(s[2 * kt + 1][2], s[2 * kt + 1][3]);
}

// A finished row: 1 / its sum (0 for a row that saw no key, whose output is then 0), and its
// logsumexp in natural units (-inf for that row). `row_sum` is this thread's share.
__device__ __forceinline__ float finish_row(float row_max, float row_sum, float& lse) {
  const float sum = quad_sum(row_sum);
  lse = sum > 0.f ? (row_max + __log2f(sum)) * 0.6931471805599453f : negative_infinity();
  return sum > 0.f ? 1.f / sum : 0.f;
}

}  // namespace tilesmith
