// tilesmith's runtime: launches the tuned kernel for this GPU and shape.
//
//   tilesmith::Runtime runtime;                      // database at the default path
//   runtime.matmul({.a = a, .b = b, .c = c, .m = m, .n = n, .k = k,
//                   .dtype = tilesmith::DType::bf16}, stream);
//
// Lookup: in-memory map (no allocation, no SQL on the hot path) -> the database's winner for
// (GPU model, problem, template hash), its cubin loaded without NVRTC -> the winner of the
// nearest tuned shape (same GPU model, op and dtypes) whose config is valid for this shape ->
// the family's default config. A kernel compiled for a shape is stored in the database, so
// NVRTC runs once per shape and config. A shape with no winner of its own is recorded in the
// database's table of misses (`tilesmith misses`, `tilesmith tune --misses`); failing to record
// it only prints a warning.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "tilesmith/types.hpp"

namespace tilesmith {

struct RuntimeOptions {
  // Database file; empty: $TILESMITH_DB, else the user's cache directory.
  std::filesystem::path database;
  int device_ordinal = 0;
  // Whether a shape with no stored kernel may be compiled with NVRTC. Off (production): each
  // lookup takes the first of this shape's winner, the nearest tuned shape's winner and the
  // default config whose cubin the database holds, and a shape with none of them stored is an
  // Error naming it, not a compile. Unset: $TILESMITH_JIT ("off"/"0" or "on"/"1"), else on.
  std::optional<bool> jit = std::nullopt;
  // Shipped results under the user's: a database read and never written (a bundle of `tilesmith
  // export --format bundle`, or any tilesmith database). A shape's own winner in `database`
  // wins; else the system's own winner for it; the nearest tuned shape is sought in both; and a
  // stored cubin is taken from either. Empty: $TILESMITH_SYSTEM_DB, else none. A path that is
  // not a readable tilesmith database is an Error when the Runtime is made.
  std::filesystem::path system_database;
};

enum class Layout { row_major, column_major };
enum class Activation { none, relu, gelu, silu /* gelu: the exact (erf) form */ };

// C[b] = act(A[b] * B[b] + bias) + residual[b] for b < batch, fp32 inside, rounded once to C's
// type. A is m x k (row-major) or stored k x m (column-major); B is k x n or stored n x k (the
// weight of a linear layer, x * W^T); C is m x n row-major. A, B and C are 16-byte aligned
// device pointers; bias (n elements) and residual (like C) have C's type and are used when not
// null. A and B are bf16 or f16; C is either of those or f32.
//
// Strides, in elements, take views of larger tensors: each stored matrix's rows `ld*` apart
// (0: packed), its batches `batch_stride_*` apart (unset: packed; 0: one matrix serves every
// batch, for A, B and the residual). Strides that are not multiples of 8 elements are taken
// too, by the kernels that gather rows (tuned as the problem with option aligned=0).
struct MatmulArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  void* c = nullptr;
  std::int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::bf16;                // A and B
  std::optional<DType> out_dtype;           // C: dtype (default) or f32
  std::int64_t batch = 1;
  Layout a_layout = Layout::row_major;
  Layout b_layout = Layout::row_major;
  const void* bias = nullptr;
  const void* residual = nullptr;
  Activation activation = Activation::none;
  std::int64_t lda = 0, ldb = 0, ldc = 0, ld_residual = 0;
  std::optional<std::int64_t> batch_stride_a{}, batch_stride_b{}, batch_stride_c{},
      batch_stride_residual{};
};

// The row ops: each runs over the last dimension of a rows x cols tensor.
//   softmax                 y = exp(x - max) / sum(exp(x - max))
//   layernorm               y = (x - mean) * rstd * weight + bias, rstd = 1/sqrt(var + epsilon)
//   rmsnorm                 y = x * rstd * weight, rstd = 1/sqrt(mean(x^2) + epsilon)
//   *_act_residual          y = act(norm(x)) + residual
enum class RowOp { softmax, layernorm, rmsnorm, layernorm_act_residual, rmsnorm_act_residual };

