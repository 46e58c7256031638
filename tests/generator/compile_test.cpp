// NVRTC compiles of rendered sources (real compiles; no GPU needed) and the ptxas report parser.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <optional>
#include <random>

#include <ostream>
#include <regex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "generator/compiled_kernel.hpp"
#include "support/clean_compile.hpp"
#include "support/matmul_configs.hpp"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

using testing::tile_config;

const Family& matmul() { return find_family("matmul"); }

Problem matmul_problem(std::int64_t m, std::int64_t n, std::int64_t k, DType in = DType::bf16,
                       DType out = DType::bf16) {
  return Problem{"matmul", in, out, {m, n, k}};
}


// A source NVRTC must reject: a hand-built RenderedSource with a syntax error.
RenderedSource broken_source() {
  RenderedSource source;
  source.family = "brokenfamily";
  source.main_name = "broken_kernel.cu";
  source.text =
      "extern \"C\" __global__ void broken_kernel(float* out) {\n"
      "  out[threadIdx.x] = 1.0f +;\n"
      "}\n";
  source.kernel_expressions = {"broken_kernel"};
  source.hash = content_hash(source.text);
  return source;
}

std::string compile_error_of(const RenderedSource& source, const std::string& arch) {
  try {
    compile(source, arch);
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "expected compile to throw tilesmith::Error";
  return "";
}

// ---------------------------------------------------------------------------------------------
// The default matmul config, compiled for Ampere and Hopper

class DefaultConfigCompileTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DefaultConfigCompileTest, ProducesACubinWithoutSpills) {
  const std::string arch = GetParam();
  Problem problem = matmul_problem(4096, 4096, 4096);
  Config config = matmul().default_config(problem, DeviceTarget::assumed_for_arch(arch));
  RenderedSource source = render(matmul(), config, problem);
  CompiledKernel kernel = compile(source, arch);

  EXPECT_FALSE(kernel.cubin.bytes.empty());
  // A cubin is an ELF file.
  ASSERT_GE(kernel.cubin.bytes.size(), 4u);
  EXPECT_EQ(std::string(kernel.cubin.bytes.data(), 4),
            "\x7f"
            "ELF");
  EXPECT_EQ(kernel.lowered_names.front().rfind("_Z", 0), 0u) << kernel.lowered_names.front();
  // The default on Hopper is the wgmma template; elsewhere mma.sync.
  const char* kernel_name = arch == "sm_90a" ? "matmul_sm90" : "matmul_kernel";
  EXPECT_NE(kernel.lowered_names.front().find(kernel_name), std::string::npos)
      << kernel.lowered_names.front();
  EXPECT_EQ(kernel.source_hash, source.hash);
  EXPECT_EQ(kernel.arch, arch);
  EXPECT_TRUE(std::regex_match(kernel.nvrtc_version, std::regex(R"(1[3-9]\.\d+)")))
      << kernel.nvrtc_version;
  EXPECT_EQ(kernel.nvrtc_version, nvrtc_version());
  EXPECT_GT(kernel.resources.registers, 0) << kernel.log;
  EXPECT_LE(kernel.resources.registers, 255) << kernel.log;
  EXPECT_EQ(kernel.resources.stack_frame_bytes, 0) << kernel.log;
  EXPECT_FALSE(kernel.resources.spills()) << kernel.log;
  EXPECT_GT(kernel.compile_seconds, 0);
  EXPECT_EQ(kernel.log.find('\0'), std::string::npos)
      << "the log should stop at NVRTC's terminating NUL, not carry it";
}

INSTANTIATE_TEST_SUITE_P(Archs, DefaultConfigCompileTest, ::testing::Values("sm_80", "sm_90a"));

// What users run untuned: the defaults of the benchmark suite's cases (bench/matmul_suite.py),
// its epilogues, and fp32 (tf32), compiled cleanly for both architectures.
TEST(MatmulDefaults, OfTheBenchmarkSuiteCompileCleanly) {
  std::vector<Problem> problems;
  for (std::int64_t size : {2048, 4096, 8192}) problems.push_back(matmul_problem(size, size, size));
  for (std::int64_t m : {1, 16, 128, 1024, 4096, 8192})
    for (auto [n, k] : {std::pair<std::int64_t, std::int64_t>{4096, 4096}, {14336, 4096}, {4096, 14336}})
      problems.push_back(Problem{"matmul", DType::bf16, DType::bf16, {m, n, k}, {{"b", "col"}}});
  problems.push_back(matmul_problem(1000, 1000, 1000));
  problems.push_back(matmul_problem(4093, 4093, 4093));
  problems.push_back(matmul_problem(512, 512, 16384));
  problems.push_back(Problem{"matmul", DType::bf16, DType::bf16, {4096, 4096, 4096}, {{"a", "col"}}});
  problems.push_back(
      Problem{"matmul", DType::bf16, DType::bf16, {4096, 4096, 4096}, {{"a", "col"}, {"b", "col"}}});
  problems.push_back(Problem{"matmul", DType::bf16, DType::bf16, {8, 2048, 2048, 2048}, {}});
  problems.push_back(
      Problem{"matmul", DType::bf16, DType::bf16, {4096, 4096, 4096}, {{"act", "gelu"}, {"bias", "1"}}});
  problems.push_back(Problem{"matmul", DType::bf16, DType::bf16, {4096, 4096, 14336},
                             {{"b", "col"}, {"residual", "1"}}});
  problems.push_back(matmul_problem(4096, 4096, 4096, DType::f32, DType::f32));
  problems.push_back(Problem{"matmul", DType::f32, DType::f32, {16, 4096, 4096}, {{"b", "col"}}});
  testing::expect_clean_defaults(matmul(), problems, {"sm_80", "sm_90a"});
}

// Many rows of A over an N of 65-192: one swapped tile of 128 or 192 rows holds N (two or
// three consumers, M's side 80-112 wide), with each epilogue and output type (v72).
TEST(MatmulDefaults, OfOneSwappedTileHoldingNCompileCleanly) {
  using enum DType;
  const std::vector<Problem> problems = {
      Problem{"matmul", bf16, bf16, {4750, 150, 7728}, {{"bias", "1"}, {"act", "gelu"}}},
      Problem{"matmul", f16, f32, {2717, 160, 15176}, {{"b", "col"}, {"residual", "1"}}},
      Problem{"matmul", bf16, bf16, {6186, 184, 6976}, {{"b", "col"}, {"act", "relu"}}},
      Problem{"matmul", bf16, bf16, {3543, 108, 7256},
              {{"b", "col"}, {"bias", "1"}, {"act", "silu"}}},
      Problem{"matmul", f16, f32, {5101, 114, 6280}, {{"residual", "1"}}}};
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  for (const Problem& problem : problems) {
    const Config config = matmul().default_config(problem, hopper);
    EXPECT_EQ(config.at("swap_ab"), 1) << problem.key();
    EXPECT_EQ(config.at("block_m"), problem.shape[1] > 128 ? 192 : 128) << problem.key();
  }
  testing::expect_clean_defaults(matmul(), problems, {"sm_90a"});
}

