// The runtime: correct results on the issue's shapes, no NVRTC on a warm database, clear errors.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <thread>

#include "cache/database.hpp"
#include "generator/compiled_kernel.hpp"
#include "support/cli_runner.hpp"
#include "support/matmul_configs.hpp"
#include "support/test_support.hpp"
#include "templates/registry.hpp"
#include "tilesmith/runtime.hpp"
#include "tuner/workbench.hpp"

namespace tilesmith {
namespace {

using testing::TempDir;

// The runtime's arguments for `problem` (shape MxNxK or BxMxNxK, matmul's options), on the
// bench's tensors: A, B, the epilogue's inputs, C.
MatmulArgs args_for(const tuner::Workbench& bench, const Problem& problem) {
  const auto& address = bench.tensor_addresses();
  auto option = [&](const char* name) {
    auto it = problem.options.find(name);
    return it == problem.options.end() ? std::string() : it->second;
  };
  MatmulArgs args;
  std::size_t next = 0;
  args.a = reinterpret_cast<const void*>(address[next++]);
  args.b = reinterpret_cast<const void*>(address[next++]);
  if (option("bias") == "1") args.bias = reinterpret_cast<const void*>(address[next++]);
  if (option("residual") == "1") args.residual = reinterpret_cast<const void*>(address[next++]);
  args.c = reinterpret_cast<void*>(address[next]);
  const std::size_t at = problem.shape.size() == 4 ? 1 : 0;
  if (at) args.batch = problem.shape[0];
  args.m = problem.shape[at];
  args.n = problem.shape[at + 1];
  args.k = problem.shape[at + 2];
  args.dtype = problem.dtype;
  args.out_dtype = problem.out_dtype;
  if (option("a") == "col") args.a_layout = Layout::column_major;
  if (option("b") == "col") args.b_layout = Layout::column_major;
  const std::string act = option("act");
  if (act == "relu") args.activation = Activation::relu;
  if (act == "gelu") args.activation = Activation::gelu;
  if (act == "silu") args.activation = Activation::silu;
  return args;
}

// Stores `config` as the winner for `problem` on `device`, as a sweep with one ok trial would.
// This process's driver and NVRTC: what the runtime requires of a winner.
cache::Toolchain this_toolchain() { return {driver::driver_version(), nvrtc_version()}; }

// Stores `config` as `problem`'s winner, timed with `toolchain` (default: this one).
void store_winner(const std::filesystem::path& path, const DeviceTarget& device,
                  const Problem& problem, const Config& config,
                  const cache::Toolchain& toolchain = this_toolchain()) {
  const Family& family = find_family(problem.op);
  cache::Database db(path);
  db.record_gpu(device, toolchain);
  const cache::TrialKey key{device.model_key(), problem, template_hash(family)};
  cache::Trial trial;
  trial.config = config;
  trial.toolchain = toolchain;
  trial.source_hash = render(family, config, problem).hash;
  trial.status = cache::TrialStatus::ok;
  trial.median_ms = trial.min_ms = 0.05;
  trial.repetitions = 10;
  db.record_trial(key, trial);
  ASSERT_TRUE(db.refresh_winner(key).has_value());
}

// Runs the runtime's matmul for `problem` on fresh inputs and checks it against the reference.
void expect_correct_matmul(Runtime& runtime, const Problem& problem, std::uint64_t seed) {
  tuner::Workbench bench(find_family(problem.op), problem, driver::describe_device(0));
  bench.refresh_inputs(seed);
  runtime.matmul(args_for(bench, problem));
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the runtime's matmul");
  const tuner::Verification result = bench.check_output();
  EXPECT_TRUE(result.passed) << problem.key() << ": " << result.detail;
}

TEST(GpuRuntime, MatmulMatchesReferenceOnIssueShapes) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({.database = dir.file("runtime.db")});
  const Family& family = find_family("matmul");
  DeviceTarget device = driver::describe_device(0);
  std::uint64_t seed = 11;
  for (DType dtype : {DType::bf16, DType::f16}) {
    for (auto shape : std::vector<std::vector<std::int64_t>>{
             {1, 1, 1}, {17, 33, 65}, {1000, 1000, 1000}, {4093, 4093, 4093}, {16, 4096, 4096}}) {
      for (DType out : {dtype, DType::f32}) {
        Problem problem{"matmul", dtype, out, shape};
        tuner::Workbench bench(family, problem, device);
        bench.refresh_inputs(seed++);
        runtime.matmul(args_for(bench, problem));
        TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the runtime's matmul");
        tuner::Verification result = bench.check_output();
        EXPECT_TRUE(result.passed) << problem.key() << ": " << result.detail;
        EXPECT_EQ(result.nonfinite, 0u) << problem.key();
      }
    }
  }
}

// Layouts, batches and the fused epilogue through the runtime's arguments: the problem it
// builds from them is the one the reference checks (options included), with the default config.
TEST(GpuRuntime, LayoutsBatchesAndEpiloguesMatchTheReference) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({.database = dir.file("runtime.db")});
  std::uint64_t seed = 71;
  const std::vector<Problem> problems = {
      {"matmul", DType::bf16, DType::bf16, {1000, 1000, 1000}, {{"b", "col"}}},
      {"matmul", DType::bf16, DType::bf16, {257, 1031, 517}, {{"a", "col"}, {"act", "gelu"}, {"bias", "1"}}},
      {"matmul", DType::f16, DType::f32, {3, 129, 72, 264}, {{"a", "col"}, {"b", "col"}, {"residual", "1"}}},
      {"matmul", DType::bf16, DType::bf16, {4, 512, 512, 512},
       {{"b", "col"}, {"act", "silu"}, {"bias", "1"}, {"residual", "1"}}},
      {"matmul", DType::bf16, DType::bf16, {16, 4096, 4096}, {{"b", "col"}, {"act", "relu"}}},
  };
  for (const Problem& problem : problems) {
    expect_correct_matmul(runtime, problem, seed++);
    const DispatchInfo info = runtime.describe_matmul([&] {
      tuner::Workbench bench(find_family("matmul"), problem, driver::describe_device(0));
      return args_for(bench, problem);
    }());
    EXPECT_EQ(info.source, KernelSource::memory) << problem.key() << ": one entry per problem";
  }
}

