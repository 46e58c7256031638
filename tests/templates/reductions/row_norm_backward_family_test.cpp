// The backward row ops' descriptors without a GPU: validation, tensors, pruning, the two-launch
// plan, the CPU reference against finite differences of the forward's, and compiling without
// spills.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "generator/compiled_kernel.hpp"
#include "support/row_problems.hpp"
#include "templates/reductions/row_norm_params.h"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

const char* const kBackwardOps[] = {"softmax_backward", "layernorm_backward", "rmsnorm_backward"};

using testing::rows;

using testing::expect_invalid;
using testing::tensor_names;

TEST(RowNormBackwardFamily, EveryOpValidatesItsShapeAndOptions) {
  for (const char* op : kBackwardOps) {
    const Family& family = find_family(op);
    EXPECT_EQ(family.name(), op);
    EXPECT_NO_THROW(family.validate(rows(op, 1, 1)));
    EXPECT_NO_THROW(family.validate(rows(op, 1000000, 7, {}, DType::f32, DType::f16)));
    EXPECT_NO_THROW(family.validate(rows(op, 3, 262144)));
    expect_invalid(rows(op, 2, 262145), "longer than the 262144");
    expect_invalid(rows(op, 0, 4), "1 <= rows");
    expect_invalid(rows(op, 4, 4, {{"stats", "1"}}), "unknown option 'stats'");
  }
  expect_invalid(rows("softmax_backward", 4, 4, {{"weight", "0"}}), "unknown option 'weight'");
  expect_invalid(rows("rmsnorm_backward", 4, 4, {{"bias", "0"}}), "unknown option 'bias'");
  EXPECT_NO_THROW(find_family("layernorm_backward")
                      .validate(rows("layernorm_backward", 4, 4, {{"weight", "0"}, {"bias", "0"}})));
}

TEST(RowNormBackwardFamily, TensorsFollowTheOptionsAndTheForwardsTypes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(tensor_names(rows("softmax_backward", 3, 5)), (V{"y", "dy", "dx*"}));
  EXPECT_EQ(tensor_names(rows("layernorm_backward", 3, 5)),
            (V{"x", "dy", "weight", "mean", "rstd", "dx*", "dweight*", "dbias*"}));
  EXPECT_EQ(tensor_names(rows("layernorm_backward", 3, 5, {{"weight", "0"}})),
            (V{"x", "dy", "mean", "rstd", "dx*", "dbias*"}));
  EXPECT_EQ(tensor_names(rows("rmsnorm_backward", 3, 5, {{"weight", "0"}})), (V{"x", "dy", "rstd", "dx*"}));
  const Problem mixed = rows("layernorm_backward", 3, 5, {}, DType::bf16, DType::f32);
  const auto specs = find_family(mixed.op).tensors(mixed);
  EXPECT_EQ(specs[0].dtype, DType::bf16);  // x: the forward's input type
  EXPECT_EQ(specs[1].dtype, DType::f32);   // dy: the forward's output type
  EXPECT_EQ(specs[3].dtype, DType::f32);   // mean
  EXPECT_EQ(specs[5].dtype, DType::bf16);  // dx
  EXPECT_EQ(specs[6].elements, 5u);        // dweight: a column sum
  const Problem softmax = rows("softmax_backward", 3, 5, {}, DType::bf16, DType::f32);
  EXPECT_EQ(find_family(softmax.op).tensors(softmax)[0].dtype, DType::f32);  // y
}

