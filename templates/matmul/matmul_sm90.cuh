// C[b][M x N] = A[b] * B[b] (+ the epilogue) on Hopper (sm_90a): TMA tile loads into a
// p.stages-deep shared ring, wgmma from shared memory with fp32 accumulators in registers, warp
// specialization (one producer warpgroup issues the copies, CONSUMERS warpgroups multiply), a
// persistent grid that walks output tiles in grouped order, batch after batch, and 2-CTA
// clusters that multicast the shared operand. wgmma reads 16-bit operands from shared memory in
// either major order, so every layout runs the same pipeline: row-major A and column-major B
// are K-major tiles (128-byte rows of k), column-major A and row-major B are MN-major tiles
// ([BK][64] blocks, the transpose bits of the instruction). fp32 inputs are multiplied as tf32
// (BK = 32: the same 128-byte rows), which wgmma reads K-major only from shared memory: an
// MN-major fp32 A goes through registers (the RS form, loaded from the stage by 32-bit shared
// loads), and the host transposes an MN-major fp32 B into the workspace first. The epilogue (matmul_epilogue.cuh)
// runs on the accumulators in registers, before C's stores. With SWAP the kernel computes
// C^T = B^T A^T (the host passes B as the kernel's A and A as its B, m and n exchanged), so a
// small M becomes a 16..64-wide wgmma N; with CLUSTER_K > 1 the K slices of a tile are the CTAs
// of one cluster, summed through distributed shared memory. Both send C out through the
// exchange buffer (TileExchange) instead of the TMA staging slots, except SWAP's tiles of 128
// columns or more (fp32 times a row-major B, which is then the kernel's MN-major A, read in
// place through registers): their C^T goes out transposed through the staging slots, or, for
// K slices summed through the workspace, into the partials transposed from registers.
//
// ---- launch_info (what the host must do) --------------------------------------------------------
//  template: matmul_sm90<BM, BN, BK, CONSUMERS, CLUSTER_M, CLUSTER_N, KIND_IN,
//            KIND_OUT, LAYOUT, EPI, SWAP, CLUSTER_K, PINGPONG, GRID_SUM> (KIND_*: ElementKind
//            codes, kF16 = 0, kBF16 = 1, kF32 = 2 (in: tf32; B K-major, A either); LAYOUT, EPI:
//            MatmulLayoutBits, MatmulEpilogueBits (matmul_params.h), LAYOUT of the product the
//            kernel computes: with SWAP, of C^T; SWAP 0 or 1; CLUSTER_K: K slices per
//            cluster, 1 for none; PINGPONG 0 or 1: the two consumer warpgroups share each
//            tile's rows, or take whole tiles in turn;
//            GRID_SUM 0 or 1: K slices through the workspace summed by splitk_reduce, or in
//            this grid (sum_block_in_grid); PHASED 0 (default) or 1: with SWAP, a row-major
//            weight whose rows are off 16 bytes read in row phases (MatmulSm90PhasedParams),
//            the plan's gather_phases first);
//            with SWAP: m = N, n = M, a_map is B's map as the kernel's A, b_map A's as its B;
//            ldc, stride_c and the epilogue stay C's.
//            kernel parameter: const __grid_constant__ MatmulSm90Params, with PHASED
//            MatmulSm90PhasedParams (matmul_sm90_params.h).
//  block:    (CONSUMERS + 1) * 128 threads (x only): warpgroup 0 produces, 1..CONSUMERS multiply.
//  cluster:  CLUSTER_M * CLUSTER_N * CLUSTER_K CTAs along x, fixed at compile time
//            (__cluster_dims__; CLUSTER_K > 1 only with CLUSTER_M = CLUSTER_N = 1): a plain
//            cuLaunchKernel works (checked); cuLaunchKernelEx must not name another cluster shape.
//  grid:     (x only) a multiple of CLUSTER = CLUSTER_M * CLUSTER_N; persistent:
//              units = ceil(M / (BM * CLUSTER_M)) * ceil(N / (BN * CLUSTER_N)) * splits * batch
//              (PHASED: tiles of BM - 8 rows, ceil(M / ((BM - 8) * CLUSTER_M)) along M)
//              grid  = CLUSTER * min(units, max_active_clusters)
//            with p.tail (a tail split: the tiles fill the grid), only the last wave's tiles
//            are split, as MatmulSm90Params::tail says; the grid is then the whole wave.
//            max_active_clusters = cuOccupancyMaxActiveClusters for the kernel, block and smem
//            (on an H100 SXM: 132 at cluster 1, 66 at cluster 2, 30 at cluster 4), or
//            floor(SMs / CLUSTER) where the query is not at hand. Any grid of at least one cluster
//            is correct; grid = CLUSTER * units (one cluster per unit, no persistence) is also
//            correct and was measured 5% slower at 4096^3.
//            GRID_SUM: grid = CLUSTER * units, every CTA resident at once (a cooperative
//            launch), and p.slice_arrivals zeroed before it: one counter per CTA block
//            (tiles x batch x CLUSTER).
//  smem:     dynamic, smem_bytes = stages * (BM + BN) * 128         (A and B rings)
//                                + CONSUMERS * 16384                 (C staging, 2 x 8 KB each)
//                                  or, with SWAP (BN < 128) or CLUSTER_K > 1, the exchange buffer:
//                                  SWAP ? BN * (BM + 4) * 4 : BM * (BN + 8) * 4
//                                + 1024                              (alignment slack)
//                                + 16 * stages + 16                  (mbarriers)
//            e.g. 128x256 (or 256x128), 4 stages, 2 consumers: 230480 bytes. Raise
//            CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to it; H100 limit: 232448 per block.
//  tensor maps (cuTensorMapEncodeTiled, rank 3 (the batch outermost), elementStrides {1, 1, 1},
//            interleave NONE, swizzle 128B, oob fill NONE = zeros; l2 promotion: A's and B's
//            the config's l2_promotion (NONE or L2_256B: a host-side choice the kernel never
//            sees), C's L2_256B):
//    A and B: BFLOAT16 / FLOAT16 / FLOAT32 (KIND_IN), e = its bytes; strides in bytes, boxes
//       128 bytes (128 / e elements) wide.
//    A row-major: globalDim {K, M, batch}; globalStrides {lda * e, stride_a * e};
//       boxDim {128 / e, BM / CLUSTER_N, 1}.
//    A column-major: globalDim {M, K, batch}; globalStrides {lda * e, stride_a * e};
//       boxDim {64, BK / CLUSTER_N, 1}.
//    B row-major: globalDim {N, K, batch}; globalStrides {ldb * e, stride_b * e};
//       boxDim {64, BK / CLUSTER_M, 1}.
//    B column-major: globalDim {K, N, batch}; globalStrides {ldb * e, stride_b * e};
//       boxDim {128 / e, BN / CLUSTER_M, 1}.
//    PHASED, the weight (as the kernel's A): one map per row phase h, weight_maps[h]
//       (MatmulSm90PhasedParams): from the 16-byte boundary at or before phase h's first row,
//       globalDim {N + weight_shift[h], rows of phase h, 1}; globalStrides {G * ldb * e, ...};
//       boxDim {64, BK, 1}, as A column-major (BN < 128: C leaves through the exchange buffer).
//    An operand whose one matrix serves every batch (a batch stride of 0): batch 1 in its map,
//       a_shared / b_shared = 1 (the kernel then reads batch 0 of it for every batch).
//    C (only with c_store_tma = 1): BFLOAT16 / FLOAT16 / FLOAT32 (KIND_OUT); globalDim
//       {N, M, batch}; globalStrides {ldc * bytes, stride_c * bytes}; boxDim
//       {128 / bytes(KIND_OUT), 64, 1} (64 x 64 for 16-bit C, 32 x 64 for fp32).
//    TMA needs 16-byte aligned base addresses and strides: lda, ldb, stride_a and stride_b
//    multiples of 8 elements (the host copies others into padded rows first), A and B 16-byte
//    aligned. For C through TMA: ldc * bytes, stride_c * bytes and N * bytes multiples of 16
//    and C 16-byte aligned (TMA stores whole 16-byte chunks: with a ragged N the last one
//    would write past the view); otherwise set c_store_tma = 0 and C is written with plain
//    element stores from the same staging slots, a warp per row run (any ldc >= N, C aligned
//    to its element). With
//    SWAP (BN < 128) or CLUSTER_K > 1, c_store_tma = 0: C goes out from the exchange buffer in
//    runs of 4 columns (vector stores where each batch's rows start on 4 elements).
//  constraints: BK * bytes(KIND_IN) == 128 (64, or 32 for fp32); BN in {16, 32, 64, 80, 88, 96,
//     104, 112, 128, 176, 192, 224, 256}, all but multiples of 64 only with a K-major B
//     (column-major in LAYOUT);
//     BM / CONSUMERS a multiple of 64;
//     (BM / CONSUMERS / 64) * BN <= 256 (accumulator registers); CONSUMERS in {1, 2, 3};
//     PINGPONG: CONSUMERS = 2, SWAP = 0, CLUSTER_K = 1, (BM / 64) * BN <= 384; SWAP with BN >= 128:
//     CLUSTER_K = 1 and no K slices (C^T leaves whole tiles transposed);
//     CONSUMERS == 3 needs BN <= 192 (entry cap 128 registers); CLUSTER_M in {1, 2, 4},
//     CLUSTER_N in {1, 2};
//     CLUSTER_K in {1, 2, 4, 8}, and > 1 only without multicast;
//     multicast slices (A_SLICE, B_SLICE) of whole 8-row boxes (a K-major tile's last boxes may
//     overlap the one before: multicast_box_rows); p.group_m >= 1; p.stages >= 2;
//     smem_bytes <= 232448.
//  early start: the host launches this kernel early behind the previous one (programmatic
//     dependent launch: a padding copy, a transpose, the call before); the producer waits for
//     that grid before its first load, the consumers before anything else they do.
//  registers: with 2 or 3 consumers the producer warpgroup drops to 40 (24 with 3) registers
//     and the consumers rise to 232 (160 with 3) with setmaxnreg; ptxas reports the entry cap
//     (65536 / threads, rounded down to 8: 168 for 384 threads, 128 for 512) and allocates the
//     consumer code within it; one consumer: no reallocation (154 registers at 256 threads).
//     Ping-pong's whole tiles fit the 232: 128x176 and 128x192 (176 and 192 accumulators) use
//     up to R216 with no spills (ptxas, sm_90a).
//     Checked with ptxas over the sm_90a slice at 4096^3: one kernel spills, 192x192 on three
//     consumers in a 1x2 cluster (4 bytes, at the 128-register entry cap).
//  measured best (H100 SXM, bf16): 128x256, 4 stages, 2 consumers, cluster 2x1, group_m 8
//     (0.995x cuBLAS at 4096^3, 1.007x at 8192^3); 256x128 cluster 1x2 is within 2%.
// -------------------------------------------------------------------------------------------------
//
// Shared memory (base rounded up to 1024 bytes, as the 128-byte swizzle repeats every 1024):
//   A ring: stages x [BM rows][64 k] (128-byte rows, swizzled)       stages * BM * 128 bytes
//           column-major A: stages x (BM / 64) blocks of [BK k rows][64 m]
//   B ring: stages x (BN / 64) blocks of [BK k rows][64 n]            stages * BN * 128 bytes
//           column-major B: stages x [BN rows][64 k]
//   C staging: CONSUMERS x 2 slots of [64 rows][128 bytes] (swizzled)  CONSUMERS * 16 KB
//   full[stages], empty[stages] mbarriers (8 bytes each)
// One stage = one BK slice of one output tile. full[s] completes when the TMA bytes of stage s
// have landed (the producer's arrive_expect_tx plus the bytes); empty[s] completes when every
// consumer warpgroup of every CTA in the cluster has finished reading stage s (their wgmma
// groups waited on), since a cluster peer's multicast writes into this CTA's stage s too.
//
// Clusters: CTA rank r = cm + CLUSTER_M * cn. A cluster owns a (BM*CLUSTER_M) x (BN*CLUSTER_N)
// block of C; CTA (cm, cn) computes its (cm, cn) BM x BN tile. CTAs with the same cm share the
// A tile: each loads 1 / CLUSTER_N of it (of its m rows when K-major, of its k rows when
// MN-major) and multicasts it to those peers. CTAs with the same cn share the B tile: each loads
// 1 / CLUSTER_M of it (of its k rows when MN-major, of its n rows when K-major). A K-major
// share is rounded up to whole 8-row atoms: 112 rows in fours are boxes of 32 at rows 0, 32, 64
// and 80, rows 80-95 landing twice (the stage's expected bytes count them twice).
#pragma once

