// GPU: the matmul template against its reference, and the reference against a CPU loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <stdexcept>

#include "generator/compiled_kernel.hpp"
#include "support/matmul_configs.hpp"
#include "support/reference_agreement.hpp"
#include "support/test_support.hpp"
#include "templates/registry.hpp"
#include "tuner/compile_pool.hpp"
#include "tuner/search_strategy.hpp"
#include "tuner/workbench.hpp"

namespace tilesmith {
namespace {

Problem matmul(DType in, DType out, std::int64_t m, std::int64_t n, std::int64_t k) {
  return Problem{"matmul", in, out, {m, n, k}};
}

class GpuMatmul : public ::testing::Test {
 protected:
  void SetUp() override {
    TILESMITH_REQUIRE_GPU();
    driver::make_current(0);
    device_ = driver::describe_device(0);
  }
  // Each config of `problem` rendered, compiled, loaded and verified on the inputs of every
  // seed (two: a stale workspace must not leak into C); fatal where the space refuses one.
  void verify_configs(const Problem& problem, const std::vector<Config>& configs,
                      std::initializer_list<std::uint64_t> seeds) {
    tuner::Workbench bench(family_, problem, device_);
    for (const Config& config : configs) {
      ASSERT_EQ(family_.reject(config, problem, device_), std::nullopt)
          << problem.key() << " " << config.text();
      RenderedSource source = render(family_, config, problem);
      driver::ReadyKernel ready = driver::load_kernel(compile(source, device_.arch()),
                                                      bench.plan(config), source.describe());
      for (std::uint64_t seed : seeds) {
        bench.refresh_inputs(seed);
        tuner::Verification result = bench.verify(ready, config);
        EXPECT_TRUE(result.passed) << problem.key() << " [" << config.text() << "]: " << result.detail;
        EXPECT_EQ(result.nonfinite, 0u) << problem.key() << " [" << config.text() << "]";
      }
    }
  }

