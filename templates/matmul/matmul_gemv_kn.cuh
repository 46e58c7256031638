// Matmul for a few rows of A (M <= 32) times a row-major B (stored k x n: x @ W with W stored
// in x's own orientation), or on C^T = B^T A^T for a few columns of B times a column-major A
// (SWAP_AB), reading B where it lies at any alignment (sm_80+). TMA and cp.async
// move 16 bytes, so the tiled templates first copy a B whose rows are off 16 bytes (an odd N)
// into padded rows: for a few rows of A that copy is two passes over the weight for one
// product's pass (1x8490x12975: 0.52x cuBLAS, docs/perf/matmul.md v23). Here each thread walks
// K down VEC adjacent columns of B, so a warp reads 32 x VEC contiguous elements of a row at a
// time, loaded VEC at a time (up to 16 bytes) where B's base, rows and batches allow it at run
// time, else one element at a time, or, where VEC is 16 bytes, as the aligned 16-byte pieces
// around them realigned over the warp's 32 lanes (RowPieces: an odd N). 16-bit or fp32 inputs
// (fp32 multiplied in fp32: the FMAs are on CUDA cores either way).
//
// per thread: VEC columns; UNROLL rows of B (k, WARPS apart) loaded before their products;
//             ROWS x VEC fp32 sums, A's values read from shared memory (a broadcast).
// per CTA:    32 x VEC columns of one K slice (slice blockIdx.y of gridDim.y), its WARPS warps
//             taking the slice's rows in turn (short chains of loads: a single thread walking a
//             long K waits out one DRAM latency per UNROLL rows); A's rows staged as fp32 in
//             shared memory a round of WARPS x UNROLL rows at a time; the warps' sums added
//             through shared memory. With one slice the epilogue is applied here; with
//             several, each writes its fp32 partials and splitk_reduce sums them and applies it
//             (a second launch, started early).
// SWAP_AB:    the kernel computes C^T = B^T A^T (the plan passes B as its A and A, column-major,
//             as its row-major B): output (row, col) is C's (col, row), stored (or its slice's
//             partials written) at C's place.
// launch:     block WARPS x 32; grid (ceil(n / (32 x VEC)), k_splits, batch), batch <= 65535;
//             no dynamic shared memory.
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_epilogue.cuh"
#include "matmul/matmul_params.h"
#include "matmul/matmul_row_loads.cuh"
#include "matmul/matmul_splitk.cuh"

namespace tilesmith {

template <int ROWS, int VEC, int WARPS, int UNROLL, int IN_KIND, int A_COLUMNS>
struct GemvKn {
  static constexpr int kChunk = WARPS * UNROLL;  // rows of B (k) per round: UNROLL a warp
  using Element = RowElement<IN_KIND>;
  using T = typename Element::type;
  static_assert(VEC * sizeof(T) <= 16, "at most 16 bytes a load");

  // How B's rows are read: VEC elements a load, one at a time, or realigned 16-byte pieces.
  enum Loads { kWide, kElements, kRealigned };
  static constexpr bool kSixteenBytes = VEC * sizeof(T) == 16;

  // The slice's products into `sum`. Each round, a warp's UNROLL rows of B are loaded first,
  // then the round's rows of A staged while they are in flight, so the two latencies overlap
  // (kRealigned: the pieces realigned after it).
  template <Loads LOADS>
  __device__ static void run(const MatmulParams& p, int batch, int col, long long k_begin,
                             long long k_end, float (&a_tile)[kChunk][ROWS], float (&sum)[ROWS][VEC]) {
    static_assert(LOADS != kRealigned || kSixteenBytes, "realigned pieces are 16 bytes");
    constexpr int HALVES = sizeof(T) / 2;  // 16-bit units an element
    const int warp = threadIdx.x / 32;
    const int valid = col < p.n ? min(VEC, p.n - col) : 0;
    // kRealigned: every lane at its own column, inside the row or not (the pieces' shifts).
    const T* b = static_cast<const T*>(p.b) + batch * p.stride_b +
                 (valid || LOADS == kRealigned ? col : 0);
    const T* a = static_cast<const T*>(p.a) + batch * p.stride_a;
    for (long long k0 = k_begin; k0 < k_end; k0 += kChunk) {
      const int rows_k = static_cast<int>(min(static_cast<long long>(kChunk), k_end - k0));
      typename Element::template Columns<VEC> w[UNROLL];
      RowPieces pieces[LOADS == kRealigned ? UNROLL : 1];
      // kRealigned: the row's 16-bit units from the lane's column on (-16: no row of the round).
      auto remaining = [&](int kk) { return kk < rows_k ? (p.n - col) * HALVES : -16; };
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int kk = warp + u * WARPS;
        if constexpr (LOADS == kRealigned)
          pieces[u] = load_row_pieces<32, true>(
              reinterpret_cast<const half_bits*>(b + (k0 + kk) * p.ldb), remaining(kk));
        else
          load_columns<VEC, LOADS == kWide, IN_KIND>(b + (k0 + kk) * p.ldb, kk < rows_k ? valid : 0,
                                                     w[u]);
      }
      __syncthreads();  // the previous round's readers of a_tile are done
      for (int i = threadIdx.x; i < kChunk * ROWS; i += WARPS * 32) {
        const int kk = i / ROWS, r = i % ROWS;
        const long long at = A_COLUMNS ? (k0 + kk) * p.lda + r : static_cast<long long>(r) * p.lda + k0 + kk;
        a_tile[kk][r] = r < p.m && kk < rows_k ? Element::value(a[at]) : 0.f;
      }
      __syncthreads();
      if constexpr (LOADS == kRealigned) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
          const int kk = warp + u * WARPS;
          const auto at = reinterpret_cast<unsigned long long>(b + (k0 + kk) * p.ldb);
          const uint4 v = realign<32>(pieces[u], static_cast<int>(at & 15), remaining(kk));
          const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            if constexpr (IN_KIND == kF32)
              w[u].values[i] = __uint_as_float(words[i]);
            else
              w[u].words[i] = words[i];
          }
        }
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int e = 0; e < VEC; ++e) {
          const float x = Element::value(w[u], e);
#pragma unroll
          for (int r = 0; r < ROWS; ++r) sum[r][e] = fmaf(a_tile[warp + u * WARPS][r], x, sum[r][e]);
        }
    }
  }
};

