// Attention backward on mma.sync (sm_80 and later), the FlashAttention-2 structure, in three
// launches: attention_backward_prepare (each query row's delta = rowsum(dO * O), its logsumexp
// in log2 units, and a zeroed row of dQ's fp32 accumulator), attention_backward (the main
// kernel), attention_backward_finish_dq (the accumulator, scaled, into dQ).
//
// The main kernel: a CTA owns BLOCK_N keys of one kv head, K and V resident in shared memory,
// and walks the query blocks that see them, every query head of the kv head's group in turn,
// BLOCK_M rows at a time through a STAGES-deep cp.async ring of Q, dO and the rows' statistics.
// Each warp owns 16 x KEY_TILES keys and computes with keys as the mma's rows: S^T = K Q^T and
// dP^T = V dO^T land in its registers with the layout the A operand of dV += P^T dO and
// dK += dS^T Q wants, so P and dS never leave registers for those, and dK and dV stay in
// registers for the whole walk. Only dS^T goes through shared memory, for dQ += dS K, which the
// warps split by rows and columns and add into the accumulator with vector reductions. Where a
// warp's keys times the head dim would not fit its registers, D_SPLIT warps share the keys,
// each accumulating a slice of dK's and dV's columns (and each computing S^T and dP^T).
#pragma once

#include "attention/attention_common.cuh"

namespace tilesmith {

// Adds two adjacent floats in global memory, without a return: one vector reduction on sm_90.
__device__ __forceinline__ void reduce_add_2(float* address, float x, float y) {
#if __CUDA_ARCH__ >= 900
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(address), "f"(x), "f"(y) : "memory");
#else
  atomicAdd(address, x);
  atomicAdd(address + 1, y);
#endif
}

// Where query row `row` (of batch x heads x seq_q) of a tensor with these strides starts.
__device__ __forceinline__ long long attention_row_offset(const AttentionParams& f,
                                                          const AttentionStrides& strides,
                                                          long long row) {
  const long long batch_head = row / f.seq_q;
  return batch_head / f.heads * strides.batch + batch_head % f.heads * strides.head +
         row % f.seq_q * strides.row;
}

// One warp per workspace row (rows_pitch per (batch, head)), 8 rows a CTA. The accumulator is
// zeroed as a flat array, a row's worth per warp, whatever its layout.
template <int KIND>
__global__ void __launch_bounds__(256) attention_backward_prepare(const AttentionBackwardParams p) {
  wait_for_previous_launch();
  allow_next_launch();
  const AttentionParams& f = p.fwd;
  const long long rows = static_cast<long long>(f.batch) * f.heads * p.rows_pitch;
  const long long slot = blockIdx.x * 8ll + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (slot >= rows) return;
  float* accumulator = p.dq_accumulator + slot * p.dq_pitch;
  for (int d = 4 * lane; d < p.dq_pitch; d += 128)
    *reinterpret_cast<float4*>(accumulator + d) = make_float4(0.f, 0.f, 0.f, 0.f);
  const long long batch_head = slot / p.rows_pitch;
  const int i = static_cast<int>(slot % p.rows_pitch);
  if (i >= f.seq_q) {
    if (lane == 0) {
      p.delta[slot] = 0.f;
      p.lse_log2[slot] = -negative_infinity();
    }
    return;
  }
  const long long row = batch_head * f.seq_q + i;
  const half_bits* o = static_cast<const half_bits*>(f.o) + attention_row_offset(f, f.o_strides, row);
  const half_bits* d_o = static_cast<const half_bits*>(p.d_o) + attention_row_offset(f, p.do_strides, row);
  float dot = 0.f;
  for (int d = 2 * lane; d < f.head_dim; d += 64) {  // rows start 16-byte aligned
    const unsigned o2 = *reinterpret_cast<const unsigned*>(o + d);
    const unsigned do2 = *reinterpret_cast<const unsigned*>(d_o + d);
    dot += to_float(static_cast<half_bits>(o2 & 0xffffu), KIND) * to_float(static_cast<half_bits>(do2 & 0xffffu), KIND) +
           to_float(static_cast<half_bits>(o2 >> 16), KIND) * to_float(static_cast<half_bits>(do2 >> 16), KIND);
  }
  for (int offset = 16; offset > 0; offset /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
  if (lane == 0) {
    p.delta[slot] = dot;
    const float lse = f.lse[row];
    p.lse_log2[slot] = lse == negative_infinity() ? -negative_infinity() : lse * 1.4426950408889634f;
  }
}

// The accumulator in [row][column] layout into dQ, one warp per query row.
template <int KIND>
__global__ void __launch_bounds__(256) attention_backward_finish_dq(const AttentionBackwardParams p) {
  wait_for_previous_launch();
  allow_next_launch();
  const AttentionParams& f = p.fwd;
  const long long rows = static_cast<long long>(f.batch) * f.heads * f.seq_q;
  const long long row = blockIdx.x * 8ll + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= rows) return;
  const float* accumulator =
      p.dq_accumulator + (row / f.seq_q * p.rows_pitch + row % f.seq_q) * p.dq_pitch;
  half_bits* dq = static_cast<half_bits*>(p.dq) + attention_row_offset(f, p.dq_strides, row);
  for (int d = 2 * lane; d < f.head_dim; d += 64) {
    const float2 sum = *reinterpret_cast<const float2*>(accumulator + d);
    *reinterpret_cast<unsigned*>(dq + d) = pack2<KIND>(sum.x * f.scale, sum.y * f.scale);
  }
}

