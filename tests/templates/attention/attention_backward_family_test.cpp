// The attention_backward family's descriptor without a GPU: validation, tensors, the
// logsumexp it fills, pruning, the default config for every head dim, the three launches and
// the workspace, the CPU reference, and a sample of the space compiling without spills.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "generator/compiled_kernel.hpp"
#include "support/attention_problems.hpp"
#include "support/clean_compile.hpp"
#include "support/row_problems.hpp"
#include "templates/attention/attention_params.h"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

using testing::attention_backward;
using testing::expect_invalid;

const Family& family() { return find_family("attention_backward"); }

TEST(AttentionBackwardFamily, ValidatesAsTheForwardDoes) {
  EXPECT_NO_THROW(family().validate(attention_backward({4, 16, 4096, 128})));
  EXPECT_NO_THROW(family().validate(attention_backward({2, 32, 8, 3000, 3000, 128}, {{"causal", "1"}})));
  EXPECT_NO_THROW(family().validate(attention_backward({2, 8, 1, 100, 4096, 72}, {{"layout", "bhsd"}}, DType::f16)));
  expect_invalid(attention_backward({4, 16, 4096, 59}), "attention_backward: head dim 59 is not supported");
  expect_invalid(attention_backward({4, 16, 4096, 512}), "head dim 512 is not supported");
  expect_invalid(attention_backward({4, 16, 4096, 128}, {}, DType::f32), "dtype f32 is not supported");
  expect_invalid(attention_backward({2, 16, 16, 512, 512, 64}), "write it BxHxSxD (2x16x512x64)");
  expect_invalid(attention_backward({2, 16, 5, 512, 512, 64}), "5 kv heads do not divide 16 query heads");
  expect_invalid(attention_backward({2, 16, 512, 64}, {{"window", "1"}}), "unknown option 'window'");
  testing::expect_invalid_argument(
      [] { family().validate(Problem{"attention", DType::bf16, DType::bf16, {2, 16, 512, 64}}); },
      "attention_backward: asked for op 'attention'");
}

TEST(AttentionBackwardFamily, TensorsAreTheForwardsWithDoThenTheThreeGradients) {
  const Problem gqa = attention_backward({2, 8, 2, 100, 300, 64});
  EXPECT_EQ(testing::tensor_names(gqa),
            (std::vector<std::string>{"q", "k", "v", "o", "do", "lse", "dq*", "dk*", "dv*"}));
  const auto specs = family().tensors(gqa);
  EXPECT_EQ(specs[4].elements, 2u * 8 * 100 * 64);
  EXPECT_EQ(specs[5].elements, 2u * 8 * 100);
  EXPECT_EQ(specs[5].dtype, DType::f32);
  EXPECT_TRUE(specs[5].family_filled);
  EXPECT_EQ(specs[6].elements, specs[0].elements);
  EXPECT_EQ(specs[7].elements, 2u * 2 * 300 * 64);
  EXPECT_EQ(specs[8].elements, specs[7].elements);
}

// The logsumexp the tuner feeds the kernels is a forward's of unit-variance scores: about
// log(keys seen) + 1/2, different from row to row, -inf where a causal row sees no key.
TEST(AttentionBackwardFamily, FillsALogsumexpAForwardWouldWrite) {
  const Problem problem = attention_backward({1, 2, 1, 6, 4, 8}, {{"causal", "1"}});
  std::vector<float> lse(12);
  family().fill_input(problem, 5, {}, std::as_writable_bytes(std::span(lse)));
  for (int head = 0; head < 2; ++head)
    for (int row = 0; row < 6; ++row) {
      const float value = lse[static_cast<std::size_t>(head * 6 + row)];
      const int visible = std::max(0, row - 2 + 1);  // 6 queries over 4 keys, bottom-right
      if (visible == 0) {
        EXPECT_EQ(value, -INFINITY) << row;
        continue;
      }
      EXPECT_NEAR(value, std::log(visible) + 0.5, 0.25 + 1e-6) << row;
    }
  EXPECT_NE(lse[2], lse[8]);  // the same row of the two heads
}

TEST(AttentionBackwardFamily, DefaultIsTheWgmmaKernelOnSm90FromHeadDim72To128) {
  const DeviceTarget sm90 = DeviceTarget::assumed_for_arch("sm_90a");
  EXPECT_EQ(family().default_config(attention_backward({4, 16, 4096, 128}), sm90).at("variant"), 1);
  EXPECT_EQ(family().default_config(attention_backward({4, 16, 4096, 72}), sm90).at("variant"), 1);
  EXPECT_EQ(family().default_config(attention_backward({4, 16, 4096, 64}), sm90).at("variant"), 0);
  EXPECT_EQ(family().default_config(attention_backward({4, 16, 4096, 192}), sm90).at("variant"), 0);
  EXPECT_EQ(family().default_config(attention_backward({4, 16, 4096, 128}), DeviceTarget::assumed_for_arch("sm_80"))
                .at("variant"),
            0);
}

