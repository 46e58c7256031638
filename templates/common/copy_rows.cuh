// Re-strides a matrix: the padding copy that lets TMA read a matrix whose rows do not start on
// 16-byte boundaries (4093 bf16 columns), and (at the end) the transposing copy. TMA's bounds
// stop at the true column count, so the padding itself is never read; the last chunk of a row
// may write garbage into it.
//
// Bandwidth: a source row starts on any element boundary, so element-wide loads (v3: 1.2-2 TB/s)
// would cap the copy. Each thread writes one 16-byte chunk of a destination row (whose rows
// start on 16 bytes) from the one or two aligned 16-byte blocks of the source that hold its
// bytes, shifted into place in registers: every access is 16 bytes wide and coalesced. A block
// that holds no byte of the row is never read (reading it could cross the allocation's end).
//
// launch: block 256 threads, grid up to one block per row and 8 per SM (a grid-stride loop over
// the rows covers the rest).
#pragma once

#include "common/copy_rows_params.h"
#include "common/tile_primitives.cuh"

namespace tilesmith {

struct Chunk16 {
  unsigned w[4];
};

__device__ __forceinline__ Chunk16 load_chunk16(const unsigned char* aligned) {
  Chunk16 c;
  asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(c.w[0]), "=r"(c.w[1]), "=r"(c.w[2]), "=r"(c.w[3])
               : "l"(aligned));
  return c;
}

// Word i of the 32 bytes lo:hi (lo first), for i in 0..7 held in registers (no local memory).
__device__ __forceinline__ unsigned word_of(const Chunk16& lo, const Chunk16& hi, int i) {
  unsigned value = lo.w[0];
#pragma unroll
  for (int j = 1; j < 8; ++j)
    if (i == j) value = j < 4 ? lo.w[j] : hi.w[j - 4];
  return value;
}

template <int ELEMENT_BYTES>
__global__ void __launch_bounds__(256) copy_rows(const CopyRowsParams p) {
  const long long row_bytes = p.cols * ELEMENT_BYTES;
  const int chunks = static_cast<int>((row_bytes + 15) / 16);  // of one row
  // A block per row at a time: the row's shift is worked out once, and no thread divides to find
  // its row (a 64-bit division per chunk measured as costly as the copy's own instructions).
  for (long long row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const long long batch = row / p.batch_rows;  // once per row, not per chunk
    const unsigned char* from =
        static_cast<const unsigned char*>(p.src) +
        (batch * p.src_batch_stride + (row - batch * p.batch_rows) * p.src_ld) * ELEMENT_BYTES;
    unsigned char* to = static_cast<unsigned char*>(p.dst) + row * p.dst_ld * ELEMENT_BYTES;
    const unsigned shift = static_cast<unsigned>(reinterpret_cast<unsigned long long>(from) & 15);
    const unsigned char* base = from - shift;  // the aligned block holding the row's first byte
    const long long end = shift + row_bytes;   // past the row's last byte, from base
    const int word = static_cast<int>(shift / 4), bits = 8 * static_cast<int>(shift % 4);
    for (int chunk = threadIdx.x; chunk < chunks; chunk += 256) {
      // This chunk's bytes are [shift + 16 chunk, + 16) from base, clipped to the row's end:
      // they spill into the next aligned block only when the row is shifted and goes on there.
      const Chunk16 lo = load_chunk16(base + 16ll * chunk);
      Chunk16 hi = {{0u, 0u, 0u, 0u}};
      if (shift != 0 && end > 16ll * (chunk + 1)) hi = load_chunk16(base + 16ll * (chunk + 1));
      unsigned out[4];
#pragma unroll
      for (int j = 0; j < 4; ++j)
        out[j] = __funnelshift_r(word_of(lo, hi, word + j), word_of(lo, hi, word + j + 1), bits);
      store_global_16(to + 16ll * chunk, out);
    }
  }
}

// The element type moved by ELEMENT_BYTES-wide copies.
template <int ELEMENT_BYTES>
struct CopiedElement;
template <>
struct CopiedElement<2> {
  using type = unsigned short;
};
template <>
struct CopiedElement<4> {
  using type = unsigned;
};

// The transposing copy that lets TMA read a matrix in the major order an instruction needs
// (tf32 wgmma takes K-major operands only). 32 x 32 tiles through shared memory (one column of
// padding: no bank conflicts), so reads and writes are both coalesced along rows.
// launch: block 32 x 8 threads, grid (ceil(cols / 32), min(ceil(rows / 32), 65535),
// min(batches, 65535)); grid-stride loops over the tile rows and the batches cover the rest.
template <int ELEMENT_BYTES>
__global__ void __launch_bounds__(256) transpose_rows(const TransposeParams p) {
  using Element = typename CopiedElement<ELEMENT_BYTES>::type;
  __shared__ Element tile[32][33];
  const long long col0 = 32ll * blockIdx.x;
  for (long long batch = blockIdx.z; batch < p.batches; batch += gridDim.z) {
    const Element* src = static_cast<const Element*>(p.src) + batch * p.src_batch_stride;
    Element* dst = static_cast<Element*>(p.dst) + batch * p.cols * p.dst_ld;
    for (long long row0 = 32ll * blockIdx.y; row0 < p.rows; row0 += 32ll * gridDim.y) {
      for (int i = threadIdx.y; i < 32; i += 8) {
        const long long row = row0 + i, col = col0 + threadIdx.x;
        if (row < p.rows && col < p.cols) tile[i][threadIdx.x] = src[row * p.src_ld + col];
      }
      __syncthreads();
      for (int i = threadIdx.y; i < 32; i += 8) {
        const long long out_row = col0 + i, out_col = row0 + threadIdx.x;
        if (out_row < p.cols && out_col < p.rows)
          dst[out_row * p.dst_ld + out_col] = tile[threadIdx.x][i];
      }
      __syncthreads();
    }
  }
}

}  // namespace tilesmith
