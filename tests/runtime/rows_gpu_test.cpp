// The runtime's row ops: every op against the reference, rows that are strided and start off
// vector boundaries, and clear errors for arguments an op cannot take.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "driver/gpu_objects.hpp"
#include "support/test_support.hpp"
#include "support/row_problems.hpp"
#include "templates/registry.hpp"
#include "tilesmith/runtime.hpp"
#include "tuner/workbench.hpp"

namespace tilesmith {
namespace {

using testing::TempDir;

using testing::rows;

RowOp row_op(const std::string& name) {
  if (name == "softmax") return RowOp::softmax;
  if (name == "layernorm") return RowOp::layernorm;
  if (name == "rmsnorm") return RowOp::rmsnorm;
  if (name == "layernorm_act_residual") return RowOp::layernorm_act_residual;
  return RowOp::rmsnorm_act_residual;
}

// The runtime's arguments for `problem` on the bench's tensors, in the family's order.
RowArgs args_for(const tuner::Workbench& bench, const Problem& problem) {
  const auto& address = bench.tensor_addresses();
  const std::vector<TensorSpec> specs = find_family(problem.op).tensors(problem);
  RowArgs args;
  args.op = row_op(problem.op);
  args.rows = problem.shape[0];
  args.cols = problem.shape[1];
  args.dtype = problem.dtype;
  args.out_dtype = problem.out_dtype;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    void* pointer = reinterpret_cast<void*>(address[i]);
    const std::string& name = specs[i].name;
    if (name == "x") args.x = pointer;
    if (name == "weight") args.weight = pointer;
    if (name == "bias") args.bias = pointer;
    if (name == "residual") args.residual = pointer;
    if (name == "y") args.y = pointer;
    if (name == "mean") args.mean = static_cast<float*>(pointer);
    if (name == "rstd") args.rstd = static_cast<float*>(pointer);
  }
  auto act = problem.options.find("act");
  if (act != problem.options.end())
    args.activation = act->second == "relu"   ? Activation::relu
                      : act->second == "gelu" ? Activation::gelu
                                              : Activation::silu;
  return args;
}

// The same for a backward op.
RowBackwardArgs backward_args_for(const tuner::Workbench& bench, const Problem& problem) {
  const auto& address = bench.tensor_addresses();
  const std::vector<TensorSpec> specs = find_family(problem.op).tensors(problem);
  RowBackwardArgs args;
  args.op = problem.op == "softmax_backward"     ? RowBackwardOp::softmax
            : problem.op == "layernorm_backward" ? RowBackwardOp::layernorm
                                                 : RowBackwardOp::rmsnorm;
  args.rows = problem.shape[0];
  args.cols = problem.shape[1];
  args.dtype = problem.dtype;
  args.out_dtype = problem.out_dtype;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    void* pointer = reinterpret_cast<void*>(address[i]);
    const std::string& name = specs[i].name;
    if (name == "x" || name == "y") args.x = pointer;
    if (name == "dy") args.dy = pointer;
    if (name == "weight") args.weight = pointer;
    if (name == "mean") args.mean = static_cast<const float*>(pointer);
    if (name == "rstd") args.rstd = static_cast<const float*>(pointer);
    if (name == "dx") args.dx = pointer;
    if (name == "dweight") args.dweight = pointer;
    if (name == "dbias") args.dbias = pointer;
  }
  return args;
}

TEST(GpuRowsRuntime, EveryOpMatchesTheReference) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("rows.db")});
  const std::vector<Problem> problems = {
      rows("softmax", 37, 1023), rows("softmax", 4, 65536, {}, DType::f32, DType::f32),
      rows("layernorm", 64, 4096, {{"stats", "1"}}),
      rows("layernorm", 3, 4097, {{"bias", "0"}}, DType::f16, DType::f32),
      rows("rmsnorm", 9, 300, {{"weight", "0"}, {"stats", "1"}}),
      rows("layernorm_act_residual", 17, 2048, {{"act", "gelu"}}),
      rows("rmsnorm_act_residual", 5, 131072, {{"act", "silu"}, {"stats", "1"}})};
  std::uint64_t seed = 40;
  for (const Problem& problem : problems) {
    tuner::Workbench bench(find_family(problem.op), problem, driver::describe_device(0));
    bench.refresh_inputs(++seed);
    runtime.rows(args_for(bench, problem));
    TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the runtime's " + problem.op);
    const tuner::Verification result = bench.check_output();
    EXPECT_TRUE(result.passed) << problem.key() << ": " << result.detail;
    EXPECT_EQ(runtime.describe_rows(args_for(bench, problem)).source, KernelSource::memory);
  }
}

