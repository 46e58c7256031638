// Nothing lost, nothing overwritten: what `tilesmith` does with files, devices, output errors,
// read-only databases, interrupts and concurrent sweeps, run as a user (or a careless one) would.
#include <signal.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "cache/database.hpp"
#include "generator/rendered_source.hpp"
#include "support/cli_runner.hpp"
#include "support/matmul_configs.hpp"
#include "support/test_support.hpp"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

namespace fs = std::filesystem;
using testing::CliOptions;
using testing::CliProcess;
using testing::CliRun;
using testing::contains;
using testing::expect_error_line;
using testing::read_bytes;
using testing::running_as_root;

DeviceTarget some_gpu() {
  DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  device.name = "NVIDIA H100 80GB HBM3";
  return device;
}

// A tilesmith database with one current winner, as a sweep would leave it.
void seed(const fs::path& path) {
  cache::Database db(path);
  db.record_gpu(some_gpu(), {"13.0", "13.0"});
  const Problem problem{"matmul", DType::bf16, DType::bf16, {512, 256, 128}};
  const cache::TrialKey key{some_gpu().model_key(), problem, template_hash(find_family("matmul"))};
  cache::Trial trial;
  trial.config = testing::tile_config(128, 128, 32, 2, 2, 4);
  trial.source_hash = "source";
  trial.status = cache::TrialStatus::ok;
  trial.median_ms = trial.min_ms = 0.25;
  trial.repetitions = 20;
  trial.toolchain = {"13.0", "13.0"};
  db.record_trial(key, trial);
  ASSERT_TRUE(db.refresh_winner(key));
}

