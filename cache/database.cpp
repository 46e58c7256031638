#include "cache/database.hpp"

#include <sqlite3.h>

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <span>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace tilesmith::cache {
namespace {

// PRAGMA application_id of every tilesmith database: "TSMT". A file with another id belongs to
// some other program and is never touched.
constexpr std::int32_t kApplicationId = 0x54534D54;

// How long a call waits for another connection's write lock before failing.
constexpr std::chrono::milliseconds kBusyTimeout{10000};

constexpr const char* kAbandonedDetail =
    "left running by an earlier sweep that stopped mid-candidate";

// One forward step of the schema: applied to a file at version `to_version - 1`, in one
// transaction together with the user_version bump, so a file is always at exactly one version.
struct Migration {
  int to_version;
  const char* description;
  const char* sql;
};

// Timestamps are written by SQLite as UTC ISO 8601 ("2025-01-31T12:00:00Z"); every table's
// DEFAULT uses this expression.
#define TILESMITH_NOW "strftime('%Y-%m-%dT%H:%M:%SZ', 'now')"

// REAL columns that a measurement may leave as NaN are nullable: SQLite stores a bound NaN as
// NULL, and NULL reads back as NaN (see Statement::bind and Statement::real).
constexpr Migration kMigrations[] = {
    {1, "create the schema", R"sql(
CREATE TABLE gpus (
  id        INTEGER PRIMARY KEY,
  model_key TEXT NOT NULL UNIQUE,  -- DeviceTarget::model_key(): name | sm_XY | N SMs
  name      TEXT NOT NULL,
  cc_major  INTEGER NOT NULL,
  cc_minor  INTEGER NOT NULL,
  sm_count  INTEGER NOT NULL
);

CREATE TABLE toolchains (
  gpu_id         INTEGER NOT NULL REFERENCES gpus(id),
  driver_version TEXT NOT NULL,
  nvrtc_version  TEXT NOT NULL,
  first_seen     TEXT NOT NULL DEFAULT ()sql" TILESMITH_NOW R"sql(),
  last_seen      TEXT NOT NULL DEFAULT ()sql" TILESMITH_NOW R"sql(),
  UNIQUE (gpu_id, driver_version, nvrtc_version)
);

CREATE TABLE problems (
  id        INTEGER PRIMARY KEY,
  key       TEXT NOT NULL UNIQUE,  -- Problem::key()
  op        TEXT NOT NULL,
  dtype     TEXT NOT NULL,         -- dtype_name()
  out_dtype TEXT NOT NULL,
  shape     TEXT NOT NULL          -- Problem::shape_text()
);

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
  created_at        TEXT NOT NULL DEFAULT ()sql" TILESMITH_NOW R"sql()
);
CREATE INDEX trials_by_key ON trials (gpu_id, problem_id, template_hash);

CREATE TABLE winners (
  gpu_id        INTEGER NOT NULL REFERENCES gpus(id),
  problem_id    INTEGER NOT NULL REFERENCES problems(id),
  template_hash TEXT NOT NULL,
  trial_id      INTEGER NOT NULL REFERENCES trials(id),
  config        TEXT NOT NULL,
  source_hash   TEXT NOT NULL,
  median_ms     REAL NOT NULL,
  spread        REAL,
  updated_at    TEXT NOT NULL DEFAULT ()sql" TILESMITH_NOW R"sql(),
  PRIMARY KEY (gpu_id, problem_id, template_hash)
);

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
  created_at        TEXT NOT NULL DEFAULT ()sql" TILESMITH_NOW R"sql(),
  PRIMARY KEY (source_hash, arch, nvrtc_version)
);
)sql"},
    // Shipped steps are never edited: files in users' hands were made by them. A change is a new
    // step.
    {2, "add the table of misses", R"sql(
CREATE TABLE misses (
  gpu_id        INTEGER NOT NULL REFERENCES gpus(id),
  problem_id    INTEGER NOT NULL REFERENCES problems(id),
  template_hash TEXT NOT NULL,
  count         INTEGER NOT NULL,
  first_seen    TEXT NOT NULL DEFAULT ()sql" TILESMITH_NOW R"sql(),
  last_seen     TEXT NOT NULL DEFAULT ()sql" TILESMITH_NOW R"sql(),
  PRIMARY KEY (gpu_id, problem_id, template_hash)
);
)sql"},
    // Trials of older versions keep a NULL sweep_id: nothing tells whether their sweep is alive,
    // so a `running` one among them is abandoned as before.
    {3, "add sweeps, so a trial left running is abandoned only when its sweep is gone", R"sql(
CREATE TABLE sweeps (
  id            INTEGER PRIMARY KEY,
  host          TEXT NOT NULL,
  pid           INTEGER NOT NULL,
  process_start TEXT NOT NULL,  -- SweepOwner::process_start: boot id and start time of the pid
  started_at    TEXT NOT NULL DEFAULT ()sql" TILESMITH_NOW R"sql(),
  heartbeat_at  TEXT NOT NULL DEFAULT ()sql" TILESMITH_NOW R"sql(),
  ended_at      TEXT
);
ALTER TABLE trials ADD COLUMN sweep_id INTEGER REFERENCES sweeps(id);
)sql"},
    // Problems of older versions have no options: '' keeps their keys and meaning.
    {4, "add the problems' options (what besides the shape changes the kernel)", R"sql(
ALTER TABLE problems ADD COLUMN options TEXT NOT NULL DEFAULT '';  -- Problem::options_text()
)sql"},
    // Cubins of older versions keep a NULL last_use: they count as the least recently used.
    {5, "add the cubins' order of use, so a budget evicts the least recently used", R"sql(
ALTER TABLE cubins ADD COLUMN last_use INTEGER;  -- larger: stored or used more recently
)sql"},
};
static_assert(std::size(kMigrations) == kSchemaVersion,
              "every schema version needs exactly one migration step leading to it");

// The path SQLite has open, for error messages.
std::string db_path(sqlite3* db) {
  const char* name = sqlite3_db_filename(db, "main");
  return name && *name ? name : "<unnamed database>";
}

[[noreturn]] void throw_sqlite(sqlite3* db, int rc, std::string_view purpose) {
  throw Error("cache " + db_path(db) + ": " + std::string(purpose) +
              " failed: " + sqlite3_errmsg(db) + " (" + sqlite3_errstr(rc) + ")");
}

// Runs constant SQL (schema steps, transaction control): never anything built from user input.
void exec(sqlite3* db, const char* sql, std::string_view purpose) {
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) throw_sqlite(db, rc, purpose);
}

// A prepared statement with named parameters (":gpu"). Every sqlite3 return code is checked;
// failures throw Error naming the database, the statement's purpose and SQLite's message.
class Statement {
 public:
  Statement(sqlite3* db, std::string_view sql, std::string_view purpose)
      : db_(db), purpose_(purpose) {
    int rc = sqlite3_prepare_v2(db, sql.data(), static_cast<int>(sql.size()), &stmt_, nullptr);
    if (rc != SQLITE_OK) throw_sqlite(db_, rc, purpose_);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Text and blobs are copied (SQLITE_TRANSIENT): callers may bind temporaries.
  Statement& bind(const char* name, std::string_view value) {
    return check_bind(sqlite3_bind_text64(stmt_, index(name), value.data(), value.size(),
                                          SQLITE_TRANSIENT, SQLITE_UTF8));
  }
  Statement& bind(const char* name, const char* value) {
    return bind(name, std::string_view(value));
  }
  Statement& bind(const char* name, std::int64_t value) {
    return check_bind(sqlite3_bind_int64(stmt_, index(name), value));
  }
  Statement& bind(const char* name, int value) {
    return check_bind(sqlite3_bind_int(stmt_, index(name), value));
  }
  // SQLite would silently turn NaN into NULL; do it on purpose so real() can turn it back.
  Statement& bind(const char* name, double value) {
    if (std::isnan(value)) return check_bind(sqlite3_bind_null(stmt_, index(name)));
    return check_bind(sqlite3_bind_double(stmt_, index(name), value));
  }
  Statement& bind_blob(const char* name, std::span<const char> bytes) {
    // A null data pointer would bind NULL, not an empty blob.
    if (bytes.empty()) return check_bind(sqlite3_bind_zeroblob(stmt_, index(name), 0));
    return check_bind(
        sqlite3_bind_blob64(stmt_, index(name), bytes.data(), bytes.size(), SQLITE_TRANSIENT));
  }
  Statement& bind_null(const char* name) {
    return check_bind(sqlite3_bind_null(stmt_, index(name)));
  }
  // Nothing binds NULL, for filters written "WHERE :gpu IS NULL OR g.model_key = :gpu".
  Statement& bind_optional(const char* name, const std::optional<std::string>& value) {
    return value ? bind(name, *value) : bind_null(name);
  }

  // True when a row is available, false when the statement is done.
  bool step() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw_sqlite(db_, rc, purpose_);
  }
  // For statements that return no rows (INSERT, UPDATE, DELETE).
  void run() {
    if (step()) throw Error("cache " + db_path(db_) + ": " + purpose_ + ": unexpected result row");
  }

