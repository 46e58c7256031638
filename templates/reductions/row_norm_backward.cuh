// The backward row ops (row_norm_params.h has the formulas): x and dy read once, dx written
// once, and the column sums dweight and dbias accumulated on chip across the rows a CTA visits,
// so the floor stays the memory's bandwidth.
//
// Template arguments as row_norm.cuh's (KIND_IN: x, weight, dx, dweight, dbias; KIND_OUT: y, dy).
// The grid is persistent: each group of CLUSTER CTAs takes ROWS_BLOCK rows at a time, strided
// by the number of groups, and keeps its share of the column sums on chip: in registers where
// they fit (row_column_sums_in_registers; a thread's columns are the same for every row), else
// in shared memory, one slot per element a thread holds per row of the CTA. At the end it
// writes them as one partial row per group (workspace), and column_sums adds the groups' rows.
// STAGES > 0: the group's next STAGES row groups of x and dy are in flight into a shared-memory
// ring, as in row_norm.cuh, and the weight's columns of the thread are copied once next to it.
// A row takes two passes, the row's sums exchanged between them, x and dy held in registers
// from the first to the second. The launcher sizes the grid to what the GPU holds at once, so
// the kernel records how many groups ran for column_sums.
//
// A column stays with the same thread for every row, so the split is fixed from column 0:
// whole vectors, then the tail of fewer than VEC columns ("extras", held one per thread by
// CTA 0). Rows whose start is not VEC-aligned load and store element by element.
#pragma once

#include "reductions/row_norm.cuh"

