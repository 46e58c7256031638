// The row ops' descriptors without a GPU: validation, tensors, pruning, kernel arguments, the
// CPU reference, and every op compiling for sm_80 and sm_90a without spills.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "generator/compiled_kernel.hpp"
#include "templates/reductions/row_norm_params.h"
#include "support/row_problems.hpp"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

const char* const kRowOps[] = {"softmax", "layernorm", "rmsnorm", "layernorm_act_residual",
                               "rmsnorm_act_residual"};

using testing::rows;

using testing::expect_invalid;

TEST(RowNormFamily, EveryOpIsRegisteredAndValidatesItsShapeAndOptions) {
  for (const char* op : kRowOps) {
    const Family& family = find_family(op);
    EXPECT_EQ(family.name(), op);
    EXPECT_NO_THROW(family.validate(rows(op, 1, 1)));
    EXPECT_NO_THROW(family.validate(rows(op, 1000000, 7, {}, DType::f32, DType::f16)));
    EXPECT_NO_THROW(family.validate(rows(op, 3, 262144)));
    expect_invalid(rows(op, 4, 4, {{"nonsense", "1"}}), "unknown option 'nonsense'");
    expect_invalid(Problem{op, DType::bf16, DType::bf16, {4, 4, 4}}, "must be ROWSxCOLS");
    expect_invalid(rows(op, 0, 4), "1 <= rows");
    expect_invalid(rows(op, 4, 0), "1 <= cols");
    expect_invalid(rows(op, 2, 262145), "longer than the 262144");
  }
  expect_invalid(rows("softmax", 4, 4, {{"weight", "0"}}), "unknown option 'weight'");
  expect_invalid(rows("layernorm", 4, 4, {{"weight", "1"}}), "is the default: leave the option out");
  expect_invalid(rows("layernorm", 4, 4, {{"stats", "yes"}}), "stats='yes' is not one of");
  expect_invalid(rows("rmsnorm", 4, 4, {{"bias", "0"}}), "unknown option 'bias'");
  expect_invalid(rows("layernorm", 4, 4, {{"act", "gelu"}}), "unknown option 'act'");
  EXPECT_NO_THROW(find_family("layernorm_act_residual")
                      .validate(rows("layernorm_act_residual", 4, 4, {{"act", "gelu"}, {"bias", "0"}})));
}

TEST(RowNormFamily, TensorsFollowTheOptions) {
  const auto tensors = testing::tensor_names;
  using V = std::vector<std::string>;
  EXPECT_EQ(tensors(rows("softmax", 3, 5)), (V{"x", "y*"}));
  EXPECT_EQ(tensors(rows("layernorm", 3, 5)), (V{"x", "weight", "bias", "y*"}));
  EXPECT_EQ(tensors(rows("layernorm", 3, 5, {{"bias", "0"}, {"stats", "1"}})),
            (V{"x", "weight", "y*", "mean*", "rstd*"}));
  EXPECT_EQ(tensors(rows("rmsnorm", 3, 5, {{"weight", "0"}, {"stats", "1"}})), (V{"x", "y*", "rstd*"}));
  EXPECT_EQ(tensors(rows("rmsnorm_act_residual", 3, 5, {{"act", "silu"}})),
            (V{"x", "weight", "residual", "y*"}));
  const Problem mixed = rows("layernorm_act_residual", 3, 5, {{"stats", "1"}}, DType::bf16, DType::f32);
  const auto specs = find_family(mixed.op).tensors(mixed);
  EXPECT_EQ(specs[1].dtype, DType::bf16);  // weight: x's type
  EXPECT_EQ(specs[3].dtype, DType::f32);   // residual: y's type
  EXPECT_EQ(specs[5].dtype, DType::f32);   // mean
  EXPECT_EQ(specs[5].elements, 3u);
  // The statistics are judged by their own (fp32) tolerance, y by its dtype's.
  EXPECT_LT(find_family(mixed.op).tolerance(mixed, specs[5]),
            find_family("softmax").tolerance(rows("softmax", 3, 5), find_family("softmax").tensors(rows("softmax", 3, 5))[1]));
}

TEST(RowNormFamily, OptionsAreInTheKeyAndChangeTheKernel) {
  const Family& family = find_family("layernorm_act_residual");
  const Problem plain = rows("layernorm_act_residual", 64, 1024);
  const Problem gelu = rows("layernorm_act_residual", 64, 1024, {{"act", "gelu"}});
  EXPECT_NE(plain.key(), gelu.key());
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config config = family.default_config(plain, hopper);
  EXPECT_NE(family.kernel_expressions(config, plain), family.kernel_expressions(config, gelu));
}

