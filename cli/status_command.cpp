// `tilesmith status`: winner by winner, whether it still vouches for what this machine would run:
// this build's templates, this NVRTC, this driver. A winner is judged alone; one stale entry
// never discredits the others.
#include <iostream>

#include "cache/database.hpp"
#include "cli/cli_common.hpp"
#include "cli/commands.hpp"

namespace tilesmith::cli {

int run_status(const std::vector<std::string>& args) {
  const CommandHelp help{
      "status", "[--gpu MODEL_KEY] [--db PATH]",
      "Says, winner by winner, whether it still vouches for what this machine would run: tuned\n"
      "with this build's templates, its kernel compiled by this NVRTC and timed under this\n"
      "driver (compared only where there is a GPU). Each stale one is listed with its reason;\n"
      "every other winner stays valid. A winner of older templates that a current one replaced\n"
      "is not listed. 'tilesmith tune --stale' tunes every stale winner's shape again: with this\n"
      "build's templates, or, for another NVRTC or driver, trying its configs again; the winner\n"
      "then comes from the trials timed with this toolchain.",
      "  tilesmith status\n"
      "  tilesmith status --gpu 'NVIDIA H100 80GB HBM3 | sm_90 | 132 SMs'\n"
      "  tilesmith tune --stale --budget 60s\n"};
  const std::optional<ListingArgs> listing = parse_listing_arguments(help, args);
  if (!listing) return 0;

  cache::Database database(listing->database, cache::Access::read_only);
  print_database_notes(database);
  const std::vector<cache::Winner> winners = database.winners(listing->gpu_model);
  if (winners.empty()) {
    print_nothing_listed("no tuned results", *listing);
    return 0;
  }
  const cache::Toolchain here = local_toolchain();
  std::cout << "this machine: NVRTC " << here.nvrtc_version << ", "
            << (here.driver_version == "none" ? "no GPU (drivers not compared)"
                                              : "driver " + here.driver_version)
            << "\n\n";
  Table table({{"GPU model"}, {"problem"}, {"config"}, {"NVRTC"}, {"driver"}, {"state"}});
  int listed = 0, stale = 0;
  for (const JudgedWinner& judged : judge_winners(winners)) {
    const cache::Winner& winner = judged.winner;
    ++listed;
    if (!judged.stale_reason.empty()) ++stale;
    table.add_row({winner.gpu_model, winner.problem.key(), winner.config.text(),
                   winner.toolchain.nvrtc_version, winner.toolchain.driver_version,
                   judged.stale_reason.empty() ? "current" : "stale: " + judged.stale_reason});
  }
  table.print(std::cout);
  std::cout << "\n" << listed - stale << " of " << listed << " winners current, " << stale
            << " stale\n";
  return 0;
}

}  // namespace tilesmith::cli
