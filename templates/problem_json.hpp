// The one JSON form of a problem, for everything that carries problems as JSON (the GPU worker's
// messages, export): {"op", "dtype", "out_dtype", "shape", "options"}. nlohmann finds these by
// argument-dependent lookup: json(problem), json.get<Problem>().
#pragma once

#include <nlohmann/json.hpp>

#include "templates/problem.hpp"

namespace tilesmith {

void to_json(nlohmann::json& json, const Problem& problem);
// Throws Error naming the field for a missing or malformed one ("options" may be absent).
void from_json(const nlohmann::json& json, Problem& problem);

}  // namespace tilesmith