  bool is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }
  std::int64_t int64(int column) const { return sqlite3_column_int64(stmt_, column); }
  int integer(int column) const { return sqlite3_column_int(stmt_, column); }
  double real(int column) const {
    return is_null(column) ? std::numeric_limits<double>::quiet_NaN()
                           : sqlite3_column_double(stmt_, column);
  }
  std::string text(int column) const {
    const unsigned char* data = sqlite3_column_text(stmt_, column);
    if (!data) return {};
    return std::string(reinterpret_cast<const char*>(data),
                       static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column)));
  }
  std::vector<char> blob(int column) const {
    const char* data = static_cast<const char*>(sqlite3_column_blob(stmt_, column));
    const int size = sqlite3_column_bytes(stmt_, column);
    if (!data || size <= 0) return {};
    return std::vector<char>(data, data + size);
  }

 private:
  int index(const char* name) const {
    int i = sqlite3_bind_parameter_index(stmt_, name);
    if (i == 0)
      throw Error("cache " + db_path(db_) + ": " + purpose_ + ": the statement has no parameter " +
                  name);
    return i;
  }
  Statement& check_bind(int rc) {
    if (rc != SQLITE_OK) throw_sqlite(db_, rc, purpose_);
    return *this;
  }

  sqlite3* db_;
  std::string purpose_;
  sqlite3_stmt* stmt_ = nullptr;
};

// BEGIN IMMEDIATE takes the write lock up front (waiting out the busy timeout), so a writer
// never has to upgrade a read snapshot that another connection has made stale. Rolls back unless
// committed.
class Transaction {
 public:
  Transaction(sqlite3* db, std::string_view purpose) : db_(db), purpose_(purpose) {
    exec(db_, "BEGIN IMMEDIATE", "starting a transaction for " + purpose_);
  }
  ~Transaction() {
    // Never throws: a failed rollback leaves nothing more to undo.
    if (!committed_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  void commit() {
    exec(db_, "COMMIT", "committing " + purpose_);
    committed_ = true;
  }

 private:
  sqlite3* db_;
  std::string purpose_;
  bool committed_ = false;
};

// ---------------------------------------------------------------------------------------------
// Identity of a file: whether it is ours to write.

struct Identity {
  std::int32_t application_id = 0;
  int user_version = 0;
  std::vector<std::string> tables;  // user tables, not sqlite_*
};

std::string hex32(std::int32_t value) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "0x%08X", static_cast<std::uint32_t>(value));
  return buffer;
}

// Reads only: safe on any SQLite file. One statement, so one snapshot: separate reads could see
// the application_id from before another process created the schema and the tables from after.
// One row per user table, or a single row with a NULL name when there are none.
Identity read_identity(sqlite3* db) {
  Statement query(db, R"sql(
SELECT a.application_id, v.user_version, t.name
  FROM pragma_application_id AS a
 CROSS JOIN pragma_user_version AS v
  LEFT JOIN (SELECT name FROM sqlite_master
              WHERE type = 'table' AND name NOT LIKE 'sqlite\_%' ESCAPE '\') AS t
 ORDER BY t.name
)sql",
                  "reading the database's identity");
  Identity identity;
  while (query.step()) {
    identity.application_id = query.integer(0);
    identity.user_version = query.integer(1);
    if (!query.is_null(2)) identity.tables.push_back(query.text(2));
  }
  return identity;
}

std::string refusal(const std::string& path, const std::string& what) {
  return "cache " + path + ": " + what + "; refusing to modify it";
}

// Throws unless the file is tilesmith's at a version this build can use or migrate, or an empty
// database that is ours to initialize.
void check_identity(const Identity& identity, const std::string& path) {
  const std::string foreign = "not a tilesmith database";
  if (identity.application_id != kApplicationId) {
    if (identity.application_id != 0) {
      throw Error(refusal(path, foreign + " (application_id " + hex32(identity.application_id) +
                                    ", tilesmith's is " + hex32(kApplicationId) + ")"));
    }
    if (!identity.tables.empty()) {
      std::string names;
      for (std::size_t i = 0; i < identity.tables.size() && i < 5; ++i)
        names += (i ? ", " : "") + identity.tables[i];
      if (identity.tables.size() > 5) names += ", ...";
      throw Error(
          refusal(path, foreign + " (application_id 0, and it holds other tables: " + names + ")"));
    }
    if (identity.user_version != 0) {
      const std::string version = std::to_string(identity.user_version);
      throw Error(refusal(path, foreign + " (application_id 0, and user_version " + version + ")"));
    }
    return;  // an empty SQLite database (or a new file): ours to initialize
  }
  if (identity.user_version > kSchemaVersion) {
    const std::string found = std::to_string(identity.user_version);
    const std::string known = std::to_string(kSchemaVersion);
    throw Error(refusal(path, "written by a newer tilesmith (schema version " + found +
                                  ", this build knows up to " + known +
                                  "); upgrade tilesmith or point TILESMITH_DB at another file"));
  }
  if (identity.user_version == 0 && !identity.tables.empty())
    throw Error(refusal(path,
                        "inconsistent tilesmith database (schema version 0, yet it has "
                        "tables)"));
}

