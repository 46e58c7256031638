// Re-strides matrices: the padding copy that lets TMA read matrices whose rows do not start on
// 16-byte boundaries (4093 bf16 columns), and (at the end) the transposing copy. TMA's bounds
// stop at the true column count, so the padding itself is never read; the last chunk of a row
// may write garbage into it.
//
// Bandwidth: a source row starts on any element boundary, so element-wide loads (v3: 1.2-2 TB/s)
// would cap the copy. Each thread writes one 16-byte chunk of a destination row (whose rows
// start on 16 bytes) from the one or two aligned 16-byte blocks of the source that hold its
// bytes, shifted into place in registers: every access is 16 bytes wide and coalesced. A block
// that holds no byte of the row is never read (reading it could cross the allocation's end).
// The shift is the same for a whole row, so each row runs code compiled for its word offset:
// picking words by a run-time index took 60 registers and ~80 instructions a chunk, which held
// the copy to 4 blocks an SM and 2 TB/s (docs/perf/matmul.md v19). A row of fewer than 256
// chunks leaves threads over: a block then copies 256 / team rows at once, a team of threads
// (the power of two from 32 to 256 that covers the row's chunks, or all 256) a row. With one row
// a block, the 11516 rows of 312 bytes of a 16x11516x156 weight took ~20 us, each block walking
// 11 rows one DRAM round trip after another with 20 of its 256 threads (docs/perf/matmul.md
// v22). Both operands of a matmul go in one launch, and the launch that follows may start
// early (it waits for this grid).
//
// launch: block 256 threads, grid up to one block per row and 8 per SM (grid-stride loops over
// the rows of each matrix cover the rest); early starts of the next launch allowed.
#pragma once

#include "common/copy_rows_params.h"
#include "common/tile_primitives.cuh"

namespace tilesmith {

struct Chunk16 {
  unsigned w[4];
};

// Coherent, not ld.global.nc: see load_input (tile_primitives.cuh).
__device__ __forceinline__ Chunk16 load_chunk16(const unsigned char* aligned) {
  Chunk16 c;
  asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(c.w[0]), "=r"(c.w[1]), "=r"(c.w[2]), "=r"(c.w[3])
               : "l"(aligned));
  return c;
}

// Word I of the 32 bytes lo:hi (lo first).
template <int I>
__device__ __forceinline__ unsigned word_of(const Chunk16& lo, const Chunk16& hi) {
  return I < 4 ? lo.w[I & 3] : hi.w[I & 3];
}

// One row whose bytes start WORD words and `bits` more bits into the aligned block at `base`
// (`end` bytes from base to past the row's last byte): the chunks of it that fall to thread
// `member` of a team of `team` threads.
template <int WORD>
__device__ __forceinline__ void copy_row(const unsigned char* base, unsigned char* to, int chunks,
                                         long long end, int bits, int member, int team) {
  // Chunks per thread whose loads are issued together, before any of their stores. (Local:
  // a namespace-scope constant is emitted into the cubin under a per-process name.)
  constexpr int kCopyChunksInFlight = 2;
  const bool shifted = WORD != 0 || bits != 0;
  for (int first = member; first < chunks; first += team * kCopyChunksInFlight) {
    Chunk16 lo[kCopyChunksInFlight], hi[kCopyChunksInFlight];
#pragma unroll
    for (int u = 0; u < kCopyChunksInFlight; ++u) {
      const int chunk = first + team * u;
      // This chunk's bytes are [shift + 16 chunk, + 16) from base, clipped to the row's end:
      // they spill into the next aligned block only when the row is shifted and goes on there.
      lo[u] = hi[u] = Chunk16{{0u, 0u, 0u, 0u}};
      if (chunk < chunks) lo[u] = load_chunk16(base + 16ll * chunk);
      if (shifted && chunk < chunks && end > 16ll * (chunk + 1))
        hi[u] = load_chunk16(base + 16ll * (chunk + 1));
    }
#pragma unroll
    for (int u = 0; u < kCopyChunksInFlight; ++u) {
      const int chunk = first + team * u;
      if (chunk >= chunks) break;
      const unsigned out[4] = {
          __funnelshift_r(word_of<WORD>(lo[u], hi[u]), word_of<WORD + 1>(lo[u], hi[u]), bits),
          __funnelshift_r(word_of<WORD + 1>(lo[u], hi[u]), word_of<WORD + 2>(lo[u], hi[u]), bits),
          __funnelshift_r(word_of<WORD + 2>(lo[u], hi[u]), word_of<WORD + 3>(lo[u], hi[u]), bits),
          __funnelshift_r(word_of<WORD + 3>(lo[u], hi[u]), word_of<WORD + 4>(lo[u], hi[u]), bits)};
      store_global_16(to + 16ll * chunk, out);
    }
  }
}

template <int ELEMENT_BYTES>
__global__ void __launch_bounds__(256, 8) copy_rows(const CopyRowsParams p) {
  allow_next_launch();  // the kernel after the copy may set up; it waits for this grid to finish
  wait_for_previous_launch();
  for (int which = 0; which < 2; ++which) {
    const CopyRowsMatrix& m = p.matrix[which];
    const long long row_bytes = m.cols * ELEMENT_BYTES;
    const int chunks = static_cast<int>((row_bytes + 15) / 16);
    int team = 32;
    while (team < 256 && team < chunks) team *= 2;
    const int teams = 256 / team, member = threadIdx.x % team;
    // A team per row at a time: the row's shift is worked out once, and no thread divides to
    // find its row (a 64-bit division per chunk measured as costly as the copy's own
    // instructions).
    for (long long r = static_cast<long long>(blockIdx.x) * teams + threadIdx.x / team; r < m.rows;
         r += static_cast<long long>(gridDim.x) * teams) {
      const long long batch = r / m.batch_rows;  // once per row, not per chunk
      const unsigned char* from =
          static_cast<const unsigned char*>(m.src) +
          (batch * m.src_batch_stride + (r - batch * m.batch_rows) * m.src_ld) * ELEMENT_BYTES;
      unsigned char* to = static_cast<unsigned char*>(m.dst) + r * m.dst_ld * ELEMENT_BYTES;
      const unsigned shift = static_cast<unsigned>(reinterpret_cast<unsigned long long>(from) & 15);
      const unsigned char* base = from - shift;  // the aligned block holding the row's first byte
      const long long end = shift + row_bytes;
      const int bits = 8 * static_cast<int>(shift % 4);
      switch (shift / 4) {
        case 0: copy_row<0>(base, to, chunks, end, bits, member, team); break;
        case 1: copy_row<1>(base, to, chunks, end, bits, member, team); break;
        case 2: copy_row<2>(base, to, chunks, end, bits, member, team); break;
        default: copy_row<3>(base, to, chunks, end, bits, member, team); break;
      }
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
  allow_next_launch();  // the kernel after the transpose may set up; it waits for this grid
  wait_for_previous_launch();
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
