// Re-strides a matrix: the padding copy that lets TMA read a matrix whose rows do not start on
// 16-byte boundaries (4093 bf16 columns). TMA's bounds stop at the true column count, so the
// padding itself is never read and need not be written.
//
// launch: block 256 threads (the loop's stride), grid up to one block per row (a grid-stride
// loop covers the rest).
#pragma once

#include "common/copy_rows_params.h"

namespace tilesmith {

template <int BYTES>
struct ElementOfSize;
template <>
struct ElementOfSize<2> {
  typedef unsigned short type;
};
template <>
struct ElementOfSize<4> {
  typedef unsigned int type;
};

template <int ELEMENT_BYTES>
__global__ void __launch_bounds__(256) copy_rows(const CopyRowsParams p) {
  typedef typename ElementOfSize<ELEMENT_BYTES>::type Element;
  const Element* src = static_cast<const Element*>(p.src);
  Element* dst = static_cast<Element*>(p.dst);
  // Rows of an unaligned matrix allow only element-wide accesses, so bandwidth comes from
  // having many in flight: each thread issues UNROLL loads (each coalesced across the warp)
  // before their stores.
  constexpr int UNROLL = 8;
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const Element* from = src + row * p.src_ld;
    Element* to = dst + row * p.dst_ld;
    for (long long col0 = threadIdx.x; col0 < p.cols; col0 += 256ll * UNROLL) {
      Element values[UNROLL];
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const long long col = col0 + 256ll * u;
        if (col < p.cols) values[u] = from[col];
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const long long col = col0 + 256ll * u;
        if (col < p.cols) to[col] = values[u];
      }
    }
  }
}

}  // namespace tilesmith
