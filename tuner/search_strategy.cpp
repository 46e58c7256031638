#include "tuner/search_strategy.hpp"

#include <algorithm>
#include <random>

namespace tilesmith::tuner {
namespace {

// Proposes a fixed list in order; the strategies differ only in how they order it.
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

}  // namespace

std::unique_ptr<SearchStrategy> make_strategy(const std::string& name,
                                              std::vector<Config> candidates, std::uint64_t seed) {
  if (name == "exhaustive") return std::make_unique<OrderedStrategy>(std::move(candidates));
  if (name == "random") {
    std::mt19937_64 generator(seed);
    std::shuffle(candidates.begin(), candidates.end(), generator);
    return std::make_unique<OrderedStrategy>(std::move(candidates));
  }
  throw Error("unknown search strategy '" + name + "' (expected exhaustive or random)");
}

}  // namespace tilesmith::tuner
