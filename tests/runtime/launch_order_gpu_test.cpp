// Every plan's kernels start early behind the stream's previous kernel on sm_90 (a programmatic
// dependent launch, driver::Start::early), so every kernel of every family must wait for that
// kernel before it touches memory. Here the kernel before a call lets it start at once and
// writes the call's inputs only milliseconds later: a kernel that read before waiting would
// read the poison in their place. And the kernel before a call compares the call's outputs and
// workspace with what they held only milliseconds later: a kernel that wrote before waiting
// would have changed them under a kernel that may still read them (the call before's reduce
// reading its partials).
#include <gtest/gtest.h>

#include <vector>

#include "driver/gpu_objects.hpp"
#include "generator/compiled_kernel.hpp"
#include "support/attention_problems.hpp"
#include "support/matmul_configs.hpp"
#include "support/row_problems.hpp"
#include "support/test_support.hpp"
#include "templates/registry.hpp"
#include "tuner/workbench.hpp"

namespace tilesmith {
namespace {

using driver::api;

constexpr int kMaxCopies = 12;
struct LateCopyParams {  // late_copy's parameters below
  struct {
    std::uint64_t src, dst, halves;
  } copies[kMaxCopies];
  int count;
  std::uint64_t delay_ns;
};
struct SnapshotParams {
  std::uint64_t src, out;
};
struct LateCompareParams {  // late_compare's parameters below
  struct {
    std::uint64_t now, before, halves;
  } compares[kMaxCopies];
  int count;
  std::uint64_t delay_ns;
  std::uint64_t changed;
};

// late_copy lets the next launch start, then waits delay_ns before it copies (2-byte units:
// every tensor is a whole number of them). snapshot reads a word without waiting for the
// kernel before it: the control, which must see the poison. late_compare lets the next launch
// start, waits delay_ns, then counts the 2-byte units of each region that differ from its copy
// made before.
const char* kLateCopySource = R"(
struct Copy { const unsigned short* src; unsigned short* dst; unsigned long long halves; };
struct LateCopyParams { Copy copies[12]; int count; unsigned long long delay_ns; };
struct SnapshotParams { const unsigned* src; unsigned* out; };
__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__global__ void late_copy(const LateCopyParams p) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const unsigned long long start = now_ns();
  while (now_ns() - start < p.delay_ns) {}
  for (int c = 0; c < p.count; ++c)
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < p.copies[c].halves; i += (unsigned long long)gridDim.x * blockDim.x)
      p.copies[c].dst[i] = p.copies[c].src[i];
}
__global__ void snapshot(const SnapshotParams p) { *p.out = *p.src; }
struct Compare { const volatile unsigned short* now; const unsigned short* before;
                 unsigned long long halves; };
struct LateCompareParams { Compare compares[12]; int count; unsigned long long delay_ns;
                           unsigned* changed; };
__global__ void late_compare(const LateCompareParams p) {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  const unsigned long long start = now_ns();
  while (now_ns() - start < p.delay_ns) {}
  unsigned changed = 0;
  for (int c = 0; c < p.count; ++c)
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
         i < p.compares[c].halves; i += (unsigned long long)gridDim.x * blockDim.x)
      changed += p.compares[c].now[i] != p.compares[c].before[i];
  if (changed) atomicAdd(p.changed, changed);
}
)";

class GpuLaunchOrder : public ::testing::Test {
 protected:
  void SetUp() override {
    TILESMITH_REQUIRE_GPU();
    driver::make_current(0);
    device_ = driver::describe_device(0);
    RenderedSource source;
    source.family = "test";
    source.main_name = "late_copy.cu";
    source.text = kLateCopySource;
    source.kernel_expressions = {"late_copy", "snapshot", "late_compare"};
    source.hash = "launch-order-test";
    helpers_ = driver::load_kernel(compile(source, device_.arch()), 0, "late_copy");
  }

