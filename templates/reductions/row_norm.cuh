// Softmax, layernorm and rmsnorm over rows, the norms with a fused activation and residual:
// x read once, y written once, so the floor is the memory's bandwidth.
//
// Template arguments (row_norm_params.h for the codes):
//   OP           RowOp;  KIND_IN: x, weight, bias;  KIND_OUT: y, residual;  FLAGS: RowFlags
//   VEC          elements per vector access (16, 8 or 4 bytes)
//   THREADS_ROW  threads sharing a row;  ROWS_BLOCK: rows per CTA
//   ITEMS        vectors each thread holds (the row stays in registers from read to write)
//   CLUSTER      CTAs sharing a row
//   EXCHANGE     how they exchange their partials (RowExchange): through distributed shared
//                memory in a cluster (sm_90), or through global memory (a persistent grid)
//   STAGES       0: a grid of every row group, each CTA loading its rows straight into registers;
//                N: a persistent grid, each CTA keeping its next N row groups in flight into a
//                shared-memory ring (cp.async) while it reduces and writes the current one
//
// A row need not start on a vector boundary (any row stride, any column count). Its elements
// are split into the `head` before x's first VEC-aligned address, whole vectors, and a `tail`:
// the fewer than 2*VEC head and tail elements ("extras") are held one per thread by CTA 0.
// The vectors are split into contiguous runs, one per CTA of the cluster; within a run, vector
// l goes to thread l % THREADS_ROW, slot l / THREADS_ROW, so neighbouring threads read
// neighbouring 16 bytes.
#pragma once

#include "common/elementwise.cuh"
#include "common/hopper.cuh"
#include "reductions/row_norm_params.h"

