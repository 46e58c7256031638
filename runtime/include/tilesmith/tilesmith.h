/* tilesmith's C ABI, for other languages (Python ctypes, ...). Every call returns 0 on success
 * or a non-zero status; tilesmith_last_error() then holds a message for the calling thread. */
#ifndef TILESMITH_H
#define TILESMITH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tilesmith_runtime tilesmith_runtime;

enum tilesmith_dtype { TILESMITH_F16 = 0, TILESMITH_BF16 = 1, TILESMITH_F32 = 2 };
/* TILESMITH_INVALID_ARGUMENT: the call's arguments are wrong (a NULL or misaligned pointer, a
 * non-positive or unsupported shape, an unknown dtype code); TILESMITH_ERROR: anything else (no
 * GPU, an unreadable database, a failed compile or launch). */
enum tilesmith_status { TILESMITH_OK = 0, TILESMITH_ERROR = 1, TILESMITH_INVALID_ARGUMENT = 2 };

/* database_path: NULL or "" for the default; device_ordinal: usually 0. */
int tilesmith_runtime_create(const char* database_path, int device_ordinal, tilesmith_runtime** out);
void tilesmith_runtime_destroy(tilesmith_runtime* runtime);

/* C[m x n] = A[m x k] * B[k x n], row-major; out_dtype is dtype or TILESMITH_F32. */
int tilesmith_matmul(tilesmith_runtime* runtime, const void* a, const void* b, void* c, int64_t m,
                     int64_t n, int64_t k, int dtype, int out_dtype, void* stream);

/* Writes the config the call would use ("block_k=32,...") and whether it is tuned. */
int tilesmith_matmul_config(tilesmith_runtime* runtime, int64_t m, int64_t n, int64_t k, int dtype,
                            int out_dtype, char* config, int config_capacity, int* tuned);

enum tilesmith_layout { TILESMITH_ROW_MAJOR = 0, TILESMITH_COLUMN_MAJOR = 1 };
enum tilesmith_activation {
  TILESMITH_ACT_NONE = 0,
  TILESMITH_ACT_RELU = 1,
  TILESMITH_ACT_GELU = 2, /* the exact (erf) form */
  TILESMITH_ACT_SILU = 3
};

/* C[b] = act(A[b] * B[b] + bias) + residual[b] for b < batch, fp32 inside. Column-major A is
 * stored k x m, column-major B n x k (x * W^T); C is m x n row-major. A, B, C: 16-byte aligned;
 * bias (n elements) and residual (like C) have out_dtype's type, NULL: none. Strides in
 * elements (tilesmith::MatmulArgs): rows ld* apart (0: packed); batches batch_stride_* apart
 * where strided_batches is not 0 (0: one matrix for every batch, for A, B and residual), else
 * packed. A zero-initialized descriptor's strides are the packed ones. */
typedef struct tilesmith_matmul_desc {
  const void* a;
  const void* b;
  void* c;
  int64_t batch, m, n, k; /* batch >= 1 */
  int dtype, out_dtype;   /* enum tilesmith_dtype */
  int a_layout, b_layout; /* enum tilesmith_layout */
  const void* bias;
  const void* residual;
  int activation; /* enum tilesmith_activation */
  int64_t lda, ldb, ldc, ld_residual;
  int strided_batches;
  int64_t batch_stride_a, batch_stride_b, batch_stride_c, batch_stride_residual;
} tilesmith_matmul_desc;

int tilesmith_matmul_ex(tilesmith_runtime* runtime, const tilesmith_matmul_desc* desc, void* stream);
/* tilesmith_matmul_config for a descriptor (its pointers may be NULL, except bias and residual,
 * whose presence selects the kernel). */
int tilesmith_matmul_ex_config(tilesmith_runtime* runtime, const tilesmith_matmul_desc* desc,
                               char* config, int config_capacity, int* tuned);

enum tilesmith_row_op {
  TILESMITH_SOFTMAX = 0,
  TILESMITH_LAYERNORM = 1,
  TILESMITH_RMSNORM = 2,
  TILESMITH_LAYERNORM_ACT_RESIDUAL = 3, /* y = act(layernorm(x)) + residual */
  TILESMITH_RMSNORM_ACT_RESIDUAL = 4
};

/* A row op over the last dimension of rows x cols (tilesmith::RowArgs): x, weight, bias have
 * dtype; y, residual out_dtype; mean, rstd are float per row, written when not NULL (layernorm:
 * both or neither). weight, bias: used when not NULL. Strides: elements between rows, 0 = cols.
 * epsilon: the norms' floor under the variance (1e-5 is torch's default). */
typedef struct tilesmith_rows_desc {
  int op; /* enum tilesmith_row_op */
  const void* x;
  void* y;
  int64_t rows, cols;
  int dtype, out_dtype; /* enum tilesmith_dtype */
  const void* weight;
  const void* bias;
  const void* residual;
  float* mean;
  float* rstd;
  int activation; /* enum tilesmith_activation */
  double epsilon;
  int64_t x_stride, y_stride, residual_stride;
} tilesmith_rows_desc;

