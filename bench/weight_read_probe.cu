// How fast a weight (N x K bf16, rows of K) streams from DRAM in the access shapes a row reader
// can take, with nothing else in the kernel: each kernel only loads (16 bytes a lane, L1 not
// allocated) and folds what it read into a value it never stores. The shape that decides it
// (docs/perf/matmul.md v36): how many contiguous bytes of one row a warp's load reads.
//   gemv R:       a CTA of 512 threads reads R whole rows, one row 8 KB a load of the CTA
//                 (each warp 512 contiguous bytes), n / R CTAs (matmul_gemv.cuh's access).
//   pattern C W L: a CTA of C rows and W warps splitting K (the decode template's grid); a
//                 warp's load reads 32 / L rows, L x 16 contiguous bytes of each (L = 4: 8 rows
//                 of 64 bytes, each lane its own MMA fragment; L = 8: 4 rows of whole 128-byte
//                 lines; L = 32: one row, 512 bytes); warps take the spans in turn, U in flight.
//   window C W:   a persistent grid whose CTAs take C-row groups in order, so that at any time
//                 the machine reads a contiguous window of rows (64-byte pieces as decode).
//   ring C W L S: the pattern's loads as cp.async into a ring of S spans a warp in shared
//                 memory: the bytes in flight are not bounded by the registers that hold them.
//   lockstep C W B S T: a CTA of C rows and W warps takes K in spans of B bytes a row, all its
//                 threads on one span at a time: the span (C rows of B bytes, and as many of a
//                 16-row A read from L2 where T says so) lands in a ring of S stages, by cp.async
//                 from every thread or by one thread's bulk copies (TMA, a row's B bytes each)
//                 completing on an mbarrier.
//   rotated W [xpose]: as pattern 16c W 512B, but lane L's load i reads row (i + L / 4) & 7 of
//                 its group of 8: each load 8 rows of 64 bytes, every 8 loads their 512 bytes
//                 (the pieces a decode MMA wants, in whole-row order); xpose: then handed out
//                 as MMA fragments by shuffles and a rotation (session 49; measured in v73).
//   decode rows W: a whole M = 16 decode product on those loads and fragments (16 MMAs a group
//                 of 8 rows a span, A from L1/L2, the warps' sums through shared memory),
//                 checked against an fp32 loop on random inputs first (session 49; v73).
//   decode window C W U [-parts]: a whole M = 16 product on window's access, A's fragments
//                 from L1, the warps' sums once a group; parts taken away to time the rest
//                 (session 50: 1.8-2.0x the floor, A's loads alone 5 us of it: v73).
//   bulk rows C CHUNK S W: a CTA of C rows takes K in chunks of CHUNK bytes a row, one bulk
//                 copy a row's chunk from a producer warp into rows padded by 16 bytes, read by
//                 W warps with ldmatrix, stage by stage on full and empty barriers (no CTA-wide
//                 barrier): whole rows in flight without registers (v71; on the H200 1.24x
//                 the floor at 4096x4096 as graphs, slower than the rings: v72).
// "single": medians of 20 launches after 5, each after a 256 MB memset (L2 holds nothing of
// the weight), events around the launch; "x floor" is against the weight's bytes at the rate
// of a plain copy kernel timed the same way (its launch included, so the ratios compare the
// shapes, not the absolute rate: bench/read_floor.py times the floor against torch's copy).
// "graph": a CUDA graph of calls over rotating copies of the weight (256 MB pass between two
// reads of one copy: each call reads cold), median replay over its calls, against the
// weight's bytes at a 1 GB copy's rate (the serving loop's timing, as the suite's M <= 16).
// What it showed on the H200 (graphs, the carve-out, the rings): docs/perf/matmul.md v67.
//   build/weight_read_probe --graph   times the graphs only.
// Needs no tilesmith build:
//   nvcc -O3 -arch=sm_90a -cudart static -o build/weight_read_probe bench/weight_read_probe.cu
//   build/weight_read_probe            (on the GPU machine, carrying build/)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "probe_common.cuh"

__device__ __forceinline__ uint4 load_streamed(const unsigned short* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }
// Never true for the memset weight; keeps the loads alive.
__device__ __forceinline__ void keep(unsigned acc, unsigned* out) {
  if (acc == 0x12345678u) out[0] = acc;
}

template <int R>
__global__ void __launch_bounds__(512) gemv(const unsigned short* w, int k, unsigned* out) {
  unsigned acc = 0;
  const long long row0 = static_cast<long long>(blockIdx.x) * R;
  for (int k0 = threadIdx.x * 8; k0 < k; k0 += 512 * 8) {
    uint4 v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] = load_streamed(w + (row0 + r) * k + k0);
#pragma unroll
    for (int r = 0; r < R; ++r) acc ^= fold(v[r]);
  }
  keep(acc, out);
}

template <int COLS, int WARPS, int LANES, int U>
__global__ void __launch_bounds__(WARPS * 32)
    pattern(const unsigned short* w, int k, unsigned* out) {
  constexpr int ROWS_A_LOAD = 32 / LANES, SPAN = LANES * 8, LOADS = COLS / ROWS_A_LOAD;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long row0 = static_cast<long long>(blockIdx.x) * COLS + lane / LANES;
  const int unit = lane % LANES, spans = k / SPAN;
  unsigned acc = 0;
  for (int s0 = warp; s0 < spans; s0 += U * WARPS) {
    uint4 v[U][LOADS];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int i = 0; i < LOADS; ++i) {
        const int s = s0 + u * WARPS;
        v[u][i] = s < spans ? load_streamed(w + (row0 + i * ROWS_A_LOAD) * k + s * SPAN + unit * 8)
                            : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int i = 0; i < LOADS; ++i) acc ^= fold(v[u][i]);
  }
  keep(acc, out);
}