#include "common/copy_rows.cuh"  // the padding copy of unaligned A and B, in the same unit
#include "common/hopper.cuh"
#include "matmul/matmul_epilogue.cuh"
#include "matmul/matmul_sm90_params.h"
#include "matmul/matmul_splitk.cuh"  // split-K's reduction, in the same unit
#include "matmul/matmul_tile_order.cuh"
#include "matmul/matmul_weight_phases.cuh"  // the other operand gathered for a phased weight

// wgmma groups a consumer leaves running when it hands a stage back: 1 (default) hands stage
// k - 1 back once stage k's group is issued and k - 1's is done; 0 hands each stage back as soon
// as its own group is done. The probe measured no consistent difference (within 3% either way).
#ifndef TS_SM90_MMA_IN_FLIGHT
#define TS_SM90_MMA_IN_FLIGHT 1
#endif

namespace tilesmith {

// Applies the epilogue (matmul_epilogue.cuh) to one warpgroup's 64 x BN accumulator block at
// (row0, col0) of batch `batch`, in registers, before any of the stores; elements outside
// m x n are left alone (their bias and residual do not exist).
template <int BN, int EPI, int KIND_OUT>
__device__ __forceinline__ void epilogue_accumulators(float (&acc)[BN / 2],
                                                      const MatmulEpilogueArgs& e, int batch,
                                                      int m, int n, int row0, int col0) {
  if (EPI == kActNone) return;
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = row0 + warp * 16 + lane / 4 + 8 * half;
    if (row >= m) continue;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const int col = col0 + 8 * j + 2 * (lane % 4);
      if (col < n)
        epilogue_pair<EPI, KIND_OUT>(e, batch, row, col, col + 1 < n, acc[4 * j + 2 * half],
                                     acc[4 * j + 2 * half + 1]);
    }
  }
}

__device__ __forceinline__ void store_float_pair(float* out, float v0, float v1) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(out), "f"(v0), "f"(v1) : "memory");
}

// Stores one warpgroup's 64 x BN accumulator block at (row0, col0) of C, clipped to m x n.
// Thread layout: see the end of hopper.cuh.
template <int BN, int KIND_OUT>
__device__ __forceinline__ void store_accumulators(const float (&acc)[BN / 2], void* c, int ldc,
                                                   int m, int n, int row0, int col0, bool vec_ok) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
  const int row = row0 + warp * 16 + lane / 4;
  const int col = col0 + 2 * (lane % 4);
  if (vec_ok && row0 + 64 <= m && col0 + BN <= n) {
    // Whole block inside C: one 2-element store per pair, no checks (the common case).
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const long long offset = static_cast<long long>(row + 8 * half) * ldc + col;
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        const float v0 = acc[4 * j + 2 * half], v1 = acc[4 * j + 2 * half + 1];
        if (KIND_OUT == kF32)
          store_float_pair(static_cast<float*>(c) + offset + 8 * j, v0, v1);
        else
          *reinterpret_cast<unsigned*>(static_cast<half_bits*>(c) + offset + 8 * j) =
              pack2<KIND_OUT>(v0, v1);
      }
    }
    return;
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row + 8 * half;
    if (r >= m) continue;
    const long long offset = static_cast<long long>(r) * ldc + col;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      const float v0 = acc[4 * j + 2 * half], v1 = acc[4 * j + 2 * half + 1];
      const int cc = col + 8 * j;
      if (cc >= n) continue;
      const bool pair = vec_ok && cc + 1 < n;
      if (KIND_OUT == kF32) {
        float* out = static_cast<float*>(c) + offset + 8 * j;
        if (pair) {
          store_float_pair(out, v0, v1);
        } else {
          out[0] = v0;
          if (cc + 1 < n) out[1] = v1;
        }
      } else {
        half_bits* out = static_cast<half_bits*>(c) + offset + 8 * j;
        if (pair) {
          *reinterpret_cast<unsigned*>(out) = pack2<KIND_OUT>(v0, v1);
        } else {
          out[0] = from_float<KIND_OUT>(v0);
          if (cc + 1 < n) out[1] = from_float<KIND_OUT>(v1);
        }
      }
    }
  }
}

// One warpgroup's 64 x BN accumulator block of C^T (SWAP: the kernel's rows are C's columns)
// at the kernel's (row0, col0) into the fp32 partials of a K slice, laid out as C (its rows
// ld = the kernel's m apart), transposed and clipped to the kernel's m x n. A store's eight
// lanes of one lane % 4 write eight neighbouring floats: each store fills four 32-byte sectors.
template <int BN>
__device__ __forceinline__ void store_partials_transposed(const float (&acc)[BN / 2],
                                                          float* partial, int m, int n,
                                                          int row0, int col0) {
  const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row0 + warp * 16 + lane / 4 + 8 * half;
    if (r >= m) continue;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j)
#pragma unroll
      for (int odd = 0; odd < 2; ++odd) {
        const int col = col0 + 8 * j + 2 * (lane % 4) + odd;
        if (col < n) partial[static_cast<long long>(col) * m + r] = acc[4 * j + 2 * half + odd];
      }
  }
}

// One 2- or 4-byte element of a staged box, from shared memory at `from` to global `to`.
template <int BYTES>
__device__ __forceinline__ void store_staged_element(unsigned from, void* to) {
  if constexpr (BYTES == 4) {
    unsigned value;
    asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(value) : "r"(from));
    *static_cast<unsigned*>(to) = value;
  } else {
    unsigned short value;
    asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(value) : "r"(from));
    *static_cast<unsigned short*>(to) = value;
  }
}

// One staged box (64 rows of 128 bytes, 16-byte chunk k of row r at chunk k ^ (r % 8)) out to
// C, whose rows start on 16-byte boundaries, with plain stores: `c` is the box's first element,
// rows ldc_bytes apart; `rows` and `width` (bytes) clip it. Each warp writes four whole rows an
// instruction, 16 bytes a lane; a row's last width % 16 bytes go out one element at a time.
template <int OUT_BYTES>
__device__ __forceinline__ void store_box_rows_aligned(unsigned slot, char* c, long long ldc_bytes,
                                                       int rows, int width) {
  const int tid = threadIdx.x % 128;
  const int whole = width / 16;
#pragma unroll
  for (int at = tid; at < 64 * 8; at += 128) {
    const int r = at / 8, k = at % 8;
    if (r >= rows) break;
    const unsigned staged = slot + r * 128;
    char* const row = c + r * ldc_bytes;
    const unsigned chunk = staged + ((k ^ (r % 8)) << 4);
    if (k < whole) {
      const float4 v = load_shared_f32x4(chunk);
      const unsigned words[4] = {__float_as_uint(v.x), __float_as_uint(v.y), __float_as_uint(v.z),
                                 __float_as_uint(v.w)};
      store_global_16(row + 16 * k, words);
    } else if (k == whole) {
      for (int b = 16 * k; b < width; b += OUT_BYTES)
        store_staged_element<OUT_BYTES>(chunk + b % 16, row + b);
    }
  }
}

