// Loads of a few adjacent elements of a row, at whatever alignment the row has, for the
// templates that read operands straight from global memory (matmul_gemv.cuh, matmul_gemv_kn.cuh,
// and matmul_decode.cuh's rows off 16 bytes): VEC elements in one load where the address allows
// it, else one element at a time, zeros past the row's end.
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_params.h"

namespace tilesmith {

// How a row reader holds its input elements: 16-bit bits, VEC of them in (VEC + 1) / 2 words (one
// half-word for VEC 1), or fp32 values.
template <int KIND>
struct RowElement {
  using type = half_bits;
  template <int VEC>
  struct Columns {
    unsigned words[(VEC + 1) / 2];
  };
  template <int VEC>
  __device__ __forceinline__ static float value(const Columns<VEC>& c, int e) {
    return to_float(static_cast<half_bits>(e % 2 ? c.words[e / 2] >> 16 : c.words[e / 2] & 0xffffu), KIND);
  }
  __device__ __forceinline__ static float value(half_bits bits) { return to_float(bits, KIND); }
};
template <>
struct RowElement<kF32> {
  using type = float;
  template <int VEC>
  struct Columns {
    float values[VEC];
  };
  template <int VEC>
  __device__ __forceinline__ static float value(const Columns<VEC>& c, int e) { return c.values[e]; }
  __device__ __forceinline__ static float value(float v) { return v; }
};

// VEC 16-bit elements of a row at `src`, zero past the row's end (`valid` of them inside).
// VECTOR: one load of VEC x 2 bytes (the address is aligned to it); else element by element.
template <int VEC, bool VECTOR, int KIND>
__device__ __forceinline__ void load_columns(const half_bits* src, int valid,
                                             typename RowElement<KIND>::template Columns<VEC>& columns) {
  unsigned (&words)[(VEC + 1) / 2] = columns.words;
  if (VECTOR && valid >= VEC) {
    if constexpr (VEC == 8) {
      const uint4 v = load_input(reinterpret_cast<const uint4*>(src));
      words[0] = v.x, words[1] = v.y, words[2] = v.z, words[3] = v.w;
    } else if constexpr (VEC == 4) {
      const uint2 v = load_input(reinterpret_cast<const uint2*>(src));
      words[0] = v.x, words[1] = v.y;
    } else if constexpr (VEC == 2) {
      words[0] = load_input(reinterpret_cast<const unsigned*>(src));
    } else {
      words[0] = load_input(src);
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < VEC; e += 2) {
    const unsigned lo = e < valid ? load_input(src + e) : 0u;
    const unsigned hi = VEC > 1 && e + 1 < valid ? load_input(src + e + 1) : 0u;
    words[e / 2] = lo | (hi << 16);
  }
}

// The same of fp32 elements: one load of VEC x 4 bytes (VEC <= 4), or element by element. (KIND
// only keeps the two forms' calls alike.)
template <int VEC, bool VECTOR, int KIND>
__device__ __forceinline__ void load_columns(const float* src, int valid,
                                             typename RowElement<kF32>::template Columns<VEC>& columns) {
  float (&x)[VEC] = columns.values;
  if (VECTOR && valid >= VEC) {
    if constexpr (VEC == 4) {
      const float4 v = load_input(reinterpret_cast<const float4*>(src));
      x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
    } else if constexpr (VEC == 2) {
      const float2 v = load_input(reinterpret_cast<const float2*>(src));
      x[0] = v.x, x[1] = v.y;
    } else {
      x[0] = load_input(src);
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < VEC; ++e) x[e] = e < valid ? load_input(src + e) : 0.f;
}

// Whether a call's rows and batches of A and B are all on `vec` elements, so that loads of vec
// elements stay aligned: a view starting at an odd column breaks it (the bases are on 16 bytes).
__device__ __forceinline__ bool strides_on(const MatmulParams& p, int vec) {
  return static_cast<unsigned long long>(p.lda | p.ldb | p.stride_a | p.stride_b) % vec == 0;
}

}  // namespace tilesmith