namespace tilesmith {

template <int KIND>
struct ElementBytes {
  static constexpr int value = KIND == kF32 ? 4 : 2;
};

// N consecutive elements from base[index], as floats: vector loads where the address allows,
// else element by element (y's or the weight's rows may sit differently from x's). ALIGNED: the
// caller knows the address allows (a ring slot), so nothing is checked.
template <int KIND, int N, bool ALIGNED = false>
__device__ __forceinline__ void load_elements(const void* base, long long index, float (&out)[N]) {
  constexpr int SIZE = ElementBytes<KIND>::value;
  constexpr int BYTES = N * SIZE;
  constexpr int CHUNK = BYTES < 16 ? BYTES : 16;
  const char* at = static_cast<const char*>(base) + index * SIZE;
  if (CHUNK >= 4 && (ALIGNED || reinterpret_cast<unsigned long long>(at) % CHUNK == 0)) {
    unsigned words[BYTES >= 4 ? BYTES / 4 : 1];
#pragma unroll
    for (int c = 0; c < BYTES / CHUNK; ++c) {
      if constexpr (CHUNK == 16) {
        const uint4 v = *reinterpret_cast<const uint4*>(at + 16 * c);
        words[4 * c] = v.x, words[4 * c + 1] = v.y, words[4 * c + 2] = v.z, words[4 * c + 3] = v.w;
      } else if constexpr (CHUNK == 8) {
        const uint2 v = *reinterpret_cast<const uint2*>(at + 8 * c);
        words[2 * c] = v.x, words[2 * c + 1] = v.y;
      } else if constexpr (CHUNK == 4) {
        words[c] = *reinterpret_cast<const unsigned*>(at + 4 * c);
      }
    }
#pragma unroll
    for (int k = 0; k < N; ++k)
      out[k] = SIZE == 4 ? __uint_as_float(words[k])
                         : to_float(static_cast<half_bits>(words[k / 2] >> (16 * (k % 2))), KIND);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = load_as_float<KIND>(base, index + k);
  }
}

template <int KIND>
__device__ __forceinline__ void store_element(void* base, long long index, float value) {
  if (KIND == kF32)
    static_cast<float*>(base)[index] = value;
  else
    static_cast<half_bits*>(base)[index] = from_float<KIND>(value);
}

// N floats to base[index..] in KIND, rounded once: vector stores where the address allows.
template <int KIND, int N>
__device__ __forceinline__ void store_elements(void* base, long long index, const float (&v)[N]) {
  constexpr int SIZE = ElementBytes<KIND>::value;
  constexpr int BYTES = N * SIZE;
  constexpr int CHUNK = BYTES < 16 ? BYTES : 16;
  char* at = static_cast<char*>(base) + index * SIZE;
  if (CHUNK >= 4 && reinterpret_cast<unsigned long long>(at) % CHUNK == 0) {
    unsigned words[BYTES >= 4 ? BYTES / 4 : 1];
#pragma unroll
    for (int w = 0; w < BYTES / 4; ++w)
      words[w] = SIZE == 4 ? __float_as_uint(v[w]) : pack2<KIND>(v[2 * w], v[2 * w + 1]);
#pragma unroll
    for (int c = 0; c < BYTES / CHUNK; ++c) {
      if constexpr (CHUNK == 16)
        *reinterpret_cast<uint4*>(at + 16 * c) =
            make_uint4(words[4 * c], words[4 * c + 1], words[4 * c + 2], words[4 * c + 3]);
      else if constexpr (CHUNK == 8)
        *reinterpret_cast<uint2*>(at + 8 * c) = make_uint2(words[2 * c], words[2 * c + 1]);
      else if constexpr (CHUNK == 4)
        *reinterpret_cast<unsigned*>(at + 4 * c) = words[c];
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) store_element<KIND>(base, index + k, v[k]);
  }
}

// What one reduction over a row carries, one per op, so every op needs a single exchange
// between threads (and one cluster barrier): the sum of squares (rmsnorm); the max with the sum
// of exp(x - max) under it (softmax, merged as in the online softmax); the count, mean and sum
// of squared deviations (layernorm, merged by Chan's formula: no cancellation).
struct MaxSum {
  float max, sum;
};
struct MeanM2 {
  float count, mean, m2;
};

__device__ __forceinline__ float merge(float a, float b) { return a + b; }
__device__ __forceinline__ MaxSum merge(MaxSum a, MaxSum b) {
  const float max = fmaxf(a.max, b.max);
  if (max == __int_as_float(0xff800000)) return a;  // both empty
  return {max, a.sum * __expf(a.max - max) + b.sum * __expf(b.max - max)};
}
// The merge's weight is a fast division (two instructions): an IEEE one is a ~10-instruction
// sequence with a slow-path branch, on the critical path of every shuffle of every row, and the
// fused norms are bound by instruction issue. Its 2 ulp only weigh the means' difference.
__device__ __forceinline__ MeanM2 merge(MeanM2 a, MeanM2 b) {
  const float count = a.count + b.count;
  if (count == 0.f) return a;
  const float delta = b.mean - a.mean, share = __fdividef(b.count, count);
  return {count, a.mean + delta * share, a.m2 + b.m2 + delta * delta * a.count * share};
}

// The same value from the lane `offset` away (xor), field by field.
__device__ __forceinline__ float shuffle_xor(float v, int offset) {
  return __shfl_xor_sync(0xffffffffu, v, offset);
}
__device__ __forceinline__ MaxSum shuffle_xor(MaxSum v, int offset) {
  return {shuffle_xor(v.max, offset), shuffle_xor(v.sum, offset)};
}
__device__ __forceinline__ MeanM2 shuffle_xor(MeanM2 v, int offset) {
  return {shuffle_xor(v.count, offset), shuffle_xor(v.mean, offset), shuffle_xor(v.m2, offset)};
}

// The partials of a row's warps.
template <class T, int ROWS_BLOCK, int WARPS_ROW>
struct RowShared {
  T warp[ROWS_BLOCK][WARPS_ROW];
};

template <class T>
__device__ __forceinline__ float4 as_float4(const T& value) {
  static_assert(sizeof(T) <= sizeof(float4), "a partial fits one 16-byte slot");
  float4 packed = make_float4(0.f, 0.f, 0.f, 0.f);
  memcpy(&packed, &value, sizeof(T));
  return packed;
}
template <class T>
__device__ __forceinline__ T from_float4(const float4& packed) {
  T value;
  memcpy(&value, &packed, sizeof(T));
  return value;
}

// Where the CTAs of a cluster send each other their partial of a row: every CTA stores its
// partial into every CTA's slot for it (st.async through distributed shared memory), and the
// store itself counts on the receiver's mbarrier, which completes when all CLUSTER partials have
// landed. No cluster barrier per row: its release would wait for every store the CTA issued
// before it (the previous row's y), which ncu showed as the largest stall of the long rows.
// Two sets, alternating by exchange: a CTA sends exchange k + 2 only after it received
// exchange k + 1 from everyone, so after everyone finished reading exchange k.
template <int CLUSTER>
struct ClusterMailbox {
  float4 slot[2][CLUSTER];        // by exchange parity, then by sender rank
  unsigned long long arrived[2];  // by exchange parity

