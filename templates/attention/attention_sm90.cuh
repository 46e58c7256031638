// Attention forward on Hopper (sm_90a): one producer warpgroup brings Q once and each block of
// K and V through a params.stages-deep ring with TMA, completing on mbarriers (K and V on their own
// barriers, so S = Q K^T starts while V is still in flight); CONSUMERS warpgroups of 64 query
// rows each compute S with wgmma from shared memory, run the online softmax on it in registers,
// and accumulate O += P V with wgmma's register form: P never leaves the registers.
//
// The FlashAttention-3 overlaps, each a template parameter the tuner races:
//  PIPELINE: a warpgroup issues block j's Q K^T together with block j-1's P V, and runs block
//    j's softmax while P V is still on the tensor cores; O is rescaled once that P V is done.
//  PINGPONG (two consumers): the warpgroups take turns issuing their GEMMs (named barriers 1 and
//    2), so one's softmax runs under the other's GEMMs.
// A CTA takes query blocks blockIdx.x, + gridDim.x, ... (query_block's order): one, on a grid of
// one CTA per block, or, persistent (a grid of as many CTAs as fit on the GPU at once), several;
// the producer loads the next block's Q (once the consumers' last Q K^T is done) and first keys
// while the consumers finish the current one, so a short block's start-up latency hides under
// its predecessor's last steps.
// CLAIM (persistent): after its first block, blockIdx.x, a CTA claims the next one from a
// counter (gridDim.x + the claims before it), so a CTA that drew short causal blocks takes more
// of them and, longest first (tile_order 1), the grid ends together. The producer claims a
// block once it has issued the current one's loads, and hands it to the consumers with Q: it
// writes the block's number into shared memory before its arrival on q_full, whose release the
// consumers' wait acquires; past the last block it writes -1.
//
// Shared memory, 1024-byte aligned, every tile in 64-column panels of 128-byte rows (the 128-byte
// swizzle TMA writes and wgmma reads; a head dim past 64 is several panels):
//   Q: CONSUMERS x PANELS x [64 rows][128 B];  K, V: stages x PANELS x [BLOCK_N rows][128 B];
//   mbarriers: q_full, k_full[stages], v_full[stages], kv_empty[stages], q_empty; CLAIM: the
//   handed-over block numbers, int[2].
// Tensor maps (4D {head_dim, seq, heads, batch}, strides of a row, a head and a batch, in any
// order in memory (BSHD and BHSD alike); swizzle 128B; boxes {64, rows, 1, 1}: 64 rows for Q,
// BLOCK_N for K and V): attention_family.cpp.
#pragma once

#include "attention/attention_common.cuh"
#include "common/hopper.cuh"

