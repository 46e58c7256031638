#pragma once

#include <memory>
#include <vector>

#include "templates/family.hpp"

namespace tilesmith {
// The reductions' families. softmax, layernorm, rmsnorm, layernorm_act_residual and
// rmsnorm_act_residual: one family per op, all rendered from reductions/row_norm.cuh.
std::vector<std::unique_ptr<Family>> make_row_norm_families();
// softmax_backward, layernorm_backward and rmsnorm_backward, from reductions/row_norm_backward.cuh.
std::vector<std::unique_ptr<Family>> make_row_norm_backward_families();
// multi_sum: the sums of many tensors from a table in device memory (reductions/multi_sum.cuh).
std::unique_ptr<Family> make_multi_sum_family();
}
