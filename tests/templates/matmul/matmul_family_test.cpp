// The matmul family's descriptor: space, constraints, launch rule, kernel names and references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include "templates/family.hpp"
#include "support/matmul_configs.hpp"
#include "templates/common/copy_rows_params.h"
#include "templates/matmul/matmul_family.hpp"
#include "templates/matmul/matmul_params.h"
#include "templates/matmul/matmul_sm90_params.h"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

using testing::tile_config;

const Family& matmul() { return find_family("matmul"); }

Problem matmul_problem(std::int64_t m, std::int64_t n, std::int64_t k, DType in = DType::bf16,
                       DType out = DType::bf16) {
  return Problem{"matmul", in, out, {m, n, k}};
}

// The default config for `problem` on `device`, which must run there.
Config runnable_default(const Problem& problem, const DeviceTarget& device) {
  const Config config = matmul().default_config(problem, device);
  EXPECT_EQ(matmul().reject(config, problem, device), std::nullopt)
      << problem.key() << ": " << config.text();
  return config;
}

// The tile of the default on an H100 (which must run there) for `in` -> `in` of `shape`:
// "BMxBN CMxCN sSPLIT", "swapped " first under swap_ab.
std::string default_tile(DType in, std::vector<std::int64_t> shape, ProblemOptions options) {
  const Config config = runnable_default(
      Problem{"matmul", in, in, std::move(shape), std::move(options)},
      DeviceTarget::assumed_for_arch("sm_90a"));
  return std::string(config.at("swap_ab") ? "swapped " : "") +
         std::to_string(config.at("block_m")) + "x" + std::to_string(config.at("block_n")) + " " +
         std::to_string(config.at("cluster_m")) + "x" + std::to_string(config.at("cluster_n")) +
         " s" + std::to_string(config.at("split_k"));
}


// The shared memory a config's pipeline needs: STAGES A and B tiles, rows padded by 8 elements,
// 2 bytes per element.
int expected_smem_bytes(int block_m, int block_n, int block_k, int stages) {
  return stages * (block_m * (block_k + 8) + block_k * (block_n + 8)) * 2;
}

// The configs of one variant of the space (0: mma.sync, 1: wgmma).
std::vector<Config> variant_space(int variant) {
  std::vector<Config> configs;
  for (const Config& config : matmul().enumerate())
    if (config.at("variant") == variant) configs.push_back(config);
  return configs;
}

// The launch plan of a config with made-up tensor addresses.
LaunchPlan plan_of(const Config& config, const Problem& problem,
                   const DeviceTarget& device = DeviceTarget::assumed_for_arch("sm_90a")) {
  const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
  return matmul().plan(config, problem, device, addresses, 0, {});
}

template <class Action>
std::string error_message_of(Action&& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected tilesmith::Error, nothing was thrown";
  return "";
}

// ---------------------------------------------------------------------------------------------
// Registry and space

TEST(MatmulRegistryTest, FindsMatmulByName) {
  EXPECT_EQ(matmul().name(), "matmul");
  auto families = all_families();
  EXPECT_TRUE(std::any_of(families.begin(), families.end(),
                          [](const Family* family) { return family->name() == "matmul"; }));
}

TEST(MatmulRegistryTest, UnknownOpThrowsListingKnownNames) {
  std::string message = error_message_of([] { find_family("convolution"); });
  EXPECT_NE(message.find("convolution"), std::string::npos) << message;
  EXPECT_NE(message.find("matmul"), std::string::npos) << message;
}

TEST(MatmulFamilyTest, SpaceNamesEveryParameterOfEveryVariantOnce) {
  std::vector<std::string> names;
  for (const ParamSpec& param : matmul().space()) {
    names.push_back(param.name);
    EXPECT_FALSE(param.values.empty()) << param.name;
    std::set<int> distinct(param.values.begin(), param.values.end());
    EXPECT_EQ(distinct.size(), param.values.size()) << param.name << " repeats a value";
  }
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], "variant");
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
            (std::set<std::string>{"variant", "block_m", "block_n", "block_k", "warps_m",
                                   "warps_n", "stages", "group_m", "consumers", "cluster_m",
                                   "cluster_n", "split_k", "split_cluster", "swap_ab",
                                   "slice_major", "l2_promotion", "pingpong", "split_in_grid",
                                   "warps", "unroll", "vector", "row_bytes"}));
}

TEST(MatmulFamilyTest, EachVariantsConfigsCarryExactlyItsParameters) {
  const std::set<std::string> mma = {"variant", "block_m", "block_n", "block_k", "warps_m",
                                     "warps_n", "stages",  "group_m"};
  const std::set<std::string> wgmma = {"variant",   "block_m",   "block_n",   "block_k",
                                       "stages",    "consumers", "cluster_m", "cluster_n",
                                       "group_m",   "split_k",   "split_cluster", "swap_ab",
                                       "slice_major", "l2_promotion", "pingpong", "split_in_grid"};
  const std::set<std::string> decode = {"variant", "block_n", "warps", "unroll", "split_k", "row_bytes"};
  const std::set<std::string> gemv = {"variant", "block_n", "warps", "unroll"};
  const std::set<std::string> gemv_kn = {"variant", "vector", "warps", "unroll", "split_k"};
  const std::map<int, std::set<std::string>> by_variant = {
      {0, mma}, {1, wgmma}, {2, decode}, {3, gemv}, {4, gemv_kn}};
  std::set<std::string> texts;
  for (const Config& config : matmul().enumerate()) {
    std::set<std::string> keys;
    for (const auto& [name, value] : config.values) keys.insert(name);
    EXPECT_EQ(keys, by_variant.at(config.at("variant"))) << config.text();
    texts.insert(config.text());
  }
  EXPECT_EQ(texts.size(), matmul().enumerate().size()) << "every config has one text";
  EXPECT_EQ(variant_space(0).size(), 2880u);
}

// A sweep's --only slice is listed without the rest of the space: the same configs, in the same
// order, as filtering the whole product; a value another variant lacks leaves that variant out.
TEST(MatmulFamilyTest, TheOnlySliceIsTheFilteredSpace) {
  const std::vector<Config> space = matmul().enumerate();
  // The products' size counts what the walk left out too.
  EXPECT_GT(matmul().space_size(), space.size());
  EXPECT_EQ(matmul().space_size(Config::parse("variant=2")), 4u * 3 * 4 * 4 * 4);  // decode: all listed
  EXPECT_EQ(matmul().enumerate(Config::parse("variant=2")).size(), 4u * 3 * 4 * 4 * 4);
  for (const char* only : {"variant=1,block_m=128,cluster_n=2", "block_n=64", "warps=4",
                           "variant=2,block_m=128", "variant=0,stages=5,group_m=8"}) {
    const Config slice = Config::parse(only);
    std::vector<Config> filtered;
    for (const Config& config : space)
      if (std::all_of(slice.values.begin(), slice.values.end(), [&](const auto& item) {
            const auto it = config.values.find(item.first);
            return it != config.values.end() && it->second == item.second;
          }))
        filtered.push_back(config);
    EXPECT_EQ(matmul().enumerate(slice), filtered) << only;
  }
  EXPECT_TRUE(matmul().enumerate(Config::parse("variant=2,block_m=128")).empty());
  EXPECT_FALSE(matmul().enumerate(Config::parse("block_n=64")).empty());
}

// The wgmma product is pruned as it is walked: a config it leaves out must be one reject()
// refuses for any problem. Each listed config's neighbours (one parameter changed) that are not
// listed are checked against problems of every kind.
TEST(MatmulFamilyTest, TheWalkLeavesOutOnlyConfigsNoProblemCouldRun) {
  const std::vector<Config> space = matmul().enumerate(Config::parse("variant=1"));
  const std::set<Config> listed(space.begin(), space.end());
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  std::vector<Problem> problems = {matmul_problem(4096, 4096, 4096), matmul_problem(512, 512, 16384),
                                   matmul_problem(16, 4096, 4096), matmul_problem(1000, 1000, 1000)};
  for (Problem problem : std::vector<Problem>(problems)) {
    problem.options["b"] = "col";
    problems.push_back(problem);
    problem.options["a"] = "col";
    problems.push_back(problem);
  }
  problems.push_back({"matmul", DType::f32, DType::f32, {1000, 1000, 1000}, {{"b", "col"}}});
  std::map<std::string, std::set<int>> values;  // the wgmma variant's value lists
  for (const Config& config : space)
    for (const auto& [name, value] : config.values) values[name].insert(value);
  int left_out = 0;
  for (std::size_t i = 0; i < space.size(); i += 29)
    for (const auto& [name, choices] : values) {
      for (int value : choices) {
        Config neighbour = space[i];
        neighbour.values[name] = value;
        if (listed.count(neighbour)) continue;
        ++left_out;
        for (const Problem& problem : problems)
          EXPECT_TRUE(matmul().reject(neighbour, problem, hopper)) << neighbour.text() << " on " << problem.key();
      }
    }
  EXPECT_GT(left_out, 1000);
}

TEST(MatmulFamilyTest, DefaultConfigIsAPointOfTheSpace) {
  const std::vector<Config> space = matmul().enumerate();
  for (const char* arch : {"sm_80", "sm_90a"}) {
    Config config = matmul().default_config(matmul_problem(4096, 4096, 4096),
                                            DeviceTarget::assumed_for_arch(arch));
    EXPECT_NE(std::find(space.begin(), space.end(), config), space.end()) << config.text();
  }
}

TEST(MatmulFamilyTest, SourceEmbedsBothTemplatesAndTheirHeaders) {
  const FamilySource& source = matmul().source();
  ASSERT_EQ(source.files.count("matmul/matmul.cuh"), 1u);
  ASSERT_EQ(source.files.count("matmul/matmul_sm90.cuh"), 1u);
  EXPECT_NE(source.files.at("matmul/matmul.cuh").find("matmul_kernel"), std::string::npos);
  EXPECT_NE(source.files.at("matmul/matmul.cuh").find("matmul_reference"), std::string::npos);
  EXPECT_NE(source.files.at("matmul/matmul_sm90.cuh").find("matmul_sm90"), std::string::npos);
  for (const char* header : {"common/tile_primitives.cuh", "common/hopper.cuh",
                             "common/tensor_map.h", "matmul/matmul_params.h",
                             "matmul/matmul_sm90_params.h"})
    EXPECT_EQ(source.files.count(header), 1u) << header;
  for (const auto& [name, text] : source.files) EXPECT_FALSE(text.empty()) << name;
  EXPECT_EQ(matmul().kernel_file(tile_config(128, 128, 32, 2, 2, 4)), "matmul/matmul.cuh");
  EXPECT_EQ(matmul().kernel_file(testing::wgmma_config(128, 256, 4, 2, 2, 1)),
            "matmul/matmul_sm90.cuh");
}

// ---------------------------------------------------------------------------------------------
// validate

TEST(MatmulValidateTest, RejectsAnotherOp) {
  Problem problem = matmul_problem(64, 64, 64);
  problem.op = "conv";
  std::string message = error_message_of([&] { matmul().validate(problem); });
  EXPECT_NE(message.find("conv"), std::string::npos) << message;
}

TEST(MatmulValidateTest, RejectsShapesThatAreNotMxNxKOrBxMxNxK) {
  Problem two_dims{"matmul", DType::bf16, DType::bf16, {64, 64}};
  std::string message = error_message_of([&] { matmul().validate(two_dims); });
  EXPECT_NE(message.find("64x64"), std::string::npos) << message;
  EXPECT_NE(message.find("BxMxNxK"), std::string::npos) << message;
  Problem five_dims{"matmul", DType::bf16, DType::bf16, {8, 8, 8, 8, 8}};
  EXPECT_THROW(matmul().validate(five_dims), InvalidArgument);
  Problem batched{"matmul", DType::bf16, DType::bf16, {8, 8, 8, 8}};
  EXPECT_NO_THROW(matmul().validate(batched));
  Problem too_many{"matmul", DType::bf16, DType::bf16, {1 << 20, 1 << 10, 1 << 10, 8}};
  EXPECT_THROW(matmul().validate(too_many), InvalidArgument);
}

// Options: the layouts and the epilogue, each with its values; a default value is left out, so
// a problem has one key.
TEST(MatmulValidateTest, AcceptsItsOptionsAndNamesTheWrongOnes) {
  Problem problem = matmul_problem(64, 64, 64);
  problem.options = {{"a", "col"}, {"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}};
  EXPECT_NO_THROW(matmul().validate(problem));
  for (const auto& [name, value, expected] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"layout", "col", "unknown option 'layout'"},
           {"a", "row", "a=row is the default: leave the option out"},
           {"act", "none", "act=none is the default"},
           {"act", "tanh", "act=relu|gelu|silu"},
           {"bias", "2", "bias=1"}}) {
    Problem wrong = matmul_problem(64, 64, 64);
    wrong.options = {{name, value}};
    std::string message = error_message_of([&] { matmul().validate(wrong); });
    EXPECT_NE(message.find(expected), std::string::npos) << message;
    EXPECT_THROW(matmul().validate(wrong), InvalidArgument);
  }
}

TEST(MatmulValidateTest, RejectsDimensionsOutsideTheKernelsIntRange) {
  EXPECT_THROW(matmul().validate(matmul_problem(0, 64, 64)), Error);
  EXPECT_THROW(matmul().validate(matmul_problem(64, -1, 64)), Error);
  EXPECT_THROW(matmul().validate(matmul_problem(64, 64, 1ll << 31)), Error);
  EXPECT_THROW(matmul().validate(matmul_problem(1 << 21, 1 << 20, 16)), Error);  // M*N = 2^41
  EXPECT_NO_THROW(matmul().validate(matmul_problem((1ll << 31) - 1, 1, 1)));
}

// fp32 inputs are multiplied as tf32 by both tiled templates: by wgmma on Hopper (k rows of 32
// elements, 128 bytes), by mma.sync everywhere (block_k counts fp32 elements); not by decode.
TEST(MatmulTf32Test, RunsOnBothTiledTemplates) {
  const Problem problem = matmul_problem(4096, 4096, 4096, DType::f32, DType::f32);
  EXPECT_NO_THROW(matmul().validate(problem));
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config config = matmul().default_config(problem, hopper);
  EXPECT_EQ(config.at("variant"), 1);
  EXPECT_EQ(config.at("block_k"), 32);
  EXPECT_EQ(matmul().reject(config, problem, hopper), std::nullopt);
  EXPECT_NE(matmul().reject(testing::wgmma_config(128, 256, 4, 2, 2, 1), problem, hopper), std::nullopt);
  EXPECT_NE(matmul().reject(testing::tf32_config(128, 256, 4, 2, 2, 1), matmul_problem(64, 64, 64), hopper),
            std::nullopt);
  EXPECT_EQ(matmul().reject(tile_config(128, 128, 32, 2, 2, 4), problem, hopper), std::nullopt);

  const DeviceTarget ampere = DeviceTarget::assumed_for_arch("sm_80");
  const Config fallback = matmul().default_config(problem, ampere);
  EXPECT_EQ(fallback.at("variant"), 0);
  EXPECT_EQ(matmul().reject(fallback, problem, ampere), std::nullopt);
  // Twice the bytes of a 16-bit tile: four stages of 128x128x64 fp32 (272 KB) fit no GPU.
  const std::optional<std::string> big = matmul().reject(tile_config(128, 128, 64, 2, 2, 4), problem, ampere);
  ASSERT_TRUE(big);
  EXPECT_NE(big->find("shared memory"), std::string::npos) << *big;
  EXPECT_EQ(matmul().reject(tile_config(128, 128, 64, 2, 2, 4), matmul_problem(4096, 4096, 4096), ampere),
            std::nullopt);
  const Problem decode{"matmul", DType::f32, DType::f32, {16, 4096, 4096}, {{"b", "col"}}};
  EXPECT_NE(matmul().default_config(decode, ampere).at("variant"), 2);
  EXPECT_TRUE(matmul().reject(testing::decode_config(16, 8, 2), decode, ampere));
}

// Few tiles: where K is at most 4096 and smaller tiles fill half the SMs, those with K whole;
// where K is under 2048, the smallest tiles, whole; else 128x128 tiles in K slices (measured on
// the H100, docs/perf/matmul.md v22, v23).
TEST(MatmulWgmmaTest, TheDefaultFillsWithSmallerTilesWhereKIsTooShortToSplit) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  auto tile = [&](const Problem& problem) {
    const Config config = runnable_default(problem, hopper);
    EXPECT_EQ(config.at("split_k"), 1) << config.text();
    return std::to_string(config.at("block_m")) + "x" + std::to_string(config.at("block_n"));
  };
  // 128x128 leaves 36 tiles for 132 SMs; 128x64's 66 fill half.
  EXPECT_EQ(tile({"matmul", DType::bf16, DType::bf16, {698, 659, 1576}, {{"a", "col"}}}), "128x64");
  // Where A's rows lie off L2's lines (each box row straddling two), the 128x64 tiles go in
  // pairs along N sharing them, where that costs no wave (110x4400x3000: 69 tiles, 35 pairs);
  // on the lines alone (K 3072).
  EXPECT_EQ(tile(matmul_problem(110, 4400, 3000)), "128x64");
  EXPECT_EQ(matmul().default_config(matmul_problem(110, 4400, 3000), hopper).at("cluster_n"), 2);
  EXPECT_EQ(matmul().default_config(matmul_problem(110, 4400, 3072), hopper).at("cluster_n"), 1);
  // 128x128 tiles where B's rows are off the lines and M spans two tile rows or more: a pair
  // along M sharing B (260x3000x2560: 3 x 24 tiles, A's rows on the lines), not along N where
  // M is one tile row (95x7080x11208 x @ W^T, both operands off them).
  // (A column-major: a row-major one takes swapped mid-width tiles there, below.)
  const Problem shares_b_problem{
      "matmul", DType::bf16, DType::bf16, {260, 3000, 2560}, {{"a", "col"}}};
  const Config shares_b = matmul().default_config(shares_b_problem, hopper);
  EXPECT_EQ(tile(shares_b_problem), "128x128");
  EXPECT_EQ(shares_b.at("cluster_m"), 2);
  EXPECT_EQ(shares_b.at("cluster_n"), 1);
  // Both operands' rows off them, a dozen 256x256 blocks or more, K from 2048: 128x256 tiles
  // in pairs along M, K split as far as they fill the SMs once (408x2872x8312: 24 pairs, 2
  // slices, A column-major); 7 pairs keep the 128x128 ones (203x1552x3520).
  const Config wide_pairs = matmul().default_config(
      {"matmul", DType::bf16, DType::bf16, {408, 2872, 8312}, {{"a", "col"}}}, hopper);
  EXPECT_EQ(wide_pairs.text(),
            testing::wgmma_config(128, 256, 4, 2, 2, 1, 8, 2, 0, 0, 0, 0).text());
  const Problem seven_pairs{"matmul", DType::bf16, DType::bf16, {203, 1552, 3520}, {{"a", "col"}}};
  EXPECT_EQ(matmul().default_config(seven_pairs, hopper).at("block_n"), 128);
  // (A row-major A there takes swapped 104-row tiles in four slices since v46.)
  EXPECT_EQ(matmul().default_config(matmul_problem(203, 1552, 3520), hopper).at("block_n"), 104);
  // M in one tile row (95x7080x11208: 128x128 alone in two slices up to v55) takes v56's
  // swapped 64-row tiles of N in clusters of 4 instead.
  const Config one_row = matmul().default_config(testing::x_times_w_t({95, 7080, 11208}), hopper);
  EXPECT_EQ(one_row.at("swap_ab"), 1);
  EXPECT_EQ(one_row.at("cluster_m"), 4);
  // No tile fills half: the smallest, 45 of them (128x128 in two slices before).
  EXPECT_EQ(tile({"matmul", DType::bf16, DType::bf16, {559, 272, 248}, {{"b", "col"}}}), "64x64");
  EXPECT_EQ(tile({"matmul", DType::bf16, DType::bf16, {24, 1408, 1146}, {{"a", "col"}}}), "64x64");
  // Where 128x128 fills half, it stays (112 tiles, each K whole).
  EXPECT_EQ(tile({"matmul", DType::bf16, DType::bf16, {128, 14336, 4096}, {{"b", "col"}}}), "128x128");
  // A few rows whose rows need padding, with a short K: the mma.sync tiles read them in place.
  const Problem short_k = testing::x_times_w_t({16, 11516, 156});
  const Config gathered = matmul().default_config(short_k, hopper);
  EXPECT_EQ(gathered.at("variant"), 0);
  EXPECT_EQ(gathered.at("block_m"), 16);
  EXPECT_EQ(matmul().reject(gathered, short_k, hopper), std::nullopt);
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({32, 8696, 87}), hopper).at("block_m"), 32);
  // Where the tiles fill under half the SMs: up to 16 rows at K <= 256 still (the padding's
  // launches cost more), past K 256 or 16 rows not.
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({5, 1152, 114}), hopper).text(),
            gathered.text());
  EXPECT_EQ(matmul().default_config(matmul_problem(10, 121, 231), hopper).text(), gathered.text());
  EXPECT_NE(matmul().default_config(testing::x_times_w_t({11, 2380, 385}), hopper).at("variant"),
            0);
  EXPECT_NE(matmul().default_config(testing::x_times_w_t({20, 1000, 230}), hopper).text(),
            gathered.text());
  // One or two rows times a row-major B off 16 bytes: gathered up to K 336, gemv_kn from 352.
  EXPECT_EQ(matmul().default_config(matmul_problem(2, 15973, 336), hopper).at("variant"), 0);
  EXPECT_EQ(matmul().default_config(matmul_problem(2, 7982, 440), hopper).at("variant"), 4);
  // Past K 512 the decode template reads them in place (an odd K too, realigned).
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({16, 4093, 4093}), hopper).at("variant"), 2);
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({16, 4094, 4094}), hopper).at("variant"), 2);
  // K from 2048 splits, as far as the slices' k blocks save more than their partials cost
  // (K-heavy: 16 tiles in 8 slices of 2048; 2 tiles in 16 slices; 8 tiles of 91x1002 in 8
  // slices, where 16 wrote 5.8 MB of partials and ran 1.29x slower: v23; 91x1000 holds a
  // weight on 16 bytes, which 91x1002's is not: swapped, in phases).
  EXPECT_EQ(matmul().default_config(matmul_problem(512, 512, 16384), hopper).at("split_k"), 8);
  EXPECT_EQ(matmul().default_config(matmul_problem(246, 88, 4184), hopper).at("split_k"), 16);
  const Problem aligned_weight{"matmul", DType::bf16, DType::bf16, {91, 1000, 5232}, {{"a", "col"}}};
  EXPECT_EQ(matmul().default_config(aligned_weight, hopper).at("split_k"), 8);
  EXPECT_EQ(matmul()
                .default_config({"matmul", DType::bf16, DType::bf16, {1, 72, 7040}, {{"a", "col"}}},
                                hopper)
                .at("split_k"),
            16);
  // Under it, no split: 498x382x1636 in 64x64 tiles, K whole (128x128 in 8 slices before).
  EXPECT_EQ(tile(testing::x_times_w_t({498, 382, 1636})), "64x64");
}

