// The families tilesmith knows. Built-in families are listed in registry.cpp, one line each.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "templates/family.hpp"

namespace tilesmith {

const Family& find_family(const std::string& name);  // throws Error listing the known names
std::vector<const Family*> all_families();

// Adds a family at run time (tests register probe families that fault or hang). Not thread-safe:
// call before any sweep starts.
void register_family(std::unique_ptr<Family> family);

}  // namespace tilesmith
