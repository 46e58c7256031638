#include "tuner/sweep.hpp"

#include <signal.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "generator/compiled_kernel.hpp"
#include "tuner/compile_pool.hpp"
#include "tuner/gpu_worker.hpp"
#include "tuner/interrupt.hpp"
#include "tuner/search_strategy.hpp"

namespace tilesmith::tuner {
namespace {

using Clock = std::chrono::steady_clock;

// The configs within SweepOptions::finalist_margin of the best at the end of a sweep, up to
// kFinalists, are timed again together; verified configs within a little more of the best so
// far are kept (with their kernels) until then.
constexpr std::size_t kFinalists = 4;
constexpr double kContenderSlack = 0.02;

cache::Trial trial_from(const Config& config, const CompiledKernel* kernel,
                        const cache::Toolchain& toolchain) {
  cache::Trial trial;
  trial.config = config;
  trial.toolchain = toolchain;
  if (kernel) {
    trial.source_hash = kernel->source_hash;
    trial.resources = kernel->resources;
    trial.compile_seconds = kernel->compile_seconds;
  }
  return trial;
}

void note_resources(ResourceSummary& summary, const CompiledKernel& kernel, const Config& config,
                    bool reused) {
  const ResourceUsage& r = kernel.resources;
  if (r.registers >= 0) {  // unknown only for cubins stored by an older tilesmith
    const bool first = summary.max_registers == 0;
    if (first || r.registers < summary.min_registers) summary.min_registers = r.registers;
    summary.max_registers = std::max(summary.max_registers, r.registers);
  }
  if (r.spills()) summary.spilling.push_back(config.text());
  if (reused) return;  // its NVRTC time was spent by an earlier sweep
  summary.compile_seconds_total += kernel.compile_seconds;
  ++summary.compiled;
}

bool is_failure(cache::TrialStatus status) {
  return status != cache::TrialStatus::ok && status != cache::TrialStatus::pruned_early;
}

// "block_m=64,...: <the first lines of the NVRTC log>", for a report line.
std::string compile_error_excerpt(const Config& config, const std::string& error) {
  constexpr std::size_t kMaxLines = 4, kMaxChars = 600;
  std::string excerpt = config.text() + ": ";
  std::size_t lines = 0, position = 0;
  while (position < error.size() && lines < kMaxLines) {
    std::size_t end = error.find('\n', position);
    if (end == std::string::npos) end = error.size();
    if (end > position) {
      excerpt += (lines ? "\n    " : "") + error.substr(position, end - position);
      ++lines;
    }
    position = end + 1;
  }
  if (excerpt.size() > kMaxChars) excerpt = excerpt.substr(0, kMaxChars) + " ...";
  return excerpt;
}

// A sweep's registration in the database: begun before its first trial, kept alive by a
// heartbeat thread, ended when the sweep returns, however it returns.
class SweepLease {
 public:
  explicit SweepLease(cache::Database& database)
      : database_(database), id_(database.begin_sweep(cache::SweepOwner::current())) {
    beat_ = std::thread([this] {
      std::unique_lock lock(mutex_);
      while (!stop_.wait_for(lock, cache::kHeartbeatInterval, [this] { return stopping_; })) {
        try {
          database_.heartbeat(id_);
        } catch (const std::exception&) {
          // A busy or full database: the next beat tries again, well within the lease.
        }
      }
    });
  }
  ~SweepLease() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    stop_.notify_one();
    beat_.join();
    try {
      database_.end_sweep(id_);
    } catch (const std::exception&) {
      // Unended, the sweep is judged by its pid (or its heartbeat from another host): the same.
    }
  }
  std::int64_t id() const { return id_; }

 private:
  cache::Database& database_;
  const std::int64_t id_;
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread beat_;
};

// Whether a device's name holds `part` ("H100", "PCIe"): how the datasheet figures are keyed.
bool name_has(const DeviceTarget& device, const char* part) {
  return device.name.find(part) != std::string::npos;
}
}  // namespace

std::optional<double> tensor_peak_tflops(const DeviceTarget& device) {
  // Dense fp16/bf16 tensor-core peaks from NVIDIA's datasheets.
  auto has = [&](const char* part) { return name_has(device, part); };
  if (has("H100") && (has("PCIe") || has("PCIE"))) return 756;
  if (has("H100") || has("H200") || has("GH200")) return 989;
  if (has("A100")) return 312;
  if (has("L40S")) return 362;
  if (has("B200")) return 2250;
  return std::nullopt;
}