namespace tilesmith {

// Two sums in one exchange (layernorm's backward: sum(g) and sum(g * xhat)).
struct Sum2 {
  float a, b;
};
__device__ __forceinline__ Sum2 merge(Sum2 x, Sum2 y) { return {x.a + y.a, x.b + y.b}; }
__device__ __forceinline__ Sum2 shuffle_xor(Sum2 v, int offset) {
  return {shuffle_xor(v.a, offset), shuffle_xor(v.b, offset)};
}

// N (1, 2 or 4) shared-memory floats at an N-float-aligned address, as one access.
template <int N>
__device__ __forceinline__ void load_slots(const float* at, float (&v)[N]) {
  if constexpr (N == 4) {
    const float4 t = *reinterpret_cast<const float4*>(at);
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
  } else if constexpr (N == 2) {
    const float2 t = *reinterpret_cast<const float2*>(at);
    v[0] = t.x, v[1] = t.y;
  } else {
    v[0] = at[0];
  }
}
template <int N>
__device__ __forceinline__ void store_slots(float* at, const float (&v)[N]) {
  if constexpr (N == 4)
    *reinterpret_cast<float4*>(at) = make_float4(v[0], v[1], v[2], v[3]);
  else if constexpr (N == 2)
    *reinterpret_cast<float2*>(at) = make_float2(v[0], v[1]);
  else
    at[0] = v[0];
}

template <int OP>
struct BackwardPartial {
  using type = float;  // softmax: sum(y * dy); rmsnorm: sum(g * xhat)
};
template <>
struct BackwardPartial<kRowLayerNorm> {
  using type = Sum2;
};

template <int OP, int FLAGS>
struct BackwardShape {
  static constexpr bool weight = OP != kRowSoftmax && (FLAGS & kRowWeight) != 0;
  static constexpr bool bias = OP == kRowLayerNorm && (FLAGS & kRowBias) != 0;
  static constexpr int sums = (weight ? 1 : 0) + (bias ? 1 : 0);  // dweight, dbias
};

template <int OP, int KIND_IN, int KIND_OUT, int FLAGS, int VEC, int THREADS_ROW, int ROWS_BLOCK,
          int ITEMS, int CLUSTER, int EXCHANGE, int STAGES>
__global__ void __launch_bounds__(THREADS_ROW* ROWS_BLOCK) row_norm_backward(const RowBackwardParams p) {
  wait_for_previous_launch();
  constexpr int KIND_X = OP == kRowSoftmax ? KIND_OUT : KIND_IN;  // softmax reads y
  constexpr int X_BYTES = VEC * ElementBytes<KIND_X>::value, DY_BYTES = VEC * ElementBytes<KIND_OUT>::value;
  using Shape = BackwardShape<OP, FLAGS>;
  constexpr int EXTRA = (VEC - 1 + THREADS_ROW - 1) / THREADS_ROW > 0
                            ? (VEC - 1 + THREADS_ROW - 1) / THREADS_ROW
                            : 1;
  // Column-sum slots per row of the CTA, in chunks of CHUNK floats that a thread reads and
  // writes as one access: (item, chunk) major, then lane, so a warp's chunks are contiguous
  // (no bank conflicts). The extras' slots follow, lane minor.
  constexpr int CHUNK = VEC < 4 ? VEC : 4;
  constexpr int SLOTS = (ITEMS * VEC + EXTRA) * THREADS_ROW;
  constexpr bool REGISTER_SUMS =
      row_column_sums_in_registers(ITEMS * VEC + EXTRA, Shape::sums, THREADS_ROW * ROWS_BLOCK, ROWS_BLOCK);
  constexpr int SLOT_ROWS = REGISTER_SUMS ? 0 : ROWS_BLOCK;
  using Partial = typename BackwardPartial<OP>::type;
  __shared__ RowShared<Partial, ROWS_BLOCK, (THREADS_ROW > 32 ? THREADS_ROW / 32 : 1)> shared;
  __shared__ RowMailbox<CLUSTER, EXCHANGE> mailbox;
  // [Shape::sums][SLOT_ROWS][SLOTS]; then, with STAGES > 0, the ring of row groups in flight
  // (as row_norm's, with x's vectors and dy's: [stage][row of the CTA][item][thread] each),
  // then the weight's vectors [row of the CTA][item][thread], copied once.
  extern __shared__ __align__(16) float column_slots[];
  constexpr int RING_START = (Shape::sums * SLOT_ROWS * SLOTS * 4 + 15) / 16 * 16;
  constexpr int X_RING = STAGES * ROWS_BLOCK * ITEMS * THREADS_ROW * X_BYTES;  // dy's follows
  constexpr int WEIGHT_SLOTS = X_RING + STAGES * ROWS_BLOCK * ITEMS * THREADS_ROW * DY_BYTES;
  char* const ring = reinterpret_cast<char*>(column_slots) + RING_START;

  const int lane_row = threadIdx.x % THREADS_ROW;
  const int row_in_block = threadIdx.x / THREADS_ROW;
  const int rank = RowMailbox<CLUSTER, EXCHANGE>::rank();
  const int cols = p.cols;
  const int vectors = cols / VEC;
  const int extras = cols - vectors * VEC;
  const int per_cta = (vectors + CLUSTER - 1) / CLUSTER;
  const int first = rank * per_cta;
  const int last = min(vectors, first + per_cta);
  auto vector_at = [&](int item) { return first + item * THREADS_ROW + lane_row; };
  auto holds = [&](int item) { return vector_at(item) < last; };
  auto extra_at = [&](int slot) { return lane_row + slot * THREADS_ROW; };
  auto holds_extra = [&](int slot) { return rank == 0 && extra_at(slot) < extras; };
  auto extra_col = [&](int slot) { return vectors * VEC + extra_at(slot); };
  auto chunk_slot = [&](int item, int chunk) {
    return ((item * (VEC / CHUNK) + chunk) * THREADS_ROW + lane_row) * CHUNK;
  };
  auto extra_slot_of = [&](int slot) { return (ITEMS * VEC + slot) * THREADS_ROW + lane_row; };
  // A sum's (0: dweight, then dbias) slots for one row of the CTA.
  auto slots_of = [&](int sum, int row) { return column_slots + (sum * SLOT_ROWS + row) * SLOTS; };
  float* const dweight_slots = slots_of(0, row_in_block);
  float* const dbias_slots = slots_of(Shape::weight ? 1 : 0, row_in_block);
  if constexpr (Shape::sums > 0 && !REGISTER_SUMS) {
    for (int i = threadIdx.x; i < Shape::sums * SLOT_ROWS * SLOTS; i += blockDim.x) column_slots[i] = 0.f;
    __syncthreads();  // a thread zeroes other threads' slots
  }
  // The register sums: [item][element] of the thread's columns, then the extras.
  float dweight_sums[ITEMS][VEC], dbias_sums[ITEMS][VEC], extra_dweight[EXTRA], extra_dbias[EXTRA];
  if constexpr (REGISTER_SUMS) {
#pragma unroll
    for (int item = 0; item < ITEMS; ++item)
#pragma unroll
      for (int k = 0; k < VEC; ++k) dweight_sums[item][k] = dbias_sums[item][k] = 0.f;
#pragma unroll
    for (int slot = 0; slot < EXTRA; ++slot) extra_dweight[slot] = extra_dbias[slot] = 0.f;
  }

  mailbox.open(p.boards);
  const long long groups = gridDim.x / CLUSTER;
  if (p.groups_ran != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *p.groups_ran = static_cast<int>(groups);
  // A row's x and dy, where both start on 16-byte (vector) boundaries, go through the ring;
  // other rows are read straight from global memory when their turn comes.
  auto ring_takes = [&](long long row) {
    constexpr unsigned long long X_ALIGN = X_BYTES < 16 ? X_BYTES : 16, DY_ALIGN = DY_BYTES < 16 ? DY_BYTES : 16;
    return row < p.rows &&
           reinterpret_cast<unsigned long long>(static_cast<const char*>(p.x) +
                                                row * p.x_stride * ElementBytes<KIND_X>::value) % X_ALIGN == 0 &&
           reinterpret_cast<unsigned long long>(static_cast<const char*>(p.dy) +
                                                row * p.dy_stride * ElementBytes<KIND_OUT>::value) % DY_ALIGN == 0;
  };
  auto slot = [&](int stage, int item) {  // the vector's index in either array's ring
    return ((stage * ROWS_BLOCK + row_in_block) * ITEMS + item) * THREADS_ROW + lane_row;
  };
  auto stage_group = [&](long long group, int stage) {  // one commit group, as row_norm's
    const long long row = group * ROWS_BLOCK + row_in_block;
    if (ring_takes(row)) {
#pragma unroll
      for (int item = 0; item < ITEMS; ++item)
        if (holds(item)) {
          const long long col = static_cast<long long>(vector_at(item)) * VEC;
          copy_vector_async<X_BYTES>(smem_address(ring) + slot(stage, item) * X_BYTES,
                                     static_cast<const char*>(p.x) +
                                         (row * p.x_stride + col) * ElementBytes<KIND_X>::value);
          copy_vector_async<DY_BYTES>(smem_address(ring) + X_RING + slot(stage, item) * DY_BYTES,
                                      static_cast<const char*>(p.dy) +
                                          (row * p.dy_stride + col) * ElementBytes<KIND_OUT>::value);
        }
    }
    cp_async_commit();
  };
  // The weight's vectors at the thread's columns (the same for every row), in the first commit
  // group, where the host made room and the weight starts on a vector boundary; else every row
  // reads them from L2.
  constexpr unsigned long long WEIGHT_ALIGN = X_BYTES < 16 ? X_BYTES : 16;
  const bool staged_weight = STAGES > 0 && Shape::weight && p.stage_weight != 0 &&
                             reinterpret_cast<unsigned long long>(p.weight) % WEIGHT_ALIGN == 0;
  auto weight_slot = [&](int item) {
    return WEIGHT_SLOTS + ((row_in_block * ITEMS + item) * THREADS_ROW + lane_row) * X_BYTES;
  };
  if (staged_weight) {
#pragma unroll
    for (int item = 0; item < ITEMS; ++item)
      if (holds(item))
        copy_vector_async<X_BYTES>(smem_address(ring) + weight_slot(item),
                                   static_cast<const char*>(p.weight) +
                                       static_cast<long long>(vector_at(item)) * VEC * ElementBytes<KIND_IN>::value);
  }
  if constexpr (STAGES > 0) {
#pragma unroll
    for (int stage = 0; stage < STAGES; ++stage)
      stage_group(blockIdx.x / CLUSTER + stage * groups, stage);
  }
  // The norms' row statistics (shift: mean, scale: rstd) are loaded one row group ahead, so
  // their latency hides behind the current row's work.
  auto load_stats = [&](long long row, float& shift, float& scale) {
    shift = 0.f, scale = 1.f;
    if constexpr (OP != kRowSoftmax) {
      if (row < p.rows) {
        scale = p.rstd[row];
        if constexpr (OP == kRowLayerNorm) shift = p.mean[row];
      }
    }
  };
  float next_shift, next_scale;
  load_stats(blockIdx.x / CLUSTER * ROWS_BLOCK + row_in_block, next_shift, next_scale);
  constexpr int RING_STAGES = STAGES > 0 ? STAGES : 1;

  // A row group between its two passes, with its elements past the last whole vector.
  struct Visit {
    long long group, row;
    int stage;  // its ring slot
    bool active, from_ring;
    float shift, scale;
    float ea[EXTRA], eb[EXTRA];
  };
  // The row's elements between the passes: ITEMS vectors of x and dy.
  float a[ITEMS][VEC], b[ITEMS][VEC];
  auto begin = [&](long long group, int visit) {
    Visit v;
    v.group = group;
    v.row = group * ROWS_BLOCK + row_in_block;
    v.stage = visit % RING_STAGES;
    v.active = v.row < p.rows;
    v.from_ring = false;
    if constexpr (STAGES > 0) {
      cp_async_wait<STAGES - 1>();  // this group's copies (the oldest in flight) have landed
      v.from_ring = ring_takes(v.row);
    }
    v.shift = next_shift, v.scale = next_scale;
    load_stats(v.row + groups * ROWS_BLOCK, next_shift, next_scale);
    return v;
  };
  auto load_item = [&](const Visit& v, int item, float (&x)[VEC], float (&dy)[VEC]) {
    if (v.from_ring) {
      load_elements<KIND_X, VEC, true>(ring + slot(v.stage, item) * X_BYTES, 0, x);
      load_elements<KIND_OUT, VEC, true>(ring + X_RING + slot(v.stage, item) * DY_BYTES, 0, dy);
    } else {
      const long long col = static_cast<long long>(vector_at(item)) * VEC;
      load_elements<KIND_X, VEC>(p.x, v.row * p.x_stride + col, x);
      load_elements<KIND_OUT, VEC>(p.dy, v.row * p.dy_stride + col, dy);
    }
  };
  auto load_weight = [&](int item, float (&weight)[VEC]) {
    if constexpr (Shape::weight) {
      if (staged_weight)
        load_elements<KIND_IN, VEC, true>(ring + weight_slot(item), 0, weight);
      else
        load_elements<KIND_IN, VEC>(p.weight, static_cast<long long>(vector_at(item)) * VEC, weight);
    } else {
#pragma unroll
      for (int k = 0; k < VEC; ++k) weight[k] = 1.f;
    }
  };
  // One element: x becomes xhat, dy becomes g; its column sums take dy * xhat and dy.
  // With 16-bit x, xhat is one FMA (row_epilogue says why that is exact enough); fp32 keeps
  // the exact form.
  auto prepare = [&](const Visit& v, float& x, float& dy, float weight, float& dweight, float& dbias) {
    if constexpr (OP == kRowSoftmax) return;  // y and dy are used as they are
    x = KIND_X != kF32 ? fmaf(x, v.scale, -v.shift * v.scale) : (x - v.shift) * v.scale;
    if constexpr (Shape::bias) dbias += dy;
    if constexpr (Shape::weight) {
      dweight += dy * x;
      dy *= weight;
    }
  };

  // First pass: xhat and g, the column sums, and the thread's part of the row's sums.
  auto first_pass = [&](Visit& v) {
#pragma unroll
    for (int item = 0; item < ITEMS; ++item)
      if (v.active && holds(item)) load_item(v, item, a[item], b[item]);
    if constexpr (STAGES > 0) stage_group(v.group + STAGES * groups, v.stage);  // slot now free
#pragma unroll
    for (int slot = 0; slot < EXTRA; ++slot) {
      const bool held = v.active && holds_extra(slot);
      v.ea[slot] = held ? load_as_float<KIND_X>(p.x, v.row * p.x_stride + extra_col(slot)) : 0.f;
      v.eb[slot] = held ? load_as_float<KIND_OUT>(p.dy, v.row * p.dy_stride + extra_col(slot)) : 0.f;
    }
    Partial mine{};
    auto add = [&](float xhat, float g) {
      if constexpr (OP == kRowLayerNorm) {
        mine.a += g;
        mine.b += g * xhat;
      } else {
        mine += g * xhat;
      }
    };
    if (!v.active) return mine;
#pragma unroll
    for (int item = 0; item < ITEMS; ++item)
      if (holds(item)) {
        float(&x)[VEC] = a[item];
        float(&dy)[VEC] = b[item];
        float weight[VEC];
        load_weight(item, weight);
        if constexpr (REGISTER_SUMS || Shape::sums == 0) {
#pragma unroll
          for (int k = 0; k < VEC; ++k) prepare(v, x[k], dy[k], weight[k], dweight_sums[item][k], dbias_sums[item][k]);
        } else {
#pragma unroll
          for (int chunk = 0; chunk < VEC / CHUNK; ++chunk) {
            float dweight[CHUNK], dbias[CHUNK];
            const int slot = chunk_slot(item, chunk);
            if constexpr (Shape::weight) load_slots(dweight_slots + slot, dweight);
            if constexpr (Shape::bias) load_slots(dbias_slots + slot, dbias);
#pragma unroll
            for (int e = 0; e < CHUNK; ++e) {
              const int k = chunk * CHUNK + e;
              prepare(v, x[k], dy[k], weight[k], dweight[e], dbias[e]);
            }
            if constexpr (Shape::weight) store_slots(dweight_slots + slot, dweight);
            if constexpr (Shape::bias) store_slots(dbias_slots + slot, dbias);
          }
        }
#pragma unroll
        for (int k = 0; k < VEC; ++k) add(x[k], dy[k]);
      }
#pragma unroll
    for (int slot = 0; slot < EXTRA; ++slot)
      if (holds_extra(slot)) {
        prepare(v, v.ea[slot], v.eb[slot], Shape::weight ? load_as_float<KIND_IN>(p.weight, extra_col(slot)) : 1.f,
                REGISTER_SUMS ? extra_dweight[slot] : dweight_slots[extra_slot_of(slot)],
                REGISTER_SUMS ? extra_dbias[slot] : dbias_slots[extra_slot_of(slot)]);
        add(v.ea[slot], v.eb[slot]);
      }
    return mine;
  };

  // Second pass: dx from the row's sums.
  // The norms' dx = scale * g - (scale * mean(g) + xhat * scale * mean(g * xhat)): two FMAs an
  // element, the row's constants multiplied out once.
  auto second_pass = [&](const Visit& v, const Partial& sums) {
    float per_xhat = 0.f, constant = 0.f;
    if constexpr (OP == kRowRmsNorm) {
      per_xhat = -v.scale * (sums / cols);
    } else if constexpr (OP == kRowLayerNorm) {
      per_xhat = -v.scale * (sums.b / cols);
      constant = -v.scale * (sums.a / cols);
    }
    auto gradient = [&](float xhat, float g) {
      if constexpr (OP == kRowSoftmax) {
        return xhat * (g - sums);  // y * (dy - sum(y * dy))
      } else {
        return fmaf(g, v.scale, fmaf(xhat, per_xhat, constant));
      }
    };
    if (v.active) {
      const long long dx_row = v.row * p.dx_stride;
#pragma unroll
      for (int item = 0; item < ITEMS; ++item)
        if (holds(item)) {
          float(&x)[VEC] = a[item];
          float(&dy)[VEC] = b[item];
#pragma unroll
          for (int k = 0; k < VEC; ++k) x[k] = gradient(x[k], dy[k]);
          store_elements<KIND_IN, VEC>(p.dx, dx_row + static_cast<long long>(vector_at(item)) * VEC, x);
        }
#pragma unroll
      for (int slot = 0; slot < EXTRA; ++slot)
        if (holds_extra(slot))
          store_element<KIND_IN>(p.dx, dx_row + extra_col(slot), gradient(v.ea[slot], v.eb[slot]));
    }
  };

  int visit = 0;  // row groups this CTA has taken
  for (long long group = blockIdx.x / CLUSTER; group * ROWS_BLOCK < p.rows; group += groups, ++visit) {
    Visit v = begin(group, visit);
    const Partial mine = first_pass(v);
    second_pass(v, reduce_row<THREADS_ROW, CLUSTER>(mine, shared, mailbox, row_in_block, lane_row, visit));
    // The warps' partials are written again by the next rows: every warp must have read them.
    if constexpr (THREADS_ROW > 32) __syncthreads();
  }
  allow_next_launch();  // column_sums may start; it waits for this grid's partial rows
  mailbox.close();

  if constexpr (Shape::sums == 0) return;
  const long long group = blockIdx.x / CLUSTER;
  if constexpr (REGISTER_SUMS) {
    // The thread's sums are the group's partial row at its columns.
    float* const dweight_row = p.partials + group * cols;
    float* const dbias_row = p.partials + ((Shape::weight ? groups : 0) + group) * cols;
#pragma unroll
    for (int item = 0; item < ITEMS; ++item)
      if (holds(item)) {
#pragma unroll
        for (int k = 0; k < VEC; ++k) {
          const int col = vector_at(item) * VEC + k;
          if constexpr (Shape::weight) dweight_row[col] = dweight_sums[item][k];
          if constexpr (Shape::bias) dbias_row[col] = dbias_sums[item][k];
        }
      }
#pragma unroll
    for (int slot = 0; slot < EXTRA; ++slot)
      if (holds_extra(slot)) {
        if constexpr (Shape::weight) dweight_row[extra_col(slot)] = extra_dweight[slot];
        if constexpr (Shape::bias) dbias_row[extra_col(slot)] = extra_dbias[slot];
      }
  } else {
    // The CTA's rows added slot by slot, one partial row per group, column by column.
    __syncthreads();
    for (int s = threadIdx.x; s < SLOTS; s += blockDim.x) {
      int col;
      if (s < ITEMS * VEC * THREADS_ROW) {  // chunk_slot's order
        const int lane = s / CHUNK % THREADS_ROW, item_chunk = s / (CHUNK * THREADS_ROW);
        const int vector = first + item_chunk / (VEC / CHUNK) * THREADS_ROW + lane;
        if (vector >= last) continue;
        col = vector * VEC + item_chunk % (VEC / CHUNK) * CHUNK + s % CHUNK;
      } else {
        const int lane = s % THREADS_ROW, element = s / THREADS_ROW;
        const int extra = lane + (element - ITEMS * VEC) * THREADS_ROW;
        if (rank != 0 || extra >= extras) continue;
        col = vectors * VEC + extra;
      }
#pragma unroll
      for (int sum = 0; sum < Shape::sums; ++sum) {
        float total = 0.f;
#pragma unroll
        for (int r = 0; r < SLOT_ROWS; ++r) total += slots_of(sum, r)[s];
        p.partials[(sum * groups + group) * cols + col] = total;
      }
    }
  }
}

// dweight and dbias: the groups' partial rows added per column. A thread takes one column and
// every blockDim.y-th group, with 8 loads in flight at once; a tree in shared memory adds the
// blockDim.y threads' sums. The host shapes the grid so that one round of loads covers the
// partials (few groups: wide CTAs, one thread per column; many groups: 8 columns per CTA, more
// threads per column) over as many SMs as it can: the kernel is one L2 round trip, not a chain
// of them, and its L2 reads are spread over the GPU. On sm_90 it is launched while the rows'
// kernel drains, and waits for it here, so neither its launch nor its CTAs' start-up sit
// between the two.
template <int KIND>
__global__ void __launch_bounds__(1024) column_sums(const ColumnSumParams p) {
  constexpr int IN_FLIGHT = 8;
  __shared__ float partial[1024];
  wait_for_previous_launch();  // the partial rows
  allow_next_launch();
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int sum = blockIdx.y;
  const int groups = *p.groups;
  const int step = blockDim.y;
  const float* partials = p.partials + static_cast<long long>(sum) * groups * p.cols + col;
  float total = 0.f;
  if (col < p.cols) {
    for (int g = threadIdx.y; g < groups; g += IN_FLIGHT * step) {
      float loaded[IN_FLIGHT];
#pragma unroll
      for (int k = 0; k < IN_FLIGHT; ++k)
        loaded[k] = g + k * step < groups ? partials[static_cast<long long>(g + k * step) * p.cols] : 0.f;
#pragma unroll
      for (int k = 0; k < IN_FLIGHT; ++k) total += loaded[k];
    }
  }
  if (step > 1) {
    const int lane = threadIdx.y * blockDim.x + threadIdx.x;
    partial[lane] = total;
    for (int half = step / 2; half > 0; half /= 2) {
      __syncthreads();
      if (threadIdx.y < half) partial[lane] += partial[lane + half * blockDim.x];
    }
    total = partial[threadIdx.x];
  }
  if (threadIdx.y == 0 && col < p.cols) store_element<KIND>(p.out[sum], col, total);
}

}  // namespace tilesmith
