/* Every op of every family through tilesmith's C ABI, each checked against a double-precision
 * CPU loop: the row ops (softmax, layernorm, rmsnorm, the fused norm + activation + residual) and
 * their backwards, multi_sum, and grouped-query causal attention with its backward (matmul_c
 * runs the matmul).
 *
 *   every_op_c [DATABASE]      (default: $TILESMITH_DB, else the user's cache directory)
 *
 * Exit status: 0 every result matches (or there is no GPU: it says so), 1 one does not, 2 an
 * error. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tilesmith/tilesmith.h>

#include "bf16.h"

static double uniform(double low, double high) { return low + (high - low) * rand() / RAND_MAX; }

static int failed_calls = 0;
static void expect_ok(int status, const char* what) {
  if (status == TILESMITH_OK) return;
  fprintf(stderr, "every_op_c: %s: %s\n", what, tilesmith_last_error());
  failed_calls = 1;
}
/* Device memory of `bytes`, poisoned (all bits set: NaN) or filled from `host`. */
static void* device(const void* host, size_t bytes) {
  void* pointer = NULL;
  if (cudaMalloc(&pointer, bytes) != cudaSuccess) {
    fprintf(stderr, "every_op_c: cudaMalloc of %zu bytes failed\n", bytes);
    exit(2);
  }
  if (host)
    cudaMemcpy(pointer, host, bytes, cudaMemcpyHostToDevice);
  else
    cudaMemset(pointer, 0xff, bytes);
  return pointer;
}
static uint16_t* random_bf16(size_t n, double low, double high) {
  uint16_t* values = malloc(n * sizeof(uint16_t));
  for (size_t i = 0; i < n; ++i) values[i] = to_bf16((float)uniform(low, high));
  return values;
}
/* Relative Frobenius error of the device's bf16 (or fp32) values against `expected`; prints the
 * line; 1 when within `tolerance` (a NaN, an unwritten element, fails). */
static int agrees(const char* what, const void* got_device, int is_f32, const double* expected,
                  size_t n, double tolerance) {
  void* got = malloc(n * (is_f32 ? 4 : 2));
  cudaMemcpy(got, got_device, n * (is_f32 ? 4 : 2), cudaMemcpyDeviceToHost);
  double error = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    const double value = is_f32 ? ((const float*)got)[i] : from_bf16(((const uint16_t*)got)[i]);
    error += (value - expected[i]) * (value - expected[i]);
    norm += expected[i] * expected[i];
  }
  free(got);
  const double relative = sqrt(error / norm);
  const int ok = relative <= tolerance;
  printf("every_op_c: %-40s relative error %.2e (%s)\n", what, relative, ok ? "ok" : "WRONG");
  return ok;
}

enum { ROWS = 300, COLS = 777 };

