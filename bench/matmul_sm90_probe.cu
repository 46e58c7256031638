// Standalone probe of templates/matmul/matmul_sm90.cuh on one Hopper GPU: builds the tensor maps
// with the driver (cuTensorMapEncodeTiled), checks every compiled configuration against cuBLAS
// (fp32 accumulate, fp32 output) on odd and large shapes with fresh random normal inputs and a
// poisoned output, then times the chosen configurations beside cuBLAS bf16 (events, L2 flushed
// before every repetition, median). Build and run: scripts/matmul_sm90_probe.sh.
//
// Usage: matmul_sm90_probe [--check-only] [--reps N] [--only I]... [--size M,N,K]...
//        [--headline I] [--nvrtc DIR] [--profile I [--psize S]]   (I: index in all_configs())
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "matmul/matmul_sm90.cuh"

using tilesmith::kBF16;
using tilesmith::kF16;
using tilesmith::kF32;
using tilesmith::MatmulSm90Params;

#define CHECK_CUDA(x)                                                                    \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)
#define CHECK_CU(x)                                                                      \
  do {                                                                                   \
    CUresult r_ = (x);                                                                   \
    if (r_ != CUDA_SUCCESS) {                                                            \
      const char* s_ = nullptr;                                                          \
      cuGetErrorString(r_, &s_);                                                         \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_ ? s_ : "?");     \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)
#define CHECK_CUBLAS(x)                                                                  \
  do {                                                                                   \
    cublasStatus_t s_ = (x);                                                             \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                   \
      std::fprintf(stderr, "%s:%d %s: cublas status %d\n", __FILE__, __LINE__, #x, (int)s_); \
      std::exit(2);                                                                      \
    }                                                                                    \
  } while (0)

// ---- one compiled configuration -----------------------------------------------------------------

struct Config {
  std::string name;
  const void* kernel;
  CUfunction nvrtc_function = nullptr;  // set: the same kernel compiled by NVRTC, driver launch
  int bm, bn, stages, consumers, cluster_m, cluster_n, group_m, kind_in, kind_out;
  int smem_bytes() const {
    return stages * (bm + bn) * 64 * 2 + consumers * 2 * 8192 + 1024 + 16 * stages;
  }
  int threads() const { return (consumers + 1) * 128; }
  int cluster() const { return cluster_m * cluster_n; }
};

template <int BM, int BN, int ST, int NC, int CM, int CN, int GM, int KI, int KO>
Config make_config() {
  Config c;
  char buf[128];
  std::snprintf(buf, sizeof buf, "%dx%d s%d c%d cl%dx%d g%d %s>%s", BM, BN, ST, NC, CM, CN, GM,
                KI == kBF16 ? "bf16" : "f16", KO == kBF16 ? "bf16" : KO == kF16 ? "f16" : "f32");
  c.name = buf;
  c.kernel = reinterpret_cast<const void*>(
      &tilesmith::matmul_sm90<BM, BN, 64, NC, CM, CN, KI, KO, 0, 0, 0, 1>);
  c.bm = BM, c.bn = BN, c.stages = ST, c.consumers = NC, c.cluster_m = CM, c.cluster_n = CN;
  c.group_m = GM, c.kind_in = KI, c.kind_out = KO;
  return c;
}

