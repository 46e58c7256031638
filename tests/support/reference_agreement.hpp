// The GPU reference a family's candidates are judged by, checked against its fp64 CPU loop.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "templates/family.hpp"
#include "tuner/workbench.hpp"

namespace tilesmith::testing {

struct ReferenceAgreement {
  double relative_error = 0;  // norm-wise, over the finite elements
  double norm = 0;            // of the CPU loop's finite elements: 0 means zero inputs
  int infinities = 0;         // elements that are infinite in both, with the same sign
};

// `got` against `want` (a CPU loop's fp64 outputs). An element `want` gives as an infinity
// (attention's logsumexp of a row that sees no key) must be the same infinity in `got`, and is
// counted rather than measured.
inline ReferenceAgreement agreement_of(const std::vector<double>& got, const std::vector<double>& want,
                                       const std::string& what) {
  ReferenceAgreement agreement;
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return agreement;
  double error = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << " element " << i;
      ++agreement.infinities;
      continue;
    }
    error += (got[i] - want[i]) * (got[i] - want[i]);
    agreement.norm += want[i] * want[i];
  }
  agreement.relative_error = std::sqrt(error / agreement.norm);
  return agreement;
}

// The bench's GPU reference outputs and `family`'s CPU loop on the bench's current inputs.
inline ReferenceAgreement reference_agreement(tuner::Workbench& bench, const Family& family) {
  const Problem& problem = bench.problem();
  const std::vector<float> gpu = bench.reference_output();
  std::vector<std::vector<double>> inputs;
  const std::vector<TensorSpec> tensors = family.tensors(problem);
  for (std::size_t i = 0; i < tensors.size(); ++i)
    if (!tensors[i].is_output) inputs.push_back(bench.download(i));
  return agreement_of(std::vector<double>(gpu.begin(), gpu.end()), family.reference_cpu(problem, inputs),
                      problem.key());
}

}  // namespace tilesmith::testing
