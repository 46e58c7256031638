// Attention backward on Hopper (sm_90a): the main kernel of the three launches (prepare, this,
// finish: attention_backward.cuh and below) on wgmma fed by TMA.
//
// A CTA owns 128 keys of one kv head: K and V arrive once by TMA; a producer warpgroup brings
// each query block (BLOCK_M = 64 rows of Q and dO, or 128 up to head dim 64, and their
// logsumexp and delta from the workspace) into a STAGES-deep ring on mbarriers, walking every
// query head of the kv head's group. Two consumer warpgroups own 64 keys each, with keys as
// the wgmma's M:
//   S^T = K Q^T and dP^T = V dO^T from shared memory (both K-major), P and dS in registers;
//   dV += P^T dO and dK += dS^T Q by wgmma's register form (dO and Q N-major from shared
//   memory), so dK and dV stay in registers for the whole walk;
//   dS^T goes to shared memory (swizzled as TMA would write it), and dQ^T = K^T dS^T (both
//   M/N-major from shared memory) takes 64 columns of the head dim per warpgroup (at a head
//   dim of one panel, each warpgroup's own 64 keys, both adding; the warpgroups then meet only
//   at the ring). It is added into the fp32 accumulator, kept transposed ([column][row]) so
//   each thread's pairs of rows are adjacent, by vector reductions;
//   attention_backward_finish_dq_transposed turns it into dQ.
// Shared memory, 1024-byte aligned, tiles in 64-column panels of 128-byte rows (128-byte
// swizzle): K, V: PANELS x [128 keys][128 B]; Q, dO: STAGES x PANELS x [BLOCK_M rows][128 B];
// dS^T: 2 x BLOCK_M / 64 x [128 keys][64 queries x 2 B] (double-buffered: one barrier a step);
// statistics: STAGES x [BLOCK_M logsumexps][BLOCK_M deltas]; mbarriers kv_full, full[STAGES],
// empty[STAGES].
#pragma once

#include "attention/attention_backward.cuh"
#include "common/hopper.cuh"

namespace tilesmith {

// What a backward CTA owns (BLOCK_N keys of one kv head) and the query blocks it walks: every
// query head of the kv head's group, each from the first block that sees its keys (causal) to
// the last. The walk through a head starts at a block rotated by the key block, so the CTAs of
// one head, running side by side, add into different rows of dQ's accumulator at any moment
// rather than all into the same ones. (The mma.sync kernel, at the register limit, walks the
// same blocks in order: attention_backward.cuh.)
struct KeyBlockWalk {
  int batch, kv_head, key0, diagonal;
  int first_head, m_first, per_head, rotation, steps;
  __device__ __forceinline__ int head(int step) const { return first_head + step / per_head; }
  template <int BLOCK_M>
  __device__ __forceinline__ int row0(int step) const {
    int m = step % per_head + rotation;
    if (m >= per_head) m -= per_head;
    return (m_first + m) * BLOCK_M;
  }
};

// TILE_ORDER 0: blockIdx.x walks the key blocks of one kv head (they share its Q and dO in L2);
// 1: blockIdx.x walks the (batch, kv head)s. Either way key block 0, which causal queries see
// most, comes first.
template <int BLOCK_M, int BLOCK_N, int CAUSAL, int TILE_ORDER>
__device__ __forceinline__ KeyBlockWalk key_block_walk(const AttentionParams& f) {
  KeyBlockWalk w;
  const int key_block = TILE_ORDER == 0 ? static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.y);
  const int batch_kv = TILE_ORDER == 0 ? static_cast<int>(blockIdx.y) : static_cast<int>(blockIdx.x);
  w.batch = batch_kv / f.kv_heads;
  w.kv_head = batch_kv % f.kv_heads;
  const int group = f.heads / f.kv_heads;
  w.first_head = w.kv_head * group;
  w.key0 = key_block * BLOCK_N;
  w.diagonal = f.seq_k - f.seq_q;
  // Causal: the first query that sees key0 is key0 - diagonal; every key is seen by the last.
  w.m_first = CAUSAL ? max(0, w.key0 - w.diagonal) / BLOCK_M : 0;
  w.per_head = (f.seq_q + BLOCK_M - 1) / BLOCK_M - w.m_first;
  w.rotation = key_block % w.per_head;
  w.steps = group * w.per_head;
  return w;
}

