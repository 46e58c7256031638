// `tilesmith list`: every winner in the database, one row each.
#include <iostream>

#include "cache/database.hpp"
#include "cli/cli_common.hpp"
#include "cli/commands.hpp"

namespace tilesmith::cli {

int run_list(const std::vector<std::string>& args) {
  const CommandHelp help{
      "list", "[--gpu MODEL_KEY] [--db PATH]",
      "Lists the winners in the database: GPU model, problem, config, median time, FLOP rate,\n"
      "bandwidth (of the fewest bytes the problem must move: each input read once, each output\n"
      "written once), verified trials out of all trials, and when the winner was last updated.\n"
      "'template' says whether a winner was tuned with this build's template ('current') or an\n"
      "older one ('old': never used by the runtime; retune to replace it).",
      "  tilesmith list\n"
      "  tilesmith list --gpu 'NVIDIA H100 80GB HBM3 | sm_90 | 132 SMs'\n"};
  const std::optional<ListingArgs> listing = parse_listing_arguments(help, args);
  if (!listing) return 0;

  cache::Database database(listing->database, cache::Access::read_only);
  print_database_notes(database);
  std::vector<cache::Winner> winners = database.winners(listing->gpu_model);
  if (winners.empty()) {
    print_nothing_listed("no tuned results", *listing);
    return 0;
  }

  Table table({{"GPU model"},
               {"problem"},
               {"config"},
               {"median ms", true},
               {"TFLOP/s", true},
               {"GB/s", true},
               {"trials ok/all", true},
               {"template"},
               {"updated"}});
  for (const cache::Winner& winner : winners) {
    table.add_row({winner.gpu_model, winner.problem.key(), winner.config.text(),
                   fixed(winner.median_ms, 4), fixed(tflops(winner.problem, winner.median_ms), 1),
                   fixed(gbps(winner.problem, winner.median_ms), 0),
                   std::to_string(winner.trials_ok) + "/" + std::to_string(winner.trials_total),
                   template_age(winner.problem.op, winner.template_hash), winner.updated_at});
  }
  table.print(std::cout);
  return 0;
}

}  // namespace tilesmith::cli