  const Family& family_ = find_family("matmul");
  DeviceTarget device_;
};

// The tuner's timing runs only as many repetitions as its decision needs: until the median is
// known to 1%, or until the candidate cannot beat the best so far; both agree with a full run.
// The reference is computed once per input seed and still judges a later candidate.
TEST_F(GpuMatmul, TimingStopsOnceItsDecisionIsMade) {
  const Problem problem = matmul(DType::bf16, DType::bf16, 2048, 2048, 2048);
  tuner::Workbench bench(family_, problem, device_);
  const Config config = family_.default_config(problem, device_);
  RenderedSource source = render(family_, config, problem);
  driver::ReadyKernel ready =
      driver::load_kernel(compile(source, device_.arch()), bench.plan(config), source.describe());
  bench.refresh_inputs(5);
  ASSERT_TRUE(bench.verify(ready, config).passed);
  bench.refresh_inputs(5);  // same inputs: the reference in hand judges this run
  ASSERT_TRUE(bench.verify(ready, config).passed);

  tuner::TimingOptions full;
  full.precision = 0;
  full.max_repetitions = 60;
  const tuner::Timing all = bench.time(ready, config, full);
  EXPECT_EQ(all.repetitions, 60);
  EXPECT_FALSE(all.cannot_win);

  tuner::TimingOptions adaptive;
  const tuner::Timing quick = bench.time(ready, config, adaptive);
  EXPECT_GE(quick.repetitions, adaptive.min_repetitions);
  EXPECT_LT(quick.repetitions, adaptive.max_repetitions);
  EXPECT_NEAR(quick.median_ms, all.median_ms, 0.03 * all.median_ms);
  EXPECT_GT(quick.kernel_ms, quick.median_ms * quick.repetitions * 0.9);

  tuner::TimingOptions behind_the_best;
  behind_the_best.best_ms = all.median_ms / 2;
  const tuner::Timing loser = bench.time(ready, config, behind_the_best);
  EXPECT_TRUE(loser.cannot_win);
  EXPECT_LE(loser.repetitions, 15);
}

// The GPU reference is what every candidate is judged by: it must agree with a double-precision
// CPU loop on shapes with every kind of edge.
TEST_F(GpuMatmul, ReferenceMatchesCpuLoop) {
  const std::vector<Problem> problems = {
      matmul(DType::bf16, DType::bf16, 1, 1, 1), matmul(DType::bf16, DType::f32, 17, 33, 65),
      matmul(DType::f16, DType::f16, 70, 48, 131),
      {"matmul", DType::bf16, DType::bf16, {70, 48, 131}, {{"a", "col"}}},
      {"matmul", DType::f16, DType::f32, {5, 9, 40}, {{"b", "col"}, {"act", "silu"}, {"residual", "1"}}},
      {"matmul", DType::bf16, DType::bf16, {3, 7, 5, 9}, {{"act", "relu"}, {"bias", "1"}}},
      {"matmul", DType::bf16, DType::f32, {2, 17, 33, 65},
       {{"a", "col"}, {"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}}};
  for (const Problem& problem : problems) {
    tuner::Workbench bench(family_, problem, device_);
    bench.refresh_inputs(7);
    const testing::ReferenceAgreement agreement = testing::reference_agreement(bench, family_);
    EXPECT_GT(agreement.norm, 0) << problem.key() << ": inputs must not be zeros";
    EXPECT_LT(agreement.relative_error, 1e-5) << problem.key();
  }
}

// A spread of configs (tile shapes, warp layouts, stages, tile order) on aligned and unaligned
// odd shapes, every dtype combination: each must match the reference with no unwritten output.
TEST_F(GpuMatmul, SampledConfigsMatchReferenceOnOddShapes) {
  std::vector<Config> space = family_.enumerate();
  const std::vector<Problem> problems = {
      matmul(DType::bf16, DType::bf16, 1, 1, 1),      matmul(DType::bf16, DType::bf16, 17, 33, 65),
      matmul(DType::f16, DType::f16, 129, 72, 264),   matmul(DType::bf16, DType::f32, 300, 520, 136),
      matmul(DType::f16, DType::f32, 1000, 1000, 1000), matmul(DType::bf16, DType::bf16, 257, 1031, 517),
      // fp32 in, as tf32: row-major B transposed first (A gathered: K off 16 bytes; at
      // 17x33x65 every edge of the smallest tiles); both operands transposed, with the epilogue.
      matmul(DType::f32, DType::f32, 257, 1031, 517), matmul(DType::f32, DType::f32, 17, 33, 65),
      {"matmul", DType::f32, DType::bf16, {2, 300, 520, 136}, {{"a", "col"}, {"act", "relu"}, {"bias", "1"}}}};
  int checked = 0, wgmma_checked = 0;
  for (const Problem& problem : problems) {
    tuner::Workbench bench(family_, problem, device_);
    int taken = 0;
    // Every 7th valid config of each variant: a deterministic sample across the whole space.
    for (int variant : {0, 1})
      for (std::size_t i = checked % 7, of_variant = 0; i < space.size() && of_variant < 6;
           i += 7) {
        const Config& config = space[i];
        if (config.at("variant") != variant || family_.reject(config, problem, device_)) continue;
        RenderedSource source = render(family_, config, problem);
        CompiledKernel compiled = compile(source, device_.arch());
        driver::ReadyKernel ready =
            driver::load_kernel(compiled, bench.plan(config), source.describe());
        // The registers the tuner records (read from the cubin) are what the driver loaded.
        EXPECT_EQ(compiled.resources.registers, ready.first().registers()) << config.text();
        bench.refresh_inputs(1000 + checked);
        tuner::Verification result = bench.verify(ready, config);
        EXPECT_TRUE(result.passed) << problem.key() << " [" << config.text() << "]: " << result.detail;
        EXPECT_EQ(result.nonfinite, 0u);
        ++of_variant;
        ++taken;
        ++checked;
        if (variant == 1) ++wgmma_checked;
      }
    EXPECT_GT(taken, 0) << problem.key();
  }
  EXPECT_GE(checked, 20);
  // sm_90a: the wgmma template on every aligned shape of the list (on other GPUs it is pruned).
  if (device_.arch() == "sm_90a") {
    EXPECT_GE(wgmma_checked, 18);
  }
}

// Every layout of A and B, batches and the fused epilogue, on each template: a deterministic
// sample of each variant's valid configs per problem (odd and unaligned shapes included).
TEST_F(GpuMatmul, EveryLayoutBatchAndEpilogueMatchesTheReference) {
  const std::vector<ProblemOptions> layouts = {
      {}, {{"a", "col"}}, {{"b", "col"}}, {{"a", "col"}, {"b", "col"}}};
  std::vector<Problem> problems;
  for (const auto& layout : layouts) {
    auto with = [&](ProblemOptions options) {
      options.insert(layout.begin(), layout.end());
      return options;
    };
    problems.push_back({"matmul", DType::bf16, DType::bf16, {257, 1031, 517},
                        with({{"act", "gelu"}, {"bias", "1"}})});
    problems.push_back({"matmul", DType::f16, DType::f32, {3, 129, 72, 264},
                        with({{"act", "silu"}, {"residual", "1"}})});
    problems.push_back({"matmul", DType::bf16, DType::bf16, {2, 1000, 1000, 1000}, with({})});
    problems.push_back({"matmul", DType::bf16, DType::bf16, {7, 17, 33},
                        with({{"act", "relu"}, {"bias", "1"}, {"residual", "1"}})});
  }
  const std::vector<Config> space = family_.enumerate();
  int checked = 0;
  for (const Problem& problem : problems) {
    tuner::Workbench bench(family_, problem, device_);
    for (int variant : {0, 1}) {
      int taken = 0;
      for (std::size_t i = (checked * 13) % 11; i < space.size() && taken < 2; i += 11) {
        const Config& config = space[i];
        if (config.at("variant") != variant || family_.reject(config, problem, device_)) continue;
        RenderedSource source = render(family_, config, problem);
        driver::ReadyKernel ready = driver::load_kernel(compile(source, device_.arch()),
                                                        bench.plan(config), source.describe());
        bench.refresh_inputs(2000 + checked);
        tuner::Verification result = bench.verify(ready, config);
        EXPECT_TRUE(result.passed) << problem.key() << " [" << config.text() << "]: " << result.detail;
        EXPECT_EQ(result.nonfinite, 0u) << problem.key() << " [" << config.text() << "]";
        ++taken;
        ++checked;
      }
      if (variant == 0 || device_.arch() == "sm_90a") EXPECT_EQ(taken, 2) << problem.key();
    }
  }
}

// The wgmma template's launch plans beyond one kernel: K split into slices and reduced, and rows
// TMA cannot read copied into padded workspace rows first; each against the reference.
TEST_F(GpuMatmul, WgmmaSplitKAndPaddedPlansMatchTheReference) {
  if (device_.arch() != "sm_90a") GTEST_SKIP() << "the wgmma template needs sm_90a";
  struct Case {
    Problem problem;
    Config config;
  };
  const std::vector<Case> cases = {
      {matmul(DType::bf16, DType::bf16, 1000, 1000, 1000), testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 4)},
      {matmul(DType::bf16, DType::bf16, 16, 4096, 4096), testing::wgmma_config(64, 128, 6, 1, 1, 1, 1, 8)},
      {matmul(DType::f16, DType::f32, 512, 512, 16384), testing::wgmma_config(128, 64, 6, 2, 2, 1, 8, 8)},
      {matmul(DType::bf16, DType::f32, 129, 72, 264), testing::wgmma_config(64, 64, 4, 1, 1, 1, 1, 2)},
      {matmul(DType::f16, DType::f16, 257, 1031, 517), testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 4)},
      {matmul(DType::bf16, DType::bf16, 4093, 4093, 4093), testing::wgmma_config(128, 256, 4, 2, 2, 1)},
      {matmul(DType::bf16, DType::bf16, 1, 1, 1), testing::wgmma_config(128, 256, 4, 2, 2, 1)},
      {matmul(DType::f16, DType::f32, 17, 33, 65), testing::wgmma_config(64, 64, 4, 1, 1, 2)},
      // The epilogue after split-K's reduction, and padded copies of column-major operands.
      {{"matmul", DType::bf16, DType::bf16, {2, 1000, 1000, 1000}, {{"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}},
       testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 4)},
      {{"matmul", DType::f16, DType::f16, {257, 1031, 517}, {{"a", "col"}, {"b", "col"}}},
       testing::wgmma_config(128, 128, 4, 2, 1, 2, 8, 2)},
      // Split-K's slices walked slice by slice over every tile (slice_major): batches, ragged
      // tiles and the epilogue, a cluster sharing A, slices left empty (17 K blocks over 8).
      {{"matmul", DType::bf16, DType::bf16, {2, 1000, 1000, 1000}, {{"act", "gelu"}, {"bias", "1"}}},
       testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 4, 0, 0, 1)},
      {matmul(DType::f16, DType::f32, 257, 1031, 517), testing::wgmma_config(128, 64, 6, 1, 1, 2, 1, 4, 0, 0, 1)},
      {matmul(DType::bf16, DType::bf16, 300, 200, 1088), testing::wgmma_config(64, 64, 4, 1, 1, 1, 1, 8, 0, 0, 1)},
      {{"matmul", DType::bf16, DType::f32, {3, 4093, 1000, 999}, {{"a", "col"}, {"act", "silu"}}},
       testing::wgmma_config(128, 256, 4, 2, 2, 1)},
      // Operand maps without L2 promotion: a pair sharing A; one sharing B, K split in slice
      // order over ragged tiles; swap_ab with K split.
      {matmul(DType::bf16, DType::bf16, 1000, 1000, 1000),
       testing::wgmma_config(128, 64, 6, 1, 1, 2, 1, 1, 0, 0, 0, 0)},
      {matmul(DType::f16, DType::f32, 257, 1031, 517),
       testing::wgmma_config(128, 128, 4, 2, 2, 1, 8, 2, 0, 0, 1, 0)},
      {{"matmul", DType::bf16, DType::bf16, {16, 4096, 4096}, {{"b", "col"}}},
       testing::wgmma_config(64, 16, 8, 1, 1, 1, 1, 4, 0, 1, 0, 0)},
      // Swapped mid-width tiles (80-112 rows of M) with K split in the workspace, ragged along
      // M and N, in 2 x 2 and 4 x 1 clusters.
      {{"matmul", DType::bf16, DType::bf16, {201, 1031, 2600}, {{"b", "col"}}},
       testing::wgmma_config(128, 80, 6, 2, 2, 2, 8, 2, 0, 1, 0, 0)},
      {matmul(DType::f16, DType::f32, 90, 1000, 4000),
       testing::wgmma_config(128, 96, 6, 2, 4, 1, 8, 4, 0, 1, 1, 0)},
      // (v43) 104 rows in a cluster of 8, whose multicast boxes overlap, K split, ragged.
      {{"matmul", DType::bf16, DType::bf16, {201, 1031, 2600}, {{"b", "col"}, {"bias", "1"}}},
       testing::wgmma_config(128, 104, 5, 2, 4, 2, 8, 2, 0, 1, 0, 0)},
      // K slices summed in a cluster through distributed shared memory (split_cluster), with
      // ragged tiles, the epilogue, and slices left empty (K = 1088: 17 blocks, 3 per CTA of 8).
      {matmul(DType::bf16, DType::bf16, 512, 512, 16384), testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 8, 1)},
      {{"matmul", DType::bf16, DType::f32, {1000, 1000, 1000}, {{"act", "relu"}, {"bias", "1"}}},
       testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 2, 1)},
      {{"matmul", DType::f16, DType::f16, {257, 1031, 517}, {{"a", "col"}, {"b", "col"}, {"residual", "1"}}},
       testing::wgmma_config(64, 64, 4, 1, 1, 1, 1, 4, 1)},
      {matmul(DType::bf16, DType::bf16, 300, 200, 1088), testing::wgmma_config(64, 64, 4, 1, 1, 1, 1, 8, 1)},
      // K slices summed in the product's own grid (split_in_grid; each case runs twice, so the
      // arrival counters must start over): a pair sharing B; ragged tiles with N off 4 columns
      // (element loads); batches with the epilogue and slices left empty (17 K blocks in 8);
      // slice-major order with a pair sharing A and fp32 C; tf32 with A column-major.
      {matmul(DType::bf16, DType::bf16, 512, 512, 16384),
       testing::wgmma_config(128, 128, 6, 2, 2, 1, 8, 8, 0, 0, 0, 0, 0, 1)},
      {matmul(DType::f16, DType::f32, 257, 1031, 517), testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 4, 0, 0, 0, 256, 0, 1)},
      {{"matmul", DType::bf16, DType::bf16, {2, 300, 200, 1088}, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}},
       testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 8, 0, 0, 0, 256, 0, 1)},
      {{"matmul", DType::bf16, DType::f32, {1000, 1000, 1000}, {{"act", "relu"}, {"bias", "1"}}},
       testing::wgmma_config(128, 128, 4, 2, 1, 2, 8, 2, 0, 0, 1, 256, 0, 1)},
      {{"matmul", DType::f32, DType::f32, {300, 500, 4104}, {{"a", "col"}}},
       testing::tf32_config(128, 128, 4, 2, 1, 1, 8, 4, 0, 0, 0, 256, 0, 1)},
      // swap_ab (C^T = B^T A^T) for small M: alone, with split-K through the workspace, in a
      // cluster, B in either layout, unaligned rows, batches, narrow tiles cut by M.
      {{"matmul", DType::bf16, DType::bf16, {16, 4096, 4096}, {{"b", "col"}}},
       testing::wgmma_config(128, 16, 8, 2, 1, 1, 1, 4, 1, 1)},
      {{"matmul", DType::bf16, DType::bf16, {1, 4096, 4096}, {{"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}},
       testing::wgmma_config(64, 16, 6, 1, 1, 1, 1, 2, 0, 1)},
      {matmul(DType::f16, DType::f32, 7, 1031, 517), testing::wgmma_config(64, 16, 4, 1, 1, 1, 1, 1, 0, 1)},
      {{"matmul", DType::bf16, DType::bf16, {3, 33, 200, 136}, {{"b", "col"}, {"act", "silu"}}},
       testing::wgmma_config(128, 32, 4, 2, 1, 1, 8, 1, 0, 1)},
      {{"matmul", DType::bf16, DType::f32, {64, 1000, 1000}, {{"bias", "1"}}},
       testing::wgmma_config(192, 64, 4, 3, 1, 1, 8, 2, 1, 1)},
      // A pair along M sharing the weight (each CTA multicasts half of it): M past one tile of
      // the pair and within it, K whole and in slices, B either layout, rows off 16 bytes
      // (padded), batches with the epilogue.
      {{"matmul", DType::bf16, DType::bf16, {29, 1000, 1032}, {{"b", "col"}}},
       testing::wgmma_config(64, 16, 16, 1, 1, 2, 8, 1, 0, 1)},
      {{"matmul", DType::f16, DType::f32, {50, 700, 2056}, {{"act", "gelu"}, {"bias", "1"}}},
       testing::wgmma_config(64, 32, 16, 1, 1, 2, 8, 2, 0, 1)},
      {{"matmul", DType::bf16, DType::bf16, {2, 17, 333, 1001}, {{"b", "col"}, {"residual", "1"}}},
       testing::wgmma_config(64, 16, 13, 1, 1, 2, 8, 4, 0, 1)},
      // Clusters of 2 and 4 along the weight sharing the activations (each CTA multicasts a
      // quarter or half of their rows): weight rows past the last cluster's first CTA (1000 =
      // 3.9 clusters of 256), K whole and in slices, B either layout, rows off 16 bytes,
      // batches with the epilogue.
      {{"matmul", DType::bf16, DType::bf16, {29, 1000, 1032}, {{"b", "col"}}},
       testing::wgmma_config(64, 32, 16, 1, 4, 1, 8, 1, 0, 1)},
      {{"matmul", DType::f16, DType::f32, {2, 50, 700, 2056}, {{"act", "gelu"}, {"bias", "1"}}},
       testing::wgmma_config(64, 64, 13, 1, 4, 1, 8, 1, 0, 1)},
      {{"matmul", DType::bf16, DType::bf16, {61, 333, 1001}, {{"b", "col"}, {"residual", "1"}}},
       testing::wgmma_config(64, 64, 8, 1, 2, 1, 8, 2, 0, 1)},
      {{"matmul", DType::bf16, DType::bf16, {3, 17, 1500, 1032}, {{"b", "col"}, {"bias", "1"}}},
       testing::wgmma_config(64, 32, 8, 1, 4, 1, 8, 4, 0, 1)},
      {{"matmul", DType::bf16, DType::bf16, {45, 1000, 1001}, {{"b", "col"}}},
       testing::wgmma_config(64, 32, 16, 1, 2, 2, 8, 1, 0, 1)},
      {{"matmul", DType::f16, DType::f16, {2, 20, 700, 2056}, {{"residual", "1"}}},
       testing::wgmma_config(64, 16, 16, 1, 2, 2, 8, 2, 0, 1)},
      // The same clusters with fp32 inputs (tf32, K-major 32-element boxes).
      {testing::x_times_w_t({40, 3000, 1000}, DType::f32, DType::f32), testing::tf32_config(64, 64, 13, 1, 4, 1, 8, 1, 0, 1)},
      {testing::x_times_w_t({2, 20, 900, 1032}, DType::f32, DType::bf16, {{"act", "gelu"}, {"bias", "1"}}),
       testing::tf32_config(64, 32, 8, 1, 4, 1, 8, 2, 0, 1)},
      // A tail split (the tiles fill the SMs; K split in the last wave's only): 176 tiles, the
      // last 44 in 2 slices and in 3 (split_k 4 capped by the wave), unaligned rows padded; a
      // pair sharing A; batches with the epilogue, whole tiles through TMA stores.
      {matmul(DType::bf16, DType::bf16, 1000, 2750, 520), testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 2)},
      {matmul(DType::f16, DType::f32, 1000, 2750, 520), testing::wgmma_config(128, 128, 4, 2, 1, 1, 1, 4)},
      {matmul(DType::bf16, DType::bf16, 1000, 1300, 1000), testing::wgmma_config(128, 64, 6, 1, 1, 2, 1, 2, 0, 0, 0, 0)},
      {{"matmul", DType::bf16, DType::bf16, {3, 1000, 1000, 1000}, {{"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}},
       testing::wgmma_config(128, 128, 4, 2, 2, 1, 8, 2)},
      // 176- and 224-wide tiles (x @ W^T only): C's partial last box by plain stores (176, and
      // 224 of 16-bit C) or TMA (224 of fp32 C), ragged tiles, a pair sharing B, three
      // consumers with A column-major, a tail split, the epilogue and batches, padded rows.
      {{"matmul", DType::bf16, DType::bf16, {257, 1031, 517}, {{"b", "col"}}}, testing::wgmma_config(128, 176, 4, 2, 2, 1)},
      {{"matmul", DType::bf16, DType::f32, {2, 1000, 1000, 1000}, {{"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}},
       testing::wgmma_config(128, 176, 4, 2, 2, 1)},
      {{"matmul", DType::f16, DType::f32, {300, 2000, 264}, {{"b", "col"}}}, testing::wgmma_config(128, 224, 4, 2, 2, 1)},
      {{"matmul", DType::bf16, DType::bf16, {1000, 5000, 520}, {{"b", "col"}, {"bias", "1"}}},
       testing::wgmma_config(128, 224, 4, 2, 2, 1, 8, 2)},
      {{"matmul", DType::bf16, DType::bf16, {257, 1031, 517}, {{"a", "col"}, {"b", "col"}}}, testing::wgmma_config(192, 176, 3, 3, 1, 1)},
      {{"matmul", DType::f16, DType::f16, {300, 1000, 517}, {{"b", "col"}}}, testing::wgmma_config(64, 176, 6, 1, 1, 1, 1)},
      // Ping-pong (the two consumers take whole tiles in turn): more tiles than CTAs, K blocks
      // past the ring's depth (the turn barrier) and within it, a pair sharing B, the epilogue
      // and batches, A column-major, padded rows, a tail split and split-K through the
      // workspace (partials from whole tiles), 176 and 192 wide.
      {matmul(DType::bf16, DType::bf16, 1000, 2750, 1000), testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 1, 0, 0, 0, 256, 1)},
      {matmul(DType::f16, DType::f32, 1000, 2750, 136), testing::wgmma_config(128, 128, 6, 2, 2, 1, 8, 1, 0, 0, 0, 256, 1)},
      {{"matmul", DType::bf16, DType::bf16, {3, 1000, 1000, 1000}, {{"a", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}},
       testing::wgmma_config(64, 256, 4, 2, 2, 1, 8, 1, 0, 0, 0, 256, 1)},
      {matmul(DType::bf16, DType::bf16, 4093, 4093, 520), testing::wgmma_config(128, 128, 5, 2, 1, 2, 8, 1, 0, 0, 0, 0, 1)},
      {matmul(DType::bf16, DType::bf16, 1000, 2750, 520), testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 2, 0, 0, 0, 256, 1)},
      {matmul(DType::bf16, DType::f32, 1000, 1000, 1000), testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 4, 0, 0, 0, 256, 1)},
      {testing::x_times_w_t({1024, 14336, 1024}), testing::wgmma_config(128, 176, 5, 2, 2, 1, 8, 1, 0, 0, 0, 256, 1)},
      {testing::x_times_w_t({2, 1000, 1000, 520}, DType::f16, DType::f16, {{"bias", "1"}}),
       testing::wgmma_config(128, 192, 4, 2, 2, 1, 8, 1, 0, 0, 0, 256, 1)},
      // Narrow tiles over a narrow N, unswapped (B K-major): 16 and 32 columns, C's partial box
      // by 16-byte stores or (N 5: rows off 16 bytes) per element; K split through the
      // workspace, in the grid and in a cluster; two consumers; a pair sharing B's 8-row
      // slices; batches with the epilogue; fp32 C; A column-major; tf32 with B transposed.
      {testing::x_times_w_t({1024, 16, 4096}), testing::wgmma_config(64, 16, 16, 1, 1, 1, 1, 8)},
      {testing::x_times_w_t({2, 300, 12, 1000}, DType::bf16, DType::f32, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}),
       testing::wgmma_config(64, 16, 8, 1, 1, 1, 1)},
      {testing::x_times_w_t({777, 24, 3000}, DType::f16, DType::f16, {{"residual", "1"}}),
       testing::wgmma_config(64, 32, 10, 1, 1, 1, 1, 4)},
      {{"matmul", DType::bf16, DType::bf16, {129, 20, 520}, {{"a", "col"}, {"b", "col"}}},
       testing::wgmma_config(128, 32, 6, 2, 1, 1, 1, 2)},
      {testing::x_times_w_t({1000, 8, 1000}), testing::wgmma_config(64, 16, 8, 1, 2, 1, 1)},
      {testing::x_times_w_t({300, 5, 1000}), testing::wgmma_config(64, 16, 8, 1, 1, 1, 1, 2)},
      {testing::x_times_w_t({1024, 16, 4096}, DType::bf16, DType::bf16, {{"bias", "1"}}),
       testing::wgmma_config(64, 16, 8, 1, 1, 1, 1, 4, 0, 0, 0, 256, 0, 1)},
      {testing::x_times_w_t({1024, 30, 4096}, DType::f16, DType::f32), testing::wgmma_config(64, 32, 8, 1, 1, 1, 1, 4, 1)},
      {matmul(DType::f32, DType::f32, 1000, 16, 2000), testing::tf32_config(64, 16, 12, 1, 1, 1, 1, 4)},
      // fp32 in, as tf32: row-major B and column-major A transposed first, unaligned rows
      // padded, a cluster sharing operands, split K (workspace and cluster), swap_ab.
      {matmul(DType::f32, DType::f32, 1000, 1000, 1000), testing::tf32_config(128, 256, 4, 2, 2, 1)},
      {matmul(DType::f32, DType::f32, 257, 1031, 517), testing::tf32_config(128, 128, 4, 2, 1, 1, 8, 2)},
      {{"matmul", DType::f32, DType::f32, {2, 300, 200, 136}, {{"a", "col"}, {"act", "gelu"}, {"bias", "1"}}},
       testing::tf32_config(128, 256, 4, 2, 1, 2)},
      {{"matmul", DType::f32, DType::bf16, {16, 4096, 4096}, {{"b", "col"}}},
       testing::tf32_config(64, 16, 8, 1, 1, 1, 1, 4, 0, 1)},
      {matmul(DType::f32, DType::f32, 512, 512, 4096), testing::tf32_config(128, 128, 4, 2, 1, 1, 8, 4, 1)},
      {{"matmul", DType::f32, DType::f16, {7, 33, 65}, {{"a", "col"}, {"b", "col"}, {"residual", "1"}}},
       testing::tf32_config(64, 64, 4, 1, 1, 1, 1)},
      // fp32 with B row-major under swap_ab: B read in place as the kernel's A, through
      // registers, C^T out transposed (wide tiles) or through the exchange (narrow ones): a pair
      // sharing B, TMA and plain stores of fp32 and 16-bit C (N 1031 and 777: rows off 16
      // bytes, padded first), batches with the epilogue, A column-major (transposed first),
      // one consumer of two m64 tiles, split K.
      {matmul(DType::f32, DType::f32, 1000, 1000, 1000), testing::tf32_config(128, 256, 4, 2, 1, 2, 8, 1, 0, 1)},
      {{"matmul", DType::f32, DType::bf16, {2, 300, 200, 136}, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}},
       testing::tf32_config(128, 128, 4, 2, 1, 1, 8, 1, 0, 1)},
      {matmul(DType::f32, DType::f32, 257, 1031, 517), testing::tf32_config(128, 256, 4, 2, 1, 1, 8, 1, 0, 1)},
      {{"matmul", DType::f32, DType::f16, {1000, 777, 520}, {{"bias", "1"}}},
       testing::tf32_config(128, 192, 4, 2, 1, 2, 1, 1, 0, 1)},
      {{"matmul", DType::f32, DType::f32, {3, 100, 200, 300}, {{"a", "col"}, {"act", "silu"}}},
       testing::tf32_config(128, 128, 4, 2, 1, 2, 8, 1, 0, 1)},
      {matmul(DType::f32, DType::f32, 300, 500, 200), testing::tf32_config(128, 128, 4, 1, 1, 1, 8, 1, 0, 1)},
      {matmul(DType::f32, DType::f32, 16, 4096, 4096), testing::tf32_config(64, 16, 8, 1, 1, 1, 1, 4, 0, 1)},
      {matmul(DType::f32, DType::bf16, 7, 33, 65), testing::tf32_config(64, 16, 4, 1, 1, 1, 1, 1, 0, 1)},
      // ... and the swapped twins of the other regimes: wide tiles in K slices (the partials
      // transposed from registers; ragged M and N, slice-major order, a pair sharing B, slices
      // left empty), the narrow exchange tiles over more than 64 rows of M, three consumers.
      {matmul(DType::f32, DType::f32, 257, 1031, 4100), testing::tf32_config(128, 128, 4, 2, 1, 1, 8, 4, 0, 1)},
      {{"matmul", DType::f32, DType::bf16, {2, 300, 777, 2056}, {{"act", "relu"}, {"bias", "1"}}},
       testing::tf32_config(64, 128, 6, 1, 1, 1, 8, 2, 0, 1, 1)},
      {matmul(DType::f32, DType::f32, 1000, 1000, 1000), testing::tf32_config(64, 128, 6, 1, 2, 1, 1, 2, 0, 1)},
      {matmul(DType::f32, DType::f32, 300, 200, 1088), testing::tf32_config(128, 128, 4, 2, 1, 1, 8, 8, 0, 1)},
      {{"matmul", DType::f32, DType::f32, {128, 4096, 4096}, {{"residual", "1"}}},
       testing::tf32_config(64, 64, 13, 1, 1, 1, 1, 1, 0, 1)},
      {matmul(DType::f32, DType::f16, 200, 1031, 517), testing::tf32_config(64, 64, 8, 1, 1, 1, 1, 2, 0, 1)},
      {matmul(DType::f32, DType::f32, 1000, 1000, 600), testing::tf32_config(192, 192, 3, 3, 2, 1, 1, 1, 0, 1)},
      // A column-major fp32 A read in place (the kernel's MN-major A through registers): with
      // B column-major nothing is transposed; a pair sharing A's multicast slices, K slices,
      // batches with the epilogue, fp32 and 16-bit C.
      {{"matmul", DType::f32, DType::f32, {1000, 1000, 1000}, {{"a", "col"}, {"b", "col"}}},
       testing::tf32_config(128, 256, 4, 2, 1, 2)},
      {{"matmul", DType::f32, DType::bf16, {2, 257, 1031, 517}, {{"a", "col"}, {"b", "col"}, {"act", "silu"}, {"residual", "1"}}},
       testing::tf32_config(128, 128, 4, 2, 2, 1)},
      {{"matmul", DType::f32, DType::f32, {300, 500, 4104}, {{"a", "col"}}}, testing::tf32_config(64, 128, 6, 1, 1, 2, 8, 4)},
      // A row-major weight whose rows are off 16 bytes, read by swapped tiles in place in row
      // phases, A gathered to match: 8 phases (N odd), 4 (N 2 mod 8) and 2 (N 4 mod 8); in
      // clusters of 4 and 2 sharing A, one and two 64-row blocks of the weight, K whole and
      // in slices, the epilogue, fp32 C; K shorter than the phases (5 rows); A column-major.
      {matmul(DType::bf16, DType::bf16, 37, 1001, 2000), testing::wgmma_config(64, 32, 10, 1, 4, 1, 8, 1, 0, 1)},
      {{"matmul", DType::f16, DType::f32, {50, 2002, 1500}, {{"act", "gelu"}, {"bias", "1"}}},
       testing::wgmma_config(64, 64, 8, 1, 2, 1, 8, 2, 0, 1)},
      {{"matmul", DType::bf16, DType::bf16, {64, 1020, 3000}, {{"residual", "1"}}},
       testing::wgmma_config(64, 64, 8, 1, 4, 1, 8, 4, 0, 1)},
      {matmul(DType::bf16, DType::bf16, 40, 1001, 5), testing::wgmma_config(64, 16, 4, 1, 1, 1, 1, 1, 0, 1)},
      {{"matmul", DType::bf16, DType::bf16, {45, 999, 1200}, {{"a", "col"}}}, testing::wgmma_config(64, 32, 8, 1, 1, 1, 8, 2, 0, 1)},
      {{"matmul", DType::f16, DType::f16, {33, 3001, 777}, {{"a", "col"}, {"act", "silu"}, {"bias", "1"}, {"residual", "1"}}},
       testing::wgmma_config(128, 64, 4, 2, 2, 1, 8, 1, 0, 1)},
      {matmul(DType::bf16, DType::bf16, 17, 5003, 4100), testing::wgmma_config(128, 32, 6, 1, 1, 1, 8, 2, 0, 1)},
  };
  for (const Case& c : cases) ASSERT_NO_FATAL_FAILURE(verify_configs(c.problem, {c.config}, {11, 12}));
}

// 16-bit swapped tiles of 128 columns or more hold 129-256 rows of M whole, C^T out through the
// staging slots: 144, 160 and 176 columns end in a part round of C's rows (whose box's other
// rows fall past M), ragged N, the epilogue, fp32 C, a batch, K slices through the workspace.
TEST_F(GpuMatmul, WideSwappedSixteenBitTilesMatchTheReference) {
  if (device_.arch() != "sm_90a") GTEST_SKIP() << "the wgmma template needs sm_90a";
  using enum DType;
  auto swapped = [](int block_n, int cluster_m, int split_k = 1, int stages = 5) {
    return testing::wgmma_config(128, block_n, stages, 2, cluster_m, 1, 8, split_k, 0, 1, 0, 0);
  };
  struct Case {
    Problem problem;
    Config config;
  };
  const std::vector<Case> cases = {
      {{"matmul", bf16, bf16, {144, 3001, 1000}, {{"b", "col"}}}, swapped(144, 2)},
      {{"matmul", f16, f32, {150, 2000, 777}, {{"b", "col"}, {"bias", "1"}, {"residual", "1"}}},
       swapped(160, 1)},
      {{"matmul", bf16, bf16, {170, 1000, 2000}, {{"b", "col"}, {"act", "gelu"}}}, swapped(176, 2)},
      {{"matmul", bf16, bf16, {2, 139, 1500, 1024}, {{"b", "col"}, {"act", "silu"}}},
       swapped(144, 1)},
      {{"matmul", f16, f16, {129, 4096, 4000}, {{"b", "col"}, {"bias", "1"}}}, swapped(144, 1, 2)},
      {{"matmul", bf16, f32, {190, 2500, 640}, {{"b", "col"}}}, swapped(192, 2, 1, 4)},
  };
  for (const Case& c : cases) ASSERT_NO_FATAL_FAILURE(verify_configs(c.problem, {c.config}, {13, 14}));
}

// The untuned default is what every shape nobody tuned runs. Over the shapes a user could bring
// it must match the reference with nothing left unwritten: a shape for each branch of
// default_config (named below; on an H100 the test checks each was taken), then seeded random
// shapes, layouts, dtypes, batches and epilogues.
TEST_F(GpuMatmul, TheDefaultMatchesTheReferenceOnAnyShape) {
  using enum DType;
  auto problem = [](DType in, DType out, std::vector<std::int64_t> shape,
                    ProblemOptions options = {}) {
    return Problem{"matmul", in, out, std::move(shape), std::move(options)};
  };
  const ProblemOptions xwt = {{"b", "col"}};
  std::vector<Problem> problems = {
      // One or two rows against a column-major weight: gemv (K short for 16 warps: fewer).
      problem(bf16, bf16, {1, 4096, 4096}, xwt),
      problem(f16, bf16, {2, 2, 3000, 1000}, {{"b", "col"}, {"residual", "1"}}),
      // (v75) A matrix of fewer rows than two CTAs an SM times a few columns: gemv on C^T, a
      // row a CTA (16 warps for K's chunks) or two (K in four passes, an odd K; the epilogue;
      // a K off 16 bytes).
      problem(bf16, bf16, {64, 1, 4096}, xwt),
      problem(f16, f32, {173, 3, 1645}, {{"b", "col"}, {"bias", "1"}, {"act", "gelu"}}),
      problem(bf16, bf16, {484, 1, 430}, {{"b", "col"}, {"residual", "1"}}),
      // (v75) A few rows off 16 bytes at a short K, the gathering tiles under half the SMs.
      problem(f16, f16, {5, 1152, 114}, xwt), problem(bf16, f32, {10, 121, 231}, {{"bias", "1"}}),
      // Decode: a few rows against a column-major weight, K split where columns are few.
      problem(bf16, bf16, {1, 64, 4096}, xwt), problem(f16, f32, {5, 1000, 520}, xwt),
      problem(bf16, bf16, {16, 2000, 14336}, {{"b", "col"}, {"act", "silu"}}),
      // (v62-v63) 9-16 rows past two 8-warp CTAs an SM: 4-warp CTAs (a ragged N, the epilogue).
      problem(bf16, bf16, {13, 5001, 3000}, {{"b", "col"}, {"bias", "1"}, {"act", "gelu"}}),
      problem(f16, f32, {9, 8192, 1032}, {{"b", "col"}, {"residual", "1"}}),
      problem(bf16, bf16, {11, 9001, 2000}, {{"b", "col"}, {"act", "silu"}}),  // 64-byte pieces
      // (v73) Rows off 16 bytes read in place: an odd K realigned (9-16 rows, K split); 17-32
      // rows over a small weight (4-byte loads; an odd K in a batch, the epilogue).
      problem(bf16, bf16, {12, 3001, 4097}, {{"b", "col"}, {"bias", "1"}, {"act", "gelu"}}),
      problem(f16, f32, {22, 858, 908}, {{"b", "col"}, {"residual", "1"}}),
      problem(bf16, bf16, {2, 25, 600, 1089}, {{"b", "col"}, {"act", "silu"}}),
      // (v64) M in one 128-row tile over wide weights: pairs along N (the epilogue, fp32 C, a
      // batch); 65-112 rows in swapped tiles of M's width over more than a wave (N ragged).
      problem(f16, f32, {120, 17000, 1500}, {{"bias", "1"}, {"residual", "1"}}),
      problem(bf16, bf16, {4, 100, 8192, 1000}, {{"b", "col"}, {"act", "relu"}}),
      problem(bf16, bf16, {97, 20011, 1000}, {{"b", "col"}, {"act", "gelu"}}),
      problem(f16, f16, {70, 33000, 600}, {{"bias", "1"}}),
      // (v65) 17-64 rows whose K splits in two, rows on L2's lines: the two slices, not the
      // pair of narrow tiles (the epilogue in the reduce).
      problem(f16, f32, {24, 3968, 8192}, {{"b", "col"}, {"bias", "1"}, {"residual", "1"}}),
      problem(bf16, bf16, {40, 4096, 6144}, {{"b", "col"}, {"act", "gelu"}}),
      // (v62) Both operands off L2's lines: 128x192 pairs without L2 promotion.
      problem(bf16, bf16, {2010, 2920, 1440}, {{"act", "relu"}, {"residual", "1"}}),
      problem(f16, f32, {2000, 3000, 1000}, {{"b", "col"}, {"bias", "1"}}),
      // swap_ab: up to 64 rows of row-major A (a row-major weight whose rows are off 16
      // bytes read in row phases: 48x1031x2000, 33x7001x3000, and with A column-major).
      problem(bf16, bf16, {17, 4096, 4096}, xwt), problem(f16, f16, {48, 1031, 2000}),
      problem(bf16, bf16, {33, 7001, 3000}), problem(f16, bf16, {40, 3001, 2000}, {{"a", "col"}}),
      problem(bf16, f32, {64, 3000, 520}, {{"act", "gelu"}, {"bias", "1"}}),
      // swap_ab over more weight tiles than half the SMs (x @ W^T): clusters of 4 along the
      // weight sharing the activations; batches with the epilogue.
      problem(bf16, bf16, {40, 6000, 808}, xwt), problem(f32, bf16, {21, 9000, 520}, xwt),
      problem(f16, f32, {2, 29, 5000, 1000}, {{"b", "col"}, {"act", "silu"}, {"bias", "1"}, {"residual", "1"}}),
      // swap_ab past a wave of 64-row tiles: 128-row tiles on two consumers (x @ W^T in
      // clusters of 4; a weight read in row phases alone and in clusters of 4); a phased
      // weight split in two K slices where a pair would have read it padded.
      problem(bf16, bf16, {24, 9000, 520}, xwt), problem(f16, bf16, {20, 7501, 600}),
      problem(bf16, f32, {33, 9001, 700}, {{"act", "relu"}, {"bias", "1"}}),
      problem(bf16, bf16, {45, 3001, 7000}),
      // (v39) 128-row tiles below 17 rows (an aligned weight, one read in row phases); 65-128
      // rows swapped against a weight read in row phases (many tiles with the epilogue; few, K
      // split, A column-major); a column-major A of 17-64 rows transposed for swapped tiles.
      problem(bf16, bf16, {9, 17000, 520}), problem(f16, f16, {12, 15001, 600}),
      problem(bf16, f32, {100, 3001, 2000}, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}),
      problem(f16, bf16, {91, 1002, 5232}, {{"a", "col"}}),
      problem(bf16, bf16, {41, 3000, 2000}, {{"a", "col"}, {"b", "col"}}),
      problem(f16, f32, {60, 4096, 1500}, {{"a", "col"}, {"act", "silu"}}),
      // (v40) 192-row swapped tiles on three consumers where 128-row ones overflow a wave: a
      // weight read in row phases, x @ W^T with the epilogue.
      problem(bf16, bf16, {72, 8818, 1000}),
      problem(f16, f32, {20, 20480, 600}, {{"b", "col"}, {"bias", "1"}, {"act", "gelu"}}),
      // (v41) A row-major weight read in place, A's rows off L2's lines: clusters of 4 sharing
      // them (64-row tiles with the epilogue; 128-row ones on two consumers), pairs where four
      // take a wave more (125 tiles; x @ W^T's 128 tiles).
      problem(bf16, f32, {45, 4800, 1000}, {{"bias", "1"}, {"residual", "1"}}),
      problem(f16, bf16, {24, 12000, 520}), problem(bf16, bf16, {58, 8000, 1000}),
      problem(f16, f16, {55, 8152, 1000}, xwt),
      // (v41) Unswapped 128x64 tiles in pairs along N sharing A's rows off L2's lines, 128x128
      // ones along M sharing B's (A column-major, copied into padded rows).
      problem(bf16, bf16, {110, 4400, 1000}, {{"act", "gelu"}}),
      problem(f16, f32, {221, 4920, 1244}, {{"a", "col"}, {"bias", "1"}}),
      // (v42, as v43 picks them) Swapped tiles of 80-112 rows of M x 128 of N, K whole: 88
      // rows in 2 x 2 with a residual; 80 in 4 x 2 with an odd N, bias and SiLU; 88 in 4 x 2
      // for fp16; M in one tile, in fours along N: 96 rows into fp32, 80 with a bias.
      problem(f16, bf16, {170, 6376, 3120}, {{"b", "col"}, {"residual", "1"}}),
      problem(bf16, bf16, {201, 3001, 2600}, {{"b", "col"}, {"bias", "1"}, {"act", "silu"}}),
      problem(f16, f16, {700, 1304, 4000}),
      problem(bf16, f32, {90, 9000, 5000}),
      problem(f16, f16, {72, 8800, 2600}, {{"bias", "1"}}),
      problem(f32, f32, {343, 2048, 2096}, {{"b", "col"}, {"act", "relu"}}),
      // (v43) Clusters of 8 (4 along N x 2 along M) whose multicast boxes of M's rows overlap:
      // 104 rows with bias and GELU, 112 into fp32, 80 rows of x @ W^T, fp32 x @ W^T in 104;
      // M in one tile of 104 rows in fours along N, with a residual.
      problem(bf16, bf16, {618, 2544, 2416}, {{"bias", "1"}, {"act", "gelu"}}),
      problem(f16, f32, {1116, 1488, 2048}), problem(bf16, bf16, {477, 2416, 2296}, xwt),
      problem(f32, f32, {612, 2528, 2416}, xwt),
      problem(bf16, bf16, {100, 11704, 2600}, {{"residual", "1"}}),
      // (v40) A tiny product: the mma.sync template's 32x32 tiles (with the epilogue, A
      // column-major; 2^25 multiply-adds exactly; rows off 16 bytes; fp32 x @ W^T; a batch).
      problem(bf16, bf16, {64, 128, 64}),
      problem(f16, f32, {200, 160, 320}, {{"a", "col"}, {"bias", "1"}, {"act", "relu"}}),
      problem(bf16, bf16, {128, 512, 512}, {{"b", "col"}, {"residual", "1"}}),
      problem(f16, bf16, {250, 130, 90}), problem(f32, f32, {100, 300, 200}, xwt),
      problem(bf16, bf16, {6, 70, 96, 128}, {{"b", "col"}, {"bias", "1"}, {"residual", "1"}}),
      // Few large tiles: 128x64 tiles in one wave (1000^3), 64x64 ones for a skinny side of
      // 65-128 rows, else K slices through the workspace.
      problem(bf16, bf16, {1000, 1000, 1000}), problem(f16, bf16, {700, 900, 1200}),
      problem(bf16, bf16, {128, 4096, 4096}, xwt), problem(bf16, bf16, {100, 5000, 2000}),
      problem(bf16, bf16, {512, 512, 16384}), problem(f16, f32, {300, 300, 3000}),
      problem(bf16, bf16, {2, 256, 768, 8192}, {{"residual", "1"}}),
      // Large tiles fitted to the waves, with tail splits: 192x192 (3000^3), 192x128,
      // 128x256 (the base), K split in the last wave only.
      problem(bf16, bf16, {3000, 3000, 3000}), problem(bf16, bf16, {2048, 2176, 4096}),
      problem(f16, f16, {1536, 4096, 4096}, xwt), problem(bf16, bf16, {5000, 5000, 2048}),
      problem(bf16, bf16, {4096, 4096, 4096}, {{"a", "col"}}),
      // 128x176 tiles of x @ W^T: in ping-pong where a pair takes three or more, else shared.
      problem(bf16, bf16, {1024, 11008, 1000}, {{"b", "col"}, {"act", "silu"}}),
      problem(f16, f32, {1000, 5120, 520}, xwt),
      // Rows off 16 bytes (copied into padded workspace first), batches, tf32.
      problem(bf16, bf16, {2949, 2949, 2949}), problem(f16, f32, {3, 1000, 1001, 999}),
      problem(f32, f32, {1000, 1000, 1000}), problem(f32, bf16, {2, 3000, 3000, 600}, xwt),
      // fp32 times a row-major B: each regime's tile swapped (B read in place), K slices and a
      // skinny M of over 64 rows among them; a column-major fp32 A read in place.
      problem(f32, f32, {512, 512, 8192}), problem(f32, bf16, {100, 4096, 2000}),
      problem(f32, f32, {300, 5000, 3000}), problem(f32, f32, {3000, 3000, 1000}),
      problem(f32, f32, {2048, 2048, 1000}, {{"a", "col"}, {"b", "col"}}),
      // fp32 with A column-major, B row-major and M < N: A transposed, the mirror's tiles
      // swapped (B through registers), with clusters, batches, the epilogue and K slices.
      problem(f32, f32, {104, 4088, 1024}, {{"a", "col"}}),
      problem(f32, bf16, {2, 77, 1500, 2000}, {{"a", "col"}, {"bias", "1"}, {"act", "gelu"}}),
      problem(f32, f32, {150, 1003, 4000}, {{"a", "col"}, {"residual", "1"}}),
      // One or two rows times a row-major B off 16 bytes, K 352-512: gemv_kn, B in place.
      problem(bf16, bf16, {1, 6155, 456}, {{"a", "col"}}),
      problem(f16, f32, {2, 5837, 472}, {{"a", "col"}, {"bias", "1"}, {"act", "relu"}}),
      // Only A's rows off 16 bytes: B read where it lies. A column-major A of 8 rows,
      // transposed, for swap_ab. Few tiles and a short K: 128x64 or 64x64 tiles, K whole. A
      // few rows off 16 bytes with a short K: the mma.sync tiles gather them in place.
      problem(bf16, bf16, {100, 3000, 999}), problem(bf16, f32, {8, 2816, 2048}, {{"a", "col"}}),
      problem(f16, bf16, {698, 659, 1576}, {{"a", "col"}}), problem(bf16, bf16, {559, 272, 248}, xwt),
      problem(bf16, bf16, {16, 11516, 156}, xwt),
      // A few rows against a row-major B whose rows are off 16 bytes: read where it lies, in
      // K slices (N even: pairs of columns a load; A column-major).
      problem(bf16, bf16, {2, 6133, 1472}), problem(f16, f32, {7, 1766, 4000}, {{"a", "col"}}),
      problem(f32, f32, {1, 721, 15976}),
      // A narrow N: 64-row tiles as narrow as N where B is K-major (also fp32's and a long
      // product's row-major B, transposed), 64 columns under a short K; K split where the
      // tiles are few. The decode template's 8-column blocks for N <= 8.
      problem(bf16, bf16, {1024, 16, 4096}, xwt), problem(f16, f32, {3000, 20, 700}, xwt),
      problem(bf16, bf16, {2048, 8, 4096}), problem(f32, f32, {1000, 16, 2000}),
      problem(bf16, bf16, {1, 8, 4096}, xwt),
      // A row-major B of a narrow N transposed first: rows off 16 bytes (copied anyway), with
      // the epilogue; A column-major.
      problem(bf16, f32, {300, 5, 3000}, {{"bias", "1"}, {"act", "relu"}}),
      problem(bf16, bf16, {504, 4, 16128}, {{"a", "col"}}),
      // (v47) Many rows of A over a narrow N, the tile that streams the least of A a CTA:
      // swapped 64-row tiles of 80-96 rows of M in pairs (K in four slices with bias and GELU;
      // two slices into fp32; K whole of x @ W^T with a residual), 128x64 on one consumer; a
      // batch of x @ W^T with bias and SiLU.
      problem(bf16, bf16, {2527, 8, 3104}, {{"bias", "1"}, {"act", "gelu"}}),
      problem(f16, f32, {4939, 40, 4680}),
      problem(bf16, bf16, {11909, 23, 552}, {{"b", "col"}, {"residual", "1"}}),
      problem(bf16, bf16, {16311, 56, 1296}),
      problem(f16, bf16, {3, 3057, 29, 2024}, {{"b", "col"}, {"bias", "1"}, {"act", "silu"}}),
      // (v72) ... and over N of 129-192 from K 2048: N in one swapped 192-row tile on three
      // consumers, pairs along M (B's rows off 16 bytes, copied padded, with bias and GELU;
      // x @ W^T in four K slices with a residual into fp32; an N off 8 columns).
      problem(bf16, bf16, {4750, 150, 7728}, {{"bias", "1"}, {"act", "gelu"}}),
      problem(f16, f32, {2717, 160, 15176}, {{"b", "col"}, {"residual", "1"}}),
      problem(bf16, bf16, {2309, 157, 6256}, xwt),
      // N of 65-128 from K 4096 in one swapped 128-row tile on two consumers (x @ W^T with
      // bias and SiLU, four slices; a residual into fp32).
      problem(bf16, bf16, {3543, 108, 7256}, {{"b", "col"}, {"bias", "1"}, {"act", "silu"}}),
      problem(f16, f32, {5101, 114, 6280}, {{"residual", "1"}}),
      // (v48) Swapped mid widths on 256 rows of N where fitted tiles take one wave (4 x 2 with
      // bias and GELU; pairs along M into fp32; 2 x 2 with a residual) and on 64 rows over an
      // N of 65-256 (2 x 2 in two K slices with SiLU; 4 x 2; three N tiles in four slices
      // with a bias into fp32; a row-major B with a residual).
      problem(bf16, bf16, {556, 3928, 4320}, {{"bias", "1"}, {"act", "gelu"}}),
      problem(f16, f32, {714, 4074, 3144}, xwt),
      problem(bf16, bf16, {2111, 1368, 5224}, {{"b", "col"}, {"residual", "1"}}),
      problem(bf16, bf16, {1986, 117, 4336}, {{"b", "col"}, {"act", "silu"}}),
      problem(f16, f16, {2836, 213, 2440}, xwt),
      problem(bf16, f32, {849, 169, 4424}, {{"b", "col"}, {"bias", "1"}}),
      problem(f16, bf16, {5810, 104, 4176}, {{"residual", "1"}}),
      // (v49) The mid widths under a K of 2048: 128 rows of N in 4 x 2 with a bias; 64 in pairs
      // along M, four K slices, GELU.
      problem(bf16, bf16, {297, 3400, 1672}, {{"bias", "1"}}),
      problem(bf16, f32, {300, 177, 1768}, {{"b", "col"}, {"act", "gelu"}}),
      // (v50) 192x128 tiles in pairs along M sharing B: A column-major with a bias; K split in
      // the last wave with SiLU; an odd count of tile rows (the last pair's second CTA past M)
      // in two slices; fp16 into fp32 with a residual; fp32 with A column-major.
      problem(bf16, bf16, {1797, 1464, 3118}, {{"a", "col"}, {"bias", "1"}}),
      problem(bf16, bf16, {1411, 4608, 4462}, {{"a", "col"}, {"act", "silu"}}),
      problem(bf16, bf16, {5092, 896, 4092}, {{"a", "col"}, {"b", "col"}}),
      problem(f16, f32, {3289, 1704, 1144}, {{"residual", "1"}}),
      problem(f32, f32, {1040, 2662, 2888}, {{"a", "col"}}),
      // (v51, v53) fp32 with A column-major: the last wave's K split under 2048 (B row-major);
      // 128x256's swapped twin in place of ping-pong tiles (with a bias into bf16).
      problem(f32, f32, {3320, 3000, 960}, {{"a", "col"}}),
      problem(f32, f32, {2370, 4272, 88}, {{"a", "col"}}),
      problem(f32, bf16, {1659, 5658, 408}, {{"a", "col"}, {"bias", "1"}}),
      // (v55) 65-128 rows over a weight whose 64x64 tiles fill the SMs once, K from 6144: 64x128
      // pairs in two K slices, ping-pong: x @ W^T with a bias and GELU; K off 16 bytes (padded)
      // into fp32; A column-major with a residual.
      problem(bf16, bf16, {100, 3584, 11008}, {{"b", "col"}, {"bias", "1"}, {"act", "gelu"}}),
      problem(f16, f32, {122, 3896, 16933}),
      problem(bf16, bf16, {75, 4208, 10864}, {{"a", "col"}, {"residual", "1"}}),
      // (v56) 65-112 rows over a weight of 4161-8448 rows, K from 4096: swapped 64-row tiles of
      // N, one consumer, clusters of 4 along N (x @ W^T with SiLU into fp32; B row-major with
      // a residual).
      problem(bf16, f32, {97, 5000, 8192}, {{"b", "col"}, {"act", "silu"}}),
      problem(f16, f16, {73, 7624, 4640}, {{"residual", "1"}}),
      // (v57) 113-128 rows in 64x128 tiles, pairs along M (x @ W^T with a bias and GELU; B
      // row-major into fp32 with a residual); 113-224 rows in swapped 192-row tiles on three
      // consumers, pairs along M (SiLU; x @ W^T in two K slices with a residual).
      problem(bf16, bf16, {121, 6992, 12760}, {{"b", "col"}, {"bias", "1"}, {"act", "gelu"}}),
      problem(f16, f32, {127, 7112, 8056}, {{"residual", "1"}}),
      problem(bf16, bf16, {177, 9768, 17440}, {{"act", "silu"}}),
      problem(f16, f16, {117, 5256, 13432}, {{"b", "col"}, {"residual", "1"}}),
      // (v58) fp32 x @ W^T (tf32) in v56's fours and in v57's 192-row boxes (with a bias, into
      // bf16).
      problem(f32, f32, {100, 6771, 7280}, {{"b", "col"}}),
      problem(f32, bf16, {189, 9896, 8656}, {{"b", "col"}, {"bias", "1"}}),
      // (v59) 129-224 rows in two swapped tiles in pairs over 64-row boxes of the weight: x @
      // W^T with ReLU, f16 B row-major into fp32 with a residual, fp32 x @ W^T.
      problem(bf16, bf16, {181, 4161, 7168}, {{"b", "col"}, {"act", "relu"}}),
      problem(f16, f32, {131, 4208, 3064}, {{"residual", "1"}}),
      problem(f32, f32, {170, 3176, 2664}, {{"b", "col"}}),
      // (v60) 225-256 rows in 128x64 ping-pong tiles in pairs along M: x @ W^T with a bias and
      // GELU; f16 B row-major into fp32 with a residual; A column-major (copied) with SiLU.
      problem(bf16, bf16, {256, 3496, 3840}, {{"b", "col"}, {"bias", "1"}, {"act", "gelu"}}),
      problem(f16, f32, {241, 3200, 3904}, {{"residual", "1"}}),
      problem(bf16, bf16, {235, 4012, 4736}, {{"a", "col"}, {"b", "col"}, {"act", "silu"}}),
      // (v61) Two swapped tiles in a pair along M over a weight larger than L2, 8 stages: B
      // row-major with GELU; f16 x @ W^T with a bias into fp32.
      problem(bf16, bf16, {177, 8192, 5120}, {{"act", "gelu"}}),
      problem(f16, f32, {147, 8192, 5120}, {{"b", "col"}, {"bias", "1"}}),
      // A matrix times a few columns, on C^T = B^T A^T: gemv reads A's rows (N <= 4 of x @
      // W^T, a row-major B of one column: a strided vector), gemv_kn a column-major A as its
      // row-major weight (N <= 2, K split where the columns are few). One column-major row of
      // A (a vector) against x @ W^T's weight.
      problem(bf16, bf16, {4096, 1, 4096}, xwt), problem(bf16, bf16, {3000, 3, 500}, xwt),
      problem(f16, f32, {2, 3000, 1, 777}, {{"bias", "1"}, {"act", "gelu"}, {"residual", "1"}}),
      problem(bf16, bf16, {5914, 1, 72}, {{"a", "col"}}),
      problem(f16, bf16, {1828, 2, 2208}, {{"a", "col"}, {"b", "col"}, {"residual", "1"}}),
      problem(bf16, bf16, {1, 3000, 1000}, {{"a", "col"}, {"b", "col"}}),
      // fp32's gemv (multiplied in fp32): two rows of x @ W^T, K off 16 bytes; a matrix times
      // a vector into bf16; one column-major row of A.
      problem(f32, f32, {2, 1781, 9323}, xwt), problem(f32, bf16, {4096, 1, 4096}, {}),
      problem(f32, f32, {1, 3000, 1001}, {{"a", "col"}, {"b", "col"}}),
  };
  const std::size_t named = problems.size();
  // Log-uniform dimensions (M and N up to 6000, K up to 8192), up to 2^35 multiply-adds so
  // the reference stays quick.
  std::mt19937 rng(20261126);
  auto log_uniform = [&](double top) {
    return static_cast<std::int64_t>(
        std::llround(std::exp(std::uniform_real_distribution<double>(0, std::log(top))(rng))));
  };
  auto pick = [&](auto values) { return values[rng() % values.size()]; };
  while (problems.size() < named + 28) {
    const std::int64_t batch = rng() % 4 == 0 ? 2 + rng() % 2 : 1;
    const std::int64_t m = log_uniform(6000), n = log_uniform(6000), k = log_uniform(8192);
    if (batch * m * n * k > (1ll << 35)) continue;
    const DType in = pick(std::array{bf16, bf16, f16, f32});
    ProblemOptions options;
    if (rng() % 2) options["a"] = "col";
    if (rng() % 2) options["b"] = "col";
    const std::string act = pick(std::array<std::string, 4>{"none", "relu", "gelu", "silu"});
    if (act != "none") options["act"] = act;
    if (rng() % 3 == 0) options["bias"] = "1";
    if (rng() % 3 == 0) options["residual"] = "1";
    std::vector<std::int64_t> shape = {m, n, k};
    if (batch > 1) shape.insert(shape.begin(), batch);
    problems.push_back(problem(in, pick(std::array{in, f32, bf16}), shape, options));
  }

  // Each distinct kernel compiled once, in parallel.
  std::vector<Config> configs;
  std::vector<RenderedSource> sources;
  std::map<std::string, CompiledKernel> compiled;
  tuner::CompilePool pool(0);
  std::size_t submitted = 0;
  for (const Problem& p : problems) {
    configs.push_back(family_.default_config(p, device_));
    ASSERT_EQ(family_.reject(configs.back(), p, device_), std::nullopt)
        << p.key() << " [" << configs.back().text() << "]";
    sources.push_back(render(family_, configs.back(), p));
    if (compiled.emplace(sources.back().hash, CompiledKernel{}).second)
      pool.submit({submitted++, sources.back(), device_.arch()});
  }
  while (pool.pending() > 0) {
    tuner::CompileOutcome outcome = pool.next();
    ASSERT_TRUE(outcome.kernel) << outcome.error;
    compiled[outcome.kernel->source_hash] = std::move(*outcome.kernel);
  }

  std::set<std::string> branches;
  for (std::size_t i = 0; i < problems.size(); ++i) {
    const Problem& p = problems[i];
    const Config& config = configs[i];
    tuner::Workbench bench(family_, p, device_);
    driver::ReadyKernel ready = driver::load_kernel(compiled.at(sources[i].hash),
                                                    bench.plan(config), sources[i].describe());
    bench.refresh_inputs(3000 + i);
    tuner::Verification result = bench.verify(ready, config);
    EXPECT_TRUE(result.passed) << p.key() << " [" << config.text() << "]: " << result.detail;
    EXPECT_EQ(result.nonfinite, 0u) << p.key();
    if (i >= named) continue;
    const int variant = config.at("variant");
    const std::int64_t m = p.shape[p.shape.size() - 3];
    if (variant == 2) branches.insert("decode");
    if (variant == 3) branches.insert(m > 4 ? "gemv on C^T" : "gemv");
    if (variant == 0) branches.insert("gathered");
    if (variant == 4) branches.insert(m > 32 ? "gemv_kn on C^T" : "gemv_kn");
    if (variant != 1) continue;
    const int bm = config.at("block_m"), bn = config.at("block_n");
    if (config.at("swap_ab") && bm == 128 && config.at("consumers") == 2) branches.insert("swap_ab 128 rows");
    if (config.at("swap_ab")) branches.insert(config.at("cluster_m") == 4 ? "swap_ab sharing A" : "swap_ab");
    else if (bn < 64) branches.insert("narrow N");
    else if (bm == 128 && bn == 64) branches.insert("128x64 one wave");
    else if (bm == 64 && bn == 64) branches.insert("64x64 skinny");
    else if (bm == 192 || bn == 192) branches.insert("192-wide, fitted to the waves");
    if (!config.at("swap_ab") && config.at("split_k") > 1) branches.insert("K slices");
  }
  if (device_.arch() == "sm_90a")
    EXPECT_EQ(branches, (std::set<std::string>{"gemv", "decode", "swap_ab", "128x64 one wave",
                                               "64x64 skinny", "192-wide, fitted to the waves",
                                               "K slices", "gathered", "gemv_kn", "narrow N",
                                               "gemv on C^T", "gemv_kn on C^T",
                                               "swap_ab sharing A", "swap_ab 128 rows"}));
}

// The decode template (variant 2, any sm_80+ GPU): 1 to 32 rows of A against a column-major
// weight; every column-block width, K split among the warps and over CTAs, N and K off the
// blocks, chunks and spans (K = 40: fewer chunks than warps, under one span; K = 8),
// weight rows read 64 bytes a load or in whole lines (row_bytes 128-512), batches, every output
// type and the fused epilogue. Each twice: a stale split-K workspace must not leak into C. Odd N with K a
// multiple of 8 is an aligned problem (x @ W^T): the other templates run these shapes too.
TEST_F(GpuMatmul, DecodeKernelMatchesTheReference) {
  using testing::decode_config;
  using testing::x_times_w_t;
  struct Case {
    Problem problem;
    std::vector<Config> configs;
  };
  const std::vector<Case> cases = {
      {x_times_w_t({1, 4096, 4096}, DType::bf16, DType::bf16),
       {decode_config(32, 8, 2), decode_config(8, 16, 1), decode_config(64, 4, 1),
        decode_config(16, 8, 1, 1, 128), decode_config(8, 8, 1, 1, 512)}},
      {x_times_w_t({16, 1000, 1032}, DType::f16, DType::f32),
       {decode_config(16, 8, 2), decode_config(32, 4, 2, 2), decode_config(8, 4, 1, 4),
        decode_config(16, 8, 1, 1, 128), decode_config(16, 4, 1, 2, 256)}},
      {x_times_w_t({17, 100, 264}, DType::bf16, DType::bf16, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}),
       {decode_config(16, 4, 1), decode_config(8, 4, 2, 2), testing::tile_config(64, 64, 32, 2, 2, 3),
        decode_config(16, 4, 1, 1, 128), decode_config(8, 4, 1, 1, 128)}},
      {x_times_w_t({32, 7, 40}, DType::bf16, DType::f16),
       {decode_config(8, 4, 1), decode_config(8, 4, 2), decode_config(8, 4, 1, 1, 128)}},
      {x_times_w_t({3, 5, 33, 264}, DType::f16, DType::bf16, {{"act", "silu"}, {"residual", "1"}}),
       {decode_config(16, 4, 1), decode_config(8, 4, 1, 2), testing::tile_config(64, 64, 32, 2, 2, 3),
        decode_config(16, 4, 2, 1, 128)}},
      {x_times_w_t({1, 1, 8}, DType::bf16, DType::f32), {decode_config(8, 4, 1), decode_config(8, 4, 1, 1, 512)}},
      {x_times_w_t({8, 4096, 14336}, DType::bf16, DType::bf16, {{"act", "relu"}}),
       {decode_config(16, 8, 2), decode_config(16, 8, 1, 1, 128), decode_config(16, 8, 1, 1, 256)}},
      // Rows off 16 bytes, read in place (realigned from 16-byte loads); K off the 32-k chunks,
      // split over CTAs, N odd, the epilogue, batches.
      {x_times_w_t({16, 1000, 1036}, DType::bf16, DType::bf16), {decode_config(16, 8, 2), decode_config(32, 4, 1, 2)}},
      {x_times_w_t({7, 1001, 1030}, DType::f16, DType::f32, {{"act", "gelu"}, {"bias", "1"}}),
       {decode_config(16, 8, 2), decode_config(32, 4, 2, 2)}},
      {x_times_w_t({2, 13, 77, 1001}, DType::bf16, DType::bf16, {{"residual", "1"}}),
       {decode_config(16, 4, 2), decode_config(8, 8, 1)}},
      // 17-32 rows of A (two m16 tiles) over rows of odd K, the epilogue, K in two slices; 16
      // rows, K one past the chunks, in four.
      {x_times_w_t({31, 515, 2053}, DType::bf16, DType::bf16, {{"act", "relu"}, {"bias", "1"}}),
       {decode_config(16, 8, 2), decode_config(32, 4, 1, 2)}},
      {x_times_w_t({16, 300, 4097}, DType::f16, DType::f16), {decode_config(16, 8, 2, 4)}},
  };
  // Odd output widths with aligned K (N = 100, 33, 7, 1) run on every template: the wgmma
  // template's swap_ab and plain tiles too where this is Hopper.
  const bool hopper = device_.arch() == "sm_90a";
  int checked = 0;
  for (Case c : cases) {
    if (hopper && c.problem.shape[c.problem.shape.size() - 3] <= 16 && c.problem.shape.back() >= 64)
      c.configs.push_back(testing::wgmma_config(64, 16, 4, 1, 1, 1, 1, 1, 0, 1));
    if (hopper && c.problem.shape.back() >= 64) c.configs.push_back(testing::wgmma_config(128, 64, 4, 2, 1, 1));
    ASSERT_NO_FATAL_FAILURE(verify_configs(c.problem, c.configs, {31, 32}));
    checked += static_cast<int>(c.configs.size());
  }
  EXPECT_EQ(checked, hopper ? 54 : 36);
}

// The gemv template (variant 3, any sm_80+ GPU): 1 to 4 rows of A against a column-major
// weight, one to eight weight rows a CTA, K split among 2 to 16 warps, N and K off the CTAs'
// chunks (K = 40 and 264: threads with no chunk), rows off 16 bytes read in place (K = 4100,
// 1030, 1001), batches, every output type and the fused epilogue; and on C^T = B^T A^T, 1 to 4
// columns of B against A's rows, B's one row-major column and A's one column-major row read
// as strided vectors; 16-bit and fp32 inputs.
TEST_F(GpuMatmul, GemvKernelMatchesTheReference) {
  using testing::gemv_config;
  using testing::x_times_w_t;
  struct Case {
    Problem problem;
    std::vector<Config> configs;
  };
  const std::vector<Case> cases = {
      {x_times_w_t({1, 4096, 4096}, DType::bf16, DType::bf16),
       {gemv_config(1, 8, 1), gemv_config(2, 4, 2), gemv_config(1, 16, 2)}},
      {x_times_w_t({3, 1001, 1032}, DType::f16, DType::f32), {gemv_config(2, 8, 1), gemv_config(1, 2, 2)}},
      {x_times_w_t({4, 100, 264}, DType::bf16, DType::bf16, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}),
       {gemv_config(1, 2, 1), gemv_config(2, 2, 2)}},
      {x_times_w_t({2, 7, 40}, DType::bf16, DType::f16), {gemv_config(1, 2, 1), gemv_config(2, 2, 2)}},
      {x_times_w_t({3, 1, 33, 264}, DType::f16, DType::bf16, {{"act", "silu"}, {"residual", "1"}}),
       {gemv_config(1, 2, 1), gemv_config(2, 2, 1)}},
      {x_times_w_t({1, 1, 8}, DType::bf16, DType::f32), {gemv_config(1, 2, 1)}},
      // Short rows, fewer chunks than threads, 2 to 8 of them a CTA (the default's at K <= 512):
      // 16-byte loads and element by element, the epilogue, C^T for a matrix times a vector.
      {x_times_w_t({2, 1003, 136}, DType::bf16, DType::bf16), {gemv_config(8, 2, 1), gemv_config(4, 2, 2)}},
      {x_times_w_t({1, 999, 64}, DType::f16, DType::f32, {{"act", "gelu"}, {"bias", "1"}}),
       {gemv_config(8, 2, 1), gemv_config(2, 2, 1)}},
      {x_times_w_t({2, 517, 48}, DType::bf16, DType::bf16, {{"residual", "1"}}), {gemv_config(4, 2, 2)}},
      {x_times_w_t({1, 777, 21}, DType::bf16, DType::bf16), {gemv_config(4, 2, 1)}},
      {matmul(DType::bf16, DType::bf16, 4174, 1, 96), {gemv_config(8, 2, 1)}},
      {x_times_w_t({1, 4096, 14336}, DType::bf16, DType::bf16, {{"act", "relu"}}), {gemv_config(1, 8, 2)}},
      // Rows off 16 bytes, read in place: loads of 8, 4 and 2 bytes; N odd.
      {x_times_w_t({1, 4096, 4100}, DType::bf16, DType::bf16), {gemv_config(2, 16, 1), gemv_config(2, 8, 4)}},
      {x_times_w_t({2, 1001, 1030}, DType::f16, DType::f32, {{"act", "relu"}, {"bias", "1"}}),
       {gemv_config(2, 4, 2), gemv_config(1, 2, 4)}},
      {x_times_w_t({3, 2, 77, 1001}, DType::bf16, DType::bf16, {{"residual", "1"}}),
       {gemv_config(2, 4, 2), gemv_config(1, 8, 1)}},
      // Past four rows of A, C^T = B^T A^T: A's rows are the weight, C is written down its
      // columns. x @ W^T of N = 1 to 4 (16- and 4-byte loads), with the epilogue and batches.
      {x_times_w_t({4174, 1, 696}), {gemv_config(2, 2, 2), gemv_config(1, 4, 1), gemv_config(8, 2, 1)}},
      {x_times_w_t({1001, 3, 1032}, DType::f16, DType::f32, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}),
       {gemv_config(2, 4, 2), gemv_config(1, 8, 1)}},
      {x_times_w_t({2, 300, 4, 520}, DType::bf16, DType::bf16, {{"residual", "1"}}),
       {gemv_config(2, 4, 1), gemv_config(4, 2, 2)}},
      // A row-major B of one column (a matrix times a vector), read element by element; K off
      // 16 bytes; batches, the epilogue.
      {matmul(DType::bf16, DType::bf16, 4174, 1, 694), {gemv_config(2, 8, 2), gemv_config(8, 4, 1)}},
      {{"matmul", DType::f16, DType::f16, {3, 517, 1, 1000}, {{"act", "relu"}, {"bias", "1"}, {"residual", "1"}}},
       {gemv_config(2, 8, 1)}},
      // One column-major row of A (a vector) against x @ W^T's weight.
      {{"matmul", DType::bf16, DType::bf16, {1, 700, 1000}, {{"a", "col"}, {"b", "col"}}},
       {gemv_config(2, 8, 2), gemv_config(1, 4, 1)}},
      // fp32 inputs, multiplied in fp32: 16-, 8- and 4-byte loads, the epilogue, batches, every
      // output type; C^T of x @ W^T and of a matrix times a vector; a column-major row of A.
      {x_times_w_t({1, 4096, 4096}, DType::f32, DType::f32),
       {gemv_config(2, 16, 1), gemv_config(4, 4, 1)}},
      {x_times_w_t({3, 1001, 1032}, DType::f32, DType::bf16,
                   {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}),
       {gemv_config(2, 4, 2)}},
      {x_times_w_t({2, 1001, 1030}, DType::f32, DType::f32), {gemv_config(2, 8, 4)}},
      {x_times_w_t({2, 3, 777, 1001}, DType::f32, DType::f16), {gemv_config(1, 8, 1)}},
      {matmul(DType::f32, DType::f32, 4174, 1, 694), {gemv_config(4, 4, 1)}},
      {x_times_w_t({4174, 3, 696}, DType::f32, DType::f32, {{"act", "relu"}, {"bias", "1"}}),
       {gemv_config(2, 4, 2)}},
      {{"matmul", DType::f32, DType::f32, {1, 700, 1000}, {{"a", "col"}, {"b", "col"}}},
       {gemv_config(2, 8, 2)}},
  };
  int checked = 0;
  for (const Case& c : cases) {
    ASSERT_NO_FATAL_FAILURE(verify_configs(c.problem, c.configs, {41, 42}));
    checked += static_cast<int>(c.configs.size());
  }
  EXPECT_EQ(checked, 46);
}

