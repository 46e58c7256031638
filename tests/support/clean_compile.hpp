// The check that a config compiles cleanly, for the family tests' samples of their spaces.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "generator/compiled_kernel.hpp"
#include "templates/family.hpp"

namespace tilesmith::testing {

// A compiled kernel that spills nothing and drew no ptxas warning, nor the note that its wgmma
// instructions are serialized (C7510-C7520, e.g. a batch behind a branch): ptxas prints that as
// info, yet it cost the attention kernels 10-15% (docs/perf/attention.md, v9).
inline void expect_clean_log(const CompiledKernel& kernel, const std::string& what) {
  EXPECT_FALSE(kernel.resources.spills()) << what << "\n" << kernel.log;
  EXPECT_EQ(kernel.log.find("warning"), std::string::npos) << what << "\n" << kernel.log;
  EXPECT_EQ(kernel.log.find("Potential Performance Loss"), std::string::npos)
      << what << "\n" << kernel.log;
}

// Compiles `config` of `problem` for `arch`, expecting no compile error, no spills, no ptxas
// warning and no serialized wgmma; returns the kernel when it compiled, for the caller's further checks.
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
  expect_clean_log(kernel, what);
  return kernel;
}

}  // namespace tilesmith::testing
