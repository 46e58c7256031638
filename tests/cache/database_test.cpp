#include "cache/database.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace tilesmith::cache {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Helpers

// A fresh folder per test, removed afterwards.
class DatabaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::random_device entropy;
    dir_ = fs::temp_directory_path() /
           ("tilesmith_db_test_" + std::string(info->name()) + "_" + std::to_string(entropy()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  fs::path db_path() const { return dir_ / "tilesmith.db"; }

  fs::path dir_;
};

DeviceTarget h100() {
  DeviceTarget device;
  device.name = "NVIDIA H100 80GB HBM3";
  device.cc_major = 9;
  device.cc_minor = 0;
  device.sm_count = 132;
  return device;
}

DeviceTarget a100() {
  DeviceTarget device;
  device.name = "NVIDIA A100-SXM4-80GB";
  device.cc_major = 8;
  device.cc_minor = 0;
  device.sm_count = 108;
  return device;
}

Toolchain toolchain(const std::string& driver = "13.0", const std::string& nvrtc = "13.0") {
  return Toolchain{driver, nvrtc};
}

Problem matmul(std::int64_t m, std::int64_t n, std::int64_t k, DType in = DType::bf16,
               DType out = DType::bf16) {
  Problem problem;
  problem.op = "matmul";
  problem.dtype = in;
  problem.out_dtype = out;
  problem.shape = {m, n, k};
  return problem;
}

TrialKey key_for(const DeviceTarget& device, const Problem& problem,
                 const std::string& template_hash = "tmplhash0") {
  return TrialKey{device.model_key(), problem, template_hash};
}

Config config(int block_m, int block_n) {
  Config config;
  config.values = {{"block_m", block_m}, {"block_n", block_n}, {"block_k", 32}};
  return config;
}

Trial trial_with(TrialStatus status, const Config& trial_config, double median_ms) {
  Trial trial;
  trial.config = trial_config;
  trial.source_hash = "src" + trial_config.text();
  trial.status = status;
  trial.detail = status == TrialStatus::ok ? "" : "failed: " + std::string(status_name(status));
  trial.median_ms = median_ms;
  trial.min_ms = median_ms * 0.9;
  trial.spread = 0.02;
  trial.repetitions = 50;
  trial.rel_error = 1e-3;
  trial.resources = ResourceUsage{168, 1024, 16, 8, 4};
  trial.compile_seconds = 1.25;
  trial.toolchain = toolchain();
  return trial;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

std::vector<std::string> folder_entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// Runs SQL on a file with the raw SQLite API (to build foreign files and inspect ours).
void raw_exec(const fs::path& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* message = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message);
  const std::string error = message ? message : "";
  sqlite3_free(message);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << error;
}

std::string raw_query_text(const fs::path& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  std::string result = "<no row>";
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &statement, nullptr) == SQLITE_OK &&
      sqlite3_step(statement) == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(statement, 0);
    result = text ? reinterpret_cast<const char*>(text) : "<null>";
  }
  sqlite3_finalize(statement);
  sqlite3_close(db);
  return result;
}

// Expects opening `path` to throw an Error whose message names the path and contains `reason`.
void expect_refused(const fs::path& path, const std::string& reason) {
  try {
    Database db(path);
    FAIL() << "opening " << path << " should have thrown";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find(reason), std::string::npos) << message;
    EXPECT_NE(message.find("refusing to modify it"), std::string::npos) << message;
  }
}

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_)
      setenv(name_.c_str(), old_->c_str(), 1);
    else
      unsetenv(name_.c_str());
  }

 private:
  std::string name_;
  std::optional<std::string> old_;
};

// ---------------------------------------------------------------------------------------------
// Opening, identity and refusal of files that are not ours

