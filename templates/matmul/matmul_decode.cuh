// Matmul for decode shapes (M <= 32 rows of A, B column-major: x @ W^T), sm_80+: the weight W
// (stored n x k) is read once, into mma.sync m16n8k16 fragments with no pipeline to fill. On
// the H100 it starts ~2 us sooner than the wgmma template's swap_ab and streams ~10% slower
// (docs/perf/matmul.md v7): it wins on small weights.
// Rows off 16 bytes, which TMA cannot read, are read in place too: the same 16 bytes of a lane
// in VEC-element loads (8 or 4 bytes: the widest that divides K), one element at a time where a
// call's strides are off them; rows of an odd K (VEC 1) from the aligned 16 bytes at or before
// a lane's 8 elements and the 16 after, shifted into place (RowPieces).
//
// fragments: a lane's 16 bytes of a weight row (8 k) are its B fragment for two k16 MMAs, read
//            as a permutation of K: in MMA j of a 32-k chunk, lane q's fragment k 2q+{0,1} is
//            the chunk's k 8q+4j+{0,1} and its k 2q+8+{0,1} is k 8q+4j+2+{0,1}. The sum over K
//            does not care in which order it adds, so A's rows are loaded with the same 16-byte
//            reads and the same permutation; no lane exchanges data.
// ROW_BYTES: the contiguous bytes of one weight row a warp's load reads. At 64, lane (g, q) reads
//            its own fragment (8 rows of 64 bytes a load) straight from global memory. At 128,
//            256 or 512 a load reads 4, 2 or 1 rows of whole 128-byte lines (a span of 2, 4 or
//            8 chunks), and each warp passes the loaded rows through its own shared-memory
//            block to hand out the fragments: DRAM streams such loads faster (v36: a weight of
//            14336 x 4096 read 1.25x the floor in 64-byte pieces, 1.08-1.11x in whole lines).
//            Aligned problems only (VEC 8).
// split of K: the CTA's warps take the spans in turn (warp w: spans w, w + WARPS, ...) in groups
//             of UNROLL, the next group's loads issued before the MMAs of the one in hand, so
//             every warp keeps UNROLL to 2 UNROLL x COLS x ROW_BYTES bytes of W in flight; the
//             warps' partial tiles are summed through shared memory at the end. Where the column
//             blocks alone leave SMs idle, K is also split over gridDim.y CTAs whose fp32
//             partials splitk_reduce sums (a second launch).
// epilogue: bias, activation and residual in fp32 before C's rounding (matmul_epilogue.cuh).
// launch: block WARPS x 32 threads; grid (ceil(n / COLS), k_splits, min(batch, 65535));
//         dynamic shared memory WARPS x ROWS / 16 (rounded up) x COLS / 8 x 512 bytes, and past
//         64-byte rows WARPS x UNROLL x COLS x ROW_BYTES more.
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_epilogue.cuh"
#include "matmul/matmul_params.h"
#include "matmul/matmul_row_loads.cuh"
#include "matmul/matmul_splitk.cuh"

