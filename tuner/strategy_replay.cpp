#include "tuner/strategy_replay.hpp"

#include <algorithm>
#include <limits>
#include <map>

#include "tuner/search_strategy.hpp"

namespace tilesmith::tuner {

std::vector<ReplayResult> replay_strategies(const cache::Database& database,
                                            const cache::TrialKey& key, int seeds,
                                            std::size_t lag) {
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

  std::vector<ReplayResult> results;
  for (const std::string name : {"exhaustive", "random", "annealing", "genetic", "model",
                                 "model+prior"}) {
    const bool with_prior = name == "model+prior";
    std::vector<std::size_t> trials;
    for (int seed = 1; seed <= seeds; ++seed) {
      auto strategy = make_strategy(with_prior ? "model" : name, candidates,
                                    static_cast<std::uint64_t>(seed), std::nullopt,
                                    with_prior ? prior : std::vector<PriorResult>{});
      std::vector<Config> proposed;
      std::size_t found = 0;
      while (std::optional<Config> config = strategy->next()) {
        proposed.push_back(*config);
        const cache::Trial& trial = recorded.at(config->text());
        if (!found && trial.status == cache::TrialStatus::ok && trial.median_ms <= best * 1.02)
          found = proposed.size();
        if (proposed.size() > lag) {
          const Config& late = proposed[proposed.size() - 1 - lag];
          strategy->observe(late, recorded.at(late.text()));
        }
        if (found) break;
      }
      trials.push_back(found);
      if (name == "exhaustive") break;  // the same order for every seed
    }
    std::sort(trials.begin(), trials.end());
    results.push_back({name, trials[trials.size() / 2], candidates.size()});
  }
  return results;
}

}  // namespace tilesmith::tuner
