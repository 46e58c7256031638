// What every family shares unless it says otherwise.
#include "templates/family.hpp"

#include <algorithm>

namespace tilesmith {

namespace {

// Each parameter's values that `only` leaves (all, or the one it names); nothing where `only`
// names a parameter the space lacks.
std::optional<std::vector<std::vector<int>>> choices_of(const std::vector<ParamSpec>& space,
                                                        const Config& only) {
  for (const auto& [name, value] : only.values)
    if (name != "variant" && std::none_of(space.begin(), space.end(),
                                          [&](const ParamSpec& p) { return p.name == name; }))
      return std::nullopt;
  std::vector<std::vector<int>> choices;
  for (const ParamSpec& param : space) {
    const auto wanted = only.values.find(param.name);
    std::vector<int> values;
    for (int value : param.values)
      if (wanted == only.values.end() || wanted->second == value) values.push_back(value);
    choices.push_back(std::move(values));
  }
  return choices;
}

}  // namespace

std::vector<Config> enumerate_space(const std::vector<ParamSpec>& space, const Config& only,
                                    const Admits& admits) {
  const auto choices = choices_of(space, only);
  if (!choices || std::any_of(choices->begin(), choices->end(),
                              [](const std::vector<int>& values) { return values.empty(); }))
    return {};
  // An odometer over the choices, the last parameter turning fastest, on plain values; a
  // point admitted is copied out of `listed`, whose slots are set only then.
  std::vector<int> values(space.size());
  for (std::size_t i = 0; i < space.size(); ++i) values[i] = (*choices)[i][0];
  Config listed;
  std::vector<int*> slots;
  for (const ParamSpec& param : space) slots.push_back(&listed.values[param.name]);
  std::vector<std::size_t> at(space.size(), 0);
  std::vector<Config> configs;
  for (;;) {
    if (!admits || admits(values)) {
      for (std::size_t i = 0; i < space.size(); ++i) *slots[i] = values[i];
      configs.push_back(listed);
    }
    std::size_t i = space.size();
    for (;;) {
      if (i == 0) return configs;
      --i;
      const std::vector<int>& choice = (*choices)[i];
      at[i] = at[i] + 1 == choice.size() ? 0 : at[i] + 1;
      values[i] = choice[at[i]];
      if (at[i] != 0) break;
    }
  }
}

std::size_t space_size(const std::vector<ParamSpec>& space, const Config& only) {
  const auto choices = choices_of(space, only);
  if (!choices) return 0;
  std::size_t size = 1;
  for (const std::vector<int>& values : *choices) size *= values.size();
  return size;
}

std::optional<std::string> check_parameters(const std::vector<ParamSpec>& space, const Config& config) {
  for (const ParamSpec& param : space)
    if (!config.values.count(param.name)) return "missing parameter " + param.name;
  if (config.values.size() != space.size()) return "unknown parameter in " + config.text();
  return std::nullopt;
}

std::vector<ParamSpec> VariantSpaces::merged() const {
  std::map<std::string, std::vector<int>> merged;
  for (const std::vector<ParamSpec>& space : spaces)
    for (const ParamSpec& param : space)
      for (int value : param.values)
        if (std::find(merged[param.name].begin(), merged[param.name].end(), value) ==
            merged[param.name].end())
          merged[param.name].push_back(value);
  ParamSpec variants{"variant", {}};
  for (std::size_t v = 0; v < spaces.size(); ++v) variants.values.push_back(static_cast<int>(v));
  std::vector<ParamSpec> params = {variants};
  for (auto& [name, values] : merged) {
    std::sort(values.begin(), values.end());
    params.push_back({name, values});
  }
  return params;
}

std::vector<Config> VariantSpaces::enumerate(
    const Config& only,
    const std::function<bool(int variant, std::span<const int> values)>& admits) const {
  std::vector<Config> configs;
  const auto variant = only.values.find("variant");
  for (std::size_t v = 0; v < spaces.size(); ++v) {
    if (variant != only.values.end() && variant->second != static_cast<int>(v)) continue;
    Admits admitted;
    if (admits)
      admitted = [&](std::span<const int> values) { return admits(static_cast<int>(v), values); };
    for (Config& config : enumerate_space(spaces[v], only, admitted)) {
      config.values.emplace("variant", static_cast<int>(v));
      configs.push_back(std::move(config));
    }
  }
  return configs;
}

std::size_t VariantSpaces::size(const Config& only) const {
  std::size_t size = 0;
  const auto variant = only.values.find("variant");
  for (std::size_t v = 0; v < spaces.size(); ++v)
    if (variant == only.values.end() || variant->second == static_cast<int>(v))
      size += space_size(spaces[v], only);
  return size;
}

std::optional<std::string> VariantSpaces::check(const Config& config) const {
  auto variant = config.values.find("variant");
  if (variant == config.values.end()) return "missing parameter variant";
  if (variant->second < 0 || variant->second >= static_cast<int>(spaces.size()))
    return "variant " + std::to_string(variant->second) + " is not one of 0.." +
           std::to_string(spaces.size() - 1);
  const std::vector<ParamSpec>& params = spaces[static_cast<std::size_t>(variant->second)];
  for (const ParamSpec& param : params)
    if (!config.values.count(param.name))
      return "missing parameter " + param.name + " of variant " + std::to_string(variant->second);
  for (const auto& [name, value] : config.values)
    if (name != "variant" && std::none_of(params.begin(), params.end(),
                                          [&](const ParamSpec& p) { return p.name == name; }))
      return "parameter " + name + " does not apply to variant " + std::to_string(variant->second);
  return std::nullopt;
}

std::string describe_options(const OptionTable& table) {
  std::string text;
  for (const auto& [name, values] : table) {
    text += (text.empty() ? "" : ", ") + name + "=";
    for (std::size_t i = 1; i < values.size(); ++i) text += (i > 1 ? "|" : "") + values[i];
  }
  return text;
}

void validate_options(const std::string& op, const OptionTable& table, const Problem& problem) {
  for (const auto& [name, value] : problem.options) {
    auto known = table.find(name);
    if (known == table.end())
      throw InvalidArgument(op + ": unknown option " + quote_input(name) + " (" +
                            (table.empty() ? "it takes none" : describe_options(table)) + ")");
    const std::vector<std::string>& values = known->second;
    if (value == values.front())
      throw InvalidArgument(op + ": " + name + "=" + value +
                            " is the default: leave the option out (one key per problem)");
    if (std::find(values.begin(), values.end(), value) == values.end())
      throw InvalidArgument(op + ": option " + name + "=" + quote_input(value) +
                            " is not one of " + describe_options({{name, values}}));
  }
}

std::vector<Config> Family::enumerate(const Config& only) const { return enumerate_space(space(), only); }
std::size_t Family::space_size(const Config& only) const { return tilesmith::space_size(space(), only); }

Problem Family::problem_for_call(Problem problem, const CallScalars&) const { return problem; }

bool Family::outranks_default(const Config&, const Problem&, const DeviceTarget&) const {
  return true;
}

std::size_t Family::workspace_bytes(const Config&, const Problem&, const DeviceTarget&) const {
  return 0;
}

void Family::fill_input(const Problem& problem, std::size_t tensor, std::span<const std::uint64_t>,
                        std::span<std::byte>) const {
  throw Error(name() + " " + problem.key() + ": tensor " + std::to_string(tensor) +
              " is not filled by the family");
}

double Family::tolerance(const Problem&, const TensorSpec& output) const {
  // Norm-wise relative error with fp32 accumulation: the output's rounding dominates
  // (bf16 keeps 8 bits, fp16 11), so the bound follows the output type.
  switch (output.dtype) {
    case DType::bf16: return 1e-2;
    case DType::f16: return 2e-3;
    case DType::f32: return 5e-4;  // summation order only; tensor-core adds truncate
  }
  return 0;
}

}  // namespace tilesmith
