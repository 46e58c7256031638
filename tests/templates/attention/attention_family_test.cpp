// The attention family's descriptor without a GPU: validation, tensors, pruning, the default
// config for every head dim, kernel arguments, the CPU reference, and a sample of the space
// compiling for sm_80 and sm_90a without spills.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "generator/compiled_kernel.hpp"
#include "support/attention_problems.hpp"
#include "support/clean_compile.hpp"
#include "support/row_problems.hpp"
#include "templates/attention/attention_params.h"
#include "templates/attention/attention_shape.hpp"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

using testing::attention;
using testing::expect_invalid;

const Family& family() { return find_family("attention"); }

AttentionParams params_of(const LaunchPlan& plan) {
  AttentionParams p;
  EXPECT_EQ(plan.step_count, 1);
  EXPECT_EQ(plan.steps[0].args.size, sizeof p);
  std::memcpy(&p, plan.steps[0].args.bytes.data(), sizeof p);
  return p;
}

TEST(AttentionFamily, ValidatesShapesHeadDimsDtypesAndOptions) {
  EXPECT_EQ(family().name(), "attention");
  EXPECT_NO_THROW(family().validate(attention({4, 16, 4096, 128})));
  EXPECT_NO_THROW(family().validate(attention({1, 1, 1, 8})));
  EXPECT_NO_THROW(family().validate(attention({2, 32, 8, 3000, 3000, 128}, {{"causal", "1"}})));
  EXPECT_NO_THROW(family().validate(attention({2, 8, 8, 100, 4096, 72}, {{"layout", "bhsd"}}, DType::f16)));
  expect_invalid(attention({4, 16, 4096, 59}), "head dim 59 is not supported (multiples of 8 up to 256)");
  expect_invalid(attention({4, 16, 4096, 512}), "head dim 512 is not supported");
  expect_invalid(attention({4, 16, 4096, 1024}), "head dim 1024");
  expect_invalid(attention({4, 16, 4096, 128}, {}, DType::f32), "dtype f32 is not supported");
  expect_invalid(Problem{"attention", DType::bf16, DType::f32, {4, 16, 64, 128}}, "O has the inputs' type");
  expect_invalid(attention({2, 16, 16, 512, 512, 64}), "write it BxHxSxD (2x16x512x64)");
  expect_invalid(attention({2, 16, 5, 512, 512, 64}), "5 kv heads do not divide 16 query heads");
  expect_invalid(attention({2, 16, 512, 64, 1}), "is not BxHxSxD");
  expect_invalid(attention({2, 0, 512, 64}), "has a dimension below 1");
  expect_invalid(attention({2, 16, 512, 64}, {{"causal", "0"}}), "is the default: leave the option out");
  expect_invalid(attention({2, 16, 512, 64}, {{"layout", "sbhd"}}), "layout='sbhd' is not one of");
  expect_invalid(attention({2, 16, 512, 64}, {{"window", "1"}}), "unknown option 'window'");
}

TEST(AttentionFamily, TensorsAreQKVThenOAndTheLogsumexp) {
  const Problem gqa = attention({2, 8, 2, 100, 300, 64});
  EXPECT_EQ(testing::tensor_names(gqa), (std::vector<std::string>{"q", "k", "v", "o*", "lse*"}));
  const auto specs = family().tensors(gqa);
  EXPECT_EQ(specs[0].elements, 2u * 8 * 100 * 64);
  EXPECT_EQ(specs[1].elements, 2u * 2 * 300 * 64);
  EXPECT_EQ(specs[2].elements, specs[1].elements);
  EXPECT_EQ(specs[3].elements, specs[0].elements);
  EXPECT_EQ(specs[4].elements, 2u * 8 * 100);
  EXPECT_EQ(specs[4].dtype, DType::f32);
  EXPECT_EQ(specs[3].dtype, DType::bf16);
}

