// `tilesmith status`: winner by winner, whether it still vouches for what this machine would run:
// this build's templates, this NVRTC, this driver. A winner is judged alone; one stale entry
// never discredits the others.
#include <iostream>
#include <set>

#include "cache/database.hpp"
#include "cli/cli_common.hpp"
#include "cli/commands.hpp"
#include "driver/cuda_driver.hpp"
#include "generator/compiled_kernel.hpp"

namespace tilesmith::cli {
namespace {

// Why `winner` no longer vouches for what the runtime runs here, or "" when it does. Older
// templates: the runtime never finds it. Another NVRTC: the runtime compiles its config again,
// into a kernel that was never timed. Another driver: it was timed under other code. `driver`
// is "none" without a GPU, and is then not compared.
std::string stale_reason(const cache::Winner& winner, const std::string& nvrtc,
                         const std::string& driver) {
  if (current_template_hash(winner.problem.op) != winner.template_hash)
    return "older templates: the runtime no longer uses it";
  if (winner.toolchain.nvrtc_version != nvrtc)
    return "compiled by NVRTC " + winner.toolchain.nvrtc_version + " (this is " + nvrtc +
           "): the runtime compiles its config again, untimed";
  if (driver != "none" && winner.toolchain.driver_version != driver)
    return "timed under driver " + winner.toolchain.driver_version + " (this is " + driver + ")";
  return "";
}

}  // namespace

int run_status(const std::vector<std::string>& args) {
  const CommandHelp help{
      "status", "[--gpu MODEL_KEY] [--db PATH]",
      "Says, winner by winner, whether it still vouches for what this machine would run: tuned\n"
      "with this build's templates, its kernel compiled by this NVRTC and timed under this\n"
      "driver (compared only where there is a GPU). Each stale one is listed with its reason;\n"
      "every other winner stays valid. A winner of older templates that a current one replaced\n"
      "is not listed. Tuning a shape with this build replaces a winner of older templates; a\n"
      "winner of another NVRTC or driver is still picked among all its key's trials, so a new\n"
      "sweep replaces it only with a faster trial.",
      "  tilesmith status\n"
      "  tilesmith status --gpu 'NVIDIA H100 80GB HBM3 | sm_90 | 132 SMs'\n"};
  const std::optional<ListingArgs> listing = parse_listing_arguments(help, args);
  if (!listing) return 0;

  cache::Database database(listing->database, cache::Access::read_only);
  print_database_notes(database);
  const std::vector<cache::Winner> winners = database.winners(listing->gpu_model);
  if (winners.empty()) {
    print_nothing_listed("no tuned results", *listing);
    return 0;
  }
  std::string why_no_gpu;
  const std::string driver =
      driver::gpu_available(&why_no_gpu) ? driver::driver_version() : std::string("none");
  const std::string nvrtc = nvrtc_version();
  std::cout << "this machine: NVRTC " << nvrtc << ", "
            << (driver == "none" ? "no GPU (drivers not compared)" : "driver " + driver) << "\n\n";

  // (GPU model, problem) pairs that have a winner of the current templates.
  std::set<std::pair<std::string, std::string>> current;
  for (const cache::Winner& winner : winners)
    if (current_template_hash(winner.problem.op) == winner.template_hash)
      current.insert({winner.gpu_model, winner.problem.key()});
  Table table({{"GPU model"}, {"problem"}, {"config"}, {"NVRTC"}, {"driver"}, {"state"}});
  int listed = 0, stale = 0;
  for (const cache::Winner& winner : winners) {
    const std::string reason = stale_reason(winner, nvrtc, driver);
    const bool replaced = current_template_hash(winner.problem.op) != winner.template_hash &&
                          current.count({winner.gpu_model, winner.problem.key()});
    if (replaced) continue;
    ++listed;
    if (!reason.empty()) ++stale;
    table.add_row({winner.gpu_model, winner.problem.key(), winner.config.text(),
                   winner.toolchain.nvrtc_version, winner.toolchain.driver_version,
                   reason.empty() ? "current" : "stale: " + reason});
  }
  table.print(std::cout);
  std::cout << "\n" << listed - stale << " of " << listed << " winners current, " << stale
            << " stale\n";
  return 0;
}

}  // namespace tilesmith::cli
