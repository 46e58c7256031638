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

// The exact GELU, x * Phi(x), written gelu(x) = max(x, 0) - |x| * Q(|x|) with Q(a) = Phi(-a)
// = exp2(a * G(a) - 1): G is a degree-9 fit of (log2(Q(a)) + 1) / a on [0, 9] (Q(9) ~ 1e-19),
// weighted toward the GELU's absolute error. About 12 instructions where 0.5 x (1 + erff(x /
// sqrt 2)) takes ~28 (the fused norms are bound by instruction issue), and no cancellation in
// 1 + erf for negative x: relative error at most 1.2e-6 where |gelu| > 1e-3 (the erff form: 8e-5).
__device__ __forceinline__ float gelu(float x) {
  const float a = fminf(fabsf(x), 9.f);
  float g = -5.399702729e-08f;
  g = fmaf(g, a, 1.347099101e-06f);
  g = fmaf(g, a, -1.487249210e-05f);
  g = fmaf(g, a, 9.307306755e-05f);
  g = fmaf(g, a, -3.201740037e-04f);
  g = fmaf(g, a, 5.682654228e-05f);
  g = fmaf(g, a, 6.903226953e-03f);
  g = fmaf(g, a, -5.242510885e-02f);
  g = fmaf(g, a, -4.592228234e-01f);
  g = fmaf(g, a, -1.151104212e+00f);
  return fmaf(-fabsf(x), exp2f(fmaf(g, a, -1.f)), fmaxf(x, 0.f));
}

// The same form with a degree-5 G, for results rounded to bf16 or f16: relative error at most
// 1.6e-5 where |gelu| > 1e-3 (f16's half ulp is 2.4e-4, bf16's 2e-3), four instructions fewer.
__device__ __forceinline__ float gelu_for_half(float x) {
  const float a = fminf(fabsf(x), 9.f);
  float g = 2.550253885e-05f;
  g = fmaf(g, a, -6.707751309e-04f);
  g = fmaf(g, a, 7.621909957e-03f);
  g = fmaf(g, a, -5.246279761e-02f);
  g = fmaf(g, a, -4.596203566e-01f);
  g = fmaf(g, a, -1.150947213e+00f);
  return fmaf(-fabsf(x), exp2f(fmaf(g, a, -1.f)), fmaxf(x, 0.f));
}

// HALF_OUT: the result is rounded to a 16-bit type, so the shorter GELU is exact enough.
template <int ACT, bool HALF_OUT = false>
__device__ __forceinline__ float activate(float x) {
  if (ACT == kActRelu) return x > 0.f ? x : 0.f;
  if (ACT == kActGelu) return HALF_OUT ? gelu_for_half(x) : gelu(x);
  if (ACT == kActSilu) return x / (1.f + __expf(-x));
  return x;
}

}  // namespace tilesmith
