// multi_sum: the sum (or mean) of each of many tensors of different lengths, from a table of
// pointers and lengths in device memory, in three launches whatever the count:
//   multi_sum_plan    one CTA: each tensor's chunks of CHUNK elements, as prefix sums
//   multi_sum_chunks  a persistent grid: one CTA per chunk at a time, its sum to partials
//   multi_sum_finish  a thread per tensor: its chunks' partials added in order (deterministic)
// Every element is read once; the partials are 4 bytes per CHUNK elements.
#pragma once

#include "common/elementwise.cuh"
#include "reductions/multi_sum_params.h"
#include "reductions/row_norm.cuh"

namespace tilesmith {

template <int CHUNK>
__global__ void __launch_bounds__(1024) multi_sum_plan(const MultiSumParams p) {
  wait_for_previous_launch();
  allow_next_launch();
  __shared__ long long warp_totals[32];
  __shared__ long long carry;
  if (threadIdx.x == 0) carry = 0;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (long long base = 0; base < p.count; base += blockDim.x) {
    const long long t = base + threadIdx.x;
    const long long length = t < p.count ? p.table[t].length : 0;
    const long long chunks = length > 0 ? (length + CHUNK - 1) / CHUNK : 0;
    long long inclusive = chunks;  // scan within the warp, then over the warps' totals
#pragma unroll
    for (int offset = 1; offset < 32; offset *= 2) {
      const long long other = __shfl_up_sync(0xffffffffu, inclusive, offset);
      if (lane >= offset) inclusive += other;
    }
    __syncthreads();  // carry and warp_totals of the previous tile are read
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    long long before = carry;
    for (int w = 0; w < warp; ++w) before += warp_totals[w];
    if (t < p.count) p.chunk_start[t] = before + inclusive - chunks;
    __syncthreads();
    if (threadIdx.x == blockDim.x - 1) carry = before + inclusive;
  }
  __syncthreads();
  if (threadIdx.x == 0) p.chunk_start[p.count] = carry;
}

template <int KIND, int VEC, int THREADS, int CHUNK>
__global__ void __launch_bounds__(THREADS) multi_sum_chunks(const MultiSumParams p) {
  wait_for_previous_launch();
  allow_next_launch();
  constexpr int SIZE = ElementBytes<KIND>::value;
  __shared__ float warp_sums[THREADS / 32];
  const long long total = min(p.chunk_start[p.count], p.capacity);
  for (long long c = blockIdx.x; c < total; c += gridDim.x) {
    long long low = 0, high = p.count - 1;  // the last tensor starting at or before chunk c
    while (low < high) {
      const long long mid = (low + high + 1) / 2;
      if (p.chunk_start[mid] <= c) low = mid; else high = mid - 1;
    }
    const MultiSumEntry entry = p.table[low];
    const long long offset = (c - p.chunk_start[low]) * CHUNK;
    const int n = static_cast<int>(min(static_cast<long long>(CHUNK), entry.length - offset));
    const char* base = static_cast<const char*>(entry.data) + offset * SIZE;
    float sum = 0.f;
    if (reinterpret_cast<unsigned long long>(base) % (VEC * SIZE) == 0) {
      const int whole = n / VEC * VEC;
      for (int i = threadIdx.x * VEC; i < whole; i += THREADS * VEC) {
        float v[VEC];
        load_elements<KIND, VEC>(base, i, v);
#pragma unroll
        for (int k = 0; k < VEC; ++k) sum += v[k];
      }
      for (int i = whole + threadIdx.x; i < n; i += THREADS) sum += load_as_float<KIND>(base, i);
    } else {
      for (int i = threadIdx.x; i < n; i += THREADS) sum += load_as_float<KIND>(base, i);
    }
#pragma unroll
    for (int offset_lane = 16; offset_lane > 0; offset_lane /= 2)
      sum += __shfl_xor_sync(0xffffffffu, sum, offset_lane);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
      float chunk_sum = 0.f;
#pragma unroll
      for (int w = 0; w < THREADS / 32; ++w) chunk_sum += warp_sums[w];
      p.partials[c] = chunk_sum;
    }
    __syncthreads();  // warp_sums are written again by the next chunk
  }
}

template <int KIND_OUT, int MEAN>
__global__ void multi_sum_finish(const MultiSumParams p) {
  wait_for_previous_launch();
  allow_next_launch();
  const long long t = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x;
  if (t >= p.count) return;
  const long long first = p.chunk_start[t], last = p.chunk_start[t + 1];
  float sum = 0.f;
  if (last > p.capacity) {
    sum = __int_as_float(0x7fc00000);  // the table needs more chunks than the workspace holds
  } else {
    for (long long c = first; c < last; ++c) sum += p.partials[c];
  }
  if (MEAN) sum /= static_cast<float>(p.table[t].length);
  store_element<KIND_OUT>(p.out, t, sum);
}

}  // namespace tilesmith