// TILE_ORDER 0: blockIdx.x walks the key blocks of one kv head; 1: blockIdx.x walks the
// (batch, kv head)s. Either way key block 0, which causal queries see most, comes first.
template <int KIND, int HEAD_DIM, int BLOCK_M, int WARPS, int KEY_TILES, int D_SPLIT, int STAGES,
          int CAUSAL, int TILE_ORDER>
__global__ void __launch_bounds__(WARPS * 32) attention_backward(const AttentionBackwardParams p) {
  wait_for_previous_launch();
  allow_next_launch();
  constexpr int THREADS = WARPS * 32;
  constexpr int BLOCK_N = WARPS / D_SPLIT * KEY_TILES * 16;  // keys per CTA
  constexpr int DH = HEAD_DIM / D_SPLIT;                     // dK and dV columns per warp
  constexpr int M_TILES = BLOCK_M / 8;                       // 8-query tiles of S^T
  constexpr int K_STEPS = HEAD_DIM / 16;
  constexpr int PITCH = attention_tile_pitch(HEAD_DIM);
  constexpr int DS_PITCH = (BLOCK_M + 8) * 2;  // odd 16-byte chunks, as PITCH
  constexpr int CHUNKS = HEAD_DIM / 8;
  // dQ += dS K: warps over the 16-row tiles of the query block, then over 16-column chunks.
  constexpr int DQ_ROW_WARPS = WARPS < BLOCK_M / 16 ? WARPS : BLOCK_M / 16;
  constexpr int DQ_ROW_TILES = BLOCK_M / 16 / DQ_ROW_WARPS;
  constexpr int DQ_COL_WARPS = WARPS / DQ_ROW_WARPS;
  constexpr int DQ_CHUNKS = (HEAD_DIM / 16 + DQ_COL_WARPS - 1) / DQ_COL_WARPS;
  static_assert(WARPS % D_SPLIT == 0 && DH % 16 == 0 && BLOCK_M % 16 == 0 && STAGES >= 2, "tile shape");
  static_assert(WARPS % DQ_ROW_WARPS == 0, "dQ's warp grid");

  extern __shared__ __align__(128) unsigned char smem[];
  const unsigned k_tile = smem_address(smem);
  const unsigned v_tile = k_tile + BLOCK_N * PITCH;
  const unsigned q_ring = v_tile + BLOCK_N * PITCH;
  const unsigned do_ring = q_ring + STAGES * BLOCK_M * PITCH;
  const unsigned ds_tile = do_ring + STAGES * BLOCK_M * PITCH;
  constexpr int STATS_OFFSET = 2 * BLOCK_N * PITCH + 2 * STAGES * BLOCK_M * PITCH + BLOCK_N * DS_PITCH;
  // Per stage: the logsumexp (log2 units) of BLOCK_M rows, then their delta.
  const float* stats = reinterpret_cast<const float*>(smem + STATS_OFFSET);
  const unsigned stats_ring = k_tile + STATS_OFFSET;

  const AttentionParams& f = p.fwd;
  const int key_block = TILE_ORDER == 0 ? static_cast<int>(blockIdx.x) : static_cast<int>(blockIdx.y);
  const int batch_kv = TILE_ORDER == 0 ? static_cast<int>(blockIdx.y) : static_cast<int>(blockIdx.x);
  const int batch = batch_kv / f.kv_heads, kv_head = batch_kv % f.kv_heads;
  const int group = f.heads / f.kv_heads;
  const int key0 = key_block * BLOCK_N;
  const int diagonal = f.seq_k - f.seq_q;
  // Causal: the first query that sees key0 is key0 - diagonal; every key is seen by the last.
  const int m_first = CAUSAL ? max(0, key0 - diagonal) / BLOCK_M : 0;
  const int per_head = (f.seq_q + BLOCK_M - 1) / BLOCK_M - m_first;
  const int steps = group * per_head;

  const half_bits* k = static_cast<const half_bits*>(f.k) + batch * f.k_strides.batch + kv_head * f.k_strides.head;
  const half_bits* v = static_cast<const half_bits*>(f.v) + batch * f.v_strides.batch + kv_head * f.v_strides.head;

  // Step `step`'s query block: Q, dO and their statistics into ring slot `slot`.
  auto load_step = [&](int step, int slot) {
    const int head = kv_head * group + step / per_head;
    const int row0 = (m_first + step % per_head) * BLOCK_M;
    const half_bits* q = static_cast<const half_bits*>(f.q) + batch * f.q_strides.batch + head * f.q_strides.head;
    const half_bits* d_o = static_cast<const half_bits*>(p.d_o) + batch * p.do_strides.batch + head * p.do_strides.head;
    load_head_tile<BLOCK_M, HEAD_DIM, THREADS>(q_ring + slot * BLOCK_M * PITCH, q, f.q_strides.row, row0,
                                               f.seq_q, f.head_dim);
    load_head_tile<BLOCK_M, HEAD_DIM, THREADS>(do_ring + slot * BLOCK_M * PITCH, d_o, p.do_strides.row, row0,
                                               f.seq_q, f.head_dim);
    // Rows past seq_q arrive as zeros: with their Q and dO rows zero they add nothing.
    // This kernel's workspace rows are seq_q per (batch, head) (rows_pitch: the family sets it
    // so); reading seq_q keeps one register fewer.
    const long long first = (static_cast<long long>(batch) * f.heads + head) * f.seq_q + row0;
    for (int i = threadIdx.x; i < 2 * BLOCK_M; i += THREADS) {
      const int r = i % BLOCK_M;
      const float* source = (i < BLOCK_M ? p.lse_log2 : p.delta) + first + r;
      cp_async_4(stats_ring + (slot * 2 * BLOCK_M + i) * 4, row0 + r < f.seq_q ? source : p.delta,
                 row0 + r < f.seq_q);
    }
  };

  // Group 0 is K and V with the first query block; one group per block after it.
  load_head_tile<BLOCK_N, HEAD_DIM, THREADS>(k_tile, k, f.k_strides.row, key0, f.seq_k, f.head_dim);
  load_head_tile<BLOCK_N, HEAD_DIM, THREADS>(v_tile, v, f.v_strides.row, key0, f.seq_k, f.head_dim);
#pragma unroll
  for (int stage = 0; stage < STAGES - 1; ++stage) {
    if (stage < steps) load_step(stage, stage);
    cp_async_commit();
  }

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int key_row = warp / D_SPLIT * KEY_TILES * 16;  // the warp's first key in the block
  const int column0 = warp % D_SPLIT * DH;              // its first column of dK and dV
  const int dq_row_tile = warp / DQ_COL_WARPS * DQ_ROW_TILES, dq_chunk0 = warp % DQ_COL_WARPS;

  float dk[KEY_TILES][DH / 8][4], dv[KEY_TILES][DH / 8][4];
#pragma unroll
  for (int kt = 0; kt < KEY_TILES; ++kt)
#pragma unroll
    for (int dt = 0; dt < DH / 8; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[kt][dt][e] = dv[kt][dt][e] = 0.f;

  for (int step = 0; step < steps; ++step) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();  // step's block landed; every warp is done with the previous step's
    {
      const int ahead = step + STAGES - 1;
      if (ahead < steps) load_step(ahead, ahead % STAGES);
      cp_async_commit();
    }
    const int slot = step % STAGES;
    const int head = kv_head * group + step / per_head;
    const int row0 = (m_first + step % per_head) * BLOCK_M;
    const unsigned q_tile = q_ring + slot * BLOCK_M * PITCH;
    const unsigned do_tile = do_ring + slot * BLOCK_M * PITCH;
    const float* lse_log2 = stats + slot * 2 * BLOCK_M;
    const float* delta = lse_log2 + BLOCK_M;

    // S^T = K Q^T and dP^T = V dO^T: the warp's keys are the rows, the block's queries the
    // columns; Q's and dO's rows are the "col" operand as stored.
    float s[KEY_TILES][M_TILES][4], dp[KEY_TILES][M_TILES][4];
#pragma unroll
    for (int kt = 0; kt < KEY_TILES; ++kt)
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
        for (int e = 0; e < 4; ++e) s[kt][mt][e] = dp[kt][mt][e] = 0.f;
#pragma unroll
    for (int kk = 0; kk < K_STEPS; ++kk) {
      unsigned ka[KEY_TILES][4], va[KEY_TILES][4];
#pragma unroll
      for (int kt = 0; kt < KEY_TILES; ++kt) {
        const int offset = (key_row + kt * 16 + lane % 16) * PITCH + (kk * 16 + (lane / 16) * 8) * 2;
        ldmatrix_x4(ka[kt], k_tile + offset);
        ldmatrix_x4(va[kt], v_tile + offset);
      }
#pragma unroll
      for (int nb = 0; nb < BLOCK_M / 16; ++nb) {
        const int offset = (nb * 16 + (lane / 16) * 8 + lane % 8) * PITCH + (kk * 16 + ((lane / 8) % 2) * 8) * 2;
        unsigned qb[4], ob[4];
        ldmatrix_x4(qb, q_tile + offset);
        ldmatrix_x4(ob, do_tile + offset);
#pragma unroll
        for (int kt = 0; kt < KEY_TILES; ++kt) {
          mma_16x8x16<KIND>(s[kt][2 * nb], ka[kt], qb[0], qb[1]);
          mma_16x8x16<KIND>(s[kt][2 * nb + 1], ka[kt], qb[2], qb[3]);
          mma_16x8x16<KIND>(dp[kt][2 * nb], va[kt], ob[0], ob[1]);
          mma_16x8x16<KIND>(dp[kt][2 * nb + 1], va[kt], ob[2], ob[3]);
        }
      }
    }

    // P = exp2(S * scale log2 e - lse log2 e), 0 where masked; dS = P (dP - delta), in place.
    // Keys past seq_k are masked too: their zero rows would give P = exp2(-lse), which a
    // very negative lse could overflow.
    const bool edge = key0 + BLOCK_N > f.seq_k || (CAUSAL && key0 + BLOCK_N - 1 > row0 + diagonal);
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) {
      const int column = mt * 8 + 2 * (lane % 4);
      const float2 lse2 = *reinterpret_cast<const float2*>(lse_log2 + column);
      const float2 delta2 = *reinterpret_cast<const float2*>(delta + column);
#pragma unroll
      for (int kt = 0; kt < KEY_TILES; ++kt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float probability = exp2f(s[kt][mt][e] * f.scale_log2 - (e % 2 ? lse2.y : lse2.x));
          if (edge) {
            const int key = key0 + key_row + kt * 16 + lane / 4 + (e / 2) * 8;
            const int query = row0 + column + e % 2;
            if (key >= f.seq_k || (CAUSAL && key > query + diagonal)) probability = 0.f;
          }
          s[kt][mt][e] = probability;
          dp[kt][mt][e] = probability * (dp[kt][mt][e] - (e % 2 ? delta2.y : delta2.x));
        }
    }

    // dV += P^T dO and dK += dS^T Q over the block's queries: dO's and Q's rows are queries,
    // so their fragments come transposed.
#pragma unroll
    for (int kq = 0; kq < BLOCK_M / 16; ++kq) {
      unsigned pa[KEY_TILES][4], sa[KEY_TILES][4];
#pragma unroll
      for (int kt = 0; kt < KEY_TILES; ++kt) {
        probability_fragment<KIND>(s[kt], kq, pa[kt]);
        probability_fragment<KIND>(dp[kt], kq, sa[kt]);
      }
#pragma unroll
      for (int db = 0; db < DH / 16; ++db) {
        const int offset = (kq * 16 + ((lane / 8) % 2) * 8 + lane % 8) * PITCH + (column0 + db * 16 + (lane / 16) * 8) * 2;
        unsigned ob[4], qb[4];
        ldmatrix_x4_trans(ob, do_tile + offset);
        ldmatrix_x4_trans(qb, q_tile + offset);
#pragma unroll
        for (int kt = 0; kt < KEY_TILES; ++kt) {
          mma_16x8x16<KIND>(dv[kt][2 * db], pa[kt], ob[0], ob[1]);
          mma_16x8x16<KIND>(dv[kt][2 * db + 1], pa[kt], ob[2], ob[3]);
          mma_16x8x16<KIND>(dk[kt][2 * db], sa[kt], qb[0], qb[1]);
          mma_16x8x16<KIND>(dk[kt][2 * db + 1], sa[kt], qb[2], qb[3]);
        }
      }
    }

    // dS^T to shared memory (the warps splitting a key range hold the same), for dQ.
    if (warp % D_SPLIT == 0) {
#pragma unroll
      for (int kt = 0; kt < KEY_TILES; ++kt)
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r)
            *reinterpret_cast<unsigned*>(smem + (ds_tile - k_tile) +
                                         (key_row + kt * 16 + lane / 4 + r * 8) * DS_PITCH +
                                         (mt * 8 + 2 * (lane % 4)) * 2) =
                pack2<KIND>(dp[kt][mt][2 * r], dp[kt][mt][2 * r + 1]);
    }
    __syncthreads();

    // dQ += dS K: dS's rows are queries stored as columns, K's rows are keys: both transposed.
    float dq[DQ_ROW_TILES][2 * DQ_CHUNKS][4];