// A column-major A of one row, packed, runs as the row-major problem (its one stored column is
// that row); a strided view of such a column (rows 8 elements apart) keeps its layout: both
// calls of one shape, each right, the second not served by the first's entry.
TEST(GpuRuntime, AnOperandOfOneRowRunsAsItsOtherLayoutOnlyWhenPacked) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({.database = dir.file("runtime.db")});
  const Problem problem{"matmul", DType::bf16, DType::bf16, {1, 300, 520}, {{"a", "col"}}};
  tuner::Workbench bench(find_family("matmul"), problem, driver::describe_device(0));
  bench.refresh_inputs(83);
  MatmulArgs args = args_for(bench, problem);
  runtime.matmul(args);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the packed call");
  tuner::Verification result = bench.check_output();
  EXPECT_TRUE(result.passed) << "packed: " << result.detail;
  // The same A, each element 8 apart (a column of a k x 8 matrix), 0xff (NaN) between.
  std::vector<std::uint16_t> column(520), strided(520 * 8, 0xffff);
  TILESMITH_CU(driver::api().cuMemcpyDtoH(column.data(), bench.tensor_addresses()[0], 520 * 2),
               "reading A");
  for (std::size_t i = 0; i < column.size(); ++i) strided[i * 8] = column[i];
  driver::DeviceBuffer view(strided.size() * 2, "A's strided view");
  TILESMITH_CU(driver::api().cuMemcpyHtoD(view.address(), strided.data(), strided.size() * 2),
               "writing A's strided view");
  args.a = reinterpret_cast<const void*>(view.address());
  args.lda = 8;
  bench.refresh_inputs(83);  // the same inputs again, C poisoned
  runtime.matmul(args);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the strided call");
  result = bench.check_output();
  EXPECT_TRUE(result.passed) << "strided: " << result.detail;
}

TEST(GpuRuntime, WarmDatabaseNeedsNoCompiler) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  MatmulArgs shape;
  shape.m = 200;
  shape.n = 136;
  shape.k = 72;
  {
    Runtime cold({.database = dir.file("runtime.db")});
    DispatchInfo info = cold.describe_matmul(shape);
    EXPECT_EQ(info.source, KernelSource::default_compiled);
    EXPECT_FALSE(info.tuned);
    EXPECT_EQ(cold.compilations(), 1);
    EXPECT_EQ(cold.describe_matmul(shape).source, KernelSource::memory);
    EXPECT_EQ(cold.compilations(), 1);
  }
  Runtime warm({.database = dir.file("runtime.db")});
  EXPECT_EQ(warm.describe_matmul(shape).source, KernelSource::default_cached);
  EXPECT_EQ(warm.compilations(), 0);
}