// A row op's arguments. x, weight and bias have dtype; y and residual out_dtype; mean and rstd
// are fp32, one per row, written when not null (layernorm: both or neither; rmsnorm: rstd).
// weight and bias are used when not null (softmax takes neither, rmsnorm no bias); residual
// is required by the *_act_residual ops and refused by the others. Rows are `*_stride`
// elements apart (0: cols). Pointers need only be aligned to their elements.
struct RowArgs {
  RowOp op = RowOp::softmax;
  const void* x = nullptr;
  void* y = nullptr;
  std::int64_t rows = 0, cols = 0;
  DType dtype = DType::bf16;
  std::optional<DType> out_dtype;  // default: dtype
  const void* weight = nullptr;
  const void* bias = nullptr;
  const void* residual = nullptr;
  float* mean = nullptr;
  float* rstd = nullptr;
  Activation activation = Activation::none;
  double epsilon = 1e-5;
  std::int64_t x_stride = 0, y_stride = 0, residual_stride = 0;
};

// The backward row ops: dx from the forward's tensors and dy, and for the norms the column sums
// dweight and dbias.
//   softmax    dx = y * (dy - sum(y * dy))
//   rmsnorm    xhat = x * rstd, g = dy * weight, dx = rstd * (g - xhat * mean(g * xhat))
//   layernorm  xhat = (x - mean) * rstd, dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
//   dweight = sum over rows of dy * xhat, dbias = sum over rows of dy
enum class RowBackwardOp { softmax, layernorm, rmsnorm };

// A backward row op's arguments, typed as the forward's: x, weight, dx, dweight and dbias have
// dtype; y and dy out_dtype; mean and rstd are the forward's fp32 statistics (layernorm: both;
// rmsnorm: rstd). softmax reads its forward's output y in place of x. weight (norms) comes with
// dweight, each required by the other; dbias (layernorm) is written when not null. Rows are
// `*_stride` elements apart (0: cols). Pointers need only be aligned to their elements.
struct RowBackwardArgs {
  RowBackwardOp op = RowBackwardOp::softmax;
  const void* x = nullptr;  // softmax: y
  const void* dy = nullptr;
  void* dx = nullptr;
  std::int64_t rows = 0, cols = 0;
  DType dtype = DType::bf16;
  std::optional<DType> out_dtype;  // default: dtype
  const void* weight = nullptr;
  const float* mean = nullptr;
  const float* rstd = nullptr;
  void* dweight = nullptr;
  void* dbias = nullptr;
  std::int64_t x_stride = 0, dy_stride = 0, dx_stride = 0;
};

// The sums (or means, with `mean`) of `count` tensors of any lengths, in one call: `table`
// holds in device memory `count` entries {const void* data; int64_t length} (16 bytes each),
// the data of dtype, aligned to its elements. `total_elements` is the lengths' sum: the runtime
// dispatches on count and the mean length rounded up to a power of two (the shape a sweep
// tunes: `tune --op multi_sum --shape COUNTxLENGTH`). out: count values of out_dtype
// (default f32). A table whose lengths add up to more than twice the rounded mean's count
// (a wrong total_elements) gets NaN, never a write out of bounds.
struct MultiSumArgs {
  const void* table = nullptr;
  std::int64_t count = 0;
  std::int64_t total_elements = 0;
  DType dtype = DType::f32;
  std::optional<DType> out_dtype;  // default: f32
  void* out = nullptr;
  bool mean = false;
};