// The first read of a file: maps "this is not a database at all" to a clear message.
void probe_readable(sqlite3* db, const std::string& path) {
  int rc = sqlite3_exec(db, "SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr);
  if (rc == SQLITE_OK) return;
  const int primary = rc & 0xff;
  if (primary == SQLITE_NOTADB)
    throw Error(
        refusal(path, "not an SQLite database (SQLite: " + std::string(sqlite3_errmsg(db)) + ")"));
  if (primary == SQLITE_CORRUPT)
    throw Error(refusal(
        path, "a corrupt SQLite database (SQLite: " + std::string(sqlite3_errmsg(db)) + ")"));
  throw_sqlite(db, rc, "reading the database header");
}

// Switching to WAL needs an exclusive lock, and SQLite does not call the busy handler for it: a
// second process opening a new file at the same moment gets SQLITE_BUSY at once. Retry for as
// long as the busy timeout would have waited. Once a file is in WAL mode this is a no-op.
// On file systems without shared memory SQLite keeps the old mode; the busy timeout still
// serializes writers then, so that is slower but correct.
void enable_wal(sqlite3* db) {
  const auto give_up = std::chrono::steady_clock::now() + kBusyTimeout;
  for (;;) {
    const int rc = sqlite3_exec(db, "PRAGMA journal_mode = WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    const int primary = rc & 0xff;
    if ((primary != SQLITE_BUSY && primary != SQLITE_LOCKED) ||
        std::chrono::steady_clock::now() > give_up)
      throw_sqlite(db, rc, "switching to write-ahead logging");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void migrate(sqlite3* db, const std::string& path) {
  for (;;) {
    Transaction transaction(db, "migrating the schema");
    // Re-read under the write lock: another process may have migrated (or created) it meanwhile.
    const Identity identity = read_identity(db);
    check_identity(identity, path);
    if (identity.user_version >= kSchemaVersion) return;  // rolls back an empty transaction
    const Migration& step = kMigrations[identity.user_version];
    exec(db, step.sql,
         "migrating the schema to version " + std::to_string(step.to_version) + " (" +
             step.description + ")");
    // Constants of this build, not input: the pragmas take no bound parameters.
    exec(db, ("PRAGMA user_version = " + std::to_string(step.to_version)).c_str(),
         "setting the schema version");
    exec(db, ("PRAGMA application_id = " + std::to_string(kApplicationId)).c_str(),
         "setting the application_id");
    transaction.commit();
  }
}

// ---------------------------------------------------------------------------------------------
// Conversions between the stored columns and the C++ types.

std::string config_json(const Config& config) {
  // nlohmann::json objects are std::maps: keys come out sorted, so the text is canonical.
  nlohmann::json object = nlohmann::json::object();
  for (const auto& [name, value] : config.values) object[name] = value;
  try {
    return object.dump();
  } catch (const nlohmann::json::exception& error) {  // a name that is not valid UTF-8
    throw Error("cache: config '" + config.text() + "' cannot be stored: " + error.what());
  }
}

Config parse_config_json(const std::string& text, sqlite3* db) {
  Config config;
  nlohmann::json object = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!object.is_object())
    throw Error("cache " + db_path(db) + ": stored config '" + text + "' is not a JSON object");
  for (const auto& [name, value] : object.items()) {
    if (!value.is_number_integer())
      throw Error("cache " + db_path(db) + ": stored config '" + text + "': parameter '" + name +
                  "' is not an integer");
    config.values[name] = value.get<int>();
  }
  return config;
}

// p.op, p.dtype, p.out_dtype, p.shape, p.options from `first_column` on.
Problem problem_from_columns(const Statement& row, int first_column) {
  Problem problem;
  problem.op = row.text(first_column);
  problem.dtype = parse_dtype(row.text(first_column + 1));
  problem.out_dtype = parse_dtype(row.text(first_column + 2));
  const std::string shape = row.text(first_column + 3);
  if (!shape.empty()) problem.shape = parse_shape(shape);
  const std::string options = row.text(first_column + 4);
  if (!options.empty()) problem.options = parse_options(options);
  return problem;
}

// Binds everything a trial learns while it runs: shared by record, start and finish.
void bind_outcome(Statement& statement, const Trial& trial, TrialStatus status) {
  statement.bind(":status", status_name(status))
      .bind(":detail", trial.detail)
      .bind(":median_ms", trial.median_ms)
      .bind(":min_ms", trial.min_ms)
      .bind(":spread", trial.spread)
      .bind(":repetitions", trial.repetitions)
      .bind(":rel_error", trial.rel_error)
      .bind(":registers", trial.resources.registers)
      .bind(":static_smem_bytes", trial.resources.static_smem_bytes)
      .bind(":stack_frame_bytes", trial.resources.stack_frame_bytes)
      .bind(":spill_store_bytes", trial.resources.spill_store_bytes)
      .bind(":spill_load_bytes", trial.resources.spill_load_bytes)
      .bind(":compile_seconds", trial.compile_seconds)
      .bind(":driver_version", trial.toolchain.driver_version)
      .bind(":nvrtc_version", trial.toolchain.nvrtc_version);
}

constexpr const char* kTrialColumns =
    "t.id, t.config, t.source_hash, t.status, t.detail, t.median_ms, t.min_ms, t.spread,"
    " t.repetitions, t.rel_error, t.registers, t.static_smem_bytes, t.stack_frame_bytes,"
    " t.spill_store_bytes, t.spill_load_bytes, t.compile_seconds, t.driver_version,"
    " t.nvrtc_version, t.created_at";

Trial trial_from_row(const Statement& row, sqlite3* db) {
  Trial trial;
  trial.id = row.int64(0);
  trial.config = parse_config_json(row.text(1), db);
  trial.source_hash = row.text(2);
  trial.status = parse_status(row.text(3));
  trial.detail = row.text(4);
  trial.median_ms = row.real(5);
  trial.min_ms = row.real(6);
  trial.spread = row.real(7);
  trial.repetitions = row.integer(8);
  trial.rel_error = row.real(9);
  trial.resources.registers = row.integer(10);
  trial.resources.static_smem_bytes = row.integer(11);
  trial.resources.stack_frame_bytes = row.integer(12);
  trial.resources.spill_store_bytes = row.integer(13);
  trial.resources.spill_load_bytes = row.integer(14);
  trial.compile_seconds = row.real(15);
  trial.toolchain.driver_version = row.text(16);
  trial.toolchain.nvrtc_version = row.text(17);
  trial.created_at = row.text(18);
  return trial;
}

// Selects a winner with its GPU, problem and trial counts; callers append WHERE/ORDER BY.
constexpr const char* kWinnerSelect = R"sql(
SELECT g.model_key, g.name, p.op, p.dtype, p.out_dtype, p.shape, p.options, w.template_hash, w.config,
       w.source_hash, w.median_ms, w.spread, w.updated_at,
       (SELECT count(*) FROM trials t
         WHERE t.gpu_id = w.gpu_id AND t.problem_id = w.problem_id
           AND t.template_hash = w.template_hash AND t.status = 'ok'),
       (SELECT count(*) FROM trials t
         WHERE t.gpu_id = w.gpu_id AND t.problem_id = w.problem_id
           AND t.template_hash = w.template_hash),
       wt.driver_version, wt.nvrtc_version
  FROM winners w
  JOIN gpus g ON g.id = w.gpu_id
  JOIN problems p ON p.id = w.problem_id
  LEFT JOIN trials wt ON wt.id = w.trial_id
)sql";

Winner winner_from_row(const Statement& row, sqlite3* db) {
  Winner winner;
  winner.gpu_model = row.text(0);
  winner.gpu_name = row.text(1);
  winner.problem = problem_from_columns(row, 2);
  winner.template_hash = row.text(7);
  winner.config = parse_config_json(row.text(8), db);
  winner.source_hash = row.text(9);
  winner.median_ms = row.real(10);
  winner.spread = row.real(11);
  winner.updated_at = row.text(12);
  winner.trials_ok = row.integer(13);
  winner.trials_total = row.integer(14);
  winner.toolchain = {row.text(15), row.text(16)};
  return winner;
}

// The trials under a key: ok ones fastest first, then everything else in the order it was
// recorded. An ok trial whose median is NaN (stored NULL) sorts after the timed ones.
constexpr const char* kTrialsByKey = R"sql(
  FROM trials t
  JOIN gpus g ON g.id = t.gpu_id
  JOIN problems p ON p.id = t.problem_id
 WHERE g.model_key = :gpu AND p.key = :problem AND t.template_hash = :template_hash
 ORDER BY t.status <> 'ok',
          CASE WHEN t.status = 'ok' THEN t.median_ms IS NULL END,
          CASE WHEN t.status = 'ok' THEN t.median_ms END,
          t.id
 LIMIT :limit
)sql";

std::optional<std::int64_t> find_gpu_id(sqlite3* db, const std::string& model_key) {
  Statement query(db, "SELECT id FROM gpus WHERE model_key = :gpu", "looking up a GPU");
  query.bind(":gpu", model_key);
  if (!query.step()) return std::nullopt;
  return query.int64(0);
}

std::int64_t require_gpu_id(sqlite3* db, const std::string& model_key) {
  if (auto id = find_gpu_id(db, model_key)) return *id;
  throw Error("cache " + db_path(db) + ": GPU model '" + model_key +
              "' has not been recorded; record_gpu must come before its trials and misses");
}

std::optional<std::int64_t> find_problem_id(sqlite3* db, const Problem& problem) {
  Statement query(db, "SELECT id FROM problems WHERE key = :key", "looking up a problem");
  query.bind(":key", problem.key());
  if (!query.step()) return std::nullopt;
  return query.int64(0);
}

std::int64_t ensure_problem_id(sqlite3* db, const Problem& problem) {
  if (auto id = find_problem_id(db, problem)) return *id;
  Statement insert(db,
                   "INSERT INTO problems (key, op, dtype, out_dtype, shape, options)"
                   " VALUES (:key, :op, :dtype, :out_dtype, :shape, :options)",
                   "recording a problem");
  insert.bind(":key", problem.key())
      .bind(":op", problem.op)
      .bind(":dtype", dtype_name(problem.dtype))
      .bind(":out_dtype", dtype_name(problem.out_dtype))
      .bind(":shape", problem.shape_text())
      .bind(":options", problem.options_text());
  insert.run();
  return sqlite3_last_insert_rowid(db);
}

std::int64_t insert_trial(sqlite3* db, const TrialKey& key, const Trial& trial, TrialStatus status,
                          std::optional<std::int64_t> sweep_id = std::nullopt) {
  // The problem row may be created before the GPU check fails: the caller's transaction then
  // rolls it back with everything else.
  const std::int64_t problem_id = ensure_problem_id(db, key.problem);
  const std::int64_t gpu_id = require_gpu_id(db, key.gpu_model);
  Statement insert(db, R"sql(
INSERT INTO trials (gpu_id, problem_id, template_hash, config, source_hash, status, detail,
                    median_ms, min_ms, spread, repetitions, rel_error, registers,
                    static_smem_bytes, stack_frame_bytes, spill_store_bytes, spill_load_bytes,
                    compile_seconds, driver_version, nvrtc_version, sweep_id)
VALUES (:gpu_id, :problem_id, :template_hash, :config, :source_hash, :status, :detail,
        :median_ms, :min_ms, :spread, :repetitions, :rel_error, :registers,
        :static_smem_bytes, :stack_frame_bytes, :spill_store_bytes, :spill_load_bytes,
        :compile_seconds, :driver_version, :nvrtc_version, :sweep_id)
)sql",
                   "recording a trial");
  if (sweep_id)
    insert.bind(":sweep_id", *sweep_id);
  else
    insert.bind_null(":sweep_id");
  insert.bind(":gpu_id", gpu_id)
      .bind(":problem_id", problem_id)
      .bind(":template_hash", key.template_hash)
      .bind(":config", config_json(trial.config))
      .bind(":source_hash", trial.source_hash);
  bind_outcome(insert, trial, status);
  insert.run();
  return sqlite3_last_insert_rowid(db);
}