// Rows off 16 bytes read in place by the decode template (v73): an odd K realigned from
// 16-byte pieces (8 and 16 rows of A, K split, the epilogue), and 17-32 rows over a small
// weight (8- and 4-byte loads, an odd K), with each output type.
TEST(MatmulDefaults, OfDecodeOverRowsOff16BytesCompileCleanly) {
  using enum DType;
  const std::vector<Problem> problems = {
      Problem{"matmul", bf16, bf16, {7, 5003, 2001}, {{"b", "col"}}},
      Problem{"matmul", f16, f32, {16, 4093, 4093}, {{"b", "col"}, {"bias", "1"}, {"act", "gelu"}}},
      Problem{"matmul", bf16, bf16, {13, 300, 11849}, {{"b", "col"}, {"residual", "1"}}},
      Problem{"matmul", bf16, f16, {22, 456, 780}, {{"b", "col"}, {"act", "silu"}}},
      Problem{"matmul", f16, f16, {18, 1096, 650}, {{"b", "col"}}},
      Problem{"matmul", bf16, bf16, {2, 25, 500, 1001}, {{"b", "col"}, {"act", "relu"}}}};
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  for (const Problem& problem : problems)
    EXPECT_EQ(matmul().default_config(problem, hopper).at("variant"), 2) << problem.key();
  testing::expect_clean_defaults(matmul(), problems, {"sm_90a"});
}

TEST(CompileToPtxTest, WgmmaVariantUsesWgmmaTmaAndMbarriers) {
  Problem problem = matmul_problem(4096, 4096, 4096);
  std::string ptx = compile_to_ptx(
      render(matmul(), testing::wgmma_config(128, 256, 4, 2, 2, 1), problem), "sm_90a");
  EXPECT_NE(ptx.find("wgmma.mma_async"), std::string::npos);
  EXPECT_NE(ptx.find("cp.async.bulk.tensor"), std::string::npos);
  EXPECT_NE(ptx.find("mbarrier"), std::string::npos);
  EXPECT_NE(ptx.find("setmaxnreg"), std::string::npos);
  EXPECT_NE(ptx.find(".target sm_90a"), std::string::npos);
}

// Started early behind the previous kernel (sm_90), a kernel may touch global memory only after
// griddepcontrol.wait (docs/perf/matmul.md v68). In the PTX of every kind of kernel: (1) no
// global load, store or bulk copy comes before the wait (the wgmma kernel wrote the tail split's
// header there, over what the call before's reduce was still to read); (2) no load goes through
// the non-coherent path (ld.global.nc, __ldg), which promises data constant for the kernel's
// whole life, so ptxas may move it above the wait (it moved 4 of 16 weight loads of a decode
// kernel there). PTX order is the source's here; ptxas keeps coherent accesses behind the wait.
TEST(CompileToPtxTest, KernelsStartedEarlyTouchNothingBeforeTheirWait) {
  using enum DType;
  const DeviceTarget hopper = DeviceTarget::assumed_for_arch("sm_90a");
  const std::vector<std::pair<Problem, std::optional<Config>>> cases = {
      {testing::x_times_w_t({16, 4096, 4096}), std::nullopt},   // decode, whole lines
      {testing::x_times_w_t({16, 1000, 1036}), std::nullopt},   // decode, rows off 16 bytes
      {testing::x_times_w_t({1, 4096, 4100}), std::nullopt},    // gemv, rows off 16 bytes
      {Problem{"matmul", bf16, bf16, {1, 700, 1000}, {{"a", "col"}, {"b", "col"}}},
       std::nullopt},                                           // gemv, A a strided vector
      {matmul_problem(4, 3000, 4096), testing::gemv_kn_config(4, 8, 8)},
      {matmul_problem(1001, 999, 1003), std::nullopt},          // the padding copy first
      {matmul_problem(512, 512, 16384), std::nullopt},          // K slices and their reduce
      {matmul_problem(40, 1001, 2000), std::nullopt},           // A's gather (row phases)
      {matmul_problem(333, 517, 259), tile_config(128, 128, 32, 2, 4, 3)},  // mma.sync
      {Problem{"softmax", bf16, bf16, {4096, 1000}}, std::nullopt},
      {Problem{"layernorm_act_residual", bf16, bf16, {4096, 1024}, {{"act", "gelu"}}},
       std::nullopt},
      {Problem{"rmsnorm_backward", f32, f32, {1000, 3000}}, std::nullopt},
      {Problem{"multi_sum", bf16, f32, {1000, 256}, {{"mean", "1"}}}, std::nullopt},
      {Problem{"attention", bf16, bf16, {2, 8, 1024, 128}}, std::nullopt},
      {Problem{"attention_backward", bf16, bf16, {2, 8, 1024, 128}}, std::nullopt},
  };
  const std::regex entry(R"(\n\s*\.(visible|weak)\s+\.entry\s+)");
  const std::regex global_access(
      R"(\b(ld|st|atom|red)\.global|cp\.async\.(ca|cg)\.shared\.global|cp\.async\.bulk|)"
      R"(cp\.reduce\.async\.bulk)");
  int kernels = 0;
  for (const auto& [problem, chosen] : cases) {
    const Family& family = find_family(problem.op);
    const Config config = chosen ? *chosen : family.default_config(problem, hopper);
    const std::string ptx = compile_to_ptx(render(family, config, problem), "sm_90a");
    const std::string what = problem.key() + " " + config.text();
    EXPECT_EQ(ptx.find("ld.global.nc"), std::string::npos) << what;
    std::sregex_token_iterator part(ptx.begin(), ptx.end(), entry, -1), end;
    for (++part; part != end; ++part, ++kernels) {  // each kernel's body, its name first
      const std::string body = *part;
      const std::size_t wait = body.find("griddepcontrol.wait");
      std::smatch access;
      if (!std::regex_search(body, access, global_access)) continue;
      EXPECT_LT(wait, static_cast<std::size_t>(access.position(0)))
          << what << ": " << body.substr(0, body.find('(')) << " touches global memory ("
          << access.str(0) << ") before its wait";
    }
  }
  EXPECT_GE(kernels, static_cast<int>(cases.size()));
}

