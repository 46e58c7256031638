// A row op's problem in one line, for the reductions family's tests.
#pragma once

#include <map>
#include <string>

#include "templates/problem.hpp"

namespace tilesmith::testing {

inline Problem rows(const std::string& op, std::int64_t r, std::int64_t c,
                    std::map<std::string, std::string> options = {}, DType in = DType::bf16,
                    DType out = DType::bf16) {
  return Problem{op, in, out, {r, c}, std::move(options)};
}

}  // namespace tilesmith::testing