// Runs `sql`, a statement without result rows on one key's rows (:gpu_id, :problem_id,
// :template_hash).
void run_for_key(sqlite3* db, std::string_view sql, std::string_view purpose, std::int64_t gpu_id,
                 std::int64_t problem_id, const std::string& template_hash) {
  Statement statement(db, sql, purpose);
  statement.bind(":gpu_id", gpu_id)
      .bind(":problem_id", problem_id)
      .bind(":template_hash", template_hash);
  statement.run();
}

std::optional<Winner> read_winner(sqlite3* db, const TrialKey& key) {
  Statement query(db,
                  std::string(kWinnerSelect) +
                      " WHERE g.model_key = :gpu AND p.key = :problem"
                      " AND w.template_hash = :template_hash",
                  "reading a winner");
  query.bind(":gpu", key.gpu_model)
      .bind(":problem", key.problem.key())
      .bind(":template_hash", key.template_hash);
  if (!query.step()) return std::nullopt;
  return winner_from_row(query, db);
}

// Opens `target` (a path, or a URI with SQLITE_OPEN_URI), sets the busy timeout and checks
// that it reads as an SQLite database; messages name the file `name`. On failure *db may hold a
// connection to close.
void open_connection(sqlite3** db, const std::string& target, int flags,
                     const std::string& name) {
  const int rc = sqlite3_open_v2(target.c_str(), db, flags, nullptr);
  if (rc != SQLITE_OK) {
    if (!*db) throw Error("cache " + name + ": cannot open: out of memory");
    throw Error("cache " + name + ": cannot open: " + sqlite3_errmsg(*db));
  }
  sqlite3_extended_result_codes(*db, 1);
  // Another process may hold the write lock for a while (a sweep committing a trial).
  const int timeout_rc = sqlite3_busy_timeout(*db, static_cast<int>(kBusyTimeout.count()));
  if (timeout_rc != SQLITE_OK) throw_sqlite(*db, timeout_rc, "setting the busy timeout");
  probe_readable(*db, name);
}

// "file:" URI of a path with query parameters; every byte outside the unreserved set is
// percent-encoded, so '?', '#' and '%' in folder names stay part of the path.
std::string sqlite_uri(const std::filesystem::path& path, const std::string& parameters) {
  static const char* digits = "0123456789ABCDEF";
  std::string uri = "file:";
  for (unsigned char c : std::filesystem::absolute(path).string()) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-' || c == '~') {
      uri += static_cast<char>(c);
    } else {
      uri += '%';
      uri += digits[c >> 4];
      uri += digits[c & 15];
    }
  }
  return uri + "?" + parameters;
}

// The cubins table keeps every kernel of a translation unit in its lowered_name column, one per
// line: mangled names hold no line breaks, and a file written before several kernels per config
// existed holds one name, which reads back as a list of one.
std::string join_lowered_names(const std::vector<std::string>& names) {
  std::string joined;
  for (const std::string& name : names) joined += (joined.empty() ? "" : "\n") + name;
  return joined;
}

std::vector<std::string> split_lowered_names(const std::string& joined) {
  std::vector<std::string> names;
  std::size_t start = 0;
  while (start <= joined.size()) {
    std::size_t end = joined.find('\n', start);
    if (end == std::string::npos) end = joined.size();
    if (end > start) names.push_back(joined.substr(start, end - start));
    start = end + 1;
  }
  return names;
}

std::filesystem::path env_path(const char* name) {
  const char* value = std::getenv(name);
  return value && *value ? std::filesystem::path(value) : std::filesystem::path();
}

// $TILESMITH_CUBIN_BUDGET_MB: a whole number of megabytes (2^20 bytes) of cubins to keep, at
// least 1; unset or empty: no budget.
std::uint64_t budget_from_environment() {
  const char* value = std::getenv("TILESMITH_CUBIN_BUDGET_MB");
  if (!value || !*value) return 0;
  const std::string text = value;
  std::size_t used = 0;
  unsigned long long megabytes = 0;
  try {
    megabytes = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || megabytes < 1 || megabytes > (1ull << 40))
    throw Error("TILESMITH_CUBIN_BUDGET_MB=" + text + ": want a whole number of megabytes, 1 or more");
  return megabytes << 20;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::string_view status_name(TrialStatus status) {
  switch (status) {
    case TrialStatus::running:
      return "running";
    case TrialStatus::ok:
      return "ok";
    case TrialStatus::wrong:
      return "wrong";
    case TrialStatus::compile_failed:
      return "compile_failed";
    case TrialStatus::launch_failed:
      return "launch_failed";
    case TrialStatus::fault:
      return "fault";
    case TrialStatus::timeout:
      return "timeout";
    case TrialStatus::abandoned:
      return "abandoned";
    case TrialStatus::pruned_early:
      return "pruned_early";
  }
  throw Error("invalid TrialStatus value " + std::to_string(static_cast<int>(status)));
}

TrialStatus parse_status(std::string_view name) {
  for (TrialStatus status :
       {TrialStatus::running, TrialStatus::ok, TrialStatus::wrong, TrialStatus::compile_failed,
        TrialStatus::launch_failed, TrialStatus::fault, TrialStatus::timeout,
        TrialStatus::abandoned, TrialStatus::pruned_early})
    if (status_name(status) == name) return status;
  throw Error("unknown trial status '" + std::string(name) +
              "' (expected running, ok, wrong, compile_failed, launch_failed, fault, timeout, "
              "abandoned or pruned_early)");
}

std::filesystem::path Database::default_path() {
  if (auto explicit_path = env_path("TILESMITH_DB"); !explicit_path.empty()) return explicit_path;
  // The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
  if (auto xdg = env_path("XDG_CACHE_HOME"); !xdg.empty() && xdg.is_absolute())
    return xdg / "tilesmith" / "tilesmith.db";
  if (auto home = env_path("HOME"); !home.empty())
    return home / ".cache" / "tilesmith" / "tilesmith.db";
  throw Error(
      "cache: no location for the tuning database: set TILESMITH_DB (or XDG_CACHE_HOME or HOME)");
}

Database::Database(const std::filesystem::path& path, Access access) : path_(path) {
  const std::string name = path.string();
  if (name.empty()) throw Error("cache: empty database path");
  try {
    if (access == Access::read_only) {
      open_for_reading();
      return;
    }
    if (path.has_parent_path()) {
      std::error_code error;
      std::filesystem::create_directories(path.parent_path(), error);
      if (error)
        throw Error("cache " + name + ": cannot create folder " + path.parent_path().string() +
                    ": " + error.message());
    }
    const int flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX;
    open_connection(&db_, name, flags, name);
    // Everything up to here only read the file. Nothing below writes unless the file is ours:
    // PRAGMA journal_mode=WAL alone would rewrite the header of a foreign database.
    const Identity identity = read_identity(db_);
    check_identity(identity, name);

    enable_wal(db_);
    exec(db_, "PRAGMA foreign_keys = ON", "enabling foreign keys");
    if (identity.user_version < kSchemaVersion) migrate(db_, name);
    cubin_budget_ = budget_from_environment();
  } catch (...) {
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw;
  }
}

// A reading command must work on a database it cannot write (a read-only file, folder or file
// system: a shipped database) and must leave nothing behind. SQLite's read-only mode needs the
// -shm file and keeps -wal and -shm on close, since only a writer may remove them. So:
// - file and folder writable: a normal connection with query_only set; the last connection to
//   close checkpoints and removes -wal and -shm, as every tilesmith process does;
// - otherwise, without a -wal file: immutable, which reads the file alone and creates nothing;
//   nobody can be writing it, since a writer would need a -wal file in that folder;
// - otherwise: read-only, reading the -wal file too; if SQLite cannot use it, immutable, and
//   notes() says what is not shown.
void Database::open_for_reading() {
  namespace fs = std::filesystem;
  const std::string name = path_.string();
  std::error_code error;
  if (!fs::exists(path_, error)) throw Error("cache " + name + ": no database there");
  const fs::path folder = path_.has_parent_path() ? path_.parent_path() : fs::path(".");
  const bool writable = ::access(name.c_str(), W_OK) == 0 && ::access(folder.c_str(), W_OK) == 0;
  const int why_not = errno;
  if (writable) {
    open_connection(&db_, name, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, name);
    exec(db_, "PRAGMA query_only = ON", "making the connection read-only");
  } else {
    const std::string cannot = name + " cannot be written here (" + std::strerror(why_not) + ")";
    const bool has_wal = fs::exists(name + "-wal", error);
    bool opened = false;
    if (has_wal) {
      try {
        open_connection(&db_, sqlite_uri(path_, "mode=ro"),
                        SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, name);
        opened = true;
      } catch (const Error& failure) {
        sqlite3_close_v2(db_);
        db_ = nullptr;
        notes_.push_back(cannot + ", and SQLite cannot read its write-ahead log (" +
                         failure.what() +
                         "): read as an immutable snapshot, without the changes in that log");
      }
    } else {
      notes_.push_back(cannot + ": read as an immutable snapshot");
    }
    if (!opened)
      open_connection(&db_, sqlite_uri(path_, "immutable=1"),
                      SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, name);
  }
  const Identity identity = read_identity(db_);
  check_identity(identity, name);
  if (identity.user_version < kSchemaVersion) {
    // The queries need the current schema, and a reader may not migrate the file: migrate a copy.
    sqlite3* memory = nullptr;
    open_connection(&memory, ":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, name);
    sqlite3_backup* backup = sqlite3_backup_init(memory, "main", db_, "main");
    const int rc = backup ? sqlite3_backup_step(backup, -1) : sqlite3_errcode(memory);
    if (backup) sqlite3_backup_finish(backup);
    if (rc != SQLITE_DONE) {
      std::string message = sqlite3_errmsg(memory);
      sqlite3_close_v2(memory);
      throw Error("cache " + name + ": copying an older schema into memory to read it failed: " +
                  message);
    }
    sqlite3_close_v2(db_);
    db_ = memory;
    migrate(db_, name);
    if (identity.user_version > 0)
      notes_.push_back(name + " has schema version " + std::to_string(identity.user_version) +
                       " (this build writes " + std::to_string(kSchemaVersion) +
                       "): read through a migrated copy in memory; the file is migrated when a "
                       "command that writes opens it");
  }
}

Database::~Database() { sqlite3_close_v2(db_); }

std::string toolchain_mismatch(const Toolchain& timed, const Toolchain& here) {
  if (timed.nvrtc_version != here.nvrtc_version)
    return "compiled by NVRTC " + timed.nvrtc_version + " (this is " + here.nvrtc_version +
           "): compiled here, its config would be a kernel nobody timed";
  if (here.driver_version != "none" && timed.driver_version != here.driver_version)
    return "timed under driver " + timed.driver_version + " (this is " + here.driver_version + ")";
  return "";
}

void Database::record_gpu(const DeviceTarget& device, const Toolchain& toolchain) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_, "recording a GPU");
  Statement upsert_gpu(db_, R"sql(
INSERT INTO gpus (model_key, name, cc_major, cc_minor, sm_count)
VALUES (:model_key, :name, :cc_major, :cc_minor, :sm_count)
ON CONFLICT (model_key) DO UPDATE
   SET name = excluded.name, cc_major = excluded.cc_major, cc_minor = excluded.cc_minor,
       sm_count = excluded.sm_count
)sql",
                       "recording a GPU");
  upsert_gpu.bind(":model_key", device.model_key())
      .bind(":name", device.name)
      .bind(":cc_major", device.cc_major)
      .bind(":cc_minor", device.cc_minor)
      .bind(":sm_count", device.sm_count);
  upsert_gpu.run();
  const std::int64_t gpu_id = require_gpu_id(db_, device.model_key());

  Statement upsert_toolchain(db_, R"sql(
INSERT INTO toolchains (gpu_id, driver_version, nvrtc_version)
VALUES (:gpu_id, :driver_version, :nvrtc_version)
ON CONFLICT (gpu_id, driver_version, nvrtc_version) DO UPDATE
   SET last_seen = )sql" TILESMITH_NOW R"sql(
)sql",
                             "recording a toolchain");
  upsert_toolchain.bind(":gpu_id", gpu_id)
      .bind(":driver_version", toolchain.driver_version)
      .bind(":nvrtc_version", toolchain.nvrtc_version);
  upsert_toolchain.run();
  transaction.commit();
}

