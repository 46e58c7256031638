// Matmul configs for tests, written by their tile parameters.
#pragma once

#include "templates/registry.hpp"

namespace tilesmith::testing {

// A config of the family's current space: the default config's values (so parameters added to
// the space later keep their defaults) with the tile parameters overridden.
inline Config tile_config(int block_m, int block_n, int block_k, int warps_m, int warps_n,
                          int stages, int group_m = 8) {
  Config config = find_family("matmul").default_config(
      Problem{"matmul", DType::bf16, DType::bf16, {4096, 4096, 4096}},
      DeviceTarget::assumed_for_arch("sm_90a"));
  config.values["block_m"] = block_m;
  config.values["block_n"] = block_n;
  config.values["block_k"] = block_k;
  config.values["warps_m"] = warps_m;
  config.values["warps_n"] = warps_n;
  config.values["stages"] = stages;
  config.values["group_m"] = group_m;
  return config;
}

}  // namespace tilesmith::testing