// The row-major-B gemv template (variant 4, any sm_80+ GPU): 1 to 32 rows of A (either layout)
// against B read where it lies, odd N (one element a load) and N on 2, 8 and 16 bytes, K off
// the 64-k chunks and split over 2 to 8 CTAs, batches, every output type and the epilogue;
// 16-bit and fp32 inputs; and on C^T = B^T A^T, 1 to 32 columns of B (either layout) against a
// column-major A as the weight.
TEST_F(GpuMatmul, GemvKnKernelMatchesTheReference) {
  using testing::gemv_kn_config;
  struct Case {
    Problem problem;
    std::vector<Config> configs;
  };
  const std::vector<Case> cases = {
      {matmul(DType::bf16, DType::bf16, 1, 8490, 1000),
       {gemv_kn_config(2, 8, 8), gemv_kn_config(2, 8, 8, 4), gemv_kn_config(1, 4, 16, 2)}},
      {{"matmul", DType::f16, DType::f32, {26, 1506, 1100}, {{"a", "col"}}},
       {gemv_kn_config(2, 8, 8, 8), gemv_kn_config(1, 8, 4)}},
      {{"matmul", DType::bf16, DType::bf16, {7, 1001, 300}, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}},
       {gemv_kn_config(1, 4, 8), gemv_kn_config(1, 8, 8, 2)}},
      {{"matmul", DType::f16, DType::bf16, {3, 5, 520, 130}, {{"act", "silu"}, {"residual", "1"}}},
       {gemv_kn_config(8, 4, 4), gemv_kn_config(4, 4, 4, 2)}},
      {{"matmul", DType::bf16, DType::f16, {32, 37, 65}, {{"a", "col"}}}, {gemv_kn_config(1, 4, 16)}},
      {matmul(DType::bf16, DType::f32, 1, 1, 8), {gemv_kn_config(1, 4, 4)}},
      {{"matmul", DType::bf16, DType::bf16, {16, 4093, 4093}, {{"act", "relu"}}}, {gemv_kn_config(1, 8, 8, 8)}},
      // An odd N in 16-byte vectors: the aligned pieces around each lane's 8 columns realigned
      // over the warp (16-bit: 8 columns, fp32: 4), a column-major A, K split, the epilogue.
      {matmul(DType::bf16, DType::bf16, 8, 4093, 4093), {gemv_kn_config(8, 8, 8, 8), gemv_kn_config(8, 4, 4)}},
      {{"matmul", DType::f16, DType::f32, {2, 7, 1001, 1030}, {{"a", "col"}, {"act", "gelu"}, {"bias", "1"}}},
       {gemv_kn_config(8, 8, 8, 2)}},
      {matmul(DType::f32, DType::f32, 2, 721, 1999), {gemv_kn_config(4, 8, 8, 4)}},
      // fp32 in (multiplied in fp32): N odd, on 8 bytes and on 16, fp32 and 16-bit C.
      {matmul(DType::f32, DType::f32, 1, 721, 1999), {gemv_kn_config(1, 8, 8, 4)}},
      {{"matmul", DType::f32, DType::bf16, {2, 7, 1002, 1030}, {{"a", "col"}, {"act", "gelu"}, {"bias", "1"}}},
       {gemv_kn_config(2, 8, 8, 2)}},
      {matmul(DType::f32, DType::f32, 8, 4100, 600), {gemv_kn_config(4, 4, 8)}},
      // Past 32 rows of A, C^T = B^T A^T: a column-major A is the row-major weight, B's N = 1
      // to 32 columns the rows (B either layout), C written down its columns, K split.
      {{"matmul", DType::bf16, DType::bf16, {5914, 1, 72}, {{"a", "col"}}},
       {gemv_kn_config(2, 8, 8), gemv_kn_config(1, 4, 4)}},
      {{"matmul", DType::bf16, DType::bf16, {1828, 5, 2208}, {{"a", "col"}, {"b", "col"}}},
       {gemv_kn_config(4, 8, 8, 4), gemv_kn_config(2, 4, 16)}},
      {{"matmul", DType::f16, DType::f32, {2, 300, 32, 130}, {{"a", "col"}, {"act", "silu"}, {"bias", "1"}, {"residual", "1"}}},
       {gemv_kn_config(1, 4, 4), gemv_kn_config(2, 8, 4, 2)}},
      {{"matmul", DType::f32, DType::f32, {777, 3, 1500}, {{"a", "col"}}}, {gemv_kn_config(1, 8, 8, 4)}},
  };
  int checked = 0;
  for (const Case& c : cases) {
    ASSERT_NO_FATAL_FAILURE(verify_configs(c.problem, c.configs, {51, 52}));
    checked += static_cast<int>(c.configs.size());
  }
  EXPECT_EQ(checked, 26);
}