std::vector<GpuInfo> Database::gpus() const {
  std::lock_guard lock(mutex_);
  Statement query(db_, R"sql(
SELECT g.model_key, g.name, g.cc_major, g.cc_minor, g.sm_count, t.driver_version, t.nvrtc_version
  FROM gpus g
  LEFT JOIN toolchains t ON t.gpu_id = g.id
 ORDER BY g.model_key, t.first_seen, t.rowid
)sql",
                  "listing GPUs");
  std::vector<GpuInfo> gpus;
  while (query.step()) {
    const std::string model_key = query.text(0);
    if (gpus.empty() || gpus.back().model_key != model_key) {
      GpuInfo& gpu = gpus.emplace_back();
      gpu.model_key = model_key;
      gpu.name = query.text(1);
      gpu.cc_major = query.integer(2);
      gpu.cc_minor = query.integer(3);
      gpu.sm_count = query.integer(4);
    }
    if (!query.is_null(5)) gpus.back().toolchains_seen.push_back({query.text(5), query.text(6)});
  }
  return gpus;
}

std::int64_t Database::start_trial(const TrialKey& key, const Trial& trial) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_, "starting a trial");
  // Whatever status the caller filled in, a started trial is running until finish_trial.
  const std::int64_t id = insert_trial(db_, key, trial, TrialStatus::running);
  transaction.commit();
  return id;
}

void Database::finish_trial(std::int64_t trial_id, const Trial& trial) {
  if (trial.status == TrialStatus::running)
    throw Error("cache " + path_.string() + ": finishing trial " + std::to_string(trial_id) +
                " with status 'running'; a finished trial needs its outcome");
  std::lock_guard lock(mutex_);
  Transaction transaction(db_, "finishing a trial");
  Statement update(db_, R"sql(
UPDATE trials
   SET status = :status, detail = :detail, median_ms = :median_ms, min_ms = :min_ms,
       spread = :spread, repetitions = :repetitions, rel_error = :rel_error,
       registers = :registers, static_smem_bytes = :static_smem_bytes,
       stack_frame_bytes = :stack_frame_bytes, spill_store_bytes = :spill_store_bytes,
       spill_load_bytes = :spill_load_bytes, compile_seconds = :compile_seconds,
       driver_version = :driver_version, nvrtc_version = :nvrtc_version
 WHERE id = :id
)sql",
                   "finishing a trial");
  bind_outcome(update, trial, trial.status);
  update.bind(":id", trial_id);
  update.run();
  if (sqlite3_changes(db_) != 1)
    throw Error("cache " + path_.string() + ": finishing trial " + std::to_string(trial_id) +
                ": no such trial");
  transaction.commit();
}

std::int64_t Database::record_trial(const TrialKey& key, const Trial& trial) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_, "recording a trial");
  const std::int64_t id = insert_trial(db_, key, trial, trial.status);
  transaction.commit();
  return id;
}

std::int64_t Database::begin_sweep(const SweepOwner& owner) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_, "registering a sweep");
  Statement insert(db_,
                   "INSERT INTO sweeps (host, pid, process_start)"
                   " VALUES (:host, :pid, :process_start)",
                   "registering a sweep");
  insert.bind(":host", owner.host).bind(":pid", owner.pid).bind(":process_start", owner.process_start);
  insert.run();
  const std::int64_t id = sqlite3_last_insert_rowid(db_);
  transaction.commit();
  return id;
}

void Database::heartbeat(std::int64_t sweep_id) {
  std::lock_guard lock(mutex_);
  Statement update(db_, "UPDATE sweeps SET heartbeat_at = " TILESMITH_NOW " WHERE id = :id",
                   "writing a sweep's heartbeat");
  update.bind(":id", sweep_id);
  update.run();  // one statement: its own transaction
}

void Database::end_sweep(std::int64_t sweep_id) {
  std::lock_guard lock(mutex_);
  Statement update(db_, "UPDATE sweeps SET ended_at = " TILESMITH_NOW " WHERE id = :id",
                   "ending a sweep");
  update.bind(":id", sweep_id);
  update.run();
}