TEST(RowNormFamily, PruningKeepsAConfigForEveryShapeAndRejectsWhatCannotRun) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const DeviceTarget ampere = DeviceTarget::assumed_for_arch("sm_80");
  for (const char* op : kRowOps)
    for (std::int64_t cols : {1, 7, 256, 1023, 4097, 32768, 65536, 131072, 262144})
      for (DType dtype : {DType::bf16, DType::f32}) {
        const Problem problem = rows(op, 3, cols, {}, dtype, dtype);
        const Family& family = find_family(op);
        int valid = 0, clustered = 0;
        for (const Config& config : family.enumerate())
          if (!family.reject(config, problem, hopper)) {
            ++valid;
            clustered += config.at("cluster") > 1;
            // Clusters need sm_90; a global exchange runs anywhere.
            EXPECT_FALSE(config.at("cluster") > 1 && config.at("exchange") == 0 &&
                         !family.reject(config, problem, ampere));
          }
        EXPECT_GT(valid, 0) << problem.key();
        EXPECT_FALSE(family.reject(family.default_config(problem, hopper), problem, hopper))
            << problem.key();
        // A row longer than one CTA's registers hold (512 threads x 64 elements) needs a cluster.
        if (cols > 32768) EXPECT_EQ(valid, clustered) << problem.key();
        if (cols <= 32768)
          EXPECT_FALSE(family.reject(family.default_config(problem, ampere), problem, ampere))
              << problem.key();
      }
  const Family& softmax = find_family("softmax");
  const Problem problem = rows("softmax", 8, 4096);
  EXPECT_TRUE(softmax.reject(Config{{{"vector_bytes", 16}, {"threads_per_row", 32}, {"rows_per_block", 64},
                                     {"cluster", 1}, {"exchange", 0}, {"stages", 0}}},
                             problem, hopper));
  EXPECT_TRUE(softmax.reject(Config{{{"vector_bytes", 16}, {"threads_per_row", 32}, {"rows_per_block", 1}}},
                             problem, hopper));
}

TEST(RowNormFamily, PlanPacksAddressesStridesAndTheClusterLaunch) {
  const Family& family = find_family("layernorm_act_residual");
  const Problem problem = rows("layernorm_act_residual", 5, 262144, {{"stats", "1"}});
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config config{{{"vector_bytes", 16}, {"threads_per_row", 512}, {"rows_per_block", 1},
                       {"cluster", 8}, {"exchange", 0}, {"stages", 0}}};
  ASSERT_FALSE(family.reject(config, problem, hopper));
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 0x6000, 0x7000};
  CallScalars scalars;
  scalars.row_strides[0] = 300000;  // x
  scalars.row_strides[3] = 270000;  // residual
  scalars.epsilon = 1e-6;
  const LaunchPlan plan = family.plan(config, problem, hopper, addresses, 0, scalars);
  ASSERT_EQ(plan.step_count, 1);
  const LaunchGeometry& g = plan.steps[0].geometry;
  EXPECT_EQ(g.grid[0], 5u * 8u);
  EXPECT_EQ(g.cluster[0], 8u);
  EXPECT_EQ(g.block[0], 512u);
  EXPECT_FALSE(g.persistent);
  EXPECT_EQ(g.dynamic_smem_bytes, 0u);
  RowParams p;
  ASSERT_EQ(plan.steps[0].args.size, sizeof p);
  std::memcpy(&p, plan.steps[0].args.bytes.data(), sizeof p);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.x), 0x1000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.weight), 0x2000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.bias), 0x3000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.residual), 0x4000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.y), 0x5000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.mean), 0x6000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.rstd), 0x7000u);
  EXPECT_EQ(p.x_stride, 300000);
  EXPECT_EQ(p.residual_stride, 270000);
  EXPECT_EQ(p.y_stride, 262144);  // 0: packed
  EXPECT_EQ(p.rows, 5);
  EXPECT_EQ(p.cols, 262144);
  EXPECT_FLOAT_EQ(p.epsilon, 1e-6f);
}