// One staged box (64 rows of 128 bytes, swizzled as above) out to C with plain element stores,
// for C whose rows TMA cannot write: `c` is the batch's C (rows ldc apart), the box's first
// element at (row0, col0), clipped to m x n and to its first `cols` columns. Thread t writes
// column t % BOX_COLS of every (128 / BOX_COLS)-th row.
template <int OUT_BYTES>
__device__ __forceinline__ void store_box_elements(unsigned slot, void* c, int ldc, int m, int n,
                                                   int row0, int col0, int cols) {
  constexpr int BOX_COLS = 128 / OUT_BYTES;
  constexpr int ROW_STEP = 128 / BOX_COLS;
  const int tid = threadIdx.x % 128;
  const int col = col0 + tid % BOX_COLS;
  const unsigned in_chunk = (tid % BOX_COLS) * OUT_BYTES;
  if (col >= n || tid % BOX_COLS >= cols) return;
#pragma unroll 4
  for (int r = tid / BOX_COLS; r < 64; r += ROW_STEP) {
    const int row = row0 + r;
    if (row >= m) break;
    const unsigned at = slot + r * 128 + ((((in_chunk >> 4) ^ (r % 8)) << 4) | (in_chunk & 15));
    const long long offset = static_cast<long long>(row) * ldc + col;
    store_staged_element<OUT_BYTES>(at, static_cast<char*>(c) + offset * OUT_BYTES);
  }
}

// Stores one warpgroup's 64 x BN accumulator block at (row0, col0) of C through the TMA unit:
// the block goes out as boxes of 64 rows x 128 bytes (64 columns of 16-bit C, 32 of fp32), each
// written into one of the warpgroup's two 8 KB staging slots in the 128-byte swizzled layout the
// map expects (16-byte chunk c of row r at chunk c ^ (r % 8): the 32 lanes of each store hit 32
// different banks), then stored asynchronously, so the warpgroup goes back to its main loop
// while the copy engine writes C. `boxes_issued` counts this warpgroup's boxes across tiles: a
// slot is rewritten only once the store issued from it two boxes earlier has read it.
//
// Where TMA cannot write C (rows not on 16-byte boundaries: N = 4093), the same staged boxes go
// out with plain stores instead (BY_TMA false: `c` is the batch's C, rows ldc apart, clipped to
// m x n): each warp writes a run of one row, 64 or 128 contiguous bytes, where storing straight
// from the accumulators wrote 2-byte elements scattered over 8 rows per instruction. A block
// whose last box is partial (BN 176, or 224 of 16-bit C) sends that box out the same way with
// TMA too (a whole box would write into the next tile's columns): `c`, ldc, m and n are then
// given as well, and each slot waits for every earlier store's read (the partial box commits
// no bulk group, so counting groups would not say which slot is free). That partial box goes
// out 16 bytes a store (store_box_rows_aligned): per element it cost up_proj's 176-wide tiles
// 1-2% (v21). Where the rows are not aligned the per-element stores stay: 16-byte stores
// assembled by funnel shifts per row were 1.5% slower at 4093 (v21).
template <int BN, int KIND_OUT, bool BY_TMA>
__device__ __forceinline__ void store_accumulators_staged(const float (&acc)[BN / 2],
                                                          const TensorMap* c_map, void* c,
                                                          int ldc, int m, int n,
                                                          unsigned staging, int batch, int row0,
                                                          int col0, int barrier_id,
                                                          unsigned& boxes_issued) {
  constexpr int OUT_BYTES = KIND_OUT == kF32 ? 4 : 2;
  constexpr int BOX_COLS = 128 / OUT_BYTES;
  constexpr int GROUPS_PER_BOX = BOX_COLS / 8;  // 8-column accumulator groups j in one box
  const int tid = threadIdx.x % 128, lane = threadIdx.x % 32, warp = tid / 32;
  const int q = lane % 4;
  constexpr int WHOLE_BOXES = BN / BOX_COLS;
#pragma unroll
  for (int box = 0; box < (BN + BOX_COLS - 1) / BOX_COLS; ++box) {
    const unsigned slot = staging + (boxes_issued & 1u) * 8192u;
    const bool tma_box = BY_TMA && box < WHOLE_BOXES;
    if (BY_TMA && tid == 0) {
      if (BN % BOX_COLS) tma_store_wait_read<0>();
      else tma_store_wait_read<1>();
    }
    named_barrier_sync(barrier_id, 128);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = warp * 16 + lane / 4 + 8 * half;  // row in the box; r % 8 == lane / 4
      const unsigned row_addr = slot + r * 128;
#pragma unroll
      for (int jj = 0; jj < GROUPS_PER_BOX; ++jj) {
        const int j = box * GROUPS_PER_BOX + jj;
        if (j >= BN / 8) break;  // past a partial box's columns: never stored
        const float v0 = acc[4 * j + 2 * half], v1 = acc[4 * j + 2 * half + 1];
        if (KIND_OUT == kF32) {
          const int chunk = 2 * jj + q / 2;
          store_shared_f32x2(row_addr + ((chunk ^ (lane / 4)) << 4) + 8 * (q % 2), v0, v1);
        } else {
          store_shared_u32(row_addr + ((jj ^ (lane / 4)) << 4) + 4 * q, pack2<KIND_OUT>(v0, v1));
        }
      }
    }
    if (tma_box) {
      fence_proxy_async_shared();
      named_barrier_sync(barrier_id, 128);
      if (tid == 0) {
        tma_store_3d(c_map, slot, col0 + box * BOX_COLS, row0, batch);
        tma_store_commit();
      }
    } else if (BY_TMA) {
      // The slot is rewritten two boxes later, after the barriers of the box between.
      named_barrier_sync(barrier_id, 128);
      const int box_col0 = col0 + box * BOX_COLS;
      const int cols = min(BOX_COLS, min(col0 + BN, n) - box_col0);
      if (cols > 0)
        store_box_rows_aligned<OUT_BYTES>(
            slot, static_cast<char*>(c) + (static_cast<long long>(row0) * ldc + box_col0) * OUT_BYTES,
            static_cast<long long>(ldc) * OUT_BYTES, min(64, m - row0), cols * OUT_BYTES);
    } else {
      named_barrier_sync(barrier_id, 128);
      // The slot is rewritten two boxes later, after the barriers of the box between.
      store_box_elements<OUT_BYTES>(slot, c, ldc, m, n, row0, col0 + box * BOX_COLS,
                                    BN - box * BOX_COLS);
    }
    ++boxes_issued;
  }
}

// SWAP with tiles of 128 columns or more (fp32 with B row-major: the kernel computes C^T, B as
// its A through registers; or 16-bit M of 129-256 rows in one tile of 128-256 columns, 144,
// 160 and 176 among them): one warpgroup's 64 x BN accumulator block, whose rows are C's
// columns c_col0.. and whose columns are C's rows c_row0.., goes out transposed through the
// same staging slots. A round takes 64 of C's rows (8 accumulator groups) by the block's 64
// columns: one box of 16-bit C, or two of fp32 (warps 0-1 and 2-3, 32 columns each), written an
// element at a time into the swizzled slots (a store's 32 lanes hit 32 banks), the epilogue
// applied on the way (m x n: C's rows and columns); then out by TMA (BY_TMA), or by plain
// stores where TMA cannot write C. K slices go to their partials instead
// (store_partials_transposed).
template <int BN, int KIND_OUT, int EPI, bool BY_TMA>
__device__ __forceinline__ void store_accumulators_transposed(
    const float (&acc)[BN / 2], const TensorMap* c_map, void* c, int ldc, int m, int n,
    const MatmulEpilogueArgs& e, unsigned staging, int batch, int c_row0, int c_col0,
    int barrier_id, unsigned& boxes_issued) {
  constexpr int OUT_BYTES = KIND_OUT == kF32 ? 4 : 2;
  constexpr int BOX_COLS = 128 / OUT_BYTES;
  constexpr int BOXES = 64 / BOX_COLS;  // boxes a round: 2 of fp32, 1 of 16-bit C
  // A block of 144, 160 or 176 columns ends in a round of 16, 32 or 48 of C's rows: the box's
  // other rows hold stale bytes, past M's end (the host keeps M within one such tile), where
  // the store clips them.
  static_assert(BN % 16 == 0, "rounds of whole 16-row groups of C");
  const int tid = threadIdx.x % 128, lane = threadIdx.x % 32, warp = tid / 32;
  const int g = lane / 4, q = lane % 4;
  const int box = BOXES == 2 ? warp / 2 : 0;  // this warp's box of the round
#pragma unroll
  for (int round = 0; round < (BN + 63) / 64; ++round) {
    // A 16-bit round's box takes the slots in turn; an fp32 round takes both.
    const unsigned first_slot = BOXES == 2 ? 0u : (boxes_issued & 1u);
    if (BY_TMA && tid == 0) tma_store_wait_read<BOXES == 2 ? 0 : 1>();
    named_barrier_sync(barrier_id, 128);
    const unsigned slot = staging + (first_slot + box) * 8192u;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int col_in_block = warp * 16 + g + 8 * half;
      const int col = c_col0 + col_in_block;
      const unsigned byte = (col_in_block - box * BOX_COLS) * OUT_BYTES;  // in the box's row
#pragma unroll
      for (int jj = 0; jj < 8; ++jj) {
        if (round * 64 + 8 * jj >= BN) break;  // the last round's rows past the block
#pragma unroll
        for (int odd = 0; odd < 2; ++odd) {
          const int r = 8 * jj + 2 * q + odd;  // the box's row
          const int row = c_row0 + round * 64 + r;
          float v = acc[4 * (round * 8 + jj) + 2 * half + odd];
          if (EPI != kActNone && row < m && col < n)
            v = epilogue_value<EPI, KIND_OUT>(e, batch, row, col, v);
          const unsigned at = slot + r * 128 + ((((byte >> 4) ^ (r % 8)) << 4) | (byte & 15));
          if (KIND_OUT == kF32)
            store_shared_f32(at, v);
          else
            store_shared_u16(at, from_float<KIND_OUT>(v));
        }
      }
    }
    if (BY_TMA) {
      fence_proxy_async_shared();
      named_barrier_sync(barrier_id, 128);
      if (tid == 0) {
#pragma unroll
        for (int b = 0; b < BOXES; ++b) {
          tma_store_3d(c_map, staging + (first_slot + b) * 8192u, c_col0 + b * BOX_COLS,
                       c_row0 + round * 64, batch);
          tma_store_commit();
        }
      }
    } else {
      named_barrier_sync(barrier_id, 128);
#pragma unroll
      for (int b = 0; b < BOXES; ++b)
        store_box_elements<OUT_BYTES>(staging + (first_slot + b) * 8192u, c, ldc, m, n,
                                      c_row0 + round * 64, c_col0 + b * BOX_COLS, BOX_COLS);
    }
    boxes_issued += BOXES;
  }
}

