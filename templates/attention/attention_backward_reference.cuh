// The trusted reference of attention_backward.cuh, in fp32 with exact exponentials, one launch:
// the first ceil(seq_q / 8) CTAs of each (batch, head) write dQ for 8 query rows, walking the
// keys 256 at a time; the rest write dK and dV for 8 keys of the head's kv head (the group's
// first head does, walking every query of every head of the group), 256 queries at a time.
// Both evaluate, pair by pair, P = exp(S * scale - lse) (0 where masked or where lse is -inf),
// dP = dO V^T and dS = P (dP - delta) with delta = rowsum(dO * O). p.dq, p.dk and p.dv point
// into the fp32 reference buffer, with the strides given.
#pragma once

#include "attention/attention_params.h"
#include "common/elementwise.cuh"

namespace tilesmith {

template <int KIND, int CAUSAL>
__global__ void __launch_bounds__(256) attention_backward_reference(const AttentionBackwardParams p) {
  constexpr int ROWS = 8, CHUNK = 256;  // CHUNK = threads, and the largest head dim
  __shared__ float left[ROWS][CHUNK];   // dQ: Q's rows; dK, dV: K's rows
  __shared__ float right[ROWS][CHUNK];  // dQ: dO's rows; dK, dV: V's rows
  __shared__ float probabilities[ROWS][CHUNK];
  __shared__ float gradients[ROWS][CHUNK];  // dS
  const AttentionParams& f = p.fwd;
  const int t = threadIdx.x;
  const int batch_head = blockIdx.y, batch = batch_head / f.heads, head = batch_head % f.heads;
  const int group = f.heads / f.kv_heads, kv_head = head / group;
  const int diagonal = f.seq_k - f.seq_q;
  const int q_blocks = (f.seq_q + ROWS - 1) / ROWS;
  const long long k_base = batch * f.k_strides.batch + kv_head * f.k_strides.head;
  const long long v_base = batch * f.v_strides.batch + kv_head * f.v_strides.head;
  auto q_base = [&](int h) { return batch * f.q_strides.batch + h * f.q_strides.head; };
  auto o_base = [&](int h) { return batch * f.o_strides.batch + h * f.o_strides.head; };
  auto do_base = [&](int h) { return batch * p.do_strides.batch + h * p.do_strides.head; };
  auto visible = [&](int query, int key) { return !CAUSAL || key <= query + diagonal; };
  // Query `row` of head `h`: its delta and its logsumexp.
  auto delta_of = [&](int h, int row) {
    float sum = 0.f;
    for (int d = 0; d < f.head_dim; ++d)
      sum += load_as_float<KIND>(p.d_o, do_base(h) + row * p.do_strides.row + d) *
             load_as_float<KIND>(f.o, o_base(h) + row * f.o_strides.row + d);
    return sum;
  };
  auto probability = [&](float dot, float lse) {
    return lse == __int_as_float(0xff800000) ? 0.f : expf(dot * f.scale - lse);
  };
  float* dq_out = static_cast<float*>(p.dq) + batch * p.dq_strides.batch + head * p.dq_strides.head;
  float* dk_out = static_cast<float*>(p.dk) + batch * p.dk_strides.batch + kv_head * p.dk_strides.head;
  float* dv_out = static_cast<float*>(p.dv) + batch * p.dv_strides.batch + kv_head * p.dv_strides.head;

  if (static_cast<int>(blockIdx.x) < q_blocks) {
    const int row0 = blockIdx.x * ROWS;
    for (int i = t; i < ROWS * f.head_dim; i += blockDim.x) {
      const int r = i / f.head_dim, d = i % f.head_dim, row = row0 + r;
      const bool valid = row < f.seq_q;
      left[r][d] = valid ? load_as_float<KIND>(f.q, q_base(head) + row * f.q_strides.row + d) : 0.f;
      right[r][d] = valid ? load_as_float<KIND>(p.d_o, do_base(head) + row * p.do_strides.row + d) : 0.f;
    }
    __shared__ float row_delta[ROWS], row_lse[ROWS];
    if (t < ROWS) {
      const int row = row0 + t;
      row_delta[t] = row < f.seq_q ? delta_of(head, row) : 0.f;
      row_lse[t] = row < f.seq_q ? f.lse[static_cast<long long>(batch_head) * f.seq_q + row] : 0.f;
    }
    __syncthreads();
    float acc[ROWS] = {};
    for (int key0 = 0; key0 < f.seq_k; key0 += CHUNK) {
      const int key = key0 + t;
      float dot[ROWS] = {}, dp[ROWS] = {};
      if (key < f.seq_k)
        for (int d = 0; d < f.head_dim; ++d) {
          const float kd = load_as_float<KIND>(f.k, k_base + key * f.k_strides.row + d);
          const float vd = load_as_float<KIND>(f.v, v_base + key * f.v_strides.row + d);
          for (int r = 0; r < ROWS; ++r) {
            dot[r] += left[r][d] * kd;
            dp[r] += right[r][d] * vd;
          }
        }
      for (int r = 0; r < ROWS; ++r) {
        const int row = row0 + r;
        const float prob = key < f.seq_k && row < f.seq_q && visible(row, key) ? probability(dot[r], row_lse[r]) : 0.f;
        gradients[r][t] = prob * (dp[r] - row_delta[r]);
      }
      __syncthreads();
      const int count = min(CHUNK, f.seq_k - key0);
      if (t < f.head_dim)
        for (int i = 0; i < count; ++i) {
          const float kd = load_as_float<KIND>(f.k, k_base + (key0 + i) * f.k_strides.row + t);
          for (int r = 0; r < ROWS; ++r) acc[r] += gradients[r][i] * kd;
        }
      __syncthreads();
    }
    for (int r = 0; r < ROWS; ++r) {
      const int row = row0 + r;
      if (row < f.seq_q && t < f.head_dim)
        dq_out[row * p.dq_strides.row + t] = acc[r] * f.scale;
    }
    return;
  }

  if (head % group != 0) return;  // the group's first head writes its kv head's dK and dV
  const int key0 = (blockIdx.x - q_blocks) * ROWS;
  if (key0 >= f.seq_k) return;
  for (int i = t; i < ROWS * f.head_dim; i += blockDim.x) {
    const int r = i / f.head_dim, d = i % f.head_dim, key = key0 + r;
    const bool valid = key < f.seq_k;
    left[r][d] = valid ? load_as_float<KIND>(f.k, k_base + key * f.k_strides.row + d) : 0.f;
    right[r][d] = valid ? load_as_float<KIND>(f.v, v_base + key * f.v_strides.row + d) : 0.f;
  }
  __syncthreads();
  float dk[ROWS] = {}, dv[ROWS] = {};
  for (int h = head; h < head + group; ++h)
    for (int query0 = 0; query0 < f.seq_q; query0 += CHUNK) {
      const int query = query0 + t;
      float dot[ROWS] = {}, dp[ROWS] = {};
      float row_delta = 0.f, lse = 0.f;
      if (query < f.seq_q) {
        for (int d = 0; d < f.head_dim; ++d) {
          const float qd = load_as_float<KIND>(f.q, q_base(h) + query * f.q_strides.row + d);
          const float dod = load_as_float<KIND>(p.d_o, do_base(h) + query * p.do_strides.row + d);
          for (int r = 0; r < ROWS; ++r) {
            dot[r] += left[r][d] * qd;
            dp[r] += right[r][d] * dod;
          }
        }
        row_delta = delta_of(h, query);
        lse = f.lse[(static_cast<long long>(batch) * f.heads + h) * f.seq_q + query];
      }
      for (int r = 0; r < ROWS; ++r) {
        const int key = key0 + r;
        const float prob = key < f.seq_k && query < f.seq_q && visible(query, key) ? probability(dot[r], lse) : 0.f;
        probabilities[r][t] = prob;
        gradients[r][t] = prob * (dp[r] - row_delta);
      }
      __syncthreads();
      const int count = min(CHUNK, f.seq_q - query0);
      if (t < f.head_dim)
        for (int i = 0; i < count; ++i) {
          const float qd = load_as_float<KIND>(f.q, q_base(h) + (query0 + i) * f.q_strides.row + t);
          const float dod = load_as_float<KIND>(p.d_o, do_base(h) + (query0 + i) * p.do_strides.row + t);
          for (int r = 0; r < ROWS; ++r) {
            dk[r] += gradients[r][i] * qd;
            dv[r] += probabilities[r][i] * dod;
          }
        }
      __syncthreads();
    }
  for (int r = 0; r < ROWS; ++r) {
    const int key = key0 + r;
    if (key < f.seq_k && t < f.head_dim) {
      dk_out[key * p.dk_strides.row + t] = dk[r] * f.scale;
      dv_out[key * p.dv_strides.row + t] = dv[r];
    }
  }
}

}  // namespace tilesmith
