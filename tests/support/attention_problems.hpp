// An attention problem in one line, for the attention family's tests.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "templates/problem.hpp"

namespace tilesmith::testing {

// `shape`: BxHxSxD or BxHQxHKVxSQxSKxD.
inline Problem attention(std::vector<std::int64_t> shape,
                         ProblemOptions options = {},
                         DType dtype = DType::bf16) {
  return Problem{"attention", dtype, dtype, std::move(shape), std::move(options)};
}

inline Problem attention_backward(std::vector<std::int64_t> shape,
                                  ProblemOptions options = {},
                                  DType dtype = DType::bf16) {
  return Problem{"attention_backward", dtype, dtype, std::move(shape), std::move(options)};
}

}  // namespace tilesmith::testing
