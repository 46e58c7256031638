// `tilesmith tune`: one sweep per shape on the local GPU; without a GPU the pruned space is
// rendered and compiled, which checks the templates but times nothing.
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "cli/cli_common.hpp"
#include "cli/commands.hpp"
#include "cli/gpu_fanout.hpp"
#include "driver/cuda_driver.hpp"
#include "generator/rendered_source.hpp"
#include "templates/registry.hpp"
#include "tuner/compile_pool.hpp"
#include "tuner/interrupt.hpp"
#include "tuner/search_strategy.hpp"
#include "tuner/sweep.hpp"

namespace tilesmith::cli {
namespace {

constexpr int kMaxCompileJobs = 256;

// "50": at most 50 candidates; "30s": at most 30 seconds.
void apply_budget(const std::string& text, tuner::SweepOptions& options) {
  if (text.empty()) return;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  bool in_seconds = text.back() == 's';
  if (in_seconds) --last;
  if (in_seconds) {
    double seconds = 0;
    auto [end, ec] = std::from_chars(first, last, seconds);
    if (ec == std::errc() && end == last && first != last && seconds > 0) {
      options.max_seconds = seconds;
      return;
    }
  } else {
    int candidates = 0;
    auto [end, ec] = std::from_chars(first, last, candidates);
    if (ec == std::errc() && end == last && candidates > 0) {
      options.max_candidates = candidates;
      return;
    }
  }
  throw InvalidArgument("bad --budget " + quote_input(text) +
                        ": expected a number of candidates (e.g. 50) or of seconds (e.g. 30s)");
}

// Parsed here rather than by Boost, which wraps "-1" into 2^64-1 without a word.
std::uint64_t parse_seed(const std::string& text) {
  std::uint64_t seed = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), seed);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw InvalidArgument("bad --seed " + quote_input(text) + ": expected an integer in 0 .. 2^64-1");
  return seed;
}

// "i/N": this process's shard of the space, 0 <= i < N (a Slurm array task id or a Kubernetes
// job completion index, with N tasks).
void apply_shard(const std::string& text, tuner::SweepOptions& sweep) {
  const auto slash = text.find('/');
  int index = -1, count = 0;
  const char* end = text.data() + text.size();
  const bool parsed =
      slash != std::string::npos &&
      std::from_chars(text.data(), text.data() + slash, index).ptr == text.data() + slash &&
      std::from_chars(text.data() + slash + 1, end, count).ptr == end && slash > 0 &&
      slash + 1 < text.size();
  if (!parsed || count < 1 || index < 0 || index >= count)
    throw InvalidArgument("bad --shard " + quote_input(text) +
                          ": expected i/N with 0 <= i < N, e.g. 0/4 (i: the task's index)");
  sweep.shard_index = index;
  sweep.shard_count = count;
}

// One progress line per ~10 candidates, or a single line with a bar redrawn in place on a
// terminal: done/total, ok and failed, an estimate of the time left, the best so far.
class ProgressPrinter {
 public:
  // Without a GPU a finished candidate is a compiled one: nothing is timed. `max_seconds`: the
  // sweep's time budget, which bounds the estimate.
  ProgressPrinter(const Problem& problem, bool timed, std::optional<double> max_seconds)
      : problem_(problem),
        done_word_(timed ? "ok" : "compiled"),
        terminal_(isatty(STDOUT_FILENO) == 1),
        max_seconds_(max_seconds),
        start_(std::chrono::steady_clock::now()) {}