TEST(RowNormBackwardFamily, PruningKeepsAConfigForEveryShape) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const DeviceTarget ampere = DeviceTarget::assumed_for_arch("sm_80");
  for (const char* op : kBackwardOps)
    for (std::int64_t cols : {1, 7, 256, 1023, 4097, 16384, 32768, 65536, 131072, 262144})
      for (DType dtype : {DType::bf16, DType::f32}) {
        const Problem problem = rows(op, 3, cols, {}, dtype, dtype);
        const Family& family = find_family(op);
        int valid = 0;
        for (const Config& config : family.enumerate()) valid += !family.reject(config, problem, hopper);
        EXPECT_GT(valid, 0) << problem.key();
        EXPECT_FALSE(family.reject(family.default_config(problem, hopper), problem, hopper))
            << problem.key();
        // One CTA of 512 threads holds 16384 columns of x and dy in registers.
        if (cols <= 16384)
          EXPECT_FALSE(family.reject(family.default_config(problem, ampere), problem, ampere))
              << problem.key();
      }
  // More threads than an SM holds.
  const Family& family = find_family("layernorm_backward");
  EXPECT_TRUE(family.reject(Config{{{"vector_bytes", 16}, {"threads_per_row", 256}, {"rows_per_block", 1},
                                    {"cluster", 1}, {"exchange", 0}, {"ctas_per_sm", 16}, {"stages", 0}}},
                            rows("layernorm_backward", 64, 2048), hopper));
}

