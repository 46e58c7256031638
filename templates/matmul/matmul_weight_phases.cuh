// gather_phases: the product's A rearranged for a weight read in row phases (the PHASED
// sm_90a kernel, MatmulSm90PhasedParams): column h * phase_k + q of the gathered A is A's
// column G q + h (G = the phases' stride), or zero where that is past K, so that the k blocks
// of each phase meet the weight rows of that phase. A has a few rows here (swapped tiles), so
// one element a thread per phase is enough; each thread reads its G neighbouring columns of a
// row-major A (or a column-major A's rows, neighbouring threads taking neighbouring rows) and
// writes one element into each phase.
//
// launch: block 256 threads; A row-major (k_contiguous): grid (ceil(phase_k / 256), rows), else
// (ceil(rows / 256), phase_k); grid y at most 65535 (grid-stride beyond); early starts of the
// next launch allowed.
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
  const long long inner = p.k_contiguous ? p.phase_k : p.rows;
  const long long outer = p.k_contiguous ? p.rows : p.phase_k;
  for (long long o = blockIdx.y; o < outer; o += gridDim.y)
    for (long long i = blockIdx.x * 256ll + threadIdx.x; i < inner; i += gridDim.x * 256ll) {
      const long long row = p.k_contiguous ? o : i, q = p.k_contiguous ? i : o;
      Element* to = dst + row * p.phases * p.phase_k + q;
      for (int h = 0; h < p.phases; ++h) {
        const long long k = q * p.stride + h;
        to[h * p.phase_k] = k < p.k ? src[row * p.row_stride + k * p.k_stride] : Element(0);
      }
    }
}

}  // namespace tilesmith