  void update(const tuner::Progress& progress) {
    bool last = progress.done >= progress.total;
    if (!terminal_ && progress.done < printed_done_ + 10 && !last) return;
    printed_done_ = progress.done;
    std::string line = format(progress);
    if (terminal_) {
      winsize size{};
      if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 1 &&
          line.size() >= size.ws_col)
        line.resize(size.ws_col - 1);  // a wrapped line cannot be redrawn with \r
      std::cout << '\r' << line << "\x1b[K" << std::flush;
      line_open_ = true;
    } else {
      std::cout << line << '\n' << std::flush;
    }
  }

  // Ends the line a terminal was redrawing.
  void finish() {
    if (line_open_) std::cout << '\n';
    line_open_ = false;
  }

 private:
  std::string format(const tuner::Progress& progress) const {
    std::string line;
    if (terminal_) {
      constexpr int kWidth = 20;
      const int filled = progress.total > 0 ? kWidth * progress.done / progress.total : kWidth;
      line = "|" + std::string(static_cast<std::size_t>(filled), '#') +
             std::string(static_cast<std::size_t>(kWidth - filled), '.') + "| ";
    }
    char counter[64];
    std::snprintf(counter, sizeof counter, "[%*d/%d] %s %d  failed %d",
                  static_cast<int>(std::to_string(progress.total).size()), progress.done,
                  progress.total, done_word_, progress.ok, progress.failed);
    line += counter;
    if (progress.done > 0 && progress.done < progress.total) {
      // The pace so far over what is left, and never past the time budget.
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      double left = elapsed / progress.done * (progress.total - progress.done);
      if (max_seconds_) left = std::min(left, std::max(0.0, *max_seconds_ - elapsed));
      line += "  eta " + duration_text(left);
    }
    if (progress.best_ms > 0)
      line += "  best " + fixed(progress.best_ms, 3) + " ms (" +
              fixed(tflops(problem_, progress.best_ms), 1) + " TFLOP/s) " + progress.best_config;
    return line;
  }

  // "45s", "3m05s", "2h10m".
  static std::string duration_text(double seconds) {
    const long total = std::lround(seconds);
    char text[32];
    if (total < 60)
      std::snprintf(text, sizeof text, "%lds", total);
    else if (total < 3600)
      std::snprintf(text, sizeof text, "%ldm%02lds", total / 60, total % 60);
    else
      std::snprintf(text, sizeof text, "%ldh%02ldm", total / 3600, total % 3600 / 60);
    return text;
  }

  const Problem& problem_;
  const char* const done_word_;
  const bool terminal_;
  const std::optional<double> max_seconds_;
  const std::chrono::steady_clock::time_point start_;
  int printed_done_ = 0;
  bool line_open_ = false;
};

void print_space(const tuner::SweepReport& report) {
  std::cout << "  space     " << report.space_size << " configs, ";
  if (report.other_shards > 0) std::cout << report.other_shards << " left to other shards, ";
  if (report.outside_only > 0) std::cout << report.outside_only << " outside --only, ";
  std::cout << report.pruned << " pruned by constraints";
  if (report.skipped_done > 0)
    std::cout << ", " << report.skipped_done << " already in the database";
  if (report.abandoned > 0)
    std::cout << ", " << report.abandoned << " abandoned (crashed an earlier sweep; not retried)";
  if (report.taken > 0)
    std::cout << ", " << report.taken << " tried by another sweep of this problem meanwhile";
  std::cout << "\n";
  const tuner::ResourceSummary& resources = report.resources;
  std::cout << "  compiled  " << resources.compiled << " kernels";
  if (resources.shared > 0)
    std::cout << " (and " << resources.shared << " configs took one compiled for a config with"
              << " the same kernels)";
  std::cout << ", " << resources.reused << " reused from the database, " << report.compile_failed
            << " compile failures; registers ";
  if (resources.compiled + resources.shared + resources.reused > 0)
    std::cout << resources.min_registers << ".." << resources.max_registers;
  else
    std::cout << "-";
  std::cout << ", " << resources.spilling.size() << " spilling; NVRTC "
            << fixed(resources.compile_seconds_total, 1) << " s in "
            << fixed(resources.wall_seconds, 1) << " s of wall time\n";
  if (report.timed && resources.trials_timed > 0) {
    // Where the wall time went: the GPU worker's phases, and the waits for a compile.
    const double wall = resources.wall_seconds;
    const double gpu = resources.gpu_load_seconds + resources.gpu_verify_seconds +
                       resources.gpu_timing_seconds;
    std::cout << "  time      " << fixed(wall, 1) << " s: GPU worker " << fixed(gpu, 1)
              << " s (modules " << fixed(resources.gpu_load_seconds, 1) << ", inputs and verification "
              << fixed(resources.gpu_verify_seconds, 1) << ", timing "
              << fixed(resources.gpu_timing_seconds, 1) << " of which the timed calls "
              << fixed(resources.gpu_kernel_seconds, 1) << "), waiting for compiles "
              << fixed(resources.compile_wait_seconds, 1) << " s, the database "
              << fixed(resources.database_seconds, 1) << " s; "
              << fixed(resources.trials_timed / std::max(wall, 1e-9), 1) << " trials/s, "
              << fixed(resources.compiled / std::max(wall, 1e-9), 1) << " compiles/s\n";
  }
  if (!report.first_compile_error.empty())
    std::cout << "  first compile failure  " << report.first_compile_error << "\n";
  // Spills point at a constraint that is too loose: name them so they can be pruned.
  constexpr std::size_t kNamed = 5;
  for (std::size_t i = 0; i < std::min(resources.spilling.size(), kNamed); ++i)
    std::cout << "  spills    " << resources.spilling[i] << "\n";
  if (resources.spilling.size() > kNamed)
    std::cout << "  spills    ... and " << resources.spilling.size() - kNamed << " more\n";
}

