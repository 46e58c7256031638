// A row op's problem in one line, and the checks the reductions family's tests share.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "support/test_support.hpp"
#include "templates/registry.hpp"

namespace tilesmith::testing {

inline Problem rows(const std::string& op, std::int64_t r, std::int64_t c,
                    ProblemOptions options = {}, DType in = DType::bf16,
                    DType out = DType::bf16) {
  return Problem{op, in, out, {r, c}, std::move(options)};
}

// The op's family must refuse `problem` with an error saying `message`.
inline void expect_invalid(const Problem& problem, const std::string& message) {
  expect_invalid_argument([&] { find_family(problem.op).validate(problem); }, message);
}

// The names of the op's tensors in order, outputs marked "*": {"x", "weight", "y*"}.
inline std::vector<std::string> tensor_names(const Problem& problem) {
  std::vector<std::string> names;
  for (const TensorSpec& spec : find_family(problem.op).tensors(problem))
    names.push_back(spec.name + (spec.is_output ? "*" : ""));
  return names;
}

}  // namespace tilesmith::testing