// The tile's fp32 accumulators go out through shared memory when the tile is transposed
// (SWAP: the kernel computes C^T, so its rows are C's columns) or when the K slices of a tile
// are the CTAs of a cluster (CLUSTER_K > 1). The consumer warpgroups write their accumulators
// into a buffer laid out as C is (OUTER rows of C, INNER contiguous columns, padded so the
// accumulator writes spread over the banks); with CLUSTER_K > 1 the CTAs of the cluster then
// each sum their 1 / CLUSTER_K of the rows over every CTA's buffer (distributed shared memory,
// in rank order: deterministic), and the sums go through the epilogue into C (or, for split-K
// through the workspace, into the fp32 partials) in 16-byte runs of columns.
//
// Barriers: `full` completes when every CTA of the cluster has written its buffer, `empty` when
// every CTA has read this CTA's buffer (one arrival per CTA each, cluster scope); `tiles` counts
// the tiles this CTA has sent through, for the phases. Without a cluster a named barrier over
// the consumers does both jobs.
template <int BM, int BN, int CONSUMERS, int CLUSTER_K, int SWAP>
struct TileExchange {
  static constexpr int INNER = SWAP ? BM : BN;   // C's columns in the tile
  static constexpr int OUTER = SWAP ? BN : BM;   // C's rows in the tile
  static constexpr int STRIDE = INNER + (SWAP ? 4 : 8);  // floats per buffer row
  static constexpr int BYTES = OUTER * STRIDE * 4;
  static constexpr int THREADS = CONSUMERS * 128;
  static constexpr int BARRIER_ID = 4;  // 1..3 are the warpgroups' staging barriers
  static_assert(OUTER % CLUSTER_K == 0 && INNER % 4 == 0, "whole rows per CTA, 16-byte runs");

  // Warpgroup `c`'s 64-row accumulator block `mt` (tile rows row0.., wgmma layout: the end of
  // hopper.cuh) into the buffer.
  template <int N>
  __device__ __forceinline__ static void write(unsigned buffer, const float (&acc)[N / 2],
                                               int row0) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row0 + warp * 16 + lane / 4 + 8 * half;
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
        const int col = 8 * j + 2 * (lane % 4);
        const float v0 = acc[4 * j + 2 * half], v1 = acc[4 * j + 2 * half + 1];
        if (SWAP) {
          store_shared_f32(buffer + 4u * (col * STRIDE + r), v0);
          store_shared_f32(buffer + 4u * ((col + 1) * STRIDE + r), v1);
        } else {
          store_shared_f32x2(buffer + 4u * (r * STRIDE + col), v0, v1);
        }
      }
    }
  }

  // PHASED (SWAP): warpgroup `c`'s accumulator block `mt`, rows row0.. of the tile, into the
  // buffer `shift` rows up (rows above the tile dropped), written (`first`) or added.
  template <int N>
  __device__ __forceinline__ static void write_shifted(unsigned buffer, const float (&acc)[N / 2],
                                                       int row0, int shift, bool first) {
    static_assert(SWAP, "the phases' sums are C^T's tiles");
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = row0 + warp * 16 + lane / 4 + 8 * half - shift;
      if (r < 0) continue;
#pragma unroll
      for (int j = 0; j < N / 8; ++j) {
        const int col = 8 * j + 2 * (lane % 4);
        const unsigned at0 = buffer + 4u * (col * STRIDE + r), at1 = at0 + 4u * STRIDE;
        float v0 = acc[4 * j + 2 * half], v1 = acc[4 * j + 2 * half + 1];
        if (!first) {
          v0 += load_shared_f32(at0);
          v1 += load_shared_f32(at1);
        }
        store_shared_f32(at0, v0);
        store_shared_f32(at1, v1);
      }
    }
  }

  // Every consumer thread, once its accumulators are in the buffer: sums this CTA's rows of
  // the tile over the cluster and stores them at (row0, col0) of `out` (C's coordinates, rows
  // ld apart, clipped to rows x cols) through the epilogue.
  template <int KIND, int EPI>
  __device__ __forceinline__ static void reduce_and_store(unsigned buffer, unsigned full,
                                                          unsigned empty, unsigned& tiles,
                                                          const MatmulEpilogueArgs& e, int batch,
                                                          void* out, int ld, int rows, int cols,
                                                          int row0, int col0) {
    const int t = threadIdx.x - 128;  // consumer threads follow the producer warpgroup
    const unsigned rank = CLUSTER_K > 1 ? cluster_cta_rank() : 0u;
    named_barrier_sync(BARRIER_ID, THREADS);
    if (CLUSTER_K > 1) {
      if (t == 0) {
        fence_acq_rel_cluster();
#pragma unroll
        for (int peer = 0; peer < CLUSTER_K; ++peer) mbarrier_arrive_cluster_release(full, peer);
      }
      mbarrier_wait_cluster(full, tiles & 1u);
    }
    unsigned remote[CLUSTER_K];
#pragma unroll
    for (int peer = 0; peer < CLUSTER_K; ++peer)
      remote[peer] = CLUSTER_K > 1 ? map_to_cta(buffer, peer) : buffer;
    constexpr int OWN_ROWS = OUTER / CLUSTER_K, QUADS = INNER / 4;
    // 4-element stores where every row of this batch's C starts on 4 elements.
    const bool vector_ok =
        ld % 4 == 0 && reinterpret_cast<unsigned long long>(out) % (4 * (KIND == kF32 ? 4 : 2)) == 0;
#pragma unroll 2
    for (int idx = t; idx < OWN_ROWS * QUADS; idx += THREADS) {
      const int o = rank * OWN_ROWS + idx / QUADS, i = 4 * (idx % QUADS);
      const int row = row0 + o, col = col0 + i;
      if (row >= rows || col >= cols) continue;
      float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
      for (int peer = 0; peer < CLUSTER_K; ++peer) {
        const unsigned at = remote[peer] + 4u * (o * STRIDE + i);
        const float4 v = CLUSTER_K > 1 ? load_shared_cluster_f32x4(at) : load_shared_f32x4(at);
        sum.x += v.x;
        sum.y += v.y;
        sum.z += v.z;
        sum.w += v.w;
      }
      float v[4] = {sum.x, sum.y, sum.z, sum.w};
#pragma unroll
      for (int q = 0; q < 4; ++q) v[q] = epilogue_value<EPI, KIND>(e, batch, row, col + q, v[q]);
      const long long at = static_cast<long long>(row) * ld + col;
      if (KIND == kF32) {
        float* dst = static_cast<float*>(out) + at;
        if (vector_ok && col + 3 < cols) {
          *reinterpret_cast<float4*>(dst) = make_float4(v[0], v[1], v[2], v[3]);
        } else {
          for (int q = 0; q < 4 && col + q < cols; ++q) dst[q] = v[q];
        }
      } else {
        half_bits* dst = static_cast<half_bits*>(out) + at;
        if (vector_ok && col + 3 < cols) {
          *reinterpret_cast<uint2*>(dst) = make_uint2(pack2<KIND>(v[0], v[1]), pack2<KIND>(v[2], v[3]));
        } else {
          for (int q = 0; q < 4 && col + q < cols; ++q) dst[q] = from_float<KIND>(v[q]);
        }
      }
    }
    // The buffer is rewritten by the next tile only once every reader is done with it.
    named_barrier_sync(BARRIER_ID, THREADS);
    if (CLUSTER_K > 1) {
      if (t == 0) {
#pragma unroll
        for (int peer = 0; peer < CLUSTER_K; ++peer) mbarrier_arrive_cluster_release(empty, peer);
      }
      mbarrier_wait_cluster(empty, tiles & 1u);
    }
    ++tiles;
  }
};

