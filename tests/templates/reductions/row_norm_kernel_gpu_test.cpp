// GPU: the row ops against their reference, and the reference against a CPU loop in fp64.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "generator/compiled_kernel.hpp"
#include "support/test_support.hpp"
#include "support/reference_agreement.hpp"
#include "support/row_problems.hpp"
#include "templates/registry.hpp"
#include "tuner/workbench.hpp"

namespace tilesmith {
namespace {

class GpuRowNorm : public ::testing::Test {
 protected:
  void SetUp() override {
    TILESMITH_REQUIRE_GPU();
    driver::make_current(0);
    device_ = driver::describe_device(0);
  }
  struct SampleCount {
    int checked = 0, clustered = 0;
  };
  // For each problem, about `parts` of its valid configs that `keep` selects, evenly spaced
  // (the offset moving with the count so far), each verified against the reference on fresh
  // inputs seeded from `seed` + the count, `runs` times (the workspace reused, as the runtime
  // reuses it): passed, nothing unwritten. A problem without such a config is a fatal failure
  // (the caller checks HasFatalFailure()).
  void verify_sample(const std::vector<Problem>& problems, const std::function<bool(const Config&)>& keep,
                     std::size_t parts, int seed, SampleCount& count, int runs = 1) {
    for (const Problem& problem : problems) {
      const Family& family = find_family(problem.op);
      tuner::Workbench bench(family, problem, device_);
      std::vector<Config> sample;
      for (const Config& config : family.enumerate())
        if (keep(config) && !family.reject(config, problem, device_)) sample.push_back(config);
      ASSERT_FALSE(sample.empty()) << problem.key();
      const std::size_t step = std::max<std::size_t>(1, sample.size() / parts);
      for (std::size_t i = count.checked % step; i < sample.size(); i += step) {
        const Config& config = sample[i];
        RenderedSource source = render(family, config, problem);
        driver::ReadyKernel ready =
            driver::load_kernel(compile(source, device_.arch()), bench.plan(config), source.describe());
        for (int run = 0; run < runs; ++run) {
          bench.refresh_inputs(seed + count.checked + 7919 * run);
          tuner::Verification result = bench.verify(ready, config);
          EXPECT_TRUE(result.passed) << problem.key() << " [" << config.text() << "] run " << run
                                     << ": " << result.detail;
          EXPECT_EQ(result.nonfinite, 0u) << problem.key() << " [" << config.text() << "]";
        }
        ++count.checked;
        count.clustered += config.at("cluster") > 1;
      }
    }
  }

