/* Prints the C compiler's layout of the C ABI's descriptors (size, then each field's offset) as
 * JSON, for test_capi.py to hold python/tilesmith/_capi.py's ctypes Structures against. */
#include <cstddef>
#include <cstdio>

#include "tilesmith/tilesmith.h"

#define FIELD(type, name) printf("%s\"%s\": %zu", first++ ? ", " : "", #name, offsetof(type, name))
#define STRUCT(type, ...)                                                        \
  do {                                                                           \
    int first = 0;                                                               \
    printf("%s\"%s\": {\"size\": %zu, \"fields\": {", any++ ? ", " : "", #type, sizeof(type)); \
    __VA_ARGS__;                                                                 \
    printf("}}");                                                                \
  } while (0)

int main(void) {
  int any = 0;
  printf("{");
  STRUCT(tilesmith_matmul_desc, FIELD(tilesmith_matmul_desc, a); FIELD(tilesmith_matmul_desc, b);
         FIELD(tilesmith_matmul_desc, c); FIELD(tilesmith_matmul_desc, batch);
         FIELD(tilesmith_matmul_desc, m); FIELD(tilesmith_matmul_desc, n);
         FIELD(tilesmith_matmul_desc, k); FIELD(tilesmith_matmul_desc, dtype);
         FIELD(tilesmith_matmul_desc, out_dtype); FIELD(tilesmith_matmul_desc, a_layout);
         FIELD(tilesmith_matmul_desc, b_layout); FIELD(tilesmith_matmul_desc, bias);
         FIELD(tilesmith_matmul_desc, residual); FIELD(tilesmith_matmul_desc, activation);
         FIELD(tilesmith_matmul_desc, lda); FIELD(tilesmith_matmul_desc, ldb);
         FIELD(tilesmith_matmul_desc, ldc); FIELD(tilesmith_matmul_desc, ld_residual);
         FIELD(tilesmith_matmul_desc, strided_batches);
         FIELD(tilesmith_matmul_desc, batch_stride_a); FIELD(tilesmith_matmul_desc, batch_stride_b);
         FIELD(tilesmith_matmul_desc, batch_stride_c);
         FIELD(tilesmith_matmul_desc, batch_stride_residual));
  STRUCT(tilesmith_rows_desc, FIELD(tilesmith_rows_desc, op); FIELD(tilesmith_rows_desc, x);
         FIELD(tilesmith_rows_desc, y); FIELD(tilesmith_rows_desc, rows);
         FIELD(tilesmith_rows_desc, cols); FIELD(tilesmith_rows_desc, dtype);
         FIELD(tilesmith_rows_desc, out_dtype); FIELD(tilesmith_rows_desc, weight);
         FIELD(tilesmith_rows_desc, bias); FIELD(tilesmith_rows_desc, residual);
         FIELD(tilesmith_rows_desc, mean); FIELD(tilesmith_rows_desc, rstd);
         FIELD(tilesmith_rows_desc, activation); FIELD(tilesmith_rows_desc, epsilon);
         FIELD(tilesmith_rows_desc, x_stride); FIELD(tilesmith_rows_desc, y_stride);
         FIELD(tilesmith_rows_desc, residual_stride));
  STRUCT(tilesmith_rows_backward_desc, FIELD(tilesmith_rows_backward_desc, op);
         FIELD(tilesmith_rows_backward_desc, x); FIELD(tilesmith_rows_backward_desc, dy);
         FIELD(tilesmith_rows_backward_desc, dx); FIELD(tilesmith_rows_backward_desc, rows);
         FIELD(tilesmith_rows_backward_desc, cols); FIELD(tilesmith_rows_backward_desc, dtype);
         FIELD(tilesmith_rows_backward_desc, out_dtype);
         FIELD(tilesmith_rows_backward_desc, weight); FIELD(tilesmith_rows_backward_desc, mean);
         FIELD(tilesmith_rows_backward_desc, rstd); FIELD(tilesmith_rows_backward_desc, dweight);
         FIELD(tilesmith_rows_backward_desc, dbias);
         FIELD(tilesmith_rows_backward_desc, x_stride);
         FIELD(tilesmith_rows_backward_desc, dy_stride);
         FIELD(tilesmith_rows_backward_desc, dx_stride));
  STRUCT(tilesmith_attention_desc, FIELD(tilesmith_attention_desc, q);
         FIELD(tilesmith_attention_desc, k); FIELD(tilesmith_attention_desc, v);
         FIELD(tilesmith_attention_desc, o); FIELD(tilesmith_attention_desc, lse);
         FIELD(tilesmith_attention_desc, batch); FIELD(tilesmith_attention_desc, heads);
         FIELD(tilesmith_attention_desc, kv_heads); FIELD(tilesmith_attention_desc, seq_q);
         FIELD(tilesmith_attention_desc, seq_k); FIELD(tilesmith_attention_desc, head_dim);
         FIELD(tilesmith_attention_desc, dtype); FIELD(tilesmith_attention_desc, causal);
         FIELD(tilesmith_attention_desc, layout); FIELD(tilesmith_attention_desc, scale);
         FIELD(tilesmith_attention_desc, q_strides); FIELD(tilesmith_attention_desc, k_strides);
         FIELD(tilesmith_attention_desc, v_strides); FIELD(tilesmith_attention_desc, o_strides));
  STRUCT(tilesmith_attention_backward_desc, FIELD(tilesmith_attention_backward_desc, forward);
         FIELD(tilesmith_attention_backward_desc, d_o); FIELD(tilesmith_attention_backward_desc, dq);
         FIELD(tilesmith_attention_backward_desc, dk); FIELD(tilesmith_attention_backward_desc, dv);
         FIELD(tilesmith_attention_backward_desc, do_strides);
         FIELD(tilesmith_attention_backward_desc, dq_strides);
         FIELD(tilesmith_attention_backward_desc, dk_strides);
         FIELD(tilesmith_attention_backward_desc, dv_strides));
  printf("}\n");
  return 0;
}
