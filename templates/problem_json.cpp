#include "templates/problem_json.hpp"

namespace tilesmith {

void to_json(nlohmann::json& json, const Problem& problem) {
  json = {{"op", problem.op},
          {"dtype", dtype_name(problem.dtype)},
          {"out_dtype", dtype_name(problem.out_dtype)},
          {"shape", problem.shape},
          {"options", problem.options}};
}

void from_json(const nlohmann::json& json, Problem& problem) {
  try {
    problem.op = json.at("op").get<std::string>();
    problem.dtype = parse_dtype(json.at("dtype").get<std::string>());
    problem.out_dtype = parse_dtype(json.at("out_dtype").get<std::string>());
    problem.shape = json.at("shape").get<std::vector<std::int64_t>>();
    problem.options = json.value("options", ProblemOptions());
  } catch (const nlohmann::json::exception& error) {
    throw Error("a problem in JSON is malformed: " + std::string(error.what()));
  }
}

}  // namespace tilesmith