TEST_F(DatabaseTest, NewFileGetsParentFoldersIdentitySchemaVersionAndWal) {
  const fs::path path = dir_ / "nested" / "deeper" / "cache.db";
  { Database db(path); }
  ASSERT_TRUE(fs::exists(path));
  EXPECT_EQ(raw_query_text(path, "PRAGMA application_id"), std::to_string(0x54534D54));
  EXPECT_EQ(raw_query_text(path, "PRAGMA user_version"), std::to_string(kSchemaVersion));
  EXPECT_EQ(raw_query_text(path, "PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw_query_text(path,
                           "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                           "name IN ('gpus','toolchains','problems','trials','winners',"
                           "'cubins','misses')"),
            "7");
}

TEST_F(DatabaseTest, ReopenKeepsEverything) {
  const Problem problem = matmul(4096, 4096, 4096);
  const TrialKey key = key_for(h100(), problem);
  CompiledKernel kernel;
  kernel.source_hash = "abc";
  kernel.arch = "sm_90a";
  kernel.nvrtc_version = "13.0";
  kernel.lowered_names = {"_Z6kernelv"};
  kernel.cubin.bytes = {'\x7f', 'E', 'L', 'F'};
  {
    Database db(db_path());
    db.record_gpu(h100(), toolchain());
    db.record_trial(key, trial_with(TrialStatus::ok, config(128, 128), 1.5));
    db.refresh_winner(key);
    db.put_cubin(kernel);
  }
  Database reopened(db_path());
  EXPECT_EQ(reopened.path(), db_path());
  ASSERT_EQ(reopened.gpus().size(), 1u);
  ASSERT_EQ(reopened.trials(key).size(), 1u);
  EXPECT_EQ(reopened.trials(key)[0].config, config(128, 128));
  ASSERT_TRUE(reopened.winner(key).has_value());
  EXPECT_DOUBLE_EQ(reopened.winner(key)->median_ms, 1.5);
  ASSERT_TRUE(reopened.cubin("abc", "sm_90a", "13.0").has_value());
}

TEST_F(DatabaseTest, RandomBytesAndTextFilesAreRefusedAndLeftUntouched) {
  std::mt19937 random(1234);
  std::string noise(8192, '\0');
  for (char& byte : noise) byte = static_cast<char>(random() & 0xff);
  const fs::path noise_path = dir_ / "noise.db";
  write_bytes(noise_path, noise);
  expect_refused(noise_path, "not an SQLite database");
  EXPECT_EQ(read_bytes(noise_path), noise);

  const fs::path text_path = dir_ / "notes.txt";
  const std::string text = "these are my notes, not a database\n";
  write_bytes(text_path, text);
  expect_refused(text_path, "not an SQLite database");
  EXPECT_EQ(read_bytes(text_path), text);
  EXPECT_EQ(folder_entries(dir_), (std::vector<std::string>{"noise.db", "notes.txt"}));
}

TEST_F(DatabaseTest, ForeignSqliteDatabaseIsRefusedAndLeftUntouched) {
  const fs::path users = dir_ / "users.db";
  raw_exec(users,
           "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);"
           "INSERT INTO users (name) VALUES ('ada'), ('grace');");
  const std::string before = read_bytes(users);
  expect_refused(users, "not a tilesmith database");
  EXPECT_EQ(read_bytes(users), before);
  // Not even a journal or WAL file was left next to it.
  EXPECT_EQ(folder_entries(dir_), std::vector<std::string>{"users.db"});
  EXPECT_EQ(raw_query_text(users, "PRAGMA journal_mode"), "delete");

  // Another program's id, even on an otherwise empty database.
  const fs::path tagged = dir_ / "tagged.db";
  raw_exec(tagged, "PRAGMA application_id = 305419896;");  // 0x12345678
  const std::string tagged_before = read_bytes(tagged);
  ASSERT_FALSE(tagged_before.empty());
  expect_refused(tagged, "application_id 0x12345678");
  EXPECT_EQ(read_bytes(tagged), tagged_before);
}

TEST_F(DatabaseTest, NewerSchemaIsRefusedAndLeftUntouched) {
  { Database db(db_path()); }
  raw_exec(db_path(), "PRAGMA user_version = " + std::to_string(kSchemaVersion + 1) + ";");
  const std::string before = read_bytes(db_path());
  expect_refused(db_path(),
                 "newer tilesmith (schema version " + std::to_string(kSchemaVersion + 1));
  EXPECT_EQ(read_bytes(db_path()), before);
  EXPECT_EQ(raw_query_text(db_path(), "PRAGMA user_version"), std::to_string(kSchemaVersion + 1));
}

// A file as tilesmith wrote it at schema version 1 (commit e83b6b5): the sqlite3 `.dump` of a
// database that build made (one GPU, a winner out of two trials, a cubin), after the header
// values `.dump` leaves out. Never edit it: it stands for the files in users' hands, so it must
// not follow changes to the migration steps.
constexpr const char* kVersion1File = R"sql(
PRAGMA journal_mode = WAL;
PRAGMA application_id = 1414745428;
PRAGMA user_version = 1;
PRAGMA foreign_keys=OFF;
BEGIN TRANSACTION;
CREATE TABLE gpus (
  id        INTEGER PRIMARY KEY,
  model_key TEXT NOT NULL UNIQUE,  -- DeviceTarget::model_key(): name | sm_XY | N SMs
  name      TEXT NOT NULL,
  cc_major  INTEGER NOT NULL,
  cc_minor  INTEGER NOT NULL,
  sm_count  INTEGER NOT NULL
);
INSERT INTO gpus VALUES(1,'NVIDIA H100 80GB HBM3 | sm_90 | 132 SMs','NVIDIA H100 80GB HBM3',9,0,132);
CREATE TABLE toolchains (
  gpu_id         INTEGER NOT NULL REFERENCES gpus(id),
  driver_version TEXT NOT NULL,
  nvrtc_version  TEXT NOT NULL,
  first_seen     TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  last_seen      TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  UNIQUE (gpu_id, driver_version, nvrtc_version)
);
INSERT INTO toolchains VALUES(1,'13.0','13.0','2026-11-23T05:26:19Z','2026-11-23T05:26:19Z');
CREATE TABLE problems (
  id        INTEGER PRIMARY KEY,
  key       TEXT NOT NULL UNIQUE,  -- Problem::key()
  op        TEXT NOT NULL,
  dtype     TEXT NOT NULL,         -- dtype_name()
  out_dtype TEXT NOT NULL,
  shape     TEXT NOT NULL          -- Problem::shape_text()
);
INSERT INTO problems VALUES(1,'matmul bf16->f32 4096x1024x512','matmul','bf16','f32','4096x1024x512');
CREATE TABLE trials (
  id                INTEGER PRIMARY KEY,
  gpu_id            INTEGER NOT NULL REFERENCES gpus(id),
  problem_id        INTEGER NOT NULL REFERENCES problems(id),
  template_hash     TEXT NOT NULL,
  config            TEXT NOT NULL,  -- canonical JSON object: {"block_k":32,"block_m":128,...}
  source_hash       TEXT NOT NULL,
  status            TEXT NOT NULL,  -- status_name()
  detail            TEXT NOT NULL,
  median_ms         REAL,           -- NULL: NaN
  min_ms            REAL,
  spread            REAL,
  repetitions       INTEGER NOT NULL,
  rel_error         REAL,
  registers         INTEGER NOT NULL,  -- -1: not reported
  static_smem_bytes INTEGER NOT NULL,
  stack_frame_bytes INTEGER NOT NULL,
  spill_store_bytes INTEGER NOT NULL,
  spill_load_bytes  INTEGER NOT NULL,
  compile_seconds   REAL,
  driver_version    TEXT NOT NULL,
  nvrtc_version     TEXT NOT NULL,
  created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
);
INSERT INTO trials VALUES(1,1,1,'tmplhash1','{"block_k":32,"block_m":128,"block_n":128}','srcA','ok','',0.5,0.4500000000000000111,0.020000000000000000416,50,0.0010000000000000000208,168,1024,16,0,0,1.5,'13.0','13.0','2026-11-23T05:26:19Z');
INSERT INTO trials VALUES(2,1,1,'tmplhash1','{"block_k":32,"block_m":64,"block_n":128}','srcB','wrong','mismatch',0.25,0.4500000000000000111,0.020000000000000000416,50,0.0010000000000000000208,168,1024,16,0,0,1.5,'13.0','13.0','2026-11-23T05:26:19Z');
CREATE TABLE winners (
  gpu_id        INTEGER NOT NULL REFERENCES gpus(id),
  problem_id    INTEGER NOT NULL REFERENCES problems(id),
  template_hash TEXT NOT NULL,
  trial_id      INTEGER NOT NULL REFERENCES trials(id),
  config        TEXT NOT NULL,
  source_hash   TEXT NOT NULL,
  median_ms     REAL NOT NULL,
  spread        REAL,
  updated_at    TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  PRIMARY KEY (gpu_id, problem_id, template_hash)
);
INSERT INTO winners VALUES(1,1,'tmplhash1',1,'{"block_k":32,"block_m":128,"block_n":128}','srcA',0.5,0.020000000000000000416,'2026-11-23T05:26:19Z');
CREATE TABLE cubins (
  source_hash       TEXT NOT NULL,
  arch              TEXT NOT NULL,
  nvrtc_version     TEXT NOT NULL,
  lowered_name      TEXT NOT NULL,
  cubin             BLOB NOT NULL,
  registers         INTEGER NOT NULL,
  static_smem_bytes INTEGER NOT NULL,
  stack_frame_bytes INTEGER NOT NULL,
  spill_store_bytes INTEGER NOT NULL,
  spill_load_bytes  INTEGER NOT NULL,
  compile_seconds   REAL,
  log               TEXT NOT NULL,
  created_at        TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now')),
  PRIMARY KEY (source_hash, arch, nvrtc_version)
);
INSERT INTO cubins VALUES('srcA','sm_90a','13.0','_Z6kernelv',X'7f454c46',-1,-1,-1,-1,-1,1.5,'ptxas info','2026-11-23T05:26:19Z');
CREATE INDEX trials_by_key ON trials (gpu_id, problem_id, template_hash);
COMMIT;
)sql";

// The schema of a file as one text, to compare files made by different paths.
std::string schema_of(const fs::path& path) {
  return raw_query_text(path,
                        "SELECT group_concat(sql, ';') FROM (SELECT sql FROM sqlite_master "
                        "WHERE sql IS NOT NULL ORDER BY name)");
}

TEST_F(DatabaseTest, Version1FileMigratesInPlaceKeepingItsData) {
  raw_exec(db_path(), kVersion1File);
  ASSERT_EQ(raw_query_text(db_path(), "PRAGMA user_version"), "1");
  const DeviceTarget device = h100();
  const TrialKey key =
      key_for(device, matmul(4096, 1024, 512, DType::bf16, DType::f32), "tmplhash1");
  {
    Database db(db_path());
    ASSERT_EQ(db.gpus().size(), 1u);
    EXPECT_EQ(db.gpus()[0].model_key, device.model_key());
    ASSERT_EQ(db.gpus()[0].toolchains_seen.size(), 1u);
    const std::vector<Trial> trials = db.trials(key);
    ASSERT_EQ(trials.size(), 2u);
    EXPECT_EQ(trials[1].status, TrialStatus::wrong);
    EXPECT_EQ(trials[1].detail, "mismatch");
    EXPECT_EQ(trials[0].created_at, "2026-11-23T05:26:19Z");
    const std::optional<Winner> winner = db.winner(key);
    ASSERT_TRUE(winner.has_value());
    EXPECT_EQ(winner->config, (Config{{{"block_m", 128}, {"block_n", 128}, {"block_k", 32}}}));
    EXPECT_DOUBLE_EQ(winner->median_ms, 0.5);
    EXPECT_EQ(winner->trials_total, 2);
    const std::optional<CompiledKernel> cubin = db.cubin("srcA", "sm_90a", "13.0");
    ASSERT_TRUE(cubin.has_value());
    EXPECT_EQ(cubin->cubin.bytes, (std::vector<char>{'\x7f', 'E', 'L', 'F'}));
    // The new table works on the migrated file, with the rows it already had.
    EXPECT_TRUE(db.misses().empty());
    const TrialKey untuned = key_for(device, matmul(100, 100, 100), "tmplhash1");
    db.record_miss(untuned);
    ASSERT_EQ(db.misses().size(), 1u);
    EXPECT_EQ(db.misses()[0].problem.key(), untuned.problem.key());
  }
  EXPECT_EQ(raw_query_text(db_path(), "PRAGMA user_version"), std::to_string(kSchemaVersion));
  EXPECT_EQ(raw_query_text(db_path(), "PRAGMA application_id"), std::to_string(0x54534D54));
  EXPECT_EQ(raw_query_text(db_path(), "PRAGMA journal_mode"), "wal");
  // A migrated file ends with the schema of a new one: the shipped step 1 was not edited.
  const fs::path fresh = dir_ / "fresh.db";
  { Database db(fresh); }
  EXPECT_EQ(schema_of(db_path()), schema_of(fresh));
}

