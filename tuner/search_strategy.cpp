#include "tuner/search_strategy.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <unordered_map>

namespace tilesmith::tuner {
namespace {

// Proposes a fixed list in order; exhaustive and random differ only in how they order it.
class OrderedStrategy final : public SearchStrategy {
 public:
  explicit OrderedStrategy(std::vector<Config> order) : order_(std::move(order)) {}
  std::optional<Config> next() override {
    if (position_ >= order_.size()) return std::nullopt;
    return order_[position_++];
  }

 private:
  std::vector<Config> order_;
  std::size_t position_ = 0;
};

// What the strategies that learn from results share: the candidates, which were proposed, what
// each cost, and which candidates are one parameter apart (neighbours).
class Landscape {
 public:
  Landscape(std::vector<Config> candidates, std::uint64_t seed)
      : candidates_(std::move(candidates)),
        proposed_(candidates_.size(), false),
        cost_(candidates_.size(), std::numeric_limits<double>::quiet_NaN()),
        random_(seed) {
    order_.resize(candidates_.size());
    for (std::size_t i = 0; i < candidates_.size(); ++i) {
      order_[i] = i;
      index_.emplace(candidates_[i].text(), i);
      for (const auto& [name, value] : candidates_[i].values) {
        std::vector<int>& seen = values_[name];
        if (std::find(seen.begin(), seen.end(), value) == seen.end()) seen.push_back(value);
        // Candidates equal but for `name` share a bucket: they are each other's neighbours.
        Config without = candidates_[i];
        without.values.erase(name);
        buckets_[name + "|" + without.text()].push_back(i);
      }
    }
    std::shuffle(order_.begin(), order_.end(), random_);
  }

  bool exhausted() const { return taken_ == candidates_.size(); }
  std::size_t size() const { return candidates_.size(); }
  std::mt19937_64& random() { return random_; }
  const std::map<std::string, std::vector<int>>& values() const { return values_; }

  std::optional<std::size_t> find(const Config& config) const {
    auto it = index_.find(config.text());
    if (it == index_.end()) return std::nullopt;
    return it->second;
  }
  bool proposed(std::size_t i) const { return proposed_[i]; }
  double cost(std::size_t i) const { return cost_[i]; }
  const Config& config(std::size_t i) const { return candidates_[i]; }

  Config take(std::size_t i) {
    proposed_[i] = true;
    ++taken_;
    return candidates_[i];
  }
  // An unproposed candidate, uniformly: the next of a shuffled order not yet taken.
  std::optional<std::size_t> any() {
    while (cursor_ < order_.size() && proposed_[order_[cursor_]]) ++cursor_;
    if (cursor_ == order_.size()) return std::nullopt;
    return order_[cursor_];
  }
  // An unproposed neighbour of candidate i, chosen at random.
  std::optional<std::size_t> neighbour(std::size_t i) {
    std::vector<std::size_t> open;
    for (const auto& [name, value] : candidates_[i].values) {
      (void)value;
      Config without = candidates_[i];
      without.values.erase(name);
      for (std::size_t j : buckets_.at(name + "|" + without.text()))
        if (!proposed_[j]) open.push_back(j);
    }
    if (open.empty()) return std::nullopt;
    return open[std::uniform_int_distribution<std::size_t>(0, open.size() - 1)(random_)];
  }
  // The cost of a result: its median time, infinite when it failed. Returns the candidate.
  std::optional<std::size_t> record(const Config& config, const cache::Trial& result) {
    auto i = find(config);
    if (!i) return std::nullopt;
    const bool ok = result.status == cache::TrialStatus::ok && result.median_ms > 0;
    cost_[*i] = ok ? result.median_ms : std::numeric_limits<double>::infinity();
    return i;
  }

 private:
  std::vector<Config> candidates_;
  std::vector<bool> proposed_;
  std::vector<double> cost_;
  std::mt19937_64 random_;
  std::vector<std::size_t> order_;
  std::size_t cursor_ = 0, taken_ = 0;
  std::unordered_map<std::string, std::size_t> index_;
  std::unordered_map<std::string, std::vector<std::size_t>> buckets_;
  std::map<std::string, std::vector<int>> values_;
};

// Simulated annealing: walks from config to neighbouring config, always to a faster one and to a
// slower one with probability exp(-(slowdown) / temperature); the temperature falls with every
// result, so the walk settles into the best basin it found. A walk whose neighbours are all
// proposed restarts from the best config seen, then from a random one.
class AnnealingStrategy final : public SearchStrategy {
 public:
  AnnealingStrategy(std::vector<Config> candidates, std::uint64_t seed)
      : landscape_(std::move(candidates), seed) {}

