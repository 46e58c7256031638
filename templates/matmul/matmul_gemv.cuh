// Matmul for a few rows of A (M <= 4) with B column-major (x @ W^T), or on C^T = B^T A^T for a
// few columns of B (SWAP_AB: a matrix times a vector, A's rows the weight), sm_80+: each CTA
// reduces COLS whole rows of the weight W (stored n x k) along K, the access of a row
// reduction, which is what Inductor's kernel for M = 1 is (docs/perf/matmul.md v18): every
// thread reads VEC contiguous elements of each of the CTA's rows per chunk (16 bytes where K
// allows; 8, 4 or 2 where K is off 16 bytes, so rows TMA cannot read are read in place, not
// copied into padded ones first), so a warp reads 32 x VEC contiguous elements of a row an
// instruction, and the CTAs are small and many (one to eight rows each), so the SMs take them
// as they free up and no SM is left with a longer share of the weight. 16-bit or fp32 inputs
// (fp32 multiplied in fp32, not as tf32: the FMAs are on CUDA cores either way).
//
// per thread: chunks of VEC k, THREADS x VEC k apart; UNROLL chunks of every row (W's and A's)
//             loaded before their products, and the fp32 sums of its ROWS x COLS outputs kept.
//             One load a chunk where the call's rows and batches of A and W are on VEC
//             elements (always at 16 bytes: aligned problems only), else element by element.
// per CTA:    the sums reduced over each warp by shuffles, then over the warps through shared
//             memory; thread i < ROWS x COLS finishes output (i / COLS, i % COLS) with the
//             epilogue and stores it.
// A_COLUMNS:  A is one row stored column-major, a vector whose k are lda apart (a column of a
//             row-major matrix, as C^T = B^T A^T reads a row-major B of one column): loaded
//             element by element at that step.
// SWAP_AB:    the kernel computes C^T = B^T A^T (the plan passes B as its A and A as its B):
//             output (row, col) is C's (col, row), stored ldc apart down C's column.
// launch:     block THREADS; grid (ceil(n / COLS), 1, batch), batch <= 65535; no dynamic
//             shared memory.
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_epilogue.cuh"
#include "matmul/matmul_params.h"
#include "matmul/matmul_row_loads.cuh"

namespace tilesmith {

template <int ROWS, int COLS, int THREADS, int UNROLL, int VEC, int IN_KIND, int A_COLUMNS>
struct Gemv {
  using Element = RowElement<IN_KIND>;
  using T = typename Element::type;
  using Piece = typename Element::template Columns<VEC>;
  static constexpr bool kSixteenBytes = VEC * sizeof(T) == 16;  // a chunk is one 16-byte load
  static_assert((VEC == 1 || VEC == 2 || VEC == 4 || VEC == 8) && VEC * sizeof(T) <= 16,
                "VEC: 2 to 16 bytes a load");

  // VEC elements of a row from `src`, `valid` of them inside K (all or none where WIDE). W's
  // rows are read once (STREAMED keeps 16-byte pieces out of L1, which A's rows use).
  template <bool WIDE, bool STREAMED>
  __device__ __forceinline__ static Piece load(const T* src, int valid) {
    Piece piece;
    if constexpr (WIDE && kSixteenBytes) {
      const uint4 v = load_16_or_zero<STREAMED>(reinterpret_cast<const half_bits*>(src), valid > 0);
      if constexpr (IN_KIND == kF32) {
        piece.values[0] = __uint_as_float(v.x), piece.values[1] = __uint_as_float(v.y);
        piece.values[2] = __uint_as_float(v.z), piece.values[3] = __uint_as_float(v.w);
      } else {
        piece.words[0] = v.x, piece.words[1] = v.y, piece.words[2] = v.z, piece.words[3] = v.w;
      }
    } else {
      load_columns<VEC, WIDE, IN_KIND>(src, valid, piece);
    }
    return piece;
  }

  // VEC elements of A's column-major row from `src` (its k = 0), k to k + VEC - 1, `step` apart.
  __device__ __forceinline__ static Piece load_strided(const T* src, int k, int step, int valid) {
    Piece piece;
    if constexpr (IN_KIND == kF32) {
#pragma unroll
      for (int e = 0; e < VEC; ++e)
        piece.values[e] = e < valid ? load_input(src + static_cast<long long>(k + e) * step) : 0.f;
    } else {
#pragma unroll
      for (int e = 0; e < VEC; e += 2) {
        const half_bits* const at = src + static_cast<long long>(k + e) * step;
        const unsigned lo = e < valid ? load_input(at) : 0u;
        const unsigned hi = VEC > 1 && e + 1 < valid ? load_input(at + step) : 0u;
        piece.words[e / 2] = lo | (hi << 16);
      }
    }
    return piece;
  }

