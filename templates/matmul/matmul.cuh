// Matmul, tensor-core version 2 (sm_80+): C[b] = epilogue(A[b] * B[b]), fp16/bf16 in (or fp32,
// multiplied as tf32), fp32 accumulate, output bf16, fp16 or fp32, any M, N, K and batch count.
//
// tf32: the kernel works in 16-bit units throughout, so an fp32 element is two of them and a
//       k16 step of 16-bit inputs (32 bytes of k) is a k8 step of tf32. ldmatrix hands out a
//       K-major tf32 fragment exactly as it does a 16-bit one (a lane's 32-bit word is one fp32
//       element), but its .trans form swaps 16-bit halves, so tf32 reads K-major operands only:
//       the plan transposes a column-major A or a row-major B into the workspace first, as
//       for the sm_90a template. The MMA is m16n8k8 tf32 (the low 13 mantissa bits ignored).
//
// mainloop: a STAGES-deep ring of shared-memory tiles filled by cp.async (16-byte, zero-filled
//           past the edges); rows padded by 16 bytes so ldmatrix reads hit 8 distinct bank
//           groups. Fragments are double-buffered one k16 step ahead of the MMAs, and the next
//           tile's copies are spread between the MMA steps, so a warp has MMAs to issue while
//           its ldmatrix, copies and barrier complete (v1 ran them in one block between MMAs).
// layouts: each operand's tile sits in shared memory in the shape it is stored in global memory
//          (column-major A as BK x BM, column-major B as BN x BK), so every layout copies whole
//          16-byte chunks of stored rows with the same copier; the transposition is ldmatrix's
//          (.trans where the stored rows are not the fragment's rows), which costs nothing.
//          C stays row-major: its stores are paired along N.
// warp tile: each of WM x WN warps owns a (BM/WM) x (BN/WN) block of C as m16n8k16 MMAs.
// tile order: blocks walk C in groups of p.group_m tile-rows so neighbours share A and B in L2
//             (matmul_tile_order.cuh).
// batch: grid.y blocks stride over the batches (grid.y is capped at 65535), each running the
//        whole tile per batch; x stays the tile so the L2-friendly order holds within a batch.
// epilogue: straight from the accumulators, predicated at the edges; bias, activation and
//           residual (matmul_epilogue.cuh) are applied in fp32 before C's rounding, so a fused
//           layer costs no extra pass over C. EPI 0 compiles to the plain stores.
// ALIGNED: every stored row of A and B starts on 16 bytes and holds a multiple of 8 elements,
//          so every 16-byte chunk is wholly inside or outside the matrix and cp.async can move
//          it; otherwise chunks are gathered element by element into registers at the start of
//          a tile and stored to shared memory before its last k16 step. With row-major B it
//          also vouches for C (N a multiple of 8, ldc and stride_c even, C 8-byte aligned), so
//          column pairs are stored as one; with column-major B, C is checked at run time.
// shared memory: STAGES * 2 bytes * (A tile + B tile), each tile its stored rows times their
//                padded length: A BM x (BK + 8), column-major BK x (BM + 8); B BK x (BN + 8),
//                column-major BN x (BK + 8) (MatmulTile::kStageBytes per stage); with fp32,
//                BK counts 16-bit units, twice the elements.
#pragma once

#include "common/copy_rows.cuh"  // tf32's transposing copy of MN-major operands, in the same unit
#include "common/tile_primitives.cuh"
#include "matmul/matmul_epilogue.cuh"
#include "matmul/matmul_params.h"
#include "matmul/matmul_tile_order.cuh"

