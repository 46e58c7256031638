// Device-side vocabulary shared by the templates: element storage, conversions, async copies
// into shared memory, ldmatrix and the m16n8k16 tensor-core MMA. Named once here so kernels read
// like the algorithm. No CUDA headers are included: NVRTC compiles this in well under a second,
// and cuda_fp16.h / cuda_bf16.h alone would cost more than the kernel.
#pragma once

namespace tilesmith {

// 16-bit floats are carried as raw bits; the tensor cores and PTX cvt do the arithmetic.
typedef unsigned short half_bits;
enum ElementKind { kF16 = 0, kBF16 = 1, kF32 = 2 };

__device__ __forceinline__ float to_float(half_bits bits, int kind) {
  if (kind == kBF16) return __uint_as_float(static_cast<unsigned>(bits) << 16);
  float value;
  asm("cvt.f32.f16 %0, %1;" : "=f"(value) : "h"(bits));
  return value;
}

template <int KIND>
__device__ __forceinline__ half_bits from_float(float value) {
  half_bits bits;
  if (KIND == kBF16)
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  else
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(bits) : "f"(value));
  return bits;
}

// Two floats packed into one 32-bit register of 16-bit elements (low half = first).
template <int KIND>
__device__ __forceinline__ unsigned pack2(float first, float second) {
  unsigned packed;
  if (KIND == kBF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(second), "f"(first));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(second), "f"(first));
  return packed;
}

__device__ __forceinline__ unsigned smem_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// 16-byte global -> shared copy that bypasses registers; `bytes_valid` 0 zero-fills the
// destination (out-of-range tiles) without reading global memory.
__device__ __forceinline__ void cp_async_16(unsigned smem_dst, const void* global_src,
                                            bool valid) {
  int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_dst),
               "l"(global_src), "r"(src_bytes));
}
// The 4-byte form, through L1 (cp.async.cg takes only 16).
__device__ __forceinline__ void cp_async_4(unsigned smem_dst, const void* global_src, bool valid) {
  int src_bytes = valid ? 4 : 0;
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_dst), "l"(global_src),
               "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int PENDING>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(PENDING));
}

// A kernel's read of its inputs: a coherent load, never ld.global.nc (__ldg). Started early
// behind the previous kernel, a kernel reads after wait_for_previous_launch what that kernel
// wrote, and a non-coherent load promises data constant for the whole kernel: ptxas may move it
// above the wait (it moved 4 of 16 weight loads of a decode kernel there: docs/perf/matmul.md
// v67), where it would read what was there before.
template <typename T>
__device__ __forceinline__ T load_input(const T* address) {
  return *address;
}

// Programmatic dependent launch (sm_90+, no-ops before). The launcher starts every kernel of a
// plan early behind the stream's previous kernel (driver::Start::early), so EVERY kernel calls
// wait_for_previous_launch before its first read or write of global memory: it blocks until
// the previous launch has completed and its writes are visible. allow_next_launch lets the next
// launch be scheduled once every CTA of this grid has called it or exited, so that its launch
// and set-up hide behind this grid's tail; it orders nothing (the next one still waits).
__device__ __forceinline__ void allow_next_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_previous_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// The four lanes of a quad (lanes 4i..4i+3) exchange registers so that lane j of the quad ends
// with register j of each lane in quad order: x[q] becomes what lane q held in x[j]. An MMA
// accumulator row is spread over a quad, two columns a lane in each 8-column tile; after this,
// lane j holds 8 contiguous columns of tile j of four, a 16-byte store. Two butterfly steps
// (partners j ^ 2, then j ^ 1), each lane sending two registers a step. Every lane must call it.
__device__ __forceinline__ void quad_transpose(unsigned (&x)[4], int lane) {
  const bool high = lane & 2, odd = lane & 1;
  // Step 1: keep the pair of registers whose index has bit 1 = this lane's, take the partner's.
  const unsigned send0 = high ? x[0] : x[2], send1 = high ? x[1] : x[3];
  const unsigned keep0 = high ? x[2] : x[0], keep1 = high ? x[3] : x[1];
  const unsigned got0 = __shfl_xor_sync(0xffffffffu, send0, 2);
  const unsigned got1 = __shfl_xor_sync(0xffffffffu, send1, 2);
  // z[s][u]: register 2 * bit1(j) + u of the quad's lane with bit 1 = s and bit 0 = bit0(j).
  const unsigned z00 = high ? got0 : keep0, z01 = high ? got1 : keep1;
  const unsigned z10 = high ? keep0 : got0, z11 = high ? keep1 : got1;
  // Step 2: the same over bit 0.
  const unsigned t0 = odd ? z00 : z01, t1 = odd ? z10 : z11;
  const unsigned m0 = odd ? z01 : z00, m1 = odd ? z11 : z10;
  const unsigned q0 = __shfl_xor_sync(0xffffffffu, t0, 1);
  const unsigned q1 = __shfl_xor_sync(0xffffffffu, t1, 1);
  x[0] = odd ? q0 : m0;
  x[1] = odd ? m0 : q0;
  x[2] = odd ? q1 : m1;
  x[3] = odd ? m1 : q1;
}

// 16 bytes to global memory (16-byte aligned), in one instruction.
__device__ __forceinline__ void store_global_16(void* global_dst, const unsigned (&v)[4]) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(global_dst), "r"(v[0]),
               "r"(v[1]), "r"(v[2]), "r"(v[3])
               : "memory");
}

__device__ __forceinline__ void store_shared_16(unsigned smem_dst, unsigned x, unsigned y,
                                                unsigned z, unsigned w) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(smem_dst), "r"(x), "r"(y),
               "r"(z), "r"(w));
}

// Four 8x8 matrices of 16-bit elements from shared memory; lanes 8i..8i+7 address matrix i.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&fragment)[4], unsigned smem_src) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(smem_src));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&fragment)[4], unsigned smem_src) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(fragment[0]), "=r"(fragment[1]), "=r"(fragment[2]), "=r"(fragment[3])
               : "r"(smem_src));
}

// D = A * B + D for one 16x8x16 tile, fp32 accumulation.
template <int KIND>
__device__ __forceinline__ void mma_16x8x16(float (&d)[4], const unsigned (&a)[4],
                                            unsigned b0, unsigned b1) {
  if (KIND == kBF16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// D = A * B + D for one 16x8x8 tile of tf32 (fp32 bits; the MMA ignores the low 13 mantissa
// bits), fp32 accumulation. The fragments hold one fp32 element per register where a 16x8x16
// MMA's hold two 16-bit ones: A (m g, k t), (g+8, t), (g, t+4), (g+8, t+4) and B (k t, n g),
// (t+4, g) for lane 4g+t, which is what ldmatrix gives from K-major rows of fp32.
__device__ __forceinline__ void mma_16x8x8_tf32(float (&d)[4], const unsigned (&a)[4],
                                                unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace tilesmith