TEST(RowNormBackwardFamily, ColumnSumsAreASecondLaunchOverTheGroupsPartials) {
  const Family& family = find_family("layernorm_backward");
  const Problem problem = rows("layernorm_backward", 100000, 1000);
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config config{{{"vector_bytes", 16}, {"threads_per_row", 128}, {"rows_per_block", 2},
                       {"cluster", 1}, {"exchange", 0}, {"ctas_per_sm", 4}, {"stages", 2}}};
  ASSERT_FALSE(family.reject(config, problem, hopper));
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000, 0x4000,
                                                0x5000, 0x6000, 0x7000, 0x8000};
  const long long groups = hopper.sm_count * 4;
  // The count of groups that ran (16 bytes), then 2 partial rows per group at most.
  EXPECT_EQ(family.workspace_bytes(config, problem, hopper), 16u + 2u * groups * 1000 * sizeof(float));
  const LaunchPlan plan = family.plan(config, problem, hopper, addresses, 0x90000, CallScalars{});
  ASSERT_EQ(plan.step_count, 2);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], static_cast<unsigned>(groups));
  EXPECT_TRUE(plan.steps[0].geometry.persistent);  // the launcher may trim it
  EXPECT_EQ(plan.steps[0].geometry.block[0], 256u);
  // The column sums of a CTA of 2 rows stay in shared memory (2 sums x 2 rows x (8 + 1 extra)
  // x 128 threads floats), then the ring: 2 stages x 256 threads x 1 vector of 8 elements of x
  // and of dy (bf16), then the weight's vector of each thread.
  EXPECT_FALSE(row_column_sums_in_registers(9, 2, 256, 2));
  EXPECT_EQ(plan.steps[0].geometry.dynamic_smem_bytes,
            2u * 2u * 9u * 128u * 4u + 2u * 256u * 8u * (2u + 2u) + 256u * 8u * 2u);
  EXPECT_NE(family.kernel_expressions(config, problem).at(0).find(",1,1,0,2>"), std::string::npos)
      << family.kernel_expressions(config, problem).at(0);
  // One row group per CTA: nothing to fetch ahead.
  EXPECT_NE(family.reject(config, rows("layernorm_backward", 2 * groups, 1000), hopper).value_or(""), "");
  RowBackwardParams p;
  std::memcpy(&p, plan.steps[0].args.bytes.data(), sizeof p);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.dy), 0x2000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.rstd), 0x5000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.dx), 0x6000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.groups_ran), 0x90000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.partials), 0x90010u);
  EXPECT_EQ(p.stage_weight, 1);
  EXPECT_EQ(plan.steps[1].kernel, 1);
  EXPECT_EQ(plan.steps[1].geometry.grid[1], 2u);  // dweight and dbias
  // 528 groups: 128 threads per column (8 groups each, one round of loads), so 8 columns per
  // CTA: 1000 columns in 125 CTAs.
  EXPECT_EQ(plan.steps[1].geometry.grid[0], 125u);
  EXPECT_EQ(plan.steps[1].geometry.block[0], 8u);
  EXPECT_EQ(plan.steps[1].geometry.block[1], 128u);
  ColumnSumParams sums;
  std::memcpy(&sums, plan.steps[1].args.bytes.data(), sizeof sums);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(sums.out[0]), 0x7000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(sums.out[1]), 0x8000u);
  EXPECT_EQ(sums.groups, p.groups_ran);  // column_sums reads the count the rows' kernel wrote
  EXPECT_EQ(family.kernel_expressions(config, problem).size(), 2u);
  // Where the column sums and the ring leave no room for the weight, rows read it from L2: a
  // cluster of 8 CTAs holds 16384 columns each, 32 a thread (too many for registers beside x
  // and dy), 128 KB of column sums in shared memory and a 64 KB ring stage.
  const Problem longest = rows("layernorm_backward", 1024, 131072);
  const Config wide{{{"vector_bytes", 16}, {"threads_per_row", 512}, {"rows_per_block", 1},
                     {"cluster", 8}, {"exchange", 0}, {"ctas_per_sm", 1}, {"stages", 1}}};
  ASSERT_FALSE(family.reject(wide, longest, hopper));
  const LaunchPlan unstaged = family.plan(wide, longest, hopper, addresses, 0x90000, {});
  std::memcpy(&p, unstaged.steps[0].args.bytes.data(), sizeof p);
  EXPECT_EQ(p.stage_weight, 0);
  EXPECT_FALSE(row_column_sums_in_registers(33, 2, 512, 1));
  EXPECT_EQ(unstaged.steps[0].geometry.dynamic_smem_bytes, 2u * (32u + 1u) * 512u * 4u + 16384u * (2u + 2u));
  // A cluster of 16 halves the row a CTA holds: the sums fit in registers beside x and dy.
  const Config wider{{{"vector_bytes", 16}, {"threads_per_row", 512}, {"rows_per_block", 1},
                      {"cluster", 16}, {"exchange", 0}, {"ctas_per_sm", 1}, {"stages", 2}}};
  ASSERT_FALSE(family.reject(wider, longest, hopper));
  EXPECT_TRUE(row_column_sums_in_registers(17, 2, 512, 1));
  const LaunchPlan in_registers = family.plan(wider, longest, hopper, addresses, 0x90000, {});
  EXPECT_EQ(in_registers.steps[0].geometry.dynamic_smem_bytes, 2u * 8192u * (2u + 2u) + 8192u * 2u);
  // Few rows: no more groups than rows, and no column sums without weight and bias.
  EXPECT_EQ(family.plan(config, rows("layernorm_backward", 5, 1000), hopper, addresses, 0x90000, {})
                .steps[0].geometry.grid[0], 3u);
  const Problem bare = rows("layernorm_backward", 5, 1000, {{"weight", "0"}, {"bias", "0"}});
  EXPECT_EQ(family.plan(config, bare, hopper, addresses, 0, {}).step_count, 1);
  EXPECT_EQ(family.workspace_bytes(config, bare, hopper), 0u);
}