// Few tiles of more than 64 rows, K from 2048: M's side in swapped tiles of 80-112 rows in
// steps of 8 (128 of N, two consumers, K whole) in clusters that fit one wave: M in one such
// tile, or over 128 rows where few_tile_us puts them ahead of the default (docs/perf/matmul.md
// v42, v43); the constraints keep such widths to swapped 16-bit tiles over M's rows.
TEST(MatmulWgmmaTest, TheDefaultFitsSwappedMidWidthTilesToTheWave) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  auto mid = [&](const Problem& problem) {
    const Config config = runnable_default(problem, hopper);
    if (!config.at("swap_ab") || config.at("block_m") != 128 || config.at("split_k") != 1)
      return std::string("not mid: ") + config.text();
    return std::to_string(config.at("block_n")) + " rows, cluster " +
           std::to_string(config.at("cluster_m")) + "x" + std::to_string(config.at("cluster_n")) +
           ", " + std::to_string(config.at("stages")) + " stages";
  };
  // 618x2544x12240: 6 x 20 tiles of 104 rows in 15 clusters of 4 along N x 2 along M, as
  // cuBLAS runs it (v41: 128x256 pairs, 2 slices; v42: 112 rows in 2 x 2).
  EXPECT_EQ(mid(matmul_problem(618, 2544, 12240)), "104 rows, cluster 4x2, 7 stages");
  EXPECT_EQ(mid(matmul_problem(1116, 1488, 6000)), "112 rows, cluster 4x2, 7 stages");
  EXPECT_EQ(mid(matmul_problem(478, 2520, 15920)), "80 rows, cluster 4x2, 8 stages");
  // M's two tiles in a pair along M over a weight larger than L2, which then streams from
  // DRAM, A's rows on L2's lines: the deepest ring that fits (v61); a weight within L2, or A's
  // rows off the lines (K 8200), keep kMidWidthBytesInFlight's.
  EXPECT_EQ(mid(testing::x_times_w_t({160, 8192, 8192})), "80 rows, cluster 1x2, 8 stages");
  EXPECT_EQ(mid(testing::x_times_w_t({150, 8192, 3000})), "80 rows, cluster 1x2, 5 stages");
  EXPECT_EQ(mid(testing::x_times_w_t({160, 8192, 8200})), "80 rows, cluster 1x2, 5 stages");
  // 285x4016x12712: 3 x 32 tiles of 96 rows, fours along N (2 x 2 would pad M to 4 tiles).
  // Rings as deep as keep 12.5 MB in flight: 96 CTAs reading 152 rows of 128 bytes a stage
  // take 6 stages (11.2 MB), where 8 would fit.
  EXPECT_EQ(mid(matmul_problem(285, 4016, 12712)), "96 rows, cluster 4x1, 6 stages");
  // Clusters of 8 where fours along N pad its tiles no further than pairs do: 170x6376's 50
  // tiles of N would take 52 in fours, so 2 x 2 (two tiles of 88 rows, as cuBLAS's 88).
  EXPECT_EQ(mid(testing::x_times_w_t({170, 6376, 3120})), "88 rows, cluster 2x2, 8 stages");
  EXPECT_EQ(mid(testing::x_times_w_t({338, 2216, 9856})), "88 rows, cluster 2x2, 8 stages");
  // M in one tile (65-112 rows), N's tiles on half the SMs or more: M rounded up to 8 rows (80
  // at least), fours along N; under half the SMs the default stays (110x4400x3000: 35 tiles,
  // 128x64 pairs).
  EXPECT_EQ(mid(testing::x_times_w_t({90, 9000, 5000})), "96 rows, cluster 4x1, 8 stages");
  EXPECT_EQ(mid(matmul_problem(72, 8800, 2600)), "80 rows, cluster 4x1, 8 stages");
  EXPECT_EQ(mid(matmul_problem(103, 11704, 6832)), "104 rows, cluster 4x1, 6 stages");
  // 113-224 rows from a K of 4096: M in two tiles, in pairs sharing 192-row boxes of the
  // weight on three consumers, where those fill 3/4 of a wave (v57): 210x12288's 64 x 2 CTAs
  // (256x112 in 4 x 2 before), 135x11008's 58 x 2 (80 rows, M rounded up to 8 in halves).
  auto tile_text = [](const Config& config) {
    return std::to_string(config.at("block_m")) + "x" + std::to_string(config.at("block_n")) +
           " on " + std::to_string(config.at("consumers")) + ", cluster " +
           std::to_string(config.at("cluster_m")) + "x" + std::to_string(config.at("cluster_n")) +
           ", split " + std::to_string(config.at("split_k")) +
           (config.at("swap_ab") ? ", swapped" : "");
  };
  auto wide_rows = [&](const Problem& problem) {
    return tile_text(runnable_default(problem, hopper));
  };
  EXPECT_EQ(wide_rows(matmul_problem(210, 12288, 11008)),
            "192x112 on 3, cluster 1x2, split 1, swapped");
  EXPECT_EQ(wide_rows(testing::x_times_w_t({135, 11008, 11008})),
            "192x80 on 3, cluster 1x2, split 1, swapped");
  EXPECT_EQ(wide_rows({"matmul", DType::f32, DType::f32, {135, 11008, 11008}, {{"b", "col"}}}),
            "192x80 on 3, cluster 1x2, split 1, swapped");
  // At 113-128 rows in two K slices where a weight of 4609-6336 rows gives too few CTAs whole.
  EXPECT_EQ(wide_rows(testing::x_times_w_t({117, 5256, 13432})),
            "192x80 on 3, cluster 1x2, split 2, swapped");
  // Over 128 rows not in two slices (0.99x on the mean: 128-row tiles in 4 x 2 stay), nor
  // from a K under 4096, nor where 192-row tiles fill under 3/4 of the SMs.
  EXPECT_EQ(wide_rows(testing::x_times_w_t({129, 5976, 6304})),
            "128x80 on 2, cluster 4x2, split 1, swapped");
  EXPECT_NE(wide_rows(matmul_problem(190, 12288, 4000)).substr(0, 3), "192");
  EXPECT_NE(wide_rows(matmul_problem(190, 8192, 11008)).substr(0, 3), "192");
  // 129-224 rows where 128x64 tiles in pairs along N filled the SMs once with K whole: M in two
  // swapped tiles of 80-112 columns in pairs sharing each 64-row box of the weight (v59).
  EXPECT_EQ(wide_rows(testing::x_times_w_t({160, 4096, 4096})),
            "64x80 on 1, cluster 1x2, split 1, swapped");
  EXPECT_EQ(wide_rows(matmul_problem(192, 4096, 4096)),
            "64x96 on 1, cluster 1x2, split 1, swapped");
  EXPECT_EQ(wide_rows({"matmul", DType::f32, DType::f32, {170, 3176, 2664}, {{"b", "col"}}}),
            "64x88 on 1, cluster 1x2, split 1, swapped");
  // Not under a K of 2048, nor with A column-major (neither measured); a longer K keeps its
  // mid widths in K slices (the pairs lost there: 0.60-0.95x).
  EXPECT_EQ(wide_rows(testing::x_times_w_t({200, 4096, 1024})),
            "128x64 on 1, cluster 1x2, split 1");
  EXPECT_EQ(wide_rows({"matmul", DType::bf16, DType::bf16, {160, 4096, 4096}, {{"a", "col"}}}),
            "128x64 on 1, cluster 1x2, split 1");
  EXPECT_EQ(wide_rows(testing::x_times_w_t({152, 3544, 9680})),
            "128x80 on 2, cluster 4x2, split 2, swapped");
  // 225-256 rows where 128x64 tiles fill the SMs once with K whole and A's rows lie on L2's
  // lines: M's two tiles in ping-pong pairs sharing each 64-row box of the weight, 8 stages
  // (v60); with A's rows off the lines (K 5000), or fp32, the pairs along N stay.
  auto along_m = [&](const Problem& problem) {
    const Config config = runnable_default(problem, hopper);
    return tile_text(config) + (config.at("pingpong") ? ", ping-pong, " : ", ") +
           std::to_string(config.at("stages")) + " stages";
  };
  EXPECT_EQ(along_m(testing::x_times_w_t({256, 4096, 4096})),
            "128x64 on 2, cluster 2x1, split 1, ping-pong, 8 stages");
  EXPECT_EQ(along_m(matmul_problem(241, 3200, 3904)),
            "128x64 on 2, cluster 2x1, split 1, ping-pong, 8 stages");
  EXPECT_EQ(along_m(testing::x_times_w_t({256, 3448, 5000})),
            "128x64 on 1, cluster 1x2, split 1, 6 stages");
  EXPECT_EQ(along_m({"matmul", DType::f32, DType::f32, {256, 4096, 4096}, {{"b", "col"}}}),
            "128x64 on 1, cluster 1x2, split 1, 6 stages");
  // 113-128 rows where the weight's 128-row tiles, M's two 64-row ones in pairs sharing each,
  // fill 3/4 of the SMs once (N 6273-8448): those, K whole, one consumer (v57).
  EXPECT_EQ(wide_rows(testing::x_times_w_t({128, 8192, 8192})),
            "64x128 on 1, cluster 2x1, split 1");
  EXPECT_EQ(wide_rows(matmul_problem(119, 7424, 16232)), "64x128 on 1, cluster 2x1, split 1");
  // fp32 x @ W^T takes A since v58; rule D is 16-bit only, and a column-major A keeps
  // 128x128 tiles (neither measured).
  EXPECT_EQ(wide_rows({"matmul", DType::f32, DType::f32, {128, 8192, 8192}, {{"b", "col"}}}),
            "128x128 on 2, cluster 1x1, split 2");
  EXPECT_EQ(wide_rows({"matmul", DType::bf16, DType::bf16, {128, 8192, 8192}, {{"a", "col"}}}),
            "128x128 on 2, cluster 1x1, split 2");
  // 594x2744x4168: 6 x 22 tiles of 104 rows fill a wave in pairs along M (112 rows did not, in
  // any cluster that fits one: v42 kept 128x256 pairs in two slices). 132 CTAs reading 168
  // rows a stage keep 12.5 MB in flight at 4 stages, but take 5, the least.
  EXPECT_EQ(mid(matmul_problem(594, 2744, 4168)), "104 rows, cluster 1x2, 5 stages");
  // Under half a wave of tiles, K in two slices where few_tile_us puts them first (v45):
  // 137x2456x3632's 40 CTAs of 80 rows in 4 x 2 become 80 (0.0179 ms against 0.0205 whole).
  const Config two_slices = matmul().default_config(matmul_problem(137, 2456, 3632), hopper);
  EXPECT_EQ(two_slices.text(), "block_k=64,block_m=128,block_n=80,cluster_m=4,cluster_n=2,"
                               "consumers=2,group_m=8,l2_promotion=0,pingpong=0,slice_major=0,"
                               "split_cluster=0,split_in_grid=0,split_k=2,stages=8,swap_ab=1,"
                               "variant=1");
  // Each split unit still runs on its own CTA at once: the exchange buffer lies over the ring
  // (8 stages of 128 + 80 rows; C^T's 80 x 132 floats fit in them), and a second launch sums
  // the two slices.
  const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
  const LaunchPlan sliced = matmul().plan(two_slices, matmul_problem(137, 2456, 3632), hopper,
                                          addresses, 0x100000, {});
  ASSERT_EQ(sliced.step_count, 2);
  EXPECT_EQ(sliced.steps[0].geometry.grid[0], 80u);  // 20 x 2 tiles in clusters of 8, 2 slices
  MatmulSm90Params sliced_params;
  std::memcpy(&sliced_params, sliced.steps[0].args.bytes.data(), sizeof sliced_params);
  EXPECT_EQ(sliced_params.k_splits, 2);
  EXPECT_EQ(sliced_params.exchange_in_ring, 1);
  EXPECT_EQ(sliced.steps[0].geometry.dynamic_smem_bytes,
            8u * (128 + 80) * 128 + 16 * 8 + 16 + 1024);
  // Four where those fill under a quarter (v46): 177x1344x10008's 24 CTAs of 96 rows in 4 x 2
  // (0.0225 ms against 0.0295 in two slices).
  const Config four_slices = matmul().default_config(matmul_problem(177, 1344, 10008), hopper);
  EXPECT_EQ(four_slices.at("split_k"), 4);
  EXPECT_EQ(four_slices.at("block_n"), 96);
  EXPECT_EQ(four_slices.at("swap_ab"), 1);
  // fp32 x @ W^T too (tf32, k blocks of 32), whose B is K-major in shared memory.
  const Problem fp32_xwt{"matmul", DType::f32, DType::f32, {618, 2544, 12240}, {{"b", "col"}}};
  const Config fp32_mid = matmul().default_config(fp32_xwt, hopper);
  EXPECT_EQ(mid(fp32_xwt), "104 rows, cluster 4x2, 7 stages");
  EXPECT_EQ(fp32_mid.at("block_k"), 32);
  // Outside the rule: K under 2048 (1000^3), K-heavy (512x512x16384 keeps 8 slices), M of
  // 113-128 rows, A column-major (which the swapped tile would transpose), B's rows off 16
  // bytes (a copy or row phases), fp32 with B row-major (read through registers), a batch.
  const Problem fp32_row_b{"matmul", DType::f32, DType::f32, {618, 2544, 12240}};
  auto swapped = [&](const Problem& problem) {
    return matmul().default_config(problem, hopper).at("swap_ab");
  };
  EXPECT_EQ(swapped(matmul_problem(1000, 1000, 1000)), 0);
  EXPECT_EQ(matmul().default_config(matmul_problem(512, 512, 16384), hopper).at("split_k"), 8);
  EXPECT_EQ(matmul().default_config(matmul_problem(110, 4400, 3000), hopper).at("block_n"), 64);
  // Where N's 128-row tiles fill under half the SMs but 64-row ones fill half or more, from a
  // K of 4096: those, one consumer, K whole, in clusters of 4 along N (pairs where fours take a
  // second wave), 10 stages (v56).
  using Case = std::tuple<Problem, int, int>;
  for (const auto& [problem, width, cluster] :
       {Case{testing::x_times_w_t({97, 8192, 8192}), 104, 2},
        Case{matmul_problem(74, 8192, 5120), 80, 2},
        Case{testing::x_times_w_t({66, 5000, 4848}), 80, 4}}) {
    const Config n64 = runnable_default(problem, hopper);
    EXPECT_EQ(std::vector({n64.at("swap_ab"), n64.at("block_m"), n64.at("block_n"),
                           n64.at("split_k"), n64.at("cluster_m"), n64.at("stages")}),
              std::vector({1, 64, width, 1, cluster, 10}))
        << problem.key();
  }
  const Problem short_k = testing::x_times_w_t({97, 8192, 4088});
  EXPECT_EQ(matmul().default_config(short_k, hopper).at("block_m"), 128);
  // fp32 x @ W^T too since v58 (tf32, k blocks of 32); with B row-major, which swapped tiles
  // would read MN-major, not.
  const Problem fp32_one_row{"matmul", DType::f32, DType::f32, {97, 8192, 8192}, {{"b", "col"}}};
  EXPECT_EQ(matmul().default_config(fp32_one_row, hopper).at("block_m"), 64);
  EXPECT_EQ(matmul().default_config(fp32_one_row, hopper).at("cluster_m"), 2);
  const Problem fp32_b_rows{"matmul", DType::f32, DType::f32, {97, 8192, 8192}};
  EXPECT_EQ(matmul().default_config(fp32_b_rows, hopper).at("block_m"), 128);
  EXPECT_EQ(swapped(testing::x_times_w_t({120, 14336, 4096})), 0);
  EXPECT_EQ(swapped({"matmul", DType::bf16, DType::bf16, {618, 2544, 12240}, {{"a", "col"}}}), 0);
  EXPECT_EQ(swapped(matmul_problem(618, 2543, 12240)), 0);
  EXPECT_NE(matmul().default_config(fp32_row_b, hopper).at("block_n"), 112);
  EXPECT_EQ(swapped({"matmul", DType::bf16, DType::bf16, {2, 618, 2544, 12240}}), 0);
  // The constraints: mid widths are swapped, over more than 64 rows, no 16 rows past M, both
  // operands from shared memory.
  const Problem rows_618 = matmul_problem(618, 2544, 12240);
  const Config swapped_104 = matmul().default_config(rows_618, hopper);
  Config unswapped = swapped_104;
  unswapped.values["swap_ab"] = 0;
  EXPECT_TRUE(matmul().reject(unswapped, rows_618, hopper));
  EXPECT_TRUE(matmul().reject(swapped_104, matmul_problem(64, 2544, 12240), hopper));
  EXPECT_TRUE(matmul().reject(swapped_104, matmul_problem(88, 2544, 12240), hopper));
  EXPECT_EQ(matmul().reject(swapped_104, matmul_problem(89, 2544, 12240), hopper), std::nullopt);
  EXPECT_TRUE(matmul().reject(fp32_mid, fp32_row_b, hopper));
  Config off_steps = swapped_104;
  off_steps.values["block_n"] = 100;
  EXPECT_TRUE(matmul().reject(off_steps, rows_618, hopper));
  // Clusters of 8 for the mid widths only; 104 rows shared by four CTAs load boxes of 32 rows
  // (multicast_box_rows), the last one overlapping the third.
  Config plain_eights = matmul().default_config(matmul_problem(1024, 1024, 1024), hopper);
  plain_eights.values["cluster_m"] = 4;
  plain_eights.values["cluster_n"] = 2;
  EXPECT_TRUE(matmul().reject(plain_eights, matmul_problem(1024, 1024, 1024), hopper));
  EXPECT_EQ(multicast_box_rows(104, 4), 32);
  EXPECT_EQ(multicast_box_row0(104, 4, 2), 64);
  EXPECT_EQ(multicast_box_row0(104, 4, 3), 72);
  EXPECT_EQ(multicast_box_rows(96, 4), 24);
  EXPECT_EQ(multicast_box_row0(96, 4, 3), 72);
  EXPECT_EQ(multicast_box_rows(128, 2), 64);
}

// The swapped mid widths on 256 rows of N (two consumers) where no 128-row one is put first,
// and past few tiles wherever the fitted tiles take one wave; on 64 rows (one consumer) over
// an N of 65-256 whose 64-row tiles the clusters along N hold whole, those of one CTA along
// N up to 2048 rows (docs/perf/matmul.md v48); from a K of 512 (v49).
TEST(MatmulWgmmaTest, TheDefaultFitsSwappedMidWidthsToNsRows) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  auto mid = [&](const Problem& problem) {
    const Config config = runnable_default(problem, hopper);
    if (!config.at("swap_ab")) return std::string("unswapped: ") + config.text();
    return std::to_string(config.at("block_m")) + "x" + std::to_string(config.at("block_n")) +
           ", cluster " + std::to_string(config.at("cluster_m")) + "x" +
           std::to_string(config.at("cluster_n")) + ", split " +
           std::to_string(config.at("split_k"));
  };
  // Past few tiles, where 128x256 pairs took one wave (1.28x, 1.22x, 1.33x in rounds).
  EXPECT_EQ(mid(testing::x_times_w_t({562, 4752, 12856})), "256x96, cluster 1x2, split 1");
  EXPECT_EQ(mid(matmul_problem(556, 3928, 4320)), "256x96, cluster 4x2, split 1");
  EXPECT_EQ(mid(testing::x_times_w_t({2111, 1368, 5224})), "256x112, cluster 2x2, split 1");
  // An N of 65-256 in 64-row tiles (1.44x, 1.25x, 1.48x).
  EXPECT_EQ(mid(testing::x_times_w_t({1986, 117, 4336})), "64x80, cluster 2x2, split 2");
  EXPECT_EQ(mid(testing::x_times_w_t({2836, 213, 2440})), "64x96, cluster 4x2, split 1");
  EXPECT_EQ(mid(testing::x_times_w_t({849, 169, 4424})), "64x88, cluster 1x2, split 4");
  // A 128-row mid width put first stays (429x2663x13808: 256x80 in two slices lost 0.83x);
  // over 2048 rows no 256- or 64-row tile alone along N (2209x1176x4472: 0.93x).
  EXPECT_EQ(mid(testing::x_times_w_t({429, 2663, 13808})), "128x112, cluster 2x2, split 1");
  const Config rows_2209 =
      matmul().default_config(testing::x_times_w_t({2209, 1176, 4472}), hopper);
  EXPECT_EQ(rows_2209.at("swap_ab"), 0);
  EXPECT_EQ(rows_2209.at("block_n"), 256);
  // Under a K of 2048 too (v49: 1.57x, 1.53x, 1.30x), the 256-row tiles only from an N of 3072
  // (2048x1024x1024 keeps its 128x128 tiles: 256x80 in 4 x 2 ran it 0.81x).
  EXPECT_EQ(mid(matmul_problem(297, 3400, 1672)), "128x80, cluster 4x2, split 1");
  EXPECT_EQ(mid(testing::x_times_w_t({300, 177, 1768})), "64x80, cluster 1x2, split 4");
  EXPECT_EQ(mid(testing::x_times_w_t({657, 3880, 1240})), "256x112, cluster 4x2, split 1");
  EXPECT_EQ(matmul().default_config(matmul_problem(2048, 1024, 1024), hopper).at("swap_ab"), 0);
}

// A narrow N (routers, low-rank adapters, heads of a few classes) in one 64-row tile column:
// as narrow as N where B is K-major, K split over the SMs; 64 columns where B is MN-major or K
// too short to split; larger tiles where B is MN-major and 64-row tiles would fill half the
// SMs; the decode template's 8-column blocks for a few rows of N <= 8 (docs/perf/matmul.md v29).
TEST(MatmulWgmmaTest, TheDefaultTakesNarrowTilesForANarrowN) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  auto tile = [&](const Problem& problem) {
    const Config config = runnable_default(problem, hopper);
    if (config.at("variant") != 1) return "variant " + std::to_string(config.at("variant"));
    return std::to_string(config.at("block_m")) + "x" + std::to_string(config.at("block_n")) +
           " split " + std::to_string(config.at("split_k")) +
           (config.at("swap_ab") ? " swapped" : "");
  };
  EXPECT_EQ(tile(testing::x_times_w_t({1024, 16, 4096})), "64x16 split 8");
  EXPECT_EQ(tile(testing::x_times_w_t({4096, 8, 4096})), "64x16 split 2");
  EXPECT_EQ(tile(testing::x_times_w_t({777, 24, 3000})), "64x32 split 8");
  EXPECT_EQ(tile(testing::x_times_w_t({16384, 64, 4096})), "64x64 split 1");
  EXPECT_EQ(tile(testing::x_times_w_t({3000, 20, 700})), "64x64 split 1");
  // A row-major B of N <= 32 is transposed first (K-major rows for the narrow tiles) where its
  // rows are copied anyway, or N <= 16 against 8M elements of A or more; else (and of N 33-64)
  // it is read MN-major, 64 columns a stage.
  EXPECT_EQ(tile(matmul_problem(16384, 8, 4096)), "64x16 split 1");
  EXPECT_EQ(tile(matmul_problem(2048, 8, 4096)), "64x16 split 4");
  EXPECT_EQ(tile(matmul_problem(300, 5, 3000)), "64x16 split 16");
  EXPECT_EQ(tile(matmul_problem(1024, 16, 4096)), "64x64 split 8");
  EXPECT_EQ(tile(matmul_problem(1024, 48, 4096)), "64x64 split 8");
  EXPECT_EQ(tile({"matmul", DType::bf16, DType::bf16, {40, 32, 6000}, {{"a", "col"}}}), "64x64 split 16");
  EXPECT_EQ(tile({"matmul", DType::f32, DType::f32, {1000, 16, 2000}}), "64x16 split 8");
  // Many rows of A over a narrow N: the tile that streams the least of A a CTA (v47). Swapped
  // 64-row tiles of 80 rows of M, K in two slices (0.0349 ms against v46's 128-row ones,
  // 0.0428); 128x64 tiles on one consumer in one wave (0.0234 against 192x128's 0.0271);
  // narrow tiles under 64 columns stay.
  EXPECT_EQ(tile(matmul_problem(4408, 48, 7240)), "64x80 split 2 swapped");
  EXPECT_EQ(tile(testing::x_times_w_t({4408, 48, 7240})), "64x80 split 2 swapped");
  EXPECT_EQ(tile(matmul_problem(16311, 56, 1296)), "128x64 split 1");
  EXPECT_EQ(tile(matmul_problem(12259, 48, 13096)), "64x96 split 1 swapped");
  EXPECT_EQ(tile(testing::x_times_w_t({11909, 23, 552})), "64x96 split 1 swapped");
  EXPECT_EQ(tile(matmul_problem(5557, 8, 3560)), "64x16 split 1");
  EXPECT_EQ(tile(testing::x_times_w_t({5735, 24, 2304})), "64x32 split 1");
  EXPECT_EQ(tile(testing::x_times_w_t({8192, 64, 4096})), "64x64 split 1");
  // Batches too (2x4408x48x7240 0.0592 ms against 128x256 pairs' 0.1433). Outside it: under
  // 1024 rows, fp32, a column-major A.
  EXPECT_EQ(tile({"matmul", DType::bf16, DType::bf16, {2, 4408, 48, 7240}}),
            "64x80 split 1 swapped");
  EXPECT_EQ(tile(testing::x_times_w_t({1000, 48, 4096})), "64x64 split 8");
  EXPECT_EQ(tile({"matmul", DType::f32, DType::f32, {4408, 48, 7240}, {{"b", "col"}}}),
            "64x64 split 1");
  EXPECT_EQ(tile({"matmul", DType::bf16, DType::bf16, {4408, 48, 7240}, {{"a", "col"}}}),
            "128x128 split 2");
  // N of 129-192 from K 2048: one swapped 192-row tile holds N (4750x152x7728 rr 0.0361 ms
  // against 128x64 pairs' 0.0832; v72), B's rows off 16 bytes too. Under that K, or with A's
  // rows off 16 bytes, the fitted tiles stay.
  EXPECT_EQ(tile(matmul_problem(4750, 152, 7728)), "192x80 split 2 swapped");
  EXPECT_EQ(tile(testing::x_times_w_t({2717, 160, 15176})), "192x88 split 4 swapped");
  EXPECT_EQ(tile(testing::x_times_w_t({6186, 184, 6976})), "192x96 split 2 swapped");
  EXPECT_EQ(tile(testing::x_times_w_t({7661, 152, 1016})), "128x128 split 1");
  EXPECT_EQ(tile(matmul_problem(4750, 152, 7724)), "128x64 split 1");
  // N of 65-128 from K 4096, in one swapped 128-row tile on two consumers where the tiles
  // would stay unswapped (5367x107x15976 rr 0.0695 ms against 128x128's 0.0911); where the
  // swapped mid widths take it, they stay (2583x72x13624 rr: 128x88 pairs, four slices), as
  // the fitted tiles do under K 4096.
  EXPECT_EQ(tile(matmul_problem(5367, 107, 15976)), "128x88 split 2 swapped");
  EXPECT_EQ(tile(testing::x_times_w_t({3959, 71, 14120})), "128x80 split 2 swapped");
  EXPECT_EQ(tile(matmul_problem(2583, 72, 13624)), "128x88 split 4 swapped");
  EXPECT_EQ(matmul().default_config(matmul_problem(2583, 72, 13624), hopper).at("cluster_n"), 2);
  EXPECT_EQ(tile(matmul_problem(3760, 80, 3032)), "64x64 split 1");
  EXPECT_EQ(matmul().default_config({"matmul", DType::bf16, DType::bf16, {2, 5367, 107, 15976}},
                                    hopper).at("swap_ab"), 0);  // batches: not measured
  const Problem router = testing::x_times_w_t({1, 8, 4096});
  EXPECT_EQ(tile(router), "variant 2");
  EXPECT_EQ(matmul().default_config(router, hopper).at("block_n"), 8);
}

// The untuned default fetches around L2's misses where a weight streams (decode, M = 128, big
// squares) and not where several tiles of few read every row (K-heavy, 1000^3): measured both
// ways on the H100 (docs/perf/matmul.md v13).
TEST(MatmulWgmmaTest, TheDefaultsL2PromotionFollowsHowOftenRowsAreRead) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  auto promotion = [&](const Problem& problem) {
    const Config config = runnable_default(problem, hopper);
    return config.at("l2_promotion");
  };
  EXPECT_EQ(promotion(matmul_problem(512, 512, 16384)), 0);
  EXPECT_EQ(promotion(matmul_problem(1000, 1000, 1000)), 0);
  // 1000^3 runs whole: 128x64 tiles in pairs sharing A fill the 132 SMs once (128 CTAs).
  const Config small = matmul().default_config(matmul_problem(1000, 1000, 1000), hopper);
  EXPECT_EQ(small.at("block_n"), 64);
  EXPECT_EQ(small.at("cluster_n"), 2);
  EXPECT_EQ(small.at("split_k"), 1);
  // Where K dominates, or 128x64 tiles would run in two waves, the default splits K instead.
  EXPECT_GT(matmul().default_config(matmul_problem(1024, 1024, 16384), hopper).at("split_k"), 1);
  EXPECT_EQ(matmul().default_config(matmul_problem(2048, 1024, 1024), hopper).at("block_n"), 128);
  EXPECT_EQ(promotion(matmul_problem(4096, 4096, 4096)), 256);
  // M = 128 streaming a wide weight through 128x128 tiles in K slices: promoted. (Over 8192
  // rows of the weight such tiles gave way to 64x128 pairs in v57.)
  const Problem m128{"matmul", DType::bf16, DType::bf16, {128, 4608, 14336}, {{"b", "col"}}};
  EXPECT_EQ(promotion(m128), 256);
  EXPECT_GT(matmul().default_config(m128, hopper).at("split_k"), 1);
  // Where 64x64 tiles fill the SMs once, they run K whole up to a K of 6144, the skinny side's
  // two tiles a cluster sharing the weight, 13 stages: not promoted (cuBLAS's shape for
  // 128x4096x4096). A skinny N clusters along N instead.
  for (long long k : {4096, 6143}) {
    const Problem qo{"matmul", DType::bf16, DType::bf16, {128, 4096, k}, {{"b", "col"}}};
    const Config qo_default = matmul().default_config(qo, hopper);
    EXPECT_EQ(qo_default.at("block_m"), 64);
    EXPECT_EQ(qo_default.at("block_n"), 64);
    EXPECT_EQ(qo_default.at("split_k"), 1);
    EXPECT_EQ(qo_default.at("cluster_m"), 2);
    EXPECT_EQ(qo_default.at("cluster_n"), 1);
    EXPECT_EQ(qo_default.at("stages"), 13);
    EXPECT_EQ(promotion(qo), 0);
  }
  // From a K of 6144, 16-bit inputs: M's two tiles in a pair along 128 rows of the weight, K in
  // two slices, ping-pong, promoted (v55); fp32 and a skinny N keep K whole.
  using Case = std::tuple<DType, std::vector<std::int64_t>, ProblemOptions>;
  for (const auto& [in, shape, options] :
       {Case{DType::bf16, {128, 4096, 14336}, {{"b", "col"}}},
        Case{DType::f16, {65, 3500, 10000}, {{"b", "col"}}},
        Case{DType::bf16, {75, 4208, 10864}, {{"a", "col"}}},
        Case{DType::f32, {128, 4096, 14336}, {{"b", "col"}}},
        Case{DType::bf16, {4096, 128, 14336}, {}}}) {
    const Problem p{"matmul", in, in, shape, options};
    const Config config = matmul().default_config(p, hopper);
    EXPECT_EQ(matmul().reject(config, p, hopper), std::nullopt) << config.text();
    const bool sliced = config.at("block_n") == 128 && config.at("split_k") == 2 &&
                        config.at("pingpong") == 1 && config.at("cluster_m") == 2;
    EXPECT_EQ(sliced && promotion(p) == 256, in != DType::f32 && shape[0] < 4096)
        << p.key() << " " << config.text();
  }
  const Config n128 = matmul().default_config(matmul_problem(4096, 128, 4096), hopper);
  EXPECT_EQ(matmul().reject(n128, matmul_problem(4096, 128, 4096), hopper), std::nullopt);
  EXPECT_EQ(n128.at("cluster_m"), 1);
  EXPECT_EQ(n128.at("cluster_n"), 2);
  // A skinny side of one tile (a column-major A of 64 rows) has no pair to make.
  const Problem m64{"matmul", DType::bf16, DType::bf16, {64, 8192, 4096}, {{"a", "col"}}};
  const Config m64_default = matmul().default_config(m64, hopper);
  EXPECT_EQ(matmul().reject(m64_default, m64, hopper), std::nullopt);
  EXPECT_EQ(m64_default.at("cluster_m") * m64_default.at("cluster_n"), 1) << m64_default.text();
  // A decode shape past the decode template's weights (64 MB): swap_ab on wgmma, promoted.
  const Problem decode{"matmul", DType::bf16, DType::bf16, {16, 14336, 4096}, {{"b", "col"}}};
  const Config decode_default = matmul().default_config(decode, hopper);
  EXPECT_EQ(decode_default.at("variant"), 1);
  EXPECT_EQ(decode_default.at("swap_ab"), 1);
  EXPECT_EQ(promotion(decode), 256);
}

// The mma.sync template reads tf32 K-major too: a row-major B is transposed into the workspace
// (once, when every batch shares it) and the kernel reads the copy as column-major B, A in
// place. Unaligned rows read in place take the gathering kernel; transposed rows are padded.
TEST(MatmulTf32Test, MmaSyncReadsTransposedCopiesOfMnMajorOperands) {
  const DeviceTarget ampere = DeviceTarget::assumed_for_arch("sm_80");
  const Config config = tile_config(64, 64, 32, 2, 2, 3);
  const Problem problem{"matmul", DType::f32, DType::f32, {3, 100, 200, 300}, {}};
  ASSERT_EQ(matmul().reject(config, problem, ampere), std::nullopt);
  const std::vector<std::string> kernels = matmul().kernel_expressions(config, problem);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0], "tilesmith::matmul_kernel<64,64,32,2,2,3,1,2,2," +
                            std::to_string(kColumnMajorB) + ",0>");
  EXPECT_EQ(kernels[1], "tilesmith::transpose_rows<4>");
  // The copy's rows of K = 300 (1200 bytes) padded to 128 bytes: 320 elements.
  const std::size_t b_bytes = (3u * 200 * 320 * 4 + 255) / 256 * 256;
  EXPECT_EQ(matmul().workspace_bytes(config, problem, ampere), b_bytes);

  CallScalars shared_b;  // A packed, B one matrix for every batch
  shared_b.batch_strides[1] = 0;
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0x30000};
  const LaunchPlan plan = matmul().plan(config, problem, ampere, addresses, 0x100000, shared_b);
  ASSERT_EQ(plan.step_count, 2);
  EXPECT_EQ(plan.steps[0].kernel, 1);
  TransposeParams b;
  std::memcpy(&b, plan.steps[0].args.bytes.data(), sizeof b);
  EXPECT_EQ(b.batches, 1);  // shared: transposed once
  EXPECT_EQ(b.rows, 300);   // B stored k x n, written n x k
  EXPECT_EQ(b.cols, 200);
  EXPECT_EQ(plan.steps[1].kernel, 0);
  MatmulParams p;
  std::memcpy(&p, plan.steps[1].args.bytes.data(), sizeof p);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.a), 0x10000u);
  EXPECT_EQ(p.lda, 300);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.b), 0x100000u);
  EXPECT_EQ(p.ldb, 320);
  EXPECT_EQ(p.stride_b, 0);
  EXPECT_EQ(p.stride_a, 100 * 300);

  // K = 299: A's rows (read in place) are off 16 bytes, so the gathering kernel; a
  // column-major B needs no transpose and no workspace.
  const Problem unaligned{"matmul", DType::f32, DType::f32, {100, 200, 299}, {{"b", "col"}}};
  ASSERT_EQ(matmul().reject(config, unaligned, ampere), std::nullopt);
  const std::vector<std::string> gathering = matmul().kernel_expressions(config, unaligned);
  ASSERT_EQ(gathering.size(), 1u);
  EXPECT_NE(gathering[0].find(",3,0,2,2,"), std::string::npos) << gathering[0];
  EXPECT_EQ(matmul().workspace_bytes(config, unaligned, ampere), 0u);
  // Both operands transposed into padded rows: aligned however K falls.
  const Problem both{"matmul", DType::f32, DType::f32, {100, 200, 299}, {{"a", "col"}}};
  const std::vector<std::string> padded = matmul().kernel_expressions(config, both);
  ASSERT_EQ(padded.size(), 2u);
  EXPECT_NE(padded[0].find(",3,1,2,2,"), std::string::npos) << padded[0];
}

