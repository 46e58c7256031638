// GPU: the attention kernels, forward and backward, against their references, and the
// references against CPU loops in fp64.
#include <gtest/gtest.h>

#include <algorithm>

#include "generator/compiled_kernel.hpp"
#include "support/attention_problems.hpp"
#include "support/reference_agreement.hpp"
#include "support/test_support.hpp"
#include "templates/registry.hpp"
#include "tuner/workbench.hpp"

namespace tilesmith {
namespace {

using testing::attention;
using testing::attention_backward;

class GpuAttention : public ::testing::Test {
 protected:
  void SetUp() override {
    TILESMITH_REQUIRE_GPU();
    driver::make_current(0);
    device_ = driver::describe_device(0);
  }

  // Compiles `config` and verifies it on fresh inputs from `seed`: passed, nothing unwritten.
  void verify(tuner::Workbench& bench, const Config& config, std::uint64_t seed) {
    const Problem& problem = bench.problem();
    const Family& family = find_family(problem.op);
    RenderedSource source = render(family, config, problem);
    driver::ReadyKernel ready =
        driver::load_kernel(compile(source, device_.arch()), bench.plan(config), source.describe());
    bench.refresh_inputs(seed);
    const tuner::Verification result = bench.verify(ready, config);
    EXPECT_TRUE(result.passed) << problem.key() << " [" << config.text() << "]: " << result.detail;
    EXPECT_EQ(result.nonfinite, 0u) << problem.key() << " [" << config.text() << "]";
    ++checked_;
  }

  // The default config of `problem` passes verification, then fails it when run with another
  // softmax scale (every output off, none unwritten) and when run as `half` (the first half of
  // the queries: the rest poisoned).
  void expect_wrong_runs_caught(const Problem& problem, const Problem& half) {
    const Family& family = find_family(problem.op);
    tuner::Workbench bench(family, problem, device_);
    const Config config = family.default_config(problem, device_);
    RenderedSource source = render(family, config, problem);
    driver::ReadyKernel ready =
        driver::load_kernel(compile(source, device_.arch()), bench.plan(config), source.describe());
    bench.refresh_inputs(3);
    ASSERT_TRUE(bench.verify(ready, config).passed);

    CallScalars sharper;
    sharper.softmax_scale = 0.5;
    bench.refresh_inputs(4);
    ready.run(family.plan(config, problem, device_, bench.tensor_addresses(), bench.workspace(), sharper),
              nullptr);
    TILESMITH_CU(driver::api().cuCtxSynchronize(), "running with another scale");
    tuner::Verification result = bench.check_output();
    EXPECT_FALSE(result.passed);
    EXPECT_EQ(result.nonfinite, 0u);

    bench.refresh_inputs(5);
    ready.run(family.plan(config, half, device_, bench.tensor_addresses(), bench.workspace(), {}), nullptr);
    TILESMITH_CU(driver::api().cuCtxSynchronize(), "running over half the queries");
    result = bench.check_output();
    EXPECT_FALSE(result.passed);
    EXPECT_GT(result.nonfinite, 0u);
  }