TEST_F(DatabaseTest, DefaultPathHonoursTilesmithDbThenXdgCacheHomeThenHome) {
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv db("TILESMITH_DB", "/data/tuning.db");
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg/cache");
    EXPECT_EQ(Database::default_path(), fs::path("/data/tuning.db"));
  }
  {
    ScopedEnv db("TILESMITH_DB", "");  // empty counts as unset
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg/cache");
    EXPECT_EQ(Database::default_path(), fs::path("/xdg/cache/tilesmith/tilesmith.db"));
  }
  {
    ScopedEnv db("TILESMITH_DB", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    EXPECT_EQ(Database::default_path(), fs::path("/home/someone/.cache/tilesmith/tilesmith.db"));
  }
}

// ---------------------------------------------------------------------------------------------
// Trials and winners

TEST_F(DatabaseTest, TrialLifecycleStartThenFinish) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(1024, 1024, 1024));

  Trial planned = trial_with(TrialStatus::ok, config(64, 64), 0);  // status is ignored on start
  const std::int64_t id = db.start_trial(key, planned);
  ASSERT_EQ(db.trials(key).size(), 1u);
  EXPECT_EQ(db.trials(key)[0].id, id);
  EXPECT_EQ(db.trials(key)[0].status, TrialStatus::running);

  Trial done = trial_with(TrialStatus::ok, config(64, 64), 0.75);
  done.toolchain = toolchain("13.1", "13.0");
  db.finish_trial(id, done);
  const std::vector<Trial> trials = db.trials(key);
  ASSERT_EQ(trials.size(), 1u);
  const Trial& stored = trials[0];
  EXPECT_EQ(stored.id, id);
  EXPECT_EQ(stored.status, TrialStatus::ok);
  EXPECT_EQ(stored.config, config(64, 64));
  EXPECT_EQ(stored.source_hash, done.source_hash);
  EXPECT_EQ(stored.detail, "");
  EXPECT_DOUBLE_EQ(stored.median_ms, 0.75);
  EXPECT_DOUBLE_EQ(stored.min_ms, 0.75 * 0.9);
  EXPECT_DOUBLE_EQ(stored.spread, 0.02);
  EXPECT_EQ(stored.repetitions, 50);
  EXPECT_DOUBLE_EQ(stored.rel_error, 1e-3);
  EXPECT_EQ(stored.resources.registers, 168);
  EXPECT_EQ(stored.resources.static_smem_bytes, 1024);
  EXPECT_EQ(stored.resources.stack_frame_bytes, 16);
  EXPECT_EQ(stored.resources.spill_store_bytes, 8);
  EXPECT_EQ(stored.resources.spill_load_bytes, 4);
  EXPECT_DOUBLE_EQ(stored.compile_seconds, 1.25);
  EXPECT_EQ(stored.toolchain.driver_version, "13.1");
  EXPECT_EQ(stored.toolchain.nvrtc_version, "13.0");
  EXPECT_TRUE(std::regex_match(stored.created_at, std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")))
      << stored.created_at;

  // Misuse is reported, not silently stored.
  EXPECT_THROW(db.finish_trial(id + 100, done), Error);
  EXPECT_THROW(db.finish_trial(id, trial_with(TrialStatus::running, config(64, 64), 0)), Error);
}

TEST_F(DatabaseTest, TrialsNeedTheirGpuRecordedFirst) {
  Database db(db_path());
  const TrialKey key = key_for(h100(), matmul(64, 64, 64));
  try {
    db.start_trial(key, trial_with(TrialStatus::running, config(64, 64), 0));
    FAIL() << "start_trial without record_gpu should throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("record_gpu"), std::string::npos) << error.what();
  }
  EXPECT_THROW(db.record_trial(key, trial_with(TrialStatus::ok, config(64, 64), 1)), Error);
  // The failed writes left nothing behind: the problem row they created was rolled back.
  EXPECT_EQ(raw_query_text(db_path(), "SELECT count(*) FROM problems"), "0");
}

TEST_F(DatabaseTest, WinnerIsTheFastestOkTrialNeverAFasterWrongOne) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(2048, 2048, 2048));
  const auto slow = db.record_trial(key, trial_with(TrialStatus::ok, config(64, 64), 2.0));
  const auto wrong = db.record_trial(key, trial_with(TrialStatus::wrong, config(256, 256), 0.5));
  const auto fast = db.record_trial(key, trial_with(TrialStatus::ok, config(128, 128), 1.5));
  const auto failed =
      db.record_trial(key, trial_with(TrialStatus::compile_failed, config(512, 512), 0));

  const std::optional<Winner> winner = db.refresh_winner(key);
  ASSERT_TRUE(winner.has_value());
  EXPECT_EQ(winner->config, config(128, 128));
  EXPECT_EQ(winner->source_hash, "src" + config(128, 128).text());
  EXPECT_DOUBLE_EQ(winner->median_ms, 1.5);
  EXPECT_DOUBLE_EQ(winner->spread, 0.02);
  EXPECT_EQ(winner->trials_ok, 2);
  EXPECT_EQ(winner->trials_total, 4);
  EXPECT_EQ(winner->gpu_model, h100().model_key());
  EXPECT_EQ(winner->gpu_name, h100().name);
  EXPECT_EQ(winner->template_hash, "tmplhash0");
  EXPECT_FALSE(winner->updated_at.empty());

  // Stored, not just returned.
  const std::optional<Winner> stored = db.winner(key);
  ASSERT_TRUE(stored.has_value());
  EXPECT_EQ(stored->config, config(128, 128));

  // Ok trials fastest first, then the rest in the order they were recorded.
  std::vector<std::int64_t> order;
  for (const Trial& trial : db.trials(key)) order.push_back(trial.id);
  EXPECT_EQ(order, (std::vector<std::int64_t>{fast, slow, wrong, failed}));
  const std::vector<Trial> top = db.top_trials(key, 2);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].id, fast);
  EXPECT_EQ(top[1].id, slow);

  // A faster ok trial later takes over.
  db.record_trial(key, trial_with(TrialStatus::ok, config(128, 64), 1.0));
  EXPECT_EQ(db.refresh_winner(key)->config, config(128, 64));
  EXPECT_EQ(db.winner(key)->trials_total, 5);
}

TEST_F(DatabaseTest, NoWinnerWithoutAnOkTrial) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(512, 512, 512));
  EXPECT_FALSE(db.refresh_winner(key).has_value());  // nothing ever tried
  db.record_trial(key, trial_with(TrialStatus::wrong, config(64, 64), 0.1));
  db.record_trial(key, trial_with(TrialStatus::timeout, config(64, 128), 0));
  db.start_trial(key, trial_with(TrialStatus::running, config(128, 128), 0));
  EXPECT_FALSE(db.refresh_winner(key).has_value());
  EXPECT_FALSE(db.winner(key).has_value());
  EXPECT_TRUE(db.winners().empty());
  // Under another template hash the same problem is a different key.
  const TrialKey other = key_for(h100(), key.problem, "tmplhash1");
  db.record_trial(other, trial_with(TrialStatus::ok, config(64, 64), 1.0));
  EXPECT_TRUE(db.refresh_winner(other).has_value());
  EXPECT_FALSE(db.winner(key).has_value());
}

