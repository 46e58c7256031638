// Matmul for a few rows of A (M <= 4) with B column-major (x @ W^T), sm_80+: each CTA reduces
// COLS whole rows of the weight W (stored n x k) along K, the access of a row reduction, which
// is what Inductor's kernel for M = 1 is (docs/perf/matmul.md v18): every thread reads 16
// contiguous bytes of each of the CTA's rows per chunk, so a warp reads 512 contiguous bytes of
// a row an instruction, and the CTAs are small and many (one or two rows each), so the SMs
// take them as they free up and no SM is left with a longer share of the weight.
//
// per thread: chunks of 8 k, THREADS x 8 k apart; UNROLL chunks of every row (W's and A's) are
//             loaded before their products, and the fp32 sums of its ROWS x COLS outputs kept.
// per CTA:    the sums reduced over each warp by shuffles, then over the warps through shared
//             memory; thread i < ROWS x COLS finishes output (i / COLS, i % COLS) with the
//             epilogue and stores it.
// launch:     block THREADS; grid (ceil(n / COLS), 1, batch), batch <= 65535; no dynamic
//             shared memory.
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_decode.cuh"
#include "matmul/matmul_epilogue.cuh"
#include "matmul/matmul_params.h"

namespace tilesmith {

// The dot product of eight 16-bit elements of a and b, added to sum in fp32.
template <int KIND>
__device__ __forceinline__ float dot8(const uint4& a, const uint4& b, float sum) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned x = word(a, i), y = word(b, i);
    sum = fmaf(to_float(static_cast<half_bits>(x & 0xffffu), KIND),
               to_float(static_cast<half_bits>(y & 0xffffu), KIND), sum);
    sum = fmaf(to_float(static_cast<half_bits>(x >> 16), KIND),
               to_float(static_cast<half_bits>(y >> 16), KIND), sum);
  }
  return sum;
}

template <int ROWS, int COLS, int THREADS, int UNROLL, int IN_KIND, int OUT_KIND, int EPI>
__global__ void __launch_bounds__(THREADS) matmul_gemv(const MatmulParams p) {
  static_assert(THREADS % 32 == 0 && ROWS * COLS <= THREADS, "whole warps; a thread per output");
  constexpr int WARPS = THREADS / 32;
  constexpr int STEP = THREADS * 8;  // k between a thread's chunks
  __shared__ float warp_sums[WARPS][ROWS * COLS];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int col0 = blockIdx.x * COLS;
  // A batch per grid z: a loop over batches here made ptxas spill a loop-invariant pointer.
  const int batch = blockIdx.z;
  const half_bits* w_row[COLS];
  bool w_inside[COLS];
#pragma unroll
  for (int c = 0; c < COLS; ++c) {
    w_inside[c] = col0 + c < p.n;
    w_row[c] = static_cast<const half_bits*>(p.b) + batch * p.stride_b +
               static_cast<long long>(w_inside[c] ? col0 + c : 0) * p.ldb;
  }
  const half_bits* a_row[ROWS];
  bool a_inside[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    a_inside[r] = r < p.m;
    a_row[r] = static_cast<const half_bits*>(p.a) + batch * p.stride_a +
               static_cast<long long>(a_inside[r] ? r : 0) * p.lda;
  }

  float sum[ROWS][COLS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int c = 0; c < COLS; ++c) sum[r][c] = 0.f;

  for (int k0 = threadIdx.x * 8; k0 < p.k; k0 += UNROLL * STEP) {
    uint4 w[UNROLL][COLS], x[UNROLL][ROWS];
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
      // K is a multiple of 8 (aligned problems only): a thread's 8 k are all inside or out.
      const int k = k0 + u * STEP;
      const bool k_inside = k < p.k;
#pragma unroll
      for (int c = 0; c < COLS; ++c)
        w[u][c] = load_16_or_zero<true>(w_row[c] + k, k_inside && w_inside[c]);
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
        x[u][r] = load_16_or_zero<false>(a_row[r] + k, k_inside && a_inside[r]);
    }
#pragma unroll
    for (int u = 0; u < UNROLL; ++u)
#pragma unroll
      for (int r = 0; r < ROWS; ++r)
#pragma unroll
        for (int c = 0; c < COLS; ++c) sum[r][c] = dot8<IN_KIND>(x[u][r], w[u][c], sum[r][c]);
  }

#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int c = 0; c < COLS; ++c) {
      float v = sum[r][c];
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
      if (lane == 0) warp_sums[warp][r * COLS + c] = v;
    }
  __syncthreads();
  if (threadIdx.x < ROWS * COLS) {
    const int row = threadIdx.x / COLS, col = col0 + threadIdx.x % COLS;
    if (row < p.m && col < p.n) {
      float v = 0.f;
#pragma unroll
      for (int w2 = 0; w2 < WARPS; ++w2) v += warp_sums[w2][threadIdx.x];
      if (EPI != kActNone) v = epilogue_value<EPI, OUT_KIND>(p.epilogue, batch, row, col, v);
      store_pair<OUT_KIND>(p.c, batch * p.stride_c + static_cast<long long>(row) * p.ldc + col,
                           v, 0.f, false, false);
    }
  }
}

}  // namespace tilesmith