// Lane L's load i of a warp's 512-byte span reads row 8 (i / 8) + ((i + L / 4) & 7) of the
// CTA's 16, its 16 bytes (chunk L): each load 8 rows of 64 bytes, every 8 loads those rows' 512.
__device__ __forceinline__ void load_rotated(uint4 (&v)[16], const unsigned short* w,
                                             long long row0, int k, int span, int lane) {
#pragma unroll
  for (int i = 0; i < 16; ++i)
    v[i] = load_streamed(w + (row0 + (i & 8) + ((i + lane / 4) & 7)) * k + span * 256 + lane * 8);
}

// The 8 rows of v[g8..g8 + 7] (loaded rotated) handed out as MMA fragments: lane (g, c) =
// (lane / 4, lane % 4) gets row g8 + g's chunks 4s + c as d[s] (s = 0..7: the same k in every
// lane). 8 rounds of 4 shuffles, every lane offering one register a round (v[g8 + ((8 - i) & 7)]
// holds row g for the reader 4 ((i + g) & 7) + c), then a rotation by g (3 x 32 selects).
__device__ __forceinline__ void rotated_to_fragments(unsigned (&d)[8][4], const uint4 (&v)[16],
                                                     int g8, int lane) {
  const int quad = lane / 4, c = lane % 4;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int from = 4 * ((i + quad) & 7) + c;
    const uint4 x = v[g8 + ((8 - i) & 7)];
    d[i][0] = __shfl_sync(~0u, x.x, from);
    d[i][1] = __shfl_sync(~0u, x.y, from);
    d[i][2] = __shfl_sync(~0u, x.z, from);
    d[i][3] = __shfl_sync(~0u, x.w, from);
  }
#pragma unroll
  for (int e = 0; e < 4; ++e)
#pragma unroll
    for (int b = 1; b < 8; b *= 2) {
      unsigned t[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) t[j] = (quad & b) ? d[(j - b) & 7][e] : d[j][e];
#pragma unroll
      for (int j = 0; j < 8; ++j) d[j][e] = t[j];
    }
}