std::optional<double> memory_peak_gbps(const DeviceTarget& device) {
  auto has = [&](const char* part) { return name_has(device, part); };
  if (has("H100") && (has("PCIe") || has("PCIE"))) return 2000;
  if (has("H100")) return 3350;
  if (has("H200") || has("GH200")) return 4800;
  if (has("A100")) return has("40GB") ? 1555 : 2039;
  if (has("L40S")) return 864;
  if (has("B200")) return 8000;
  return std::nullopt;
}


std::vector<Config> shard_of(const Family& family, const Problem& problem,
                             std::vector<Config> configs, int index, int count) {
  if (count < 1 || index < 0 || index >= count)
    throw InvalidArgument("shard " + std::to_string(index) + "/" + std::to_string(count) +
                          ": want i/N with 0 <= i < N");
  if (count == 1) return configs;
  // A split by config would deal the configs sharing a kernel (adjacent in the enumeration) to
  // different shards, each of which then compiled it: the GPU run at 4096^3 over two GPUs
  // compiled all 168 kernels of 336 configs twice. Before that, a split of the enumeration
  // before pruning gave one of two shards every config of a slice.
  std::map<std::vector<std::string>, int> group_of;  // kernels -> order of first appearance
  std::vector<Config> shard;
  for (Config& config : configs) {
    const int group = group_of
                          .try_emplace(family.kernel_expressions(config, problem),
                                       static_cast<int>(group_of.size()))
                          .first->second;
    if (group % count == index) shard.push_back(std::move(config));
  }
  return shard;
}

