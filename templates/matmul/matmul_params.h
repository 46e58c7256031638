// The one by-value argument of every matmul kernel. Included by the kernel source (NVRTC) and by
// the host descriptor, so both sides agree on its layout.
#pragma once

namespace tilesmith {

// C[m x n] = A[m x k] * B[k x n]; all row-major, leading dimensions in elements.
struct MatmulParams {
  const void* a;
  const void* b;
  void* c;
  int m, n, k;
  int lda, ldb, ldc;
};

}  // namespace tilesmith