int tilesmith_rows(tilesmith_runtime* runtime, const tilesmith_rows_desc* desc, void* stream);
/* The config the call would use; its x and y may be NULL. */
int tilesmith_rows_config(tilesmith_runtime* runtime, const tilesmith_rows_desc* desc,
                          char* config, int config_capacity, int* tuned);

enum tilesmith_row_backward_op {
  TILESMITH_SOFTMAX_BACKWARD = 0,
  TILESMITH_LAYERNORM_BACKWARD = 1,
  TILESMITH_RMSNORM_BACKWARD = 2
};

/* A backward row op (tilesmith::RowBackwardArgs), typed as its forward: x, weight, dx, dweight,
 * dbias have dtype; dy (and softmax's y, passed as x) out_dtype; mean and rstd are the forward's
 * float statistics (layernorm: both; rmsnorm: rstd). weight and dweight come together or not
 * at all; dbias (layernorm) is written when not NULL. Strides: elements between rows, 0 = cols. */
typedef struct tilesmith_rows_backward_desc {
  int op; /* enum tilesmith_row_backward_op */
  const void* x; /* softmax: y */
  const void* dy;
  void* dx;
  int64_t rows, cols;
  int dtype, out_dtype; /* enum tilesmith_dtype */
  const void* weight;
  const float* mean;
  const float* rstd;
  void* dweight;
  void* dbias;
  int64_t x_stride, dy_stride, dx_stride;
} tilesmith_rows_backward_desc;

int tilesmith_rows_backward(tilesmith_runtime* runtime, const tilesmith_rows_backward_desc* desc,
                            void* stream);
/* The config the call would use; its x, dy and dx may be NULL. */
int tilesmith_rows_backward_config(tilesmith_runtime* runtime,
                                   const tilesmith_rows_backward_desc* desc, char* config,
                                   int config_capacity, int* tuned);

/* The sums (means with mean = 1) of count tensors (tilesmith::MultiSumArgs): table holds in
 * device memory count entries { const void* data; int64_t length; }, the data of dtype;
 * total_elements is the lengths' sum; out gets count values of out_dtype. */
int tilesmith_multi_sum(tilesmith_runtime* runtime, const void* table, int64_t count,
                        int64_t total_elements, int dtype, int out_dtype, void* out, int mean,
                        void* stream);
/* The config the call would use (table and out may be NULL). */
int tilesmith_multi_sum_config(tilesmith_runtime* runtime, int64_t count, int64_t total_elements,
                               int dtype, int out_dtype, int mean, char* config,
                               int config_capacity, int* tuned);

/* Attention (tilesmith::AttentionArgs): O = softmax(Q K^T * scale + mask) V per batch and head,
 * and lse, the fp32 logsumexp of each row (batch x heads x seq_q), written when not NULL.
 * kv_heads 0 means heads, seq_k 0 means seq_q; scale 0 means 1/sqrt(head_dim); causal masks
 * aligned bottom-right. Strides in elements (batch, head, row), 0: the layout's packed one. */
enum tilesmith_attention_layout { TILESMITH_BSHD = 0, TILESMITH_BHSD = 1 };
typedef struct tilesmith_attention_desc {
  const void* q;
  const void* k;
  const void* v;
  void* o;
  float* lse;
  int64_t batch, heads, kv_heads, seq_q, seq_k, head_dim;
  int dtype;  /* TILESMITH_BF16 or TILESMITH_F16 */
  int causal;
  int layout; /* enum tilesmith_attention_layout */
  double scale;
  int64_t q_strides[3], k_strides[3], v_strides[3], o_strides[3]; /* batch, head, row */
} tilesmith_attention_desc;

int tilesmith_attention(tilesmith_runtime* runtime, const tilesmith_attention_desc* desc,
                        void* stream);
/* The config the call would use; its tensors may be NULL. */
int tilesmith_attention_config(tilesmith_runtime* runtime, const tilesmith_attention_desc* desc,
                               char* config, int config_capacity, int* tuned);

/* The attention backward (tilesmith::AttentionBackwardArgs): dQ, dK and dV from the forward's
 * call as it was made (`forward`, whose lse is read and required) and dO. dO and dQ are shaped
 * as Q, dK and dV as K and V; strides as the forward's. */
typedef struct tilesmith_attention_backward_desc {
  tilesmith_attention_desc forward;
  const void* d_o;
  void* dq;
  void* dk;
  void* dv;
  int64_t do_strides[3], dq_strides[3], dk_strides[3], dv_strides[3]; /* batch, head, row */
} tilesmith_attention_backward_desc;

int tilesmith_attention_backward(tilesmith_runtime* runtime,
                                 const tilesmith_attention_backward_desc* desc, void* stream);
int tilesmith_attention_backward_config(tilesmith_runtime* runtime,
                                        const tilesmith_attention_backward_desc* desc, char* config,
                                        int config_capacity, int* tuned);

const char* tilesmith_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