// Counts of every trial the database holds for this key, this sweep's and earlier ones'.
void print_trial_counts(cache::Database& database, const cache::TrialKey& key) {
  std::map<cache::TrialStatus, int> by_status;
  for (const cache::Trial& trial : database.trials(key)) ++by_status[trial.status];
  std::string counts;
  for (const auto& [status, count] : by_status)
    counts += (counts.empty() ? "" : ", ") + std::string(cache::status_name(status)) + " " +
              std::to_string(count);
  std::cout << "  trials    " << (counts.empty() ? "none" : counts)
            << " (all in the database for this key)\n";
}

void print_winner(const cache::Winner& winner, const Problem& problem, const DeviceTarget& device) {
  std::cout << "  winner    " << winner.config.text() << "\n            "
            << timing_text(problem, winner.median_ms, winner.spread);
  std::optional<double> rate = tflops(problem, winner.median_ms);
  std::optional<double> peak = tuner::tensor_peak_tflops(device);
  if (peak && rate)
    std::cout << ", " << fixed(100 * *rate / *peak, 1) << "% of the " << fixed(*peak, 0)
              << " TFLOP/s dense tensor peak";
  else
    std::cout << " (the tensor peak of this GPU is unknown)";
  std::cout << "\n";
}

// The problems `tune --misses` adds to `problems`: the misses of the local GPU's model, or without
// a GPU of every model (compiled for one --arch; nothing can be timed), with this build's
// templates, each shape once. Misses under older templates are left alone: no sweep of this build
// can clear them, and a runtime of this build records its own.
void add_missed_problems(const cache::Database& database, const LocalGpu& gpu,
                         const std::string& offline_arch, std::vector<Problem>& problems) {
  const std::optional<std::string> model =
      gpu.device ? std::optional(gpu.device->model_key()) : std::nullopt;
  std::set<std::string> seen;  // a shape missed on several GPU models needs one sweep
  int missed = 0, given = 0, old = 0;
  for (const cache::Miss& miss : database.misses(model)) {
    if (current_template_hash(miss.problem.op) != miss.template_hash) {
      ++old;
      continue;
    }
    if (!seen.insert(miss.problem.key()).second) continue;
    ++missed;
    const bool from_shapes =
        std::any_of(problems.begin(), problems.end(),
                    [&](const Problem& problem) { return problem.key() == miss.problem.key(); });
    if (from_shapes)
      ++given;
    else
      problems.push_back(miss.problem);
  }
  const std::string where = model ? "on " + *model : "on any GPU model";
  std::string notes;
  if (given > 0) notes += "; " + std::to_string(given) + " of them also given with --shape";
  if (old > 0) notes += "; " + std::to_string(old) + " under older templates left alone";
  if (missed == 0) {
    std::cout << "misses: no shapes missed " << where << " with the current templates to tune"
              << notes << "\n";
    return;
  }
  std::cout << "misses: " << missed << (missed == 1 ? " shape" : " shapes") << " missed " << where
            << " with the current templates" << notes << "\n";
  if (!model)
    std::cout << "  no GPU: compiling them for " << offline_arch
              << "; timing needs a GPU, so they stay misses until tuned on one\n";
}