// tf32 reads shared memory K-major only: the sm_90a template reads a column-major fp32 A in
// place (through registers, as its MN-major A), and a row-major B is transposed into the
// workspace first where it is not swapped (the next test), its rows padded to 128 bytes.
TEST(MatmulTf32Test, AColumnMajorAIsReadInPlaceAndARowMajorBTransposedFirst) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem problem{"matmul", DType::f32, DType::f32, {3, 100, 200, 300}, {{"a", "col"}}};
  const Config config = testing::tf32_config(128, 128, 4, 2, 1, 1);
  ASSERT_EQ(matmul().reject(config, problem, hopper), std::nullopt);
  const std::vector<std::string> kernels = matmul().kernel_expressions(config, problem);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_NE(kernels[0].find(",2,2," + std::to_string(kColumnMajorA | kColumnMajorB) + ","),
            std::string::npos)
      << kernels[0];  // f32 in and out; the kernel's A column-major (where it lies), B the copy
  EXPECT_EQ(kernels[1], "tilesmith::transpose_rows<4>");
  auto on_256 = [](std::size_t bytes) { return (bytes + 255) / 256 * 256; };
  // B's rows of K = 300 (1200 bytes) padded to 128 bytes: 320 elements.
  const std::size_t b_bytes = on_256(3u * 200 * 320 * 4);
  EXPECT_EQ(matmul().workspace_bytes(config, problem, hopper), b_bytes);
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0x30000};
  const LaunchPlan plan = matmul().plan(config, problem, hopper, addresses, 0x100000, {});
  ASSERT_EQ(plan.step_count, 2);
  TransposeParams b;
  std::memcpy(&b, plan.steps[0].args.bytes.data(), sizeof b);
  EXPECT_EQ(plan.steps[0].kernel, 1);
  EXPECT_EQ(b.rows, 300);  // B stored k x n, written n x k
  EXPECT_EQ(b.cols, 200);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(b.dst), 0x100000u);
  EXPECT_EQ(b.dst_ld, 320);
  const KernelArgs& args = plan.steps[1].args;
  EXPECT_EQ(args.tensor_maps[0].address, 0x10000u);  // A where it lies
  EXPECT_EQ(args.tensor_maps[0].dims[0], 100u);       // M innermost: MN-major
  EXPECT_EQ(args.tensor_maps[0].box[0], 32u);         // 128 bytes of fp32
  EXPECT_EQ(args.tensor_maps[0].stride_bytes[1], 300u * 100 * 4);
  EXPECT_EQ(args.tensor_maps[1].address, 0x100000u);
  EXPECT_EQ(args.tensor_maps[1].dims[0], 300u);  // K innermost: K-major
  EXPECT_EQ(args.tensor_maps[1].stride_bytes[0], 320u * 4);
  EXPECT_EQ(args.tensor_maps[1].stride_bytes[1], 200u * 320 * 4);
  // Both operands column-major: nothing to transpose, one launch.
  const Problem both{"matmul", DType::f32, DType::f32, {3, 100, 200, 300}, {{"a", "col"}, {"b", "col"}}};
  EXPECT_EQ(matmul().kernel_expressions(config, both).size(), 1u);
  EXPECT_EQ(matmul().workspace_bytes(config, both, hopper), 0u);
}

// Under swap_ab a row-major fp32 B is the kernel's A, which the sm_90a template reads through
// registers in either order: no transpose, one launch, B's map MN-major where it lies. Wide
// swapped tiles (C^T out transposed through the staging slots, or K slices' partials
// transposed) are for that case only; the untuned default takes the swapped twin of its tile
// for fp32 times a row-major B, whatever the regime.
TEST(MatmulTf32Test, ARowMajorBIsReadInPlaceUnderSwapAb) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config fallback =
      matmul().default_config(Problem{"matmul", DType::f32, DType::f32, {4096, 4096, 4096}, {}}, hopper);
  EXPECT_EQ(fallback.at("swap_ab"), 1);
  EXPECT_EQ(fallback.at("block_m"), 128);
  EXPECT_EQ(fallback.at("block_n"), 256);
  EXPECT_EQ(fallback.at("cluster_m"), 1);
  EXPECT_EQ(fallback.at("cluster_n"), 2);  // the pair along M still shares B
  EXPECT_EQ(matmul().default_config(
                Problem{"matmul", DType::f32, DType::f32, {4096, 4096, 4096}, {{"b", "col"}}}, hopper)
                .at("swap_ab"),
            0);
  // Every other regime's tile swapped: 1000^3's 128x64 pair along N sharing A becomes 64 of N
  // x 128 of M, the pair along N still sharing A; K-heavy keeps its K slices; M = 128's 64x64
  // pair goes unclustered (narrow swapped tiles go through the exchange buffer).
  auto default_of = [&](std::vector<std::int64_t> shape) {
    return matmul().default_config(Problem{"matmul", DType::f32, DType::f32, shape, {}}, hopper);
  };
  const Config one_wave = default_of({1000, 1000, 1000});
  EXPECT_EQ(one_wave.at("swap_ab"), 1);
  EXPECT_EQ(one_wave.at("block_m"), 64);
  EXPECT_EQ(one_wave.at("block_n"), 128);
  EXPECT_EQ(one_wave.at("cluster_m"), 2);
  const Config k_heavy = default_of({512, 512, 16384});
  EXPECT_EQ(k_heavy.at("swap_ab"), 1);
  EXPECT_GT(k_heavy.at("split_k"), 1);
  const Config skinny = default_of({128, 4096, 4096});
  EXPECT_EQ(skinny.at("swap_ab"), 1);
  EXPECT_EQ(skinny.at("block_n"), 64);
  EXPECT_EQ(skinny.at("cluster_m") * skinny.at("cluster_n"), 1);
  // ... but 100 rows in one 128-column tile, K split to fill the SMs.
  const Config ragged = default_of({100, 4096, 2000});
  EXPECT_EQ(ragged.at("swap_ab"), 1);
  EXPECT_EQ(ragged.at("block_n"), 128);
  EXPECT_EQ(ragged.at("split_k"), 4);
  // The wave-fitted ping-pong 128x176 reads B K-major: 128x256 swapped instead.
  const Config waves = default_of({8192, 8192, 8192});
  EXPECT_EQ(waves.at("swap_ab"), 1);
  EXPECT_EQ(waves.at("block_n"), 256);

  const Problem problem{"matmul", DType::f32, DType::f32, {300, 200, 136}, {}};
  const Config config = testing::tf32_config(128, 128, 4, 2, 1, 2, 8, 1, 0, 1);
  ASSERT_EQ(matmul().reject(config, problem, hopper), std::nullopt);
  const std::vector<std::string> kernels = matmul().kernel_expressions(config, problem);
  ASSERT_EQ(kernels.size(), 1u);  // no transpose
  EXPECT_NE(kernels[0].find(",2,2," + std::to_string(kColumnMajorA | kColumnMajorB) + ","),
            std::string::npos)
      << kernels[0];  // C^T = B^T A^T: the kernel's A is B, MN-major; its B is A, K-major
  EXPECT_EQ(matmul().workspace_bytes(config, problem, hopper), 0u);
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0x30000};
  const LaunchPlan plan = matmul().plan(config, problem, hopper, addresses, 0x100000, {});
  ASSERT_EQ(plan.step_count, 1);
  const KernelArgs& args = plan.steps[0].args;
  EXPECT_EQ(args.tensor_maps[0].address, 0x20000u);  // B where it lies
  EXPECT_EQ(args.tensor_maps[0].dims[0], 200u);       // N innermost: MN-major
  EXPECT_EQ(args.tensor_maps[0].box[0], 32u);         // 128 bytes of fp32
  EXPECT_EQ(args.tensor_maps[0].box[1], 16u);         // 32 k rows, half from each of the pair
  EXPECT_EQ(args.tensor_maps[1].address, 0x10000u);
  EXPECT_EQ(args.tensor_maps[1].dims[0], 136u);       // A's K innermost: K-major

  EXPECT_NE(matmul().reject(testing::wgmma_config(128, 128, 4, 2, 1, 2, 8, 1, 0, 1),
                            Problem{"matmul", DType::bf16, DType::bf16, {300, 200, 136}, {}}, hopper),
            std::nullopt);  // 16-bit B: wgmma reads it N-major itself
  EXPECT_NE(matmul().reject(config, Problem{"matmul", DType::f32, DType::f32, {300, 200, 136}, {{"b", "col"}}},
                            hopper),
            std::nullopt);
  // K slices through the workspace: the partials, then splitk_reduce; not inside a cluster.
  const Problem long_k{"matmul", DType::f32, DType::f32, {300, 200, 4096}, {}};
  const Config sliced = testing::tf32_config(128, 128, 4, 2, 1, 1, 8, 2, 0, 1);
  ASSERT_EQ(matmul().reject(sliced, long_k, hopper), std::nullopt);
  EXPECT_EQ(matmul().workspace_bytes(sliced, long_k, hopper), 2u * 300 * 200 * 4);
  EXPECT_EQ(matmul().plan(sliced, long_k, hopper, addresses, 0x100000, {}).step_count, 2);
  EXPECT_NE(matmul().reject(testing::tf32_config(128, 128, 4, 2, 1, 1, 8, 2, 1, 1), long_k, hopper),
            std::nullopt);
  EXPECT_NE(matmul().reject(testing::tf32_config(128, 128, 4, 2, 1, 1, 8, 1, 0, 1, 0, 256, 1), problem, hopper),
            std::nullopt);  // no ping-pong
}

// A column-major A of a few rows against a large B (2x10488x9248): A (9248 rows of 2) is
// transposed into the workspace, its rows of K padded; B's rows are on 16 bytes and it is read
// where it lies, though the problem's A makes it unaligned (docs/perf/matmul.md v22).
TEST(MatmulPlanTest, AFewColumnMajorRowsAreTransposedAndAnAlignedBIsNotCopied) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem problem{"matmul", DType::bf16, DType::bf16, {2, 10488, 9248}, {{"a", "col"}}};
  const Config config = matmul().default_config(problem, hopper);
  EXPECT_EQ(config.at("swap_ab"), 1) << config.text();
  const std::vector<std::string> kernels = matmul().kernel_expressions(config, problem);
  EXPECT_NE(std::find(kernels.begin(), kernels.end(), "tilesmith::transpose_rows<2>"), kernels.end());
  const std::vector<std::uint64_t> addresses = {0x10000, 0x2000000, 0x3000000};
  const LaunchPlan plan = matmul().plan(config, problem, hopper, addresses, 0x100000000, {});
  int copies = 0, transposes = 0;
  for (int i = 0; i < plan.step_count; ++i) {
    const std::string& kernel = kernels.at(static_cast<std::size_t>(plan.steps[i].kernel));
    copies += kernel.find("copy_rows") != std::string::npos;
    transposes += kernel.find("transpose_rows") != std::string::npos;
  }
  EXPECT_EQ(copies, 0);  // no copy of B's 194 MB
  ASSERT_EQ(transposes, 1);
  TransposeParams a;
  std::memcpy(&a, plan.steps[0].args.bytes.data(), sizeof a);
  EXPECT_EQ(a.rows, 9248);  // A stored k x m, written m x k
  EXPECT_EQ(a.cols, 2);
  EXPECT_EQ(a.dst_ld, 9280);  // rows padded to 128 bytes
  // Against a small B, A stays column-major (its rows only padded): the transpose's launch
  // would cost more than it buys.
  const Problem small{"matmul", DType::bf16, DType::bf16, {2, 410, 168}, {{"a", "col"}}};
  const std::vector<std::string> small_kernels =
      matmul().kernel_expressions(matmul().default_config(small, hopper), small);
  EXPECT_EQ(std::find(small_kernels.begin(), small_kernels.end(), "tilesmith::transpose_rows<2>"),
            small_kernels.end());
}

TEST(MatmulValidateTest, AcceptsEveryOutputTypeForEitherHalfInput) {
  for (DType in : {DType::f16, DType::bf16})
    for (DType out : {DType::f16, DType::bf16, DType::f32})
      EXPECT_NO_THROW(matmul().validate(matmul_problem(17, 33, 65, in, out)))
          << dtype_name(in) << "->" << dtype_name(out);
}

TEST(MatmulValidateTest, AlignedZeroOnlyWhereTheShapeIsAligned) {
  EXPECT_NO_THROW(matmul().validate({"matmul", DType::bf16, DType::bf16, {17, 32, 64}, {{"aligned", "0"}}}));
  const std::string message = error_message_of([] {
    matmul().validate({"matmul", DType::bf16, DType::bf16, {17, 33, 64}, {{"aligned", "0"}}});
  });
  EXPECT_NE(message.find("leave out aligned=0"), std::string::npos) << message;
}

// ---------------------------------------------------------------------------------------------
// reject

class MatmulRejectTest : public ::testing::Test {
 protected:
  std::optional<std::string> reject(const Config& config, const DeviceTarget& device) const {
    return matmul().reject(config, problem_, device);
  }
  Problem problem_ = matmul_problem(4096, 4096, 4096);
  DeviceTarget hopper_ = DeviceTarget::assumed_for_arch("sm_90a");
  DeviceTarget ampere_ = DeviceTarget::assumed_for_arch("sm_80");
};

TEST_F(MatmulRejectTest, AcceptsFiveHundredTwelveThreadsWhenTheyDivideTheTile) {
  // 4x4 warps on 128x128x32: 512 threads, 32x32 warp tiles, one 16-byte chunk each per stage.
  EXPECT_EQ(reject(tile_config(128, 128, 32, 4, 4, 3), hopper_), std::nullopt);
}

TEST_F(MatmulRejectTest, RejectsMoreThreadsThanTheDeviceAllows) {
  DeviceTarget small = hopper_;
  small.max_threads_per_block = 128;
  auto reason = reject(tile_config(128, 128, 32, 4, 4, 3), small);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("512 threads"), std::string::npos) << *reason;
  EXPECT_NE(reason->find("128"), std::string::npos) << *reason;
  // Exactly at the limit is fine: 2x2 warps are 128 threads.
  EXPECT_EQ(reject(tile_config(128, 128, 32, 2, 2, 3), small), std::nullopt);
}

TEST_F(MatmulRejectTest, RejectsSharedMemoryOverTheDeviceLimit) {
  // Five stages of 256x256x64 need 345 KB; sm_80 allows 163 KB (whichever rule fires first).
  ASSERT_GT(expected_smem_bytes(256, 256, 64, 5), ampere_.max_smem_per_block_optin);
  EXPECT_TRUE(reject(tile_config(256, 256, 64, 4, 4, 5), ampere_).has_value());

  // 128x128x64 on 2x2 warps breaks no other rule: five stages (175 KB) are over, four fit.
  Config config = tile_config(128, 128, 64, 2, 2, 5);
  int needed = expected_smem_bytes(128, 128, 64, 5);
  ASSERT_GT(needed, ampere_.max_smem_per_block_optin);
  auto reason = reject(config, ampere_);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("shared memory"), std::string::npos) << *reason;
  EXPECT_NE(reason->find(std::to_string(needed)), std::string::npos) << *reason;
  EXPECT_NE(reason->find(std::to_string(ampere_.max_smem_per_block_optin)), std::string::npos)
      << *reason;
  EXPECT_EQ(reject(config, hopper_), std::nullopt) << "227 KB on sm_90a";
  ASSERT_LE(expected_smem_bytes(128, 128, 64, 4), ampere_.max_smem_per_block_optin);
  EXPECT_EQ(reject(tile_config(128, 128, 64, 2, 2, 4), ampere_), std::nullopt);
}

TEST_F(MatmulRejectTest, AcceptsSharedMemoryExactlyAtTheLimit) {
  DeviceTarget exact = hopper_;
  exact.max_smem_per_block_optin = expected_smem_bytes(128, 128, 32, 4);
  EXPECT_EQ(reject(tile_config(128, 128, 32, 2, 2, 4), exact), std::nullopt);
  exact.max_smem_per_block_optin -= 1;
  EXPECT_TRUE(reject(tile_config(128, 128, 32, 2, 2, 4), exact).has_value());
}

TEST_F(MatmulRejectTest, RejectsWarpTilesThatAreNotMultiplesOfSixteen) {
  // 48 rows over 2 warps: 24-row warp tiles.
  auto rows = reject(tile_config(48, 128, 32, 2, 2, 3), hopper_);
  ASSERT_TRUE(rows.has_value());
  EXPECT_NE(rows->find("16x16"), std::string::npos) << *rows;
  // 64 columns over 4 warps is 16 each (fine); 96 over 4 is 24 (not).
  EXPECT_TRUE(reject(tile_config(64, 96, 32, 1, 4, 3), hopper_).has_value());
}

TEST_F(MatmulRejectTest, RejectsBlockKThatIsNotAMultipleOfTheMmaK) {
  auto reason = reject(tile_config(128, 128, 24, 2, 2, 3), hopper_);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("block_k"), std::string::npos) << *reason;
}

TEST_F(MatmulRejectTest, RejectsMoreThan128AccumulatorsPerThread) {
  // 256x256 on 2x2 warps: a 128x128 warp tile, 128*128/32 = 512 accumulators per thread.
  auto reason = reject(tile_config(256, 256, 32, 2, 2, 2), hopper_);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("512 accumulators"), std::string::npos) << *reason;
  // 256x256 on a single warp (2048 accumulators) is rejected too, whichever rule fires first.
  EXPECT_TRUE(reject(tile_config(256, 256, 32, 1, 1, 2), hopper_).has_value());
  // A 64x128 warp tile is 256 (the measured spill case); 64x64 is exactly 128 and allowed.
  auto wide = reject(tile_config(128, 256, 32, 2, 2, 3), hopper_);
  ASSERT_TRUE(wide.has_value());
  EXPECT_NE(wide->find("256 accumulators"), std::string::npos) << *wide;
  EXPECT_EQ(reject(tile_config(128, 128, 32, 2, 2, 3), hopper_), std::nullopt);
}

TEST_F(MatmulRejectTest, RejectsBlocksOfFewerThanFourWarps) {
  for (auto [warps_m, warps_n] : {std::pair{1, 1}, std::pair{1, 2}, std::pair{2, 1}}) {
    auto reason = reject(tile_config(64, 64, 32, warps_m, warps_n, 2), hopper_);
    ASSERT_TRUE(reason.has_value()) << warps_m << "x" << warps_n;
    EXPECT_NE(reason->find("warps"), std::string::npos) << *reason;
  }
  EXPECT_EQ(reject(tile_config(64, 64, 32, 2, 2, 2), hopper_), std::nullopt);
  EXPECT_EQ(reject(tile_config(64, 64, 32, 1, 4, 2), hopper_), std::nullopt);
}

TEST_F(MatmulRejectTest, RejectsWarpTilesTheRegisterBudgetCannotHold) {
  // 512 threads leave 65536 / 512 = 128 registers per thread: a 64x64 warp tile's 128 fp32
  // accumulators alone fill them (ptxas spilled hundreds of bytes here).
  auto reason = reject(tile_config(256, 256, 32, 4, 4, 3), hopper_);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("accumulators"), std::string::npos) << *reason;
  // The same warp tile on 4 warps has 255 registers per thread.
  EXPECT_EQ(reject(tile_config(128, 128, 32, 2, 2, 3), hopper_), std::nullopt);
  // A register file a quarter the size leaves those 128 threads 128 registers each.
  DeviceTarget small_register_file = hopper_;
  small_register_file.regs_per_block = 16384;
  EXPECT_TRUE(reject(tile_config(128, 128, 32, 2, 2, 3), small_register_file).has_value());
}

TEST(MatmulRejectSpaceTest, UnalignedShapesNeverAllowMoreThanAlignedOnes) {
  // The unaligned variant gathers chunks through registers: it may need more, never fewer.
  const Problem aligned = matmul_problem(4096, 4096, 4096);
  const Problem unaligned = matmul_problem(4093, 4093, 4093);
  for (const char* arch : {"sm_80", "sm_90a"}) {
    DeviceTarget device = DeviceTarget::assumed_for_arch(arch);
    for (const Config& config : matmul().enumerate()) {
      if (matmul().reject(config, unaligned, device)) continue;
      EXPECT_FALSE(matmul().reject(config, aligned, device).has_value())
          << arch << " " << config.text();
    }
  }
}

TEST_F(MatmulRejectTest, RejectsThreadsThatDoNotSplitTheTilesIntoWholeChunks) {
  // 64x32 A tile = 256 chunks of 16 bytes, shared by 512 threads.
  auto reason = reject(tile_config(64, 64, 32, 4, 4, 3), hopper_);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("chunks"), std::string::npos) << *reason;
}

TEST_F(MatmulRejectTest, RejectsMissingAndNonPositiveParameters) {
  Config missing = tile_config(128, 128, 32, 2, 2, 3);
  missing.values.erase("group_m");
  auto reason = reject(missing, hopper_);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("group_m"), std::string::npos) << *reason;

  EXPECT_TRUE(reject(tile_config(128, 128, 32, 0, 2, 3), hopper_).has_value());
  EXPECT_TRUE(reject(tile_config(128, 128, 32, 2, 2, 3, /*group_m=*/0), hopper_).has_value());
  EXPECT_TRUE(reject(tile_config(128, 128, 32, 2, 2, 1), hopper_).has_value());  // one stage
}

TEST_F(MatmulRejectTest, EverySurvivorOfTheSpaceMeetsTheKernelsStaticAsserts) {
  // The kernel's static_asserts must never fire for a config reject() lets through: a survivor
  // that fails them would be a guaranteed compile failure in every sweep.
  int survivors = 0;
  for (const Config& config : variant_space(0)) {
    if (reject(config, hopper_)) continue;
    ++survivors;
    int bm = config.at("block_m"), bn = config.at("block_n"), bk = config.at("block_k");
    int wm = config.at("warps_m"), wn = config.at("warps_n");
    int threads = wm * wn * 32;
    EXPECT_EQ((bm / wm) % 16, 0) << config.text();
    EXPECT_EQ((bn / wn) % 16, 0) << config.text();
    EXPECT_EQ(bk % 16, 0) << config.text();
    EXPECT_EQ((bm * bk / 8) % threads, 0) << config.text();
    EXPECT_EQ((bk * bn / 8) % threads, 0) << config.text();
    EXPECT_LE(expected_smem_bytes(bm, bn, bk, config.at("stages")),
              hopper_.max_smem_per_block_optin)
        << config.text();
  }
  EXPECT_GT(survivors, 0);
}

// ---------------------------------------------------------------------------------------------
// default_config and the pruned space

TEST(MatmulDefaultConfigTest, IsNeverRejected) {
  std::vector<Problem> problems = {
      matmul_problem(4096, 4096, 4096),
      matmul_problem(1, 1, 1),
      matmul_problem(17, 33, 65, DType::f16, DType::f32),
      matmul_problem(4093, 4093, 4093),
      matmul_problem(1, 65536, 8, DType::f16, DType::f16),
  };
  for (const char* arch : {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90a"}) {
    DeviceTarget device = DeviceTarget::assumed_for_arch(arch);
    for (const Problem& problem : problems) {
      Config config = matmul().default_config(problem, device);
      auto reason = matmul().reject(config, problem, device);
      EXPECT_FALSE(reason.has_value())
          << arch << " " << problem.key() << " " << config.text() << ": " << reason.value_or("");
    }
  }
}

// The default's rules (waves, splits, swapped and phased tiles, clusters) branch on the shape at
// many points: over random problems of every kind a user could bring, each must pick a config
// the constraints accept, without default_config's fallback to the plain base tile.
TEST(MatmulDefaultConfigTest, IsNeverRejectedOverRandomProblems) {
  std::mt19937_64 random(20261127);
  auto draw = [&](std::int64_t most) {
    // Log-uniform in 1..most, with small and odd sizes as likely as round ones.
    const double top = std::log(static_cast<double>(most));
    const double exponent = std::uniform_real_distribution<double>(0.0, top)(random);
    return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::exp(exponent)));
  };
  const std::vector<std::pair<DType, DType>> dtypes = {
      {DType::bf16, DType::bf16}, {DType::f16, DType::f16},
      {DType::f16, DType::f32},   {DType::f32, DType::f32}};
  const char* const acts[] = {"none", "relu", "gelu", "silu"};
  // (Hopper parts with fewer SMs too: the H100 PCIe's 114, the H20's 78.)
  for (const auto& [arch, sm_count] : std::vector<std::pair<const char*, int>>{
           {"sm_80", 108}, {"sm_90a", 132}, {"sm_90a", 114}, {"sm_90a", 78}}) {
    DeviceTarget device = DeviceTarget::assumed_for_arch(arch);
    device.sm_count = sm_count;
    for (int trial = 0; trial < 3000; ++trial) {
      const auto [in, out] = dtypes[random() % dtypes.size()];
      std::vector<std::int64_t> shape = {draw(16384), draw(40000), draw(20000)};
      if (random() % 8 == 0) shape.insert(shape.begin(), draw(8));
      Problem problem{"matmul", in, out, shape};
      if (random() % 2) problem.options["a"] = "col";
      if (random() % 2) problem.options["b"] = "col";
      if (random() % 4 == 0) problem.options["act"] = acts[random() % 4];
      if (random() % 4 == 0) problem.options["bias"] = "1";
      if (random() % 4 == 0) problem.options["residual"] = "1";
      if (random() % 8 == 0) problem.options["aligned"] = "0";
      try {
        matmul().validate(problem);
      } catch (const InvalidArgument&) {
        continue;  // aligned=0 on rows unaligned already: refused before any default is asked
      }
      const Config config = matmul().default_config(problem, device);
      const auto reason = matmul().reject(config, problem, device);
      EXPECT_FALSE(reason.has_value()) << arch << " " << sm_count << " SMs " << problem.key() << " "
                                       << config.text() << ": " << reason.value_or("");
      const std::optional<std::string> fell_back = matmul_default_fell_back(problem, device);
      EXPECT_FALSE(fell_back.has_value())
          << arch << " " << sm_count << " SMs " << problem.key() << ": " << fell_back.value_or("");
    }
  }
}

TEST(MatmulDefaultConfigTest, UsesFourStagesWhereTheyFitAndFewerWhereNot) {
  Problem problem = matmul_problem(4096, 4096, 4096);
  EXPECT_EQ(matmul().default_config(problem, DeviceTarget::assumed_for_arch("sm_80")).at("stages"),
            4);
  DeviceTarget tight = DeviceTarget::assumed_for_arch("sm_80");
  tight.max_smem_per_block_optin = expected_smem_bytes(128, 128, 32, 3);
  Config config = matmul().default_config(problem, tight);
  EXPECT_EQ(config.at("stages"), 3) << config.text();
  EXPECT_FALSE(matmul().reject(config, problem, tight).has_value());
}

TEST(MatmulPrunedSpaceTest, LeavesManyCandidatesFor4096CubedOnHopper) {
  Problem problem = matmul_problem(4096, 4096, 4096);
  DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  std::vector<Config> space = matmul().enumerate();
  int kept = 0;
  for (const Config& config : space)
    if (!matmul().reject(config, problem, hopper)) ++kept;
  std::cout << "[ info     ] matmul 4096^3 on assumed sm_90a: " << kept << " of " << space.size()
            << " configs survive pruning\n";
  EXPECT_GE(kept, 50);
  EXPECT_LT(kept, static_cast<int>(space.size()));
}

// ---------------------------------------------------------------------------------------------
// Launch rule, kernel name, buffers, work

TEST(MatmulLaunchTest, GridCoversTheOutputAndBlockIsTheWarps) {
  struct Case {
    std::int64_t m, n, k;
    Config config;
  };
  std::vector<Case> cases = {
      {4096, 4096, 4096, tile_config(128, 128, 32, 2, 2, 4)},
      {1000, 3000, 500, tile_config(128, 256, 32, 2, 4, 3)},
      {1, 1, 1, tile_config(64, 64, 32, 2, 2, 2)},
      {4093, 4093, 4093, tile_config(256, 64, 64, 4, 1, 3)},
  };
  for (const Case& c : cases) {
    Problem problem = matmul_problem(c.m, c.n, c.k);
    int bm = c.config.at("block_m"), bn = c.config.at("block_n"), bk = c.config.at("block_k");
    const LaunchPlan plan = plan_of(c.config, problem);
    ASSERT_EQ(plan.step_count, 1);
    const LaunchGeometry& geometry = plan.steps[0].geometry;
    std::int64_t tiles = ((c.m + bm - 1) / bm) * ((c.n + bn - 1) / bn);
    EXPECT_EQ(geometry.grid[0], static_cast<unsigned>(tiles)) << problem.key();
    EXPECT_EQ(geometry.grid[1], 1u);
    EXPECT_EQ(geometry.grid[2], 1u);
    EXPECT_EQ(geometry.block[0],
              static_cast<unsigned>(c.config.at("warps_m") * c.config.at("warps_n") * 32));
    EXPECT_EQ(geometry.block[1], 1u);
    EXPECT_EQ(geometry.block[2], 1u);
    EXPECT_EQ(geometry.dynamic_smem_bytes,
              static_cast<unsigned>(expected_smem_bytes(bm, bn, bk, c.config.at("stages"))));
  }
  // Spot values: 1000x3000 with 128x256 tiles is 8 x 12 tiles; 81408 bytes of shared memory.
  LaunchGeometry spot = plan_of(cases[1].config, matmul_problem(1000, 3000, 500)).steps[0].geometry;
  EXPECT_EQ(spot.grid[0], 96u);
  EXPECT_EQ(spot.block[0], 256u);
  EXPECT_EQ(spot.dynamic_smem_bytes, 81408u);
}

