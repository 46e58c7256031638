#pragma once

#include <memory>
#include <optional>
#include <string>

#include "templates/family.hpp"

namespace tilesmith {
std::unique_ptr<Family> make_matmul_family();

// Where the untuned default's rules picked a config the constraints reject on a device that
// runs the sm_90a template, the config and why (default_config then returns the plain base
// tile); nothing where they did not. For tests: a rule that needs the fallback is a defect.
std::optional<std::string> matmul_default_fell_back(const Problem& problem,
                                                    const DeviceTarget& device);
}  // namespace tilesmith
