// `tilesmith plot`: pictures of the database, as SVG files (any browser shows them; rsvg-convert
// makes PNGs). `landscape`: one sweep's times over two chosen parameters, each cell the best
// trial with those two values, the winner's cell outlined. `roofline`: the winners of every
// family of one GPU model against its compute and memory roofs.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "cache/database.hpp"
#include "cli/cli_common.hpp"
#include "cli/commands.hpp"
#include "cli/output_file.hpp"
#include "generator/rendered_source.hpp"
#include "templates/registry.hpp"
#include "tuner/sweep.hpp"

namespace tilesmith::cli {
namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

// A plain SVG document: text, rectangles, lines and circles in user units (pixels).
class Svg {
 public:
  Svg(int width, int height) : width_(width), height_(height) {}
  void text(double x, double y, const std::string& s, int size = 12, const char* anchor = "start",
            const char* extra = "") {
    body_ << "<text x=\"" << x << "\" y=\"" << y << "\" font-size=\"" << size
          << "\" text-anchor=\"" << anchor << "\" " << extra << ">" << escape(s) << "</text>\n";
  }
  void rect(double x, double y, double w, double h, const std::string& fill,
            const std::string& stroke = "none", double stroke_width = 1) {
    body_ << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << h
          << "\" fill=\"" << fill << "\" stroke=\"" << stroke << "\" stroke-width=\""
          << stroke_width << "\"/>\n";
  }
  void line(double x1, double y1, double x2, double y2, const std::string& stroke,
            double width = 1, const char* dash = "") {
    body_ << "<line x1=\"" << x1 << "\" y1=\"" << y1 << "\" x2=\"" << x2 << "\" y2=\"" << y2
          << "\" stroke=\"" << stroke << "\" stroke-width=\"" << width << "\""
          << (*dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : "") << "/>\n";
  }
  void circle(double x, double y, double r, const std::string& fill) {
    body_ << "<circle cx=\"" << x << "\" cy=\"" << y << "\" r=\"" << r << "\" fill=\"" << fill
          << "\" stroke=\"black\" stroke-width=\"0.5\"/>\n";
  }
  std::string str() const {
    std::ostringstream out;
    out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width_ << "\" height=\""
        << height_ << "\" viewBox=\"0 0 " << width_ << " " << height_
        << "\" font-family=\"Helvetica, Arial, sans-serif\">\n"
        << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
        << body_.str() << "</svg>\n";
    return out.str();
  }

