// The tuner end to end on the GPU: faults and hangs are recorded and the sweep completes; a
// real matmul sweep stores verified winners the runtime then uses; sweeps resume.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "driver/cuda_driver.hpp"
#include "generator/compiled_kernel.hpp"
#include "support/probe_family.hpp"
#include "support/test_support.hpp"
#include "templates/registry.hpp"
#include "tilesmith/runtime.hpp"
#include "tuner/search_strategy.hpp"
#include "tuner/sweep.hpp"

namespace tilesmith {
namespace {

using cache::TrialStatus;
using testing::TempDir;

std::map<int, std::vector<TrialStatus>> statuses_by_behavior(const std::vector<cache::Trial>& trials) {
  std::map<int, std::vector<TrialStatus>> by_behavior;
  for (const cache::Trial& trial : trials)
    by_behavior[trial.config.at("behavior")].push_back(trial.status);
  return by_behavior;
}

TEST(GpuSweep, FaultingAndHangingCandidatesAreRecordedAndTheSweepCompletes) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  cache::Database db(dir.file("tune.db"));
  const Family& family = find_family("probe");
  Problem problem{"probe", DType::f32, DType::f32, {100003}};
  tuner::SweepOptions options;
  options.candidate_timeout_s = 5;
  options.compile_processes = 2;
  tuner::SweepReport report = tuner::run_sweep(family, problem, db, options);

  ASSERT_TRUE(report.timed);
  EXPECT_EQ(report.progress.done, 8);
  EXPECT_EQ(report.progress.ok, 2);
  EXPECT_EQ(report.progress.failed, 6);
  cache::TrialKey key{report.gpu_model, problem, template_hash(family)};
  auto by_behavior = statuses_by_behavior(db.trials(key));
  using testing::kCorrect, testing::kFault, testing::kHang, testing::kWrong;
  EXPECT_EQ(by_behavior[kCorrect], (std::vector<TrialStatus>{TrialStatus::ok, TrialStatus::ok}));
  EXPECT_EQ(by_behavior[kFault], (std::vector<TrialStatus>{TrialStatus::fault, TrialStatus::fault}));
  EXPECT_EQ(by_behavior[kHang], (std::vector<TrialStatus>{TrialStatus::timeout, TrialStatus::timeout}));
  EXPECT_EQ(by_behavior[kWrong], (std::vector<TrialStatus>{TrialStatus::wrong, TrialStatus::wrong}));
  for (const cache::Trial& trial : db.trials(key)) {
    if (trial.status != TrialStatus::ok) {
      EXPECT_FALSE(trial.detail.empty()) << trial.config.text();
    }
  }
  ASSERT_TRUE(report.winner);
  EXPECT_EQ(report.winner->config.at("behavior"), kCorrect);
}

// Configs near the best are timed again together, interleaved, and the winner is decided by
// those timings: two copy kernels that differ only in their block size. The margin is widened
// to take both whatever their distance: on the H100 the 128-thread block measures about 1.5x
// the 256-thread one's 0.055 ms (1.51x when a margin of 50% left it out).
TEST(GpuSweep, ConfigsNearTheBestAreTimedAgainTogetherBeforeTheWinnerIsDecided) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  cache::Database db(dir.file("tune.db"));
  const Family& family = find_family("probe");
  Problem problem{"probe", DType::f32, DType::f32, {1 << 24}};  // 128 MB moved: a steady time
  tuner::SweepOptions options;
  options.compile_processes = 2;
  options.only = Config{{{"behavior", testing::kCorrect}}};
  options.finalist_margin = 3.0;
  const tuner::SweepReport report = tuner::run_sweep(family, problem, db, options);
  ASSERT_EQ(report.progress.ok, 2);
  ASSERT_TRUE(report.finalists_error.empty()) << report.finalists_error;
  cache::TrialKey trials_key{report.gpu_model, problem, template_hash(family)};
  std::string first_pass;
  for (const cache::Trial& trial : db.trials(trials_key))
    first_pass += " " + trial.config.text() + ": " + std::to_string(trial.median_ms) + " ms;";
  ASSERT_EQ(report.finalists.size(), 2u) << "first pass:" << first_pass;
  ASSERT_TRUE(report.winner);
  cache::TrialKey key{report.gpu_model, problem, template_hash(family)};
  // The first pass's best keeps its median; the other finalist is placed by the ratio of the
  // two timed together; the winner is the faster of them timed together.
  const tuner::Finalist& first = report.finalists[0];
  const tuner::Finalist& second = report.finalists[1];
  EXPECT_LE(first.before_ms, second.before_ms);
  EXPECT_DOUBLE_EQ(first.recorded_ms, first.before_ms);
  EXPECT_NEAR(second.recorded_ms / first.recorded_ms, second.together_ms / first.together_ms, 1e-9);
  for (const tuner::Finalist& f : report.finalists) {
    EXPECT_GT(f.together_ms, 0);
    EXPECT_GE(f.rounds, 20);
    for (const cache::Trial& trial : db.trials(key))
      if (trial.config.text() == f.config) EXPECT_DOUBLE_EQ(trial.median_ms, f.recorded_ms) << f.config;
  }
  const tuner::Finalist& faster = first.together_ms <= second.together_ms ? first : second;
  EXPECT_EQ(report.winner->config.text(), faster.config);
  EXPECT_DOUBLE_EQ(report.winner->median_ms, faster.recorded_ms);
}

