// The one by-value argument of the sm_90a matmul kernel (matmul_sm90.cuh). Plain C++: the host
// descriptor (g++) and the kernel (NVRTC) include it, so both agree on its layout. It is passed
// as `const __grid_constant__`, which lets the TMA unit read the tensor maps in place.
#pragma once

#include "common/tensor_map.h"
#include "matmul/matmul_params.h"

namespace tilesmith {

// C[b][m x n] = A[b] * B[b] (+ the epilogue) for b < batch; A and B stored as the LAYOUT
// template argument says (matmul_params.h). A and B are read only through their tensor maps
// (rank 3, the batch outermost: see matmul_sm90.cuh). C is written through c_map (TMA stores,
// clipped by the map) when c_store_tma is 1, else with ordinary stores through c, ldc and
// stride_c, clipped to m x n.
struct MatmulSm90Params {
  TensorMap a_map;  // A: row-major dims {k, m, batch}; column-major {m, k, batch}
  TensorMap b_map;  // B: row-major dims {n, k, batch}; column-major {k, n, batch}
  TensorMap c_map;  // C: dims {n, m, batch} (used if c_store_tma)
  void* c;          // C: batch x m x n, rows ldc elements apart, batches stride_c apart
  int m, n, k;
  int ldc;
  int batch;
  int c_store_tma;  // 1: C through c_map (needs ldc * bytes % 16 == 0, C 16-byte aligned)
  // 1: the operand's map holds one matrix, read for every batch (a batch stride of 0).
  int a_shared, b_shared;
  long long stride_c;
  int group_m;  // tile order (matmul_tile_order.cuh); >= 1
  int stages;   // depth of the shared-memory ring, >= 2 (its size: the launch's dynamic smem)
  // Split-K: with k_splits > 1, work unit u is K slice u % k_splits of output tile
  // u / k_splits (slice_major 0: a tile's slices are neighbouring units), or slice
  // u / (tiles x batch) of tile u % (tiles x batch) (slice_major 1: every tile of slice 0, then
  // of slice 1, ...), and its fp32 products go to partials + (slice * batch + b) * m * n (rows
  // n apart) instead of C; splitk_reduce (matmul_splitk.cuh) then sums the slices into C and
  // applies the epilogue.
  int k_splits;
  int slice_major;  // in what was the padding before `partials`
  float* partials;
  MatmulEpilogueArgs epilogue;
  // 1: the tiles fill the SMs, and k_splits splits only those of the last, partial wave, so it
  // fills them too ("tail split"). With G clusters in the grid and T tiles (batch included), the
  // last R = T mod G tiles each take s = min(k_splits, G / R) K slices (no tail where s < 2);
  // the first T - R tiles are whole units and write C. Slice j of tail tile r writes its CTA's
  // BM x BN fp32 block (rows BN apart) at partials + kTailHeader + ((r * s + j) * CLUSTER +
  // rank) * BM * BN, and block 0 writes {T - R, s, R} at partials[0..2] for splitk_reduce.
  int tail;
  // GRID_SUM (matmul_sm90.cuh): the K slices summed in this grid, not by splitk_reduce; one
  // arrival counter per CTA block (tile x batch x CLUSTER + rank), zeroed before the launch.
  unsigned* slice_arrivals;
};

// Floats before a tail split's partial blocks: its header, padded to 256 bytes.
constexpr int kTailHeader = 64;

// The argument of splitk_reduce.
struct SplitKReduceParams {
  const float* partials;  // `splits` slices of batch x m x n fp32, rows n apart
  void* c;                // batch x m x n, rows ldc apart, batches stride_c apart
  int m, n, ldc, splits, batch;
  long long stride_c;
  MatmulEpilogueArgs epilogue;
  // 1: the partials are a tail split's (MatmulSm90Params::tail): tile-by-tile blocks after a
  // header, placed in C by the product's tile order, cluster and tile (tiles_m x tiles_n
  // clusters of cluster_m x cluster_n CTAs of block_m x block_n); `splits` is then unused.
  int tail;
  int tiles_m, tiles_n, group_m, block_m, block_n, cluster_m, cluster_n;
};

}  // namespace tilesmith