// stages > 0: a grid of every row group, marked persistent (the launcher keeps what fits), each
// CTA with a ring of `stages` groups of its vectors and a copy of its weight columns; refused
// where it cannot fit or has no second group to fetch ahead.
TEST(RowNormFamily, StagedConfigsPlanAPersistentGridWithTheirRing) {
  const Family& family = find_family("rmsnorm");
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem problem = rows("rmsnorm", 8192, 8192);  // bf16: 1024 vectors of 16 bytes a row
  Config config{{{"vector_bytes", 16}, {"threads_per_row", 256}, {"rows_per_block", 1},
                 {"cluster", 1}, {"exchange", 0}, {"stages", 4}}};
  ASSERT_FALSE(family.reject(config, problem, hopper));
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000};
  const LaunchGeometry g = family.plan(config, problem, hopper, addresses, 0, CallScalars{}).steps[0].geometry;
  EXPECT_TRUE(g.persistent);
  EXPECT_EQ(g.grid[0], 8192u);
  // (4 stages + the weight) x threads x items x 16 bytes
  EXPECT_EQ(g.dynamic_smem_bytes, 5u * 256u * 4u * 16u);
  EXPECT_NE(family.kernel_expressions(config, problem).at(0).find(",1,4,1,0,4>"), std::string::npos)
      << family.kernel_expressions(config, problem).at(0);

  // 512 threads x 4 stages x 64 fp32 elements: 512 KB of ring.
  const Problem wide = rows("rmsnorm", 8192, 32768, {}, DType::f32, DType::f32);
  config.values["threads_per_row"] = 512;
  EXPECT_NE(family.reject(config, wide, hopper).value_or(""), "");
  config.values["stages"] = 0;
  EXPECT_FALSE(family.reject(config, wide, hopper));
  // 132 rows on 132 SMs: every CTA would run one row.
  config.values["threads_per_row"] = 256;
  config.values["stages"] = 1;
  EXPECT_NE(family.reject(config, rows("rmsnorm", 132, 8192), hopper).value_or(""), "");
  EXPECT_FALSE(family.reject(config, rows("rmsnorm", 133, 8192), hopper));
  EXPECT_NE(family.reject(Config{{{"vector_bytes", 16}, {"threads_per_row", 256}, {"rows_per_block", 1},
                                  {"cluster", 1}, {"exchange", 0}, {"stages", 5}}},
                          problem, hopper)
                .value_or(""),
            "");
}

// CTAs sharing a row through global memory: no cluster launch, groups that wait on each other
// (a cooperative, persistent grid of whole groups), and the boards in the workspace, zeroed by
// a step before the kernel. Allowed without clusters (sm_80), only with the ring's persistent
// grid, only where CTAs share a row.
TEST(RowNormFamily, GlobalExchangePlansZeroedBoardsAndWaitingGroups) {
  const Family& family = find_family("layernorm");
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const DeviceTarget ampere = DeviceTarget::assumed_for_arch("sm_80");
  const Problem problem = rows("layernorm", 1024, 131072);
  Config config{{{"vector_bytes", 16}, {"threads_per_row", 512}, {"rows_per_block", 1},
                 {"cluster", 4}, {"exchange", 1}, {"stages", 1}}};
  ASSERT_FALSE(family.reject(config, problem, hopper));
  const std::size_t boards = family.workspace_bytes(config, problem, hopper);
  // At most 4 CTAs of 512 threads an SM: 132 x 4 / 4 groups of 2 x 4 slots + 2 counts.
  EXPECT_EQ(boards, 132u * 4u / 4u * static_cast<std::size_t>(row_board_bytes(4)));
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000, 0x4000};
  const LaunchPlan plan = family.plan(config, problem, hopper, addresses, 0x90000, CallScalars{});
  ASSERT_EQ(plan.step_count, 2);
  EXPECT_EQ(plan.steps[0].kernel, LaunchStep::kZeroFill);
  EXPECT_EQ(plan.steps[0].zero_address, 0x90000u);
  EXPECT_EQ(plan.steps[0].zero_bytes, boards);
  const LaunchGeometry& g = plan.steps[1].geometry;
  EXPECT_EQ(g.cluster[0], 1u);
  EXPECT_EQ(g.waiting_group, 4u);
  EXPECT_TRUE(g.persistent);
  EXPECT_EQ(g.grid[0], 1024u * 4u);
  RowParams p;
  std::memcpy(&p, plan.steps[1].args.bytes.data(), sizeof p);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.boards), 0x90000u);
  EXPECT_NE(family.kernel_expressions(config, problem).at(0).find(",4,1,1>"), std::string::npos)
      << family.kernel_expressions(config, problem).at(0);

  EXPECT_FALSE(family.reject(config, rows("layernorm", 1024, 65536), ampere))
      << "no cluster: any GPU (whose shared memory holds the ring)";
  config.values["stages"] = 0;
  EXPECT_NE(family.reject(config, problem, hopper).value_or(""), "") << "CTAs that wait need a persistent grid";
  const Problem short_rows = rows("layernorm", 4096, 1024);
  Config alone{{{"vector_bytes", 16}, {"threads_per_row", 128}, {"rows_per_block", 1},
                {"cluster", 1}, {"exchange", 1}, {"stages", 1}}};
  EXPECT_NE(family.reject(alone, short_rows, hopper).value_or(""), "") << "no CTAs share a row";
  alone.values["exchange"] = 0;
  EXPECT_FALSE(family.reject(alone, short_rows, hopper));
  EXPECT_EQ(family.workspace_bytes(alone, short_rows, hopper), 0u);
}