static int row_ops(tilesmith_runtime* runtime) {
  const size_t n = (size_t)ROWS * COLS;
  uint16_t *x = random_bf16(n, -3, 3), *w = random_bf16(COLS, 0.5, 1.5), *b = random_bf16(COLS, -1, 1),
           *res = random_bf16(n, -1, 1), *dy = random_bf16(n, -1, 1);
  void *dx = device(x, n * 2), *dw = device(w, COLS * 2), *db = device(b, COLS * 2),
       *dres = device(res, n * 2), *ddy = device(dy, n * 2), *dout = device(NULL, n * 2),
       *dgrad = device(NULL, n * 2), *dgw = device(NULL, COLS * 2), *dgb = device(NULL, COLS * 2);
  float *mean = device(NULL, ROWS * 4), *rstd = device(NULL, ROWS * 4), *rms = device(NULL, ROWS * 4);
  double *mu = malloc(ROWS * sizeof(double)), *inv = malloc(ROWS * sizeof(double)),
         *inv_rms = malloc(ROWS * sizeof(double)), *expected = malloc(n * sizeof(double)),
         *y = malloc(n * sizeof(double)), *ew = calloc(COLS, sizeof(double)),
         *eb = calloc(COLS, sizeof(double));
  for (int r = 0; r < ROWS; ++r) {
    double total = 0, raw = 0, squares = 0;
    for (int c = 0; c < COLS; ++c) total += from_bf16(x[r * COLS + c]), raw += pow(from_bf16(x[r * COLS + c]), 2);
    mu[r] = total / COLS;
    for (int c = 0; c < COLS; ++c) squares += pow(from_bf16(x[r * COLS + c]) - mu[r], 2);
    inv[r] = 1 / sqrt(squares / COLS + 1e-5);
    inv_rms[r] = 1 / sqrt(raw / COLS + 1e-5);
  }
  int ok = 1;
  tilesmith_rows_desc desc;

  /* Forward: each op into dout, against its formula. */
  for (int op = TILESMITH_SOFTMAX; op <= TILESMITH_RMSNORM_ACT_RESIDUAL; ++op) {
    memset(&desc, 0, sizeof desc);
    desc.op = op;
    desc.x = dx;
    desc.y = dout;
    desc.rows = ROWS;
    desc.cols = COLS;
    desc.dtype = desc.out_dtype = TILESMITH_BF16;
    desc.epsilon = 1e-5;
    const int layer = op == TILESMITH_LAYERNORM || op == TILESMITH_LAYERNORM_ACT_RESIDUAL;
    if (op != TILESMITH_SOFTMAX) desc.weight = dw;
    if (layer) desc.bias = db;
    if (op == TILESMITH_LAYERNORM) desc.mean = mean, desc.rstd = rstd;
    if (op == TILESMITH_RMSNORM) desc.rstd = rms;
    if (op >= TILESMITH_LAYERNORM_ACT_RESIDUAL) {
      desc.residual = dres;
      desc.activation = op == TILESMITH_LAYERNORM_ACT_RESIDUAL ? TILESMITH_ACT_GELU : TILESMITH_ACT_SILU;
    }
    expect_ok(tilesmith_rows(runtime, &desc, NULL), "tilesmith_rows");
    for (int r = 0; r < ROWS; ++r) {
      double max = -INFINITY, sum = 0;
      for (int c = 0; c < COLS; ++c) max = fmax(max, from_bf16(x[r * COLS + c]));
      for (int c = 0; c < COLS; ++c) sum += exp(from_bf16(x[r * COLS + c]) - max);
      for (int c = 0; c < COLS; ++c) {
        const size_t i = (size_t)r * COLS + c;
        const double v = from_bf16(x[i]), normed_layer = (v - mu[r]) * inv[r] * from_bf16(w[c]) + from_bf16(b[c]),
                     normed_rms = v * inv_rms[r] * from_bf16(w[c]);
        switch (op) {
          case TILESMITH_SOFTMAX: expected[i] = y[i] = exp(v - max) / sum; break;
          case TILESMITH_LAYERNORM: expected[i] = normed_layer; break;
          case TILESMITH_RMSNORM: expected[i] = normed_rms; break;
          case TILESMITH_LAYERNORM_ACT_RESIDUAL:
            expected[i] = 0.5 * normed_layer * (1 + erf(normed_layer / sqrt(2.0))) + from_bf16(res[i]);
            break;
          default: expected[i] = normed_rms / (1 + exp(-normed_rms)) + from_bf16(res[i]);
        }
      }
    }
    static const char* names[] = {"softmax", "layernorm (weight, bias, statistics)", "rmsnorm (weight, rstd)",
                                  "layernorm_act_residual gelu", "rmsnorm_act_residual silu"};
    ok &= agrees(names[op], dout, 0, expected, n, 1e-2);
    if (op == TILESMITH_SOFTMAX) { /* its backward reads this output */
      tilesmith_rows_backward_desc back;
      memset(&back, 0, sizeof back);
      back.op = TILESMITH_SOFTMAX_BACKWARD;
      back.x = dout;
      back.dy = ddy;
      back.dx = dgrad;
      back.rows = ROWS;
      back.cols = COLS;
      back.dtype = back.out_dtype = TILESMITH_BF16;
      expect_ok(tilesmith_rows_backward(runtime, &back, NULL), "tilesmith_rows_backward");
      uint16_t* got_y = malloc(n * 2);
      cudaMemcpy(got_y, dout, n * 2, cudaMemcpyDeviceToHost);
      for (int r = 0; r < ROWS; ++r) {
        double dot = 0;
        for (int c = 0; c < COLS; ++c) dot += from_bf16(got_y[r * COLS + c]) * from_bf16(dy[r * COLS + c]);
        for (int c = 0; c < COLS; ++c)
          expected[r * COLS + c] = from_bf16(got_y[r * COLS + c]) * (from_bf16(dy[r * COLS + c]) - dot);
      }
      free(got_y);
      ok &= agrees("softmax_backward", dgrad, 0, expected, n, 1e-2);
    }
  }

  /* The norms' backward from the forward's statistics: dx, dweight, and layernorm's dbias. */
  for (int layer = 1; layer >= 0; --layer) {
    tilesmith_rows_backward_desc back;
    memset(&back, 0, sizeof back);
    back.op = layer ? TILESMITH_LAYERNORM_BACKWARD : TILESMITH_RMSNORM_BACKWARD;
    back.x = dx;
    back.dy = ddy;
    back.dx = dgrad;
    back.rows = ROWS;
    back.cols = COLS;
    back.dtype = back.out_dtype = TILESMITH_BF16;
    back.weight = dw;
    back.mean = layer ? mean : NULL;
    back.rstd = layer ? rstd : rms;
    back.dweight = dgw;
    back.dbias = layer ? dgb : NULL;
    expect_ok(tilesmith_rows_backward(runtime, &back, NULL), "tilesmith_rows_backward");
    memset(ew, 0, COLS * sizeof(double));
    memset(eb, 0, COLS * sizeof(double));
    for (int r = 0; r < ROWS; ++r) {
      double mean_gw = 0, mean_gwx = 0;
      for (int c = 0; c < COLS; ++c) {
        const size_t i = (size_t)r * COLS + c;
        const double xhat = layer ? (from_bf16(x[i]) - mu[r]) * inv[r] : from_bf16(x[i]) * inv_rms[r];
        const double gw = from_bf16(dy[i]) * from_bf16(w[c]);
        mean_gw += gw / COLS;
        mean_gwx += gw * xhat / COLS;
        ew[c] += from_bf16(dy[i]) * xhat;
        eb[c] += from_bf16(dy[i]);
      }
      for (int c = 0; c < COLS; ++c) {
        const size_t i = (size_t)r * COLS + c;
        const double xhat = layer ? (from_bf16(x[i]) - mu[r]) * inv[r] : from_bf16(x[i]) * inv_rms[r];
        const double gw = from_bf16(dy[i]) * from_bf16(w[c]);
        expected[i] = (layer ? inv[r] : inv_rms[r]) * (gw - (layer ? mean_gw : 0) - xhat * mean_gwx);
      }
    }
    ok &= agrees(layer ? "layernorm_backward dx" : "rmsnorm_backward dx", dgrad, 0, expected, n, 1e-2);
    ok &= agrees(layer ? "layernorm_backward dweight" : "rmsnorm_backward dweight", dgw, 0, ew, COLS, 1e-2);
    if (layer) ok &= agrees("layernorm_backward dbias", dgb, 0, eb, COLS, 1e-2);
  }
  void* buffers[] = {dx, dw, db, dres, ddy, dout, dgrad, dgw, dgb, mean, rstd, rms};
  for (size_t i = 0; i < sizeof buffers / sizeof *buffers; ++i) cudaFree(buffers[i]);
  free(x), free(w), free(b), free(res), free(dy), free(mu), free(inv), free(inv_rms);
  free(expected), free(y), free(ew), free(eb);
  return ok;
}