// The problems `tune --stale` adds to `problems`: the shapes whose winner no longer vouches for
// what this machine would run (judge_winners, as `tilesmith status` lists them), on the local
// GPU's model, or without a GPU on every model (compiled for --arch; nothing can be timed). A
// sweep of one tries its configs again with this toolchain (configs tried with another do not
// count as done) and with this build's templates, and the winner then comes from those trials.
void add_stale_problems(const cache::Database& database, const LocalGpu& gpu,
                        std::vector<Problem>& problems) {
  const std::optional<std::string> model =
      gpu.device ? std::optional(gpu.device->model_key()) : std::nullopt;
  std::set<std::string> seen;
  for (const Problem& problem : problems) seen.insert(problem.key());
  int stale = 0;
  for (const JudgedWinner& judged : judge_winners(database.winners(model))) {
    if (judged.stale_reason.empty()) continue;
    ++stale;
    const Problem& problem = judged.winner.problem;
    if (!current_template_hash(problem.op)) continue;  // an op this build does not have
    std::cout << "stale: " << problem.key() << " on " << judged.winner.gpu_model << ": "
              << judged.stale_reason << "\n";
    if (seen.insert(problem.key()).second) problems.push_back(problem);
  }
  if (stale == 0)
    std::cout << "stale: no stale winners " << (model ? "on " + *model : "on any GPU model") << "\n";
}

// --gpus: a child sweep per GPU, split as split_over_gpus says (cli/gpu_fanout.hpp), with the
// rest of the command line as written; afterwards the winners of the --shape problems, decided
// over every GPU's trials.
int tune_on_gpus(const std::vector<int>& gpus, const std::vector<std::string>& args,
                 po::options_description& options, const tuner::SweepOptions& sweep,
                 const std::string& budget, const std::vector<Problem>& problems,
                 const std::string& database_flag) {
  const std::set<std::string> own = {"gpus", "device", "shard", "jobs", "budget"};
  std::vector<std::string> passed;
  for (const po::option& option : po::command_line_parser(args).options(options).run().options)
    if (!own.count(option.string_key))
      passed.insert(passed.end(), option.original_tokens.begin(), option.original_tokens.end());

  std::vector<GpuOnHost> hosted;
  std::map<std::string, DeviceTarget> devices;
  for (int ordinal : gpus) {
    DeviceTarget device = driver::describe_device(ordinal);
    hosted.push_back({ordinal, device.model_key()});
    devices.emplace(device.model_key(), device);
  }
  SharedSweep shared;
  shared.shard_index = sweep.shard_index;
  shared.shard_count = sweep.shard_count;
  shared.compile_jobs =
      sweep.compile_processes > 0 ? sweep.compile_processes : tuner::default_compile_processes();
  shared.max_candidates = sweep.max_candidates;
  if (sweep.max_seconds) shared.seconds_budget = budget;
  const std::vector<GpuChild> children = split_over_gpus(hosted, passed, shared);
  for (const GpuChild& child : children)
    std::cout << "gpu " << child.ordinal << ": " << child.model << ", "
              << (child.shards > 1 ? "shard " + std::to_string(child.shard) + "/" +
                                         std::to_string(child.shards) + " of the space"
                                   : std::string("the whole space"))
              << ", " << child.jobs << " compile jobs\n";
  std::cout << std::flush;
  const int status = run_children(children);
  if (status != 0 || problems.empty()) return status;

  cache::Database database(database_path(database_flag));
  std::cout << "\nwinners over the trials of every GPU:\n";
  for (const Problem& problem : problems)
    for (const auto& [model, device] : devices) {
      std::cout << problem.key() << " on " << model << "\n";
      const Family& family = find_family(problem.op);
      if (std::optional<cache::Winner> winner =
              database.winner({model, problem, template_hash(family)}))
        print_winner(*winner, problem, device);
      else
        std::cout << "  winner    none: no config passed verification\n";
    }
  return 0;
}

}  // namespace

