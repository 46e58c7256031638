// `tilesmith verify`: every winner of the local GPU's model checked again on this GPU: correct on
// fresh random inputs, and no slower than its sweep recorded beyond its spread. Exit 1 when one
// failed, so a deployment script can refuse a machine whose driver or clocks changed the picture.
#include <chrono>
#include <iostream>

#include "cache/database.hpp"
#include "cli/cli_common.hpp"
#include "cli/commands.hpp"
#include "tuner/winner_check.hpp"

namespace tilesmith::cli {

int run_verify(const std::vector<std::string>& args) {
  const CommandHelp help{
      "verify", "[--op OP] [--tolerance F] [--device N] [--seed N] [--db PATH]",
      "Checks every winner of the local GPU's model again on this GPU: its kernel (the\n"
      "database's cubin for this NVRTC, else compiled) is verified against the reference on\n"
      "fresh random inputs and timed again (L2 flushed, to its median's 1%). A winner passes\n"
      "when it is correct and its median is no more than its recorded median x (1 + the larger\n"
      "of its recorded spread and --tolerance). Winners of older templates are listed, not\n"
      "checked (the runtime does not use them). The database is only read. Exit status: 0 when\n"
      "every checked winner passed, 1 when one did not (wrong, faulted, hung, slower, no longer\n"
      "accepted or compiled), 2 on bad arguments.",
      "  tilesmith verify\n"
      "  tilesmith verify --op matmul --tolerance 0.1\n"};
  tuner::WinnerCheckOptions check;
  std::string database_flag, op;
  po::options_description options("options", 100);
  // clang-format off
  options.add_options()
      ("op", po::value(&op)->value_name("OP"), "only this op's winners")
      ("tolerance", po::value(&check.tolerance)->default_value(check.tolerance, "0.05")
           ->value_name("F"), "slower than recorded by more than this fraction (or the recorded "
                              "spread, if larger) fails")
      ("device", po::value(&check.device_ordinal)->default_value(0)->value_name("N"),
       "GPU ordinal")
      ("seed", po::value(&check.seed)->value_name("N"),
       "the inputs' random draw (default: from the clock, fresh each run)")
      ("timeout", po::value(&check.candidate_timeout_s)->default_value(check.candidate_timeout_s)
           ->value_name("S"), "watchdog for one winner's GPU work, in seconds");
  // clang-format on
  add_database_option(options, database_flag);
  po::variables_map values;
  if (!parse_arguments(help, options, args, values)) return 0;
  if (!values.count("seed"))
    check.seed = static_cast<std::uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
  if (check.tolerance < 0) throw InvalidArgument("--tolerance must not be negative");

  const LocalGpu gpu = local_gpu(check.device_ordinal);
  if (!gpu.device) throw Error("needs a GPU: " + gpu.why_not);
  cache::Database database(existing_database_path(database_flag), cache::Access::read_only);
  print_database_notes(database);
  std::vector<cache::Winner> winners;
  for (cache::Winner& winner : database.winners(gpu.device->model_key()))
    if (op.empty() || winner.problem.op == op) winners.push_back(std::move(winner));
  if (winners.empty()) {
    std::cout << "no winners" << (op.empty() ? "" : " of " + op) << " for "
              << gpu.device->model_key() << " in " << database.path().string() << "\n";
    return 0;
  }
  std::cout << "verifying " << winners.size() << " winners on " << gpu.device->model_key()
            << " (inputs drawn with seed " << check.seed << ")\n\n";
  Table table({{"problem"}, {"config"}, {"recorded ms", true}, {"now ms", true},
               {"allowed ms", true}, {"rel_error", true}, {"verdict"}});
  int failed = 0, checked = 0;
  for (const tuner::WinnerCheck& result : tuner::check_winners(database, winners, check)) {
    if (!result.passed) ++failed;
    if (result.verdict != "older templates") ++checked;
    std::string verdict = result.verdict;
    if (!result.detail.empty()) verdict += ": " + result.detail.substr(0, result.detail.find('\n'));
    table.add_row({result.winner.problem.key(), result.winner.config.text(),
                   fixed(result.winner.median_ms, 4),
                   result.median_ms > 0 ? fixed(result.median_ms, 4) : "-",
                   result.allowed_ms > 0 ? fixed(result.allowed_ms, 4) : "-",
                   result.median_ms > 0 ? fixed(result.rel_error * 1e3, 3) + "e-3" : "-", verdict});
  }
  table.print(std::cout);
  std::cout << "\n" << checked - failed << " of " << checked << " winners passed";
  if (failed) std::cout << "; " << failed << " failed";
  std::cout << "\n";
  return failed ? 1 : 0;
}

}  // namespace tilesmith::cli