// A batch of stored matrices inside a larger buffer, as a view of a bigger tensor gives them:
// rows `ld` elements apart, batches `stride` apart (0: one matrix for every batch), from
// `offset` elements in. Everything else holds all-ones bits (a NaN in bf16, f16 and f32), so a
// write outside the view shows.
struct StridedMatrices {
  std::size_t element;
  long long batches, rows, cols, ld, stride, offset;
  std::vector<unsigned char> image;
  driver::DeviceBuffer buffer;
  StridedMatrices(DType dtype, long long b, long long r, long long c, long long row_stride,
                  long long batch_stride, long long start)
      : element(dtype_size(dtype)), batches(b), rows(r), cols(c), ld(row_stride),
        stride(batch_stride), offset(start),
        image(static_cast<std::size_t>(start + (b - 1) * batch_stride + r * row_stride) * element,
              0xff),
        buffer(image.size(), "strided matrices") {}
  std::uint64_t address() const { return buffer.address() + offset * element; }
  std::size_t at(long long b, long long r, long long c) const {
    return static_cast<std::size_t>(offset + b * stride + r * ld + c) * element;
  }
  // Packed matrices (raw elements, one batch after another; one for a shared view) into the
  // view, uploaded with the poison around them.
  void upload(const std::vector<unsigned char>& packed) {
    for (long long b = 0; b < (stride == 0 ? 1 : batches); ++b)
      for (long long r = 0; r < rows; ++r)
        std::memcpy(&image[at(b, r, 0)], &packed[((b * rows + r) * cols) * element],
                    static_cast<std::size_t>(cols) * element);
    TILESMITH_CU(driver::api().cuMemcpyHtoD(buffer.address(), image.data(), image.size()),
                 "uploading strided matrices");
  }
  // The view's elements as doubles, packed, and how many elements outside it changed.
  std::vector<double> download(DType dtype, std::size_t& changed_outside) {
    // (An f16 output read as bf16 bits would compare garbage: the cases use bf16 or f32.)
    if (dtype == DType::f16)
      throw std::logic_error("StridedMatrices reads bf16 and f32 outputs only");
    std::vector<unsigned char> now(image.size());
    TILESMITH_CU(driver::api().cuMemcpyDtoH(now.data(), buffer.address(), now.size()),
                 "downloading strided matrices");
    std::vector<double> packed;
    std::vector<bool> inside(image.size() / element, false);
    for (long long b = 0; b < batches; ++b)
      for (long long r = 0; r < rows; ++r)
        for (long long c = 0; c < cols; ++c) {
          const std::size_t byte = at(b, r, c);
          inside[byte / element] = true;
          std::uint32_t bits = 0;
          std::memcpy(&bits, &now[byte], element);
          float value;
          if (dtype == DType::bf16) bits <<= 16;
          std::memcpy(&value, &bits, 4);
          packed.push_back(value);
        }
    changed_outside = 0;
    for (std::size_t i = 0; i < inside.size(); ++i)
      if (!inside[i] && std::memcmp(&now[i * element], &image[i * element], element))
        ++changed_outside;
    return packed;
  }
};