std::optional<std::int64_t> Database::claim_trial(const TrialKey& key, const Trial& trial,
                                                  std::int64_t sweep_id,
                                                  std::int64_t after_trial_id) {
  std::lock_guard lock(mutex_);
  // BEGIN IMMEDIATE: the check and the insert see no other writer in between.
  Transaction transaction(db_, "claiming a trial");
  const std::int64_t problem_id = ensure_problem_id(db_, key.problem);
  const std::int64_t gpu_id = require_gpu_id(db_, key.gpu_model);
  // Taken: tried (or being tried) after `after_trial_id` with this trial's toolchain; a trial
  // of another NVRTC or driver measured something else and does not count.
  Statement taken(db_, R"sql(
SELECT 1 FROM trials
 WHERE gpu_id = :gpu_id AND problem_id = :problem_id AND template_hash = :template_hash
   AND config = :config AND id > :after
   AND nvrtc_version = :nvrtc_version AND driver_version = :driver_version
 LIMIT 1
)sql",
                  "checking whether a config is taken");
  taken.bind(":gpu_id", gpu_id)
      .bind(":problem_id", problem_id)
      .bind(":template_hash", key.template_hash)
      .bind(":config", config_json(trial.config))
      .bind(":after", after_trial_id)
      .bind(":nvrtc_version", trial.toolchain.nvrtc_version)
      .bind(":driver_version", trial.toolchain.driver_version);
  if (taken.step()) return std::nullopt;  // rolls back the problem row if it was new
  const std::int64_t id = insert_trial(db_, key, trial, trial.status, sweep_id);
  transaction.commit();
  return id;
}

void Database::withdraw_trial(std::int64_t trial_id) {
  std::lock_guard lock(mutex_);
  Statement remove(db_, "DELETE FROM trials WHERE id = :id AND status = 'running'",
                   "withdrawing an interrupted trial");
  remove.bind(":id", trial_id);
  remove.run();
}

std::int64_t Database::last_trial_id() const {
  std::lock_guard lock(mutex_);
  Statement query(db_, "SELECT coalesce(max(id), 0) FROM trials", "reading the last trial id");
  query.step();
  return query.int64(0);
}

int Database::abandon_orphaned(const TrialKey& key) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_, "abandoning orphaned trials");
  constexpr const char* kRunningUnderKey = R"sql(
 t.status = 'running'
   AND t.gpu_id = (SELECT id FROM gpus WHERE model_key = :gpu)
   AND t.problem_id = (SELECT id FROM problems WHERE key = :problem)
   AND t.template_hash = :template_hash)sql";
  Statement owners(db_,
                   std::string(R"sql(
SELECT DISTINCT t.sweep_id, s.id IS NULL, s.host, s.pid, s.process_start, s.ended_at IS NOT NULL,
       CAST((julianday('now') - julianday(s.heartbeat_at)) * 86400 AS INTEGER)
  FROM trials t LEFT JOIN sweeps s ON s.id = t.sweep_id
 WHERE)sql") + kRunningUnderKey,
                   "finding the sweeps of running trials");
  owners.bind(":gpu", key.gpu_model)
      .bind(":problem", key.problem.key())
      .bind(":template_hash", key.template_hash);
  struct Gone {
    std::optional<std::int64_t> sweep_id;
    std::string why;
  };
  std::vector<Gone> gone;
  while (owners.step()) {
    if (owners.is_null(0) || owners.integer(1)) {  // an older tilesmith's trial: no sweep known
      gone.push_back({owners.is_null(0) ? std::nullopt : std::optional(owners.int64(0)),
                      std::string(kAbandonedDetail)});
      continue;
    }
    SweepOwner owner{owners.text(2), owners.int64(3), owners.text(4)};
    const bool ended = owners.integer(5) != 0;
    if (!ended && owner.alive(std::chrono::seconds(owners.int64(6)))) continue;
    gone.push_back({owners.int64(0), "left running by sweep " + std::to_string(owners.int64(0)) +
                                         " (pid " + std::to_string(owner.pid) + " on " +
                                         owner.host + "), which stopped mid-candidate"});
  }
  int abandoned = 0;
  for (const Gone& sweep : gone) {
    Statement update(db_,
                     std::string("UPDATE trials AS t SET status = 'abandoned', detail = :detail"
                                 " WHERE t.sweep_id IS :sweep AND") +
                         kRunningUnderKey,
                     "abandoning the running trials of a sweep that is gone");
    update.bind(":detail", sweep.why)
        .bind(":gpu", key.gpu_model)
        .bind(":problem", key.problem.key())
        .bind(":template_hash", key.template_hash);
    if (sweep.sweep_id)
      update.bind(":sweep", *sweep.sweep_id);
    else
      update.bind_null(":sweep");
    update.run();
    abandoned += sqlite3_changes(db_);
  }
  transaction.commit();
  return abandoned;
}

std::vector<Trial> Database::trials(const TrialKey& key) const {
  return top_trials(key, -1);  // SQLite: a negative LIMIT is no limit
}

std::vector<Trial> Database::top_trials(const TrialKey& key, int limit) const {
  std::vector<Trial> trials;
  std::lock_guard lock(mutex_);
  if (limit == 0) return trials;
  Statement query(db_, std::string("SELECT ") + kTrialColumns + kTrialsByKey, "listing trials");
  query.bind(":gpu", key.gpu_model)
      .bind(":problem", key.problem.key())
      .bind(":template_hash", key.template_hash)
      .bind(":limit", limit < 0 ? -1 : limit);
  while (query.step()) trials.push_back(trial_from_row(query, db_));
  return trials;
}

namespace {

// refresh_winner's work, inside the caller's transaction.
std::optional<Winner> refresh_winner_in(sqlite3* db_, const TrialKey& key) {
  const auto gpu_id = find_gpu_id(db_, key.gpu_model);
  const auto problem_id = find_problem_id(db_, key.problem);
  if (!gpu_id || !problem_id) return std::nullopt;  // nothing was ever tried under this key

  // Among the trials timed with the toolchain (NVRTC and driver) of the key's latest ok trial:
  // after an upgrade, a trial timed with the old one measured a kernel the runtime no longer
  // builds, or under other driver code, so it no longer competes once the new one has results.
  Statement best(db_, R"sql(
WITH latest AS (
  SELECT nvrtc_version, driver_version
    FROM trials
   WHERE gpu_id = :gpu_id AND problem_id = :problem_id AND template_hash = :template_hash
     AND status = 'ok' AND median_ms IS NOT NULL
   ORDER BY id DESC
   LIMIT 1)
SELECT t.id, t.config, t.source_hash, t.median_ms, t.spread
  FROM trials t, latest l
 WHERE t.gpu_id = :gpu_id AND t.problem_id = :problem_id AND t.template_hash = :template_hash
   AND t.status = 'ok' AND t.median_ms IS NOT NULL
   AND t.nvrtc_version = l.nvrtc_version AND t.driver_version = l.driver_version
 ORDER BY t.median_ms, t.id
 LIMIT 1
)sql",
                 "finding the fastest ok trial");
  best.bind(":gpu_id", *gpu_id)
      .bind(":problem_id", *problem_id)
      .bind(":template_hash", key.template_hash);

  if (!best.step()) {
    run_for_key(db_,
                "DELETE FROM winners WHERE gpu_id = :gpu_id AND problem_id = :problem_id"
                " AND template_hash = :template_hash",
                "removing a winner without ok trials", *gpu_id, *problem_id, key.template_hash);
    return std::nullopt;
  }

  // updated_at moves only when the winner changes, so it says when the result last improved.
  Statement upsert(db_, R"sql(
INSERT INTO winners (gpu_id, problem_id, template_hash, trial_id, config, source_hash, median_ms,
                     spread)
VALUES (:gpu_id, :problem_id, :template_hash, :trial_id, :config, :source_hash, :median_ms,
        :spread)
ON CONFLICT (gpu_id, problem_id, template_hash) DO UPDATE
   SET trial_id = excluded.trial_id, config = excluded.config,
       source_hash = excluded.source_hash, median_ms = excluded.median_ms,
       spread = excluded.spread,
       updated_at = CASE WHEN winners.trial_id = excluded.trial_id
                          AND winners.median_ms = excluded.median_ms
                         THEN winners.updated_at ELSE excluded.updated_at END
)sql",
                   "storing a winner");
  upsert.bind(":gpu_id", *gpu_id)
      .bind(":problem_id", *problem_id)
      .bind(":template_hash", key.template_hash)
      .bind(":trial_id", best.int64(0))
      .bind(":config", best.text(1))
      .bind(":source_hash", best.text(2))
      .bind(":median_ms", best.real(3))
      .bind(":spread", best.real(4));
  upsert.run();
  // The shape is tuned now: the runtime will find this winner, so it is no longer a miss.
  run_for_key(db_,
              "DELETE FROM misses WHERE gpu_id = :gpu_id AND problem_id = :problem_id"
              " AND template_hash = :template_hash",
              "removing the miss of a tuned key", *gpu_id, *problem_id, key.template_hash);
  return read_winner(db_, key);
}