// The rotated loads alone (folded), or with XPOSE handed out as fragments too (folded in order).
template <int WARPS, bool XPOSE>
__global__ void __launch_bounds__(WARPS * 32, 1)
    rotated(const unsigned short* w, int k, unsigned* out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, spans = k / 256;
  const long long row0 = static_cast<long long>(blockIdx.x) * 16;
  unsigned acc = 0;
  for (int s = warp; s < spans; s += WARPS) {
    uint4 v[16];
    load_rotated(v, w, row0, k, s, lane);
    if constexpr (XPOSE) {
#pragma unroll
      for (int g8 = 0; g8 < 16; g8 += 8) {
        unsigned d[8][4];
        rotated_to_fragments(d, v, g8, lane);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc = acc * 3u + (d[j][0] ^ d[j][1] ^ d[j][2] ^ d[j][3]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i) acc ^= fold(v[i]);
    }
  }
  keep(acc, out);
}

__device__ __forceinline__ void mma_16816(float (&acc)[4], unsigned a0, unsigned a1, unsigned a2,
                                          unsigned a3, unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// A whole decode product on the rotated loads: C (16 x n, fp32) = A (16 x k) W^T, a CTA of 16
// rows of W and WARPS warps, each a 512-byte span at a time; per span and group of 8 rows, 16
// MMAs m16n8k16 over the fragments (slot 2c + j of MMA (s, h) is k 32s + 8c + 4h + j, + 2 for
// slot 2c + 8 + j: lane (g, c) reads A[g][32s + 8c..+7] once for both h), then the warps' sums
// added through shared memory. K a multiple of 256, n of 16: a probe, not the template.
template <int WARPS>
__global__ void __launch_bounds__(WARPS * 32, 1)
    decode_rows(const unsigned short* w, const unsigned short* a, int n, int k, float* c_out) {
  __shared__ float sums[WARPS][16][16];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, spans = k / 256;
  const int g = lane / 4, c = lane % 4;
  const long long row0 = static_cast<long long>(blockIdx.x) * 16;
  float acc[2][4] = {};
  for (int s = warp; s < spans; s += WARPS) {
    uint4 v[16];
    load_rotated(v, w, row0, k, s, lane);
#pragma unroll
    for (int group = 0; group < 2; ++group) {  // one group's fragments live at a time
      unsigned d[8][4];
      rotated_to_fragments(d, v, 8 * group, lane);
#pragma unroll
      for (int q = 0; q < 8; ++q) {  // A's rows g and g + 8 (the second group's from L1)
        const int kk = s * 256 + 32 * q + 8 * c;
        const uint4 lo = *reinterpret_cast<const uint4*>(a + static_cast<long long>(g) * k + kk);
        const uint4 hi =
            *reinterpret_cast<const uint4*>(a + static_cast<long long>(g + 8) * k + kk);
        mma_16816(acc[group], lo.x, hi.x, lo.y, hi.y, d[q][0], d[q][1]);
        mma_16816(acc[group], lo.z, hi.z, lo.w, hi.w, d[q][2], d[q][3]);
      }
    }
  }
#pragma unroll
  for (int group = 0; group < 2; ++group) {  // C[token][row]: acc = (g, 2c..), (g + 8, 2c..)
    sums[warp][g][8 * group + 2 * c] = acc[group][0];
    sums[warp][g][8 * group + 2 * c + 1] = acc[group][1];
    sums[warp][g + 8][8 * group + 2 * c] = acc[group][2];
    sums[warp][g + 8][8 * group + 2 * c + 1] = acc[group][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += WARPS * 32) {
    float total = 0;
    for (int j = 0; j < WARPS; ++j) total += sums[j][i / 16][i % 16];
    if (row0 + i % 16 < n) c_out[static_cast<long long>(i / 16) * n + row0 + i % 16] = total;
  }
}

// A whole decode product on window's access (v33: 1.20x the floor as graphs alone): a persistent
// grid whose CTAs take groups of COLS rows of W in order, each warp the same U chunks of 32 k
// of every group (chunk warp + WARPS u, and further rounds past U WARPS chunks), each lane's
// 16 bytes its own B fragment for two MMAs (the decode template's permutation of k: no data
// exchanged), A's fragments from L1. The next step's loads are issued before the MMAs of the
// one in hand (two register sets, unrolled by two), so a CTA keeps one to two steps of W in
// flight; the warps' sums meet in shared memory once a group (one CTA barrier). K a multiple
// of 32, n of COLS: a probe, not the template. CUT takes parts away to time the rest (wrong
// results): 1 A's loads (W's fragments stand in), 2 the warps' sums (once at the end), 4 the
// MMAs (the loads folded).
template <int COLS, int WARPS, int U, int CUT = 0>
__global__ void __launch_bounds__(WARPS * 32, 16 / WARPS)
    decode_window(const unsigned short* w, const unsigned short* a, int n, int k, float* c_out) {
  constexpr int T = COLS / 8;
  __shared__ float sums[2][WARPS][T][128];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, q = lane % 4;
  const int chunks = k / 32, rounds = (chunks + U * WARPS - 1) / (U * WARPS);
  const int groups = n / COLS;
  const int mine = groups > static_cast<int>(blockIdx.x)
                       ? (groups - 1 - static_cast<int>(blockIdx.x)) / gridDim.x + 1
                       : 0;
  const int steps = mine * rounds;
  auto load = [&](int step, uint4 (&v)[U][T]) {
    const int group = blockIdx.x + (step / rounds) * gridDim.x, round = step % rounds;
    const long long row = static_cast<long long>(group) * COLS + g;
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int t = 0; t < T; ++t) {
        const int c = (round * U + u) * WARPS + warp;
        v[u][t] = c < chunks ? load_streamed(w + (row + 8 * t) * k + c * 32 + q * 8)
                             : make_uint4(0, 0, 0, 0);
      }
  };
  float acc[T][4] = {};
  int parity = 0;
  auto multiply = [&](int step, const uint4 (&v)[U][T]) {
    const int group = blockIdx.x + (step / rounds) * gridDim.x, round = step % rounds;
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int c = (round * U + u) * WARPS + warp;
      if (c < chunks) {
        uint4 lo = v[u][0], hi = v[u][T - 1];
        if (!(CUT & 1)) {
          lo = *reinterpret_cast<const uint4*>(a + static_cast<long long>(g) * k + c * 32 + q * 8);
          hi = *reinterpret_cast<const uint4*>(a + static_cast<long long>(g + 8) * k + c * 32 +
                                               q * 8);
        }
#pragma unroll
        for (int t = 0; t < T; ++t) {
          if (CUT & 4) {
            acc[t][0] += __uint_as_float(fold(v[u][t]) ^ lo.x ^ hi.y);
          } else {
            mma_16816(acc[t], lo.x, hi.x, lo.y, hi.y, v[u][t].x, v[u][t].y);
            mma_16816(acc[t], lo.z, hi.z, lo.w, hi.w, v[u][t].z, v[u][t].w);
          }
        }
      }
    }
    if (round != rounds - 1) return;
    if ((CUT & 2) && step + rounds < steps) return;
#pragma unroll
    for (int t = 0; t < T; ++t) {  // C[token][row]: (g, 2q..), (g + 8, 2q..)
      sums[parity][warp][t][g * 8 + 2 * q] = acc[t][0];
      sums[parity][warp][t][g * 8 + 2 * q + 1] = acc[t][1];
      sums[parity][warp][t][(g + 8) * 8 + 2 * q] = acc[t][2];
      sums[parity][warp][t][(g + 8) * 8 + 2 * q + 1] = acc[t][3];
      acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < T * 128; i += WARPS * 32) {
      const int t = i / 128, e = i % 128;
      float total = 0;
#pragma unroll
      for (int j = 0; j < WARPS; ++j) total += sums[parity][j][t][e];
      c_out[static_cast<long long>(e / 8) * n + group * COLS + t * 8 + e % 8] = total;
    }
    parity ^= 1;
  };
  uint4 even[U][T], odd[U][T];
  if (steps > 0) load(0, even);
  for (int step = 0; step < steps; step += 2) {
    if (step + 1 < steps) load(step + 1, odd);
    multiply(step, even);
    if (step + 1 >= steps) break;
    if (step + 2 < steps) load(step + 2, even);
    multiply(step + 1, odd);
  }
}

// decode_rows' reference: C[t][r] = sum over k of A[t][k] W[r][k], one thread each, in fp32.
__global__ void decode_reference(const unsigned short* w, const unsigned short* a, int n, int k,
                                 float* c_out) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= 16ll * n) return;
  const int t = static_cast<int>(i / n), r = static_cast<int>(i % n);
  float total = 0;
  for (int j = 0; j < k; ++j)
    total += __uint_as_float(static_cast<unsigned>(a[static_cast<long long>(t) * k + j]) << 16) *
             __uint_as_float(static_cast<unsigned>(w[static_cast<long long>(r) * k + j]) << 16);
  c_out[i] = total;
}

