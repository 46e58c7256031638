// Matmul for decode shapes (M <= 32 rows of A, B column-major: x @ W^T), sm_80+: the weight W
// (stored n x k) is read once, straight into mma.sync m16n8k16 fragments with no shared-memory
// staging, so there is no pipeline to fill. On the H100 it starts ~2 us sooner than the wgmma
// template's swap_ab and streams ~10% slower (docs/perf/matmul.md v7): it wins on small weights.
// Rows off 16 bytes, which TMA cannot read, are read in place too: the same 16 bytes of a lane
// in VEC-element loads (8, 4 or 2 bytes, or one element: the widest that divides K), one
// element at a time where a call's strides are off them.
//
// fragments from global memory: a lane's 16 bytes of a weight row (8 k) are its B fragment
//           for two k16 MMAs, read as a permutation of K: in MMA j of a 32-k chunk, lane q's
//           fragment k 2q+{0,1} is the chunk's k 8q+4j+{0,1} and its k 2q+8+{0,1} is k
//           8q+4j+2+{0,1}. The sum over K does not care in which order it adds, so A's rows are
//           loaded with the same 16-byte reads and the same permutation; no lane exchanges data.
// split of K: the CTA's warps take the 32-k chunks in turn (warp w: chunks w, w + WARPS, ...)
//             in groups of UNROLL, the next group's loads issued before the MMAs of the one in
//             hand, so every warp keeps UNROLL to 2 UNROLL x COLS / 8 x 512 bytes of W in
//             flight; the warps' partial tiles are summed through shared memory at the end.
//             Where the column blocks alone leave SMs idle, K is also split over gridDim.y CTAs
//             whose fp32 partials splitk_reduce sums (a second launch).
// epilogue: bias, activation and residual in fp32 before C's rounding (matmul_epilogue.cuh).
// launch: block WARPS x 32 threads; grid (ceil(n / COLS), k_splits, min(batch, 65535));
//         dynamic shared memory WARPS x ROWS / 16 (rounded up) x COLS / 8 x 512 bytes.
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_epilogue.cuh"
#include "matmul/matmul_params.h"
#include "matmul/matmul_row_loads.cuh"
#include "matmul/matmul_splitk.cuh"

