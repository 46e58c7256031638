// Split-K's second launch: C = the sum of the fp32 partial products that the K slices of a
// matmul wrote to the workspace, through the epilogue, converted to C's type. Grids with fewer
// output tiles than SMs (1000^3 in 128x128 tiles, decode shapes, K-heavy 512x512x16384) split K
// so every SM works. Grids whose tiles fill the SMs split only the last wave's tiles (a tail
// split, MatmulSm90Params::tail): their partials are CTA blocks, summed block by block.
//
// launch: block 256 threads, a thread per run of 4 columns of a row, grid up to 8 blocks per SM
// (a grid-stride loop covers the rest); on sm_90 it starts while the product's kernel drains
// (programmatic dependent launch) and waits for the partials itself.
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_epilogue.cuh"
#include "matmul/matmul_sm90_params.h"
#include "matmul/matmul_tile_order.cuh"

namespace tilesmith {

// Four columns of C from their fp32 sums: the epilogue, then one vector store where C's run
// starts on it, else element by element; columns past n are left alone.
template <int KIND_OUT, int EPI>
__device__ __forceinline__ void store_reduced_run(const SplitKReduceParams& p, int batch, int row,
                                                  int col, float (&v)[4]) {
  constexpr int OUT_BYTES = KIND_OUT == kF32 ? 4 : 2;
#pragma unroll
  for (int q = 0; q < 4; ++q)
    if (col + q < p.n) v[q] = epilogue_value<EPI, KIND_OUT>(p.epilogue, batch, row, col + q, v[q]);
  const long long at = batch * p.stride_c + static_cast<long long>(row) * p.ldc + col;
  char* const out = static_cast<char*>(p.c) + at * OUT_BYTES;
  if (col + 3 < p.n && reinterpret_cast<unsigned long long>(out) % (4 * OUT_BYTES) == 0) {
    if (KIND_OUT == kF32)
      *reinterpret_cast<float4*>(out) = make_float4(v[0], v[1], v[2], v[3]);
    else
      *reinterpret_cast<uint2*>(out) =
          make_uint2(pack2<KIND_OUT>(v[0], v[1]), pack2<KIND_OUT>(v[2], v[3]));
  } else {
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (col + q >= p.n) break;
      if (KIND_OUT == kF32)
        reinterpret_cast<float*>(out)[q] = v[q];
      else
        reinterpret_cast<half_bits*>(out)[q] = from_float<KIND_OUT>(v[q]);
    }
  }
}

// A tail split's sums (MatmulSm90Params::tail): a thread per run of 4 columns of a CTA's block,
// its tile found in the product's order, the block's rows and columns past C skipped.
template <int KIND_OUT, int EPI>
__device__ __forceinline__ void reduce_tail(const SplitKReduceParams& p) {
  const int whole = __float_as_int(p.partials[0]), splits = __float_as_int(p.partials[1]);
  const int tail_tiles = __float_as_int(p.partials[2]);
  const int cluster = p.cluster_m * p.cluster_n, tiles = p.tiles_m * p.tiles_n;
  const int runs = p.block_n / 4;                  // per block row
  const long long per_block = static_cast<long long>(p.block_m) * runs;
  const long long total = static_cast<long long>(tail_tiles) * cluster * per_block;
  const long long block_floats = static_cast<long long>(p.block_m) * p.block_n;
  for (long long r = blockIdx.x * 256ll + threadIdx.x; r < total; r += gridDim.x * 256ll) {
    const int block = static_cast<int>(r / per_block);  // tail tile * cluster + rank
    const int in_block = static_cast<int>(r - block * per_block);
    const int tail = block / cluster, rank = block - tail * cluster;
    const int tile = whole + tail, batch = tile / tiles;
    int tile_m, tile_n;
    grouped_tile(tile - batch * tiles, p.tiles_m, p.tiles_n, p.group_m, tile_m, tile_n);
    const int block_row = in_block / runs, block_col = (in_block - block_row * runs) * 4;
    const int row = (tile_m * p.cluster_m + rank % p.cluster_m) * p.block_m + block_row;
    const int col = (tile_n * p.cluster_n + rank / p.cluster_m) * p.block_n + block_col;
    if (row >= p.m || col >= p.n) continue;
    const float* first = p.partials + kTailHeader +
                         (static_cast<long long>(tail) * splits * cluster + rank) * block_floats +
                         static_cast<long long>(block_row) * p.block_n + block_col;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    for (int s = 0; s < splits; ++s) {
      const float4 x = *reinterpret_cast<const float4*>(first + s * cluster * block_floats);
      v[0] += x.x;
      v[1] += x.y;
      v[2] += x.z;
      v[3] += x.w;
    }
    store_reduced_run<KIND_OUT, EPI>(p, batch, row, col, v);
  }
}

