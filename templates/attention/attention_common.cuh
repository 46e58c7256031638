// What both attention kernels share: the query block a CTA owns and the key blocks it visits,
// and the online softmax on their common accumulator layout: mma.sync's m16n8 tiles and wgmma's
// m64nN (a warp's 16 rows of it) give each thread, per 8-column tile, columns 2 (lane % 4) +
// {0, 1} of row lane / 4 (elements 0, 1) and of row lane / 4 + 8 (elements 2, 3). A block of
// scores is float[TILES][4]: TILES tiles of 8 keys.
#pragma once

#include "attention/attention_params.h"
#include "common/tile_primitives.cuh"

namespace tilesmith {

// The four lanes of a quad hold one row.
__device__ __forceinline__ float quad_max(float value) {
  value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 1));
  return fmaxf(value, __shfl_xor_sync(0xffffffffu, value, 2));
}
__device__ __forceinline__ float quad_sum(float value) {
  value += __shfl_xor_sync(0xffffffffu, value, 1);
  return value + __shfl_xor_sync(0xffffffffu, value, 2);
}

__device__ __forceinline__ float negative_infinity() { return __int_as_float(0xff800000); }

// The query block of BLOCK_M rows a CTA owns, and the key blocks of BLOCK_N it visits (causal:
// up to the diagonal of its last row below seq_q).
struct QueryBlock {
  int batch_head, batch, head, kv_head;
  int row0;        // the first query row (causal: negative in a head's first block, see below)
  int diagonal;    // causal: query i sees key j when j <= i + diagonal
  int key_blocks;  // from key 0
};

// The query blocks in the order CTAs take them, `tile` 0 first. TILE_ORDER 0: the query blocks
// of one head in a row (they share its keys in L2). TILE_ORDER 1: the last query block of every
// head, then the one before, so the blocks that see the most keys (causal) start first and the
// short ones fill the tail. TILE_ORDER 2: the heads in groups of p.order_heads (as many as
// have their keys and values in half the L2), each group longest first: the tail of 1 with the
// L2 reuse of 0 (with every head at once, each block reads its keys from DRAM).
// Causal, where BLOCK_M does not divide seq_q, the blocks end on seq_q and the first one starts
// before row 0: its missing rows (zeros, masked, never stored) then see a block or two of keys,
// where at the end they would see them all (S2048 in 192-row blocks: 5% of the tensor work).
// Rows below 0 or from seq_q on are the kernels' to skip (one unsigned comparison).
template <int BLOCK_M, int BLOCK_N, int CAUSAL, int TILE_ORDER>
__device__ __forceinline__ QueryBlock query_block(const AttentionParams& p, int tile) {
  const int m_blocks = (p.seq_q + BLOCK_M - 1) / BLOCK_M, batch_heads = p.batch * p.heads;
  int m_block;
  QueryBlock b;
  if (TILE_ORDER == 0) {
    m_block = tile % m_blocks;
    b.batch_head = tile / m_blocks;
  } else {
    const int group_heads = TILE_ORDER == 1 ? batch_heads : p.order_heads;
    const int group = tile / (group_heads * m_blocks);
    const int first_head = group * group_heads;
    const int heads = min(group_heads, batch_heads - first_head);
    const int in_group = tile - first_head * m_blocks;
    m_block = m_blocks - 1 - in_group / heads;
    b.batch_head = first_head + in_group % heads;
  }
  b.batch = b.batch_head / p.heads;
  b.head = b.batch_head % p.heads;
  b.kv_head = b.head / (p.heads / p.kv_heads);
  b.row0 = (CAUSAL ? p.seq_q - m_blocks * BLOCK_M : 0) + m_block * BLOCK_M;
  b.diagonal = p.seq_k - p.seq_q;
  const int key_end = CAUSAL ? min(p.seq_k, min(b.row0 + BLOCK_M, p.seq_q) + b.diagonal) : p.seq_k;
  b.key_blocks = key_end > 0 ? (key_end + BLOCK_N - 1) / BLOCK_N : 0;
  return b;
}

