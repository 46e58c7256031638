// The C ABI over tilesmith::Runtime: exceptions stop here and become a status and a message.
#include <cstring>
#include <string>

#include "tilesmith/runtime.hpp"
#include "tilesmith/tilesmith.h"

struct tilesmith_runtime {
  tilesmith::Runtime runtime;
};

namespace {

thread_local std::string last_error;

template <class Body>
int guarded(Body&& body) {
  try {
    body();
    last_error.clear();
    return TILESMITH_OK;
  } catch (const tilesmith::InvalidArgument& error) {
    last_error = error.what();
    return TILESMITH_INVALID_ARGUMENT;
  } catch (const std::exception& error) {
    last_error = error.what();
    return TILESMITH_ERROR;
  }
}

tilesmith::DType to_dtype(int dtype) {
  switch (dtype) {
    case TILESMITH_F16: return tilesmith::DType::f16;
    case TILESMITH_BF16: return tilesmith::DType::bf16;
    case TILESMITH_F32: return tilesmith::DType::f32;
  }
  throw tilesmith::InvalidArgument("unknown dtype code " + std::to_string(dtype) +
                                  " (TILESMITH_F16, TILESMITH_BF16 or TILESMITH_F32)");
}

tilesmith::Layout to_layout(int layout, const char* operand) {
  switch (layout) {
    case TILESMITH_ROW_MAJOR: return tilesmith::Layout::row_major;
    case TILESMITH_COLUMN_MAJOR: return tilesmith::Layout::column_major;
  }
  throw tilesmith::InvalidArgument(std::string("unknown layout code ") + std::to_string(layout) +
                                   " for " + operand + " (TILESMITH_ROW_MAJOR or TILESMITH_COLUMN_MAJOR)");
}

tilesmith::MatmulArgs to_args(const tilesmith_matmul_desc* desc) {
  if (!desc) throw tilesmith::InvalidArgument("the matmul descriptor is NULL");
  if (desc->activation < TILESMITH_ACT_NONE || desc->activation > TILESMITH_ACT_SILU)
    throw tilesmith::InvalidArgument("unknown activation code " + std::to_string(desc->activation));
  tilesmith::MatmulArgs args{desc->a, desc->b, desc->c, desc->m, desc->n, desc->k,
                             to_dtype(desc->dtype), to_dtype(desc->out_dtype)};
  args.batch = desc->batch;
  args.a_layout = to_layout(desc->a_layout, "A");
  args.b_layout = to_layout(desc->b_layout, "B");
  args.bias = desc->bias;
  args.residual = desc->residual;
  args.activation = static_cast<tilesmith::Activation>(desc->activation);
  args.lda = desc->lda;
  args.ldb = desc->ldb;
  args.ldc = desc->ldc;
  args.ld_residual = desc->ld_residual;
  if (desc->strided_batches) {
    args.batch_stride_a = desc->batch_stride_a;
    args.batch_stride_b = desc->batch_stride_b;
    args.batch_stride_c = desc->batch_stride_c;
    args.batch_stride_residual = desc->batch_stride_residual;
  }
  return args;
}

tilesmith::RowArgs to_args(const tilesmith_rows_desc* desc) {
  if (!desc) throw tilesmith::InvalidArgument("the rows descriptor is NULL");
  if (desc->op < TILESMITH_SOFTMAX || desc->op > TILESMITH_RMSNORM_ACT_RESIDUAL)
    throw tilesmith::InvalidArgument("unknown row op code " + std::to_string(desc->op));
  if (desc->activation < TILESMITH_ACT_NONE || desc->activation > TILESMITH_ACT_SILU)
    throw tilesmith::InvalidArgument("unknown activation code " + std::to_string(desc->activation));
  tilesmith::RowArgs args;
  args.op = static_cast<tilesmith::RowOp>(desc->op);
  args.x = desc->x;
  args.y = desc->y;
  args.rows = desc->rows;
  args.cols = desc->cols;
  args.dtype = to_dtype(desc->dtype);
  args.out_dtype = to_dtype(desc->out_dtype);
  args.weight = desc->weight;
  args.bias = desc->bias;
  args.residual = desc->residual;
  args.mean = desc->mean;
  args.rstd = desc->rstd;
  args.activation = static_cast<tilesmith::Activation>(desc->activation);
  args.epsilon = desc->epsilon;
  args.x_stride = desc->x_stride;
  args.y_stride = desc->y_stride;
  args.residual_stride = desc->residual_stride;
  return args;
}

tilesmith::RowBackwardArgs to_args(const tilesmith_rows_backward_desc* desc) {
  if (!desc) throw tilesmith::InvalidArgument("the rows_backward descriptor is NULL");
  if (desc->op < TILESMITH_SOFTMAX_BACKWARD || desc->op > TILESMITH_RMSNORM_BACKWARD)
    throw tilesmith::InvalidArgument("unknown backward row op code " + std::to_string(desc->op));
  tilesmith::RowBackwardArgs args;
  args.op = static_cast<tilesmith::RowBackwardOp>(desc->op);
  args.x = desc->x;
  args.dy = desc->dy;
  args.dx = desc->dx;
  args.rows = desc->rows;
  args.cols = desc->cols;
  args.dtype = to_dtype(desc->dtype);
  args.out_dtype = to_dtype(desc->out_dtype);
  args.weight = desc->weight;
  args.mean = desc->mean;
  args.rstd = desc->rstd;
  args.dweight = desc->dweight;
  args.dbias = desc->dbias;
  args.x_stride = desc->x_stride;
  args.dy_stride = desc->dy_stride;
  args.dx_stride = desc->dx_stride;
  return args;
}

tilesmith::AttentionArgs::Strides attention_strides(const int64_t (&s)[3]) { return {s[0], s[1], s[2]}; }

tilesmith::AttentionArgs to_args(const tilesmith_attention_desc* desc) {
  if (!desc) throw tilesmith::InvalidArgument("the attention descriptor is NULL");
  if (desc->layout != TILESMITH_BSHD && desc->layout != TILESMITH_BHSD)
    throw tilesmith::InvalidArgument("unknown attention layout code " + std::to_string(desc->layout));
  tilesmith::AttentionArgs args;
  args.q = desc->q;
  args.k = desc->k;
  args.v = desc->v;
  args.o = desc->o;
  args.lse = desc->lse;
  args.batch = desc->batch;
  args.heads = desc->heads;
  args.kv_heads = desc->kv_heads;
  args.seq_q = desc->seq_q;
  args.seq_k = desc->seq_k;
  args.head_dim = desc->head_dim;
  args.dtype = to_dtype(desc->dtype);
  args.causal = desc->causal != 0;
  args.layout = static_cast<tilesmith::AttentionLayout>(desc->layout);
  if (desc->scale != 0) args.scale = desc->scale;
  args.q_strides = attention_strides(desc->q_strides);
  args.k_strides = attention_strides(desc->k_strides);
  args.v_strides = attention_strides(desc->v_strides);
  args.o_strides = attention_strides(desc->o_strides);
  return args;
}

tilesmith::AttentionBackwardArgs to_args(const tilesmith_attention_backward_desc* desc) {
  if (!desc) throw tilesmith::InvalidArgument("the attention backward descriptor is NULL");
  tilesmith::AttentionBackwardArgs args;
  args.forward = to_args(&desc->forward);
  args.d_o = desc->d_o;
  args.dq = desc->dq;
  args.dk = desc->dk;
  args.dv = desc->dv;
  args.do_strides = attention_strides(desc->do_strides);
  args.dq_strides = attention_strides(desc->dq_strides);
  args.dk_strides = attention_strides(desc->dk_strides);
  args.dv_strides = attention_strides(desc->dv_strides);
  return args;
}

tilesmith::DispatchInfo describe(tilesmith_runtime* runtime, const tilesmith::MatmulArgs& args) {
  return runtime->runtime.describe_matmul(args);
}
tilesmith::DispatchInfo describe(tilesmith_runtime* runtime, const tilesmith::RowArgs& args) {
  return runtime->runtime.describe_rows(args);
}
tilesmith::DispatchInfo describe(tilesmith_runtime* runtime, const tilesmith::MultiSumArgs& args) {
  return runtime->runtime.describe_multi_sum(args);
}
tilesmith::DispatchInfo describe(tilesmith_runtime* runtime, const tilesmith::AttentionArgs& args) {
  return runtime->runtime.describe_attention(args);
}
tilesmith::DispatchInfo describe(tilesmith_runtime* runtime, const tilesmith::AttentionBackwardArgs& args) {
  return runtime->runtime.describe_attention_backward(args);
}
tilesmith::DispatchInfo describe(tilesmith_runtime* runtime, const tilesmith::RowBackwardArgs& args) {
  return runtime->runtime.describe_rows_backward(args);
}

template <class Args>
void write_config(tilesmith_runtime* runtime, const Args& args, char* config,
                  int config_capacity, int* tuned) {
  if (!runtime || !config || config_capacity <= 0)
    throw tilesmith::InvalidArgument("NULL runtime or config buffer");
  tilesmith::DispatchInfo info = describe(runtime, args);
  std::snprintf(config, static_cast<std::size_t>(config_capacity), "%s", info.config.c_str());
  if (tuned) *tuned = info.tuned ? 1 : 0;
}

}  // namespace