  std::optional<Config> next() override {
    if (landscape_.exhausted()) return std::nullopt;
    std::optional<std::size_t> pick;
    if (observed_ >= kWarmup) {
      if (current_) pick = landscape_.neighbour(*current_);
      if (!pick && best_) pick = landscape_.neighbour(*best_);
    }
    if (!pick) pick = landscape_.any();
    return landscape_.take(*pick);
  }

  bool learns() const override { return true; }
  void observe(const Config& config, const cache::Trial& result) override {
    const auto i = landscape_.record(config, result);
    if (!i) return;
    ++observed_;
    const double cost = landscape_.cost(*i);
    if (std::isinf(cost)) return;
    if (!best_ || cost < landscape_.cost(*best_)) best_ = i;
    if (!current_) {
      current_ = i;
    } else {
      const double slowdown = cost / landscape_.cost(*current_) - 1;
      if (slowdown <= 0 ||
          std::uniform_real_distribution<double>(0, 1)(landscape_.random()) <
              std::exp(-slowdown / temperature_))
        current_ = i;
    }
    temperature_ = std::max(kColdest, temperature_ * kCooling);
  }

 private:
  static constexpr int kWarmup = 8;          // random configs before the walk starts
  static constexpr double kCooling = 0.97;   // per result
  static constexpr double kColdest = 1e-3;
  Landscape landscape_;
  std::optional<std::size_t> current_, best_;
  double temperature_ = 0.1;  // a 10% slower config is accepted with probability 1/e at first
  int observed_ = 0;
};

// A genetic search: children of two of the fastest configs seen (tournament picks from the
// population), each parameter taken from one parent and now and then mutated to another value
// of the space. A child that is no candidate (its parents come from different templates, or it
// breaks a constraint) or was proposed already is drawn again; after a few tries, a neighbour
// of a parent, then a random config.
class GeneticStrategy final : public SearchStrategy {
 public:
  GeneticStrategy(std::vector<Config> candidates, std::uint64_t seed)
      : landscape_(std::move(candidates), seed) {}

  std::optional<Config> next() override {
    if (landscape_.exhausted()) return std::nullopt;
    std::optional<std::size_t> pick;
    if (population_.size() >= kMinParents) {
      for (int attempt = 0; attempt < kAttempts && !pick; ++attempt) {
        const std::size_t mother = tournament(), father = tournament();
        Config child = landscape_.config(mother);
        for (auto& [name, value] : child.values) {
          const auto& from_father = landscape_.config(father).values;
          if (coin(0.5) && from_father.count(name)) value = from_father.at(name);
          if (coin(kMutation)) value = random_value(landscape_.values().at(name));
        }
        auto found = landscape_.find(child);
        if (found && !landscape_.proposed(*found)) pick = found;
      }
      if (!pick) pick = landscape_.neighbour(tournament());
    }
    if (!pick) pick = landscape_.any();
    return landscape_.take(*pick);
  }

  bool learns() const override { return true; }
  void observe(const Config& config, const cache::Trial& result) override {
    const auto i = landscape_.record(config, result);
    if (!i || std::isinf(landscape_.cost(*i))) return;
    population_.push_back(*i);
    std::sort(population_.begin(), population_.end(), [&](std::size_t a, std::size_t b) {
      return landscape_.cost(a) < landscape_.cost(b);
    });
    if (population_.size() > kPopulation) population_.resize(kPopulation);
  }

 private:
  static constexpr std::size_t kPopulation = 16, kMinParents = 4;
  static constexpr int kAttempts = 24;
  static constexpr double kMutation = 0.15;  // per parameter of a child

  bool coin(double probability) {
    return std::uniform_real_distribution<double>(0, 1)(landscape_.random()) < probability;
  }
  int random_value(const std::vector<int>& values) {
    return values[std::uniform_int_distribution<std::size_t>(0, values.size() - 1)(
        landscape_.random())];
  }
  // The faster of two members drawn at random.
  std::size_t tournament() {
    std::uniform_int_distribution<std::size_t> draw(0, population_.size() - 1);
    const std::size_t a = population_[draw(landscape_.random())];
    const std::size_t b = population_[draw(landscape_.random())];
    return landscape_.cost(a) <= landscape_.cost(b) ? a : b;
  }