namespace tilesmith {

template <int BM, int BN, int BK, int WM, int WN, int LAYOUT>
struct MatmulTile {
  static constexpr int kBlockM = BM, kBlockN = BN, kBlockK = BK;
  static constexpr bool kColumnA = (LAYOUT & kColumnMajorA) != 0;
  static constexpr bool kColumnB = (LAYOUT & kColumnMajorB) != 0;
  static constexpr int kThreads = WM * WN * 32;
  static constexpr int kPad = 8;  // elements: 16 bytes
  // Each operand's tile as stored: kRows rows of kCols elements, rows kStride apart.
  static constexpr int kRowsA = kColumnA ? BK : BM, kColsA = kColumnA ? BM : BK;
  static constexpr int kRowsB = kColumnB ? BN : BK, kColsB = kColumnB ? BK : BN;
  static constexpr int kStrideA = kColsA + kPad;
  static constexpr int kStrideB = kColsB + kPad;
  static constexpr int kStageBytes = 2 * (kRowsA * kStrideA + kRowsB * kStrideB);
  static constexpr int kWarpM = BM / WM;
  static constexpr int kWarpN = BN / WN;
  static constexpr int kMmaM = kWarpM / 16;  // m16 tiles per warp
  static constexpr int kMmaN = kWarpN / 8;   // n8 tiles per warp
  static constexpr int kSteps = BK / 16;     // k16 MMA steps per tile
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tile must be a multiple of 16x16");
  static_assert(BK % 16 == 0 && kSteps >= 2, "BK must be at least two of the MMA's k=16 steps");
};

// One thread's share of copying k-tiles of one operand, a ROWS x COLS tile of a row-major
// stored matrix whose k runs along the rows (K_ROWS: row-major B, column-major A) or along the
// columns (row-major A, column-major B). A thread copies the same column (and row offset) in
// every chunk: its chunks are THREADS chunks apart, a whole number of rows. Source, strides and
// the bound along the dimension that is not k are worked out once; each tile then costs one
// address step per chunk, and advance() moves the source one tile along k.
template <int ROWS, int COLS, int THREADS, int BK, bool K_ROWS>
struct OperandCopier {
  static constexpr int kChunks = ROWS * COLS / 8 / THREADS;  // per thread
  static constexpr int kRowStep = THREADS / (COLS / 8);
  static constexpr int kStride = COLS + 8;
  static_assert(ROWS * COLS / 8 % THREADS == 0, "every thread copies whole 16-byte chunks");
  static_assert(THREADS % (COLS / 8) == 0, "copy layout");
  static_assert(K_ROWS || kChunks <= 32, "the row bounds of the chunks fit one bit mask");

  const half_bits* src;   // this thread's first chunk in the next tile
  long long chunk_step;   // elements between this thread's chunks (kRowStep rows)
  long long tile_step;    // K_ROWS: BK rows
  unsigned rows_inside;   // k along columns: bit i: chunk i's row is inside the matrix
  int col;                // k along columns: this thread's k column within a tile
  int row;                // K_ROWS: this thread's first k row within a tile
  int cols_left;          // K_ROWS: the stored row length minus this thread's first column
  unsigned smem;          // byte offset of this thread's first chunk within a stage

  // `block`: the tile's first row (k along columns) or column (K_ROWS) in the stored matrix;
  // `extent`: the matrix's size in that dimension; `smem_tile`: the tile's offset in a stage.
  __device__ __forceinline__ OperandCopier(int thread, const half_bits* base, int ld, int block,
                                           int extent, unsigned smem_tile) {
    const int r = thread / (COLS / 8);
    const int c = (thread % (COLS / 8)) * 8;
    if (K_ROWS) {
      src = base + static_cast<long long>(r) * ld + block + c;
      row = r;
      cols_left = extent - (block + c);
      tile_step = static_cast<long long>(BK) * ld;
    } else {
      src = base + static_cast<long long>(block + r) * ld + c;
      col = c;
      rows_inside = 0;
#pragma unroll
      for (int i = 0; i < kChunks; ++i)
        if (block + r + i * kRowStep < extent) rows_inside |= 1u << i;
    }
    chunk_step = static_cast<long long>(kRowStep) * ld;
    smem = smem_tile + 2 * (r * kStride + c);
  }

  __device__ __forceinline__ const half_bits* chunk_src(int i) const {
    return src + i * chunk_step;
  }
  __device__ __forceinline__ unsigned chunk_smem(unsigned stage, int i) const {
    return stage + smem + i * (2 * kRowStep * kStride);
  }
  // Whether chunk i of a tile whose k runs k_left elements to K's end is inside the matrix (a
  // chunk is wholly inside or outside on the aligned path).
  __device__ __forceinline__ bool inside(int i, int k_left) const {
    if (K_ROWS) return row + i * kRowStep < k_left && cols_left > 0;
    return ((rows_inside >> i) & 1u) && col < k_left;
  }
  // The elements of chunk i that are inside the matrix (may be < 0 or > 8).
  __device__ __forceinline__ int valid(int i, int k_left) const {
    if (K_ROWS) return row + i * kRowStep < k_left ? cols_left : 0;
    return ((rows_inside >> i) & 1u) ? k_left - col : 0;
  }
  __device__ __forceinline__ void advance() {
    if (K_ROWS)
      src += tile_step;
    else
      src += BK;
  }
};

// One thread's share of copying k-tiles of A and B into shared memory, in their stored shapes.
// Lengths along k, row strides and addresses are in 16-bit units (an fp32 element is two).
template <class T, int ALIGNED>
struct TileCopier {
  static constexpr int BK = T::kBlockK;
  typedef OperandCopier<T::kRowsA, T::kColsA, T::kThreads, BK, T::kColumnA> CopierA;
  typedef OperandCopier<T::kRowsB, T::kColsB, T::kThreads, BK, !T::kColumnB> CopierB;
  static constexpr int kChunksA = CopierA::kChunks, kChunksB = CopierB::kChunks;