  DeviceTarget device_;
};

using testing::rows;

// The reference judges every candidate: it must agree with the fp64 CPU loop, statistics
// included, on rows with every kind of edge.
TEST_F(GpuRowNorm, ReferenceMatchesCpuLoop) {
  const std::vector<Problem> problems = {
      rows("softmax", 1, 1), rows("softmax", 3, 1023, {}, DType::f32, DType::f32),
      rows("layernorm", 5, 4097, {{"stats", "1"}}, DType::f16, DType::f32),
      rows("rmsnorm", 2, 300, {{"stats", "1"}, {"weight", "0"}}),
      rows("layernorm_act_residual", 7, 129, {{"act", "gelu"}}),
      rows("rmsnorm_act_residual", 4, 70, {{"act", "silu"}, {"stats", "1"}}, DType::bf16, DType::f32),
      rows("softmax_backward", 3, 1023), rows("layernorm_backward", 5, 4097, {}, DType::f16, DType::f32),
      rows("layernorm_backward", 9, 70, {{"bias", "0"}}), rows("rmsnorm_backward", 7, 300),
      rows("rmsnorm_backward", 2, 33, {{"weight", "0"}}, DType::f32, DType::f32)};
  for (const Problem& problem : problems) {
    const Family& family = find_family(problem.op);
    tuner::Workbench bench(family, problem, device_);
    bench.refresh_inputs(11);
    const testing::ReferenceAgreement agreement = testing::reference_agreement(bench, family);
    EXPECT_GT(agreement.norm, 0) << problem.key();
    EXPECT_LT(agreement.relative_error, 1e-5) << problem.key();
  }
}

// Every op on rows of 1, 7, 1023, 4097 and 262144 columns and a single row,
// each dtype pairing, the backward's column sums over more rows than its persistent grid:
// a deterministic sample of the valid configs (every vector width, CTA shape and cluster size
// appears across the sample) must match the reference, statistics included, nothing unwritten.
TEST_F(GpuRowNorm, SampledConfigsMatchTheReferenceOnOddRows) {
  const std::vector<Problem> problems = {
      rows("softmax", 1, 1), rows("softmax", 37, 7, {}, DType::f32, DType::f32),
      rows("softmax", 129, 1023), rows("softmax", 3, 262144, {}, DType::f32, DType::f32),
      rows("layernorm", 1, 4097, {{"stats", "1"}}), rows("layernorm", 300, 256, {}, DType::f16, DType::f16),
      rows("layernorm", 2, 262144, {{"stats", "1"}}, DType::bf16, DType::f32),
      rows("rmsnorm", 65, 1023, {{"stats", "1"}, {"weight", "0"}}, DType::f32, DType::bf16),
      rows("rmsnorm", 5, 131072),
      rows("layernorm_act_residual", 33, 4097, {{"act", "gelu"}, {"stats", "1"}}),
      rows("layernorm_act_residual", 9, 7, {{"act", "relu"}, {"bias", "0"}}, DType::f32, DType::f32),
      rows("rmsnorm_act_residual", 17, 1023, {{"act", "silu"}}, DType::bf16, DType::f32),
      rows("rmsnorm_act_residual", 2, 262144, {}, DType::f16, DType::f16),
      rows("softmax_backward", 1, 1), rows("softmax_backward", 37, 7, {}, DType::f32, DType::f32),
      rows("softmax_backward", 129, 4097, {}, DType::bf16, DType::f32),
      rows("layernorm_backward", 300, 256, {}, DType::f16, DType::f16),
      rows("layernorm_backward", 20000, 64), rows("layernorm_backward", 1, 4097),
      rows("layernorm_backward", 2, 131072, {{"weight", "0"}}, DType::f32, DType::f32),
      rows("layernorm_backward", 3, 65536, {}, DType::bf16, DType::bf16),
      rows("rmsnorm_backward", 65, 1023, {}, DType::f32, DType::bf16),
      rows("rmsnorm_backward", 5, 131072, {}, DType::bf16, DType::bf16),
      rows("layernorm_backward", 3, 262144, {}, DType::bf16, DType::bf16)};
  SampleCount count;
  verify_sample(problems, [](const Config&) { return true; }, 5, 500, count);
  if (HasFatalFailure()) return;
  EXPECT_GE(count.checked, 90);
  if (device_.cc_major >= 9) EXPECT_GE(count.clustered, 5);
}

// The persistent ring (stages > 0) where every CTA (cluster) loops over many row groups, forward
// and backward: rows that start off vector boundaries (odd columns), short rows many to a CTA,
// clusters that exchange row after row, dy wider than x. A sample of every valid staged config,
// nothing unwritten.
TEST_F(GpuRowNorm, StagedConfigsMatchTheReferenceWhereEachCtaLoops) {
  const std::vector<Problem> problems = {
      rows("softmax", 5000, 1023), rows("layernorm", 3001, 4097, {{"stats", "1"}}, DType::f32, DType::f32),
      rows("rmsnorm_act_residual", 2000, 256, {{"act", "silu"}}, DType::f16, DType::f16),
      rows("layernorm_act_residual", 700, 32768, {{"act", "gelu"}, {"stats", "1"}}),
      rows("softmax", 200, 131072, {}, DType::f32, DType::f32), rows("rmsnorm", 1500, 7),
      rows("softmax_backward", 3000, 1023), rows("layernorm_backward", 2000, 4097, {}, DType::f16, DType::f32),
      rows("rmsnorm_backward", 600, 32768), rows("layernorm_backward", 300, 65536, {}, DType::f32, DType::f32)};
  SampleCount count;
  verify_sample(problems, [](const Config& config) { return config.at("stages") > 0; }, 6, 900, count);
  if (HasFatalFailure()) return;
  EXPECT_GE(count.checked, 50);
  if (device_.cc_major >= 9) EXPECT_GE(count.clustered, 5);
}

// CTAs sharing rows through global memory (exchange 1: no cluster, every SM), forward and
// backward, each CTA exchanging row after row: odd columns, rows past what the persistent grid
// takes at once, f32 and half types, and every config run twice on one workspace (the plan
// zeroes the boards before each launch; a board left counting would hang or mix rows).
TEST_F(GpuRowNorm, GlobalExchangeConfigsMatchTheReferenceRunAfterRun) {
  const std::vector<Problem> problems = {
      rows("layernorm", 700, 32771, {{"stats", "1"}}), rows("softmax", 300, 131072, {}, DType::f32, DType::f32),
      rows("rmsnorm_act_residual", 500, 16384, {{"act", "gelu"}}, DType::f16, DType::f16),
      rows("layernorm_backward", 400, 65537, {}, DType::bf16, DType::bf16),
      rows("rmsnorm_backward", 300, 131072, {}, DType::f32, DType::f32),
      rows("softmax_backward", 600, 32768, {}, DType::bf16, DType::f32)};
  SampleCount count;
  verify_sample(problems, [](const Config& config) { return config.at("exchange") == 1; }, 4, 1300,
                count, 2);
  if (HasFatalFailure()) return;
  EXPECT_GE(count.checked, 20);
  EXPECT_EQ(count.clustered, count.checked);
}

// A kernel that writes only part of y, or a wrong statistic, fails verification: the checks
// can fail.
TEST_F(GpuRowNorm, VerificationCatchesAWrongKernel) {
  const Problem problem = rows("layernorm", 64, 1024, {{"stats", "1"}});
  const Family& family = find_family(problem.op);
  tuner::Workbench bench(family, problem, device_);
  const Config config = family.default_config(problem, device_);
  RenderedSource source = render(family, config, problem);
  driver::ReadyKernel ready =
      driver::load_kernel(compile(source, device_.arch()), bench.plan(config), source.describe());
  bench.refresh_inputs(3);
  ASSERT_TRUE(bench.verify(ready, config).passed);
  // Half the rows: the rest of y, mean and rstd stay poisoned.
  const Problem half = rows("layernorm", 32, 1024, {{"stats", "1"}});
  bench.refresh_inputs(4);
  ready.run(family.plan(config, half, device_, bench.tensor_addresses(), 0, {}), nullptr);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the half-writing kernel");
  tuner::Verification result = bench.check_output();
  EXPECT_FALSE(result.passed);
  EXPECT_EQ(result.nonfinite, 32u * 1024u + 32u + 32u);
  // A different epsilon than the reference's changes rstd beyond its tolerance (y barely moves).
  CallScalars loose;
  loose.epsilon = 0.5;
  bench.refresh_inputs(5);
  ready.run(family.plan(config, problem, device_, bench.tensor_addresses(), 0, loose), nullptr);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the loose-epsilon kernel");
  result = bench.check_output();
  EXPECT_FALSE(result.passed);
  EXPECT_NE(result.detail.find("output"), std::string::npos) << result.detail;
}

}  // namespace
}  // namespace tilesmith
