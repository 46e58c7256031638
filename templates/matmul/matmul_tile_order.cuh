// Where a matmul kernel's work unit lies in C: the grouped tile order both tiled templates use.
#pragma once

namespace tilesmith {

// Units run down `group_m` tile rows, then move one tile column right, so the tiles in flight
// at one time share A rows and B columns in L2. A kernel argument, not a template argument:
// configs that differ only in it share one compiled kernel, so a sweep compiles each once.
__device__ __forceinline__ void grouped_tile(int unit, int tiles_m, int tiles_n, int group_m,
                                             int& tile_m, int& tile_n) {
  const int per_group = group_m * tiles_n;
  const int group = unit / per_group;
  const int first_m = group * group_m;
  const int rows = tiles_m - first_m < group_m ? tiles_m - first_m : group_m;
  const int in_group = unit - group * per_group;
  tile_m = first_m + in_group % rows;
  tile_n = in_group / rows;
}

}  // namespace tilesmith
