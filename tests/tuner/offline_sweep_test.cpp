// A sweep without a GPU: the pruned space is rendered and compiled for the offline architecture,
// nothing is timed and nothing is written to the database.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cache/database.hpp"
#include "driver/cuda_driver.hpp"
#include "generator/compiled_kernel.hpp"
#include "support/test_support.hpp"
#include "templates/registry.hpp"
#include "tuner/sweep.hpp"

namespace tilesmith::tuner {
namespace {

#define SKIP_IF_GPU_PRESENT()                                                           \
  do {                                                                                  \
    if (::tilesmith::driver::gpu_available())                                           \
      GTEST_SKIP() << "a GPU is present: the offline (compile-only) path is not taken"; \
  } while (0)

Problem problem_1000_bf16() {
  return Problem{"matmul", DType::bf16, DType::bf16, {1000, 1000, 1000}};
}

// Configs the sweep prunes: those reject() refuses, and those the family's walk of its space
// left out (never listed).
int pruned_count(const Family& family, const Problem& problem, const DeviceTarget& device) {
  const std::vector<Config> listed = family.enumerate();
  int pruned = static_cast<int>(family.space_size() - listed.size());
  for (const Config& config : listed)
    if (family.reject(config, problem, device)) ++pruned;
  return pruned;
}

TEST(OfflineSweepTest, CompilesABudgetOfCandidatesAndRecordsNothing) {
  SKIP_IF_GPU_PRESENT();
  const Family& family = find_family("matmul");
  const Problem problem = problem_1000_bf16();
  tilesmith::testing::TempDir dir;
  cache::Database db(dir.file("sweep.db"));

  SweepOptions options;
  options.max_candidates = 6;
  options.compile_processes = 2;
  std::vector<Progress> updates;
  SweepReport report =
      run_sweep(family, problem, db, options, [&](const Progress& p) { updates.push_back(p); });

  EXPECT_FALSE(report.timed);
  EXPECT_NE(report.no_gpu_reason.find("no CUDA driver/GPU found"), std::string::npos)
      << report.no_gpu_reason;
  EXPECT_TRUE(report.gpu_model.empty()) << report.gpu_model;
  EXPECT_EQ(report.problem.key(), problem.key());

  EXPECT_EQ(report.space_size, static_cast<int>(family.space_size()));
  EXPECT_GT(report.pruned, 0);
  EXPECT_EQ(report.pruned,
            pruned_count(family, problem, DeviceTarget::assumed_for_arch(options.offline_arch)));
  EXPECT_EQ(report.skipped_done, 0);
  EXPECT_EQ(report.abandoned, 0);

  // Configs with the same kernels share one compile, in flight or stored by then
  // (ConfigsWithTheSameKernelsAreCompiledOnce).
  EXPECT_EQ(report.resources.compiled + report.resources.shared + report.resources.reused, 6);
  EXPECT_GT(report.resources.compiled, 0);
  EXPECT_EQ(report.compile_failed, 0);
  EXPECT_GT(report.resources.min_registers, 0);
  EXPECT_GE(report.resources.max_registers, report.resources.min_registers);
  EXPECT_LE(report.resources.max_registers, 255);
  EXPECT_TRUE(report.resources.spilling.empty()) << report.resources.spilling.front();
  EXPECT_GT(report.resources.compile_seconds_total, 0);
  EXPECT_GT(report.resources.wall_seconds, 0);

  EXPECT_EQ(report.progress.total, 6);
  EXPECT_EQ(report.progress.done, 6);
  EXPECT_EQ(report.progress.failed, 0);
  EXPECT_EQ(report.progress.best_ms, 0) << "nothing was timed";

  // One progress callback per candidate, counting up; six distinct configs.
  ASSERT_EQ(updates.size(), 6u);
  std::set<std::string> configs;
  for (std::size_t i = 0; i < updates.size(); ++i) {
    EXPECT_EQ(updates[i].done, static_cast<int>(i) + 1);
    configs.insert(updates[i].last_config);
  }
  EXPECT_EQ(configs.size(), 6u);

  EXPECT_FALSE(report.winner.has_value());
  EXPECT_EQ(report.winner_tflops, 0);
  EXPECT_TRUE(db.winners().empty());
  EXPECT_TRUE(db.gpus().empty()) << "no GPU was seen";
  cache::TrialKey key{"", problem, template_hash(family)};
  EXPECT_TRUE(db.trials(key).empty());
}

// The first proposal (the family's default) is taken before any other, whichever compiles first:
// with a GPU it is timed first, so a budget that runs out early has measured the config the
// untuned runtime would use. Here the default takes seconds to compile and the others
// milliseconds, so they all finish compiling before it.
TEST(OfflineSweepTest, TheDefaultComesFirstEvenWhenItCompilesLast) {
  SKIP_IF_GPU_PRESENT();
  const Family& family = find_family("probe_slow_default");
  const Problem problem{"probe_slow_default", DType::f32, DType::f32, {1000}};
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_80");
  const Config slow = family.default_config(problem, device);
  ASSERT_EQ(slow.at("slow"), 1);
  Config fast = slow;
  fast.values["slow"] = 0;
  auto seconds_to_compile = [&](const Config& config) {
    const auto start = std::chrono::steady_clock::now();
    compile(render(family, config, problem), SweepOptions{}.offline_arch);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // The premise: the default compiles last by a wide margin.
  ASSERT_GT(seconds_to_compile(slow), 4 * seconds_to_compile(fast));

  tilesmith::testing::TempDir dir;
  cache::Database db(dir.file("sweep.db"));
  SweepOptions options;
  options.max_candidates = 4;
  options.compile_processes = 4;
  options.strategy = "random";
  std::vector<std::string> order;
  run_sweep(family, problem, db, options, [&](const Progress& p) { order.push_back(p.last_config); });
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0], slow.text());
}

TEST(OfflineSweepTest, RejectsAProblemTheFamilyCannotExpress) {
  SKIP_IF_GPU_PRESENT();
  tilesmith::testing::TempDir dir;
  cache::Database db(dir.file("sweep.db"));
  Problem two_dimensions{"matmul", DType::bf16, DType::bf16, {64, 64}};
  SweepOptions options;
  options.max_candidates = 1;
  options.compile_processes = 1;
  EXPECT_THROW(run_sweep(find_family("matmul"), two_dimensions, db, options), Error);
}

// --shard i/N: the shards of a space are disjoint and together cover it, the same on every host.
// How the shards split the valid configs: ShardOf.*.
TEST(OfflineSweepTest, ShardsSplitTheSpaceDisjointlyAndCoverIt) {
  SKIP_IF_GPU_PRESENT();
  const Family& family = find_family("matmul");
  const Problem problem = problem_1000_bf16();
  tilesmith::testing::TempDir dir;
  cache::Database db(dir.file("sweep.db"));
  SweepOptions options;
  options.max_candidates = 1;
  options.compile_processes = 1;
  const SweepReport whole = run_sweep(family, problem, db, options);
  const int candidates = whole.space_size - whole.pruned;
  int shard_candidates = 0;
  options.shard_count = 3;
  for (int index = 0; index < 3; ++index) {
    options.shard_index = index;
    const SweepReport shard = run_sweep(family, problem, db, options);
    EXPECT_EQ(shard.space_size, whole.space_size);
    EXPECT_EQ(shard.pruned, whole.pruned);
    const int own = shard.space_size - shard.other_shards - shard.pruned;
    EXPECT_GT(own, 0);
    shard_candidates += own;
  }
  EXPECT_EQ(shard_candidates, candidates);
  options.shard_index = 3;
  EXPECT_THROW(run_sweep(family, problem, db, options), InvalidArgument);
}

// The slice of the GPU run where a split of the whole enumeration gave one of two shards every
// config, and where pairs of configs share a kernel (group_m): each shard gets its own kernels,
// as many as the others within one, and all the configs of each.
TEST(ShardOf, DealsOutKernelsNotConfigs) {
  const Family& family = find_family("matmul");
  const Problem problem{"matmul", DType::bf16, DType::bf16, {2048, 2048, 2048}};
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  std::vector<Config> valid;
  for (const Config& config : family.enumerate())
    if (config.at("variant") == 1 && config.at("block_m") == 128 && config.at("block_n") == 128 &&
        !family.reject(config, problem, device))
      valid.push_back(config);
  ASSERT_GT(valid.size(), 8u);
  std::map<std::vector<std::string>, int> shard_of_kernels;
  std::map<int, std::set<std::vector<std::string>>> kernels_of_shard;
  std::size_t covered = 0;
  for (int index = 0; index < 3; ++index) {
    const std::vector<Config> shard = shard_of(family, problem, valid, index, 3);
    covered += shard.size();
    for (const Config& config : shard) {
      const std::vector<std::string> kernels = family.kernel_expressions(config, problem);
      const auto [it, fresh] = shard_of_kernels.try_emplace(kernels, index);
      EXPECT_EQ(it->second, index) << "a kernel in two shards: " << config.text();
      kernels_of_shard[index].insert(kernels);
    }
  }
  EXPECT_EQ(covered, valid.size());
  EXPECT_LT(shard_of_kernels.size(), valid.size()) << "configs share kernels (group_m)";
  for (int index = 0; index < 3; ++index)
    EXPECT_LE(std::abs(static_cast<int>(kernels_of_shard[index].size()) -
                       static_cast<int>(shard_of_kernels.size()) / 3),
              1);
  EXPECT_THROW(shard_of(family, problem, valid, 3, 3), InvalidArgument);
  EXPECT_THROW(shard_of(family, problem, valid, 0, 0), InvalidArgument);
}

// The model-guided strategy reads its prior, the trials of the op's other shapes, from the
// database: a sweep with it runs over a database holding some, and proposes the family's default
// first as every strategy does.
TEST(OfflineSweepTest, TheModelStrategyStartsFromOtherShapesTrials) {
  SKIP_IF_GPU_PRESENT();
  const Family& family = find_family("matmul");
  tilesmith::testing::TempDir dir;
  cache::Database db(dir.file("sweep.db"));
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  db.record_gpu(device, {"13.0", "13.0"});
  const Problem other{"matmul", DType::bf16, DType::bf16, {2048, 2048, 2048}};
  const cache::TrialKey key{device.model_key(), other, template_hash(family)};
  int recorded = 0;
  for (const Config& config : family.enumerate()) {
    if (family.reject(config, other, device) || ++recorded > 40) continue;
    cache::Trial trial;
    trial.config = config;
    trial.source_hash = "src" + config.text();
    trial.status = cache::TrialStatus::ok;
    trial.median_ms = trial.min_ms = 0.1 + 0.001 * recorded;
    trial.repetitions = 10;
    db.record_trial(key, trial);
  }
  SweepOptions options;
  options.strategy = "model";
  options.max_candidates = 1;
  options.compile_processes = 1;
  const SweepReport report = run_sweep(family, problem_1000_bf16(), db, options);
  EXPECT_EQ(report.resources.compiled + report.resources.reused + report.compile_failed, 1);
}

// --only k=v,...: the configs with those values and no others (here one template of the
// family); a parameter or value the family does not have is an error, not an empty sweep.
// Configs that differ only in kernel arguments (here group_m, the tile order) render the same
// kernels: a sweep compiles them once, and a later sweep of another shape with the same
// alignment takes the stored cubin for both.
TEST(OfflineSweepTest, ConfigsWithTheSameKernelsAreCompiledOnce) {
  SKIP_IF_GPU_PRESENT();
  const Family& family = find_family("matmul");
  tilesmith::testing::TempDir dir;
  cache::Database db(dir.file("sweep.db"));
  SweepOptions options;
  options.compile_processes = 2;
  options.only =
      Config::parse("variant=0,block_m=64,block_n=64,block_k=32,warps_m=2,warps_n=2,stages=3");
  const SweepReport first = run_sweep(family, problem_1000_bf16(), db, options);
  EXPECT_EQ(first.progress.done, 2);  // group_m 1 and 8
  EXPECT_EQ(first.resources.compiled, 1);
  EXPECT_EQ(first.resources.shared, 1);
  EXPECT_EQ(first.resources.reused, 0);
  EXPECT_EQ(first.compile_failed, 0);
  const SweepReport second =
      run_sweep(family, Problem{"matmul", DType::bf16, DType::bf16, {2000, 1000, 3000}}, db, options);
  EXPECT_EQ(second.progress.done, 2);
  EXPECT_EQ(second.resources.compiled, 0);
  EXPECT_EQ(second.resources.reused, 2);
}

TEST(OfflineSweepTest, OnlyKeepsTheConfigsWithTheGivenValues) {
  SKIP_IF_GPU_PRESENT();
  const Family& family = find_family("matmul");
  const Problem decode{"matmul", DType::bf16, DType::bf16, {16, 4096, 4096}, {{"b", "col"}}};
  tilesmith::testing::TempDir dir;
  cache::Database db(dir.file("sweep.db"));
  SweepOptions options;
  options.max_candidates = 1;
  options.compile_processes = 1;
  options.only = Config::parse("variant=2,warps=4");
  const SweepReport report = run_sweep(family, decode, db, options);
  int wanted = 0, valid = 0;
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  for (const Config& config : family.enumerate())
    if (config.at("variant") == 2 && config.at("warps") == 4) {
      ++wanted;
      if (!family.reject(config, decode, device)) ++valid;
    }
  EXPECT_EQ(report.outside_only, report.space_size - wanted);
  EXPECT_EQ(report.space_size - report.outside_only - report.pruned, valid);
  EXPECT_GT(valid, 0);
  options.only = Config::parse("warps=3");
  EXPECT_THROW(run_sweep(family, decode, db, options), InvalidArgument);
  options.only = Config::parse("threads=4");
  EXPECT_THROW(run_sweep(family, decode, db, options), InvalidArgument);
}

}  // namespace
}  // namespace tilesmith::tuner