static std::vector<Config> all_configs() {
  return {
      make_config<128, 256, 4, 2, 1, 1, 8, kBF16, kBF16>(),   // 0: no cluster
      make_config<128, 256, 4, 2, 2, 1, 8, kBF16, kBF16>(),   // 1: cluster along M, B multicast
      make_config<128, 256, 4, 2, 1, 2, 8, kBF16, kBF16>(),   // 2: cluster along N, A multicast
      make_config<256, 128, 4, 2, 2, 1, 8, kBF16, kBF16>(),   // 3
      make_config<256, 128, 4, 2, 1, 2, 8, kBF16, kBF16>(),   // 4
      make_config<128, 128, 6, 2, 2, 1, 8, kBF16, kBF16>(),   // 5
      make_config<128, 192, 4, 2, 2, 1, 8, kBF16, kBF16>(),   // 6
      make_config<192, 128, 4, 3, 2, 1, 8, kBF16, kBF16>(),   // 7: three consumers
      make_config<128, 256, 4, 2, 2, 1, 16, kBF16, kBF16>(),  // 8: wider group
      make_config<128, 256, 4, 2, 2, 1, 8, kF16, kF16>(),     // 9: f16
      make_config<128, 256, 4, 2, 2, 1, 8, kBF16, kF32>(),    // 10: f32 out
      make_config<128, 128, 5, 1, 1, 1, 8, kBF16, kBF16>(),   // 11: one consumer
      make_config<128, 64, 6, 2, 1, 2, 8, kF16, kF32>(),      // 12: narrow tile, f16 -> f32
      make_config<128, 256, 3, 2, 1, 1, 8, kBF16, kBF16>(),   // 13: stage-count sensitivity
      make_config<128, 256, 3, 2, 2, 1, 8, kBF16, kBF16>(),   // 14
      make_config<128, 256, 4, 2, 1, 2, 16, kBF16, kBF16>(),  // 15
      make_config<128, 256, 4, 2, 2, 1, 4, kBF16, kBF16>(),   // 16
      make_config<128, 256, 4, 2, 1, 2, 4, kBF16, kBF16>(),   // 17
      make_config<128, 256, 4, 2, 2, 2, 8, kBF16, kBF16>(),   // 18: 4-CTA cluster
      make_config<256, 128, 4, 2, 2, 2, 8, kBF16, kBF16>(),   // 19
      make_config<128, 128, 6, 2, 1, 1, 8, kBF16, kBF16>(),   // 20: small shapes
      make_config<128, 64, 6, 2, 1, 1, 8, kBF16, kBF16>(),    // 21
  };
}

// ---- device helpers -----------------------------------------------------------------------------

__device__ unsigned hash32(unsigned x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

// Random normal values (Box-Muller on a counter hash) in a rows x cols matrix of leading
// dimension ld; the padding columns get huge values, so a kernel reading them shows.
__global__ void fill_normal(unsigned short* out, long long rows, long long cols, long long ld,
                            unsigned seed, int kind) {
  long long total = rows * ld;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    long long col = i % ld;
    float v;
    if (col >= cols) {
      v = 30000.f;
    } else {
      unsigned h1 = hash32((unsigned)i * 2u + seed * 0x9E3779B9u);
      unsigned h2 = hash32((unsigned)(i >> 31) ^ h1 ^ (seed + 0x85ebca6bu));
      float u1 = (h1 >> 8) * (1.0f / 16777216.0f) + 1e-7f;
      float u2 = (h2 >> 8) * (1.0f / 16777216.0f);
      v = sqrtf(-2.f * logf(u1)) * cosf(6.2831853f * u2);
    }
    out[i] = kind == kBF16 ? tilesmith::from_float<kBF16>(v) : tilesmith::from_float<kF16>(v);
  }
}

__global__ void poison(unsigned* out, long long words) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < words;
       i += (long long)gridDim.x * blockDim.x)
    out[i] = 0xFFFFFFFFu;  // NaN in bf16, f16 and f32
}

// sums[0] += (out - ref)^2, sums[1] += ref^2 over the m x n block; counts[0] += non-finite
// outputs; counts[1] += poison words overwritten outside the block (columns n..ldc, rows m..m+1).
__global__ void compare(const void* out, int kind_out, const float* ref, long long m, long long n,
                        long long ldc, long long ldr, double* sums, unsigned long long* counts) {
  double d2 = 0, r2 = 0;
  unsigned long long bad = 0, stray = 0;
  long long total = (m + 2) * ldc;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
       i += (long long)gridDim.x * blockDim.x) {
    long long r = i / ldc, c = i % ldc;
    bool inside = r < m && c < n;
    float v;
    bool poisoned;
    if (kind_out == kF32) {
      unsigned bits = static_cast<const unsigned*>(out)[i];
      v = __uint_as_float(bits);
      poisoned = bits == 0xFFFFFFFFu;
    } else {
      unsigned short bits = static_cast<const unsigned short*>(out)[i];
      v = tilesmith::to_float(bits, kind_out);
      poisoned = bits == 0xFFFFu;
    }
    if (inside) {
      if (!isfinite(v)) {
        ++bad;
        continue;
      }
      double x = ref[r * ldr + c];
      d2 += (v - x) * (v - x);
      r2 += x * x;
    } else if (!poisoned) {
      ++stray;
    }
  }
  atomicAdd(&sums[0], d2);
  atomicAdd(&sums[1], r2);
  atomicAdd(&counts[0], bad);
  atomicAdd(&counts[1], stray);
}

