// Matmul, tensor-core version 2 (sm_80+): C = A * B, row-major, fp16/bf16 in, fp32 accumulate,
// output in the input type or fp32, any M, N, K.
//
// mainloop: a STAGES-deep ring of shared-memory tiles filled by cp.async (16-byte, zero-filled
//           past the edges); rows padded by 16 bytes so ldmatrix reads hit 8 distinct bank
//           groups. Fragments are double-buffered one k16 step ahead of the MMAs, and the next
//           tile's copies are spread between the MMA steps, so a warp has MMAs to issue while
//           its ldmatrix, copies and barrier complete (v1 ran them in one block between MMAs).
// warp tile: each of WM x WN warps owns a (BM/WM) x (BN/WN) block of C as m16n8k16 MMAs.
// tile order: blocks walk C in groups of GROUP_M tile-rows so neighbours share A and B in L2.
// epilogue: straight from the accumulators, predicated at the edges.
// ALIGNED: K and N are multiples of 8, so every 16-byte chunk is wholly inside or outside the
//          matrix and cp.async can move it; otherwise chunks are gathered element by element
//          into registers at the start of a tile and stored to shared memory before its last
//          k16 step.
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_params.h"

namespace tilesmith {

template <int BM, int BN, int BK, int WM, int WN>
struct MatmulTile {
  static constexpr int kBlockM = BM, kBlockN = BN, kBlockK = BK;
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kPad = 8;  // elements: 16 bytes
  static constexpr int kStrideA = BK + kPad;
  static constexpr int kStrideB = BN + kPad;
  static constexpr int kStageBytes = 2 * (BM * kStrideA + BK * kStrideB);
  static constexpr int kWarpM = BM / WM;
  static constexpr int kWarpN = BN / WN;
  static constexpr int kMmaM = kWarpM / 16;  // m16 tiles per warp
  static constexpr int kMmaN = kWarpN / 8;   // n8 tiles per warp
  static constexpr int kSteps = BK / 16;     // k16 MMA steps per tile
  // A thread copies the same column of A (and k-row offset of B) in every chunk: its chunks are
  // kThreads chunks apart, a whole number of rows.
  static constexpr int kChunksA = BM * BK / 8 / kThreads;  // per thread
  static constexpr int kChunksB = BK * BN / 8 / kThreads;
  static constexpr int kRowStepA = kThreads / (BK / 8);
  static constexpr int kRowStepB = kThreads / (BN / 8);
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tile must be a multiple of 16x16");
  static_assert(BK % 16 == 0 && kSteps >= 2, "BK must be at least two of the MMA's k=16 steps");
  static_assert(BM * BK / 8 % kThreads == 0 && BK * BN / 8 % kThreads == 0,
                "every thread copies whole 16-byte chunks");
  static_assert(kThreads % (BN / 8) == 0 && kChunksA <= 32, "copy layout");
};

// One thread's share of copying k-tiles of A and B into shared memory. Sources, strides and the
// row/column bounds are worked out once; each tile then costs one address step per chunk, and
// advance() moves every source one tile along k.
template <class T, int ALIGNED>
struct TileCopier {
  static constexpr int BM = T::kBlockM, BN = T::kBlockN, BK = T::kBlockK;

  const half_bits* a;      // this thread's first A chunk in the next tile
  const half_bits* b;      // this thread's first B chunk in the next tile
  long long a_chunk_step;  // elements between this thread's A chunks (kRowStepA rows)
  long long b_chunk_step;
  long long b_tile_step;   // BK rows of B
  unsigned a_rows_inside;  // bit i: A chunk i's row is < M
  int a_col;               // this thread's k column of A within a tile
  int b_row;               // this thread's first k row of B within a tile
  int b_cols_left;         // N minus this thread's first B column
  int k_left;              // K minus the next tile's first k
  unsigned smem_a, smem_b; // byte offsets of this thread's first chunks within a stage