  __device__ __forceinline__ static int rank() {
    if constexpr (CLUSTER > 1) return static_cast<int>(cluster_cta_rank());
    return 0;
  }
  // Every thread of the CTA, before the first exchange: the barriers are set up and seen by
  // the cluster before any CTA sends.
  __device__ __forceinline__ void open(void*) {
    if constexpr (CLUSTER > 1) {
      if (threadIdx.x == 0) {
        mbarrier_init(smem_address(&arrived[0]), 1);
        mbarrier_init(smem_address(&arrived[1]), 1);
        fence_mbarrier_init();
      }
      cluster_sync();
    }
  }
  // Every thread of the CTA, exchange `exchange` (counted from 0): the CTA's partial merged
  // with the cluster's, in rank order, so every CTA holds the same result.
  template <class T>
  __device__ __forceinline__ T share(T value, int exchange) {
    const int set = exchange & 1;
    const unsigned arrived_at = smem_address(&arrived[set]);
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(arrived_at, CLUSTER * sizeof(float4));
      const unsigned me = cluster_cta_rank();
      const float4 packed = as_float4(value);
#pragma unroll
      for (unsigned to = 0; to < CLUSTER; ++to)
        store_async_cluster(map_to_cta(smem_address(&slot[set][me]), to), packed,
                            map_to_cta(arrived_at, to));
    }
    mbarrier_wait_cluster(arrived_at, (exchange >> 1) & 1);
    value = from_float4<T>(slot[set][0]);
#pragma unroll
    for (int from = 1; from < CLUSTER; ++from) value = merge(value, from_float4<T>(slot[set][from]));
    return value;
  }
  // Every thread of the CTA, after the last exchange: no CTA exits while a store it sent may
  // still be on its way.
  __device__ __forceinline__ void close() {
    if constexpr (CLUSTER > 1) {
      cluster_arrive_relaxed();
      cluster_wait();
    }
  }
};

// The same exchange for GROUP consecutive CTAs that are not a cluster, through a board in
// global memory (row_board_bytes; the launch plan zeroes the boards first, and launches every
// CTA at once, cooperatively): thread 0 stores the CTA's partial into its slot, counts itself
// in (a fence first, so the partial is visible before the count), waits until the count says
// every CTA of the group sent this exchange, and merges the slots read through L2 in rank
// order. The sets alternate as the cluster's do, for the same reason. A round trip through L2
// under a full memory stream costs microseconds where distributed shared memory costs hundreds
// of nanoseconds: on the H100 the cluster wins (docs/perf/reductions.md, v7).
template <int GROUP>
struct GlobalMailbox {
  float4 merged[2];  // by exchange parity: the group's result, for the CTA's other threads
  char* board;

  __device__ __forceinline__ static int rank() { return static_cast<int>(blockIdx.x % GROUP); }
  __device__ __forceinline__ void open(void* boards) {
    if (threadIdx.x == 0) board = static_cast<char*>(boards) + blockIdx.x / GROUP * row_board_bytes(GROUP);
    __syncthreads();
  }
  template <class T>
  __device__ __forceinline__ T share(T value, int exchange) {
    const int set = exchange & 1;
    if (threadIdx.x == 0) {
      float4* slots = reinterpret_cast<float4*>(board) + set * GROUP;
      unsigned* count = reinterpret_cast<unsigned*>(board + 2 * GROUP * sizeof(float4)) + set;
      __stcg(slots + rank(), as_float4(value));
      __threadfence();
      atomicAdd(count, 1u);
      const unsigned everyone = GROUP * static_cast<unsigned>((exchange >> 1) + 1);
      unsigned seen;
      do {
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(seen) : "l"(count) : "memory");
      } while (seen < everyone);
      T whole = from_float4<T>(__ldcg(slots));
#pragma unroll
      for (int from = 1; from < GROUP; ++from) whole = merge(whole, from_float4<T>(__ldcg(slots + from)));
      merged[set] = as_float4(whole);
    }
    __syncthreads();
    return from_float4<T>(merged[set]);
  }
  __device__ __forceinline__ void close() {}
};