// With the JIT off (RuntimeOptions::jit = false, or TILESMITH_JIT=off), stored kernels only: a
// shape whose default kernel an earlier process compiled runs without NVRTC, an untuned shape
// borrows the nearest tuned shape's stored kernel, and a shape with nothing stored is an error
// naming it and the switch, never a compile.
TEST(GpuRuntime, WithTheJitOffOnlyStoredKernelsRun) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  const DeviceTarget device = driver::describe_device(0);
  const Problem seen{"matmul", DType::f16, DType::f16, {200, 136, 72}};  // no f16 winner: default
  const Problem tuned{"matmul", DType::bf16, DType::bf16, {1024, 1024, 1024}};
  const Config config = testing::tile_config(64, 128, 32, 2, 2, 3, 1);  // not the default
  store_winner(dir.file("runtime.db"), device, tuned, config);
  if (HasFatalFailure()) return;
  {
    Runtime jit({.database = dir.file("runtime.db"), .jit = true});
    expect_correct_matmul(jit, seen, 5);   // the default config, compiled and stored
    expect_correct_matmul(jit, tuned, 6);  // the winner, compiled and stored
    EXPECT_EQ(jit.compilations(), 2);
  }
  Runtime production({.database = dir.file("runtime.db"), .jit = false});
  tuner::Workbench seen_bench(find_family("matmul"), seen, device);
  EXPECT_EQ(production.describe_matmul(args_for(seen_bench, seen)).source,
            KernelSource::default_cached);
  expect_correct_matmul(production, seen, 7);
  const Problem untuned{"matmul", DType::bf16, DType::bf16, {1000, 1000, 1032}};
  expect_correct_matmul(production, untuned, 8);
  tuner::Workbench bench(find_family("matmul"), untuned, device);
  const DispatchInfo info = production.describe_matmul(args_for(bench, untuned));
  EXPECT_EQ(info.config, config.text());
  EXPECT_EQ(info.tuned_for, tuned.key());
  const Problem unseen{"matmul", DType::bf16, DType::f32, {1000, 1000, 1032}};  // no winner, nothing stored
  tuner::Workbench other(find_family("matmul"), unseen, device);
  try {
    production.matmul(args_for(other, unseen));
    ADD_FAILURE() << "a shape with no stored kernel must not run with the JIT off";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find(unseen.key()), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("TILESMITH_JIT=off"), std::string::npos) << error.what();
  }
  EXPECT_EQ(production.compilations(), 0);

  // The same from the environment, and a value that is neither on nor off is refused.
  ::setenv("TILESMITH_JIT", "off", 1);
  {
    Runtime from_environment({.database = dir.file("runtime.db")});
    EXPECT_THROW(from_environment.matmul(args_for(other, unseen)), Error);
    EXPECT_EQ(from_environment.compilations(), 0);
  }
  ::setenv("TILESMITH_JIT", "maybe", 1);
  EXPECT_THROW(Runtime({.database = dir.file("runtime.db")}), InvalidArgument);
  ::unsetenv("TILESMITH_JIT");
}

