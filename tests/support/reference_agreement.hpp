// The GPU reference a family's candidates are judged by, checked against its fp64 CPU loop.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "templates/family.hpp"
#include "tuner/workbench.hpp"

namespace tilesmith::testing {

struct ReferenceAgreement {
  double relative_error = 0;  // norm-wise, over the finite elements
  double norm = 0;            // of the CPU loop's finite elements: 0 means zero inputs
  int infinities = 0;         // elements that are infinite in both, with the same sign
};

// The bench's GPU reference outputs and `family`'s CPU loop on the bench's current inputs. An
// element the CPU loop gives as an infinity (attention's logsumexp of a row that sees no key)
// must be the same infinity on the GPU, and is counted rather than measured.
inline ReferenceAgreement reference_agreement(tuner::Workbench& bench, const Family& family) {
  const Problem& problem = bench.problem();
  const std::vector<float> gpu = bench.reference_output();
  std::vector<std::vector<double>> inputs;
  const std::vector<TensorSpec> tensors = family.tensors(problem);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i].is_output) inputs.push_back(bench.download(i));
  const std::vector<double> cpu = family.reference_cpu(problem, inputs);
  ReferenceAgreement agreement;
  EXPECT_EQ(gpu.size(), cpu.size()) << problem.key();
  if (gpu.size() != cpu.size()) return agreement;
  double error = 0;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    if (std::isinf(cpu[i])) {
      EXPECT_EQ(gpu[i], cpu[i]) << problem.key() << " element " << i;
      ++agreement.infinities;
      continue;
    }
    error += (gpu[i] - cpu[i]) * (gpu[i] - cpu[i]);
    agreement.norm += cpu[i] * cpu[i];
  }
  agreement.relative_error = std::sqrt(error / agreement.norm);
  return agreement;
}

}  // namespace tilesmith::testing