// The template arguments of "tilesmith::matmul_kernel<a,b,...>" (or matmul_sm90), as text.
std::vector<std::string> template_arguments(const std::string& expression) {
  const std::size_t open = expression.find('<');
  EXPECT_TRUE(expression.rfind("tilesmith::matmul_kernel<", 0) == 0 ||
              expression.rfind("tilesmith::matmul_sm90<", 0) == 0)
      << expression;
  EXPECT_EQ(expression.back(), '>') << expression;
  std::vector<std::string> arguments;
  std::string inner = expression.substr(open + 1, expression.size() - open - 2);
  std::size_t start = 0;
  for (std::size_t comma; (comma = inner.find(',', start)) != std::string::npos; start = comma + 1)
    arguments.push_back(inner.substr(start, comma - start));
  arguments.push_back(inner.substr(start));
  return arguments;
}

// The template arguments after the tile's: ALIGNED, IN_KIND, OUT_KIND, LAYOUT, EPI.
std::vector<std::string> alignment_and_dtypes(const Config& config, const Problem& problem) {
  std::vector<std::string> arguments =
      template_arguments(matmul().kernel_expressions(config, problem).at(0));
  if (arguments.size() < 5) return arguments;
  return std::vector<std::string>(arguments.end() - 5, arguments.end() - 2);
}
// The LAYOUT and EPI arguments: the last two of the mma.sync kernel, followed by SWAP and
// CLUSTER_K in the wgmma one.
std::vector<std::string> layout_and_epilogue(const Config& config, const Problem& problem) {
  std::vector<std::string> arguments =
      template_arguments(matmul().kernel_expressions(config, problem).at(0));
  const std::size_t after = config.at("variant") == 1 ? 4 : 0;  // swap_ab, cluster_k, pingpong, grid sum
  if (arguments.size() < 2 + after) return arguments;
  return std::vector<std::string>(arguments.end() - 2 - after, arguments.end() - after);
}

TEST(MatmulKernelExpressionTest, StartsWithTheTileParameters) {
  Config config = tile_config(128, 64, 32, 2, 1, 3, 8);
  std::vector<std::string> arguments =
      template_arguments(matmul().kernel_expressions(config, matmul_problem(4096, 4096, 4096)).at(0));
  // One argument per parameter of the variant but group_m (a kernel argument), then ALIGNED,
  // IN_KIND, OUT_KIND, LAYOUT, EPI.
  EXPECT_EQ(arguments.size(), config.values.size() - 2 + 5);
  ASSERT_GE(arguments.size(), 6u);
  EXPECT_EQ(std::vector<std::string>(arguments.begin(), arguments.begin() + 6),
            (std::vector<std::string>{"128", "64", "32", "2", "1", "3"}));
}

// The tile order is a kernel argument: configs that differ only in it render the same kernels
// (one compile in a sweep: RenderTest.ConfigsWithTheSameKernelsShareTheHash), and each launch
// passes its own order.
TEST(MatmulKernelExpressionTest, TheTileOrderIsAnArgumentNotAnotherKernel) {
  const Problem problem = matmul_problem(4096, 4096, 4096);
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  // The group_m each launch passes (the main kernel is the plan's only step here).
  auto passed_group_m = [&](const Config& config) {
    const LaunchPlan plan = plan_of(config, problem, hopper);
    EXPECT_EQ(plan.step_count, 1);
    const KernelArgs& args = plan.steps[0].args;
    if (config.at("variant") == 1) {
      MatmulSm90Params p;
      EXPECT_EQ(args.size, sizeof p);
      std::memcpy(&p, args.bytes.data(), sizeof p);
      return p.group_m;
    }
    MatmulParams p;
    EXPECT_EQ(args.size, sizeof p);
    std::memcpy(&p, args.bytes.data(), sizeof p);
    return p.group_m;
  };
  for (Config config : {tile_config(128, 64, 32, 2, 1, 3, 1), matmul().default_config(problem, hopper)}) {
    SCOPED_TRACE(config.text());
    Config other = config;
    other.values["group_m"] = config.at("group_m") == 1 ? 8 : 1;
    EXPECT_EQ(matmul().kernel_expressions(config, problem),
              matmul().kernel_expressions(other, problem));
    EXPECT_EQ(passed_group_m(config), config.at("group_m"));
    EXPECT_EQ(passed_group_m(other), other.at("group_m"));
  }
}

// The sm_90a kernel's ring depth is an argument too: the 3-8 stage variants of a tile are one
// kernel, each launch passing its depth and the shared memory that depth needs.
TEST(MatmulKernelExpressionTest, TheWgmmaRingDepthIsAnArgumentNotAnotherKernel) {
  const Problem problem = matmul_problem(4096, 4096, 4096);
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config base = matmul().default_config(problem, hopper);
  ASSERT_EQ(base.at("variant"), 1);
  for (int stages : {3, 4}) {
    Config config = base;
    config.values["stages"] = stages;
    ASSERT_EQ(matmul().reject(config, problem, hopper), std::nullopt) << stages;
    EXPECT_EQ(matmul().kernel_expressions(config, problem),
              matmul().kernel_expressions(base, problem));
    const LaunchPlan plan = plan_of(config, problem, hopper);
    MatmulSm90Params p;
    ASSERT_EQ(plan.steps[0].args.size, sizeof p);
    std::memcpy(&p, plan.steps[0].args.bytes.data(), sizeof p);
    EXPECT_EQ(p.stages, stages);
    EXPECT_EQ(plan.steps[0].geometry.dynamic_smem_bytes,
              static_cast<unsigned>(stages * (128 + 256) * 128 + 2 * 16384 + 16 * stages + 16 +
                                    1024));
  }
}

// The order of split-K's slices among the work units is an argument: one kernel, each launch
// passing its order; it exists only where slices go through the workspace.
TEST(MatmulKernelExpressionTest, TheSliceOrderIsAnArgumentOfWorkspaceSplitsOnly) {
  const Problem problem = matmul_problem(512, 512, 16384);
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config tiles_first = testing::wgmma_config(128, 64, 8, 1, 1, 2, 8, /*split_k=*/4);
  Config slices_first = tiles_first;
  slices_first.values["slice_major"] = 1;
  for (const Config& config : {tiles_first, slices_first}) {
    ASSERT_EQ(matmul().reject(config, problem, hopper), std::nullopt) << config.text();
    EXPECT_EQ(matmul().kernel_expressions(config, problem),
              matmul().kernel_expressions(tiles_first, problem));
    const LaunchPlan plan = plan_of(config, problem, hopper);
    ASSERT_EQ(plan.steps[0].kernel, 0);  // the main kernel, then the reduce
    MatmulSm90Params p;
    ASSERT_EQ(plan.steps[0].args.size, sizeof p);
    std::memcpy(&p, plan.steps[0].args.bytes.data(), sizeof p);
    EXPECT_EQ(p.k_splits, 4);
    EXPECT_EQ(p.slice_major, config.at("slice_major"));
  }
  Config unsplit = testing::wgmma_config(128, 64, 8, 1, 1, 2, 8, /*split_k=*/1);
  unsplit.values["slice_major"] = 1;
  EXPECT_TRUE(matmul().reject(unsplit, problem, hopper).has_value());
  Config in_cluster = testing::wgmma_config(128, 64, 6, 1, 1, 1, 8, /*split_k=*/4, /*split_cluster=*/1);
  ASSERT_EQ(matmul().reject(in_cluster, problem, hopper), std::nullopt);
  in_cluster.values["slice_major"] = 1;
  EXPECT_TRUE(matmul().reject(in_cluster, problem, hopper).has_value());
}

// split_in_grid: the product's own CTAs sum the K slices, so the plan zeroes their arrival
// counters (one per CTA block, after the partials in the workspace) first, launches every unit
// at once (cooperatively) and runs no reduce. Only where every unit fits one wave, never a tail
// split.
TEST(MatmulKernelExpressionTest, SlicesSummedInTheGridTakeNoReduceAndRunAtOnce) {
  const Problem problem = matmul_problem(512, 512, 16384);
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config config = testing::wgmma_config(128, 128, 6, 2, 2, 1, 8, /*split_k=*/8, 0, 0, 0, 0, 0,
                                              /*split_in_grid=*/1);
  ASSERT_EQ(matmul().reject(config, problem, hopper), std::nullopt);
  EXPECT_EQ(matmul().kernel_expressions(config, problem),
            (std::vector<std::string>{"tilesmith::matmul_sm90<128,128,64,2,2,1,1,1,0,0,0,1,0,1>"}));
  const std::uint64_t workspace = 1ull << 32;
  const std::size_t partials = 8ull * 512 * 512 * 4;
  EXPECT_EQ(matmul().workspace_bytes(config, problem, hopper), partials + 256);
  const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
  const LaunchPlan plan = matmul().plan(config, problem, hopper, addresses, workspace, {});
  ASSERT_EQ(plan.step_count, 2);
  EXPECT_EQ(plan.steps[0].kernel, LaunchStep::kZeroFill);
  EXPECT_EQ(plan.steps[0].zero_address, workspace + partials);
  EXPECT_EQ(plan.steps[0].zero_bytes, 16u * 4);  // 8 pair tiles of 256 x 128, 2 CTAs each
  EXPECT_EQ(plan.steps[1].kernel, 0);
  const LaunchGeometry& g = plan.steps[1].geometry;
  EXPECT_EQ(g.grid[0], 64u * 2);  // 8 pair tiles x 8 slices
  EXPECT_EQ(g.waiting_group, g.grid[0]);
  MatmulSm90Params p;
  ASSERT_EQ(plan.steps[1].args.size, sizeof p);
  std::memcpy(&p, plan.steps[1].args.bytes.data(), sizeof p);
  EXPECT_EQ(p.k_splits, 8);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.partials), workspace);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(p.slice_arrivals), workspace + partials);

  // More units than a wave holds (16 slices: 128 pairs for 66), a tail split, no split, a
  // cluster summing the slices, and swapped tiles: refused.
  Config refused = config;
  refused.values["split_k"] = 16;
  EXPECT_TRUE(matmul().reject(refused, problem, hopper).has_value());
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 2, 0, 0, 0, 256, 0, 1),
                              matmul_problem(1000, 2750, 520), hopper)
                  .has_value());
  refused = config;
  refused.values["split_k"] = 1;
  EXPECT_TRUE(matmul().reject(refused, problem, hopper).has_value());
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(128, 128, 6, 2, 1, 1, 8, 8, 1, 0, 0, 0, 0, 1),
                              problem, hopper)
                  .has_value());
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(64, 16, 8, 1, 1, 1, 1, 4, 0, 1, 0, 0, 0, 1),
                              testing::x_times_w_t({16, 4096, 4096}), hopper)
                  .has_value());
}

TEST(MatmulKernelExpressionTest, EncodesTheAlignmentAndDtypes) {
  using Args = std::vector<std::string>;
  Config config = tile_config(128, 64, 32, 2, 1, 3, 8);
  // ElementKind: f16 = 0, bf16 = 1, f32 = 2.
  EXPECT_EQ(alignment_and_dtypes(config, matmul_problem(4096, 4096, 4096)), (Args{"1", "1", "1"}));
  EXPECT_EQ(alignment_and_dtypes(config, matmul_problem(4093, 4093, 4093)), (Args{"0", "1", "1"}));
  EXPECT_EQ(alignment_and_dtypes(config, matmul_problem(64, 64, 64, DType::f16, DType::f16)),
            (Args{"1", "0", "0"}));
  EXPECT_EQ(alignment_and_dtypes(config, matmul_problem(64, 64, 64, DType::bf16, DType::f32)),
            (Args{"1", "1", "2"}));
  EXPECT_EQ(alignment_and_dtypes(config, matmul_problem(63, 64, 64, DType::f16, DType::f32)),
            (Args{"1", "0", "2"}));
}

TEST(MatmulKernelExpressionTest, AlignedOnlyWhenKAndNAreMultiplesOfEight) {
  Config config = tile_config(128, 128, 32, 2, 2, 4);
  auto aligned_flag = [&](std::int64_t m, std::int64_t n, std::int64_t k) {
    return alignment_and_dtypes(config, matmul_problem(m, n, k)).at(0);
  };
  EXPECT_EQ(aligned_flag(4096, 4096, 4096), "1");
  EXPECT_EQ(aligned_flag(4093, 4096, 4096), "1");  // M is free: rows are predicated
  EXPECT_EQ(aligned_flag(1, 8, 8), "1");
  EXPECT_EQ(aligned_flag(4096, 4093, 4096), "0");  // N
  EXPECT_EQ(aligned_flag(4096, 4096, 4093), "0");  // K
  EXPECT_EQ(aligned_flag(4096, 4100, 4096), "0");  // N % 8 == 4
  EXPECT_EQ(aligned_flag(4093, 4093, 4093), "0");
  // What must be a multiple of 8 is each stored row: column-major A has rows of M (K is then
  // free, as M is for row-major A), column-major B rows of K.
  auto aligned_with = [&](std::int64_t m, std::int64_t n, std::int64_t k,
                          ProblemOptions options) {
    Problem problem = matmul_problem(m, n, k);
    problem.options = std::move(options);
    return alignment_and_dtypes(config, problem).at(0);
  };
  EXPECT_EQ(aligned_with(4093, 4096, 4096, {{"a", "col"}}), "0");
  EXPECT_EQ(aligned_with(4096, 4096, 4093, {{"a", "col"}}), "1");
  EXPECT_EQ(aligned_with(4096, 4093, 4096, {{"b", "col"}}), "1");
  EXPECT_EQ(aligned_with(4096, 4096, 4093, {{"b", "col"}}), "0");
}

TEST(MatmulKernelExpressionTest, EncodesTheLayoutAndEpilogue) {
  using Args = std::vector<std::string>;
  for (const Config& config : {tile_config(128, 64, 32, 2, 1, 3, 8),
                               testing::wgmma_config(128, 256, 4, 2, 2, 1)}) {
    Problem problem = matmul_problem(4096, 4096, 4096);
    EXPECT_EQ(layout_and_epilogue(config, problem), (Args{"0", "0"}));
    problem.options = {{"a", "col"}, {"act", "silu"}, {"residual", "1"}};
    // kColumnMajorA = 1; kActSilu = 3 | kEpilogueResidual = 8.
    EXPECT_EQ(layout_and_epilogue(config, problem), (Args{"1", "11"}));
    problem.options = {{"b", "col"}, {"act", "gelu"}, {"bias", "1"}};
    EXPECT_EQ(layout_and_epilogue(config, problem), (Args{"2", "6"}));
  }
}

TEST(MatmulKernelExpressionTest, ReferenceExpressionEncodesTheInputType) {
  EXPECT_EQ(matmul().reference_expression(matmul_problem(8, 8, 8, DType::bf16, DType::bf16)),
            "tilesmith::matmul_reference<1,1,0,0>");
  Problem transposed = matmul_problem(8, 8, 8, DType::f16, DType::f32);
  transposed.options = {{"a", "col"}, {"b", "col"}, {"act", "relu"}, {"bias", "1"}};
  EXPECT_EQ(matmul().reference_expression(transposed), "tilesmith::matmul_reference<0,2,3,5>");
}

TEST(MatmulWorkTest, FlopsAreTwoMNKAndBytesEachTensorOnce) {
  Work work = matmul().work(matmul_problem(4096, 2048, 1024));
  EXPECT_DOUBLE_EQ(work.flops, 2.0 * 4096 * 2048 * 1024);
  EXPECT_DOUBLE_EQ(work.min_bytes, 2.0 * (4096.0 * 1024 + 1024.0 * 2048) + 2.0 * 4096 * 2048);

  Work mixed = matmul().work(matmul_problem(17, 33, 65, DType::f16, DType::f32));
  EXPECT_DOUBLE_EQ(mixed.flops, 2.0 * 17 * 33 * 65);
  EXPECT_DOUBLE_EQ(mixed.min_bytes, 2.0 * (17 * 65 + 65 * 33) + 4.0 * 17 * 33);
}

TEST(MatmulReferenceTest, CpuReferenceMatchesAHandComputedProduct) {
  // A is 2x4, B is 4x3, both row-major.
  std::vector<double> a = {1, 2, 3, 4,  //
                           5, 6, 7, 8};
  std::vector<double> b = {1,  0, 2,  //
                           0,  1, 0,  //
                           1,  1, 1,  //
                           -1, 2, 0.5};
  std::vector<double> c = matmul().reference_cpu(matmul_problem(2, 3, 4), {a, b});
  EXPECT_EQ(c, (std::vector<double>{0, 13, 7,  //
                                    4, 29, 21}));
}

TEST(MatmulReferenceTest, ReferenceLaunchCoversTheOutputIn16x16Tiles) {
  LaunchGeometry geometry = matmul().reference_launch(matmul_problem(33, 17, 5));
  EXPECT_EQ(geometry.grid[0], 2u);  // N = 17 columns
  EXPECT_EQ(geometry.grid[1], 3u);  // M = 33 rows
  EXPECT_EQ(geometry.block[0], 16u);
  EXPECT_EQ(geometry.block[1], 16u);
}

TEST(MatmulTensorsTest, ListsABThenTheOutputWithTheirSizes) {
  std::vector<TensorSpec> tensors =
      matmul().tensors(matmul_problem(17, 33, 65, DType::f16, DType::f32));
  ASSERT_EQ(tensors.size(), 3u);
  EXPECT_EQ(tensors[0].name, "A");
  EXPECT_EQ(tensors[0].elements, 17u * 65);
  EXPECT_EQ(tensors[0].dtype, DType::f16);
  EXPECT_FALSE(tensors[0].is_output);
  EXPECT_EQ(tensors[1].name, "B");
  EXPECT_EQ(tensors[1].elements, 65u * 33);
  EXPECT_EQ(tensors[1].dtype, DType::f16);
  EXPECT_FALSE(tensors[1].is_output);
  EXPECT_EQ(tensors[2].name, "C");
  EXPECT_EQ(tensors[2].elements, 17u * 33);
  EXPECT_EQ(tensors[2].dtype, DType::f32);
  EXPECT_TRUE(tensors[2].is_output);
}

TEST(MatmulArgsTest, PacksAddressesAndRowMajorLeadingDimensions) {
  Problem problem = matmul_problem(17, 33, 65);
  std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000};
  KernelArgs args = matmul().plan(tile_config(64, 64, 32, 2, 2, 2), problem,
                                  DeviceTarget::assumed_for_arch("sm_90a"), addresses, 0, {})
                        .steps[0]
                        .args;
  EXPECT_EQ(args.tensor_map_count, 0);
  ASSERT_EQ(args.size, sizeof(MatmulParams));
  MatmulParams params;
  std::memcpy(&params, args.bytes.data(), sizeof(params));
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.a), 0x1000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.b), 0x2000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.c), 0x3000u);
  EXPECT_EQ(params.m, 17);
  EXPECT_EQ(params.n, 33);
  EXPECT_EQ(params.k, 65);
  EXPECT_EQ(params.lda, 65);
  EXPECT_EQ(params.ldb, 33);
  EXPECT_EQ(params.ldc, 33);

  KernelArgs reference = matmul().reference_args(problem, addresses, 0x4000);
  std::memcpy(&params, reference.bytes.data(), sizeof(params));
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.c), 0x4000u);  // fp32 reference output
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.a), 0x1000u);
}

// A call's strides: the leading dimensions and batch strides of A, B, the residual and C reach
// the kernels' arguments; a shared matrix (batch stride 0) is one batch in its tensor map.
CallScalars strides_of(std::initializer_list<std::pair<std::int64_t, std::optional<std::int64_t>>> views) {
  CallScalars scalars;
  std::size_t i = 0;
  for (const auto& [ld, stride] : views) {
    scalars.row_strides[i] = ld;
    scalars.batch_strides[i++] = stride;
  }
  return scalars;
}

TEST(MatmulStridesTest, ReachTheMmaSyncKernelsArguments) {
  const Problem problem{"matmul", DType::bf16, DType::bf16, {3, 17, 32, 64}, {{"residual", "1"}}};
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000, 0x4000};
  const CallScalars scalars = strides_of({{72, 17 * 72 + 8}, {40, 0}, {48, 17 * 48}, {0, 1000}});
  const LaunchPlan plan = matmul().plan(tile_config(64, 64, 32, 2, 2, 2), problem,
                                        DeviceTarget::assumed_for_arch("sm_80"), addresses, 0, scalars);
  MatmulParams params;
  std::memcpy(&params, plan.steps[0].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.lda, 72);
  EXPECT_EQ(params.stride_a, 17 * 72 + 8);
  EXPECT_EQ(params.ldb, 40);
  EXPECT_EQ(params.stride_b, 0);  // one B for every batch
  EXPECT_EQ(params.epilogue.ldr, 48);
  EXPECT_EQ(params.epilogue.stride_r, 17 * 48);
  EXPECT_EQ(params.ldc, 32);  // packed rows
  EXPECT_EQ(params.stride_c, 1000);
  // The reference reads and writes packed tensors whatever a call's strides.
  std::memcpy(&params, matmul().reference_args(problem, addresses, 0x5000).bytes.data(), sizeof params);
  EXPECT_EQ(params.lda, 64);
  EXPECT_EQ(params.stride_b, 64 * 32);
}

TEST(MatmulStridesTest, ASharedOperandIsOneBatchInItsTensorMap) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem problem{"matmul", DType::bf16, DType::bf16, {4, 256, 256, 512}, {{"b", "col"}}};
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0x30000};
  const CallScalars scalars = strides_of({{520, 256 * 520}, {0, 0}, {264, 256 * 264}});
  const LaunchPlan plan = matmul().plan(testing::wgmma_config(128, 128, 4, 2, 1, 1), problem,
                                        hopper, addresses, 0, scalars);
  const KernelArgs& args = plan.steps[0].args;
  ASSERT_EQ(args.tensor_map_count, 3);
  EXPECT_EQ(args.tensor_maps[0].stride_bytes[0], 520u * 2);
  EXPECT_EQ(args.tensor_maps[0].stride_bytes[1], 256u * 520 * 2);
  EXPECT_EQ(args.tensor_maps[0].dims[2], 4u);
  EXPECT_EQ(args.tensor_maps[1].dims[2], 1u);  // B: one matrix, read for every batch
  EXPECT_EQ(args.tensor_maps[2].stride_bytes[0], 264u * 2);  // C through TMA, its own rows
  MatmulSm90Params params;
  std::memcpy(&params, args.bytes.data(), sizeof params);
  EXPECT_EQ(params.a_shared, 0);
  EXPECT_EQ(params.b_shared, 1);
  EXPECT_EQ(params.c_store_tma, 1);
  EXPECT_EQ(params.ldc, 264);
  // swap_ab reads B as the kernel's A: the shared flag moves with it.
  const Problem decode{"matmul", DType::bf16, DType::bf16, {4, 16, 256, 512}, {{"b", "col"}}};
  const LaunchPlan swapped =
      matmul().plan(testing::wgmma_config(64, 16, 8, 1, 1, 1, 1, 1, 0, 1), decode, hopper,
                    addresses, 0, strides_of({{0, std::nullopt}, {0, 0}}));
  std::memcpy(&params, swapped.steps[0].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.a_shared, 1);
  EXPECT_EQ(params.b_shared, 0);
  EXPECT_EQ(swapped.steps[0].args.tensor_maps[0].dims[2], 1u);
}

TEST(MatmulStridesTest, OddStridesRunAsTheProblemWithAlignedZero) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem problem{"matmul", DType::bf16, DType::bf16, {2, 64, 64, 128}, {}};
  // Multiples of 8 keep the problem; one odd stride anywhere asks for the gathering kernels.
  EXPECT_EQ(matmul().problem_for_call(problem, strides_of({{136, 64 * 136}, {72, 0}})), problem);
  const CallScalars odd = strides_of({{131, std::nullopt}, {0, 0}, {0, 64 * 64 + 1}});
  const Problem call = matmul().problem_for_call(problem, odd);
  EXPECT_EQ(call.option("aligned"), "0");
  // The problem's own kernels would misread these strides: refused, naming the option.
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0x30000};
  const std::string message = error_message_of(
      [&] { matmul().plan(testing::wgmma_config(64, 64, 4, 1, 1, 1), problem, hopper, addresses, 0, odd); });
  EXPECT_NE(message.find("aligned=0"), std::string::npos) << message;
  // With aligned=0, A is copied from its strided batches into packed, padded rows; B, shared
  // and aligned, is read where it lies; C, its batches one element off 16 bytes, leaves by
  // plain stores.
  const Config config = testing::wgmma_config(64, 64, 4, 1, 1, 1);
  const LaunchPlan plan = matmul().plan(config, call, hopper, addresses, 0x100000, odd);
  ASSERT_EQ(plan.step_count, 2);
  CopyRowsParams copies;
  std::memcpy(&copies, plan.steps[0].args.bytes.data(), sizeof copies);
  const CopyRowsMatrix& copy_a = copies.matrix[0];
  const CopyRowsMatrix& copy_b = copies.matrix[1];
  EXPECT_EQ(plan.steps[0].geometry.grid[0], 2u * 64);  // a block per row of A
  EXPECT_EQ(copy_a.rows, 2 * 64);
  EXPECT_EQ(copy_a.src_ld, 131);
  EXPECT_EQ(copy_a.batch_rows, 64);
  EXPECT_EQ(copy_a.src_batch_stride, 64 * 131);
  EXPECT_EQ(copy_a.dst_ld, 128);
  EXPECT_EQ(copy_b.rows, 0);
  MatmulSm90Params params;
  std::memcpy(&params, plan.steps[1].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.b_shared, 1);
  EXPECT_EQ(params.c_store_tma, 0);
  EXPECT_EQ(params.stride_c, 64 * 64 + 1);
}

// An operand stored as k rows of one element (a column-major A of one row, a row-major B of
// one column) holds, packed, its other layout's single row: the call runs as that layout, whose
// rows TMA and the row readers take whole. A view whose elements lie apart keeps its layout.
TEST(MatmulStridesTest, AnOperandOfOneStoredRowRunsAsItsOtherLayout) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem one_row{"matmul", DType::bf16, DType::bf16, {2, 1, 6624, 512}, {{"a", "col"}}};
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0x30000};
  for (const CallScalars& packed : {CallScalars{}, strides_of({{1, 512}})}) {
    const Problem call = matmul().problem_for_call(one_row, packed);
    EXPECT_EQ(call.key(), "matmul bf16->bf16 2x1x6624x512");
    // A's row stride (1, packed in its column-major form) is no row stride of its single row.
    const Config config = matmul().default_config(call, hopper);
    EXPECT_NO_THROW(matmul().plan(config, call, hopper, addresses, 0x100000, packed))
        << config.text();
  }
  EXPECT_EQ(matmul().problem_for_call(one_row, strides_of({{8, std::nullopt}})).option("a"), "col");
  // Batches off 16 bytes still ask for the gathering kernels.
  EXPECT_EQ(matmul().problem_for_call(one_row, strides_of({{1, 513}})).options,
            (ProblemOptions{{"aligned", "0"}}));
  const Problem one_column{"matmul", DType::f16, DType::f32, {300, 1, 520}, {{"bias", "1"}}};
  EXPECT_EQ(matmul().problem_for_call(one_column, {}).option("b"), "col");
  const auto b_of = [&](std::int64_t ldb) {
    return matmul().problem_for_call(one_column, strides_of({{0, std::nullopt}, {ldb, std::nullopt}}))
        .option("b");
  };
  EXPECT_EQ(b_of(1), "col");
  EXPECT_EQ(b_of(16), "");
  // Already in the layout of one row: unchanged.
  const Problem x_w_t{"matmul", DType::bf16, DType::bf16, {1, 4096, 4096}, {{"b", "col"}}};
  EXPECT_EQ(matmul().problem_for_call(x_w_t, {}), x_w_t);
}

