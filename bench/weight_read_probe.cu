// How fast a weight (N x K bf16, rows of K) streams from DRAM in the access shapes a row reader
// can take, with nothing else in the kernel: each kernel only loads (16 bytes a lane, L1 not
// allocated) and folds what it read into a value it never stores. The shape that decides it
// (docs/perf/matmul.md v36): how many contiguous bytes of one row a warp's load reads.
//   gemv R:       a CTA of 512 threads reads R whole rows, one row 8 KB a load of the CTA
//                 (each warp 512 contiguous bytes), n / R CTAs (matmul_gemv.cuh's access).
//   pattern C W L: a CTA of C rows and W warps splitting K (the decode template's grid); a
//                 warp's load reads 32 / L rows, L x 16 contiguous bytes of each (L = 4: 8 rows
//                 of 64 bytes, each lane its own MMA fragment; L = 8: 4 rows of whole 128-byte
//                 lines; L = 32: one row, 512 bytes); warps take the spans in turn, U in flight.
//   window C W:   a persistent grid whose CTAs take C-row groups in order, so that at any time
//                 the machine reads a contiguous window of rows (64-byte pieces as decode).
// Times are medians of 20 launches after 5, each after a 256 MB memset (L2 holds nothing of
// the weight), events around the launch; "x floor" is against the weight's bytes at the rate
// of a plain copy kernel timed the same way (its launch included, so the ratios compare the
// shapes, not the absolute rate: bench/read_floor.py times the floor against torch's copy).
// Needs no tilesmith build:
//   nvcc -O3 -arch=sm_90a -cudart static -o build/weight_read_probe bench/weight_read_probe.cu
//   build/weight_read_probe            (on the GPU machine, carrying build/)
#include <algorithm>
#include <cstdio>
#include <vector>

#include "probe_common.cuh"

__device__ __forceinline__ uint4 load_streamed(const unsigned short* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ unsigned fold(uint4 v) { return v.x ^ v.y ^ v.z ^ v.w; }
// Never true for the memset weight; keeps the loads alive.
__device__ __forceinline__ void keep(unsigned acc, unsigned* out) {
  if (acc == 0x12345678u) out[0] = acc;
}

template <int R>
__global__ void __launch_bounds__(512) gemv(const unsigned short* w, int k, unsigned* out) {
  unsigned acc = 0;
  const long long row0 = static_cast<long long>(blockIdx.x) * R;
  for (int k0 = threadIdx.x * 8; k0 < k; k0 += 512 * 8) {
    uint4 v[R];
#pragma unroll
    for (int r = 0; r < R; ++r) v[r] = load_streamed(w + (row0 + r) * k + k0);
#pragma unroll
    for (int r = 0; r < R; ++r) acc ^= fold(v[r]);
  }
  keep(acc, out);
}

template <int COLS, int WARPS, int LANES, int U>
__global__ void __launch_bounds__(WARPS * 32) pattern(const unsigned short* w, int k, unsigned* out) {
  constexpr int ROWS_A_LOAD = 32 / LANES, SPAN = LANES * 8, LOADS = COLS / ROWS_A_LOAD;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const long long row0 = static_cast<long long>(blockIdx.x) * COLS + lane / LANES;
  const int unit = lane % LANES, spans = k / SPAN;
  unsigned acc = 0;
  for (int s0 = warp; s0 < spans; s0 += U * WARPS) {
    uint4 v[U][LOADS];
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int i = 0; i < LOADS; ++i) {
        const int s = s0 + u * WARPS;
        v[u][i] = s < spans ? load_streamed(w + (row0 + i * ROWS_A_LOAD) * k + s * SPAN + unit * 8)
                            : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int i = 0; i < LOADS; ++i) acc ^= fold(v[u][i]);
  }
  keep(acc, out);
}

template <int COLS, int WARPS, int U>
__global__ void __launch_bounds__(WARPS * 32) window(const unsigned short* w, int n, int k, unsigned* out) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, chunks = k / 32;
  unsigned acc = 0;
  for (int g = blockIdx.x; g < n / COLS; g += gridDim.x) {
    const long long row0 = static_cast<long long>(g) * COLS + lane / 4;
    for (int c0 = warp; c0 < chunks; c0 += U * WARPS) {
      uint4 v[U][COLS / 8];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int t = 0; t < COLS / 8; ++t) {
          const int c = c0 + u * WARPS;
          v[u][t] = c < chunks ? load_streamed(w + (row0 + t * 8) * k + c * 32 + (lane % 4) * 8)
                               : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int t = 0; t < COLS / 8; ++t) acc ^= fold(v[u][t]);
    }
  }
  keep(acc, out);
}

