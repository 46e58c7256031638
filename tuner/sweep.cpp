#include "tuner/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>

#include "generator/compiled_kernel.hpp"
#include "tuner/compile_pool.hpp"
#include "tuner/gpu_worker.hpp"
#include "tuner/search_strategy.hpp"

namespace tilesmith::tuner {
namespace {

using Clock = std::chrono::steady_clock;

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

void note_resources(ResourceSummary& summary, const CompiledKernel& kernel, const Config& config) {
  const ResourceUsage& r = kernel.resources;
  if (r.registers >= 0) {  // unknown only for cubins stored by an older tilesmith
    if (summary.max_registers == 0 || r.registers < summary.min_registers) summary.min_registers = r.registers;
    summary.max_registers = std::max(summary.max_registers, r.registers);
  }
  if (r.spills()) summary.spilling.push_back(config.text());
  summary.compile_seconds_total += kernel.compile_seconds;
  ++summary.compiled;
}

bool is_failure(cache::TrialStatus status) {
  return status != cache::TrialStatus::ok && status != cache::TrialStatus::pruned_early;
}

}  // namespace

std::optional<double> tensor_peak_tflops(const DeviceTarget& device) {
  // Dense fp16/bf16 tensor-core peaks from NVIDIA's datasheets.
  const std::string& name = device.name;
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  if (has("H100") && (has("PCIe") || has("PCIE"))) return 756;
  if (has("H100") || has("H200") || has("GH200")) return 989;
  if (has("A100")) return 312;
  if (has("L40S")) return 362;
  if (has("B200")) return 2250;
  return std::nullopt;
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

  // Enumerate and prune before anything is compiled.
  std::vector<Config> space = enumerate_space(family.space());
  report.space_size = static_cast<int>(space.size());
  std::vector<Config> candidates;
  for (Config& config : space)
    if (!family.reject(config, problem, device)) candidates.push_back(std::move(config));
  report.pruned = report.space_size - static_cast<int>(candidates.size());

  cache::TrialKey key{"", problem, template_hash(family)};
  if (report.timed) {
    key.gpu_model = device.model_key();
    report.gpu_model = key.gpu_model;
    database.record_gpu(device, toolchain);
    // A trial left running means an earlier sweep died on it: record that, never retry it.
    report.abandoned = database.abandon_running(key);
    if (!options.retune) {
      std::set<std::string> done;
      for (const cache::Trial& trial : database.trials(key)) done.insert(trial.config.text());
      auto before = candidates.size();
      std::erase_if(candidates, [&](const Config& c) { return done.count(c.text()) > 0; });
      report.skipped_done = static_cast<int>(before - candidates.size());
    }
  }

  std::unique_ptr<SearchStrategy> strategy =
      make_strategy(options.strategy, candidates, options.seed);
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
  std::deque<CompileOutcome> from_cache;  // cubins the database already had: no NVRTC
  std::size_t proposed = 0;
  auto out_of_budget = [&] {
    if (options.max_candidates && static_cast<int>(proposed) >= *options.max_candidates) return true;
    if (options.max_seconds &&
        std::chrono::duration<double>(Clock::now() - started).count() >= *options.max_seconds)
      return true;
    return false;
  };
  // Keep every compile process busy, two jobs deep, while the GPU worker times.
  auto refill = [&] {
    while (in_flight.size() < static_cast<std::size_t>(2 * pool.processes()) && !out_of_budget()) {
      std::optional<Config> config = strategy->next();
      if (!config) return;
      CompileJob job{proposed++, render(family, *config, problem), arch};
      in_flight.emplace(job.id, *config);
      if (auto cached = database.cubin(job.source.hash, arch, toolchain.nvrtc_version)) {
        from_cache.push_back(CompileOutcome{job.id, std::move(cached), ""});
        ++report.resources.reused;
      } else {
        pool.submit(std::move(job));
      }
    }
  };

  refill();
  while (!in_flight.empty()) {
    CompileOutcome outcome;
    if (from_cache.empty()) {
      outcome = pool.next();
      if (outcome.kernel) database.put_cubin(*outcome.kernel);  // keyed by source hash
    } else {
      outcome = std::move(from_cache.front());
      from_cache.pop_front();
    }
    Config config = in_flight.at(outcome.id);
    in_flight.erase(outcome.id);
    refill();

    cache::Trial trial = trial_from(config, outcome.kernel ? &*outcome.kernel : nullptr, toolchain);
    if (!outcome.kernel) {
      ++report.compile_failed;
      trial.status = cache::TrialStatus::compile_failed;
      trial.detail = outcome.error;
      if (report.timed) database.record_trial(key, trial);
    } else {
      note_resources(report.resources, *outcome.kernel, config);
      if (!report.timed) {
        trial.status = cache::TrialStatus::ok;  // compiled; nothing more can be learned here
      } else if (options.max_seconds &&
                 std::chrono::duration<double>(Clock::now() - started).count() >= *options.max_seconds) {
        continue;  // budget spent while it compiled: leave it for a later sweep
      } else {
        std::int64_t id = database.start_trial(key, trial);
        TimingOptions timing;
        timing.best_ms = progress.best_ms;
        timing.give_up_factor = options.give_up_factor;
        GpuTrialResult result = gpu.evaluate(family, problem, config, *outcome.kernel,
                                             options.seed * 1000003 + outcome.id, timing);
        trial.status = result.status;
        trial.detail = result.detail;
        trial.rel_error = result.verification.rel_error;
        trial.median_ms = result.timing.median_ms;
        trial.min_ms = result.timing.min_ms;
        trial.spread = result.timing.spread;
        trial.repetitions = result.timing.repetitions;
        database.finish_trial(id, trial);
        strategy->observe(config, trial);
        if (trial.status == cache::TrialStatus::ok &&
            (progress.best_ms == 0 || trial.median_ms < progress.best_ms)) {
          progress.best_ms = trial.median_ms;
          progress.best_config = config.text();
        }
      }
    }
    ++progress.done;
    if (trial.status == cache::TrialStatus::ok) ++progress.ok;
    if (is_failure(trial.status)) ++progress.failed;
    progress.last_config = config.text();
    progress.last_status = cache::status_name(trial.status);
    if (on_progress) on_progress(progress);
  }

  report.resources.wall_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  if (report.timed) {
    report.winner = database.refresh_winner(key);
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
