// `tilesmith misses`: the shapes the runtime looked up and found untuned, most missed first, so
// that `tilesmith tune --misses` (or a sweep by hand) can tune exactly those.
#include <iostream>

#include "cache/database.hpp"
#include "cli/cli_common.hpp"
#include "cli/commands.hpp"

namespace tilesmith::cli {

int run_misses(const std::vector<std::string>& args) {
  const CommandHelp help{
      "misses", "[--gpu MODEL_KEY] [--db PATH]",
      "Lists the shapes the runtime found no winner for (it used the nearest tuned shape's winner\n"
      "or the default config instead): GPU model, problem, template ('current' or 'old', as in\n"
      "'list'), how many runtimes missed it, and when it was last missed. Most missed first.\n"
      "'tilesmith tune --misses' tunes the current ones of the local GPU's model; a miss is\n"
      "cleared when its shape gets a winner.",
      "  tilesmith misses\n"
      "  tilesmith misses --gpu 'NVIDIA H100 80GB HBM3 | sm_90 | 132 SMs'\n"};
  const std::optional<ListingArgs> listing = parse_listing_arguments(help, args);
  if (!listing) return 0;

  cache::Database database(listing->database, cache::Access::read_only);
  print_database_notes(database);
  const std::vector<cache::Miss> misses = database.misses(listing->gpu_model);
  if (misses.empty()) {
    print_nothing_listed("no misses", *listing);
    return 0;
  }

  Table table({{"GPU model"}, {"problem"}, {"template"}, {"count", true}, {"last seen"}});
  for (const cache::Miss& miss : misses)
    table.add_row({miss.gpu_model, miss.problem.key(),
                   template_age(miss.problem.op, miss.template_hash), std::to_string(miss.count),
                   miss.last_seen});
  table.print(std::cout);
  return 0;
}

}  // namespace tilesmith::cli