TEST_F(DatabaseTest, AbandonOrphanedMarksOnlyThatKeysRunningTrialsOfUnknownSweeps) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(256, 256, 256));
  const TrialKey elsewhere = key_for(h100(), matmul(512, 256, 256));
  const auto crashed_a = db.start_trial(key, trial_with(TrialStatus::running, config(64, 64), 0));
  const auto finished = db.start_trial(key, trial_with(TrialStatus::running, config(128, 64), 0));
  db.finish_trial(finished, trial_with(TrialStatus::ok, config(128, 64), 1.0));
  const auto crashed_b = db.start_trial(key, trial_with(TrialStatus::running, config(64, 128), 0));
  db.start_trial(elsewhere, trial_with(TrialStatus::running, config(64, 64), 0));

  EXPECT_EQ(db.abandon_orphaned(key), 2);
  EXPECT_EQ(db.abandon_orphaned(key), 0);
  for (const Trial& trial : db.trials(key)) {
    if (trial.id == crashed_a || trial.id == crashed_b) {
      EXPECT_EQ(trial.status, TrialStatus::abandoned);
      EXPECT_EQ(trial.detail, "left running by an earlier sweep that stopped mid-candidate");
    } else {
      EXPECT_EQ(trial.status, TrialStatus::ok);
    }
  }
  ASSERT_EQ(db.trials(elsewhere).size(), 1u);
  EXPECT_EQ(db.trials(elsewhere)[0].status, TrialStatus::running);
}

TEST_F(DatabaseTest, WinnersListAcrossGpusFilterByGpuAndRebuildProblems) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  db.record_gpu(a100(), toolchain("12.8", "12.8"));
  const Problem mixed = matmul(8192, 1024, 4096, DType::f16, DType::f32);
  const Problem plain = matmul(4096, 4096, 4096);
  for (const DeviceTarget& device : {h100(), a100()}) {
    for (const Problem& problem : {mixed, plain}) {
      const TrialKey key = key_for(device, problem);
      db.record_trial(key, trial_with(TrialStatus::ok, config(128, 128), device.sm_count / 100.0));
      ASSERT_TRUE(db.refresh_winner(key).has_value());
    }
  }

  const std::vector<Winner> all = db.winners();
  ASSERT_EQ(all.size(), 4u);
  // Ordered by GPU model key ("NVIDIA A100..." < "NVIDIA H100..."), then op, then problem key.
  EXPECT_EQ(all[0].gpu_model, a100().model_key());
  EXPECT_EQ(all[1].gpu_model, a100().model_key());
  EXPECT_EQ(all[2].gpu_model, h100().model_key());
  EXPECT_EQ(all[0].problem.key(), plain.key());  // "matmul bf16..." < "matmul f16..."
  EXPECT_EQ(all[1].problem.key(), mixed.key());
  EXPECT_EQ(all[0].gpu_name, a100().name);

  const Winner& rebuilt = all[1];
  EXPECT_EQ(rebuilt.problem.op, "matmul");
  EXPECT_EQ(rebuilt.problem.dtype, DType::f16);
  EXPECT_EQ(rebuilt.problem.out_dtype, DType::f32);
  EXPECT_EQ(rebuilt.problem.shape, (std::vector<std::int64_t>{8192, 1024, 4096}));

  const std::vector<Winner> only_h100 = db.winners(h100().model_key());
  ASSERT_EQ(only_h100.size(), 2u);
  for (const Winner& winner : only_h100) {
    EXPECT_EQ(winner.gpu_model, h100().model_key());
    EXPECT_DOUBLE_EQ(winner.median_ms, 1.32);
  }
  EXPECT_TRUE(db.winners(std::string("no such GPU")).empty());
}

TEST_F(DatabaseTest, RecordGpuKeepsEveryToolchainSeenOnce) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain("12.8", "12.8"));
  db.record_gpu(h100(), toolchain("13.0", "13.0"));
  db.record_gpu(h100(), toolchain("12.8", "12.8"));  // seen again: last_seen moves, no new row
  const std::vector<GpuInfo> gpus = db.gpus();
  ASSERT_EQ(gpus.size(), 1u);
  EXPECT_EQ(gpus[0].model_key, h100().model_key());
  EXPECT_EQ(gpus[0].name, h100().name);
  EXPECT_EQ(gpus[0].cc_major, 9);
  EXPECT_EQ(gpus[0].cc_minor, 0);
  EXPECT_EQ(gpus[0].sm_count, 132);
  ASSERT_EQ(gpus[0].toolchains_seen.size(), 2u);
  EXPECT_EQ(gpus[0].toolchains_seen[0].driver_version, "12.8");
  EXPECT_EQ(gpus[0].toolchains_seen[1].driver_version, "13.0");
}

TEST_F(DatabaseTest, SqlLookingStringsAreStoredVerbatim) {
  Database db(db_path());
  DeviceTarget device = h100();
  device.name = "Robert'); DROP TABLE gpus; --";
  db.record_gpu(device, toolchain("13.0'--", "\"13.0\""));
  Problem problem = matmul(16, 16, 16);
  problem.op = "matmul'; DELETE FROM trials WHERE '1'='1";
  const TrialKey key = key_for(device, problem, "hash' OR '1'='1");
  Config odd;
  odd.values = {{"block_m'); DROP TABLE trials;--", 64}, {"quote\"and\\backslash", 2}};
  Trial trial = trial_with(TrialStatus::wrong, odd, 1.0);
  trial.detail = "mismatch at [0]: 'nan' vs \"1.0\"; --";
  db.record_trial(key, trial);
  db.record_trial(key, trial_with(TrialStatus::ok, odd, 2.0));
  ASSERT_TRUE(db.refresh_winner(key).has_value());

  const std::vector<Trial> trials = db.trials(key);
  ASSERT_EQ(trials.size(), 2u);
  EXPECT_EQ(trials[1].config, odd);
  EXPECT_EQ(trials[1].detail, trial.detail);
  const std::vector<Winner> winners = db.winners(device.model_key());
  ASSERT_EQ(winners.size(), 1u);
  EXPECT_EQ(winners[0].gpu_name, device.name);
  EXPECT_EQ(winners[0].problem.op, problem.op);
  EXPECT_EQ(winners[0].template_hash, "hash' OR '1'='1");
  EXPECT_EQ(winners[0].config, odd);
  EXPECT_EQ(db.gpus()[0].toolchains_seen[0].driver_version, "13.0'--");
  // A lookup with a quote-bearing key that merely resembles a stored one finds nothing.
  EXPECT_TRUE(db.trials(key_for(device, problem, "hash' OR '1'='1' --")).empty());
}

TEST_F(DatabaseTest, NanAndInfinityMeasurementsRoundTrip) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(32, 32, 32));
  Trial trial = trial_with(TrialStatus::wrong, config(64, 64), 0.3);
  trial.rel_error = std::numeric_limits<double>::quiet_NaN();  // the kernel wrote NaNs
  trial.spread = std::numeric_limits<double>::infinity();
  db.record_trial(key, trial);
  const std::vector<Trial> trials = db.trials(key);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_TRUE(std::isnan(trials[0].rel_error));
  EXPECT_TRUE(std::isinf(trials[0].spread));
  EXPECT_DOUBLE_EQ(trials[0].median_ms, 0.3);
}

// ---------------------------------------------------------------------------------------------
// Misses

const std::regex kIsoUtc(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)");