// Values in [-1, 1) as bf16 from a hash of the index (fresh for each seed).
__global__ void fill_bf16(unsigned short* x, long long count, unsigned seed) {
  for (long long i = blockIdx.x * 256ll + threadIdx.x; i < count; i += 256ll * gridDim.x) {
    unsigned h = static_cast<unsigned>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    const float value = static_cast<float>(h >> 8) / 8388608.0f - 1.0f;
    x[i] = static_cast<unsigned short>(__float_as_uint(value) >> 16);
  }
}

template <int COLS, int WARPS, int U>
__global__ void __launch_bounds__(WARPS * 32)
    window(const unsigned short* w, int n, int k, unsigned* out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, chunks = k / 32;
  unsigned acc = 0;
  for (int g = blockIdx.x; g < n / COLS; g += gridDim.x) {
    const long long row0 = static_cast<long long>(g) * COLS + lane / 4;
    for (int c0 = warp; c0 < chunks; c0 += U * WARPS) {
      uint4 v[U][COLS / 8];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int t = 0; t < COLS / 8; ++t) {
          const int c = c0 + u * WARPS;
          v[u][t] = c < chunks ? load_streamed(w + (row0 + t * 8) * k + c * 32 + (lane % 4) * 8)
                               : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int t = 0; t < COLS / 8; ++t) acc ^= fold(v[u][t]);
    }
  }
  keep(acc, out);
}

__device__ __forceinline__ void copy_16_async(void* to, const void* from) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(from));
}

template <int COLS, int WARPS, int LANES, int S>
__global__ void __launch_bounds__(WARPS * 32) ring(const unsigned short* w, int k, unsigned* out) {
  constexpr int ROWS_A_LOAD = 32 / LANES, SPAN = LANES * 8, LOADS = COLS / ROWS_A_LOAD;
  extern __shared__ uint4 slots[];  // [WARPS][S][LOADS][32]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint4* const mine = slots + warp * S * LOADS * 32;
  const long long row0 = static_cast<long long>(blockIdx.x) * COLS + lane / LANES;
  const int unit = lane % LANES, spans = k / SPAN;
  auto issue = [&](int i) {
    const int s = warp + i * WARPS;
    if (s < spans)
#pragma unroll
      for (int l = 0; l < LOADS; ++l)
        copy_16_async(mine + ((i % S) * LOADS + l) * 32 + lane,
                      w + (row0 + l * ROWS_A_LOAD) * k + s * SPAN + unit * 8);
    asm volatile("cp.async.commit_group;");
  };
  unsigned acc = 0;
  for (int i = 0; i < S - 1; ++i) issue(i);
  for (int i = 0; warp + i * WARPS < spans; ++i) {
    issue(i + S - 1);
    asm volatile("cp.async.wait_group %0;" ::"n"(S - 1));
#pragma unroll
    for (int l = 0; l < LOADS; ++l) acc ^= fold(mine[((i % S) * LOADS + l) * 32 + lane]);
    __syncwarp();
  }
  keep(acc, out);
}

