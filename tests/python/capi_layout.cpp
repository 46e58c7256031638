/* Prints the C compiler's layout of the C ABI's descriptors (size, then each field's offset) as
 * JSON, for test_capi.py to hold python/tilesmith/_capi.py's ctypes Structures against. */
#include <cstddef>
#include <cstdio>

#include "tilesmith/tilesmith.h"

// FIELD names a field of the STRUCT it stands in (whose type is T there).
#define FIELD(name) printf("%s\"%s\": %zu", first++ ? ", " : "", #name, offsetof(T, name))
#define STRUCT(type, ...)                                                        \
  do {                                                                           \
    using T = type;                                                              \
    int first = 0;                                                               \
    printf("%s\"%s\": {\"size\": %zu, \"fields\": {", any++ ? ", " : "", #type, sizeof(type)); \
    __VA_ARGS__;                                                                 \
    printf("}}");                                                                \
  } while (0)

int main(void) {
  int any = 0;
  printf("{");
  STRUCT(tilesmith_matmul_desc, FIELD(a); FIELD(b); FIELD(c); FIELD(batch); FIELD(m); FIELD(n);
         FIELD(k); FIELD(dtype); FIELD(out_dtype); FIELD(a_layout); FIELD(b_layout); FIELD(bias);
         FIELD(residual); FIELD(activation); FIELD(lda); FIELD(ldb); FIELD(ldc); FIELD(ld_residual);
         FIELD(strided_batches); FIELD(batch_stride_a); FIELD(batch_stride_b);
         FIELD(batch_stride_c); FIELD(batch_stride_residual));
  STRUCT(tilesmith_rows_desc, FIELD(op); FIELD(x); FIELD(y); FIELD(rows); FIELD(cols); FIELD(dtype);
         FIELD(out_dtype); FIELD(weight); FIELD(bias); FIELD(residual); FIELD(mean); FIELD(rstd);
         FIELD(activation); FIELD(epsilon); FIELD(x_stride); FIELD(y_stride);
         FIELD(residual_stride));
  STRUCT(tilesmith_rows_backward_desc, FIELD(op); FIELD(x); FIELD(dy); FIELD(dx); FIELD(rows);
         FIELD(cols); FIELD(dtype); FIELD(out_dtype); FIELD(weight); FIELD(mean); FIELD(rstd);
         FIELD(dweight); FIELD(dbias); FIELD(x_stride); FIELD(dy_stride); FIELD(dx_stride));
  STRUCT(tilesmith_attention_desc, FIELD(q); FIELD(k); FIELD(v); FIELD(o); FIELD(lse); FIELD(batch);
         FIELD(heads); FIELD(kv_heads); FIELD(seq_q); FIELD(seq_k); FIELD(head_dim); FIELD(dtype);
         FIELD(causal); FIELD(layout); FIELD(scale); FIELD(q_strides); FIELD(k_strides);
         FIELD(v_strides); FIELD(o_strides));
  STRUCT(tilesmith_attention_backward_desc, FIELD(forward); FIELD(d_o); FIELD(dq); FIELD(dk);
         FIELD(dv); FIELD(do_strides); FIELD(dq_strides); FIELD(dk_strides); FIELD(dv_strides));
  printf("}\n");
  return 0;
}