// A miss compiles (NVRTC, hundreds of milliseconds) with no lock of the runtime's map held: a
// second thread's warm lookups of another shape go on meanwhile at their usual speed, and
// threads missing one shape together wait for one compile of it.
TEST(GpuRuntime, ACompilingMissNeverStallsTheWarmCallsOfOtherThreads) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  const DeviceTarget device = driver::describe_device(0);
  Runtime runtime({.database = dir.file("runtime.db")});
  const Problem warm{"matmul", DType::bf16, DType::bf16, {256, 256, 256}};
  tuner::Workbench warm_bench(find_family("matmul"), warm, device);
  const MatmulArgs warm_args = args_for(warm_bench, warm);
  runtime.describe_matmul(warm_args);  // resolved before the clock starts
  const Problem cold{"matmul", DType::f16, DType::f32, {300, 520, 136}};
  tuner::Workbench cold_bench(find_family("matmul"), cold, device);
  cold_bench.refresh_inputs(9);
  const MatmulArgs cold_args = args_for(cold_bench, cold);

  using Clock = std::chrono::steady_clock;
  auto milliseconds = [](Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  std::atomic<bool> finished{false};
  std::vector<std::exception_ptr> failures(4);
  double compile_ms = 0;
  std::vector<std::thread> missing;
  for (int t = 0; t < 4; ++t)
    missing.emplace_back([&, t] {
      try {
        const auto start = Clock::now();
        runtime.matmul(cold_args);
        if (t == 0) compile_ms = milliseconds(Clock::now() - start);
      } catch (...) {
        failures[t] = std::current_exception();
      }
      finished = true;
    });
  double worst_ms = 0;
  int calls = 0;
  while (!finished) {
    const auto start = Clock::now();
    runtime.describe_matmul(warm_args);
    worst_ms = std::max(worst_ms, milliseconds(Clock::now() - start));
    ++calls;
  }
  for (std::thread& thread : missing) thread.join();
  for (const std::exception_ptr& failure : failures)
    if (failure) std::rethrow_exception(failure);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the missed shape");
  const tuner::Verification result = cold_bench.check_output();
  EXPECT_TRUE(result.passed) << result.detail;
  EXPECT_EQ(runtime.compilations(), 2) << "the four threads missing one shape compiled it once";
  EXPECT_GT(compile_ms, 50) << "the miss must have compiled for the timing to mean anything";
  EXPECT_GT(calls, 100);
  EXPECT_LT(worst_ms, 10) << "a warm lookup waited " << worst_ms << " ms during a " << compile_ms
                          << " ms compile";
}

// A shape nobody tuned borrows the nearest tuned shape's winner, and computes correctly with it.
TEST(GpuRuntime, UntunedShapeUsesTheNearestTunedShapesWinner) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  const Family& family = find_family("matmul");
  const DeviceTarget device = driver::describe_device(0);
  const Problem tuned{"matmul", DType::bf16, DType::bf16, {1024, 1024, 1024}};
  const Config config = testing::tile_config(64, 128, 32, 2, 2, 3, 1);  // not the default
  ASSERT_NE(config, family.default_config(tuned, device));
  store_winner(dir.file("runtime.db"), device, tuned, config);
  if (HasFatalFailure()) return;
  Runtime runtime({.database = dir.file("runtime.db")});
  const Problem untuned{"matmul", DType::bf16, DType::bf16, {1000, 1000, 1032}};
  tuner::Workbench bench(family, untuned, device);
  bench.refresh_inputs(77);
  const MatmulArgs args = args_for(bench, untuned);
  const DispatchInfo info = runtime.describe_matmul(args);
  EXPECT_EQ(info.source, KernelSource::nearest_winner);
  EXPECT_FALSE(info.tuned);
  EXPECT_EQ(info.config, config.text());
  EXPECT_EQ(info.tuned_for, tuned.key());
  runtime.matmul(args);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the runtime's matmul");
  const tuner::Verification result = bench.check_output();
  EXPECT_TRUE(result.passed) << result.detail;
  // Another dtype has no tuned shape: the default config.
  MatmulArgs f16 = args;
  f16.dtype = DType::f16;
  f16.out_dtype = DType::f16;
  EXPECT_EQ(runtime.describe_matmul(f16).source, KernelSource::default_compiled);
  // Both fallbacks, the nearest winner and the default, are misses; the tuned shape is not.
  std::vector<std::string> missed;
  for (const cache::Miss& miss : cache::Database(dir.file("runtime.db")).misses())
    missed.push_back(miss.problem.key());
  std::sort(missed.begin(), missed.end());
  EXPECT_EQ(missed, (std::vector<std::string>{untuned.key(), "matmul f16->f16 1000x1000x1032"}));
}

