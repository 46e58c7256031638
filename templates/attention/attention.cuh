// Attention forward on mma.sync (sm_80 and later), the FlashAttention-2 structure: a CTA owns
// BLOCK_M query rows of one head and walks the key/value blocks it can see, BLOCK_N keys at a
// time, through a STAGES-deep cp.async ring. Each warp owns M_TILES x 16 query rows: S = Q K^T
// lands in registers, the online softmax rescales the running output there, and P goes straight
// from the accumulator layout into the A operand of O += P V, never through shared memory.
#pragma once

#include "attention/attention_common.cuh"

namespace tilesmith {

// TILE_ORDER: query_block (attention_common.cuh).
template <int KIND, int HEAD_DIM, int BLOCK_M, int BLOCK_N, int WARPS, int STAGES, int CAUSAL,
          int Q_IN_REGISTERS, int TILE_ORDER>
__global__ void __launch_bounds__(WARPS * 32) attention_forward(const AttentionParams p) {
  wait_for_previous_launch();
  allow_next_launch();
  constexpr int THREADS = WARPS * 32;
  constexpr int M_TILES = BLOCK_M / WARPS / 16;  // 16-row mma tiles per warp
  constexpr int N_TILES = BLOCK_N / 8;           // 8-key tiles of S
  constexpr int D_TILES = HEAD_DIM / 8;          // 8-column tiles of O
  constexpr int K_STEPS = HEAD_DIM / 16;
  constexpr int PITCH = attention_tile_pitch(HEAD_DIM);
  constexpr int CHUNKS = HEAD_DIM / 8;
  static_assert(M_TILES >= 1 && BLOCK_M == WARPS * M_TILES * 16, "BLOCK_M: 16-row tiles per warp");
  static_assert(BLOCK_N % 16 == 0 && HEAD_DIM % 16 == 0 && STAGES >= 2, "tile shape");

  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned q_tile = smem_address(smem);
  const unsigned k_ring = q_tile + BLOCK_M * PITCH;
  const unsigned v_ring = k_ring + STAGES * BLOCK_N * PITCH;

  const QueryBlock block =
      query_block<BLOCK_M, BLOCK_N, CAUSAL, TILE_ORDER>(p, static_cast<int>(blockIdx.x));
  const half_bits* q = static_cast<const half_bits*>(p.q) + block.batch * p.q_strides.batch +
                       block.head * p.q_strides.head;
  const half_bits* k = static_cast<const half_bits*>(p.k) + block.batch * p.k_strides.batch +
                       block.kv_head * p.k_strides.head;
  const half_bits* v = static_cast<const half_bits*>(p.v) + block.batch * p.v_strides.batch +
                       block.kv_head * p.v_strides.head;
  half_bits* o = static_cast<half_bits*>(p.o) + block.batch * p.o_strides.batch +
                 block.head * p.o_strides.head;
  const int row0 = block.row0, n_blocks = block.key_blocks;

  const int lane = threadIdx.x % 32;
  const int warp_row = static_cast<int>(threadIdx.x / 32) * M_TILES * 16;

  // Group 0 is Q with the first key block; one group per block after it, empty past the end, so
  // the count of pending groups is the same every iteration.
  load_head_tile<BLOCK_M, HEAD_DIM, THREADS>(q_tile, q, p.q_strides.row, row0, p.seq_q, p.head_dim);
  // Key block `key_block` of K and V into ring slot `slot`.
  auto load_key_block = [&](int slot, int key_block) {
    load_head_tile<BLOCK_N, HEAD_DIM, THREADS>(k_ring + slot * BLOCK_N * PITCH, k, p.k_strides.row,
                                               key_block * BLOCK_N, p.seq_k, p.head_dim);
    load_head_tile<BLOCK_N, HEAD_DIM, THREADS>(v_ring + slot * BLOCK_N * PITCH, v, p.v_strides.row,
                                               key_block * BLOCK_N, p.seq_k, p.head_dim);
  };
#pragma unroll
  for (int stage = 0; stage < STAGES - 1; ++stage) {
    if (stage < n_blocks) load_key_block(stage, stage);
    cp_async_commit();
  }

  float o_acc[M_TILES][D_TILES][4];
  float row_max[M_TILES][2], row_sum[M_TILES][2];  // scaled log2 units; this thread's share
#pragma unroll
  for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
    for (int dt = 0; dt < D_TILES; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) o_acc[mt][dt][e] = 0.f;
    row_max[mt][0] = row_max[mt][1] = negative_infinity();
    row_sum[mt][0] = row_sum[mt][1] = 0.f;
  }
  unsigned q_frag[Q_IN_REGISTERS ? M_TILES : 1][Q_IN_REGISTERS ? K_STEPS : 1][4];
  auto load_q_fragment = [&](unsigned(&a)[4], int mt, int kk) {
    ldmatrix_x4(
        a, q_tile + (warp_row + mt * 16 + lane % 16) * PITCH + (kk * 16 + (lane / 16) * 8) * 2);
  };