// The mailbox of the EXCHANGE kind (RowExchange) for CTAs sharing a row.
template <int CLUSTER, int EXCHANGE>
struct RowMailboxOf {
  using type = ClusterMailbox<CLUSTER>;
};
template <int CLUSTER>
struct RowMailboxOf<CLUSTER, kRowExchangeGlobal> {
  using type = GlobalMailbox<CLUSTER>;
};
template <int CLUSTER, int EXCHANGE>
using RowMailbox = typename RowMailboxOf<CLUSTER, EXCHANGE>::type;

// `value` merged over the row: its threads (shuffles, then shared memory across warps), then
// the CTAs sharing it (through `mailbox`). Every thread of the CTA calls it once per row group;
// `exchange` counts the calls.
template <int THREADS_ROW, int CLUSTER, class T, class Shared, class Mailbox>
__device__ __forceinline__ T reduce_row(T value, Shared& shared, Mailbox& mailbox, int row_in_block,
                                        int lane_row, int exchange) {
  constexpr int WIDTH = THREADS_ROW < 32 ? THREADS_ROW : 32;
#pragma unroll
  for (int offset = WIDTH / 2; offset > 0; offset /= 2) value = merge(value, shuffle_xor(value, offset));
  if constexpr (THREADS_ROW > 32) {
    if (lane_row % 32 == 0) shared.warp[row_in_block][lane_row / 32] = value;
    __syncthreads();
    value = shared.warp[row_in_block][0];
#pragma unroll
    for (int w = 1; w < THREADS_ROW / 32; ++w) value = merge(value, shared.warp[row_in_block][w]);
  }
  if constexpr (CLUSTER > 1) value = mailbox.share(value, exchange);  // one row per CTA
  return value;
}

template <int OP>
struct RowPartial {
  using type = float;
};
template <>
struct RowPartial<kRowSoftmax> {
  using type = MaxSum;
};
template <>
struct RowPartial<kRowLayerNorm> {
  using type = MeanM2;
};

// y = act((x - shift) * scale * weight + bias) + residual for N elements from column `col`.
// `staged`: the weight's (then the bias's) N elements already in shared memory, `stride` bytes
// apart, vector-aligned; `staged_residual` the residual's; nullptr: read them from global memory.
// all_staged: the caller knows both are in shared memory (where the op has them); passed as a
// constant, no pointer is tested: the test of a shared address against nullptr costs a dozen
// instructions per vector, and a merge of the two sources keeps the compiler from converting
// 16-bit values in one step.
template <int KIND_IN, int KIND_OUT, int FLAGS, int N>
__device__ __forceinline__ void row_epilogue(const RowParams& p, float (&values)[N], int col,
                                             long long residual_row, float shift, float scale,
                                             const char* staged = nullptr, int stride = 0,
                                             const char* staged_residual = nullptr,
                                             const bool all_staged = false) {
  float weight[N], bias[N], residual[N];
  if constexpr ((FLAGS & kRowWeight) != 0) {
    if (all_staged || staged)
      load_elements<KIND_IN, N, true>(staged, 0, weight);
    else
      load_elements<KIND_IN, N>(p.weight, col, weight);
  }
  if constexpr ((FLAGS & kRowBias) != 0) {
    const char* staged_bias = staged + ((FLAGS & kRowWeight) != 0 ? stride : 0);
    if (all_staged || staged)
      load_elements<KIND_IN, N, true>(staged_bias, 0, bias);
    else
      load_elements<KIND_IN, N>(p.bias, col, bias);
  }
  if constexpr ((FLAGS & kRowResidual) != 0) {
    if (all_staged || staged_residual)
      load_elements<KIND_OUT, N, true>(staged_residual, 0, residual);
    else
      load_elements<KIND_OUT, N>(p.residual, residual_row + col, residual);
  }
  // Rounded to 16 bits, (x - shift) * scale may be one FMA: x * scale - shift * scale differs
  // from it by shift * scale's rounding, 2^-24 of |shift| / std, far below a 16-bit ulp
  // unless the mean is 2^15 standard deviations away. fp32 outputs keep the exact form.
  const float shifted = -shift * scale;
#pragma unroll
  for (int k = 0; k < N; ++k) {
    float y = KIND_OUT != kF32 ? fmaf(values[k], scale, shifted) : (values[k] - shift) * scale;
    if constexpr ((FLAGS & kRowWeight) != 0 && (FLAGS & kRowBias) != 0)
      y = fmaf(y, weight[k], bias[k]);
    else if constexpr ((FLAGS & kRowWeight) != 0)
      y *= weight[k];
    else if constexpr ((FLAGS & kRowBias) != 0)
      y += bias[k];
    y = activate<FLAGS & kActMask, KIND_OUT != kF32>(y);
    if constexpr ((FLAGS & kRowResidual) != 0) y += residual[k];
    values[k] = y;
  }
}