TEST(AttentionFamily, EveryHeadDimHasAValidDefaultOnEveryArch) {
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const DeviceTarget device = DeviceTarget::assumed_for_arch(arch);
    for (int d = 8; d <= 256; d += 8)
      for (const char* causal : {"0", "1"}) {
        ProblemOptions options;
        if (std::string(causal) == "1") options["causal"] = "1";
        const Problem problem = attention({2, 4, 333, d}, options);
        const Config config = family().default_config(problem, device);
        EXPECT_FALSE(family().reject(config, problem, device).has_value())
            << arch << " " << problem.key() << " [" << config.text() << "]";
      }
  }
}

TEST(AttentionFamily, RejectsWhatWouldSpillOrOverflowSharedMemory) {
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem wide = attention({1, 1, 4096, 256});
  auto config = [](int block_m, int block_n, int warps, int q_in_registers, int stages = 2) {
    return Config{{{"variant", 0}, {"block_m", block_m}, {"block_n", block_n}, {"warps", warps},
                   {"stages", stages}, {"q_in_registers", q_in_registers}, {"tile_order", 0}}};
  };
  // 32 rows a warp of a 256-wide head: 2 x 128 accumulators of O alone.
  EXPECT_TRUE(family().reject(config(128, 32, 4, 0), wide, device).has_value());
  EXPECT_TRUE(family().reject(config(64, 64, 8, 0), wide, device).has_value());  // 8 rows a warp
  EXPECT_FALSE(family().reject(config(128, 64, 8, 0), wide, device).has_value());
  // (128 + 2 x 3 x 128) rows x 528 bytes is past 227 KB.
  EXPECT_TRUE(family().reject(config(128, 128, 8, 0, 3), attention({1, 1, 4096, 128}), device).has_value());
  // A CTA per query block in a grid's x dimension, in either order; the kernels count them in
  // an int.
  const Problem many_heads = attention({4096, 32, 64, 64});
  Config heads_first = config(128, 64, 4, 0);
  EXPECT_FALSE(family().reject(heads_first, many_heads, device).has_value());
  heads_first.values["tile_order"] = 1;
  EXPECT_FALSE(family().reject(heads_first, many_heads, device).has_value());
  EXPECT_TRUE(family().reject(heads_first, attention({65536, 65536, 128, 64}), device).has_value());
}

TEST(AttentionFamily, PlanPassesPackedStridesTheScaleAndTheGrid) {
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_80");  // the mma.sync default
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000};
  const Problem bshd = attention({2, 8, 2, 100, 300, 72});
  Config config = family().default_config(bshd, device);
  config.values["tile_order"] = 0;
  LaunchPlan plan = family().plan(config, bshd, device, addresses, 0, CallScalars{});
  AttentionParams p = params_of(plan);
  EXPECT_EQ(p.q_strides.batch, 100 * 8 * 72);
  EXPECT_EQ(p.q_strides.row, 8 * 72);
  EXPECT_EQ(p.q_strides.head, 72);
  EXPECT_EQ(p.k_strides.batch, 300 * 2 * 72);
  EXPECT_EQ(p.k_strides.row, 2 * 72);
  EXPECT_EQ(p.o_strides.row, 8 * 72);
  EXPECT_EQ(p.heads, 8);
  EXPECT_EQ(p.kv_heads, 2);
  EXPECT_EQ(p.seq_q, 100);
  EXPECT_EQ(p.seq_k, 300);
  EXPECT_EQ(p.head_dim, 72);
  EXPECT_FLOAT_EQ(p.scale, 1 / std::sqrt(72.f));
  EXPECT_FLOAT_EQ(p.scale_log2, p.scale * 1.44269504f);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.lse), 0x5000u);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], (100u + 127) / 128 * 16);  // a CTA per query block
  EXPECT_EQ(plan.steps[0].geometry.grid[1], 1u);
  EXPECT_EQ(plan.steps[0].geometry.dynamic_smem_bytes,
            (128u + 2 * 2 * 64) * static_cast<unsigned>(attention_tile_pitch(80)));

  const Problem bhsd = attention({2, 8, 2, 100, 300, 72}, {{"layout", "bhsd"}});
  config.values["tile_order"] = 1;
  CallScalars scalars;
  scalars.softmax_scale = 0.5;
  scalars.row_strides[0] = 3 * 8 * 72;  // Q inside a packed QKV tensor
  scalars.head_strides[1] = 1000;
  scalars.batch_strides[3] = 123456;
  plan = family().plan(config, bhsd, device, addresses, 0, scalars);
  p = params_of(plan);
  EXPECT_EQ(p.q_strides.row, 3 * 8 * 72);
  EXPECT_EQ(p.q_strides.head, 100 * 72);
  EXPECT_EQ(p.k_strides.head, 1000);
  EXPECT_EQ(p.k_strides.row, 72);
  EXPECT_EQ(p.v_strides.head, 300 * 72);
  EXPECT_EQ(p.o_strides.batch, 123456);
  EXPECT_FLOAT_EQ(p.scale, 0.5f);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], (100u + 127) / 128 * 16);
}