TEST(RowNormFamily, CpuReferenceComputesEachOp) {
  const std::vector<double> x = {1, 2, 3, 6};
  const double mean = 3, var = (4 + 1 + 0 + 9) / 4.0, rstd = 1 / std::sqrt(var + 1e-5);
  auto softmax = find_family("softmax").reference_cpu(rows("softmax", 1, 4), {x});
  const double sum = std::exp(1 - 6) + std::exp(2 - 6) + std::exp(3 - 6) + 1;
  EXPECT_NEAR(softmax[3], 1 / sum, 1e-12);
  EXPECT_NEAR(softmax[0] + softmax[1] + softmax[2] + softmax[3], 1, 1e-12);
  const std::vector<double> w = {1, 2, 3, 4}, b = {0.5, 0.5, 0.5, 0.5};
  auto layernorm = find_family("layernorm").reference_cpu(rows("layernorm", 1, 4, {{"stats", "1"}}), {x, w, b});
  ASSERT_EQ(layernorm.size(), 6u);
  EXPECT_NEAR(layernorm[3], (6 - mean) * rstd * 4 + 0.5, 1e-12);
  EXPECT_NEAR(layernorm[4], mean, 1e-12);
  EXPECT_NEAR(layernorm[5], rstd, 1e-12);
  const std::vector<double> r = {10, 20, 30, 40};
  auto fused = find_family("rmsnorm_act_residual")
                   .reference_cpu(rows("rmsnorm_act_residual", 1, 4, {{"act", "relu"}, {"weight", "0"}}),
                                  {{-1, 2, -3, 6}, r});
  const double rms = 1 / std::sqrt((1 + 4 + 9 + 36) / 4.0 + 1e-5);
  EXPECT_NEAR(fused[0], 10, 1e-12);  // relu(-rms) + 10
  EXPECT_NEAR(fused[3], 6 * rms + 40, 1e-12);
}

// Every op, in each dtype pairing and with every option on, compiles for both architectures
// with no local-memory spills, at short, odd and long rows.
TEST(RowNormFamily, EveryOpCompilesForSm80AndSm90aWithoutSpills) {
  struct Case {
    Problem problem;
    const char* arch;
  };
  const std::vector<Case> cases = {
      {rows("softmax", 64, 256, {}, DType::bf16, DType::bf16), "sm_90a"},
      {rows("softmax", 4096, 256, {}, DType::bf16, DType::bf16), "sm_90a"},
      {rows("softmax", 64, 4097, {}, DType::f32, DType::f32), "sm_80"},
      {rows("layernorm", 2000, 1023, {{"stats", "1"}}, DType::f16, DType::f32), "sm_80"},
      {rows("rmsnorm", 8, 131072, {}, DType::bf16, DType::bf16), "sm_90a"},
      {rows("rmsnorm", 1024, 131072, {}, DType::f32, DType::f32), "sm_90a"},
      {rows("layernorm_act_residual", 512, 4096, {{"act", "gelu"}, {"stats", "1"}}), "sm_90a"},
      {rows("rmsnorm_act_residual", 64, 7, {{"act", "silu"}}, DType::f32, DType::bf16), "sm_80"}};
  for (const Case& c : cases) {
    const Family& family = find_family(c.problem.op);
    const DeviceTarget device = DeviceTarget::assumed_for_arch(c.arch);
    const Config config = family.default_config(c.problem, device);
    ASSERT_FALSE(family.reject(config, c.problem, device)) << c.problem.key();
    // The default fetches ahead through the ring wherever each SM gets several row groups.
    EXPECT_EQ(config.at("stages") > 0, c.problem.shape[0] > 132) << c.problem.key() << " " << config.text();
    CompiledKernel compiled = compile(render(family, config, c.problem), c.arch);
    EXPECT_FALSE(compiled.resources.spills()) << c.problem.key() << " " << config.text();
    EXPECT_GT(compiled.cubin.bytes.size(), 0u);
  }
}

}  // namespace
}  // namespace tilesmith