  for (int j = 0; j < n_blocks; ++j) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // block j landed for every thread; every warp is done with block j - 1
    {
      const int ahead = j + STAGES - 1;
      if (ahead < n_blocks) load_key_block(ahead % STAGES, ahead);
      cp_async_commit();
    }
    if (Q_IN_REGISTERS && j == 0) {
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
        for (int kk = 0; kk < K_STEPS; ++kk) load_q_fragment(q_frag[mt][kk], mt, kk);
    }
    const unsigned k_tile = k_ring + (j % STAGES) * BLOCK_N * PITCH;
    const unsigned v_tile = v_ring + (j % STAGES) * BLOCK_N * PITCH;

    // S = Q K^T: K's rows are keys with the head dim contiguous, the "col" operand as stored.
    float s[M_TILES][N_TILES][4];
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
      for (int nt = 0; nt < N_TILES; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[mt][nt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < K_STEPS; ++kk) {
      unsigned a[M_TILES][4];
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        if (Q_IN_REGISTERS) {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            a[mt][e] = q_frag[Q_IN_REGISTERS ? mt : 0][Q_IN_REGISTERS ? kk : 0][e];
        } else {
          load_q_fragment(a[mt], mt, kk);
        }
      }
#pragma unroll
      for (int nb = 0; nb < N_TILES / 2; ++nb) {
        unsigned b[4];
        ldmatrix_x4(b, k_tile + (nb * 16 + (lane / 16) * 8 + lane % 8) * PITCH +
                           (kk * 16 + ((lane / 8) % 2) * 8) * 2);
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
          mma_16x8x16<KIND>(s[mt][2 * nb], a[mt], b[0], b[1]);
          mma_16x8x16<KIND>(s[mt][2 * nb + 1], a[mt], b[2], b[3]);
        }
      }
    }

    // Scale, mask, and the online softmax: a new running max rescales what was summed before it.
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) {
      float rescale[2];
      online_softmax<false, N_TILES, CAUSAL>(s[mt], p.scale_log2, block, j,
                                             row0 + warp_row + mt * 16 + lane / 4, p.seq_k,
                                             row_max[mt], row_sum[mt], rescale);
#pragma unroll
      for (int r = 0; r < 2; ++r)
#pragma unroll
        for (int dt = 0; dt < D_TILES; ++dt) {
          o_acc[mt][dt][2 * r] *= rescale[r];
          o_acc[mt][dt][2 * r + 1] *= rescale[r];
        }
    }

    // O += P V: two 8-key accumulator tiles of P are one 16-key A fragment; V's rows are keys,
    // so its fragments come transposed.
#pragma unroll
    for (int kp = 0; kp < BLOCK_N / 16; ++kp) {
      unsigned a[M_TILES][4];
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) probability_fragment<KIND>(s[mt], kp, a[mt]);
#pragma unroll
      for (int db = 0; db < D_TILES / 2; ++db) {
        unsigned b[4];
        ldmatrix_x4_trans(b, v_tile + (kp * 16 + ((lane / 8) % 2) * 8 + lane % 8) * PITCH +
                                 (db * 16 + (lane / 16) * 8) * 2);
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
          mma_16x8x16<KIND>(o_acc[mt][2 * db], a[mt], b[0], b[1]);
          mma_16x8x16<KIND>(o_acc[mt][2 * db + 1], a[mt], b[2], b[3]);
        }
      }
    }
  }

  // Every copy landed (Q's too, when no key block ran) before the warps reuse Q's rows for O.
  cp_async_wait<0>();
  __syncthreads();

  // Normalize, write the logsumexp, and stage the warp's rows of O in its own rows of Q's tile
  // so they leave in 16-byte stores.
#pragma unroll
  for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lse;
      const float inverse = finish_row(row_max[mt][r], row_sum[mt][r], lse);
      const int tile_row = warp_row + mt * 16 + lane / 4 + r * 8;
      const int row = row0 + tile_row;
      if (p.lse != nullptr && lane % 4 == 0 &&
          static_cast<unsigned>(row) < static_cast<unsigned>(p.seq_q))  // (causal: row0 < 0)
        p.lse[static_cast<long long>(block.batch_head) * p.seq_q + row] = lse;
#pragma unroll
      for (int dt = 0; dt < D_TILES; ++dt)
        *reinterpret_cast<unsigned*>(smem + tile_row * PITCH + (dt * 8 + 2 * (lane % 4)) * 2) =
            pack2<KIND>(o_acc[mt][dt][2 * r] * inverse, o_acc[mt][dt][2 * r + 1] * inverse);
    }
  __syncwarp();
  constexpr int WARP_CHUNKS = M_TILES * 16 * CHUNKS;
#pragma unroll
  for (int i = lane; i < WARP_CHUNKS; i += 32) {
    const int r = i / CHUNKS, c = i % CHUNKS;
    const int row = row0 + warp_row + r;
    if (static_cast<unsigned>(row) < static_cast<unsigned>(p.seq_q) && c * 8 < p.head_dim)
      *reinterpret_cast<uint4*>(o + row * p.o_strides.row + c * 8) =
          *reinterpret_cast<const uint4*>(smem + (warp_row + r) * PITCH + c * 16);
  }
}

}  // namespace tilesmith