// GRID_SUM: the K slices of a CTA block are summed by the CTAs that computed them, in the
// product's own grid, not by a second launch that waits for the whole grid. Every consumer
// thread, once its partials are stored: the CTA counts itself in on the block's counter in the
// workspace (zeroed by the plan before the launch), waits until every slice has, then sums its
// 1 / splits of the block's runs of 4 columns over the slices into C through the epilogue. The
// host launches one CTA per unit, all at once (a cooperative launch), so no CTA waits on one
// that cannot start.
template <int BM, int BN, int CONSUMERS, int KIND_OUT, int EPI>
__device__ __forceinline__ void sum_block_in_grid(const MatmulSm90Params& p, int splits,
                                                  int slice, int block, int batch, int m0, int n0) {
  constexpr int THREADS = CONSUMERS * 128;
  constexpr int BARRIER_ID = 5;  // 1..3: the staging slots', 4: TileExchange's
  named_barrier_sync(BARRIER_ID, THREADS);
  if (threadIdx.x == 128) {
    // The barrier orders the CTA's partial stores before this thread's fence and count.
    unsigned* const arrivals = p.slice_arrivals + block;
    __threadfence();
    atomicAdd(arrivals, 1u);
    unsigned seen;
    do {
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(arrivals) : "memory");
    } while (seen < static_cast<unsigned>(splits));
  }
  named_barrier_sync(BARRIER_ID, THREADS);
  // A thread per run of 4 columns of the CTA's share of the block, all slices' loads of a run
  // in flight at once (sum_slices). Holding a batch of runs a thread in flight instead ran the
  // in-grid defaults 0.84x as fast (docs/perf/matmul.md v27).
  constexpr int RUNS_ROW = BN / 4, RUNS = BM * RUNS_ROW;
  const int share = (RUNS + splits - 1) / splits, end = min(RUNS, (slice + 1) * share);
  const long long slice_floats = static_cast<long long>(p.batch) * p.m * p.n;
  const float* const partials = p.partials + static_cast<long long>(batch) * p.m * p.n;
  SplitKReduceParams to{};  // where the sums go: splitk_reduce's view of C and the epilogue
  to.c = p.c;
  to.n = p.n;
  to.ldc = p.ldc;
  to.stride_c = p.stride_c;
  to.epilogue = p.epilogue;
  for (int r = slice * share + static_cast<int>(threadIdx.x) - 128; r < end; r += THREADS) {
    const int row = m0 + r / RUNS_ROW, col = n0 + (r % RUNS_ROW) * 4;
    if (row >= p.m || col >= p.n) continue;
    float v[4];
    // Plain loads: thread 128's acquire and the barrier order them after every slice's stores.
    sum_slices(partials + static_cast<long long>(row) * p.n + col, slice_floats, splits,
               p.n % 4 == 0, p.n - col, v);
    store_reduced_run<KIND_OUT, EPI>(to, batch, row, col, v);
  }
}

template <int BM, int BN, int BK, int CONSUMERS, int CLUSTER_M, int CLUSTER_N,
          int KIND_IN, int KIND_OUT, int LAYOUT, int EPI, int SWAP, int CLUSTER_K, int PINGPONG,
          int GRID_SUM, int PHASED = 0>
