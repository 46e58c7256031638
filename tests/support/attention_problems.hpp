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

// The benchmark's cases (bench/attention_bench.py) and the other tuned head dims (96, 192,
// 256), causal and not, as problems of `op` ("attention" or "attention_backward").
inline std::vector<Problem> benchmark_attention_problems(const std::string& op) {
  const std::vector<std::vector<std::int64_t>> shapes = {
      {16, 16, 512, 64},  {8, 16, 2048, 64},  {4, 16, 4096, 128},          {2, 16, 8192, 128},
      {1, 16, 16384, 128}, {8, 32, 2048, 128}, {4, 32, 8, 4096, 4096, 128}, {4, 16, 3000, 128},
      {2, 16, 2048, 96},  {2, 16, 2048, 192}, {2, 16, 2048, 256}};
  std::vector<Problem> problems;
  for (const std::vector<std::int64_t>& shape : shapes) {
    problems.push_back(Problem{op, DType::bf16, DType::bf16, shape, {}});
    problems.push_back(Problem{op, DType::bf16, DType::bf16, shape, {{"causal", "1"}}});
  }
  return problems;
}

}  // namespace tilesmith::testing
