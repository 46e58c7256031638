#pragma once

#include <memory>

#include "templates/family.hpp"

namespace tilesmith {
std::unique_ptr<Family> make_matmul_family();
}
