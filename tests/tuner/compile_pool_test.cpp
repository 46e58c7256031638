// NVRTC in worker processes: jobs in, outcomes out, failures reported without losing the pool.
// The workers re-execute this test binary (tests/support/test_main.cpp dispatches them).
#include "tuner/compile_pool.hpp"
#include "support/matmul_configs.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "templates/registry.hpp"

namespace tilesmith::tuner {
namespace {

using testing::tile_config;

const Family& matmul() { return find_family("matmul"); }

Problem problem_4096() { return Problem{"matmul", DType::bf16, DType::bf16, {4096, 4096, 4096}}; }


// Four distinct members of the pruned matmul space for sm_90a.
std::vector<RenderedSource> four_matmul_sources() {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  std::vector<RenderedSource> sources;
  for (const Config& config :
       {tile_config(128, 128, 32, 2, 2, 4, 8), tile_config(64, 64, 32, 2, 2, 2, 1),
        tile_config(128, 64, 64, 4, 1, 3, 8), tile_config(64, 128, 32, 1, 4, 3, 1)}) {
    EXPECT_FALSE(matmul().reject(config, problem_4096(), hopper).has_value()) << config.text();
    sources.push_back(render(matmul(), config, problem_4096()));
  }
  return sources;
}

RenderedSource broken_source() {
  RenderedSource source;
  source.family = "brokenfamily";
  source.main_name = "broken_kernel.cu";
  source.text = "extern \"C\" __global__ void broken_kernel(float* out) { out[0] = ; }\n";
  source.kernel_expressions = {"broken_kernel"};
  source.hash = content_hash(source.text);
  return source;
}

TEST(CompilePoolTest, ProcessCount) {
  EXPECT_EQ(CompilePool(2).processes(), 2);
  int automatic = CompilePool(0).processes();
  EXPECT_GE(automatic, 1);
  EXPECT_LE(automatic, 16);
}

TEST(CompilePoolTest, NextWithNothingSubmittedThrows) {
  CompilePool pool(1);
  EXPECT_EQ(pool.pending(), 0u);
  EXPECT_THROW(pool.next(), Error);
}

TEST(CompilePoolTest, TwoProcessesCompileFourConfigs) {
  std::vector<RenderedSource> sources = four_matmul_sources();
  CompilePool pool(2);
  std::map<std::size_t, std::string> hash_by_id;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    std::size_t id = 100 + i;  // ids are the caller's, not positions
    hash_by_id[id] = sources[i].hash;
    pool.submit(CompileJob{id, sources[i], "sm_90a"});
  }
  EXPECT_EQ(pool.pending(), 4u);

