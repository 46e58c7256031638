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
  // Proposals until one within 2% of the key's best, median over the seeds.
  std::size_t median_trials = 0;
  std::size_t candidates = 0;  // the key's distinct configs with a trial
};

// Replays exhaustive, random, annealing, genetic, model and model+prior for `key`: the
// candidates are the configs the key has trials of, each proposal's result its recorded trial,
// delivered `lag` proposals late (as from the compile pipeline). Empty when the key has no ok
// trial.
std::vector<ReplayResult> replay_strategies(const cache::Database& database,
                                            const cache::TrialKey& key, int seeds = 9,
                                            std::size_t lag = 16);

}  // namespace tilesmith::tuner
