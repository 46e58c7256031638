// Enumerating a parameter space and the orders the strategies propose it in.
#include "tuner/search_strategy.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "templates/registry.hpp"

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
    if (proposed.size() > 100000) break;  // a strategy that never ends
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

TEST(EnumerateSpaceTest, MatmulSpaceSizeIsTheProductOfItsValueCounts) {
  const std::vector<ParamSpec> space = find_family("matmul").space();
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
    EXPECT_NE(message.find("exhaustive"), std::string::npos) << message;
  }
  EXPECT_THROW(make_strategy("", {}, 1), Error);
  EXPECT_THROW(make_strategy("Random", {}, 1), Error);
}

}  // namespace
}  // namespace tilesmith::tuner
