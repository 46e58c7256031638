// Matmul, tensor-core version 1 (sm_80+): C = A * B, row-major, fp16/bf16 in, fp32 accumulate,
// output in the input type or fp32, any M, N, K.
//
// mainloop: a STAGES-deep ring of shared-memory tiles filled by cp.async (16-byte, zero-filled
//           past the edges) while the tensor cores work on the oldest stage; rows padded by 16
//           bytes so ldmatrix reads hit 8 distinct bank groups.
// warp tile: each of WM x WN warps owns a (BM/WM) x (BN/WN) block of C as m16n8k16 MMAs.
// tile order: blocks walk C in groups of GROUP_M tile-rows so neighbours share A and B in L2.
// epilogue: straight from the accumulators, predicated at the edges.
// ALIGNED: K and N are multiples of 8, so every 16-byte chunk is wholly inside or outside the
//          matrix; otherwise chunks are gathered element by element (correct, not fast).
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_params.h"

namespace tilesmith {

template <int BM, int BN, int BK, int WM, int WN, int STAGES, int GROUP_M, int ALIGNED, int IN_KIND,
          int OUT_KIND>
struct MatmulTile {
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kPad = 8;  // elements: 16 bytes
  static constexpr int kStrideA = BK + kPad;
  static constexpr int kStrideB = BN + kPad;
  static constexpr int kStageElems = BM * kStrideA + BK * kStrideB;
  static constexpr int kWarpM = BM / WM;
  static constexpr int kWarpN = BN / WN;
  static constexpr int kMmaM = kWarpM / 16;  // m16 tiles per warp
  static constexpr int kMmaN = kWarpN / 8;   // n8 tiles per warp
  static constexpr int kChunksA = BM * BK / 8;
  static constexpr int kChunksB = BK * BN / 8;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tile must be a multiple of 16x16");
  static_assert(BK % 16 == 0, "BK must be a multiple of the MMA's k16");
  static_assert(kChunksA % kThreads == 0 && kChunksB % kThreads == 0,
                "every thread copies whole 16-byte chunks");
};

// Copies one BM x BK tile of A and one BK x BN tile of B, starting at column/row k0, into a stage.
template <class T, int BM, int BN, int BK, int ALIGNED>
__device__ __forceinline__ void load_stage(const MatmulParams& p, half_bits* stage, int block_row,
                                           int block_col, int k0) {
  const half_bits* a = static_cast<const half_bits*>(p.a);
  const half_bits* b = static_cast<const half_bits*>(p.b);
  half_bits* stage_a = stage;
  half_bits* stage_b = stage + BM * T::kStrideA;
#pragma unroll
  for (int i = 0; i < T::kChunksA / T::kThreads; ++i) {
    int chunk = threadIdx.x + i * T::kThreads;
    int row = chunk / (BK / 8), col = (chunk % (BK / 8)) * 8;
    int global_row = block_row + row, global_k = k0 + col;
    unsigned dst = smem_address(stage_a + row * T::kStrideA + col);
    const half_bits* src = a + static_cast<long long>(global_row) * p.lda + global_k;
    if (ALIGNED) {
      bool valid = global_row < p.m && global_k < p.k;
      cp_async_16(dst, valid ? src : a, valid);
    } else {
      half_bits v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        v[e] = (global_row < p.m && global_k + e < p.k) ? src[e] : half_bits(0);
      store_shared_16(dst, v[0] | (unsigned(v[1]) << 16), v[2] | (unsigned(v[3]) << 16),
                      v[4] | (unsigned(v[5]) << 16), v[6] | (unsigned(v[7]) << 16));
    }
  }
#pragma unroll
  for (int i = 0; i < T::kChunksB / T::kThreads; ++i) {
    int chunk = threadIdx.x + i * T::kThreads;
    int row = chunk / (BN / 8), col = (chunk % (BN / 8)) * 8;
    int global_k = k0 + row, global_col = block_col + col;
    unsigned dst = smem_address(stage_b + row * T::kStrideB + col);
    const half_bits* src = b + static_cast<long long>(global_k) * p.ldb + global_col;
    if (ALIGNED) {
      bool valid = global_k < p.k && global_col < p.n;
      cp_async_16(dst, valid ? src : b, valid);
    } else {
      half_bits v[8];
#pragma unroll
      for (int e = 0; e < 8; ++e)
        v[e] = (global_k < p.k && global_col + e < p.n) ? src[e] : half_bits(0);
      store_shared_16(dst, v[0] | (unsigned(v[1]) << 16), v[2] | (unsigned(v[3]) << 16),
                      v[4] | (unsigned(v[5]) << 16), v[6] | (unsigned(v[7]) << 16));
    }
  }
}

template <int OUT_KIND>
__device__ __forceinline__ void store_pair(void* c, long long index, float x, float y,
                                           bool both_valid, bool paired_store) {
  if (OUT_KIND == kF32) {
    float* out = static_cast<float*>(c) + index;
    if (paired_store && both_valid) {
      *reinterpret_cast<float2*>(out) = make_float2(x, y);
    } else {
      out[0] = x;
      if (both_valid) out[1] = y;
    }
  } else {
    half_bits* out = static_cast<half_bits*>(c) + index;
    if (paired_store && both_valid) {
      *reinterpret_cast<unsigned*>(out) = pack2<OUT_KIND>(x, y);
    } else {
      out[0] = from_float<OUT_KIND>(x);
      if (both_valid) out[1] = from_float<OUT_KIND>(y);
    }
  }
}

// Tensor-core work on one shared-memory stage. FRAGMENTS 0: every A and B fragment of a k16 step
// loaded, then all MMAs. FRAGMENTS 1: A fragments double-buffered across k16 steps and B
// fragments streamed one 16-column pair at a time, so fewer registers are live and the next
// ldmatrix overlaps the current MMAs.
template <class T, int BK, int FRAGMENTS, int IN_KIND>
__device__ __forceinline__ void mma_stage(float (&acc)[T::kMmaM][T::kMmaN][4], unsigned a_base,
                                          unsigned b_base) {
  // a_base/b_base: this lane's ldmatrix address in the stage, row 0 / k 0, in bytes.
  if (FRAGMENTS == 0) {
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      unsigned a_frag[T::kMmaM][4];
      unsigned b_frag[T::kMmaN / 2][4];
#pragma unroll
      for (int i = 0; i < T::kMmaM; ++i) ldmatrix_x4(a_frag[i], a_base + 2 * (i * 16 * T::kStrideA + kk));
#pragma unroll
      for (int j = 0; j < T::kMmaN / 2; ++j)
        ldmatrix_x4_trans(b_frag[j], b_base + 2 * (kk * T::kStrideB + j * 16));
#pragma unroll
      for (int i = 0; i < T::kMmaM; ++i)
#pragma unroll
        for (int j = 0; j < T::kMmaN; ++j)
          mma_16x8x16<IN_KIND>(acc[i][j], a_frag[i], b_frag[j / 2][(j % 2) * 2],
                               b_frag[j / 2][(j % 2) * 2 + 1]);
    }
  } else {
    unsigned a_frag[2][T::kMmaM][4];
#pragma unroll
    for (int i = 0; i < T::kMmaM; ++i) ldmatrix_x4(a_frag[0][i], a_base + 2 * (i * 16 * T::kStrideA));
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
      const int current = (kk / 16) % 2;
      if (kk + 16 < BK) {
#pragma unroll
        for (int i = 0; i < T::kMmaM; ++i)
          ldmatrix_x4(a_frag[current ^ 1][i], a_base + 2 * (i * 16 * T::kStrideA + kk + 16));
      }
#pragma unroll
      for (int j = 0; j < T::kMmaN / 2; ++j) {
        unsigned b_frag[4];
        ldmatrix_x4_trans(b_frag, b_base + 2 * (kk * T::kStrideB + j * 16));
#pragma unroll
        for (int i = 0; i < T::kMmaM; ++i) {
          mma_16x8x16<IN_KIND>(acc[i][2 * j], a_frag[current][i], b_frag[0], b_frag[1]);
          mma_16x8x16<IN_KIND>(acc[i][2 * j + 1], a_frag[current][i], b_frag[2], b_frag[3]);
        }
      }
    }
  }
}