  CopierA a;
  CopierB b;
  int k_left;  // K minus the next tile's first k

  // `a_base`, `b_base`: this batch's A and B; `units`: 16-bit units per element (2 for fp32,
  // whose operands are K-major: the lengths scaled are k's and the row strides).
  __device__ __forceinline__ TileCopier(const MatmulParams& p, int units, int thread,
                                        const half_bits* a_base, const half_bits* b_base,
                                        int block_row, int block_col)
      : a(thread, a_base, p.lda * units, block_row, p.m, 0),
        b(thread, b_base, p.ldb * units, block_col, p.n, 2 * T::kRowsA * T::kStrideA),
        k_left(p.k * units) {}

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
    constexpr int total = kChunksA + kChunksB;
#pragma unroll
    for (int i = 0; i < kChunksA; ++i) {
      if (i * parts / total != part) continue;
      if (ALIGNED)
        cp_async_16(a.chunk_smem(stage, i), a.chunk_src(i), a.inside(i, k_left));
      else
        gather(a.chunk_src(i), a.valid(i, k_left), staged[i]);
    }
#pragma unroll
    for (int i = 0; i < kChunksB; ++i) {
      if ((kChunksA + i) * parts / total != part) continue;
      if (ALIGNED)
        cp_async_16(b.chunk_smem(stage, i), b.chunk_src(i), b.inside(i, k_left));
      else
        gather(b.chunk_src(i), b.valid(i, k_left), staged[kChunksA + i]);
    }
  }

  // Writes the gathered chunks of the tile started by copy() to the stage at `stage` (the
  // aligned variant's cp.async needs no help).
  __device__ __forceinline__ void land(unsigned stage) const {
    if (!ALIGNED) {
#pragma unroll
      for (int i = 0; i < kChunksA; ++i)
        store_shared_16(a.chunk_smem(stage, i), staged[i][0], staged[i][1], staged[i][2],
                        staged[i][3]);
#pragma unroll
      for (int i = 0; i < kChunksB; ++i) {
        const unsigned(&chunk)[4] = staged[kChunksA + i];
        store_shared_16(b.chunk_smem(stage, i), chunk[0], chunk[1], chunk[2], chunk[3]);
      }
    }
  }

  __device__ __forceinline__ void advance() {
    a.advance();
    b.advance();
    k_left -= BK;
  }

 private:
  // Unaligned variant only: the chunks gathered by copy() until land() (dead code otherwise).
  unsigned staged[ALIGNED ? 1 : kChunksA + kChunksB][4];

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

// The A and B fragments of one k16 step of a warp tile. An x4 load gives a whole m16k16 A
// fragment (matrices m0-7/k0-7, m8-15/k0-7, m0-7/k8-15, m8-15/k8-15: registers a0..a3 of the
// MMA) or two n8k16 B fragments (n0-7/k0-7, n0-7/k8-15, n8-15/k0-7, n8-15/k8-15: b0, b1 of two
// MMAs). Where the stored rows are the fragment's rows (A's m, B's n) the plain load gives the
// MMA's layout, otherwise .trans does.
template <class T>
struct WarpFragments {
  unsigned a[T::kMmaM][4];
  unsigned b[T::kMmaN / 2][4];  // two n8 tiles per load

  // The byte offset of this lane's ldmatrix address in stage 0 for a warp tile at
  // (warp_row, warp_col): lanes 8i..8i+7 address the 8 stored rows of matrix i above.
  __device__ __forceinline__ static unsigned a_lane_offset(int lane, int warp_row) {
    if (T::kColumnA)  // stored k-rows: matrix i at k (i/2)*8, m (i%2)*8
      return 2 * (((lane / 16) * 8 + lane % 8) * T::kStrideA + warp_row + ((lane / 8) % 2) * 8);
    return 2 * ((warp_row + lane % 16) * T::kStrideA + (lane / 16) * 8);
  }
  __device__ __forceinline__ static unsigned b_lane_offset(int lane, int warp_col) {
    const int b_tile = T::kRowsA * T::kStrideA;
    if (T::kColumnB)  // stored n-rows: matrix i at n (i/2)*8, k (i%2)*8
      return 2 * (b_tile + (warp_col + (lane / 16) * 8 + lane % 8) * T::kStrideB +
                  ((lane / 8) % 2) * 8);
    return 2 * (b_tile + (lane % 16) * T::kStrideB + warp_col + (lane / 16) * 8);
  }

