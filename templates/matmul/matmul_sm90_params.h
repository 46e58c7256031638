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
};

// The argument of splitk_reduce.
struct SplitKReduceParams {
  const float* partials;  // `splits` slices of batch x m x n fp32, rows n apart
  void* c;                // batch x m x n, rows ldc apart, batches stride_c apart
  int m, n, ldc, splits, batch;
  long long stride_c;
  MatmulEpilogueArgs epilogue;
};

}  // namespace tilesmith
