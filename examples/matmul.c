/* y = x @ W^T + bias through tilesmith's C ABI: 16 rows of x (bf16) against a 1000 x 4096
 * weight, the decode shape of a linear layer, checked against a double-precision CPU loop.
 *
 *   matmul_c [DATABASE]      (default: $TILESMITH_DB, else the user's cache directory)
 *
 * Exit status: 0 the result matches (or there is no GPU: it says so), 1 it does not, 2 an error. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tilesmith/tilesmith.h>

#include "bf16.h"

enum { M = 16, N = 1000, K = 4096 };


static int cuda_failed(cudaError_t status, const char* what) {
  if (status == cudaSuccess) return 0;
  fprintf(stderr, "matmul_c: %s: %s\n", what, cudaGetErrorString(status));
  return 1;
}

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("matmul_c: skipped: no GPU (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
  }
  tilesmith_runtime* runtime = NULL;
  if (tilesmith_runtime_create(argc > 1 ? argv[1] : NULL, 0, &runtime) != TILESMITH_OK) {
    fprintf(stderr, "matmul_c: %s\n", tilesmith_last_error());
    return 2;
  }

  /* Random inputs, never zeros; the bias has C's type. */
  uint16_t* x = malloc(sizeof(uint16_t) * M * K);
  uint16_t* w = malloc(sizeof(uint16_t) * N * K);
  uint16_t* bias = malloc(sizeof(uint16_t) * N);
  uint16_t* y = malloc(sizeof(uint16_t) * M * N);
  srand(7);
  for (int i = 0; i < M * K; ++i) x[i] = to_bf16((float)rand() / RAND_MAX * 2.f - 1.f);
  for (int i = 0; i < N * K; ++i) w[i] = to_bf16((float)rand() / RAND_MAX * 2.f - 1.f);
  for (int i = 0; i < N; ++i) bias[i] = to_bf16((float)rand() / RAND_MAX);

  void *dx = NULL, *dw = NULL, *dbias = NULL, *dy = NULL;
  if (cuda_failed(cudaMalloc(&dx, sizeof(uint16_t) * M * K), "cudaMalloc") ||
      cuda_failed(cudaMalloc(&dw, sizeof(uint16_t) * N * K), "cudaMalloc") ||
      cuda_failed(cudaMalloc(&dbias, sizeof(uint16_t) * N), "cudaMalloc") ||
      cuda_failed(cudaMalloc(&dy, sizeof(uint16_t) * M * N), "cudaMalloc") ||
      cuda_failed(cudaMemcpy(dx, x, sizeof(uint16_t) * M * K, cudaMemcpyHostToDevice), "upload") ||
      cuda_failed(cudaMemcpy(dw, w, sizeof(uint16_t) * N * K, cudaMemcpyHostToDevice), "upload") ||
      cuda_failed(cudaMemcpy(dbias, bias, sizeof(uint16_t) * N, cudaMemcpyHostToDevice), "upload") ||
      cuda_failed(cudaMemset(dy, 0xff, sizeof(uint16_t) * M * N), "poisoning y"))
    return 2;

  /* x is M x K row-major; W is stored N x K: column-major B. Zero strides: packed. */
  tilesmith_matmul_desc desc;
  memset(&desc, 0, sizeof desc);
  desc.a = dx;
  desc.b = dw;
  desc.c = dy;
  desc.batch = 1;
  desc.m = M;
  desc.n = N;
  desc.k = K;
  desc.dtype = desc.out_dtype = TILESMITH_BF16;
  desc.a_layout = TILESMITH_ROW_MAJOR;
  desc.b_layout = TILESMITH_COLUMN_MAJOR;
  desc.bias = dbias;
  desc.activation = TILESMITH_ACT_NONE;
  char config[256];
  int tuned = 0;
  if (tilesmith_matmul_ex(runtime, &desc, NULL) != TILESMITH_OK ||
      tilesmith_matmul_ex_config(runtime, &desc, config, sizeof config, &tuned) != TILESMITH_OK) {
    fprintf(stderr, "matmul_c: %s\n", tilesmith_last_error());
    return 2;
  }
  if (cuda_failed(cudaMemcpy(y, dy, sizeof(uint16_t) * M * N, cudaMemcpyDeviceToHost), "download"))
    return 2;

  double error = 0, norm = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double expected = from_bf16(bias[j]);
      for (int k = 0; k < K; ++k) expected += from_bf16(x[i * K + k]) * from_bf16(w[j * K + k]);
      const double got = from_bf16(y[i * N + j]);
      error += (got - expected) * (got - expected); /* a NaN (unwritten) fails below */
      norm += expected * expected;
    }
  const double relative = sqrt(error / norm);
  const int ok = relative <= 1e-2; /* bf16 output: 8 bits of mantissa */
  printf("matmul_c: %dx%dx%d bf16 x @ W^T + bias: relative error %.2e (%s), config %s (%s)\n", M,
         N, K, relative, ok ? "ok" : "WRONG", config, tuned ? "tuned" : "not tuned");
  cudaFree(dx);
  cudaFree(dw);
  cudaFree(dbias);
  cudaFree(dy);
  free(x);
  free(w);
  free(bias);
  free(y);
  tilesmith_runtime_destroy(runtime);
  return ok ? 0 : 1;
}
