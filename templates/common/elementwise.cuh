// Element-wise pieces of fused epilogues: a typed load as fp32 and the activations.
#pragma once

#include "common/activation.h"
#include "common/tile_primitives.cuh"

namespace tilesmith {

template <int KIND>
__device__ __forceinline__ float load_as_float(const void* base, long long index) {
  if (KIND == kF32) return static_cast<const float*>(base)[index];
  return to_float(static_cast<const half_bits*>(base)[index], KIND);
}

template <int ACT>
__device__ __forceinline__ float activate(float x) {
  if (ACT == kActRelu) return x > 0.f ? x : 0.f;
  if (ACT == kActGelu) return 0.5f * x * (1.f + erff(x * 0.70710678118654752f));
  if (ACT == kActSilu) return x / (1.f + __expf(-x));
  return x;
}

}  // namespace tilesmith