TEST_F(DatabaseTest, RecordMissCountsEachKeyAndStampsFirstAndLastSeen) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(8192, 1024, 4096, DType::f16, DType::f32));
  db.record_miss(key);
  std::vector<Miss> misses = db.misses();
  ASSERT_EQ(misses.size(), 1u);
  EXPECT_EQ(misses[0].gpu_model, h100().model_key());
  EXPECT_EQ(misses[0].gpu_name, h100().name);
  EXPECT_EQ(misses[0].problem.op, "matmul");
  EXPECT_EQ(misses[0].problem.dtype, DType::f16);
  EXPECT_EQ(misses[0].problem.out_dtype, DType::f32);
  EXPECT_EQ(misses[0].problem.shape, (std::vector<std::int64_t>{8192, 1024, 4096}));
  EXPECT_EQ(misses[0].template_hash, "tmplhash0");
  EXPECT_EQ(misses[0].count, 1);
  EXPECT_TRUE(std::regex_match(misses[0].first_seen, kIsoUtc)) << misses[0].first_seen;
  EXPECT_EQ(misses[0].last_seen, misses[0].first_seen);

  // Pushed into the past, so that a second miss within the same second still shows which
  // stamp moves.
  raw_exec(db_path(),
           "UPDATE misses SET first_seen = '2000-01-01T00:00:00Z', "
           "last_seen = '2000-01-01T00:00:00Z'");
  db.record_miss(key);
  db.record_miss(key_for(h100(), key.problem, "tmplhash1"));  // another template: another key
  misses = db.misses();
  ASSERT_EQ(misses.size(), 2u);
  EXPECT_EQ(misses[0].template_hash, "tmplhash0");
  EXPECT_EQ(misses[0].count, 2);
  EXPECT_EQ(misses[0].first_seen, "2000-01-01T00:00:00Z");
  EXPECT_NE(misses[0].last_seen, "2000-01-01T00:00:00Z");
  EXPECT_TRUE(std::regex_match(misses[0].last_seen, kIsoUtc)) << misses[0].last_seen;
  EXPECT_EQ(misses[1].template_hash, "tmplhash1");
  EXPECT_EQ(misses[1].count, 1);
  // A miss reuses the problem row that trials use.
  EXPECT_EQ(raw_query_text(db_path(), "SELECT count(*) FROM problems"), "1");
}

TEST_F(DatabaseTest, MissesNeedTheirGpuRecordedFirst) {
  Database db(db_path());
  try {
    db.record_miss(key_for(h100(), matmul(64, 64, 64)));
    FAIL() << "record_miss without record_gpu should throw";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("record_gpu"), std::string::npos) << message;
    EXPECT_NE(message.find(h100().model_key()), std::string::npos) << message;
  }
  EXPECT_TRUE(db.misses().empty());
  EXPECT_EQ(raw_query_text(db_path(), "SELECT count(*) FROM problems"), "0");  // rolled back
}

TEST_F(DatabaseTest, MissesFilterByGpuAndComeMostMissedFirstThenByProblem) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  db.record_gpu(a100(), toolchain("12.8", "12.8"));
  // Problem keys sort "... 1024x..." < "... 2048x..." < "... 512x...".
  const Problem big = matmul(2048, 2048, 2048), small = matmul(512, 512, 512),
                mid = matmul(1024, 1024, 1024);
  for (int i = 0; i < 3; ++i) db.record_miss(key_for(a100(), small));
  db.record_miss(key_for(h100(), big));
  db.record_miss(key_for(h100(), mid));
  db.record_miss(key_for(h100(), small));
  db.record_miss(key_for(h100(), small));

  auto order = [](const std::vector<Miss>& misses) {
    std::vector<std::string> rows;
    for (const Miss& miss : misses)
      rows.push_back(miss.gpu_model.substr(0, 11) + " " + miss.problem.shape_text() + " " +
                     std::to_string(miss.count));
    return rows;
  };
  EXPECT_EQ(
      order(db.misses()),
      (std::vector<std::string>{"NVIDIA A100 512x512x512 3", "NVIDIA H100 512x512x512 2",
                                "NVIDIA H100 1024x1024x1024 1", "NVIDIA H100 2048x2048x2048 1"}));
  EXPECT_EQ(order(db.misses(h100().model_key())),
            (std::vector<std::string>{"NVIDIA H100 512x512x512 2", "NVIDIA H100 1024x1024x1024 1",
                                      "NVIDIA H100 2048x2048x2048 1"}));
  EXPECT_TRUE(db.misses(std::string("no such GPU")).empty());
}

TEST_F(DatabaseTest, AWinnerClearsTheMissOfItsKeyOnly) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(256, 512, 1024));
  const TrialKey old_template = key_for(h100(), key.problem, "tmplhash1");
  const TrialKey other_shape = key_for(h100(), matmul(256, 512, 2048));
  for (const TrialKey& missed : {key, old_template, other_shape}) db.record_miss(missed);

  // No ok trial, no winner: still a miss.
  db.record_trial(key, trial_with(TrialStatus::wrong, config(64, 64), 0.1));
  EXPECT_FALSE(db.refresh_winner(key).has_value());
  EXPECT_EQ(db.misses().size(), 3u);

  db.record_trial(key, trial_with(TrialStatus::ok, config(128, 64), 0.2));
  ASSERT_TRUE(db.refresh_winner(key).has_value());
  std::vector<std::string> left;
  for (const Miss& miss : db.misses())
    left.push_back(miss.problem.shape_text() + " " + miss.template_hash);
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"256x512x1024 tmplhash1", "256x512x2048 tmplhash0"}));
}

TEST(TrialStatusTest, NamesRoundTripAndUnknownNamesThrow) {
  const std::vector<std::pair<TrialStatus, std::string>> expected = {
      {TrialStatus::running, "running"},
      {TrialStatus::ok, "ok"},
      {TrialStatus::wrong, "wrong"},
      {TrialStatus::compile_failed, "compile_failed"},
      {TrialStatus::launch_failed, "launch_failed"},
      {TrialStatus::fault, "fault"},
      {TrialStatus::timeout, "timeout"},
      {TrialStatus::abandoned, "abandoned"},
      {TrialStatus::pruned_early, "pruned_early"},
  };
  for (const auto& [status, name] : expected) {
    EXPECT_EQ(status_name(status), name);
    EXPECT_EQ(parse_status(name), status);
  }
  EXPECT_THROW(parse_status("OK"), Error);
  EXPECT_THROW(parse_status(""), Error);
}

// ---------------------------------------------------------------------------------------------
// Cubins

TEST_F(DatabaseTest, CubinRoundTripIsExactAndKeyedByNvrtcVersion) {
  Database db(db_path());
  CompiledKernel kernel;
  kernel.source_hash = "0123456789abcdef0123456789abcdef";
  kernel.arch = "sm_90a";
  kernel.nvrtc_version = "13.0";
  kernel.lowered_names = {"_Z13matmul_kernelILi128ELi128EEv6Params", "_Z6reducev"};
  for (int i = 0; i < 70000; ++i) kernel.cubin.bytes.push_back(static_cast<char>((i * 7) & 0xff));
  kernel.resources = ResourceUsage{232, 0, 8, 0, 0};
  kernel.log = "ptxas info    : Used 232 registers\n";
  kernel.compile_seconds = 3.5;
  db.put_cubin(kernel);

  const std::optional<CompiledKernel> hit = db.cubin(kernel.source_hash, "sm_90a", "13.0");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->cubin.bytes, kernel.cubin.bytes);
  EXPECT_EQ(hit->lowered_names, kernel.lowered_names);  // every kernel of the unit
  EXPECT_EQ(hit->source_hash, kernel.source_hash);
  EXPECT_EQ(hit->arch, "sm_90a");
  EXPECT_EQ(hit->nvrtc_version, "13.0");
  EXPECT_EQ(hit->resources.registers, 232);
  EXPECT_EQ(hit->resources.static_smem_bytes, 0);
  EXPECT_EQ(hit->resources.stack_frame_bytes, 8);
  EXPECT_EQ(hit->log, kernel.log);
  EXPECT_DOUBLE_EQ(hit->compile_seconds, 3.5);

  // A different compiler or architecture may produce different code: a miss.
  EXPECT_FALSE(db.cubin(kernel.source_hash, "sm_90a", "13.1").has_value());
  EXPECT_FALSE(db.cubin(kernel.source_hash, "sm_80", "13.0").has_value());
  EXPECT_FALSE(db.cubin("ffff", "sm_90a", "13.0").has_value());

  // Putting it again replaces it; an empty cubin stays an (empty) cubin.
  kernel.cubin.bytes = std::vector<char>();  // no buffer at all: data() is null
  kernel.resources.registers = -1;
  db.put_cubin(kernel);
  const std::optional<CompiledKernel> replaced = db.cubin(kernel.source_hash, "sm_90a", "13.0");
  ASSERT_TRUE(replaced.has_value());
  EXPECT_TRUE(replaced->cubin.bytes.empty());
  EXPECT_EQ(replaced->resources.registers, -1);
}