  // `problem` under `config` (default: the default config) run behind late_copy, which writes
  // every input 2 ms after the call's kernels may start; the output must match the reference.
  // Then behind late_compare, which 2 ms after they may start finds every output and the
  // workspace as they were (poisoned) before the call.
  void expect_waits(const Problem& problem, std::optional<Config> chosen = std::nullopt) {
    SCOPED_TRACE(problem.key());
    const Family& family = find_family(problem.op);
    const Config config = chosen ? *chosen : family.default_config(problem, device_);
    ASSERT_EQ(family.reject(config, problem, device_), std::nullopt) << config.text();
    tuner::Workbench bench(family, problem, device_);
    const RenderedSource source = render(family, config, problem);
    const LaunchPlan plan = bench.plan(config);
    driver::ReadyKernel ready =
        driver::load_kernel(compile(source, device_.arch()), plan, source.describe());
    // Before sm_90 nothing starts early, and the race below checks plain stream order.
    ASSERT_EQ(ready.starts_early, device_.cc_major >= 9);
    driver::Stream stream;
    // One run first: the module's first launch and the workspace are in place before the
    // timed race, so nothing on the host stalls between late_copy and the call.
    bench.refresh_inputs(11);
    ready.run(plan, stream.get());
    stream.synchronize("the warm-up run of " + source.describe());
    bench.refresh_inputs(12);

    // The inputs moved aside (late_copy without a delay) and poisoned (0xFF: NaN in every
    // float type, and a huge count or address in an integer table).
    const std::vector<TensorSpec> specs = family.tensors(problem);
    LateCopyParams save{}, late{};
    std::vector<driver::DeviceBuffer> saved;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      if (specs[i].is_output) continue;
      ASSERT_LT(late.count, kMaxCopies);
      const std::size_t bytes = specs[i].elements * dtype_size(specs[i].dtype);
      saved.emplace_back(bytes, "a copy of " + specs[i].name);
      const std::uint64_t at = bench.tensor_addresses()[i];
      save.copies[save.count++] = {at, saved.back().address(), bytes / 2};
      late.copies[late.count++] = {saved.back().address(), at, bytes / 2};
    }
    LaunchGeometry geometry;
    geometry.grid[0] = static_cast<unsigned>(device_.sm_count);
    geometry.block[0] = 256;
    // The late kernels run as one CTA, so that the call's CTAs find the other SMs free while it
    // runs: a CTA of the wgmma template takes a whole SM's registers, and behind a kernel on
    // every SM it could not have started early at all.
    LaunchGeometry one_cta;
    one_cta.block[0] = 256;
    helpers_.kernels.at(0).launch(geometry, KernelArgs::of(save), stream.get());
    for (int c = 0; c < late.count; ++c)
      TILESMITH_CU(api().cuMemsetD8Async(late.copies[c].dst, 0xFF, late.copies[c].halves * 2, stream.get()),
                   "poisoning an input");
    stream.synchronize("saving and poisoning the inputs");
    late.delay_ns = 2'000'000;
    helpers_.kernels.at(0).launch(one_cta, KernelArgs::of(late), stream.get());
    ready.run(plan, stream.get());
    stream.synchronize("running " + source.describe() + " behind late_copy");
    const tuner::Verification result = bench.check_output();
    EXPECT_TRUE(result.passed) << config.text() << ": " << result.detail;
    EXPECT_EQ(result.nonfinite, 0u) << config.text();

    // The outputs and the workspace poisoned and copied aside, then late_compare ahead of the
    // call: nothing of the call may change them before late_compare has ended.
    LateCopyParams keep{};
    LateCompareParams compare{};
    std::vector<driver::DeviceBuffer> before;
    auto watch = [&](std::uint64_t at, std::size_t bytes, const std::string& name) {
      ASSERT_LT(compare.count, kMaxCopies);
      TILESMITH_CU(api().cuMemsetD8Async(at, 0xFF, bytes, stream.get()), "poisoning " + name);
      before.emplace_back(bytes, "a copy of " + name);
      keep.copies[keep.count++] = {at, before.back().address(), bytes / 2};
      compare.compares[compare.count++] = {at, before.back().address(), bytes / 2};
    };
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (specs[i].is_output)
        ASSERT_NO_FATAL_FAILURE(watch(bench.tensor_addresses()[i],
                                      specs[i].elements * dtype_size(specs[i].dtype),
                                      specs[i].name));
    if (bench.workspace())
      ASSERT_NO_FATAL_FAILURE(watch(bench.workspace(), bench.workspace_bytes() / 2 * 2,
                                    "the workspace"));
    helpers_.kernels.at(0).launch(geometry, KernelArgs::of(keep), stream.get());
    driver::DeviceBuffer changed(4, "the count of changed units");
    TILESMITH_CU(api().cuMemsetD8Async(changed.address(), 0, 4, stream.get()), "zeroing the count");
    stream.synchronize("poisoning and saving the outputs and the workspace");
    compare.delay_ns = 2'000'000;
    compare.changed = changed.address();
    helpers_.kernels.at(2).launch(one_cta, KernelArgs::of(compare), stream.get());
    ready.run(plan, stream.get());
    stream.synchronize("running " + source.describe() + " behind late_compare");
    unsigned changed_units = 0;
    TILESMITH_CU(api().cuMemcpyDtoH(&changed_units, changed.address(), 4), "reading the count");
    EXPECT_EQ(changed_units, 0u) << config.text()
                                 << ": written before the kernel before it ended";
    const tuner::Verification again = bench.check_output();
    EXPECT_TRUE(again.passed) << config.text() << ": " << again.detail;
  }

  DeviceTarget device_;
  driver::ReadyKernel helpers_;
};

