// GPU: multi_sum's kernels against its reference, the reference against the CPU, and the
// runtime on a table the caller built: unaligned tensors, means, and a wrong total that must
// give NaN rather than a write out of bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "generator/compiled_kernel.hpp"
#include "support/test_support.hpp"
#include "templates/reductions/multi_sum_params.h"
#include "templates/registry.hpp"
#include "tilesmith/runtime.hpp"
#include "tuner/workbench.hpp"

namespace tilesmith {
namespace {

Problem sums(std::int64_t count, std::int64_t length, DType in = DType::f32, DType out = DType::f32,
             ProblemOptions options = {}) {
  return Problem{"multi_sum", in, out, {count, length}, std::move(options)};
}

class GpuMultiSum : public ::testing::Test {
 protected:
  void SetUp() override {
    TILESMITH_REQUIRE_GPU();
    driver::make_current(0);
    device_ = driver::describe_device(0);
  }
  DeviceTarget device_;
};

TEST_F(GpuMultiSum, ReferenceMatchesCpuLoop) {
  for (const Problem& problem : {sums(3, 4, DType::f32, DType::f32, {{"mean", "1"}}),
                                 sums(50, 1024, DType::bf16, DType::f32), sums(1, 1, DType::f16, DType::f16)}) {
    const Family& family = find_family("multi_sum");
    tuner::Workbench bench(family, problem, device_);
    bench.refresh_inputs(21);
    const std::vector<float> gpu = bench.reference_output();
    const std::vector<double> cpu = family.reference_cpu(problem, {bench.download(0), bench.download(2)});
    ASSERT_EQ(gpu.size(), cpu.size());
    for (std::size_t i = 0; i < cpu.size(); ++i)
      EXPECT_NEAR(gpu[i], cpu[i], 1e-5 * (1 + std::abs(cpu[i]))) << problem.key() << " tensor " << i;
  }
}

TEST_F(GpuMultiSum, SampledConfigsMatchTheReference) {
  const Family& family = find_family("multi_sum");
  int checked = 0;
  for (const Problem& problem :
       {sums(1, 1), sums(7, 4, DType::f16, DType::f16), sums(2000, 1024, DType::bf16, DType::f32),
        sums(100, 65536, DType::f32, DType::f32, {{"mean", "1"}}), sums(4, 262144, DType::bf16, DType::bf16)}) {
    tuner::Workbench bench(family, problem, device_);
    std::vector<Config> valid;
    for (const Config& config : family.enumerate())
      if (!family.reject(config, problem, device_)) valid.push_back(config);
    ASSERT_FALSE(valid.empty()) << problem.key();
    const std::size_t step = std::max<std::size_t>(1, valid.size() / 6);
    for (std::size_t i = checked % step; i < valid.size(); i += step) {
      RenderedSource source = render(family, valid[i], problem);
      driver::ReadyKernel ready =
          driver::load_kernel(compile(source, device_.arch()), bench.plan(valid[i]), source.describe());
      bench.refresh_inputs(700 + checked);
      const tuner::Verification result = bench.verify(ready, valid[i]);
      EXPECT_TRUE(result.passed) << problem.key() << " [" << valid[i].text() << "]: " << result.detail;
      ++checked;
    }
  }
  EXPECT_GE(checked, 25);
}

TEST(GpuMultiSumRuntime, ACallersTableOfUnalignedTensorsAndAWrongTotal) {
  TILESMITH_REQUIRE_GPU();
  testing::TempDir dir;
  Runtime runtime({dir.file("sums.db")});
  driver::make_current(0);
  std::mt19937 random(3);
  std::uniform_int_distribution<long long> length_of(1, 50000);
  std::normal_distribution<float> normal;
  const int count = 300;
  std::vector<long long> offsets, lengths;
  long long total = 0, next = 1;  // the first tensor starts one float off 16 bytes
  for (int i = 0; i < count; ++i) {
    lengths.push_back(length_of(random));
    offsets.push_back(next);
    next += lengths.back() + (i % 3);  // gaps: starts off every boundary
    total += lengths.back();
  }
  std::vector<float> data(static_cast<std::size_t>(next));
  for (float& value : data) value = normal(random);
  driver::DeviceBuffer device_data(data.size() * 4, "multi_sum data");
  TILESMITH_CU(driver::api().cuMemcpyHtoD(device_data.address(), data.data(), data.size() * 4), "upload");
  std::vector<MultiSumEntry> table;
  for (int i = 0; i < count; ++i)
    table.push_back({reinterpret_cast<const void*>(device_data.address() + offsets[i] * 4), lengths[i]});
  driver::DeviceBuffer device_table(table.size() * sizeof(MultiSumEntry), "multi_sum table");
  TILESMITH_CU(driver::api().cuMemcpyHtoD(device_table.address(), table.data(), table.size() * sizeof table[0]),
               "upload table");
  driver::DeviceBuffer out(count * 4, "multi_sum out");
  for (bool mean : {false, true}) {
    runtime.multi_sum({reinterpret_cast<const void*>(device_table.address()), count, total, DType::f32,
                       DType::f32, reinterpret_cast<void*>(out.address()), mean});
    std::vector<float> got(count);
    TILESMITH_CU(driver::api().cuMemcpyDtoH(got.data(), out.address(), count * 4), "download");
    for (int i = 0; i < count; ++i) {
      double expected = 0;
      for (long long j = 0; j < lengths[i]; ++j) expected += data[static_cast<std::size_t>(offsets[i] + j)];
      if (mean) expected /= static_cast<double>(lengths[i]);
      EXPECT_NEAR(got[i], expected, 1e-4 * (std::sqrt(static_cast<double>(lengths[i])) + std::abs(expected)))
          << "tensor " << i << (mean ? " (mean)" : "");
    }
  }
  // A total far below the truth maps the call to a bucket whose workspace cannot hold the
  // table's chunks: the tensors past it read NaN, and nothing else is written.
  runtime.multi_sum({reinterpret_cast<const void*>(device_table.address()), count, count, DType::f32,
                     DType::f32, reinterpret_cast<void*>(out.address()), false});
  std::vector<float> got(count);
  TILESMITH_CU(driver::api().cuMemcpyDtoH(got.data(), out.address(), count * 4), "download");
  EXPECT_TRUE(std::isnan(got.back()));
  EXPECT_THROW(runtime.multi_sum({nullptr, count, total, DType::f32, DType::f32,
                                  reinterpret_cast<void*>(out.address()), false}),
               InvalidArgument);
}

}  // namespace
}  // namespace tilesmith