__global__ void __launch_bounds__((CONSUMERS + 1) * 128, 1)
    __cluster_dims__(CLUSTER_M* CLUSTER_N* CLUSTER_K, 1, 1)
        matmul_sm90(const __grid_constant__ typename MatmulSm90ParamsOf<PHASED>::type p) {
  constexpr int MULTICAST = CLUSTER_M * CLUSTER_N;  // CTAs sharing operand tiles
  constexpr int CLUSTER = MULTICAST * CLUSTER_K;
  // SWAP's tiles of 128 columns or more (fp32, B row-major read in place as the kernel's A)
  // send C^T out transposed through the staging slots; its narrow tiles (a few rows of A as
  // wgmma's N) through the exchange buffer.
  constexpr bool SWAP_STAGED = SWAP && BN >= 128;
  // C leaves through the TMA staging slots, or through the exchange buffer (TileExchange).
  constexpr bool EXCHANGE = (SWAP && !SWAP_STAGED) || CLUSTER_K > 1;
  using Exchange = TileExchange<BM, BN, CONSUMERS, CLUSTER_K, SWAP>;
  constexpr bool A_COLUMNS = (LAYOUT & kColumnMajorA) != 0;  // A stored k x m: M-major tiles
  constexpr bool B_COLUMNS = (LAYOUT & kColumnMajorB) != 0;  // B stored n x k: K-major tiles
  // Rows of C per consumer warpgroup: a share of the tile, or (PINGPONG) the whole of it.
  constexpr int WG_M = PINGPONG ? BM : BM / CONSUMERS;
  constexpr int MT = WG_M / 64;         // m64 wgmma tiles per consumer warpgroup
  // One k row of a tile is 128 bytes: BK = 64 of bf16/f16, 32 of fp32 (read as tf32).
  constexpr int ELEMENT = KIND_IN == kF32 ? 4 : 2;
  // tf32 wgmma reads its shared-memory operands K-major only: an MN-major tf32 A goes through
  // registers instead (the RS form), loaded from the stage by 32-bit shared loads.
  constexpr bool A_REGS = KIND_IN == kF32 && A_COLUMNS;
  constexpr int MN_COLS = 128 / ELEMENT;  // M or N elements in an MN-major block's 128-byte row
  constexpr int A_STAGE = BM * BK * ELEMENT;
  constexpr int B_STAGE = BN * BK * ELEMENT;
  constexpr int K_STEPS = BK * ELEMENT / 32;  // wgmmas per stage along k, 32 bytes each
  // An MN-major operand is stored in [BK][64] blocks (one swizzle atom column each); a K-major
  // one in [rows][BK] (one 128-byte row per m or n).
  constexpr int MN_CHUNK = BK * 128;
  // Multicast slices: each CTA of a cluster row loads 1/CLUSTER_N of the shared A tile, each of
  // a cluster column 1/CLUSTER_M of the shared B tile; a K-major tile is sliced by its rows (in
  // boxes of whole 8-row atoms, the last ones moved back to end at the tile's last row:
  // multicast_box_rows), an MN-major one by its k rows.
  constexpr int A_SLICE = A_COLUMNS ? BK / CLUSTER_N : multicast_box_rows(BM, CLUSTER_N);
  constexpr int B_SLICE = B_COLUMNS ? multicast_box_rows(BN, CLUSTER_M) : BK / CLUSTER_M;
  // The bytes landing in each CTA's stage: the tiles, and the rows that overlapping boxes
  // deliver twice.
  constexpr int STAGE_TX = (A_COLUMNS ? A_STAGE : CLUSTER_N * A_SLICE * 128) +
                           (B_COLUMNS ? CLUSTER_M * B_SLICE * 128 : B_STAGE);
  static_assert(BK * ELEMENT == 128, "one 128-byte swizzle row per k slice");
  static_assert(BN == 16 || BN == 32 || (BN >= 80 && BN <= 112 && BN % 8 == 0) || BN == 144 ||
                    BN == 160 || BN == 176 || BN == 224 || (BN % 64 == 0 && BN <= 256),
                "BN is 16, 32, 80-112 in steps of 8, 144, 160, 176, 224, or a multiple of 64 up to "
                "256");
  static_assert((BN != 144 && BN != 160) || SWAP_STAGED,
                "144- and 160-column tiles are swapped tiles, C^T out through the staging slots");
  static_assert(BN % 64 == 0 || B_COLUMNS,
                "BN off a multiple of 64 reads B K-major (MN-major blocks are 64 wide)");
  static_assert(CLUSTER_K == 1 || MULTICAST == 1, "K slices in a cluster share no operand");
  static_assert(CLUSTER <= 8, "portable clusters: at most 8 CTAs");
  static_assert(WG_M % 64 == 0 && MT * BN <= (PINGPONG ? 384 : 256),
                "accumulators must fit the registers");
  static_assert(!PINGPONG || (CONSUMERS == 2 && !EXCHANGE && !SWAP),
                "ping-pong: two consumer warpgroups, C out through their own staging slots");
  static_assert(CONSUMERS >= 1 && CONSUMERS <= 3, "1 to 3 consumer warpgroups");
  // ptxas allocates every role within the entry cap (128 registers at 512 threads): with three
  // consumers a 64 x 256 accumulator block does not fit (C7602), 64 x 192 does.
  static_assert(CONSUMERS != 3 || MT * BN <= 192, "three consumers: BN <= 192");
  static_assert((CLUSTER_M == 1 || CLUSTER_M == 2 || CLUSTER_M == 4) && CLUSTER_N <= 2,
                "clusters of up to 4 along M and 2 along N");
  static_assert(A_SLICE % 8 == 0 && B_SLICE % 8 == 0 && BM >= 8 * CLUSTER_N &&
                    BN >= 8 * CLUSTER_M,
                "multicast slices are whole swizzle rows, a share of 8 at least");
  static_assert(KIND_IN == kBF16 || KIND_IN == kF16 || KIND_IN == kF32, "bf16, f16 or fp32 in");
  static_assert(KIND_IN != kF32 || B_COLUMNS,
                "tf32 reads B K-major: the host transposes a row-major one first");
  static_assert(!SWAP_STAGED || CLUSTER_K == 1, "swapped wide tiles: no K slices in a cluster");
  static_assert(!GRID_SUM || (!SWAP && CLUSTER_K == 1 && !PINGPONG),
                "K slices summed in the grid: plain tiles, their slices in the workspace");
  // PHASED: the weight (the product's row-major B, with SWAP the kernel's MN-major A) is read
  // through one map per row phase (MatmulSm90PhasedParams). TMA starts a box only on a 16-byte
  // boundary, and phase h's rows start weight_shift[h] (s_h < 8) elements past one, where its
  // map starts: a box at map column m0 + 64 j holds the weight's columns from m0 + 64 j - s_h.
  // So a tile covers BM - 8 columns of the weight (TILE_M, from m0): accumulator row r holds
  // column m0 + r - s_h, inside the tile for every shift. At the end of each phase's k blocks
  // the accumulators are added into the exchange buffer s_h rows up and zeroed; the buffer
  // then goes out as the tile's C^T, BM - 8 columns of C.
  static_assert(!PHASED || (SWAP && A_COLUMNS && CLUSTER_N == 1 && EXCHANGE && !PINGPONG &&
                            KIND_IN != kF32),
                "row phases: a 16-bit weight as the swapped kernel's A, not shared in a cluster, "
                "C through the exchange buffer");
  constexpr int TILE_M = PHASED ? BM - 8 : BM;  // rows of C^T a tile computes
  // Registers per thread after reallocation: the pool is 65536 / threads (rounded to 8) each.
  // wgmma groups left running when a stage is handed back (TS_SM90_MMA_IN_FLIGHT: probe only).
  constexpr int MMA_IN_FLIGHT = TS_SM90_MMA_IN_FLIGHT;
  constexpr int PRODUCER_REGS = CONSUMERS == 3 ? 24 : 40;
  constexpr int CONSUMER_REGS = CONSUMERS == 3 ? 160 : 232;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned smem_base = (smem_address(smem_raw) + 1023u) & ~1023u;
  const unsigned a_ring = smem_base;
  // The ring's depth is an argument (p.stages >= 2): configs that differ only in it share one
  // kernel; the stage index wraps by a counter, so it costs no division.
  const int stages = p.stages;
  const unsigned b_ring = smem_base + stages * A_STAGE;
  const unsigned c_staging = b_ring + stages * B_STAGE;  // CONSUMERS x 2 slots x 8 KB
  // p.exchange_in_ring: the exchange buffer over the ring's first bytes, the barriers past
  // whichever ends later (the host sizes shared memory alike).
  const bool ring_exchange = EXCHANGE && SWAP && CLUSTER_K == 1 && !PHASED && p.exchange_in_ring;
  const unsigned exchange =
      ring_exchange ? a_ring : c_staging + (EXCHANGE ? 0 : CONSUMERS * 2 * 8192);
  const unsigned barriers =
      ring_exchange ? max(c_staging, a_ring + Exchange::BYTES)
                    : exchange + (EXCHANGE ? Exchange::BYTES : 0);
  auto full = [&](int s) { return barriers + 8u * s; };
  auto empty = [&](int s) { return barriers + 8u * (stages + s); };
  const unsigned exchange_full = barriers + 16u * stages, exchange_empty = exchange_full + 8u;
  // PINGPONG (no exchange): warpgroup c's turn_done(c) completes once it has issued its tile's
  // main loop.
  auto turn_done = [&](int c) { return exchange_full + 8u * c; };

  const int wg = warpgroup_index();
  const int tid = threadIdx.x % 128;
  const unsigned rank = CLUSTER > 1 ? cluster_cta_rank() : 0u;
  const int cm = rank % CLUSTER_M, cn = (rank / CLUSTER_M) % CLUSTER_N, ck = rank / MULTICAST;

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbarrier_init(full(s), 1);
      mbarrier_init(empty(s), (PINGPONG ? 1 : CONSUMERS) * MULTICAST);
    }
    if (CLUSTER_K > 1) {
      mbarrier_init(exchange_full, CLUSTER_K);
      mbarrier_init(exchange_empty, CLUSTER_K);
    }
    if (PINGPONG) {
      mbarrier_init(turn_done(0), 1);
      mbarrier_init(turn_done(1), 1);
    }
    fence_mbarrier_init();
  }
  if (threadIdx.x == 32) {
    if constexpr (PHASED)
      for (int i = 0; i < p.phases; ++i) tma_prefetch_map(&p.weight_maps[i]);
    else
      tma_prefetch_map(&p.a_map);
    tma_prefetch_map(&p.b_map);
    if (p.c_store_tma) tma_prefetch_map(&p.c_map);
  }
  // Peers multicast into this CTA's ring and arrive on its barriers once those are initialized:
  // the cluster barrier's relaxed arrive (the init fence above orders the inits before it),
  // waited on by each role once it is set up (1000^3 -4%, 3000^3 -2% against a full
  // cluster_sync here: docs/perf/matmul.md v17).
  if (CLUSTER > 1)
    cluster_arrive_relaxed();
  else
    __syncthreads();

  const int tiles_m = (p.m + TILE_M * CLUSTER_M - 1) / (TILE_M * CLUSTER_M);
  const int tiles_n = (p.n + BN * CLUSTER_N - 1) / (BN * CLUSTER_N);
  // A unit is one K slice of one tile of one batch: the slices of a tile are neighbouring
  // units, or (p.slice_major) slice 0 of every tile comes first, then slice 1, ...; a batch's
  // tiles are walked in grouped order before the next batch's. The order decides which units
  // run at once and on which GPC (the hardware deals consecutive clusters out to the GPCs in
  // turn): up to 8% either way, by shape (docs/perf/matmul.md v12). With
  // CLUSTER_K > 1 a unit is a whole tile, and CTA ck of the cluster takes its K slice ck.
  const int tiles = tiles_m * tiles_n;
  const int k_blocks = (p.k + BK - 1) / BK;
  const int first_unit = blockIdx.x / CLUSTER, unit_step = gridDim.x / CLUSTER;
  // A tail split (p.tail) splits only the last wave's R tiles, each into tail_splits slices.
  int whole = tiles * p.batch, tail_tiles = 0, tail_splits = 1;
  if (p.tail) {
    tail_tiles = whole % unit_step;
    tail_splits = tail_tiles > 0 ? min(p.k_splits, unit_step / tail_tiles) : 1;
    if (tail_splits < 2) tail_tiles = 0, tail_splits = 1;
    whole -= tail_tiles;
  }
  const int splits = p.tail ? 1 : p.k_splits > 1 ? p.k_splits : 1;
  const int units = p.tail ? whole + tail_tiles * tail_splits : tiles * splits * p.batch;
  // The exchange buffer over the ring holds only where no CTA starts a second unit while its
  // peers may still multicast into its ring (the host's plan guarantees it).
  if (ring_exchange && units > unit_step) __trap();
  // Where unit `unit` works: its batch, the CTA's first row and column of C, its k blocks, and
  // where its fp32 partial products go (nullptr: it writes C).
  struct Work {
    int tile, batch, slice, m0, n0, kb_begin, kb_end;  // tile: over every batch
    float* partial;
  };
  auto work_of = [&](int unit) {
    Work w;
    int tile, slices;
    if (p.tail) {
      const int r = unit - whole;  // the tail's units: each tile's slices side by side
      tile = r < 0 ? unit : whole + r / tail_splits;
      w.slice = r < 0 ? 0 : r % tail_splits;
      slices = r < 0 ? 1 : tail_splits;
      w.partial = r < 0 ? nullptr
                        : p.partials + kTailHeader +
                              static_cast<long long>(r * CLUSTER + rank) * BM * BN;
    } else {
      tile = p.slice_major ? unit % (tiles * p.batch) : unit / splits;
      w.slice = p.slice_major ? unit / (tiles * p.batch) : unit - tile * splits;
      slices = splits;
    }
    w.tile = tile;
    w.batch = tile / tiles;
    if (!p.tail)
      w.partial = splits > 1 ? p.partials + (static_cast<long long>(w.slice) * p.batch + w.batch) *
                                                p.m * p.n
                             : nullptr;
    int tile_m, tile_n;
    grouped_tile(tile - w.batch * tiles, tiles_m, tiles_n, p.group_m, tile_m, tile_n);
    w.m0 = (tile_m * CLUSTER_M + cm) * TILE_M;
    w.n0 = (tile_n * CLUSTER_N + cn) * BN;
    if (CLUSTER_K > 1) {
      const int cluster_slice = (k_blocks + CLUSTER_K - 1) / CLUSTER_K;
      w.kb_begin = ck * cluster_slice;
      w.kb_end = min(k_blocks, w.kb_begin + cluster_slice);
    } else {
      const int slice_blocks = (k_blocks + slices - 1) / slices;
      w.kb_begin = w.slice * slice_blocks;
      w.kb_end = min(k_blocks, w.kb_begin + slice_blocks);
    }
    return w;
  };
  // PHASED: k block kb's phase of the weight and its block within the phase (a phase's k
  // blocks are consecutive, phase_blocks of them).
  auto phase_of = [&](int kb, int& phase, int& block) {
    if constexpr (PHASED) {
      phase = kb / p.phase_blocks;
      block = kb - phase * p.phase_blocks;
    }
  };

  if (wg == 0) {
    // Producer: the first warp walks the same units as the consumers and keeps the ring full;
    // its lane 0 issues the copies. The whole warp walks, waits and drains the ring together:
    // with lane 0 alone in the loop, the other 31 waited at the (warp-aligned) closing cluster
    // barrier diverged from it, and 3000^3 ran 2% slower (docs/perf/matmul.md v17).
    if (CONSUMERS > 1) warpgroup_regs_release<PRODUCER_REGS>();
    if (CLUSTER > 1) cluster_wait();
    // Launched early behind the previous kernel (the padding copy, a transpose, the call
    // before), the CTA has set up while it drained; global memory is read and written only
    // from here on.
    wait_for_previous_launch();
    // The tail split's header for splitk_reduce. Written before the wait, it reached the
    // workspace while the call before's reduce could still read that call's header there.
    if (p.tail && blockIdx.x == 0 && threadIdx.x == 0) {
      p.partials[0] = __int_as_float(whole);
      p.partials[1] = __int_as_float(tail_splits);
      p.partials[2] = __int_as_float(tail_tiles);
    }
    if (threadIdx.x < 32) {
      const bool issuer = threadIdx.x == 0;
      unsigned short a_mask = 0, b_mask = 0;  // peers sharing our A rows / our B columns
      for (int j = 0; j < CLUSTER_N; ++j) a_mask |= 1u << (cm + CLUSTER_M * j);
      for (int i = 0; i < CLUSTER_M; ++i) b_mask |= 1u << (i + CLUSTER_M * cn);
      // One box of an operand into this CTA, or into every CTA sharing it.
      auto load = [&](unsigned dst, const TensorMap* map, unsigned bar, int c0, int c1, int batch,
                      bool multicast, unsigned short mask) {
        if (!issuer) return;
        if (multicast)
          tma_load_3d_multicast(dst, map, bar, c0, c1, batch, mask);
        else
          tma_load_3d(dst, map, bar, c0, c1, batch);
      };
      int stage = 0;
      unsigned phase = 0;
      for (int unit = first_unit; unit < units; unit += unit_step) {
        const Work w = work_of(unit);
        // PHASED: k block kb reads rows block * BK.. of phase h, counted along.
        int weight_phase = 0, weight_block = 0;
        if constexpr (PHASED) phase_of(w.kb_begin, weight_phase, weight_block);
        for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
          mbarrier_wait(empty(stage), phase ^ 1u);
          if (issuer) mbarrier_arrive_expect_tx(full(stage), STAGE_TX);
          const int k0 = kb * BK;
          const unsigned a_stage = a_ring + stage * A_STAGE, b_stage = b_ring + stage * B_STAGE;
          const int a_batch = p.a_shared ? 0 : w.batch, b_batch = p.b_shared ? 0 : w.batch;
          if constexpr (PHASED) {
#pragma unroll
            for (int j = 0; j < BM / MN_COLS; ++j)
              load(a_stage + j * MN_CHUNK, &p.weight_maps[weight_phase], full(stage),
                   w.m0 + MN_COLS * j, weight_block * BK, 0, false, 0);
            if (++weight_block == p.phase_blocks) weight_block = 0, ++weight_phase;
          } else if (A_COLUMNS) {
#pragma unroll
            for (int j = 0; j < BM / MN_COLS; ++j)
              load(a_stage + j * MN_CHUNK + cn * A_SLICE * 128, &p.a_map, full(stage),
                   w.m0 + MN_COLS * j, k0 + cn * A_SLICE, a_batch, CLUSTER_N > 1, a_mask);
          } else {
            const int row0 = multicast_box_row0(BM, CLUSTER_N, cn);
            load(a_stage + row0 * 128, &p.a_map, full(stage), k0, w.m0 + row0, a_batch,
                 CLUSTER_N > 1, a_mask);
          }
          if (B_COLUMNS) {
            const int row0 = multicast_box_row0(BN, CLUSTER_M, cm);
            load(b_stage + row0 * 128, &p.b_map, full(stage), k0, w.n0 + row0, b_batch,
                 CLUSTER_M > 1, b_mask);
          } else {
#pragma unroll
            for (int j = 0; j < BN / 64; ++j)
              load(b_stage + j * MN_CHUNK + cm * B_SLICE * 128, &p.b_map, full(stage),
                   w.n0 + 64 * j, k0 + cm * B_SLICE, b_batch, CLUSTER_M > 1, b_mask);
          }
          if (++stage == stages) {
            stage = 0;
            phase ^= 1u;
          }
        }
      }
      // The ring drained: every stage released by every consumer that reads it, this CTA's
      // and its peers' (their remote arrives landed), so no peer writes into this CTA's shared
      // memory or arrives on its barriers after the producer leaves, and the CTA ends without a
      // closing cluster barrier (cuBLAS's way: 1000^3 +3.6%, 2048^3 +2.4%, docs/perf/matmul.md
      // v32).
      if (CLUSTER > 1 && CLUSTER_K == 1)
        for (int i = 0; i < stages; ++i) {
          mbarrier_wait(empty(stage), phase ^ 1u);
          if (++stage == stages) {
            stage = 0;
            phase ^= 1u;
          }
        }
    }
  } else {
    // Consumers: warpgroup c multiplies rows [c * WG_M, (c + 1) * WG_M) of each of the CTA's
    // tiles, or (PINGPONG) the whole of every other tile, c-th first. The producer fills the
    // ring tile after tile, so the two take turns: one's epilogue runs while the other's main
    // loop has the tensor cores.
    if (CONSUMERS > 1) warpgroup_regs_claim<CONSUMER_REGS>();
    if (CLUSTER > 1) cluster_wait();
    // The epilogue's reads and writes (C, bias, residual, partials) follow the previous kernel,
    // even for a unit with no k blocks, which waits for no stage.
    wait_for_previous_launch();
    const int c = wg - 1;
    const int wg_row0 = PINGPONG ? 0 : c * WG_M;  // the warpgroup's first row in the tile
    // Descriptors of stage 0, m tile 0, k step 0; later ones add (byte offset >> 4) to the
    // address field. A K-major tile steps k by 32 bytes within its rows and m by 64 rows; an
    // MN-major one steps k by 16 rows of 128 bytes and m by one [BK][64] block.
    const unsigned long long desc_a0 =
        A_COLUMNS ? wgmma_desc_sw128(a_ring + (wg_row0 / 64) * MN_CHUNK, MN_CHUNK, 1024)
                  : wgmma_desc_sw128(a_ring + wg_row0 * 128, 16, 1024);
    const unsigned long long desc_b0 = B_COLUMNS ? wgmma_desc_sw128(b_ring, 16, 1024)
                                                 : wgmma_desc_sw128(b_ring, MN_CHUNK, 1024);
    constexpr int A_STEP_K = A_COLUMNS ? 16 * 128 : 32, A_STEP_M = A_COLUMNS ? MN_CHUNK : 64 * 128;
    constexpr int B_STEP_K = B_COLUMNS ? 32 : 16 * 128;
    // A_REGS: where this thread's A fragment elements lie in a stage's A tile, per m64 tile: rows
    // r = wg_row0 + 64 mt + 16 warp + lane / 4 (+ 8), k = lane % 4 (+ 4) of each 8-k step (the
    // m16n8k8 tf32 A fragment, register 2 s + h for row + 8 h and k + 4 s). The tile is MN-major
    // blocks of [BK k rows][32 m], chunk c of row k at c ^ (k % 8); an 8-k step is 1024 bytes on.
    unsigned a_offset[A_REGS ? MT : 1][4];
    if constexpr (A_REGS) {
      const int g = tid % 32 / 4, q = tid % 4;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = wg_row0 + 64 * mt + 16 * (tid / 32) + g + 8 * (i % 2), k = q + 4 * (i / 2);
          a_offset[mt][i] = (r / MN_COLS) * MN_CHUNK + k * 128 +
                            ((((r % MN_COLS) / 4) ^ k) << 4) + (r % 4) * 4;
        }
    }
    // A_REGS: a k block's fragments stay in use until its wgmma group is done, one k block
    // later, so neighbouring k blocks take turns between two sets.
    unsigned a_frag[A_REGS ? 2 : 1][A_REGS ? MT : 1][A_REGS ? K_STEPS : 1][4];
    float acc[MT][BN / 2];
    unsigned boxes_issued = 0;
    unsigned exchanged = 0;  // tiles sent through the exchange buffer
    int stage = 0;
    unsigned phase = 0;
    unsigned turns_waited = 0;  // PINGPONG: the other warpgroup's turns waited for
    for (int unit = first_unit, turn = 0; unit < units; unit += unit_step, ++turn) {
      const Work w = work_of(unit);
      if (PINGPONG && turn % CONSUMERS != c) {
        // The other warpgroup's tile: step over its stages of the ring.
        const int at = stage + (w.kb_end - w.kb_begin);
        phase ^= (at / stages) & 1u;
        stage = at % stages;
        continue;
      }
      if (PINGPONG && turn > 0) {
        // Start once the other warpgroup has issued the previous tile's main loop: its stages
        // have all been loaded by then, so this tile's first stages are at most one lap of the
        // ring ahead of the producer (a full barrier two phases behind would pass its parity
        // wait), and the main loops take turns on the tensor cores.
        mbarrier_wait(turn_done(1 - c), turns_waited & 1u);
        ++turns_waited;
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) acc[mt][i] = 0.f;

      int previous = 0;
      // The first k block since the accumulators were last flushed (PHASED; otherwise the
      // unit's first): no wgmma group is then left running. PHASED: the phase of kb and kb's
      // block within it.
      int flushed_at = w.kb_begin, weight_phase = 0, weight_block = 0;
      if constexpr (PHASED) phase_of(w.kb_begin, weight_phase, weight_block);
      // Hands stage `done` back to the producer, this CTA's and every peer's that fills it.
      auto release = [&](int done) {
        if (MULTICAST == 1) {
          if (tid == 0) mbarrier_arrive(empty(done));
        } else if (tid < CLUSTER) {
          mbarrier_arrive_cluster(empty(done), tid);
        }
      };
      // One k block; `frag`: the A fragment set it loads and multiplies (A_REGS), a set the
      // call names, so that once inlined its registers are fixed.
      auto k_block = [&](int kb, unsigned (&frag)[A_REGS ? MT : 1][A_REGS ? K_STEPS : 1][4]) {
        mbarrier_wait(full(stage), phase);
        if constexpr (A_REGS) {
          const unsigned a_stage = a_ring + stage * A_STAGE;
#pragma unroll
          for (int kk = 0; kk < K_STEPS; ++kk)
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
              for (int i = 0; i < 4; ++i)
                frag[mt][kk][i] = load_shared_u32(a_stage + kk * 1024 + a_offset[mt][i]);
        }
        wgmma_fence();
        // The stage's offset added once, unsigned (a signed one cost a sign extension per
        // wgmma); the k steps and m tiles are then constants.
        const unsigned long long stage_a = desc_a0 + (static_cast<unsigned>(stage * A_STAGE) >> 4);
        const unsigned long long stage_b = desc_b0 + (static_cast<unsigned>(stage * B_STAGE) >> 4);
#pragma unroll
        for (int kk = 0; kk < K_STEPS; ++kk) {
          const unsigned long long desc_b = stage_b + static_cast<unsigned>((kk * B_STEP_K) >> 4);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            if constexpr (A_REGS) {
              wgmma_tile_m64_rs<BN, KIND_IN, 0>(acc[mt], frag[mt][kk], desc_b);
            } else {
              const unsigned long long desc_a =
                  stage_a + static_cast<unsigned>((mt * A_STEP_M + kk * A_STEP_K) >> 4);
              wgmma_tile_m64<BN, KIND_IN, A_COLUMNS, !B_COLUMNS>(acc[mt], desc_a, desc_b);
            }
          }
        }
        wgmma_commit();
        // Keep MMA_IN_FLIGHT groups running: once the group before them is done, hand its stage
        // back (with 0, each stage is handed back as soon as its own group is done).
        if (MMA_IN_FLIGHT == 0 || kb > flushed_at) {
          wgmma_wait<MMA_IN_FLIGHT>();
          release(MMA_IN_FLIGHT == 0 ? stage : previous);
        }
        previous = stage;
        if (++stage == stages) {
          stage = 0;
          phase ^= 1u;
        }
      };
      for (int kb = w.kb_begin; kb < w.kb_end; ++kb) {
        if (A_REGS && ((kb - w.kb_begin) & 1))
          k_block(kb, a_frag[A_REGS ? 1 : 0]);
        else
          k_block(kb, a_frag[0]);
        if constexpr (PHASED) {
          // The end of a phase's k blocks (or of the unit's): its products, s_h rows up, into
          // the exchange buffer (the unit's first flush writes, later ones add, after the
          // consumers' previous flush is complete), and the accumulators start over.
          if (++weight_block == p.phase_blocks || kb + 1 == w.kb_end) {
            wgmma_wait<0>();
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) wgmma_fence_registers(acc[mt]);
            if (MMA_IN_FLIGHT > 0) release(previous);
            const bool first = flushed_at == w.kb_begin;
            if (!first) named_barrier_sync(Exchange::BARRIER_ID, Exchange::THREADS);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
              Exchange::template write_shifted<BN>(exchange, acc[mt], wg_row0 + mt * 64,
                                                   p.weight_shift[weight_phase], first);
#pragma unroll
              for (int i = 0; i < BN / 2; ++i) acc[mt][i] = 0.f;
            }
            flushed_at = kb + 1;
            weight_block = 0;
            ++weight_phase;
          }
        }
      }
      if (PINGPONG && tid == 0) mbarrier_arrive(turn_done(c));
      if constexpr (!PHASED) {
        wgmma_wait<0>();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) wgmma_fence_registers(acc[mt]);
        if (MMA_IN_FLIGHT > 0 && w.kb_end > w.kb_begin) release(previous);
      }
      // Where this unit's products go: its K slice's fp32 partials (the epilogue then runs in
      // splitk_reduce, once the slices are summed), or its batch's C.
      float* const partial = w.partial;
      void* const c_batch =
          static_cast<char*>(p.c) + w.batch * p.stride_c * (KIND_OUT == kF32 ? 4 : 2);
      if (EXCHANGE) {
        // Through the exchange buffer: C^T's tile transposed (SWAP; rows and columns of C are
        // the kernel's n and m), and the cluster's K slices summed (CLUSTER_K > 1).
        // (PHASED: the buffer holds the phases' sums, but a unit without k blocks, a K slice
        // past K's end, writes its zeros.)
        // Over the ring: every consumer warpgroup's wgmmas are done reading it first (each
        // waited for its own above; every stage they read has landed, so no TMA write of this
        // unit is left in flight).
        if (ring_exchange) named_barrier_sync(Exchange::BARRIER_ID, Exchange::THREADS);
        if (!PHASED || w.kb_end <= w.kb_begin)
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
            Exchange::template write<BN>(exchange, acc[mt], wg_row0 + mt * 64);
        const int c_rows = SWAP ? p.n : p.m, c_cols = SWAP ? p.m : p.n;
        const int row0 = SWAP ? w.n0 : w.m0, col0 = SWAP ? w.m0 : w.n0;
        const int col_end = PHASED ? min(c_cols, col0 + TILE_M) : c_cols;  // the tile's columns
        if (splits > 1) {
          Exchange::template reduce_and_store<kF32, kActNone>(
              exchange, exchange_full, exchange_empty, exchanged, p.epilogue, w.batch, partial,
              c_cols, c_rows, col_end, row0, col0);
        } else {
          Exchange::template reduce_and_store<KIND_OUT, EPI>(
              exchange, exchange_full, exchange_empty, exchanged, p.epilogue, w.batch, c_batch,
              p.ldc, c_rows, col_end, row0, col0);
        }
        continue;
      }
      if constexpr (SWAP_STAGED) {
        // C^T's tile: the kernel's rows are C's columns (w.m0..), its columns C's rows (w.n0..).
        if (partial != nullptr) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
            store_partials_transposed<BN>(acc[mt], partial, p.m, p.n, w.m0 + wg_row0 + mt * 64,
                                          w.n0);
          continue;
        }
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          const int c_col0 = w.m0 + wg_row0 + mt * 64;
          if (p.c_store_tma)
            store_accumulators_transposed<BN, KIND_OUT, EPI, true>(
                acc[mt], &p.c_map, c_batch, p.ldc, p.n, p.m, p.epilogue, c_staging + c * 2 * 8192,
                w.batch, w.n0, c_col0, 1 + c, boxes_issued);
          else
            store_accumulators_transposed<BN, KIND_OUT, EPI, false>(
                acc[mt], nullptr, c_batch, p.ldc, p.n, p.m, p.epilogue, c_staging + c * 2 * 8192,
                w.batch, w.n0, c_col0, 1 + c, boxes_issued);
        }
        continue;
      }
      if (partial != nullptr && p.tail) {
        // The CTA's whole block, unclipped: splitk_reduce clips it into C.
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          store_accumulators<BN, kF32>(acc[mt], partial, BN, BM, BN, wg_row0 + mt * 64, 0, true);
        continue;
      }
      if (partial != nullptr) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          store_accumulators<BN, kF32>(acc[mt], partial, p.n, p.m, p.n,
                                       w.m0 + wg_row0 + mt * 64, w.n0, p.n % 2 == 0);
        if constexpr (GRID_SUM)
          sum_block_in_grid<BM, BN, CONSUMERS, KIND_OUT, EPI>(
              p, splits, w.slice, w.tile * CLUSTER + static_cast<int>(rank), w.batch, w.m0, w.n0);
        continue;
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
        epilogue_accumulators<BN, EPI, KIND_OUT>(acc[mt], p.epilogue, w.batch, p.m, p.n,
                                                 w.m0 + wg_row0 + mt * 64, w.n0);
      if (p.c_store_tma) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          store_accumulators_staged<BN, KIND_OUT, true>(
              acc[mt], &p.c_map, c_batch, p.ldc, p.m, p.n, c_staging + c * 2 * 8192, w.batch,
              w.m0 + wg_row0 + mt * 64, w.n0, 1 + c, boxes_issued);
      } else {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          store_accumulators_staged<BN, KIND_OUT, false>(
              acc[mt], nullptr, c_batch, p.ldc, p.m, p.n, c_staging + c * 2 * 8192, w.batch,
              w.m0 + wg_row0 + mt * 64, w.n0, 1 + c, boxes_issued);
      }
    }
    // The staging slots must outlive the last stores' reads of them.
    if (p.c_store_tma && tid == 0) tma_store_wait<0>();
  }
  // With split-K, splitk_reduce may start as the last CTAs drain (it waits for the partials).
  // The first thread of a CTA to get here lets the next launch start: the producer warpgroup's
  // idle warps do so at once. Without a cluster and with 2-3 consumers, only the consumers,
  // once their epilogue is done: the next call launched that early ran 1.02-1.30x slower as CUDA
  // graph replays (16x10240x8192 rc in swapped 128x16 tiles: 57.6 against 44.4 us), alike or
  // faster alone; elsewhere the early start stays (1000^3 7.4 against 7.9 us; v62).
  if (CLUSTER > 1 || CONSUMERS == 1 || wg != 0) allow_next_launch();
  // No CTA may leave while a peer can still read its shared memory (the K slices' exchange);
  // elsewhere the producer's drain of the ring stands in for a closing cluster barrier.
  if (CLUSTER_K > 1) cluster_sync();
}

}  // namespace tilesmith