TEST(CompileToPtxTest, UsesTensorCoreMmaAndTheExactTarget) {
  Problem problem = matmul_problem(4096, 4096, 4096);
  Config config = tile_config(128, 128, 32, 2, 2, 4);
  std::string ptx = compile_to_ptx(render(matmul(), config, problem), "sm_90a");
  EXPECT_NE(ptx.find("mma.sync.aligned.m16n8k16"), std::string::npos);
  EXPECT_NE(ptx.find(".target sm_90a"), std::string::npos);
  EXPECT_NE(ptx.find("cp.async"), std::string::npos);  // the aligned pipeline
  EXPECT_NE(ptx.find("ldmatrix"), std::string::npos);
  EXPECT_NE(ptx.find(".entry"), std::string::npos);
  EXPECT_EQ(ptx.find('\0'), std::string::npos) << "no trailing NUL in the PTX text";
}

TEST(CompileToPtxTest, Sm80TargetsSm80) {
  Problem problem = matmul_problem(4093, 4093, 4093);
  Config config = matmul().default_config(problem, DeviceTarget::assumed_for_arch("sm_80"));
  std::string ptx = compile_to_ptx(render(matmul(), config, problem), "sm_80");
  EXPECT_NE(ptx.find(".target sm_80"), std::string::npos);
  EXPECT_NE(ptx.find("mma.sync.aligned.m16n8k16"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Failures

TEST(CompileErrorTest, SyntaxErrorThrowsWithFamilyArchAndLog) {
  std::string message = compile_error_of(broken_source(), "sm_90a");
  EXPECT_NE(message.find("brokenfamily"), std::string::npos) << message;
  EXPECT_NE(message.find("sm_90a"), std::string::npos) << message;
  EXPECT_NE(message.find("broken_kernel"), std::string::npos) << message;
  // NVRTC's own log: the file name, the line and "error".
  EXPECT_NE(message.find("error"), std::string::npos) << message;
  EXPECT_NE(message.find("broken_kernel.cu(2)"), std::string::npos) << message;
}

TEST(CompileErrorTest, PtxOfABrokenSourceThrowsToo) {
  try {
    compile_to_ptx(broken_source(), "sm_80");
    FAIL() << "expected compile_to_ptx to throw";
  } catch (const Error& error) {
    std::string message = error.what();
    EXPECT_NE(message.find("brokenfamily"), std::string::npos) << message;
    EXPECT_NE(message.find("error"), std::string::npos) << message;
  }
}

TEST(CompileErrorTest, UnknownArchitectureThrowsNamingIt) {
  RenderedSource source;
  source.family = "tiny";
  source.main_name = "tiny.cu";
  source.text = "extern \"C\" __global__ void tiny(float* out) { out[0] = 1.0f; }\n";
  source.kernel_expressions = {"tiny"};
  EXPECT_NO_THROW(compile(source, "sm_80"));
  std::string message = compile_error_of(source, "sm_13");
  EXPECT_NE(message.find("sm_13"), std::string::npos) << message;
  EXPECT_NE(message.find("tiny"), std::string::npos) << message;
}

// ---------------------------------------------------------------------------------------------
// parse_resource_usage

const char* const kTwoKernelLog =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'\n"
    "ptxas info    : Function properties for _Z1kPf\n"
    "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
    "ptxas info    : Used 40 registers, used 1 barriers, 512 bytes smem, 400 bytes cmem[0]\n"
    "ptxas info    : Compiling entry function '_Z1kPfi' for 'sm_90a'\n"
    "ptxas info    : Function properties for _Z1kPfi\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 168 registers, used 1 barriers, 0 bytes smem, 380 bytes cmem[0]\n";

TEST(ParseResourceUsageTest, ReadsTheFirstKernel) {
  ResourceUsage usage = parse_resource_usage(kTwoKernelLog, "_Z1kPf");
  EXPECT_EQ(usage.registers, 40);
  EXPECT_EQ(usage.static_smem_bytes, 512);
  EXPECT_EQ(usage.stack_frame_bytes, 8);
  EXPECT_EQ(usage.spill_store_bytes, 4);
  EXPECT_EQ(usage.spill_load_bytes, 4);
}

TEST(ParseResourceUsageTest, ReadsTheSecondKernelWhoseNameExtendsTheFirst) {
  ResourceUsage usage = parse_resource_usage(kTwoKernelLog, "_Z1kPfi");
  EXPECT_EQ(usage.registers, 168);
  EXPECT_EQ(usage.static_smem_bytes, 0);
  EXPECT_EQ(usage.stack_frame_bytes, 0);
  EXPECT_EQ(usage.spill_store_bytes, 0);
  EXPECT_EQ(usage.spill_load_bytes, 0);
}

TEST(ParseResourceUsageTest, UnknownKernelIsNotReported) {
  ResourceUsage usage = parse_resource_usage(kTwoKernelLog, "_Z1k");
  EXPECT_EQ(usage.registers, -1);
  EXPECT_EQ(usage.spill_store_bytes, -1);
  EXPECT_EQ(usage.static_smem_bytes, -1);
  ResourceUsage empty = parse_resource_usage("", "_Z1kPf");
  EXPECT_EQ(empty.registers, -1);
}

// NVRTC 13 on the H100 machine answers a repeated compile of the same program from a cache,
// with no ptxas report in the log; a unique comment did not defeat it (comments are gone after
// preprocessing). A declaration unique to this run makes the program new, so ptxas runs and
// reports.
CompiledKernel compile_uncached(const Config& config, const Problem& problem, const std::string& arch) {
  RenderedSource source = render(matmul(), config, problem);
  source.text += "\nnamespace { constexpr unsigned long long tilesmith_uncached = " +
                 std::to_string(std::random_device{}()) +
                 std::to_string(std::chrono::steady_clock::now().time_since_epoch().count() % 1000000) +
                 "ull; }\n";
  return compile(source, arch);
}

TEST(ParseResourceUsageTest, ReadsARealNvrtcLog) {
  Problem problem = matmul_problem(4096, 4096, 4096);
  Config config = matmul().default_config(problem, DeviceTarget::assumed_for_arch("sm_90a"));
  CompiledKernel kernel = compile_uncached(config, problem, "sm_90a");
  ASSERT_NE(kernel.log.find(kernel.lowered_names.front()), std::string::npos)
      << "the verbose ptxas report should name the kernel:\n" << kernel.log;
  ResourceUsage usage = parse_resource_usage(kernel.log, kernel.lowered_names.front());
  EXPECT_GT(usage.registers, 0) << kernel.log;
  EXPECT_EQ(usage.spill_store_bytes, 0) << kernel.log;
  // The pipeline's shared memory is dynamic: nothing static.
  EXPECT_EQ(usage.static_smem_bytes, 0) << kernel.log;
}

// The cubin's attributes agree with ptxas' report, for a kernel without a stack frame and for
// one that spills (16 warps leave 128 registers, under a 64x32 warp tile's needs).
TEST(CubinResourcesTest, AgreeWithPtxasReport) {
  Problem problem = matmul_problem(2048, 1536, 512);
  DeviceTarget device = DeviceTarget::assumed_for_arch("sm_90a");
  Config lean = matmul().default_config(problem, device);
  Config spilling = tile_config(256, 128, 32, 4, 4, 4, 8);
  ASSERT_TRUE(matmul().reject(spilling, problem, device).has_value())
      << "the constraints should prune this config because it spills";
  for (bool spills : {false, true}) {
    const Config& config = spills ? spilling : lean;
    CompiledKernel kernel = compile_uncached(config, problem, "sm_90a");
    ResourceUsage reported = parse_resource_usage(kernel.log, kernel.lowered_names.front());
    ASSERT_GT(reported.registers, 0) << kernel.log;
    ResourceUsage from_cubin = read_cubin_resources(kernel.cubin, kernel.lowered_names.front());
    EXPECT_EQ(from_cubin.registers, reported.registers) << config.text();
    EXPECT_EQ(from_cubin.stack_frame_bytes, reported.stack_frame_bytes) << config.text();
    EXPECT_EQ(kernel.resources.registers, reported.registers);
    EXPECT_EQ(kernel.resources.spill_store_bytes, reported.spill_store_bytes);
    EXPECT_EQ(kernel.resources.spills(), spills) << kernel.log;
    EXPECT_EQ(from_cubin.stack_frame_bytes > 0, spills) << kernel.log;
  }
}

TEST(CubinResourcesTest, RefusesWhatIsNotTheKernelsCubin) {
  Problem problem = matmul_problem(64, 64, 64);
  CompiledKernel kernel = compile(
      render(matmul(), matmul().default_config(problem, DeviceTarget::assumed_for_arch("sm_90a")), problem),
      "sm_90a");
  EXPECT_THROW(read_cubin_resources(kernel.cubin, "_Z9elsewherev"), Error);
  Cubin truncated{std::vector<char>(kernel.cubin.bytes.begin(), kernel.cubin.bytes.begin() + 100)};
  EXPECT_THROW(read_cubin_resources(truncated, kernel.lowered_names.front()), Error);
  Cubin text{std::vector<char>(200, 'x')};
  EXPECT_THROW(read_cubin_resources(text, kernel.lowered_names.front()), Error);
}

// ---------------------------------------------------------------------------------------------
// A deterministic sample of the space: stages, warps and tiles, aligned and unaligned shapes,
// f16 and bf16 in, same-type and f32 out. None may fail to compile or spill.

struct SampleCase {
  const char* label;
  Config config;
  Problem problem;
};

std::vector<SampleCase> space_sample() {
  std::vector<SampleCase> sample = {
      {"128x128x32_w2x2_s4_bf16_aligned", tile_config(128, 128, 32, 2, 2, 4, 8),
       matmul_problem(4096, 4096, 4096, DType::bf16, DType::bf16)},
      {"256x128x64_w4x2_s3_f16_aligned", tile_config(256, 128, 64, 4, 2, 3, 8),
       matmul_problem(1000, 1000, 1000, DType::f16, DType::f16)},
      {"64x64x32_w2x2_s2_bf16_f32_unaligned", tile_config(64, 64, 32, 2, 2, 2, 1),
       matmul_problem(4093, 4093, 4093, DType::bf16, DType::f32)},
      {"64x256x32_w2x4_s5_f16_f32_unaligned", tile_config(64, 256, 32, 2, 4, 5, 8),
       matmul_problem(17, 33, 65, DType::f16, DType::f32)},
      {"128x256x64_w2x4_s2_bf16_aligned", tile_config(128, 256, 64, 2, 4, 2, 1),
       matmul_problem(1024, 1024, 1024, DType::bf16, DType::bf16)},
      {"128x128x32_w4x4_s4_bf16_aligned", tile_config(128, 128, 32, 4, 4, 4, 8),
       matmul_problem(2048, 1536, 512, DType::bf16, DType::bf16)},
      // Layouts, batches and the epilogue.
      {"128x128x32_w2x2_s4_bf16_colA_colB_epilogue", tile_config(128, 128, 32, 2, 2, 4, 8),
       Problem{"matmul", DType::bf16, DType::bf16, {4096, 4096, 4096},
               {{"a", "col"}, {"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}}},
      {"64x128x32_w2x2_s3_f16_f32_colB_batch_unaligned", tile_config(64, 128, 32, 2, 2, 3, 1),
       Problem{"matmul", DType::f16, DType::f32, {3, 100, 77, 45}, {{"b", "col"}, {"act", "silu"}}}},
      {"128x64x64_w2x2_s3_bf16_colA_relu_bias", tile_config(128, 64, 64, 2, 2, 3, 8),
       Problem{"matmul", DType::bf16, DType::bf16, {1000, 1000, 1000}, {{"a", "col"}, {"act", "relu"}, {"bias", "1"}}}},
      // fp32 in, as tf32 (B transposed first; A gathered where K is off 16 bytes).
      {"128x128x32_w2x2_s4_tf32", tile_config(128, 128, 32, 2, 2, 4),
       matmul_problem(4096, 4096, 4096, DType::f32, DType::f32)},
      {"64x128x32_w2x2_s3_tf32_colB_bf16_unaligned_epilogue", tile_config(64, 128, 32, 2, 2, 3, 1),
       Problem{"matmul", DType::f32, DType::bf16, {3, 100, 77, 45}, {{"b", "col"}, {"act", "gelu"}, {"bias", "1"}}}},
      // The decode template (sm_80 and later): each row count, the widest buffers, split K.
      {"decode16_w8_u4_m16_bf16", testing::decode_config(16, 8, 4),
       Problem{"matmul", DType::bf16, DType::bf16, {16, 4096, 4096}, {{"b", "col"}}}},
      {"decode64_w8_u2_m1_f16_epilogue", testing::decode_config(64, 8, 2),
       Problem{"matmul", DType::f16, DType::f32, {1, 4096, 4096}, {{"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}}},
      {"decode16_w8_u2_m32_split2_batch", testing::decode_config(16, 8, 2, 2),
       Problem{"matmul", DType::bf16, DType::f16, {2, 32, 1000, 4096}, {{"b", "col"}}}},
      {"decode8_w16_u2_m5", testing::decode_config(8, 16, 2),
       Problem{"matmul", DType::bf16, DType::bf16, {5, 4096, 14336}, {{"b", "col"}}}},
      // ... and rows read in whole lines, handed out through shared memory.
      {"decode16_w8_u1_m16_rows128", testing::decode_config(16, 8, 1, 1, 128),
       Problem{"matmul", DType::bf16, DType::bf16, {16, 4096, 4096}, {{"b", "col"}}}},
      {"decode8_w4_u1_m7_rows512_split2_epilogue", testing::decode_config(8, 4, 1, 2, 512),
       Problem{"matmul", DType::f16, DType::f32, {7, 1000, 4104}, {{"b", "col"}, {"act", "relu"}, {"bias", "1"}}}},
      // The gemv template (sm_80 and later): one row of A and four, the widest buffers.
      {"gemv1_w8_u1_m1_bf16", testing::gemv_config(1, 8, 1),
       Problem{"matmul", DType::bf16, DType::bf16, {1, 4096, 4096}, {{"b", "col"}}}},
      {"gemv2_w4_u2_m4_f16_epilogue_batch", testing::gemv_config(2, 4, 2),
       Problem{"matmul", DType::f16, DType::f32, {2, 4, 1000, 4096}, {{"b", "col"}, {"act", "silu"}, {"bias", "1"}, {"residual", "1"}}}},
      {"gemv2_w16_u2_m3", testing::gemv_config(2, 16, 2),
       Problem{"matmul", DType::bf16, DType::bf16, {3, 4096, 14336}, {{"b", "col"}}}},
      // ... and fp32 inputs (multiplied in fp32): 16-byte loads under four rows with the
      // epilogue, one element a load, a column-major row of A, C^T of a matrix times a vector.
      {"gemv2_w4_u2_m4_f32_epilogue", testing::gemv_config(2, 4, 2),
       Problem{"matmul", DType::f32, DType::bf16, {4, 1000, 4096},
               {{"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}}},
      {"gemv2_w8_u4_m2_f32_unaligned", testing::gemv_config(2, 8, 4),
       Problem{"matmul", DType::f32, DType::f32, {2, 4096, 4095}, {{"b", "col"}}}},
      {"gemv2_w16_u1_m1_f32_colA", testing::gemv_config(2, 16, 1),
       Problem{"matmul", DType::f32, DType::f32, {1, 4096, 4096}, {{"a", "col"}, {"b", "col"}}}},
      {"gemv4_w4_u1_m4096_f32_vector", testing::gemv_config(4, 4, 1),
       matmul_problem(4096, 1, 4096, DType::f32, DType::f32)},
      // The row-major-B gemv template (sm_80 and later): the most sums a thread (32 rows x 2
      // columns, 16 x 4, 8 x 8), one column a load, split K, A column-major, the epilogue.
      {"gemvkn_v2_w8_u16_m32_split8", testing::gemv_kn_config(2, 8, 16, 8),
       matmul_problem(26, 1506, 11128, DType::bf16, DType::bf16)},
      {"gemvkn_v4_w4_u8_m16_colA_f16_epilogue", testing::gemv_kn_config(4, 4, 8),
       Problem{"matmul", DType::f16, DType::f32, {2, 16, 4100, 1000}, {{"a", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}}},
      {"gemvkn_v8_w8_u16_m8", testing::gemv_kn_config(8, 8, 16),
       matmul_problem(8, 8200, 4096, DType::bf16, DType::bf16)},
      {"gemvkn_v1_w8_u8_m1", testing::gemv_kn_config(1, 8, 8, 16),
       matmul_problem(1, 8491, 12975, DType::bf16, DType::bf16)},
      {"gemvkn_v4_w8_u8_m8_f32", testing::gemv_kn_config(4, 8, 8, 4),
       matmul_problem(8, 8204, 4096, DType::f32, DType::f32)},
  };
  return sample;
}

// The wgmma template's tile shapes, warpgroup counts, clusters and output types (sm_90a only).
std::vector<SampleCase> wgmma_sample() {
  return {
      {"wg128x256_s4_c2_cl2x1_bf16", testing::wgmma_config(128, 256, 4, 2, 2, 1),
       matmul_problem(4096, 4096, 4096, DType::bf16, DType::bf16)},
      {"wg256x128_s4_c2_cl1x2_f16", testing::wgmma_config(256, 128, 4, 2, 1, 2),
       matmul_problem(1000, 1000, 1000, DType::f16, DType::f16)},
      {"wg192x128_s4_c3_cl1x1_bf16_f32", testing::wgmma_config(192, 128, 4, 3, 1, 1, 1),
       matmul_problem(300, 520, 136, DType::bf16, DType::f32)},
      {"wg128x192_s4_c2_cl1x1_f16_f32", testing::wgmma_config(128, 192, 4, 2, 1, 1),
       matmul_problem(129, 72, 264, DType::f16, DType::f32)},
      {"wg128x64_s6_c1_cl2x1_bf16", testing::wgmma_config(128, 64, 6, 1, 2, 1),
       matmul_problem(16, 4096, 4096, DType::bf16, DType::bf16)},
      {"wg128x128_s4_c2_split4_f16", testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 4),
       matmul_problem(1000, 1000, 1000, DType::f16, DType::f16)},
      {"wg128x256_s4_c2_padded_bf16", testing::wgmma_config(128, 256, 4, 2, 2, 1),
       matmul_problem(4093, 4093, 4093, DType::bf16, DType::bf16)},
      // Layouts, batches and the epilogue.
      {"wg128x256_s4_c2_cl2x1_bf16_colB_epilogue", testing::wgmma_config(128, 256, 4, 2, 2, 1),
       Problem{"matmul", DType::bf16, DType::bf16, {4096, 4096, 4096},
               {{"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}}},
      {"wg256x128_s4_c2_cl1x2_f16_colA", testing::wgmma_config(256, 128, 4, 2, 1, 2),
       Problem{"matmul", DType::f16, DType::f16, {1000, 1000, 1000}, {{"a", "col"}}}},
      {"wg192x128_s4_c3_colA_colB_f32_batch", testing::wgmma_config(192, 128, 4, 3, 1, 1, 1),
       Problem{"matmul", DType::bf16, DType::f32, {4, 300, 520, 136}, {{"a", "col"}, {"b", "col"}, {"act", "silu"}}}},
      {"wg128x128_s4_c2_split4_colB_bias", testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 4),
       Problem{"matmul", DType::bf16, DType::bf16, {1000, 1000, 1000}, {{"b", "col"}, {"bias", "1"}}}},
      // Tiles fitted to the waves of x @ W^T: 176 (C's last box partial), 224 with a tail split.
      {"wg128x176_s4_c2_cl2x1_colB_bf16_epilogue", testing::wgmma_config(128, 176, 4, 2, 2, 1),
       Problem{"matmul", DType::bf16, DType::bf16, {1024, 14336, 4096},
               {{"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}}},
      {"wg128x224_s4_c2_cl2x1_colB_f16_f32_tail", testing::wgmma_config(128, 224, 4, 2, 2, 1, 8, 2),
       Problem{"matmul", DType::f16, DType::f32, {1000, 5000, 520}, {{"b", "col"}}}},
      // Ping-pong (two consumers taking whole tiles in turn): the default's 128x176 with the
      // epilogue, the widest (128x192) with fp32 C and A column-major, a tail split.
      {"wg128x176_s5_pingpong_cl2x1_colB_bf16_epilogue",
       testing::wgmma_config(128, 176, 5, 2, 2, 1, 8, 1, 0, 0, 0, 256, 1),
       testing::x_times_w_t({1024, 14336, 4096}, DType::bf16, DType::bf16,
                            {{"act", "silu"}, {"bias", "1"}, {"residual", "1"}})},
      {"wg128x192_s4_pingpong_colA_f16_f32", testing::wgmma_config(128, 192, 4, 2, 2, 1, 8, 1, 0, 0, 0, 256, 1),
       Problem{"matmul", DType::f16, DType::f32, {1000, 1000, 1000}, {{"a", "col"}}}},
      {"wg128x128_s4_pingpong_tail_bf16", testing::wgmma_config(128, 128, 4, 2, 1, 1, 8, 2, 0, 0, 0, 256, 1),
       matmul_problem(1000, 2750, 520, DType::bf16, DType::bf16)},
      // swap_ab at 17-64 rows of x @ W^T: clusters of 4 along the weight sharing the
      // activations (the default where the tiles leave no room for K slices), and 2 x 2.
      {"wg64x32_s16_cl4x1_swap_colB_bf16", testing::wgmma_config(64, 32, 16, 1, 4, 1, 8, 1, 0, 1),
       testing::x_times_w_t({32, 11008, 4096})},
      {"wg64x64_s13_cl4x1_swap_colB_f16_f32_epilogue", testing::wgmma_config(64, 64, 13, 1, 4, 1, 8, 1, 0, 1),
       testing::x_times_w_t({2, 48, 5000, 1000}, DType::f16, DType::f32, {{"act", "silu"}, {"bias", "1"}})},
      {"wg64x32_s16_cl2x2_swap_bf16", testing::wgmma_config(64, 32, 16, 1, 2, 2, 8, 1, 0, 1),
       matmul_problem(45, 2201, 5608, DType::bf16, DType::bf16)},
      // fp32 in, as tf32: B transposed first; swap_ab; A transposed and B padded, split K.
      {"wg128x256_s4_c2_cl2x1_tf32", testing::tf32_config(128, 256, 4, 2, 2, 1),
       matmul_problem(4096, 4096, 4096, DType::f32, DType::f32)},
      {"wg64x16_s8_swap_tf32_colB_bf16", testing::tf32_config(64, 16, 8, 1, 1, 1, 1, 1, 0, 1),
       Problem{"matmul", DType::f32, DType::bf16, {16, 4096, 4096}, {{"b", "col"}}}},
      {"wg128x128_s4_c2_split4_tf32_colA_colB_padded", testing::tf32_config(128, 128, 4, 2, 1, 1, 8, 4),
       Problem{"matmul", DType::f32, DType::f32, {1001, 1003, 999}, {{"a", "col"}, {"b", "col"}}}},
      // A column-major A read in place (through registers), no swap.
      {"wg128x256_s4_c2_cl1x2_tf32_colA_colB", testing::tf32_config(128, 256, 4, 2, 1, 2),
       Problem{"matmul", DType::f32, DType::f32, {4096, 4096, 4096}, {{"a", "col"}, {"b", "col"}}}},
      // A row-major B read in place under swap_ab (the kernel's A, through registers; C^T out
      // transposed): wide tiles in a pair, one consumer of two m64 tiles, the narrow tiles.
      {"wg128x256_s4_c2_cl1x2_swap_tf32_rowB", testing::tf32_config(128, 256, 4, 2, 1, 2, 8, 1, 0, 1),
       matmul_problem(4096, 4096, 4096, DType::f32, DType::f32)},
      {"wg128x192_s4_c2_swap_tf32_rowB_bf16_epilogue", testing::tf32_config(128, 192, 4, 2, 1, 1, 8, 1, 0, 1),
       Problem{"matmul", DType::f32, DType::bf16, {2, 1000, 777, 520}, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}}},
      {"wg128x128_s4_c1_swap_tf32_rowB", testing::tf32_config(128, 128, 4, 1, 1, 1, 8, 1, 0, 1),
       matmul_problem(300, 500, 200, DType::f32, DType::f32)},
      {"wg64x16_s8_swap_tf32_rowB_split4", testing::tf32_config(64, 16, 8, 1, 1, 1, 1, 4, 0, 1),
       matmul_problem(16, 4096, 4096, DType::f32, DType::f32)},
      // Wide swapped tiles in K slices (partials transposed), three consumers of 192 rows.
      {"wg128x128_s4_c2_swap_tf32_rowB_split8", testing::tf32_config(128, 128, 4, 2, 1, 1, 8, 8, 0, 1),
       matmul_problem(512, 512, 16384, DType::f32, DType::f32)},
      {"wg192x192_s3_c3_cl2x1_swap_tf32_rowB", testing::tf32_config(192, 192, 3, 3, 2, 1, 1, 1, 0, 1),
       matmul_problem(3000, 3000, 3000, DType::f32, DType::f32)},
      // A row-major weight off 16 bytes read in row phases (tiles of BM - 8 of its columns):
      // one and two 64-row blocks of it, clusters of 4 and 2 sharing A, A column-major with the
      // epilogue, K slices.
      {"wg64x64_s8_cl4x1_swap_phased", testing::wgmma_config(64, 64, 8, 1, 4, 1, 8, 1, 0, 1),
       matmul_problem(40, 4906, 9568)},
      {"wg128x32_s6_cl2x1_swap_phased_colA_epilogue_split2", testing::wgmma_config(128, 32, 6, 1, 2, 1, 8, 2, 0, 1),
       Problem{"matmul", DType::f16, DType::f32, {30, 3001, 2000}, {{"a", "col"}, {"act", "silu"}, {"bias", "1"}, {"residual", "1"}}}},
      // Swapped tiles of 80-112 rows of M (wgmma n80, n96, n112): 2 x 2 and 4 x 1 clusters, x @
      // W^T with the epilogue, K slices (a tuner's choice).
      {"wg128x112_s5_c2_cl2x2_swap_mid", testing::wgmma_config(128, 112, 5, 2, 2, 2, 8, 1, 0, 1, 0, 0),
       matmul_problem(618, 2544, 12240)},
      {"wg128x96_s6_c2_cl4x1_swap_mid_epilogue", testing::wgmma_config(128, 96, 6, 2, 4, 1, 8, 1, 0, 1, 0, 0),
       Problem{"matmul", DType::f16, DType::bf16, {90, 9000, 5000}, {{"b", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}}},
      {"wg128x80_s6_c2_cl2x1_swap_mid_split2", testing::wgmma_config(128, 80, 6, 2, 2, 1, 8, 2, 0, 1, 0, 0),
       matmul_problem(72, 5000, 3000)},
      // (v43) Clusters of 8 whose multicast boxes of M's rows overlap (wgmma n104, n88).
      {"wg128x104_s5_c2_cl4x2_swap_mid", testing::wgmma_config(128, 104, 5, 2, 4, 2, 8, 1, 0, 1, 0, 0),
       matmul_problem(618, 2544, 12240)},
      {"wg128x88_s6_c2_cl4x1_swap_mid_f16", testing::wgmma_config(128, 88, 6, 2, 4, 1, 8, 1, 0, 1, 0, 0),
       Problem{"matmul", DType::f16, DType::bf16, {86, 12000, 3000}, {{"b", "col"}}}},
  };
}

void PrintTo(const SampleCase& sample, std::ostream* out) {
  *out << sample.label << " (" << sample.config.text() << ", " << sample.problem.key() << ")";
}

// Every kernel that any surviving config of a family's space would compile, for problems across
// its regimes (matmul: x @ W^T at 1-64 rows, a row-major weight, a column-major A, fp32 as
// tf32, padded rows, a narrow N, K-heavy, batches with the epilogue; every row op, multi_sum,
// attention forward and backward), instantiated by NVRTC's front end on both architectures: a
// config reject() lets through whose kernel fails a static_assert would fail to compile in
// every sweep that draws it (a 16-column tile in clusters of 4 did, caught only by the GPU
// tests: docs/perf/matmul.md v34). Front end only: ~5 ms a kernel, where a full compile takes
// ~0.3 s; ~12000 kernels in ~60 s on 16 cores.
TEST(SpaceInstantiationTest, EverySurvivingConfigsKernelsInstantiate) {
  using enum DType;
  auto rows = [](const char* op, DType dtype, std::int64_t count, std::int64_t length,
                 ProblemOptions options = {}) {
    return Problem{op, dtype, dtype, {count, length}, std::move(options)};
  };
  const std::vector<Problem> problems = {
      matmul_problem(4096, 4096, 4096),
      testing::x_times_w_t({1, 4096, 4096}),
      testing::x_times_w_t({32, 11008, 4096}),
      testing::x_times_w_t({2, 17, 1000, 1001}, f16, f32, {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}),
      matmul_problem(48, 6000, 2000),
      Problem{"matmul", bf16, bf16, {4096, 1, 4096}, {{"b", "col"}}},
      Problem{"matmul", f16, f32, {2, 300, 520, 136}, {{"a", "col"}, {"act", "silu"}, {"bias", "1"}}},
      matmul_problem(257, 1031, 517, f32, f32),
      testing::x_times_w_t({40, 3000, 1000}, f32, bf16),
      testing::x_times_w_t({1024, 16, 4096}),
      matmul_problem(512, 512, 16384),
      matmul_problem(2, 6133, 1472),
      // A row-major weight off 16 bytes, read in row phases by swapped tiles (padded for the
      // others): A row-major, and column-major with the epilogue.
      matmul_problem(40, 4906, 9568),
      Problem{"matmul", f16, f32, {40, 1001, 777}, {{"a", "col"}, {"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}},
      rows("softmax", bf16, 4096, 1000),
      rows("softmax", f32, 100, 32768),
      rows("layernorm", bf16, 4096, 4096),
      rows("layernorm", f16, 1000, 777, {{"bias", "0"}, {"stats", "1"}}),
      rows("rmsnorm", f32, 2048, 5120, {{"weight", "0"}}),
      rows("layernorm_act_residual", bf16, 4096, 1024, {{"act", "gelu"}}),
      rows("rmsnorm_act_residual", f16, 512, 8192, {{"act", "silu"}, {"stats", "1"}}),
      rows("softmax_backward", bf16, 4096, 1000),
      rows("layernorm_backward", bf16, 2048, 4096),
      rows("rmsnorm_backward", f32, 1000, 3000, {{"weight", "0"}}),
      Problem{"multi_sum", f32, f32, {64, 4096}},
      Problem{"multi_sum", bf16, f32, {1000, 256}, {{"mean", "1"}}},
      Problem{"attention", bf16, bf16, {2, 8, 1024, 128}},
      Problem{"attention", f16, f16, {1, 16, 4, 300, 1000, 64}, {{"causal", "1"}}},
      Problem{"attention_backward", bf16, bf16, {2, 8, 1024, 128}},
      Problem{"attention_backward", f16, f16, {1, 8, 2, 257, 513, 72}, {{"causal", "1"}, {"layout", "bhsd"}}},
  };
  std::map<std::string, std::vector<Config>> spaces;
  for (const Problem& problem : problems)
    if (!spaces.count(problem.op)) spaces[problem.op] = find_family(problem.op).enumerate();
  // One translation unit per distinct rendered text (what it includes, and its headers), with
  // every kernel its configs name; built per problem and architecture at once.
  struct Units {
    std::map<std::string, RenderedSource> sources;
    std::map<std::string, std::set<std::string>> kernels;
    std::set<std::string> of_problem;  // every kernel the problem's survivors name
  };
  auto collect = [&](const Problem& problem, const DeviceTarget& device) {
    const Family& family = find_family(problem.op);
    Units units;
    std::set<std::vector<std::string>> seen;
    for (const Config& config : spaces.at(problem.op)) {
      if (family.reject(config, problem, device)) continue;
      if (!seen.insert(family.kernel_expressions(config, problem)).second) continue;
      RenderedSource source = render(family, config, problem);
      std::string key = source.text.substr(source.text.find("\n#include"));
      for (const auto& [name, text] : source.headers) key += "\n" + name;
      units.kernels[key].insert(source.kernel_expressions.begin(), source.kernel_expressions.end());
      units.of_problem.insert(source.kernel_expressions.begin(), source.kernel_expressions.end());
      units.sources.emplace(key, std::move(source));
    }
    return units;
  };
  std::map<std::string, std::set<std::string>> by_family;  // kernels, by family and arch
  std::size_t checked = 0;
  for (const char* arch : {"sm_90a", "sm_80"}) {
    const DeviceTarget device = DeviceTarget::assumed_for_arch(arch);
    std::vector<std::future<Units>> collecting;
    for (const Problem& problem : problems)
      collecting.push_back(std::async(std::launch::async, collect, std::cref(problem), std::cref(device)));
    Units all;
    for (std::size_t i = 0; i < problems.size(); ++i) {
      Units units = collecting[i].get();
      EXPECT_FALSE(units.of_problem.empty()) << problems[i].key() << " on " << arch;
      for (const std::string& kernel : units.of_problem)
        by_family[find_family(problems[i].op).name()].insert(std::string(arch) + " " + kernel);
      for (auto& [key, kernels] : units.kernels) all.kernels[key].insert(kernels.begin(), kernels.end());
      all.sources.merge(units.sources);
    }
    // At most 128 kernels a program; NVRTC runs them mostly one at a time.
    std::vector<RenderedSource> programs;
    for (const auto& [key, source] : all.sources) {
      const std::vector<std::string> kernels(all.kernels[key].begin(), all.kernels[key].end());
      for (std::size_t first = 0; first < kernels.size(); first += 128) {
        programs.push_back(source);
        programs.back().kernel_expressions.assign(
            kernels.begin() + first, kernels.begin() + std::min(first + 128, kernels.size()));
      }
      checked += kernels.size();
    }
    std::vector<std::future<std::string>> checking;
    for (const RenderedSource& program : programs)
      checking.push_back(std::async(std::launch::async, [&program, arch] {
        try {
          check_instantiation(program, arch);
          return std::string();
        } catch (const Error& error) {
          return std::string(error.what());
        }
      }));
    for (std::future<std::string>& result : checking) EXPECT_EQ(result.get(), "") << arch;
  }
  for (const auto& [family, kernels] : by_family)
    std::cout << "[ info     ] " << family << ": " << kernels.size() << " kernels\n";
  std::cout << "[ info     ] " << checked << " kernels instantiated\n";
  EXPECT_GT(by_family["matmul"].size(), 5000u);
}

// A config reject() lets through whose kernel fails a static_assert is what the check above
// catches: the front end reports it.
TEST(SpaceInstantiationTest, AFailingStaticAssertIsReported) {
  const RenderedSource unsliceable = render(
      matmul(), testing::wgmma_config(64, 16, 6, 1, 4, 1, 1, 1, 0, 1), testing::x_times_w_t({16, 4096, 4096}));
  try {
    check_instantiation(unsliceable, "sm_90a");
    ADD_FAILURE() << "the 4-row multicast slices instantiated";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("multicast slices are whole swizzle rows"), std::string::npos)
        << error.what();
  }
}

class SpaceSampleCompileTest
    : public ::testing::TestWithParam<std::tuple<SampleCase, const char*>> {};

TEST_P(SpaceSampleCompileTest, CompilesWithoutSpills) {
  const auto& [sample, arch] = GetParam();
  DeviceTarget device = DeviceTarget::assumed_for_arch(arch);
  ASSERT_NO_THROW(matmul().validate(sample.problem));
  auto reason = matmul().reject(sample.config, sample.problem, device);
  ASSERT_FALSE(reason.has_value())
      << "the sample must be a member of the pruned space: " << *reason;
  CompiledKernel kernel;
  try {
    kernel = compile(render(matmul(), sample.config, sample.problem), arch);
  } catch (const Error& error) {
    FAIL() << sample.config.text() << " for " << arch << ":\n" << error.what();
  }
  EXPECT_FALSE(kernel.cubin.bytes.empty());
  EXPECT_GT(kernel.resources.registers, 0) << kernel.log;
  EXPECT_EQ(kernel.resources.stack_frame_bytes, 0) << kernel.log;
  testing::expect_clean_log(kernel, sample.config.text() + " for " + arch);
  // __launch_bounds__(threads): registers * threads fit the register file.
  const int variant = sample.config.at("variant");
  const int threads = variant == 1   ? (sample.config.at("consumers") + 1) * 128
                      : variant >= 2 ? sample.config.at("warps") * 32
                                     : sample.config.at("warps_m") * sample.config.at("warps_n") * 32;
  EXPECT_LE(kernel.resources.registers * threads, device.regs_per_block) << kernel.log;
}

INSTANTIATE_TEST_SUITE_P(
    Matmul, SpaceSampleCompileTest,
    ::testing::Combine(::testing::ValuesIn(space_sample()), ::testing::Values("sm_80", "sm_90a")),
    [](const ::testing::TestParamInfo<SpaceSampleCompileTest::ParamType>& info) {
      std::string arch = std::get<1>(info.param);
      return std::string(std::get<0>(info.param).label) + "_" + arch;
    });

INSTANTIATE_TEST_SUITE_P(
    Wgmma, SpaceSampleCompileTest,
    ::testing::Combine(::testing::ValuesIn(wgmma_sample()), ::testing::Values("sm_90a")),
    [](const ::testing::TestParamInfo<SpaceSampleCompileTest::ParamType>& info) {
      return std::string(std::get<0>(info.param).label) + "_sm_90a";
    });

}  // namespace
}  // namespace tilesmith
