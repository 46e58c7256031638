// `tilesmith show`: the winner for one problem and its best trials, so "why this config?" and
// "how close were the others?" have an answer.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cache/database.hpp"
#include "cli/cli_common.hpp"
#include "cli/commands.hpp"
#include "generator/rendered_source.hpp"
#include "templates/registry.hpp"

namespace tilesmith::cli {
namespace {

std::string scientific(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1e", value);
  return text;
}

// The first line of a failure's detail, short enough for a table cell.
std::string brief(const std::string& detail) {
  std::string line = detail.substr(0, detail.find('\n'));
  return line.size() > 72 ? line.substr(0, 69) + "..." : line;
}

// Whether a timed trial is within the winner's timing noise: its median is closer to the
// winner's than half the wider of their p10-p90 ranges, so another run could order the two
// either way and the pick between them is not decided by these timings.
bool within_noise(const cache::Winner& winner, const cache::Trial& trial) {
  if (!(trial.median_ms > 0) || trial.status != cache::TrialStatus::ok) return false;
  const double noise =
      std::max(winner.spread * winner.median_ms, trial.spread * trial.median_ms) / 2;
  return std::abs(trial.median_ms - winner.median_ms) <= noise;
}

void print_trials(const std::vector<cache::Trial>& trials, const cache::Winner& winner) {
  const Problem& problem = winner.problem;
  Table table({{"rank", true},
               {"config"},
               {"status"},
               {"median ms", true},
               {"vs winner", true},
               {"noise"},
               {"spread %", true},
               {"TFLOP/s", true},
               {"GB/s", true},
               {"regs", true},
               {"rel_error", true},
               {"detail"}});
  int rank = 0;
  for (const cache::Trial& trial : trials) {
    bool timed = trial.median_ms > 0;
    bool verified =
        trial.status == cache::TrialStatus::ok || trial.status == cache::TrialStatus::wrong;
    const double versus = (trial.median_ms / winner.median_ms - 1) * 100;
    table.add_row(
        {std::to_string(++rank), trial.config.text(), std::string(cache::status_name(trial.status)),
         timed ? fixed(trial.median_ms, 4) : "-",
         timed ? (versus >= 0 ? "+" : "") + fixed(versus, 1) + "%" : "-",
         within_noise(winner, trial) ? "~" : "", timed ? fixed(trial.spread * 100, 1) : "-",
         timed ? fixed(tflops(problem, trial.median_ms), 1) : "-",
         timed ? fixed(gbps(problem, trial.median_ms), 0) : "-",
         trial.resources.registers >= 0 ? std::to_string(trial.resources.registers) : "-",
         verified ? scientific(trial.rel_error) : "-", brief(trial.detail)});
  }
  table.print(std::cout);
}

void print_winner(cache::Database& database, const cache::Winner& winner, int top) {
  std::cout << winner.problem.key() << " on " << winner.gpu_model << "\n"
            << "  winner    " << winner.config.text() << "\n"
            << "            " << timing_text(winner.problem, winner.median_ms, winner.spread)
            << "\n"
            << "  trials    " << winner.trials_ok << " verified of " << winner.trials_total
            << "; updated " << winner.updated_at << "\n"
            << "  hashes    template " << winner.template_hash << ", source " << winner.source_hash
            << "\n";
  const std::vector<cache::Trial> trials =
      database.top_trials({winner.gpu_model, winner.problem, winner.template_hash}, top);
  // The winner's own trial is within its noise: the others are what the line counts.
  const long close = std::count_if(trials.begin(), trials.end(), [&](const cache::Trial& trial) {
                       return within_noise(winner, trial);
                     }) - 1;
  if (close > 0)
    std::cout << "  noise     " << close << (close == 1 ? " other config is" : " other configs are")
              << " within the winner's timing noise (marked ~): these timings do not order "
                 "them\n";
  std::cout << "\n";
  print_trials(trials, winner);
}

}  // namespace

int run_show(const std::vector<std::string>& args) {
  const CommandHelp help{
      "show", "--op OP --dtype T --shape SHAPE [--gpu MODEL_KEY] [--top N] [--db PATH]",
      "Shows the winner for one problem and its best trials (rank, config, status, time, spread,\n"
      "FLOP rate, registers, error against the reference). The GPU model is --gpu, else the\n"
      "local GPU's, else every GPU model the database has a winner for. Only winners tuned with\n"
      "this build's templates count; older ones are pointed out. Exits 1 when there is none.",
      "  tilesmith show --op matmul --dtype bf16 --shape 4096x4096x4096\n"
      "  tilesmith show --op matmul --dtype bf16 --shape 4096x4096x4096 --top 30\n"};
  ProblemArgs problem_args;
  std::string database_flag, gpu_model;
  int top = 10;
  po::options_description options("options", 100);
  add_problem_options(options, problem_args, /*many_shapes=*/false);
  // clang-format off
  options.add_options()
      ("gpu", po::value(&gpu_model)->value_name("MODEL_KEY"),
       "GPU model (as 'tilesmith devices' prints it); default: the local GPU's")
      ("top", po::value(&top)->default_value(top)->value_name("N"), "how many trials to list");
  // clang-format on
  add_database_option(options, database_flag);
  po::variables_map values;
  if (!parse_arguments(help, options, args, values)) return 0;
  if (top < 1) throw Error("--top must be at least 1");

  Problem problem = make_problem(problem_args, problem_args.shapes.at(0));
  const std::string current = template_hash(find_family(problem.op));
  cache::Database database(existing_database_path(database_flag), cache::Access::read_only);
  print_database_notes(database);

  std::vector<cache::Winner> for_problem;  // every GPU model and template
  for (cache::Winner& winner : database.winners())
    if (winner.problem.key() == problem.key()) for_problem.push_back(std::move(winner));
  auto has_model = [](const std::vector<std::string>& models, const std::string& model) {
    return std::find(models.begin(), models.end(), model) != models.end();
  };

  std::vector<std::string> models, tuned_elsewhere;
  if (gpu_model.empty()) {
    LocalGpu gpu = local_gpu();
    if (gpu.device) gpu_model = gpu.device->model_key();
  }
  for (const cache::Winner& winner : for_problem) {
    bool wanted = gpu_model.empty() || winner.gpu_model == gpu_model;
    if (!wanted && winner.template_hash != current) continue;  // no use as a hint
    auto& list = wanted ? models : tuned_elsewhere;
    if (!has_model(list, winner.gpu_model)) list.push_back(winner.gpu_model);
  }

  int shown = 0, only_older = 0;
  for (const std::string& model : models) {
    auto current_winner = std::find_if(for_problem.begin(), for_problem.end(), [&](const auto& w) {
      return w.gpu_model == model && w.template_hash == current;
    });
    if (current_winner != for_problem.end()) {
      if (shown++) std::cout << "\n";
      print_winner(database, *current_winner, top);
    } else {
      ++only_older;
      std::cout << "note: " << model << " has winners for " << problem.key()
                << " only from older templates; the templates changed since (now "
                << current.substr(0, 12) << "...), so they are never used: retune\n";
    }
  }
  if (shown > 0) return 0;

  std::string message = "no winner for " + problem.key() +
                        (gpu_model.empty() ? "" : " on " + gpu_model) + " in " +
                        database.path().string() + " tuned with the current templates";
  if (only_older == 0 && !tuned_elsewhere.empty()) {
    message += " (tuned on other GPUs:";
    for (const std::string& model : tuned_elsewhere) message += " '" + model + "'";
    message += "; choose one with --gpu)";
  } else {
    message += " (run 'tilesmith tune' for it)";
  }
  throw Error(message);
}

}  // namespace tilesmith::cli
