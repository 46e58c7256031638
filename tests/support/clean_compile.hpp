// The check that a config compiles cleanly, for the family tests' samples of their spaces.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "generator/compiled_kernel.hpp"
#include "templates/family.hpp"

namespace tilesmith::testing {

// Compiles `config` of `problem` for `arch`, expecting no compile error, no spills and no ptxas
// warning; returns the kernel when it compiled, for the caller's further checks.
inline std::optional<CompiledKernel> expect_clean_compile(const Family& family, const Config& config,
                                                          const Problem& problem, const std::string& arch) {
  const std::string what = arch + " " + problem.key() + " [" + config.text() + "]";
  CompiledKernel kernel;
  try {
    kernel = compile(render(family, config, problem), arch);
  } catch (const Error& error) {
    ADD_FAILURE() << what << ":\n" << error.what();
    return std::nullopt;
  }
  EXPECT_FALSE(kernel.resources.spills()) << what << "\n" << kernel.log;
  EXPECT_EQ(kernel.log.find("warning"), std::string::npos) << what << "\n" << kernel.log;
  return kernel;
}

}  // namespace tilesmith::testing
