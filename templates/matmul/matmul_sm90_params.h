// The one by-value argument of the sm_90a matmul kernel (matmul_sm90.cuh). Plain C++: the host
// descriptor (g++) and the kernel (NVRTC) include it, so both agree on its layout. It is passed
// as `const __grid_constant__`, which lets the TMA unit read the tensor maps in place.
#pragma once

#include "common/tensor_map.h"

namespace tilesmith {

// C[m x n] = A[m x k] * B[k x n], all row-major. A and B are read only through their tensor maps
// (see matmul_sm90.cuh for the encoding). C is written through c_map (TMA stores, clipped by the
// map) when c_store_tma is 1, else with ordinary stores through c and ldc, clipped to m x n.
struct MatmulSm90Params {
  TensorMap a_map;  // A: dims {k, m}, row stride lda * element bytes
  TensorMap b_map;  // B: dims {n, k}, row stride ldb * element bytes
  TensorMap c_map;  // C: dims {n, m}, row stride ldc * element bytes (used if c_store_tma)
  void* c;          // C: m x n, leading dimension ldc (elements)
  int m, n, k;
  int ldc;
  int c_store_tma;  // 1: C through c_map (needs ldc * bytes % 16 == 0, C 16-byte aligned)
  // Split-K: with k_splits > 1, work unit u is K slice u % k_splits of output tile
  // u / k_splits, and its fp32 products go to partials + slice * m * n (rows n apart) instead of
  // C; splitk_reduce (matmul_splitk.cuh) then sums the slices into C.
  int k_splits;
  float* partials;
};

// The argument of splitk_reduce.
struct SplitKReduceParams {
  const float* partials;  // `splits` slices of m x n fp32, rows n apart
  void* c;                // m x n, leading dimension ldc
  int m, n, ldc, splits;
};

}  // namespace tilesmith
