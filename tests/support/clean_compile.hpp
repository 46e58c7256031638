// The check that a config compiles cleanly, for the family tests' samples of their spaces.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "generator/compiled_kernel.hpp"
#include "templates/family.hpp"

namespace tilesmith::testing {

// A compiled kernel that spills nothing (or at most `spill_allowance` bytes of stores) and drew
// no ptxas warning, nor the note that its wgmma instructions are serialized (C7510-C7520, e.g.
// a batch behind a branch): ptxas prints that as info, yet it cost the attention kernels 10-15%
// (docs/perf/attention.md, v9).
inline void expect_clean_log(const CompiledKernel& kernel, const std::string& what,
                             int spill_allowance = 0) {
  if (spill_allowance == 0)
    EXPECT_FALSE(kernel.resources.spills()) << what << "\n" << kernel.log;
  else
    EXPECT_LE(kernel.resources.spill_store_bytes, spill_allowance) << what << "\n" << kernel.log;
  EXPECT_EQ(kernel.log.find("warning"), std::string::npos) << what << "\n" << kernel.log;
  EXPECT_EQ(kernel.log.find("Potential Performance Loss"), std::string::npos)
      << what << "\n" << kernel.log;
}

// Compiles `config` of `problem` for `arch`, expecting no compile error, no spills, no ptxas
// warning and no serialized wgmma; returns the kernel when it compiled, for the caller's further checks.
inline std::optional<CompiledKernel> expect_clean_compile(const Family& family, const Config& config,
                                                          const Problem& problem, const std::string& arch,
                                                          int spill_allowance = 0) {
  const std::string what = arch + " " + problem.key() + " [" + config.text() + "]";
  CompiledKernel kernel;
  try {
    kernel = compile(render(family, config, problem), arch);
  } catch (const Error& error) {
    ADD_FAILURE() << what << ":\n" << error.what();
    return std::nullopt;
  }
  expect_clean_log(kernel, what, spill_allowance);
  return kernel;
}

// The family's default config for each problem, what a user runs untuned, compiles cleanly on
// each arch; problems whose defaults render the same source are compiled once.
inline void expect_clean_defaults(const Family& family, const std::vector<Problem>& problems,
                                  const std::vector<std::string>& archs, int spill_allowance = 0) {
  for (const std::string& arch : archs) {
    const DeviceTarget device = DeviceTarget::assumed_for_arch(arch);
    std::set<std::string> compiled;
    for (const Problem& problem : problems) {
      const Config config = family.default_config(problem, device);
      const std::optional<std::string> why = family.reject(config, problem, device);
      EXPECT_FALSE(why.has_value()) << arch << " " << problem.key() << ": " << why.value_or("");
      if (why || !compiled.insert(render(family, config, problem).hash).second) continue;
      expect_clean_compile(family, config, problem, arch, spill_allowance);
    }
  }
}

}  // namespace tilesmith::testing
