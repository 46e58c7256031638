// multi_sum's descriptor without a GPU: the key's form, the tuned table the family writes, the
// three-launch plan and its workspace, the CPU reference, compiling without spills.
#include <gtest/gtest.h>

#include <cstring>

#include "generator/compiled_kernel.hpp"
#include "templates/reductions/multi_sum_params.h"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

Problem sums(std::int64_t count, std::int64_t length, DType in = DType::f32, DType out = DType::f32,
             ProblemOptions options = {}) {
  return Problem{"multi_sum", in, out, {count, length}, std::move(options)};
}

TEST(MultiSumFamily, ValidatesCountAndAPowerOfTwoLength) {
  const Family& family = find_family("multi_sum");
  EXPECT_NO_THROW(family.validate(sums(1, 1)));
  EXPECT_NO_THROW(family.validate(sums(2000, 262144, DType::bf16, DType::f32, {{"mean", "1"}})));
  for (const Problem& bad : {sums(0, 4), sums(4, 3), sums(4, 0), Problem{"multi_sum", DType::f32, DType::f32, {4}}})
    EXPECT_THROW(family.validate(bad), InvalidArgument) << bad.key();
  EXPECT_THROW(family.validate(sums(4, 4, DType::f32, DType::f32, {{"mean", "yes"}})), InvalidArgument);
}

TEST(MultiSumFamily, TheTunedTableSpreadsLengthsAndAlignsEveryTensor) {
  const Family& family = find_family("multi_sum");
  const Problem problem = sums(500, 1024, DType::bf16, DType::f32);
  const std::vector<TensorSpec> specs = family.tensors(problem);
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_TRUE(specs[0].family_filled);
  EXPECT_TRUE(specs[1].is_output);
  EXPECT_EQ(specs[1].elements, 500u);
  std::vector<std::byte> table(specs[0].elements * 4);
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0x1000000};
  family.fill_input(problem, 0, addresses, table);
  long long total = 0, shortest = 1 << 30, longest = 0;
  std::uint64_t previous_end = addresses[2];
  for (int i = 0; i < 500; ++i) {
    MultiSumEntry entry;
    std::memcpy(&entry, table.data() + i * sizeof entry, sizeof entry);
    const auto start = reinterpret_cast<std::uint64_t>(entry.data);
    EXPECT_EQ(start % 16, 0u);
    EXPECT_GE(start, previous_end);  // tensors do not overlap, and fit in the data buffer
    previous_end = start + static_cast<std::uint64_t>(entry.length) * 2;
    total += entry.length;
    shortest = std::min(shortest, entry.length);
    longest = std::max(longest, entry.length);
  }
  EXPECT_LE(previous_end, addresses[2] + specs[2].elements * 2);
  EXPECT_GE(shortest, 1);
  EXPECT_LE(longest, 2047);
  EXPECT_NEAR(static_cast<double>(total) / 500, 1024, 100);  // the bucket is the mean length
  EXPECT_THROW(family.fill_input(problem, 1, addresses, table), Error);
}

TEST(MultiSumFamily, ThreeLaunchesAndAWorkspaceForAnyTableOfTheBucket) {
  const Family& family = find_family("multi_sum");
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem problem = sums(2000, 131072, DType::f32, DType::f32, {{"mean", "1"}});
  const Config config{{{"threads", 256}, {"chunk", 8192}, {"vector_bytes", 16}, {"ctas_per_sm", 4}}};
  ASSERT_FALSE(family.reject(config, problem, hopper));
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0};
  const LaunchPlan plan = family.plan(config, problem, hopper, addresses, 0x900000, {});
  ASSERT_EQ(plan.step_count, 3);
  MultiSumParams p;
  std::memcpy(&p, plan.steps[1].args.bytes.data(), sizeof p);
  EXPECT_EQ(p.count, 2000);
  // Twice the bucket's bytes in chunks, plus one partial chunk per tensor.
  EXPECT_EQ(p.capacity, 2000 + 2000ll * 2 * 131072 / 8192);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.chunk_start), 0x900000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.partials), 0x900000u + 2001 * 8);
  EXPECT_EQ(family.workspace_bytes(config, problem, hopper), 2001 * 8 + static_cast<std::size_t>(p.capacity) * 4);
  EXPECT_EQ(plan.steps[1].geometry.grid[0], static_cast<unsigned>(hopper.sm_count * 4));
  EXPECT_EQ(plan.steps[2].geometry.grid[0], 8u);
  EXPECT_NE(family.kernel_expressions(config, problem)[2].find(",1>"), std::string::npos);  // mean
  EXPECT_TRUE(family.reject(Config{{{"threads", 1024}, {"chunk", 8192}, {"vector_bytes", 16}, {"ctas_per_sm", 4}}},
                            problem, hopper));
}

TEST(MultiSumFamily, CpuReferenceSumsEachTunedTensor) {
  const Family& family = find_family("multi_sum");
  const Problem problem = sums(3, 4, DType::f32, DType::f32, {{"mean", "1"}});
  const std::size_t elements = family.tensors(problem)[2].elements;
  std::vector<double> data(elements);
  for (std::size_t i = 0; i < elements; ++i) data[i] = static_cast<double>(i);
  std::vector<std::byte> table(3 * sizeof(MultiSumEntry));
  family.fill_input(problem, 0, std::vector<std::uint64_t>{0, 0, 0}, table);
  const std::vector<double> got = family.reference_cpu(problem, {{}, data});
  for (int i = 0; i < 3; ++i) {
    MultiSumEntry entry;
    std::memcpy(&entry, table.data() + i * sizeof entry, sizeof entry);
    const auto first = static_cast<double>(reinterpret_cast<std::uint64_t>(entry.data) / 4);
    EXPECT_DOUBLE_EQ(got[i], first + (entry.length - 1) / 2.0);  // the mean of first .. last
  }
}

TEST(MultiSumFamily, CompilesForSm80AndSm90aWithoutSpills) {
  const Family& family = find_family("multi_sum");
  for (const auto& [problem, arch] : {std::pair{sums(2000, 131072, DType::bf16, DType::f32), "sm_90a"},
                                      std::pair{sums(7, 4, DType::f16, DType::f16, {{"mean", "1"}}), "sm_80"}}) {
    const DeviceTarget device = DeviceTarget::assumed_for_arch(arch);
    const Config config = family.default_config(problem, device);
    ASSERT_FALSE(family.reject(config, problem, device)) << problem.key();
    CompiledKernel compiled = compile(render(family, config, problem), arch);
    EXPECT_FALSE(compiled.resources.spills());
    EXPECT_EQ(compiled.lowered_names.size(), 3u);
  }
}

}  // namespace
}  // namespace tilesmith
