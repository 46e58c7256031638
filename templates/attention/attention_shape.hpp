// What the attention families (the forward, attention_family.cpp, and the backward,
// attention_backward_family.cpp) share on the host: the problem's shape and options, their
// validation, and the strides and scalars every attention kernel argument starts from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "templates/attention/attention_params.h"
#include "templates/family.hpp"

namespace tilesmith {

// causal=1 (aligned bottom-right) and layout=bhsd, for both ops.
OptionTable attention_options();

// A problem as the kernels see it. The shape is BxHxSxD (self-attention: as many kv heads as
// heads, one length) or BxHQxHKVxSQxSKxD.
struct AttentionShape {
  std::int64_t batch = 0, heads = 0, kv_heads = 0, seq_q = 0, seq_k = 0, head_dim = 0;
  bool causal = false;
  bool bhsd = false;

  explicit AttentionShape(const Problem& problem);
  // The head dim the mma.sync kernels compute with: a multiple of `multiple` (the mma's k step
  // of 16, or more where warps split it); the columns past head_dim are zeros.
  int padded_head_dim(int multiple = 16) const {
    return static_cast<int>((head_dim + multiple - 1) / multiple * multiple);
  }
  // The strides of a packed tensor of this layout: Q and O (`kv` false) or K and V.
  AttentionStrides packed(bool kv) const;
  std::size_t elements(bool kv) const {
    return static_cast<std::size_t>(batch * (kv ? kv_heads * seq_k : heads * seq_q) * head_dim);
  }
  std::size_t rows_of_queries() const { return static_cast<std::size_t>(batch * heads * seq_q); }
  // Keys query `row` sees: all of them, or those up to its diagonal.
  std::int64_t visible_keys(std::int64_t row) const;
  // Query-key pairs that count: all of them, or those on or below the diagonal.
  double visible_pairs() const;
};

// Throws InvalidArgument, naming `op`, for a head dim no attention kernel takes (not a
// multiple of 8 up to 256): checked before anything else about the tensors, since it decides
// what their strides can be.
void require_supported_head_dim(const std::string& op, std::int64_t head_dim);

// Throws InvalidArgument, naming `op`, for a problem neither attention op can run: options,
// dtypes, a shape of another form, kv heads that do not divide the heads, a head dim that is
// not a multiple of 8 up to 256, or self-attention written in the 6-dim form.
void validate_attention(const std::string& op, const OptionTable& options, const Problem& problem,
                        const std::string& shape_form);

// Tensor `index`'s strides as the call gives them (`scalars`, by the op's tensor order), else as
// the layout packs it (`kv`: a K or V shaped tensor).
AttentionStrides attention_strides(const AttentionShape& s, const CallScalars& scalars,
                                   std::size_t index, bool kv);

// The sizes and the softmax scale (the call's, else 1 / sqrt(head dim)) of an attention
// kernel's argument; the tensors and strides are the op's to fill in.
AttentionParams attention_sizes(const AttentionShape& s, const CallScalars& scalars);

// The forward's tile_order 2: how many (batch, head) pairs take their query blocks together (at
// least one): as many as have their keys and values in half of an L2 of `l2_bytes` (query
// heads of one kv head share theirs). Every pair where the L2's size is unknown (0).
int attention_order_heads(const AttentionShape& s, DType dtype, std::int64_t l2_bytes);

// A 4D TMA map {head dim, seq, heads, batch} of one tensor (`kv`: shaped as K and V), with its
// strides, in boxes of 64 columns (one 128-byte swizzled row) by `rows`: the wgmma kernels'.
TensorMapSpec attention_tensor_map(const AttentionShape& s, DType dtype, std::uint64_t address,
                                   const AttentionStrides& strides, bool kv, int rows);

// The head dims the wgmma kernels compute with (their register-form N): 64, 96, 128, 192 or 256.
int wgmma_head_dim(std::int64_t head_dim);

}  // namespace tilesmith