__device__ __forceinline__ void bulk_copy(void* to, const void* from, unsigned bytes,
                                          unsigned long long* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(static_cast<unsigned>(__cvta_generic_to_shared(to))),
      "l"(from), "r"(bytes), "r"(static_cast<unsigned>(__cvta_generic_to_shared(bar)))
      : "memory");
}
__device__ __forceinline__ void expect_bytes(unsigned long long* bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(
                   static_cast<unsigned>(__cvta_generic_to_shared(bar))),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void wait_phase(unsigned long long* bar, unsigned parity) {
  asm volatile(
      "{\n .reg .pred done;\n wait:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait;\n}\n" ::"r"(static_cast<unsigned>(__cvta_generic_to_shared(bar))),
      "r"(parity)
      : "memory");
}

// TAKE_A: 0 the weight alone, 1 also 16 rows of A (`a`, K wide, read from L2) a span.
// BULK: 0 cp.async from every thread, 1 one thread's bulk copies on an mbarrier a stage.
template <int COLS, int WARPS, int BYTES, int S, int TAKE_A, int BULK>
__global__ void __launch_bounds__(WARPS * 32)
    lockstep(const unsigned short* w, const unsigned short* a, int k, unsigned* out) {
  constexpr int ROWS = COLS + 16 * TAKE_A, STAGE = ROWS * BYTES / 16;  // 16-byte units a stage
  constexpr int THREADS = WARPS * 32;
  extern __shared__ uint4 stages[];  // [S][ROWS][BYTES / 16]
  __shared__ unsigned long long full[S];
  const long long row0 = static_cast<long long>(blockIdx.x) * COLS;
  const int spans = k * 2 / BYTES;
  if (BULK && threadIdx.x == 0) {
    for (int s = 0; s < S; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(
          static_cast<unsigned>(__cvta_generic_to_shared(&full[s]))));
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  auto issue = [&](int i) {
    if (i < spans) {
      uint4* stage = stages + (i % S) * STAGE;
      const long long k0 = static_cast<long long>(i) * BYTES / 2;
      if (BULK) {
        if (threadIdx.x == 0) {
          expect_bytes(&full[i % S], ROWS * BYTES);
          for (int r = 0; r < ROWS; ++r)
            bulk_copy(stage + r * (BYTES / 16),
                      r < COLS ? w + (row0 + r) * k + k0
                               : a + (r - COLS) * static_cast<long long>(k) + k0,
                      BYTES, &full[i % S]);
        }
      } else {
        for (int u = threadIdx.x; u < STAGE; u += THREADS) {
          const int r = u / (BYTES / 16), e = (u % (BYTES / 16)) * 8;
          copy_16_async(stage + u, r < COLS ? w + (row0 + r) * k + k0 + e
                                            : a + (r - COLS) * static_cast<long long>(k) + k0 + e);
        }
      }
    }
    if (!BULK) asm volatile("cp.async.commit_group;");
  };
  unsigned acc = 0;
  for (int i = 0; i < S - 1; ++i) issue(i);
  for (int i = 0; i < spans; ++i) {
    issue(i + S - 1);
    if (BULK)
      wait_phase(&full[i % S], (i / S) & 1);
    else
      asm volatile("cp.async.wait_group %0;" ::"n"(S - 1));
    __syncthreads();
    const uint4* stage = stages + (i % S) * STAGE;
    for (int u = threadIdx.x; u < STAGE; u += THREADS) acc ^= fold(stage[u]);
    __syncthreads();
  }
  keep(acc, out);
}

// Whole rows by 1D bulk copies: a CTA of COLS rows takes K in chunks of CHUNK
// bytes a row; one producer thread (its own warp) issues a stage's COLS bulk copies, a row's
// CHUNK bytes each, into rows padded by 16 bytes (so ldmatrix's 8 rows fall in 8 bank groups),
// completing on the stage's full barrier; WARPS consumer warps read the stage with ldmatrix and
// arrive on its empty barrier, which the producer waits on before refilling it. No CTA-wide
// barrier between stages: the decode kernel's fragments from whole rows in flight.
template <int COLS, int CHUNK, int S, int WARPS>
__global__ void __launch_bounds__((WARPS + 1) * 32)
    bulk_rows(const unsigned short* w, int k, unsigned* out) {
  constexpr int ROW = CHUNK + 16, STAGE = COLS * ROW;  // bytes
  static_assert(COLS == 16 && CHUNK % 32 == 0, "16 rows: two 8-row halves of an x4 load");
  extern __shared__ __align__(128) unsigned char rows[];  // [S][COLS][ROW]
  __shared__ unsigned long long full[S], empty[S];
  const long long row0 = static_cast<long long>(blockIdx.x) * COLS;
  const int chunks = k * 2 / CHUNK, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(
          static_cast<unsigned>(__cvta_generic_to_shared(&full[s]))));
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(
                       static_cast<unsigned>(__cvta_generic_to_shared(&empty[s]))),
                   "r"(WARPS));
    }
    asm volatile("fence.mbarrier_init.release.cluster;");
  }
  __syncthreads();
  unsigned acc = 0;
  if (warp == WARPS) {
    if (lane == 0)
      for (int i = 0; i < chunks; ++i) {
        const int s = i % S;
        if (i >= S) wait_phase(&empty[s], (i / S - 1) & 1);
        expect_bytes(&full[s], COLS * CHUNK);
        for (int r = 0; r < COLS; ++r)
          bulk_copy(rows + s * STAGE + r * ROW,
                    w + (row0 + r) * k + static_cast<long long>(i) * CHUNK / 2, CHUNK, &full[s]);
      }
  } else {
    for (int i = 0; i < chunks; ++i) {
      const int s = i % S;
      wait_phase(&full[s], (i / S) & 1);
      // Lanes 0-15 address rows 0-15 of 16-byte column u, lanes 16-31 those of column u + 1.
      for (int u = warp * 2; u < CHUNK / 16; u += WARPS * 2) {
        const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(
            rows + s * STAGE + (lane % 16) * ROW + (u + lane / 16) * 16));
        unsigned x0, x1, x2, x3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                     : "r"(at));
        acc ^= x0 ^ x1 ^ x2 ^ x3;
      }
      __syncwarp();
      if (lane == 0)
        asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(
                         static_cast<unsigned>(__cvta_generic_to_shared(&empty[s])))
                     : "memory");
    }
  }
  keep(acc, out);
}

__global__ void copy(const uint4* from, uint4* to, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    to[i] = from[i];
}

template <int COLS, int WARPS, int LANES, int S>
cudaError_t ring_smem() {
  return cudaFuncSetAttribute(ring<COLS, WARPS, LANES, S>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              WARPS * S * COLS * LANES * 16);
}

template <int COLS, int CHUNK, int S, int WARPS>
cudaError_t bulk_rows_smem() {
  return cudaFuncSetAttribute(bulk_rows<COLS, CHUNK, S, WARPS>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize, S * COLS * (CHUNK + 16));
}

template <int COLS, int WARPS, int BYTES, int S, int TAKE_A, int BULK>
cudaError_t lockstep_smem() {
  return cudaFuncSetAttribute(lockstep<COLS, WARPS, BYTES, S, TAKE_A, BULK>,
                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                              S * (COLS + 16 * TAKE_A) * BYTES);
}

