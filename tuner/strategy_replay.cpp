#include "tuner/strategy_replay.hpp"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <set>

#include "tuner/search_strategy.hpp"

namespace tilesmith::tuner {

std::vector<ReplayResult> replay_strategies(const cache::Database& database,
                                            const cache::TrialKey& key, int seeds,
                                            std::size_t lag, const ReplayCosts& costs) {
  // Each config's recorded result: its fastest ok trial, else its last failure.
  std::map<std::string, cache::Trial> recorded;
  std::vector<Config> candidates;
  double best = std::numeric_limits<double>::infinity();
  for (const cache::Trial& trial : database.trials(key)) {  // ok ones first, fastest first
    if (trial.status == cache::TrialStatus::running) continue;
    if (recorded.emplace(trial.config.text(), trial).second) candidates.push_back(trial.config);
    if (trial.status == cache::TrialStatus::ok && trial.median_ms > 0)
      best = std::min(best, trial.median_ms);
  }
  if (!(best < std::numeric_limits<double>::infinity())) return {};
  const std::vector<PriorResult> prior = prior_results(database, key);
  const std::size_t quarter = std::max<std::size_t>(1, (candidates.size() + 3) / 4);
  auto gpu_seconds = [&](const cache::Trial& trial) {
    if (trial.status != cache::TrialStatus::ok && trial.status != cache::TrialStatus::pruned_early)
      return costs.seconds_per_trial;
    return costs.seconds_per_trial +
           trial.repetitions * (std::max(trial.median_ms, 0.0) + costs.flush_ms) / 1000;
  };

  std::vector<ReplayResult> results;
  for (const std::string name : {"exhaustive", "random", "annealing", "genetic", "model",
                                 "model+prior"}) {
    const bool with_prior = name == "model+prior";
    std::vector<std::size_t> trials;
    double seconds_sum = 0, gap_sum = 0;
    for (int seed = 1; seed <= seeds; ++seed) {
      auto strategy = make_strategy(with_prior ? "model" : name, candidates,
                                    static_cast<std::uint64_t>(seed), std::nullopt,
                                    with_prior ? prior : std::vector<PriorResult>{});
      std::vector<Config> proposed;
      std::set<std::string> compiled;  // source hashes: a kernel is compiled once
      double compile_seconds = 0, gpu = 0, seconds = 0;
      double best_in_quarter = std::numeric_limits<double>::infinity();
      std::size_t found = 0;
      while (std::optional<Config> config = strategy->next()) {
        proposed.push_back(*config);
        const cache::Trial& trial = recorded.at(config->text());
        if (compiled.insert(trial.source_hash).second) compile_seconds += trial.compile_seconds;
        gpu += gpu_seconds(trial);
        const bool timed = trial.status == cache::TrialStatus::ok && trial.median_ms > 0;
        if (timed && proposed.size() <= quarter)
          best_in_quarter = std::min(best_in_quarter, trial.median_ms);
        if (!found && timed && trial.median_ms <= best * 1.02) {
          found = proposed.size();
          seconds = std::max(compile_seconds / costs.compile_processes, gpu);
        }
        if (proposed.size() > lag) {
          const Config& late = proposed[proposed.size() - 1 - lag];
          strategy->observe(late, recorded.at(late.text()));
        }
        if (found && proposed.size() >= quarter) break;
      }
      trials.push_back(found);
      seconds_sum += seconds;
      gap_sum += best_in_quarter / best - 1;
      if (name == "exhaustive") break;  // the same order for every seed
    }
    const double runs = static_cast<double>(trials.size());
    ReplayResult result;
    result.strategy = name;
    result.mean_trials =
        static_cast<double>(std::accumulate(trials.begin(), trials.end(), std::size_t{0})) / runs;
    std::sort(trials.begin(), trials.end());
    result.median_trials = trials[trials.size() / 2];
    result.mean_seconds = seconds_sum / runs;
    result.mean_gap_at_quarter = gap_sum / runs;
    result.candidates = candidates.size();
    results.push_back(result);
  }
  return results;
}

}  // namespace tilesmith::tuner
