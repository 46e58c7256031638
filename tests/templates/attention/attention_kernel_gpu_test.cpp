// GPU: the attention kernels, forward and backward, against their references, and the
// references against CPU loops in fp64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "generator/compiled_kernel.hpp"
#include "support/attention_problems.hpp"
#include "support/reference_agreement.hpp"
#include "support/test_support.hpp"
#include "templates/attention/attention_shape.hpp"
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
    ready.run(
        family.plan(config, problem, device_, bench.tensor_addresses(), bench.workspace(), sharper),
        nullptr);
    TILESMITH_CU(driver::api().cuCtxSynchronize(), "running with another scale");
    tuner::Verification result = bench.check_output();
    EXPECT_FALSE(result.passed);
    EXPECT_EQ(result.nonfinite, 0u);

    bench.refresh_inputs(5);
    ready.run(family.plan(config, half, device_, bench.tensor_addresses(), bench.workspace(), {}),
              nullptr);
    TILESMITH_CU(driver::api().cuCtxSynchronize(), "running over half the queries");
    result = bench.check_output();
    EXPECT_FALSE(result.passed);
    EXPECT_GT(result.nonfinite, 0u);
  }

  // Every `nth` wgmma config with this `persistent` value that `device` runs, from the
  // `offset`-th on: a different sample for each problem.
  std::vector<Config> persistent_sample(const Problem& problem, const DeviceTarget& device,
                                        int persistent, std::size_t nth, std::size_t offset) {
    const Family& family = find_family(problem.op);
    std::vector<Config> sample;
    std::size_t index = offset;
    for (const Config& config : family.enumerate())
      if (config.at("variant") == 1 && config.at("persistent") == persistent &&
          !family.reject(config, problem, device) && index++ % nth == 0)
        sample.push_back(config);
    return sample;
  }

  DeviceTarget device_;
  int checked_ = 0;
};

// The reference judges every candidate: it must agree with the fp64 CPU loop, the logsumexp
// included, on every kind of edge: one key, causal rows that see no key (more queries than
// keys), grouped-query heads, the BHSD layout, head dims that are not multiples of 16.
TEST_F(GpuAttention, ReferenceMatchesCpuLoop) {
  const std::vector<Problem> problems = {
      attention({1, 1, 1, 8}), attention({2, 4, 2, 37, 100, 64}, {{"causal", "1"}}),
      attention({1, 2, 1, 100, 37, 72}, {{"causal", "1"}, {"layout", "bhsd"}}, DType::f16),
      attention({2, 3, 17, 16}), attention({1, 1, 300, 256}, {{"causal", "1"}})};
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
    for (std::size_t i = p % step; i < valid.size(); i += step)
      verify(bench, valid[i], 200 + checked_);
    // Each consumer count of the wgmma kernel, persistent (strided or claiming, causal) or not,
    // on every shape, whatever the sample took.
    for (int consumers = 1; consumers <= 3; ++consumers)
      for (int persistent = 0; persistent <= 2; ++persistent) {
        const auto first = std::find_if(valid.begin(), valid.end(), [&](const Config& c) {
          return c.at("variant") == 1 && c.at("consumers") == consumers &&
                 c.at("pipeline") == consumers % 2 && c.at("persistent") == persistent;
        });
        if (first != valid.end()) verify(bench, *first, 300 + checked_);
      }
  }
  EXPECT_GE(checked_, 80);
}

// Persistent CTAs on a GPU that pretends to have 3 SMs: each CTA takes many query blocks in
// turn, so every mbarrier's phase wraps many times across blocks of different key counts
// (causal, Q and K/V lengths apart, rows that see nothing) and the ping-pong barriers start
// afresh at every block.
TEST_F(GpuAttention, PersistentCtasCarryTheirPipelineAcrossQueryBlocks) {
  if (device_.cc_major < 9) GTEST_SKIP() << "the wgmma kernel needs sm_90a";
  DeviceTarget three_sms = device_;
  three_sms.sm_count = 3;
  const std::vector<Problem> problems = {
      attention({2, 4, 2, 700, 530, 64}, {{"causal", "1"}}),
      attention({1, 3, 1000, 128}, {{"layout", "bhsd"}}),
      attention({2, 2, 1, 300, 1000, 96}, {{"causal", "1"}}, DType::f16)};
  const Family& family = find_family("attention");
  int persistent_checked = 0;
  for (std::size_t p = 0; p < problems.size(); ++p) {
    const Problem& problem = problems[p];
    tuner::Workbench bench(family, problem, three_sms);
    for (const Config& config : persistent_sample(problem, three_sms, 1, 7, p)) {
      const LaunchPlan plan =
          family.plan(config, problem, three_sms, bench.tensor_addresses(), 0, CallScalars{});
      EXPECT_LE(plan.steps[0].geometry.grid[0], 6u) << config.text();
      verify(bench, config, 400 + checked_);
      ++persistent_checked;
    }
  }
  EXPECT_GE(persistent_checked, 25);
}