// tile_order 2 takes the heads in groups whose keys and values fill at most half the L2.
TEST(AttentionFamily, GroupsOfHeadsShareHalfTheL2) {
  DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  hopper.l2_bytes = 50 << 20;
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000};
  // 2048 keys of 128 bf16 elements, K and V: 1 MB a head, 25 heads in 25 MB.
  const Problem mha = attention({8, 32, 2048, 128}, {{"causal", "1"}});
  Config config = family().default_config(mha, hopper);
  config.values["tile_order"] = 2;
  ASSERT_EQ(family().reject(config, mha, hopper), std::nullopt);
  LaunchPlan plan = family().plan(config, mha, hopper, addresses, 0x9000, CallScalars{});
  AttentionSm90Params wide;
  std::memcpy(&wide, plan.steps[plan.step_count - 1].args.bytes.data(), sizeof wide);
  EXPECT_EQ(wide.p.order_heads, 25);
  // Four query heads to a kv head: each reads a quarter of its keys' bytes.
  EXPECT_EQ(attention_order_heads(AttentionShape(attention({8, 32, 8, 2048, 2048, 128})),
                                  DType::bf16, 50 << 20),
            100);
  // Never more than every head, never fewer than one; every head where the L2 is unknown.
  EXPECT_EQ(attention_order_heads(AttentionShape(attention({1, 4, 2048, 128})), DType::bf16, 50 << 20), 4);
  EXPECT_EQ(attention_order_heads(AttentionShape(attention({1, 4, 1 << 20, 256})), DType::bf16, 50 << 20), 1);
  EXPECT_EQ(attention_order_heads(AttentionShape(mha), DType::bf16, 0), 256);
}

// The causal default's block order on the H100 (132 SMs): longest first over every head from
// 4096 queries on, or at head dim 64; below, groups of heads where the grid is at most 12 waves
// of 192-row blocks, else head by head.
TEST(AttentionFamily, CausalDefaultOrdersBlocksByLengthAndWaves) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  auto order = [&](std::vector<std::int64_t> dims) {
    return family().default_config(attention(dims, {{"causal", "1"}}), hopper).at("tile_order");
  };
  EXPECT_EQ(order({4, 16, 4096, 128}), 1);
  EXPECT_EQ(order({8, 16, 2048, 64}), 1);
  EXPECT_EQ(order({4, 16, 3000, 128}), 2);  // 16 blocks x 64 heads: 7.8 waves
  EXPECT_EQ(order({8, 32, 2048, 128}), 0);  // 11 blocks x 256 heads: 21.3 waves
  EXPECT_EQ(family().default_config(attention({8, 32, 2048, 128}), hopper).at("tile_order"), 0);
}

