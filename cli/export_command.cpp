// `tilesmith export`: the winners as JSON or CSV, each entry carrying what it was made with
// (template and source hashes) so a consumer can judge entries one by one.
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cache/database.hpp"
#include "cli/cli_common.hpp"
#include "cli/commands.hpp"
#include "cli/output_file.hpp"
#include "generator/rendered_source.hpp"
#include "templates/registry.hpp"

namespace tilesmith::cli {
namespace {

std::string shortest(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", value);
  return text;
}

std::string to_json(const std::vector<cache::Winner>& winners) {
  nlohmann::ordered_json entries = nlohmann::ordered_json::array();
  for (const cache::Winner& winner : winners) {
    nlohmann::ordered_json config = nlohmann::ordered_json::object();
    for (const auto& [name, value] : winner.config.values) config[name] = value;
    std::optional<double> rate = tflops(winner.problem, winner.median_ms);
    entries.push_back({{"gpu_model", winner.gpu_model},
                       {"gpu_name", winner.gpu_name},
                       {"op", winner.problem.op},
                       {"dtype", std::string(dtype_name(winner.problem.dtype))},
                       {"out_dtype", std::string(dtype_name(winner.problem.out_dtype))},
                       {"shape", winner.problem.shape},
                       {"options", winner.problem.options},
                       {"config", config},
                       {"median_ms", winner.median_ms},
                       {"spread", winner.spread},
                       {"tflops", rate ? nlohmann::ordered_json(*rate) : nlohmann::ordered_json()},
                       {"trials_ok", winner.trials_ok},
                       {"trials_total", winner.trials_total},
                       {"template_hash", winner.template_hash},
                       {"source_hash", winner.source_hash},
                       {"updated_at", winner.updated_at}});
  }
  nlohmann::ordered_json document = {{"tilesmith_export_version", 1}, {"winners", entries}};
  return document.dump(2) + "\n";
}

// RFC 4180: quoted when it holds a separator, a quote or a line break; quotes doubled.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string to_csv(const std::vector<cache::Winner>& winners) {
  std::ostringstream out;
  out << "gpu_model,gpu_name,op,dtype,out_dtype,shape,options,config,median_ms,tflops,"
         "template_hash,source_hash,updated_at\n";
  for (const cache::Winner& winner : winners) {
    std::string config;
    for (const auto& [name, value] : winner.config.values)
      config += (config.empty() ? "" : ";") + name + "=" + std::to_string(value);
    std::optional<double> rate = tflops(winner.problem, winner.median_ms);
    const std::vector<std::string> fields = {winner.gpu_model,
                                             winner.gpu_name,
                                             winner.problem.op,
                                             std::string(dtype_name(winner.problem.dtype)),
                                             std::string(dtype_name(winner.problem.out_dtype)),
                                             winner.problem.shape_text(),
                                             winner.problem.options_text(),
                                             config,
                                             shortest(winner.median_ms),
                                             rate ? shortest(*rate) : "",
                                             winner.template_hash,
                                             winner.source_hash,
                                             winner.updated_at};
    for (std::size_t i = 0; i < fields.size(); ++i) out << (i ? "," : "") << csv_field(fields[i]);
    out << "\n";
  }
  return out.str();
}

// A bundle: an SQLite file of one GPU model's winners of this build's templates, each with its
// winning trial and cubin, built in a scratch folder and returned as bytes, so --out writes it
// with every rule a text export has.
std::string bundle_bytes(const cache::Database& database, const std::string& gpu_model,
                         std::size_t& winners) {
  std::map<std::string, std::string> templates;
  for (const Family* family : all_families()) templates[family->name()] = template_hash(*family);
  std::string folder = (std::filesystem::temp_directory_path() / "tilesmith-bundle-XXXXXX").string();
  if (!::mkdtemp(folder.data()))
    throw Error("export: cannot make a scratch folder under " +
                std::filesystem::temp_directory_path().string() + ": " + std::strerror(errno));
  struct Scratch {
    std::filesystem::path path;
    ~Scratch() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } scratch{folder};
  const std::filesystem::path file = scratch.path / "bundle.db";
  {
    cache::Database bundle(file);
    bundle.merge_winners_from(database, gpu_model, templates);
    winners = bundle.winners().size();
  }  // closed: its write-ahead log is folded into the file
  std::ifstream in(file, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (!in) throw Error("export: cannot read the bundle back from " + file.string());
  return bytes.str();
}

}  // namespace

int run_export(const std::vector<std::string>& args) {
  const CommandHelp help{
      "export",
      "[--format json|csv|bundle] [--out FILE [--force]] [--gpu MODEL_KEY] [--include-old] [--db PATH]",
      "Exports the best config per GPU model and problem: GPU, problem, config, median time,\n"
      "FLOP rate, and the template and source hashes it was tuned with. Only winners of this\n"
      "build's templates unless --include-old. Writes to stdout, or to --out: a regular file is\n"
      "replaced atomically (a symlink's target is written, the link stays), a device or pipe is\n"
      "written through. --out never overwrites the database being read, nor any other SQLite\n"
      "database unless --force.\n"
      "--format bundle writes an SQLite file (--out, one --gpu) holding that GPU model's winners\n"
      "of this build's templates, each with its winning trial and its cubin, to ship beside a\n"
      "program: 'tilesmith merge BUNDLE --into DB' folds it into a database.",
      "  tilesmith export --format json --out winners.json\n"
      "  tilesmith export --format csv --gpu 'NVIDIA H100 80GB HBM3 | sm_90 | 132 SMs'\n"
      "  tilesmith export --format bundle --gpu 'NVIDIA H100 80GB HBM3 | sm_90 | 132 SMs' \\\n"
      "                   --out h100.tilesmith.db\n"};
  std::string database_flag, format = "json", out, gpu_model;
  po::options_description options("options", 100);
  // clang-format off
  options.add_options()
      ("format", po::value(&format)->default_value(format)->value_name("json|csv|bundle"),
       "output format (bundle: an SQLite file of one GPU model's winners and cubins)")
      ("out", po::value(&out)->value_name("FILE"), "write to FILE (atomically) instead of stdout")
      ("force", po::bool_switch(), "let --out replace an SQLite database (never the one read)")
      ("include-old", po::bool_switch(), "also winners tuned with older templates");
  // clang-format on
  add_gpu_filter_option(options, gpu_model);
  add_database_option(options, database_flag);
  po::variables_map values;
  if (!parse_arguments(help, options, args, values)) return 0;
  if (format != "json" && format != "csv" && format != "bundle")
    throw InvalidArgument("unknown --format " + quote_input(format) +
                          " (expected json, csv or bundle)");
  if (format == "bundle" && (out.empty() || gpu_model.empty()))
    throw InvalidArgument("--format bundle needs --out FILE (an SQLite file) and --gpu MODEL_KEY "
                          "(a bundle holds one GPU model's winners)");
  if (format == "bundle" && values["include-old"].as<bool>())
    throw InvalidArgument("--include-old: a bundle holds only winners of this build's templates");
  if (values.count("out") && out.empty())
    throw InvalidArgument("--out needs a file name (leave --out out to write to stdout)");
  if (values["force"].as<bool>() && out.empty())
    throw InvalidArgument("--force only applies to --out FILE");

  cache::Database database(existing_database_path(database_flag), cache::Access::read_only);
  print_database_notes(database);
  if (format == "bundle") {
    std::size_t bundled = 0;
    const std::string bytes = bundle_bytes(database, gpu_model, bundled);
    write_output_file(out, bytes, {database.path(), values["force"].as<bool>()});
    std::cout << "wrote a bundle of " << bundled << " winners of " << gpu_model << " to " << out
              << "\n";
    return 0;
  }
  std::vector<cache::Winner> winners;
  for (cache::Winner& winner : database.winners(gpu_filter(gpu_model)))
    if (values["include-old"].as<bool>() ||
        current_template_hash(winner.problem.op) == winner.template_hash)
      winners.push_back(std::move(winner));

  std::string text = format == "json" ? to_json(winners) : to_csv(winners);
  if (out.empty()) {
    std::cout << text;
  } else {
    write_output_file(out, text, {database.path(), values["force"].as<bool>()});
    std::cout << "wrote " << winners.size() << " winners to " << out << "\n";
  }
  return 0;
}

}  // namespace tilesmith::cli
