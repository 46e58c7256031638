// The by-value arguments of the attention kernels (attention.cuh) and their reference. Included by
// the kernel source (NVRTC) and by the host descriptor, so both sides agree on the layout.
#pragma once

#include "common/host_device.h"
#include "common/tensor_map.h"

namespace tilesmith {

// Bytes from one row of a head-dim tile in shared memory to the next (`head_dim` padded to the
// mma's 16): an odd number of 16-byte chunks, so the eight rows an ldmatrix reads fall in eight
// different bank groups.
TILESMITH_HOST_DEVICE constexpr int attention_tile_pitch(int head_dim) { return (head_dim + 8) * 2; }

// Where element (batch b, head h, position s, dim d) of one tensor lives: b * batch + h * head +
// s * row + d, in elements. The head dim is contiguous; BSHD and BHSD are two choices of these.
struct AttentionStrides {
  long long batch, head, row;
};

// O = softmax(Q K^T * scale + mask) V per (batch, head), and the logsumexp of each row of the
// scaled scores. Q and O: batch x heads x seq_q x head_dim; K and V: batch x kv_heads x seq_k x
// head_dim; query head h reads kv head h / (heads / kv_heads). Causal: query i sees key j when
// j <= i + seq_k - seq_q (aligned bottom-right); a query that sees no key gets O = 0 and
// lse = -inf. lse: fp32, batch x heads x seq_q, packed; not written when null.
struct AttentionParams {
  const void* q;
  const void* k;
  const void* v;
  void* o;  // the reference writes fp32 here
  float* lse;
  AttentionStrides q_strides, k_strides, v_strides, o_strides;
  int batch, heads, kv_heads, seq_q, seq_k, head_dim;
  float scale;       // applied to the scores before the softmax
  float scale_log2;  // scale * log2(e): the kernels' exponentials are exp2
  int order_heads;   // the forward's tile_order 2: heads per group (attention_common.cuh)
};

// The wgmma forward's registers (attention_sm90.cuh). With one consumer warpgroup and a head
// dim up to 128, two CTAs share an SM: 128 registers a thread at launch, which also bounds what
// one wgmma may name (O of a 256-wide head does not fit), and the smem of two fits.
TILESMITH_HOST_DEVICE constexpr bool attention_sm90_two_ctas_an_sm(int consumers, int head_dim) {
  return consumers == 1 && head_dim <= 128;
}
// Per thread after setmaxnreg: the producer keeps what issuing TMA needs and the consumers share
// the rest of the CTA's registers (a CTA of 2-4 warpgroups alone on an SM has 65536); one
// consumer alone on an SM keeps ptxas's 255 and no setmaxnreg.
TILESMITH_HOST_DEVICE constexpr int attention_sm90_producer_registers(int consumers) {
  return consumers == 3 ? 32 : 24;
}
TILESMITH_HOST_DEVICE constexpr int attention_sm90_consumer_registers(int consumers, int head_dim) {
  return consumers == 1 ? (attention_sm90_two_ctas_an_sm(consumers, head_dim) ? 232 : 255)
                        : consumers == 2 ? 240 : 160;
}

// The wgmma kernel's argument (attention_sm90.cuh): Q, K and V also as TMA tensor maps; a
// persistent grid that claims its query blocks counts the claims in `claimed` (zeroed before
// each launch).
struct AttentionSm90Params {
  TensorMap q_map, k_map, v_map;
  AttentionParams p;
  int* claimed;
  int stages;  // depth of the K and V rings, >= 2
};

// dQ, dK and dV of O = softmax(Q K^T * scale + mask) V by recomputation (FlashAttention-2), in
// three launches (attention_backward.cuh, attention_backward_sm90.cuh): `prepare` writes each
// query row's delta = rowsum(dO * O) and its logsumexp in log2 units, and zeroes dQ's fp32
// accumulator; the main kernel walks key blocks, keeping their dK and dV in registers and adding
// into the accumulator; `finish` scales it into dQ. `fwd` holds Q, K, V, O, the logsumexp the
// forward wrote, their strides, sizes and scale; the reference writes fp32 dQ, dK and dV where
// dq, dk and dv point.
struct AttentionBackwardParams {
  AttentionParams fwd;
  const void* d_o;
  void* dq;
  void* dk;
  void* dv;
  AttentionStrides do_strides, dq_strides, dk_strides, dv_strides;
  // The workspace: per (batch, head), rows_pitch rows (seq_q, or more: the rows past it hold
  // delta 0 and a logsumexp of +inf, so their probabilities are 0) each of delta and of the
  // logsumexp times log2(e) (+inf where the forward's is -inf), and dQ's accumulator, dq_pitch
  // floats a row ([row][column]), or with dq_transposed dq_pitch columns of rows_pitch floats.
  float* delta;
  float* lse_log2;
  float* dq_accumulator;
  int rows_pitch;
  int dq_pitch;
  int dq_transposed;
};

// The wgmma backward's argument: Q, K, V and dO also as TMA tensor maps.
struct AttentionBackwardSm90Params {
  TensorMap q_map, k_map, v_map, do_map;
  AttentionBackwardParams p;
};

}  // namespace tilesmith
