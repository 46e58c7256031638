#include "templates/attention/attention_shape.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tilesmith {

namespace {
constexpr int kMaxHeadDim = 256;
}

OptionTable attention_options() {
  return {{"causal", {"0", "1"}}, {"layout", {"bshd", "bhsd"}}};
}

AttentionShape::AttentionShape(const Problem& problem) {
  const std::vector<std::int64_t>& d = problem.shape;
  if (d.size() == 4) {
    batch = d[0];
    heads = kv_heads = d[1];
    seq_q = seq_k = d[2];
    head_dim = d[3];
  } else if (d.size() == 6) {
    batch = d[0];
    heads = d[1];
    kv_heads = d[2];
    seq_q = d[3];
    seq_k = d[4];
    head_dim = d[5];
  }
  causal = problem.option("causal") == "1";
  bhsd = problem.option("layout") == "bhsd";
}

AttentionStrides AttentionShape::packed(bool kv) const {
  const std::int64_t seq = kv ? seq_k : seq_q, count = kv ? kv_heads : heads;
  if (bhsd) return {count * seq * head_dim, seq * head_dim, head_dim};
  return {seq * count * head_dim, head_dim, count * head_dim};
}

std::int64_t AttentionShape::visible_keys(std::int64_t row) const {
  return causal ? std::clamp<std::int64_t>(row + seq_k - seq_q + 1, 0, seq_k) : seq_k;
}

double AttentionShape::visible_pairs() const {
  if (!causal) return static_cast<double>(seq_q) * static_cast<double>(seq_k);
  double pairs = 0;
  for (std::int64_t i = 0; i < seq_q; ++i) pairs += static_cast<double>(visible_keys(i));
  return pairs;
}

void require_supported_head_dim(const std::string& op, std::int64_t head_dim) {
  if (head_dim % 8 || head_dim > kMaxHeadDim)
    throw InvalidArgument(op + ": head dim " + std::to_string(head_dim) +
                          " is not supported (multiples of 8 up to 256)");
}

void validate_attention(const std::string& op, const OptionTable& options, const Problem& problem,
                        const std::string& shape_form) {
  if (problem.op != op) throw InvalidArgument(op + ": asked for op " + quote_input(problem.op));
  validate_options(op, options, problem);
  if (problem.dtype == DType::f32)
    throw InvalidArgument(op + ": dtype f32 is not supported (bf16 or f16)");
  if (problem.out_dtype != problem.dtype)
    throw InvalidArgument(op + ": O has the inputs' type (" + std::string(dtype_name(problem.dtype)) +
                          "), not " + std::string(dtype_name(problem.out_dtype)));
  const std::string shape = quote_input(problem.shape_text());
  if (problem.shape.size() != 4 && problem.shape.size() != 6)
    throw InvalidArgument(op + ": shape " + shape + " is not " + shape_form);
  for (std::int64_t dim : problem.shape)
    if (dim < 1 || dim > std::numeric_limits<int>::max())
      throw InvalidArgument(op + ": shape " + shape + " has a dimension below 1 or above 2^31");
  const AttentionShape s(problem);
  if (problem.shape.size() == 6 && s.heads == s.kv_heads && s.seq_q == s.seq_k)
    throw InvalidArgument(op + ": shape " + shape + " is self-attention: write it BxHxSxD (" +
                          std::to_string(s.batch) + "x" + std::to_string(s.heads) + "x" +
                          std::to_string(s.seq_q) + "x" + std::to_string(s.head_dim) +
                          "), one key per problem");
  if (s.heads % s.kv_heads)
    throw InvalidArgument(op + ": " + std::to_string(s.kv_heads) + " kv heads do not divide " +
                          std::to_string(s.heads) + " query heads");
  require_supported_head_dim(op, s.head_dim);
  if (s.batch * s.heads > std::numeric_limits<int>::max())
    throw InvalidArgument(op + ": shape " + shape + " is too large");
}

AttentionStrides attention_strides(const AttentionShape& s, const CallScalars& scalars,
                                   std::size_t index, bool kv) {
  AttentionStrides strides = s.packed(kv);
  if (scalars.batch_strides[index]) strides.batch = *scalars.batch_strides[index];
  if (scalars.head_strides[index]) strides.head = scalars.head_strides[index];
  if (scalars.row_strides[index]) strides.row = scalars.row_strides[index];
  return strides;
}

AttentionParams attention_sizes(const AttentionShape& s, const CallScalars& scalars) {
  AttentionParams p{};
  p.batch = static_cast<int>(s.batch);
  p.heads = static_cast<int>(s.heads);
  p.kv_heads = static_cast<int>(s.kv_heads);
  p.seq_q = static_cast<int>(s.seq_q);
  p.seq_k = static_cast<int>(s.seq_k);
  p.head_dim = static_cast<int>(s.head_dim);
  const double scale = scalars.softmax_scale.value_or(1 / std::sqrt(static_cast<double>(s.head_dim)));
  p.scale = static_cast<float>(scale);
  p.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  p.order_heads = static_cast<int>(s.batch * s.heads);
  return p;
}

int attention_order_heads(const AttentionShape& s, DType dtype, std::int64_t l2_bytes) {
  const long long pairs = s.batch * s.heads;
  if (l2_bytes <= 0) return static_cast<int>(pairs);
  const double kv_bytes_per_head = 2.0 * static_cast<double>(s.seq_k) *
                                   static_cast<double>(s.head_dim) *
                                   static_cast<double>(dtype_size(dtype)) *
                                   static_cast<double>(s.kv_heads) / static_cast<double>(s.heads);
  const double fitting = static_cast<double>(l2_bytes) / 2 / kv_bytes_per_head;
  return static_cast<int>(std::clamp<double>(std::floor(fitting), 1, static_cast<double>(pairs)));
}

TensorMapSpec attention_tensor_map(const AttentionShape& s, DType dtype, std::uint64_t address,
                                   const AttentionStrides& strides, bool kv, int rows) {
  const std::uint64_t e = dtype_size(dtype);
  TensorMapSpec spec;
  spec.dtype = dtype;
  spec.rank = 4;
  spec.address = address;
  spec.dims[0] = static_cast<std::uint64_t>(s.head_dim);
  spec.dims[1] = static_cast<std::uint64_t>(kv ? s.seq_k : s.seq_q);
  spec.dims[2] = static_cast<std::uint64_t>(kv ? s.kv_heads : s.heads);
  spec.dims[3] = static_cast<std::uint64_t>(s.batch);
  spec.stride_bytes[0] = static_cast<std::uint64_t>(strides.row) * e;
  spec.stride_bytes[1] = static_cast<std::uint64_t>(strides.head) * e;
  spec.stride_bytes[2] = static_cast<std::uint64_t>(strides.batch) * e;
  spec.box[0] = 64;
  spec.box[1] = static_cast<std::uint32_t>(rows);
  spec.box[2] = spec.box[3] = 1;
  spec.swizzle_bytes = 128;
  return spec;
}

int wgmma_head_dim(std::int64_t head_dim) {
  for (int n : {64, 96, 128, 192, 256})
    if (head_dim <= n) return n;
  return 0;
}

}  // namespace tilesmith