// A database written before configs with the same kernels shared a hash stores its cubins
// under the hash that included the config: a rendered source finds them there too, its own
// hash first.
TEST_F(DatabaseTest, ARenderedSourceFindsItsCubinUnderEitherHash) {
  Database db(db_path());
  RenderedSource source;
  source.hash = "11111111111111111111111111111111";
  source.hash_with_config = "22222222222222222222222222222222";
  CompiledKernel old_kernel;
  old_kernel.source_hash = source.hash_with_config;
  old_kernel.arch = "sm_90a";
  old_kernel.nvrtc_version = "13.0";
  old_kernel.lowered_names = {"_Z3oldv"};
  old_kernel.cubin.bytes.assign(64, 'o');
  EXPECT_FALSE(db.cubin(source, "sm_90a", "13.0").has_value());
  db.put_cubin(old_kernel);
  std::optional<CompiledKernel> hit = db.cubin(source, "sm_90a", "13.0");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->lowered_names, old_kernel.lowered_names);
  EXPECT_EQ(hit->source_hash, source.hash_with_config);  // what a use touches
  EXPECT_FALSE(db.cubin(source, "sm_90a", "13.1").has_value());

  CompiledKernel new_kernel = old_kernel;
  new_kernel.source_hash = source.hash;
  new_kernel.lowered_names = {"_Z3newv"};
  db.put_cubin(new_kernel);
  hit = db.cubin(source, "sm_90a", "13.0");
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->lowered_names, new_kernel.lowered_names);
}

// A cubin budget keeps the store at its size by evicting the least recently stored or used
// cubins, never a winner's and never the one just stored; a use (touch) makes a cubin the newest.
TEST_F(DatabaseTest, ACubinBudgetEvictsTheLeastRecentlyUsedCubinsThatNoWinnerNames) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(64, 64, 64));
  Trial winning = trial_with(TrialStatus::ok, config(64, 64), 1.0);
  winning.source_hash = "h1";
  db.record_trial(key, winning);
  ASSERT_TRUE(db.refresh_winner(key));
  auto kernel = [](const std::string& hash) {
    CompiledKernel k;
    k.source_hash = hash;
    k.arch = "sm_90a";
    k.nvrtc_version = "13.0";
    k.lowered_names = {"_Z6kernelv"};
    k.cubin.bytes.assign(1000, 'x');
    return k;
  };
  auto stored = [&] {
    std::vector<std::string> hashes;
    for (const char* hash : {"h0", "h1", "h2", "h3", "h4", "h5"})
      if (db.cubin(hash, "sm_90a", "13.0")) hashes.push_back(hash);
    return hashes;
  };
  EXPECT_EQ(db.cubin_budget(), 0u);  // none unless asked for
  db.set_cubin_budget(3000);
  for (const char* hash : {"h0", "h1", "h2"}) db.put_cubin(kernel(hash));
  EXPECT_EQ(stored(), (std::vector<std::string>{"h0", "h1", "h2"}));  // 3000 bytes: they fit
  db.put_cubin(kernel("h3"));
  EXPECT_EQ(stored(), (std::vector<std::string>{"h1", "h2", "h3"}));  // h0, the oldest, goes
  db.touch_cubin("h2", "sm_90a", "13.0");
  db.put_cubin(kernel("h4"));
  EXPECT_EQ(stored(), (std::vector<std::string>{"h1", "h2", "h4"}));  // h3 is older than h2's use
  EXPECT_EQ(db.cubin_bytes(), 3000u);
  // One cubin larger than the budget is kept alone beside the winner's.
  CompiledKernel large = kernel("h5");
  large.cubin.bytes.assign(5000, 'y');
  db.put_cubin(large);
  EXPECT_EQ(stored(), (std::vector<std::string>{"h1", "h5"}));
  db.touch_cubin("absent", "sm_90a", "13.0");  // nothing to mark: no error
}

// $TILESMITH_CUBIN_BUDGET_MB sets a writable file's budget; a value that is not a whole
// number of megabytes is refused when the file is opened.
TEST_F(DatabaseTest, TheCubinBudgetComesFromTheEnvironment) {
  ::setenv("TILESMITH_CUBIN_BUDGET_MB", "64", 1);
  EXPECT_EQ(Database(db_path()).cubin_budget(), 64u << 20);
  for (const char* bad : {"0", "-3", "1.5", "lots", "64MB"}) {
    ::setenv("TILESMITH_CUBIN_BUDGET_MB", bad, 1);
    EXPECT_THROW(Database{db_path()}, Error) << bad;
  }
  ::unsetenv("TILESMITH_CUBIN_BUDGET_MB");
  EXPECT_EQ(Database(db_path()).cubin_budget(), 0u);
}

// ---------------------------------------------------------------------------------------------
// Concurrency

TEST_F(DatabaseTest, TwoHandlesOnOneFileWriteInterleaved) {
  Database first(db_path());
  Database second(db_path());
  first.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(1024, 512, 256));
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 10; ++i) {
    Database& writer = i % 2 ? second : first;
    const std::int64_t id =
        writer.start_trial(key, trial_with(TrialStatus::running, config(i, i), 0));
    // The other handle finishes what this one started.
    Database& finisher = i % 2 ? first : second;
    finisher.finish_trial(id, trial_with(TrialStatus::ok, config(i, i), 10.0 - i));
    ids.push_back(id);
  }
  second.put_cubin(CompiledKernel{"h", "sm_90a", "13.0", {"k"}, Cubin{{'a'}}, {}, "", 0});
  EXPECT_EQ(first.trials(key).size(), 10u);
  EXPECT_EQ(second.trials(key).size(), 10u);
  EXPECT_EQ(second.refresh_winner(key)->config, config(9, 9));
  EXPECT_EQ(first.winner(key)->config, config(9, 9));
  EXPECT_TRUE(first.cubin("h", "sm_90a", "13.0").has_value());
}

TEST_F(DatabaseTest, ThreadsWithTheirOwnHandlesOpenAndWriteAFreshFileConcurrently) {
  constexpr int kWriters = 4;
  constexpr int kTrialsEach = 25;
  const TrialKey key = key_for(h100(), matmul(128, 128, 128));
  std::atomic<int> failures = 0;
  std::atomic<bool> go = false;
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      while (!go) std::this_thread::yield();
      try {
        // All open the not-yet-existing file at once: only one may create the schema.
        Database db(db_path());
        db.record_gpu(h100(), toolchain());
        for (int i = 0; i < kTrialsEach; ++i) {
          const std::int64_t id =
              db.start_trial(key, trial_with(TrialStatus::running, config(w, i), 0));
          db.finish_trial(id, trial_with(TrialStatus::ok, config(w, i), 1.0 + w + i));
          db.refresh_winner(key);
        }
      } catch (const std::exception& error) {
        ADD_FAILURE() << "writer " << w << ": " << error.what();
        ++failures;
      }
    });
  }
  go = true;
  for (std::thread& writer : writers) writer.join();
  ASSERT_EQ(failures, 0);

  Database db(db_path());
  EXPECT_EQ(db.trials(key).size(), static_cast<std::size_t>(kWriters * kTrialsEach));
  const std::optional<Winner> winner = db.winner(key);
  ASSERT_TRUE(winner.has_value());
  EXPECT_DOUBLE_EQ(winner->median_ms, 1.0);
  EXPECT_EQ(winner->trials_total, kWriters * kTrialsEach);
  ASSERT_EQ(db.gpus().size(), 1u);
  EXPECT_EQ(db.gpus()[0].toolchains_seen.size(), 1u);
}