// A matrix of one row has no row stride: a given one only spaces its batches where their own
// stride is unset (as it did before such operands were folded), never closer than a row.
TEST(MatmulStridesTest, AOneRowMatrixsStrideOnlySpacesItsBatches) {
  const DeviceTarget ampere = DeviceTarget::assumed_for_arch("sm_80");
  const Problem problem{"matmul", DType::bf16, DType::bf16, {3, 1, 64, 128}, {}};
  const std::vector<std::uint64_t> addresses = {0x1000, 0x2000, 0x3000};
  auto params_of = [&](const CallScalars& scalars) {
    const LaunchPlan plan =
        matmul().plan(tile_config(64, 64, 32, 2, 2, 2), problem, ampere, addresses, 0, scalars);
    MatmulParams params;
    std::memcpy(&params, plan.steps[0].args.bytes.data(), sizeof params);
    return params;
  };
  const std::optional<std::int64_t> unset;
  MatmulParams params = params_of(strides_of({{136, unset}, {0, unset}, {72, unset}}));
  EXPECT_EQ(params.stride_a, 136);  // A's batches a given row stride apart
  EXPECT_EQ(params.stride_c, 72);
  params = params_of(strides_of({{136, 400}, {0, std::nullopt}, {8, 200}}));  // C's 8 < 64: no row
  EXPECT_EQ(params.stride_a, 400);
  EXPECT_EQ(params.stride_c, 200);
  // Batches spaced off 16 bytes by a one-row stride ask for aligned=0; one batch does not.
  const CallScalars odd_c = strides_of({{0, unset}, {0, unset}, {67, unset}});
  EXPECT_EQ(matmul().problem_for_call(problem, odd_c).option("aligned"), "0");
  const Problem one{"matmul", DType::bf16, DType::bf16, {1, 64, 128}, {}};
  EXPECT_EQ(matmul().problem_for_call(one, odd_c), one);
  // A negative stride is an error still, one row or not, and folds nothing.
  for (const CallScalars& negative :
       {strides_of({{-8, unset}}), strides_of({{0, unset}, {0, unset}, {-1, unset}})}) {
    const std::string message = error_message_of([&] {
      matmul().plan(tile_config(64, 64, 32, 2, 2, 2), problem, ampere, addresses, 0, negative);
    });
    EXPECT_NE(message.find("row stride -"), std::string::npos) << message;
  }
  const Problem column_a{"matmul", DType::bf16, DType::bf16, {1, 64, 128}, {{"a", "col"}}};
  EXPECT_EQ(matmul().problem_for_call(column_a, strides_of({{-1, unset}})).option("a"), "col");
}

// x @ W^T with an odd N (an LM head over a 50257-word vocabulary): A's and W's rows hold K, a
// multiple of 8, so the problem is aligned whatever C's strides are; every kernel checks C at
// run time with column-major B. With row-major B an odd C stride still needs aligned=0.
TEST(MatmulStridesTest, AnOddOutputWidthKeepsXTimesWTransposedAligned) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem logits{"matmul", DType::bf16, DType::bf16, {16, 50257, 4096}, {{"b", "col"}}};
  const CallScalars packed = strides_of({{4096, std::nullopt}, {4096, std::nullopt}, {50257, std::nullopt}});
  EXPECT_EQ(matmul().problem_for_call(logits, packed), logits);
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0x30000};
  for (const Config& config : {testing::wgmma_config(64, 16, 8, 1, 1, 1, 1, 1, 0, 1),
                               testing::decode_config(16, 8, 2), tile_config(64, 64, 32, 2, 2, 3)}) {
    ASSERT_EQ(matmul().reject(config, logits, hopper), std::nullopt) << config.text();
    EXPECT_NO_THROW(matmul().plan(config, logits, hopper, addresses, 0x100000, packed)) << config.text();
    EXPECT_NO_THROW(matmul().plan(config, logits, hopper, addresses, 0x100000, {})) << config.text();
  }
  const Problem row_b{"matmul", DType::bf16, DType::bf16, {16, 64, 4096}, {}};
  EXPECT_EQ(matmul().problem_for_call(row_b, strides_of({{0, std::nullopt}, {0, std::nullopt}, {65, std::nullopt}}))
                .option("aligned"),
            "0");
}

TEST(MatmulStridesTest, RowsShorterThanTheMatrixAndOverlappingOutputsAreErrors) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem problem{"matmul", DType::bf16, DType::bf16, {2, 64, 64, 128}, {}};
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0x30000};
  auto plan_error = [&](const CallScalars& scalars) {
    return error_message_of([&] {
      matmul().plan(tile_config(64, 64, 32, 2, 2, 2), problem, hopper, addresses, 0, scalars);
    });
  };
  std::string message = plan_error(strides_of({{120, std::nullopt}}));
  EXPECT_NE(message.find("A's row stride 120 is outside 128"), std::string::npos) << message;
  message = plan_error(strides_of({{0, std::nullopt}, {0, std::nullopt}, {0, 0}}));
  EXPECT_NE(message.find("C's batch stride 0 is below"), std::string::npos) << message;
  message = plan_error(strides_of({{0, std::nullopt}, {0, std::nullopt}, {72, 63 * 72}}));
  EXPECT_NE(message.find("would overlap"), std::string::npos) << message;
  // Inputs may overlap or share their batches.
  EXPECT_NO_THROW(matmul().plan(tile_config(64, 64, 32, 2, 2, 2), problem, hopper, addresses, 0,
                                strides_of({{0, 8}, {0, 0}})));
}

TEST(MatmulToleranceTest, FollowsTheOutputType) {
  auto tolerance = [](DType in, DType out) {
    const Problem problem = matmul_problem(8, 8, 8, in, out);
    return matmul().tolerance(problem, matmul().tensors(problem).back());
  };
  double bf16 = tolerance(DType::bf16, DType::bf16);
  double f16 = tolerance(DType::f16, DType::f16);
  double f32 = tolerance(DType::bf16, DType::f32);
  EXPECT_GT(bf16, f16);
  EXPECT_GT(f16, f32);
  EXPECT_GT(f32, 0);
}

}  // namespace
}  // namespace tilesmith

namespace tilesmith {
namespace {

// ---------------------------------------------------------------------------------------------
// The wgmma variant (sm_90a): constraints and launch plan

TEST(MatmulWgmmaTest, NeedsHopperAndTakesAnyShape) {
  const Config config = testing::wgmma_config(128, 256, 4, 2, 2, 1);
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  EXPECT_FALSE(matmul().reject(config, matmul_problem(4096, 4096, 4096), hopper).has_value());
  EXPECT_TRUE(matmul().reject(config, matmul_problem(4096, 4096, 4096),
                              DeviceTarget::assumed_for_arch("sm_80")));
  // Rows TMA cannot read are padded first (PadsUnalignedInputsInTheWorkspace).
  EXPECT_FALSE(matmul().reject(config, matmul_problem(4093, 4093, 4093), hopper).has_value());
  EXPECT_FALSE(matmul().reject(config, matmul_problem(64, 60, 64), hopper).has_value());
  EXPECT_FALSE(matmul().reject(config, matmul_problem(1, 1, 1), hopper).has_value());
  // 3 consumers cannot hold 256 accumulator columns; a mma.sync parameter does not belong.
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(192, 256, 3, 3, 1, 1),
                              matmul_problem(4096, 4096, 4096), hopper));
  Config stray = config;
  stray.values["warps_m"] = 2;
  auto reason = matmul().reject(stray, matmul_problem(4096, 4096, 4096), hopper);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("warps_m"), std::string::npos) << *reason;
}

TEST(MatmulWgmmaTest, DefaultIsWgmmaOnHopperOnly) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  EXPECT_EQ(matmul().default_config(matmul_problem(4096, 4096, 4096), hopper).at("variant"), 1);
  EXPECT_EQ(matmul().default_config(matmul_problem(4093, 4093, 4093), hopper).at("variant"), 1);
  EXPECT_EQ(matmul()
                .default_config(matmul_problem(4096, 4096, 4096),
                                DeviceTarget::assumed_for_arch("sm_80"))
                .at("variant"),
            0);
}

TEST(MatmulWgmmaTest, PlanIsOnePersistentLaunchWithThreeTensorMaps) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");  // 132 SMs
  const Problem problem = matmul_problem(4096, 4096, 4096, DType::bf16, DType::f32);
  const LaunchPlan plan = plan_of(testing::wgmma_config(128, 256, 4, 2, 2, 1), problem, hopper);
  ASSERT_EQ(plan.step_count, 1);
  const LaunchStep& step = plan.steps[0];
  // 4096/256 x 4096/256 = 256 cluster units > 66 clusters of 2 that fit: 132 CTAs.
  EXPECT_EQ(step.geometry.grid[0], 132u);
  EXPECT_EQ(step.geometry.block[0], 384u);
  EXPECT_EQ(step.geometry.dynamic_smem_bytes,
            4u * (128 + 256) * 64 * 2 + 2 * 16384 + 1024 + 64 + 16);
  // A small problem gets one cluster per unit, not an idle persistent grid.
  EXPECT_EQ(plan_of(testing::wgmma_config(128, 256, 4, 2, 2, 1), matmul_problem(256, 256, 64),
                    hopper)
                .steps[0]
                .geometry.grid[0],
            2u);

  ASSERT_EQ(step.args.tensor_map_count, 3);
  const TensorMapSpec& a = step.args.tensor_maps[0];
  const TensorMapSpec& b = step.args.tensor_maps[1];
  const TensorMapSpec& c = step.args.tensor_maps[2];
  EXPECT_EQ(a.address, 0x10000u);
  EXPECT_EQ(a.dims[0], 4096u);  // K innermost
  EXPECT_EQ(a.stride_bytes[0], 4096u * 2);
  EXPECT_EQ(a.box[0], 64u);
  EXPECT_EQ(a.box[1], 128u);  // cluster_n 1: the whole tile's rows
  EXPECT_EQ(b.box[1], 32u);   // cluster_m 2: each CTA loads half of BK's rows, multicast
  EXPECT_EQ(c.dtype, DType::f32);
  EXPECT_EQ(c.box[0], 32u);  // 128 bytes of fp32
  EXPECT_EQ(c.box[1], 64u);
  EXPECT_EQ(c.stride_bytes[0], 4096u * 4);
  for (const TensorMapSpec* map : {&a, &b, &c}) {
    EXPECT_EQ(map->offset % 64, 0u);
    EXPECT_EQ(map->swizzle_bytes, 128u);
    EXPECT_EQ(map->l2_promotion_bytes, 256u);
  }
}

// The L2 promotion of A's and B's maps is the config's; C's map keeps the default (it is only
// written). Other sizes than the driver's are refused.
TEST(MatmulWgmmaTest, TheOperandMapsCarryTheConfigsL2Promotion) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem problem = matmul_problem(1000, 1000, 1000);
  for (int bytes : {0, 64, 128, 256}) {
    const Config config = testing::wgmma_config(128, 64, 6, 1, 1, 2, 1, 1, 0, 0, 0, bytes);
    ASSERT_EQ(matmul().reject(config, problem, hopper), std::nullopt) << config.text();
    const LaunchPlan plan = plan_of(config, problem, hopper);
    const KernelArgs& args = plan.steps[0].args;
    ASSERT_EQ(args.tensor_map_count, 3);
    EXPECT_EQ(args.tensor_maps[0].l2_promotion_bytes, static_cast<std::uint32_t>(bytes));
    EXPECT_EQ(args.tensor_maps[1].l2_promotion_bytes, static_cast<std::uint32_t>(bytes));
    EXPECT_EQ(args.tensor_maps[2].l2_promotion_bytes, 256u);
  }
  const Config odd = testing::wgmma_config(128, 64, 6, 1, 1, 2, 1, 1, 0, 0, 0, 32);
  EXPECT_TRUE(matmul().reject(odd, problem, hopper).has_value());
}

TEST(MatmulWgmmaTest, PadsUnalignedInputsInTheWorkspace) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config config = testing::wgmma_config(128, 256, 4, 2, 2, 1);
  // x @ W^T, both stored with rows of 300 elements (600 bytes). (A row-major B off 16 bytes is
  // read in place, in row phases: ReadsARowMajorWeightOffSixteenBytesInRowPhases.)
  const Problem problem = testing::x_times_w_t({4093, 1001, 300});
  EXPECT_EQ(matmul().workspace_bytes(config, matmul_problem(4096, 4096, 4096), hopper), 0u);
  // Each copy's rows padded to 128 bytes (whole L2 lines for TMA's box rows): 320.
  const std::size_t a_bytes = (4093u * 320 * 2 + 255) / 256 * 256;
  EXPECT_EQ(matmul().workspace_bytes(config, problem, hopper),
            a_bytes + (1001u * 320 * 2 + 255) / 256 * 256);
  EXPECT_EQ(matmul().kernel_expressions(config, problem).size(), 2u);
  const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
  const std::uint64_t workspace = 0x100000;
  const LaunchPlan plan = matmul().plan(config, problem, hopper, addresses, workspace, {});
  ASSERT_EQ(plan.step_count, 2);
  EXPECT_EQ(plan.steps[0].kernel, 1);  // copy A and B
  EXPECT_EQ(plan.steps[1].kernel, 0);  // the matmul on the copies
  CopyRowsParams copies;
  std::memcpy(&copies, plan.steps[0].args.bytes.data(), sizeof copies);
  const CopyRowsMatrix& copy_a = copies.matrix[0];
  const CopyRowsMatrix& copy_b = copies.matrix[1];
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(copy_a.src), 0x10000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(copy_a.dst), workspace);
  EXPECT_EQ(copy_a.dst_ld, 320);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(copy_b.dst), workspace + a_bytes);
  EXPECT_EQ(copy_b.rows, 1001);
  EXPECT_EQ(copy_b.dst_ld, 320);
  const KernelArgs& args = plan.steps[1].args;
  ASSERT_EQ(args.tensor_map_count, 2);  // N * 2 bytes is not a multiple of 16: C by plain stores
  EXPECT_EQ(args.tensor_maps[0].address, workspace);
  EXPECT_EQ(args.tensor_maps[0].dims[0], 300u);  // the true K: TMA never reads the padding
  EXPECT_EQ(args.tensor_maps[0].stride_bytes[0], 320u * 2);
  EXPECT_EQ(args.tensor_maps[1].address, workspace + a_bytes);
  EXPECT_EQ(args.tensor_maps[1].stride_bytes[0], 320u * 2);
  MatmulSm90Params params;
  std::memcpy(&params, args.bytes.data(), sizeof params);
  EXPECT_EQ(params.c_store_tma, 0);
  EXPECT_EQ(params.ldc, 1001);
}

// A row-major B whose rows are off 16 bytes is read in place, one tensor map per row phase:
// phase h's rows (G q + h) lie G rows apart, a multiple of 16 bytes, its map starting at the
// 16-byte boundary before its first row; A is gathered into K permuted to match, each phase's
// rows padded to whole k blocks. Swapped, the weight is the kernel's A; otherwise its B.
TEST(MatmulWgmmaTest, ReadsARowMajorWeightOffSixteenBytesInRowPhases) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
  const std::uint64_t workspace = 0x100000;
  // 40 x 4906 x 9568: rows of 9812 bytes, 4 mod 16: 4 phases of 2392 rows, 38 k blocks each.
  {
    const Problem problem = matmul_problem(40, 4906, 9568);
    const Config config = testing::wgmma_config(64, 64, 13, 1, 4, 1, 8, 1, 0, /*swap_ab=*/1);
    ASSERT_EQ(matmul().reject(config, problem, hopper), std::nullopt);
    const std::vector<std::string> kernels = matmul().kernel_expressions(config, problem);
    ASSERT_EQ(kernels.size(), 2u);
    EXPECT_EQ(kernels[0].substr(kernels[0].size() - 3), ",1>") << kernels[0];  // PHASED
    EXPECT_EQ(kernels[1], "tilesmith::gather_phases<2>");
    // The gathered A for any row stride of B: 8 phases of 1196 rows (19 blocks) is the most.
    EXPECT_EQ(matmul().workspace_bytes(config, problem, hopper), (40u * 8 * 19 * 64 * 2 + 255) / 256 * 256);
    const LaunchPlan plan = matmul().plan(config, problem, hopper, addresses, workspace, {});
    ASSERT_EQ(plan.step_count, 2);
    EXPECT_EQ(plan.steps[0].kernel, 1);
    GatherPhasesParams gather;
    std::memcpy(&gather, plan.steps[0].args.bytes.data(), sizeof gather);
    EXPECT_EQ(reinterpret_cast<std::uint64_t>(gather.src), 0x10000u);
    EXPECT_EQ(reinterpret_cast<std::uint64_t>(gather.dst), workspace);
    EXPECT_EQ(gather.rows, 40);
    EXPECT_EQ(gather.k, 9568);
    EXPECT_EQ(gather.row_stride, 9568);
    EXPECT_EQ(gather.k_stride, 1);
    EXPECT_EQ(gather.k_contiguous, 1);
    EXPECT_EQ(gather.phases, 4);
    EXPECT_EQ(gather.stride, 4);
    EXPECT_EQ(gather.phase_k, 38 * 64);
    const LaunchStep& product = plan.steps[1];
    EXPECT_EQ(product.kernel, 0);
    MatmulSm90PhasedParams params;
    ASSERT_EQ(product.args.size, sizeof params);
    std::memcpy(&params, product.args.bytes.data(), sizeof params);
    EXPECT_EQ(params.phases, 4);
    EXPECT_EQ(params.phase_blocks, 38);
    EXPECT_EQ(params.k, 4 * 38 * 64);  // the permuted K
    EXPECT_EQ(params.m, 4906);         // swapped: C^T
    // One wave, but the phases sum into the exchange buffer during the main loop: past the ring.
    EXPECT_EQ(params.exchange_in_ring, 0);
    // The gathered A (the kernel's B, K-major over the permuted K), C by plain stores, and
    // the four phases: phase h's first row is 9812 h bytes in, 4 h mod 16.
    ASSERT_EQ(product.args.tensor_map_count, 5);
    const TensorMapSpec& gathered = product.args.tensor_maps[0];
    EXPECT_EQ(gathered.offset, offsetof(MatmulSm90Params, b_map));
    EXPECT_EQ(gathered.address, workspace);
    EXPECT_EQ(gathered.dims[0], 4u * 38 * 64);
    EXPECT_EQ(gathered.dims[1], 40u);
    EXPECT_EQ(gathered.stride_bytes[0], 4u * 38 * 64 * 2);
    EXPECT_EQ(gathered.stride_bytes[1], 40u * 4 * 38 * 64 * 2);
    for (int h = 0; h < 4; ++h) {
      const TensorMapSpec& map = product.args.tensor_maps[1 + h];
      const std::uint64_t first_row = 0x20000 + 9812u * h;
      EXPECT_EQ(map.offset, offsetof(MatmulSm90PhasedParams, weight_maps) + 128u * h);
      EXPECT_EQ(map.address, first_row / 16 * 16) << h;
      EXPECT_EQ(params.weight_shift[h], static_cast<int>(first_row % 16 / 2)) << h;
      EXPECT_EQ(map.dims[0], 4906u + params.weight_shift[h]);
      EXPECT_EQ(map.dims[1], 2392u);  // 9568 rows, 4 apart
      EXPECT_EQ(map.stride_bytes[0], 4u * 9812);
      // Swizzled 64-column boxes of a whole k block, as any MN-major operand's.
      EXPECT_EQ(map.box[0], 64u);
      EXPECT_EQ(map.box[1], 64u);
      EXPECT_EQ(map.swizzle_bytes, 128u);
    }
    // Each tile covers 56 of the weight's columns (a box at a multiple of 8 of the map holds
    // them whatever the shift): 88 tiles, 22 clusters of 4.
    EXPECT_EQ(product.geometry.grid[0], 88u);
  }
  // An odd N (8 phases), K shorter than a phase's block, A column-major (gathered from its
  // rows, so swapped tiles take it), a cluster of 2 sharing A; the last phases hold one row
  // fewer. Tiles whose clusters share the weight (a swapped pair along N, unswapped tiles),
  // and swapped tiles of 128 rows of A (C^T out through the staging slots, not the exchange
  // buffer that adds up the phases) pad it as before.
  {
    const Problem problem{"matmul", DType::bf16, DType::bf16, {40, 1001, 777}, {{"a", "col"}}};
    const Config config = testing::wgmma_config(128, 32, 4, 2, 2, 1, 8, 1, 0, 1);
    ASSERT_EQ(matmul().reject(config, problem, hopper), std::nullopt);
    const LaunchPlan plan = matmul().plan(config, problem, hopper, addresses, workspace, {});
    ASSERT_EQ(plan.step_count, 2);
    GatherPhasesParams gather;
    std::memcpy(&gather, plan.steps[0].args.bytes.data(), sizeof gather);
    EXPECT_EQ(gather.k_contiguous, 0);
    EXPECT_EQ(gather.row_stride, 1);
    EXPECT_EQ(gather.k_stride, 40);
    EXPECT_EQ(gather.phases, 8);
    EXPECT_EQ(gather.phase_k, 128);  // 98 rows in 2 blocks
    MatmulSm90PhasedParams params;
    std::memcpy(&params, plan.steps[1].args.bytes.data(), sizeof params);
    EXPECT_EQ(params.k, 8 * 128);
    EXPECT_EQ(params.phase_blocks, 2);
    ASSERT_EQ(plan.steps[1].args.tensor_map_count, 9);
    EXPECT_EQ(plan.steps[1].args.tensor_maps[0].box[1], 16u);  // A's rows: half each of the pair
    for (int h = 0; h < 8; ++h) {
      const TensorMapSpec& map = plan.steps[1].args.tensor_maps[1 + h];
      EXPECT_EQ(map.dims[1], h < 777 % 8 ? 98u : 97u) << h;
      EXPECT_EQ(map.stride_bytes[0], 8u * 2002);
    }
    // The stage ring, the exchange buffer and the barriers, as any swapped tile's.
    EXPECT_EQ(plan.steps[1].geometry.dynamic_smem_bytes,
              4u * (128 + 32) * 128 + 32 * (128 + 4) * 4 + 16 * 4 + 16 + 1024);
    for (const Config& shares_the_weight :
         {testing::wgmma_config(128, 128, 4, 2, 2, 1), testing::wgmma_config(64, 32, 8, 1, 1, 2, 8, 1, 0, 1),
          testing::wgmma_config(64, 128, 4, 1, 1, 1, 8, 1, 0, 1)}) {
      const std::string product = matmul().kernel_expressions(shares_the_weight, problem)[0];
      EXPECT_EQ(product.substr(product.size() - 3), ",0>") << product;
    }
  }
  // K shorter than the stride: as many phases as rows, still 8 apart in the gather (which
  // wrote 8 phases into rows of 5 once).
  {
    const Problem problem = matmul_problem(40, 1001, 5);
    const Config config = testing::wgmma_config(64, 16, 4, 1, 1, 1, 1, 1, 0, 1);
    const LaunchPlan plan = matmul().plan(config, problem, hopper, addresses, workspace, {});
    GatherPhasesParams gather;
    std::memcpy(&gather, plan.steps[0].args.bytes.data(), sizeof gather);
    EXPECT_EQ(gather.phases, 5);
    EXPECT_EQ(gather.stride, 8);
    MatmulSm90PhasedParams params;
    std::memcpy(&params, plan.steps[1].args.bytes.data(), sizeof params);
    EXPECT_EQ(params.k, 5 * 64);
    ASSERT_EQ(plan.steps[1].args.tensor_map_count, 6);
    for (int h = 0; h < 5; ++h) EXPECT_EQ(plan.steps[1].args.tensor_maps[1 + h].dims[1], 1u);
  }
  // Not batched, or where B's rows are on 16 bytes: the kernel's last argument stays 0.
  const Config swapped = testing::wgmma_config(64, 64, 8, 1, 1, 1, 8, 1, 0, 1);
  for (const Problem& problem :
       {Problem{"matmul", DType::bf16, DType::bf16, {2, 40, 1001, 777}, {}}, matmul_problem(40, 1000, 777)}) {
    const std::string product = matmul().kernel_expressions(swapped, problem)[0];
    EXPECT_EQ(product.substr(product.size() - 3), ",0>") << problem.key() << " " << product;
  }
}

TEST(MatmulWgmmaTest, SplitKWritesPartialsThenReducesThem) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config split = testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, /*split_k=*/4);
  // 4096^3 has 1024 tiles of 128x128: splitting K cannot help, it is pruned.
  EXPECT_TRUE(matmul().reject(split, matmul_problem(4096, 4096, 4096), hopper));
  // 1000^3: 64 tiles for 132 SMs, 16 K blocks.
  const Problem problem = matmul_problem(1000, 1000, 1000, DType::bf16, DType::f16);
  ASSERT_EQ(matmul().reject(split, matmul_problem(1000, 1000, 1000), hopper), std::nullopt);
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 8),
                              matmul_problem(1000, 1000, 256), hopper));  // 4 K blocks, 8 slices
  EXPECT_EQ(matmul().workspace_bytes(split, problem, hopper), 4u * 1000 * 1000 * 4);
  const std::vector<std::string> kernels = matmul().kernel_expressions(split, problem);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[1], "tilesmith::splitk_reduce<0,0>");  // f16 C
  const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
  const LaunchPlan plan = matmul().plan(split, problem, hopper, addresses, 0x100000, {});
  ASSERT_EQ(plan.step_count, 2);
  EXPECT_EQ(plan.steps[0].kernel, 0);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], 132u);  // 64 tiles x 4 slices, persistent
  MatmulSm90Params params;
  std::memcpy(&params, plan.steps[0].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.k_splits, 4);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.partials), 0x100000u);
  EXPECT_EQ(params.c_store_tma, 0);
  EXPECT_EQ(plan.steps[0].args.tensor_map_count, 2);
  EXPECT_EQ(plan.steps[1].kernel, 1);
  SplitKReduceParams reduce;
  std::memcpy(&reduce, plan.steps[1].args.bytes.data(), sizeof reduce);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(reduce.partials), 0x100000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(reduce.c), 0x30000u);
  EXPECT_EQ(reduce.splits, 4);
  EXPECT_EQ(reduce.m, 1000);
  EXPECT_EQ(reduce.ldc, 1000);
  EXPECT_EQ(reduce.tail, 0);
}

// Where the tiles fill the SMs, split_k splits only the tiles of the last, partial wave (a tail
// split): 1000x2816 in 128x128 tiles is 176 tiles, a wave of 132 and 44 more, which take up to
// 3 slices each on the 132 SMs. Their partials are CTA blocks after a header, one block per SM
// at most; C's whole tiles still leave through TMA.
TEST(MatmulWgmmaTest, TailSplitCutsOnlyTheLastWavesTiles) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem problem = matmul_problem(1000, 2816, 1024);
  auto split = [](int k) { return testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, k); };
  EXPECT_EQ(matmul().reject(split(2), problem, hopper), std::nullopt);
  EXPECT_EQ(matmul().reject(split(4), problem, hopper), std::nullopt);  // 3 slices: capped
  const std::optional<std::string> eight = matmul().reject(split(8), problem, hopper);
  ASSERT_TRUE(eight);
  EXPECT_NE(eight->find("at most 3 slices"), std::string::npos) << *eight;
  // One order of the tail's slices, and no tail where the waves are whole or the last is full.
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 2, 0, 0, 1), problem, hopper));
  EXPECT_TRUE(matmul().reject(split(2), matmul_problem(1408, 1536, 512), hopper));  // 132 tiles
  EXPECT_TRUE(matmul().reject(split(2), matmul_problem(4096, 4096, 4096), hopper));  // 100 of 132
  EXPECT_EQ(matmul().workspace_bytes(split(2), problem, hopper),
            (kTailHeader + 132u * 128 * 128) * 4);
  const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
  const LaunchPlan plan = matmul().plan(split(2), problem, hopper, addresses, 0x100000, {});
  ASSERT_EQ(plan.step_count, 2);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], 132u);
  MatmulSm90Params params;
  std::memcpy(&params, plan.steps[0].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.tail, 1);
  EXPECT_EQ(params.k_splits, 2);
  EXPECT_EQ(params.c_store_tma, 1);
  SplitKReduceParams reduce;
  std::memcpy(&reduce, plan.steps[1].args.bytes.data(), sizeof reduce);
  EXPECT_EQ(reduce.tail, 1);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(reduce.partials), 0x100000u);
  EXPECT_EQ(reduce.tiles_m, 8);
  EXPECT_EQ(reduce.tiles_n, 22);
  EXPECT_EQ(reduce.group_m, 8);
  EXPECT_EQ(reduce.block_m, 128);
  EXPECT_EQ(reduce.block_n, 128);
  EXPECT_EQ(reduce.cluster_m * reduce.cluster_n, 1);
  EXPECT_EQ(plan.steps[1].geometry.grid[0], 8u * 132);  // a thread per 4 columns of 132 blocks
  // The untuned default splits a small last wave: 5000x5000 in 256x256 pairs is 400 for 66 SM
  // pairs, the last 4 split 8 ways; 26 of 66 (1024x14336x4096, B row-major) 2 ways; 4096^3 not
  // at all.
  auto default_split = [&](const Problem& p) { return matmul().default_config(p, hopper).at("split_k"); };
  EXPECT_EQ(default_split(matmul_problem(5000, 5000, 2048)), 8);
  EXPECT_EQ(default_split(matmul_problem(1024, 14336, 4096)), 2);
  EXPECT_EQ(default_split(matmul_problem(4096, 4096, 4096)), 1);
  // Under a K of 2048 the split's second launch and partials cost more than its slices save
  // (v51): not there, but for fp32 with B row-major, whose tiles fit_waves weighs unswapped.
  EXPECT_EQ(default_split(matmul_problem(5000, 5000, 2000)), 1);
  const Problem fp32_b_rows{"matmul", DType::f32, DType::f32, {3320, 3000, 960}, {{"a", "col"}}};
  EXPECT_EQ(default_split(fp32_b_rows), 8);
  // fp32 (tf32 at half the rate) from a K of 1024 (v54): 283x14056x1896 ran 1.29x faster split.
  const Problem fp32{"matmul", DType::f32, DType::f32, {283, 14056, 1896}, {{"b", "col"}}};
  EXPECT_EQ(default_split(fp32), 8);
  const Problem short_fp32{"matmul", DType::f32, DType::f32, {6549, 15096, 328}, {{"b", "col"}}};
  EXPECT_EQ(default_split(short_fp32), 1);
}

}  // namespace
}  // namespace tilesmith