// ---- host side ----------------------------------------------------------------------------------

static CUtensorMap encode_2d(const void* base, int kind, unsigned long long inner,
                             unsigned long long outer, unsigned long long row_stride_elems,
                             unsigned box_inner, unsigned box_outer) {
  CUtensorMap map;
  int bytes = kind == kF32 ? 4 : 2;
  cuuint64_t dims[2] = {inner, outer};
  cuuint64_t strides[1] = {row_stride_elems * bytes};
  cuuint32_t box[2] = {box_inner, box_outer};
  cuuint32_t elem_strides[2] = {1, 1};
  CHECK_CU(cuTensorMapEncodeTiled(
      &map,
      kind == kBF16  ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
      : kind == kF16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                     : CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
      2,
      const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  return map;
}

static int g_sms = 0;
static bool g_force_direct = false;  // C through plain stores even where a C map is possible

struct Launch {
  dim3 grid, block;
  int smem;
  MatmulSm90Params params;
};

// persistent = false: one cluster per work unit (the v1 shape of the launch).
static Launch prepare(const Config& cfg, const void* a, const void* b, void* c, int m, int n, int k,
                      int lda, int ldb, int ldc, bool persistent) {
  Launch l;
  std::memset(&l.params, 0, sizeof l.params);
  CUtensorMap am = encode_2d(a, cfg.kind_in, k, m, lda, 64, cfg.bm / cfg.cluster_n);
  CUtensorMap bmap = encode_2d(b, cfg.kind_in, n, k, ldb, 64, 64 / cfg.cluster_m);
  static_assert(sizeof(CUtensorMap) == sizeof(tilesmith::TensorMap), "tensor map size");
  std::memcpy(&l.params.a_map, &am, sizeof am);
  std::memcpy(&l.params.b_map, &bmap, sizeof bmap);
  l.params.c = c;
  l.params.m = m, l.params.n = n, l.params.k = k, l.params.ldc = ldc;
  l.params.group_m = cfg.group_m;
  l.params.stages = cfg.stages;
  int out_bytes = cfg.kind_out == kF32 ? 4 : 2;
  if (!g_force_direct && (size_t)ldc * out_bytes % 16 == 0 && (size_t)c % 16 == 0) {
    CUtensorMap cm = encode_2d(c, cfg.kind_out, n, m, ldc, 128 / out_bytes, 64);
    std::memcpy(&l.params.c_map, &cm, sizeof cm);
    l.params.c_store_tma = 1;
  }
  long long units = (long long)((m + cfg.bm * cfg.cluster_m - 1) / (cfg.bm * cfg.cluster_m)) *
                    ((n + cfg.bn * cfg.cluster_n - 1) / (cfg.bn * cfg.cluster_n));
  l.smem = cfg.smem_bytes();
  l.block = dim3(cfg.threads());
  if (cfg.nvrtc_function)
    CHECK_CU(cuFuncSetAttribute(cfg.nvrtc_function,
                                CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, l.smem));
  else
    CHECK_CUDA(cudaFuncSetAttribute(cfg.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    l.smem));
  long long clusters = units;
  if (persistent) {
    cudaLaunchConfig_t lc = {};
    lc.gridDim = dim3(cfg.cluster() * 64);
    lc.blockDim = l.block;
    lc.dynamicSmemBytes = l.smem;
    int max_clusters = 0;
    if (cfg.nvrtc_function ||
        cudaOccupancyMaxActiveClusters(&max_clusters, cfg.kernel, &lc) != cudaSuccess ||
        max_clusters <= 0) {
      cudaGetLastError();
      max_clusters = g_sms / cfg.cluster();
    }
    clusters = std::min<long long>(units, max_clusters);
  }
  l.grid = dim3((unsigned)std::max<long long>(1, clusters) * cfg.cluster());
  return l;
}

static void launch(const Config& cfg, Launch& l, cudaStream_t stream) {
  void* args[] = {&l.params};
  if (cfg.nvrtc_function)  // plain cuLaunchKernel: the cluster shape is in the cubin
    CHECK_CU(cuLaunchKernel(cfg.nvrtc_function, l.grid.x, 1, 1, l.block.x, 1, 1, l.smem, stream,
                            args, nullptr));
  else
    CHECK_CUDA(cudaLaunchKernel(cfg.kernel, l.grid, l.block, args, l.smem, stream));
}

static cudaDataType cuda_type(int kind) {
  return kind == kBF16 ? CUDA_R_16BF : kind == kF16 ? CUDA_R_16F : CUDA_R_32F;
}

// Row-major C[m x n] = A[m x k] B[k x n] as column-major C^T = B^T A^T.
static void cublas_matmul(cublasHandle_t h, int kind_in, int kind_out, const void* a,
                          const void* b, void* c, int m, int n, int k, int lda, int ldb,
                          int ldc) {
  float one = 1.f, zero = 0.f;
  CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, cuda_type(kind_in), ldb,
                            a, cuda_type(kind_in), lda, &zero, c, cuda_type(kind_out), ldc,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

static int round8(int x) { return (x + 7) / 8 * 8; }

struct Check {
  double rel = 0;
  unsigned long long nonfinite = 0, stray = 0;
  bool ok = false;
};

static unsigned g_seed = 1;

static Check check_one(const Config& cfg, cublasHandle_t h, int m, int n, int k, int ldc_pad,
                       bool persistent) {
  int lda = round8(k), ldb = round8(n), ldc = n + ldc_pad;
  size_t a_elems = (size_t)m * lda, b_elems = (size_t)k * ldb, c_elems = (size_t)(m + 2) * ldc;
  int out_bytes = cfg.kind_out == kF32 ? 4 : 2;
  void *a, *b, *c;
  float* ref;
  double* sums;
  unsigned long long* counts;
  CHECK_CUDA(cudaMalloc(&a, a_elems * 2));
  CHECK_CUDA(cudaMalloc(&b, b_elems * 2));
  CHECK_CUDA(cudaMalloc(&c, (c_elems * out_bytes + 3) / 4 * 4));
  CHECK_CUDA(cudaMalloc(&ref, (size_t)m * n * 4));
  CHECK_CUDA(cudaMalloc(&sums, 16));
  CHECK_CUDA(cudaMalloc(&counts, 16));
  fill_normal<<<1024, 256>>>((unsigned short*)a, m, k, lda, g_seed++, cfg.kind_in);
  fill_normal<<<1024, 256>>>((unsigned short*)b, k, n, ldb, g_seed++, cfg.kind_in);
  poison<<<1024, 256>>>((unsigned*)c, (c_elems * out_bytes + 3) / 4);
  CHECK_CUDA(cudaMemset(sums, 0, 16));
  CHECK_CUDA(cudaMemset(counts, 0, 16));
  CHECK_CUDA(cudaGetLastError());
  cublas_matmul(h, cfg.kind_in, kF32, a, b, ref, m, n, k, lda, ldb, n);
  Launch l = prepare(cfg, a, b, c, m, n, k, lda, ldb, ldc, persistent);
  launch(cfg, l, 0);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  compare<<<1024, 256>>>(c, cfg.kind_out, ref, m, n, ldc, n, sums, counts);
  CHECK_CUDA(cudaGetLastError());
  double hs[2];
  unsigned long long hc[2];
  CHECK_CUDA(cudaMemcpy(hs, sums, 16, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hc, counts, 16, cudaMemcpyDeviceToHost));
  Check r;
  r.rel = hs[1] > 0 ? std::sqrt(hs[0] / hs[1]) : std::sqrt(hs[0]);
  r.nonfinite = hc[0], r.stray = hc[1];
  double tol = cfg.kind_out == kF32 ? 1e-2 : 1e-2;
  r.ok = r.nonfinite == 0 && r.stray == 0 && r.rel < tol && std::isfinite(r.rel);
  cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(ref), cudaFree(sums), cudaFree(counts);
  return r;
}

struct Timing {
  float ms, spread_lo, spread_hi;
};

template <class F>
static Timing time_it(F&& run, void* flush, size_t flush_bytes, int reps) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) run();
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaMemsetAsync(flush, i & 0xFF, flush_bytes));
    CHECK_CUDA(cudaEventRecord(e0));
    run();
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float ms;
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  CHECK_CUDA(cudaGetLastError());
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], t[t.size() / 10], t[t.size() * 9 / 10]};
}