// Persistent CTAs that claim their query blocks from a counter (causal), on a GPU that pretends
// to have 3 SMs: every block is taken once (one left out would stay poisoned, one taken twice
// could not be seen, but its CTA would claim past the end), and each config runs twice on the
// same workspace, so a counter left from the run before would show.
TEST_F(GpuAttention, ClaimingCtasTakeEveryQueryBlockOnceRunAfterRun) {
  DeviceTarget three_sms = device_;
  three_sms.sm_count = 3;
  // And an L2 so small that tile_order 2 groups at most 3 heads: groups of 3, 3 and 2 of the
  // first problem's 8, one head a group in the others.
  three_sms.l2_bytes = 420000;
  const std::vector<Problem> problems = {
      attention({2, 4, 2, 700, 530, 64}, {{"causal", "1"}}),
      attention({1, 3, 1000, 128}, {{"causal", "1"}, {"layout", "bhsd"}}),
      attention({2, 2, 1, 300, 1000, 96}, {{"causal", "1"}}, DType::f16),
      attention({1, 2, 1, 3000, 3000, 256}, {{"causal", "1"}})};
  const Family& family = find_family("attention");
  if (device_.cc_major < 9) {  // no wgmma: the family offers no claiming config to run
    for (const Problem& problem : problems)
      EXPECT_TRUE(persistent_sample(problem, device_, 2, 1, 0).empty()) << problem.key();
    return;
  }
  int claimed_checked = 0;
  for (std::size_t p = 0; p < problems.size(); ++p) {
    const Problem& problem = problems[p];
    tuner::Workbench bench(family, problem, three_sms);
    for (const Config& config : persistent_sample(problem, three_sms, 2, 10, p)) {
      verify(bench, config, 500 + checked_);
      verify(bench, config, 600 + checked_);
      ++claimed_checked;
    }
  }
  EXPECT_GE(claimed_checked, 12);
}

// A scale that is not positive takes the softmax's detour (scaled in place, not in the exponent's
// FFMA), on both kernels: a negative scale matches the fp64 loop run on -Q with the default
// scale (1/8 at head dim 64), and a scale of 0 averages the visible values (logsumexp: the log
// of their count), causal with rows that see no key.
TEST_F(GpuAttention, NegativeAndZeroScalesMatchTheirReferences) {
  const Problem problem = attention({1, 2, 1, 100, 70, 64}, {{"causal", "1"}});
  const Family& family = find_family("attention");
  const AttentionShape shape(problem);
  tuner::Workbench bench(family, problem, device_);
  std::vector<Config> configs = {family.default_config(problem, device_)};
  for (const Config& config : family.enumerate())
    if (config.at("variant") != configs[0].at("variant") &&
        !family.reject(config, problem, device_)) {
      configs.push_back(config);
      break;
    }
  const std::size_t o_elements = shape.elements(false);
  for (const Config& config : configs) {
    RenderedSource source = render(family, config, problem);
    driver::ReadyKernel ready =
        driver::load_kernel(compile(source, device_.arch()), bench.plan(config), source.describe());
    for (double scale : {-0.125, 0.0}) {
      bench.refresh_inputs(scale < 0 ? 21 : 22);
      CallScalars scalars;
      scalars.softmax_scale = scale;
      ready.run(family.plan(config, problem, device_, bench.tensor_addresses(), bench.workspace(),
                            scalars),
                nullptr);
      TILESMITH_CU(driver::api().cuCtxSynchronize(),
                   "running with a softmax scale that is not positive");
      std::vector<double> q = bench.download(0), v = bench.download(2);
      std::vector<double> got = bench.download(3);
      const std::vector<double> lse = bench.download(4);
      got.insert(got.end(), lse.begin(), lse.end());
      std::vector<double> want;
      if (scale < 0) {
        for (double& x : q) x = -x;
        want = family.reference_cpu(problem, {q, bench.download(1), v});
      } else {  // every visible key weighs the same
        want.assign(got.size(), 0.0);
        const AttentionStrides qo = shape.packed(false), kv = shape.packed(true);
        for (std::int64_t h = 0; h < shape.heads; ++h)
          for (std::int64_t i = 0; i < shape.seq_q; ++i) {
            const std::int64_t visible = shape.visible_keys(i);
            want[o_elements + static_cast<std::size_t>(h * shape.seq_q + i)] =
                visible ? std::log(double(visible)) : -INFINITY;
            for (std::int64_t j = 0; j < visible; ++j)
              for (std::int64_t d = 0; d < shape.head_dim; ++d)
                want[static_cast<std::size_t>(h * qo.head + i * qo.row + d)] +=
                    v[static_cast<std::size_t>(j * kv.row + d)] / static_cast<double>(visible);
          }
      }
      EXPECT_LT(testing::agreement_of(got, want, config.text()).relative_error, 1e-2)
          << config.text() << " scale " << scale;
    }
  }
  EXPECT_EQ(configs.size(), 2u);
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
      attention_backward({2, 3, 17, 16}), attention_backward({1, 1, 300, 256}, {{"causal", "1"}})};
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
      if (valid[i].at("variant") == 1 || i % step == p % step)
        verify(bench, valid[i], 400 + checked_);
  }
  EXPECT_GE(checked_, 60);
}

// The backward's verification can fail: another softmax scale than the reference's changes
// every gradient; half the queries leave dQ's other rows poisoned.
TEST_F(GpuAttention, BackwardVerificationCatchesAWrongKernel) {
  expect_wrong_runs_caught(attention_backward({1, 2, 256, 64}),
                           attention_backward({1, 2, 2, 128, 256, 64}));
}

}  // namespace
}  // namespace tilesmith