namespace tilesmith {

__device__ __forceinline__ unsigned word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The 8 elements at `src` of a row off 16 bytes, `valid` of them inside K, zeros past them:
// loads of VEC (2 or 4) elements where `wide` (the call's strides on them), else one at a time.
// (Rows of an odd K: RowPieces. Realigned pieces hold two 16-byte loads a lane in registers;
// over a K off 8 by 2 or 4 they ran 0.79-1.01x these loads: docs/perf/matmul.md v73.)
template <int VEC, int KIND>
__device__ __forceinline__ uint4 load_8_elements(const half_bits* src, int valid, bool wide) {
  static_assert(VEC == 2 || VEC == 4, "16-byte pieces: load_16_or_zero; an odd K: RowPieces");
  unsigned words[4];
#pragma unroll
  for (int i = 0; i < 8; i += VEC) {
    typename RowElement<KIND>::template Columns<VEC> part;
    const int inside = max(0, min(VEC, valid - i));
    if (wide)
      load_columns<VEC, true, KIND>(src + i, inside, part);
    else
      load_columns<VEC, false, KIND>(src + i, inside, part);
#pragma unroll
    for (int w = 0; w < VEC / 2; ++w) words[i / 2 + w] = part.words[w];
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

template <int ROWS, int COLS, int WARPS, int UNROLL, int VEC, int IN_KIND, int OUT_KIND, int EPI,
          int ROW_BYTES = 64>
__global__ void __launch_bounds__(WARPS * 32) matmul_decode(const MatmulDecodeParams d) {
  static_assert(ROWS == 8 || ROWS == 16 || ROWS == 32, "ROWS: A's rows rounded up to 8, 16 or 32");
  static_assert(COLS % 8 == 0, "COLS: whole n8 MMA tiles");
  static_assert(ROW_BYTES == 64 || ROW_BYTES == 128 || ROW_BYTES == 256 || ROW_BYTES == 512,
                "ROW_BYTES: 64 to 512 bytes of a row a load");
  constexpr int HALVES = ROWS / 8;             // 8-row halves of the m16 tiles
  constexpr int TILES_M = (ROWS + 15) / 16;    // m16 tiles
  constexpr int TILES_N = COLS / 8;            // n8 tiles
  constexpr int SLOTS = TILES_M * TILES_N * 32;  // float4 accumulator slots of one warp
  constexpr int ROW_LANES = ROW_BYTES / 16;    // lanes that read one weight row in a load
  constexpr int LOAD_ROWS = 32 / ROW_LANES;    // weight rows a load reads
  constexpr int LOADS = COLS / LOAD_ROWS;      // loads a span of the CTA's rows
  constexpr int SPAN = ROW_LANES / 4;          // 32-k chunks a span
  constexpr bool STAGED = SPAN > 1;            // fragments handed out through shared memory
  static_assert(!STAGED || VEC == 8, "rows read in whole lines: aligned problems only");
  extern __shared__ float4 warp_sums[];        // [WARPS][SLOTS], then the staged spans
  // STAGED: each warp's UNROLL spans of the CTA's rows, [UNROLL][COLS][ROW_LANES] 16-byte
  // units, a unit u of row r at u ^ 4 (r & 1), so that the fragment reads (rows g, units 4j+q)
  // of a quarter warp fall in eight distinct bank groups.
  uint4* const staged = reinterpret_cast<uint4*>(warp_sums + WARPS * SLOTS) +
                        (threadIdx.x / 32) * (STAGED ? UNROLL * COLS * ROW_LANES : 0);

  const MatmulParams& p = d.product;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane / 4, quad = lane % 4;
  const int col0 = blockIdx.x * COLS;
  const int spans = (p.k + SPAN * 32 - 1) / (SPAN * 32);
  const int first = static_cast<int>(static_cast<long long>(spans) * blockIdx.y / d.k_splits);
  const int last = static_cast<int>(static_cast<long long>(spans) * (blockIdx.y + 1) / d.k_splits);
  // C's column pairs go as one store where C's rows, batches and base keep them aligned.
  const bool paired_store = ((p.ldc | p.stride_c) & 1) == 0 &&
                            reinterpret_cast<unsigned long long>(p.c) % (OUT_KIND == kF32 ? 8 : 4) == 0;
  // Loads of 2 or 4 elements go one element at a time where a call's strides are off them.
  const bool wide = VEC == 8 || strides_on(p, VEC);

  for (int batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    // This lane's weight rows (one per load: at 64 bytes a load, one per n8 tile) at its 8 k of
    // a span, and rows of A (one per half) at its 8 k of a chunk; rows past the matrix read
    // nothing.
    const half_bits* w_row[LOADS];
    bool w_inside[LOADS];
    const int w_unit = lane % ROW_LANES;  // the lane's 16 bytes of a row's span
#pragma unroll
    for (int i = 0; i < LOADS; ++i) {
      const int n = col0 + i * LOAD_ROWS + lane / ROW_LANES;
      w_inside[i] = n < p.n;
      w_row[i] = static_cast<const half_bits*>(p.b) + batch * p.stride_b +
                 static_cast<long long>(w_inside[i] ? n : 0) * p.ldb + w_unit * 8;
    }
    const half_bits* a_row[HALVES];
    bool a_inside[HALVES];
#pragma unroll
    for (int h = 0; h < HALVES; ++h) {
      const int m = h * 8 + group;
      a_inside[h] = m < p.m;
      a_row[h] = static_cast<const half_bits*>(p.a) + batch * p.stride_a +
                 static_cast<long long>(a_inside[h] ? m : 0) * p.lda + quad * 8;
    }

    float acc[TILES_M][TILES_N][4];
#pragma unroll
    for (int i = 0; i < TILES_M; ++i)
#pragma unroll
      for (int t = 0; t < TILES_N; ++t)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[i][t][e] = 0.f;

    // Two register buffers of UNROLL spans: the next group's loads are issued before the MMAs
    // of the group in hand, so a warp's loads stay in flight while it multiplies (with one
    // buffer, ptxas interleaved each load with the MMA that waits on it).
    // (Zeroed where declared: with VEC 1 they are written only by the realignment inside
    // multiply_group, which NVRTC cannot follow, warning #549-D; every element is written
    // before it is read, so the zeros cost no instruction.)
    uint4 w[2][UNROLL][LOADS] = {}, x[2][UNROLL][SPAN][HALVES] = {};
    // VEC 1: the loaded pieces instead, realigned into w and x as they are multiplied, by each
    // row's shift (its offset from 16 bytes, the same at every chunk: 64 bytes apart). Other
    // VECs keep one unused slot (no zero-length arrays).
    constexpr bool RAW = VEC == 1;
    RowPieces w_raw[2][UNROLL][RAW ? TILES_N : 1], x_raw[2][UNROLL][RAW ? HALVES : 1];
    int w_shift[TILES_N], a_shift[HALVES];
#pragma unroll
    for (int t = 0; t < TILES_N; ++t)
      w_shift[t] = static_cast<int>(reinterpret_cast<unsigned long long>(w_row[t]) & 15);
#pragma unroll
    for (int h = 0; h < HALVES; ++h)
      a_shift[h] = static_cast<int>(reinterpret_cast<unsigned long long>(a_row[h]) & 15);
    // The row's elements from the lane's 8 k of chunk c on (none past the CTA's chunks).
    auto remaining_at = [&](int c) { return c < last ? p.k - (c * 32 + quad * 8) : -16; };
    auto load_group = [&](int buffer, int c0) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int c = c0 + u * WARPS;
        if constexpr (VEC == 8) {
          // K is a multiple of 8 (aligned problems only): a lane's 8 k are all inside or all out.
          const long long k = static_cast<long long>(c) * SPAN * 32;
          const bool w_k_inside = c < last && k + w_unit * 8 < p.k;
#pragma unroll
          for (int i = 0; i < LOADS; ++i)
            w[buffer][u][i] = load_16_or_zero<true>(w_row[i] + k, w_k_inside && w_inside[i]);
#pragma unroll
          for (int j = 0; j < SPAN; ++j) {
            const bool a_k_inside = c < last && k + j * 32 + quad * 8 < p.k;
#pragma unroll
            for (int h = 0; h < HALVES; ++h)
              x[buffer][u][j][h] =
                  load_16_or_zero<false>(a_row[h] + k + j * 32, a_k_inside && a_inside[h]);
          }
        } else if constexpr (VEC == 1) {
          // One chunk a span (64-byte rows); nothing of rows past the matrix's.
          const long long k = static_cast<long long>(c) * 32;
          const int remaining = remaining_at(c);
#pragma unroll
          for (int t = 0; t < TILES_N; ++t)
            w_raw[buffer][u][t] =
                load_row_pieces<4, true>(w_row[t] + k, w_inside[t] ? remaining : -16);
#pragma unroll
          for (int h = 0; h < HALVES; ++h)
            x_raw[buffer][u][h] =
                load_row_pieces<4, false>(a_row[h] + k, a_inside[h] ? remaining : -16);
        } else {
          // One chunk a span (64-byte rows). The lane's 8 k of chunk c inside K.
          const long long k = static_cast<long long>(c) * 32;
          const int valid = max(0, min(8, remaining_at(c)));
#pragma unroll
          for (int t = 0; t < TILES_N; ++t)
            w[buffer][u][t] = load_8_elements<VEC, IN_KIND>(w_row[t] + k, w_inside[t] ? valid : 0, wide);
#pragma unroll
          for (int h = 0; h < HALVES; ++h)
            x[buffer][u][0][h] =
                load_8_elements<VEC, IN_KIND>(a_row[h] + k, a_inside[h] ? valid : 0, wide);
        }
      }
    };
    // The lane's B fragment of n8 tile t in chunk j of span u: its own load, or (STAGED) row
    // t * 8 + group's 16 bytes at chunk j, quad q, from the warp's staged spans.
    auto fragment = [&](int buffer, int u, int j, int t) -> uint4 {
      if constexpr (STAGED) {
        const int row = t * 8 + group;
        return staged[(u * COLS + row) * ROW_LANES + ((j * 4 + quad) ^ ((row & 1) << 2))];
      } else {
        return w[buffer][u][t];
      }
    };
    auto multiply_group = [&](int buffer, int c0) {
      if constexpr (VEC == 1) {
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {
          const int remaining = remaining_at(c0 + u * WARPS);
#pragma unroll
          for (int t = 0; t < TILES_N; ++t)
            w[buffer][u][t] = realign<4>(w_raw[buffer][u][t], w_shift[t], remaining);
#pragma unroll
          for (int h = 0; h < HALVES; ++h)
            x[buffer][u][0][h] = realign<4>(x_raw[buffer][u][h], a_shift[h], remaining);
        }
      }
      if constexpr (STAGED) {
        __syncwarp();  // the previous group's fragments are read
#pragma unroll
        for (int u = 0; u < UNROLL; ++u)
#pragma unroll
          for (int i = 0; i < LOADS; ++i) {
            const int row = i * LOAD_ROWS + lane / ROW_LANES;
            staged[(u * COLS + row) * ROW_LANES + (w_unit ^ ((row & 1) << 2))] = w[buffer][u][i];
          }
        __syncwarp();
      }
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int j = 0; j < SPAN; ++j) {
          uint4 b[TILES_N];
#pragma unroll
          for (int t = 0; t < TILES_N; ++t) b[t] = fragment(buffer, u, j, t);
#pragma unroll
          for (int jj = 0; jj < 2; ++jj)
#pragma unroll
            for (int i = 0; i < TILES_M; ++i) {
              // Rows group and group + 8 of m16 tile i; an 8-row A has no second half.
              const uint4& lower = x[buffer][u][j][2 * i];
              const unsigned upper0 =
                  2 * i + 1 < HALVES ? word(x[buffer][u][j][2 * i + 1], 2 * jj) : 0u;
              const unsigned upper1 =
                  2 * i + 1 < HALVES ? word(x[buffer][u][j][2 * i + 1], 2 * jj + 1) : 0u;
              const unsigned a[4] = {word(lower, 2 * jj), upper0, word(lower, 2 * jj + 1), upper1};
#pragma unroll
              for (int t = 0; t < TILES_N; ++t)
                mma_16x8x16<IN_KIND>(acc[i][t], a, word(b[t], 2 * jj), word(b[t], 2 * jj + 1));
            }
        }
    };
    constexpr int kGroup = WARPS * UNROLL;  // spans between a warp's groups
    // Started early, the CTA has set up while the previous kernel drained (16x4096x4096 in
    // graphs: 14.2 us here against 14.6 us waiting first thing).
    wait_for_previous_launch();
    load_group(0, first + warp);
    for (int c0 = first + warp; c0 < last; c0 += 2 * kGroup) {
      load_group(1, c0 + kGroup);
      multiply_group(0, c0);
      if (c0 + kGroup >= last) break;
      load_group(0, c0 + 2 * kGroup);
      multiply_group(1, c0 + kGroup);
    }
    // With split_k, splitk_reduce may start now (it waits for the partials this grid writes).
    allow_next_launch();

    // The warps' partial tiles, summed through shared memory: slot (i, t, lane) holds the
    // lane's four accumulators of MMA tile (i, t).
#pragma unroll
    for (int i = 0; i < TILES_M; ++i)
#pragma unroll
      for (int t = 0; t < TILES_N; ++t)
        warp_sums[warp * SLOTS + (i * TILES_N + t) * 32 + lane] =
            make_float4(acc[i][t][0], acc[i][t][1], acc[i][t][2], acc[i][t][3]);
    __syncthreads();
    for (int slot = threadIdx.x; slot < SLOTS; slot += WARPS * 32) {
      float4 sum = warp_sums[slot];
#pragma unroll
      for (int w2 = 1; w2 < WARPS; ++w2) {
        const float4 v = warp_sums[w2 * SLOTS + slot];
        sum.x += v.x;
        sum.y += v.y;
        sum.z += v.z;
        sum.w += v.w;
      }
      // m16n8 accumulators: rows lane/4 and lane/4 + 8, columns 2 (lane % 4) + {0, 1}.
      const int owner = slot % 32, tile = slot / 32;
      const int col = col0 + (tile % TILES_N) * 8 + (owner % 4) * 2;
      if (col >= p.n) continue;
      const bool both = col + 1 < p.n;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int row = (tile / TILES_N) * 16 + owner / 4 + half * 8;
        if (row >= p.m) continue;
        float v0 = half ? sum.z : sum.x, v1 = half ? sum.w : sum.y;
        if (d.k_splits == 1) {
          epilogue_pair<EPI, OUT_KIND>(p.epilogue, batch, row, col, both, v0, v1);
          store_pair<OUT_KIND>(p.c, batch * p.stride_c + static_cast<long long>(row) * p.ldc + col,
                               v0, v1, both, paired_store);
        } else {
          // The slice's partials, packed: splitk_reduce adds them and applies the epilogue.
          const long long at = ((static_cast<long long>(blockIdx.y) * p.batch + batch) * p.m + row) *
                                   p.n + col;
          store_pair<kF32>(d.partials, at, v0, v1, both, p.n % 2 == 0);
        }
      }
    }
    __syncthreads();  // the next batch reuses warp_sums
  }
}

}  // namespace tilesmith
