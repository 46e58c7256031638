// The `tilesmith` CLI as a user runs it: the built binary in a subprocess, its stdout, stderr and
// exit status. Every run points TILESMITH_DB and --db into a temp folder, so no test can reach the
// user's cache. Tests pass with and without a GPU, asserting what each case must print.
#include <sqlite3.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>

#include "cache/database.hpp"
#include "generator/compiled_kernel.hpp"
#include "generator/rendered_source.hpp"
#include "support/cli_runner.hpp"
#include "support/matmul_configs.hpp"
#include "support/test_support.hpp"

namespace tilesmith {
namespace {

namespace fs = std::filesystem;
using testing::CliRun;
using testing::contains;
using testing::expect_error_line;
using testing::read_bytes;
using testing::run_cli;
using testing::tile_config;

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The cells of a line of the CLI's tables: columns are apart by two or more spaces, and no cell
// holds two spaces in a row.
std::vector<std::string> cells(const std::string& line) {
  std::vector<std::string> found;
  const std::regex cell("\\S+( \\S+)*");
  for (std::sregex_iterator it(line.begin(), line.end(), cell), end; it != end; ++it)
    found.push_back(it->str());
  return found;
}

// The cells of the first table line holding `part`; empty when there is none.
std::vector<std::string> row_with(const std::string& text, const std::string& part) {
  for (const std::string& line : split_lines(text))
    if (contains(line, part)) return cells(line);
  return {};
}

bool have_gpu() { return driver::gpu_available(nullptr); }

class CliTest : public ::testing::Test {
 protected:
  CliRun run(const std::vector<std::string>& args) { return run_cli(args, dir_.path()); }
  testing::TempDir dir_;
};
using CliHelp = CliTest;
using CliSource = CliTest;
using CliDatabase = CliTest;
using CliDevices = CliTest;
using CliTune = CliTest;
using CliMisses = CliTest;

// ---------------------------------------------------------------------------------------------
// Help and argument errors

TEST_F(CliHelp, ListsEveryCommandAndEachCommandsMainOptions) {
  const std::map<std::string, std::vector<std::string>> options = {
      {"devices", {"--count"}},
      {"tune",
       {"--op", "--dtype", "--shape", "--misses", "--strategy", "--budget", "--arch", "--db"}},
      {"list", {"--gpu", "--db"}},
      {"misses", {"--gpu", "--db"}},
      {"show", {"--op", "--dtype", "--shape", "--gpu", "--top", "--db"}},
      {"export", {"--format", "--out", "--include-old", "--db"}},
      {"status", {"--gpu", "--db"}},
      {"verify", {"--op", "--tolerance", "--device", "--seed", "--db"}},
      {"plot", {"--x", "--y", "--gpu", "--out", "--db"}},
      {"source", {"--op", "--dtype", "--shape", "--config", "--arch", "--emit"}}};
  CliRun top = run({"--help"});
  EXPECT_EQ(top.status, 0);
  for (const auto& [command, names] : options) {
    EXPECT_TRUE(std::regex_search(top.out, std::regex("\n  " + command + " +\\w"))) << top.out;
    CliRun help = run({command, "--help"});
    EXPECT_EQ(help.status, 0) << command << ": " << help.err;
    EXPECT_EQ(help.out.rfind("usage: tilesmith " + command + " ", 0), 0u) << help.out;
    for (const std::string& name : names)
      EXPECT_TRUE(contains(help.out, "  " + name + " ")) << command << " lacks " << name;
  }
  EXPECT_EQ(run({"help", "tune"}).out, run({"tune", "--help"}).out);
  CliRun bare = run({});  // usage, but as an error: nothing was asked for
  EXPECT_EQ(bare.status, 2);
  EXPECT_TRUE(contains(bare.err, "usage: tilesmith <command>"));
}

TEST_F(CliHelp, BadCommandLinesFailWithOneErrorLine) {
  CliRun unknown = run({"frobnicate"});
  expect_error_line(unknown, "unknown command 'frobnicate'");
  EXPECT_TRUE(contains(unknown.err, "devices, tune, list, misses, show, export, merge, status, verify, plot, source"));
  expect_error_line(run({"list", "--frobnicate"}), "frobnicate");
  expect_error_line(run({"list", "stray"}), "list: ");
  expect_error_line(run({"source", "--op", "matmul", "--shape", "8x8x8"}), "--dtype");
  expect_error_line(run({"export", "--format", "xml"}), "unknown --format 'xml'");
  expect_error_line(
      run({"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64", "--budget", "soon"}),
      "bad --budget 'soon'");
  // A NaN or huge watchdog would switch it off; a negative seed would wrap around.
  for (const char* timeout : {"nan", "inf", "0", "1e9"})
    expect_error_line(run({"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64",
                           "--timeout", timeout}),
                      "--timeout must be");
  expect_error_line(
      run({"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64", "--seed", "-1"}),
      "bad --seed '-1'");
  // tune needs shapes: --shape with its problem options, or --misses, which bring their own.
  expect_error_line(run({"tune", "--budget", "1"}), "give --shape SHAPE (repeatable), --misses");
  expect_error_line(run({"tune", "--dtype", "bf16", "--shape", "64x64x64"}), "'--op'");
  expect_error_line(run({"tune", "--misses", "--op", "matmul"}), "each miss brings its own");
  expect_error_line(run({"help", "tune", "extra"}), "'help' takes one command name");
  // Numbers a sweep cannot use (100000 compile jobs aborted the process: issue 15).
  expect_error_line(run({"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64",
                         "--jobs", "100000"}),
                    "--jobs must be 0 (one per core, at most 16) to 256 (given 100000)");
  expect_error_line(run({"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64",
                         "--device", "-1"}),
                    "--device must be a GPU ordinal, 0 or more (given -1)");
  // Options: well formed, and ones the op takes.
  expect_error_line(run({"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64",
                         "--option", "act"}),
                    "bad option 'act'");
  expect_error_line(run({"source", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64",
                         "--option", "layout_b=col"}),
                    "matmul: unknown option 'layout_b'");
  CliRun help_help = run({"help", "--help"});
  EXPECT_EQ(help_help.status, 0) << help_help.err;
  EXPECT_TRUE(contains(help_help.out, "commands:"));
}

// ---------------------------------------------------------------------------------------------
// source: no GPU and no database needed

TEST_F(CliSource, CudaIsTheExactRenderedSourceOfTheMergedConfig) {
  const Problem problem{"matmul", DType::bf16, DType::bf16, {100, 200, 300}};
  const Config config = tile_config(64, 64, 32, 2, 2, 3, 1);  // not the default: stages, group_m
  CliRun source = run({"source", "--op", "matmul", "--dtype", "bf16", "--shape", "100x200x300",
                       "--arch", "sm_80", "--emit", "cuda", "--config", config.text()});
  ASSERT_EQ(source.status, 0) << source.err;
  const RenderedSource rendered = render(find_family("matmul"), config, problem);
  ASSERT_EQ(rendered.kernel_expressions.size(), 1u);
  ASSERT_EQ(rendered.kernel_expressions[0].rfind("tilesmith::matmul_kernel<", 0), 0u);
  EXPECT_EQ(source.out.rfind("// tilesmith source: matmul bf16->bf16 100x200x300 for sm_80", 0),
            0u);
  EXPECT_TRUE(contains(source.out, "source hash " + rendered.hash + "\n"));
  EXPECT_TRUE(contains(source.out, "// kernel: " + rendered.kernel_expressions[0] + "\n"));
  EXPECT_TRUE(
      contains(source.out, "// ==== file: " + rendered.main_name + " ====\n" + rendered.text));
  for (const auto& [name, text] : rendered.headers)
    EXPECT_TRUE(contains(source.out, "// ==== file: " + name + " ====\n" + text)) << name;
}

TEST_F(CliSource, PtxTargetsTheAskedArchitectureAndUsesTensorCores) {
  // (Past the tiny products, which take the mma.sync template on Hopper too.)
  CliRun ptx = run({"source", "--op", "matmul", "--dtype", "bf16", "--shape", "1000x200x300",
                    "--arch", "sm_90a", "--emit", "ptx"});
  ASSERT_EQ(ptx.status, 0) << ptx.err;
  EXPECT_TRUE(contains(ptx.out, ".target sm_90a"));
  EXPECT_TRUE(contains(ptx.out, "wgmma.mma_async"));  // Hopper's default: the wgmma template
  EXPECT_FALSE(contains(ptx.out, "// ==== file:"));  // PTX only, no CUDA source
  // --config switches to the other template: variant 0's parameters come with it.
  CliRun mma = run({"source", "--op", "matmul", "--dtype", "bf16", "--shape", "100x200x300",
                    "--arch", "sm_90a", "--emit", "ptx", "--config", "variant=0"});
  ASSERT_EQ(mma.status, 0) << mma.err;
  EXPECT_TRUE(contains(mma.out, "mma.sync.aligned.m16n8k16"));
  EXPECT_FALSE(contains(mma.out, "wgmma"));
  // fp32 before Hopper: tf32 on mma.sync (m16n8k8).
  CliRun tf32 = run({"source", "--op", "matmul", "--dtype", "f32", "--shape", "100x200x300",
                     "--arch", "sm_80", "--emit", "ptx"});
  ASSERT_EQ(tf32.status, 0) << tf32.err;
  EXPECT_TRUE(contains(tf32.out, "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32"));
}

// The CLI takes a problem as a call of packed tensors runs it: a column-major A of one row is
// the row-major one, so a sweep stores the winner the runtime looks up for such calls.
TEST_F(CliSource, AnOperandOfOneStoredRowIsTheProblemOfItsOtherLayout) {
  const std::vector<std::string> base = {"source", "--op", "matmul", "--dtype", "bf16", "--shape",
                                         "1x6624x512", "--arch", "sm_90a"};
  CliRun column = run([&] {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--option", "a=col"});
    return args;
  }());
  CliRun row = run(base);
  ASSERT_EQ(column.status, 0) << column.err;
  ASSERT_EQ(row.status, 0) << row.err;
  EXPECT_EQ(column.out.rfind("// tilesmith source: matmul bf16->bf16 1x6624x512 for sm_90a", 0),
            0u);
  EXPECT_EQ(column.out, row.out);
}

TEST_F(CliSource, RejectsBadConfigsShapesAndTypesNamingTheProblem) {
  const std::vector<std::string> base = {"source", "--op", "matmul", "--arch", "sm_80"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--dtype", "bf16", "--shape", "64x64x64", "--config", "stages=1"}, "cannot run matmul"},
      {{"--dtype", "bf16", "--shape", "64x64x64", "--config", "bogus=1"}, "no parameter 'bogus'"},
      {{"--dtype", "bf16", "--shape", "64x64x64", "--config", "block_m"},
       "bad config item 'block_m'"},
      {{"--dtype", "bf16", "--shape", "64x64x64", "--config", "block_m=64,block_m=128"},
       "sets 'block_m' twice"},
      {{"--dtype", "bf16", "--shape", "0x4x4"}, "bad shape '0x4x4'"},
      {{"--dtype", "bf16", "--shape", "4x4"}, "shape '4x4' must be MxNxK"},
      {{"--dtype", "f8", "--shape", "64x64x64"}, "unknown dtype 'f8'"},
      {{"--dtype", "bf16", "--shape", "64x64x64", "--emit", "sass"}, "unknown --emit 'sass'"}};
  for (const auto& [extra, message] : cases) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    SCOPED_TRACE(message);
    CliRun failed = run(args);
    expect_error_line(failed, message);
    EXPECT_EQ(failed.out, "");
  }
}

// ---------------------------------------------------------------------------------------------
// list, show, export on a database written through the cache API

DeviceTarget test_gpu() {
  DeviceTarget device;  // a model no real GPU has, so a local GPU never matches it
  device.name = "tilesmith test GPU";
  device.cc_major = 9;
  device.cc_minor = 0;
  device.sm_count = 7;
  return device;
}

cache::Trial trial(cache::TrialStatus status, const Config& config, double median_ms) {
  cache::Trial trial;
  trial.config = config;
  trial.source_hash = "source-" + config.text();
  trial.status = status;
  trial.detail = status == cache::TrialStatus::ok ? "" : "it failed";
  trial.median_ms = median_ms;
  trial.min_ms = median_ms;
  trial.spread = 0.01;
  trial.repetitions = 20;
  trial.toolchain = {"13.0", "13.0"};
  return trial;
}

const Problem kSeeded{"matmul", DType::bf16, DType::bf16, {512, 256, 128}};
const Config kWinner = tile_config(128, 128, 32, 2, 2, 4);
const Config kSecond = tile_config(64, 64, 32, 2, 2, 2);
const Config kThird = tile_config(128, 64, 32, 2, 2, 3);
const Config kWrong = tile_config(256, 128, 32, 2, 2, 3);

// Three winners: kSeeded (5 trials, 3 ok) and 64^3 with this build's templates, and 1024^3
// tuned with older ones, which only `list` and `export --include-old` show.
void seed(const fs::path& path) {
  cache::Database db(path);
  db.record_gpu(test_gpu(), {"13.0", "13.0"});
  const std::string current = template_hash(find_family("matmul"));
  const cache::TrialKey key{test_gpu().model_key(), kSeeded, current};
  db.record_trial(key, trial(cache::TrialStatus::ok, kSecond, 0.30));
  db.record_trial(key, trial(cache::TrialStatus::wrong, kWrong, 0.10));  // fast, wrong: no win
  db.record_trial(key, trial(cache::TrialStatus::ok, kWinner, 0.25));
  db.record_trial(key, trial(cache::TrialStatus::compile_failed, kSecond, 0));
  db.record_trial(key, trial(cache::TrialStatus::ok, kThird, 0.40));
  ASSERT_EQ(db.refresh_winner(key)->config, kWinner);
  const Problem small{"matmul", DType::bf16, DType::bf16, {64, 64, 64}};
  const Problem old{"matmul", DType::bf16, DType::bf16, {1024, 1024, 1024}};
  for (const cache::TrialKey& other : {cache::TrialKey{test_gpu().model_key(), small, current},
                                       cache::TrialKey{test_gpu().model_key(), old, "0ld"}}) {
    db.record_trial(other, trial(cache::TrialStatus::ok, kThird, 0.05));
    ASSERT_TRUE(db.refresh_winner(other));
  }
}

// `show` for a bf16 matmul of `shape`, with the options in `more`.
std::vector<std::string> show(const std::string& shape, std::vector<std::string> more) {
  std::vector<std::string> args = {"show", "--op", "matmul", "--dtype", "bf16", "--shape", shape};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST_F(CliDatabase, ListShowsEveryWinnerWithConfigTimeAndTemplateAge) {
  const fs::path db = dir_.file("tuned.db");
  seed(db);
  CliRun list = run({"list", "--db", db.string()});
  ASSERT_EQ(list.status, 0) << list.err;
  const std::string model = test_gpu().model_key();
  std::vector<std::string> seeded = row_with(list.out, "512x256x128");
  ASSERT_EQ(seeded.size(), 9u) << list.out;  // the last cell is when it was updated
  seeded.pop_back();
  // 458752 bytes (A and B read, C written once) in 0.25 ms: 1.8 GB/s.
  EXPECT_EQ(seeded, (std::vector<std::string>{model, "matmul bf16->bf16 512x256x128",
                                              kWinner.text(), "0.2500", "0.1", "2", "3/5",
                                              "current"}));
  const std::vector<std::string> old = row_with(list.out, "1024x1024x1024");
  ASSERT_EQ(old.size(), 9u) << list.out;
  EXPECT_EQ(old[7], "old");
  EXPECT_EQ(list.out, run({"list", "--db", db.string(), "--gpu", model}).out);

  // Without --db, TILESMITH_DB picks the file.
  fs::copy_file(db, dir_.file("env-default.db"));
  EXPECT_TRUE(contains(run({"list"}).out, kWinner.text()));
  CliRun other_gpu = run({"list", "--db", db.string(), "--gpu", "no such GPU"});
  EXPECT_EQ(other_gpu.status, 0);
  EXPECT_TRUE(contains(other_gpu.out, "no tuned results for no such GPU")) << other_gpu.out;
}

// `merge`: a database folded into a new one lists the same winners; twice changes nothing; bad
// sources are one-line errors that create nothing.
TEST_F(CliDatabase, MergeCarriesTheWinnersAndTwiceChangesNothing) {
  const fs::path db = dir_.file("tuned.db"), merged = dir_.file("merged.db");
  seed(db);
  CliRun first = run({"merge", db.string(), "--into", merged.string()});
  ASSERT_EQ(first.status, 0) << first.err;
  EXPECT_TRUE(contains(first.out, "7 trials added (0 already there), 3 winners re-decided"))
      << first.out;
  CliRun second = run({"merge", db.string(), "--into", merged.string()});
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_TRUE(contains(second.out, "0 trials added (7 already there)")) << second.out;
  auto winners = [&](const fs::path& file) {
    std::string out = run({"list", "--db", file.string()}).out;
    std::string rows;  // without the updated column, which says when each file stored it
    for (const std::string& row : {"512x256x128", "64x64x64", "1024x1024x1024"}) {
      std::vector<std::string> cells = row_with(out, row);
      if (!cells.empty()) cells.pop_back();
      for (const std::string& cell : cells) rows += cell + "|";
      rows += "\n";
    }
    return rows;
  };
  EXPECT_EQ(winners(merged), winners(db));
  expect_error_line(run({"merge", dir_.file("absent.db").string(), "--into", merged.string()}),
                    "no database at");
  expect_error_line(run({"merge", "--into", merged.string()}), "give at least one SOURCE");
  expect_error_line(run({"merge", merged.string(), "--into", merged.string()}), "into itself");
  expect_error_line(run({"merge", db.string()}), "--into");
  EXPECT_FALSE(fs::exists(dir_.file("absent.db")));
}

TEST_F(CliDatabase, ShowListsTheWinnerThenTrialsBestFirst) {
  const fs::path db = dir_.file("tuned.db");
  seed(db);
  CliRun shown = run(show("512x256x128", {"--gpu", test_gpu().model_key(), "--db", db.string()}));
  ASSERT_EQ(shown.status, 0) << shown.err;
  EXPECT_TRUE(contains(shown.out, "  winner    " + kWinner.text() + "\n"));
  EXPECT_TRUE(contains(shown.out, "0.2500 ms median"));
  EXPECT_TRUE(contains(shown.out, "3 verified of 5"));
  // Ranks: the ok trials fastest first, then the rest in the order they were recorded.
  const std::vector<std::string> lines = split_lines(shown.out);
  auto rule = std::find_if(lines.begin(), lines.end(),
                           [](const std::string& line) { return line.rfind("----", 0) == 0; });
  ASSERT_NE(rule, lines.end()) << shown.out;
  std::vector<std::string> ranked;
  for (auto line = rule + 1; line != lines.end(); ++line) {
    std::vector<std::string> row = cells(*line);
    ranked.push_back(row.at(0) + " " + row.at(1) + " " + row.at(2));
  }
  EXPECT_EQ(ranked,
            (std::vector<std::string>{"1 " + kWinner.text() + " ok", "2 " + kSecond.text() + " ok",
                                      "3 " + kThird.text() + " ok", "4 " + kWrong.text() + " wrong",
                                      "5 " + kSecond.text() + " compile_failed"}));

  CliRun top_two = run(
      show("512x256x128", {"--gpu", test_gpu().model_key(), "--db", db.string(), "--top", "2"}));
  EXPECT_TRUE(contains(top_two.out, kSecond.text()));
  EXPECT_FALSE(contains(top_two.out, kThird.text()));
}

// Trials whose medians are closer to the winner's than half the wider p10-p90 range are within
// its noise: marked ~ and counted, since these timings do not order them.
TEST_F(CliDatabase, ShowSaysWhichTrialsAreWithinTheWinnersNoise) {
  const fs::path path = dir_.file("noisy.db");
  {
    cache::Database db(path);
    db.record_gpu(test_gpu(), {"13.0", "13.0"});
    const cache::TrialKey key{test_gpu().model_key(), kSeeded, template_hash(find_family("matmul"))};
    auto noisy = [](const Config& config, double median_ms, double spread) {
      cache::Trial t = trial(cache::TrialStatus::ok, config, median_ms);
      t.spread = spread;
      return t;
    };
    db.record_trial(key, noisy(kWinner, 0.250, 0.08));  // p10-p90: 0.02 ms wide
    db.record_trial(key, noisy(kSecond, 0.258, 0.02));  // 0.008 ms behind: within 0.01
    db.record_trial(key, noisy(kThird, 0.300, 0.02));   // 0.05 ms behind: apart
    ASSERT_EQ(db.refresh_winner(key)->config, kWinner);
  }
  CliRun shown = run(show("512x256x128", {"--gpu", test_gpu().model_key(), "--db", path.string()}));
  ASSERT_EQ(shown.status, 0) << shown.err;
  EXPECT_TRUE(contains(shown.out, "1 other config is within the winner's timing noise")) << shown.out;
  const std::vector<std::string> lines = split_lines(shown.out);
  const auto rule = std::find_if(lines.begin(), lines.end(),
                                 [](const std::string& line) { return line.rfind("----", 0) == 0; });
  ASSERT_NE(rule, lines.end()) << shown.out;
  auto row_of = [&](const Config& config) {
    for (auto line = rule + 1; line != lines.end(); ++line)
      if (contains(*line, config.text())) return cells(*line);
    return std::vector<std::string>{};
  };
  // rank, config, status, median, vs winner, noise, ...
  EXPECT_EQ(row_of(kWinner).at(4), "+0.0%");
  EXPECT_EQ(row_of(kWinner).at(5), "~");
  EXPECT_EQ(row_of(kSecond).at(4), "+3.2%");
  EXPECT_EQ(row_of(kSecond).at(5), "~");
  EXPECT_EQ(row_of(kThird).at(4), "+20.0%");
  EXPECT_NE(row_of(kThird).at(5), "~");
  // The seeded database's trials are 20% and more apart with 1% spreads: no such line.
  const fs::path seeded = dir_.file("tuned.db");
  seed(seeded);
  EXPECT_FALSE(contains(run(show("512x256x128", {"--gpu", test_gpu().model_key(), "--db", seeded.string()})).out,
                        "timing noise"));
}

// `status` judges each winner alone: current with this build's templates, this NVRTC and, with a
// GPU, this driver (without one, drivers are not compared); stale with older templates, unless
// a current winner replaced it (then not listed), or with another NVRTC.
TEST_F(CliDatabase, StatusSaysWhichWinnersAreStaleAndWhy) {
  const fs::path path = dir_.file("status.db");
  const std::string current = template_hash(find_family("matmul"));
  const Problem fresh{"matmul", DType::bf16, DType::bf16, {64, 64, 64}};
  const Problem recompiled{"matmul", DType::bf16, DType::bf16, {128, 128, 128}};
  const Problem old{"matmul", DType::bf16, DType::bf16, {1024, 1024, 1024}};
  const std::string driver = have_gpu() ? driver::driver_version() : "12.9";
  {
    cache::Database db(path);
    db.record_gpu(test_gpu(), {"13.0", nvrtc_version()});
    auto win = [&](const Problem& problem, const std::string& templates, const std::string& nvrtc,
                   const Config& config) {
      const cache::TrialKey key{test_gpu().model_key(), problem, templates};
      cache::Trial t = trial(cache::TrialStatus::ok, config, 0.1);
      t.toolchain = {driver, nvrtc};
      db.record_trial(key, t);
      ASSERT_TRUE(db.refresh_winner(key));
    };
    win(fresh, current, nvrtc_version(), kWinner);
    win(fresh, "0ld", nvrtc_version(), kSecond);  // replaced by the current winner: not listed
    win(recompiled, current, "11.8", kWinner);
    win(old, "0ld", nvrtc_version(), kThird);
  }
  CliRun status = run({"status", "--gpu", test_gpu().model_key(), "--db", path.string()});
  ASSERT_EQ(status.status, 0) << status.err;
  EXPECT_TRUE(contains(status.out, "NVRTC " + nvrtc_version())) << status.out;
  const std::vector<std::string> fresh_row = row_with(status.out, "64x64x64");
  ASSERT_FALSE(fresh_row.empty()) << status.out;
  EXPECT_EQ(fresh_row.back(), "current");
  EXPECT_TRUE(contains(status.out, "compiled by NVRTC 11.8 (this is " + nvrtc_version()))
      << status.out;
  EXPECT_TRUE(contains(row_with(status.out, "1024x1024x1024").back(), "older templates"))
      << status.out;
  EXPECT_FALSE(contains(status.out, kSecond.text())) << "a replaced winner is not listed";
  EXPECT_TRUE(contains(status.out, "1 of 3 winners current, 2 stale")) << status.out;

  // `tune --stale` takes the two stale shapes (without a GPU: every model's, compiled for
  // --arch), not the current one; with a GPU, only its own model's, which has none here.
  CliRun stale = run({"tune", "--stale", "--budget", "2", "--db", path.string()});
  ASSERT_EQ(stale.status, 0) << stale.err << stale.out;
  if (have_gpu()) {
    EXPECT_TRUE(contains(stale.out, "stale: no stale winners on")) << stale.out;
  } else {
    EXPECT_TRUE(contains(stale.out, "stale: " + recompiled.key() + " on " + test_gpu().model_key() +
                                        ": compiled by NVRTC 11.8"))
        << stale.out;
    EXPECT_TRUE(contains(stale.out, "stale: " + old.key())) << stale.out;
    EXPECT_FALSE(contains(stale.out, "stale: " + fresh.key())) << stale.out;
    EXPECT_TRUE(contains(stale.out, recompiled.key() + ", no GPU: compiling for sm_90a")) << stale.out;
    EXPECT_TRUE(contains(stale.out, old.key() + ", no GPU: compiling for sm_90a")) << stale.out;
  }
}

// A bundle: one GPU model's current winners, each with its winning trial and its cubin (none of
// the losing trials' cubins), as an SQLite file that `merge` folds into another database.
TEST_F(CliDatabase, ABundleCarriesOneModelsWinnersAndTheirCubinsIntoAnotherDatabase) {
  const fs::path db = dir_.file("tuned.db"), bundle = dir_.file("h100.bundle.db"),
                 fresh = dir_.file("fresh.db");
  seed(db);
  const std::string arch = test_gpu().arch();
  {
    cache::Database seeded(db);
    for (const Config& config : {kWinner, kSecond}) {
      CompiledKernel kernel;
      kernel.source_hash = "source-" + config.text();
      kernel.arch = arch;
      kernel.nvrtc_version = "13.0";
      kernel.lowered_names = {"_Z6kernelv"};
      kernel.cubin.bytes = {'\x7f', 'E', 'L', 'F'};
      seeded.put_cubin(kernel);
    }
  }
  const std::string model = test_gpu().model_key();
  CliRun exported = run({"export", "--format", "bundle", "--gpu", model, "--out", bundle.string(),
                         "--db", db.string()});
  ASSERT_EQ(exported.status, 0) << exported.err;
  EXPECT_TRUE(contains(exported.out, "wrote a bundle of 2 winners")) << exported.out;
  {
    cache::Database shipped(bundle, cache::Access::read_only);
    const std::vector<cache::Winner> winners = shipped.winners();
    ASSERT_EQ(winners.size(), 2u);  // 512x256x128 and 64x64x64; not 1024^3 of older templates
    for (const cache::Winner& winner : winners)
      EXPECT_EQ(shipped.trials({model, winner.problem, winner.template_hash}).size(), 1u);
    EXPECT_TRUE(shipped.cubin("source-" + kWinner.text(), arch, "13.0"));
    EXPECT_FALSE(shipped.cubin("source-" + kSecond.text(), arch, "13.0"));  // lost its key
  }
  CliRun merged = run({"merge", bundle.string(), "--into", fresh.string()});
  ASSERT_EQ(merged.status, 0) << merged.err;
  const std::vector<std::string> row = row_with(run({"list", "--db", fresh.string()}).out, "512x256x128");
  ASSERT_FALSE(row.empty());
  EXPECT_EQ(row.at(2), kWinner.text());
  // A bundle needs a file and one GPU model; an existing SQLite file is replaced only by --force.
  expect_error_line(run({"export", "--format", "bundle", "--gpu", model, "--db", db.string()}),
                    "--format bundle needs --out FILE");
  expect_error_line(run({"export", "--format", "bundle", "--out", dir_.file("x.db").string(),
                         "--db", db.string()}),
                    "--format bundle needs --out FILE");
  EXPECT_NE(run({"export", "--format", "bundle", "--gpu", model, "--out", bundle.string(), "--db",
                 db.string()})
                .status,
            0);
  EXPECT_EQ(run({"export", "--format", "bundle", "--gpu", model, "--out", bundle.string(), "--db",
                 db.string(), "--force"})
                .status,
            0);
}

TEST_F(CliDatabase, ShowWithoutAWinnerFails) {
  const fs::path db = dir_.file("tuned.db");
  seed(db);
  const std::vector<std::string> on_test_gpu = {"--gpu", test_gpu().model_key(), "--db", db};
  CliRun missing = run(show("8x8x8", on_test_gpu));
  EXPECT_EQ(missing.status, 1);
  expect_error_line(missing, "no winner for matmul bf16->bf16 8x8x8 on " + test_gpu().model_key());
  // 1024^3 has a winner, but from older templates: pointed out, and still a failure.
  CliRun old = run(show("1024x1024x1024", on_test_gpu));
  expect_error_line(old, "no winner for matmul bf16->bf16 1024x1024x1024");
  EXPECT_TRUE(contains(old.out, "only from older templates")) << old.out;
  expect_error_line(run(show("8x8x8", {"--db", dir_.file("absent.db")})), "no database at");
  EXPECT_FALSE(fs::exists(dir_.file("absent.db")));
}

// Without --gpu, show asks about the local GPU's model; without a GPU, about every model.
TEST_F(CliDatabase, ShowWithoutGpuUsesTheLocalModelElseEveryModel) {
  const fs::path db = dir_.file("tuned.db");
  seed(db);
  CliRun shown = run(show("512x256x128", {"--db", db}));
  if (!have_gpu()) {
    ASSERT_EQ(shown.status, 0) << shown.err;
    EXPECT_TRUE(contains(shown.out, "512x256x128 on " + test_gpu().model_key() + "\n"));
    EXPECT_TRUE(contains(shown.out, "  winner    " + kWinner.text() + "\n"));
  } else {
    expect_error_line(
        shown, "tuned on other GPUs: '" + test_gpu().model_key() + "'; choose one with --gpu");
  }
}

TEST_F(CliDatabase, ExportJsonHasTheCurrentWinnersWithTheirConfigAndGpu) {
  const fs::path db = dir_.file("tuned.db"), out = dir_.file("winners.json");
  seed(db);
  CliRun exported = run({"export", "--format", "json", "--out", out.string(), "--db", db.string()});
  ASSERT_EQ(exported.status, 0) << exported.err;
  EXPECT_EQ(exported.out, "wrote 2 winners to " + out.string() + "\n");
  const nlohmann::json document = nlohmann::json::parse(read_bytes(out));
  EXPECT_EQ(document["tilesmith_export_version"], 1);
  ASSERT_EQ(document["winners"].size(), 2u);  // the 1024^3 winner has older templates
  const nlohmann::json& winners = document["winners"];
  auto seeded = std::find_if(winners.begin(), winners.end(), [](const nlohmann::json& entry) {
    return entry["shape"] == nlohmann::json({512, 256, 128});
  });
  ASSERT_NE(seeded, winners.end()) << document.dump(2);
  const nlohmann::json& winner = *seeded;
  EXPECT_EQ(winner["gpu_model"], test_gpu().model_key());
  EXPECT_EQ(winner["gpu_name"], test_gpu().name);
  EXPECT_EQ(winner["dtype"], "bf16");
  EXPECT_EQ(winner["config"], nlohmann::json(kWinner.values));
  EXPECT_DOUBLE_EQ(winner["median_ms"].get<double>(), 0.25);
  EXPECT_NEAR(winner["tflops"].get<double>(), 2.0 * 512 * 256 * 128 / 0.25e9, 1e-9);
  EXPECT_EQ(winner["trials_ok"], 3);
  EXPECT_EQ(winner["trials_total"], 5);
  EXPECT_EQ(winner["template_hash"], template_hash(find_family("matmul")));

  CliRun all = run({"export", "--include-old", "--db", db.string()});  // json to stdout
  ASSERT_EQ(all.status, 0) << all.err;
  EXPECT_EQ(nlohmann::json::parse(all.out)["winners"].size(), 3u);
}

TEST_F(CliDatabase, ExportCsvHasAHeaderAndOneRowPerWinner) {
  const fs::path db = dir_.file("tuned.db");
  seed(db);
  CliRun csv = run({"export", "--format", "csv", "--db", db.string()});
  ASSERT_EQ(csv.status, 0) << csv.err;
  const std::vector<std::string> lines = split_lines(csv.out);
  ASSERT_EQ(lines.size(), 3u) << csv.out;
  EXPECT_EQ(lines[0],
            "gpu_model,gpu_name,op,dtype,out_dtype,shape,options,config,median_ms,tflops,"
            "template_hash,source_hash,updated_at");
  std::string config = kWinner.text();
  std::replace(config.begin(), config.end(), ',', ';');
  const std::string row = test_gpu().model_key() + ",tilesmith test GPU,matmul,bf16,bf16,";
  EXPECT_EQ(std::count_if(lines.begin() + 1, lines.end(),
                          [&](const std::string& line) { return line.rfind(row, 0) == 0; }),
            2);
  // Ordered by problem key, so 512x256x128 comes before 64x64x64.
  EXPECT_EQ(lines[1].rfind(row + "512x256x128,," + config + ",0.25,", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind(row + "64x64x64,", 0), 0u) << lines[2];
}

// ---------------------------------------------------------------------------------------------
// misses: the shapes the runtime found untuned, recorded here through the cache API

// The GPU model `tune --misses` takes misses from: the local GPU's, else (no GPU) any model.
DeviceTarget miss_gpu() { return have_gpu() ? driver::describe_device(0) : test_gpu(); }

// Records `count` misses of `problem` on miss_gpu(), under `templates` (default: this build's).
void record_misses(const fs::path& path, const Problem& problem, int count,
                   std::string templates = "") {
  cache::Database db(path);
  db.record_gpu(miss_gpu(), {"13.0", "13.0"});
  if (templates.empty()) templates = template_hash(find_family("matmul"));
  for (int i = 0; i < count; ++i) db.record_miss({miss_gpu().model_key(), problem, templates});
}

TEST_F(CliMisses, ListsEachMissWithItsCountAndTemplateAge) {
  const fs::path db = dir_.file("tuned.db");
  seed(db);
  const Problem untuned{"matmul", DType::f16, DType::f32, {100, 200, 300}};
  const Problem stale{"matmul", DType::bf16, DType::bf16, {7, 8, 9}};
  record_misses(db, untuned, 3);
  record_misses(db, stale, 1, "0ld");
  CliRun misses = run({"misses", "--db", db.string()});
  ASSERT_EQ(misses.status, 0) << misses.err;
  const std::string model = miss_gpu().model_key();
  std::vector<std::string> row = row_with(misses.out, "100x200x300");
  ASSERT_EQ(row.size(), 5u) << misses.out;
  EXPECT_EQ(std::vector<std::string>(row.begin(), row.end() - 1),
            (std::vector<std::string>{model, untuned.key(), "current", "3"}));
  EXPECT_TRUE(std::regex_match(row[4], std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"))) << row[4];
  row = row_with(misses.out, "7x8x9");
  ASSERT_EQ(row.size(), 5u) << misses.out;
  EXPECT_EQ(row[2], "old");
  EXPECT_EQ(row[3], "1");
  // Most missed first.
  EXPECT_LT(misses.out.find("100x200x300"), misses.out.find("7x8x9")) << misses.out;
  // The winners seed() stored are tuned shapes, not misses.
  EXPECT_FALSE(contains(misses.out, "512x256x128")) << misses.out;

  EXPECT_EQ(run({"misses", "--db", db.string(), "--gpu", model}).out, misses.out);
  CliRun other_gpu = run({"misses", "--db", db.string(), "--gpu", "no such GPU"});
  EXPECT_EQ(other_gpu.status, 0) << other_gpu.err;
  EXPECT_EQ(other_gpu.out, "no misses for no such GPU in " + db.string() + "\n");
  expect_error_line(run({"misses", "--db", dir_.file("absent.db")}), "no database at");
  EXPECT_FALSE(fs::exists(dir_.file("absent.db")));
}

TEST_F(CliMisses, HelpNamesTheLoopBackToTune) {
  CliRun help = run({"misses", "--help"});
  ASSERT_EQ(help.status, 0) << help.err;
  EXPECT_EQ(help.out.rfind("usage: tilesmith misses [--gpu MODEL_KEY] [--db PATH]\n", 0), 0u)
      << help.out;
  EXPECT_TRUE(contains(help.out, "'tilesmith tune --misses'")) << help.out;
}

TEST_F(CliTune, MissesSweepsEachMissedShapeLikeAShape) {
  const fs::path db = dir_.file("tuned.db");
  const Problem missed{"matmul", DType::bf16, DType::bf16, {64, 64, 64}};
  record_misses(db, missed, 2);
  CliRun tune = run({"tune", "--misses", "--budget", "2", "--strategy", "random", "--db", db});
  ASSERT_EQ(tune.status, 0) << tune.out << tune.err;
  std::smatch compiled;
  ASSERT_TRUE(std::regex_search(tune.out, compiled,
                                std::regex("compiled +(\\d+) kernels, 0 reused from the database, 0 compile failures")))
      << tune.out;
  EXPECT_EQ(std::stoi(compiled[1]), 2) << tune.out;  // --budget applies to the missed shape
  CliRun misses = run({"misses", "--db", db.string()});
  ASSERT_EQ(misses.status, 0) << misses.err;
  if (!have_gpu()) {
    EXPECT_TRUE(contains(tune.out,
                         "misses: 1 shape missed on any GPU model with the current templates\n"
                         "  no GPU: compiling them for sm_90a"))
        << tune.out;
    EXPECT_TRUE(contains(tune.out, missed.key() + ", no GPU: compiling for sm_90a"));
    EXPECT_TRUE(contains(tune.out, "timing needs a GPU: no CUDA driver/GPU found"));
    EXPECT_FALSE(contains(tune.out, "winner"));
    const std::vector<std::string> row = row_with(misses.out, missed.key());
    ASSERT_EQ(row.size(), 5u) << misses.out;
    EXPECT_EQ(row[3], "2");  // nothing was timed: still untuned
  } else {
    EXPECT_TRUE(contains(tune.out, "misses: 1 shape missed on " + miss_gpu().model_key()))
        << tune.out;
    EXPECT_TRUE(std::regex_search(tune.out, std::regex("\n  winner    \\S+=\\S+\n"))) << tune.out;
    EXPECT_TRUE(contains(misses.out, "no misses in ")) << misses.out;  // the winner cleared it
  }
}

TEST_F(CliTune, MissesWithNothingMissedSaysSoAndSucceeds) {
  const fs::path db = dir_.file("tuned.db");
  seed(db);
  record_misses(db, {"matmul", DType::bf16, DType::bf16, {64, 64, 64}}, 1, "0ld");
  CliRun tune = run({"tune", "--misses", "--db", db.string()});
  EXPECT_EQ(tune.status, 0) << tune.err;
  EXPECT_TRUE(contains(tune.out, "misses: no shapes missed on ")) << tune.out;
  EXPECT_TRUE(contains(tune.out,
                       " with the current templates to tune; 1 under older templates left alone\n"))
      << tune.out;
  EXPECT_FALSE(contains(tune.out, "compiled")) << tune.out;
  // Misses alone only read: a mistyped --db is an error, and creates nothing.
  expect_error_line(run({"tune", "--misses", "--db", dir_.file("absent.db")}), "no database at");
  EXPECT_FALSE(fs::exists(dir_.file("absent.db")));
}

// ---------------------------------------------------------------------------------------------
// Files that are not tilesmith's: refused by every command that opens a database, untouched

class CliBrokenDatabase : public CliTest {
 protected:
  void expect_refused_by_every_command(const fs::path& db, const std::string& why) {
    const std::string before = read_bytes(db);
    const std::vector<std::vector<std::string>> commands = {
        {"list"},
        show("64x64x64", {}),
        {"export", "--format", "json", "--out", (db.parent_path() / "out.json").string()},
        {"export", "--format", "csv"},
        {"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64", "--budget", "1"}};
    for (std::vector<std::string> command : commands) {
      SCOPED_TRACE(command[0]);
      command.insert(command.end(), {"--db", db.string()});
      CliRun refused = run(command);
      expect_error_line(refused, why);
      EXPECT_TRUE(contains(refused.err, "refusing to modify it"));
    }
    EXPECT_EQ(read_bytes(db), before);
    // No journal, WAL or export file was left beside it either.
    std::vector<fs::path> entries(fs::directory_iterator(db.parent_path()), {});
    EXPECT_EQ(entries, std::vector<fs::path>{db});
  }
};

TEST_F(CliBrokenDatabase, RandomBytesAreRefusedAndLeftUntouched) {
  fs::create_directory(dir_.file("db"));
  const fs::path db = dir_.file("db") / "noise.db";
  std::mt19937 bytes(42);
  std::string noise(8192, '\0');
  for (char& c : noise) c = static_cast<char>(bytes());
  std::ofstream(db, std::ios::binary) << noise;
  expect_refused_by_every_command(db, "not an SQLite database");
}

TEST_F(CliBrokenDatabase, ForeignSqliteDatabaseIsRefusedAndLeftUntouched) {
  fs::create_directory(dir_.file("db"));
  const fs::path db = dir_.file("db") / "users.db";
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &raw), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(raw,
                         "PRAGMA application_id = 305419896;"
                         "CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT);"
                         "INSERT INTO users (name) VALUES ('ada');",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(raw);
  expect_refused_by_every_command(db, "not a tilesmith database (application_id 0x12345678");
}

// ---------------------------------------------------------------------------------------------
// devices and tune: what they print depends on whether this machine has a GPU

// plot: a sweep's landscape over two parameters (the fastest verified trial per cell, a wrong
// one never shown, the winner outlined) and a roofline of the winners of a GPU model whose roofs
// are known; unknown roofs and parameters are errors naming them.
TEST_F(CliDatabase, PlotDrawsALandscapeAndARoofline) {
  const fs::path path = dir_.file("plot.db");
  seed(path);
  const std::string model = test_gpu().model_key();
  const fs::path landscape = dir_.file("landscape.svg");
  CliRun drawn = run({"plot", "landscape", "--op", "matmul", "--dtype", "bf16", "--shape", "512x256x128",
                      "--x", "block_m", "--y", "block_n", "--gpu", model, "--out", landscape.string(),
                      "--db", path.string()});
  ASSERT_EQ(drawn.status, 0) << drawn.err;
  const std::string svg = testing::read_bytes(landscape);
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  for (const char* time : {">0.2500<", ">0.3000<", ">0.4000<"}) EXPECT_TRUE(contains(svg, time)) << time;
  EXPECT_FALSE(contains(svg, ">0.1000<")) << "a wrong trial was drawn";
  EXPECT_TRUE(contains(svg, "stroke-width=\"3\"")) << "no winner outlined";
  CliRun bad_param = run({"plot", "landscape", "--op", "matmul", "--dtype", "bf16", "--shape",
                          "512x256x128", "--x", "block_q", "--y", "block_n", "--gpu", model,
                          "--out", dir_.file("x.svg").string(), "--db", path.string()});
  EXPECT_NE(bad_param.status, 0);
  expect_error_line(bad_param, "no parameter block_q");
  CliRun unknown_roofs = run({"plot", "roofline", "--gpu", model, "--out",
                              dir_.file("r.svg").string(), "--db", path.string()});
  EXPECT_NE(unknown_roofs.status, 0);
  expect_error_line(unknown_roofs, "the roofs of tilesmith test GPU are not known");

  DeviceTarget h100 = test_gpu();  // a name with known roofs, an SM count no real one has
  h100.name = "NVIDIA H100 80GB HBM3";
  {
    cache::Database db(path);
    db.record_gpu(h100, {"13.0", "13.0"});
    const cache::TrialKey key{h100.model_key(), kSeeded, template_hash(find_family("matmul"))};
    db.record_trial(key, trial(cache::TrialStatus::ok, kWinner, 0.25));
    ASSERT_TRUE(db.refresh_winner(key));
  }
  const fs::path roofline = dir_.file("roofline.svg");
  CliRun roofs = run({"plot", "roofline", "--gpu", h100.model_key(), "--out", roofline.string(),
                      "--db", path.string()});
  ASSERT_EQ(roofs.status, 0) << roofs.err;
  const std::string roof_svg = testing::read_bytes(roofline);
  EXPECT_TRUE(contains(roof_svg, "989 TFLOP/s dense tensor peak, 3350 GB/s")) << roof_svg.substr(0, 600);
  EXPECT_TRUE(contains(roof_svg, ">matmul<"));
  EXPECT_TRUE(contains(roof_svg, "<circle")) << "no winner drawn";
}

// verify needs the GPU it checks the winners on: without one it says so and fails; with one, a
// database without winners is said to have none. A missing database is an error either way.
TEST_F(CliDatabase, VerifySaysWhatItNeedsAndWhatItFound) {
  const fs::path path = dir_.file("empty.db");
  { cache::Database created(path); }
  CliRun verify = run({"verify", "--db", path.string()});
  if (!have_gpu()) {
    EXPECT_EQ(verify.status, 1);
    expect_error_line(verify, "verify: needs a GPU: no CUDA driver/GPU found");
  } else {
    EXPECT_EQ(verify.status, 0) << verify.err;
    EXPECT_TRUE(contains(verify.out, "no winners for " + driver::describe_device(0).model_key()))
        << verify.out;
  }
  CliRun missing = run({"verify", "--db", dir_.file("nowhere.db").string()});
  EXPECT_NE(missing.status, 0);
  EXPECT_FALSE(fs::exists(dir_.file("nowhere.db")));
}

TEST_F(CliDevices, SaysWhyThereIsNoGpuOrListsEachOne) {
  CliRun count = run({"devices", "--count"});
  CliRun devices = run({"devices"});
  ASSERT_EQ(count.status, 0) << count.err;
  ASSERT_EQ(devices.status, 0) << devices.err;
  if (!have_gpu()) {
    EXPECT_EQ(count.out, "0\n");
    EXPECT_EQ(devices.out.rfind("no CUDA driver/GPU found", 0), 0u) << devices.out;
    EXPECT_TRUE(contains(devices.out, "'tilesmith tune' and 'tilesmith source' still render"));
  } else {
    EXPECT_EQ(count.out, std::to_string(driver::device_count()) + "\n");
    EXPECT_EQ(devices.out.rfind("CUDA driver ", 0), 0u) << devices.out;
    EXPECT_TRUE(contains(devices.out, driver::describe_device(0).model_key())) << devices.out;
  }
}

TEST_F(CliTune, SmallRandomSweepCompilesOrFindsAWinner) {
  const fs::path db = dir_.file("tuned.db");
  CliRun tune = run({"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64", "--budget",
                     "4", "--strategy", "random", "--db", db.string()});
  ASSERT_EQ(tune.status, 0) << tune.out << tune.err;
  EXPECT_TRUE(contains(tune.out, "database: " + db.string() + "\n"));
  std::smatch compiled;
  // A new database: every kernel is compiled, none reused. Configs that differ only in kernel
  // arguments (a ring's depth, the tile order) share one kernel.
  const std::regex compiled_line(
      "compiled +(\\d+) kernels(?: \\(and (\\d+) configs took one compiled for a config with the "
      "same kernels\\))?, 0 reused from the database, 0 compile failures");
  ASSERT_TRUE(std::regex_search(tune.out, compiled, compiled_line)) << tune.out;
  const int sharing = compiled[2].matched ? std::stoi(compiled[2]) : 0;
  EXPECT_EQ(std::stoi(compiled[1]) + sharing, 4) << tune.out;  // --budget 4, and every candidate compiles
  CliRun list = run({"list", "--db", db.string()});
  ASSERT_EQ(list.status, 0) << list.err;
  if (!have_gpu()) {
    EXPECT_TRUE(contains(tune.out, "matmul bf16->bf16 64x64x64, no GPU: compiling for sm_90a"));
    EXPECT_TRUE(contains(tune.out, "timing needs a GPU: no CUDA driver/GPU found"));
    EXPECT_TRUE(contains(tune.out, "rendered and compiled 4 configs for sm_90a"));
    EXPECT_FALSE(contains(tune.out, "winner"));
    EXPECT_TRUE(contains(list.out, "no tuned results")) << list.out;
  } else {
    std::smatch winner;
    ASSERT_TRUE(std::regex_search(tune.out, winner, std::regex("\n  winner    (\\S+=\\S+)\n")))
        << tune.out;
    EXPECT_TRUE(contains(tune.out, " ms median"));
    EXPECT_TRUE(contains(list.out, driver::describe_device(0).model_key())) << list.out;
    EXPECT_TRUE(contains(list.out, winner[1].str())) << list.out;
  }
}

// --gpus: a sweep process per GPU, each line of theirs led by its GPU, then the winners over
// every GPU's trials; without a GPU, one process compiles the space as `tune` does.
TEST_F(CliTune, GpusSpreadsTheSweepOverTheGpusOrWithoutOneCompilesOnce) {
  const std::vector<std::string> tune = {
      "tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64", "--budget", "4",
      "--strategy", "random", "--db", dir_.file("gpus.db").string()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = tune;
    args.insert(args.end(), extra.begin(), extra.end());
    return run(args);
  };
  testing::expect_error_line(with({"--gpus", "x"}),
                             "bad --gpus 'x': expected 'all' or GPU ordinals");
  testing::expect_error_line(with({"--gpus", "0,0"}), "--gpus names GPU 0 twice");
  testing::expect_error_line(with({"--gpus", "0,"}), "bad --gpus '0,'");
  testing::expect_error_line(with({"--gpus", "all", "--device", "0"}),
                             "--gpus and --device both choose GPUs: give one of them");
  const CliRun spread = with({"--gpus", "all"});
  ASSERT_EQ(spread.status, 0) << spread.out << spread.err;
  if (!have_gpu()) {
    EXPECT_TRUE(contains(spread.err, "tilesmith: note: --gpus: no GPU here")) << spread.err;
    EXPECT_TRUE(contains(spread.out, "rendered and compiled 4 configs for sm_90a")) << spread.out;
    return;
  }
  const int gpus = driver::device_count();
  testing::expect_error_line(with({"--gpus", std::to_string(gpus)}),
                             "--gpus names GPU " + std::to_string(gpus));
  const std::string model = driver::describe_device(0).model_key();
  EXPECT_TRUE(contains(spread.out, "gpu 0: " + model + ", ")) << spread.out;
  EXPECT_TRUE(contains(spread.out, "[gpu 0] database: ")) << spread.out;
  EXPECT_TRUE(contains(spread.out, "[gpu 0]   winner    ")) << spread.out;
  EXPECT_TRUE(
      contains(spread.out, "winners over the trials of every GPU:\nmatmul bf16->bf16 64x64x64 on " +
                               model + "\n  winner    "))
      << spread.out;
}

// Progress, not on a terminal: a plain line per ten candidates with the time left, and the last
// line without it.
TEST_F(CliTune, ProgressLinesCountAndEstimateTheTimeLeft) {
  CliRun tune = run({"tune", "--op", "matmul", "--dtype", "bf16", "--shape", "64x64x64", "--budget",
                     "12", "--strategy", "random", "--jobs", "2", "--db", dir_.file("p.db").string()});
  ASSERT_EQ(tune.status, 0) << tune.out << tune.err;
  const std::string done = have_gpu() ? "ok" : "compiled";
  EXPECT_TRUE(std::regex_search(
      tune.out, std::regex("\\[10/12\\] " + done + " \\d+  failed \\d+  eta \\d+s")))
      << tune.out;
  EXPECT_TRUE(std::regex_search(tune.out, std::regex("\\[12/12\\] " + done + " \\d+  failed \\d+\n")) ||
              std::regex_search(tune.out, std::regex("\\[12/12\\] " + done + " \\d+  failed \\d+  best ")))
      << tune.out;
  EXPECT_FALSE(contains(tune.out, "|#")) << "no bar when not on a terminal: " << tune.out;
}

}  // namespace
}  // namespace tilesmith
