// The vocabulary every stage shares: dtypes, shapes, problem keys, configs and device targets.
#include "templates/problem.hpp"

#include <gtest/gtest.h>

#include "templates/problem_json.hpp"

#include <string>
#include <vector>

namespace tilesmith {
namespace {

// Runs `action`, expects it to throw Error, and returns the message (empty if nothing threw).
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

DeviceTarget device_with_cc(int major, int minor) {
  DeviceTarget device;
  device.name = "test device";
  device.cc_major = major;
  device.cc_minor = minor;
  return device;
}

// ---------------------------------------------------------------------------------------------
// DType

TEST(DTypeTest, NamesRoundTripThroughParse) {
  for (DType dtype : {DType::f16, DType::bf16, DType::f32})
    EXPECT_EQ(parse_dtype(dtype_name(dtype)), dtype) << dtype_name(dtype);
  EXPECT_EQ(dtype_name(DType::f16), "f16");
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(dtype_name(DType::f32), "f32");
}

TEST(DTypeTest, AcceptsCommonAliases) {
  for (const char* alias : {"f16", "fp16", "half", "float16"})
    EXPECT_EQ(parse_dtype(alias), DType::f16) << alias;
  for (const char* alias : {"bf16", "bfloat16"})
    EXPECT_EQ(parse_dtype(alias), DType::bf16) << alias;
  for (const char* alias : {"f32", "fp32", "float", "float32"})
    EXPECT_EQ(parse_dtype(alias), DType::f32) << alias;
}

TEST(DTypeTest, UnknownNameThrowsNamingIt) {
  EXPECT_THROW(parse_dtype(""), Error);
  EXPECT_THROW(parse_dtype("f64"), Error);
  std::string message = error_message_of([] { parse_dtype("int8"); });
  EXPECT_NE(message.find("int8"), std::string::npos) << message;
}

TEST(DTypeTest, SizesInBytes) {
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f32), 4u);
}

// ---------------------------------------------------------------------------------------------
// Shapes and problem keys