#pragma unroll
    for (int rt = 0; rt < DQ_ROW_TILES; ++rt)
#pragma unroll
      for (int nt = 0; nt < 2 * DQ_CHUNKS; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) dq[rt][nt][e] = 0.f;
#pragma unroll
    for (int kb = 0; kb < BLOCK_N / 16; ++kb) {
      unsigned a[DQ_ROW_TILES][4];
#pragma unroll
      for (int rt = 0; rt < DQ_ROW_TILES; ++rt)
        ldmatrix_x4_trans(a[rt], ds_tile + (kb * 16 + (lane / 16) * 8 + lane % 8) * DS_PITCH +
                                     ((dq_row_tile + rt) * 16 + ((lane / 8) % 2) * 8) * 2);
#pragma unroll
      for (int c = 0; c < DQ_CHUNKS; ++c) {
        const int chunk = dq_chunk0 + c * DQ_COL_WARPS;
        if (HEAD_DIM / 16 % DQ_COL_WARPS != 0 && chunk >= HEAD_DIM / 16) break;
        unsigned b[4];
        ldmatrix_x4_trans(b, k_tile + (kb * 16 + ((lane / 8) % 2) * 8 + lane % 8) * PITCH +
                                 (chunk * 16 + (lane / 16) * 8) * 2);
#pragma unroll
        for (int rt = 0; rt < DQ_ROW_TILES; ++rt) {
          mma_16x8x16<KIND>(dq[rt][2 * c], a[rt], b[0], b[1]);
          mma_16x8x16<KIND>(dq[rt][2 * c + 1], a[rt], b[2], b[3]);
        }
      }
    }
    float* accumulator = p.dq_accumulator +
                         (static_cast<long long>(batch) * f.heads + head) * f.seq_q * p.dq_pitch;
