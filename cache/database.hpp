// The one place that talks to SQLite: every trial, the winner per (GPU model, problem, template
// hash), the shapes the runtime found untuned (misses), the GPUs and toolchains seen, and cubins.
// Every write runs in a transaction; every query is a prepared statement.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cache/sweep_owner.hpp"
#include "generator/compiled_kernel.hpp"
#include "generator/rendered_source.hpp"
#include "templates/problem.hpp"

struct sqlite3;

namespace tilesmith::cache {

// The schema version this build writes (PRAGMA user_version); older files are migrated forward.
constexpr int kSchemaVersion = 5;

struct Toolchain {
  std::string driver_version;  // "13.0" (cuDriverGetVersion), "none" without a GPU
  std::string nvrtc_version;   // "13.0"
};

// Why a result obtained with toolchain `timed` no longer vouches for what a machine with `here`
// would run ("" when it does). Another NVRTC: the config is compiled again, into a kernel that
// was never timed. Another driver: it was timed under other code (compared only where `here`
// has a GPU, i.e. its driver is not "none"). The one rule of the runtime, `status` and `tune
// --stale`.
std::string toolchain_mismatch(const Toolchain& timed, const Toolchain& here);

// What a trial ended as. Only `ok` trials can win.
enum class TrialStatus {
  running,         // written before the GPU worker starts it; left behind by a crash
  ok,              // verified and timed
  wrong,           // ran but failed verification
  compile_failed,  // NVRTC rejected it
  launch_failed,   // the driver refused the launch (resources)
  fault,           // the kernel faulted (illegal address...) and took the worker down
  timeout,         // the watchdog killed the worker
  abandoned,       // left `running` by a sweep that is gone: it crashed that sweep
  pruned_early,    // stopped early: far behind the best
};
std::string_view status_name(TrialStatus status);
TrialStatus parse_status(std::string_view name);  // throws Error

struct TrialKey {
  std::string gpu_model;  // DeviceTarget::model_key()
  Problem problem;
  std::string template_hash;
};

struct Trial {
  std::int64_t id = 0;
  Config config;
  std::string source_hash;
  TrialStatus status = TrialStatus::running;
  std::string detail;  // the failure reason, or "" when ok
  double median_ms = 0, min_ms = 0;
  double spread = 0;  // (p90 - p10) / median of the repetitions
  int repetitions = 0;
  double rel_error = 0;
  ResourceUsage resources;
  double compile_seconds = 0;
  Toolchain toolchain;
  std::string created_at;  // UTC, ISO 8601; set by the database
};

struct Winner {
  std::string gpu_model;
  std::string gpu_name;
  Problem problem;
  std::string template_hash;
  Config config;
  std::string source_hash;
  double median_ms = 0;
  double spread = 0;
  int trials_ok = 0;     // ok trials under this key
  int trials_total = 0;  // all trials under this key
  std::string updated_at;
  // The winning trial's: the NVRTC that compiled its kernel, the driver it was timed under.
  Toolchain toolchain;
};

// A key the runtime looked up and found no winner for: it fell back to the nearest tuned shape's
// winner or the default config. `tilesmith tune --misses` tunes exactly these.
struct Miss {
  std::string gpu_model;
  std::string gpu_name;
  Problem problem;
  std::string template_hash;
  int count = 0;           // lookups that missed: one per shape per Runtime
  std::string first_seen;  // UTC, ISO 8601
  std::string last_seen;
};

struct GpuInfo {
  std::string model_key, name;
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  std::vector<Toolchain> toolchains_seen;
};

// What merge_from added to this file.
struct MergeCounts {
  int gpus = 0;             // GPU models new to this file
  int trials_added = 0;
  int trials_present = 0;   // already here (merged before): not added twice
  int winners = 0;          // keys whose winner was re-decided (from every trial now here)
  int misses = 0;           // misses taken over (those of keys with a winner are dropped)
  int cubins_added = 0;
};

// How a command uses the file. Reading commands never write it: not the schema, not the journal
// mode, not a -wal or -shm file where they cannot be removed again.
enum class Access { read_write, read_only };

// One connection to the file. Calls may come from several threads: they are serialized.
class Database {
 public:
  // $TILESMITH_DB, else $XDG_CACHE_HOME/tilesmith/tilesmith.db, else ~/.cache/tilesmith/tilesmith.db
  static std::filesystem::path default_path();

  // read_write: opens or creates the file (and its parent folder), WAL mode, busy timeout,
  // migrations. read_only: opens an existing file and writes nothing: where the file or its
  // folder cannot be written it is read as an immutable snapshot, and an older schema is
  // migrated in a copy in memory; notes() says so. Either way throws Error, leaving the file
  // untouched, when it is not SQLite, not tilesmith's (application_id), or has a newer schema
  // than this build knows.
  explicit Database(const std::filesystem::path& path, Access access = Access::read_write);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // What a read-only open could not do the usual way, one sentence each; empty when nothing.
  const std::vector<std::string>& notes() const { return notes_; }

  void record_gpu(const DeviceTarget& device, const Toolchain& toolchain);
  std::vector<GpuInfo> gpus() const;

  // A sweep registers before its first trial and keeps its registration alive with heartbeats,
  // so other sweeps can tell whether the trials it left `running` are still running.
  std::int64_t begin_sweep(const SweepOwner& owner);
  void heartbeat(std::int64_t sweep_id);
  void end_sweep(std::int64_t sweep_id);