TEST(AttentionBackwardFamily, EveryHeadDimHasAValidDefaultOnEveryArch) {
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const DeviceTarget device = DeviceTarget::assumed_for_arch(arch);
    for (int d = 8; d <= 256; d += 8)
      for (const char* causal : {"0", "1"}) {
        ProblemOptions options;
        if (std::string(causal) == "1") options["causal"] = "1";
        const Problem problem = attention_backward({2, 4, 333, d}, options);
        const Config config = family().default_config(problem, device);
        EXPECT_FALSE(family().reject(config, problem, device).has_value())
            << arch << " " << problem.key() << " [" << config.text() << "]";
      }
  }
}

Config backward_config(int block_m, int warps, int key_tiles, int d_split, int stages = 2) {
  return Config{{{"variant", 0}, {"block_m", block_m}, {"warps", warps}, {"key_tiles", key_tiles},
                 {"d_split", d_split}, {"stages", stages}, {"tile_order", 0}}};
}

TEST(AttentionBackwardFamily, RejectsWhatWouldSpillOrOverflowSharedMemory) {
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem d128 = attention_backward({1, 1, 4096, 128}), d256 = attention_backward({1, 1, 4096, 256});
  EXPECT_FALSE(family().reject(backward_config(64, 8, 1, 1), d128, device).has_value());
  // 128 keys x 2 tiles of dK and dV, and 2 x 64 of S^T and dP^T: 384 accumulators.
  EXPECT_TRUE(family().reject(backward_config(64, 8, 2, 1), d128, device).has_value());
  EXPECT_TRUE(family().reject(backward_config(32, 8, 1, 1), d256, device).has_value());
  EXPECT_FALSE(family().reject(backward_config(32, 8, 1, 2), d256, device).has_value());
  // 3 stages of 128 rows of Q and dO, 272 bytes each: past 227 KB.
  EXPECT_TRUE(family().reject(backward_config(128, 8, 1, 2, 3), d128, device).has_value());
  EXPECT_FALSE(family().reject(backward_config(128, 8, 1, 2, 2), d128, device).has_value());
  Config foreign = backward_config(64, 8, 1, 1);
  foreign.values["block_n"] = 64;
  EXPECT_TRUE(family().reject(foreign, d128, device).has_value());
}

TEST(AttentionBackwardFamily, PlanPreparesRunsAndFinishesOverOneWorkspace) {
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000,
                                                0x6000, 0x7000, 0x8000, 0x9000};
  const Problem problem = attention_backward({2, 8, 2, 100, 300, 72}, {{"layout", "bhsd"}});
  const Config config = backward_config(32, 8, 1, 2);
  ASSERT_FALSE(family().reject(config, problem, device).has_value());
  const std::size_t rows = 2 * 8 * 100;
  // delta and the logsumexp in log2 units, then an accumulator row of 96 floats (72 rounded
  // up to 16 x d_split) per query row.
  EXPECT_EQ(family().workspace_bytes(config, problem, device), 2 * rows * 4 + rows * 96 * 4);
  CallScalars scalars;
  scalars.softmax_scale = 0.25;
  scalars.row_strides[6] = 256;  // dQ's rows inside a wider tensor
  const LaunchPlan plan = family().plan(config, problem, device, addresses, 0x100000, scalars);
  ASSERT_EQ(plan.step_count, 3);
  // prepare, the main kernel (the config's first), finish.
  EXPECT_EQ(plan.steps[0].kernel, 1);
  EXPECT_EQ(plan.steps[1].kernel, 0);
  EXPECT_EQ(plan.steps[2].kernel, 2);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], rows / 8);
  EXPECT_EQ(plan.steps[1].geometry.grid[0], (300u + 63) / 64);  // 4 key ranges of 16 keys
  EXPECT_EQ(plan.steps[1].geometry.grid[1], 2u * 2);
  EXPECT_EQ(plan.steps[1].geometry.block[0], 256u);
  AttentionBackwardParams p;
  ASSERT_EQ(plan.steps[1].args.size, sizeof p);
  std::memcpy(&p, plan.steps[1].args.bytes.data(), sizeof p);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.fwd.lse), 0x6000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.d_o), 0x5000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.dv), 0x9000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.delta), 0x100000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.lse_log2), 0x100000u + rows * 4);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.dq_accumulator), 0x100000u + 2 * rows * 4);
  EXPECT_EQ(p.dq_pitch, 96);
  EXPECT_EQ(p.dq_strides.row, 256);
  EXPECT_EQ(p.do_strides.head, 100 * 72);
  EXPECT_EQ(p.dk_strides.head, 300 * 72);
  EXPECT_FLOAT_EQ(p.fwd.scale, 0.25f);
  EXPECT_EQ(std::memcmp(plan.steps[0].args.bytes.data(), plan.steps[1].args.bytes.data(), sizeof p), 0);
}