// The race is real: a kernel started early that does not wait reads the poison, 2 ms before
// late_copy writes the value.
TEST_F(GpuLaunchOrder, AKernelThatDoesNotWaitReadsThePoison) {
  if (device_.cc_major < 9) {  // no programmatic launch, so no race to show
    EXPECT_FALSE(helpers_.starts_early);
    return;
  }
  driver::DeviceBuffer value(4, "the value"), source(4, "the source"), seen(4, "what was seen");
  const unsigned written = 0x12345678u, poison = 0xFFFFFFFFu;
  TILESMITH_CU(api().cuMemcpyHtoD(source.address(), &written, 4), "writing the source");
  TILESMITH_CU(api().cuMemcpyHtoD(value.address(), &poison, 4), "poisoning the value");
  driver::Stream stream;
  LateCopyParams late{};
  late.copies[0] = {source.address(), value.address(), 2};
  late.count = 1;
  late.delay_ns = 2'000'000;
  LaunchGeometry one;
  helpers_.kernels.at(0).launch(one, KernelArgs::of(late), stream.get());
  const SnapshotParams snap{value.address(), seen.address()};
  helpers_.kernels.at(1).launch(one, KernelArgs::of(snap), stream.get(), driver::Start::early);
  stream.synchronize("the snapshot behind late_copy");
  unsigned got = 0, after = 0;
  TILESMITH_CU(api().cuMemcpyDtoH(&got, seen.address(), 4), "reading the snapshot");
  TILESMITH_CU(api().cuMemcpyDtoH(&after, value.address(), 4), "reading the value");
  EXPECT_EQ(got, poison) << "the snapshot ran after late_copy: the race this file tests is gone";
  EXPECT_EQ(after, written);
}

// Every template of the matmul family, as a plan's first kernel and behind its preparation.
TEST_F(GpuLaunchOrder, MatmulKernelsWaitForTheKernelBeforeThem) {
  using namespace testing;
  const auto bf16 = [](std::int64_t m, std::int64_t n, std::int64_t k) {
    return Problem{"matmul", DType::bf16, DType::bf16, {m, n, k}, {}};
  };
  expect_waits(x_times_w_t({16, 4096, 4096}));                       // decode
  expect_waits(x_times_w_t({1, 4096, 4096}));                        // gemv
  expect_waits(bf16(4, 3000, 4096), gemv_kn_config(4, 8, 8));        // gemv_kn
  expect_waits(bf16(1000, 1000, 1000));                              // wgmma, a pair cluster
  expect_waits(bf16(512, 512, 16384));                               // wgmma, split K + reduce
  expect_waits(bf16(4015, 1600, 2088));                              // wgmma, a tail split + reduce
  expect_waits(x_times_w_t({16, 14336, 4096}));                      // wgmma swap_ab
  expect_waits(bf16(1001, 999, 1003));                               // padding copy first
  expect_waits(bf16(40, 1001, 2000));                                // A's gather first (row phases)
  expect_waits(bf16(333, 517, 259), tile_config(128, 128, 32, 2, 4, 3));  // mma.sync
  expect_waits(x_times_w_t({16, 1500, 4096}), decode_config(16, 8, 2, 4));  // decode + reduce
  expect_waits(bf16(512, 512, 16384),                                // K slices summed in the grid
               wgmma_config(128, 128, 4, 2, 1, 1, 8, 8, 0, 0, 0, 0, 0, 1));
  expect_waits(x_times_w_t({48, 4096, 4096}));                       // swap_ab, K slices + reduce
  expect_waits(x_times_w_t({4174, 1, 696}));                         // gemv on C^T
  expect_waits(Problem{"matmul", DType::f32, DType::f32, {1000, 1000, 1000}, {}});  // tf32's twin
  expect_waits(x_times_w_t({1024, 4096, 4096}, DType::bf16, DType::bf16,  // bias and residual read
                           {{"act", "gelu"}, {"bias", "1"}, {"residual", "1"}}));
}

TEST_F(GpuLaunchOrder, ReductionKernelsWaitForTheKernelBeforeThem) {
  using namespace testing;
  expect_waits(rows("layernorm", 1000, 4096));
  expect_waits(rows("rmsnorm", 4096, 8192));
  expect_waits(rows("softmax", 333, 50000));
  expect_waits(rows("layernorm_backward", 4096, 1000));
  expect_waits(Problem{"multi_sum", DType::f32, DType::f32, {100, 131072}, {}});
}

TEST_F(GpuLaunchOrder, AttentionKernelsWaitForTheKernelBeforeThem) {
  using namespace testing;
  expect_waits(attention({2, 8, 1000, 128}));
  expect_waits(attention({2, 8, 1024, 64}, {{"causal", "1"}}));
  expect_waits(attention_backward({2, 8, 1000, 128}));
  expect_waits(attention_backward({2, 8, 1024, 64}));
}

}  // namespace
}  // namespace tilesmith