namespace tilesmith {

// 16 bytes from global memory into registers; zeros where !valid (nothing is read). W is read
// once: `streamed` keeps it out of L1, which A's rows (read by every CTA) keep using.
template <bool STREAMED>
__device__ __forceinline__ uint4 load_16_or_zero(const half_bits* src, bool valid) {
  uint4 v;
  if (STREAMED)
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
        " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
        " @p ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(src), "r"(static_cast<int>(valid)));
  else
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
        " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
        " @p ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(src), "r"(static_cast<int>(valid)));
  return v;
}

__device__ __forceinline__ unsigned word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// The 8 elements at `src` of a row off 16 bytes, `valid` of them inside K, zeros past them:
// loads of VEC (< 8) elements where `wide` (the call's strides on them), else one at a time.
template <int VEC, int KIND>
__device__ __forceinline__ uint4 load_8_elements(const half_bits* src, int valid, bool wide) {
  static_assert(VEC < 8, "16-byte pieces: load_16_or_zero");
  constexpr int LOAD = VEC < 2 ? 2 : VEC;  // elements a call of load_columns
  unsigned words[4];
#pragma unroll
  for (int i = 0; i < 8; i += LOAD) {
    typename RowElement<KIND>::template Columns<LOAD> part;
    const int inside = max(0, min(LOAD, valid - i));
    if (VEC >= 2 && wide)
      load_columns<LOAD, true, KIND>(src + i, inside, part);
    else
      load_columns<LOAD, false, KIND>(src + i, inside, part);
#pragma unroll
    for (int w = 0; w < LOAD / 2; ++w) words[i / 2 + w] = part.words[w];
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

template <int ROWS, int COLS, int WARPS, int UNROLL, int VEC, int IN_KIND, int OUT_KIND, int EPI>
__global__ void __launch_bounds__(WARPS * 32) matmul_decode(const MatmulDecodeParams d) {
  static_assert(ROWS == 8 || ROWS == 16 || ROWS == 32, "ROWS: A's rows rounded up to 8, 16 or 32");
  static_assert(COLS % 8 == 0, "COLS: whole n8 MMA tiles");
  constexpr int HALVES = ROWS / 8;             // 8-row halves of the m16 tiles
  constexpr int TILES_M = (ROWS + 15) / 16;    // m16 tiles
  constexpr int TILES_N = COLS / 8;            // n8 tiles
  constexpr int SLOTS = TILES_M * TILES_N * 32;  // float4 accumulator slots of one warp
  extern __shared__ float4 warp_sums[];        // [WARPS][SLOTS]

  const MatmulParams& p = d.product;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = lane / 4, quad = lane % 4;
  const int col0 = blockIdx.x * COLS;
  const int chunks = (p.k + 31) / 32;
  const int first = static_cast<int>(static_cast<long long>(chunks) * blockIdx.y / d.k_splits);
  const int last = static_cast<int>(static_cast<long long>(chunks) * (blockIdx.y + 1) / d.k_splits);
  // C's column pairs go as one store where C's rows, batches and base keep them aligned.
  const bool paired_store = ((p.ldc | p.stride_c) & 1) == 0 &&
                            reinterpret_cast<unsigned long long>(p.c) % (OUT_KIND == kF32 ? 8 : 4) == 0;
  // Loads narrower than 16 bytes go one element at a time where a call's strides are off them.
  const bool wide = VEC == 8 || strides_on(p, VEC);

  for (int batch = blockIdx.z; batch < p.batch; batch += gridDim.z) {
    // This lane's weight rows (one per n8 tile) and rows of A (one per half), at its 8 k of a
    // chunk; rows past the matrix read nothing.
    const half_bits* w_row[TILES_N];
    bool w_inside[TILES_N];
#pragma unroll
    for (int t = 0; t < TILES_N; ++t) {
      const int n = col0 + t * 8 + group;
      w_inside[t] = n < p.n;
      w_row[t] = static_cast<const half_bits*>(p.b) + batch * p.stride_b +
                 static_cast<long long>(w_inside[t] ? n : 0) * p.ldb + quad * 8;
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

    // Two register buffers of UNROLL chunks: the next group's loads are issued before the
    // MMAs of the group in hand, so a warp's loads stay in flight while it multiplies (with one
    // buffer, ptxas interleaved each load with the MMA that waits on it).
    uint4 w[2][UNROLL][TILES_N], x[2][UNROLL][HALVES];
    auto load_group = [&](int buffer, int c0) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u) {
        const int c = c0 + u * WARPS;
        const long long k = static_cast<long long>(c) * 32;
        if constexpr (VEC == 8) {
          // K is a multiple of 8 (aligned problems only): a lane's 8 k are all inside or all out.
          const bool k_inside = c < last && c * 32 + quad * 8 < p.k;
#pragma unroll
          for (int t = 0; t < TILES_N; ++t)
            w[buffer][u][t] = load_16_or_zero<true>(w_row[t] + k, k_inside && w_inside[t]);
#pragma unroll
          for (int h = 0; h < HALVES; ++h)
            x[buffer][u][h] = load_16_or_zero<false>(a_row[h] + k, k_inside && a_inside[h]);
        } else {
          // The lane's 8 k of chunk c inside K.
          const int valid = c < last ? max(0, min(8, p.k - (c * 32 + quad * 8))) : 0;
#pragma unroll
          for (int t = 0; t < TILES_N; ++t)
            w[buffer][u][t] = load_8_elements<VEC, IN_KIND>(w_row[t] + k, w_inside[t] ? valid : 0, wide);
#pragma unroll
          for (int h = 0; h < HALVES; ++h)
            x[buffer][u][h] = load_8_elements<VEC, IN_KIND>(a_row[h] + k, a_inside[h] ? valid : 0, wide);
        }
      }
    };
    auto multiply_group = [&](int buffer) {
#pragma unroll
      for (int u = 0; u < UNROLL; ++u)
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int i = 0; i < TILES_M; ++i) {
            // Rows group and group + 8 of m16 tile i; an 8-row A has no second half.
            const uint4& lower = x[buffer][u][2 * i];
            const unsigned upper0 = 2 * i + 1 < HALVES ? word(x[buffer][u][2 * i + 1], 2 * j) : 0u;
            const unsigned upper1 =
                2 * i + 1 < HALVES ? word(x[buffer][u][2 * i + 1], 2 * j + 1) : 0u;
            const unsigned a[4] = {word(lower, 2 * j), upper0, word(lower, 2 * j + 1), upper1};
#pragma unroll
            for (int t = 0; t < TILES_N; ++t)
              mma_16x8x16<IN_KIND>(acc[i][t], a, word(w[buffer][u][t], 2 * j),
                                   word(w[buffer][u][t], 2 * j + 1));
          }
    };
    constexpr int kGroup = WARPS * UNROLL;  // chunks between a warp's groups
    // Started early, the CTA has set up while the previous kernel drained (16x4096x4096 in
    // graphs: 14.2 us here against 14.6 us waiting first thing).
    wait_for_previous_launch();
    load_group(0, first + warp);
    for (int c0 = first + warp; c0 < last; c0 += 2 * kGroup) {
      load_group(1, c0 + kGroup);
      multiply_group(0);
      if (c0 + kGroup >= last) break;
      load_group(0, c0 + 2 * kGroup);
      multiply_group(1);
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
