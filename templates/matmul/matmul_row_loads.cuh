// Loads of a few adjacent elements of a row, at whatever alignment the row has, for the
// templates that read operands straight from global memory (matmul_gemv.cuh, matmul_gemv_kn.cuh,
// and matmul_decode.cuh's rows off 16 bytes): VEC elements in one load where the address allows
// it, else one element at a time, zeros past the row's end.
#pragma once

#include "common/tile_primitives.cuh"
#include "matmul/matmul_params.h"

namespace tilesmith {

// 16 bytes from global memory into registers; zeros where !valid (nothing is read). W is read
// once: `streamed` keeps it out of L1, which A's rows (read by every CTA) keep using. Coherent
// loads, not ld.global.nc: see load_input (tile_primitives.cuh).
template <bool STREAMED>
__device__ __forceinline__ uint4 load_16_or_zero(const half_bits* src, bool valid) {
  uint4 v;
  if (STREAMED)
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
        " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
        " @p ld.global.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(src), "r"(static_cast<int>(valid)));
  else
    asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %5, 0;\n"
        " mov.b32 %0, 0;\n mov.b32 %1, 0;\n mov.b32 %2, 0;\n mov.b32 %3, 0;\n"
        " @p ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n}\n"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(src), "r"(static_cast<int>(valid)));
  return v;
}

// A lane's 16 bytes of a row on any 2-byte boundary, read from the aligned 16 bytes at or before
// them and the 16 after. A run of RUN lanes (4: decode's lane quads; 32: gemv_kn's warps) reads
// one row's contiguous 16 x RUN bytes, so each lane loads its own aligned piece and takes the
// next from the lane after it (realign); the run's last lane loads that one itself. Loads and
// realignment are apart so that a kernel can issue its next loads before it realigns the pieces
// in hand. Counts of elements are of 16-bit ones (twice an fp32 row's). A piece may hold bytes
// just before a row's first element or past its last, never outside the 16-byte blocks that hold
// them (no unmapped page: a piece is read only where it holds bytes of the row);
// compute-sanitizer's memcheck may report such reads at the first or last row of an allocation.
struct RowPieces {
  uint4 own, after;  // `after`: the run's last lane only
};

// The pieces for the 8 elements at `src` (on any 2-byte boundary), `remaining` of the row's
// elements from src on (<= 0: src is at or past the row's end): a lane loads its piece while
// the piece holds bytes of the row that it or the lane before needs.
template <int RUN, bool STREAMED>
__device__ __forceinline__ RowPieces load_row_pieces(const half_bits* src, int remaining) {
  const unsigned long long address = reinterpret_cast<unsigned long long>(src);
  const int shift = static_cast<int>(address & 15);  // bytes, even
  const half_bits* const piece = reinterpret_cast<const half_bits*>(address - shift);
  const bool run_last = threadIdx.x % RUN == RUN - 1;
  return {load_16_or_zero<STREAMED>(piece, 2 * remaining + shift > 0),
          load_16_or_zero<STREAMED>(piece + 8, run_last && 2 * min(remaining, 8) + shift > 16)};
}

// The 8 elements from the pieces, `shift` bytes into the first (src's offset from 16 bytes),
// zeros past the row's end. Every lane of the warp calls it (the pieces pass by shuffles).
template <int RUN>
__device__ __forceinline__ uint4 realign(const RowPieces& pieces, int shift, int remaining) {
  const bool run_last = threadIdx.x % RUN == RUN - 1;
  const uint4& own = pieces.own;
  const unsigned next[4] = {__shfl_down_sync(0xffffffffu, own.x, 1),
                            __shfl_down_sync(0xffffffffu, own.y, 1),
                            __shfl_down_sync(0xffffffffu, own.z, 1),
                            __shfl_down_sync(0xffffffffu, own.w, 1)};
  const unsigned bytes[8] = {own.x, own.y, own.z, own.w,
                             run_last ? pieces.after.x : next[0],
                             run_last ? pieces.after.y : next[1],
                             run_last ? pieces.after.z : next[2],
                             run_last ? pieces.after.w : next[3]};
  // Down by `shift` bytes: whole words by selects (2, then 1), then a half-word by byte_perm;
  // then the half-words past the row's end cleared.
  unsigned by_two[6], by_one[5], out[4];
#pragma unroll
  for (int j = 0; j < 6; ++j) by_two[j] = shift & 8 ? bytes[j + 2] : bytes[j];
#pragma unroll
  for (int j = 0; j < 5; ++j) by_one[j] = shift & 4 ? by_two[j + 1] : by_two[j];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[i] = shift & 2 ? __byte_perm(by_one[i], by_one[i + 1], 0x5432) : by_one[i];
    out[i] &= (2 * i < remaining ? 0xffffu : 0u) | (2 * i + 1 < remaining ? 0xffff0000u : 0u);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

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