// Each winner vouches only for the kernel its sweep timed: one tuned with another NVRTC or driver
// is refused on its own (the call falls through to the nearest current winner, else the
// default, and says why), while the winners of the current toolchain go on being used.
TEST(GpuRuntime, AStaleWinnerIsRefusedAndTheOthersStillServe) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  const DeviceTarget device = driver::describe_device(0);
  const Problem current{"matmul", DType::bf16, DType::bf16, {1024, 1024, 1024}};
  const Problem old_nvrtc{"matmul", DType::bf16, DType::bf16, {1000, 1000, 1032}};
  const Problem old_driver{"matmul", DType::bf16, DType::bf16, {512, 512, 512}};
  const Config current_config = testing::tile_config(64, 128, 32, 2, 2, 3, 1);
  const Config stale_config = testing::tile_config(128, 64, 32, 2, 2, 4, 8);
  ASSERT_NE(current_config, stale_config);
  const cache::Toolchain here = this_toolchain();
  store_winner(dir.file("runtime.db"), device, current, current_config);
  store_winner(dir.file("runtime.db"), device, old_nvrtc, stale_config, {here.driver_version, "12.8"});
  store_winner(dir.file("runtime.db"), device, old_driver, stale_config, {"12.9", here.nvrtc_version});
  if (HasFatalFailure()) return;
  Runtime runtime({.database = dir.file("runtime.db")});
  auto describe = [&](const Problem& problem) {
    tuner::Workbench bench(find_family("matmul"), problem, device);
    return runtime.describe_matmul(args_for(bench, problem));
  };
  const DispatchInfo fresh = describe(current);
  EXPECT_EQ(fresh.source, KernelSource::database_winner);
  EXPECT_EQ(fresh.config, current_config.text());
  EXPECT_EQ(fresh.refused_winner, "");
  // The stale shapes borrow the current winner of the nearest shape, never a stale one.
  for (const Problem& problem : {old_nvrtc, old_driver}) {
    const DispatchInfo info = describe(problem);
    EXPECT_EQ(info.source, KernelSource::nearest_winner) << problem.key();
    EXPECT_EQ(info.config, current_config.text()) << problem.key();
    EXPECT_EQ(info.tuned_for, current.key()) << problem.key();
    EXPECT_FALSE(info.tuned);
  }
  EXPECT_NE(describe(old_nvrtc).refused_winner.find("NVRTC 12.8"), std::string::npos)
      << describe(old_nvrtc).refused_winner;
  EXPECT_NE(describe(old_driver).refused_winner.find("driver 12.9"), std::string::npos)
      << describe(old_driver).refused_winner;
  // And what runs is right.
  expect_correct_matmul(runtime, old_nvrtc, 11);
  expect_correct_matmul(runtime, current, 12);
}

// Shipped results under the user's: a bundle of one database's winners (what `tilesmith export
// --format bundle` writes), the system database beside a fresh user database, dispatches its
// winner and lends it to the nearest shapes with no NVRTC call; a winner in the user's database
// wins over the system's; the system file is never written; and a system database that is not
// tilesmith's is an error naming it.
TEST(GpuRuntime, ABundleServesAsTheSystemDatabaseWithoutNvrtc) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  const DeviceTarget device = driver::describe_device(0);
  const Problem tuned{"matmul", DType::bf16, DType::bf16, {1024, 1024, 1024}};
  const Config shipped = testing::tile_config(64, 128, 32, 2, 2, 3, 1);
  const Config users = testing::tile_config(128, 64, 32, 2, 2, 4, 8);
  store_winner(dir.file("tuned.db"), device, tuned, shipped);
  if (HasFatalFailure()) return;
  {
    Runtime tuning({.database = dir.file("tuned.db"), .jit = true});  // compiles, stores the cubin
    expect_correct_matmul(tuning, tuned, 21);
  }
  {
    cache::Database source(dir.file("tuned.db"), cache::Access::read_only);
    cache::Database bundle(dir.file("bundle.db"));
    const cache::MergeCounts counts = bundle.merge_winners_from(
        source, device.model_key(), {{"matmul", template_hash(find_family("matmul"))}});
    EXPECT_EQ(counts.cubins_added, 1);
  }
  const std::string bundle_bytes = testing::read_bytes(dir.file("bundle.db"));
  const Problem untuned{"matmul", DType::bf16, DType::bf16, {1000, 1000, 1032}};
  auto describe = [&](Runtime& runtime, const Problem& problem) {
    tuner::Workbench bench(find_family("matmul"), problem, device);
    return runtime.describe_matmul(args_for(bench, problem));
  };
  {
    Runtime production({.database = dir.file("user.db"), .jit = false,
                        .system_database = dir.file("bundle.db")});
    const DispatchInfo own = describe(production, tuned);
    EXPECT_EQ(own.source, KernelSource::system_winner);
    EXPECT_EQ(own.config, shipped.text());
    EXPECT_TRUE(own.tuned);
    const DispatchInfo near = describe(production, untuned);
    EXPECT_EQ(near.source, KernelSource::nearest_winner);
    EXPECT_EQ(near.config, shipped.text());
    expect_correct_matmul(production, tuned, 22);
    expect_correct_matmul(production, untuned, 23);
    EXPECT_EQ(production.compilations(), 0);
  }
  store_winner(dir.file("user.db"), device, tuned, users);
  if (HasFatalFailure()) return;
  {
    Runtime mine({.database = dir.file("user.db"), .jit = true,
                  .system_database = dir.file("bundle.db")});
    const DispatchInfo own = describe(mine, tuned);
    EXPECT_EQ(own.source, KernelSource::database_winner);
    EXPECT_EQ(own.config, users.text());
    expect_correct_matmul(mine, tuned, 24);
  }
  EXPECT_EQ(testing::read_bytes(dir.file("bundle.db")), bundle_bytes) << "the system database was written";
  {
    std::ofstream(dir.file("foreign.db")) << "not a database, not even SQLite";
  }
  try {
    Runtime refused({.database = dir.file("user.db"), .system_database = dir.file("foreign.db")});
    ADD_FAILURE() << "a system database that is not tilesmith's must be refused";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("system database"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("foreign.db"), std::string::npos) << error.what();
  }
}