  Landscape landscape_;
  std::vector<std::size_t> population_;  // fastest first
};

// Model-guided search: predicts a config's log time as the sum of one weight per (parameter,
// value) it has; the weights solve a ridge regression over every result seen and the prior's
// (each problem's results centred on their mean, so a prior teaches the shape of the landscape
// and this problem's results its level), refitted after each result. Proposes the unproposed
// candidate whose prediction, less an optimism bonus for values seen rarely (a value no result
// has shown gets the full bonus), is lowest; one proposal in kExplore is random, so a wrong
// model still meets the rest of the space. A failed config counts as twice the slowest time.
class ModelStrategy final : public SearchStrategy {
 public:
  ModelStrategy(std::vector<Config> candidates, std::uint64_t seed,
                const std::vector<PriorResult>& prior)
      : landscape_(std::move(candidates), seed) {
    for (std::size_t i = 0; i < landscape_.size(); ++i)
      candidate_features_.push_back(features(landscape_.config(i)));
    // At most kPriorRows of the prior, evenly spaced: every fit goes over all of them.
    const std::size_t step = (prior.size() + kPriorRows - 1) / kPriorRows;
    for (std::size_t i = 0; i < prior.size(); i += std::max<std::size_t>(step, 1)) {
      std::vector<std::size_t> row = features(prior[i].config);
      if (!row.empty()) prior_.push_back({std::move(row), prior[i].relative_log_ms});
    }
    fit();
  }

  std::optional<Config> next() override {
    if (landscape_.exhausted()) return std::nullopt;
    ++proposals_;
    const bool guided = !prior_.empty() || observed_.size() >= kWarmup;
    std::optional<std::size_t> pick;
    if (guided && proposals_ % kExplore != 0) {
      double best = std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < candidate_features_.size(); ++i) {
        if (landscape_.proposed(i)) continue;
        double predicted = 0;
        for (std::size_t f : candidate_features_[i])
          predicted += weights_[f] - kOptimism / std::sqrt(1.0 + seen_[f]);
        if (predicted < best) {
          best = predicted;
          pick = i;
        }
      }
    }
    if (!pick) pick = landscape_.any();
    return landscape_.take(*pick);
  }

  bool learns() const override { return true; }
  void observe(const Config& config, const cache::Trial& result) override {
    const auto i = landscape_.record(config, result);
    if (!i) return;
    observed_.push_back(*i);
    fit();
  }

 private:
  static constexpr std::size_t kWarmup = 8;   // random proposals before the model leads
  static constexpr std::size_t kExplore = 8;  // every kExplore-th proposal is random
  static constexpr double kRidge = 0.1;
  static constexpr double kOptimism = 0.03;  // log time: a value never seen may be 3% faster
  static constexpr int kSweeps = 8;             // Gauss-Seidel passes per fit
  static constexpr std::size_t kPriorRows = 4000;

  struct Row {
    std::vector<std::size_t> features;
    double log_ms;
  };

  // The feature indices of a config: one per (parameter, value), per template where the family
  // has several (`variant`: block_n=256 may suit one template and not another); new pairs get
  // new indices.
  std::vector<std::size_t> features(const Config& config) {
    std::vector<std::size_t> row;
    const auto variant = config.values.find("variant");
    const std::string of_template =
        variant == config.values.end() ? "" : "variant=" + std::to_string(variant->second) + ":";
    for (const auto& [name, value] : config.values) {
      const std::string feature = of_template + name + "=" + std::to_string(value);
      auto [it, inserted] = feature_index_.emplace(feature, feature_index_.size());
      row.push_back(it->second);
    }
    return row;
  }

  // Ridge regression by Gauss-Seidel sweeps over the weights (the one-hot features make each
  // weight's update a mean of residuals): cheap for hundreds of features and results.
  void fit() {
    std::vector<Row> rows = prior_;
    double slowest = 0;
    for (std::size_t i : observed_)
      if (!std::isinf(landscape_.cost(i))) slowest = std::max(slowest, landscape_.cost(i));
    double mean = 0;
    std::size_t timed = 0;
    for (std::size_t i : observed_) {
      const double cost = landscape_.cost(i);
      if (std::isinf(cost) && slowest == 0) continue;
      const double log_ms = std::log(std::isinf(cost) ? 2 * slowest : cost);
      rows.push_back({candidate_features_[i], log_ms});
      mean += log_ms;
      ++timed;
    }
    // This problem's results are centred like the prior's, so the prior shapes the weights
    // and this problem's level comes from its own results.
    if (timed > 0)
      for (std::size_t r = prior_.size(); r < rows.size(); ++r) rows[r].log_ms -= mean / timed;
    weights_.assign(feature_index_.size(), 0.0);
    seen_.assign(feature_index_.size(), 0);
    if (rows.empty()) return;
    std::vector<std::vector<std::size_t>> rows_of(weights_.size());
    for (std::size_t r = 0; r < rows.size(); ++r)
      for (std::size_t f : rows[r].features) rows_of[f].push_back(r);
    for (std::size_t f = 0; f < weights_.size(); ++f) seen_[f] = rows_of[f].size();
    std::vector<double> residual(rows.size());
    for (std::size_t r = 0; r < rows.size(); ++r) residual[r] = rows[r].log_ms;
    for (int sweep = 0; sweep < kSweeps; ++sweep)
      for (std::size_t f = 0; f < weights_.size(); ++f) {
        if (rows_of[f].empty()) continue;
        double sum = 0;
        for (std::size_t r : rows_of[f]) sum += residual[r] + weights_[f];
        const double updated = sum / (rows_of[f].size() + kRidge);
        for (std::size_t r : rows_of[f]) residual[r] -= updated - weights_[f];
        weights_[f] = updated;
      }
  }
  Landscape landscape_;
  std::unordered_map<std::string, std::size_t> feature_index_;
  std::vector<std::vector<std::size_t>> candidate_features_;
  std::vector<Row> prior_;
  std::vector<std::size_t> observed_;
  std::vector<double> weights_;
  std::vector<std::size_t> seen_;  // results showing each feature
  std::size_t proposals_ = 0;
};

}  // namespace

