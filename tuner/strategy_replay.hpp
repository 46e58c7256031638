// The tuner's own benchmark, offline: each search strategy replayed against the trials a
// database already holds for a key (an exhaustive sweep's, ideally), so strategies are compared
// on real landscapes without a GPU. bench/strategy_replay.cpp prints it for every key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/database.hpp"

namespace tilesmith::tuner {

struct ReplayResult {
  std::string strategy;  // "model+prior": the model fitted first to the other keys' trials
  // Proposals until one within 2% of the key's best: median and mean over the seeds.
  std::size_t median_trials = 0;
  double mean_trials = 0;
  // The sweep's wall time until then, modelled from the recorded trials (mean over the seeds):
  // the proposals' NVRTC seconds over `compile_processes` (each kernel once) or the GPU's
  // time for them (ReplayCosts), whichever is longer, since the two overlap.
  double mean_seconds = 0;
  // The best found within a budget of a quarter of the configs, over the key's best, minus 1
  // (mean over the seeds): what a sweep stopped there leaves on the table.
  double mean_gap_at_quarter = 0;
  std::size_t candidates = 0;  // the key's distinct configs with a trial
};

// What the modelled wall time charges: per timed trial a fixed GPU cost (module load, inputs,
// verification: ~9 ms a trial in the sweeps of docs/perf/tuner.md) plus its repetitions at
// its median and an L2 flush each.
struct ReplayCosts {
  int compile_processes = 16;
  double seconds_per_trial = 0.009;
  double flush_ms = 0.04;
};

// Replays exhaustive, random, annealing, genetic, model and model+prior for `key`: the
// candidates are the configs the key has trials of, each proposal's result its recorded trial,
// delivered `lag` proposals late (as from the compile pipeline). Empty when the key has no ok
// trial.
std::vector<ReplayResult> replay_strategies(const cache::Database& database,
                                            const cache::TrialKey& key, int seeds = 9,
                                            std::size_t lag = 16, const ReplayCosts& costs = {});

}  // namespace tilesmith::tuner
