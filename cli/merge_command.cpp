// `tilesmith merge`: folds databases (shards of one sweep run on several hosts, a colleague's
// results) into one, keeping every trial and re-deciding the winners from all of them.
#include <filesystem>
#include <iostream>

#include "cache/database.hpp"
#include "cli/cli_common.hpp"
#include "cli/commands.hpp"

namespace tilesmith::cli {

int run_merge(const std::vector<std::string>& args) {
  const CommandHelp help{
      "merge", "SOURCE.db [SOURCE.db ...] --into TARGET.db",
      "Folds each SOURCE database into TARGET (created when missing): GPUs, every trial with\n"
      "its creation time, misses and cubins; then re-decides the winner of every key a source\n"
      "brought from all the trials TARGET now holds. A trial TARGET already has is not added\n"
      "again, so merging twice changes nothing. Each source is read only and merged in one\n"
      "transaction: a failure leaves TARGET as it was before that source.",
      "  tilesmith merge shard-0.db shard-1.db shard-2.db --into sweep.db\n"};
  std::vector<std::string> sources;
  std::string into;
  po::options_description options("options", 100);
  // clang-format off
  options.add_options()
      ("into", po::value(&into)->required()->value_name("TARGET.db"),
       "the database to merge into")
      ("source", po::value(&sources)->composing()->value_name("SOURCE.db"),
       "a database to merge (also given as a plain argument; repeatable)");
  // clang-format on
  po::variables_map values;
  if (!parse_arguments(help, options, args, values, "source")) return 0;
  if (sources.empty()) throw InvalidArgument("give at least one SOURCE database to merge");
  if (into.empty()) throw InvalidArgument("--into needs a file name");

  cache::Database target(into);
  for (const std::string& path : sources) {
    if (!std::filesystem::exists(path))
      throw InvalidArgument("no database at " + quote_input(path));
    cache::Database source(path, cache::Access::read_only);
    print_database_notes(source);
    const cache::MergeCounts counts = target.merge_from(source);
    std::cout << "merged " << path << ": " << counts.trials_added << " trials added ("
              << counts.trials_present << " already there), " << counts.winners
              << " winners re-decided, " << counts.misses << " misses, " << counts.cubins_added
              << " cubins added, " << counts.gpus << " new GPU models\n";
  }
  return 0;
}

}  // namespace tilesmith::cli
