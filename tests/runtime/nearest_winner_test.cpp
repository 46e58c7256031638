// The runtime's nearest-tuned-shape lookup, on hand-made winners: no GPU or database needed.
#include "runtime/src/nearest_winner.hpp"

#include <gtest/gtest.h>

#include "support/matmul_configs.hpp"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

using testing::decode_config;
using testing::gemv_config;
using testing::tile_config;
using testing::wgmma_config;

class NearestWinnerTest : public ::testing::Test {
 protected:
  const Family& family_ = find_family("matmul");
  const DeviceTarget device_ = DeviceTarget::assumed_for_arch("sm_90a");
  const std::string templates_ = "current-templates";

  cache::Winner winner(std::vector<std::int64_t> shape, const Config& config,
                       DType dtype = DType::bf16) const {
    cache::Winner w;
    w.gpu_model = device_.model_key();
    w.problem = Problem{"matmul", dtype, dtype, std::move(shape)};
    w.template_hash = templates_;
    w.config = config;
    return w;
  }
  std::optional<cache::Winner> nearest(const std::vector<cache::Winner>& winners,
                                       std::vector<std::int64_t> shape) const {
    return nearest_winner(winners, family_, Problem{"matmul", DType::bf16, DType::bf16, shape},
                          device_, templates_);
  }
};

TEST_F(NearestWinnerTest, PicksTheShapeNearestInLogScale) {
  const Config small = tile_config(64, 64, 32, 2, 2, 3), large = tile_config(128, 256, 64, 2, 4, 3);
  const std::vector<cache::Winner> winners = {winner({1024, 1024, 1024}, small),
                                              winner({4096, 4096, 4096}, large)};
  EXPECT_EQ(nearest(winners, {1000, 1000, 1000})->config, small);
  EXPECT_EQ(nearest(winners, {3000, 3000, 3000})->config, large);
  // 2048 is equally far from both in log scale: the first, every time.
  EXPECT_EQ(nearest(winners, {2048, 2048, 2048})->config, small);
  // 16x4096x4096 is nearer 4096^3 than 1024^3 by the sum of log ratios (log 256 vs 2 log 4).
  EXPECT_EQ(nearest(winners, {16, 4096, 4096})->config, large);
}

TEST_F(NearestWinnerTest, OnlyTheSameGpuModelOpDtypesAndTemplates) {
  const Config config = tile_config(64, 64, 32, 2, 2, 3);
  cache::Winner other_gpu = winner({1000, 1000, 1000}, config);
  other_gpu.gpu_model = "NVIDIA A100-SXM4-80GB | sm_80 | 108 SMs";
  cache::Winner old_templates = winner({1000, 1000, 1000}, config);
  old_templates.template_hash = "older-templates";
  cache::Winner f16 = winner({1000, 1000, 1000}, config, DType::f16);
  cache::Winner f32_out = winner({1000, 1000, 1000}, config);
  f32_out.problem.out_dtype = DType::f32;
  cache::Winner other_op = winner({1000, 1000, 1000}, config);
  other_op.problem.op = "softmax";
  EXPECT_FALSE(nearest({other_gpu, old_templates, f16, f32_out, other_op}, {1000, 1000, 1000}));
  const cache::Winner good = winner({8192, 8192, 8192}, tile_config(128, 128, 32, 2, 2, 4));
  EXPECT_EQ(nearest({other_gpu, old_templates, f16, f32_out, other_op, good}, {1000, 1000, 1000})
                ->problem.shape,
            good.problem.shape);
}

TEST_F(NearestWinnerTest, SkipsConfigsTheFamilyRejectsForTheNewShape) {
  // Aligned 4096^3 fits a 64x64 warp tile; unaligned 4093^3 also keeps its gathered chunks in
  // registers, and the same config no longer fits.
  const Config big = tile_config(128, 256, 64, 2, 4, 3);
  const Problem unaligned{"matmul", DType::bf16, DType::bf16, {4093, 4093, 4093}};
  ASSERT_FALSE(family_.reject(big, Problem{"matmul", DType::bf16, DType::bf16, {4096, 4096, 4096}}, device_));
  ASSERT_TRUE(family_.reject(big, unaligned, device_));
  const Config modest = tile_config(128, 128, 64, 2, 4, 3);
  ASSERT_FALSE(family_.reject(modest, unaligned, device_));
  const std::vector<cache::Winner> winners = {winner({4096, 4096, 4096}, big),
                                              winner({1024, 1024, 1024}, modest)};
  EXPECT_EQ(nearest(winners, {4093, 4093, 4093})->config, modest);
  EXPECT_FALSE(nearest({winner({4096, 4096, 4096}, big)}, {4093, 4093, 4093}));
}