// put_cubin's work, inside the caller's transaction; `replace` false keeps a stored one.
void insert_cubin(sqlite3* db_, const CompiledKernel& kernel, bool replace) {
  Statement insert(db_, std::string(replace ? "INSERT OR REPLACE" : "INSERT OR IGNORE") + R"sql(
  INTO cubins (source_hash, arch, nvrtc_version, lowered_name, cubin, registers,
               static_smem_bytes, stack_frame_bytes, spill_store_bytes, spill_load_bytes,
               compile_seconds, log, last_use)
VALUES (:source_hash, :arch, :nvrtc_version, :lowered_name, :cubin, :registers,
        :static_smem_bytes, :stack_frame_bytes, :spill_store_bytes, :spill_load_bytes,
        :compile_seconds, :log, (SELECT COALESCE(MAX(last_use), 0) + 1 FROM cubins))
)sql",
                   "storing a cubin");
  insert.bind(":source_hash", kernel.source_hash)
      .bind(":arch", kernel.arch)
      .bind(":nvrtc_version", kernel.nvrtc_version)
      .bind(":lowered_name", join_lowered_names(kernel.lowered_names))
      .bind_blob(":cubin", kernel.cubin.bytes)
      .bind(":registers", kernel.resources.registers)
      .bind(":static_smem_bytes", kernel.resources.static_smem_bytes)
      .bind(":stack_frame_bytes", kernel.resources.stack_frame_bytes)
      .bind(":spill_store_bytes", kernel.resources.spill_store_bytes)
      .bind(":spill_load_bytes", kernel.resources.spill_load_bytes)
      .bind(":compile_seconds", kernel.compile_seconds)
      .bind(":log", kernel.log);
  insert.run();
}

}  // namespace

std::optional<Winner> Database::refresh_winner(const TrialKey& key) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_, "refreshing a winner");
  std::optional<Winner> winner = refresh_winner_in(db_, key);
  transaction.commit();
  return winner;
}



std::optional<Winner> Database::winner(const TrialKey& key) const {
  std::lock_guard lock(mutex_);
  return read_winner(db_, key);
}

std::vector<Winner> Database::winners(const std::optional<std::string>& gpu_model) const {
  std::lock_guard lock(mutex_);
  Statement query(db_,
                  std::string(kWinnerSelect) +
                      " WHERE :gpu IS NULL OR g.model_key = :gpu"
                      " ORDER BY g.model_key, p.op, p.key, w.template_hash",
                  "listing winners");
  query.bind_optional(":gpu", gpu_model);
  std::vector<Winner> winners;
  while (query.step()) winners.push_back(winner_from_row(query, db_));
  return winners;
}

void Database::record_miss(const TrialKey& key) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_, "recording a miss");
  // As in insert_trial: a problem row created before the GPU check fails is rolled back.
  const std::int64_t problem_id = ensure_problem_id(db_, key.problem);
  const std::int64_t gpu_id = require_gpu_id(db_, key.gpu_model);
  run_for_key(db_, R"sql(
INSERT INTO misses (gpu_id, problem_id, template_hash, count)
VALUES (:gpu_id, :problem_id, :template_hash, 1)
ON CONFLICT (gpu_id, problem_id, template_hash) DO UPDATE
   SET count = misses.count + 1, last_seen = )sql" TILESMITH_NOW R"sql(
)sql",
              "recording a miss", gpu_id, problem_id, key.template_hash);
  transaction.commit();
}

std::vector<Miss> Database::misses(const std::optional<std::string>& gpu_model) const {
  std::lock_guard lock(mutex_);
  Statement query(db_, R"sql(
SELECT g.model_key, g.name, p.op, p.dtype, p.out_dtype, p.shape, p.options, m.template_hash,
       m.count, m.first_seen, m.last_seen
  FROM misses m
  JOIN gpus g ON g.id = m.gpu_id
  JOIN problems p ON p.id = m.problem_id
 WHERE :gpu IS NULL OR g.model_key = :gpu
 ORDER BY m.count DESC, p.key, g.model_key, m.template_hash
)sql",
                  "listing misses");
  query.bind_optional(":gpu", gpu_model);
  std::vector<Miss> misses;
  while (query.step()) {
    Miss& miss = misses.emplace_back();
    miss.gpu_model = query.text(0);
    miss.gpu_name = query.text(1);
    miss.problem = problem_from_columns(query, 2);
    miss.template_hash = query.text(7);
    miss.count = query.integer(8);
    miss.first_seen = query.text(9);
    miss.last_seen = query.text(10);
  }
  return misses;
}

namespace {
std::int64_t stored_cubin_bytes(sqlite3* db) {
  Statement total(db, "SELECT COALESCE(SUM(length(cubin)), 0) FROM cubins",
                  "summing the cubins' bytes");
  total.step();
  return total.int64(0);
}
}  // namespace

void Database::put_cubin(const CompiledKernel& kernel) {
  std::lock_guard lock(mutex_);
  Transaction transaction(db_, "storing a cubin");
  insert_cubin(db_, kernel, true);
  if (cubin_budget_ > 0) {
    std::int64_t bytes = stored_cubin_bytes(db_);
    // Oldest use first; a winner's cubin and the one just stored are never taken.
    Statement oldest(db_, R"sql(
SELECT rowid, length(cubin) FROM cubins
 WHERE source_hash NOT IN (SELECT source_hash FROM winners)
   AND NOT (source_hash = :source_hash AND arch = :arch AND nvrtc_version = :nvrtc_version)
 ORDER BY COALESCE(last_use, 0), rowid
)sql",
                     "listing the cubins to evict");
    oldest.bind(":source_hash", kernel.source_hash)
        .bind(":arch", kernel.arch)
        .bind(":nvrtc_version", kernel.nvrtc_version);
    std::vector<std::int64_t> evicted;
    while (bytes > static_cast<std::int64_t>(cubin_budget_) && oldest.step()) {
      evicted.push_back(oldest.int64(0));
      bytes -= oldest.int64(1);
    }
    for (std::int64_t rowid : evicted) {
      Statement remove(db_, "DELETE FROM cubins WHERE rowid = :rowid", "evicting a cubin");
      remove.bind(":rowid", rowid);
      remove.run();
    }
  }
  transaction.commit();
}

void Database::touch_cubin(const std::string& source_hash, const std::string& arch,
                           const std::string& nvrtc_version) {
  std::lock_guard lock(mutex_);
  Statement touch(db_, R"sql(
UPDATE cubins SET last_use = (SELECT COALESCE(MAX(last_use), 0) + 1 FROM cubins)
 WHERE source_hash = :source_hash AND arch = :arch AND nvrtc_version = :nvrtc_version
)sql",
                  "marking a cubin used");
  touch.bind(":source_hash", source_hash).bind(":arch", arch).bind(":nvrtc_version", nvrtc_version);
  touch.run();
}

std::uint64_t Database::cubin_bytes() const {
  std::lock_guard lock(mutex_);
  return static_cast<std::uint64_t>(stored_cubin_bytes(db_));
}

std::optional<CompiledKernel> Database::cubin(const RenderedSource& source,
                                              const std::string& arch,
                                              const std::string& nvrtc_version) const {
  if (std::optional<CompiledKernel> kernel = cubin(source.hash, arch, nvrtc_version)) return kernel;
  return cubin(source.hash_with_config, arch, nvrtc_version);
}

std::optional<CompiledKernel> Database::cubin(const std::string& source_hash,
                                              const std::string& arch,
                                              const std::string& nvrtc_version) const {
  std::lock_guard lock(mutex_);
  Statement query(db_, R"sql(
SELECT lowered_name, cubin, registers, static_smem_bytes, stack_frame_bytes, spill_store_bytes,
       spill_load_bytes, compile_seconds, log
  FROM cubins
 WHERE source_hash = :source_hash AND arch = :arch AND nvrtc_version = :nvrtc_version
)sql",
                  "looking up a cubin");
  query.bind(":source_hash", source_hash).bind(":arch", arch).bind(":nvrtc_version", nvrtc_version);
  if (!query.step()) return std::nullopt;
  CompiledKernel kernel;
  kernel.source_hash = source_hash;
  kernel.arch = arch;
  kernel.nvrtc_version = nvrtc_version;
  kernel.lowered_names = split_lowered_names(query.text(0));
  kernel.cubin.bytes = query.blob(1);
  kernel.resources.registers = query.integer(2);
  kernel.resources.static_smem_bytes = query.integer(3);
  kernel.resources.stack_frame_bytes = query.integer(4);
  kernel.resources.spill_store_bytes = query.integer(5);
  kernel.resources.spill_load_bytes = query.integer(6);
  kernel.compile_seconds = query.real(7);
  kernel.log = query.text(8);
  return kernel;
}