__global__ void copy(const uint4* from, uint4* to, long long n) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    to[i] = from[i];
}

int main() {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t flush_bytes = 256ull << 20;
  char* flush = nullptr;
  unsigned* out = nullptr;
  CHECK(cudaMalloc(&flush, flush_bytes));
  CHECK(cudaMalloc(&out, 64));
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  struct Shape { int n, k; };
  for (const Shape shape : {Shape{4096, 4096}, Shape{14336, 4096}, Shape{4096, 14336}}) {
    const int n = shape.n, k = shape.k;
    const size_t bytes = static_cast<size_t>(n) * k * 2;
    unsigned short* w = nullptr;
    uint4* copied = nullptr;
    CHECK(cudaMalloc(&w, bytes));
    CHECK(cudaMalloc(&copied, bytes));
    CHECK(cudaMemset(w, 1, bytes));
    cudaError_t failed = cudaSuccess;
    auto median_us = [&](auto launch) {
      std::vector<float> times;
      for (int i = 0; i < 25 && failed == cudaSuccess; ++i) {
        cudaMemsetAsync(flush, i, flush_bytes);
        cudaEventRecord(start);
        launch();
        cudaEventRecord(stop);
        failed = cudaEventSynchronize(stop);
        if (failed == cudaSuccess) failed = cudaGetLastError();
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        if (i >= 5) times.push_back(ms * 1000);
      }
      if (times.empty()) return 0.f;
      std::sort(times.begin(), times.end());
      return times[times.size() / 2];
    };
    const float copy_us = median_us([&] { copy<<<sms * 8, 512>>>(reinterpret_cast<const uint4*>(w), copied, bytes / 16); });
    const double floor_us = copy_us / 2;  // the weight's bytes once, at the copy's rate
    printf("\nweight %dx%d (%.1f MB): copy %.1f us (%.0f GB/s); read floor %.2f us\n", n, k, bytes / 1e6,
           copy_us, 2.0 * bytes / copy_us / 1e3, floor_us);
    auto report = [&](const char* name, float us) { printf("  %-28s %7.2f us  x floor %.2f\n", name, us, us / floor_us); };
    report("gemv 2 rows", median_us([&] { gemv<2><<<n / 2, 512>>>(w, k, out); }));
    report("gemv 16 rows", median_us([&] { gemv<16><<<n / 16, 512>>>(w, k, out); }));
    report("pattern 16c 8w 64B U2", median_us([&] { pattern<16, 8, 4, 2><<<n / 16, 256>>>(w, k, out); }));
    report("pattern 16c 8w 128B U2", median_us([&] { pattern<16, 8, 8, 2><<<n / 16, 256>>>(w, k, out); }));
    report("pattern 16c 8w 256B U2", median_us([&] { pattern<16, 8, 16, 2><<<n / 16, 256>>>(w, k, out); }));
    report("pattern 16c 8w 512B U1", median_us([&] { pattern<16, 8, 32, 1><<<n / 16, 256>>>(w, k, out); }));
    report("pattern 16c 16w 512B U1", median_us([&] { pattern<16, 16, 32, 1><<<n / 16, 512>>>(w, k, out); }));
    report("pattern 8c 8w 512B U2", median_us([&] { pattern<8, 8, 32, 2><<<n / 8, 256>>>(w, k, out); }));
    report("pattern 32c 8w 128B U2", median_us([&] { pattern<32, 8, 8, 2><<<n / 32, 256>>>(w, k, out); }));
    report("window 8c 16w 64B U8", median_us([&] { window<8, 16, 8><<<sms, 512>>>(w, n, k, out); }));
    report("window 16c 8w 64B U4 x2", median_us([&] { window<16, 8, 4><<<2 * sms, 256>>>(w, n, k, out); }));
    CHECK(failed);
    CHECK(cudaFree(w));
    CHECK(cudaFree(copied));
  }
  return 0;
}
