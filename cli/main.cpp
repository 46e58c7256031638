// `tilesmith`: runs sweeps and shows and exports what they learned. Dispatches to one subcommand;
// every failure ends as one line "tilesmith: error: ..." on stderr and a non-zero exit.
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "cli/cli_common.hpp"
#include "cli/commands.hpp"
#include "cli/output_file.hpp"
#include "tuner/sweep.hpp"

namespace {

using tilesmith::cli::po::error;

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const std::vector<std::string>&);
};

constexpr Command kCommands[] = {
    {"devices", "list the GPUs visible, their limits and the model key results are stored under",
     tilesmith::cli::run_devices},
    {"tune", "tune a problem on the local GPU (without one: render and compile the space)",
     tilesmith::cli::run_tune},
    {"list", "list the tuned winners in the database", tilesmith::cli::run_list},
    {"misses", "list the shapes the runtime found untuned ('tune --misses' tunes them)",
     tilesmith::cli::run_misses},
    {"show", "show the winner and the best trials for one problem", tilesmith::cli::run_show},
    {"export", "export the winners as JSON or CSV", tilesmith::cli::run_export},
    {"merge", "fold databases (shards of a sweep, other hosts' results) into one",
     tilesmith::cli::run_merge},
    {"status", "say which winners still vouch for what this machine would run, and why not",
     tilesmith::cli::run_status},
    {"verify", "check every winner again on this GPU: still correct, no slower than recorded",
     tilesmith::cli::run_verify},
    {"plot", "draw a sweep's landscape or the winners' roofline as SVG", tilesmith::cli::run_plot},
    {"source", "print the CUDA source or PTX of one config (no GPU needed)",
     tilesmith::cli::run_source},
};

void print_usage(std::ostream& out) {
  out << "usage: tilesmith <command> [options]\n\n"
         "tilesmith generates CUDA kernels from parametric templates, tunes them on the local GPU\n"
         "and keeps the winner per GPU model and problem in a SQLite database.\n\ncommands:\n";
  for (const Command& command : kCommands)
    out << "  " << command.name << std::string(10 - std::string(command.name).size(), ' ')
        << command.summary << "\n";
  out << "\n'tilesmith <command> --help' describes a command's options.\n";
}

const Command* find_command(const std::string& name) {
  for (const Command& command : kCommands)
    if (name == command.name) return &command;
  return nullptr;
}

std::string command_names() {
  std::string names;
  for (const Command& command : kCommands)
    names += (names.empty() ? "" : ", ") + std::string(command.name);
  return names;
}

int fail(const std::string& message, int status) {
  std::cerr << "tilesmith: error: " << message << std::endl;
  return status;
}

// Runs the command line; what it printed to stdout is checked by main().
int run(int argc, char** argv, std::string& command_name) {
  // The tuner starts its compile and GPU workers by re-executing this binary.
  if (tilesmith::tuner::run_worker_if_requested(argc, argv)) return 0;

  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    print_usage(std::cerr);
    return 2;
  }
  auto is_help = [](const std::string& arg) { return arg == "--help" || arg == "-h"; };
  if (args[0] == "help" && args.size() > 2)
    return fail("'help' takes one command name (see 'tilesmith --help')", 2);
  if (is_help(args[0]) || (args[0] == "help" && (args.size() == 1 || is_help(args[1])))) {
    print_usage(std::cout);
    return 0;
  }
  if (args[0] == "help") args = {args[1], "--help"};  // "tilesmith help tune"
  const Command* command = find_command(args[0]);
  if (!command)
    return fail("unknown command " + tilesmith::quote_input(args[0]) + " (commands: " + command_names() +
                    "; see 'tilesmith --help')",
                2);
  command_name = command->name;
  return command->run(std::vector<std::string>(args.begin() + 1, args.end()));
}

}  // namespace

int main(int argc, char** argv) {
  std::string command_name;
  tilesmith::cli::CheckedStandardOutput standard_output;
  try {
    const int status = run(argc, argv, command_name);
    // An export to a full disk or a closed pipe must not end in success.
    standard_output.finish();
    return status;
  } catch (const error& e) {  // bad command-line arguments
    return fail(command_name + ": " + e.what() + " (see 'tilesmith " + command_name + " --help')",
                2);
  } catch (const std::exception& e) {
    // tilesmith::Error (its message names the stage and context) and the standard library's
    // (files, memory): both end the same way.
    return fail((command_name.empty() ? "" : command_name + ": ") + e.what(), 1);
  }
}