// Where a row lies: its elements split into the head before x's first VEC-aligned address,
// whole vectors, and the tail; this CTA's run of the vectors; which of them a thread holds.
template <int KIND_IN, int VEC, int THREADS_ROW, int CLUSTER>
struct RowSpan {
  bool active;  // the row exists (threads of a row past the last load and store nothing)
  long long row, x_row;
  int head, vectors, extras, first, last, lane_row, rank;

  __device__ __forceinline__ RowSpan(const RowParams& p, long long row_index, int lane, int cta_rank)
      : active(row_index < p.rows), row(row_index), lane_row(lane), rank(cta_rank) {
    constexpr unsigned long long ALIGN = VEC * ElementBytes<KIND_IN>::value;
    x_row = (active ? row : 0) * p.x_stride;
    const unsigned long long x_address = reinterpret_cast<unsigned long long>(
        static_cast<const char*>(p.x) + x_row * ElementBytes<KIND_IN>::value);
    head = min(static_cast<int>((ALIGN - x_address % ALIGN) % ALIGN / ElementBytes<KIND_IN>::value),
               p.cols);
    vectors = (p.cols - head) / VEC;
    extras = p.cols - vectors * VEC;
    const int per_cta = (vectors + CLUSTER - 1) / CLUSTER;
    first = rank * per_cta;
    last = min(vectors, first + per_cta);
  }
  __device__ __forceinline__ int vector_at(int item) const { return first + item * THREADS_ROW + lane_row; }
  __device__ __forceinline__ bool holds(int item) const { return active && vector_at(item) < last; }
  __device__ __forceinline__ long long x_index(int item) const {
    return x_row + head + static_cast<long long>(vector_at(item)) * VEC;
  }
  // Head and tail elements ("extras"), one per thread of CTA 0.
  __device__ __forceinline__ int extra_at(int slot) const { return lane_row + slot * THREADS_ROW; }
  __device__ __forceinline__ bool holds_extra(int slot) const {
    return active && rank == 0 && extra_at(slot) < extras;
  }
  __device__ __forceinline__ int extra_col(int slot) const {
    const int i = extra_at(slot);
    return i < head ? i : head + vectors * VEC + (i - head);
  }
};

// VEC_BYTES from global to shared memory without passing through registers (cp.async; 16-byte
// copies skip L1).
template <int VEC_BYTES>
__device__ __forceinline__ void copy_async(unsigned smem_dst, const void* global_src) {
  if constexpr (VEC_BYTES == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_dst), "l"(global_src));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_dst), "l"(global_src),
                 "n"(VEC_BYTES));
}

// BYTES (a vector of any of the row arrays: 4 to 32) from global to shared memory, 16 at a time.
template <int BYTES>
__device__ __forceinline__ void copy_vector_async(unsigned smem_dst, const char* global_src) {
  if constexpr (BYTES <= 16) {
    copy_async<BYTES>(smem_dst, global_src);
  } else {
#pragma unroll
    for (int c = 0; c < BYTES / 16; ++c) copy_async<16>(smem_dst + 16 * c, global_src + 16 * c);
  }
}

template <int OP, int KIND_IN, int KIND_OUT, int FLAGS, int VEC, int THREADS_ROW, int ROWS_BLOCK,
          int ITEMS, int CLUSTER, int EXCHANGE, int STAGES>