TEST_F(NearestWinnerTest, YieldsToTheDefaultWhereTheBorrowedWavesCostMore) {
  // 3000^3's tuned winner: 192x192 in 1x2 clusters, 16 x 8 cluster tiles, two waves of 66.
  const Config tuned = wgmma_config(192, 192, 3, 3, 1, 2, 1, 1, 0, 0, 0, 0);
  const std::vector<cache::Winner> winners = {winner({3000, 3000, 3000}, tuned)};
  // The same waves: borrowed.
  EXPECT_EQ(nearest(winners, {3000, 3000, 2900})->config, tuned);
  // 5000x5000x2048: 27 x 14 cluster tiles, 5.7 waves of 66, where the default's wave-fitted
  // tile costs less (measured: 0.84x cuBLAS borrowed, 0.96x the default): the default runs it.
  const Problem wide{"matmul", DType::bf16, DType::bf16, {5000, 5000, 2048}};
  ASSERT_FALSE(family_.reject(tuned, wide, device_));
  EXPECT_FALSE(family_.outranks_default(tuned, wide, device_));
  EXPECT_FALSE(nearest(winners, {5000, 5000, 2048}));
  // Where the default is no wave-fitted large tile (few tiles: K-heavy), the borrowed config
  // runs: the estimate does not rank split-K.
  const Config k_heavy = wgmma_config(128, 64, 8, 1, 1, 2, 8, 4, 0, 0, 0, 0);
  EXPECT_EQ(nearest({winner({512, 512, 16384}, k_heavy)}, {512, 512, 8192})->config, k_heavy);
}

TEST_F(NearestWinnerTest, YieldsToTheDefaultWhereTheBorrowedConfigLeavesTheSmsIdle) {
  // A database with 4096^3's winner, 128x256 in 2x1 clusters, and calls of shapes nobody tuned.
  // On 512x512x16384 that config runs 8 CTAs, each through all of K (the H200 ran it 6.4x
  // slower than the default's 128 K slices); on 1000^3 16 clusters for 66 (1.5x slower than the
  // default's 128x64 pairs); on 768x512x8192 12 CTAs (3.8x). The default runs them.
  const Config square = wgmma_config(128, 256, 4, 2, 2, 1);
  const std::vector<cache::Winner> winners = {winner({4096, 4096, 4096}, square)};
  for (const std::vector<std::int64_t>& shape :
       {std::vector<std::int64_t>{512, 512, 16384}, {1000, 1000, 1000}, {768, 512, 8192}}) {
    const Problem problem{"matmul", DType::bf16, DType::bf16, shape};
    SCOPED_TRACE(problem.key());
    ASSERT_FALSE(family_.reject(square, problem, device_));
    EXPECT_FALSE(family_.outranks_default(square, problem, device_));
    EXPECT_FALSE(nearest(winners, shape));
  }
  // Shapes it fills as well as the default does keep borrowing it.
  EXPECT_EQ(nearest(winners, {4096, 4096, 3072})->config, square);
  EXPECT_EQ(nearest(winners, {8192, 4096, 4096})->config, square);
}

TEST_F(NearestWinnerTest, TheDefaultsRowReaderOrNotStands) {
  // Near M <= 32 the default chooses between the row readers (decode, gemv) and the swapped
  // wgmma tiles; a neighbour's winner on another template yields (v69: 0.85x on the mean).
  const Config decode = decode_config(16, 8, 1, 1, 128), gemv = gemv_config(2, 4, 2);
  ProblemOptions weight;
  weight["b"] = "col";
  auto near = [&](const Config& config, std::vector<std::int64_t> tuned,
                  std::vector<std::int64_t> called) {
    cache::Winner w = winner(std::move(tuned), config);
    w.problem.options = weight;
    return nearest_winner({w}, family_, Problem{"matmul", DType::bf16, DType::bf16, called, weight},
                          device_, templates_);
  };
  const Problem swapped{"matmul", DType::bf16, DType::bf16, {17, 22952, 512}, weight};
  ASSERT_EQ(family_.default_config(swapped, device_).at("variant"), 1);
  ASSERT_FALSE(family_.reject(decode, swapped, device_));
  EXPECT_FALSE(near(decode, {14, 15080, 824}, {17, 22952, 512}));  // 0.77x the default
  const Problem read{"matmul", DType::bf16, DType::bf16, {3, 3464, 664}, weight};
  ASSERT_EQ(family_.default_config(read, device_).at("variant"), 2);
  ASSERT_FALSE(family_.reject(gemv, read, device_));
  EXPECT_FALSE(near(gemv, {2, 3432, 992}, {3, 3464, 664}));  // 0.78x
  // The same template still lends.
  EXPECT_EQ(near(decode, {14, 4096, 4096}, {16, 4096, 4096})->config, decode);
}

}  // namespace
}  // namespace tilesmith