  __device__ __forceinline__ TileCopier(const MatmulParams& p, int block_row, int block_col) {
    const int row = threadIdx.x / (BK / 8);
    a_col = (threadIdx.x % (BK / 8)) * 8;
    b_row = threadIdx.x / (BN / 8);
    const int b_col = (threadIdx.x % (BN / 8)) * 8;
    a = static_cast<const half_bits*>(p.a) + static_cast<long long>(block_row + row) * p.lda + a_col;
    b = static_cast<const half_bits*>(p.b) + static_cast<long long>(b_row) * p.ldb + block_col + b_col;
    a_chunk_step = static_cast<long long>(T::kRowStepA) * p.lda;
    b_chunk_step = static_cast<long long>(T::kRowStepB) * p.ldb;
    b_tile_step = static_cast<long long>(BK) * p.ldb;
    a_rows_inside = 0;
#pragma unroll
    for (int i = 0; i < T::kChunksA; ++i)
      if (block_row + row + i * T::kRowStepA < p.m) a_rows_inside |= 1u << i;
    b_cols_left = p.n - (block_col + b_col);
    k_left = p.k;
    smem_a = 2 * (row * T::kStrideA + a_col);
    smem_b = 2 * (BM * T::kStrideA + b_row * T::kStrideB + b_col);
  }

  // Starts part `part` of `parts` of the next tile's chunks towards the stage at `stage`, so a
  // tile's copies interleave with the MMAs of the tile being computed. Aligned chunks go by
  // cp.async straight to shared memory. Unaligned chunks are gathered into registers here and
  // written by land(), so their global latency hides behind MMAs instead of stalling the warp.
  // Called with constants inside unrolled loops: the part selection folds away.
  __device__ __forceinline__ void copy(unsigned stage, int part, int parts) {
    // Unaligned chunks all start in the first part: land() comes after the MMAs of every step
    // but the last, and that is the time their loads have to arrive.
    if (!ALIGNED) {
      if (part != 0) return;
      parts = 1;
    }
    constexpr int total = T::kChunksA + T::kChunksB;
#pragma unroll
    for (int i = 0; i < T::kChunksA; ++i) {
      if (i * parts / total != part) continue;
      const half_bits* src = a + i * a_chunk_step;
      const bool row_inside = (a_rows_inside >> i) & 1u;
      if (ALIGNED) {
        cp_async_16(stage + smem_a + i * (2 * T::kRowStepA * T::kStrideA), src,
                    row_inside && a_col < k_left);
      } else {
        gather(src, row_inside ? k_left - a_col : 0, staged[i]);
      }
    }
#pragma unroll
    for (int i = 0; i < T::kChunksB; ++i) {
      if ((T::kChunksA + i) * parts / total != part) continue;
      const half_bits* src = b + i * b_chunk_step;
      const bool row_inside = b_row + i * T::kRowStepB < k_left;
      if (ALIGNED) {
        cp_async_16(stage + smem_b + i * (2 * T::kRowStepB * T::kStrideB), src,
                    row_inside && b_cols_left > 0);
      } else {
        gather(src, row_inside ? b_cols_left : 0, staged[T::kChunksA + i]);
      }
    }
  }

  // Writes the gathered chunks of the tile started by copy() to the stage at `stage` (the
  // aligned variant's cp.async needs no help).
  __device__ __forceinline__ void land(unsigned stage) const {
    if (!ALIGNED) {
#pragma unroll
      for (int i = 0; i < T::kChunksA; ++i)
        store_shared_16(stage + smem_a + i * (2 * T::kRowStepA * T::kStrideA), staged[i][0],
                        staged[i][1], staged[i][2], staged[i][3]);
#pragma unroll
      for (int i = 0; i < T::kChunksB; ++i) {
        const unsigned(&chunk)[4] = staged[T::kChunksA + i];
        store_shared_16(stage + smem_b + i * (2 * T::kRowStepB * T::kStrideB), chunk[0],
                        chunk[1], chunk[2], chunk[3]);
      }
    }
  }

  __device__ __forceinline__ void advance() {
    a += BK;
    b += b_tile_step;
    k_left -= BK;
  }

 private:
  // Unaligned variant only: the chunks gathered by copy() until land() (dead code otherwise).
  unsigned staged[ALIGNED ? 1 : T::kChunksA + T::kChunksB][4];

  // Eight elements from `src` on, element by element (rows start on any 2-byte boundary);
  // those from `valid` on are zero. Reading the two aligned 16-byte blocks around the chunk and
  // funnelling bytes measured 40% slower on the H100 (docs/perf/matmul.md).
  __device__ __forceinline__ static void gather(const half_bits* src, int valid, unsigned (&chunk)[4]) {
    half_bits v[8];
#pragma unroll
    for (int e = 0; e < 8; ++e) v[e] = e < valid ? src[e] : half_bits(0);
#pragma unroll
    for (int e = 0; e < 4; ++e) chunk[e] = v[2 * e] | (unsigned(v[2 * e + 1]) << 16);
  }
};

// The A and B fragments of one k16 step of a warp tile.
template <class T>
struct WarpFragments {
  unsigned a[T::kMmaM][4];
  unsigned b[T::kMmaN / 2][4];  // x4.trans: two n8 tiles per load

