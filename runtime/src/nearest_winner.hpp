// The runtime's third lookup: a shape nobody tuned borrows the config of the nearest tuned one.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cache/database.hpp"
#include "templates/family.hpp"

namespace tilesmith {

// Among `winners`, the one for the same GPU model, op, dtypes and template hash whose shape is
// nearest to `problem`'s (sum over dimensions of |log ratio|, so 2x larger and 2x smaller are
// equally far), and whose config the family accepts for `problem` on `device`. None when no
// winner qualifies, or where the family ranks its default config above the nearest's
// (Family::outranks_default).
std::optional<cache::Winner> nearest_winner(const std::vector<cache::Winner>& winners,
                                            const Family& family, const Problem& problem,
                                            const DeviceTarget& device,
                                            const std::string& template_hash);

}  // namespace tilesmith