SweepReport run_sweep(const Family& family, const Problem& problem, cache::Database& database,
                      const SweepOptions& options, const ProgressCallback& on_progress) {
  const auto started = Clock::now();
  family.validate(problem);
  SweepReport report;
  report.problem = problem;

  GpuWorker gpu(options.device_ordinal, options.candidate_timeout_s);
  report.timed = gpu.available();
  report.no_gpu_reason = gpu.unavailable_reason();
  const DeviceTarget device =
      report.timed ? gpu.device() : DeviceTarget::assumed_for_arch(options.offline_arch);
  const std::string arch = device.arch();
  const cache::Toolchain toolchain{report.timed ? gpu.driver_version() : "none", nvrtc_version()};

  // Enumerate --only's slice and prune it before anything is compiled.
  for (const auto& [name, value] : options.only.values) {
    const std::vector<ParamSpec> params = family.space();
    const auto param = std::find_if(params.begin(), params.end(),
                                    [&](const ParamSpec& spec) { return spec.name == name; });
    if (param == params.end() ||
        std::find(param->values.begin(), param->values.end(), value) == param->values.end())
      throw InvalidArgument("--only " + name + "=" + std::to_string(value) + ": " +
                            family.name() + " has no such parameter value");
  }
  std::vector<Config> valid = family.enumerate(options.only);  // after --only and the constraints
  report.space_size = static_cast<int>(family.space_size());
  report.outside_only = report.space_size - static_cast<int>(family.space_size(options.only));
  std::erase_if(valid, [&](const Config& config) {
    return family.reject(config, problem, device).has_value();
  });
  const std::size_t valid_count = valid.size();
  std::vector<Config> candidates =
      shard_of(family, problem, std::move(valid), options.shard_index, options.shard_count);
  report.other_shards = static_cast<int>(valid_count - candidates.size());
  report.pruned = report.space_size - report.outside_only - static_cast<int>(valid_count);

  cache::TrialKey key{"", problem, template_hash(family)};
  std::optional<SweepLease> lease;
  // A config is claimed when the key has no trial of it after this id: with --retune, no trial
  // recorded since this sweep began; otherwise none at all.
  std::int64_t claim_after = 0;
  if (report.timed) {
    key.gpu_model = device.model_key();
    report.gpu_model = key.gpu_model;
    database.record_gpu(device, toolchain);
    lease.emplace(database);
    // A trial left running by a sweep that is gone crashed it: record that, never retry it.
    // Trials of sweeps still running are theirs.
    report.abandoned = database.abandon_orphaned(key);
    if (options.retune) {
      claim_after = database.last_trial_id();
    } else {
      // Done: tried with this toolchain. After an NVRTC or driver upgrade the configs are tried
      // again, and the winner comes from the new trials (Database::refresh_winner).
      std::set<std::string> done;
      for (const cache::Trial& trial : database.trials(key))
        if (trial.toolchain.nvrtc_version == toolchain.nvrtc_version &&
            trial.toolchain.driver_version == toolchain.driver_version)
          done.insert(trial.config.text());
      auto before = candidates.size();
      std::erase_if(candidates, [&](const Config& c) { return done.count(c.text()) > 0; });
      report.skipped_done = static_cast<int>(before - candidates.size());
    }
  }

  std::unique_ptr<SearchStrategy> strategy =
      make_strategy(options.strategy, candidates, options.seed,
                    family.default_config(problem, device),
                    options.strategy == "model" ? prior_results(database, key)
                                                : std::vector<PriorResult>{});
  Progress& progress = report.progress;
  progress.total = static_cast<int>(candidates.size());
  if (options.max_candidates) progress.total = std::min(progress.total, *options.max_candidates);
  if (report.timed) {
    if (auto best = database.winner(key)) {  // resume: earlier results set the bar
      progress.best_ms = best->median_ms;
      progress.best_config = best->config.text();
    }
  }

  CompilePool pool(options.compile_processes);
  std::map<std::size_t, Config> in_flight;
  // Kernels in hand without a compile of their own: cubins the database already had, and the
  // outcome of a compile that another config with the same source started (shared).
  struct Reused {
    CompileOutcome outcome;
    bool shared;
  };
  std::deque<Reused> from_cache;
  std::map<std::string, std::vector<std::size_t>> sharing;  // source hash -> ids waiting on it
  std::map<std::size_t, std::string> compiling;             // submitted job id -> source hash
  std::size_t proposed = 0;
  auto seconds_spent = [&] { return std::chrono::duration<double>(Clock::now() - started).count(); };
  // Runs a database step, its time counted in the report.
  auto in_database = [&](auto&& step) {
    const auto begin = Clock::now();
    auto result = step();
    report.resources.database_seconds += std::chrono::duration<double>(Clock::now() - begin).count();
    return result;
  };
  auto out_of_budget = [&] {
    if (options.max_candidates && static_cast<int>(proposed) >= *options.max_candidates) return true;
    return options.max_seconds && seconds_spent() >= *options.max_seconds;
  };
  // Keep every compile process busy, two jobs deep, while the GPU worker times. Configs that
  // take a stored kernel or one being compiled for another config need no process: counting
  // them as jobs left most processes idle where neighbouring configs share kernels (an
  // exhaustive sweep of the sm_90a template compiled 6 kernels a second on 16 processes). A
  // strategy that learns gets no more proposals in hand than compile jobs, so its results
  // still steer it as they did.
  const std::size_t compile_depth = static_cast<std::size_t>(2 * pool.processes());
  const std::size_t lookahead = strategy->learns() ? compile_depth : 4 * compile_depth;
  auto refill = [&] {
    while (compiling.size() < compile_depth && in_flight.size() < lookahead && !out_of_budget()) {
      std::optional<Config> config = strategy->next();
      if (!config) return;
      CompileJob job{proposed++, render(family, *config, problem), arch};
      in_flight.emplace(job.id, *config);
      if (auto waiting = sharing.find(job.source.hash); waiting != sharing.end()) {
        waiting->second.push_back(job.id);
      } else if (auto cached = in_database(
                     [&] { return database.cubin(job.source, arch, toolchain.nvrtc_version); })) {
        from_cache.push_back(Reused{CompileOutcome{job.id, std::move(*cached), ""}, false});
      } else {
        sharing[job.source.hash];
        compiling[job.id] = job.source.hash;
        pool.submit(std::move(job));
      }
    }
  };
  auto finish = [&](const Config& config, cache::TrialStatus status) {
    ++progress.done;
    if (status == cache::TrialStatus::ok) ++progress.ok;
    if (is_failure(status)) ++progress.failed;
    progress.last_config = config.text();
    progress.last_status = cache::status_name(status);
    if (on_progress) on_progress(progress);
  };

  // The first proposal (the strategy's first: the family's default where it is a candidate) is
  // timed before any other, whichever compiles first, so a budget that runs out early has
  // still measured the config the runtime would use untuned. Outcomes that arrive before it
  // wait here, in order.
  struct Ready {
    CompileOutcome outcome;
    bool reused;
  };
  std::deque<Ready> held;
  bool first_timed = false;
  auto next_ready = [&]() -> Ready {
    for (;;) {
      if (first_timed && !held.empty()) {
        Ready ready = std::move(held.front());
        held.pop_front();
        return ready;
      }
      Ready ready{{}, false};
      if (from_cache.empty()) {
        const auto waiting = Clock::now();
        ready.outcome = pool.next();
        report.resources.compile_wait_seconds +=
            std::chrono::duration<double>(Clock::now() - waiting).count();
        if (ready.outcome.kernel)  // keyed by source hash
          in_database([&] { return (database.put_cubin(*ready.outcome.kernel), 0); });
        const auto sharers = sharing.extract(compiling.extract(ready.outcome.id).mapped());
        for (std::size_t id : sharers.mapped())
          from_cache.push_back(
              Reused{CompileOutcome{id, ready.outcome.kernel, ready.outcome.error}, true});
      } else {
        Reused reused = std::move(from_cache.front());
        from_cache.pop_front();
        ready.outcome = std::move(reused.outcome);
        ready.reused = ready.outcome.kernel.has_value();
        if (ready.reused) ++(reused.shared ? report.resources.shared : report.resources.reused);
      }
      if (!first_timed && ready.outcome.id != 0) {
        held.push_back(std::move(ready));
        continue;
      }
      first_timed = true;
      return ready;
    }
  };

  // One input seed per problem: the GPU worker computes the reference once and every candidate
  // (and the finalists again) is checked against the same inputs.
  const std::uint64_t input_seed = options.seed * 1000003;
  std::int64_t running_trial = 0;  // started on the GPU, not yet finished (ids start at 1)
  // This sweep's verified kernels near its best so far (kContenderSlack): the finalists
  // come from them, and so does the winner's cubin, stored again at the end (a cubin budget,
  // Database::put_cubin, may have evicted its stored copy before it won).
  struct Contender {
    Config config;
    CompiledKernel kernel;
    std::int64_t trial_id;
    cache::Trial trial;
  };
  std::vector<Contender> contenders;
  try {
    refill();
    while (!in_flight.empty()) {
      Ready ready = next_ready();
      CompileOutcome outcome = std::move(ready.outcome);
      const bool reused = ready.reused;
      Config config = in_flight.at(outcome.id);
      in_flight.erase(outcome.id);
      refill();

      cache::Trial trial =
          trial_from(config, outcome.kernel ? &*outcome.kernel : nullptr, toolchain);
      if (!outcome.kernel) {
        ++report.compile_failed;
        if (report.first_compile_error.empty())
          report.first_compile_error = compile_error_excerpt(config, outcome.error);
        trial.status = cache::TrialStatus::compile_failed;
        trial.detail = outcome.error;
        if (report.timed &&
            !in_database([&] { return database.claim_trial(key, trial, lease->id(), claim_after); })) {
          ++report.taken;
          continue;
        }
      } else {
        note_resources(report.resources, *outcome.kernel, config, reused);
        if (!report.timed) {
          trial.status = cache::TrialStatus::ok;  // compiled; nothing more can be learned here
        } else if (options.max_seconds && seconds_spent() >= *options.max_seconds) {
          continue;  // budget spent while it compiled: leave it for a later sweep
        } else {
          std::optional<std::int64_t> id =
              in_database([&] { return database.claim_trial(key, trial, lease->id(), claim_after); });
          if (!id) {  // another sweep of this problem took it first
            ++report.taken;
            continue;
          }
          running_trial = *id;
          TimingOptions timing;
          timing.best_ms = progress.best_ms;
          timing.give_up_factor = options.give_up_factor;
          timing.precision = options.timing_precision;
          GpuTrialResult result =
              gpu.evaluate(family, problem, config, *outcome.kernel, input_seed, timing);
          ResourceSummary& r = report.resources;
          ++r.trials_timed;
          r.gpu_load_seconds += result.seconds.load;
          r.gpu_verify_seconds += result.seconds.verify;
          r.gpu_timing_seconds += result.seconds.timing;
          r.gpu_kernel_seconds += result.seconds.kernels;
          trial.status = result.status;
          trial.detail = result.detail;
          trial.rel_error = result.verification.rel_error;
          trial.median_ms = result.timing.median_ms;
          trial.min_ms = result.timing.min_ms;
          trial.spread = result.timing.spread;
          trial.repetitions = result.timing.repetitions;
          in_database([&] { return (database.finish_trial(*id, trial), 0); });
          running_trial = 0;
          strategy->observe(config, trial);
          if (trial.status == cache::TrialStatus::ok) {
            if (progress.best_ms == 0 || trial.median_ms < progress.best_ms) {
              progress.best_ms = trial.median_ms;
              progress.best_config = config.text();
            }
            const double bar = progress.best_ms * (1 + options.finalist_margin + kContenderSlack);
            if (trial.median_ms <= bar) contenders.push_back({config, *outcome.kernel, *id, trial});
            std::erase_if(contenders, [&](const Contender& c) { return c.trial.median_ms > bar; });
          }
        }
      }
      finish(config, trial.status);
      throw_if_interrupted();  // a signal during a database write or a cached step
    }
  } catch (const Interrupted& interrupted) {
    // The trial on the GPU was cut off, not failed: withdrawn, the next sweep runs it again.
    if (running_trial) database.withdraw_trial(running_trial);
    report.interrupted_by = interrupted.signal();
  }

  // The finalists: the configs within options.finalist_margin of the best, timed again together and
  // interleaved, so that noise between their first timings cannot pick the winner.
  std::sort(contenders.begin(), contenders.end(),
            [](const Contender& a, const Contender& b) { return a.trial.median_ms < b.trial.median_ms; });
  std::vector<Contender*> finalists;
  for (Contender& c : contenders)
    if (finalists.size() < kFinalists &&
        c.trial.median_ms <= contenders.front().trial.median_ms * (1 + options.finalist_margin))
      finalists.push_back(&c);
  if (report.timed && !report.interrupted_by && finalists.size() >= 2) {
    std::vector<std::pair<Config, CompiledKernel>> together;
    for (const Contender* c : finalists) together.emplace_back(c->config, c->kernel);
    TimingOptions timing;
    timing.precision = options.timing_precision / 2;  // finer than the first pass: they are close
    timing.min_repetitions = 20;
    timing.max_repetitions = 100;
    try {
      const std::vector<Timing> timings =
          gpu.retime(family, problem, together, input_seed, timing);
      // The GPU's clocks may have drifted since the first pass (a long sweep heats it: 10% was
      // seen after the fixed protocol's 24 s of timing), and the trials that were not re-timed
      // keep first-pass times. So the finalists' trials take their interleaved medians scaled
      // by the drift measured on the first pass's best (finalists[0]): their order is the
      // interleaved one, their scale the first pass's, and no trial outside them can overtake
      // them on a drift alone.
      const double drift = finalists[0]->trial.median_ms / timings[0].median_ms;
      for (std::size_t i = 0; i < finalists.size(); ++i) {
        cache::Trial& trial = finalists[i]->trial;
        report.finalists.push_back({finalists[i]->config.text(), trial.median_ms, timings[i].median_ms,
                                    timings[i].median_ms * drift, timings[i].repetitions});
        trial.median_ms = timings[i].median_ms * drift;
        trial.min_ms = timings[i].min_ms * drift;
        trial.spread = timings[i].spread;
        trial.repetitions = timings[i].repetitions;
        in_database([&] { return (database.finish_trial(finalists[i]->trial_id, trial), 0); });
      }
    } catch (const Interrupted& interrupted) {
      report.interrupted_by = interrupted.signal();
    } catch (const Error& error) {
      report.finalists_error = error.what();
    }
  }

  report.resources.wall_seconds = seconds_spent();
  if (report.timed) {
    report.winner = database.refresh_winner(key);
    for (const Contender& c : contenders)
      if (report.winner && report.winner->source_hash == c.kernel.source_hash) {
        database.put_cubin(c.kernel);
        break;
      }
    if (report.winner && report.winner->median_ms > 0) {
      report.winner_tflops = family.work(problem).flops / (report.winner->median_ms * 1e-3) / 1e12;
      if (auto peak = tensor_peak_tflops(device)) report.peak_fraction = report.winner_tflops / *peak;
    }
  }
  return report;
}

bool run_worker_if_requested(int argc, char** argv) {
  std::optional<WorkerArgs> args = parse_worker_args(argc, argv);
  if (!args) return false;
  // In a process group of its own a worker gets no Ctrl-C: it ends with the tuner that
  // started it, even one killed with SIGKILL.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  int code = 2;
  try {
    if (args->role == "gpu") code = gpu_worker_main(*args);
    else if (args->role == "compile") code = compile_worker_main(*args);
  } catch (...) {
    code = 4;
  }
  // Skip static destructors: after a fault the driver's own teardown can hang or crash.
  std::_Exit(code);
}

}  // namespace tilesmith::tuner