template <int BM, int BN, int BK, int WM, int WN, int STAGES, int GROUP_M, int FRAGMENTS,
          int ALIGNED, int IN_KIND, int OUT_KIND>
__global__ void __launch_bounds__(WM* WN * 32) matmul_kernel(const MatmulParams p) {
  typedef MatmulTile<BM, BN, BK, WM, WN, STAGES, GROUP_M, ALIGNED, IN_KIND, OUT_KIND> T;
  extern __shared__ __align__(128) half_bits smem[];

  // Tile order: GROUP_M tile-rows at a time, column by column inside the group.
  const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
  const int tile = blockIdx.x;
  const int group_tiles = GROUP_M * tiles_n;
  const int first_m = (tile / group_tiles) * GROUP_M;
  const int group_m = min(tiles_m - first_m, GROUP_M);
  const int tile_m = first_m + (tile % group_tiles) % group_m;
  const int tile_n = (tile % group_tiles) / group_m;
  const int block_row = tile_m * BM, block_col = tile_n * BN;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int warp_row = (warp / WN) * T::kWarpM, warp_col = (warp % WN) * T::kWarpN;

  float acc[T::kMmaM][T::kMmaN][4];
#pragma unroll
  for (int i = 0; i < T::kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < T::kMmaN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;

  // This lane's ldmatrix addresses in stage 0: lanes 8i..8i+7 address matrix i of an x4 load,
  // rows lane%16 and column halves lane/16 (for B, .trans turns k-rows into the col layout).
  const unsigned a_lane =
      smem_address(smem) + 2 * ((warp_row + lane % 16) * T::kStrideA + (lane / 16) * 8);
  const unsigned b_lane = smem_address(smem) +
                          2 * (BM * T::kStrideA + (lane % 16) * T::kStrideB + warp_col + (lane / 16) * 8);

  const int k_tiles = (p.k + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) load_stage<T, BM, BN, BK, ALIGNED>(p, smem + s * T::kStageElems, block_row, block_col, s * BK);
    cp_async_commit();
  }

  for (int kt = 0; kt < k_tiles; ++kt) {
    // Tile kt has landed for this thread; the barrier makes it everyone's and frees the stage
    // computed in the previous iteration for the next prefetch.
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int next = kt + STAGES - 1;
    if (next < k_tiles)
      load_stage<T, BM, BN, BK, ALIGNED>(p, smem + (next % STAGES) * T::kStageElems, block_row, block_col, next * BK);
    cp_async_commit();

    const unsigned stage_bytes = 2 * (kt % STAGES) * T::kStageElems;
    mma_stage<T, BK, FRAGMENTS, IN_KIND>(acc, a_lane + stage_bytes, b_lane + stage_bytes);
  }
  cp_async_wait<0>();

  // Accumulator layout of m16n8: lane holds rows lane/4 and lane/4+8, columns 2*(lane%4)+{0,1}.
  const bool paired_store = ALIGNED;  // N even: a pair never straddles a row and stays aligned
#pragma unroll
  for (int i = 0; i < T::kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < T::kMmaN; ++j) {
      const int col = block_col + warp_col + j * 8 + (lane % 4) * 2;
      if (col >= p.n) continue;
      const bool both = col + 1 < p.n;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = block_row + warp_row + i * 16 + lane / 4 + half * 8;
        if (row < p.m)
          store_pair<OUT_KIND>(p.c, static_cast<long long>(row) * p.ldc + col, acc[i][j][half * 2],
                               acc[i][j][half * 2 + 1], both, paired_store);
      }
    }
}

