// What every subcommand shares: argument parsing with --help, the database path, the problem
// options, the local GPU, number formatting and plain-text tables.
#pragma once

#include <boost/program_options.hpp>
#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "cache/database.hpp"
#include "templates/family.hpp"
#include "templates/problem.hpp"

namespace tilesmith::cli {

namespace po = boost::program_options;

// A subcommand's help: "tilesmith <name> <usage>", a paragraph, then its options.
struct CommandHelp {
  std::string name;      // "tune"
  std::string usage;     // "--op OP --dtype T --shape MxNxK [options]"
  std::string summary;   // what the command does, one paragraph
  std::string examples;  // optional lines shown after the options
};

// Adds --help, parses `args` against `options` and checks required options. Returns false when
// --help was asked for (the help is then printed). Throws po::error for bad arguments.
// `positional_option`: the option that plain words give values to (merge's sources); none takes
// them otherwise.
bool parse_arguments(const CommandHelp& help, po::options_description& options,
                     const std::vector<std::string>& args, po::variables_map& values,
                     const char* positional_option = nullptr);

// --db PATH; the path it resolves to: --db, else $TILESMITH_DB, else the user's cache folder.
void add_database_option(po::options_description& options, std::string& database_flag);
std::filesystem::path database_path(const std::string& database_flag);
// The same path for commands that only read: throws Error when no database is there, so that a
// mistyped --db says so instead of creating an empty database and reporting nothing.
std::filesystem::path existing_database_path(const std::string& database_flag);

// What a read-only open of the database could not do the usual way (cache::Database::notes),
// one "tilesmith: note: ..." line each on stderr.
void print_database_notes(const cache::Database& database);

// --gpu MODEL_KEY, a filter on the GPU model; gpu_filter() is nothing when it was not given.
void add_gpu_filter_option(po::options_description& options, std::string& gpu_model);
std::optional<std::string> gpu_filter(const std::string& gpu_model);

// The arguments of the commands that list rows of the database (list, misses): --gpu MODEL_KEY
// and --db PATH, which must exist.
struct ListingArgs {
  std::filesystem::path database;
  std::optional<std::string> gpu_model;  // nothing: every GPU model
};
// Nothing when --help was asked for (the help is then printed). Throws po::error for bad ones.
std::optional<ListingArgs> parse_listing_arguments(const CommandHelp& help,
                                                   const std::vector<std::string>& args);
// What a listing prints when it found no rows: "no misses for MODEL in PATH".
void print_nothing_listed(const std::string& nothing, const ListingArgs& listing);

// --op, --dtype, --out-dtype, --option (repeatable) and --shape (repeatable when `many_shapes`).
struct ProblemArgs {
  std::string op;
  std::string dtype;
  std::string out_dtype;  // empty: the input dtype
  std::vector<std::string> shapes;
  std::vector<std::string> options;  // "name=value" (repeatable --option)
};
// Every op's shape form, options and dtypes, for help texts.
std::string ops_help();

// Not `required`: the caller checks what it needs (tune takes --misses instead of --shape).
void add_problem_options(po::options_description& options, ProblemArgs& args, bool many_shapes,
                         bool required = true);
// The problem for one shape, validated by its family.
Problem make_problem(const ProblemArgs& args, const std::string& shape);

// The GPU at `ordinal`, or nothing with the reason (no driver, no GPU).
struct LocalGpu {
  std::optional<DeviceTarget> device;
  std::string why_not;  // set when there is no device
};
LocalGpu local_gpu(int ordinal = 0);

// FLOP rate of `problem` done in `milliseconds`; nothing for an unknown op or a zero time.
std::optional<double> tflops(const Problem& problem, double milliseconds);
// Bandwidth of the fewest bytes `problem` must move (each input read once, each output written
// once) in `milliseconds`, in GB/s: the rate that matters for memory-bound problems.
std::optional<double> gbps(const Problem& problem, double milliseconds);
// "0.2031 ms median, spread 1.2%, 676.7 TFLOP/s": how a winner or trial performed.
std::string timing_text(const Problem& problem, double median_ms, double spread);
// The current template hash of `op`'s family; nothing when this build does not know the op.
std::optional<std::string> current_template_hash(const std::string& op);
// Whether a result keyed by `template_hash` is for this build's template of `op`: "current",
// "old" (the runtime never uses it), or "unknown op".
std::string template_age(const std::string& op, const std::string& template_hash);

// A winner judged against this machine: why it no longer vouches for what the runtime would run
// here ("" when it does). Older templates: the runtime never finds it. Another NVRTC or driver
// (cache::toolchain_mismatch): the runtime refuses it and falls through to its next lookup.
struct JudgedWinner {
  cache::Winner winner;
  std::string stale_reason;
};
// `winners` judged one by one (one stale entry never discredits the others), leaving out the
// winners of older templates that a current one replaced.
std::vector<JudgedWinner> judge_winners(const std::vector<cache::Winner>& winners);
// This machine's driver ("none" without a GPU) and NVRTC.
cache::Toolchain local_toolchain();

// printf-style "%.<decimals>f"; "-" for a missing value.
std::string fixed(double value, int decimals);
std::string fixed(const std::optional<double>& value, int decimals);

// A plain-text table with aligned columns: header, a rule, rows.
class Table {
 public:
  struct Column {
    std::string title;
    bool right_aligned = false;  // numbers
  };
  explicit Table(std::vector<Column> columns);
  void add_row(std::vector<std::string> cells);
  bool empty() const { return rows_.empty(); }
  void print(std::ostream& out) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace tilesmith::cli