namespace tilesmith {
namespace {

// A tiny product (2^25 multiply-adds or fewer over its batches, K up to 512 or 384 for rows off
// 16 bytes, 16-bit inputs or K-major fp32 ones, more than 16 rows and columns) takes the mma.sync
// template's 32x32 tiles on Hopper: more CTAs than the smallest wgmma tile gives
// (docs/perf/matmul.md v40).
TEST(MatmulWgmmaTest, TheDefaultTakesTheMmaSyncTilesForTinyProducts) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const auto variant = [&](const Problem& problem) {
    return matmul().default_config(problem, hopper).at("variant");
  };
  for (const Problem& tiny :
       {matmul_problem(64, 128, 64), matmul_problem(128, 512, 512) /* 2^25 */,
        testing::x_times_w_t({200, 160, 320}), matmul_problem(250, 130, 90) /* rows off 16 B */,
        Problem{"matmul", DType::f16, DType::f32, {48, 1024, 256}, {{"a", "col"}}},
        Problem{"matmul", DType::f32, DType::f32, {100, 300, 200}, {{"b", "col"}}}}) {
    const Config config = matmul().default_config(tiny, hopper);
    EXPECT_EQ(config.at("variant"), 0) << tiny.shape[0];
    EXPECT_EQ(config.at("block_m"), 32);
    EXPECT_EQ(config.at("block_n"), 32);
    EXPECT_EQ(matmul().reject(config, tiny, hopper), std::nullopt);
  }
  EXPECT_EQ(variant(matmul_problem(129, 512, 512)), 1);  // past 2^25
  EXPECT_EQ(variant(matmul_problem(64, 64, 1024)), 1);   // K past 512
  EXPECT_EQ(variant(matmul_problem(256, 256, 380)), 0);  // A's rows off 16 bytes
  EXPECT_EQ(variant(matmul_problem(256, 256, 390)), 1);  // ... past K 384
  EXPECT_EQ(variant(matmul_problem(128, 256, 392)), 0);  // rows on 16 bytes
  // fp32 with B or A MN-major (transposed first for tf32): the wgmma tiles.
  EXPECT_EQ(variant(Problem{"matmul", DType::f32, DType::f32, {64, 128, 64}, {}}), 1);
  EXPECT_EQ(variant(Problem{"matmul", DType::f32, DType::f32, {64, 128, 64},
                            {{"a", "col"}, {"b", "col"}}}),
            1);
  // A batch counts its products together.
  EXPECT_EQ(variant(Problem{"matmul", DType::bf16, DType::bf16, {16, 64, 64, 64}, {}}), 0);
  EXPECT_EQ(variant(Problem{"matmul", DType::bf16, DType::bf16, {3, 128, 512, 512}, {}}), 1);
  EXPECT_NE(variant(matmul_problem(16, 512, 512)), 0);  // 16 rows: the swapped tiles
}

// The wave-fitted 192x128 tile runs in pairs along M sharing B's box where the pairs cost no
// more waves (v50: 1.057x over 62 shapes whose default changed): with A column-major (1.20x at
// 1797x1464x3118), K split in the last wave, an odd count of 7 tile rows or more. One tile
// row, five, a coarser tail split, and fp32's swapped twin keep it alone.
TEST(MatmulWgmmaTest, TheDefaultPairsTheLoneTileAlongM) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  using enum DType;
  const ProblemOptions col_a = {{"a", "col"}}, both = {{"a", "col"}, {"b", "col"}};
  EXPECT_EQ(default_tile(bf16, {1797, 1464, 3118}, col_a), "192x128 2x1 s1");
  EXPECT_EQ(default_tile(bf16, {1411, 4608, 4462}, col_a), "192x128 2x1 s8");
  EXPECT_EQ(default_tile(bf16, {5092, 896, 4092}, both), "192x128 2x1 s2");   // 27 rows
  EXPECT_EQ(default_tile(bf16, {3289, 1728, 1144}, {}), "192x128 2x1 s1");  // B's rows on the lines
  // Both operands' rows off the lines: 128x192 pairs tie with 192x128 alone and read less from
  // L2 a multiply (v62).
  EXPECT_EQ(default_tile(bf16, {3289, 1704, 1144}, {}), "128x192 2x1 s1");
  EXPECT_EQ(default_tile(f32, {1040, 2662, 2888}, col_a), "192x128 2x1 s1");
  EXPECT_EQ(default_tile(bf16, {163, 8197, 15023}, col_a), "192x128 1x1 s1");  // one tile row
  EXPECT_EQ(default_tile(bf16, {857, 5228, 2064}, {}), "128x192 1x2 s2");  // pairs along N (v70)
  EXPECT_EQ(default_tile(bf16, {857, 5228, 1024}, {}), "192x128 1x1 s1");  // five; short K
  // The pairs' last wave (30 of 66) splits in two where the lone tiles' (22 of 132) split in 8.
  EXPECT_EQ(default_tile(bf16, {2105, 4800, 2318}, {}), "192x128 1x1 s8");
  const Config twin =
      matmul().default_config(Problem{"matmul", f32, f32, {328, 6858, 1678}, {}}, hopper);
  EXPECT_EQ(twin.at("swap_ab"), 1);
  EXPECT_EQ(twin.at("cluster_m") * twin.at("cluster_n"), 1);
}

// M in one 128-row tile over a weight of many tiles (v64): fit_waves weighs 128x256 and 128x192
// in pairs along N, sharing A, where the base's pairs along M leave half of each pair idle; at
// 65-112 rows, where the fitted tile pads M by over a quarter, M in one swapped tile of 80-112
// columns in clusters of 4 along the weight, over more than a wave (96x28672x8192 had taken
// 192x128 tiles: 0.52x cuBLAS).
TEST(MatmulWgmmaTest, TheDefaultTakesOneTileRowOfMInPairsAlongN) {
  using enum DType;
  const ProblemOptions xwt = {{"b", "col"}};
  EXPECT_EQ(default_tile(bf16, {128, 28672, 8192}, xwt), "128x256 1x2 s1");
  EXPECT_EQ(default_tile(bf16, {112, 28672, 8192}, xwt), "128x256 1x2 s1");  // pads M by 1/7
  EXPECT_EQ(default_tile(f16, {120, 17000, 1500}, {}), "128x192 1x2 s1");
  EXPECT_EQ(default_tile(bf16, {4, 100, 8192, 1000}, xwt), "128x256 1x2 s1");  // a batch
  EXPECT_EQ(default_tile(bf16, {96, 28672, 8192}, xwt), "swapped 128x96 4x1 s1");
  EXPECT_EQ(default_tile(bf16, {80, 28672, 8192}, xwt), "swapped 128x80 4x1 s1");
  EXPECT_EQ(default_tile(f16, {70, 33000, 600}, {}), "swapped 128x80 4x1 s1");
  EXPECT_EQ(default_tile(bf16, {97, 20011, 1000}, xwt), "swapped 128x104 4x1 s1");
  // Two tile rows keep the pairs along M's choices (192x128 alone at 160 rows).
  EXPECT_EQ(default_tile(bf16, {160, 28672, 8192}, xwt), "192x128 1x1 s1");
}

// 16-bit swapped tiles of 128 columns or more hold 129-256 rows of M whole (144, 160 and 176
// columns end C^T's store in a part round whose other rows must fall past M): not over fewer
// rows, nor more than one tile's, nor 16 columns or more past M, nor in clusters along M; 144
// and 160 only swapped; fp32 reading B in place keeps 128, 192 and 256 (v66).
TEST(MatmulWgmmaTest, WideSwappedSixteenBitTilesHoldMWhole) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const auto rejects = [&](int block_n, int cluster_m, int cluster_n, const Problem& p) {
    const Config swapped =
        testing::wgmma_config(128, block_n, 5, 2, cluster_m, cluster_n, 8, 1, 0, 1, 0, 0);
    return matmul().reject(swapped, p, hopper).has_value();
  };
  using testing::x_times_w_t;
  EXPECT_FALSE(rejects(144, 1, 1, x_times_w_t({144, 28672, 8192})));
  EXPECT_FALSE(rejects(144, 2, 1, x_times_w_t({129, 3001, 1000})));
  EXPECT_FALSE(rejects(160, 2, 1, x_times_w_t({150, 2000, 777})));
  EXPECT_FALSE(rejects(176, 2, 1, x_times_w_t({170, 1000, 2000})));
  EXPECT_TRUE(rejects(144, 1, 1, x_times_w_t({120, 28672, 8192})));  // M of one 128-row tile
  EXPECT_TRUE(rejects(144, 1, 1, x_times_w_t({160, 28672, 8192})));  // M past the tile
  EXPECT_TRUE(rejects(176, 1, 1, x_times_w_t({150, 28672, 8192})));  // 26 columns of zeros
  EXPECT_TRUE(rejects(160, 1, 2, x_times_w_t({150, 28672, 8192})));  // a cluster along M
  EXPECT_TRUE(rejects(144, 4, 1, x_times_w_t({144, 28672, 8192})));  // 36-row multicast slices
  EXPECT_TRUE(matmul()
                  .reject(testing::wgmma_config(128, 144, 5, 2, 1, 1), matmul_problem(144, 4096, 4096),
                          hopper)
                  .has_value());  // unswapped
  const Problem fp32_b_rows{"matmul", DType::f32, DType::f32, {300, 4096, 1024}, {}};
  EXPECT_TRUE(rejects(144, 1, 1, fp32_b_rows));
  const Problem tf32{"matmul", DType::f32, DType::f32, {144, 4096, 1024}, {{"b", "col"}}};
  EXPECT_TRUE(rejects(144, 1, 1, tf32));
}

// fp32 with A column-major and B row-major: where fit_waves puts a ping-pong tile first (which
// has no swapped twin), 128x256's swapped twin runs instead, whatever the waves (v53: 1.07-1.84x
// over 21 shapes); other tiles keep B transposed.
TEST(MatmulWgmmaTest, TheDefaultSwapsFp32PingPongTilesOfAColumnMajorA) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const ProblemOptions col_a = {{"a", "col"}};
  for (const std::vector<std::int64_t> shape :
       {std::vector<std::int64_t>{2957, 16224, 2416}, {6658, 2341, 12063}, {2370, 4272, 88}}) {
    const Problem p{"matmul", DType::f32, DType::f32, shape, col_a};
    const Config config = matmul().default_config(p, hopper);
    EXPECT_EQ(matmul().reject(config, p, hopper), std::nullopt) << config.text();
    EXPECT_EQ(config.at("swap_ab"), 1) << shape[0];
    EXPECT_EQ(config.at("block_m"), 128);
    EXPECT_EQ(config.at("block_n"), 256);
    EXPECT_EQ(config.at("pingpong"), 0);
  }
  // 192x128 pairs keep B transposed: the mirror problem's tile (128x176) has no swapped form
  // with B row-major, so the rule below leaves them.
  const Config pairs = matmul().default_config(
      Problem{"matmul", DType::f32, DType::f32, {1051, 2508, 560}, col_a}, hopper);
  EXPECT_EQ(pairs.at("swap_ab"), 0);
}

// fp32 with A column-major and B row-major transposes one of them first (tf32 reads K-major
// operands; the sm_90a template reads an MN-major one through registers only as its own A).
// Where A is the smaller, the default runs the mirror problem's tiles (N x M x K, the same
// bytes) swapped, so A is the one transposed: 1.22x over 103 random such shapes on the H200
// (docs/perf/matmul.md v71). With M > N, B stays the one transposed.
TEST(MatmulWgmmaTest, TheDefaultTransposesTheSmallerOfTwoMnMajorFp32Operands) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const ProblemOptions col_a = {{"a", "col"}};
  using Shape = std::tuple<std::int64_t, std::int64_t, std::int64_t>;
  for (const auto& [m, n, k] :
       {Shape{104, 4088, 1024}, Shape{116, 516, 13600}, Shape{224, 12536, 8104},
        Shape{73, 88, 1236}}) {
    const Problem p{"matmul", DType::f32, DType::f32, {m, n, k}, col_a};
    const Problem mirror{"matmul", DType::f32, DType::f32, {n, m, k}, col_a};
    const Config config = matmul().default_config(p, hopper);
    const Config mirrored = matmul().default_config(mirror, hopper);
    EXPECT_EQ(matmul().reject(config, p, hopper), std::nullopt) << config.text();
    EXPECT_EQ(mirrored.at("variant"), 1) << m;
    EXPECT_EQ(mirrored.at("swap_ab"), 0) << m;  // M > N: B (the mirror's A) transposed
    Config expected = mirrored;
    expected.values["swap_ab"] = 1;
    EXPECT_EQ(config.text(), expected.text()) << m << "x" << n << "x" << k;
  }
  // Batches and a call's unaligned strides go to the mirror as they are.
  for (const auto& [dims, options] :
       {std::pair<std::vector<std::int64_t>, ProblemOptions>{{2, 77, 1500, 2000}, col_a},
        {{300, 2000, 3000}, {{"a", "col"}, {"aligned", "0"}}}}) {
    std::vector<std::int64_t> mirrored_dims = dims;
    std::swap(mirrored_dims[dims.size() - 3], mirrored_dims[dims.size() - 2]);
    const Problem p{"matmul", DType::f32, DType::f32, dims, options};
    Config expected =
        matmul().default_config({"matmul", DType::f32, DType::f32, mirrored_dims, options}, hopper);
    EXPECT_EQ(expected.at("swap_ab"), 0) << p.key();
    expected.values["swap_ab"] = 1;
    EXPECT_EQ(matmul().default_config(p, hopper).text(), expected.text()) << p.key();
  }
}

// The untuned default's large tile is the one whose waves come out whole: 128x256 where its
// waves are whole or its last one splits cheaply, 192-wide tiles where they fit the 132 SMs
// in fewer waves (the tuned winners at these shapes on the H100, docs/perf/matmul.md v16).
TEST(MatmulWgmmaTest, TheDefaultsTileFitsTheWaves) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  auto tile = [&](const Problem& p) {
    const Config config = matmul().default_config(p, hopper);
    EXPECT_EQ(matmul().reject(config, p, hopper), std::nullopt) << config.text();
    return std::to_string(config.at("block_m")) + "x" + std::to_string(config.at("block_n"));
  };
  EXPECT_EQ(tile(matmul_problem(2048, 2176, 4096)), "192x192");  // 66 pairs: one wave
  EXPECT_EQ(tile(matmul_problem(3000, 3000, 3000)), "192x192");  // 128 pairs: two waves
  EXPECT_EQ(tile(matmul_problem(1536, 4096, 4096)), "192x128");  // 256 tiles: two waves
  // 192x128 alone and 128x192 in pairs cost the same waves here; the fewer padded rows decide:
  // 1000 rows pad to 1152 in 192-row tiles, to 1024 in 128-row pairs (0.0536 against 0.0383 ms,
  // docs/perf/matmul.md v26). 960 rows are five whole 192-row tiles, and at 1100 128x192 pairs
  // take two waves: there 192x128's one wave gave way to swapped 256-row tiles of 80 rows of M
  // (1.054x in rounds, v48); at 1100 192x128 in pairs along M ran faster still (1.033x, v50).
  EXPECT_EQ(tile(matmul_problem(1000, 2816, 4096)), "128x192");
  EXPECT_EQ(tile(matmul_problem(2000, 2816, 4096)), "128x192");
  EXPECT_EQ(tile(matmul_problem(960, 2816, 4096)), "256x80");
  EXPECT_EQ(tile(matmul_problem(1100, 2816, 4096)), "192x128");
  EXPECT_EQ(tile(matmul_problem(2752, 751, 714)), "192x128");  // K too short to break the tie
  EXPECT_EQ(tile(matmul_problem(5784, 1364, 1527)), "192x192");  // another area: no tie-break
  for (long long side : {2048, 4096, 8192}) EXPECT_EQ(tile(matmul_problem(side, side, side)), "128x256");
  EXPECT_EQ(tile(matmul_problem(5000, 5000, 2048)), "128x256");
  // The 192-row tiles run along N where B stays in L2 (34 MB and less) or all tiles run in one
  // wave, else in the base's groups of 8 tile rows (768x13056x1664, B 43 MB: 1.18x faster
  // grouped; docs/perf/matmul.md v23).
  auto group = [&](const Problem& p) { return matmul().default_config(p, hopper).at("group_m"); };
  EXPECT_EQ(group(matmul_problem(1536, 4096, 4096)), 1);
  EXPECT_EQ(group(matmul_problem(3000, 3000, 3000)), 1);
  const Problem wide_b = testing::x_times_w_t({2825, 8974, 4983});  // padded: rows on lines
  EXPECT_EQ(tile(wide_b), "192x128");
  EXPECT_EQ(group(wide_b), 8);
  const Problem one_wave = testing::x_times_w_t({1137, 4224, 6424});  // B 54 MB, 66 pairs
  EXPECT_EQ(tile(one_wave), "192x192");  // pairs sharing A: as few L2 bytes a multiply as 128x256's
  EXPECT_EQ(group(one_wave), 1);
  // Both operands' rows off L2's 128-byte lines (K = 1688: 3376-byte rows) leave only the tiles
  // that read as few L2 bytes a multiply as the base: 192x128 alone ran 730x13112x1688 1.48x
  // slower than 128x256 pairs, 128x176 in ping-pong 1.14x (v23). On the lines, with one operand
  // off them (B padded), or with a short K, the same shapes may take them.
  EXPECT_EQ(tile(matmul_problem(730, 13112, 1688)), "128x256");
  EXPECT_EQ(tile(testing::x_times_w_t({730, 13112, 1688})), "128x256");
  EXPECT_EQ(tile(testing::x_times_w_t({2163, 6176, 6376})), "128x256");
  EXPECT_EQ(tile(testing::x_times_w_t({2163, 6176, 6400})), "128x176");
  EXPECT_EQ(tile(matmul_problem(857, 5228, 1024)), "192x128");
  EXPECT_EQ(tile(matmul_problem(857, 5228, 2064)), "128x192");  // in pairs along N (v70)
  EXPECT_EQ(tile(matmul_problem(6688, 784, 608)), "192x128");  // a wave in four saved
  // Under K 1536, both operands off the lines: a wave in sixteen saved is not enough (v52:
  // 192x128 pairs 1.35x slower than 128x256's at 4972x16080x968, alone 1.58x at 1567x9056x1416).
  EXPECT_EQ(tile(matmul_problem(4972, 16080, 968)), "128x256");
  EXPECT_EQ(tile(matmul_problem(1567, 9056, 1416)), "128x256");
  // Both off the lines, where 192x128 alone and 128x192 in pairs cost the same waves: the pairs,
  // which read less from L2 a multiply (1.067x over 16 fresh shapes, v62), without L2's 256-byte
  // promotion (each box row spans two lines already); on the lines the promotion stays. Not
  // where a pair's tile is wider than N (16311x56x1296: narrow tiles, pinned above).
  const Problem straddling = testing::x_times_w_t({2000, 3000, 1000});
  EXPECT_EQ(tile(straddling), "128x192");
  EXPECT_EQ(matmul().default_config(straddling, hopper).at("cluster_m"), 2);
  EXPECT_EQ(matmul().default_config(straddling, hopper).at("l2_promotion"), 0);
  EXPECT_EQ(tile(matmul_problem(2010, 2920, 1440)), "128x192");
  const Problem on_lines = matmul_problem(2010, 2920, 1408);
  EXPECT_EQ(tile(on_lines), "192x128");
  EXPECT_EQ(matmul().default_config(on_lines, hopper).at("l2_promotion"), 256);
  // x @ W^T (B K-major) may take 176- or 224-wide tiles: 1024x14336x4096 in 128x176 pairs is
  // 328 for 66, five waves of 98% (cuBLAS's tile); 128x256 pairs take 3.4 waves, the last split.
  const Problem up{"matmul", DType::bf16, DType::bf16, {1024, 14336, 4096}, {{"b", "col"}}};
  EXPECT_EQ(tile(up), "128x176");
  EXPECT_EQ(matmul().default_config(up, hopper).at("split_k"), 1);
  // Five tiles a pair: the two consumers take them in turn (ping-pong), 5 stages. Under two a
  // pair (1024x5120x5120: 120 pairs for 66) they share each tile's rows.
  EXPECT_EQ(matmul().default_config(up, hopper).at("pingpong"), 1);
  EXPECT_EQ(matmul().default_config(up, hopper).at("stages"), 5);
  const Problem square5120 = testing::x_times_w_t({1024, 5120, 5120});
  EXPECT_EQ(tile(square5120), "128x176");
  EXPECT_EQ(matmul().default_config(square5120, hopper).at("pingpong"), 0);
  EXPECT_EQ(tile(matmul_problem(1024, 14336, 4096)), "128x256");  // B row-major: no 176
  // C through TMA whatever the width: a partial last box (176 columns of bf16) goes out by
  // plain stores inside the kernel.
  const std::vector<std::uint64_t> addresses = {0x10000, 0x20000, 0x30000};
  auto tma_store = [&](const Problem& p) {
    const LaunchPlan plan = matmul().plan(matmul().default_config(p, hopper), p, hopper, addresses, 0x100000, {});
    MatmulSm90Params params;
    std::memcpy(&params, plan.steps[0].args.bytes.data(), sizeof params);
    return params.c_store_tma;
  };
  EXPECT_EQ(tma_store(up), 1);
  const Config wide = testing::wgmma_config(128, 224, 4, 2, 2, 1);
  const Problem up_f32{"matmul", DType::bf16, DType::f32, {1024, 14336, 4096}, {{"b", "col"}}};
  ASSERT_EQ(matmul().reject(wide, up_f32, hopper), std::nullopt);
  const LaunchPlan f32_plan = matmul().plan(wide, up_f32, hopper, addresses, 0x100000, {});
  MatmulSm90Params f32_params;
  std::memcpy(&f32_params, f32_plan.steps[0].args.bytes.data(), sizeof f32_params);
  EXPECT_EQ(f32_params.c_store_tma, 1);
  // C's rows 16-byte aligned (ldc 312) but N = 301: TMA stores whole 16-byte chunks, so it
  // would write columns 301-303 of the padding; C goes out by plain stores.
  const Problem ragged = testing::x_times_w_t({100, 301, 264});
  CallScalars padded_c;
  padded_c.row_strides[2] = 312;
  const LaunchPlan ragged_plan =
      matmul().plan(testing::wgmma_config(128, 176, 4, 2, 1, 1), ragged, hopper, addresses, 0x100000, padded_c);
  MatmulSm90Params ragged_params;
  std::memcpy(&ragged_params, ragged_plan.steps[0].args.bytes.data(), sizeof ragged_params);
  EXPECT_EQ(ragged_params.ldc, 312);
  EXPECT_EQ(ragged_params.c_store_tma, 0);
  padded_c.row_strides[2] = 304;
  const Problem even = testing::x_times_w_t({100, 304, 264});
  const LaunchPlan even_plan =
      matmul().plan(testing::wgmma_config(128, 176, 4, 2, 1, 1), even, hopper, addresses, 0x100000, padded_c);
  std::memcpy(&ragged_params, even_plan.steps[0].args.bytes.data(), sizeof ragged_params);
  EXPECT_EQ(ragged_params.c_store_tma, 1);
  // B read MN-major (row-major) comes in 64-wide blocks: no 176 or 224.
  EXPECT_TRUE(matmul().reject(wide, matmul_problem(1024, 14336, 4096), hopper));
  EXPECT_EQ(tile(Problem{"matmul", DType::bf16, DType::bf16, {8, 2048, 2048, 2048}}), "128x256");
  EXPECT_EQ(matmul().default_config(matmul_problem(2048, 2176, 4096), hopper).at("split_k"), 1);
  // A grid of one partial wave is no tail: 2048^3's 64 pairs for 66 run whole.
  EXPECT_EQ(matmul().default_config(matmul_problem(2048, 2048, 2048), hopper).at("split_k"), 1);
}