TEST(GpuRowsRuntime, EveryBackwardOpMatchesTheReference) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("rows.db")});
  const std::vector<Problem> problems = {
      rows("softmax_backward", 37, 1023), rows("softmax_backward", 4, 65536, {}, DType::f32, DType::f32),
      rows("layernorm_backward", 4096, 1024), rows("layernorm_backward", 3, 4097, {{"weight", "0"}}, DType::f16, DType::f32),
      rows("rmsnorm_backward", 9, 300), rows("rmsnorm_backward", 5, 131072, {{"weight", "0"}})};
  std::uint64_t seed = 60;
  for (const Problem& problem : problems) {
    tuner::Workbench bench(find_family(problem.op), problem, driver::describe_device(0));
    // Twice on one stream: the column sums' workspace is reused by the second call.
    for (int call = 0; call < 2; ++call) {
      bench.refresh_inputs(++seed);
      runtime.rows_backward(backward_args_for(bench, problem));
      TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the runtime's " + problem.op);
      const tuner::Verification result = bench.check_output();
      EXPECT_TRUE(result.passed) << problem.key() << ": " << result.detail;
    }
    EXPECT_EQ(runtime.describe_rows_backward(backward_args_for(bench, problem)).source,
              KernelSource::memory);
  }
}

// Rows `stride` floats apart, starting `offset` floats into the buffer (off 16-byte
// boundaries), from and back to the host.
struct StridedRows {
  driver::DeviceBuffer buffer;
  std::int64_t rows, cols, stride, offset;
  StridedRows(std::int64_t r, std::int64_t c, std::int64_t s, std::int64_t o)
      : buffer(static_cast<std::size_t>(r * s + o) * 4, "strided rows"), rows(r), cols(c), stride(s), offset(o) {
    std::vector<float> nan(static_cast<std::size_t>(r * s + o), NAN);
    TILESMITH_CU(driver::api().cuMemcpyHtoD(buffer.address(), nan.data(), nan.size() * 4), "poisoning");
  }
  float* data() const { return reinterpret_cast<float*>(buffer.address()) + offset; }
  void upload(const std::vector<double>& packed) {
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) row[c] = static_cast<float>(packed[r * cols + c]);
      TILESMITH_CU(driver::api().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(data() + r * stride),
                                              row.data(), row.size() * 4),
                   "uploading a row");
    }
  }
  std::vector<double> download() const {
    std::vector<double> packed;
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (std::int64_t r = 0; r < rows; ++r) {
      TILESMITH_CU(driver::api().cuMemcpyDtoH(row.data(), reinterpret_cast<CUdeviceptr>(data() + r * stride),
                                              row.size() * 4),
                   "downloading a row");
      packed.insert(packed.end(), row.begin(), row.end());
    }
    return packed;
  }
};

// Standard normal values rounded to fp32, from a fixed seed.
struct NormalValues {
  std::mt19937 random;
  std::normal_distribution<double> normal;
  explicit NormalValues(unsigned seed) : random(seed) {}
  std::vector<double> operator()(std::int64_t n) {
    std::vector<double> v(static_cast<std::size_t>(n));
    for (double& value : v) value = static_cast<float>(normal(random));
    return v;
  }
};

// Every element written, and the relative error against the fp64 CPU reference within fp32's.
void expect_matches(const std::vector<double>& got, const std::vector<double>& expected) {
  ASSERT_EQ(got.size(), expected.size());
  double error = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(std::isfinite(got[i])) << "element " << i << " unwritten";
    error += (got[i] - expected[i]) * (got[i] - expected[i]);
    norm += expected[i] * expected[i];
  }
  EXPECT_LT(std::sqrt(error / norm), 1e-5);
}