// Key block j's raw scores (S = Q K^T of this thread's two rows, the first `row`: elements 0, 1;
// row + 8: elements 2, 3) through the mask and the online softmax: the scores become
// exp2(score * scale - max) (scale_log2: the softmax scale x log2 e), the running max (log2
// units) and this thread's share of the running sum move on, and `rescale` gets the factors that
// bring O to the new running max. SCALE_IN_EXPONENT, under a positive scale: the scale goes into
// the exponent's FFMA and the max is taken over the raw scores, so a score costs one FFMA, one
// max and one add besides the exp2 (the scale stays live through the exponentials, a register
// the mma.sync kernel, at the 128 ptxas gives it, spills for); otherwise the scores are scaled
// first, in place (for any other scale, a warp-uniform detour). A key past seq_k or, causal,
// past the row's diagonal counts as -inf (only blocks on an edge pay for the comparisons).
template <bool SCALE_IN_EXPONENT, int TILES, int CAUSAL>
__device__ __forceinline__ void online_softmax(float (&s)[TILES][4], float scale_log2,
                                               const QueryBlock& b, int j, int row, int seq_k,
                                               float (&row_max)[2], float (&row_sum)[2],
                                               float (&rescale)[2]) {
  constexpr int BLOCK_N = TILES * 8;
  float scale = scale_log2;
  if (!SCALE_IN_EXPONENT || !(scale > 0.f)) {
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[t][e] *= scale;
    scale = 1.f;
  }
  const int key0 = j * BLOCK_N;
  if (key0 + BLOCK_N > seq_k || (CAUSAL && key0 + BLOCK_N - 1 > b.row0 + b.diagonal)) {
    // Element (t, e) is key first_key + 8 t + e % 2: hidden from offset seq_end on, and past the
    // diagonal beyond offset diagonal_end (+ 8 for the second row).
    const int first_key = key0 + 2 * (static_cast<int>(threadIdx.x) % 4);
    const int seq_end = seq_k - first_key, diagonal_end = row + b.diagonal - first_key;
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int offset = t * 8 + e % 2;
        if (offset >= seq_end || (CAUSAL && offset > diagonal_end + (e / 2) * 8))
          s[t][e] = negative_infinity();
      }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float block_max = negative_infinity();
#pragma unroll
    for (int t = 0; t < TILES; ++t)
      block_max = fmaxf(block_max, fmaxf(s[t][2 * r], s[t][2 * r + 1]));
    const float new_max = fmaxf(row_max[r], quad_max(block_max) * scale);
    // A row that has seen only hidden keys keeps -inf; 0 keeps exp2 from making NaN.
    const float shift = new_max == negative_infinity() ? 0.f : new_max;
    rescale[r] = exp2f(row_max[r] - shift);
    row_max[r] = new_max;
    float sum = 0.f;
#pragma unroll
    for (int t = 0; t < TILES; ++t)
#pragma unroll
      for (int e = 2 * r; e < 2 * r + 2; ++e) {
        s[t][e] = exp2f(fmaf(s[t][e], scale, -shift));
        sum += s[t][e];
      }
    row_sum[r] = row_sum[r] * rescale[r] + sum;
  }
}

// Keys 16 kt .. 16 kt + 15 of a block of probabilities as the A operand of the next product
// (m16n8k16's A fragment, which wgmma's register form reads too).
template <int KIND, int TILES>
__device__ __forceinline__ void probability_fragment(const float (&s)[TILES][4], int kt,
                                                     unsigned (&a)[4]) {
  a[0] = pack2<KIND>(s[2 * kt][0], s[2 * kt][1]);
  a[1] = pack2<KIND>(s[2 * kt][2], s[2 * kt][3]);
  a[2] = pack2<KIND>(s[2 * kt + 1][0], s[2 * kt + 1][1]);
  a[3] = pack2<KIND>(s[2 * kt + 1][2], s[2 * kt + 1][3]);
}

// ROWS rows of `head_dim` elements, rows from `first_row` on, into a shared tile, 16 bytes per
// cp.async. Rows at or past `row_limit` and the columns past head_dim (up to HEAD_DIM) arrive as
// zeros, so they add nothing to either product. A thread keeps one 16-byte column and steps
// down the rows (THREADS / CHUNKS rows a round; the few threads past the last whole row idle), so
// its addresses advance by one stride instead of being rederived, and held, for every round.
template <int ROWS, int HEAD_DIM, int THREADS>
__device__ __forceinline__ void load_head_tile(unsigned tile, const half_bits* base,
                                               long long row_stride, int first_row, int row_limit,
                                               int head_dim) {
  constexpr int CHUNKS = HEAD_DIM / 8;
  constexpr int PITCH = attention_tile_pitch(HEAD_DIM);
  constexpr int ROWS_PER_ROUND = THREADS / CHUNKS;
  constexpr int ROUNDS = (ROWS + ROWS_PER_ROUND - 1) / ROWS_PER_ROUND;
  const int chunk = static_cast<int>(threadIdx.x) % CHUNKS;
  const int first = static_cast<int>(threadIdx.x) / CHUNKS;
  if (first >= ROWS_PER_ROUND) return;
  const bool column_valid = chunk * 8 < head_dim;
  const half_bits* source = base + (first_row + first) * row_stride + chunk * 8;
  unsigned destination = tile + first * PITCH + chunk * 16;
#pragma unroll
  for (int round = 0; round < ROUNDS; ++round) {
    const int r = round * ROWS_PER_ROUND + first;
    if (ROWS % ROWS_PER_ROUND != 0 && r >= ROWS) break;
    // (A causal query block may start before row 0: attention's query_block.)
    const bool valid =
        column_valid && static_cast<unsigned>(first_row + r) < static_cast<unsigned>(row_limit);
    cp_async_16(destination, valid ? source : base, valid);
    source += ROWS_PER_ROUND * row_stride;
    destination += ROWS_PER_ROUND * PITCH;
  }
}

// A finished row: 1 / its sum (0 for a row that saw no key, whose output is then 0), and its
// logsumexp in natural units (-inf for that row). `row_sum` is this thread's share.
__device__ __forceinline__ float finish_row(float row_max, float row_sum, float& lse) {
  const float sum = quad_sum(row_sum);
  lse = sum > 0.f ? (row_max + __log2f(sum)) * 0.6931471805599453f : negative_infinity();
  return sum > 0.f ? 1.f / sum : 0.f;
}

}  // namespace tilesmith