namespace tilesmith {

template <int KIND, int HEAD_DIM, int BLOCK_N, int CONSUMERS, int CAUSAL,
          int TILE_ORDER, int PIPELINE, int PINGPONG, int CLAIM>
__global__ void __launch_bounds__((CONSUMERS + 1) * 128,
                                  attention_sm90_two_ctas_an_sm(CONSUMERS, HEAD_DIM) ? 2 : 1)
    attention_forward_sm90(const __grid_constant__ AttentionSm90Params params) {
  wait_for_previous_launch();
  allow_next_launch();
  constexpr int BLOCK_M = 64 * CONSUMERS;
  constexpr int PANELS = (HEAD_DIM + 63) / 64;
  constexpr int Q_PANEL = 64 * 128;
  constexpr int Q_BYTES = CONSUMERS * PANELS * Q_PANEL;
  constexpr int KV_PANEL = BLOCK_N * 128;
  constexpr int KV_STAGE = PANELS * KV_PANEL;
  constexpr int K_STEPS = HEAD_DIM / 16;
  constexpr int N_TILES = BLOCK_N / 8;
  constexpr int D_TILES = HEAD_DIM / 8;
  // The producer gives most of its registers to the consumers (ptxas allocates the code after
  // setmaxnreg within the raised count).
  constexpr bool SHARE_REGS = CONSUMERS > 1 || attention_sm90_two_ctas_an_sm(CONSUMERS, HEAD_DIM);
  constexpr int PRODUCER_REGS = attention_sm90_producer_registers(CONSUMERS);
  constexpr int CONSUMER_REGS = attention_sm90_consumer_registers(CONSUMERS, HEAD_DIM);
  static_assert(HEAD_DIM % 16 == 0 && BLOCK_N % 16 == 0 && CONSUMERS >= 1 && CONSUMERS <= 3,
                "tile shape");
  static_assert(!PINGPONG || CONSUMERS == 2, "ping-pong takes two consumer warpgroups");
  static_assert(D_TILES % 4 == 0, "O's 16-byte stores take the head dim in 32-column groups");
  const AttentionParams& p = params.p;

  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const unsigned q_tile = (smem_address(smem_raw) + 1023u) & ~1023u;
  const int stages = params.stages;  // an argument: the ring's depth only sizes and wraps it
  const unsigned k_ring = q_tile + Q_BYTES, v_ring = k_ring + stages * KV_STAGE;
  const unsigned barriers = v_ring + stages * KV_STAGE;
  const unsigned q_full = barriers;
  auto k_full = [&](int s) { return barriers + 8u * (1 + s); };
  auto v_full = [&](int s) { return barriers + 8u * (1 + stages + s); };
  auto kv_empty = [&](int s) { return barriers + 8u * (1 + 2 * stages + s); };
  const unsigned q_empty = barriers + 8u * (1 + 3 * stages);
  // This CTA's query blocks: first_tile, + gridDim.x, ... below `tiles`.
  const int tiles = (p.seq_q + BLOCK_M - 1) / BLOCK_M * (p.batch * p.heads);
  const int first_tile = static_cast<int>(blockIdx.x);
  auto next_tile = [&](int tile) { return tile + static_cast<int>(gridDim.x); };
  auto block_of = [&](int tile) {
    return query_block<BLOCK_M, BLOCK_N, CAUSAL, TILE_ORDER>(p, tile);
  };
  // CLAIM: the slot of a handed-over block, after the barriers, by the parity of the blocks'
  // count (q_phase on both sides): a slot is written again only after the consumers' last Q K^T
  // of the block after it, long after they read it. An address from q_empty, which the
  // consumers hold anyway, not a pointer of its own: one more register through their loop.
  auto handed = [&](unsigned parity) { return q_empty + 8u + 4u * parity; };

  if (threadIdx.x == 0) {
    mbarrier_init(q_full, 1);
    for (int s = 0; s < stages; ++s) {
      mbarrier_init(k_full(s), 1);
      mbarrier_init(v_full(s), 1);
      mbarrier_init(kv_empty(s), CONSUMERS);
    }
    mbarrier_init(q_empty, CONSUMERS);
    fence_mbarrier_init();
  }
  if (threadIdx.x == 32) {
    tma_prefetch_map(&params.q_map);
    tma_prefetch_map(&params.k_map);
    tma_prefetch_map(&params.v_map);
  }
  __syncthreads();

  if (warpgroup_index() == 0) {
    if (SHARE_REGS) warpgroup_regs_release<PRODUCER_REGS>();
    if (threadIdx.x == 0) {
      int stage = 0;
      unsigned phase = 0, q_phase = 0;
      for (int tile = first_tile; CLAIM || tile < tiles;) {
        mbarrier_wait(q_empty, q_phase ^ 1u);  // the previous block's Q read
        if (CLAIM) {
          store_shared_u32(handed(q_phase), tile < tiles ? tile : -1);
          if (tile >= tiles) {
            mbarrier_arrive(q_full);  // with -1: no more blocks
            break;
          }
        }
        const QueryBlock block = block_of(tile);
        mbarrier_arrive_expect_tx(q_full, Q_BYTES);
#pragma unroll
        for (int c = 0; c < CONSUMERS; ++c)
#pragma unroll
          for (int panel = 0; panel < PANELS; ++panel)
            tma_load_4d(q_tile + (c * PANELS + panel) * Q_PANEL, &params.q_map, q_full, 64 * panel,
                        block.row0 + 64 * c, block.head, block.batch);
        q_phase ^= 1u;
        for (int j = 0; j < block.key_blocks; ++j) {
          mbarrier_wait(kv_empty(stage), phase ^ 1u);
          mbarrier_arrive_expect_tx(k_full(stage), KV_STAGE);
#pragma unroll
          for (int panel = 0; panel < PANELS; ++panel)
            tma_load_4d(k_ring + stage * KV_STAGE + panel * KV_PANEL, &params.k_map, k_full(stage),
                        64 * panel, j * BLOCK_N, block.kv_head, block.batch);
          mbarrier_arrive_expect_tx(v_full(stage), KV_STAGE);
#pragma unroll
          for (int panel = 0; panel < PANELS; ++panel)
            tma_load_4d(v_ring + stage * KV_STAGE + panel * KV_PANEL, &params.v_map, v_full(stage),
                        64 * panel, j * BLOCK_N, block.kv_head, block.batch);
          if (++stage == stages) {
            stage = 0;
            phase ^= 1u;
          }
        }
        // The next block, claimed once this one's loads are issued: the ring holds the consumers
        // `stages` key blocks away from needing it, time for the atomic's round trip.
        tile = CLAIM ? static_cast<int>(gridDim.x) + atomicAdd(params.claimed, 1) : next_tile(tile);
      }
    }
    return;
  }

  if (SHARE_REGS) warpgroup_regs_claim<CONSUMER_REGS>();
  const int c = warpgroup_index() - 1;
  const int tid = threadIdx.x % 128, lane = tid % 32;
  // Descriptors at the start of this consumer's Q, of K's stage 0 (both K-major: a k step is 32
  // bytes along a row, a panel further on past 64 columns) and of V's stage 0 (N-major: a k
  // step is 16 rows, the next 64 columns of N the next panel).
  const unsigned long long q_desc = wgmma_desc_sw128(q_tile + c * PANELS * Q_PANEL, 16, 1024);
  const unsigned long long k_desc = wgmma_desc_sw128(k_ring, 16, 1024);
  const unsigned long long v_desc = wgmma_desc_sw128(v_ring, KV_PANEL, 1024);

  float o_acc[HEAD_DIM / 2];
  float row_max[2], row_sum[2];

  // Block j's S = Q K^T into `s`, issued (K waited for first).
  auto issue_s = [&](float(&s_flat)[BLOCK_N / 2], int s_stage) {
#pragma unroll
    for (int kk = 0; kk < K_STEPS; ++kk) {
      const unsigned q_offset = (kk / 4) * Q_PANEL + (kk % 4) * 32;
      const unsigned k_offset = s_stage * KV_STAGE + (kk / 4) * KV_PANEL + (kk % 4) * 32;
      wgmma_tile_m64<BLOCK_N, KIND, 0, 0>(s_flat, q_desc + (q_offset >> 4),
                                          k_desc + (k_offset >> 4));
    }
    wgmma_commit();
  };
  // O += P V of the block in `pv_stage`, P packed in `p_frag` (V waited for first).
  unsigned p_frag[BLOCK_N / 16][4];
  auto issue_pv = [&](int pv_stage) {
#pragma unroll
    for (int kt = 0; kt < BLOCK_N / 16; ++kt)
      wgmma_tile_m64_rs<HEAD_DIM, KIND, 1>(o_acc, p_frag[kt],
                                           v_desc + ((pv_stage * KV_STAGE + kt * 16 * 128) >> 4));
    wgmma_commit();
  };
  // Once a block's P V is done, its K and V may be overwritten.
  auto finish_pv = [&](int pv_stage) {
    wgmma_wait<0>();
    wgmma_fence_registers(o_acc);
    if (tid == 0) mbarrier_arrive(kv_empty(pv_stage));
  };
  // O rescaled to the new running max, then P packed: all before a wgmma reads either (a
  // register written between two wgmmas of a batch makes ptxas fence each one: C7519).
  auto rescale_and_pack = [&](const float(&s)[N_TILES][4], const float(&rescale)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int dt = 0; dt < D_TILES; ++dt) {
        o_acc[4 * dt + 2 * r] *= rescale[r];
        o_acc[4 * dt + 2 * r + 1] *= rescale[r];
      }
#pragma unroll
    for (int kt = 0; kt < BLOCK_N / 16; ++kt) probability_fragment<KIND>(s, kt, p_frag[kt]);
  };
  // Ping-pong: warpgroup c waits on barrier 1 + c for its turn to issue and gives the other its
  // turn on barrier 2 - c; warpgroup 0 goes first.
  auto my_turn = [&] {
    if (PINGPONG) named_barrier_sync(1 + c, 256);
  };
  auto their_turn = [&] {
    if (PINGPONG) named_barrier_arrive(2 - c, 256);
  };
  int stage = 0;
  unsigned phase = 0, q_phase = 0;
  auto advance = [&] {
    if (++stage == stages) {
      stage = 0;
      phase ^= 1u;
    }
  };
  float s[N_TILES][4];
  float(&s_flat)[BLOCK_N / 2] = reinterpret_cast<float(&)[BLOCK_N / 2]>(s);
  float rescale[2];
  // CLAIM: the next block comes with its Q; it is taken at the end of the block before (and
  // here for the first), so that the loop's body is the strided one's: with the wait and the
  // read at its top, ptxas keeps one more register through it and spills at three consumers.
  auto take_block = [&] {
    mbarrier_wait(q_full, q_phase);
    return static_cast<int>(load_shared_u32(handed(q_phase)));  // -1: no more blocks
  };
  int claimed = CLAIM ? take_block() : 0;
  for (int tile = CLAIM ? claimed : first_tile; CLAIM ? tile >= 0 : tile < tiles;
       tile = CLAIM ? claimed : next_tile(tile)) {
    // The query block in hand, and this thread's first row of it (and first_row() + 8), derived
    // from threadIdx where it is used: held across the loop, it is the register that spills
    // when the accumulators take all but 32 (three consumers, 192 keys at head dim 64).
    const QueryBlock block = block_of(tile);
    auto first_row = [&] {
      const int t = static_cast<int>(threadIdx.x);
      return block.row0 + 16 * (t / 32 - 4) + t % 32 / 4;  // 64 c + 16 (tid / 32) + lane / 4
    };
    const int n_blocks = block.key_blocks;
    // Block j's scores through the mask and the online softmax; `rescale` gets the factors that
    // bring O to the new running max.
    auto softmax = [&](float(&s)[N_TILES][4], int j, float(&rescale)[2]) {
      if (j == n_blocks - 1 && tid == 0) mbarrier_arrive(q_empty);  // Q read for good
      online_softmax<true, N_TILES, CAUSAL>(s, p.scale_log2, block, j, first_row(), p.seq_k,
                                            row_max, row_sum, rescale);
    };
    // Block j's S with no P V in flight, through the softmax: O rescaled, P packed.
    auto block_alone = [&](int j) {
#pragma unroll
      for (int i = 0; i < BLOCK_N / 2; ++i) s_flat[i] = 0.f;
      mbarrier_wait(k_full(stage), phase);
      my_turn();
      wgmma_fence();
      issue_s(s_flat, stage);
      their_turn();
      wgmma_wait<0>();
      wgmma_fence_registers(s_flat);
      softmax(s, j, rescale);
      rescale_and_pack(s, rescale);
    };
#pragma unroll
    for (int i = 0; i < HEAD_DIM / 2; ++i) o_acc[i] = 0.f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_max[r] = negative_infinity();
      row_sum[r] = 0.f;
    }
    // Also when no key block runs: no copy may outlive the CTA (CLAIM: waited in take_block).
    if (!CLAIM) mbarrier_wait(q_full, q_phase);
    q_phase ^= 1u;
    if (n_blocks == 0 && tid == 0) mbarrier_arrive(q_empty);
    if (PINGPONG && c == 1) named_barrier_arrive(1, 256);
    if (!PIPELINE) {
      for (int j = 0; j < n_blocks; ++j) {
        block_alone(j);
        mbarrier_wait(v_full(stage), phase);
        wgmma_fence();
        issue_pv(stage);
        finish_pv(stage);
        advance();
      }
    } else if (n_blocks > 0) {
      // Block 0 alone; then each block's S issued with the previous block's P V, its softmax
      // running while that P V does; then the last block's P V.
      block_alone(0);
      int previous = stage;
      unsigned previous_phase = phase;
      advance();
      for (int j = 1; j < n_blocks; ++j) {
#pragma unroll
        for (int i = 0; i < BLOCK_N / 2; ++i) s_flat[i] = 0.f;
        mbarrier_wait(k_full(stage), phase);
        mbarrier_wait(v_full(previous), previous_phase);
        my_turn();
        wgmma_fence();
        issue_s(s_flat, stage);
        issue_pv(previous);
        their_turn();
        wgmma_wait<1>();  // S is done; the P V after it may still run
        wgmma_fence_registers(s_flat);
        softmax(s, j, rescale);
        finish_pv(previous);  // O is whole again before it is rescaled
        rescale_and_pack(s, rescale);
        previous = stage;
        previous_phase = phase;
        advance();
      }
      mbarrier_wait(v_full(previous), previous_phase);
      wgmma_fence();
      issue_pv(previous);
      finish_pv(previous);
    }
    // Warpgroup 1's first arrival (with no block, its only one) is still counted on barrier 1.
    if (PINGPONG && c == 0) named_barrier_sync(1, 256);

