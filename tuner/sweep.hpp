// A tuning sweep: enumerate -> prune -> compile (process pool) -> verify -> time -> record.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cache/database.hpp"
#include "templates/family.hpp"

namespace tilesmith::tuner {

struct SweepOptions {
  std::string strategy = "exhaustive";  // exhaustive | random | annealing | genetic | model
  std::optional<int> max_candidates;    // --budget N
  std::optional<double> max_seconds;    // --budget Ns
  std::uint64_t seed = 1;               // random order and input data
  int compile_processes = 0;            // 0: one per core, at most 16
  double candidate_timeout_s = 30;      // watchdog for one candidate's GPU work
  int device_ordinal = 0;
  bool retune = false;  // try configs again even if the database has a trial for them
  // Without a GPU: the architecture to render and compile for (default sm_90a).
  std::string offline_arch = "sm_90a";
  // Candidates stop being timed once their first repetitions run this many times slower
  // than the best so far (recorded as pruned_early).
  double give_up_factor = 3.0;
  // How precisely a candidate's median is timed before the next (TimingOptions::precision);
  // 0: a fixed amount of timed calls per candidate.
  double timing_precision = 0.01;
  // Configs whose first median lies within this of the best are the finalists, timed again
  // together before the winner is decided (3% covers a first timing's spread under an L2 flush
  // per call, 1-3%).
  double finalist_margin = 0.03;
  // This process's part of the space, for sweeps split over hosts (a Slurm job array, a
  // Kubernetes Indexed Job): the configs at positions p of the family's enumeration with
  // p % shard_count == shard_index. Deterministic and the same on every host, so the shards are
  // disjoint and together cover the space; `tilesmith merge` combines their databases.
  int shard_index = 0;
  int shard_count = 1;
  // Only the configs with these parameter values (e.g. variant=2: one template of a family);
  // empty: the whole space.
  Config only;
};

struct Progress {
  int total = 0;           // candidates the strategy may propose
  int done = 0;            // finished (any status)
  int ok = 0;              // verified and timed
  int failed = 0;          // compile, launch, wrong, fault, timeout
  double best_ms = 0;      // 0 while none
  std::string best_config;
  std::string last_config, last_status;
};

struct ResourceSummary {
  int compiled = 0;  // kernels NVRTC compiled in this sweep
  int reused = 0;    // cubins found in the database by source hash (no NVRTC)
  int shared = 0;    // kernels compiled in this sweep for another config with the same source
  // Over every kernel in hand, compiled or reused:
  int min_registers = 0, max_registers = 0;
  std::vector<std::string> spilling;  // configs whose kernels spill registers
  double compile_seconds_total = 0;   // NVRTC time of this sweep's compiles only
  double wall_seconds = 0;
  // Where the timed sweep's wall time went: the GPU worker's phases summed over the trials
  // (TrialSeconds), and the time the sweep waited for a compile with nothing to time.
  int trials_timed = 0;  // candidates the GPU worker took
  double gpu_load_seconds = 0, gpu_verify_seconds = 0, gpu_timing_seconds = 0;
  double gpu_kernel_seconds = 0;  // of gpu_timing_seconds: the timed calls themselves
  double compile_wait_seconds = 0;
  double database_seconds = 0;  // claiming and recording trials, storing and finding cubins
};

// A config near the best at the end of a sweep, timed again together with the others
// (Workbench::time_together): its first median, its median timed together, and the median its
// trial records (timed together, scaled by the drift since the first pass that the first
// pass's best showed: see run_sweep).
struct Finalist {
  std::string config;
  double before_ms = 0, together_ms = 0, recorded_ms = 0;
  int rounds = 0;
};

struct SweepReport {
  Problem problem;
  std::string gpu_model;       // empty in offline mode
  bool timed = false;          // false: no GPU, the space was only rendered and compiled
  std::string no_gpu_reason;   // why timing did not happen
  int space_size = 0;          // configs in the family's space
  int pruned = 0;              // rejected by constraints before compiling
  int skipped_done = 0;        // already in the database (resume)
  int outside_only = 0;        // configs without SweepOptions::only's values
  int other_shards = 0;        // left to the other shards (SweepOptions::shard_count > 1)
  int abandoned = 0;           // left running by a sweep that is gone; marked, never retried
  int taken = 0;               // configs another sweep of this problem claimed first
  int compile_failed = 0;
  std::string first_compile_error;  // the first failure's config and NVRTC log, cut short
  int interrupted_by = 0;           // SIGINT or SIGTERM when the sweep stopped early, else 0
  Progress progress;
  ResourceSummary resources;
  // This sweep's configs within finalist_margin of its best (at most 4), re-timed together
  // before the winner is decided; finalists_error says why not when that failed (the first
  // timings stand).
  std::vector<Finalist> finalists;
  std::string finalists_error;
  std::optional<cache::Winner> winner;
  double winner_tflops = 0;
  double peak_fraction = 0;  // of the device's dense tensor peak, when known
};

// Called after each candidate, on the thread that runs the sweep.
using ProgressCallback = std::function<void(const Progress&)>;

// Tunes `problem` with `family`. With a GPU: every trial and the winner go to `database`.
// Without one: renders and compiles the pruned space for options.offline_arch and reports.
// Inside an InterruptScope (tuner/interrupt.hpp) SIGINT and SIGTERM end the sweep early and
// cleanly: report.interrupted_by says so. Several sweeps of one problem may run at once, on one
// database: each config is tried by one of them.
// Throws Error only for real errors (bad problem, unusable database).
SweepReport run_sweep(const Family& family, const Problem& problem, cache::Database& database,
                      const SweepOptions& options, const ProgressCallback& on_progress = {});

// Shard `index` of `count` (SweepOptions::shard_index, shard_count) of `configs`, the configs
// valid for `problem` in enumeration order: configs that render the same kernels (they differ
// only in kernel arguments, e.g. matmul's group_m) form one group, and the groups are dealt out
// in turn. So no two shards compile one kernel, each compiles as many as the others within one,
// and every host of one GPU model computes the same split.
std::vector<Config> shard_of(const Family& family, const Problem& problem,
                             std::vector<Config> configs, int index, int count);

// Binaries that tune must call this first in main(): it runs the GPU or compile worker when the
// process was started as one (the tuner starts workers by re-executing /proc/self/exe), and
// returns false otherwise.
bool run_worker_if_requested(int argc, char** argv);

// Dense bf16/f16 tensor-core peak of a device in TFLOP/s, when known (H100 SXM: 989).
std::optional<double> tensor_peak_tflops(const DeviceTarget& device);
// Its memory bandwidth in GB/s from the datasheet, when known (H100 SXM: 3350).
std::optional<double> memory_peak_gbps(const DeviceTarget& device);

}  // namespace tilesmith::tuner