  // a_lane/b_lane: this lane's ldmatrix addresses in a stage, in bytes (see *_lane_offset).
  __device__ __forceinline__ void load(unsigned a_lane, unsigned b_lane, int step) {
#pragma unroll
    for (int i = 0; i < T::kMmaM; ++i) {
      if (T::kColumnA)
        ldmatrix_x4_trans(a[i], a_lane + 2 * (step * 16 * T::kStrideA + i * 16));
      else
        ldmatrix_x4(a[i], a_lane + 2 * (i * 16 * T::kStrideA + step * 16));
    }
#pragma unroll
    for (int j = 0; j < T::kMmaN / 2; ++j) {
      if (T::kColumnB)
        ldmatrix_x4(b[j], b_lane + 2 * (j * 16 * T::kStrideB + step * 16));
      else
        ldmatrix_x4_trans(b[j], b_lane + 2 * (step * 16 * T::kStrideB + j * 16));
    }
  }
};

// The MMAs of one 32-byte k step: k16 of bf16 or f16, k8 of tf32.
template <class T, int IN_KIND>
__device__ __forceinline__ void mma_step(float (&acc)[T::kMmaM][T::kMmaN][4],
                                         const WarpFragments<T>& f) {
#pragma unroll
  for (int i = 0; i < T::kMmaM; ++i)
#pragma unroll
    for (int j = 0; j < T::kMmaN; ++j) {
      const unsigned b0 = f.b[j / 2][(j % 2) * 2], b1 = f.b[j / 2][(j % 2) * 2 + 1];
      if (IN_KIND == kF32)
        mma_16x8x8_tf32(acc[i][j], f.a[i], b0, b1);
      else
        mma_16x8x16<IN_KIND>(acc[i][j], f.a[i], b0, b1);
    }
}

// Launch: block WM * WN * 32 threads; grid (tiles of C, min(batch, 65535)); dynamic shared
// memory STAGES * MatmulTile::kStageBytes (see the top of the file).
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGNED,
          int IN_KIND, int OUT_KIND, int LAYOUT, int EPI>
__global__ void __launch_bounds__(WM* WN * 32) matmul_kernel(const MatmulParams p) {
  wait_for_previous_launch();
  allow_next_launch();
  // The tile in 16-bit units: BK elements of fp32 are 2 * BK units (see the top of the file).
  constexpr int kUnits = IN_KIND == kF32 ? 2 : 1;
  typedef MatmulTile<BM, BN, BK * kUnits, WM, WN, LAYOUT> T;
  static_assert(IN_KIND == kBF16 || IN_KIND == kF16 || IN_KIND == kF32, "bf16, f16 or fp32 in");
  static_assert(IN_KIND != kF32 || LAYOUT == kColumnMajorB, "tf32 reads K-major operands only");
  extern __shared__ __align__(128) half_bits smem[];

  for (int batch = blockIdx.y; batch < p.batch; batch += gridDim.y) {
    // The previous batch's last step read a stale stage (its fragments go unused) that this
    // batch's first copies may refill.
    if (batch != static_cast<int>(blockIdx.y)) __syncthreads();
    // Everything below is worked out per batch: hoisting the batch-invariant part out of the
    // loop keeps more values live across the mainloop and costs it instructions (SASS).

    const int tiles_m = (p.m + BM - 1) / BM, tiles_n = (p.n + BN - 1) / BN;
    int tile_m, tile_n;
    grouped_tile(blockIdx.x, tiles_m, tiles_n, p.group_m, tile_m, tile_n);
    const int block_row = tile_m * BM, block_col = tile_n * BN;

    const int thread = threadIdx.x, lane = thread % 32, warp = thread / 32;
    const int warp_row = (warp / WN) * T::kWarpM, warp_col = (warp % WN) * T::kWarpN;

    const unsigned smem_base = smem_address(smem);
    const unsigned a_lane = smem_base + WarpFragments<T>::a_lane_offset(lane, warp_row);
    const unsigned b_lane = smem_base + WarpFragments<T>::b_lane_offset(lane, warp_col);
    const int k_tiles = (p.k + BK - 1) / BK;

    TileCopier<T, ALIGNED> copier(p, kUnits, thread,
                                  static_cast<const half_bits*>(p.a) + batch * p.stride_a * kUnits,
                                  static_cast<const half_bits*>(p.b) + batch * p.stride_b * kUnits,
                                  block_row, block_col);
    float acc[T::kMmaM][T::kMmaN][4];
#pragma unroll
    for (int i = 0; i < T::kMmaM; ++i)
#pragma unroll
      for (int j = 0; j < T::kMmaN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
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
    // while step s's MMAs run, wrapping into the next stage after the last step; the next
    // tile's copies are spread over the steps before the last; the wait and barrier sit before
    // the last step, whose MMAs then cover the first ldmatrix of the next stage.
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
        // After the last step this reads the next stage; on the last tile that stage holds
        // stale data that is never used.
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
          // Tile kt+1 has landed for this thread; the barrier makes it everyone's and ends
          // every warp's reads of stage kt-1, which the next iteration refills.
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
    // A pair of columns goes as one store where it stays aligned. ALIGNED vouches for C only
    // with row-major B (see the top); column-major B's rows are K's, so there C's own leading
    // dimension, batch stride and address decide. The run-time test stays out of the
    // row-major-B kernels: its mere presence costs their mainloop ~10 instructions a tile (SASS).
    const bool paired_store =
        ALIGNED && (!T::kColumnB || (((p.ldc | p.stride_c) & 1) == 0 &&
                                     reinterpret_cast<unsigned long long>(p.c) %
                                             (OUT_KIND == kF32 ? 8 : 4) == 0));
    const long long c_batch = batch * p.stride_c;
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
          if (row < p.m) {
            float v0 = acc[i][j][half * 2], v1 = acc[i][j][half * 2 + 1];
            epilogue_pair<EPI, OUT_KIND>(p.epilogue, batch, row, col, both, v0, v1);
            store_pair<OUT_KIND>(p.c, c_batch + static_cast<long long>(row) * p.ldc + col, v0,
                                 v1, both, paired_store);
          }
        }
      }
  }
}

