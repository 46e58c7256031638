// GPU: the matmul template against its reference, and the reference against a CPU loop.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "generator/compiled_kernel.hpp"
#include "support/matmul_configs.hpp"
#include "support/test_support.hpp"
#include "templates/registry.hpp"
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
  const Family& family_ = find_family("matmul");
  DeviceTarget device_;
};

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
    std::vector<float> gpu = bench.reference_output();
    std::vector<std::vector<double>> inputs;
    const std::vector<TensorSpec> tensors = family_.tensors(problem);
    for (std::size_t i = 0; i < tensors.size(); ++i)
      if (!tensors[i].is_output) inputs.push_back(bench.download(i));
    std::vector<double> cpu = family_.reference_cpu(problem, inputs);
    ASSERT_EQ(gpu.size(), cpu.size());
    double error = 0, norm = 0;
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      error += (gpu[i] - cpu[i]) * (gpu[i] - cpu[i]);
      norm += cpu[i] * cpu[i];
    }
    EXPECT_GT(norm, 0) << problem.key() << ": inputs must not be zeros";
    EXPECT_LT(std::sqrt(error / norm), 1e-5) << problem.key();
  }
}

// A spread of configs (tile shapes, warp layouts, stages, tile order) on aligned and unaligned
// odd shapes, every dtype combination: each must match the reference with no unwritten output.
TEST_F(GpuMatmul, SampledConfigsMatchReferenceOnOddShapes) {
  std::vector<Config> space = family_.enumerate();
  const std::vector<Problem> problems = {
      matmul(DType::bf16, DType::bf16, 1, 1, 1),      matmul(DType::bf16, DType::bf16, 17, 33, 65),
      matmul(DType::f16, DType::f16, 129, 72, 264),   matmul(DType::bf16, DType::f32, 300, 520, 136),
      matmul(DType::f16, DType::f32, 1000, 1000, 1000), matmul(DType::bf16, DType::bf16, 257, 1031, 517)};
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
  const std::vector<std::map<std::string, std::string>> layouts = {
      {}, {{"a", "col"}}, {{"b", "col"}}, {{"a", "col"}, {"b", "col"}}};
  std::vector<Problem> problems;
  for (const auto& layout : layouts) {
    auto with = [&](std::map<std::string, std::string> options) {
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
      {{"matmul", DType::bf16, DType::f32, {3, 4093, 1000, 999}, {{"a", "col"}, {"act", "silu"}}},
       testing::wgmma_config(128, 256, 4, 2, 2, 1)},
      // K slices summed in a cluster through distributed shared memory (split_cluster), with
      // ragged tiles, the epilogue, and slices left empty (K = 1088: 17 blocks, 3 per CTA of 8).
      {matmul(DType::bf16, DType::bf16, 512, 512, 16384), testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 8, 1)},
      {{"matmul", DType::bf16, DType::f32, {1000, 1000, 1000}, {{"act", "relu"}, {"bias", "1"}}},
       testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 2, 1)},
      {{"matmul", DType::f16, DType::f16, {257, 1031, 517}, {{"a", "col"}, {"b", "col"}, {"residual", "1"}}},
       testing::wgmma_config(64, 64, 4, 1, 1, 1, 1, 4, 1)},
      {matmul(DType::bf16, DType::bf16, 300, 200, 1088), testing::wgmma_config(64, 64, 4, 1, 1, 1, 1, 8, 1)},
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
  };
  for (const Case& c : cases) {
    ASSERT_EQ(family_.reject(c.config, c.problem, device_), std::nullopt)
        << c.problem.key() << " " << c.config.text();
    tuner::Workbench bench(family_, c.problem, device_);
    RenderedSource source = render(family_, c.config, c.problem);
    driver::ReadyKernel ready =
        driver::load_kernel(compile(source, device_.arch()), bench.plan(c.config), source.describe());
    for (std::uint64_t seed : {11, 12}) {  // twice: a stale workspace must not leak into C
      bench.refresh_inputs(seed);
      tuner::Verification result = bench.verify(ready, c.config);
      EXPECT_TRUE(result.passed) << c.problem.key() << " [" << c.config.text() << "]: " << result.detail;
      EXPECT_EQ(result.nonfinite, 0u);
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