// The wgmma variant: a producer and two consumer warpgroups over 128 keys, Q, K, V and dO as 4D
// tensor maps, the workspace's rows padded to whole 64-row query blocks and dQ's accumulator
// transposed, finished a CTA per 64 rows.
TEST(AttentionBackwardFamily, WgmmaPlanAsksForTensorMapsAndATransposedAccumulator) {
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000, 0x4000, 0x5000,
                                                0x6000, 0x7000, 0x8000, 0x9000};
  const Problem problem = attention_backward({2, 8, 2, 100, 300, 72});
  const Config config{{{"variant", 1}, {"block_m", 64}, {"stages", 3}, {"tile_order", 0}}};
  ASSERT_FALSE(family().reject(config, problem, device).has_value());
  const std::size_t rows = 2 * 8 * 128;  // 100 rows padded to 128
  EXPECT_EQ(family().workspace_bytes(config, problem, device), 2 * rows * 4 + rows * 128 * 4);
  const LaunchPlan plan = family().plan(config, problem, device, addresses, 0x100000, CallScalars{});
  ASSERT_EQ(plan.step_count, 3);
  const LaunchStep& main = plan.steps[1];
  EXPECT_EQ(main.kernel, 0);
  EXPECT_EQ(main.geometry.block[0], 384u);
  EXPECT_EQ(main.geometry.grid[0], 3u);  // 300 keys, 128 a CTA
  EXPECT_EQ(main.geometry.grid[1], 4u);
  ASSERT_EQ(main.args.tensor_map_count, 4);
  EXPECT_EQ(main.args.tensor_maps[0].address, 0x1000u);
  EXPECT_EQ(main.args.tensor_maps[0].box[1], 64u);
  EXPECT_EQ(main.args.tensor_maps[1].dims[1], 300u);
  EXPECT_EQ(main.args.tensor_maps[1].box[1], 128u);
  EXPECT_EQ(main.args.tensor_maps[3].address, 0x5000u);  // dO
  AttentionBackwardSm90Params wide;
  std::memcpy(&wide, main.args.bytes.data(), sizeof wide);
  EXPECT_EQ(wide.p.rows_pitch, 128);
  EXPECT_EQ(wide.p.dq_pitch, 128);  // head dim 72 runs as two 64-column panels
  EXPECT_EQ(wide.p.dq_transposed, 1);
  EXPECT_EQ(plan.steps[2].kernel, 2);
  EXPECT_EQ(plan.steps[2].geometry.grid[0], 2u);
  EXPECT_EQ(plan.steps[2].geometry.grid[1], 16u);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], rows / 8);
  // sm_80 has no wgmma; its registers hold dK and dV of head dims up to 128.
  EXPECT_TRUE(family().reject(config, problem, DeviceTarget::assumed_for_arch("sm_80")).has_value());
  EXPECT_TRUE(family().reject(config, attention_backward({1, 2, 512, 136}), device).has_value());
  EXPECT_FALSE(family().reject(config, attention_backward({1, 2, 512, 128}), device).has_value());
  // 128 queries a step: up to head dim 64, rows padded to 128.
  Config tall = config;
  tall.values["block_m"] = 128;
  EXPECT_TRUE(family().reject(tall, problem, device).has_value());
  const Problem d64 = attention_backward({2, 8, 2, 100, 300, 64});
  ASSERT_FALSE(family().reject(tall, d64, device).has_value());
  EXPECT_EQ(family().workspace_bytes(tall, d64, device), 2 * rows * 4 + rows * 64 * 4);
  EXPECT_EQ(family().plan(tall, d64, device, addresses, 0x100000, CallScalars{}).steps[1].args.tensor_maps[0].box[1],
            128u);
}