// Times `mine` and `reference` in alternation (flush, one, flush, the other, ...), so both see the
// same clocks: under a sustained load the H100's clock falls as it heats (power limit), and a
// kernel timed after a long series of others runs slower than the same kernel timed first.
template <class F, class G>
static void time_pair(F&& mine, G&& reference, void* flush, size_t flush_bytes, int reps,
                      Timing& t_mine, Timing& t_ref) {
  cudaEvent_t e[4];
  for (auto& x : e) CHECK_CUDA(cudaEventCreate(&x));
  for (int i = 0; i < 3; ++i) mine(), reference();
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<float> a, b;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaMemsetAsync(flush, i & 0xFF, flush_bytes));
    CHECK_CUDA(cudaEventRecord(e[0]));
    mine();
    CHECK_CUDA(cudaEventRecord(e[1]));
    CHECK_CUDA(cudaMemsetAsync(flush, (i + 1) & 0xFF, flush_bytes));
    CHECK_CUDA(cudaEventRecord(e[2]));
    reference();
    CHECK_CUDA(cudaEventRecord(e[3]));
    CHECK_CUDA(cudaEventSynchronize(e[3]));
    float x, y;
    CHECK_CUDA(cudaEventElapsedTime(&x, e[0], e[1]));
    CHECK_CUDA(cudaEventElapsedTime(&y, e[2], e[3]));
    a.push_back(x), b.push_back(y);
  }
  CHECK_CUDA(cudaGetLastError());
  for (auto& x : e) cudaEventDestroy(x);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  t_mine = {a[a.size() / 2], a[a.size() / 10], a[a.size() * 9 / 10]};
  t_ref = {b[b.size() / 2], b[b.size() / 10], b[b.size() * 9 / 10]};
}