int main(int argc, char** argv) {
  // --graph: only the graph timing (the serving loop's); default: both.
  const bool graph_only = argc > 1 && std::string(argv[1]) == "--graph";
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t flush_bytes = 256ull << 20;
  char* flush = nullptr;
  unsigned* out = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMalloc(&out, 64));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK((ring_smem<16, 8, 8, 2>()));
  CHECK((ring_smem<16, 8, 8, 4>()));
  CHECK((ring_smem<16, 8, 8, 8>()));
  CHECK((ring_smem<16, 4, 8, 8>()));
  CHECK((ring_smem<16, 8, 16, 4>()));
  CHECK((ring_smem<16, 16, 8, 4>()));
  // Shared memory a kernel asks for and leaves unused: what the carve-out takes from L1 costs
  // the loads in flight?
  CHECK(cudaFuncSetAttribute(pattern<16, 16, 32, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             200 << 10));
  CHECK(cudaFuncSetAttribute(pattern<16, 8, 8, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             200 << 10));
  CHECK((lockstep_smem<16, 16, 512, 3, 0, 0>()));
  CHECK((lockstep_smem<16, 16, 512, 3, 0, 1>()));
  CHECK((lockstep_smem<16, 16, 512, 3, 1, 0>()));
  CHECK((lockstep_smem<16, 16, 512, 3, 1, 1>()));
  CHECK((lockstep_smem<16, 8, 512, 4, 1, 1>()));
  CHECK((lockstep_smem<16, 8, 256, 4, 1, 0>()));
  CHECK((lockstep_smem<16, 8, 256, 4, 1, 1>()));
  CHECK((lockstep_smem<16, 8, 1024, 3, 1, 1>()));
  CHECK((lockstep_smem<32, 8, 512, 3, 1, 1>()));
  CHECK((bulk_rows_smem<16, 2048, 3, 8>()));
  CHECK((bulk_rows_smem<16, 2048, 2, 8>()));
  CHECK((bulk_rows_smem<16, 1024, 4, 8>()));
  CHECK((bulk_rows_smem<16, 1024, 6, 4>()));
  CHECK((bulk_rows_smem<16, 4096, 2, 8>()));
  CHECK((bulk_rows_smem<16, 512, 8, 8>()));
  unsigned short* a16 = nullptr;  // A's 16 rows of the widest K (L2-resident after the first read)
  CHECK(cudaMalloc(&a16, 16 * 14336 * 2));
  CHECK(cudaMemset(a16, 1, 16 * 14336 * 2));
  float *c_ts = nullptr, *c_ref = nullptr;  // decode_rows' C (16 x n) and its reference
  CHECK(cudaMalloc(&c_ts, 16 * 14336 * sizeof(float)));
  CHECK(cudaMalloc(&c_ref, 16 * 14336 * sizeof(float)));

  // The copy rate of a 1 GB copy kernel, timed as a graph of one launch (the graphs' floor).
  double copy_gbs = 0;
  {
    const size_t big = 1ull << 30;
    uint4 *from = nullptr, *to = nullptr;
    CHECK(cudaMalloc(&from, big));
    CHECK(cudaMalloc(&to, big));
    CHECK(cudaMemset(from, 1, big));
    std::vector<float> times;
    for (int i = 0; i < 8; ++i) {
      CHECK(cudaEventRecord(start, stream));
      copy<<<sms * 8, 512, 0, stream>>>(from, to, big / 16);
      CHECK(cudaEventRecord(stop, stream));
      CHECK(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (i >= 2) times.push_back(ms);
    }
    std::sort(times.begin(), times.end());
    copy_gbs = 2.0 * big / (times[times.size() / 2] * 1e6);
    printf("copy of 1 GB: %.0f GB/s\n", copy_gbs);
    CHECK(cudaFree(from));
    CHECK(cudaFree(to));
  }

  struct Shape {
    int n, k;
  };
  for (const Shape shape : {Shape{4096, 4096}, Shape{14336, 4096}, Shape{4096, 14336}}) {
    const int n = shape.n, k = shape.k;
    const size_t bytes = static_cast<size_t>(n) * k * 2;
    // Rotating copies for the graphs: 256 MB between two reads of one copy.
    const int sets = static_cast<int>((256ull << 20) / bytes) + 2, calls = 2 * sets;
    std::vector<unsigned short*> ws(sets);
    for (auto& w : ws) {
      CHECK(cudaMalloc(&w, bytes));
      CHECK(cudaMemset(w, 1, bytes));
    }
    unsigned short* const w = ws[0];
    uint4* copied = nullptr;
    CHECK(cudaMalloc(&copied, bytes));
    cudaError_t failed = cudaSuccess;
    auto median_us = [&](auto launch) {
      std::vector<float> times;
      for (int i = 0; i < 25 && failed == cudaSuccess; ++i) {
        cudaMemsetAsync(flush, i, flush_bytes, stream);
        cudaEventRecord(start, stream);
        launch(w);
        cudaEventRecord(stop, stream);
        failed = cudaEventSynchronize(stop);
        if (failed == cudaSuccess) failed = cudaGetLastError();
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        if (i >= 5) times.push_back(ms * 1000);
      }
      if (times.empty()) return 0.f;
      std::sort(times.begin(), times.end());
      return times[times.size() / 2];
    };
    auto graph_us = [&](auto launch) {
      cudaGraph_t graph = nullptr;
      cudaGraphExec_t exec = nullptr;
      if (failed == cudaSuccess)
        failed = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
      if (failed != cudaSuccess) return 0.f;
      for (int c = 0; c < calls; ++c) launch(ws[c % sets]);
      failed = cudaStreamEndCapture(stream, &graph);
      if (failed == cudaSuccess) failed = cudaGraphInstantiate(&exec, graph, 0);
      std::vector<float> times;
      for (int i = 0; i < 13 && failed == cudaSuccess; ++i) {
        cudaEventRecord(start, stream);
        cudaGraphLaunch(exec, stream);
        cudaEventRecord(stop, stream);
        failed = cudaEventSynchronize(stop);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        if (i >= 3) times.push_back(ms * 1000 / calls);
      }
      if (exec) cudaGraphExecDestroy(exec);
      if (graph) cudaGraphDestroy(graph);
      if (times.empty()) return 0.f;
      std::sort(times.begin(), times.end());
      return times[times.size() / 2];
    };
    const float copy_us = median_us([&](const unsigned short* from) {
      copy<<<sms * 8, 512, 0, stream>>>(reinterpret_cast<const uint4*>(from), copied, bytes / 16);
    });
    const double floor_us = copy_us / 2;  // the weight's bytes once, at the copy's rate
    const double graph_floor_us = bytes / (copy_gbs * 1e3);
    printf(
        "\nweight %dx%d (%.1f MB): copy %.1f us (%.0f GB/s); read floor %.2f us single, %.2f us "
        "graph (%d calls over %d copies)\n",
        n, k, bytes / 1e6, copy_us, 2.0 * bytes / copy_us / 1e3, floor_us, graph_floor_us, calls,
        sets);
    auto report = [&](const char* name, auto launch) {
      const float single = graph_only ? 0.f : median_us(launch), graph = graph_us(launch);
      printf("  %-28s single %7.2f us x floor %.2f | graph %7.2f us x floor %.2f\n", name, single,
             single / floor_us, graph, graph / graph_floor_us);
    };
    using W = const unsigned short*;
    report("gemv 2 rows", [&](W x) { gemv<2><<<n / 2, 512, 0, stream>>>(x, k, out); });
    report("gemv 16 rows", [&](W x) { gemv<16><<<n / 16, 512, 0, stream>>>(x, k, out); });
    report("pattern 16c 8w 64B U2",
           [&](W x) { pattern<16, 8, 4, 2><<<n / 16, 256, 0, stream>>>(x, k, out); });
    report("pattern 16c 8w 128B U1",
           [&](W x) { pattern<16, 8, 8, 1><<<n / 16, 256, 0, stream>>>(x, k, out); });
    report("pattern 16c 8w 128B U2",
           [&](W x) { pattern<16, 8, 8, 2><<<n / 16, 256, 0, stream>>>(x, k, out); });
    report("pattern 16c 8w 256B U2",
           [&](W x) { pattern<16, 8, 16, 2><<<n / 16, 256, 0, stream>>>(x, k, out); });
    report("pattern 16c 8w 512B U1",
           [&](W x) { pattern<16, 8, 32, 1><<<n / 16, 256, 0, stream>>>(x, k, out); });
    report("pattern 16c 16w 512B U1",
           [&](W x) { pattern<16, 16, 32, 1><<<n / 16, 512, 0, stream>>>(x, k, out); });
    report("rotated 16c 16w 512B",
           [&](W x) { rotated<16, false><<<n / 16, 512, 0, stream>>>(x, k, out); });
    report("rotated 16c 16w 512B xpose",
           [&](W x) { rotated<16, true><<<n / 16, 512, 0, stream>>>(x, k, out); });
    report("rotated 16c 8w 512B xpose",
           [&](W x) { rotated<8, true><<<n / 16, 256, 0, stream>>>(x, k, out); });
    const char* const decode_names[] = {
        "decode rows 16c 16w",      "decode rows 16c 8w",      "decode window 8c 16w U8",
        "decode window 8c 8w U8 x2", "decode window 16c 16w U4", "window 8c 16w U8 -A",
        "window 8c 16w U8 -sums",   "window 8c 16w U8 -A -sums", "window 8c 16w U8 -A -mma",
        "window 8c 16w U8 -all"};
    constexpr int checked_variants = 5;
    auto launch_decode = [&](int variant, W x) {
      if (variant == 0) decode_rows<16><<<n / 16, 512, 0, stream>>>(x, a16, n, k, c_ts);
      if (variant == 1) decode_rows<8><<<n / 16, 256, 0, stream>>>(x, a16, n, k, c_ts);
      if (variant == 2) decode_window<8, 16, 8><<<sms, 512, 0, stream>>>(x, a16, n, k, c_ts);
      if (variant == 3) decode_window<8, 8, 8><<<2 * sms, 256, 0, stream>>>(x, a16, n, k, c_ts);
      if (variant == 4) decode_window<16, 16, 4><<<sms, 512, 0, stream>>>(x, a16, n, k, c_ts);
      if (variant == 5) decode_window<8, 16, 8, 1><<<sms, 512, 0, stream>>>(x, a16, n, k, c_ts);
      if (variant == 6) decode_window<8, 16, 8, 2><<<sms, 512, 0, stream>>>(x, a16, n, k, c_ts);
      if (variant == 7) decode_window<8, 16, 8, 3><<<sms, 512, 0, stream>>>(x, a16, n, k, c_ts);
      if (variant == 8) decode_window<8, 16, 8, 5><<<sms, 512, 0, stream>>>(x, a16, n, k, c_ts);
      if (variant == 9) decode_window<8, 16, 8, 7><<<sms, 512, 0, stream>>>(x, a16, n, k, c_ts);
    };
    {
      // A whole decode product on them, checked against a plain fp32 loop on random inputs
      // (the other copies keep their memset bytes: only the timing reads them).
      fill_bf16<<<1024, 256, 0, stream>>>(w, static_cast<long long>(n) * k, 4901u + n + k);
      fill_bf16<<<64, 256, 0, stream>>>(a16, 16ll * k, 4902u + k);
      const int reference_blocks = (16 * n + 255) / 256;
      decode_reference<<<reference_blocks, 256, 0, stream>>>(w, a16, n, k, c_ref);
      for (int variant = 0; variant < checked_variants; ++variant) {
        CHECK(cudaMemsetAsync(c_ts, 0xff, 16ull * n * sizeof(float), stream));  // NaN
        launch_decode(variant, w);
        CHECK(cudaStreamSynchronize(stream));
        CHECK(cudaGetLastError());
        std::vector<float> got(16ull * n), want(16ull * n);
        CHECK(cudaMemcpy(got.data(), c_ts, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(want.data(), c_ref, want.size() * sizeof(float), cudaMemcpyDeviceToHost));
        double worst = 0, scale = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
          const double diff = std::fabs(static_cast<double>(got[i]) - want[i]);
          worst = std::isnan(got[i]) ? INFINITY : std::max(worst, diff);
        }
        printf("  %s: max error %.2e of %.2e (%s)\n", decode_names[variant], worst, scale,
               worst <= 1e-3 * scale ? "ok" : "WRONG");
      }
    }
    for (int variant = 0; variant < 10; ++variant)
      report(decode_names[variant], [&](W x) { launch_decode(variant, x); });
    report("pattern 8c 8w 512B U2",
           [&](W x) { pattern<8, 8, 32, 2><<<n / 8, 256, 0, stream>>>(x, k, out); });
    report("pattern 32c 8w 128B U2",
           [&](W x) { pattern<32, 8, 8, 2><<<n / 32, 256, 0, stream>>>(x, k, out); });
    report("window 8c 16w 64B U8",
           [&](W x) { window<8, 16, 8><<<sms, 512, 0, stream>>>(x, n, k, out); });
    report("window 16c 8w 64B U4 x2",
           [&](W x) { window<16, 8, 4><<<2 * sms, 256, 0, stream>>>(x, n, k, out); });
    report("ring 16c 8w 128B S2",
           [&](W x) { ring<16, 8, 8, 2><<<n / 16, 256, 8 * 2 * 16 * 128, stream>>>(x, k, out); });
    report("ring 16c 8w 128B S4",
           [&](W x) { ring<16, 8, 8, 4><<<n / 16, 256, 8 * 4 * 16 * 128, stream>>>(x, k, out); });
    report("ring 16c 8w 128B S8",
           [&](W x) { ring<16, 8, 8, 8><<<n / 16, 256, 8 * 8 * 16 * 128, stream>>>(x, k, out); });
    report("ring 16c 4w 128B S8",
           [&](W x) { ring<16, 4, 8, 8><<<n / 16, 128, 4 * 8 * 16 * 128, stream>>>(x, k, out); });
    report("ring 16c 8w 256B S4",
           [&](W x) { ring<16, 8, 16, 4><<<n / 16, 256, 8 * 4 * 16 * 256, stream>>>(x, k, out); });
    report("ring 16c 16w 128B S4",
           [&](W x) { ring<16, 16, 8, 4><<<n / 16, 512, 16 * 4 * 16 * 128, stream>>>(x, k, out); });
    for (int kb : {16, 64, 128, 192}) {
      char name[64];
      snprintf(name, sizeof name, "pattern 16c 16w 512B U1 +%dK", kb);
      report(name,
             [&](W x) { pattern<16, 16, 32, 1><<<n / 16, 512, kb << 10, stream>>>(x, k, out); });
      snprintf(name, sizeof name, "pattern 16c 8w 128B U1 +%dK", kb / 2);
      report(name, [&](W x) { pattern<16, 8, 8, 1><<<n / 16, 256, kb << 9, stream>>>(x, k, out); });
    }
#define LOCKSTEP(C, W, B, S, T, BULK)                                                             \
  report("lockstep " #C "c " #W "w " #B "B S" #S " A" #T " bulk" #BULK, [&](W_ x) {               \
    lockstep<C, W, B, S, T, BULK><<<n / C, W * 32, S*(C + 16 * T) * B, stream>>>(x, a16, k, out); \
  })
    using W_ = W;
    LOCKSTEP(16, 16, 512, 3, 0, 0);
    LOCKSTEP(16, 16, 512, 3, 0, 1);
    LOCKSTEP(16, 16, 512, 3, 1, 0);
    LOCKSTEP(16, 16, 512, 3, 1, 1);
    LOCKSTEP(16, 8, 512, 4, 1, 1);
    LOCKSTEP(16, 8, 256, 4, 1, 0);
    LOCKSTEP(16, 8, 256, 4, 1, 1);
    LOCKSTEP(16, 8, 1024, 3, 1, 1);
    LOCKSTEP(32, 8, 512, 3, 1, 1);
#undef LOCKSTEP
#define BULK_ROWS(C, CHUNK, S, W)                                                            \
  report("bulk rows " #C "c " #CHUNK "B S" #S " " #W "w", [&](W_ x) {                        \
    bulk_rows<C, CHUNK, S, W><<<n / C, (W + 1) * 32, S * C * (CHUNK + 16), stream>>>(x, k, out); \
  })
    BULK_ROWS(16, 2048, 3, 8);
    BULK_ROWS(16, 2048, 2, 8);
    BULK_ROWS(16, 1024, 4, 8);
    BULK_ROWS(16, 1024, 6, 4);
    BULK_ROWS(16, 4096, 2, 8);
    BULK_ROWS(16, 512, 8, 8);
#undef BULK_ROWS
    CHECK(failed);
    CHECK(cudaGetLastError());
    for (auto& x : ws) CHECK(cudaFree(x));
    CHECK(cudaFree(copied));
  }
  return 0;
}
