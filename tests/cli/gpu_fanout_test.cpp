// `tune --gpus`: how a sweep is split over the GPUs of a host, as the children's command lines,
// for GPUs this machine may not have (two models, a host's shard, budgets, compile jobs).
#include "cli/gpu_fanout.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tilesmith/types.hpp"

namespace tilesmith::cli {
namespace {

using Args = std::vector<std::string>;

Args tail(const GpuChild& child, std::size_t passed) {
  return Args(child.args.begin() + 1 + static_cast<std::ptrdiff_t>(passed), child.args.end());
}

TEST(FanOutOverGpus, TheGpusOfAModelShardItsSpaceAndEachModelGetsAllOfIt) {
  const Args passed = {"--op", "matmul", "--dtype", "bf16", "--shape", "4096x4096x4096"};
  const std::vector<GpuOnHost> gpus = {{0, "H100"}, {1, "A100"}, {2, "H100"}, {3, "H100"}};
  SharedSweep shared;
  shared.compile_jobs = 16;
  const std::vector<GpuChild> children = split_over_gpus(gpus, passed, shared);
  ASSERT_EQ(children.size(), 4u);
  // By model (A100 first), in the order given within a model.
  EXPECT_EQ(children[0].ordinal, 1);
  EXPECT_EQ(children[0].args[0], "tune");
  EXPECT_EQ(Args(children[0].args.begin() + 1, children[0].args.begin() + 7), passed);
  EXPECT_EQ(tail(children[0], passed.size()), (Args{"--device", "1", "--jobs", "4"}));
  EXPECT_EQ(tail(children[1], passed.size()),
            (Args{"--device", "0", "--jobs", "4", "--shard", "0/3"}));
  EXPECT_EQ(tail(children[2], passed.size()),
            (Args{"--device", "2", "--jobs", "4", "--shard", "1/3"}));
  EXPECT_EQ(tail(children[3], passed.size()),
            (Args{"--device", "3", "--jobs", "4", "--shard", "2/3"}));
  EXPECT_EQ(children[3].model, "H100");
  EXPECT_EQ(children[3].shard, 2);
  EXPECT_EQ(children[3].shards, 3);
}

// A host's shard i/N of a sweep over hosts is split again: i + N*j of N*G; a budget in
// candidates is shared within a model (a GPU whose share is 0 sits out), one in seconds is
// each GPU's; at least one compile job each.
TEST(FanOutOverGpus, AHostsShardAndTheBudgetsAreSplitAgain) {
  const std::vector<GpuOnHost> gpus = {{0, "H100"}, {1, "H100"}, {2, "A100"}};
  SharedSweep shared;
  shared.shard_index = 1;
  shared.shard_count = 3;
  shared.compile_jobs = 2;
  shared.max_candidates = 1;
  std::vector<GpuChild> children = split_over_gpus(gpus, {}, shared);
  ASSERT_EQ(children.size(), 2u) << "the second H100's share of 1 candidate is 0";
  EXPECT_EQ(tail(children[0], 0),
            (Args{"--device", "2", "--jobs", "1", "--shard", "1/3", "--budget", "1"}));
  EXPECT_EQ(tail(children[1], 0),
            (Args{"--device", "0", "--jobs", "1", "--shard", "1/6", "--budget", "1"}));
  shared.max_candidates = 7;
  children = split_over_gpus(gpus, {}, shared);
  ASSERT_EQ(children.size(), 3u);
  EXPECT_EQ(tail(children[1], 0),
            (Args{"--device", "0", "--jobs", "1", "--shard", "1/6", "--budget", "4"}));
  EXPECT_EQ(tail(children[2], 0),
            (Args{"--device", "1", "--jobs", "1", "--shard", "4/6", "--budget", "3"}));
  EXPECT_EQ(tail(children[0], 0).back(), "7");
  shared.max_candidates.reset();
  shared.seconds_budget = "30s";
  for (const GpuChild& child : split_over_gpus(gpus, {}, shared))
    EXPECT_EQ(Args(child.args.end() - 2, child.args.end()), (Args{"--budget", "30s"}));
}

TEST(FanOutOverGpus, GpuListsAreAllOrDistinctVisibleOrdinals) {
  EXPECT_EQ(parse_gpu_list("all", 3), (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(parse_gpu_list("all", 0).empty());
  EXPECT_EQ(parse_gpu_list("2,0", 3), (std::vector<int>{2, 0}));
  for (const char* bad : {"", "x", "0,", ",1", "1,,2", "-1", "0x1", "1 ", "3"})
    EXPECT_THROW(parse_gpu_list(bad, 3), InvalidArgument) << bad;
  EXPECT_THROW(parse_gpu_list("1,1", 3), InvalidArgument);
}

}  // namespace
}  // namespace tilesmith::cli