// A_COLUMNS: A stored k x m (column-major), else m x k.
template <int ROWS, int VEC, int WARPS, int UNROLL, int IN_KIND, int OUT_KIND, int A_COLUMNS,
          int SWAP_AB, int EPI>
__global__ void __launch_bounds__(WARPS * 32) matmul_gemv_kn(const MatmulDecodeParams d) {
  wait_for_previous_launch();
  using Kernel = GemvKn<ROWS, VEC, WARPS, UNROLL, IN_KIND, A_COLUMNS>;
  const MatmulParams& p = d.product;
  __shared__ float a_tile[Kernel::kChunk][ROWS];
  __shared__ float warp_sums[WARPS][32 * VEC];
  const int batch = blockIdx.z, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int col0 = blockIdx.x * 32 * VEC;
  // Slices of whole rounds, so every CTA's staging covers k of its own slice only.
  const long long rounds = (p.k + Kernel::kChunk - 1) / Kernel::kChunk;
  const long long k_begin = rounds * blockIdx.y / d.k_splits * Kernel::kChunk;
  const long long k_end = min(static_cast<long long>(p.k), rounds * (blockIdx.y + 1) / d.k_splits * Kernel::kChunk);
  float sum[ROWS][VEC];
#pragma unroll
  for (int r = 0; r < ROWS; ++r)
#pragma unroll
    for (int e = 0; e < VEC; ++e) sum[r][e] = 0.f;
  // The wide loads need B's base, rows and batches on VEC elements, which a call may break (a
  // view starting at an odd column, an odd N): then 16-byte pieces realigned where VEC is 16
  // bytes, else element by element.
  constexpr unsigned long long kBytes = sizeof(typename Kernel::T);
  const unsigned long long offsets = reinterpret_cast<unsigned long long>(p.b) |
                                     static_cast<unsigned long long>(p.ldb) * kBytes |
                                     static_cast<unsigned long long>(p.stride_b) * kBytes;
  const int col = col0 + lane * VEC;
  if (VEC > 1 && offsets % (VEC * kBytes) == 0)
    Kernel::template run<Kernel::kWide>(p, batch, col, k_begin, k_end, a_tile, sum);
  else if constexpr (Kernel::kSixteenBytes)
    Kernel::template run<Kernel::kRealigned>(p, batch, col, k_begin, k_end, a_tile, sum);
  else
    Kernel::template run<Kernel::kElements>(p, batch, col, k_begin, k_end, a_tile, sum);
  // With split_k, splitk_reduce may start now (it waits for the partials this grid writes).
  allow_next_launch();
  // The warps' sums of each row, added through shared memory; thread i < 32 x VEC finishes
  // column col0 + i (a warp's stores contiguous).
#pragma unroll
  for (int r = 0; r < ROWS; ++r) {
    if (r >= p.m) break;
    __syncthreads();
#pragma unroll
    for (int e = 0; e < VEC; ++e) warp_sums[warp][lane * VEC + e] = sum[r][e];
    __syncthreads();
    for (int i = threadIdx.x; i < 32 * VEC; i += WARPS * 32) {
      const int col = col0 + i;
      if (col >= p.n) continue;
      float v = 0.f;
#pragma unroll
      for (int w2 = 0; w2 < WARPS; ++w2) v += warp_sums[w2][i];
      // C's row and column, and its shape: swapped where the kernel computes C^T.
      const int c_row = SWAP_AB ? col : r, c_col = SWAP_AB ? r : col;
      const int c_rows = SWAP_AB ? p.n : p.m, c_cols = SWAP_AB ? p.m : p.n;
      if (d.k_splits == 1) {
        if (EPI != kActNone) v = epilogue_value<EPI, OUT_KIND>(p.epilogue, batch, c_row, c_col, v);
        store_pair<OUT_KIND>(p.c, batch * p.stride_c + static_cast<long long>(c_row) * p.ldc + c_col,
                             v, 0.f, false, false);
      } else {
        // The slice's partials, packed as C: splitk_reduce adds them and applies the epilogue.
        const long long at =
            ((static_cast<long long>(blockIdx.y) * p.batch + batch) * c_rows + c_row) * c_cols + c_col;
        store_pair<kF32>(d.partials, at, v, 0.f, false, false);
      }
    }
  }
}

}  // namespace tilesmith