/* multi_sum: 50 fp32 tensors of 1 to 20000 elements, one launch. */
static int multi_sum(tilesmith_runtime* runtime) {
  enum { COUNT = 50 };
  struct { const void* data; int64_t length; } table[COUNT];
  double expected[COUNT];
  void* tensors[COUNT];
  int64_t total = 0;
  for (int t = 0; t < COUNT; ++t) {
    const int64_t length = 1 + rand() % 20000;
    float* values = malloc(length * sizeof(float));
    expected[t] = 0;
    for (int64_t i = 0; i < length; ++i) values[i] = (float)uniform(-1, 1), expected[t] += values[i];
    tensors[t] = device(values, length * sizeof(float));
    table[t].data = tensors[t];
    table[t].length = length;
    total += length;
    free(values);
  }
  void *dtable = device(table, sizeof table), *out = device(NULL, COUNT * sizeof(float));
  expect_ok(tilesmith_multi_sum(runtime, dtable, COUNT, total, TILESMITH_F32, TILESMITH_F32, out, 0, NULL),
            "tilesmith_multi_sum");
  const int ok = agrees("multi_sum of 50 tensors", out, 1, expected, COUNT, 1e-5);
  for (int t = 0; t < COUNT; ++t) cudaFree(tensors[t]);
  cudaFree(dtable);
  cudaFree(out);
  return ok;
}

/* Attention, BSHD: 4 query heads over 2 kv heads, 40 queries over 70 keys, causal (aligned
 * bottom-right), head dim 64, then dQ, dK, dV. */