TEST(GpuRowsRuntime, StridedRowsOffVectorBoundariesMatchTheCpuReference) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("rows.db")});
  driver::make_current(0);
  // More row groups than SMs: the default config runs the persistent grid and its ring.
  const std::int64_t r = 413, c = 1000;
  const Problem problem = rows("layernorm_act_residual", r, c, {{"act", "gelu"}, {"stats", "1"}},
                              DType::f32, DType::f32);
  NormalValues fresh(5);
  const std::vector<double> x = fresh(r * c), weight = fresh(c), bias = fresh(c), residual = fresh(r * c);
  StridedRows x_rows(r, c, 1003, 1), y_rows(r, c, 1001, 3), residual_rows(r, c, 1005, 2);
  StridedRows weight_row(1, c, c, 1), bias_row(1, c, c, 2), mean(1, r, r, 0), rstd(1, r, r, 1);
  x_rows.upload(x);
  residual_rows.upload(residual);
  weight_row.upload(weight);
  bias_row.upload(bias);
  RowArgs args;
  args.op = RowOp::layernorm_act_residual;
  args.x = x_rows.data();
  args.y = y_rows.data();
  args.rows = r;
  args.cols = c;
  args.dtype = DType::f32;
  args.weight = weight_row.data();
  args.bias = bias_row.data();
  args.residual = residual_rows.data();
  args.mean = mean.data();
  args.rstd = rstd.data();
  args.activation = Activation::gelu;
  args.x_stride = 1003;
  args.y_stride = 1001;
  args.residual_stride = 1005;
  EXPECT_NE(runtime.describe_rows(args).config.find("stages=2"), std::string::npos)
      << runtime.describe_rows(args).config;
  runtime.rows(args);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the strided layernorm");
  const std::vector<double> expected =
      find_family(problem.op).reference_cpu(problem, {x, weight, bias, residual});
  std::vector<double> got = y_rows.download();
  const std::vector<double> got_mean = mean.download(), got_rstd = rstd.download();
  got.insert(got.end(), got_mean.begin(), got_mean.end());
  got.insert(got.end(), got_rstd.begin(), got_rstd.end());
  expect_matches(got, expected);
  // The gaps between y's rows are untouched.
  float gap = 0;
  TILESMITH_CU(driver::api().cuMemcpyDtoH(&gap, reinterpret_cast<CUdeviceptr>(y_rows.data() + c), 4),
               "reading a gap");
  EXPECT_TRUE(std::isnan(gap));
}

// layernorm_backward on rows that are strided and start off vector boundaries (element-wise
// loads and stores), a weight off its vector boundary (read from global memory, not staged),
// dweight and dbias over them, against the CPU reference.
TEST(GpuRowsRuntime, StridedBackwardRowsMatchTheCpuReference) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("rows.db")});
  driver::make_current(0);
  // More row groups than the persistent grid's: the default config runs the ring.
  const std::int64_t r = 600, c = 1000;
  const Problem problem = rows("layernorm_backward", r, c, {}, DType::f32, DType::f32);
  NormalValues fresh(9);
  const std::vector<double> x = fresh(r * c), dy = fresh(r * c), weight = fresh(c), mean = fresh(r),
                            rstd = fresh(r);
  StridedRows x_rows(r, c, 1003, 1), dy_rows(r, c, 1005, 2), dx_rows(r, c, 1001, 3);
  StridedRows weight_row(1, c, c, 1), mean_row(1, r, r, 0), rstd_row(1, r, r, 1);
  StridedRows dweight(1, c, c, 3), dbias(1, c, c, 2);
  x_rows.upload(x);
  dy_rows.upload(dy);
  weight_row.upload(weight);
  mean_row.upload(mean);
  rstd_row.upload(rstd);
  RowBackwardArgs args;
  args.op = RowBackwardOp::layernorm;
  args.x = x_rows.data();
  args.dy = dy_rows.data();
  args.dx = dx_rows.data();
  args.rows = r;
  args.cols = c;
  args.dtype = DType::f32;
  args.weight = weight_row.data();
  args.mean = mean_row.data();
  args.rstd = rstd_row.data();
  args.dweight = dweight.data();
  args.dbias = dbias.data();
  args.x_stride = 1003;
  args.dy_stride = 1005;
  args.dx_stride = 1001;
  EXPECT_NE(runtime.describe_rows_backward(args).config.find("stages=1"), std::string::npos)
      << runtime.describe_rows_backward(args).config;
  runtime.rows_backward(args);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the strided layernorm_backward");
  const std::vector<double> expected =
      find_family(problem.op).reference_cpu(problem, {x, dy, weight, mean, rstd});
  std::vector<double> got = dx_rows.download();
  for (const StridedRows* sums : {&dweight, &dbias}) {
    const std::vector<double> values = sums->download();
    got.insert(got.end(), values.begin(), values.end());
  }
  expect_matches(got, expected);
}

