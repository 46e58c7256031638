// What the standalone CUDA probes in bench/ (cluster_placement.cu, l2_partition.cu,
// weight_read_probe.cu) share; each is built alone with nvcc and needs no tilesmith build.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>

// A CUDA runtime call that fails ends the probe (returning 1 from main) with its name and error.
#define CHECK(x)                                     \
  do {                                               \
    cudaError_t e = (x);                             \
    if (e != cudaSuccess) {                          \
      printf("%s: %s\n", #x, cudaGetErrorString(e)); \
      return 1;                                      \
    }                                                \
  } while (0)

// The SM the calling thread runs on.
__device__ __forceinline__ unsigned smid() {
  unsigned r;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(r));
  return r;
}