// The wgmma variant: 64 rows per consumer warpgroup plus a producer, and Q, K and V as 4D
// tensor maps {head dim, seq, heads, batch} in 64-column boxes, whatever the layout.
TEST(AttentionFamily, WgmmaPlanAsksForTensorMapsOfQKAndV) {
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000};
  const Problem problem = attention({2, 8, 2, 100, 300, 72}, {{"layout", "bhsd"}});
  const Config config{{{"variant", 1}, {"block_n", 128}, {"consumers", 2}, {"stages", 3},
                       {"tile_order", 0}, {"pipeline", 1}, {"pingpong", 1}, {"persistent", 0}}};
  ASSERT_FALSE(family().reject(config, problem, device).has_value());
  EXPECT_EQ(family().default_config(problem, device).at("variant"), 1);
  const LaunchPlan plan = family().plan(config, problem, device, addresses, 0, CallScalars{});
  ASSERT_EQ(plan.step_count, 1);
  const LaunchStep& step = plan.steps[0];
  EXPECT_EQ(step.geometry.block[0], 384u);
  EXPECT_EQ(step.geometry.grid[0], 16u);  // 100 queries, 128 a CTA, 16 heads
  EXPECT_EQ(step.geometry.grid[1], 1u);
  // Head dim 72 runs as 96: two 64-column panels.
  EXPECT_EQ(step.geometry.dynamic_smem_bytes, 1024u + 2 * 128 * (128 + 2 * 3 * 128) + 8 * 11);
  ASSERT_EQ(step.args.tensor_map_count, 3);
  const TensorMapSpec& q = step.args.tensor_maps[0];
  EXPECT_EQ(q.address, 0x1000u);
  EXPECT_EQ(q.rank, 4u);
  EXPECT_EQ(q.dims[0], 72u);
  EXPECT_EQ(q.dims[1], 100u);
  EXPECT_EQ(q.dims[2], 8u);
  EXPECT_EQ(q.dims[3], 2u);
  EXPECT_EQ(q.stride_bytes[0], 72u * 2);         // a row (BHSD)
  EXPECT_EQ(q.stride_bytes[1], 100u * 72 * 2);   // a head
  EXPECT_EQ(q.stride_bytes[2], 8u * 100 * 72 * 2);
  EXPECT_EQ(q.box[0], 64u);
  EXPECT_EQ(q.box[1], 64u);
  const TensorMapSpec& v = step.args.tensor_maps[2];
  EXPECT_EQ(v.address, 0x3000u);
  EXPECT_EQ(v.dims[1], 300u);
  EXPECT_EQ(v.dims[2], 2u);
  EXPECT_EQ(v.box[1], 128u);
  // Persistent: as many CTAs as run at once (two an SM with one consumer up to head dim 128),
  // or one per query block when there are fewer.
  Config persistent = config;
  persistent.values["persistent"] = 1;
  const Problem long_rows = attention({4, 16, 4096, 128});
  auto grid_of = [&](const Config& c, const Problem& p) {
    const LaunchPlan plan = family().plan(c, p, device, addresses, 0, CallScalars{});
    return std::pair{plan.steps[0].geometry.grid[0], plan.steps[0].geometry.grid[1]};
  };
  EXPECT_EQ(grid_of(persistent, long_rows), std::pair(132u, 1u));
  EXPECT_EQ(grid_of(persistent, problem), std::pair(16u, 1u));
  persistent.values["consumers"] = 1;
  persistent.values["pingpong"] = 0;
  EXPECT_EQ(grid_of(persistent, long_rows), std::pair(264u, 1u));
  persistent.values["block_n"] = 64;
  EXPECT_EQ(grid_of(persistent, attention({4, 16, 4096, 256})), std::pair(132u, 1u));
  // sm_80 has no wgmma; a 256-wide head with 128 keys a step would spill.
  EXPECT_TRUE(family().reject(config, problem, DeviceTarget::assumed_for_arch("sm_80")).has_value());
  Config wide = config;
  wide.values["stages"] = 2;
  EXPECT_TRUE(family().reject(wide, attention({1, 2, 512, 256}), device).has_value());
  wide.values["block_n"] = 64;
  EXPECT_FALSE(family().reject(wide, attention({1, 2, 512, 256}), device).has_value());
  wide.values["consumers"] = 1;  // ping-pong takes two
  EXPECT_TRUE(family().reject(wide, attention({1, 2, 512, 256}), device).has_value());
  wide.values["pingpong"] = 0;
  EXPECT_FALSE(family().reject(wide, attention({1, 2, 512, 256}), device).has_value());
  // Three consumers keep 160 registers: O and S of 128 columns each fit, with P waiting too not.
  Config three = config;
  three.values["consumers"] = 3;
  three.values["pingpong"] = 0;
  three.values["stages"] = 2;
  EXPECT_TRUE(family().reject(three, attention({1, 2, 512, 128}), device).has_value());
  three.values["pipeline"] = 0;
  EXPECT_FALSE(family().reject(three, attention({1, 2, 512, 128}), device).has_value());
  three.values["pipeline"] = 1;
  EXPECT_FALSE(family().reject(three, attention({1, 2, 512, 64}), device).has_value());
  three.values["pingpong"] = 1;
  EXPECT_TRUE(family().reject(three, attention({1, 2, 512, 64}), device).has_value());
  Config foreign = config;
  foreign.values["warps"] = 4;
  EXPECT_TRUE(family().reject(foreign, problem, device).has_value());
}

