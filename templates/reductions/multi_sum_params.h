// The by-value arguments of multi_sum's kernels (multi_sum.cuh) and its reference. Included by
// the kernel source (NVRTC) and by the host descriptor.
#pragma once

namespace tilesmith {

// One tensor of the table a call sums: its first element and its length in elements.
struct MultiSumEntry {
  const void* data;
  long long length;
};

struct MultiSumParams {
  const MultiSumEntry* table;  // count entries, in device memory
  void* out;                   // count sums (or means); the reference: fp32
  long long* chunk_start;      // workspace: count + 1 exclusive prefix sums of chunks per tensor
  float* partials;             // workspace: one sum per chunk
  long long count;
  long long capacity;          // chunks the partials hold; a table needing more writes NaN
};

}  // namespace tilesmith
