// Sweeps on the GPU as a user runs them: interrupted while a candidate is being timed, and two
// sweeps of one problem at once on one database. The database is then checked as a whole.
#include <signal.h>
#include <sqlite3.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "support/cli_runner.hpp"
#include "support/test_support.hpp"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

namespace fs = std::filesystem;
using testing::CliProcess;
using testing::CliRun;
using testing::contains;

// The first column of every row of `sql`, as text; read-only, beside any running sweep.
std::vector<std::string> column(const fs::path& db, const std::string& sql) {
  std::vector<std::string> values;
  sqlite3* connection = nullptr;
  if (sqlite3_open_v2(db.c_str(), &connection, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    sqlite3_close(connection);
    return values;
  }
  sqlite3_busy_timeout(connection, 10000);
  sqlite3_stmt* statement = nullptr;
  if (sqlite3_prepare_v2(connection, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK)
    while (sqlite3_step(statement) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(statement, 0);
      values.push_back(text ? reinterpret_cast<const char*>(text) : "NULL");
    }
  sqlite3_finalize(statement);
  sqlite3_close(connection);
  return values;
}

std::string one(const fs::path& db, const std::string& sql) {
  std::vector<std::string> values = column(db, sql);
  return values.empty() ? "" : values[0];
}

// What every sweep must leave, however it ended: a sound file, no trial left running or
// wrongly abandoned, no config tried twice, and the fastest ok trial as the winner.
void expect_whole(const fs::path& db) {
  EXPECT_EQ(one(db, "PRAGMA integrity_check"), "ok");
  EXPECT_EQ(one(db, "SELECT count(*) FROM trials WHERE status = 'running'"), "0");
  EXPECT_EQ(one(db, "SELECT count(*) FROM trials WHERE status = 'abandoned'"), "0");
  EXPECT_TRUE(column(db, "SELECT config FROM trials GROUP BY problem_id, template_hash, config"
                         " HAVING count(*) > 1")
                  .empty());
  EXPECT_EQ(one(db, "SELECT count(*) FROM winners w WHERE w.median_ms > (SELECT min(median_ms)"
                    " FROM trials t WHERE t.status = 'ok' AND t.problem_id = w.problem_id"
                    " AND t.template_hash = w.template_hash)"),
            "0");
}

const std::vector<std::string> kTune = {"tune",     "--op",         "matmul",     "--dtype",
                                        "bf16",     "--shape",      "256x256x256", "--strategy",
                                        "exhaustive", "--budget",   "40"};

TEST(GpuCliSweep, InterruptedWhileTimingKeepsItsTrialsAndResumesWithTheCutOne) {
  TILESMITH_REQUIRE_GPU();
  testing::TempDir dir;
  const fs::path db = dir.file("sweep.db");
  std::vector<std::string> args = kTune;
  args.insert(args.end(), {"--db", db.string()});
  for (int signal : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(signal);
    CliProcess sweep(args, dir.path());
    std::string cut;  // the config on the GPU when the signal was sent
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (std::chrono::steady_clock::now() < deadline) {
      const std::string before = one(db, "SELECT count(*) FROM trials WHERE status = 'ok'");
      cut = one(db, "SELECT config FROM trials WHERE status = 'running'");
      if (!cut.empty() && !before.empty() && std::stoi(before) >= 3 * (signal == SIGINT ? 1 : 2))
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_FALSE(cut.empty()) << sweep.out_so_far();
    kill(sweep.pid(), signal);
    const CliRun stopped = sweep.wait();
    EXPECT_EQ(stopped.status, 128 + signal) << stopped.out << stopped.err;
    EXPECT_TRUE(contains(stopped.out, "stopped   interrupted by")) << stopped.out;
    expect_whole(db);
  }
  // The rerun, without a budget, completes the space from where the sweeps stopped: each
  // config once, the cut-off ones (withdrawn, not abandoned) included.
  const std::string done = one(db, "SELECT count(*) FROM trials");
  std::vector<std::string> complete(args.begin(), args.end() - 4);  // no --budget 40, no --db
  complete.insert(complete.end(), {"--db", db.string()});
  const CliRun rerun = testing::run_cli(complete, dir.path());
  ASSERT_EQ(rerun.status, 0) << rerun.out << rerun.err;
  EXPECT_TRUE(contains(rerun.out, ", " + done + " already in the database")) << rerun.out;
  expect_whole(db);
  const Family& family = find_family("matmul");
  const Problem problem{"matmul", DType::bf16, DType::bf16, {256, 256, 256}};
  int space = 0;
  for (const Config& config : family.enumerate())
    if (!family.reject(config, problem, driver::describe_device(0))) ++space;
  EXPECT_EQ(one(db, "SELECT count(*) FROM trials"), std::to_string(space));
}

TEST(GpuCliSweep, TwoSweepsOfOneProblemAtOnceShareTheWorkAndBothFinish) {
  TILESMITH_REQUIRE_GPU();
  testing::TempDir dir;
  const fs::path db = dir.file("sweep.db");
  std::vector<std::string> args = kTune;
  args.insert(args.end(), {"--db", db.string()});
  CliRun first, second;
  {
    testing::TempDir other;  // each process its own stdout and stderr files
    CliProcess a(args, dir.path()), b(args, other.path());
    first = a.wait();
    second = b.wait();
  }
  EXPECT_EQ(first.status, 0) << first.out << first.err;
  EXPECT_EQ(second.status, 0) << second.out << second.err;
  expect_whole(db);
  // Both walk the space in the same order, each up to 40 configs not done when it started. How
  // far they overlap depends on when the second process starts, which the test cannot set: one
  // may claim all 40 of the other's before it tries any (one sweep's trials, 40), or none of
  // them (80, on the H100 in 1 of 2 tries by hand: docs/perf/tuner.md). Either way no config
  // is tried twice, neither sweep takes more than its budget, and every config they share is
  // tried once, by whichever claimed it, which the other says.
  EXPECT_EQ(one(db, "SELECT count(*) - count(DISTINCT config) FROM trials"), "0");
  const int trials = std::stoi(one(db, "SELECT count(*) FROM trials"));
  EXPECT_GE(trials, 40);
  EXPECT_LE(trials, 80);
  EXPECT_EQ(one(db, "SELECT count(*) > 40 FROM trials GROUP BY sweep_id ORDER BY 1 DESC LIMIT 1"), "0");
  if (trials < 80)
    EXPECT_TRUE(contains(first.out + second.out, "tried by another sweep of this problem"))
        << first.out << second.out;
}

// --gpus all: every GPU of the host takes part in one sweep (the GPUs of a model split its space
// into shards), and a SIGTERM to the command stops every GPU's sweep, each as a single sweep
// stops; what the children did is kept, and the same command resumes.
TEST(GpuCliSweep, GpusAllSpreadsOneSweepAndStopsWithEveryGpusPart) {
  TILESMITH_REQUIRE_GPU();
  testing::TempDir dir;
  const fs::path db = dir.file("sweep.db");
  std::vector<std::string> args = kTune;
  args.insert(args.end(), {"--db", db.string(), "--gpus", "all"});
  const CliRun spread = testing::run_cli(args, dir.path());
  ASSERT_EQ(spread.status, 0) << spread.out << spread.err;
  expect_whole(db);
  EXPECT_EQ(one(db, "SELECT count(*) FROM trials"), "40") << "the budget is split, not multiplied";
  for (int ordinal = 0; ordinal < driver::device_count(); ++ordinal)
    EXPECT_TRUE(contains(spread.out, "[gpu " + std::to_string(ordinal) + "] ")) << spread.out;
  EXPECT_EQ(one(db, "SELECT count(DISTINCT sweep_id) FROM trials"),
            std::to_string(driver::device_count()));
  EXPECT_TRUE(contains(spread.out, "winners over the trials of every GPU:")) << spread.out;

  std::vector<std::string> whole(args.begin(), args.end());
  whole.erase(whole.begin() + 9, whole.begin() + 11);  // no --budget 40: the whole space
  const fs::path other = dir.file("other.db");
  whole[whole.size() - 3] = other.string();
  CliProcess sweep(whole, dir.path());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (std::chrono::steady_clock::now() < deadline &&
         std::stoi("0" + one(other, "SELECT count(*) FROM trials WHERE status = 'ok'")) < 3)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  kill(sweep.pid(), SIGTERM);
  const CliRun stopped = sweep.wait();
  EXPECT_EQ(stopped.status, 128 + SIGTERM) << stopped.out << stopped.err;
  EXPECT_TRUE(contains(stopped.out, "[gpu 0]   stopped   interrupted by SIGTERM")) << stopped.out;
  expect_whole(other);
  std::vector<std::string> resume = whole;
  resume.insert(resume.end(), {"--budget", "10"});
  const CliRun rerun = testing::run_cli(resume, dir.path());
  ASSERT_EQ(rerun.status, 0) << rerun.out << rerun.err;
  EXPECT_TRUE(contains(rerun.out, " already in the database")) << rerun.out;
  expect_whole(other);
  EXPECT_EQ(one(other, "SELECT count(*) - count(DISTINCT config) FROM trials"), "0");
}

// `tilesmith verify` checks the winners again on this GPU: a fresh winner passes; one whose
// recorded time is made a third of what it measured (as if the driver or clocks had since made
// it slower) fails, with exit status 1; the database is not written.
TEST(GpuCliSweep, VerifyPassesAFreshWinnerAndFlagsOneSlowerThanRecorded) {
  TILESMITH_REQUIRE_GPU();
  testing::TempDir dir;
  const fs::path db = dir.file("verify.db");
  const CliRun tuned = testing::run_cli({"tune", "--op", "matmul", "--dtype", "bf16", "--shape",
                                         "512x512x512", "--budget", "4", "--db", db.string()},
                                        dir.path());
  ASSERT_EQ(tuned.status, 0) << tuned.out << tuned.err;
  const CliRun fresh = testing::run_cli({"verify", "--db", db.string()}, dir.path());
  EXPECT_EQ(fresh.status, 0) << fresh.out << fresh.err;
  EXPECT_TRUE(contains(fresh.out, "1 of 1 winners passed")) << fresh.out;
  EXPECT_TRUE(contains(fresh.out, " ok")) << fresh.out;

  sqlite3* connection = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &connection), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(connection, "UPDATE winners SET median_ms = median_ms / 3, spread = 0",
                         nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(connection);
  const std::string before = one(db, "SELECT group_concat(median_ms) FROM winners");
  const CliRun slower = testing::run_cli({"verify", "--db", db.string()}, dir.path());
  EXPECT_EQ(slower.status, 1) << slower.out << slower.err;
  EXPECT_TRUE(contains(slower.out, "slower")) << slower.out;
  EXPECT_TRUE(contains(slower.out, "0 of 1 winners passed; 1 failed")) << slower.out;
  EXPECT_EQ(one(db, "SELECT group_concat(median_ms) FROM winners"), before);
}

}  // namespace
}  // namespace tilesmith