// persistent = 2: causal grids whose CTAs claim their next query block from a counter in the
// workspace, zeroed by the plan's first step; the grid is the persistent one.
TEST(AttentionFamily, ClaimedBlocksCountInAZeroedWorkspace) {
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000};
  const Problem causal = attention({4, 16, 1, 4096, 4096, 128}, {{"causal", "1"}});
  const Config claimed{{{"variant", 1},
                        {"block_n", 128},
                        {"consumers", 3},
                        {"stages", 2},
                        {"tile_order", 1},
                        {"pipeline", 0},
                        {"pingpong", 0},
                        {"persistent", 2}}};
  ASSERT_FALSE(family().reject(claimed, causal, device).has_value());
  EXPECT_EQ(family().workspace_bytes(claimed, causal, device), 16u);
  const LaunchPlan plan = family().plan(claimed, causal, device, addresses, 0x9000, CallScalars{});
  ASSERT_EQ(plan.step_count, 2);
  EXPECT_EQ(plan.steps[0].kernel, LaunchStep::kZeroFill);
  EXPECT_EQ(plan.steps[0].zero_address, 0x9000u);
  EXPECT_EQ(plan.steps[0].zero_bytes, 4u);
  EXPECT_EQ(plan.steps[1].geometry.grid[0], 132u);
  AttentionSm90Params wide;
  ASSERT_EQ(plan.steps[1].args.size, sizeof wide);
  std::memcpy(&wide, plan.steps[1].args.bytes.data(), sizeof wide);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(wide.claimed), 0x9000u);
  const std::vector<std::string> kernel = family().kernel_expressions(claimed, causal);
  EXPECT_TRUE(kernel[0].ends_with(",0,0,1>")) << kernel[0];
  Config strided = claimed;
  strided.values["persistent"] = 1;
  EXPECT_EQ(family().workspace_bytes(strided, causal, device), 0u);
  EXPECT_EQ(family().plan(strided, causal, device, addresses, 0, CallScalars{}).step_count, 1);
  // Non-causal blocks are all as long; one tile leaves no register for the block handed over.
  EXPECT_TRUE(family().reject(claimed, attention({4, 16, 4096, 128}), device).has_value());
  Config tight = claimed;
  tight.values["block_n"] = 192;
  EXPECT_TRUE(family()
                  .reject(tight, attention({4, 16, 1, 4096, 4096, 64}, {{"causal", "1"}}), device)
                  .has_value());
}