 private:
  int width_, height_;
  std::ostringstream body_;
};

// A colour from green (t = 0, fastest) through yellow to red (t = 1, slowest).
std::string heat(double t) {
  t = std::clamp(t, 0.0, 1.0);
  const int r = static_cast<int>(t < 0.5 ? 510 * t : 255);
  const int g = static_cast<int>(t < 0.5 ? 200 : 200 * (1 - t) * 2);
  char text[16];
  std::snprintf(text, sizeof text, "#%02x%02x40", r, g);
  return text;
}

std::string landscape_svg(const Problem& problem, const std::string& gpu_model,
                          const std::vector<cache::Trial>& trials, const cache::Winner& winner,
                          const std::string& x_param, const std::string& y_param) {
  std::set<int> xs, ys;
  std::map<std::pair<int, int>, double> best;  // (x, y) -> fastest ok trial
  int counted = 0;
  for (const cache::Trial& trial : trials) {
    if (trial.status != cache::TrialStatus::ok) continue;
    auto x = trial.config.values.find(x_param), y = trial.config.values.find(y_param);
    if (x == trial.config.values.end() || y == trial.config.values.end()) continue;
    ++counted;
    xs.insert(x->second);
    ys.insert(y->second);
    auto [it, inserted] = best.emplace(std::make_pair(x->second, y->second), trial.median_ms);
    if (!inserted) it->second = std::min(it->second, trial.median_ms);
  }
  if (best.empty())
    throw Error("plot: no verified trial of " + problem.key() + " has both " + x_param + " and " +
                y_param);
  double fastest = 1e300, slowest = 0;
  for (const auto& [cell, ms] : best) fastest = std::min(fastest, ms), slowest = std::max(slowest, ms);
  const int cell_w = 90, cell_h = 40, left = 110, top = 100;
  const std::string title = problem.key() + " on " + gpu_model;
  const std::string winner_line = "winner: " + winner.config.text();
  // About 7.5 pixels a character at 14 px and 5.5 at 10 px: the longest line fits.
  const int text_width = static_cast<int>(std::max(7.5 * title.size(), 5.5 * winner_line.size())) + 30;
  const int width = std::max(left + cell_w * static_cast<int>(xs.size()) + 40, text_width);
  const int height = top + cell_h * static_cast<int>(ys.size()) + 90;
  Svg svg(width, height);
  svg.text(10, 22, title, 14, "start", "font-weight=\"bold\"");
  svg.text(10, 42,
           "best verified trial (ms) for each " + x_param + " x " + y_param + "; " +
               std::to_string(counted) + " trials; the winner outlined",
           11);
  const double log_span = std::log(slowest / fastest);
  const std::vector<int> x_values(xs.begin(), xs.end()), y_values(ys.begin(), ys.end());
  for (std::size_t i = 0; i < x_values.size(); ++i)
    svg.text(left + cell_w * (i + 0.5), top - 8, std::to_string(x_values[i]), 12, "middle");
  for (std::size_t j = 0; j < y_values.size(); ++j)
    svg.text(left - 10, top + cell_h * (j + 0.5) + 4, std::to_string(y_values[j]), 12, "end");
  svg.text(left + cell_w * x_values.size() / 2.0, top - 30, x_param, 12, "middle",
           "font-style=\"italic\"");
  svg.text(14, top + cell_h * y_values.size() / 2.0, y_param, 12, "start", "font-style=\"italic\"");
  const int winner_x = winner.config.values.count(x_param) ? winner.config.at(x_param) : -1;
  const int winner_y = winner.config.values.count(y_param) ? winner.config.at(y_param) : -1;
  for (std::size_t i = 0; i < x_values.size(); ++i)
    for (std::size_t j = 0; j < y_values.size(); ++j) {
      const double x = left + cell_w * static_cast<double>(i), y = top + cell_h * static_cast<double>(j);
      auto it = best.find({x_values[i], y_values[j]});
      if (it == best.end()) {
        svg.rect(x, y, cell_w, cell_h, "#e8e8e8", "white");
        svg.text(x + cell_w / 2.0, y + cell_h / 2.0 + 4, "-", 11, "middle");
        continue;
      }
      const double t = log_span > 0 ? std::log(it->second / fastest) / log_span : 0;
      svg.rect(x, y, cell_w, cell_h, heat(t), "white");
      svg.text(x + cell_w / 2.0, y + cell_h / 2.0 + 4, fixed(it->second, 4), 11, "middle");
      if (x_values[i] == winner_x && y_values[j] == winner_y)
        svg.rect(x + 1.5, y + 1.5, cell_w - 3, cell_h - 3, "none", "black", 3);
    }
  const double legend_y = top + cell_h * y_values.size() + 30;
  for (int k = 0; k < 10; ++k) svg.rect(left + 20 * k, legend_y, 20, 12, heat(k / 9.0));
  svg.text(left - 10, legend_y + 10, fixed(fastest, 4) + " ms", 10, "end");
  svg.text(left + 210, legend_y + 10, fixed(slowest, 4) + " ms (log scale)", 10);
  svg.text(10, legend_y + 40, winner_line, 10);
  return svg.str();
}

std::string roofline_svg(const std::string& gpu_model, const std::vector<cache::Winner>& winners, double peak_tflops,
                         double bandwidth_gbps) {
  const int width = 760, height = 540, left = 80, right = 200, top = 70, bottom = 60;
  const double plot_w = width - left - right, plot_h = height - top - bottom;
  // log10 axes: intensity 0.01 .. 10^4 FLOP/byte, rate 0.01 .. 10^4 TFLOP/s
  const double x_min = -2, x_max = 4, y_min = -2, y_max = std::ceil(std::log10(peak_tflops) + 0.3);
  auto px = [&](double intensity) { return left + (std::log10(intensity) - x_min) / (x_max - x_min) * plot_w; };
  auto py = [&](double tflops) { return top + plot_h - (std::log10(tflops) - y_min) / (y_max - y_min) * plot_h; };
  Svg svg(width, height);
  svg.text(10, 22, "winners on " + gpu_model, 14, "start", "font-weight=\"bold\"");
  svg.text(10, 40,
           "roofs: " + fixed(peak_tflops, 0) + " TFLOP/s dense tensor peak, " +
               fixed(bandwidth_gbps, 0) + " GB/s memory (datasheet)",
           11);
  svg.rect(left, top, plot_w, plot_h, "none", "#888");
  for (int e = static_cast<int>(x_min); e <= x_max; ++e) {
    svg.line(px(std::pow(10, e)), top, px(std::pow(10, e)), top + plot_h, "#ddd");
    svg.text(px(std::pow(10, e)), top + plot_h + 16, "1e" + std::to_string(e), 10, "middle");
  }
  for (int e = static_cast<int>(y_min); e <= y_max; ++e) {
    svg.line(left, py(std::pow(10, e)), left + plot_w, py(std::pow(10, e)), "#ddd");
    svg.text(left - 6, py(std::pow(10, e)) + 4, "1e" + std::to_string(e), 10, "end");
  }
  svg.text(left + plot_w / 2, height - 18, "FLOP per byte moved (each input read once, each output written once)", 11, "middle");
  svg.text(left, top - 8, "TFLOP/s", 11, "middle");
  // The roof: bandwidth x intensity up to the ridge, then the compute peak.
  const double ridge = peak_tflops * 1e12 / (bandwidth_gbps * 1e9);
  const double low = std::pow(10, x_min), high = std::pow(10, x_max);
  svg.line(px(low), py(bandwidth_gbps * 1e9 * low / 1e12), px(ridge), py(peak_tflops), "black", 2);
  svg.line(px(ridge), py(peak_tflops), px(high), py(peak_tflops), "black", 2);
  const char* palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
                           "#e377c2", "#17becf", "#bcbd22", "#7f7f7f", "#393b79", "#637939"};
  std::map<std::string, std::string> colour;
  for (const cache::Winner& winner : winners) {
    const Work work = find_family(winner.problem.op).work(winner.problem);  // current: known
    if (work.flops <= 0 || work.min_bytes <= 0 || winner.median_ms <= 0) continue;
    const double intensity = work.flops / work.min_bytes;
    const double rate = work.flops / (winner.median_ms * 1e9);
    if (!colour.count(winner.problem.op))
      colour[winner.problem.op] = palette[colour.size() % (sizeof palette / sizeof *palette)];
    svg.circle(px(std::clamp(intensity, low, high)), py(std::max(rate, std::pow(10, y_min))), 5,
               colour[winner.problem.op]);
  }
  int row = 0;
  for (const auto& [op, fill] : colour) {
    svg.circle(width - right + 20, top + 10 + 18 * row, 5, fill);
    svg.text(width - right + 32, top + 14 + 18 * row, op, 11);
    ++row;
  }
  return svg.str();
}