  // a_lane/b_lane: this lane's ldmatrix addresses at row 0 / k 0 of a stage, in bytes.
  __device__ __forceinline__ void load(unsigned a_lane, unsigned b_lane, int step) {
#pragma unroll
    for (int i = 0; i < T::kMmaM; ++i) ldmatrix_x4(a[i], a_lane + 2 * (i * 16 * T::kStrideA + step * 16));
#pragma unroll
    for (int j = 0; j < T::kMmaN / 2; ++j)
      ldmatrix_x4_trans(b[j], b_lane + 2 * (step * 16 * T::kStrideB + j * 16));
  }
};

template <class T, int IN_KIND>
__device__ __forceinline__ void mma_step(float (&acc)[T::kMmaM][T::kMmaN][4],
                                         const WarpFragments<T>& f) {
#pragma unroll
  for (int i = 0; i < T::kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < T::kMmaN; ++j)
      mma_16x8x16<IN_KIND>(acc[i][j], f.a[i], f.b[j / 2][(j % 2) * 2], f.b[j / 2][(j % 2) * 2 + 1]);
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

template <int BM, int BN, int BK, int WM, int WN, int STAGES, int GROUP_M, int ALIGNED,
          int IN_KIND, int OUT_KIND>
__global__ void __launch_bounds__(WM* WN * 32) matmul_kernel(const MatmulParams p) {
  typedef MatmulTile<BM, BN, BK, WM, WN> T;
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

  const unsigned smem_base = smem_address(smem);
  // This lane's ldmatrix addresses in stage 0: lanes 8i..8i+7 address matrix i of an x4 load,
  // rows lane%16 and column halves lane/16 (for B, .trans turns k-rows into the col layout).
  const unsigned a_lane = smem_base + 2 * ((warp_row + lane % 16) * T::kStrideA + (lane / 16) * 8);
  const unsigned b_lane =
      smem_base + 2 * (BM * T::kStrideA + (lane % 16) * T::kStrideB + warp_col + (lane / 16) * 8);

  TileCopier<T, ALIGNED> copier(p, block_row, block_col);
  const int k_tiles = (p.k + BK - 1) / BK;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < k_tiles) {
      copier.copy(smem_base + s * T::kStageBytes, 0, 1);
      copier.land(smem_base + s * T::kStageBytes);
      copier.advance();
    }
    cp_async_commit();
  }

  // The pipeline (the schedule of CUTLASS's multistage mainloop): fragments for step s+1 load
  // while step s's MMAs run, wrapping into the next stage after the last step; the next tile's
  // copies are spread over the steps before the last; the wait and barrier sit before the last
  // step, whose MMAs then cover the first ldmatrix of the next stage.
  WarpFragments<T> frag[2];
  cp_async_wait<STAGES - 2>();
  __syncthreads();
  frag[0].load(a_lane, b_lane, 0);
  int read_stage = 0, write_stage = STAGES - 1;
  for (int kt = 0; kt < k_tiles; ++kt) {
    const bool prefetch = kt + STAGES - 1 < k_tiles;
    const unsigned write_base = smem_base + write_stage * T::kStageBytes;
#pragma unroll
    for (int step = 0; step < T::kSteps; ++step) {
      // After the last step this reads the next stage; on the last tile that stage holds stale
      // data that is never used.
      const int next_step = (step + 1) % T::kSteps;
      frag[(step + 1) % 2].load(a_lane + read_stage * T::kStageBytes,
                                b_lane + read_stage * T::kStageBytes, next_step);
      if (step < T::kSteps - 1 && prefetch) copier.copy(write_base, step, T::kSteps - 1);
      mma_step<T, IN_KIND>(acc, frag[step % 2]);
      if (step == T::kSteps - 2) {
        if (prefetch) {
          copier.land(write_base);
          copier.advance();
        }
        // Tile kt+1 has landed for this thread; the barrier makes it everyone's and ends every
        // warp's reads of stage kt-1, which the next iteration refills.
        cp_async_commit();
        cp_async_wait<STAGES - 2>();
        __syncthreads();
        read_stage = read_stage + 1 == STAGES ? 0 : read_stage + 1;
        write_stage = write_stage + 1 == STAGES ? 0 : write_stage + 1;
      }
    }
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
