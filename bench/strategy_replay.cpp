// The tuner's benchmark, offline (issue 15): every search strategy replayed against the trials a
// database holds, key by key, with no GPU. Run an exhaustive sweep of a few shapes on the GPU
// (tilesmith tune --shape ... for each), then:
//
//   build/strategy_replay --db tilesmith.db [--min-trials 50] [--seeds 9]
//
// Per key (GPU model, problem, templates) with at least --min-trials configs tried: the median
// over seeds of the proposals each strategy needs to reach a config within 2% of the key's best,
// and that as a fraction of the key's configs. "model+prior" is the model fitted first to the
// database's trials of the op's other shapes (transfer). Also per strategy: the mean over seeds
// of the trials, the sweep's wall time modelled from the recorded compile and GPU times
// (tuner/strategy_replay.hpp), and the gap left by a sweep stopped at a quarter of the configs.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "cache/database.hpp"
#include "tuner/strategy_replay.hpp"

int main(int argc, char** argv) {
  std::string database;
  int min_trials = 50, seeds = 9;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "strategy_replay: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--db") database = value();
    else if (arg == "--min-trials") min_trials = std::atoi(value().c_str());
    else if (arg == "--seeds") seeds = std::atoi(value().c_str());
    else {
      std::fprintf(stderr,
                   "usage: strategy_replay --db PATH [--min-trials N] [--seeds N]\n"
                   "strategy_replay: unknown argument %s\n", arg.c_str());
      return 2;
    }
  }
  if (database.empty() || min_trials < 1 || seeds < 1) {
    std::fprintf(stderr, "usage: strategy_replay --db PATH [--min-trials N] [--seeds N]\n");
    return 2;
  }
  try {
    const tilesmith::cache::Database db(database, tilesmith::cache::Access::read_only);
    int keys = 0;
    for (const tilesmith::cache::TrialKey& key : db.trial_keys()) {
      const auto results = tilesmith::tuner::replay_strategies(db, key, seeds);
      if (results.empty() || results.front().candidates < static_cast<std::size_t>(min_trials))
        continue;
      ++keys;
      std::printf("%s on %s: %zu configs\n", key.problem.key().c_str(), key.gpu_model.c_str(),
                  results.front().candidates);
      std::printf("  %-12s %26s %8s %14s %15s\n", "strategy", "trials to 2% (median, mean)",
                  "of all", "modelled wall", "gap at 25%");
      for (const auto& result : results)
        std::printf("  %-12s %15zu %10.1f %7.1f%% %12.1f s %14.2f%%\n", result.strategy.c_str(),
                    result.median_trials, result.mean_trials,
                    100.0 * static_cast<double>(result.median_trials) /
                        static_cast<double>(result.candidates),
                    result.mean_seconds, 100.0 * result.mean_gap_at_quarter);
    }
    if (keys == 0) std::printf("no key with %d or more configs tried in %s\n", min_trials, database.c_str());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "strategy_replay: %s\n", error.what());
    return 1;
  }
  return 0;
}