void write_svg(const std::string& out, const std::string& svg, const std::filesystem::path& database) {
  write_output_file(out, svg, {database, /*force=*/false});
  std::cout << "wrote " << out << "\n";
}

}  // namespace

int run_plot(const std::vector<std::string>& args) {
  const CommandHelp help{
      "plot", "landscape|roofline --out FILE.svg [problem options] [--x P --y P] [--gpu MODEL_KEY] [--db PATH]",
      "Draws the database as SVG. 'landscape': one problem's sweep over two parameters (--x and\n"
      "--y, e.g. block_m and block_n), each cell the fastest verified trial with those values\n"
      "(over every other parameter), coloured on a log scale, the winner's cell outlined.\n"
      "'roofline': every winner of one GPU model (--gpu, default the local GPU's, else the\n"
      "database's only one) at its FLOP per byte and FLOP rate, under the model's datasheet\n"
      "compute and memory roofs, one colour per op. PNG: rsvg-convert -o file.png file.svg.",
      "  tilesmith plot landscape --op matmul --dtype bf16 --shape 512x512x16384 --x block_m --y split_k --out k.svg\n"
      "  tilesmith plot roofline --out roofline.svg\n"};
  ProblemArgs problem_args;
  std::string database_flag, gpu_model, kind, out, x_param, y_param;
  po::options_description options("options", 100);
  add_problem_options(options, problem_args, /*many_shapes=*/false, /*required=*/false);
  // clang-format off
  options.add_options()
      ("kind", po::value(&kind)->value_name("landscape|roofline"), "what to draw")
      ("x", po::value(&x_param)->value_name("PARAM"), "landscape: the parameter across")
      ("y", po::value(&y_param)->value_name("PARAM"), "landscape: the parameter down")
      ("gpu", po::value(&gpu_model)->value_name("MODEL_KEY"),
       "GPU model (as 'tilesmith devices' prints it); default: the local GPU's")
      ("out", po::value(&out)->value_name("FILE"), "the SVG file to write (replaced atomically)");
  // clang-format on
  add_database_option(options, database_flag);
  po::variables_map values;
  if (!parse_arguments(help, options, args, values, "kind")) return 0;
  if (kind != "landscape" && kind != "roofline")
    throw InvalidArgument("plot: say what to draw: landscape or roofline");
  if (out.empty()) throw InvalidArgument("plot: --out FILE.svg is required");

  cache::Database database(existing_database_path(database_flag), cache::Access::read_only);
  print_database_notes(database);
  if (gpu_model.empty()) {
    LocalGpu gpu = local_gpu();
    if (gpu.device) gpu_model = gpu.device->model_key();
  }
  if (gpu_model.empty()) {  // no GPU here: the database's only model, if it has one
    std::set<std::string> models;
    for (const cache::Winner& winner : database.winners()) models.insert(winner.gpu_model);
    if (models.size() != 1)
      throw InvalidArgument("plot: --gpu MODEL_KEY is needed: the database has winners of " +
                            std::to_string(models.size()) + " GPU models and there is no GPU here");
    gpu_model = *models.begin();
  }

  if (kind == "roofline") {
    std::vector<cache::Winner> winners;
    std::string name;
    for (cache::Winner& winner : database.winners(gpu_model))
      if (current_template_hash(winner.problem.op) == winner.template_hash) {
        name = winner.gpu_name;
        winners.push_back(std::move(winner));
      }
    if (winners.empty()) throw Error("plot: no current winners for " + gpu_model);
    DeviceTarget device;
    device.name = name;
    const std::optional<double> peak = tuner::tensor_peak_tflops(device);
    const std::optional<double> bandwidth = tuner::memory_peak_gbps(device);
    if (!peak || !bandwidth) throw Error("plot: the roofs of " + name + " are not known to this build");
    write_svg(out, roofline_svg(gpu_model, winners, *peak, *bandwidth), database.path());
    return 0;
  }

  if (problem_args.op.empty() || problem_args.shapes.empty() || x_param.empty() || y_param.empty())
    throw InvalidArgument("plot landscape needs --op, --dtype, --shape, --x and --y");
  const Problem problem = make_problem(problem_args, problem_args.shapes.at(0));
  const cache::TrialKey key{gpu_model, problem, template_hash(find_family(problem.op))};
  const std::optional<cache::Winner> winner = database.winner(key);
  if (!winner)
    throw Error("plot: no winner for " + problem.key() + " on " + gpu_model +
                " with this build's templates: tune it first");
  for (const std::string& param : {x_param, y_param})
    if (!winner->config.values.count(param))
      throw InvalidArgument("plot: the winner's config has no parameter " + param + " (it has " +
                            winner->config.text() + ")");
  write_svg(out, landscape_svg(problem, gpu_model, database.trials(key), *winner, x_param, y_param),
            database.path());
  return 0;
}

}  // namespace tilesmith::cli