std::set<std::string> entries_of(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

bool is_winners_json(const std::string& text) {
  return contains(text, "\"tilesmith_export_version\": 1") && contains(text, "512");
}

class CliSafety : public ::testing::Test {
 protected:
  CliRun run(const std::vector<std::string>& args, const CliOptions& options = {}) {
    return testing::run_cli(args, dir_.path(), options);
  }
  // A folder this test's CLI runs cannot write: as root, the CLI runs as nobody (root's own
  // folders are 0755); otherwise the folder is made read-only (and writable again at the end).
  fs::path read_only_folder(const std::string& name) {
    const fs::path folder = dir_.file(name);
    fs::create_directory(folder);
    locked_.push_back(folder);
    return folder;
  }
  void lock_folders() {
    for (const fs::path& folder : locked_)
      fs::permissions(folder, running_as_root() ? fs::perms(0755) : fs::perms(0555));
  }
  CliOptions as_reader() const {
    CliOptions options;
    options.unprivileged = true;
    return options;
  }
  void TearDown() override {
    for (const fs::path& folder : locked_) fs::permissions(folder, fs::perms(0755));
  }
  void SetUp() override { fs::permissions(dir_.path(), fs::perms(0755)); }  // nobody may enter

  testing::TempDir dir_;
  std::vector<fs::path> locked_;
};

using CliExport = CliSafety;
using CliStdout = CliSafety;
using CliReadOnly = CliSafety;
using CliTuneInput = CliSafety;
using CliInterrupt = CliSafety;

// ---------------------------------------------------------------------------------------------
// export --out

TEST_F(CliExport, NeverOverwritesTheDatabaseItReadsNorAnotherUnlessForced) {
  const fs::path db = dir_.file("e.db"), other = dir_.file("other.db");
  seed(db);
  seed(other);
  const std::string db_bytes = read_bytes(db), other_bytes = read_bytes(other);
  for (const char* force : {"", "--force"}) {
    std::vector<std::string> args = {"export", "--db", db.string(), "--out", db.string()};
    if (*force) args.push_back(force);
    expect_error_line(run(args), "it is the database being read");
  }
  expect_error_line(run({"export", "--db", db.string(), "--out", other.string()}),
                    "it is an SQLite database");
  EXPECT_EQ(read_bytes(db), db_bytes);
  EXPECT_EQ(read_bytes(other), other_bytes);
  // --force replaces another database (never the one read) with the export.
  CliRun forced = run({"export", "--db", db.string(), "--out", other.string(), "--force"});
  ASSERT_EQ(forced.status, 0) << forced.err;
  EXPECT_TRUE(is_winners_json(read_bytes(other)));
  EXPECT_EQ(read_bytes(db), db_bytes);
  expect_error_line(run({"export", "--db", db.string(), "--out", ""}), "--out needs a file name");
  expect_error_line(run({"export", "--db", db.string(), "--force"}), "--force only applies");
}

TEST_F(CliExport, WritesThroughSymlinksDevicesAndPipes) {
  const fs::path db = dir_.file("e.db");
  seed(db);
  // A symlink: its target is written, the link stays a link; a dangling one gets its target.
  fs::create_symlink("target.json", dir_.file("link.json"));
  fs::create_symlink("made.json", dir_.file("dangling.json"));
  std::ofstream(dir_.file("target.json")) << "old";
  for (const char* name : {"link.json", "dangling.json"})
    ASSERT_EQ(run({"export", "--db", db.string(), "--out", dir_.file(name).string()}).status, 0);
  EXPECT_TRUE(fs::is_symlink(dir_.file("link.json")));
  EXPECT_TRUE(fs::is_symlink(dir_.file("dangling.json")));
  EXPECT_TRUE(is_winners_json(read_bytes(dir_.file("target.json"))));
  EXPECT_TRUE(is_winners_json(read_bytes(dir_.file("made.json"))));

  // Devices are written through, never replaced by a regular file.
  ASSERT_EQ(run({"export", "--db", db.string(), "--out", "/dev/null"}).status, 0);
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  CliRun full = run({"export", "--db", db.string(), "--out", "/dev/full"});
  expect_error_line(full, "cannot write /dev/full: No space left on device");
  EXPECT_TRUE(fs::is_character_file("/dev/full"));

  // A named pipe: a reader gets the export, the pipe stays a pipe.
  const fs::path fifo = dir_.file("pipe");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  std::string received;
  std::thread reader([&] { received = read_bytes(fifo); });
  const CliRun piped = run({"export", "--db", db.string(), "--out", fifo.string()});
  reader.join();
  EXPECT_EQ(piped.status, 0) << piped.err;
  EXPECT_TRUE(is_winners_json(received)) << received;
  EXPECT_TRUE(fs::is_fifo(fifo));
}

TEST_F(CliExport, NeverFollowsALinkPlantedAtATemporaryName) {
  const fs::path db = dir_.file("e.db"), out = dir_.file("out.json");
  seed(db);
  // Earlier versions wrote OUT.tmp-PID: plant links at those names for the next pids.
  const fs::path victim = dir_.file("victim");
  std::ofstream(victim) << "precious";
  std::ifstream last_pid_file("/proc/sys/kernel/ns_last_pid");
  long last_pid = 0;
  last_pid_file >> last_pid;
  for (long pid = last_pid + 1; pid <= last_pid + 64; ++pid)
    fs::create_symlink(victim, dir_.file("out.json.tmp-" + std::to_string(pid)));
  const std::set<std::string> before = entries_of(dir_.path());
  ASSERT_EQ(run({"export", "--db", db.string(), "--out", out.string()}).status, 0);
  EXPECT_EQ(read_bytes(victim), "precious");
  EXPECT_TRUE(is_winners_json(read_bytes(out)));
  std::set<std::string> after = entries_of(dir_.path());
  after.erase("out.json");
  EXPECT_EQ(after, before);  // no temporary file left, no planted link replaced
}

TEST_F(CliExport, NamesTheCauseWhenNoTemporaryFileCanBeCreated) {
  const fs::path db = dir_.file("e.db");
  seed(db);
  // The database itself is writable to the reader, so the only message is the export's.
  fs::permissions(dir_.path(), fs::perms(0777));
  fs::permissions(db, fs::perms(0666));
  const fs::path folder = read_only_folder("locked");
  lock_folders();
  const CliRun refused =
      run({"export", "--db", db.string(), "--out", (folder / "out.json").string()}, as_reader());
  expect_error_line(refused, "cannot create a temporary file in " + folder.string() +
                                 ": Permission denied");
  EXPECT_FALSE(contains(refused.err, "remove"));
  EXPECT_TRUE(entries_of(folder).empty());
}

// ---------------------------------------------------------------------------------------------
// Standard output

TEST_F(CliStdout, AFullDiskOrBrokenOutputIsAnErrorNotSuccess) {
  const fs::path db = dir_.file("e.db");
  seed(db);
  CliOptions to_full;
  to_full.stdout_path = "/dev/full";
  const std::vector<std::vector<std::string>> commands = {
      {"export", "--db", db.string()},
      {"export", "--format", "csv", "--db", db.string()},
      {"list", "--db", db.string()},
      {"source", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64", "--arch", "sm_80"},
      {"--help"},
      {"tune", "--help"}};
  for (const auto& command : commands) {
    SCOPED_TRACE(command[0] + (command.size() > 1 ? " " + command[1] : ""));
    expect_error_line(run(command, to_full),
                      "cannot write to standard output: No space left on device");
  }
}

// ---------------------------------------------------------------------------------------------
// Reading commands on databases they cannot write

TEST_F(CliReadOnly, ADatabaseInAReadOnlyFolderIsReadAndLeftAsItWas) {
  const fs::path folder = read_only_folder("shipped");
  const fs::path db = folder / "tilesmith.db";
  seed(db);
  const std::string bytes = read_bytes(db);
  lock_folders();
  const std::vector<std::vector<std::string>> readers = {
      {"list"},
      {"misses"},
      {"show", "--op", "matmul", "--dtype", "bf16", "--shape", "512x256x128", "--gpu",
       some_gpu().model_key()},
      {"export", "--format", "csv"}};
  for (std::vector<std::string> command : readers) {
    SCOPED_TRACE(command[0]);
    command.insert(command.end(), {"--db", db.string()});
    const CliRun read = run(command, as_reader());
    EXPECT_EQ(read.status, 0) << read.err;
    EXPECT_TRUE(contains(read.err, "tilesmith: note: " + db.string() + " cannot be written here"))
        << read.err;
    EXPECT_TRUE(contains(read.err, "read as an immutable snapshot")) << read.err;
    if (command[0] != "misses") {
      EXPECT_TRUE(contains(read.out, "512x256x128")) << read.out;
    }
  }
  EXPECT_EQ(entries_of(folder), std::set<std::string>{"tilesmith.db"});
  EXPECT_EQ(read_bytes(db), bytes);
}

TEST_F(CliReadOnly, AReadOnlyFileInAWritableFolderLeavesNoFilesBeside) {
  const fs::path db = dir_.file("tilesmith.db");
  seed(db);
  fs::permissions(db, fs::perms(0444));
  const CliRun as_owner = run({"list", "--db", db.string()});
  EXPECT_EQ(as_owner.status, 0) << as_owner.err;
  const fs::path shared = dir_.file("shared");
  fs::create_directory(shared);
  fs::permissions(shared, fs::perms(0777));
  fs::copy_file(db, shared / "tilesmith.db");
  fs::permissions(shared / "tilesmith.db", fs::perms(0444));
  const CliRun as_other = run({"list", "--db", (shared / "tilesmith.db").string()}, as_reader());
  EXPECT_EQ(as_other.status, 0) << as_other.err;
  EXPECT_TRUE(contains(as_other.out, "512x256x128"));
  std::set<std::string> names = entries_of(dir_.path());
  EXPECT_EQ(names.count("tilesmith.db-wal") + names.count("tilesmith.db-shm"), 0u);
  EXPECT_EQ(entries_of(shared), std::set<std::string>{"tilesmith.db"});
}

// ---------------------------------------------------------------------------------------------
// tune: budgets, long input, compile failures, reused cubins

TEST_F(CliTuneInput, ABudgetThatEndsBeforeTheFirstCandidateIsAnError) {
  expect_error_line(run({"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64",
                         "--budget", "1e-9s", "--db", dir_.file("t.db").string()}),
                    "ran out before the first");
}

TEST_F(CliTuneInput, LongBadInputIsNamedNotEchoed) {
  const std::string shape(10240, '7');
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"tune", "--op", "matmul", "--dtype", "bf16", "--shape",
                                 shape + "x"},
        std::vector<std::string>{"source", "--op", "matmul", "--dtype", shape, "--shape", "8x8x8"},
        std::vector<std::string>{shape}}) {
    const CliRun refused = run(command);
    expect_error_line(refused, "...' (1024");  // the start, then the size
    EXPECT_LT(refused.err.size(), 400u) << refused.err.size();
  }
}

