#include "cli/cli_common.hpp"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <set>

#include "cache/database.hpp"
#include "driver/cuda_driver.hpp"
#include "generator/compiled_kernel.hpp"
#include "generator/rendered_source.hpp"
#include "templates/registry.hpp"

namespace tilesmith::cli {

bool parse_arguments(const CommandHelp& help, po::options_description& options,
                     const std::vector<std::string>& args, po::variables_map& values,
                     const char* positional_option) {
  options.add_options()("help,h", "show this help");
  // Without a positional option an empty description makes a stray word an error.
  po::positional_options_description positional;
  if (positional_option) positional.add(positional_option, -1);
  po::store(po::command_line_parser(args).options(options).positional(positional).run(), values);
  if (values.count("help")) {
    std::cout << "usage: tilesmith " << help.name << " " << help.usage << "\n\n"
              << help.summary << "\n\n"
              << options;
    if (options.find_nothrow("op", false)) std::cout << "\n" << ops_help();
    if (!help.examples.empty()) std::cout << "\nexamples:\n" << help.examples;
    return false;
  }
  po::notify(values);  // after --help, so that --help works without the required options
  return true;
}

void add_database_option(po::options_description& options, std::string& database_flag) {
  options.add_options()(
      "db", po::value(&database_flag)->value_name("PATH"),
      "database file (default: $TILESMITH_DB, else "
      "$XDG_CACHE_HOME/tilesmith/tilesmith.db or ~/.cache/tilesmith/tilesmith.db)");
}

std::filesystem::path database_path(const std::string& database_flag) {
  // default_path() reads $TILESMITH_DB, then the XDG cache folder.
  if (database_flag.empty()) return cache::Database::default_path();
  return database_flag;
}

std::filesystem::path existing_database_path(const std::string& database_flag) {
  std::filesystem::path path = database_path(database_flag);
  if (!std::filesystem::exists(path))
    throw Error("no database at " + path.string() +
                " (nothing was tuned there yet: 'tilesmith tune' creates it)");
  return path;
}

void print_database_notes(const cache::Database& database) {
  for (const std::string& note : database.notes()) std::cerr << "tilesmith: note: " << note << "\n";
}

void add_gpu_filter_option(po::options_description& options, std::string& gpu_model) {
  options.add_options()("gpu", po::value(&gpu_model)->value_name("MODEL_KEY"),
                        "only this GPU model (as 'tilesmith devices' prints it)");
}

std::optional<std::string> gpu_filter(const std::string& gpu_model) {
  if (gpu_model.empty()) return std::nullopt;
  return gpu_model;
}

std::optional<ListingArgs> parse_listing_arguments(const CommandHelp& help,
                                                   const std::vector<std::string>& args) {
  std::string database_flag, gpu_model;
  po::options_description options("options", 100);
  add_gpu_filter_option(options, gpu_model);
  add_database_option(options, database_flag);
  po::variables_map values;
  if (!parse_arguments(help, options, args, values)) return std::nullopt;
  return ListingArgs{existing_database_path(database_flag), gpu_filter(gpu_model)};
}

void print_nothing_listed(const std::string& nothing, const ListingArgs& listing) {
  std::cout << nothing << (listing.gpu_model ? " for " + *listing.gpu_model : "") << " in "
            << listing.database.string() << "\n";
}

std::string ops_help() {
  // Each op's shape form and options, from its family: a new family shows up here unchanged.
  auto wrapped = [](const std::string& text, std::size_t indent) {
    std::string out, line;
    std::size_t start = 0;
    while (start < text.size()) {
      std::size_t end = text.find(' ', start);
      if (end == std::string::npos) end = text.size();
      const std::string word = text.substr(start, end - start);
      if (!line.empty() && indent + line.size() + 1 + word.size() > 96) {
        out += std::string(indent, ' ') + line + "\n";
        line.clear();
      }
      line += (line.empty() ? "" : " ") + word;
      start = end + 1;
    }
    return out + std::string(indent, ' ') + line + "\n";
  };
  std::string help = "ops (--op): shape (--shape), then options (--option) and dtypes:\n";
  for (const Family* family : all_families()) {
    help += "  " + family->name() + "\n";
    help += wrapped("shape " + family->shape_form(), 6);
    help += wrapped(family->options_help(), 6);
  }
  return help;
}

void add_problem_options(po::options_description& options, ProblemArgs& args, bool many_shapes,
                         bool required) {
  auto required_if = [required](auto* value) { return required ? value->required() : value; };
  po::value_semantic* shapes = nullptr;
  if (many_shapes)
    shapes = required_if(po::value(&args.shapes)->composing()->value_name("SHAPE"));
  else  // a scalar option, so that a second --shape is an error rather than silently dropped
    shapes =
        required_if(po::value<std::string>()
                        ->notifier([&args](const std::string& shape) { args.shapes = {shape}; })
                        ->value_name("SHAPE"));
  std::string ops;
  for (const Family* family : all_families()) ops += (ops.empty() ? "" : ", ") + family->name();
  // clang-format off
  options.add_options()
      ("op", required_if(po::value(&args.op)->value_name("OP")), ("operation: " + ops).c_str())
      ("dtype", required_if(po::value(&args.dtype)->value_name("T")),
       "input element type: bf16, f16 or f32 (the dtypes each op takes are listed below)")
      ("out-dtype", po::value(&args.out_dtype)->value_name("T"),
       "output element type (default: the input type)")
      ("shape", shapes, many_shapes ? "problem shape (each op's form below; repeatable)"
                                    : "problem shape (each op's form below)")
      ("option", po::value(&args.options)->composing()->value_name("NAME=VALUE"),
       "an option of the op that changes its kernel (each op's below; repeatable)");
  // clang-format on
}

Problem make_problem(const ProblemArgs& args, const std::string& shape) {
  Problem problem;
  problem.op = args.op;
  problem.dtype = parse_dtype(args.dtype);
  problem.out_dtype = args.out_dtype.empty() ? problem.dtype : parse_dtype(args.out_dtype);
  problem.shape = parse_shape(shape);
  std::string options;
  for (const std::string& option : args.options) options += (options.empty() ? "" : ",") + option;
  problem.options = parse_options(options);
  const Family& family = find_family(problem.op);
  family.validate(problem);
  // As a call of packed tensors (the tuner's) runs it: the problem the runtime looks up for
  // such calls (matmul: a one-row operand's layout folded).
  return family.problem_for_call(std::move(problem), CallScalars{});
}

LocalGpu local_gpu(int ordinal) {
  LocalGpu gpu;
  if (!driver::gpu_available(&gpu.why_not)) return gpu;
  int count = driver::device_count();
  if (ordinal < 0 || ordinal >= count)
    throw Error("no GPU with ordinal " + std::to_string(ordinal) + " (" + std::to_string(count) +
                " visible)");
  gpu.device = driver::describe_device(ordinal);
  return gpu;
}

namespace {
const Family* known_family(const std::string& op) {
  for (const Family* family : all_families())
    if (family->name() == op) return family;
  return nullptr;
}
}  // namespace

std::optional<double> tflops(const Problem& problem, double milliseconds) {
  const Family* family = known_family(problem.op);
  if (!family || milliseconds <= 0) return std::nullopt;
  return family->work(problem).flops / (milliseconds * 1e9);
}

std::optional<double> gbps(const Problem& problem, double milliseconds) {
  const Family* family = known_family(problem.op);
  if (!family || milliseconds <= 0) return std::nullopt;
  return family->work(problem).min_bytes / (milliseconds * 1e6);
}

std::string timing_text(const Problem& problem, double median_ms, double spread) {
  return fixed(median_ms, 4) + " ms median, spread " + fixed(spread * 100, 1) + "%, " +
         fixed(tflops(problem, median_ms), 1) + " TFLOP/s, " + fixed(gbps(problem, median_ms), 0) +
         " GB/s";
}

std::optional<std::string> current_template_hash(const std::string& op) {
  const Family* family = known_family(op);
  if (!family) return std::nullopt;
  return template_hash(*family);
}

std::string template_age(const std::string& op, const std::string& template_hash) {
  std::optional<std::string> current = current_template_hash(op);
  if (!current) return "unknown op";
  return *current == template_hash ? "current" : "old";
}

cache::Toolchain local_toolchain() {
  std::string why_no_gpu;
  return {driver::gpu_available(&why_no_gpu) ? driver::driver_version() : std::string("none"),
          nvrtc_version()};
}

std::vector<JudgedWinner> judge_winners(const std::vector<cache::Winner>& winners) {
  const cache::Toolchain here = local_toolchain();
  auto stale_reason = [&](const cache::Winner& winner) -> std::string {
    if (current_template_hash(winner.problem.op) != winner.template_hash)
      return "older templates: the runtime no longer uses it";
    return cache::toolchain_mismatch(winner.toolchain, here);
  };
  // (GPU model, problem) pairs that have a winner of the current templates.
  std::set<std::pair<std::string, std::string>> current;
  for (const cache::Winner& winner : winners)
    if (current_template_hash(winner.problem.op) == winner.template_hash)
      current.insert({winner.gpu_model, winner.problem.key()});
  std::vector<JudgedWinner> judged;
  for (const cache::Winner& winner : winners) {
    const bool replaced = current_template_hash(winner.problem.op) != winner.template_hash &&
                          current.count({winner.gpu_model, winner.problem.key()});
    if (!replaced) judged.push_back({winner, stale_reason(winner)});
  }
  return judged;
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

std::string fixed(const std::optional<double>& value, int decimals) {
  return value ? fixed(*value, decimals) : "-";
}

Table::Table(std::vector<Column> columns) : columns_(std::move(columns)) {}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

void Table::print(std::ostream& out) const {
  std::vector<std::size_t> widths;
  for (const Column& column : columns_) widths.push_back(column.title.size());
  for (const auto& row : rows_)
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());

  auto print_line = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (std::size_t i = 0; i < cells.size(); ++i) {
      std::string padding(widths[i] - cells[i].size(), ' ');
      bool last = i + 1 == cells.size();
      if (i) line += "  ";
      if (columns_[i].right_aligned)
        line += padding + cells[i];
      else
        line += last ? cells[i] : cells[i] + padding;
    }
    line.erase(line.find_last_not_of(' ') + 1);  // an empty last cell leaves no trailing blanks
    out << line << '\n';
  };

  std::vector<std::string> titles, rules;
  for (std::size_t i = 0; i < columns_.size(); ++i) {
    titles.push_back(columns_[i].title);
    rules.push_back(std::string(widths[i], '-'));
  }
  print_line(titles);
  print_line(rules);
  for (const auto& row : rows_) print_line(row);
}

}  // namespace tilesmith::cli