// TILE_ORDER: key_block_walk.
template <int KIND, int HEAD_DIM, int BLOCK_M, int STAGES, int CAUSAL, int TILE_ORDER>
__global__ void __launch_bounds__(384, 1)
    attention_backward_sm90(const __grid_constant__ AttentionBackwardSm90Params params) {
  wait_for_previous_launch();
  allow_next_launch();
  constexpr int BLOCK_N = 128;
  constexpr int PANELS = (HEAD_DIM + 63) / 64;
  constexpr int KV_PANEL = BLOCK_N * 128, Q_PANEL = BLOCK_M * 128;
  constexpr int Q_STAGE = PANELS * Q_PANEL;
  // dS^T: BLOCK_M / 64 panels of [128 keys][64 queries].
  constexpr int DS_PANEL = BLOCK_N * 128, DS_BYTES = (BLOCK_M / 64) * DS_PANEL;
  constexpr int M_TILES = BLOCK_M / 8;  // 8-query tiles of S^T
  constexpr int STATS_STAGE = 2 * BLOCK_M * 4;
  constexpr int K_STEPS = HEAD_DIM / 16;
  constexpr int PRODUCER_REGS = 24, CONSUMER_REGS = 240;
  static_assert(HEAD_DIM % 16 == 0 && HEAD_DIM <= 128 && STAGES >= 2, "tile shape");
  static_assert(BLOCK_M == 64 || (BLOCK_M == 128 && HEAD_DIM <= 64), "S^T, dP^T, dK and dV in registers");
  const AttentionBackwardParams& p = params.p;
  const AttentionParams& f = p.fwd;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned k_tile = (smem_address(smem_raw) + 1023u) & ~1023u;
  const unsigned v_tile = k_tile + PANELS * KV_PANEL;
  const unsigned q_ring = v_tile + PANELS * KV_PANEL;
  const unsigned do_ring = q_ring + STAGES * Q_STAGE;
  const unsigned ds_tiles = do_ring + STAGES * Q_STAGE;
  const unsigned stats_ring = ds_tiles + 2 * DS_BYTES;
  const unsigned barriers = stats_ring + STAGES * STATS_STAGE;
  const unsigned kv_full = barriers;
  auto full = [&](int s) { return barriers + 8u * (1 + s); };
  auto empty = [&](int s) { return barriers + 8u * (1 + STAGES + s); };
  const float* stats = reinterpret_cast<const float*>(smem_raw + (stats_ring - smem_address(smem_raw)));

  const KeyBlockWalk walk = key_block_walk<BLOCK_M, BLOCK_N, CAUSAL, TILE_ORDER>(f);
  const int batch = walk.batch, kv_head = walk.kv_head, key0 = walk.key0, diagonal = walk.diagonal;
  const int steps = walk.steps;

  if (threadIdx.x == 0) {
    mbarrier_init(kv_full, 1);
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(full(s), 1);
      mbarrier_init(empty(s), 2);
    }
    fence_mbarrier_init();
  }
  if (threadIdx.x == 32) {
    tma_prefetch_map(&params.q_map);
    tma_prefetch_map(&params.k_map);
    tma_prefetch_map(&params.v_map);
    tma_prefetch_map(&params.do_map);
  }
  __syncthreads();

  if (warpgroup_index() == 0) {
    warpgroup_regs_release<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      mbarrier_arrive_expect_tx(kv_full, 2 * PANELS * KV_PANEL);
#pragma unroll
      for (int panel = 0; panel < PANELS; ++panel) {
        tma_load_4d(k_tile + panel * KV_PANEL, &params.k_map, kv_full, 64 * panel, key0, kv_head, batch);
        tma_load_4d(v_tile + panel * KV_PANEL, &params.v_map, kv_full, 64 * panel, key0, kv_head, batch);
      }
      int stage = 0;
      unsigned phase = 0;
      for (int step = 0; step < steps; ++step) {
        const int head = walk.head(step);
        const int row0 = walk.row0<BLOCK_M>(step);
        mbarrier_wait(empty(stage), phase ^ 1u);
        mbarrier_arrive_expect_tx(full(stage), 2 * Q_STAGE + STATS_STAGE);
#pragma unroll
        for (int panel = 0; panel < PANELS; ++panel) {
          tma_load_4d(q_ring + stage * Q_STAGE + panel * Q_PANEL, &params.q_map, full(stage), 64 * panel,
                      row0, head, batch);
          tma_load_4d(do_ring + stage * Q_STAGE + panel * Q_PANEL, &params.do_map, full(stage),
                      64 * panel, row0, head, batch);
        }
        const long long first = (static_cast<long long>(batch) * f.heads + head) * p.rows_pitch + row0;
        bulk_load(stats_ring + stage * STATS_STAGE, p.lse_log2 + first, BLOCK_M * 4, full(stage));
        bulk_load(stats_ring + stage * STATS_STAGE + BLOCK_M * 4, p.delta + first, BLOCK_M * 4, full(stage));
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1u;
        }
      }
    }
    return;
  }

  warpgroup_regs_claim<CONSUMER_REGS>();
  const int c = warpgroup_index() - 1;  // keys 64c .. 64c + 63 of the block
  const int tid = threadIdx.x % 128, lane = tid % 32;
  const int key_row = 64 * c + 16 * (tid / 32) + lane / 4;  // and key_row + 8
  // S^T's A (this warpgroup's keys, K-major), its B (the stage's queries, K-major); dV's and dK's
  // B (the stage's dO and Q rows, N-major over the head dim); dQ^T's A (K's panel c, M-major
  // over the head dim) and B (dS^T, N-major over the queries).
  const unsigned long long k_desc = wgmma_desc_sw128(k_tile + 64 * c * 128, 16, 1024);
  const unsigned long long v_desc = wgmma_desc_sw128(v_tile + 64 * c * 128, 16, 1024);
  const unsigned long long q_desc = wgmma_desc_sw128(q_ring, 16, 1024);
  const unsigned long long do_desc = wgmma_desc_sw128(do_ring, 16, 1024);
  const unsigned long long q_mn_desc = wgmma_desc_sw128(q_ring, Q_PANEL, 1024);
  const unsigned long long do_mn_desc = wgmma_desc_sw128(do_ring, Q_PANEL, 1024);
  // dQ^T: with two panels, each warpgroup takes one (64 columns of the head dim) over all 128
  // keys; with one, each takes it over its own 64 keys, and both add into the accumulator.
  const int dq_panel = PANELS == 2 ? c : 0, dq_key0 = PANELS == 2 ? 0 : 64 * c;
  constexpr int DQ_KEY_STEPS = PANELS == 2 ? BLOCK_N / 16 : BLOCK_N / 32;
  const unsigned long long kt_desc = wgmma_desc_sw128(k_tile + dq_panel * KV_PANEL + dq_key0 * 128, KV_PANEL, 1024);
  const unsigned long long ds_desc = wgmma_desc_sw128(ds_tiles + dq_key0 * 128, DS_PANEL, 1024);

  float dk[HEAD_DIM / 2], dv[HEAD_DIM / 2];
