// Search strategies behind one interface: the sweep asks for the next config and reports each
// result back, so a model-guided strategy can plug in without touching the sweep.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/database.hpp"
#include "templates/family.hpp"

namespace tilesmith::tuner {

class SearchStrategy {
 public:
  virtual ~SearchStrategy() = default;
  // The next config to try, or nothing when the strategy has nothing more to propose. Every
  // candidate is proposed at most once, and all of them before nothing is returned: a strategy
  // orders the search, it never ends it early (budgets do).
  virtual std::optional<Config> next() = 0;
  // The result of a proposed config. Results arrive late (compiles run ahead of timing) and not
  // for every proposal (an interrupted sweep).
  virtual void observe(const Config& config, const cache::Trial& result) {
    (void)config;
    (void)result;
  }
  // Whether results change what comes next: the sweep then keeps fewer proposals ahead of them.
  virtual bool learns() const { return false; }
};

// Throws InvalidArgument naming the strategies when `name` is none of them.
void require_strategy_name(const std::string& name);

// A result from another problem of the same family, for the model-guided strategy to start from:
// a config and its log time relative to the mean log time of that problem's ok trials.
struct PriorResult {
  Config config;
  double relative_log_ms = 0;
};

// The model's prior for `key`: the ok trials of every other problem of its op tuned with its
// templates, on any GPU model, each problem's log times centred on their mean.
std::vector<PriorResult> prior_results(const cache::Database& database, const cache::TrialKey& key);

// "exhaustive": every candidate in space order. "random": in a seeded random order (with a
// budget, a uniform sample). "annealing": simulated annealing over configs one parameter apart,
// from the best seen, accepting a slower one with a probability that falls as the search cools.
// "genetic": children of the fastest configs seen (each parameter from one of two parents, now
// and then mutated). The last two start from a few random configs and fall back to random ones
// when their neighbourhoods are used up. "model": a cost model, log time as a sum of one weight
// per parameter value (ridge regression), fitted to `prior` (other problems' results: transfer)
// and to every result of this search, proposes the candidate it predicts fastest, now and then a
// random one. `first`, where it is one of the candidates, is proposed before all others (the
// sweep passes the family's default, so a budgeted sweep never ends worse than the untuned
// runtime). Throws InvalidArgument for an unknown name.
std::unique_ptr<SearchStrategy> make_strategy(const std::string& name,
                                              std::vector<Config> candidates, std::uint64_t seed,
                                              std::optional<Config> first = std::nullopt,
                                              const std::vector<PriorResult>& prior = {});

}  // namespace tilesmith::tuner