__global__ void __launch_bounds__(THREADS_ROW* ROWS_BLOCK) row_norm(const RowParams p) {
  wait_for_previous_launch();
  allow_next_launch();
  constexpr int IN_BYTES = ElementBytes<KIND_IN>::value;
  constexpr int VEC_BYTES = VEC * IN_BYTES;
  constexpr int EXTRA = (2 * VEC - 2 + THREADS_ROW - 1) / THREADS_ROW > 0
                            ? (2 * VEC - 2 + THREADS_ROW - 1) / THREADS_ROW
                            : 1;
  using Partial = typename RowPartial<OP>::type;
  using Span = RowSpan<KIND_IN, VEC, THREADS_ROW, CLUSTER>;
  // Two sets, alternating by row group: a warp may write the next group's partials while another
  // still reads this one's (one barrier per exchange separates them).
  __shared__ RowShared<Partial, ROWS_BLOCK, (THREADS_ROW > 32 ? THREADS_ROW / 32 : 1)> shared[2];
  __shared__ RowMailbox<CLUSTER, EXCHANGE> mailbox;
  // STAGES > 0: the ring of row groups in flight, [stage][row of the CTA][item][thread] vectors,
  // then the thread's columns of weight and bias (those present) in the same layout, copied once:
  // a persistent CTA reads them from there for every row instead of from L2; then the residual's
  // ring (its vectors are VEC elements of y's type).
  extern __shared__ uint4 ring[];
  constexpr int STAGED_PARAMS = STAGES > 0 ? ((FLAGS & kRowWeight) != 0) + ((FLAGS & kRowBias) != 0) : 0;
  constexpr bool STAGED_RESIDUAL = STAGES > 0 && (FLAGS & kRowResidual) != 0;
  constexpr int RESIDUAL_BYTES = VEC * ElementBytes<KIND_OUT>::value;
  constexpr int RESIDUAL_RING = (STAGES + STAGED_PARAMS) * ROWS_BLOCK * ITEMS * THREADS_ROW * VEC_BYTES;

  const int lane_row = threadIdx.x % THREADS_ROW;
  const int row_in_block = threadIdx.x / THREADS_ROW;
  const int rank = RowMailbox<CLUSTER, EXCHANGE>::rank();
  const int cols = p.cols;
  // Row groups of ROWS_BLOCK rows, one per CTA (cluster) at a time, strided by the grid: a
  // grid of every group runs each once; a persistent grid (STAGES > 0) loops.
  const long long groups = (p.rows + ROWS_BLOCK - 1) / ROWS_BLOCK;
  const long long group_step = gridDim.x / CLUSTER;
  auto slot_offset = [&](int stage, int item) {  // bytes into the ring
    return (((stage * ROWS_BLOCK + row_in_block) * ITEMS + item) * THREADS_ROW + lane_row) * VEC_BYTES;
  };
  // A thread's vectors of a row group into its slots of a ring stage, as one commit group (empty
  // past the last group, so the groups in flight always number STAGES). A thread reads back only
  // what it copied itself, so no barrier guards the ring: cp.async.wait_group orders the thread's
  // own copies before its reads.
  // The residual of a row goes through the ring where its vectors sit on 16-byte (vector)
  // boundaries as x's do; other rows read it from global memory when their turn comes.
  auto residual_staged = [&](const Span& span) {
    constexpr unsigned long long ALIGN = RESIDUAL_BYTES < 16 ? RESIDUAL_BYTES : 16;
    return STAGED_RESIDUAL && span.active &&
           reinterpret_cast<unsigned long long>(static_cast<const char*>(p.residual) +
                                                (span.row * p.residual_stride + span.head) *
                                                    ElementBytes<KIND_OUT>::value) % ALIGN == 0;
  };
  auto residual_slot = [&](int stage, int item) {  // bytes into the ring
    return RESIDUAL_RING + slot_offset(stage, item) / VEC_BYTES * RESIDUAL_BYTES;
  };
  auto stage_group = [&](long long group, int stage) {
    if (group < groups) {
      const Span span(p, group * ROWS_BLOCK + row_in_block, lane_row, rank);
      const bool residual = residual_staged(span);
#pragma unroll
      for (int item = 0; item < ITEMS; ++item)
        if (span.holds(item)) {
          copy_async<VEC_BYTES>(smem_address(ring) + slot_offset(stage, item),
                                static_cast<const char*>(p.x) + span.x_index(item) * IN_BYTES);
          if (residual)
            copy_vector_async<RESIDUAL_BYTES>(
                smem_address(ring) + residual_slot(stage, item),
                static_cast<const char*>(p.residual) +
                    (span.row * p.residual_stride + span.head + span.vector_at(item) * VEC) *
                        ElementBytes<KIND_OUT>::value);
        }
    }
    cp_async_commit();
  };
  mailbox.open(p.boards);
  long long group = blockIdx.x / CLUSTER;
  // The weight and bias columns staged for rows that start where this CTA's first row does
  // (every row, when rows are packed and aligned); rows that start elsewhere read global memory.
  int staged_head = -1;
  if constexpr (STAGED_PARAMS > 0) {
    const Span span(p, group * ROWS_BLOCK + row_in_block, lane_row, rank);
    const void* params[2] = {(FLAGS & kRowWeight) != 0 ? p.weight : p.bias, p.bias};
    bool aligned = span.active;
#pragma unroll
    for (int t = 0; t < STAGED_PARAMS; ++t)
      aligned = aligned && reinterpret_cast<unsigned long long>(static_cast<const char*>(params[t]) +
                                                                span.head * IN_BYTES) % VEC_BYTES == 0;
    if (aligned) {
      staged_head = span.head;
#pragma unroll
      for (int t = 0; t < STAGED_PARAMS; ++t)
#pragma unroll
        for (int item = 0; item < ITEMS; ++item)
          if (span.holds(item))
            copy_async<VEC_BYTES>(smem_address(ring) + slot_offset(STAGES + t, item),
                                  static_cast<const char*>(params[t]) +
                                      (span.head + static_cast<long long>(span.vector_at(item)) * VEC) * IN_BYTES);
    }
  }
  if constexpr (STAGES > 0) {  // the first commit group carries the staged weight and bias
#pragma unroll
    for (int stage = 0; stage < STAGES; ++stage) stage_group(group + stage * group_step, stage);
  }

  for (int k = 0; group < groups; ++k, group += group_step) {
    const Span span(p, group * ROWS_BLOCK + row_in_block, lane_row, rank);
    const bool active = span.active;
    const long long row = span.row;
    float v[ITEMS][VEC];
    float e[EXTRA];
#pragma unroll
    for (int slot = 0; slot < EXTRA; ++slot)
      e[slot] = span.holds_extra(slot) ? load_as_float<KIND_IN>(p.x, span.x_row + span.extra_col(slot)) : 0.f;
    if constexpr (STAGES > 0) {
      const int stage = k % STAGES;
      cp_async_wait<STAGES - 1>();  // this group's copies (the oldest in flight) have landed
#pragma unroll
      for (int item = 0; item < ITEMS; ++item) {
        if (span.holds(item))
          load_elements<KIND_IN, VEC, true>(reinterpret_cast<const char*>(ring) + slot_offset(stage, item), 0,
                                            v[item]);
        else
#pragma unroll
          for (int k2 = 0; k2 < VEC; ++k2) v[item][k2] = 0.f;
      }
      // The x slots' vectors are in registers now; a residual's slots are read by the epilogue,
      // so with a residual the refill waits until the row is written.
      if constexpr (!STAGED_RESIDUAL) stage_group(group + STAGES * group_step, stage);
    } else {
#pragma unroll
      for (int item = 0; item < ITEMS; ++item) {
        if (span.holds(item))
          load_elements<KIND_IN, VEC>(p.x, span.x_index(item), v[item]);
        else
#pragma unroll
          for (int k2 = 0; k2 < VEC; ++k2) v[item][k2] = 0.f;
      }
    }

    // Applies f to every held element (vector slots, then extras).
#define TILESMITH_EACH_HELD(x, statement)                                                   \
  _Pragma("unroll") for (int item = 0; item < ITEMS; ++item) if (span.holds(item))         \
    _Pragma("unroll") for (int k2 = 0; k2 < VEC; ++k2) {                                   \
      float& x = v[item][k2];                                                              \
      statement;                                                                           \
    }                                                                                      \
  _Pragma("unroll") for (int slot = 0; slot < EXTRA; ++slot) if (span.holds_extra(slot)) { \
    float& x = e[slot];                                                                    \
    statement;                                                                             \
  }

    auto& warps = shared[k & 1];
    float shift = 0.f, scale = 1.f;  // y = (x - shift) * scale before the epilogue
    const float negative_infinity = __int_as_float(0xff800000);
    if constexpr (OP == kRowSoftmax) {
      MaxSum mine{negative_infinity, 0.f};
      TILESMITH_EACH_HELD(x, mine.max = fmaxf(mine.max, x))
      TILESMITH_EACH_HELD(x, x = __expf(x - mine.max); mine.sum += x)
      const MaxSum whole = reduce_row<THREADS_ROW, CLUSTER>(mine, warps, mailbox, row_in_block, lane_row, k);
      // Our exp(x - our max), rescaled to the row's max and divided by the row's sum.
      scale = mine.max == negative_infinity ? 0.f : __expf(mine.max - whole.max) / whole.sum;
    } else if constexpr (OP == kRowLayerNorm) {
      MeanM2 mine{0.f, 0.f, 0.f};
      float sum = 0.f;
      TILESMITH_EACH_HELD(x, sum += x)
#pragma unroll
      for (int item = 0; item < ITEMS; ++item) mine.count += span.holds(item) ? VEC : 0;
#pragma unroll
      for (int slot = 0; slot < EXTRA; ++slot) mine.count += span.holds_extra(slot) ? 1 : 0;
      if (mine.count > 0.f) mine.mean = __fdividef(sum, mine.count);
      TILESMITH_EACH_HELD(x, mine.m2 += (x - mine.mean) * (x - mine.mean))
      const MeanM2 whole = reduce_row<THREADS_ROW, CLUSTER>(mine, warps, mailbox, row_in_block, lane_row, k);
      shift = whole.mean;
      scale = rsqrtf(whole.m2 / cols + p.epsilon);
    } else {
      float squares = 0.f;
      TILESMITH_EACH_HELD(x, squares += x * x)
      squares = reduce_row<THREADS_ROW, CLUSTER>(squares, warps, mailbox, row_in_block, lane_row, k);
      scale = rsqrtf(squares / cols + p.epsilon);
    }
#undef TILESMITH_EACH_HELD
    if ((FLAGS & kRowStats) && active && rank == 0 && lane_row == 0) {
      if (OP == kRowLayerNorm) p.mean[row] = shift;
      p.rstd[row] = scale;
    }

    const long long y_row = (active ? row : 0) * p.y_stride;
    const long long residual_row = (active ? row : 0) * p.residual_stride;
    constexpr int RING_STAGES = STAGES > 0 ? STAGES : 1;
    const bool staged_params = STAGED_PARAMS > 0 && span.head == staged_head;
    const bool from_ring_residual = residual_staged(span);
    constexpr int PARAM_STRIDE = ROWS_BLOCK * ITEMS * THREADS_ROW * VEC_BYTES;  // weight to bias
    // The row's vectors through the epilogue and out; all_staged: every operand the op stages
    // is in the ring for this row (every row, when rows are packed and aligned).
    // Called with a constant in each branch, so each inlined copy tests no pointer.
    auto write_vectors = [&](const bool all_staged) {
      // y's index of the thread's first vector: the others are constant strides from it, which
      // the compiler folds into the stores' addresses.
      const long long y_first = y_row + span.head + static_cast<long long>(span.vector_at(0)) * VEC;
#pragma unroll
      for (int item = 0; item < ITEMS; ++item)
        if (span.holds(item)) {
          const int col = span.head + span.vector_at(item) * VEC;
          const char* staged = all_staged || staged_params
                                   ? reinterpret_cast<const char*>(ring) + slot_offset(STAGES, item)
                                   : nullptr;
          const char* staged_residual =
              all_staged || from_ring_residual
                  ? reinterpret_cast<const char*>(ring) + residual_slot(k % RING_STAGES, item)
                  : nullptr;
          row_epilogue<KIND_IN, KIND_OUT, FLAGS, VEC>(p, v[item], col, residual_row, shift, scale,
                                                      staged, PARAM_STRIDE, staged_residual,
                                                      all_staged);
          store_elements<KIND_OUT, VEC>(p.y, y_first + item * THREADS_ROW * VEC, v[item]);
        }
    };
    if ((STAGED_PARAMS > 0 || STAGED_RESIDUAL) && (STAGED_PARAMS == 0 || staged_params) &&
        (!STAGED_RESIDUAL || from_ring_residual))
      write_vectors(true);
    else
      write_vectors(false);
#pragma unroll
    for (int slot = 0; slot < EXTRA; ++slot)
      if (span.holds_extra(slot)) {
        float one[1] = {e[slot]};
        row_epilogue<KIND_IN, KIND_OUT, FLAGS>(p, one, span.extra_col(slot), residual_row, shift, scale);
        store_element<KIND_OUT>(p.y, y_row + span.extra_col(slot), one[0]);
      }
    if constexpr (STAGED_RESIDUAL) stage_group(group + STAGES * group_step, k % RING_STAGES);
  }
  mailbox.close();
}

}  // namespace tilesmith