// One query, two keys, head dim 8, by hand: S = 0 for both keys, so with lse = log 2 each
// probability is 1/2; dO = 1 and O = 0 make delta 0 and dP = the sum of V's row.
TEST(AttentionBackwardFamily, CpuReferenceByHand) {
  const Problem problem = attention_backward({1, 1, 1, 1, 2, 8});
  std::vector<double> q(8, 0.0), k(16), v(16), o(8, 0.0), d_o(8, 1.0), lse = {std::log(2.0)};
  for (int d = 0; d < 8; ++d) {
    k[d] = d;
    k[8 + d] = 1;
    v[d] = 1;       // dP = 8
    v[8 + d] = -1;  // dP = -8
  }
  const std::vector<double> out = family().reference_cpu(problem, {q, k, v, o, d_o, lse});
  ASSERT_EQ(out.size(), 8u + 16 + 16);
  const double scale = 1 / std::sqrt(8.0);
  for (int d = 0; d < 8; ++d) {
    // dS = (1/2) 8 and (1/2)(-8): dQ = scale (4 k0 - 4 k1).
    EXPECT_NEAR(out[d], scale * (4.0 * d - 4.0), 1e-12);
    EXPECT_NEAR(out[8 + d], 0.0, 1e-12);  // dK = scale dS^T Q, Q = 0
    EXPECT_NEAR(out[24 + d], 0.5, 1e-12);  // dV = P^T dO
    EXPECT_NEAR(out[32 + d], 0.5, 1e-12);
  }
}

TEST(AttentionBackwardFamily, WorkIsTwoAndAHalfForwards) {
  EXPECT_DOUBLE_EQ(family().work(attention_backward({2, 3, 10, 64})).flops, 10.0 * 6 * 100 * 64);
  EXPECT_DOUBLE_EQ(family().work(attention_backward({1, 1, 1, 4, 6, 64}, {{"causal", "1"}})).flops,
                   10.0 * 18 * 64);
}

// A sample over head dims, dtypes and options: each compiles without spills or ptxas warnings,
// the mma.sync configs for sm_80 and sm_90a, the wgmma ones for sm_90a (without wgmmas
// serialized either).
// What users run untuned: the defaults of the benchmark's cases. The mma.sync defaults at the
// register limit (the sweeps' fastest: head dims 96 and 128, and 32 queries a step over two key
// tiles at S512) spill a few bytes; no more than 16.
TEST(AttentionBackwardFamily, DefaultsOfTheBenchmarkCasesCompileCleanly) {
  testing::expect_clean_defaults(family(),
                                 testing::benchmark_attention_problems("attention_backward"),
                                 {"sm_80", "sm_90a"}, 16);
}

TEST(AttentionBackwardFamily, SampledConfigsCompileWithoutSpills) {
  struct Case {
    Problem problem;
    std::map<std::string, int> config;  // over the default
  };
  const std::vector<Case> cases = {
      {attention_backward({4, 16, 4096, 128}), {{"block_m", 32}}},
      {attention_backward({4, 16, 4096, 64}, {{"causal", "1"}}), {{"tile_order", 1}, {"key_tiles", 1}, {"block_m", 64}}},
      {attention_backward({2, 8, 2, 100, 3000, 64}, {}, DType::f16), {}},
      {attention_backward({1, 4, 300, 256}, {{"layout", "bhsd"}}), {}},
      {attention_backward({1, 4, 300, 192}), {{"warps", 4}, {"stages", 3}}},
      {attention_backward({1, 4, 300, 72}, {{"causal", "1"}}), {{"d_split", 2}}},
      {attention_backward({3, 2, 17, 8}, {}, DType::f16), {{"block_m", 128}, {"warps", 4}, {"key_tiles", 1}}},
  };
  struct WgmmaCase {
    Problem problem;
    int block_m, stages;
  };
  const std::vector<WgmmaCase> wgmma_cases = {
      {attention_backward({4, 16, 4096, 128}), 64, 2},
      {attention_backward({4, 16, 4096, 64}, {{"causal", "1"}}), 64, 4},
      {attention_backward({4, 16, 4096, 64}), 128, 3},
      {attention_backward({1, 4, 300, 72}, {{"layout", "bhsd"}}, DType::f16), 64, 3}};
  for (const WgmmaCase& c : wgmma_cases) {
    const Config config{{{"variant", 1}, {"block_m", c.block_m}, {"stages", c.stages}, {"tile_order", 1}}};
    const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
    ASSERT_FALSE(family().reject(config, c.problem, device).has_value()) << c.problem.key();
    testing::expect_clean_compile(family(), config, c.problem, "sm_90a");
  }
  for (const char* arch : {"sm_80", "sm_90a"}) {
    const DeviceTarget device = DeviceTarget::assumed_for_arch(arch);
    for (const Case& c : cases) {  // mma.sync configs on both architectures
      Config config = family().default_config(c.problem, DeviceTarget::assumed_for_arch("sm_80"));
      for (const auto& [name, value] : c.config) config.values[name] = value;
      ASSERT_FALSE(family().reject(config, c.problem, device).has_value())
          << c.problem.key() << " [" << config.text() << "]: " << *family().reject(config, c.problem, device);
      testing::expect_clean_compile(family(), config, c.problem, arch);
    }
  }
}

}  // namespace
}  // namespace tilesmith
