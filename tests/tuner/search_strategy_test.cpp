// Enumerating a parameter space and the orders the strategies propose it in.
#include "tuner/search_strategy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <map>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "support/test_support.hpp"
#include "templates/registry.hpp"
#include "tuner/strategy_replay.hpp"

namespace tilesmith::tuner {
namespace {

std::vector<ParamSpec> small_space() {
  return {{"a", {1, 2, 3}}, {"b", {10, 20}}, {"c", {-1, 0, 5, 7}}};
}

// Drains a strategy: every config it proposes, in order.
std::vector<Config> drain(SearchStrategy& strategy) {
  std::vector<Config> proposed;
  while (std::optional<Config> config = strategy.next()) {
    proposed.push_back(*config);
    if (proposed.size() > 1000000) break;  // a strategy that never ends
  }
  return proposed;
}

std::vector<Config> sorted(std::vector<Config> configs) {
  std::sort(configs.begin(), configs.end());
  return configs;
}

// ---------------------------------------------------------------------------------------------
// enumerate_space

TEST(EnumerateSpaceTest, IsTheCartesianProduct) {
  std::vector<Config> configs = enumerate_space(small_space());
  ASSERT_EQ(configs.size(), 3u * 2 * 4);
  std::set<std::string> texts;
  for (const Config& config : configs) {
    EXPECT_EQ(config.values.size(), 3u) << config.text();
    texts.insert(config.text());
  }
  EXPECT_EQ(texts.size(), configs.size()) << "every config is distinct";
  for (int a : {1, 2, 3})
    for (int b : {10, 20})
      for (int c : {-1, 0, 5, 7}) {
        Config expected;
        expected.values = {{"a", a}, {"b", b}, {"c", c}};
        EXPECT_EQ(texts.count(expected.text()), 1u) << expected.text();
      }
}

TEST(EnumerateSpaceTest, OrderIsFixedWithTheLastParameterFastest) {
  std::vector<Config> configs = enumerate_space(small_space());
  EXPECT_EQ(configs, enumerate_space(small_space()));
  EXPECT_EQ(configs.front().text(), "a=1,b=10,c=-1");
  EXPECT_EQ(configs[1].text(), "a=1,b=10,c=0");
  EXPECT_EQ(configs.back().text(), "a=3,b=20,c=7");
}

TEST(EnumerateSpaceTest, SizeIsTheProductOfItsValueCounts) {
  // Shaped like a template's space: several parameters, each with its own count of values.
  // (The matmul family's merged space, every parameter of its three variants crossed, holds
  // ~10^8 configs: a family enumerates each variant's product instead.)
  const std::vector<ParamSpec> space = {{"block_m", {16, 32, 64, 128, 256}},
                                        {"block_n", {32, 64, 128, 256}},
                                        {"block_k", {32, 64}},
                                        {"warps_m", {1, 2, 4}},
                                        {"stages", {2, 3, 4, 5}},
                                        {"group_m", {1, 8}}};
  std::size_t product = 1;
  for (const ParamSpec& param : space) product *= param.values.size();
  std::vector<Config> configs = enumerate_space(space);
  EXPECT_EQ(configs.size(), product);
  std::set<Config> distinct(configs.begin(), configs.end());
  EXPECT_EQ(distinct.size(), product);
}

TEST(EnumerateSpaceTest, EdgeCases) {
  // No parameters: the one empty config. A parameter without values: nothing.
  std::vector<Config> empty_space = enumerate_space({});
  ASSERT_EQ(empty_space.size(), 1u);
  EXPECT_TRUE(empty_space[0].values.empty());
  EXPECT_TRUE(enumerate_space({{"a", {1, 2}}, {"b", {}}}).empty());
  EXPECT_EQ(enumerate_space({{"only", {4}}}).size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// Strategies

TEST(SearchStrategyTest, ExhaustiveProposesEveryCandidateInOrderThenStops) {
  std::vector<Config> candidates = enumerate_space(small_space());
  auto strategy = make_strategy("exhaustive", candidates, /*seed=*/1);
  EXPECT_EQ(drain(*strategy), candidates);
  EXPECT_FALSE(strategy->next().has_value()) << "stays exhausted";
}

// The sweep keeps more proposals ahead of the results for a strategy that does not learn from
// them (tuner/sweep.cpp): only annealing, genetic and model learn, with a first config or not.
TEST(SearchStrategyTest, OnlyTheStrategiesThatUseResultsSayTheyLearn) {
  std::vector<Config> candidates = enumerate_space(small_space());
  for (const char* name : {"exhaustive", "random", "annealing", "genetic", "model"}) {
    const bool learns = std::string(name) != "exhaustive" && std::string(name) != "random";
    EXPECT_EQ(make_strategy(name, candidates, 1)->learns(), learns) << name;
    EXPECT_EQ(make_strategy(name, candidates, 1, candidates[1])->learns(), learns) << name;
  }
}

TEST(SearchStrategyTest, ExhaustiveIgnoresTheSeed) {
  std::vector<Config> candidates = enumerate_space(small_space());
  EXPECT_EQ(drain(*make_strategy("exhaustive", candidates, 7)),
            drain(*make_strategy("exhaustive", candidates, 8)));
}

TEST(SearchStrategyTest, RandomIsAPermutation) {
  std::vector<Config> candidates = find_family("matmul").enumerate();
  std::vector<Config> proposed = drain(*make_strategy("random", candidates, /*seed=*/42));
  ASSERT_EQ(proposed.size(), candidates.size());
  EXPECT_EQ(sorted(proposed), sorted(candidates));
  EXPECT_NE(proposed, candidates) << "a shuffle of the whole space left it in order";
}

TEST(SearchStrategyTest, RandomIsDeterministicForASeedAndDiffersAcrossSeeds) {
  std::vector<Config> candidates = find_family("matmul").enumerate();
  std::vector<Config> first = drain(*make_strategy("random", candidates, 1));
  EXPECT_EQ(first, drain(*make_strategy("random", candidates, 1)));
  std::vector<Config> other = drain(*make_strategy("random", candidates, 2));
  EXPECT_NE(first, other);
  EXPECT_EQ(sorted(first), sorted(other));
  // A budget takes a prefix: different seeds sample different configs.
  EXPECT_FALSE(std::equal(first.begin(), first.begin() + 10, other.begin()));
}

TEST(SearchStrategyTest, EveryStrategyProposesTheGivenFirstConfigFirstAndOnce) {
  std::vector<Config> candidates = enumerate_space(small_space());
  const Config first = candidates[candidates.size() / 2];
  for (const char* name : {"exhaustive", "random", "annealing", "genetic"}) {
    std::vector<Config> proposed = drain(*make_strategy(name, candidates, 3, first));
    ASSERT_FALSE(proposed.empty()) << name;
    EXPECT_EQ(proposed.front(), first) << name;
    EXPECT_EQ(std::count(proposed.begin(), proposed.end(), first), 1) << name;
    EXPECT_EQ(sorted(proposed), sorted(candidates)) << name;
  }
  // A first config that is not a candidate (pruned, or already tried) is not proposed.
  Config stranger = first;
  stranger.values["not_a_parameter"] = 1;
  EXPECT_EQ(drain(*make_strategy("exhaustive", candidates, 3, stranger)), candidates);
}

TEST(SearchStrategyTest, EmptyCandidateListProposesNothing) {
  EXPECT_FALSE(make_strategy("exhaustive", {}, 1)->next().has_value());
  EXPECT_FALSE(make_strategy("random", {}, 1)->next().has_value());
}

TEST(SearchStrategyTest, UnknownStrategyThrowsNamingIt) {
  try {
    make_strategy("bayesian", enumerate_space(small_space()), 1);
    FAIL() << "expected tilesmith::Error";
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("bayesian"), std::string::npos) << message;
    EXPECT_NE(message.find("exhaustive, random, annealing, genetic"), std::string::npos)
        << message;
  }
  EXPECT_THROW(make_strategy("", {}, 1), InvalidArgument);
  EXPECT_THROW(make_strategy("Random", {}, 1), InvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// The strategies that learn from results, on a synthetic landscape over the real pruned matmul
// space (4096^3 on sm_90a): a smooth time with one best config, failures for some configs, and
// results that come back late, as they do from the compile pipeline.

std::vector<Config> matmul_candidates() {
  const Family& family = find_family("matmul");
  const Problem problem{"matmul", DType::bf16, DType::bf16, {4096, 4096, 4096}};
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  std::vector<Config> candidates;
  for (Config& config : family.enumerate())
    if (!family.reject(config, problem, device)) candidates.push_back(std::move(config));
  return candidates;
}

// Milliseconds: the wgmma template near 128x256, 4 stages, 2 consumers, a 2x1 cluster; the
// mma.sync one twice as slow; a few configs fail.
cache::Trial synthetic_result(const Config& config) {
  cache::Trial trial;
  auto log_off = [](int value, int best) { return std::abs(std::log2(double(value) / best)); };
  const auto& v = config.values;
  double ms;
  if (v.at("variant") == 1) {
    ms = 0.18 * (1 + 0.12 * log_off(v.at("block_m"), 128) + 0.15 * log_off(v.at("block_n"), 256) +
                 0.04 * std::abs(v.at("stages") - 4) + 0.05 * std::abs(v.at("consumers") - 2) +
                 0.03 * (v.at("cluster_m") != 2) + 0.03 * (v.at("cluster_n") != 1) +
                 0.02 * (v.at("group_m") != 8) + 0.2 * log_off(v.at("split_k"), 1));
  } else {
    ms = 0.36 * (1 + 0.1 * log_off(v.at("block_m"), 128) + 0.1 * log_off(v.at("block_n"), 128) +
                 0.03 * std::abs(v.at("stages") - 4));
  }
  const bool fails = std::hash<std::string>()(config.text()) % 17 == 0;
  trial.status = fails ? cache::TrialStatus::compile_failed : cache::TrialStatus::ok;
  trial.median_ms = fails ? 0 : ms;
  return trial;
}

// Proposals until one within 2% of the best of the space, with results observed `lag`
// proposals late; and every proposal, to check the strategy covers the space once.
struct SearchRun {
  std::size_t to_within_2_percent = 0;
  std::vector<Config> proposed;
};
SearchRun search(const std::string& name, const std::vector<Config>& candidates, std::uint64_t seed,
           std::size_t lag, const std::vector<PriorResult>& prior = {}) {
  double best = 1e30;
  for (const Config& config : candidates) {
    const cache::Trial trial = synthetic_result(config);
    if (trial.status == cache::TrialStatus::ok) best = std::min(best, trial.median_ms);
  }
  auto strategy = make_strategy(name, candidates, seed, std::nullopt, prior);
  SearchRun run;
  while (std::optional<Config> config = strategy->next()) {
    run.proposed.push_back(*config);
    const cache::Trial trial = synthetic_result(*config);
    if (!run.to_within_2_percent && trial.status == cache::TrialStatus::ok &&
        trial.median_ms <= best * 1.02)
      run.to_within_2_percent = run.proposed.size();
    if (run.proposed.size() > lag) {
      const Config& late = run.proposed[run.proposed.size() - 1 - lag];
      strategy->observe(late, synthetic_result(late));
    }
    if (run.proposed.size() > 2 * candidates.size()) break;  // a strategy that never ends
  }
  return run;
}

TEST(SearchStrategyTest, LearningStrategiesProposeEveryCandidateExactlyOnce) {
  const std::vector<Config> candidates = matmul_candidates();
  for (const std::string name : {"annealing", "genetic", "model"}) {
    const SearchRun run = search(name, candidates, 5, 16);
    EXPECT_EQ(run.proposed.size(), candidates.size()) << name;
    EXPECT_EQ(sorted(run.proposed), sorted(candidates)) << name;
    EXPECT_EQ(search(name, candidates, 5, 16).proposed, run.proposed) << name << ": deterministic";
  }
  EXPECT_FALSE(make_strategy("annealing", {}, 1)->next().has_value());
  EXPECT_FALSE(make_strategy("genetic", {}, 1)->next().has_value());
  EXPECT_FALSE(make_strategy("model", {}, 1)->next().has_value());
}

// The point of learning: within 2% of the best in fewer trials than a random sample, over
// several seeds (median), with results arriving 16 proposals late.
TEST(SearchStrategyTest, LearningStrategiesFindANearBestConfigSoonerThanRandom) {
  const std::vector<Config> candidates = matmul_candidates();
  auto median_trials = [&](const std::string& name) {
    std::vector<std::size_t> trials;
    for (std::uint64_t seed = 1; seed <= 9; ++seed)
      trials.push_back(search(name, candidates, seed, 16).to_within_2_percent);
    std::sort(trials.begin(), trials.end());
    return trials[trials.size() / 2];
  };
  const std::size_t random = median_trials("random");
  const std::size_t annealing = median_trials("annealing");
  const std::size_t genetic = median_trials("genetic");
  const std::size_t model = median_trials("model");
  std::cout << "trials to within 2% of the best of " << candidates.size()
            << " (median of 9 seeds): random " << random << ", annealing " << annealing
            << ", genetic " << genetic << ", model " << model << "\n";
  EXPECT_LT(annealing, random);
  EXPECT_LT(genetic, random);
  EXPECT_LT(model, random);
}

// Transfer: the model starts from another shape's results (here a 10% sample of a landscape of
// the same form 1.7x slower, as a neighbouring shape's random sweep would leave), each relative
// to that shape's mean, and finds a near-best config of this one in a handful of trials (the
// weights are per template: block_n=256 suits wgmma and not mma.sync here).
TEST(SearchStrategyTest, TheModelStartsFromAnotherShapesResults) {
  const std::vector<Config> candidates = matmul_candidates();
  std::vector<PriorResult> prior;
  double mean = 0;
  for (const Config& config : candidates) {
    const cache::Trial trial = synthetic_result(config);
    if (trial.status != cache::TrialStatus::ok || std::hash<std::string>()(config.text()) % 10 != 3)
      continue;
    prior.push_back({config, std::log(1.7 * trial.median_ms)});
    mean += prior.back().relative_log_ms;
  }
  for (PriorResult& result : prior) result.relative_log_ms -= mean / prior.size();
  std::vector<std::size_t> trials;
  for (std::uint64_t seed = 1; seed <= 9; ++seed)
    trials.push_back(search("model", candidates, seed, 16, prior).to_within_2_percent);
  std::sort(trials.begin(), trials.end());
  std::cout << "model with a prior of " << prior.size() << " results: within 2% in "
            << trials[trials.size() / 2] << " trials (median of 9 seeds)\n";
  EXPECT_LE(trials[trials.size() / 2], 5u);
  EXPECT_EQ(search("model", candidates, 3, 16, prior).proposed.size(), candidates.size());
}

// The offline benchmark: the strategies replayed against a database's trials, the landscape of
// one shape and a 1.7x slower one of another recorded as sweeps would record them.
TEST(StrategyReplayTest, ReplaysEveryStrategyAgainstTheRecordedTrials) {
  const std::vector<Config> candidates = matmul_candidates();
  testing::TempDir dir;
  cache::Database db(dir.file("replay.db"));
  const DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  db.record_gpu(device, {"13.0", "13.0"});
  const cache::TrialKey key{device.model_key(), {"matmul", DType::bf16, DType::bf16, {4096, 4096, 4096}}, "t"};
  const cache::TrialKey other{device.model_key(), {"matmul", DType::bf16, DType::bf16, {2048, 2048, 2048}}, "t"};
  for (const Config& config : candidates) {
    cache::Trial trial = synthetic_result(config);
    trial.config = config;
    trial.source_hash = config.text();
    trial.min_ms = trial.median_ms;
    trial.repetitions = 10;
    trial.compile_seconds = 0.5;
    db.record_trial(key, trial);
    if (std::hash<std::string>()(config.text()) % 10 == 3) {
      trial.median_ms *= 1.7;
      db.record_trial(other, trial);
    }
  }
  // 11 seeds: with 5 the medians moved with which configs the hash fails (a change of the
  // configs' text put random's at 269 trials and the model's at 328; over 15 and 31 seeds
  // 444-506 against 65-69).
  const std::vector<ReplayResult> results = replay_strategies(db, key, 11);
  ASSERT_EQ(results.size(), 6u);
  std::map<std::string, std::size_t> trials;
  for (const ReplayResult& result : results) {
    EXPECT_EQ(result.candidates, candidates.size());
    EXPECT_GT(result.median_trials, 0u) << result.strategy;
    EXPECT_GE(result.mean_trials, 1.0) << result.strategy;
    // Each proposal's kernel is its own (source hash = config): at least its compile over the
    // 16 processes, or its GPU time, whichever is longer.
    EXPECT_GE(result.mean_seconds * (1 + 1e-9),
              std::max(result.mean_trials * 0.5 / 16, result.mean_trials * 0.009))
        << result.strategy;
    EXPECT_GE(result.mean_gap_at_quarter, 0.0) << result.strategy;
    trials[result.strategy] = result.median_trials;
    if (result.strategy == "model+prior") EXPECT_LE(result.mean_gap_at_quarter, 0.02);
  }
  EXPECT_LT(trials.at("model"), trials.at("random"));
  EXPECT_LE(trials.at("model+prior"), 5u);
  EXPECT_TRUE(replay_strategies(db, {device.model_key(), key.problem, "none"}).empty());
}

}  // namespace
}  // namespace tilesmith::tuner