TEST(GpuSweep, MatmulWinnerIsStoredAndUsedByTheRuntimeWithoutNvrtc) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Problem problem{"matmul", DType::bf16, DType::bf16, {1000, 1000, 1000}};
  const Family& family = find_family("matmul");
  tuner::SweepOptions options;
  options.strategy = "random";
  options.max_candidates = 10;
  tuner::SweepReport report;
  {
    cache::Database db(dir.file("tune.db"));
    report = tuner::run_sweep(family, problem, db, options);
    EXPECT_EQ(report.progress.done, 10);
    EXPECT_EQ(report.progress.failed, 0) << "every matmul candidate must verify";
    ASSERT_TRUE(report.winner);
    EXPECT_GT(report.winner_tflops, 1.0);
    cache::TrialKey key{report.gpu_model, problem, template_hash(family)};
    for (const cache::Trial& trial : db.trials(key)) {
      if (trial.status != TrialStatus::ok) continue;
      EXPECT_LT(trial.rel_error, 1e-2);
      EXPECT_GT(trial.repetitions, 0);
      EXPECT_GE(trial.median_ms, report.winner->median_ms);
    }
  }
  Runtime runtime({dir.file("tune.db"), 0});
  MatmulArgs args;
  args.m = args.n = args.k = 1000;
  DispatchInfo info = runtime.describe_matmul(args);
  EXPECT_EQ(info.source, KernelSource::database_winner);
  EXPECT_TRUE(info.tuned);
  EXPECT_EQ(info.config, report.winner->config.text());
  EXPECT_EQ(runtime.compilations(), 0) << "the winner's cubin is in the database";
}

TEST(GpuSweep, ResumeSkipsFinishedTrialsAndNeverRetriesOneThatDiedRunning) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  cache::Database db(dir.file("tune.db"));
  Problem problem{"matmul", DType::f16, DType::f16, {256, 256, 256}};
  const Family& family = find_family("matmul");
  tuner::SweepOptions options;
  options.max_candidates = 4;
  tuner::SweepReport first = tuner::run_sweep(family, problem, db, options);
  EXPECT_EQ(first.progress.done, 4);

  // Simulate a sweep that died mid-candidate: a trial left running.
  cache::TrialKey key{first.gpu_model, problem, template_hash(family)};
  cache::Trial crashed;
  std::vector<Config> remaining;
  for (const Config& config : family.enumerate())
    if (!family.reject(config, problem, driver::describe_device(0))) remaining.push_back(config);
  ASSERT_FALSE(remaining.empty());
  crashed.config = remaining.back();
  // It died with this machine's toolchain: a trial counts as done only for the toolchain that
  // ran it, and the sweep's own trials carry theirs.
  crashed.toolchain = {driver::driver_version(), nvrtc_version()};
  db.start_trial(key, crashed);

  tuner::SweepReport second = tuner::run_sweep(family, problem, db, options);
  EXPECT_EQ(second.skipped_done, 5);  // four finished, one abandoned
  EXPECT_EQ(second.abandoned, 1);
  EXPECT_EQ(second.progress.done, 4);
  int abandoned = 0;
  for (const cache::Trial& trial : db.trials(key)) {
    EXPECT_NE(trial.status, TrialStatus::running);
    if (trial.status == TrialStatus::abandoned) ++abandoned;
  }
  EXPECT_EQ(abandoned, 1);
  EXPECT_EQ(static_cast<int>(db.trials(key).size()), 9);
}

}  // namespace
}  // namespace tilesmith