// The trusted reference: 16x16 shared-memory tiles, fp32 multiply-add, fp32 output (after the
// epilogue, whose inputs are of C's type OUT_KIND). Simple on purpose; tests check it against a
// CPU loop. Each tile element is read by the thread whose threadIdx.x runs along the stored rows,
// so every layout reads global memory coalesced.
// Launch: block 16x16, grid (ceil(n/16), ceil(m/16), min(batch, 65535)).
template <int IN_KIND, int OUT_KIND, int LAYOUT, int EPI>
__global__ void __launch_bounds__(256) matmul_reference(const MatmulParams p) {
  __shared__ float tile_a[16][17];  // [m][k]
  __shared__ float tile_b[16][17];  // [k][n]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * 16 + ty, col = blockIdx.x * 16 + tx;
  // The tile element each thread reads: (m, k) of A and (k, n) of B within the tiles.
  const bool column_a = (LAYOUT & kColumnMajorA) != 0, column_b = (LAYOUT & kColumnMajorB) != 0;
  const int a_m = column_a ? tx : ty, a_k = column_a ? ty : tx;
  const int b_k = column_b ? tx : ty, b_n = column_b ? ty : tx;
  const int a_row = blockIdx.y * 16 + a_m, b_col = blockIdx.x * 16 + b_n;
  for (int batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    const long long a_batch = batch * p.stride_a, b_batch = batch * p.stride_b;
    float sum = 0.f;
    for (int k0 = 0; k0 < p.k; k0 += 16) {
      const int ka = k0 + a_k, kb = k0 + b_k;
      const long long a_index = column_a ? static_cast<long long>(ka) * p.lda + a_row
                                         : static_cast<long long>(a_row) * p.lda + ka;
      const long long b_index = column_b ? static_cast<long long>(b_col) * p.ldb + kb
                                         : static_cast<long long>(kb) * p.ldb + b_col;
      tile_a[a_m][a_k] = (a_row < p.m && ka < p.k) ? load_as_float<IN_KIND>(p.a, a_batch + a_index) : 0.f;
      tile_b[b_k][b_n] = (kb < p.k && b_col < p.n) ? load_as_float<IN_KIND>(p.b, b_batch + b_index) : 0.f;
      __syncthreads();
#pragma unroll
      for (int kk = 0; kk < 16; ++kk) sum = fmaf(tile_a[ty][kk], tile_b[kk][tx], sum);
      __syncthreads();
    }
    if (row < p.m && col < p.n)
      static_cast<float*>(p.c)[batch * p.stride_c + static_cast<long long>(row) * p.ldc + col] =
          epilogue_value<EPI, OUT_KIND>(p.epilogue, batch, row, col, sum);
  }
}

}  // namespace tilesmith