TEST_F(CliTuneInput, EveryCompileFailingShowsTheFirstNvrtcErrorAndFails) {
  std::string why;
  if (driver::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: --arch applies offline only";
  // mma.sync and cp.async need sm_80: for sm_75 every config fails to compile.
  const CliRun tune = run({"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64",
                           "--budget", "2", "--arch", "sm_75", "--db", dir_.file("t.db").string()});
  EXPECT_NE(tune.status, 0);
  EXPECT_TRUE(contains(tune.out, "first compile failure  block_")) << tune.out;
  EXPECT_TRUE(contains(tune.out, "requires .target sm_80")) << tune.out;
  EXPECT_TRUE(contains(tune.err, "none of the 2 configs of matmul bf16->bf16 64x64x64 compiled"))
      << tune.err;
}

TEST_F(CliTuneInput, ARerunReusesStoredCubinsAndSaysSo) {
  std::string why;
  if (driver::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: the sweep would time";
  const std::vector<std::string> tune = {"tune",     "--op",     "matmul", "--dtype",
                                         "bf16",     "--shape",  "64x64x64", "--budget",
                                         "2",        "--strategy", "random", "--db",
                                         dir_.file("t.db").string()};
  const CliRun first = run(tune), second = run(tune);
  ASSERT_EQ(first.status, 0) << first.err;
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_TRUE(contains(first.out, "compiled  2 kernels, 0 reused from the database")) << first.out;
  EXPECT_TRUE(contains(second.out, "compiled  0 kernels, 2 reused from the database, 0 compile"))
      << second.out;
  EXPECT_TRUE(contains(second.out, "NVRTC 0.0 s in")) << second.out;
}

// ---------------------------------------------------------------------------------------------
// Interrupts

// The processes whose environment holds `tag`: the sweep's workers carry it too.
int processes_tagged(const std::string& tag) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (contains(read_bytes(entry.path() / "environ"), tag)) ++count;
  }
  return count;
}