int run_tune(const std::vector<std::string>& args) {
  const CommandHelp help{
      "tune", "[--op OP --dtype T --shape SHAPE [--shape ...]] [--misses] [--stale] [options]",
      "Tunes each shape on the local GPU: enumerates the family's configs, prunes them by its\n"
      "constraints, compiles the rest with NVRTC in a pool of processes, verifies every candidate\n"
      "against the reference, times it, and stores every trial and the winner in the database.\n"
      "Ctrl-C or SIGTERM stop it cleanly (the candidate on the GPU is tried again next time), and\n"
      "the same command resumes where it stopped; several sweeps of one problem may run at once\n"
      "and share the work. Without a GPU it renders and compiles the pruned space for --arch and\n"
      "says that timing needs a GPU.\n"
      "--misses adds every shape the runtime missed on the local GPU's model with the current\n"
      "templates (see 'tilesmith misses'), each swept like a --shape; a winner clears its miss.\n"
      "Without a GPU it takes the misses of every GPU model and compiles them for --arch.\n"
      "--stale adds every shape whose winner is stale here (see 'tilesmith status'). A config\n"
      "counts as done only when tried with this NVRTC and driver, and a winner comes from the\n"
      "trials timed with the toolchain of the key's latest one.",
      "  tilesmith tune --op matmul --dtype bf16 --shape 4096x4096x4096\n"
      "  tilesmith tune --op matmul --dtype f16 --out-dtype f32 --shape 1024x1024x1024 \\\n"
      "                 --shape 16x4096x4096 --strategy random --budget 60s\n"
      "  tilesmith tune --misses --budget 120s\n"};
  tuner::SweepOptions sweep;
  ProblemArgs problem_args;
  std::string database_flag, budget, seed, shard, only, gpu_list;
  po::options_description options("options", 100);
  add_problem_options(options, problem_args, /*many_shapes=*/true, /*required=*/false);
  bool misses = false, stale = false;
  // clang-format off
  options.add_options()
      ("misses", po::bool_switch(&misses),
       "also tune every shape the runtime missed (see 'tilesmith misses'); --shape is then optional")
      ("stale", po::bool_switch(&stale),
       "also tune every shape whose winner is stale here (see 'tilesmith status'): its configs "
       "are tried again with this NVRTC and driver; --shape is then optional")
      ("strategy", po::value(&sweep.strategy)->default_value(sweep.strategy)->value_name("NAME"),
       "exhaustive, random, annealing, genetic or model (the last three learn from the results; "
       "model also from the database's trials of other shapes of the op)")
      ("budget", po::value(&budget)->value_name("N|Ns"),
       "stop after N candidates, or after N seconds (e.g. 30s); default: no limit")
      ("seed", po::value(&seed)->default_value(std::to_string(sweep.seed))->value_name("N"),
       "random order and input data (0 .. 2^64-1)")
      ("only", po::value(&only)->value_name("k=v,..."),
       "tune only the configs with these parameter values, e.g. variant=2 (one template)")
      ("shard", po::value(&shard)->value_name("i/N"),
       "tune only shard i of N (0 <= i < N) of each space, for a sweep split over hosts; "
       "'tilesmith merge' combines the shards' databases")
      ("jobs", po::value(&sweep.compile_processes)->value_name("N"),
       "compile processes, 1 to 256 (default: one per core, at most 16)")
      ("timeout", po::value(&sweep.candidate_timeout_s)->default_value(sweep.candidate_timeout_s)
                      ->value_name("S"),
       "watchdog for one candidate's GPU work, in seconds")
      ("device", po::value(&sweep.device_ordinal)->default_value(sweep.device_ordinal)
                     ->value_name("N"),
       "GPU ordinal to tune on")
      ("gpus", po::value(&gpu_list)->value_name("all|N,..."),
       "tune on several GPUs at once, one sweep process each: the GPUs of one model split its "
       "space, each model is tuned for itself, all into one database")
      ("arch", po::value(&sweep.offline_arch)->default_value(sweep.offline_arch)->value_name("ARCH"),
       "architecture to compile for when there is no GPU (sm_80, sm_90a, ...)")
      ("retune", po::bool_switch(&sweep.retune), "try configs again even if the database has them")
      ("precision", po::value(&sweep.timing_precision)->default_value(sweep.timing_precision, "0.01")
                        ->value_name("P"),
       "time a candidate until its median is known to within P (relative, 95%), or until it "
       "cannot beat the best; 0: a fixed ~150 ms of timed calls per candidate");
  // clang-format on
  add_database_option(options, database_flag);
  po::variables_map values;
  if (!parse_arguments(help, options, args, values)) return 0;

  if (problem_args.shapes.empty()) {
    if (!misses && !stale) throw po::error("give --shape SHAPE (repeatable), --misses or --stale");
    if (values.count("op") || values.count("dtype") || values.count("out-dtype"))
      throw po::error(
          "--op, --dtype and --out-dtype describe the --shape problems; each miss brings its own");
  } else {
    for (const char* name : {"op", "dtype"})
      if (!values.count(name)) throw po::required_option(std::string("--") + name);
  }
  tuner::require_strategy_name(sweep.strategy);
  apply_budget(budget, sweep);
  sweep.seed = parse_seed(seed);
  if (!shard.empty() || values.count("shard")) apply_shard(shard, sweep);
  if (values.count("only")) sweep.only = Config::parse(only);
  // Each job is a thread and a compile process: tens of thousands exhaust the process table
  // before they help (NVRTC is CPU-bound: more jobs than cores only queue).
  if (sweep.compile_processes < 0 || sweep.compile_processes > kMaxCompileJobs)
    throw Error("--jobs must be 0 (one per core, at most 16) to " +
                std::to_string(kMaxCompileJobs) + " (given " +
                std::to_string(sweep.compile_processes) + ")");
  if (sweep.device_ordinal < 0)
    throw Error("--device must be a GPU ordinal, 0 or more (given " +
                std::to_string(sweep.device_ordinal) + ")");
  // The watchdog becomes a poll() timeout in milliseconds: NaN, infinity or days would switch
  // it off.
  if (!(sweep.candidate_timeout_s > 0 && sweep.candidate_timeout_s <= 3600))
    throw Error("--timeout must be a number of seconds in (0, 3600]");
  if (!(sweep.timing_precision >= 0 && sweep.timing_precision < 1))
    throw Error("--precision must be a fraction in [0, 1), e.g. 0.01 (given " +
                std::to_string(sweep.timing_precision) + ")");
  DeviceTarget::assumed_for_arch(sweep.offline_arch);  // rejects a malformed --arch now

  // Every shape is checked before the first sweep starts: a typo should not cost a sweep.
  std::vector<Problem> problems;
  for (const std::string& shape : problem_args.shapes)
    problems.push_back(make_problem(problem_args, shape));

  if (values.count("gpus")) {
    if (!values["device"].defaulted())
      throw InvalidArgument("--gpus and --device both choose GPUs: give one of them");
    std::string no_gpu;
    if (driver::gpu_available(&no_gpu))
      return tune_on_gpus(parse_gpu_list(gpu_list, driver::device_count()), args, options, sweep,
                          budget, problems, database_flag);
    if (gpu_list != "all") parse_gpu_list(gpu_list, std::numeric_limits<int>::max());  // its form
    std::cerr << "tilesmith: note: --gpus: no GPU here (" << no_gpu
              << "); one process compiles the "
              << "space for " << sweep.offline_arch << "\n";
  }
  LocalGpu gpu = local_gpu(sweep.device_ordinal);
  if (gpu.device && !values["arch"].defaulted() && sweep.offline_arch != gpu.device->arch())
    std::cerr << "tilesmith: note: --arch is used only without a GPU; tuning for the local "
              << gpu.device->arch() << "\n";
  // Misses alone only read the file first: a mistyped --db must not pass as "no misses".
  cache::Database database(problems.empty() ? existing_database_path(database_flag)
                                            : database_path(database_flag));
  std::cout << "database: " << database.path().string() << "\n";
  if (misses) add_missed_problems(database, gpu, sweep.offline_arch, problems);
  if (stale) add_stale_problems(database, gpu, problems);
  if ((misses || stale) && problems.empty()) return 0;

  // Ctrl-C or SIGTERM stop the sweep between two database writes (tuner/interrupt.hpp).
  tuner::InterruptScope interrupts;
  int without_winner = 0;
  for (const Problem& problem : problems) {
    const Family& family = find_family(problem.op);
    std::cout << "\n"
              << problem.key()
              << (gpu.device ? " on " + gpu.device->model_key()
                             : ", no GPU: compiling for " + sweep.offline_arch)
              << "\n";
    ProgressPrinter printer(problem, gpu.device.has_value(), sweep.max_seconds);
    tuner::SweepReport report =
        tuner::run_sweep(family, problem, database, sweep,
                         [&printer](const tuner::Progress& progress) { printer.update(progress); });
    printer.finish();

    print_space(report);
    if (report.interrupted_by) {
      if (report.timed) print_trial_counts(database, {report.gpu_model, problem, template_hash(family)});
      std::cout << "  stopped   " << tuner::Interrupted(report.interrupted_by).what()
                << ": what was done is kept; the same command resumes the sweep\n"
                << std::flush;
      return 128 + report.interrupted_by;
    }
    if (report.progress.done == 0 && report.progress.total > 0 && report.taken == 0 &&
        (sweep.max_seconds || sweep.max_candidates))
      throw Error("the --budget of " + budget + " ran out before the first of " +
                  std::to_string(report.progress.total) + " candidates of " + problem.key() +
                  " was tried; give a larger one");
    if (!report.timed) {
      const int in_hand =
          report.resources.compiled + report.resources.shared + report.resources.reused;
      std::cout << "  timing needs a GPU: " << report.no_gpu_reason << "; rendered and compiled "
                << in_hand << " configs for " << sweep.offline_arch << "\n";
      if (in_hand == 0 && report.compile_failed > 0)
        throw Error("none of the " + std::to_string(report.compile_failed) + " configs of " +
                    problem.key() + " compiled for " + sweep.offline_arch +
                    " (the first failure is shown above)");
      continue;
    }
    print_trial_counts(database, {report.gpu_model, problem, template_hash(family)});
    for (const tuner::Finalist& f : report.finalists)
      std::cout << "  finalist  " << fixed(f.before_ms, 4) << " ms, together " << fixed(f.together_ms, 4)
                << " (" << f.rounds << " rounds), recorded " << fixed(f.recorded_ms, 4) << "  "
                << f.config << "\n";
    if (!report.finalists_error.empty())
      std::cout << "  finalists not re-timed: " << report.finalists_error << "\n";
    if (report.winner && gpu.device) {
      print_winner(*report.winner, problem, *gpu.device);
    } else {
      std::cout << "  winner    none: no config passed verification\n";
      ++without_winner;
    }
  }
  if (without_winner > 0)
    throw Error(std::to_string(without_winner) + " of " + std::to_string(problems.size()) +
                " problems have no verified config (see the trial counts above)");
  return 0;
}

}  // namespace tilesmith::cli
