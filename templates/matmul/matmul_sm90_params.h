// The one by-value argument of the sm_90a matmul kernel (matmul_sm90.cuh). Plain C++: the host
// descriptor (g++) and the kernel (NVRTC) include it, so both agree on its layout. It is passed
// as `const __grid_constant__`, which lets the TMA unit read the tensor maps in place.
#pragma once

#include "common/tensor_map.h"

namespace tilesmith {

// C[m x n] = A[m x k] * B[k x n], all row-major. A and B are read only through their tensor maps
// (see matmul_sm90.cuh for the encoding); C is written with ordinary stores, clipped to m x n.
struct MatmulSm90Params {
  TensorMap a_map;  // A: dims {k, m}, row stride lda * element bytes
  TensorMap b_map;  // B: dims {n, k}, row stride ldb * element bytes
  void* c;          // C: m x n, leading dimension ldc (elements); any alignment
  int m, n, k;
  int ldc;
};

}  // namespace tilesmith
