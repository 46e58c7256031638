#include "nearest_winner.hpp"

#include <cmath>
#include <limits>

namespace tilesmith {

std::optional<cache::Winner> nearest_winner(const std::vector<cache::Winner>& winners,
                                            const Family& family, const Problem& problem,
                                            const DeviceTarget& device,
                                            const std::string& template_hash) {
  std::optional<cache::Winner> nearest;
  double nearest_distance = std::numeric_limits<double>::infinity();
  for (const cache::Winner& winner : winners) {
    const Problem& tuned = winner.problem;
    if (winner.gpu_model != device.model_key() || winner.template_hash != template_hash ||
        tuned.op != problem.op || tuned.dtype != problem.dtype ||
        tuned.out_dtype != problem.out_dtype || tuned.options != problem.options ||
        tuned.shape.size() != problem.shape.size())
      continue;
    double distance = 0;
    for (std::size_t i = 0; i < problem.shape.size(); ++i)
      distance += std::abs(std::log(static_cast<double>(tuned.shape[i]) / problem.shape[i]));
    // Strictly nearer only: among equals the first in the database's order wins, every time.
    if (distance < nearest_distance && !family.reject(winner.config, problem, device)) {
      nearest = winner;
      nearest_distance = distance;
    }
  }
  if (nearest && !family.outranks_default(nearest->config, problem, device)) return std::nullopt;
  return nearest;
}

}  // namespace tilesmith
