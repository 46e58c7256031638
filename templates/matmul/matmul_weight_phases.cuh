// gather_phases: the product's A rearranged for a weight read in row phases (the PHASED
// sm_90a kernel, MatmulSm90PhasedParams): column h * phase_k + q of the gathered A is A's
// column G q + h (G = the phases' stride), or zero where that is past K, so that the k blocks
// of each phase meet the weight rows of that phase.
// Each thread loads every phase's element before it stores any (at most kMaxWeightPhases):
// stored between loads, each load waited for the one before it, a column-major A's from a
// line of its own, and the gather took 10-24 us of 91-120 rows (v39).
// A row-major A (k_contiguous): a thread reads its G neighbouring columns of a row and writes
// one element into each phase, neighbouring threads taking neighbouring q (both sides
// coalesced). A column-major A goes through shared memory in tiles of 32 rows x 32 q, read
// along its rows and written along q.
//
// launch: block 256 threads; A row-major: grid (ceil(phase_k / 256), rows); column-major:
// grid (ceil(rows / 32), ceil(phase_k / 32)); grid y at most 65535 (grid-stride beyond); early
// starts of the next launch allowed.
#pragma once

#include "common/copy_rows.cuh"  // CopiedElement
#include "matmul/matmul_sm90_params.h"

namespace tilesmith {

template <int ELEMENT_BYTES>
__global__ void __launch_bounds__(256) gather_phases(const GatherPhasesParams p) {
  allow_next_launch();  // the product may set up; it waits for this grid to finish
  wait_for_previous_launch();
  using Element = typename CopiedElement<ELEMENT_BYTES>::type;
  const Element* src = static_cast<const Element*>(p.src);
  Element* dst = static_cast<Element*>(p.dst);
  const long long gathered_k = p.phases * p.phase_k;
  const auto read = [&](long long row, long long q, int h) {
    const long long k = q * p.stride + h;
    return k < p.k ? src[row * p.row_stride + k * p.k_stride] : Element(0);
  };
  if (p.k_contiguous) {
    for (long long row = blockIdx.y; row < p.rows; row += gridDim.y)
      for (long long q = blockIdx.x * 256ll + threadIdx.x; q < p.phase_k; q += gridDim.x * 256ll) {
        Element phase[kMaxWeightPhases];
#pragma unroll
        for (int h = 0; h < kMaxWeightPhases; ++h)
          if (h < p.phases) phase[h] = read(row, q, h);
#pragma unroll
        for (int h = 0; h < kMaxWeightPhases; ++h)
          if (h < p.phases) dst[row * gathered_k + h * p.phase_k + q] = phase[h];
      }
    return;
  }
  __shared__ Element tile[kMaxWeightPhases][32][33];  // [h][q][row], padded against bank conflicts
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long first_row = blockIdx.x * 32ll;
  for (long long first_q = blockIdx.y * 32ll; first_q < p.phase_k; first_q += gridDim.y * 32ll) {
    Element loaded[4][kMaxWeightPhases];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const long long row = first_row + lane, q = first_q + warp + 8 * j;
#pragma unroll
      for (int h = 0; h < kMaxWeightPhases; ++h)
        if (h < p.phases)
          loaded[j][h] = row < p.rows && q < p.phase_k ? read(row, q, h) : Element(0);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h = 0; h < kMaxWeightPhases; ++h)
        if (h < p.phases) tile[h][warp + 8 * j][lane] = loaded[j][h];
    __syncthreads();
    for (int h = 0; h < p.phases; ++h)
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const long long row = first_row + warp + 8 * j, q = first_q + lane;
        if (row < p.rows && q < p.phase_k)
          dst[row * gathered_k + h * p.phase_k + q] = tile[h][lane][warp + 8 * j];
      }
    __syncthreads();
  }
}

}  // namespace tilesmith