// The sm_90a forward's K and V rings' depth is a kernel argument: depths of one tile are one
// kernel (one compile in a sweep), each launched with its own depth and shared memory.
TEST(AttentionFamily, TheWgmmaRingDepthIsAnArgumentNotAnotherKernel) {
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem problem = attention({4, 16, 4096, 128});
  const std::uint64_t addresses[5] = {0x10000, 0x20000, 0x30000, 0x40000, 0x50000};
  std::vector<std::string> first;
  unsigned previous_smem = 0;
  for (int stages : {2, 3}) {
    const Config config{{{"variant", 1}, {"block_n", 128}, {"consumers", 2}, {"stages", stages},
                         {"tile_order", 0}, {"pipeline", 0}, {"pingpong", 0}, {"persistent", 1}}};
    ASSERT_FALSE(family().reject(config, problem, device).has_value()) << stages;
    const std::vector<std::string> kernel = family().kernel_expressions(config, problem);
    if (first.empty()) first = kernel;
    EXPECT_EQ(kernel, first);
    const LaunchPlan plan = family().plan(config, problem, device, addresses, 0, CallScalars{});
    AttentionSm90Params wide;
    ASSERT_EQ(plan.steps[0].args.size, sizeof wide);
    std::memcpy(&wide, plan.steps[0].args.bytes.data(), sizeof wide);
    EXPECT_EQ(wide.stages, stages);
    EXPECT_GT(plan.steps[0].geometry.dynamic_smem_bytes, previous_smem);
    previous_smem = plan.steps[0].geometry.dynamic_smem_bytes;
  }
}

TEST(AttentionFamily, CpuReferenceAveragesValuesAndEmptiesRowsThatSeeNoKey) {
  // One batch, one head, 3 queries, 2 keys, head dim 8, causal: query 0 sees no key (0 + 2 - 3
  // < 0), query 1 sees key 0, query 2 both.
  const Problem problem = attention({1, 1, 1, 3, 2, 8}, {{"causal", "1"}});
  std::vector<double> q(3 * 8, 0.0), k(2 * 8, 0.0), v(2 * 8);
  for (int d = 0; d < 8; ++d) {
    v[d] = d;         // key 0
    v[8 + d] = -2.0;  // key 1
  }
  const std::vector<double> out = family().reference_cpu(problem, {q, k, v});
  ASSERT_EQ(out.size(), 3u * 8 + 3);
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(out[d], 0.0);                          // no key: zero
    EXPECT_DOUBLE_EQ(out[8 + d], d);                 // key 0 alone
    EXPECT_DOUBLE_EQ(out[16 + d], (d - 2.0) / 2);    // equal scores: the mean of both rows
  }
  EXPECT_EQ(out[24], -INFINITY);
  EXPECT_DOUBLE_EQ(out[25], 0.0);           // log(exp(0))
  EXPECT_DOUBLE_EQ(out[26], std::log(2.0));  // log(2 exp(0))
}

TEST(AttentionFamily, WorkCountsTheVisiblePairs) {
  EXPECT_DOUBLE_EQ(family().work(attention({2, 3, 10, 64})).flops, 4.0 * 6 * 100 * 64);
  // Causal, 4 queries over 6 keys: rows see 3, 4, 5, 6 keys.
  EXPECT_DOUBLE_EQ(family().work(attention({1, 1, 1, 4, 6, 64}, {{"causal", "1"}})).flops,
                   4.0 * 18 * 64);
  EXPECT_DOUBLE_EQ(family().work(attention({1, 2, 64, 8})).min_bytes,
                   4.0 * 2 * 64 * 8 * 2 + 2 * 64 * 4);
}

// A sample of the space over head dims, dtypes and options: each compiles without spills or
// ptxas warnings, within the register file at its thread count; the mma.sync configs for sm_80
// and sm_90a, the wgmma ones for sm_90a.
// What users run untuned: the defaults of the benchmark's cases (a default that spilled once
// slowed every causal head-dim-128 call by 4-8%; attention.md, v9).
TEST(AttentionFamily, DefaultsOfTheBenchmarkCasesCompileCleanly) {
  testing::expect_clean_defaults(family(), testing::benchmark_attention_problems("attention"),
                                 {"sm_80", "sm_90a"});
}