// swap_ab: the kernel computes C^T = B^T A^T for M below a wgmma tile; its M is N, its A is B
// (row-major where B is column-major), its B is A, and C leaves transposed through the
// exchange buffer.
TEST(MatmulWgmmaTest, SwapAbIsForSmallRowMajorMWithNarrowTiles) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  auto swap = [](int block_m, int block_n, int split_k = 1, int split_cluster = 0) {
    return testing::wgmma_config(block_m, block_n, 6, 1, 1, 1, 1, split_k, split_cluster, 1);
  };
  const Problem decode{"matmul", DType::bf16, DType::bf16, {16, 4096, 4096}, {{"b", "col"}}};
  EXPECT_EQ(matmul().reject(swap(64, 16, 2), decode, hopper), std::nullopt);
  EXPECT_EQ(matmul().reject(swap(64, 16), decode, hopper), std::nullopt);
  EXPECT_TRUE(matmul().reject(swap(64, 32), decode, hopper));  // 16 rows of A in 32 columns
  EXPECT_EQ(matmul().reject(swap(64, 32), matmul_problem(17, 4096, 4096), hopper), std::nullopt);
  EXPECT_TRUE(matmul().reject(swap(64, 64), matmul_problem(65, 4096, 4096), hopper));  // M > 64
  // Up to the power of two at or above M: 33-48 rows in one 64-column tile (the default's).
  EXPECT_TRUE(matmul().reject(swap(64, 64), matmul_problem(32, 4096, 4096), hopper));
  EXPECT_EQ(matmul().reject(swap(64, 64), matmul_problem(38, 4096, 4096), hopper), std::nullopt);
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({38, 8600, 856}), hopper).at("block_n"), 64);
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({32, 8600, 856}), hopper).at("block_n"), 32);
  // A column-major A of up to 64 rows is transposed into the workspace first (read row-major)
  // where B has 4M elements or more; against a smaller B, or from 65 rows on, it is read as it
  // lies, which swap_ab cannot.
  const Problem a_columns{"matmul", DType::bf16, DType::bf16, {16, 4096, 4096}, {{"a", "col"}}};
  EXPECT_EQ(matmul().reject(swap(64, 16), a_columns, hopper), std::nullopt);
  const Problem a_columns_64{"matmul", DType::bf16, DType::bf16, {64, 4096, 1024}, {{"a", "col"}}};
  EXPECT_EQ(matmul().reject(swap(64, 64), a_columns_64, hopper), std::nullopt);
  EXPECT_EQ(matmul().default_config(a_columns_64, hopper).at("swap_ab"), 1);
  const Problem a_columns_small_b{
      "matmul", DType::bf16, DType::bf16, {17, 1024, 2048}, {{"a", "col"}}};
  EXPECT_TRUE(matmul().reject(swap(64, 32), a_columns_small_b, hopper));
  EXPECT_EQ(matmul().default_config(a_columns_small_b, hopper).at("swap_ab"), 0);
  // ... or where the swapped tile reads a weight off 16 bytes in row phases, which gathers A
  // K-major anyway, whatever the size of B.
  const Problem a_columns_phased{
      "matmul", DType::bf16, DType::bf16, {40, 1001, 2000}, {{"a", "col"}}};
  EXPECT_EQ(matmul().reject(swap(64, 64), a_columns_phased, hopper), std::nullopt);
  EXPECT_EQ(matmul().default_config(a_columns_phased, hopper).at("swap_ab"), 1);
  // 65-128 rows swap against a weight read in phases (up to two 64-column tiles of M, 128-row
  // tiles of the weight on two consumers), where unswapped tiles would pad it; an aligned
  // weight under a K of 4096, or 129 rows, keeps unswapped tiles (from 4096 the aligned weight
  // takes v56's swapped 64-row tiles).
  const Config rows_100 = matmul().default_config(matmul_problem(100, 7532, 4344), hopper);
  EXPECT_EQ(rows_100.at("swap_ab"), 1);
  EXPECT_EQ(rows_100.at("block_m"), 128);
  EXPECT_EQ(rows_100.at("block_n"), 64);
  EXPECT_EQ(rows_100.at("consumers"), 2);
  EXPECT_EQ(rows_100.at("l2_promotion"), 0);
  EXPECT_EQ(matmul().reject(rows_100, matmul_problem(100, 7532, 4344), hopper), std::nullopt);
  EXPECT_TRUE(matmul().reject(rows_100, matmul_problem(100, 7536, 4344), hopper));
  EXPECT_TRUE(matmul().reject(rows_100, matmul_problem(129, 7532, 4344), hopper));
  EXPECT_EQ(matmul().default_config(matmul_problem(100, 7536, 4000), hopper).at("swap_ab"), 0);
  EXPECT_EQ(matmul().default_config(matmul_problem(100, 7536, 4344), hopper).at("block_m"), 64);
  EXPECT_EQ(matmul().default_config(matmul_problem(129, 7532, 4344), hopper).at("swap_ab"), 0);
  // Its K split counts the phased tiles, 8 columns of the weight fewer each: 64x1001x4000 in
  // 18 tiles of 56, so 4 slices (8 would be 144 units for 132 SMs).
  const Config few_phased_tiles =
      matmul().default_config(Problem{"matmul", DType::bf16, DType::bf16, {64, 1001, 4000}, {{"a", "col"}}}, hopper);
  EXPECT_EQ(few_phased_tiles.at("swap_ab"), 1);
  EXPECT_EQ(few_phased_tiles.at("block_m"), 64);
  EXPECT_EQ(few_phased_tiles.at("split_k"), 4);
  // Past a wave of 56-column tiles, 128-row ones on two consumers; clusters of 4 where they fit
  // a wave (27x8818x4328: 74 tiles, 19 clusters), none where they take one more (36x14783x5288:
  // 124 tiles, 31 clusters for 30). Two K slices stay two slices, not a pair: a pair would read
  // the weight padded (45x3001x7000: 54 tiles).
  // (Row-major weights, N off 8 elements: read in phases.)
  const auto phased_default = [&](long long m, long long n, long long k) {
    const Config config = matmul().default_config(matmul_problem(m, n, k), hopper);
    EXPECT_EQ(config.at("swap_ab"), 1) << n;
    return config;
  };
  const Config many_phased_tiles = phased_default(27, 8818, 4328);
  EXPECT_EQ(many_phased_tiles.at("block_m"), 128);
  EXPECT_EQ(many_phased_tiles.at("consumers"), 2);
  EXPECT_EQ(many_phased_tiles.at("cluster_m"), 4);
  const Config clusters_past_a_wave = phased_default(36, 14783, 5288);
  EXPECT_EQ(clusters_past_a_wave.at("block_m"), 128);
  EXPECT_EQ(clusters_past_a_wave.at("cluster_m"), 1);
  EXPECT_EQ(clusters_past_a_wave.at("split_k"), 1);
  const Config two_slices = phased_default(45, 3001, 7000);
  EXPECT_EQ(two_slices.at("block_m"), 64);
  EXPECT_EQ(two_slices.at("split_k"), 2);
  EXPECT_EQ(two_slices.at("cluster_n"), 1);
  // A wave of 56-column tiles or less, more than half: 64-row tiles in clusters of 4.
  const Config one_wave = phased_default(40, 4906, 9568);
  EXPECT_EQ(one_wave.at("block_m"), 64);
  EXPECT_EQ(one_wave.at("cluster_m"), 4);
  // Aligned weights the same: 128-row tiles past a wave of 64-row ones (x @ W^T at 40x9216x4096:
  // 144 tiles of 64, 72 of 128 in 18 clusters; a row-major weight read in place, 32x11008x4096,
  // without the clusters, as before), not up to it (59x7536x4344: 118 tiles of 64).
  const Config aligned_past_a_wave = matmul().default_config(testing::x_times_w_t({40, 9216, 4096}), hopper);
  EXPECT_EQ(aligned_past_a_wave.at("block_m"), 128);
  EXPECT_EQ(aligned_past_a_wave.at("consumers"), 2);
  EXPECT_EQ(aligned_past_a_wave.at("cluster_m"), 4);
  const Config aligned_rows = matmul().default_config(matmul_problem(32, 11008, 4096), hopper);
  EXPECT_EQ(aligned_rows.at("block_m"), 128);
  EXPECT_EQ(aligned_rows.at("cluster_m"), 1);
  // Where the 128-row tiles overflow a wave too and 192-row ones fit it: 192 rows on three
  // consumers (72x8818x4328: 96 phased tiles of 184 columns, against 148 of 120; x @ W^T at
  // 40x20480x4096: 107 against 160), not where 128-row ones fit (36x14783x5288 above). The
  // phased weight in clusters of 4 along it (24 clusters, 30 a wave), x @ W^T's not.
  const std::pair<Problem, int> past_a_wave_of_128_rows[] = {
      {matmul_problem(72, 8818, 4328), 4}, {testing::x_times_w_t({40, 20480, 4096}), 1}};
  for (const auto& [problem, cluster_m] : past_a_wave_of_128_rows) {
    const Config wider = matmul().default_config(problem, hopper);
    EXPECT_EQ(wider.at("swap_ab"), 1);
    EXPECT_EQ(wider.at("block_m"), 192);
    EXPECT_EQ(wider.at("consumers"), 3);
    EXPECT_EQ(wider.at("stages"), 5);
    EXPECT_EQ(wider.at("cluster_m"), cluster_m);
  }
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({59, 7536, 4344}), hopper).at("block_m"), 64);
  // Below 17 rows too (x @ W^T past the decode template's 64 MB of weight); batches as before
  // (measured with one batch).
  EXPECT_EQ(
      matmul().default_config(testing::x_times_w_t({16, 16384, 4096}), hopper).at("block_m"),
      128);
  EXPECT_EQ(matmul().default_config(matmul_problem(9, 11000, 4096), hopper).at("block_m"), 128);
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({2, 40, 9216, 4096}), hopper).at("block_m"), 64);
  // Unswapped narrow tiles only hold a narrow N whole, read K-major; no multicast when swapped.
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(64, 16, 6, 1, 1, 1, 1), decode, hopper));
  const Problem router = testing::x_times_w_t({1024, 16, 4096});
  EXPECT_EQ(matmul().reject(testing::wgmma_config(64, 16, 6, 1, 1, 1, 1), router, hopper), std::nullopt);
  EXPECT_EQ(matmul().reject(testing::wgmma_config(64, 32, 6, 1, 1, 1, 1), testing::x_times_w_t({1024, 17, 4096}), hopper),
            std::nullopt);
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(64, 32, 6, 1, 1, 1, 1), router, hopper));
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(64, 16, 6, 1, 1, 1, 1), testing::x_times_w_t({1024, 17, 4096}), hopper));
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(64, 16, 6, 1, 1, 1, 1), matmul_problem(64, 16, 4096), hopper));
  EXPECT_EQ(matmul().reject(testing::wgmma_config(64, 16, 6, 1, 1, 1, 1), matmul_problem(2048, 16, 4096), hopper),
            std::nullopt);  // B transposed first
  // Swapped, CTAs along the weight (the kernel's M) may share the activations: in pairs, in
  // clusters of 4, or 2 x 2 with a pair along M; no more than 4, and 4 along M only swapped.
  EXPECT_EQ(matmul().reject(testing::wgmma_config(64, 16, 6, 1, 2, 1, 1, 1, 0, 1), decode, hopper), std::nullopt);
  EXPECT_EQ(matmul().reject(testing::wgmma_config(64, 16, 6, 1, 2, 2, 1, 1, 0, 1), decode, hopper), std::nullopt);
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(64, 16, 6, 1, 4, 2, 1, 1, 0, 1), decode, hopper));
  // A quarter of a 16-column tile is 4 rows of A: no whole 8-row box to multicast.
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(64, 16, 6, 1, 4, 1, 1, 1, 0, 1), decode, hopper));
  EXPECT_EQ(matmul().reject(testing::wgmma_config(64, 32, 6, 1, 4, 1, 1, 1, 0, 1), matmul_problem(17, 4096, 4096), hopper),
            std::nullopt);
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(64, 64, 6, 1, 4, 1, 1), matmul_problem(4096, 4096, 4096), hopper));
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(128, 128, 4, 2, 2, 2, 1), matmul_problem(4096, 4096, 4096), hopper));
  // Swapped, a pair along M shares the weight (the kernel's A): 32 rows of A in two 16-column
  // tiles. The default takes it instead of two K slices, with the deepest ring that fits,
  // where the operands' rows lie off L2's lines (K 4000, 7000); on them, the two slices (v65).
  const Problem batch_32 = testing::x_times_w_t({32, 4096, 4096});
  EXPECT_EQ(matmul().reject(testing::wgmma_config(64, 16, 16, 1, 1, 2, 8, 1, 0, 1), batch_32, hopper),
            std::nullopt);
  const Config sliced_32 = matmul().default_config(batch_32, hopper);
  EXPECT_EQ(sliced_32.at("block_n"), 32);
  EXPECT_EQ(sliced_32.at("cluster_n"), 1);
  EXPECT_EQ(sliced_32.at("split_k"), 2);
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({32, 4096, 4000}), hopper).text(),
            testing::wgmma_config(64, 16, 16, 1, 1, 2, 8, 1, 0, 1).text());
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({61, 3900, 4000}), hopper).text(),
            testing::wgmma_config(64, 32, 16, 1, 1, 2, 8, 1, 0, 1).text());
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({57, 4000, 7000}), hopper).at("cluster_n"), 2);
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({64, 4096, 14336}), hopper).at("split_k"), 2);
  // fp32 inputs (tf32) keep the two slices.
  const Config tf32_split = matmul().default_config(
      Problem{"matmul", DType::f32, DType::f32, {32, 4096, 4096}, {{"b", "col"}}}, hopper);
  EXPECT_EQ(tf32_split.at("cluster_n"), 1);
  EXPECT_EQ(tf32_split.at("split_k"), 2);
  // Four K slices or more stay: 16 tiles of 64x1024x4096 in 8.
  const Config sliced = matmul().default_config(testing::x_times_w_t({64, 1024, 4096}), hopper);
  EXPECT_EQ(sliced.at("block_n"), 64);
  EXPECT_EQ(sliced.at("cluster_n"), 1);
  EXPECT_EQ(sliced.at("split_k"), 8);
  // More weight tiles than half the SMs (no room for two K slices): clusters of 4 along the
  // weight sharing the activations, unless the clusters would take a wave more than the tiles
  // (64x8192x8192: 32 clusters where 30 fit; 128 tiles in one wave). x @ W^T only, fp32 too.
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({63, 4785, 9256}), hopper).text(),
            testing::wgmma_config(64, 64, 13, 1, 4, 1, 8, 1, 0, 1).text());
  // (Past a wave of 64-row tiles, of 128-row ones on two consumers: 32x11008x4096.)
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({32, 11008, 4096}), hopper).text(),
            testing::wgmma_config(128, 32, 10, 2, 4, 1, 8, 1, 0, 1).text());
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({64, 8192, 8192}), hopper).at("cluster_m"), 1);
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({27, 15722, 2424}), hopper).at("cluster_m"), 1);
  EXPECT_EQ(matmul().default_config(matmul_problem(32, 6144, 4096), hopper).at("cluster_m"), 1);
  // A row-major weight read in place too where A's rows lie off L2's lines (K 5000: 10000
  // bytes), at the tile's own ring: 45x4800x5000 (75 tiles) in clusters of 4, 58x8000x7000
  // (125 tiles: 32 clusters of 4 where 30 fit) in pairs, 40x12000x5000 (94 tiles of 128 rows)
  // in clusters of 4; not on the lines (K 5056), nor where A is transposed into padded rows.
  EXPECT_EQ(matmul().default_config(matmul_problem(45, 4800, 5000), hopper).text(),
            testing::wgmma_config(64, 64, 8, 1, 4, 1, 8, 1, 0, 1).text());
  EXPECT_EQ(matmul().default_config(matmul_problem(58, 8000, 7000), hopper).text(),
            testing::wgmma_config(64, 64, 8, 1, 2, 1, 8, 1, 0, 1).text());
  EXPECT_EQ(matmul().default_config(matmul_problem(40, 12000, 5000), hopper).text(),
            testing::wgmma_config(128, 64, 6, 2, 4, 1, 8, 1, 0, 1).text());
  EXPECT_EQ(matmul().default_config(matmul_problem(45, 4800, 5056), hopper).at("cluster_m"), 1);
  const Problem transposed_a{"matmul", DType::bf16, DType::bf16, {45, 4800, 5000}, {{"a", "col"}}};
  EXPECT_EQ(matmul().default_config(transposed_a, hopper).at("cluster_m"), 1);
  // Tiles of 64 columns of such rows in pairs where four take a wave more: x @ W^T at
  // 55x8152x3384 (128 tiles, its deepest ring); not on the lines (40x7900x5056: 124 tiles),
  // nor in 32 columns (27x15722x2424 above: 123 tiles of 128 rows) or 16 (9x9128x3888).
  EXPECT_EQ(matmul().default_config(testing::x_times_w_t({55, 8152, 3384}), hopper).text(),
            testing::wgmma_config(64, 64, 13, 1, 2, 1, 8, 1, 0, 1).text());
  EXPECT_EQ(
      matmul().default_config(testing::x_times_w_t({40, 7900, 5056}), hopper).at("cluster_m"), 1);
  // (fp32 inputs, unmeasured in pairs, keep the tile alone.)
  const Problem tf32_off{"matmul", DType::f32, DType::f32, {40, 7900, 5000}, {{"b", "col"}}};
  EXPECT_EQ(matmul().default_config(tf32_off, hopper).at("cluster_m"), 1);
  EXPECT_EQ(matmul().default_config(matmul_problem(9, 9128, 3888), hopper).at("cluster_m"), 1);
  EXPECT_EQ(matmul().default_config(Problem{"matmul", DType::f32, DType::f32, {48, 11008, 4096}, {{"b", "col"}}},
                                    hopper).text(),
            testing::tf32_config(64, 64, 13, 1, 4, 1, 8, 1, 0, 1).text());
  // One 16-column tile (M <= 16) has no pair.
  const Config single = matmul().default_config(testing::x_times_w_t({16, 2048, 32768}), hopper);
  EXPECT_EQ(single.at("split_k"), 4);
  EXPECT_EQ(single.at("cluster_n"), 1);

  // 1x4096x4096 with B column-major (x @ W^T): the kernel's A is W (4096 rows of K), its B is x.
  const Problem gemv{"matmul", DType::bf16, DType::bf16, {1, 4096, 4096}, {{"b", "col"}}};
  const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
  const LaunchPlan plan = matmul().plan(swap(64, 16), gemv, hopper, addresses, 0, {});
  ASSERT_EQ(plan.step_count, 1);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], 64u);  // 4096 / 64 tiles of C^T
  const KernelArgs& args = plan.steps[0].args;
  ASSERT_EQ(args.tensor_map_count, 2);  // C goes out through the exchange buffer, not TMA
  EXPECT_EQ(args.tensor_maps[0].address, 0x20000u);  // W
  EXPECT_EQ(args.tensor_maps[0].dims[0], 4096u);
  EXPECT_EQ(args.tensor_maps[0].dims[1], 4096u);
  EXPECT_EQ(args.tensor_maps[0].box[1], 64u);  // block_m rows of W
  EXPECT_EQ(args.tensor_maps[1].address, 0x10000u);  // x: 1 row of K
  EXPECT_EQ(args.tensor_maps[1].dims[1], 1u);
  EXPECT_EQ(args.tensor_maps[1].box[1], 16u);  // block_n rows (TMA fills the rest with zeros)
  MatmulSm90Params params;
  std::memcpy(&params, args.bytes.data(), sizeof params);
  EXPECT_EQ(params.m, 4096);  // the kernel's M is N
  EXPECT_EQ(params.n, 1);
  EXPECT_EQ(params.ldc, 4096);
  EXPECT_EQ(params.c_store_tma, 0);
  // A ring and B ring, the exchange buffer over them (16 rows of C, 64 + 4 floats each: 64
  // tiles, each CTA one), barriers, slack.
  EXPECT_EQ(params.exchange_in_ring, 1);
  EXPECT_EQ(plan.steps[0].geometry.dynamic_smem_bytes, 6u * (64 + 16) * 128 + 16 * 6 + 16 + 1024);
  // Past a wave, each CTA takes several units: the buffer goes past the rings.
  const Problem long_weight{"matmul", DType::bf16, DType::bf16, {1, 16384, 4096}, {{"b", "col"}}};
  const LaunchPlan waves = matmul().plan(swap(64, 16), long_weight, hopper, addresses, 0, {});
  MatmulSm90Params wave_params;
  std::memcpy(&wave_params, waves.steps[0].args.bytes.data(), sizeof wave_params);
  EXPECT_EQ(wave_params.exchange_in_ring, 0);
  EXPECT_EQ(waves.steps[0].geometry.dynamic_smem_bytes,
            6u * (64 + 16) * 128 + 16 * (64 + 4) * 4 + 16 * 6 + 16 + 1024);
  const std::vector<std::string> kernels = matmul().kernel_expressions(swap(64, 16), gemv);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_NE(kernels[0].find(",2,0,1,1,0,0>"), std::string::npos) << kernels[0];  // b=col, swap, no cluster K

  // B row-major (k x n) becomes the kernel's column-major A.
  const Problem row_b = matmul_problem(16, 4096, 4096);
  const LaunchPlan row_plan = matmul().plan(swap(64, 16), row_b, hopper, addresses, 0, {});
  EXPECT_EQ(row_plan.steps[0].args.tensor_maps[0].dims[0], 4096u);  // N innermost
  EXPECT_EQ(row_plan.steps[0].args.tensor_maps[0].box[1], 64u);      // block_k rows of k
  EXPECT_NE(matmul().kernel_expressions(swap(64, 16), row_b)[0].find(",3,0,1,1,0,0>"),
            std::string::npos);  // kernel A column-major, kernel B column-major
}

// split_cluster: the K slices of a tile are the CTAs of one cluster, summed through
// distributed shared memory: one launch, no workspace, a cluster of split_k CTAs.
TEST(MatmulWgmmaTest, SplitClusterSumsTheSlicesInOneLaunch) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config config = testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 8, /*split_cluster=*/1);
  const Problem problem = matmul_problem(512, 512, 16384);
  ASSERT_EQ(matmul().reject(config, problem, hopper), std::nullopt);
  EXPECT_EQ(matmul().workspace_bytes(config, problem, hopper), 0u);
  const std::vector<std::string> kernels = matmul().kernel_expressions(config, problem);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_NE(kernels[0].find(",0,8,0,0>"), std::string::npos) << kernels[0];
  const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
  const LaunchPlan plan = matmul().plan(config, problem, hopper, addresses, 0, {});
  ASSERT_EQ(plan.step_count, 1);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], 16u * 8);  // 16 tiles, a cluster of 8 CTAs each
  EXPECT_EQ(plan.steps[0].geometry.dynamic_smem_bytes,
            4u * (128 + 128) * 128 + 128 * (128 + 8) * 4 + 16 * 4 + 16 + 1024);
  MatmulSm90Params params;
  std::memcpy(&params, plan.steps[0].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.k_splits, 1);  // no workspace slices
  EXPECT_EQ(params.c_store_tma, 0);
  // Needs a split, shares no operand tile, and obeys the same pruning as split-K.
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 1, 1), problem, hopper));
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(128, 128, 4, 2, 2, 1, 8, 4, 1), problem, hopper));
  EXPECT_TRUE(matmul().reject(config, matmul_problem(4096, 4096, 4096), hopper));
}

// Ping-pong: the two consumer warpgroups take whole tiles in turn, so each holds a whole tile's
// accumulators (up to 128x192) and sends C out through its own staging slots.
TEST(MatmulWgmmaTest, PingPongGivesEachOfTwoConsumersWholeTiles) {
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Problem problem = matmul_problem(4096, 4096, 4096);
  const Problem x_w_t = testing::x_times_w_t({4096, 4096, 4096});
  auto pingpong = [](int block_m, int block_n, int consumers) {
    return testing::wgmma_config(block_m, block_n, 4, consumers, 2, 1, 8, 1, 0, 0, 0, 256, 1);
  };
  for (const Config& config : {pingpong(128, 128, 2), pingpong(64, 256, 2), pingpong(128, 192, 2)}) {
    ASSERT_EQ(matmul().reject(config, problem, hopper), std::nullopt) << config.text();
    const std::vector<std::string> kernels = matmul().kernel_expressions(config, problem);
    ASSERT_EQ(kernels.size(), 1u);
    EXPECT_NE(kernels[0].find(",0,1,1,0>"), std::string::npos) << kernels[0];  // swap, cluster_k, pingpong, grid sum
    const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
    const LaunchPlan plan = matmul().plan(config, problem, hopper, addresses, 0, {});
    ASSERT_EQ(plan.step_count, 1);
    EXPECT_EQ(plan.steps[0].geometry.block[0], 384u);
    MatmulSm90Params params;
    std::memcpy(&params, plan.steps[0].args.bytes.data(), sizeof params);
    EXPECT_EQ(params.c_store_tma, 1);
  }
  EXPECT_EQ(matmul().reject(pingpong(128, 176, 2), x_w_t, hopper), std::nullopt);
  // 128x256 would be 256 accumulators a thread; one or three consumers do not take turns; 192
  // rows split by three consumers are not a ping-pong tile either.
  EXPECT_TRUE(matmul().reject(pingpong(128, 256, 2), problem, hopper));
  EXPECT_TRUE(matmul().reject(pingpong(128, 128, 1), problem, hopper));
  EXPECT_TRUE(matmul().reject(pingpong(192, 128, 3), problem, hopper));
  // C^T through the exchange buffer (swap_ab) or K slices summed in a cluster: no staging slots.
  const Problem skinny = matmul_problem(16, 4096, 4096);
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(64, 16, 8, 2, 1, 1, 1, 1, 0, 1, 0, 256, 1), skinny, hopper));
  EXPECT_TRUE(matmul().reject(testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 8, 1, 0, 0, 256, 1),
                              matmul_problem(512, 512, 16384), hopper));
  // The same tile without ping-pong is another kernel.
  EXPECT_NE(matmul().kernel_expressions(pingpong(128, 128, 2), problem)[0],
            matmul().kernel_expressions(testing::wgmma_config(128, 128, 4, 2, 2, 1), problem)[0]);
}

}  // namespace
}  // namespace tilesmith

namespace tilesmith {
namespace {

// The decode template (variant 2): x @ W^T for M <= 32 on any sm_80+ GPU, W streamed into
// mma.sync fragments; K split among a CTA's warps, and over CTAs (a second launch sums the
// slices) only where the column blocks leave SMs idle.
TEST(MatmulDecodeTest, IsForFewRowsTimesAColumnMajorWeight) {
  const DeviceTarget ampere = DeviceTarget::assumed_for_arch("sm_80");
  const Config config = testing::decode_config(32, 8, 2);
  using testing::x_times_w_t;
  EXPECT_EQ(matmul().reject(config, x_times_w_t({16, 4096, 4096}), ampere), std::nullopt);
  EXPECT_EQ(matmul().reject(config, x_times_w_t({3, 32, 4096, 4096}, DType::f16), ampere), std::nullopt);
  EXPECT_EQ(matmul().reject(testing::decode_config(8, 4, 1), x_times_w_t({1, 1, 8}), ampere), std::nullopt);
  // Row-major B, column-major A, more than 32 rows and fp32 (tf32) are the others'.
  EXPECT_TRUE(matmul().reject(config, matmul_problem(16, 4096, 4096), ampere));
  EXPECT_TRUE(matmul().reject(config, x_times_w_t({16, 4096, 4096}, DType::bf16, DType::bf16, {{"a", "col"}}), ampere));
  EXPECT_TRUE(matmul().reject(config, x_times_w_t({33, 4096, 4096}), ampere));
  EXPECT_TRUE(matmul().reject(config, x_times_w_t({16, 4096, 4096}, DType::f32), ampere));
  // Rows off 16 bytes are read in place, a lane's 16 bytes in loads as wide as K allows.
  EXPECT_EQ(matmul().reject(config, x_times_w_t({16, 4096, 4100}), ampere), std::nullopt);
  EXPECT_EQ(matmul().reject(config, x_times_w_t({16, 4096, 4096}, DType::bf16, DType::bf16, {{"aligned", "0"}}), ampere),
            std::nullopt);
  EXPECT_EQ(matmul().kernel_expressions(config, x_times_w_t({16, 4096, 4100}))[0],
            "tilesmith::matmul_decode<16,32,8,2,4,1,1,0,64>");
  EXPECT_EQ(matmul().kernel_expressions(config, x_times_w_t({5, 4096, 4095}))[0],
            "tilesmith::matmul_decode<8,32,8,2,1,1,1,0,64>");
  // Column blocks wider than twice N, buffers past the register file, split K where the
  // blocks fill the SMs or the slices' warps would find no chunk.
  EXPECT_TRUE(matmul().reject(testing::decode_config(64, 4, 1), x_times_w_t({16, 32, 4096}), ampere));
  EXPECT_TRUE(matmul().reject(testing::decode_config(64, 16, 4), x_times_w_t({16, 4096, 4096}), ampere));
  EXPECT_TRUE(matmul().reject(testing::decode_config(16, 8, 2, 2), x_times_w_t({16, 14336, 4096}), ampere));
  EXPECT_EQ(matmul().reject(testing::decode_config(64, 8, 1, 2), x_times_w_t({16, 4096, 4096}), ampere),
            std::nullopt);  // 64 blocks
  EXPECT_TRUE(matmul().reject(testing::decode_config(64, 8, 1, 8), x_times_w_t({16, 4096, 1024}), ampere));

  const Problem problem = x_times_w_t({2, 5, 1000, 1032}, DType::f16, DType::bf16, {{"act", "gelu"}, {"bias", "1"}});
  const std::vector<std::string> kernels = matmul().kernel_expressions(config, problem);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0], "tilesmith::matmul_decode<8,32,8,2,8,0,1,6,64>");  // 5 rows in 8; gelu + bias
  EXPECT_EQ(matmul().kernel_file(config), "matmul/matmul_decode.cuh");
  EXPECT_EQ(matmul().workspace_bytes(config, problem, ampere), 0u);
  const std::uint64_t addresses[4] = {0x10000, 0x20000, 0x30000, 0x40000};
  const LaunchPlan plan = matmul().plan(config, problem, ampere, addresses, 0, {});
  ASSERT_EQ(plan.step_count, 1);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], 32u);  // ceil(1000 / 32) column blocks
  EXPECT_EQ(plan.steps[0].geometry.grid[1], 1u);
  EXPECT_EQ(plan.steps[0].geometry.grid[2], 2u);   // batches
  EXPECT_EQ(plan.steps[0].geometry.block[0], 256u);
  EXPECT_EQ(plan.steps[0].geometry.dynamic_smem_bytes, 8u * 1 * 4 * 32 * 16);  // warps x tiles
  MatmulDecodeParams params;
  std::memcpy(&params, plan.steps[0].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.k_splits, 1);
  EXPECT_EQ(params.product.m, 5);
  EXPECT_EQ(params.product.ldb, 1032);  // W's rows hold K
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.product.b), 0x20000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.product.epilogue.bias), 0x30000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.product.c), 0x40000u);

  // The default: decode shapes on every GPU, but on Hopper only up to 64 MB of weights (past
  // them swap_ab's TMA ring streams faster) and 16 rows; K split where the columns are few.
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  EXPECT_EQ(matmul().default_config(x_times_w_t({16, 4096, 4096}), hopper).at("variant"), 2);
  EXPECT_EQ(matmul().default_config(x_times_w_t({3, 14336, 4096}), hopper).at("variant"), 1);
  EXPECT_EQ(matmul().default_config(x_times_w_t({32, 4096, 4096}), hopper).at("variant"), 1);
  EXPECT_EQ(matmul().default_config(x_times_w_t({32, 14336, 4096}), ampere).at("variant"), 2);
  EXPECT_EQ(matmul().default_config(x_times_w_t({16, 4096, 4096}), ampere).at("split_k"), 1);  // 256 blocks
  const Config narrow = matmul().default_config(x_times_w_t({3, 512, 4096}), ampere);
  EXPECT_EQ(narrow.at("variant"), 2);
  EXPECT_EQ(narrow.at("split_k"), 4);  // 32 column blocks x 4 slices: at most 2 CTAs an SM of 108
  // Slices of under 512 of K cost their second launch more than they save.
  EXPECT_EQ(matmul().default_config(x_times_w_t({16, 1752, 704}), hopper).at("split_k"), 1);
  EXPECT_EQ(matmul().default_config(x_times_w_t({11, 227, 7448}), hopper).at("split_k"), 8);
  EXPECT_EQ(matmul().default_config(matmul_problem(16, 4096, 4096), ampere).at("variant"), 0);
  // On Hopper also rows off 16 bytes, read in place, whatever the weight's size, past the
  // gathering tiles' short K (at or under 512: the mma.sync template gathers them).
  EXPECT_EQ(matmul().default_config(x_times_w_t({16, 14336, 4100}), hopper).at("variant"), 2);
  EXPECT_EQ(matmul().default_config(x_times_w_t({5, 8192, 4095}), hopper).at("variant"), 2);
  EXPECT_EQ(matmul().default_config(x_times_w_t({16, 8192, 4094}), hopper).at("variant"), 2);
  // An odd K: realigned pieces, one chunk a group (two CTAs an SM in the registers).
  const Config odd_k = matmul().default_config(x_times_w_t({9, 1458, 6433}), hopper);
  EXPECT_EQ(odd_k.at("variant"), 2);
  EXPECT_EQ(odd_k.at("unroll"), 1);
  EXPECT_EQ(matmul().kernel_expressions(odd_k, x_times_w_t({9, 1458, 6433}))[0],
            "tilesmith::matmul_decode<16,16,8,1,1,1,1,0,64>");
  EXPECT_EQ(matmul().default_config(x_times_w_t({16, 8192, 4094}), hopper).at("unroll"), 2);
  // 17-32 rows in place: 8-warp CTAs over a weight of up to 2 MB, 4-warp ones past it (three
  // an SM), K split to fill them.
  EXPECT_EQ(matmul().default_config(x_times_w_t({25, 808, 1089}), hopper).at("variant"), 2);
  EXPECT_EQ(matmul().default_config(x_times_w_t({24, 1024, 1020}), hopper).at("warps"), 8);
  EXPECT_EQ(matmul().default_config(x_times_w_t({24, 1024, 1028}), hopper).at("warps"), 4);
  const Config wide = matmul().default_config(x_times_w_t({31, 2512, 13492}), hopper);
  EXPECT_EQ(wide.text(), "block_n=16,row_bytes=64,split_k=2,unroll=2,variant=2,warps=4");
  EXPECT_EQ(matmul().default_config(x_times_w_t({33, 808, 1089}), hopper).at("variant"), 1);
  EXPECT_EQ(matmul().default_config(x_times_w_t({16, 11516, 156}), hopper).at("variant"), 0);
  EXPECT_EQ(matmul().default_config(x_times_w_t({16, 4096, 4100}), ampere).at("variant"), 0);
  // Rows on 16 bytes are read in whole 128-byte lines, one span a group, where two CTAs an SM
  // (its registers) take no more waves than three (64-byte pieces, up to 8 rows of A); rows
  // off 16 bytes never. From 9 rows, past two CTAs an SM, the CTAs take 4 warps.
  const Config lines = matmul().default_config(x_times_w_t({16, 4096, 4096}), hopper);
  EXPECT_EQ(lines.at("row_bytes"), 128);  // 256 CTAs: one wave either way
  EXPECT_EQ(lines.at("unroll"), 1);
  EXPECT_EQ(lines.at("warps"), 8);
  EXPECT_EQ(matmul().default_config(x_times_w_t({6, 7232, 2536}), hopper).at("row_bytes"), 128);  // 2 and 2
  const Config pieces = matmul().default_config(x_times_w_t({8, 5604, 4464}), hopper);
  EXPECT_EQ(pieces.at("row_bytes"), 64);  // 351 CTAs: two waves against one
  EXPECT_EQ(pieces.at("unroll"), 2);
  EXPECT_EQ(pieces.at("warps"), 8);
  // Four such CTAs an SM in whole lines; five in 64-byte pieces where five take one wave and
  // four do not; past that whole lines again.
  for (const std::int64_t m : {9, 14, 16}) {
    for (const std::int64_t n : {5604, 8192, 9001, 10680, 16384}) {  // 351-1024 CTAs
      const Config four_warps = matmul().default_config(x_times_w_t({m, n, 2000}), hopper);
      const bool five_an_sm = n == 9001;  // 563 CTAs: one wave at five an SM, two at four
      EXPECT_EQ(four_warps.at("row_bytes"), five_an_sm ? 64 : 128) << m << "x" << n;
      EXPECT_EQ(four_warps.at("unroll"), five_an_sm ? 2 : 1) << m << "x" << n;
      EXPECT_EQ(four_warps.at("warps"), 4) << m << "x" << n;
    }
  }
  EXPECT_EQ(matmul().default_config(x_times_w_t({11, 227, 7448}), hopper).at("row_bytes"), 128);  // split 8
  EXPECT_EQ(matmul().default_config(x_times_w_t({16, 8192, 4094}), hopper).at("row_bytes"), 64);

  // K over 4 CTAs: their fp32 partials in the workspace, summed by splitk_reduce.
  const Config split = testing::decode_config(32, 4, 2, 4);
  ASSERT_EQ(matmul().reject(split, problem, ampere), std::nullopt);
  EXPECT_EQ(matmul().workspace_bytes(split, problem, ampere), 4u * 2 * 5 * 1000 * 4);
  const std::vector<std::string> split_kernels = matmul().kernel_expressions(split, problem);
  ASSERT_EQ(split_kernels.size(), 2u);
  EXPECT_EQ(split_kernels[1], "tilesmith::splitk_reduce<1,6>");
  const LaunchPlan split_plan = matmul().plan(split, problem, ampere, addresses, 0x100000, {});
  ASSERT_EQ(split_plan.step_count, 2);
  EXPECT_EQ(split_plan.steps[0].geometry.grid[1], 4u);
  std::memcpy(&params, split_plan.steps[0].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.k_splits, 4);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.partials), 0x100000u);
  SplitKReduceParams reduce;
  std::memcpy(&reduce, split_plan.steps[1].args.bytes.data(), sizeof reduce);
  EXPECT_EQ(split_plan.steps[1].kernel, 1);
  EXPECT_EQ(reduce.splits, 4);
  EXPECT_EQ(reduce.batch, 2);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(reduce.c), 0x40000u);
}