// Views of larger tensors: rows and batches strided (by multiples of 8 elements, and by odd
// counts, which run as the problem with aligned=0), one matrix shared by every batch, mixed
// input and output types, on each template and each wgmma store path (TMA, plain stores, the
// exchange buffer, split-K's reduction); against the CPU reference, gaps untouched.
TEST_F(GpuMatmul, StridedAndSharedBatchesMatchTheReference) {
  struct Strides {
    long long lda, stride_a, ldb, stride_b, ldr, stride_r, ldc, stride_c;
  };
  struct Case {
    Problem problem;  // packed; the call's problem adds aligned=0 where the strides need it
    Strides strides;
    bool needs_unaligned;
    std::vector<Config> configs;
    long long b_offset = 16;  // elements before B's view in its buffer
  };
  const Config mma = testing::tile_config(64, 64, 32, 2, 2, 3);
  const bool hopper = device_.arch() == "sm_90a";
  auto wgmma = [&](std::vector<Config> configs) {
    configs.insert(configs.begin(), mma);
    if (!hopper) configs.resize(1);
    return configs;
  };
  auto with_decode = [](std::vector<Config> configs) {
    configs.push_back(testing::decode_config(16, 4, 1));
    configs.push_back(testing::decode_config(8, 4, 2, 2));
    return configs;
  };
  const std::vector<Case> cases = {
      {{"matmul", DType::bf16, DType::f32, {3, 70, 48, 264}, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}},
       {272, 70 * 272 + 64, 56, 0, 64, 70 * 64, 56, 70 * 56 + 8},
       false,
       wgmma({testing::wgmma_config(64, 64, 4, 1, 1, 1, 1), testing::wgmma_config(64, 64, 4, 1, 1, 1, 1, 2)})},
      {{"matmul", DType::bf16, DType::f32, {3, 70, 48, 264}, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}},
       {269, 70 * 269 + 3, 51, 0, 50, 70 * 50 + 1, 49, 70 * 49 + 5},
       true,
       wgmma({testing::wgmma_config(64, 64, 4, 1, 1, 1, 1), testing::wgmma_config(64, 64, 4, 1, 1, 1, 1, 2),
              testing::wgmma_config(64, 64, 4, 1, 1, 1, 1, 2, 1)})},
      // Decode with a weight shared by the batches (swap_ab; the decode template, which runs
      // everywhere), f16 in and bf16 out.
      {{"matmul", DType::f16, DType::bf16, {2, 16, 520, 264}, {{"b", "col"}}},
       {272, 16 * 272 + 32, 272, 0, 0, 0, 528, 16 * 528 + 8},
       false,
       with_decode(wgmma({testing::wgmma_config(64, 16, 4, 1, 1, 1, 1, 1, 0, 1),
                          testing::wgmma_config(64, 16, 4, 1, 1, 1, 1, 2, 1, 1)}))},
      {{"matmul", DType::bf16, DType::bf16, {2, 104, 200, 264}, {{"a", "col"}}},
       {112, 264 * 112 + 8, 200, 264 * 200, 0, 0, 203, 104 * 203 + 1},
       true,
       wgmma({testing::wgmma_config(64, 64, 4, 1, 1, 1, 1, 2, 1), testing::wgmma_config(128, 64, 4, 2, 1, 1, 8, 2),
              testing::wgmma_config(64, 64, 4, 1, 1, 2)})},
      // x @ W^T into C rows 16-byte aligned but N odd, in 176-wide tiles (cooperative and
      // ping-pong; 16-bit and fp32 C): C must not go through TMA, which writes whole 16-byte
      // chunks and so wrote columns 301-303, the padding (seen on the H100); plain stores.
      {{"matmul", DType::bf16, DType::bf16, {2, 100, 301, 264}, {{"b", "col"}}},
       {264, 100 * 264 + 8, 264, 0, 0, 0, 312, 100 * 312 + 8},
       false,
       wgmma({testing::wgmma_config(128, 176, 4, 2, 1, 1),
              testing::wgmma_config(128, 176, 5, 2, 1, 1, 8, 1, 0, 0, 0, 256, 1)})},
      {{"matmul", DType::bf16, DType::f32, {2, 100, 301, 264}, {{"b", "col"}}},
       {264, 100 * 264 + 8, 264, 0, 0, 0, 304, 100 * 304 + 4},
       false,
       wgmma({testing::wgmma_config(128, 176, 4, 2, 1, 1),
              testing::wgmma_config(128, 176, 5, 2, 1, 1, 8, 1, 0, 0, 0, 256, 1)})},
      // K = 261 inside rows padded to 264 (aligned: TMA reads them): the last 16-byte chunk of
      // a row holds 3 elements of poison past K, which must not reach the sums (x @ W^T, and
      // a row-major B whose rows past K hold no poison). C's rows end on 16 bytes.
      {{"matmul", DType::bf16, DType::bf16, {2, 100, 296, 261}, {{"b", "col"}}},
       {264, 100 * 264 + 8, 264, 0, 0, 0, 304, 100 * 304 + 8},
       false,
       wgmma({testing::wgmma_config(128, 128, 4, 2, 1, 1), testing::wgmma_config(128, 176, 4, 2, 1, 1)})},
      {{"matmul", DType::bf16, DType::bf16, {2, 100, 296, 261}, {}},
       {264, 100 * 264 + 8, 296, 0, 0, 0, 304, 100 * 304 + 8},
       false,
       wgmma({testing::wgmma_config(128, 128, 4, 2, 1, 1)})},
      // A few rows against a row-major B whose rows and batches are off 16 bytes: the gemv_kn
      // template's wide loads give way to one element at a time at run time.
      {{"matmul", DType::bf16, DType::bf16, {2, 7, 520, 264}, {{"act", "relu"}}},
       {272, 7 * 272 + 8, 523, 264 * 523 + 3, 0, 0, 528, 7 * 528 + 8},
       true,
       {mma, testing::gemv_kn_config(8, 4, 8), testing::gemv_kn_config(2, 4, 4, 2)}},
      // Decode rows against a weight off 16 bytes: 8-byte loads where the strides allow them
      // (the second case), else one element at a time (A's odd rows in the first).
      {{"matmul", DType::bf16, DType::bf16, {2, 12, 300, 520}, {{"b", "col"}}},
       {523, 12 * 523 + 1, 522, 300 * 522 + 2, 0, 0, 304, 12 * 304 + 8},
       true,
       {testing::decode_config(16, 8, 2), testing::decode_config(8, 4, 1, 2)}},
      {{"matmul", DType::bf16, DType::bf16, {2, 12, 300, 520}, {{"b", "col"}}},
       {524, 12 * 524 + 4, 524, 300 * 524 + 4, 0, 0, 304, 12 * 304 + 8},
       true,
       {testing::decode_config(16, 8, 2), testing::decode_config(8, 4, 1, 2)}},
      // Two rows against a weight whose rows and batches are off 16 bytes (K on 16: the
      // problem's loads are 8 bytes): the gemv template reads them in place, 8 bytes a load
      // where the strides allow it (the second case), else one element at a time (A's odd
      // rows in the first).
      {{"matmul", DType::bf16, DType::bf16, {2, 2, 300, 520}, {{"b", "col"}}},
       {523, 2 * 523 + 1, 522, 300 * 522 + 2, 0, 0, 304, 2 * 304 + 8},
       true,
       {testing::gemv_config(2, 4, 2), testing::gemv_config(1, 4, 4)}},
      {{"matmul", DType::bf16, DType::bf16, {2, 2, 300, 520}, {{"b", "col"}}},
       {524, 2 * 524 + 4, 524, 300 * 524 + 4, 0, 0, 304, 2 * 304 + 8},
       true,
       {testing::gemv_config(2, 4, 4), testing::gemv_config(1, 8, 1)}},
      // A matrix times a strided vector (a column of a row-major B three columns wide), C a
      // column two wide, A's rows odd: the gemv template on C^T = B^T A^T, one element at a
      // time. And the gemv_kn template's: a column-major A, B and C two and three columns in
      // wider rows.
      {{"matmul", DType::bf16, DType::bf16, {2, 300, 1, 520}, {{"act", "relu"}, {"residual", "1"}}},
       {523, 520 * 523 + 1, 3, 520 * 3 + 1, 5, 300 * 5 + 2, 2, 300 * 2 + 1},
       false,
       {testing::gemv_config(2, 4, 2), testing::gemv_config(1, 4, 4)}},
      {{"matmul", DType::bf16, DType::bf16, {2, 300, 2, 264}, {{"a", "col"}}},
       {301, 264 * 301 + 3, 5, 264 * 5 + 1, 0, 0, 3, 300 * 3 + 1},
       false,
       {testing::gemv_kn_config(4, 4, 8), testing::gemv_kn_config(2, 4, 4, 2)}},
      // Operands stored as k rows of one element, packed: the call runs as their other
      // layout's single row (A row-major, read by TMA and gemv_kn; B column-major, the
      // weight of C^T = B^T A^T's gemv), the one-element row strides given ignored.
      {{"matmul", DType::bf16, DType::bf16, {2, 1, 304, 520}, {{"a", "col"}, {"bias", "1"}}},
       {1, 528, 304, 0, 0, 0, 304, 312},
       false,
       wgmma({testing::wgmma_config(64, 16, 8, 1, 1, 1, 1, 1, 0, 1),
              testing::gemv_kn_config(8, 4, 8)})},
      {{"matmul", DType::f16, DType::f32, {2, 300, 1, 520}, {{"act", "relu"}}},
       {528, 300 * 528 + 8, 1, 520, 0, 0, 1, 304},
       false,
       {mma, testing::gemv_config(2, 4, 2), testing::gemv_config(1, 4, 4)}},
      // Decode over rows of an odd K an odd number of elements apart (each row's 16-byte
      // pieces realigned by its own shift), B's view starting 6 bytes past 16; batches, SiLU,
      // K split.
      {{"matmul", DType::bf16, DType::bf16, {2, 24, 200, 1031}, {{"b", "col"}, {"act", "silu"}}},
       {1033, 24 * 1033 + 3, 1033, 200 * 1033 + 5, 0, 0, 203, 24 * 203 + 1},
       false,  // an odd K puts the rows off 16 bytes already
       with_decode({mma}),
       3},
      // A row-major weight off 16 bytes read in row phases, its view starting off 16 bytes too
      // (each phase's map starts on the boundary before its first row): rows of 305 elements
      // (8 phases), of 302 (4; N 300 alone would give 2), and of 304 (one phase, shifted);
      // K whole and in slices, A strided and column-major; the same problems' unswapped
      // tiles pad the weight.
      {{"matmul", DType::bf16, DType::bf16, {1, 40, 301, 520}, {{"act", "relu"}}},
       {523, 0, 305, 0, 0, 0, 304, 0},
       false,
       wgmma({testing::wgmma_config(64, 32, 8, 1, 2, 1, 8, 1, 0, 1), testing::wgmma_config(128, 64, 4, 2, 1, 1, 8, 2)}),
       3},
      {{"matmul", DType::f16, DType::f32, {1, 60, 300, 264}, {{"a", "col"}}},
       {63, 0, 302, 0, 0, 0, 300, 0},
       false,
       wgmma({testing::wgmma_config(64, 64, 8, 1, 1, 1, 8, 2, 0, 1), testing::wgmma_config(64, 64, 8, 1, 1, 1, 8, 2)}),
       5},
      {{"matmul", DType::bf16, DType::bf16, {1, 60, 300, 264}, {}},
       {264, 0, 304, 0, 0, 0, 304, 0},
       false,
       wgmma({testing::wgmma_config(64, 64, 8, 1, 1, 1, 8, 1, 0, 1)}),
       7},
      // tf32: a shared row-major B transposed once, A's strided batches padded.
      {{"matmul", DType::f32, DType::f32, {3, 64, 96, 200}, {}},
       {203, 64 * 203 + 7, 100, 0, 0, 0, 96, 64 * 96},
       true,
       hopper ? std::vector<Config>{testing::tf32_config(64, 64, 4, 1, 1, 1, 1), testing::tf32_config(128, 64, 4, 2, 1, 1, 8, 2),
                                    testing::tile_config(64, 64, 32, 2, 2, 3)}
              : std::vector<Config>{testing::tile_config(64, 64, 32, 2, 2, 3)}},
  };
  for (const Case& c : cases) {
    const Strides& t = c.strides;
    CallScalars scalars;
    std::size_t next = 0;
    auto view = [&](long long ld, long long stride) {
      scalars.row_strides[next] = ld;
      scalars.batch_strides[next++] = stride;
    };
    const Problem packed = c.problem;
    const bool has_bias = packed.option("bias") == "1", has_residual = packed.option("residual") == "1";
    view(t.lda, t.stride_a);
    view(t.ldb, t.stride_b);
    if (has_bias) next++;
    if (has_residual) view(t.ldr, t.stride_r);
    view(t.ldc, t.stride_c);
    const Problem problem = family_.problem_for_call(packed, scalars);
    EXPECT_EQ(problem.option("aligned") == "0", c.needs_unaligned) << problem.key();
    tuner::Workbench bench(family_, problem, device_);
    bench.refresh_inputs(21);
    const std::vector<TensorSpec> specs = family_.tensors(problem);
    const long long batch = problem.shape[0], m = problem.shape[1], n = problem.shape[2],
                    k = problem.shape[3];
    // The views in the layouts the call gave (problem_for_call may fold a one-row operand's),
    // filled from the bench's random inputs; a shared view from batch 0.
    const bool a_col = packed.option("a") == "col", b_col = packed.option("b") == "col";
    const DType in = problem.dtype, out = problem.out_dtype;
    std::vector<StridedMatrices> views;
    views.reserve(4);
    views.emplace_back(in, batch, a_col ? k : m, a_col ? m : k, t.lda, t.stride_a, 8);
    views.emplace_back(in, batch, b_col ? n : k, b_col ? k : n, t.ldb, t.stride_b, c.b_offset);
    if (has_residual) views.emplace_back(out, batch, m, n, t.ldr, t.stride_r, 1);
    views.emplace_back(out, batch, m, n, t.ldc, t.stride_c, 24);
    std::vector<std::vector<double>> inputs;
    std::vector<std::uint64_t> addresses;
    std::size_t v = 0;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].is_output) break;
      std::vector<double> values = bench.download(i);
      if (specs[i].name == "bias") {
        inputs.push_back(values);
        addresses.push_back(bench.tensor_addresses()[i]);
        continue;
      }
      StridedMatrices& x = views[v++];
      std::vector<unsigned char> raw(specs[i].elements * x.element);
      TILESMITH_CU(driver::api().cuMemcpyDtoH(raw.data(), bench.tensor_addresses()[i], raw.size()),
                   "reading an input");
      x.upload(raw);
      if (x.stride == 0)  // every batch reads batch 0's matrix
        for (long long b = 1; b < batch; ++b)
          std::copy_n(values.begin(), x.rows * x.cols, values.begin() + b * x.rows * x.cols);
      inputs.push_back(values);
      addresses.push_back(x.address());
    }
    addresses.push_back(views.back().address());
    const std::vector<double> expected = family_.reference_cpu(problem, inputs);
    for (const Config& config : c.configs) {
      ASSERT_EQ(family_.reject(config, problem, device_), std::nullopt)
          << problem.key() << " " << config.text();
      RenderedSource source = render(family_, config, problem);
      driver::DeviceBuffer workspace(std::max<std::size_t>(family_.workspace_bytes(config, problem, device_), 256),
                                     "the workspace");
      const LaunchPlan plan =
          family_.plan(config, problem, device_, addresses, workspace.address(), scalars);
      driver::ReadyKernel ready =
          driver::load_kernel(compile(source, device_.arch()), plan, source.describe());
      StridedMatrices& c_view = views.back();
      c_view.upload(std::vector<unsigned char>(static_cast<std::size_t>(batch * m * n) * c_view.element, 0xff));
      ready.run(plan, nullptr);
      TILESMITH_CU(driver::api().cuCtxSynchronize(), "running a strided matmul");
      std::size_t changed = 0;
      const std::vector<double> got = c_view.download(out, changed);
      ASSERT_EQ(got.size(), expected.size());
      double error = 0, norm = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        error += (got[i] - expected[i]) * (got[i] - expected[i]);
        norm += expected[i] * expected[i];
      }
      const double relative = std::sqrt(error / norm);
      EXPECT_LE(relative, family_.tolerance(problem, specs.back()))
          << problem.key() << " [" << config.text() << "]";
      EXPECT_EQ(changed, 0u) << problem.key() << " [" << config.text() << "]: writes outside C's view";
    }
  }
}

