// The trusted reference of attention.cuh: every score materialized in fp32, a chunk of 256 keys
// at a time for 8 query rows per CTA, exact exponentials of the scaled scores against a running
// max. p.o is the fp32 reference buffer, laid out with p.o_strides; then p.lse.
#pragma once

#include "attention/attention_params.h"
#include "common/elementwise.cuh"

namespace tilesmith {

template <int KIND, int CAUSAL>
__global__ void __launch_bounds__(256) attention_reference(const AttentionParams p) {
  constexpr int ROWS = 8, KEYS = 256;  // KEYS = threads, and the largest head dim
  __shared__ float q_rows[ROWS][KEYS];
  __shared__ float scores[ROWS][KEYS];
  __shared__ float warp_max[ROWS][KEYS / 32];
  const float negative_infinity = __int_as_float(0xff800000);
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int batch_head = blockIdx.y, batch = batch_head / p.heads, head = batch_head % p.heads;
  const int kv_head = head / (p.heads / p.kv_heads);
  const long long q_base = batch * p.q_strides.batch + head * p.q_strides.head;
  const long long k_base = batch * p.k_strides.batch + kv_head * p.k_strides.head;
  const long long v_base = batch * p.v_strides.batch + kv_head * p.v_strides.head;
  const int row0 = blockIdx.x * ROWS;
  const int diagonal = p.seq_k - p.seq_q;
  auto visible_keys = [&](int row) {  // keys 0 .. visible - 1 count for query `row`
    if (row >= p.seq_q) return 0;
    return CAUSAL ? max(0, min(p.seq_k, row + diagonal + 1)) : p.seq_k;
  };

  for (int i = t; i < ROWS * p.head_dim; i += blockDim.x) {
    const int r = i / p.head_dim, d = i % p.head_dim;
    q_rows[r][d] = row0 + r < p.seq_q
                       ? load_as_float<KIND>(p.q, q_base + (row0 + r) * p.q_strides.row + d)
                       : 0.f;
  }
  __syncthreads();

  const int keys = visible_keys(min(row0 + ROWS, p.seq_q) - 1);  // the last row sees the most
  float running_max[ROWS], sum[ROWS], acc[ROWS];
  for (int r = 0; r < ROWS; ++r) {
    running_max[r] = negative_infinity;
    sum[r] = acc[r] = 0.f;
  }
  for (int key0 = 0; key0 < keys; key0 += KEYS) {
    const int key = key0 + t;
    float dot[ROWS] = {};
    if (key < keys)
      for (int d = 0; d < p.head_dim; ++d) {
        const float kd = load_as_float<KIND>(p.k, k_base + key * p.k_strides.row + d);
        for (int r = 0; r < ROWS; ++r) dot[r] += q_rows[r][d] * kd;
      }
    for (int r = 0; r < ROWS; ++r) {
      const float score = key < visible_keys(row0 + r) ? dot[r] * p.scale : negative_infinity;
      scores[r][t] = score;
      float m = score;
      for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
      if (lane == 0) warp_max[r][warp] = m;
    }
    __syncthreads();
    float shift[ROWS];
    for (int r = 0; r < ROWS; ++r) {
      float chunk_max = negative_infinity;
      for (int w = 0; w < KEYS / 32; ++w) chunk_max = fmaxf(chunk_max, warp_max[r][w]);
      const float new_max = fmaxf(running_max[r], chunk_max);
      shift[r] = new_max == negative_infinity ? 0.f : new_max;
      const float rescale = expf(running_max[r] - shift[r]);
      acc[r] *= rescale;
      sum[r] *= rescale;
      running_max[r] = new_max;
    }
    const int count = min(KEYS, keys - key0);
    for (int i = 0; i < count; ++i) {
      const float vd =
          t < p.head_dim ? load_as_float<KIND>(p.v, v_base + (key0 + i) * p.v_strides.row + t) : 0.f;
      for (int r = 0; r < ROWS; ++r) {
        const float weight = expf(scores[r][i] - shift[r]);
        sum[r] += weight;
        acc[r] += weight * vd;
      }
    }
    __syncthreads();  // scores and warp_max are rewritten by the next chunk
  }

  float* out = static_cast<float*>(p.o);
  for (int r = 0; r < ROWS; ++r) {
    const int row = row0 + r;
    if (row >= p.seq_q) break;
    if (t < p.head_dim)
      out[batch * p.o_strides.batch + head * p.o_strides.head + row * p.o_strides.row + t] =
          sum[r] > 0.f ? acc[r] / sum[r] : 0.f;
    if (t == 0 && p.lse != nullptr)
      p.lse[static_cast<long long>(batch_head) * p.seq_q + row] =
          sum[r] > 0.f ? running_max[r] + logf(sum[r]) : negative_infinity;
  }
}

}  // namespace tilesmith