static int attention(tilesmith_runtime* runtime) {
  enum { H = 4, KVH = 2, SQ = 40, SK = 70, D = 64 };
  const size_t nq = (size_t)SQ * H * D, nk = (size_t)SK * KVH * D;
  uint16_t *q = random_bf16(nq, -1, 1), *k = random_bf16(nk, -1, 1), *v = random_bf16(nk, -1, 1),
           *d_o = random_bf16(nq, -1, 1);
  void *dq_in = device(q, nq * 2), *dk_in = device(k, nk * 2), *dv_in = device(v, nk * 2),
       *ddo = device(d_o, nq * 2), *o = device(NULL, nq * 2), *dq = device(NULL, nq * 2),
       *dk = device(NULL, nk * 2), *dv = device(NULL, nk * 2);
  float* lse = device(NULL, H * SQ * sizeof(float));
  tilesmith_attention_backward_desc back;
  memset(&back, 0, sizeof back);
  tilesmith_attention_desc* fwd = &back.forward;
  fwd->q = dq_in, fwd->k = dk_in, fwd->v = dv_in, fwd->o = o, fwd->lse = lse;
  fwd->batch = 1, fwd->heads = H, fwd->kv_heads = KVH, fwd->seq_q = SQ, fwd->seq_k = SK, fwd->head_dim = D;
  fwd->dtype = TILESMITH_BF16;
  fwd->causal = 1;
  fwd->layout = TILESMITH_BSHD;
  expect_ok(tilesmith_attention(runtime, fwd, NULL), "tilesmith_attention");
  back.d_o = ddo, back.dq = dq, back.dk = dk, back.dv = dv;
  expect_ok(tilesmith_attention_backward(runtime, &back, NULL), "tilesmith_attention_backward");
  double *out = calloc(nq, sizeof(double)), *gq = calloc(nq, sizeof(double)),
         *gk = calloc(nk, sizeof(double)), *gv = calloc(nk, sizeof(double));
  const double scale = 1 / sqrt((double)D);
  double p[SK], dp[SK];
#define QI(s, h, c) (((size_t)(s) * H + (h)) * D + (c))
#define KI(s, h, c) (((size_t)(s) * KVH + (h)) * D + (c))
  for (int h = 0; h < H; ++h) {
    const int g = h / (H / KVH);
    for (int i = 0; i < SQ; ++i) {
      const int visible = i + (SK - SQ) + 1 < SK ? i + (SK - SQ) + 1 : SK;
      double max = -INFINITY, sum = 0, delta = 0;
      for (int j = 0; j < visible; ++j) {
        double s = 0;
        for (int c = 0; c < D; ++c) s += from_bf16(q[QI(i, h, c)]) * from_bf16(k[KI(j, g, c)]);
        p[j] = s * scale;
        max = fmax(max, p[j]);
      }
      for (int j = 0; j < visible; ++j) p[j] = exp(p[j] - max), sum += p[j];
      for (int j = 0; j < visible; ++j) p[j] /= sum, dp[j] = 0;
      for (int c = 0; c < D; ++c) {
        for (int j = 0; j < visible; ++j) out[QI(i, h, c)] += p[j] * from_bf16(v[KI(j, g, c)]);
        delta += out[QI(i, h, c)] * from_bf16(d_o[QI(i, h, c)]);
      }
      for (int j = 0; j < visible; ++j) {
        for (int c = 0; c < D; ++c) {
          dp[j] += from_bf16(d_o[QI(i, h, c)]) * from_bf16(v[KI(j, g, c)]);
          gv[KI(j, g, c)] += p[j] * from_bf16(d_o[QI(i, h, c)]);
        }
        const double ds = p[j] * (dp[j] - delta) * scale;
        for (int c = 0; c < D; ++c) {
          gq[QI(i, h, c)] += ds * from_bf16(k[KI(j, g, c)]);
          gk[KI(j, g, c)] += ds * from_bf16(q[QI(i, h, c)]);
        }
      }
    }
  }
  int ok = agrees("attention GQA 4/2 heads, 40x70 causal", o, 0, out, nq, 1e-2);
  ok &= agrees("attention_backward dQ", dq, 0, gq, nq, 2e-2);
  ok &= agrees("attention_backward dK", dk, 0, gk, nk, 2e-2);
  ok &= agrees("attention_backward dV", dv, 0, gv, nk, 2e-2);
  void* buffers[] = {dq_in, dk_in, dv_in, ddo, o, dq, dk, dv, lse};
  for (size_t i = 0; i < sizeof buffers / sizeof *buffers; ++i) cudaFree(buffers[i]);
  free(q), free(k), free(v), free(d_o), free(out), free(gq), free(gk), free(gv);
  return ok;
}

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    printf("every_op_c: skipped: no GPU (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
  }
  tilesmith_runtime* runtime = NULL;
  if (tilesmith_runtime_create(argc > 1 ? argv[1] : NULL, 0, &runtime) != TILESMITH_OK) {
    fprintf(stderr, "every_op_c: %s\n", tilesmith_last_error());
    return 2;
  }
  srand(5);
  int ok = row_ops(runtime);
  ok &= multi_sum(runtime);
  ok &= attention(runtime);
  tilesmith_runtime_destroy(runtime);
  if (failed_calls) return 2;
  return ok ? 0 : 1;
}