    // Normalize and write O from the registers, and the logsumexp. Each quad first trades its
    // pairs of columns so that a lane holds 8 contiguous columns, stored in one 16 bytes: a
    // quarter of the store instructions, whole sectors (the pairs' own 4-byte stores took ~1.5
    // key blocks' time a block: docs/perf/attention.md v13). O is 16-byte aligned and its rows
    // a multiple of 8 elements apart (the runtime refuses other strides; the tuner packs O).
    half_bits* const o = static_cast<half_bits*>(p.o) + block.batch * p.o_strides.batch +
                         block.head * p.o_strides.head;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lse;
      const float inverse = finish_row(row_max[r], row_sum[r], lse);
      const int row = first_row() + 8 * r;
      const bool row_valid = static_cast<unsigned>(row) < static_cast<unsigned>(p.seq_q);  // >= 0
      if (row_valid && p.lse != nullptr && lane % 4 == 0)
        p.lse[static_cast<long long>(block.batch_head) * p.seq_q + row] = lse;
#pragma unroll
      for (int g = 0; g < D_TILES / 4; ++g) {
        unsigned columns[4];
#pragma unroll
        for (int t = 0; t < 4; ++t) {
          const int dt = 4 * g + t;
          columns[t] = pack2<KIND>(o_acc[4 * dt + 2 * r] * inverse,
                                   o_acc[4 * dt + 2 * r + 1] * inverse);
        }
        quad_transpose(columns, lane);  // by every lane, its row valid or not
        const int col = 8 * (4 * g + lane % 4);
        if (row_valid && col < p.head_dim)
          store_global_16(o + row * p.o_strides.row + col, columns);
      }
    }
    if (CLAIM) claimed = take_block();
  }
}

}  // namespace tilesmith
