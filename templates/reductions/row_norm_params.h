// The by-value arguments of the row kernels (row_norm.cuh, row_norm_backward.cuh) and their
// references, and the codes of their template arguments. Included by the kernel source (NVRTC)
// and by the host descriptors.
#pragma once

#include "common/activation.h"
#include "common/host_device.h"

namespace tilesmith {

// OP template argument: what is computed over each row of `cols` elements.
enum RowOp {
  kRowSoftmax = 0,  // y = exp(x - max) / sum(exp(x - max))
  kRowLayerNorm = 1,  // y = (x - mean) * rstd * weight + bias, rstd = 1 / sqrt(var + epsilon)
  kRowRmsNorm = 2,    // y = x * rstd * weight, rstd = 1 / sqrt(mean(x^2) + epsilon)
};

// FLAGS template argument: an activation after the norm (bits 0-1, ActivationCode) and which of
// the optional tensors are present. The backward ops read weight and write dweight with
// kRowWeight, write dbias with kRowBias.
enum RowFlags {
  kRowWeight = 4,     // weight: cols elements of x's type
  kRowBias = 8,       // bias: cols elements of x's type (layernorm)
  kRowResidual = 16,  // y = act(norm(x)) + residual; residual of y's type, rows residual_stride apart
  kRowStats = 32,     // writes mean (layernorm) and rstd per row, fp32
};

struct RowParams {
  const void* x;
  void* y;
  const void* weight;
  const void* bias;
  const void* residual;
  float* mean;
  float* rstd;
  long long rows;
  long long x_stride, y_stride, residual_stride;  // elements from one row to the next
  int cols;
  float epsilon;
  // CTAs sharing a row without a cluster (EXCHANGE = kRowExchangeGlobal): their mailboxes, one
  // RowBoard per group, zeroed by the launch plan before the kernel; else null.
  void* boards;
};

// The backward ops: dx from the forward's input (x; softmax: its output y) and dy, the row's
// statistics recomputed by nobody: the norms take the forward's mean and rstd. Types follow the
// forward's: x, weight, dx, dweight and dbias have KIND_IN; y and dy KIND_OUT.
//   softmax    dx = y * (dy - sum(y * dy))
//   rmsnorm    xhat = x * rstd, g = dy * weight, dx = rstd * (g - xhat * mean(g * xhat))
//   layernorm  xhat = (x - mean) * rstd, dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dweight = sum over rows of dy * xhat, dbias = sum over rows of dy
struct RowBackwardParams {
  const void* x;  // softmax: y
  const void* dy;
  const void* weight;
  const float* mean;
  const float* rstd;
  void* dx;
  // The column sums' partials (workspace, fp32): [sum (dweight, dbias)][group][cols], one row
  // per group of CTAs sharing rows, and how many groups ran (the launcher sizes a persistent
  // grid; the workspace holds the most the plan allows). The reference writes dweight and dbias
  // after dx instead; without column sums both are null.
  float* partials;
  int* groups_ran;
  // 1: with a ring, the weight's vectors are copied once per CTA into shared memory after it
  // (the host sized the shared memory for them); 0: every row reads them from L2.
  int stage_weight;
  long long rows;
  long long x_stride, dy_stride, dx_stride;  // elements from one row to the next
  int cols;
  void* boards;  // as RowParams::boards
};

// EXCHANGE template argument: how the CTAs sharing a row (CLUSTER > 1) send each other their
// partials. Through distributed shared memory in a thread-block cluster (sm_90), or through
// global memory: any GPU, and groups of CTAs need not fit a GPC, so every SM takes part (on the
// H100, clusters of 4 occupy 120 of 132 SMs, clusters of 16 112).
enum RowExchange {
  kRowExchangeCluster = 0,
  kRowExchangeGlobal = 1,
};

// The mailbox in global memory of a group of GROUP CTAs sharing rows: a partial per CTA and an
// arrival count, two sets used by alternate exchanges. Bytes per group, for the workspace.
TILESMITH_HOST_DEVICE constexpr long long row_board_bytes(int group) {
  return 2LL * group * 16 + 16;
}

// Whether a backward row kernel keeps its column sums (dweight, dbias) in registers across the
// rows it visits, rather than in shared-memory slots read and written for every row: for a CTA
// of one row, where a thread's `elements` (its share of the row) times x, dy and the sums, plus
// the kernel's other registers (about 56, from ptxas on sm_90a), fit in what `threads` per CTA
// may each hold.
TILESMITH_HOST_DEVICE constexpr bool row_column_sums_in_registers(int elements, int sums, int threads,
                                                                  int rows_per_block) {
  return sums > 0 && rows_per_block == 1 &&
         (2 + sums) * elements + 56 <= (65536 / threads < 255 ? 65536 / threads : 255);
}

// The second launch of a backward op with column sums: out[s][col] = sum of the groups'
// partials, rounded once to KIND_IN.
struct ColumnSumParams {
  const float* partials;  // [sums][groups][cols]
  void* out[2];           // dweight, dbias (those present, in that order)
  const int* groups;      // set by the rows' kernel (RowBackwardParams::groups_ran)
  int cols;
};

}  // namespace tilesmith