TEST(GpuRowsRuntime, ArgumentsAnOpCannotTakeAreClearErrors) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("rows.db")});
  driver::DeviceBuffer buffer(1 << 20, "row buffers");
  auto* base = reinterpret_cast<char*>(buffer.address());
  RowArgs good;
  good.x = base;
  good.y = base + (1 << 19);
  good.rows = 4;
  good.cols = 64;
  auto expect_error = [&](RowArgs args, const std::string& message) {
    testing::expect_invalid_argument([&] { runtime.rows(args); }, message);
  };
  RowArgs args = good;
  args.weight = base;
  expect_error(args, "softmax takes no weight");
  args = good;
  args.op = RowOp::rmsnorm_act_residual;
  expect_error(args, "residual is a null pointer");
  args = good;
  args.op = RowOp::layernorm;
  args.rstd = reinterpret_cast<float*>(base);
  expect_error(args, "give mean and rstd together");
  args = good;
  args.x_stride = 63;
  expect_error(args, "row stride of x (63) is shorter than a row (64)");
  args = good;
  args.x = base + 1;
  expect_error(args, "x is not aligned to its 2-byte elements");
  args = good;
  args.cols = 262145;
  args.rows = 1;
  expect_error(args, "longer than the 262144");
  args = good;
  args.rows = 0;
  expect_error(args, "non-positive dimension");
  runtime.rows(good);  // the runtime is still usable
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running a softmax after the errors");

  RowBackwardArgs backward;
  backward.op = RowBackwardOp::layernorm;
  backward.x = base;
  backward.dy = base + (1 << 18);
  backward.dx = base + (1 << 19);
  backward.rows = 4;
  backward.cols = 64;
  backward.mean = reinterpret_cast<const float*>(base + (3 << 18));
  backward.rstd = backward.mean + 64;
  auto expect_backward_error = [&](RowBackwardArgs b, const std::string& message) {
    testing::expect_invalid_argument([&] { runtime.rows_backward(b); }, message);
  };
  RowBackwardArgs b = backward;
  b.weight = base;
  expect_backward_error(b, "give weight and dweight together");
  b = backward;
  b.mean = nullptr;
  expect_backward_error(b, "mean (the forward's statistics) is a null pointer");
  b = backward;
  b.op = RowBackwardOp::softmax;
  expect_backward_error(b, "softmax_backward takes no weight, mean, rstd");
  b = backward;
  b.op = RowBackwardOp::rmsnorm;
  b.mean = nullptr;
  b.dbias = base;
  expect_backward_error(b, "rmsnorm_backward takes no dbias");
  b = backward;
  b.dx = nullptr;
  expect_backward_error(b, "x, dy or dx is a null pointer");
  b = backward;
  b.dy_stride = 10;
  expect_backward_error(b, "row stride of dy (10) is shorter");
  b = backward;
  b.cols = 262145;
  b.rows = 1;
  expect_backward_error(b, "longer than the 262144");
  runtime.rows_backward(backward);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running a layernorm_backward after the errors");
}

}  // namespace
}  // namespace tilesmith
