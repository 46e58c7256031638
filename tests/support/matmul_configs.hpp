// Matmul configs for tests, written by their tile parameters.
#pragma once

#include "templates/registry.hpp"

namespace tilesmith::testing {

// x @ W^T: a matmul of `shape` ({M, N, K} or {batch, M, N, K}) with B column-major, the layout
// of the decode and gemv templates.
inline Problem x_times_w_t(std::vector<std::int64_t> shape, DType in = DType::bf16,
                           DType out = DType::bf16, ProblemOptions options = {}) {
  options["b"] = "col";
  return Problem{"matmul", in, out, std::move(shape), std::move(options)};
}

// A config of the mma.sync template (variant 0).
inline Config tile_config(int block_m, int block_n, int block_k, int warps_m, int warps_n,
                          int stages, int group_m = 8) {
  return Config{{{"variant", 0},
                 {"block_m", block_m},
                 {"block_n", block_n},
                 {"block_k", block_k},
                 {"warps_m", warps_m},
                 {"warps_n", warps_n},
                 {"stages", stages},
                 {"group_m", group_m}}};
}

// A config of the wgmma + TMA template (variant 1, sm_90a).
inline Config wgmma_config(int block_m, int block_n, int stages, int consumers, int cluster_m,
                           int cluster_n, int group_m = 8, int split_k = 1,
                           int split_cluster = 0, int swap_ab = 0, int slice_major = 0,
                           int l2_promotion = 256, int pingpong = 0, int split_in_grid = 0) {
  return Config{{{"variant", 1},
                 {"block_m", block_m},
                 {"block_n", block_n},
                 {"block_k", 64},
                 {"stages", stages},
                 {"consumers", consumers},
                 {"cluster_m", cluster_m},
                 {"cluster_n", cluster_n},
                 {"group_m", group_m},
                 {"split_k", split_k},
                 {"split_cluster", split_cluster},
                 {"swap_ab", swap_ab},
                 {"slice_major", slice_major},
                 {"l2_promotion", l2_promotion},
                 {"pingpong", pingpong},
                 {"split_in_grid", split_in_grid}}};
}

// A config of the decode template (variant 2: M <= 32, B column-major).
inline Config decode_config(int block_n, int warps, int unroll, int split_k = 1, int row_bytes = 64) {
  return Config{{{"variant", 2},
                 {"block_n", block_n},
                 {"warps", warps},
                 {"unroll", unroll},
                 {"split_k", split_k},
                 {"row_bytes", row_bytes}}};
}

// A config of the gemv template (variant 3: M <= 4, B column-major).
inline Config gemv_config(int block_n, int warps, int unroll) {
  return Config{{{"variant", 3}, {"block_n", block_n}, {"warps", warps}, {"unroll", unroll}}};
}

// A config of the row-major-B gemv template (variant 4, matmul_gemv_kn.cuh).
inline Config gemv_kn_config(int vector, int warps, int unroll, int split_k = 1) {
  return Config{{{"variant", 4},
                 {"vector", vector},
                 {"warps", warps},
                 {"unroll", unroll},
                 {"split_k", split_k}}};
}

// The same for fp32 inputs, multiplied as tf32: k rows of 32 elements (128 bytes).
template <class... Args>
Config tf32_config(Args... args) {
  Config config = wgmma_config(args...);
  config.values["block_k"] = 32;
  return config;
}

}  // namespace tilesmith::testing