TEST_F(DatabaseTest, OneHandleSharedByThreadsSerializesItsTransactions) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(64, 128, 64));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int i = 0; i < 20; ++i)
          db.record_trial(key, trial_with(TrialStatus::ok, config(t, i), 1.0 + i));
      } catch (const std::exception& error) {
        ADD_FAILURE() << "thread " << t << ": " << error.what();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(db.trials(key).size(), 80u);
}

// ---------------------------------------------------------------------------------------------
// Sweeps at once: claims, live and gone sweeps, interrupted trials

TEST_F(DatabaseTest, ClaimTrialGivesEachConfigToOneSweep) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(256, 256, 256));
  const std::int64_t first = db.begin_sweep(SweepOwner::current());
  const std::int64_t second = db.begin_sweep(SweepOwner::current());
  const Trial running = trial_with(TrialStatus::running, config(64, 64), 0);

  const std::optional<std::int64_t> claimed = db.claim_trial(key, running, first, 0);
  ASSERT_TRUE(claimed.has_value());
  EXPECT_FALSE(db.claim_trial(key, running, second, 0).has_value());  // live, running: taken
  db.finish_trial(*claimed, trial_with(TrialStatus::ok, config(64, 64), 1.0));
  EXPECT_FALSE(db.claim_trial(key, running, second, 0).has_value());  // finished: taken
  // A finished outcome (a compile failure) is claimed the same way, under its own status.
  const Trial failed = trial_with(TrialStatus::compile_failed, config(128, 64), 0);
  ASSERT_TRUE(db.claim_trial(key, failed, second, 0).has_value());
  EXPECT_FALSE(db.claim_trial(key, failed, first, 0).has_value());
  // --retune: trials recorded before the sweep began do not count, those after it do.
  const std::int64_t retune_from = db.last_trial_id();
  const std::optional<std::int64_t> again = db.claim_trial(key, running, second, retune_from);
  ASSERT_TRUE(again.has_value());
  EXPECT_FALSE(db.claim_trial(key, running, first, retune_from).has_value());
  // Another key is another problem: the same config is free there.
  EXPECT_TRUE(db.claim_trial(key_for(h100(), matmul(512, 256, 256)), running, first, 0));
  EXPECT_EQ(db.trials(key).size(), 3u);
  // Under another NVRTC the config measures another kernel: free again, once.
  Trial upgraded = running;
  upgraded.toolchain.nvrtc_version = "13.1";
  db.record_gpu(h100(), upgraded.toolchain);
  ASSERT_TRUE(db.claim_trial(key, upgraded, first, 0).has_value());
  EXPECT_FALSE(db.claim_trial(key, upgraded, second, 0).has_value());
}

// After a toolchain upgrade the winner comes from the trials timed with the new one, once it has
// any: an older trial measured a kernel the runtime no longer builds. Until then the older
// trials keep their winner.
TEST_F(DatabaseTest, TheWinnerComesFromTheLatestToolchainsTrials) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(256, 256, 256));
  db.record_trial(key, trial_with(TrialStatus::ok, config(64, 64), 1.0));
  db.record_trial(key, trial_with(TrialStatus::ok, config(128, 64), 2.0));
  EXPECT_EQ(db.refresh_winner(key)->config, config(64, 64));

  Toolchain upgraded = toolchain();
  upgraded.nvrtc_version = "13.1";
  db.record_gpu(h100(), upgraded);
  Trial failed = trial_with(TrialStatus::compile_failed, config(64, 64), 0);
  failed.toolchain = upgraded;
  db.record_trial(key, failed);
  EXPECT_EQ(db.refresh_winner(key)->config, config(64, 64));  // no new ok trial yet
  Trial retimed = trial_with(TrialStatus::ok, config(128, 64), 1.5);
  retimed.toolchain = upgraded;
  db.record_trial(key, retimed);
  const std::optional<Winner> winner = db.refresh_winner(key);
  ASSERT_TRUE(winner);
  EXPECT_EQ(winner->config, config(128, 64));  // slower than the old 1.0, but measured now
  EXPECT_EQ(winner->median_ms, 1.5);
  EXPECT_EQ(winner->toolchain.nvrtc_version, "13.1");
}

TEST_F(DatabaseTest, AbandonOrphanedLeavesTheTrialsOfLiveSweepsAlone) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(256, 256, 256));
  SweepOwner live = SweepOwner::current();
  SweepOwner reused_pid = live;  // this pid, but another process's start: that one is gone
  reused_pid.process_start = "another-boot:1";
  SweepOwner remote_fresh{"another-host.example", 4242, "boot:7"};
  SweepOwner remote_stale{"a-third-host.example", 4243, "boot:8"};
  const std::int64_t live_sweep = db.begin_sweep(live);
  const std::int64_t gone_sweep = db.begin_sweep(reused_pid);
  const std::int64_t fresh_sweep = db.begin_sweep(remote_fresh);
  const std::int64_t stale_sweep = db.begin_sweep(remote_stale);
  const std::int64_t ended_sweep = db.begin_sweep(live);
  db.end_sweep(ended_sweep);
  // A remote sweep whose last heartbeat is older than the lease is gone.
  raw_exec(db_path(), "UPDATE sweeps SET heartbeat_at = '2020-01-01T00:00:00Z' WHERE id = " +
                          std::to_string(stale_sweep));

  std::map<std::int64_t, std::int64_t> trial_of;  // sweep -> its running trial
  int block_n = 16;
  for (std::int64_t sweep : {live_sweep, gone_sweep, fresh_sweep, stale_sweep, ended_sweep})
    trial_of[sweep] =
        *db.claim_trial(key, trial_with(TrialStatus::running, config(64, block_n *= 2), 0), sweep, 0);
  const std::int64_t legacy = db.start_trial(key, trial_with(TrialStatus::running, config(8, 8), 0));

  EXPECT_EQ(db.abandon_orphaned(key), 4);
  EXPECT_EQ(db.abandon_orphaned(key), 0);
  std::map<std::int64_t, Trial> by_id;
  for (const Trial& trial : db.trials(key)) by_id[trial.id] = trial;
  EXPECT_EQ(by_id[trial_of[live_sweep]].status, TrialStatus::running);
  EXPECT_EQ(by_id[trial_of[fresh_sweep]].status, TrialStatus::running);
  for (std::int64_t gone : {trial_of[gone_sweep], trial_of[stale_sweep], trial_of[ended_sweep]}) {
    EXPECT_EQ(by_id[gone].status, TrialStatus::abandoned);
    EXPECT_NE(by_id[gone].detail.find("which stopped mid-candidate"), std::string::npos)
        << by_id[gone].detail;
  }
  EXPECT_EQ(by_id[legacy].status, TrialStatus::abandoned);
}

TEST_F(DatabaseTest, WithdrawTrialRemovesAnInterruptedTrialOnly) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  const TrialKey key = key_for(h100(), matmul(256, 256, 256));
  const std::int64_t sweep = db.begin_sweep(SweepOwner::current());
  const std::int64_t cut = *db.claim_trial(key, trial_with(TrialStatus::running, config(64, 64), 0), sweep, 0);
  const std::int64_t done = *db.claim_trial(key, trial_with(TrialStatus::running, config(64, 32), 0), sweep, 0);
  db.finish_trial(done, trial_with(TrialStatus::ok, config(64, 32), 1.0));
  db.withdraw_trial(cut);
  db.withdraw_trial(done);  // finished: stays
  const std::vector<Trial> trials = db.trials(key);
  ASSERT_EQ(trials.size(), 1u);
  EXPECT_EQ(trials[0].id, done);
  // The withdrawn config is free again for the next sweep.
  EXPECT_TRUE(db.claim_trial(key, trial_with(TrialStatus::running, config(64, 64), 0), sweep, 0));
}