// The gemv template (variant 3): x @ W^T for M <= 4 on any sm_80+ GPU, each CTA reducing
// block_n whole weight rows along K; one launch, no workspace. Past four rows of A, N <= 4 on
// C^T = B^T A^T (A's rows the weight); one column-major row of A (or B's one column) read as a
// strided vector.
TEST(MatmulGemvTest, IsForAFewRowsTimesAColumnMajorWeight) {
  const DeviceTarget ampere = DeviceTarget::assumed_for_arch("sm_80");
  const Config config = testing::gemv_config(2, 8, 2);
  using testing::x_times_w_t;
  EXPECT_EQ(matmul().reject(config, x_times_w_t({1, 4096, 4096}), ampere), std::nullopt);
  EXPECT_EQ(matmul().reject(config, x_times_w_t({3, 4, 1000, 4096}, DType::f16), ampere), std::nullopt);
  EXPECT_EQ(matmul().reject(testing::gemv_config(1, 2, 1), x_times_w_t({1, 1, 8}), ampere), std::nullopt);
  // fp32 too, multiplied in fp32 (not tf32).
  EXPECT_EQ(matmul().reject(config, x_times_w_t({2, 4096, 4096}, DType::f32), ampere),
            std::nullopt);
  // Row-major B, column-major A of more than one row, more than 4 rows and columns are the
  // others'.
  EXPECT_TRUE(matmul().reject(config, matmul_problem(1, 4096, 4096), ampere));
  EXPECT_TRUE(matmul().reject(config, x_times_w_t({2, 4096, 4096}, DType::bf16, DType::bf16, {{"a", "col"}}), ampere));
  EXPECT_TRUE(matmul().reject(config, x_times_w_t({5, 4096, 4096}), ampere));
  EXPECT_TRUE(matmul().reject(config, x_times_w_t({5, 4096, 4096}, DType::f32), ampere));
  EXPECT_EQ(matmul().reject(config, x_times_w_t({1, 4096, 4096}, DType::bf16, DType::bf16, {{"a", "col"}}), ampere),
            std::nullopt);
  // Past four rows: C^T = B^T A^T, A row-major, N <= 4 columns of x @ W^T or one of a row-major
  // B.
  EXPECT_EQ(matmul().reject(config, x_times_w_t({4096, 4, 4096}), ampere), std::nullopt);
  EXPECT_EQ(matmul().reject(config, matmul_problem(4096, 1, 4096), ampere), std::nullopt);
  EXPECT_TRUE(matmul().reject(config, matmul_problem(4096, 2, 4096), ampere));
  EXPECT_TRUE(matmul().reject(config, x_times_w_t({4096, 5, 4096}), ampere));
  EXPECT_TRUE(matmul().reject(config, x_times_w_t({4096, 1, 4096}, DType::bf16, DType::bf16, {{"a", "col"}}), ampere));
  // Rows off 16 bytes are read in place, in loads as wide as K allows: 8, 4 or 2 bytes, or
  // (K odd) one element; 16 bytes only where a call's strides must be on them too.
  auto loads = [&](const Problem& problem) {
    return matmul().kernel_expressions(testing::gemv_config(2, 8, 2), problem).at(0);
  };
  EXPECT_EQ(matmul().reject(testing::gemv_config(2, 8, 2), x_times_w_t({1, 4096, 4100}), ampere), std::nullopt);
  EXPECT_EQ(matmul().reject(testing::gemv_config(2, 8, 2), x_times_w_t({1, 4096, 4095}), ampere), std::nullopt);
  EXPECT_EQ(loads(x_times_w_t({1, 4096, 4096})), "tilesmith::matmul_gemv<1,2,256,2,8,1,1,0,0,0>");
  EXPECT_EQ(loads(x_times_w_t({1, 4096, 4100})), "tilesmith::matmul_gemv<1,2,256,2,4,1,1,0,0,0>");
  EXPECT_EQ(loads(x_times_w_t({2, 4096, 4094})), "tilesmith::matmul_gemv<2,2,256,2,2,1,1,0,0,0>");
  EXPECT_EQ(loads(x_times_w_t({1, 4096, 4095})), "tilesmith::matmul_gemv<1,2,256,2,1,1,1,0,0,0>");
  EXPECT_EQ(loads(x_times_w_t({1, 4096, 4096}, DType::bf16, DType::bf16, {{"aligned", "0"}})),
            "tilesmith::matmul_gemv<1,2,256,2,4,1,1,0,0,0>");
  // fp32: 16 bytes are 4 elements, then 2 and 1.
  EXPECT_EQ(loads(x_times_w_t({1, 4096, 4096}, DType::f32, DType::f32)),
            "tilesmith::matmul_gemv<1,2,256,2,4,2,2,0,0,0>");
  EXPECT_EQ(loads(x_times_w_t({1, 4096, 4098}, DType::f32, DType::f32)),
            "tilesmith::matmul_gemv<1,2,256,2,2,2,2,0,0,0>");
  EXPECT_EQ(loads(x_times_w_t({2, 4096, 4095}, DType::f32, DType::bf16)),
            "tilesmith::matmul_gemv<2,2,256,2,1,2,1,0,0,0>");
  // C^T = B^T A^T (its rows N's, SWAP_AB); B's one row-major column a strided vector (A_COLUMNS).
  EXPECT_EQ(loads(x_times_w_t({4096, 3, 4096})), "tilesmith::matmul_gemv<4,2,256,2,8,1,1,0,1,0>");
  EXPECT_EQ(loads(matmul_problem(4174, 1, 694)), "tilesmith::matmul_gemv<1,2,256,2,2,1,1,1,1,0>");
  EXPECT_EQ(loads(x_times_w_t({1, 4096, 4096}, DType::bf16, DType::bf16, {{"a", "col"}})),
            "tilesmith::matmul_gemv<1,2,256,2,4,1,1,1,0,0>");
  // Rows past twice N, threads with no chunk of K, more batches than grid z holds.
  EXPECT_TRUE(matmul().reject(testing::gemv_config(2, 2, 1), x_times_w_t({1, 1, 4096}), ampere));
  EXPECT_TRUE(matmul().reject(testing::gemv_config(1, 8, 1), x_times_w_t({1, 4096, 1024}), ampere));
  EXPECT_EQ(matmul().reject(testing::gemv_config(1, 4, 1), x_times_w_t({1, 4096, 1024}), ampere),
            std::nullopt);  // 64 of 128 threads hold chunks
  EXPECT_TRUE(matmul().reject(config, x_times_w_t({70000, 1, 64, 4096}), ampere));

  const Problem problem = x_times_w_t({2, 3, 1000, 1032}, DType::f16, DType::bf16, {{"act", "gelu"}, {"bias", "1"}});
  const std::vector<std::string> kernels = matmul().kernel_expressions(config, problem);
  ASSERT_EQ(kernels.size(), 1u);
  EXPECT_EQ(kernels[0], "tilesmith::matmul_gemv<4,2,256,2,8,0,1,0,0,6>");  // 3 rows in 4; gelu + bias
  EXPECT_EQ(matmul().kernel_file(config), "matmul/matmul_gemv.cuh");
  EXPECT_EQ(matmul().workspace_bytes(config, problem, ampere), 0u);
  const std::uint64_t addresses[4] = {0x10000, 0x20000, 0x30000, 0x40000};
  const LaunchPlan plan = matmul().plan(config, problem, ampere, addresses, 0, {});
  ASSERT_EQ(plan.step_count, 1);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], 500u);  // 1000 rows of W, two a CTA
  EXPECT_EQ(plan.steps[0].geometry.grid[2], 2u);    // batches
  EXPECT_EQ(plan.steps[0].geometry.block[0], 256u);
  MatmulParams params;
  std::memcpy(&params, plan.steps[0].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.m, 3);
  EXPECT_EQ(params.ldb, 1032);  // W's rows hold K
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.b), 0x20000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.c), 0x40000u);
  // C^T = B^T A^T: B is the kernel's A (its one column's k ldb apart), A its weight (rows lda
  // apart), N its rows and M its columns; C keeps its own place and strides.
  const Problem vector_problem = matmul_problem(4174, 1, 694);
  const LaunchPlan transposed = matmul().plan(config, vector_problem, ampere, addresses, 0, {});
  ASSERT_EQ(transposed.step_count, 1);
  EXPECT_EQ(transposed.steps[0].geometry.grid[0], 2087u);  // 4174 rows of A, two a CTA
  std::memcpy(&params, transposed.steps[0].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.m, 1);
  EXPECT_EQ(params.n, 4174);
  EXPECT_EQ(params.lda, 1);
  EXPECT_EQ(params.ldb, 694);
  EXPECT_EQ(params.ldc, 1);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.a), 0x20000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.b), 0x10000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.c), 0x30000u);

  // The default for one or two rows, on every GPU and weight size, where the weight's rows
  // give two CTAs an SM: 16 warps for one row, 4 for two, fewer where K is short.
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const Config one = matmul().default_config(x_times_w_t({1, 14336, 4096}), hopper);
  EXPECT_EQ(one.text(), "block_n=2,unroll=1,variant=3,warps=16");
  EXPECT_EQ(matmul().default_config(x_times_w_t({2, 4096, 4096}), ampere).text(),
            "block_n=2,unroll=2,variant=3,warps=4");
  EXPECT_EQ(matmul().default_config(x_times_w_t({1, 4096, 1024}), hopper).at("warps"), 4);
  // Rows two warps cover in one 16-byte chunk a thread (K <= 512): 8 weight rows a CTA for one
  // row of A, 4 for two, while that leaves two CTAs an SM.
  EXPECT_EQ(matmul().default_config(x_times_w_t({1, 13146, 232}), hopper).text(),
            "block_n=8,unroll=1,variant=3,warps=2");
  EXPECT_EQ(matmul().default_config(x_times_w_t({2, 13146, 512}), ampere).text(),
            "block_n=4,unroll=1,variant=3,warps=2");
  EXPECT_EQ(matmul().default_config(x_times_w_t({1, 1500, 232}), hopper).text(),
            "block_n=4,unroll=1,variant=3,warps=2");  // 188 CTAs of 8 rows: too few
  EXPECT_EQ(matmul().default_config(x_times_w_t({2, 13146, 520}), hopper).at("block_n"), 2);
  // One row in loads of 8 bytes (or 4 and 2 under K 1024): four weight rows a CTA, on the
  // fewest warps that leave each thread 4 chunks or less.
  EXPECT_EQ(matmul().default_config(x_times_w_t({1, 8968, 6564}), hopper).text(),
            "block_n=4,unroll=1,variant=3,warps=16");
  EXPECT_EQ(matmul().default_config(x_times_w_t({1, 8192, 4094}), hopper).text(),
            "block_n=2,unroll=4,variant=3,warps=8");
  EXPECT_EQ(matmul().default_config(x_times_w_t({1, 8192, 1002}), hopper).text(),
            "block_n=4,unroll=1,variant=3,warps=4");
  EXPECT_EQ(matmul().default_config(x_times_w_t({1, 8192, 1096}, DType::bf16, DType::bf16, {{"a", "col"}}), hopper).text(),
            "block_n=4,unroll=1,variant=3,warps=4");
  EXPECT_EQ(matmul().default_config(x_times_w_t({2, 8192, 4094}), hopper).text(),
            "block_n=2,unroll=4,variant=3,warps=4");
  // Short rows off 16 bytes (K <= 512): the mma.sync template gathers them.
  EXPECT_EQ(matmul().default_config(x_times_w_t({2, 15256, 113}), hopper).at("variant"), 0);
  // Three or four rows too where the rows are off 16 bytes (the decode template's are on them).
  EXPECT_EQ(matmul().default_config(x_times_w_t({4, 8968, 6564}), hopper).text(),
            "block_n=2,unroll=1,variant=3,warps=4");
  EXPECT_EQ(matmul().default_config(x_times_w_t({3, 8192, 4095}), hopper).text(),
            "block_n=2,unroll=2,variant=3,warps=4");
  EXPECT_EQ(matmul().default_config(x_times_w_t({4, 4096, 4096}), hopper).at("variant"), 2);  // decode
  EXPECT_EQ(matmul().default_config(x_times_w_t({1, 64, 4096}), hopper).at("variant"), 2);  // 32 CTAs
  EXPECT_EQ(matmul().default_config(x_times_w_t({4, 4096, 4096}), hopper).at("variant"), 2);
  EXPECT_EQ(matmul().default_config(matmul_problem(1, 4096, 4096), hopper).at("variant"), 1);
  // A matrix times a few columns, on C^T = B^T A^T, as for as many rows; one element a load
  // past K 1024 keeps two rows. Too few rows of A for two CTAs an SM: the tiles.
  EXPECT_EQ(matmul().default_config(x_times_w_t({4096, 1, 4096}), hopper).text(),
            "block_n=2,unroll=1,variant=3,warps=16");
  EXPECT_EQ(matmul().default_config(x_times_w_t({4096, 2, 4096}), ampere).text(),
            "block_n=2,unroll=2,variant=3,warps=4");
  EXPECT_EQ(matmul().default_config(matmul_problem(4174, 1, 694), hopper).text(),
            "block_n=4,unroll=1,variant=3,warps=4");
  EXPECT_EQ(matmul().default_config(matmul_problem(1456, 1, 1935), hopper).text(),
            "block_n=2,unroll=4,variant=3,warps=8");
  // One column-major row of A (a vector) at any K.
  EXPECT_EQ(matmul().default_config(x_times_w_t({1, 8000, 512}, DType::bf16, DType::bf16, {{"a", "col"}}), hopper).text(),
            "block_n=4,unroll=1,variant=3,warps=2");
  // Under two CTAs an SM: gemv still, one weight row a CTA or two (v75; the tiles before).
  // (B's column as stored, rows of one element, is read in narrower chunks: two passes.)
  EXPECT_EQ(matmul().default_config(matmul_problem(400, 1, 4096), hopper).text(),
            "block_n=2,unroll=2,variant=3,warps=16");
  // fp32 (multiplied in fp32), 16-byte loads: four weight rows a CTA, one chunk; for one row the
  // fewest warps that take K in one pass (768, 1200 and 512 columns), else 8; 4 for two rows.
  // 8-byte and narrower loads as 16-bit's.
  const auto fp32_default = [&](std::vector<std::int64_t> shape, const ProblemOptions& options) {
    const Problem problem{"matmul", DType::f32, DType::f32, shape, options};
    return matmul().default_config(problem, hopper).text();
  };
  const ProblemOptions col_b = {{"b", "col"}};
  EXPECT_EQ(fp32_default({1, 50257, 768}, col_b), "block_n=4,unroll=1,variant=3,warps=8");
  EXPECT_EQ(fp32_default({1, 8000, 1200}, col_b), "block_n=4,unroll=1,variant=3,warps=16");
  EXPECT_EQ(fp32_default({1, 20000, 512}, col_b), "block_n=4,unroll=1,variant=3,warps=4");
  EXPECT_EQ(fp32_default({1, 7168, 2560}, col_b), "block_n=4,unroll=1,variant=3,warps=8");
  EXPECT_EQ(fp32_default({2, 4096, 11008}, col_b), "block_n=4,unroll=1,variant=3,warps=4");
  EXPECT_EQ(fp32_default({3000, 3, 5000}, col_b), "block_n=4,unroll=1,variant=3,warps=4");
  EXPECT_EQ(fp32_default({2, 1781, 9323}, col_b), "block_n=2,unroll=4,variant=3,warps=4");
  EXPECT_EQ(fp32_default({4096, 1, 4096}, {}), "block_n=4,unroll=1,variant=3,warps=16");
  // Three rows of an aligned weight: the tf32 tiles, as before.
  EXPECT_NE(fp32_default({3, 4000, 4000}, col_b).find("variant=1"), std::string::npos);
}

// The row-major-B gemv template (variant 4): up to 32 rows of A, either layout, times a B
// stored k x n, 16-bit or fp32 inputs; its loads as wide as N allows, 16 bytes at most; K split
// through the workspace, summed by splitk_reduce.
TEST(MatmulGemvKnTest, IsForAFewRowsTimesARowMajorB) {
  using testing::gemv_kn_config;
  const DeviceTarget ampere = DeviceTarget::assumed_for_arch("sm_80");
  const Config config = gemv_kn_config(2, 8, 8, 4);
  EXPECT_EQ(matmul().reject(config, matmul_problem(26, 1506, 11128), ampere), std::nullopt);
  EXPECT_TRUE(matmul().reject(config, testing::x_times_w_t({26, 1506, 11128}), ampere));  // B n x k
  EXPECT_TRUE(matmul().reject(config, matmul_problem(33, 1506, 11128), ampere));
  EXPECT_TRUE(matmul().reject(config, matmul_problem(26, 1507, 11128), ampere));  // N odd: no pairs
  EXPECT_EQ(matmul().reject(config, matmul_problem(26, 1506, 11128, DType::f32, DType::f32), ampere), std::nullopt);
  EXPECT_TRUE(matmul().reject(gemv_kn_config(8, 4, 8), matmul_problem(2, 8200, 4096, DType::f32, DType::f32), ampere));  // 32 bytes
  // fp32 with B's rows off 16 bytes: the default reads B in place here too, 8 bytes a load.
  const DeviceTarget h100 = DeviceTarget::assumed_for_arch("sm_90a");
  const Config fp32 = matmul().default_config(matmul_problem(7, 6682, 5263, DType::f32, DType::f32), h100);
  EXPECT_EQ(fp32.at("variant"), 4);
  EXPECT_EQ(fp32.at("vector"), 2);
  EXPECT_TRUE(matmul().reject(gemv_kn_config(4, 8, 8), matmul_problem(32, 4096, 4096), ampere));  // 128 sums
  EXPECT_TRUE(matmul().reject(gemv_kn_config(2, 8, 8, 64), matmul_problem(1, 4096, 4000), ampere));  // 63 rounds
  EXPECT_TRUE(matmul().reject(gemv_kn_config(8, 8, 8), matmul_problem(1, 100, 4096), ampere));  // 256 columns

  const Problem problem{"matmul", DType::f16, DType::bf16, {3, 26, 1506, 11128}, {{"a", "col"}, {"act", "relu"}}};
  const std::vector<std::string> kernels = matmul().kernel_expressions(config, problem);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0], "tilesmith::matmul_gemv_kn<32,2,8,8,0,1,1,0,1>");  // 26 rows in 32; A k x m; relu
  EXPECT_NE(kernels[1].find("splitk_reduce"), std::string::npos);
  EXPECT_EQ(matmul().kernel_file(config), "matmul/matmul_gemv_kn.cuh");
  EXPECT_EQ(matmul().workspace_bytes(config, problem, ampere), 4u * 3 * 26 * 1506 * 4);
  const std::uint64_t addresses[3] = {0x10000, 0x20000, 0x30000};
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const LaunchPlan plan = matmul().plan(config, problem, hopper, addresses, 0x100000, {});
  ASSERT_EQ(plan.step_count, 2);
  EXPECT_EQ(plan.steps[0].geometry.grid[0], 24u);  // 1506 columns, 64 a CTA
  EXPECT_EQ(plan.steps[0].geometry.grid[1], 4u);  // K slices
  EXPECT_EQ(plan.steps[0].geometry.grid[2], 3u);  // batches
  EXPECT_EQ(plan.steps[0].geometry.block[0], 256u);
  MatmulDecodeParams params;
  std::memcpy(&params, plan.steps[0].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.k_splits, 4);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.partials), 0x100000u);
  EXPECT_EQ(params.product.ldb, 1506);
  EXPECT_EQ(params.product.lda, 26);  // A stored k x m

  // The default where B's rows are off 16 bytes and M <= 8, on every GPU: as wide loads as N
  // allows, K split until the CTAs fill the SMs 8 times (B padded by a copy before: v23).
  EXPECT_EQ(matmul().default_config(matmul_problem(1, 8490, 12975), hopper).text(),
            "split_k=4,unroll=8,variant=4,vector=2,warps=8");
  EXPECT_EQ(matmul().default_config(matmul_problem(8, 1506, 11128), ampere).text(),
            "split_k=32,unroll=8,variant=4,vector=2,warps=8");
  // An odd N: 16-byte vectors, realigned pieces, up to 4 rows of A and past them over 64M
  // elements of weight; elsewhere, and in fp32, loads of an element.
  EXPECT_EQ(matmul().default_config(matmul_problem(4, 4093, 4093), hopper).at("vector"), 8);
  EXPECT_EQ(matmul().default_config(matmul_problem(8, 4093, 4093), hopper).at("vector"), 1);
  EXPECT_EQ(matmul().default_config(matmul_problem(8, 9001, 8191), hopper).at("vector"), 8);
  EXPECT_EQ(matmul()
                .default_config(matmul_problem(2, 4093, 4093, DType::f32, DType::f32), hopper)
                .at("vector"),
            1);
  EXPECT_EQ(matmul().reject(testing::gemv_kn_config(8, 8, 8), matmul_problem(8, 4093, 4093), hopper),
            std::nullopt);
  EXPECT_TRUE(matmul().reject(testing::gemv_kn_config(4, 8, 8), matmul_problem(8, 4093, 4093), hopper));
  // Rows on 16 bytes (the wgmma template streams B by TMA), 10 rows (its FMAs cost more than
  // the copy), or a short K over many columns (the gathering tiles): not this template.
  EXPECT_NE(matmul().default_config(matmul_problem(1, 8496, 12975), hopper).at("variant"), 4);
  EXPECT_NE(matmul().default_config(matmul_problem(10, 8490, 12975), hopper).at("variant"), 4);
  EXPECT_EQ(matmul().default_config(matmul_problem(2, 12945, 272), hopper).at("variant"), 0);

  // A matrix of fewer rows than two CTAs an SM (2 rows a CTA) times a few columns: gemv,
  // a row a CTA up to 128 rows, the fewest warps whose lanes take K's chunks in one pass
  // (else 16 and a chunk a pass); from 528 rows the gemv rules of the full grid; fp32 not.
  auto x_w_t = [](std::int64_t m, std::int64_t n, std::int64_t k, DType in = DType::bf16) {
    return Problem{"matmul", in, in, {m, n, k}, {{"b", "col"}}};
  };
  EXPECT_EQ(matmul().default_config(x_w_t(64, 1, 4096), hopper).text(),
            "block_n=1,unroll=1,variant=3,warps=16");
  EXPECT_EQ(matmul().default_config(x_w_t(484, 1, 430), hopper).text(),
            "block_n=2,unroll=1,variant=3,warps=8");
  EXPECT_EQ(matmul().default_config(x_w_t(173, 3, 1645), hopper).text(),
            "block_n=2,unroll=4,variant=3,warps=16");
  EXPECT_EQ(matmul().default_config(x_w_t(122, 1, 208), hopper).text(),
            "block_n=1,unroll=1,variant=3,warps=2");
  EXPECT_EQ(matmul().default_config(x_w_t(600, 1, 4096), hopper).at("warps"), 16);  // v30's
  EXPECT_NE(matmul().default_config(x_w_t(300, 1, 1000, DType::f32), hopper).text(),
            "block_n=2,unroll=1,variant=3,warps=4");
  // Past 32 rows of A, C^T = B^T A^T: a column-major A is the row-major weight, N <= 32 of
  // B's columns (either layout) the rows; the partials are laid out as C for the reduce.
  auto a_col = [](std::int64_t m, std::int64_t n, std::int64_t k) {
    return Problem{"matmul", DType::bf16, DType::bf16, {m, n, k}, {{"a", "col"}}};
  };
  const Problem cr = a_col(4096, 1, 4096);
  const Config narrow = gemv_kn_config(2, 8, 16, 8);
  EXPECT_EQ(matmul().reject(narrow, cr, ampere), std::nullopt);
  EXPECT_TRUE(matmul().reject(narrow, matmul_problem(4096, 1, 4096), ampere));  // A row-major
  EXPECT_TRUE(matmul().reject(narrow, a_col(4096, 33, 4096), ampere));
  EXPECT_EQ(matmul().kernel_expressions(narrow, cr).at(0), "tilesmith::matmul_gemv_kn<1,2,8,16,1,1,1,1,0>");
  EXPECT_EQ(matmul().workspace_bytes(narrow, cr, ampere), 8u * 4096 * 4);
  const LaunchPlan transposed = matmul().plan(narrow, cr, hopper, addresses, 0x100000, {});
  ASSERT_EQ(transposed.step_count, 2);
  EXPECT_EQ(transposed.steps[0].geometry.grid[0], 64u);  // 4096 rows of A, 64 a CTA
  EXPECT_EQ(transposed.steps[0].geometry.grid[1], 8u);
  std::memcpy(&params, transposed.steps[0].args.bytes.data(), sizeof params);
  EXPECT_EQ(params.product.m, 1);
  EXPECT_EQ(params.product.n, 4096);
  EXPECT_EQ(params.product.lda, 1);     // B's one column, k x 1
  EXPECT_EQ(params.product.ldb, 4096);  // A stored k x m
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.product.a), 0x20000u);
  EXPECT_EQ(reinterpret_cast<std::uint64_t>(params.product.b), 0x10000u);
  // The default: one or two columns from 256 rows of A (16-bit).
  EXPECT_EQ(matmul().default_config(cr, hopper).text(), "split_k=8,unroll=16,variant=4,vector=2,warps=8");
  EXPECT_EQ(matmul().default_config(a_col(16384, 2, 4096), hopper).text(),
            "split_k=8,unroll=16,variant=4,vector=8,warps=8");
  EXPECT_EQ(matmul().default_config(a_col(4096, 4, 4096), hopper).at("variant"), 1);
  EXPECT_EQ(matmul().default_config(a_col(300, 1, 4096), hopper).at("variant"), 4);
  EXPECT_EQ(matmul().default_config(a_col(200, 1, 4096), hopper).at("variant"), 1);
  EXPECT_EQ(matmul().default_config(a_col(1000, 2, 4096), hopper).at("variant"), 4);
}

}  // namespace
}  // namespace tilesmith