std::vector<PriorResult> prior_results(const cache::Database& database, const cache::TrialKey& key) {
  std::vector<PriorResult> prior;
  for (const cache::TrialKey& other : database.trial_keys()) {
    if (other.problem.op != key.problem.op || other.template_hash != key.template_hash ||
        (other.gpu_model == key.gpu_model && other.problem.key() == key.problem.key()))
      continue;
    const std::size_t first = prior.size();
    double mean = 0;
    for (const cache::Trial& trial : database.trials(other))
      if (trial.status == cache::TrialStatus::ok && trial.median_ms > 0) {
        prior.push_back({trial.config, std::log(trial.median_ms)});
        mean += prior.back().relative_log_ms;
      }
    if (prior.size() == first) continue;
    mean /= static_cast<double>(prior.size() - first);
    for (std::size_t i = first; i < prior.size(); ++i) prior[i].relative_log_ms -= mean;
  }
  return prior;
}

void require_strategy_name(const std::string& name) {
  static const std::vector<std::string> names = {"exhaustive", "random", "annealing", "genetic",
                                                 "model"};
  if (std::find(names.begin(), names.end(), name) != names.end()) return;
  std::string known;
  for (const std::string& each : names) known += (known.empty() ? "" : ", ") + each;
  throw InvalidArgument("unknown search strategy " + quote_input(name) + " (expected " + known + ")");
}

namespace {

// Proposes `first` before the strategy's own order, and skips it when the strategy comes to it;
// results reach the strategy either way, so a learning strategy may start from it.
class FirstThen final : public SearchStrategy {
 public:
  FirstThen(Config first, std::unique_ptr<SearchStrategy> then)
      : first_(std::move(first)), then_(std::move(then)) {}
  std::optional<Config> next() override {
    if (!first_proposed_) {
      first_proposed_ = true;
      return first_;
    }
    std::optional<Config> config = then_->next();
    if (config && *config == first_) config = then_->next();
    return config;
  }
  bool learns() const override { return then_->learns(); }
  void observe(const Config& config, const cache::Trial& result) override {
    then_->observe(config, result);
  }

 private:
  Config first_;
  std::unique_ptr<SearchStrategy> then_;
  bool first_proposed_ = false;
};

}  // namespace

std::unique_ptr<SearchStrategy> make_strategy(const std::string& name,
                                              std::vector<Config> candidates, std::uint64_t seed,
                                              std::optional<Config> first,
                                              const std::vector<PriorResult>& prior) {
  if (first && std::find(candidates.begin(), candidates.end(), *first) != candidates.end())
    return std::make_unique<FirstThen>(
        *first, make_strategy(name, std::move(candidates), seed, std::nullopt, prior));
  if (name == "exhaustive") return std::make_unique<OrderedStrategy>(std::move(candidates));
  if (name == "random") {
    std::mt19937_64 generator(seed);
    std::shuffle(candidates.begin(), candidates.end(), generator);
    return std::make_unique<OrderedStrategy>(std::move(candidates));
  }
  if (name == "annealing") return std::make_unique<AnnealingStrategy>(std::move(candidates), seed);
  if (name == "genetic") return std::make_unique<GeneticStrategy>(std::move(candidates), seed);
  if (name == "model") return std::make_unique<ModelStrategy>(std::move(candidates), seed, prior);
  require_strategy_name(name);
  throw Error("search strategy " + name + " has no implementation");
}

}  // namespace tilesmith::tuner
