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
      "verified trials out of all trials, and when the winner was last updated. 'template' says\n"
      "whether a winner was tuned with this build's template ('current') or an older one ('old':\n"
      "never used by the runtime; retune to replace it).",
      "  tilesmith list\n"
      "  tilesmith list --gpu 'NVIDIA H100 80GB HBM3 | sm_90 | 132 SMs'\n"};
  std::string database_flag, gpu_model;
  po::options_description options("options", 100);
  options.add_options()("gpu", po::value(&gpu_model)->value_name("MODEL_KEY"),
                        "only this GPU model (as 'tilesmith devices' prints it)");
  add_database_option(options, database_flag);
  po::variables_map values;
  if (!parse_arguments(help, options, args, values)) return 0;

  cache::Database database(existing_database_path(database_flag));
  std::vector<cache::Winner> winners =
      database.winners(gpu_model.empty() ? std::nullopt : std::optional(gpu_model));
  if (winners.empty()) {
    std::cout << "no tuned results" << (gpu_model.empty() ? "" : " for " + gpu_model) << " in "
              << database.path().string() << "\n";
    return 0;
  }

  Table table({{"GPU model"},
               {"problem"},
               {"config"},
               {"median ms", true},
               {"TFLOP/s", true},
               {"trials ok/all", true},
               {"template"},
               {"updated"}});
  for (const cache::Winner& winner : winners) {
    std::optional<std::string> current = current_template_hash(winner.problem.op);
    table.add_row({winner.gpu_model, winner.problem.key(), winner.config.text(),
                   fixed(winner.median_ms, 4), fixed(tflops(winner.problem, winner.median_ms), 1),
                   std::to_string(winner.trials_ok) + "/" + std::to_string(winner.trials_total),
                   !current                           ? "unknown op"
                   : *current == winner.template_hash ? "current"
                                                      : "old",
                   winner.updated_at});
  }
  table.print(std::cout);
  return 0;
}

}  // namespace tilesmith::cli
