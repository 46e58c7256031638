// `tilesmith devices`: the GPUs this machine shows the CUDA driver, with the limits templates are
// pruned against and the model key tuned results are stored under.
#include <iostream>

#include "cli/cli_common.hpp"
#include "cli/commands.hpp"
#include "driver/cuda_driver.hpp"
#include "generator/compiled_kernel.hpp"

namespace tilesmith::cli {

int run_devices(const std::vector<std::string>& args) {
  const CommandHelp help{
      "devices", "[--count]",
      "Lists the GPUs the CUDA driver sees: name, compute capability, SMs, the shared memory a\n"
      "block may opt in to, L2, the architecture kernels are compiled for, and the model key\n"
      "tuned results are stored under. Without a driver or GPU it says why and exits 0.",
      "  tilesmith devices\n"
      "  tilesmith devices --count     # prints 0 on a machine without a GPU\n"};
  po::options_description options("options", 100);
  options.add_options()("count", po::bool_switch(),
                        "print only the number of GPUs (0 without any)");
  po::variables_map values;
  if (!parse_arguments(help, options, args, values)) return 0;

  std::string why_not;
  bool available = driver::gpu_available(&why_not);
  int count = available ? driver::device_count() : 0;
  if (values["count"].as<bool>()) {
    std::cout << count << "\n";
    return 0;
  }
  if (!available) {
    std::cout
        << why_not << "\n(NVRTC " << nvrtc_version()
        << " is available: 'tilesmith tune' and 'tilesmith source' still render and compile)\n";
    return 0;
  }

  std::cout << "CUDA driver " << driver::driver_version() << ", NVRTC " << nvrtc_version() << ", "
            << count << (count == 1 ? " GPU" : " GPUs") << "\n\n";
  Table table({{"#", true},
               {"name"},
               {"cc"},
               {"SMs", true},
               {"smem opt-in", true},
               {"L2", true},
               {"arch"},
               {"model key"}});
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    DeviceTarget device = driver::describe_device(ordinal);
    table.add_row({std::to_string(ordinal), device.name,
                   std::to_string(device.cc_major) + "." + std::to_string(device.cc_minor),
                   std::to_string(device.sm_count),
                   std::to_string(device.max_smem_per_block_optin / 1024) + " KiB",
                   fixed(static_cast<double>(device.l2_bytes) / (1 << 20), 0) + " MiB",
                   device.arch(), device.model_key()});
  }
  table.print(std::cout);
  return 0;
}

}  // namespace tilesmith::cli