// The trusted reference: 16x16 shared-memory tiles, fp32 multiply-add, fp32 output. Simple on
// purpose; tests check it against a CPU loop.
template <int IN_KIND>
__global__ void __launch_bounds__(256) matmul_reference(const MatmulParams p) {
  __shared__ float tile_a[16][17];
  __shared__ float tile_b[16][17];
  const half_bits* a = static_cast<const half_bits*>(p.a);
  const half_bits* b = static_cast<const half_bits*>(p.b);
  const int row = blockIdx.y * 16 + threadIdx.y, col = blockIdx.x * 16 + threadIdx.x;
  float sum = 0.f;
  for (int k0 = 0; k0 < p.k; k0 += 16) {
    int ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
    tile_a[threadIdx.y][threadIdx.x] =
        (row < p.m && ka < p.k) ? to_float(a[static_cast<long long>(row) * p.lda + ka], IN_KIND) : 0.f;
    tile_b[threadIdx.y][threadIdx.x] =
        (kb < p.k && col < p.n) ? to_float(b[static_cast<long long>(kb) * p.ldb + col], IN_KIND) : 0.f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < 16; ++kk) sum = fmaf(tile_a[threadIdx.y][kk], tile_b[kk][threadIdx.x], sum);
    __syncthreads();
  }
  if (row < p.m && col < p.n) static_cast<float*>(p.c)[static_cast<long long>(row) * p.ldc + col] = sum;
}

}  // namespace tilesmith