TEST(AttentionFamily, SampledConfigsCompileWithoutSpills) {
  struct Case {
    Problem problem;
    std::map<std::string, int> config;  // over the variant's default
    int variant;
  };
  const std::vector<Case> cases = {
      {attention({4, 16, 4096, 128}), {}, 0},
      {attention({4, 16, 4096, 128}, {{"causal", "1"}}), {{"block_m", 64}, {"warps", 4}, {"block_n", 128}}, 0},
      {attention({2, 8, 2, 100, 3000, 64}, {}, DType::f16), {{"q_in_registers", 1}}, 0},
      {attention({1, 4, 300, 256}, {{"layout", "bhsd"}}), {}, 0},
      {attention({1, 4, 300, 192}), {{"stages", 3}, {"block_n", 32}}, 0},
      {attention({1, 4, 300, 72}), {{"block_m", 64}, {"warps", 4}, {"block_n", 32}, {"q_in_registers", 1}}, 0},
      {attention({3, 2, 17, 8}, {{"causal", "1"}}, DType::f16), {{"block_n", 128}, {"tile_order", 1}}, 0},
      {attention({4, 16, 4096, 128}), {}, 1},
      {attention({4, 16, 4096, 128}, {{"causal", "1"}}), {}, 1},  // claiming, three consumers
      {attention({4, 16, 4096, 128}, {{"causal", "1"}}),
       {{"consumers", 1}, {"stages", 4}, {"block_n", 64}, {"pingpong", 0}}, 1},
      {attention({2, 8, 2, 100, 3000, 64}, {}, DType::f16), {{"block_n", 64}, {"stages", 3}, {"pipeline", 0}}, 1},
      {attention({1, 4, 300, 256}, {{"layout", "bhsd"}}), {}, 1},
      {attention({1, 4, 300, 256}), {{"pipeline", 0}, {"pingpong", 0}}, 1},
      {attention({1, 4, 300, 72}, {{"causal", "1"}}), {{"tile_order", 1}, {"pingpong", 0}}, 1},
      {attention({1, 4, 300, 192}), {}, 1},
      // Three consumers (160 registers each) and the widest key blocks the registers allow.
      {attention({8, 16, 2048, 64}), {{"consumers", 3}, {"block_n", 128}, {"pipeline", 1}}, 1},
      {attention({2, 8, 2, 100, 3000, 64}, {{"causal", "1"}}), {{"consumers", 3}, {"block_n", 192}}, 1},
      {attention({4, 16, 4096, 128}), {{"consumers", 2}, {"block_n", 192}, {"stages", 2}, {"pipeline", 1}, {"pingpong", 1}}, 1},
      // Persistent, with each overlap and consumer count.
      {attention({4, 16, 4096, 128}), {{"consumers", 2}, {"pipeline", 1}, {"pingpong", 1}, {"persistent", 1}}, 1},
      {attention({8, 16, 2048, 64}), {{"consumers", 1}, {"pipeline", 1}, {"persistent", 1}}, 1},
      {attention({2, 8, 2, 100, 3000, 64}, {{"causal", "1"}}), {{"consumers", 3}, {"tile_order", 1}, {"persistent", 1}}, 1},
  };
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const DeviceTarget device = DeviceTarget::assumed_for_arch(arch);
    for (const Case& c : cases) {
      if (c.variant == 1 && device.cc_major < 9) continue;
      Config config = family().default_config(c.problem, DeviceTarget::assumed_for_arch(c.variant ? "sm_90a" : "sm_80"));
      ASSERT_EQ(config.at("variant"), c.variant) << c.problem.key();
      for (const auto& [name, value] : c.config) config.values[name] = value;
      ASSERT_FALSE(family().reject(config, c.problem, device).has_value())
          << c.problem.key() << " [" << config.text() << "]: " << *family().reject(config, c.problem, device);
      const std::optional<CompiledKernel> kernel = testing::expect_clean_compile(family(), config, c.problem, arch);
      if (!kernel) continue;
      const int threads = c.variant ? 128 * (config.at("consumers") + 1) : config.at("warps") * 32;
      EXPECT_LE(kernel->resources.registers * threads, device.regs_per_block)
          << arch << " " << c.problem.key() << " [" << config.text() << "]\n" << kernel->log;
    }
  }
}

}  // namespace
}  // namespace tilesmith