  // A trial is started (status running) before its GPU work begins and finished after, so a
  // sweep that dies mid-candidate leaves evidence and its resume does not retry that config.
  std::int64_t start_trial(const TrialKey& key, const Trial& trial);
  void finish_trial(std::int64_t trial_id, const Trial& trial);
  // Records a finished trial in one step (compile failures, pruned configs).
  std::int64_t record_trial(const TrialKey& key, const Trial& trial);
  // For sweep `sweep_id`: records `trial` (running, or already finished) unless the key holds a
  // trial of the same config and toolchain with an id above `after_trial_id` (0: any trial), in
  // one transaction, so that two sweeps of one problem never run one config twice. Nothing when
  // the config is taken.
  std::optional<std::int64_t> claim_trial(const TrialKey& key, const Trial& trial,
                                          std::int64_t sweep_id, std::int64_t after_trial_id);
  // Removes a trial that was interrupted before it finished (Ctrl-C), so the next sweep runs it
  // again rather than taking it for one that crashed.
  void withdraw_trial(std::int64_t trial_id);
  // The highest trial id so far (0 for none): trials recorded later have higher ids.
  std::int64_t last_trial_id() const;
  // Marks trials left `running` under this key as `abandoned` when the sweep that started them
  // is gone (SweepOwner::alive), or is unknown (trials of older tilesmith versions); trials of
  // live sweeps are left alone. Returns how many were abandoned.
  int abandon_orphaned(const TrialKey& key);

  std::vector<Trial> trials(const TrialKey& key) const;  // all, best ok first
  std::vector<TrialKey> trial_keys() const;             // every key with trials, in key order
  std::vector<Trial> top_trials(const TrialKey& key, int limit) const;

  // Recomputes the winner for the key from its ok trials (fastest median among those timed
  // with the toolchain of the key's latest ok trial) and stores it; a stored winner also
  // clears the key's miss, in the same transaction.
  std::optional<Winner> refresh_winner(const TrialKey& key);
  std::optional<Winner> winner(const TrialKey& key) const;
  // All winners, optionally restricted to one GPU model; ordered by gpu, op, problem key.
  std::vector<Winner> winners(const std::optional<std::string>& gpu_model = std::nullopt) const;

  // Counts a lookup that found no winner for `key` (the first one inserts it). Like trials, the
  // key's GPU must have been recorded (record_gpu) first.
  void record_miss(const TrialKey& key);
  // The misses, optionally of one GPU model only; most missed first, then by problem key.
  std::vector<Miss> misses(const std::optional<std::string>& gpu_model = std::nullopt) const;

  // Folds `source` (another file, opened read-only) into this one, in one transaction: its GPUs,
  // every trial with its creation time (a trial already here, from an earlier merge, is not
  // added again, so merging twice changes nothing), its misses (the larger count) and its
  // cubins (one stored here is kept); then every key it brought is re-decided from all the
  // trials here. Trials keep their status: a `running` one has no sweep here and is abandoned
  // by the next sweep of its key. Throws Error, leaving this file as it was, on any failure.
  MergeCounts merge_from(const Database& source);
  // The same for part of `source`: a bundle, what `tilesmith export --format bundle` ships. Only
  // the winners of `gpu_model` under `template_hashes` (op -> the build's template hash) come
  // over, each with its winning trial and that trial's cubins; no misses.
  MergeCounts merge_winners_from(const Database& source, const std::string& gpu_model,
                                 const std::map<std::string, std::string>& template_hashes);

  // Stores a cubin as the most recently used. Under a cubin budget it then evicts the least
  // recently stored or used cubins that no winner names until the store fits the budget (never
  // the one just stored); SQLite reuses the freed pages, so the file stops growing there.
  void put_cubin(const CompiledKernel& kernel);
  std::optional<CompiledKernel> cubin(const std::string& source_hash, const std::string& arch,
                                      const std::string& nvrtc_version) const;
  // The cubin of `source`: under its hash, else under its hash_with_config (a database written
  // before configs with the same kernels shared a hash).
  std::optional<CompiledKernel> cubin(const RenderedSource& source, const std::string& arch,
                                      const std::string& nvrtc_version) const;
  // Marks a stored cubin the most recently used (the runtime, on loading it): eviction takes it
  // last. Nothing when it is not stored.
  void touch_cubin(const std::string& source_hash, const std::string& arch,
                   const std::string& nvrtc_version);
  // The budget in bytes of cubins (0: none), from $TILESMITH_CUBIN_BUDGET_MB when the file is
  // opened for writing; applied at the next put_cubin.
  void set_cubin_budget(std::uint64_t bytes) { cubin_budget_ = bytes; }
  std::uint64_t cubin_budget() const { return cubin_budget_; }
  std::uint64_t cubin_bytes() const;  // of every stored cubin

 private:
  void open_for_reading();
  // What a merge brings over, read from the source before anything is written here.
  struct MergeParts {
    std::vector<GpuInfo> gpus;
    std::vector<std::pair<TrialKey, std::vector<Trial>>> trials;
    std::vector<Miss> misses;
    std::vector<CompiledKernel> cubins;
  };
  MergeCounts merge_parts(const MergeParts& parts, const std::string& what);
  void refuse_to_merge_itself(const Database& source) const;  // throws Error

  std::filesystem::path path_;
  sqlite3* db_ = nullptr;
  std::vector<std::string> notes_;
  std::uint64_t cubin_budget_ = 0;
  // A transaction spans several calls into SQLite; two threads must not interleave them.
  mutable std::mutex mutex_;
};

}  // namespace tilesmith::cache