// Attention over batch x heads: O = softmax(Q K^T * scale + mask) V, and the logsumexp of each
// row of the scaled scores (for a backward pass). Q and O hold batch x heads x seq_q rows of
// head_dim elements, K and V batch x kv_heads x seq_k; query head h reads kv head
// h / (heads / kv_heads) (grouped-query and multi-query attention). Causal: query i sees key j
// when j <= i + seq_k - seq_q (aligned bottom-right, as FlashAttention); a query that sees no
// key gets O = 0 and lse = -inf. Q, K, V and O have dtype (bf16 or f16) and are 16-byte aligned;
// head_dim is a multiple of 8 up to 256. lse: fp32, batch x heads x seq_q packed, written when
// not null.
//
// Element (b, h, s, d) of each tensor is at b * batch + h * head + s * row + d elements; a stride
// left 0 is the layout's packed one (BSHD: [batch][seq][heads][head_dim], BHSD:
// [batch][heads][seq][head_dim]), so views such as Q inside a packed QKV tensor need only their
// row stride. Strides are non-negative multiples of 8 elements; O's rows at least a head dim apart.
enum class AttentionLayout { bshd, bhsd };
struct AttentionArgs {
  struct Strides {
    std::int64_t batch = 0, head = 0, row = 0;
  };
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;
  std::int64_t batch = 1, heads = 0, seq_q = 0, head_dim = 0;
  std::int64_t kv_heads = 0;  // 0: heads
  std::int64_t seq_k = 0;     // 0: seq_q
  DType dtype = DType::bf16;
  bool causal = false;
  AttentionLayout layout = AttentionLayout::bshd;
  std::optional<double> scale;  // default: 1 / sqrt(head_dim)
  Strides q_strides, k_strides, v_strides, o_strides;
};

// The backward of attention(): dQ, dK and dV from Q, K, V, O, dO and the logsumexp the forward
// wrote (FlashAttention-2's recomputation). `forward` describes the forward call as it was made
// (its lse is read, and required; O is read); dO and dQ are shaped as Q, dK and dV as K and V,
// each with its own strides under the same rules (dQ's, dK's and dV's rows at least a head dim
// apart). With grouped-query heads, a kv head's dK and dV sum over its group's query heads.
// The call runs three launches on `stream` and uses a workspace the runtime keeps per stream.
struct AttentionBackwardArgs {
  AttentionArgs forward;
  const void* d_o = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;
  AttentionArgs::Strides do_strides, dq_strides, dk_strides, dv_strides;
};

// Where the kernel a call used came from.
enum class KernelSource {
  memory,            // resolved by an earlier call
  database_winner,   // tuned for this exact shape
  nearest_winner,    // tuned for the nearest tuned shape (tuned_for)
  default_compiled,  // the family's default config, compiled by this call
  default_cached,    // the family's default config, its cubin from the database
  system_winner,     // tuned for this exact shape, from the system database
};

struct DispatchInfo {
  KernelSource source;
  std::string config;     // "block_k=32,block_m=128,..."
  bool tuned;             // a sweep's winner for this exact shape
  std::string tuned_for;  // the problem the config was tuned for; empty for the default
  // Why this shape's winner was not used: it was tuned with another NVRTC or driver (`tilesmith
  // status` lists it, `tilesmith tune --stale` tunes it again). Empty when none was refused.
  // The user's database is judged first, then the system's: the first refusal is named.
  std::string refused_winner;
};

class Runtime {
 public:
  // Throws Error("no CUDA driver/GPU found: ...") without a GPU, or for an unusable database.
  explicit Runtime(RuntimeOptions options = {});
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Enqueues the matmul on `stream` (a CUstream / cudaStream_t; nullptr: the legacy default
  // stream). Thread-safe. Throws Error for bad shapes, null or misaligned pointers, unsupported
  // dtypes, and launch failures.
  void matmul(const MatmulArgs& args, void* stream = nullptr);

  // What the last lookup for these arguments resolved to (loads it if needed).
  DispatchInfo describe_matmul(const MatmulArgs& args);

  // Enqueues a row op on `stream`; as matmul otherwise.
  void rows(const RowArgs& args, void* stream = nullptr);
  DispatchInfo describe_rows(const RowArgs& args);
  void rows_backward(const RowBackwardArgs& args, void* stream = nullptr);
  DispatchInfo describe_rows_backward(const RowBackwardArgs& args);
  void multi_sum(const MultiSumArgs& args, void* stream = nullptr);
  DispatchInfo describe_multi_sum(const MultiSumArgs& args);
  void attention(const AttentionArgs& args, void* stream = nullptr);
  DispatchInfo describe_attention(const AttentionArgs& args);
  void attention_backward(const AttentionBackwardArgs& args, void* stream = nullptr);
  DispatchInfo describe_attention_backward(const AttentionBackwardArgs& args);

  // Counts NVRTC compilations this runtime has done (0 on a warm database, and always with the
  // JIT off).
  int compilations() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tilesmith
