// The runtime: correct results on the issue's shapes, no NVRTC on a warm database, clear errors.
#include <gtest/gtest.h>

#include "cache/database.hpp"
#include "generator/compiled_kernel.hpp"
#include "support/matmul_configs.hpp"
#include "support/test_support.hpp"
#include "templates/registry.hpp"
#include "tilesmith/runtime.hpp"
#include "tuner/workbench.hpp"

namespace tilesmith {
namespace {

using testing::TempDir;

MatmulArgs args_for(const tuner::Workbench& bench, const Problem& problem) {
  const auto& address = bench.tensor_addresses();
  MatmulArgs args;
  args.a = reinterpret_cast<const void*>(address[0]);
  args.b = reinterpret_cast<const void*>(address[1]);
  args.c = reinterpret_cast<void*>(address[2]);
  args.m = problem.shape[0];
  args.n = problem.shape[1];
  args.k = problem.shape[2];
  args.dtype = problem.dtype;
  args.out_dtype = problem.out_dtype;
  return args;
}

TEST(GpuRuntime, MatmulMatchesReferenceOnIssueShapes) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("runtime.db"), 0});
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

TEST(GpuRuntime, WarmDatabaseNeedsNoCompiler) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  MatmulArgs shape;
  shape.m = 200;
  shape.n = 136;
  shape.k = 72;
  {
    Runtime cold({dir.file("runtime.db"), 0});
    DispatchInfo info = cold.describe_matmul(shape);
    EXPECT_EQ(info.source, KernelSource::default_compiled);
    EXPECT_FALSE(info.tuned);
    EXPECT_EQ(cold.compilations(), 1);
    EXPECT_EQ(cold.describe_matmul(shape).source, KernelSource::memory);
    EXPECT_EQ(cold.compilations(), 1);
  }
  Runtime warm({dir.file("runtime.db"), 0});
  EXPECT_EQ(warm.describe_matmul(shape).source, KernelSource::default_cached);
  EXPECT_EQ(warm.compilations(), 0);
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
  {
    cache::Database db(dir.file("runtime.db"));
    db.record_gpu(device, {driver::driver_version(), nvrtc_version()});
    const cache::TrialKey key{device.model_key(), tuned, template_hash(family)};
    cache::Trial trial;
    trial.config = config;
    trial.source_hash = render(family, config, tuned).hash;
    trial.status = cache::TrialStatus::ok;
    trial.median_ms = trial.min_ms = 0.05;
    trial.repetitions = 10;
    db.record_trial(key, trial);
    ASSERT_TRUE(db.refresh_winner(key).has_value());
  }
  Runtime runtime({dir.file("runtime.db"), 0});
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
}

TEST(GpuRuntime, RejectsBadInputWithClearErrors) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("runtime.db"), 0});
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
  args.dtype = DType::f32;
  expect_error(args, "input dtype f32 is not supported");
  args = good;
  args.out_dtype = DType::f16;
  expect_error(args, "output dtype f16");
  // The runtime is still usable after every rejected call.
  runtime.matmul(good);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "a good call after errors");
}

TEST(Runtime, SaysPlainlyWhenThereIsNoGpu) {
  std::string why;
  if (driver::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: nothing to refuse";
  TempDir dir;
  try {
    Runtime runtime({dir.file("runtime.db"), 0});
    FAIL() << "a Runtime without a GPU must throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no CUDA driver/GPU found"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace tilesmith