// ---------------------------------------------------------------------------------------------
// Reading without writing

TEST_F(DatabaseTest, ReadOnlyOpenWritesNothingAndLeavesNoFilesBehind) {
  {
    Database db(db_path());
    db.record_gpu(h100(), toolchain());
    const TrialKey key = key_for(h100(), matmul(256, 256, 256));
    db.record_trial(key, trial_with(TrialStatus::ok, config(64, 64), 1.0));
    db.refresh_winner(key);
  }
  const std::string before = read_bytes(db_path());
  ASSERT_EQ(folder_entries(dir_), std::vector<std::string>{"tilesmith.db"});
  {
    Database db(db_path(), Access::read_only);
    EXPECT_TRUE(db.notes().empty());
    EXPECT_EQ(db.winners().size(), 1u);
    EXPECT_THROW(db.record_gpu(a100(), toolchain()), Error);  // query_only
  }
  EXPECT_EQ(read_bytes(db_path()), before);
  EXPECT_EQ(folder_entries(dir_), std::vector<std::string>{"tilesmith.db"});
  EXPECT_THROW(Database(dir_ / "absent.db", Access::read_only), Error);
  EXPECT_FALSE(fs::exists(dir_ / "absent.db"));
}

TEST_F(DatabaseTest, ReadOnlyOpenOfAnOlderSchemaReadsAMigratedCopyAndLeavesTheFile) {
  raw_exec(db_path(), kVersion1File);
  const std::string before = read_bytes(db_path());
  const TrialKey key =
      key_for(h100(), matmul(4096, 1024, 512, DType::bf16, DType::f32), "tmplhash1");
  {
    Database db(db_path(), Access::read_only);
    ASSERT_EQ(db.notes().size(), 1u);
    EXPECT_NE(db.notes()[0].find("schema version 1"), std::string::npos) << db.notes()[0];
    ASSERT_TRUE(db.winner(key).has_value());
    EXPECT_DOUBLE_EQ(db.winner(key)->median_ms, 0.5);
    EXPECT_TRUE(db.misses().empty());  // a table of version 2, present in the copy
  }
  EXPECT_EQ(raw_query_text(db_path(), "PRAGMA user_version"), "1");
  EXPECT_EQ(read_bytes(db_path()), before);
}

TEST_F(DatabaseTest, ProblemsKeepTheirOptionsThroughTrialsWinnersAndMisses) {
  Database db(db_path());
  db.record_gpu(h100(), toolchain());
  Problem plain = matmul(256, 256, 256);
  Problem with = plain;
  with.options = {{"layout_b", "col"}};
  const TrialKey with_key = key_for(h100(), with), plain_key = key_for(h100(), plain);
  db.record_trial(with_key, trial_with(TrialStatus::ok, config(64, 64), 1.0));
  db.record_trial(plain_key, trial_with(TrialStatus::ok, config(64, 64), 2.0));
  ASSERT_TRUE(db.refresh_winner(with_key));
  ASSERT_TRUE(db.refresh_winner(plain_key));
  EXPECT_DOUBLE_EQ(db.winner(with_key)->median_ms, 1.0);  // two problems, two winners
  EXPECT_DOUBLE_EQ(db.winner(plain_key)->median_ms, 2.0);
  std::vector<Problem> listed;
  for (const Winner& winner : db.winners()) listed.push_back(winner.problem);
  EXPECT_NE(std::find(listed.begin(), listed.end(), with), listed.end());
  EXPECT_NE(std::find(listed.begin(), listed.end(), plain), listed.end());
  db.record_miss(key_for(h100(), Problem{"matmul", DType::bf16, DType::bf16, {8, 8, 8},
                                         {{"act", "gelu"}}}));
  ASSERT_EQ(db.misses().size(), 1u);
  EXPECT_EQ(db.misses()[0].problem.options.at("act"), "gelu");
}

}  // namespace
}  // namespace tilesmith::cache

namespace tilesmith::cache {
namespace {

// Two shards of one sweep merged: every trial of both, the winner decided from all of them,
// misses and cubins carried over; merging again adds nothing; a file never merges into itself.
TEST_F(DatabaseTest, MergeOfTwoShardsKeepsEveryTrialAndIsIdempotent) {
  const TrialKey key = key_for(h100(), matmul(2048, 2048, 2048));
  const TrialKey untuned = key_for(a100(), matmul(16, 4096, 4096));
  const fs::path first = dir_ / "shard-0.db", second = dir_ / "shard-1.db", target = dir_ / "all.db";
  {
    Database shard(first);
    shard.record_gpu(h100(), toolchain());
    shard.record_trial(key, trial_with(TrialStatus::ok, config(64, 64), 2.0));
    shard.record_trial(key, trial_with(TrialStatus::wrong, config(256, 256), 0.5));
    shard.refresh_winner(key);
    CompiledKernel kernel;
    kernel.source_hash = "src-a";
    kernel.arch = "sm_90a";
    kernel.nvrtc_version = "13.0";
    kernel.lowered_names = {"_Z1kv"};
    kernel.cubin.bytes = {'\x7f', 'E', 'L', 'F'};
    shard.put_cubin(kernel);
  }
  {
    Database shard(second);
    shard.record_gpu(h100(), toolchain());
    shard.record_gpu(a100(), toolchain("12.4", "13.0"));
    shard.record_trial(key, trial_with(TrialStatus::ok, config(128, 128), 1.5));
    shard.record_trial(key, trial_with(TrialStatus::compile_failed, config(512, 512), 0));
    shard.refresh_winner(key);
    shard.record_miss(untuned);
    shard.record_miss(untuned);
    shard.record_miss(key);  // missed before its shard's winner existed elsewhere
  }
  Database all(target);
  const MergeCounts from_first = all.merge_from(Database(first, Access::read_only));
  EXPECT_EQ(from_first.trials_added, 2);
  EXPECT_EQ(from_first.cubins_added, 1);
  EXPECT_EQ(from_first.gpus, 1);
  const MergeCounts from_second = all.merge_from(Database(second, Access::read_only));
  EXPECT_EQ(from_second.trials_added, 2);
  EXPECT_EQ(from_second.gpus, 1);  // the A100

  EXPECT_EQ(all.trials(key).size(), 4u);
  ASSERT_TRUE(all.winner(key).has_value());
  EXPECT_EQ(all.winner(key)->config, config(128, 128));  // the fastest ok trial of either shard
  EXPECT_EQ(all.winner(key)->trials_total, 4);
  ASSERT_EQ(all.misses().size(), 1u);  // the tuned key's miss is dropped
  EXPECT_EQ(all.misses()[0].problem, untuned.problem);
  EXPECT_EQ(all.misses()[0].count, 2);
  ASSERT_TRUE(all.cubin("src-a", "sm_90a", "13.0").has_value());
  EXPECT_EQ(all.cubin("src-a", "sm_90a", "13.0")->cubin.bytes.size(), 4u);
  EXPECT_EQ(all.gpus().size(), 2u);
  // Creation times are the shards' own.
  const std::vector<Trial> in_first = Database(first, Access::read_only).trials(key);
  for (const Trial& trial : all.trials(key))
    if (trial.config == config(64, 64)) EXPECT_EQ(trial.created_at, in_first[0].created_at);

  // Merging again changes nothing.
  const MergeCounts again = all.merge_from(Database(second, Access::read_only));
  EXPECT_EQ(again.trials_added, 0);
  EXPECT_EQ(again.trials_present, 2);
  EXPECT_EQ(again.cubins_added, 0);
  EXPECT_EQ(all.trials(key).size(), 4u);
  EXPECT_EQ(all.misses()[0].count, 2);

  try {
    all.merge_from(Database(target, Access::read_only));
    FAIL() << "a database merged into itself";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("into itself"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace tilesmith::cache