TEST_F(CliInterrupt, SigintAndSigtermStopASweepCleanlyWithItsWorkers) {
  std::string why;
  if (driver::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: GpuCliSweep covers this";
  for (int signal : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(signal);
    CliOptions tagged;
    const std::string tag = "TILESMITH_TEST_TAG=" + std::to_string(std::random_device{}());
    tagged.env = {tag};
    CliProcess sweep({"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "4096x4096x4096",
                      "--jobs", "2", "--db", dir_.file("t.db").string()},
                     dir_.path(), tagged);
    // Until the workers compile: the sweep's first output line names the database.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!contains(sweep.out_so_far(), "no GPU: compiling") &&
           std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ASSERT_GE(processes_tagged(tag), 2);  // the sweep and its compile workers
    const auto signalled = std::chrono::steady_clock::now();
    kill(sweep.pid(), signal);
    const CliRun stopped = sweep.wait();
    EXPECT_LT(std::chrono::steady_clock::now() - signalled, std::chrono::seconds(10));
    EXPECT_EQ(stopped.status, 128 + signal) << stopped.out << stopped.err;
    EXPECT_TRUE(contains(stopped.out, std::string("stopped   interrupted by ") +
                                          (signal == SIGINT ? "SIGINT" : "SIGTERM")))
        << stopped.out;
    EXPECT_TRUE(contains(stopped.out, "  compiled  ")) << stopped.out;  // the summary came
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    EXPECT_EQ(processes_tagged(tag), 0);
  }
}

}  // namespace
}  // namespace tilesmith