#pragma unroll
  for (int i = 0; i < HEAD_DIM / 2; ++i) dk[i] = dv[i] = 0.f;
  mbarrier_wait(kv_full, 0);

  int stage = 0;
  unsigned phase = 0;
  for (int step = 0; step < steps; ++step) {
    const int head = walk.head(step);
    const int row0 = walk.row0<BLOCK_M>(step);
    mbarrier_wait(full(stage), phase);

    // S^T and dP^T: 64 keys by the block's 64 queries each.
    float s[M_TILES][4], dp[M_TILES][4];
    float(&s_flat)[BLOCK_M / 2] = reinterpret_cast<float(&)[BLOCK_M / 2]>(s);
    float(&dp_flat)[BLOCK_M / 2] = reinterpret_cast<float(&)[BLOCK_M / 2]>(dp);
#pragma unroll
    for (int i = 0; i < BLOCK_M / 2; ++i) s_flat[i] = dp_flat[i] = 0.f;
    // The zeros in place before the first wgmma: a register written between two wgmmas of a
    // batch serializes them (ptxas C7514).
    wgmma_fence_registers(s_flat);
    wgmma_fence_registers(dp_flat);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < K_STEPS; ++kk) {
      const unsigned a = (kk / 4) * KV_PANEL + (kk % 4) * 32;
      const unsigned b = stage * Q_STAGE + (kk / 4) * Q_PANEL + (kk % 4) * 32;
      wgmma_tile_m64<BLOCK_M, KIND, 0, 0>(s_flat, k_desc + (a >> 4), q_desc + (b >> 4));
    }