std::vector<TrialKey> Database::trial_keys() const {
  std::lock_guard lock(mutex_);
  Statement query(db_, R"sql(
SELECT DISTINCT g.model_key, p.op, p.dtype, p.out_dtype, p.shape, p.options, t.template_hash, p.key
  FROM trials t
  JOIN gpus g ON g.id = t.gpu_id
  JOIN problems p ON p.id = t.problem_id
 ORDER BY g.model_key, p.key, t.template_hash
)sql",
                  "listing the keys with trials");
  std::vector<TrialKey> keys;
  while (query.step()) keys.push_back({query.text(0), problem_from_columns(query, 1), query.text(6)});
  return keys;
}

void Database::refuse_to_merge_itself(const Database& source) const {
  std::error_code same_error;
  if (std::filesystem::equivalent(source.path(), path_, same_error))
    throw Error("cannot merge " + path_.string() + " into itself");
}

MergeCounts Database::merge_from(const Database& source) {
  refuse_to_merge_itself(source);
  // Everything is read from the source first (under its own lock), then written here in one
  // transaction: a failure half way leaves this file as it was.
  MergeParts parts;
  parts.gpus = source.gpus();
  for (TrialKey& key : source.trial_keys()) {
    std::vector<Trial> of_key = source.trials(key);
    parts.trials.emplace_back(std::move(key), std::move(of_key));
  }
  parts.misses = source.misses();
  std::vector<std::tuple<std::string, std::string, std::string>> cubin_keys;
  {
    std::lock_guard source_lock(source.mutex_);
    Statement query(source.db_, "SELECT source_hash, arch, nvrtc_version FROM cubins",
                    "listing cubins");
    while (query.step()) cubin_keys.emplace_back(query.text(0), query.text(1), query.text(2));
  }
  for (const auto& [hash, arch, nvrtc] : cubin_keys)
    if (std::optional<CompiledKernel> kernel = source.cubin(hash, arch, nvrtc))
      parts.cubins.push_back(std::move(*kernel));
  return merge_parts(parts, source.path().string());
}

MergeCounts Database::merge_winners_from(const Database& source, const std::string& gpu_model,
                                         const std::map<std::string, std::string>& template_hashes) {
  refuse_to_merge_itself(source);
  MergeParts parts;
  for (const GpuInfo& gpu : source.gpus())
    if (gpu.model_key == gpu_model) parts.gpus.push_back(gpu);
  for (const Winner& winner : source.winners(gpu_model)) {
    const auto current = template_hashes.find(winner.problem.op);
    if (current == template_hashes.end() || current->second != winner.template_hash) continue;
    const TrialKey key{gpu_model, winner.problem, winner.template_hash};
    // The winning trial: the fastest ok one, as refresh_winner decided.
    for (const Trial& trial : source.trials(key))
      if (trial.status == TrialStatus::ok && trial.source_hash == winner.source_hash &&
          trial.config == winner.config) {
        parts.trials.push_back({key, {trial}});
        break;
      }
    // Its cubin for the GPU's architecture, as the winning trial's NVRTC compiled it.
    for (const GpuInfo& gpu : parts.gpus) {
      DeviceTarget device;
      device.cc_major = gpu.cc_major;
      device.cc_minor = gpu.cc_minor;
      if (auto kernel =
              source.cubin(winner.source_hash, device.arch(), winner.toolchain.nvrtc_version))
        parts.cubins.push_back(std::move(*kernel));
    }
  }
  return merge_parts(parts, source.path().string() + " (the winners of " + gpu_model + ")");
}

MergeCounts Database::merge_parts(const MergeParts& parts, const std::string& what) {
  const std::vector<GpuInfo>& gpus = parts.gpus;
  const auto& trials = parts.trials;
  const std::vector<Miss>& misses = parts.misses;
  const std::vector<CompiledKernel>& cubins = parts.cubins;
  MergeCounts counts;
  std::lock_guard lock(mutex_);
  Transaction transaction(db_, "merging " + what);
  for (const GpuInfo& gpu : gpus) {
    Statement insert_gpu(db_, R"sql(
INSERT INTO gpus (model_key, name, cc_major, cc_minor, sm_count)
VALUES (:model_key, :name, :cc_major, :cc_minor, :sm_count)
ON CONFLICT (model_key) DO NOTHING
)sql",
                         "merging a GPU");
    insert_gpu.bind(":model_key", gpu.model_key)
        .bind(":name", gpu.name)
        .bind(":cc_major", gpu.cc_major)
        .bind(":cc_minor", gpu.cc_minor)
        .bind(":sm_count", gpu.sm_count);
    insert_gpu.run();
    counts.gpus += sqlite3_changes(db_);
    const std::int64_t gpu_id = require_gpu_id(db_, gpu.model_key);
    for (const Toolchain& toolchain : gpu.toolchains_seen) {
      Statement insert_toolchain(db_, R"sql(
INSERT INTO toolchains (gpu_id, driver_version, nvrtc_version)
VALUES (:gpu_id, :driver_version, :nvrtc_version)
ON CONFLICT (gpu_id, driver_version, nvrtc_version) DO NOTHING
)sql",
                                 "merging a toolchain");
      insert_toolchain.bind(":gpu_id", gpu_id)
          .bind(":driver_version", toolchain.driver_version)
          .bind(":nvrtc_version", toolchain.nvrtc_version);
      insert_toolchain.run();
    }
  }
  for (const auto& [key, of_key] : trials) {
    for (const Trial& trial : of_key) {
      // The same trial: same key, config, source, outcome and creation time.
      const std::int64_t problem_id = ensure_problem_id(db_, key.problem);
      const std::int64_t gpu_id = require_gpu_id(db_, key.gpu_model);
      Statement present(db_, R"sql(
SELECT 1 FROM trials
 WHERE gpu_id = :gpu_id AND problem_id = :problem_id AND template_hash = :template_hash
   AND config = :config AND source_hash = :source_hash AND status = :status
   AND created_at = :created_at AND median_ms IS :median_ms AND repetitions = :repetitions
)sql",
                        "looking for a merged trial");
      present.bind(":gpu_id", gpu_id)
          .bind(":problem_id", problem_id)
          .bind(":template_hash", key.template_hash)
          .bind(":config", config_json(trial.config))
          .bind(":source_hash", trial.source_hash)
          .bind(":status", status_name(trial.status))
          .bind(":created_at", trial.created_at)
          .bind(":median_ms", trial.median_ms)
          .bind(":repetitions", trial.repetitions);
      if (present.step()) {
        ++counts.trials_present;
        continue;
      }
      const std::int64_t id = insert_trial(db_, key, trial, trial.status);
      Statement dated(db_, "UPDATE trials SET created_at = :created_at WHERE id = :id",
                      "keeping a merged trial's creation time");
      dated.bind(":created_at", trial.created_at).bind(":id", id);
      dated.run();
      ++counts.trials_added;
    }
  }
  for (const Miss& miss : misses) {
    const std::int64_t problem_id = ensure_problem_id(db_, miss.problem);
    const std::int64_t gpu_id = require_gpu_id(db_, miss.gpu_model);
    Statement upsert(db_, R"sql(
INSERT INTO misses (gpu_id, problem_id, template_hash, count, first_seen, last_seen)
VALUES (:gpu_id, :problem_id, :template_hash, :count, :first_seen, :last_seen)
ON CONFLICT (gpu_id, problem_id, template_hash) DO UPDATE
   SET count = max(misses.count, excluded.count),
       first_seen = min(misses.first_seen, excluded.first_seen),
       last_seen = max(misses.last_seen, excluded.last_seen)
)sql",
                     "merging a miss");
    upsert.bind(":gpu_id", gpu_id)
        .bind(":problem_id", problem_id)
        .bind(":template_hash", miss.template_hash)
        .bind(":count", miss.count)
        .bind(":first_seen", miss.first_seen)
        .bind(":last_seen", miss.last_seen);
    upsert.run();
    ++counts.misses;
  }
  for (const auto& [key, of_key] : trials)
    if (refresh_winner_in(db_, key)) ++counts.winners;
  // A miss of a key that has a winner here (from before, or just merged) is tuned already.
  exec(db_,
       "DELETE FROM misses WHERE EXISTS (SELECT 1 FROM winners w WHERE w.gpu_id = misses.gpu_id"
       " AND w.problem_id = misses.problem_id AND w.template_hash = misses.template_hash)",
       "dropping the misses of tuned keys");
  for (const CompiledKernel& kernel : cubins) {
    insert_cubin(db_, kernel, false);
    counts.cubins_added += sqlite3_changes(db_);
  }
  transaction.commit();
  return counts;
}

}  // namespace tilesmith::cache

#undef TILESMITH_NOW