  // The thread's sums over its chunks of K; WIDE: one load a chunk.
  template <bool WIDE>
  __device__ static void run(const MatmulParams& p, const T* const (&w_row)[COLS],
                             const bool (&w_inside)[COLS], const T* const (&a_row)[ROWS],
                             const bool (&a_inside)[ROWS], float (&sum)[ROWS][COLS]) {
    constexpr int STEP = THREADS * VEC;  // k between a thread's chunks
    for (int k0 = threadIdx.x * VEC; k0 < p.k; k0 += UNROLL * STEP) {
      Piece w[UNROLL][COLS], x[UNROLL][ROWS];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int k = k0 + u * STEP;
        const int valid = max(0, min(VEC, p.k - k));
#pragma unroll
        for (int c = 0; c < COLS; ++c) w[u][c] = load<WIDE, true>(w_row[c] + k, w_inside[c] ? valid : 0);
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
          x[u][r] = A_COLUMNS ? load_strided(a_row[r], k, p.lda, a_inside[r] ? valid : 0)
                              : load<WIDE, false>(a_row[r] + k, a_inside[r] ? valid : 0);
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
          for (int c = 0; c < COLS; ++c)
#pragma unroll
            for (int e = 0; e < VEC; ++e)
              sum[r][c] = fmaf(Element::value(x[u][r], e), Element::value(w[u][c], e), sum[r][c]);
    }
  }
};

template <int ROWS, int COLS, int THREADS, int UNROLL, int VEC, int IN_KIND, int OUT_KIND,
          int A_COLUMNS, int SWAP_AB, int EPI>
__global__ void __launch_bounds__(THREADS) matmul_gemv(const MatmulParams p) {
  wait_for_previous_launch();
  static_assert(THREADS % 32 == 0 && ROWS * COLS <= THREADS, "whole warps; a thread per output");
  using Kernel = Gemv<ROWS, COLS, THREADS, UNROLL, VEC, IN_KIND, A_COLUMNS>;
  using T = typename Kernel::T;
  constexpr int WARPS = THREADS / 32;
  __shared__ float warp_sums[WARPS][ROWS * COLS];

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int col0 = blockIdx.x * COLS;
  // A batch per grid z: a loop over batches here made ptxas spill a loop-invariant pointer.
  const int batch = blockIdx.z;
  const T* w_row[COLS];
  bool w_inside[COLS];
#pragma unroll
  for (int c = 0; c < COLS; ++c) {
    w_inside[c] = col0 + c < p.n;
    w_row[c] = static_cast<const T*>(p.b) + batch * p.stride_b +
               static_cast<long long>(w_inside[c] ? col0 + c : 0) * p.ldb;
  }
  const T* a_row[ROWS];
  bool a_inside[ROWS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    a_inside[r] = r < p.m;
    a_row[r] = static_cast<const T*>(p.a) + batch * p.stride_a +
               static_cast<long long>(a_inside[r] ? r : 0) * (A_COLUMNS ? 1 : p.lda);
  }

  float sum[ROWS][COLS];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int c = 0; c < COLS; ++c) sum[r][c] = 0.f;
  // Loads of 16 bytes are for aligned problems only, whose rows, batches and bases are on them.
  // Narrower ones go element by element where a call's strides are off them. (Not compiled in
  // for 16 bytes: beside it the 16-byte loop ran 1.2x slower, docs/perf/matmul.md v28.) A
  // column-major A is loaded element by element anyway: only W's strides count.
  const bool wide = A_COLUMNS ? static_cast<unsigned long long>(p.ldb | p.stride_b) % VEC == 0
                              : strides_on(p, VEC);
  if constexpr (Kernel::kSixteenBytes && !A_COLUMNS) {
    Kernel::template run<true>(p, w_row, w_inside, a_row, a_inside, sum);
  } else {
    if (wide)
      Kernel::template run<true>(p, w_row, w_inside, a_row, a_inside, sum);
    else
      Kernel::template run<false>(p, w_row, w_inside, a_row, a_inside, sum);
  }
  allow_next_launch();

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
      // C's row and column: swapped where the kernel computes C^T.
      const int c_row = SWAP_AB ? col : row, c_col = SWAP_AB ? row : col;
      if (EPI != kActNone) v = epilogue_value<EPI, OUT_KIND>(p.epilogue, batch, c_row, c_col, v);
      store_pair<OUT_KIND>(p.c, batch * p.stride_c + static_cast<long long>(c_row) * p.ldc + c_col,
                           v, 0.f, false, false);
    }
  }
}

}  // namespace tilesmith
