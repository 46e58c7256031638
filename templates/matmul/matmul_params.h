// The by-value arguments of the matmul kernels, and the codes of their layout and epilogue
// template arguments. Included by the kernel source (NVRTC) and by the host descriptor, so both
// sides agree on the layout.
#pragma once

#include "common/activation.h"

namespace tilesmith {

// LAYOUT template argument: how A and B are stored. Row-major A is m x k (rows of K, lda >= k),
// column-major A is stored k x m (rows of M, lda >= m); row-major B is k x n (lda >= n),
// column-major B is stored n x k (rows of K: the weight of a linear layer, x * W^T).
enum MatmulLayoutBits { kColumnMajorA = 1, kColumnMajorB = 2 };

// EPI template argument: an activation (bits 0-1, ActivationCode) and the optional inputs of
// the epilogue.
//   C = act(A * B + bias) + residual, in fp32, rounded once to C's type.
enum MatmulEpilogueBits {
  kEpilogueBias = 4,      // bias: n elements of C's type, one per column
  kEpilogueResidual = 8,  // residual: batch x m x n of C's type
};

struct MatmulEpilogueArgs {
  const void* bias;      // with kEpilogueBias
  const void* residual;  // with kEpilogueResidual: rows ldr apart, batches stride_r apart
  long long stride_r;
  int ldr;
};

// C[b][m x n] = A[b] * B[b] for b < batch; leading dimensions in elements (see LAYOUT), batches
// stride_* elements apart. C is row-major.
struct MatmulParams {
  const void* a;
  const void* b;
  void* c;
  int m, n, k;
  int lda, ldb, ldc;
  int batch;
  // The mma.sync kernel's tile order (matmul_tile_order.cuh), >= 1; unused by the others. In
  // what was the padding before stride_a: no other member moved (the decode kernel's code,
  // at its register limit, changed with the offsets).
  int group_m;
  long long stride_a, stride_b, stride_c;
  MatmulEpilogueArgs epilogue;
};

// The decode kernel's argument (matmul_decode.cuh): the product, and where K is split over
// k_splits CTAs, the workspace that takes their fp32 partials (k_splits x batch x m x n, rows n
// apart) for splitk_reduce to sum.
struct MatmulDecodeParams {
  MatmulParams product;
  float* partials;
  int k_splits;
};

}  // namespace tilesmith
