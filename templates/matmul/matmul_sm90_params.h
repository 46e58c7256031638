// The one by-value argument of the sm_90a matmul kernel (matmul_sm90.cuh). Plain C++: the host
// descriptor (g++) and the kernel (NVRTC) include it, so both agree on its layout. It is passed
// as `const __grid_constant__`, which lets the TMA unit read the tensor maps in place.
#pragma once

#include "common/host_device.h"
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
  // 1: C leaves through an exchange buffer placed at the ring's start instead of past its end
  // (shared memory of max(ring, buffer) instead of their sum, so a deeper ring fits): swapped
  // tiles that fill the buffer only after their main loop (not PHASED), each CTA one unit of
  // work, so that once its main loop is done no stage is read or written again.
  int exchange_in_ring;
  // GRID_SUM (matmul_sm90.cuh): the K slices summed in this grid, not by splitk_reduce; one
  // arrival counter per CTA block (tile x batch x CLUSTER + rank), zeroed before the launch.
  unsigned* slice_arrivals;
};

// Rows of the box each of `parts` CTAs loads of a K-major tile of `rows` rows (128 bytes each)
// and multicasts to the others: its share rounded up to whole 8-row swizzle atoms. Where the
// shares do not divide into atoms (112 or 104 rows in fours), the last boxes are moved back to
// end at the tile's last row (multicast_box_row0), and the rows they overlap land twice, the
// same bytes.
TILESMITH_HOST_DEVICE constexpr int multicast_box_rows(int rows, int parts) {
  return ((rows + parts - 1) / parts + 7) / 8 * 8;
}
TILESMITH_HOST_DEVICE constexpr int multicast_box_row0(int rows, int parts, int part) {
  const int box = multicast_box_rows(rows, parts);
  return part * box < rows - box ? part * box : rows - box;
}

// The most row phases of a weight (16 / the largest power of two dividing its row's bytes: 8
// for 16-bit rows of an odd N).
constexpr int kMaxWeightPhases = 8;

// The argument of the PHASED kernel (swapped tiles: C^T = B^T A^T): a row-major weight (the
// product's B, k x n, the kernel's MN-major A) whose rows are off 16 bytes, which TMA cannot
// read as one matrix, read in place as `phases` matrices: phase h holds rows G q + h (G =
// 16 / gcd(row bytes, 16), q < ceil((k - h) / G)), which lie G rows apart, a multiple of 16
// bytes, and whose first row starts weight_shift[h] elements past a 16-byte boundary.
// weight_maps[h] begins at that boundary, so its column c + weight_shift[h] is the weight's
// column c; TMA starts a box only on a boundary, so the kernel's tiles cover BM - 8 columns
// and take each phase's products weight_shift[h] rows up (matmul_sm90.cuh, PHASED). The
// product runs over K permuted phase by phase, each phase's rows padded to phase_blocks k
// blocks (zeros past its rows): k block kb reads
// rows q = (kb % phase_blocks) * BK .. of phase kb / phase_blocks. The other operand (the
// product's A, gathered so by gather_phases, matmul_weight_phases.cuh) is K-major over that
// permuted K, which is `k` here (phases * phase_blocks * BK), read through b_map; a_map is
// unused. phases = G, or K where K < G.
struct MatmulSm90PhasedParams : MatmulSm90Params {
  TensorMap weight_maps[kMaxWeightPhases];
  int weight_shift[kMaxWeightPhases];
  int phases, phase_blocks;
};

// The argument of gather_phases (matmul_weight_phases.cuh): A's `rows` x `k` elements (element
// (r, k) at src + r * row_stride + k * k_stride; k_contiguous: k_stride is 1) written to dst as
// rows x (phases * phase_k), packed: phase h's columns are A's columns `stride` q + h (fewer
// phases than the stride where K is shorter than it).
struct GatherPhasesParams {
  const void* src;
  void* dst;
  long long rows, k, row_stride, k_stride, phase_k;
  int phases, stride, k_contiguous;
};

template <int PHASED>
struct MatmulSm90ParamsOf {
  using type = MatmulSm90Params;
};
template <>
struct MatmulSm90ParamsOf<1> {
  using type = MatmulSm90PhasedParams;
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
