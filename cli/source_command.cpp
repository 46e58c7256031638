// `tilesmith source`: the exact source (or PTX) of one config, so a config that failed in the
// tuner can be reproduced and read outside it. Needs no GPU.
#include <algorithm>
#include <iostream>

#include "cli/cli_common.hpp"
#include "cli/commands.hpp"
#include "generator/compiled_kernel.hpp"
#include "generator/rendered_source.hpp"
#include "templates/registry.hpp"

namespace tilesmith::cli {
namespace {

// The family's default config for this problem and device, with `overrides` ("block_m=64,...")
// merged over it, checked against the family's constraints. Where the overrides pick another
// variant (variant=0), the base is the first valid config of that variant instead, so the
// parameters that variant needs come with it. `target` names the device in messages.
Config chosen_config(const Family& family, const Problem& problem, const DeviceTarget& device,
                     const std::string& target, const std::string& overrides) {
  const Config asked = Config::parse(overrides);
  const std::vector<ParamSpec> space = family.space();
  std::string known;
  for (const ParamSpec& param : space) known += (known.empty() ? "" : ", ") + param.name;
  for (const auto& [name, value] : asked.values)
    if (std::none_of(space.begin(), space.end(),
                     [&](const ParamSpec& param) { return param.name == name; }))
      throw InvalidArgument("--config: " + family.name() + " has no parameter " +
                            quote_input(name) + " (parameters: " + known + ")");
  // A base fits when it has every parameter asked for and the same variant, if one is asked.
  auto fits = [&](const Config& base) {
    return std::all_of(asked.values.begin(), asked.values.end(), [&](const auto& item) {
      const auto it = base.values.find(item.first);
      return it != base.values.end() && (item.first != "variant" || it->second == item.second);
    });
  };
  Config config = family.default_config(problem, device);
  if (!fits(config))
    for (const Config& candidate : family.enumerate())
      if (fits(candidate) && !family.reject(candidate, problem, device)) {
        config = candidate;
        break;
      }
  for (const auto& [name, value] : asked.values) config.values[name] = value;
  if (auto reason = family.reject(config, problem, device))
    throw Error("config " + config.text() + " cannot run " + problem.key() + " on " + target +
                ": " + *reason);
  return config;
}

void print_file(const std::string& name, const std::string& text) {
  std::cout << "// ==== file: " << name << " ====\n" << text;
  if (!text.empty() && text.back() != '\n') std::cout << '\n';
}

}  // namespace

int run_source(const std::vector<std::string>& args) {
  const CommandHelp help{
      "source",
      "--op OP --dtype T --shape SHAPE [--config k=v,...] [--arch ARCH] [--emit cuda|ptx]",
      "Prints the CUDA source tilesmith compiles for one config (the translation unit, then each\n"
      "embedded header it includes, each after a '// ==== file: NAME ====' line), or its PTX.\n"
      "The config is the family's default for this problem and device, with --config merged\n"
      "over it. The device is the local GPU; with --arch naming another architecture, or without\n"
      "a GPU, that architecture's typical limits (default sm_90a). Needs no GPU.",
      "  tilesmith source --op matmul --dtype bf16 --shape 4096x4096x4096\n"
      "  tilesmith source --op matmul --dtype f16 --shape 1000x1000x1000 --config "
      "block_m=64,stages=3 \\\n"
      "                   --arch sm_80 --emit ptx\n"};
  ProblemArgs problem_args;
  std::string config_text, arch, emit = "cuda";
  po::options_description options("options", 100);
  add_problem_options(options, problem_args, /*many_shapes=*/false);
  // clang-format off
  options.add_options()
      ("config", po::value(&config_text)->value_name("k=v,..."),
       "parameters to set over the default config, e.g. block_m=64,stages=3")
      ("arch", po::value(&arch)->value_name("ARCH"),
       "target architecture: sm_80, sm_90a, ... (default: the local GPU's, else sm_90a)")
      ("emit", po::value(&emit)->default_value(emit)->value_name("cuda|ptx"), "what to print");
  // clang-format on
  po::variables_map values;
  if (!parse_arguments(help, options, args, values)) return 0;
  if (emit != "cuda" && emit != "ptx")
    throw InvalidArgument("unknown --emit " + quote_input(emit) + " (expected cuda or ptx)");

  Problem problem = make_problem(problem_args, problem_args.shapes.at(0));
  const Family& family = find_family(problem.op);
  LocalGpu gpu = local_gpu();
  if (arch.empty()) arch = gpu.device ? gpu.device->arch() : "sm_90a";
  bool on_local_gpu = gpu.device && gpu.device->arch() == arch;
  DeviceTarget device = on_local_gpu ? *gpu.device : DeviceTarget::assumed_for_arch(arch);
  std::string target =
      on_local_gpu ? device.name + " (" + arch + ")" : "typical " + arch + " limits";
  RenderedSource source =
      render(family, chosen_config(family, problem, device, target, config_text), problem);

  if (emit == "ptx") {
    std::cout << compile_to_ptx(source, arch);
    return 0;
  }
  std::cout << "// tilesmith source: " << problem.key() << " for " << arch << ", " << target
            << ", source hash " << source.hash << "\n"
            << "// NVRTC compiles the first file with the headers below on its include path and\n"
            << "// instantiates the kernels through the name expressions in its comments\n";
  print_file(source.main_name, source.text);
  for (const auto& [name, text] : source.headers) print_file(name, text);
  return 0;
}

}  // namespace tilesmith::cli