// The backward's CPU reference is the gradient of the forward's: sum(dy * y) differentiated by
// central differences through the forward's CPU reference, for x, weight and bias.
TEST(RowNormBackwardFamily, CpuReferenceIsTheForwardsGradient) {
  const std::int64_t r = 3, c = 6;
  std::mt19937 random(7);
  std::normal_distribution<double> normal;
  auto fresh = [&](std::int64_t n) {
    std::vector<double> v(static_cast<std::size_t>(n));
    for (double& value : v) value = normal(random);
    return v;
  };
  const std::vector<double> x = fresh(r * c), dy = fresh(r * c), weight = fresh(c), bias = fresh(c);
  for (const std::string norm : {"softmax", "layernorm", "rmsnorm"}) {
    const bool softmax = norm == "softmax", layernorm = norm == "layernorm";
    const Problem forward = rows(norm, r, c, softmax ? ProblemOptions{}
                                                     : ProblemOptions{{"stats", "1"}});
    const Family& forward_family = find_family(norm);
    auto run_forward = [&](const std::vector<double>& in, const std::vector<double>& w,
                           const std::vector<double>& b) {
      std::vector<std::vector<double>> inputs = {in};
      if (!softmax) inputs.push_back(w);
      if (layernorm) inputs.push_back(b);
      return forward_family.reference_cpu(forward, inputs);
    };
    // sum(dy * y): the loss whose gradient the backward computes.
    auto loss = [&](const std::vector<double>& in, const std::vector<double>& w, const std::vector<double>& b) {
      const std::vector<double> y = run_forward(in, w, b);
      double total = 0;
      for (std::size_t i = 0; i < dy.size(); ++i) total += dy[i] * y[i];
      return total;
    };
    auto derivative = [&](auto perturbed) {
      const double h = 1e-6;
      return (perturbed(h) - perturbed(-h)) / (2 * h);
    };
    const std::vector<double> y = run_forward(x, weight, bias);
    std::vector<std::vector<double>> inputs = {softmax ? std::vector<double>(y.begin(), y.begin() + r * c) : x, dy};
    if (!softmax) inputs.push_back(weight);
    if (layernorm) inputs.emplace_back(y.begin() + r * c, y.begin() + r * c + r);  // mean
    if (!softmax) inputs.emplace_back(y.end() - r, y.end());                       // rstd
    const std::string op = norm + "_backward";
    const std::vector<double> got = find_family(op).reference_cpu(rows(op, r, c), inputs);
    std::vector<double> expected;
    for (std::size_t i = 0; i < x.size(); ++i)
      expected.push_back(derivative([&](double h) {
        std::vector<double> moved = x;
        moved[i] += h;
        return loss(moved, weight, bias);
      }));
    for (int param = 0; param < (softmax ? 0 : layernorm ? 2 : 1); ++param)
      for (std::size_t j = 0; j < static_cast<std::size_t>(c); ++j)
        expected.push_back(derivative([&](double h) {
          std::vector<double> w = weight, b = bias;
          (param == 0 ? w : b)[j] += h;
          return loss(x, w, b);
        }));
    ASSERT_EQ(got.size(), expected.size()) << op;
    for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-6) << op << " output " << i;
  }
}

TEST(RowNormBackwardFamily, EveryOpCompilesForSm80AndSm90aWithoutSpills) {
  struct Case {
    Problem problem;
    const char* arch;
  };
  const std::vector<Case> cases = {
      {rows("softmax_backward", 64, 256, {}, DType::bf16, DType::bf16), "sm_90a"},
      {rows("layernorm_backward", 64, 1023, {}, DType::f16, DType::f32), "sm_80"},
      {rows("layernorm_backward", 8, 131072, {}, DType::bf16, DType::bf16), "sm_90a"},
      {rows("rmsnorm_backward", 8, 262144, {}, DType::f32, DType::f32), "sm_90a"},
      {rows("rmsnorm_backward", 64, 4097, {}, DType::f32, DType::f32), "sm_90a"},
      {rows("rmsnorm_backward", 64, 7, {{"weight", "0"}}, DType::bf16, DType::f32), "sm_80"}};
  for (const Case& c : cases) {
    const Family& family = find_family(c.problem.op);
    const DeviceTarget device = DeviceTarget::assumed_for_arch(c.arch);
    const Config config = family.default_config(c.problem, device);
    ASSERT_FALSE(family.reject(config, c.problem, device)) << c.problem.key();
    CompiledKernel compiled = compile(render(family, config, c.problem), c.arch);
    EXPECT_FALSE(compiled.resources.spills()) << c.problem.key() << " " << config.text();
    EXPECT_EQ(compiled.lowered_names.size(), family.kernel_expressions(config, c.problem).size());
  }
}

}  // namespace
}  // namespace tilesmith