extern "C" {

int tilesmith_runtime_create(const char* database_path, int device_ordinal, tilesmith_runtime** out) {
  if (!out) {
    last_error = "tilesmith_runtime_create: out is NULL";
    return TILESMITH_INVALID_ARGUMENT;
  }
  *out = nullptr;
  return guarded([&] {
    tilesmith::RuntimeOptions options;
    if (database_path) options.database = database_path;
    options.device_ordinal = device_ordinal;
    *out = new tilesmith_runtime{tilesmith::Runtime(options)};
  });
}

void tilesmith_runtime_destroy(tilesmith_runtime* runtime) { delete runtime; }

int tilesmith_matmul(tilesmith_runtime* runtime, const void* a, const void* b, void* c, int64_t m,
                     int64_t n, int64_t k, int dtype, int out_dtype, void* stream) {
  return guarded([&] {
    const tilesmith::MatmulArgs args{a, b, c, m, n, k, to_dtype(dtype), to_dtype(out_dtype)};
    if (!runtime) throw tilesmith::InvalidArgument("tilesmith_matmul: runtime is NULL");
    runtime->runtime.matmul(args, stream);
  });
}

int tilesmith_matmul_config(tilesmith_runtime* runtime, int64_t m, int64_t n, int64_t k, int dtype,
                            int out_dtype, char* config, int config_capacity, int* tuned) {
  return guarded([&] {
    const tilesmith::MatmulArgs args{nullptr, nullptr, nullptr, m,
                                     n,       k,       to_dtype(dtype), to_dtype(out_dtype)};
    write_config(runtime, args, config, config_capacity, tuned);
  });
}

int tilesmith_matmul_ex(tilesmith_runtime* runtime, const tilesmith_matmul_desc* desc, void* stream) {
  return guarded([&] {
    const tilesmith::MatmulArgs args = to_args(desc);
    if (!runtime) throw tilesmith::InvalidArgument("tilesmith_matmul_ex: runtime is NULL");
    runtime->runtime.matmul(args, stream);
  });
}

int tilesmith_matmul_ex_config(tilesmith_runtime* runtime, const tilesmith_matmul_desc* desc,
                               char* config, int config_capacity, int* tuned) {
  return guarded([&] { write_config(runtime, to_args(desc), config, config_capacity, tuned); });
}

int tilesmith_rows(tilesmith_runtime* runtime, const tilesmith_rows_desc* desc, void* stream) {
  return guarded([&] {
    const tilesmith::RowArgs args = to_args(desc);
    if (!runtime) throw tilesmith::InvalidArgument("tilesmith_rows: runtime is NULL");
    runtime->runtime.rows(args, stream);
  });
}

int tilesmith_rows_config(tilesmith_runtime* runtime, const tilesmith_rows_desc* desc,
                          char* config, int config_capacity, int* tuned) {
  return guarded([&] { write_config(runtime, to_args(desc), config, config_capacity, tuned); });
}

int tilesmith_rows_backward(tilesmith_runtime* runtime, const tilesmith_rows_backward_desc* desc,
                            void* stream) {
  return guarded([&] {
    const tilesmith::RowBackwardArgs args = to_args(desc);
    if (!runtime) throw tilesmith::InvalidArgument("tilesmith_rows_backward: runtime is NULL");
    runtime->runtime.rows_backward(args, stream);
  });
}

int tilesmith_rows_backward_config(tilesmith_runtime* runtime,
                                   const tilesmith_rows_backward_desc* desc, char* config,
                                   int config_capacity, int* tuned) {
  return guarded([&] { write_config(runtime, to_args(desc), config, config_capacity, tuned); });
}

int tilesmith_multi_sum(tilesmith_runtime* runtime, const void* table, int64_t count,
                        int64_t total_elements, int dtype, int out_dtype, void* out, int mean,
                        void* stream) {
  return guarded([&] {
    const tilesmith::MultiSumArgs args{table, count, total_elements, to_dtype(dtype),
                                       to_dtype(out_dtype), out, mean != 0};
    if (!runtime) throw tilesmith::InvalidArgument("tilesmith_multi_sum: runtime is NULL");
    runtime->runtime.multi_sum(args, stream);
  });
}

int tilesmith_multi_sum_config(tilesmith_runtime* runtime, int64_t count, int64_t total_elements,
                               int dtype, int out_dtype, int mean, char* config,
                               int config_capacity, int* tuned) {
  return guarded([&] {
    const tilesmith::MultiSumArgs args{nullptr, count, total_elements, to_dtype(dtype),
                                       to_dtype(out_dtype), nullptr, mean != 0};
    write_config(runtime, args, config, config_capacity, tuned);
  });
}

int tilesmith_attention(tilesmith_runtime* runtime, const tilesmith_attention_desc* desc,
                        void* stream) {
  return guarded([&] {
    const tilesmith::AttentionArgs args = to_args(desc);
    if (!runtime) throw tilesmith::InvalidArgument("tilesmith_attention: runtime is NULL");
    runtime->runtime.attention(args, stream);
  });
}

int tilesmith_attention_config(tilesmith_runtime* runtime, const tilesmith_attention_desc* desc,
                               char* config, int config_capacity, int* tuned) {
  return guarded([&] { write_config(runtime, to_args(desc), config, config_capacity, tuned); });
}

int tilesmith_attention_backward(tilesmith_runtime* runtime,
                                 const tilesmith_attention_backward_desc* desc, void* stream) {
  return guarded([&] {
    const tilesmith::AttentionBackwardArgs args = to_args(desc);
    if (!runtime) throw tilesmith::InvalidArgument("tilesmith_attention_backward: runtime is NULL");
    runtime->runtime.attention_backward(args, stream);
  });
}

int tilesmith_attention_backward_config(tilesmith_runtime* runtime,
                                        const tilesmith_attention_backward_desc* desc, char* config,
                                        int config_capacity, int* tuned) {
  return guarded([&] { write_config(runtime, to_args(desc), config, config_capacity, tuned); });
}

const char* tilesmith_last_error(void) { return last_error.c_str(); }

}  // extern "C"