// A kernel that writes the wrong values must fail verification: the check can fail.
TEST_F(GpuMatmul, VerificationCatchesAWrongKernel) {
  Problem problem = matmul(DType::bf16, DType::bf16, 64, 64, 64);
  Problem other = matmul(DType::bf16, DType::bf16, 64, 64, 32);  // computes only half of K
  tuner::Workbench bench(family_, problem, device_);
  Config config = family_.default_config(problem, device_);
  RenderedSource source = render(family_, config, problem);
  CompiledKernel compiled = compile(source, device_.arch());
  driver::ReadyKernel ready = driver::load_kernel(compiled, bench.plan(config), source.describe());
  bench.refresh_inputs(3);
  // Launch with the smaller K baked into the args: a wrong answer that still writes everything.
  std::vector<std::uint64_t> addresses = bench.tensor_addresses();
  ready.run(family_.plan(config, other, device_, addresses, 0, {}), nullptr);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the wrong kernel");
  tuner::Verification result = bench.check_output();
  EXPECT_FALSE(result.passed);
  EXPECT_GT(result.rel_error, 0.1);

  // Only the first 32 rows written: the poisoned rest must show as non-finite.
  Problem half_rows = matmul(DType::bf16, DType::bf16, 32, 64, 64);
  bench.refresh_inputs(4);
  ready.run(family_.plan(config, half_rows, device_, addresses, 0, {}), nullptr);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the half-writing kernel");
  result = bench.check_output();
  EXPECT_FALSE(result.passed);
  EXPECT_EQ(result.nonfinite, 32u * 64u);
}

}  // namespace
}  // namespace tilesmith