  DeviceTarget device_;
  int checked_ = 0;
};

// The reference judges every candidate: it must agree with the fp64 CPU loop, the logsumexp
// included, on every kind of edge: one key, causal rows that see no key (more queries than
// keys), grouped-query heads, the BHSD layout, head dims that are not multiples of 16.
TEST_F(GpuAttention, ReferenceMatchesCpuLoop) {
  const std::vector<Problem> problems = {
      attention({1, 1, 1, 8}),
      attention({2, 4, 2, 37, 100, 64}, {{"causal", "1"}}),
      attention({1, 2, 1, 100, 37, 72}, {{"causal", "1"}, {"layout", "bhsd"}}, DType::f16),
      attention({2, 3, 17, 16}),
      attention({1, 1, 300, 256}, {{"causal", "1"}})};
  const Family& family = find_family("attention");
  for (const Problem& problem : problems) {
    tuner::Workbench bench(family, problem, device_);
    bench.refresh_inputs(11);
    const testing::ReferenceAgreement agreement = testing::reference_agreement(bench, family);
    EXPECT_GT(agreement.norm, 0) << problem.key();
    EXPECT_LT(agreement.relative_error, 1e-5) << problem.key();
    // 100 queries over 37 keys, causal: the first 63 rows of each of the 2 heads see nothing.
    if (problem.shape == std::vector<std::int64_t>{1, 2, 1, 100, 37, 72}) {
      EXPECT_EQ(agreement.infinities, 2 * 63);
    }
  }
}

// A deterministic sample of the valid configs (every tile shape, stage count, Q placement and
// tile order appears across it) on shapes no tile divides: one query, 17, 100, 129, 3000;
// keys fewer or more than queries, causal rows that see nothing, grouped-query heads, both
// layouts, f16 and bf16, head dims 8 to 256 including ones padded to the mma's 16.
TEST_F(GpuAttention, SampledConfigsMatchTheReferenceOnOddShapes) {
  const std::vector<Problem> problems = {
      attention({1, 1, 1, 8}),
      attention({2, 3, 100, 64}, {{"causal", "1"}}),
      attention({1, 8, 2, 3000, 3000, 128}),
      attention({2, 2, 1, 37, 200, 72}, {{"causal", "1"}, {"layout", "bhsd"}}, DType::f16),
      attention({1, 2, 2, 200, 37, 96}, {{"causal", "1"}}),
      attention({1, 2, 129, 256}),
      attention({3, 2, 17, 40}, {{"layout", "bhsd"}}, DType::f16),
      attention({1, 1, 1000, 128}, {{"causal", "1"}})};
  const Family& family = find_family("attention");
  for (std::size_t p = 0; p < problems.size(); ++p) {
    const Problem& problem = problems[p];
    tuner::Workbench bench(family, problem, device_);
    std::vector<Config> valid;
    for (const Config& config : family.enumerate())
      if (!family.reject(config, problem, device_)) valid.push_back(config);
    ASSERT_FALSE(valid.empty()) << problem.key();
    verify(bench, family.default_config(problem, device_), 100 + p);
    const std::size_t step = std::max<std::size_t>(1, valid.size() / 6);
    for (std::size_t i = p % step; i < valid.size(); i += step) verify(bench, valid[i], 200 + checked_);
    // Each consumer count of the wgmma kernel on every shape, whatever the sample took.
    for (int consumers = 1; consumers <= 3; ++consumers) {
      const auto first = std::find_if(valid.begin(), valid.end(), [&](const Config& c) {
        return c.at("variant") == 1 && c.at("consumers") == consumers && c.at("pipeline") == consumers % 2;
      });
      if (first != valid.end()) verify(bench, *first, 300 + checked_);
    }
  }
  EXPECT_GE(checked_, 60);
}

// Verification can fail: a kernel run with another softmax scale than the reference's, or over
// half the queries, is caught (O and the logsumexp off; the rest poisoned).
TEST_F(GpuAttention, VerificationCatchesAWrongKernel) {
  expect_wrong_runs_caught(attention({1, 2, 256, 64}), attention({1, 2, 2, 128, 256, 64}));
}

// The backward's reference against the fp64 CPU loop: dQ, dK and dV on the same edges as the
// forward's, grouped-query heads summing into one kv head's dK and dV.
TEST_F(GpuAttention, BackwardReferenceMatchesCpuLoop) {
  const std::vector<Problem> problems = {
      attention_backward({1, 1, 1, 8}),
      attention_backward({2, 4, 2, 37, 100, 64}, {{"causal", "1"}}),
      attention_backward({1, 2, 1, 100, 37, 72}, {{"causal", "1"}, {"layout", "bhsd"}}, DType::f16),
      attention_backward({2, 3, 17, 16}),
      attention_backward({1, 1, 300, 256}, {{"causal", "1"}})};
  const Family& family = find_family("attention_backward");
  for (const Problem& problem : problems) {
    tuner::Workbench bench(family, problem, device_);
    bench.refresh_inputs(12);
    const testing::ReferenceAgreement agreement = testing::reference_agreement(bench, family);
    EXPECT_GT(agreement.norm, 0) << problem.key();
    EXPECT_LT(agreement.relative_error, 1e-5) << problem.key();
    EXPECT_EQ(agreement.infinities, 0) << problem.key();
  }
}

// The backward's configs on shapes no tile divides, as the forward's: one query, 17, 100, 1000;
// more or fewer keys than queries, causal rows that see nothing, grouped-query and
// multi-query heads, both layouts, f16 and bf16, head dims 8 to 256 and ones padded.
TEST_F(GpuAttention, BackwardSampledConfigsMatchTheReferenceOnOddShapes) {
  const std::vector<Problem> problems = {
      attention_backward({1, 1, 1, 8}),
      attention_backward({2, 3, 100, 64}, {{"causal", "1"}}),
      attention_backward({1, 8, 2, 1000, 1000, 128}),
      attention_backward({2, 4, 1, 37, 200, 72}, {{"causal", "1"}, {"layout", "bhsd"}}, DType::f16),
      attention_backward({1, 2, 2, 200, 37, 96}, {{"causal", "1"}}),
      attention_backward({1, 2, 129, 256}),
      attention_backward({3, 2, 17, 40}, {{"layout", "bhsd"}}, DType::f16),
      attention_backward({1, 1, 1000, 128}, {{"causal", "1"}}),
      attention_backward({1, 2, 300, 192}, {{"causal", "1"}})};
  const Family& family = find_family("attention_backward");
  for (std::size_t p = 0; p < problems.size(); ++p) {
    const Problem& problem = problems[p];
    tuner::Workbench bench(family, problem, device_);
    std::vector<Config> valid;
    for (const Config& config : family.enumerate())
      if (!family.reject(config, problem, device_)) valid.push_back(config);
    ASSERT_FALSE(valid.empty()) << problem.key();
    verify(bench, family.default_config(problem, device_), 300 + p);
    // A sample of the mma.sync configs, every wgmma one (the few that run the problem).
    const std::size_t step = std::max<std::size_t>(1, valid.size() / 5);
    for (std::size_t i = 0; i < valid.size(); ++i)
      if (valid[i].at("variant") == 1 || i % step == p % step) verify(bench, valid[i], 400 + checked_);
  }
  EXPECT_GE(checked_, 60);
}

// The backward's verification can fail: another softmax scale than the reference's changes
// every gradient; half the queries leave dQ's other rows poisoned.
TEST_F(GpuAttention, BackwardVerificationCatchesAWrongKernel) {
  expect_wrong_runs_caught(attention_backward({1, 2, 256, 64}), attention_backward({1, 2, 2, 128, 256, 64}));
}

}  // namespace
}  // namespace tilesmith
