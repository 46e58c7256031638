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
  // The next config to try, or nothing when the strategy has nothing more to propose.
  virtual std::optional<Config> next() = 0;
  virtual void observe(const Config& config, const cache::Trial& result) {
    (void)config;
    (void)result;
  }
};

// "exhaustive": every candidate in space order. "random": every candidate in a seeded random
// order (with a budget, a uniform sample). Throws Error for an unknown name.
std::unique_ptr<SearchStrategy> make_strategy(const std::string& name,
                                              std::vector<Config> candidates, std::uint64_t seed);

}  // namespace tilesmith::tuner