  std::set<std::size_t> seen;
  for (int i = 0; i < 4; ++i) {
    CompileOutcome outcome = pool.next();
    ASSERT_EQ(hash_by_id.count(outcome.id), 1u) << "unknown id " << outcome.id;
    EXPECT_TRUE(seen.insert(outcome.id).second) << "id " << outcome.id << " came back twice";
    ASSERT_TRUE(outcome.kernel.has_value()) << outcome.error;
    EXPECT_TRUE(outcome.error.empty()) << outcome.error;
    const CompiledKernel& kernel = *outcome.kernel;
    EXPECT_EQ(kernel.source_hash, hash_by_id[outcome.id]);
    EXPECT_EQ(kernel.arch, "sm_90a");
    EXPECT_FALSE(kernel.cubin.bytes.empty());
    EXPECT_EQ(std::string(kernel.cubin.bytes.data(), 4),
              "\x7f"
              "ELF");
    EXPECT_EQ(kernel.lowered_names.front().rfind("_Z", 0), 0u) << kernel.lowered_names.front();
    EXPECT_GT(kernel.resources.registers, 0) << kernel.log;
    EXPECT_EQ(kernel.resources.stack_frame_bytes, 0) << kernel.log;
    EXPECT_EQ(kernel.nvrtc_version, nvrtc_version());
    EXPECT_GT(kernel.compile_seconds, 0);
  }
  EXPECT_EQ(seen.size(), 4u);
  EXPECT_EQ(pool.pending(), 0u);
  EXPECT_THROW(pool.next(), Error) << "everything was taken";
}

TEST(CompilePoolTest, CubinMatchesAnInProcessCompile) {
  // The cubin travels through a pipe as the message payload: it must arrive byte for byte.
  RenderedSource source = four_matmul_sources()[1];
  CompiledKernel local = compile(source, "sm_90a");
  CompilePool pool(1);
  pool.submit(CompileJob{5, source, "sm_90a"});
  CompileOutcome outcome = pool.next();
  ASSERT_TRUE(outcome.kernel.has_value()) << outcome.error;
  EXPECT_EQ(outcome.kernel->cubin.bytes, local.cubin.bytes);
  EXPECT_EQ(outcome.kernel->lowered_names.front(), local.lowered_names.front());
  EXPECT_EQ(outcome.kernel->resources.registers, local.resources.registers);
}

TEST(CompilePoolTest, BrokenSourceYieldsAnErrorAndThePoolKeepsWorking) {
  CompilePool pool(1);  // one process: the next job must run on the same worker
  pool.submit(CompileJob{7, broken_source(), "sm_90a"});
  CompileOutcome failed = pool.next();
  EXPECT_EQ(failed.id, 7u);
  EXPECT_FALSE(failed.kernel.has_value());
  EXPECT_NE(failed.error.find("brokenfamily"), std::string::npos) << failed.error;
  EXPECT_NE(failed.error.find("sm_90a"), std::string::npos) << failed.error;
  EXPECT_NE(failed.error.find("error"), std::string::npos) << failed.error;

  RenderedSource good = four_matmul_sources()[0];
  pool.submit(CompileJob{8, good, "sm_90a"});
  CompileOutcome next = pool.next();
  EXPECT_EQ(next.id, 8u);
  ASSERT_TRUE(next.kernel.has_value()) << next.error;
  EXPECT_EQ(next.kernel->source_hash, good.hash);
}

TEST(CompilePoolTest, FailuresAndSuccessesInterleaved) {
  std::vector<RenderedSource> sources = four_matmul_sources();
  CompilePool pool(2);
  pool.submit(CompileJob{0, broken_source(), "sm_80"});
  pool.submit(CompileJob{1, sources[0], "sm_80"});
  pool.submit(CompileJob{2, broken_source(), "sm_90a"});
  pool.submit(CompileJob{3, sources[1], "sm_90a"});
  std::map<std::size_t, CompileOutcome> outcomes;
  for (int i = 0; i < 4; ++i) {
    CompileOutcome outcome = pool.next();
    std::size_t id = outcome.id;
    outcomes.emplace(id, std::move(outcome));
  }
  ASSERT_EQ(outcomes.size(), 4u);
  EXPECT_FALSE(outcomes.at(0).kernel.has_value());
  EXPECT_NE(outcomes.at(0).error.find("sm_80"), std::string::npos) << outcomes.at(0).error;
  EXPECT_FALSE(outcomes.at(2).kernel.has_value());
  ASSERT_TRUE(outcomes.at(1).kernel.has_value()) << outcomes.at(1).error;
  EXPECT_EQ(outcomes.at(1).kernel->arch, "sm_80");
  ASSERT_TRUE(outcomes.at(3).kernel.has_value()) << outcomes.at(3).error;
  EXPECT_EQ(outcomes.at(3).kernel->arch, "sm_90a");
}

TEST(CompilePoolTest, DestroyingWithQueuedJobsReturnsPromptly) {
  std::vector<RenderedSource> sources = four_matmul_sources();
  auto seconds_since = [](std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  auto start = std::chrono::steady_clock::now();
  compile(sources[0], "sm_90a");
  const double one_compile = seconds_since(start);

  constexpr int kQueued = 16;
  start = std::chrono::steady_clock::now();
  {
    CompilePool pool(1);
    for (std::size_t i = 0; i < kQueued; ++i)
      pool.submit(CompileJob{i, sources[i % sources.size()], "sm_90a"});
  }  // at most the job in progress finishes; the queued ones are dropped
  const double destroy = seconds_since(start);
  EXPECT_LT(destroy, kQueued / 2 * one_compile + 1.0)
      << "one compile takes " << one_compile << " s: queued jobs should be dropped, not compiled";
}

}  // namespace
}  // namespace tilesmith::tuner