#pragma unroll
    for (int kk = 0; kk < K_STEPS; ++kk) {
      const unsigned a = (kk / 4) * KV_PANEL + (kk % 4) * 32;
      const unsigned b = stage * Q_STAGE + (kk / 4) * Q_PANEL + (kk % 4) * 32;
      wgmma_tile_m64<BLOCK_M, KIND, 0, 0>(dp_flat, v_desc + (a >> 4), do_desc + (b >> 4));
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_registers(s_flat);
    wgmma_fence_registers(dp_flat);

    // P = exp2(S * scale log2 e - lse log2 e), 0 where masked; dS = P (dP - delta).
    const float* lse_log2 = stats + stage * (STATS_STAGE / 4);
    const float* delta = lse_log2 + BLOCK_M;
    const bool edge = key0 + BLOCK_N > f.seq_k || (CAUSAL && key0 + BLOCK_N - 1 > row0 + diagonal);
#pragma unroll
    for (int j = 0; j < M_TILES; ++j) {
      const int column = 8 * j + 2 * (lane % 4);
      const float2 lse2 = *reinterpret_cast<const float2*>(lse_log2 + column);
      const float2 delta2 = *reinterpret_cast<const float2*>(delta + column);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float probability = exp2f(s[j][e] * f.scale_log2 - (e % 2 ? lse2.y : lse2.x));
        if (edge) {
          const int key = key0 + key_row + (e / 2) * 8;
          const int query = row0 + column + e % 2;
          if (key >= f.seq_k || (CAUSAL && key > query + diagonal)) probability = 0.f;
        }
        s[j][e] = probability;
        dp[j][e] = probability * (dp[j][e] - (e % 2 ? delta2.y : delta2.x));
      }
    }
    unsigned p_frag[BLOCK_M / 16][4], ds_frag[BLOCK_M / 16][4];
#pragma unroll
    for (int kq = 0; kq < BLOCK_M / 16; ++kq) {
      probability_fragment<KIND>(s, kq, p_frag[kq]);
      probability_fragment<KIND>(dp, kq, ds_frag[kq]);
    }

    // dV += P^T dO and dK += dS^T Q, left running while dS^T goes to shared memory.
    wgmma_fence();
#pragma unroll
    for (int kq = 0; kq < BLOCK_M / 16; ++kq) {
      const unsigned b = stage * Q_STAGE + kq * 16 * 128;
      wgmma_tile_m64_rs<HEAD_DIM, KIND, 1>(dv, p_frag[kq], do_mn_desc + (b >> 4));
    }
#pragma unroll
    for (int kq = 0; kq < BLOCK_M / 16; ++kq) {
      const unsigned b = stage * Q_STAGE + kq * 16 * 128;
      wgmma_tile_m64_rs<HEAD_DIM, KIND, 1>(dk, ds_frag[kq], q_mn_desc + (b >> 4));
    }
    wgmma_commit();

    // dS^T, rows of keys, as the 128-byte swizzle lays out 64 queries a row (a panel per 64):
    // 16-byte chunk c of row r at chunk c ^ (r % 8).
    const unsigned ds_tile = ds_tiles + (step % 2) * DS_BYTES;
#pragma unroll
    for (int j = 0; j < M_TILES; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = key_row + 8 * r;
        store_shared_u32(ds_tile + (j / 8) * DS_PANEL + row * 128 + (((j % 8) ^ (row % 8)) << 4) + 4 * (lane % 4),
                         ds_frag[j / 2][2 * (j % 2) + r]);
      }
    fence_proxy_async_shared();
    // The dS^T rows the dQ^T below reads are written, and the other buffer's readers done: both
    // warpgroups' rows with two panels; with one, only this warpgroup's own, so the two need
    // not meet and drift apart, one's softmax running under the other's GEMMs.
    if (PANELS == 2)
      named_barrier_sync(1, 256);
    else
      named_barrier_sync(1 + c, 128);

    // dQ^T (64 columns of the head dim by the block's queries) += K^T dS^T.
    float dq[BLOCK_M / 2];
