// Where the hardware places the CTAs of a cluster launch (docs/perf/matmul.md v12): each SM's
// GPC, found from clusters of 16 down to 8 CTAs (one GPC holds a cluster), then where each
// cluster of 2 of a 128- and a 132-CTA grid lands (GPC, SMs, start time). One CTA an SM (200 KB
// of shared memory each). Needs no tilesmith build:
//   nvcc -O2 -arch=sm_90a -cudart static -o build/cluster_placement bench/cluster_placement.cu
//   build/cluster_placement            (on the GPU machine, carrying build/)
#include <cstdio>
#include <map>
#include <vector>

#include "probe_common.cuh"

__device__ unsigned long long gtime() {
  unsigned long long r;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(r));
  return r;
}

// Records where and when each CTA started, then holds its SM for `spin` cycles so that the
// grid's CTAs are all resident at once.
__global__ void probe(int* sm, unsigned long long* t, int spin) {
  extern __shared__ char s[];
  if (threadIdx.x == 0) {
    sm[blockIdx.x] = smid();
    t[blockIdx.x] = gtime();
  }
  s[threadIdx.x] = 1;
  long long c0 = clock64();
  while (clock64() - c0 < spin) {
  }
}

// `grid` CTAs of 128 threads in clusters of `cluster`, one CTA an SM.
int launch(int cluster, int grid, int* sm, unsigned long long* t, int spin) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(128);
  cfg.dynamicSmemBytes = 200 * 1024;
  cudaLaunchAttribute a[1];
  a[0].id = cudaLaunchAttributeClusterDimension;
  a[0].val.clusterDim.x = cluster;
  a[0].val.clusterDim.y = 1;
  a[0].val.clusterDim.z = 1;
  cfg.attrs = a;
  cfg.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&cfg, probe, sm, t, spin));
  CHECK(cudaDeviceSynchronize());
  return 0;
}

int main() {
  CHECK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  CHECK(cudaFuncSetAttribute(probe, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  int* sm;
  unsigned long long* t;
  CHECK(cudaMallocManaged(&sm, 4096 * 4));
  CHECK(cudaMallocManaged(&t, 4096 * 8));
  // smid -> GPC label, merged over launches: CTAs of one cluster share a GPC. SMs that no
  // cluster of 8 or more reached print as '?' below.
  std::map<int, int> gpc_of;
  int label = 0;
  for (int cs : {16, 14, 12, 10, 8}) {
    for (int rep = 0; rep < 3; ++rep) {
      if (launch(cs, cs * 12, sm, t, 2000000)) return 1;
      for (int c = 0; c < 12; ++c) {
        int found = -1;
        for (int i = 0; i < cs; ++i)
          if (gpc_of.count(sm[c * cs + i])) found = gpc_of[sm[c * cs + i]];
        if (found < 0) found = label++;
        for (int i = 0; i < cs; ++i) gpc_of[sm[c * cs + i]] = found;
      }
    }
  }
  printf("GPC map (%zu SMs, %d labels):\n", gpc_of.size(), label);
  std::map<int, std::vector<int>> members;
  for (auto [s, g] : gpc_of) members[g].push_back(s);
  for (auto& [g, v] : members) {
    printf(" gpc %d (%zu):", g, v.size());
    for (int s : v) printf(" %d", s);
    printf("\n");
  }
  for (int grid : {128, 132}) {
    if (launch(2, grid, sm, t, 200000)) return 1;
    unsigned long long t0 = ~0ull;
    for (int i = 0; i < grid; ++i) t0 = t[i] < t0 ? t[i] : t0;
    printf("clusters of 2, grid %d: cluster -> gpc(sm) [start us]\n", grid);
    for (int c = 0; c < grid / 2; ++c) {
      int s = sm[2 * c];
      printf(" %2d:%s%d(%d,%d)[%.1f]", c, gpc_of.count(s) ? "" : "?",
             gpc_of.count(s) ? gpc_of[s] : -1, s, sm[2 * c + 1], (t[2 * c] - t0) / 1000.0);
      if (c % 8 == 7) printf("\n");
    }
    printf("\n");
  }
  return 0;
}