// The loop of misses: a shape without a winner is counted once per Runtime that resolves it, so a
// second process on the same file counts 2; repeated calls hit memory and count nothing.
TEST(GpuRuntime, UntunedShapeIsRecordedAsAMissOncePerRuntime) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  const DeviceTarget device = driver::describe_device(0);
  const Problem untuned{"matmul", DType::bf16, DType::bf16, {96, 80, 64}};
  for (int runtimes = 1; runtimes <= 2; ++runtimes) {
    SCOPED_TRACE("runtime " + std::to_string(runtimes));
    Runtime runtime({.database = dir.file("runtime.db")});
    expect_correct_matmul(runtime, untuned, 40 + runtimes);
    expect_correct_matmul(runtime, untuned, 50 + runtimes);
    const std::vector<cache::Miss> misses = cache::Database(dir.file("runtime.db")).misses();
    ASSERT_EQ(misses.size(), 1u);
    EXPECT_EQ(misses[0].gpu_model, device.model_key());
    EXPECT_EQ(misses[0].gpu_name, device.name);
    EXPECT_EQ(misses[0].problem.key(), untuned.key());
    EXPECT_EQ(misses[0].template_hash, template_hash(find_family("matmul")));
    EXPECT_EQ(misses[0].count, runtimes);
  }
}

TEST(GpuRuntime, TunedShapeIsNoMiss) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  const DeviceTarget device = driver::describe_device(0);
  const Problem tuned{"matmul", DType::f16, DType::f16, {256, 128, 64}};
  store_winner(dir.file("runtime.db"), device, tuned,
               find_family("matmul").default_config(tuned, device));
  if (HasFatalFailure()) return;
  Runtime runtime({.database = dir.file("runtime.db")});
  MatmulArgs args;
  args.m = 256;
  args.n = 128;
  args.k = 64;
  args.dtype = DType::f16;
  EXPECT_EQ(runtime.describe_matmul(args).source, KernelSource::database_winner);
  expect_correct_matmul(runtime, tuned, 61);
  // An untuned shape on the same file is recorded: the table is written, and only it is there.
  const Problem untuned{"matmul", DType::f16, DType::f16, {256, 128, 128}};
  expect_correct_matmul(runtime, untuned, 62);
  const std::vector<cache::Miss> misses = cache::Database(dir.file("runtime.db")).misses();
  ASSERT_EQ(misses.size(), 1u);
  EXPECT_EQ(misses[0].problem.key(), untuned.key());
}