#pragma unroll
    for (int i = 0; i < BLOCK_M / 2; ++i) dq[i] = 0.f;
    wgmma_fence_registers(dq);
    wgmma_fence();
#pragma unroll
    for (int kb = 0; kb < DQ_KEY_STEPS; ++kb)
      wgmma_tile_m64<BLOCK_M, KIND, 1, 1>(dq, kt_desc + ((kb * 16 * 128) >> 4),
                                     ds_desc + (((step % 2) * DS_BYTES + kb * 16 * 128) >> 4));
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_registers(dv);
    wgmma_fence_registers(dk);
    wgmma_fence_registers(dq);
    if (tid == 0) mbarrier_arrive(empty(stage));
    {
      float* accumulator = p.dq_accumulator + (static_cast<long long>(batch) * f.heads + head) *
                                                  p.dq_pitch * p.rows_pitch;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int column = 64 * dq_panel + 16 * (tid / 32) + lane / 4 + 8 * r;
        if (column >= f.head_dim) continue;
        float* at = accumulator + static_cast<long long>(column) * p.rows_pitch + row0 + 2 * (lane % 4);
#pragma unroll
        for (int j = 0; j < M_TILES; ++j) reduce_add_2(at + 8 * j, dq[4 * j + 2 * r], dq[4 * j + 2 * r + 1]);
      }
    }
    if (++stage == STAGES) {
      stage = 0;
      phase ^= 1u;
    }
  }

  // dK (scaled) and dV straight from the registers, pairs of columns.
  half_bits* dk_out = static_cast<half_bits*>(p.dk) + batch * p.dk_strides.batch + kv_head * p.dk_strides.head;
  half_bits* dv_out = static_cast<half_bits*>(p.dv) + batch * p.dv_strides.batch + kv_head * p.dv_strides.head;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int key = key0 + key_row + 8 * r;
    if (key >= f.seq_k) continue;
#pragma unroll
    for (int j = 0; j < HEAD_DIM / 8; ++j) {
      const int column = 8 * j + 2 * (lane % 4);
      if (column >= f.head_dim) continue;
      *reinterpret_cast<unsigned*>(dk_out + key * p.dk_strides.row + column) =
          pack2<KIND>(dk[4 * j + 2 * r] * f.scale, dk[4 * j + 2 * r + 1] * f.scale);
      *reinterpret_cast<unsigned*>(dv_out + key * p.dv_strides.row + column) =
          pack2<KIND>(dv[4 * j + 2 * r], dv[4 * j + 2 * r + 1]);
    }
  }
}

// The transposed accumulator ([column][row] per (batch, head)) into dQ, scaled: a CTA per 64
// query rows, through shared memory so both the reads and the writes are along rows.
template <int KIND>
__global__ void __launch_bounds__(256) attention_backward_finish_dq_transposed(const AttentionBackwardParams p) {
  wait_for_previous_launch();
  allow_next_launch();
  __shared__ float tile[128][65];  // [column][row]; odd pitch: conflict-free both ways
  const AttentionParams& f = p.fwd;
  const int batch_head = blockIdx.y, row0 = blockIdx.x * 64;
  const float* accumulator = p.dq_accumulator + static_cast<long long>(batch_head) * p.dq_pitch * p.rows_pitch;
  for (int i = threadIdx.x; i < f.head_dim * 64; i += blockDim.x) {
    const int column = i / 64, r = i % 64;
    tile[column][r] = accumulator[static_cast<long long>(column) * p.rows_pitch + row0 + r];
  }
  __syncthreads();
  const int batch = batch_head / f.heads, head = batch_head % f.heads;
  half_bits* dq = static_cast<half_bits*>(p.dq) + batch * p.dq_strides.batch + head * p.dq_strides.head;
  const int pairs = f.head_dim / 2;
  for (int i = threadIdx.x; i < 64 * pairs; i += blockDim.x) {
    const int r = i / pairs, column = 2 * (i % pairs);
    if (row0 + r >= f.seq_q) break;
    *reinterpret_cast<unsigned*>(dq + (row0 + r) * p.dq_strides.row + column) =
        pack2<KIND>(tile[column][r] * f.scale, tile[column + 1][r] * f.scale);
  }
}

}  // namespace tilesmith