#pragma unroll
    for (int rt = 0; rt < DQ_ROW_TILES; ++rt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int row = row0 + (dq_row_tile + rt) * 16 + lane / 4 + r * 8;
        if (row >= f.seq_q) continue;
#pragma unroll
        for (int c = 0; c < DQ_CHUNKS; ++c) {
          const int chunk = dq_chunk0 + c * DQ_COL_WARPS;
          if (HEAD_DIM / 16 % DQ_COL_WARPS != 0 && chunk >= HEAD_DIM / 16) break;
#pragma unroll
          for (int half = 0; half < 2; ++half)
            reduce_add_2(accumulator + static_cast<long long>(row) * p.dq_pitch + chunk * 16 + half * 8 + 2 * (lane % 4),
                         dq[rt][2 * c + half][2 * r], dq[rt][2 * c + half][2 * r + 1]);
        }
      }
  }

  // dK (scaled) and dV through K's and V's tiles, so they leave in 16-byte stores.
  cp_async_wait<0>();
  __syncthreads();
#pragma unroll
  for (int kt = 0; kt < KEY_TILES; ++kt)
#pragma unroll
    for (int dt = 0; dt < DH / 8; ++dt)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int offset = (key_row + kt * 16 + lane / 4 + r * 8) * PITCH + (column0 + dt * 8 + 2 * (lane % 4)) * 2;
        *reinterpret_cast<unsigned*>(smem + offset) =
            pack2<KIND>(dk[kt][dt][2 * r] * f.scale, dk[kt][dt][2 * r + 1] * f.scale);
        *reinterpret_cast<unsigned*>(smem + BLOCK_N * PITCH + offset) =
            pack2<KIND>(dv[kt][dt][2 * r], dv[kt][dt][2 * r + 1]);
      }
  __syncthreads();
  half_bits* dk_out = static_cast<half_bits*>(p.dk) + batch * p.dk_strides.batch + kv_head * p.dk_strides.head;
  half_bits* dv_out = static_cast<half_bits*>(p.dv) + batch * p.dv_strides.batch + kv_head * p.dv_strides.head;
  for (int i = threadIdx.x; i < BLOCK_N * CHUNKS; i += THREADS) {
    const int r = i / CHUNKS, c = i % CHUNKS;
    if (key0 + r >= f.seq_k || c * 8 >= f.head_dim) continue;
    *reinterpret_cast<uint4*>(dk_out + (key0 + r) * p.dk_strides.row + c * 8) =
        *reinterpret_cast<const uint4*>(smem + r * PITCH + c * 16);
    *reinterpret_cast<uint4*>(dv_out + (key0 + r) * p.dv_strides.row + c * 8) =
        *reinterpret_cast<const uint4*>(smem + BLOCK_N * PITCH + r * PITCH + c * 16);
  }
}

}  // namespace tilesmith