int main(int argc, char** argv) {
  bool check_only = false;
  const char* nvrtc_dir = nullptr;
  int headline = -1;  // timed alone before cuBLAS at each shape (the GPU at its coolest)
  std::vector<std::vector<int>> size_list;  // --size M,N,K (repeatable): the timed shapes
  int reps = 30, profile = -1, profile_size = 4096;
  std::vector<int> only;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--check-only")) check_only = true;
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only.push_back(std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--profile") && i + 1 < argc) profile = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--psize") && i + 1 < argc) profile_size = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--nvrtc") && i + 1 < argc) nvrtc_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--headline") && i + 1 < argc) headline = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--size") && i + 1 < argc) {
      std::vector<int> v(3, 0);
      std::sscanf(argv[++i], "%d,%d,%d", &v[0], &v[1], &v[2]);
      size_list.push_back(v);
    }
  }
  CHECK_CU(cuInit(0));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  g_sms = prop.multiProcessorCount;
  std::printf("device: %s, %d SMs, smem/block optin %zu, L2 %d MB\n", prop.name, g_sms,
              prop.sharedMemPerBlockOptin, prop.l2CacheSize >> 20);
  cublasHandle_t h;
  CHECK_CUBLAS(cublasCreate(&h));
  std::vector<Config> configs = all_configs();
  if (profile >= 100) {  // cuBLAS bf16 at psize^3, for ncu
    int m = profile_size, n = m, k = m;
    void *a, *b, *c;
    CHECK_CUDA(cudaMalloc(&a, (size_t)m * k * 2));
    CHECK_CUDA(cudaMalloc(&b, (size_t)k * n * 2));
    CHECK_CUDA(cudaMalloc(&c, (size_t)m * n * 2));
    fill_normal<<<1024, 256>>>((unsigned short*)a, m, k, k, 1, kBF16);
    fill_normal<<<1024, 256>>>((unsigned short*)b, k, n, n, 2, kBF16);
    for (int i = 0; i < 3; ++i) cublas_matmul(h, kBF16, kBF16, a, b, c, m, n, k, k, n, n);
    CHECK_CUDA(cudaDeviceSynchronize());
    return 0;
  }
  if (profile >= 0) {  // one config at psize^3, launched 3 times, for ncu
    const Config& cfg = configs[profile];
    int m = profile_size, n = m, k = m;
    void *a, *b, *c;
    CHECK_CUDA(cudaMalloc(&a, (size_t)m * k * 2));
    CHECK_CUDA(cudaMalloc(&b, (size_t)k * n * 2));
    CHECK_CUDA(cudaMalloc(&c, (size_t)m * n * 4));
    fill_normal<<<1024, 256>>>((unsigned short*)a, m, k, k, 1, cfg.kind_in);
    fill_normal<<<1024, 256>>>((unsigned short*)b, k, n, n, 2, cfg.kind_in);
    Launch l = prepare(cfg, a, b, c, m, n, k, k, n, n, true);
    std::printf("profile %s grid %u block %u smem %d\n", cfg.name.c_str(), l.grid.x, l.block.x, l.smem);
    for (int i = 0; i < 3; ++i) launch(cfg, l, 0);
    CHECK_CUDA(cudaDeviceSynchronize());
    return 0;
  }

  // ---- correctness: every config, odd and large shapes, persistent and one-cluster-per-unit ----
  struct Shape {
    int m, n, k, ldc_pad;
  };
  std::vector<Shape> shapes = {{1, 1, 8, 0},      {17, 33, 64, 5},      {1000, 1000, 1000, 0},
                               {127, 4104, 520, 3}, {16, 4096, 4096, 0}, {1, 4096, 4096, 8},
                               {4096, 4096, 4096, 0}, {300, 200, 72, 1}, {2048, 2048, 2048, 0},
                               {333, 1000, 256, 8},   {17, 40, 64, 0}};
  int failures = 0;
  std::printf("\n== correctness (rel err vs cuBLAS fp32, tol 1e-2) ==\n");
  for (size_t ci = 0; ci < configs.size(); ++ci) {
    if (!only.empty() && std::find(only.begin(), only.end(), (int)ci) == only.end()) continue;
    const Config& cfg = configs[ci];
    std::printf("[%2zu] %-34s smem %6d grid-rule cluster %d\n", ci, cfg.name.c_str(),
                cfg.smem_bytes(), cfg.cluster());
    if (cfg.smem_bytes() > (int)prop.sharedMemPerBlockOptin) {
      std::printf("    skipped: shared memory over the limit\n");
      continue;
    }
    for (const Shape& s : shapes) {
      for (int pers = 1; pers >= 0; --pers) {
        for (int direct = 0; direct < 2; ++direct) {
          // Plain stores are checked where the C map would be used too, on the small shapes.
          if (direct && (s.m * (long long)s.n > 1024LL * 1024 || !pers)) continue;
          if (!pers && s.m * (long long)s.n > 4096LL * 4096) continue;
          g_force_direct = direct;
          Check r = check_one(cfg, h, s.m, s.n, s.k, s.ldc_pad, pers);
          g_force_direct = false;
          if (!r.ok) ++failures;
          bool tma_c = !direct && (size_t)(s.n + s.ldc_pad) * (cfg.kind_out == kF32 ? 4 : 2) % 16 == 0;
          std::printf("    %5d x %5d x %5d ldc+%d %-8s %-6s rel %.3e nonfinite %llu stray %llu %s\n",
                      s.m, s.n, s.k, s.ldc_pad, pers ? "persist" : "per-unit",
                      tma_c ? "C:tma" : "C:st", r.rel, r.nonfinite, r.stray, r.ok ? "ok" : "FAIL");
        }
      }
    }
    std::fflush(stdout);
  }
  // The NVRTC builds (bench/matmul_sm90_nvrtc.py --out DIR), loaded as cubins and launched with
  // cuLaunchKernel, as the tilesmith runtime will: same checks on a few shapes.
  if (nvrtc_dir) {
    CHECK_CUDA(cudaFree(0));  // the primary context, current for the driver API too
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      std::string base = std::string(nvrtc_dir) + "/cfg" + std::to_string(ci);
      FILE* f = std::fopen((base + ".name").c_str(), "r");
      if (!f) continue;
      char lowered[512] = {0};
      if (!std::fgets(lowered, sizeof lowered, f)) lowered[0] = 0;
      std::fclose(f);
      lowered[std::strcspn(lowered, "\r\n")] = 0;
      CUmodule module;
      CHECK_CU(cuModuleLoad(&module, (base + ".cubin").c_str()));
      Config cfg = configs[ci];
      CHECK_CU(cuModuleGetFunction(&cfg.nvrtc_function, module, lowered));
      cfg.name += " (NVRTC)";
      for (const Shape& s : {shapes[1], shapes[2], shapes[3], shapes[6], shapes[9]}) {
        Check r = check_one(cfg, h, s.m, s.n, s.k, s.ldc_pad, true);
        if (!r.ok) ++failures;
        std::printf("[%2zu] %-40s %5d x %5d x %5d ldc+%d rel %.3e nonfinite %llu stray %llu %s\n",
                    ci, cfg.name.c_str(), s.m, s.n, s.k, s.ldc_pad, r.rel, r.nonfinite, r.stray,
                    r.ok ? "ok" : "FAIL");
      }
    }
  }
  // 8192^3 for the headline configs only (cost).
  for (int ci : {1, 0}) {
    if (!only.empty() && std::find(only.begin(), only.end(), ci) == only.end()) continue;
    Check r = check_one(configs[ci], h, 8192, 8192, 8192, 0, true);
    if (!r.ok) ++failures;
    std::printf("[%2d] 8192^3 persist rel %.3e nonfinite %llu stray %llu %s\n", ci, r.rel,
                r.nonfinite, r.stray, r.ok ? "ok" : "FAIL");
  }
  std::printf("correctness failures: %d\n", failures);
  if (check_only) return failures ? 1 : 0;

  // ---- timing ----
  size_t flush_bytes = 256u << 20;
  void* flush;
  CHECK_CUDA(cudaMalloc(&flush, flush_bytes));
  struct Row {
    std::string shape, config;
    float ms, lo, hi, cublas_ms;
    double tflops, rel;
  };
  std::vector<Row> rows;
  std::vector<std::vector<int>> sizes = {{4096, 4096, 4096}, {8192, 8192, 8192}, {4096, 14336, 4096}};
  if (!size_list.empty()) sizes = size_list;
  for (auto& sz : sizes) {
    int m = sz[0], n = sz[1], k = sz[2];
    void *a, *b, *c, *cb;
    float* ref;
    double* sums;
    unsigned long long* counts;
    CHECK_CUDA(cudaMalloc(&a, (size_t)m * k * 2));
    CHECK_CUDA(cudaMalloc(&b, (size_t)k * n * 2));
    CHECK_CUDA(cudaMalloc(&c, (size_t)(m + 2) * n * 4));
    CHECK_CUDA(cudaMalloc(&ref, (size_t)m * n * 4));
    CHECK_CUDA(cudaMalloc(&sums, 16));
    CHECK_CUDA(cudaMalloc(&counts, 16));
    CHECK_CUDA(cudaMalloc(&cb, (size_t)m * n * 2));
    char shape[64];
    std::snprintf(shape, sizeof shape, "%dx%dx%d", m, n, k);
    double flops = 2.0 * m * n * k;
    for (int kind : {kBF16}) {
      fill_normal<<<1024, 256>>>((unsigned short*)a, m, k, k, g_seed++, kind);
      fill_normal<<<1024, 256>>>((unsigned short*)b, k, n, n, g_seed++, kind);
      if (headline >= 0) {
        const Config& cfg = configs[headline];
        Launch l = prepare(cfg, a, b, c, m, n, k, k, n, n, true);
        Timing t = time_it([&] { launch(cfg, l, 0); }, flush, flush_bytes, reps);
        rows.push_back({shape, cfg.name + " alone", t.ms, t.spread_lo, t.spread_hi, 0,
                        flops / t.ms / 1e9, NAN});
      }
      Timing tc = time_it([&] { cublas_matmul(h, kBF16, kBF16, a, b, cb, m, n, k, k, n, n); },
                          flush, flush_bytes, reps);
      if (headline >= 0) rows.back().cublas_ms = tc.ms;
      cublas_matmul(h, kBF16, kF32, a, b, ref, m, n, k, k, n, n);
      rows.push_back({shape, "cuBLAS bf16", tc.ms, tc.spread_lo, tc.spread_hi, tc.ms,
                      flops / tc.ms / 1e9, 0});
    }
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      if (!only.empty() && std::find(only.begin(), only.end(), (int)ci) == only.end()) continue;
      const Config& cfg = configs[ci];
      if (cfg.kind_in != kBF16) continue;
      if (cfg.smem_bytes() > (int)prop.sharedMemPerBlockOptin) continue;
      for (int variant = 0; variant < 3; ++variant) {
        // 0: persistent, C by TMA; 1: one cluster per unit (v1's launch); 2: plain C stores
        bool pers = variant != 1;
        if (variant > 0 && ci != 0 && ci != 1) continue;
        g_force_direct = variant == 2;
        Launch l = prepare(cfg, a, b, c, m, n, k, k, n, n, pers);
        g_force_direct = false;
        int out_bytes = cfg.kind_out == kF32 ? 4 : 2;
        poison<<<1024, 256>>>((unsigned*)c, (size_t)(m + 2) * n * out_bytes / 4);
        Timing t, tc;
        time_pair([&] { launch(cfg, l, 0); },
                  [&] { cublas_matmul(h, kBF16, kBF16, a, b, cb, m, n, k, k, n, n); }, flush,
                  flush_bytes, reps, t, tc);
        // The output of the last timed repetition, checked like the correctness pass.
        CHECK_CUDA(cudaMemset(sums, 0, 16));
        CHECK_CUDA(cudaMemset(counts, 0, 16));
        compare<<<1024, 256>>>(c, cfg.kind_out, ref, m, n, n, n, sums, counts);
        double hs[2];
        unsigned long long hc[2];
        CHECK_CUDA(cudaMemcpy(hs, sums, 16, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(hc, counts, 16, cudaMemcpyDeviceToHost));
        double rel = std::sqrt(hs[0] / hs[1]);
        if (hc[0] || hc[1] || !(rel < 1e-2)) ++failures;
        std::string tag = variant == 1 ? " per-unit" : variant == 2 ? " C:st" : "";
        rows.push_back({shape, cfg.name + tag, t.ms, t.spread_lo,
                        t.spread_hi, tc.ms, flops / t.ms / 1e9, hc[0] || hc[1] ? NAN : rel});
      }
    }
    cudaFree(a), cudaFree(b), cudaFree(c), cudaFree(cb), cudaFree(ref), cudaFree(sums);
    cudaFree(counts);
  }
  std::printf("\n== timing (median of %d, L2 flushed before each, each config alternated with "
              "cuBLAS, whose median in the same loop is the cuBLAS column; p10-p90 in brackets; "
              "the cuBLAS rows are cuBLAS timed alone first) ==\n", reps);
  std::printf("%-16s %-36s %8s %17s %8s %7s %7s %9s\n", "shape", "config", "ms", "p10-p90",
              "TFLOP/s", "cuBLAS", "ratio", "rel err");
  for (auto& r : rows)
    std::printf("%-16s %-36s %8.4f [%7.4f-%7.4f] %8.1f %7.4f %6.3fx %9.2e\n", r.shape.c_str(),
                r.config.c_str(), r.ms, r.lo, r.hi, r.tflops, r.cublas_ms, r.cublas_ms / r.ms,
                r.rel);
  std::printf("correctness failures: %d\n", failures);
  return failures ? 1 : 0;
}