TEST(ParseShapeTest, ParsesDimensionsInOrder) {
  EXPECT_EQ(parse_shape("4096x4096x4096"), (std::vector<std::int64_t>{4096, 4096, 4096}));
  EXPECT_EQ(parse_shape("1x2x3"), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(parse_shape("17"), (std::vector<std::int64_t>{17}));
  EXPECT_EQ(parse_shape("3000000000x7"), (std::vector<std::int64_t>{3000000000ll, 7}));
}

TEST(ParseShapeTest, RejectsZeroAndNegativeDimensions) {
  EXPECT_THROW(parse_shape("0x3x4"), Error);
  EXPECT_THROW(parse_shape("3x0x4"), Error);
  EXPECT_THROW(parse_shape("-4x3x4"), Error);
  EXPECT_THROW(parse_shape("4x-3x4"), Error);
}

TEST(ParseShapeTest, RejectsMalformedText) {
  for (const char* text : {"", "4x", "x4", "4xx4", "axb", "4x3xk", "4 x 3", "4.5x3", "+4x3",
                           "99999999999999999999x1"}) {
    std::string message = error_message_of([&] { parse_shape(text); });
    EXPECT_NE(message.find(std::string("'") + text + "'"), std::string::npos)
        << "the message should quote the shape: " << message;
  }
}

TEST(ProblemTest, KeyIsCanonicalText) {
  Problem problem{"matmul", DType::bf16, DType::bf16, {4096, 4096, 4096}};
  EXPECT_EQ(problem.key(), "matmul bf16->bf16 4096x4096x4096");
  EXPECT_EQ(problem.shape_text(), "4096x4096x4096");

  Problem mixed{"matmul", DType::f16, DType::f32, {17, 33, 65}};
  EXPECT_EQ(mixed.key(), "matmul f16->f32 17x33x65");
  EXPECT_EQ(mixed.key(), mixed.key());  // stable
}

TEST(ProblemTest, KeyDistinguishesEveryField) {
  Problem base{"matmul", DType::bf16, DType::bf16, {64, 128, 256}};
  Problem other_op = base, other_in = base, other_out = base, other_shape = base;
  other_op.op = "conv";
  other_in.dtype = DType::f16;
  other_out.out_dtype = DType::f32;
  other_shape.shape = {128, 64, 256};
  for (const Problem& other : {other_op, other_in, other_out, other_shape})
    EXPECT_NE(other.key(), base.key());
}

TEST(ProblemTest, ShapeTextRoundTripsThroughParseShape) {
  Problem problem{"matmul", DType::bf16, DType::bf16, {1, 4093, 65536}};
  EXPECT_EQ(parse_shape(problem.shape_text()), problem.shape);
}

// ---------------------------------------------------------------------------------------------
// Config

TEST(ConfigTest, TextIsSortedByNameAndRoundTrips) {
  Config config;
  config.values = {{"stages", 4}, {"block_m", 128}, {"warps_n", 2}, {"block_k", 32}};
  EXPECT_EQ(config.text(), "block_k=32,block_m=128,stages=4,warps_n=2");
  EXPECT_EQ(Config::parse(config.text()), config);

  Config negative;
  negative.values = {{"offset", -3}, {"zero", 0}};
  EXPECT_EQ(Config::parse(negative.text()), negative);
}

TEST(ConfigTest, EmptyTextIsTheEmptyConfig) {
  EXPECT_EQ(Config{}.text(), "");
  EXPECT_TRUE(Config::parse("").values.empty());
}

TEST(ConfigTest, ParseRejectsMalformedItems) {
  for (const char* text : {"a", "a=", "=3", "a=x", "a=3x", "a=1,b", "a=1,=2", "a=1.5"}) {
    std::string message = error_message_of([&] { Config::parse(text); });
    EXPECT_NE(message.find("name=integer"), std::string::npos) << text << ": " << message;
  }
}

TEST(ConfigTest, ParseRejectsValuesOutOfIntRange) {
  // from_chars reports out-of-range values with ptr at the end of the digits and the value left
  // untouched: unless that error is checked, the item silently parses as 0.
  EXPECT_THROW(Config::parse("block_m=99999999999"), Error);
  EXPECT_THROW(Config::parse("block_m=-99999999999"), Error);
}

TEST(ConfigTest, AtReturnsValuesAndNamesTheMissingParameter) {
  Config config = Config::parse("block_m=128,stages=3");
  EXPECT_EQ(config.at("block_m"), 128);
  EXPECT_EQ(config.at("stages"), 3);
  std::string message = error_message_of([&] { config.at("group_m"); });
  EXPECT_NE(message.find("group_m"), std::string::npos) << message;
}

TEST(ConfigTest, OrderingFollowsValues) {
  Config small = Config::parse("a=1"), large = Config::parse("a=2");
  EXPECT_TRUE(small < large);
  EXPECT_FALSE(large < small);
  EXPECT_FALSE(small < small);
}

// ---------------------------------------------------------------------------------------------
// DeviceTarget

TEST(DeviceTargetTest, ArchAddsTheArchSpecificSuffixOnlyForHopper) {
  EXPECT_EQ(device_with_cc(9, 0).arch(), "sm_90a");
  EXPECT_EQ(device_with_cc(8, 0).arch(), "sm_80");
  EXPECT_EQ(device_with_cc(8, 6).arch(), "sm_86");
  EXPECT_EQ(device_with_cc(8, 9).arch(), "sm_89");
  EXPECT_EQ(device_with_cc(10, 0).arch(), "sm_100");
  EXPECT_EQ(device_with_cc(12, 0).arch(), "sm_120");
}

TEST(DeviceTargetTest, AssumedHopperLimits) {
  DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  EXPECT_EQ(hopper.cc_major, 9);
  EXPECT_EQ(hopper.cc_minor, 0);
  EXPECT_EQ(hopper.arch(), "sm_90a");
  EXPECT_EQ(hopper.max_smem_per_block_optin, 227 * 1024);
  EXPECT_EQ(hopper.max_threads_per_block, 1024);
  EXPECT_EQ(hopper.sm_count, 132);
  EXPECT_GT(hopper.l2_bytes, 0);
  EXPECT_NE(hopper.name.find("sm_90a"), std::string::npos) << hopper.name;
}

TEST(DeviceTargetTest, AssumedAmpereLimits) {
  DeviceTarget a100 = DeviceTarget::assumed_for_arch("sm_80");
  EXPECT_EQ(a100.arch(), "sm_80");
  EXPECT_EQ(a100.max_smem_per_block_optin, 163 * 1024);
  DeviceTarget ga10x = DeviceTarget::assumed_for_arch("sm_86");
  EXPECT_EQ(ga10x.arch(), "sm_86");
  EXPECT_EQ(ga10x.max_smem_per_block_optin, 99 * 1024);
  EXPECT_EQ(DeviceTarget::assumed_for_arch("sm_89").arch(), "sm_89");
}

TEST(DeviceTargetTest, AssumedTargetsRoundTripTheirArch) {
  // Includes the three-digit Blackwell architectures: "sm_100" is compute capability 10.0, not
  // 1.0, and assumed_for_arch has limits for major 10 and 12 that only a two-digit parse reaches.
  for (const char* arch : {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90a", "sm_100", "sm_120"})
    EXPECT_EQ(DeviceTarget::assumed_for_arch(arch).arch(), arch);
  EXPECT_EQ(DeviceTarget::assumed_for_arch("sm_100").max_smem_per_block_optin, 227 * 1024);
}

TEST(DeviceTargetTest, AssumedForBadArchThrows) {
  for (const char* arch : {"", "sm_", "sm_9", "80", "compute_80", "sm_xy", "sm_8a", "SM_80"}) {
    std::string message = error_message_of([&] { DeviceTarget::assumed_for_arch(arch); });
    EXPECT_NE(message.find("bad architecture"), std::string::npos) << arch << ": " << message;
  }
}

TEST(DeviceTargetTest, ModelKeyNamesTheDeviceItsArchAndSmCount) {
  DeviceTarget device = device_with_cc(9, 0);
  device.name = "NVIDIA H100 80GB HBM3";
  device.sm_count = 132;
  std::string key = device.model_key();
  EXPECT_NE(key.find("NVIDIA H100 80GB HBM3"), std::string::npos) << key;
  EXPECT_NE(key.find("132"), std::string::npos) << key;
  EXPECT_NE(key.find("sm_90"), std::string::npos) << key;

  DeviceTarget pcie = device;
  pcie.sm_count = 114;  // same name, fewer SMs: a different model for results
  EXPECT_NE(pcie.model_key(), key);
}

// ---------------------------------------------------------------------------------------------
// Options and the JSON form

TEST(ProblemOptionsTest, KeyNamesOptionsAndIsUnchangedWithoutThem) {
  Problem plain{"matmul", DType::bf16, DType::bf16, {64, 64, 64}};
  EXPECT_EQ(plain.key(), "matmul bf16->bf16 64x64x64");  // as before options existed
  Problem with = plain;
  with.options = {{"layout_b", "col"}, {"act", "gelu"}};
  EXPECT_EQ(with.key(), "matmul bf16->bf16 64x64x64 [act=gelu,layout_b=col]");  // sorted
  EXPECT_EQ(with.options_text(), "act=gelu,layout_b=col");
  EXPECT_NE(with, plain);
}

TEST(ProblemOptionsTest, ParseAcceptsNameValueItemsAndRejectsTheRest) {
  EXPECT_EQ(parse_options(""), (ProblemOptions{}));
  EXPECT_EQ(parse_options("act=gelu,weight=1"),
            (ProblemOptions{{"act", "gelu"}, {"weight", "1"}}));
  for (const char* bad : {"act", "=gelu", "act=", "act=ge lu", "a=b=c", "act=gelu,,w=1"}) {
    std::string message = error_message_of([&] { parse_options(bad); });
    EXPECT_NE(message.find("bad option"), std::string::npos) << bad << ": " << message;
  }
  EXPECT_NE(error_message_of([] { parse_options("act=relu,act=gelu"); }).find("given twice"),
            std::string::npos);
  // Options round-trip through their text, the database's column.
  EXPECT_EQ(parse_options(Problem{"x", DType::f32, DType::f32, {1}, {{"b", "2"}, {"a", "1"}}}
                              .options_text()),
            (ProblemOptions{{"a", "1"}, {"b", "2"}}));
}

TEST(ProblemJsonTest, RoundTripsEveryFieldAndReadsMessagesWithoutOptions) {
  const Problem problem{"matmul", DType::f16, DType::f32, {17, 33, 65}, {{"layout_b", "col"}}};
  const nlohmann::json json = problem;
  EXPECT_EQ(json.at("dtype"), "f16");
  EXPECT_EQ(json.at("options").at("layout_b"), "col");
  EXPECT_EQ(json.get<Problem>(), problem);
  nlohmann::json old = json;
  old.erase("options");  // as older tilesmith builds wrote it
  EXPECT_TRUE(old.get<Problem>().options.empty());
  nlohmann::json broken = json;
  broken["shape"] = "17x33x65";
  std::string message = error_message_of([&] { broken.get<Problem>(); });
  EXPECT_NE(message.find("malformed"), std::string::npos) << message;
  broken = json;
  broken["dtype"] = "f8";
  EXPECT_THROW(broken.get<Problem>(), Error);
}

}  // namespace
}  // namespace tilesmith