// The sum over `splits` K slices, `slice_floats` apart, of the run of four partials at `first`:
// 16-byte loads where the runs start on 16 bytes (`vector`), eight slices' loads in flight at
// once; else element by element, columns from `cols_left` on skipped. Plain (weak) loads, also
// for the product's in-grid sum, where an acquire orders them after the other SMs' stores: the
// strong loads of ld.global.cg cost the reduce ~6% and the in-grid sum ~2% (docs/perf/matmul.md
// v27, v28).
__device__ __forceinline__ void sum_slices(const float* first, long long slice_floats, int splits,
                                           bool vector, int cols_left, float (&v)[4]) {
  v[0] = v[1] = v[2] = v[3] = 0.f;
  if (vector) {
    for (int s0 = 0; s0 < splits; s0 += 8) {
#pragma unroll
      for (int j = 0; j < 8; ++j)
        if (s0 + j < splits) {
          const float4 x = *reinterpret_cast<const float4*>(first + (s0 + j) * slice_floats);
          v[0] += x.x;
          v[1] += x.y;
          v[2] += x.z;
          v[3] += x.w;
        }
    }
  } else {
    for (int s = 0; s < splits; ++s)
#pragma unroll
      for (int q = 0; q < 4; ++q)
        if (q < cols_left) v[q] += first[s * slice_floats + q];
  }
}

// Where run r of the non-tail sums lies: its row over every batch, its batch, row and first
// column. 32-bit divisions where the runs fit them (64-bit ones are several times longer).
struct ReducedRun {
  long long first;  // its first element in one slice
  int batch, row, col;
};
__device__ __forceinline__ ReducedRun locate_run(const SplitKReduceParams& p, long long r, int runs,
                                                 bool narrow) {
  long long rows_before;
  int col;
  if (narrow) {
    const unsigned r32 = static_cast<unsigned>(r), rows = r32 / static_cast<unsigned>(runs);
    rows_before = rows;
    col = static_cast<int>(r32 - rows * static_cast<unsigned>(runs)) * 4;
  } else {
    rows_before = r / runs;
    col = static_cast<int>(r - rows_before * runs) * 4;
  }
  ReducedRun run;
  run.batch = narrow ? static_cast<int>(static_cast<unsigned>(rows_before) / static_cast<unsigned>(p.m))
                     : static_cast<int>(rows_before / p.m);
  run.row = static_cast<int>(rows_before - static_cast<long long>(run.batch) * p.m);
  run.col = col;
  run.first = rows_before * p.n + col;
  return run;
}

// A thread sums a run of 4 columns of one row over the slices (sum_slices). The first run's
// place is worked out before waiting for the product (launched early, the kernel does it while the
// product drains), with 32-bit divisions where they suffice (v1 summed one element per thread,
// with two 64-bit divisions each: 9.3 us for 512x512 in 8 slices, a third of the whole K-heavy
// matmul).
template <int KIND_OUT, int EPI>
__global__ void __launch_bounds__(256) splitk_reduce(const SplitKReduceParams p) {
  allow_next_launch();
  if (p.tail) {
    wait_for_previous_launch();
    reduce_tail<KIND_OUT, EPI>(p);
    return;
  }
  const long long count = static_cast<long long>(p.m) * p.n * p.batch;  // one K slice's products
  const int runs = (p.n + 3) / 4;  // per row
  const long long total = static_cast<long long>(p.m) * p.batch * runs;
  const bool narrow = total <= 0xffffffffll;
  const bool vector_loads = p.n % 4 == 0;
  long long r = blockIdx.x * 256ll + threadIdx.x;
  ReducedRun run = locate_run(p, r, runs, narrow);
  wait_for_previous_launch();
  for (; r < total; r += gridDim.x * 256ll) {
    if (r != blockIdx.x * 256ll + threadIdx.x) run = locate_run(p, r, runs, narrow);
    float v[4];
    sum_slices(p.partials + run.first, count, p.splits, vector_loads, p.n - run.col, v);
    store_reduced_run<KIND_OUT, EPI>(p, run.batch, run.row, run.col, v);
  }
}

}  // namespace tilesmith