// The table of misses is advice for a later sweep: when it cannot be written, the matmul still
// runs, correctly, and the failure is said once on stderr rather than passing for "all tuned".
// A database that takes no writes (here: triggers refusing misses and cubins) costs no matmul:
// results are correct, one warning says what was lost, and nothing half-written is left.
TEST(GpuRuntime, AnUnwritableCacheCostsNoMatmul) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  { cache::Database create(dir.file("runtime.db")); }
  sqlite3* raw = nullptr;
  ASSERT_EQ(sqlite3_open(dir.file("runtime.db").c_str(), &raw), SQLITE_OK);
  const int rc = sqlite3_exec(raw,
                              "CREATE TRIGGER refuse_misses BEFORE INSERT ON misses BEGIN "
                              "SELECT RAISE(ABORT, 'misses refused by the test'); END;"
                              "CREATE TRIGGER refuse_cubins BEFORE INSERT ON cubins BEGIN "
                              "SELECT RAISE(ABORT, 'cubins refused by the test'); END;",
                              nullptr, nullptr, nullptr);
  sqlite3_close(raw);
  ASSERT_EQ(rc, SQLITE_OK);

  {
    Runtime runtime({.database = dir.file("runtime.db")});
    ::testing::internal::CaptureStderr();
    expect_correct_matmul(runtime, {"matmul", DType::bf16, DType::bf16, {48, 48, 48}}, 71);
    expect_correct_matmul(runtime, {"matmul", DType::bf16, DType::f32, {48, 48, 48}}, 72);
    const std::string err = ::testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("tilesmith: warning: could not store the miss for matmul bf16->bf16 "
                       "48x48x48 in the database, so 'tilesmith misses' will not list it"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("misses refused by the test"), std::string::npos) << err;
    EXPECT_EQ(err.find("tilesmith: warning:"), err.rfind("tilesmith: warning:")) << err;  // once
    EXPECT_EQ(runtime.compilations(), 2);
  }
  EXPECT_TRUE(cache::Database(dir.file("runtime.db")).misses().empty());
  // The cubins were not stored either: a new process compiles again, and says so.
  Runtime again({.database = dir.file("runtime.db")});
  ::testing::internal::CaptureStderr();
  expect_correct_matmul(again, {"matmul", DType::bf16, DType::bf16, {48, 48, 48}}, 73);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(again.compilations(), 1);
  EXPECT_NE(err.find("tilesmith: warning:"), std::string::npos) << err;
}

TEST(GpuRuntime, RejectsBadInputWithClearErrors) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({.database = dir.file("runtime.db")});
  driver::DeviceBuffer buffer(1 << 20, "test buffer");
  auto* base = reinterpret_cast<char*>(buffer.address());
  auto expect_error = [&](MatmulArgs args, const std::string& fragment) {
    try {
      runtime.matmul(args);
      ADD_FAILURE() << "expected an error mentioning '" << fragment << "'";
    } catch (const Error& error) {
      EXPECT_NE(std::string(error.what()).find(fragment), std::string::npos) << error.what();
    }
  };
  MatmulArgs good{base, base + 4096, base + 8192, 16, 16, 16, DType::bf16, std::nullopt};
  runtime.matmul(good);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "a good call");
  MatmulArgs args = good;
  args.a = nullptr;
  expect_error(args, "A is a null pointer");
  args = good;
  args.c = base + 8194;
  expect_error(args, "C is not 16-byte aligned");
  args = good;
  args.k = 0;
  expect_error(args, "non-positive dimension");
  args = good;
  args.lda = 8;
  expect_error(args, "A's row stride 8 is outside 16 (its row length)");
  args = good;
  args.batch = 2;
  args.batch_stride_c = 0;
  expect_error(args, "C's batch stride 0 is below 256: its batches would overlap");
  // Mixed types, fp32 in (as tf32) and strides off 16 bytes (the gathering kernels) are no
  // errors.
  args = good;
  args.out_dtype = DType::f16;
  runtime.matmul(args);
  args.dtype = DType::f32;
  runtime.matmul(args);
  args = good;
  args.batch = 2;
  args.lda = 17;
  args.batch_stride_a = 17 * 16 + 1;
  args.batch_stride_b = 0;
  runtime.matmul(args);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "the calls that are no errors");
  // The runtime is still usable after every rejected call.
  runtime.matmul(good);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "a good call after errors");
}

TEST(Runtime, SaysPlainlyWhenThereIsNoGpu) {
  std::string why;
  if (driver::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: nothing to refuse";
  TempDir dir;
  try {
    Runtime runtime({.database = dir.file("runtime.db")});
    FAIL() << "a Runtime without a GPU must throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no CUDA driver/GPU found"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace tilesmith
