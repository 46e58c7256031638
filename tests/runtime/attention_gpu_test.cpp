// The runtime's attention, forward and backward: cases against the reference, Q, K and V read
// as views of one packed QKV tensor, a backward fed by the runtime's own forward, and clear
// errors for arguments it cannot take.
#include <gtest/gtest.h>

#include <cstring>

#include "driver/gpu_objects.hpp"
#include "support/attention_problems.hpp"
#include "support/test_support.hpp"
#include "templates/registry.hpp"
#include "tilesmith/runtime.hpp"
#include "tuner/workbench.hpp"

namespace tilesmith {
namespace {

using testing::attention;
using testing::attention_backward;
using testing::TempDir;

// The runtime's arguments for `problem` on the bench's packed tensors.
AttentionArgs args_for(const tuner::Workbench& bench, const Problem& problem) {
  const auto& address = bench.tensor_addresses();
  AttentionArgs args;
  args.q = reinterpret_cast<const void*>(address[0]);
  args.k = reinterpret_cast<const void*>(address[1]);
  args.v = reinterpret_cast<const void*>(address[2]);
  args.o = reinterpret_cast<void*>(address[3]);
  args.lse = reinterpret_cast<float*>(address[4]);
  const auto& d = problem.shape;
  const bool self = d.size() == 4;
  args.batch = d[0];
  args.heads = d[1];
  args.kv_heads = self ? 0 : d[2];
  args.seq_q = self ? d[2] : d[3];
  args.seq_k = self ? 0 : d[4];
  args.head_dim = d.back();
  args.dtype = problem.dtype;
  args.causal = problem.option("causal") == "1";
  args.layout = problem.option("layout") == "bhsd" ? AttentionLayout::bhsd : AttentionLayout::bshd;
  return args;
}

TEST(GpuAttentionRuntime, EveryCaseMatchesTheReference) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("attention.db")});
  const std::vector<Problem> problems = {
      attention({2, 4, 300, 64}), attention({1, 8, 2, 100, 1000, 128}, {{"causal", "1"}}),
      attention({3, 2, 17, 72}, {{"layout", "bhsd"}}, DType::f16),
      attention({1, 4, 1, 500, 77, 256}, {{"causal", "1"}, {"layout", "bhsd"}})};
  std::uint64_t seed = 70;
  for (const Problem& problem : problems) {
    tuner::Workbench bench(find_family(problem.op), problem, driver::describe_device(0));
    bench.refresh_inputs(++seed);
    runtime.attention(args_for(bench, problem));
    TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the runtime's attention");
    const tuner::Verification result = bench.check_output();
    EXPECT_TRUE(result.passed) << problem.key() << ": " << result.detail;
    EXPECT_EQ(result.nonfinite, 0u) << problem.key();
    EXPECT_EQ(runtime.describe_attention(args_for(bench, problem)).source, KernelSource::memory);
  }
}

// Q, K and V as the three thirds of each row of a [batch][seq][3][heads][head_dim] tensor (the
// output of a fused QKV projection): only their row and batch strides differ from packed ones.
TEST(GpuAttentionRuntime, ViewsOfAPackedQkvTensorMatchTheReference) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("attention.db")});
  const std::int64_t b = 2, s = 130, h = 3, d = 64, row = h * d;
  const Problem problem = attention({b, h, s, d}, {{"causal", "1"}});
  tuner::Workbench bench(find_family(problem.op), problem, driver::describe_device(0));
  bench.refresh_inputs(91);
  // Interleave the bench's Q, K and V rows into one buffer.
  const std::size_t rows = static_cast<std::size_t>(b * s), row_bytes = static_cast<std::size_t>(row) * 2;
  std::vector<char> packed(rows * row_bytes), qkv(3 * packed.size());
  for (int t = 0; t < 3; ++t) {
    TILESMITH_CU(driver::api().cuMemcpyDtoH(packed.data(), bench.tensor_addresses()[t], packed.size()),
                 "reading a bench input");
    for (std::size_t r = 0; r < rows; ++r)
      std::memcpy(&qkv[(3 * r + t) * row_bytes], &packed[r * row_bytes], row_bytes);
  }
  driver::DeviceBuffer buffer(qkv.size(), "the QKV tensor");
  TILESMITH_CU(driver::api().cuMemcpyHtoD(buffer.address(), qkv.data(), qkv.size()), "writing QKV");
  AttentionArgs args = args_for(bench, problem);
  const auto* base = reinterpret_cast<const std::uint16_t*>(buffer.address());
  args.q = base;
  args.k = base + row;
  args.v = base + 2 * row;
  for (AttentionArgs::Strides* strides : {&args.q_strides, &args.k_strides, &args.v_strides})
    *strides = {s * 3 * row, 0, 3 * row};
  runtime.attention(args);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running attention on QKV views");
  const tuner::Verification result = bench.check_output();
  EXPECT_TRUE(result.passed) << result.detail;
  EXPECT_EQ(result.nonfinite, 0u);
}

TEST(GpuAttentionRuntime, RefusesWhatItCannotTake) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("attention.db")});
  const Problem problem = attention({1, 2, 64, 64});
  tuner::Workbench bench(find_family(problem.op), problem, driver::describe_device(0));
  const AttentionArgs good = args_for(bench, problem);
  auto expect_refused = [&](AttentionArgs args, const std::string& message) {
    testing::expect_invalid_argument([&] { runtime.attention(args); }, message);
  };
  AttentionArgs args = good;
  args.k = nullptr;
  expect_refused(args, "K is a null pointer");
  args = good;
  args.o = static_cast<char*>(args.o) + 2;
  expect_refused(args, "O is not 16-byte aligned");
  args = good;
  args.q_strides.row = 130;
  expect_refused(args, "multiples of 8 elements");
  args = good;
  args.k_strides.head = -64;
  expect_refused(args, "non-negative multiples of 8 elements");
  args = good;
  args.o_strides.row = 32;
  expect_refused(args, "O's rows are 32 elements apart, less than the head dim 64");
  args = good;
  args.head_dim = 59;
  expect_refused(args, "head dim 59 is not supported");
  args = good;
  args.dtype = DType::f32;
  expect_refused(args, "dtype f32 is not supported");
  args = good;
  args.kv_heads = 3;
  expect_refused(args, "3 kv heads do not divide 2 query heads");
  args = good;
  args.seq_q = 0;
  expect_refused(args, "each must be positive");
}

// The backward's arguments on a backward bench's packed tensors (Q, K, V, O, dO, lse, dQ, dK, dV).
AttentionBackwardArgs backward_args_for(const tuner::Workbench& bench, const Problem& problem) {
  const auto& address = bench.tensor_addresses();
  AttentionBackwardArgs args;
  args.forward = args_for(bench, problem);
  args.forward.lse = reinterpret_cast<float*>(address[5]);
  args.d_o = reinterpret_cast<const void*>(address[4]);
  args.dq = reinterpret_cast<void*>(address[6]);
  args.dk = reinterpret_cast<void*>(address[7]);
  args.dv = reinterpret_cast<void*>(address[8]);
  return args;
}

TEST(GpuAttentionRuntime, EveryBackwardCaseMatchesTheReference) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("attention.db")});
  const std::vector<Problem> problems = {
      attention_backward({2, 4, 300, 64}),
      attention_backward({1, 8, 2, 100, 1000, 128}, {{"causal", "1"}}),
      attention_backward({3, 2, 17, 72}, {{"layout", "bhsd"}}, DType::f16),
      attention_backward({1, 4, 1, 500, 77, 256}, {{"causal", "1"}, {"layout", "bhsd"}})};
  std::uint64_t seed = 170;
  for (const Problem& problem : problems) {
    tuner::Workbench bench(find_family(problem.op), problem, driver::describe_device(0));
    bench.refresh_inputs(++seed);
    runtime.attention_backward(backward_args_for(bench, problem));
    TILESMITH_CU(driver::api().cuCtxSynchronize(), "running the runtime's attention backward");
    const tuner::Verification result = bench.check_output();
    EXPECT_TRUE(result.passed) << problem.key() << ": " << result.detail;
    EXPECT_EQ(result.nonfinite, 0u) << problem.key();
    EXPECT_EQ(runtime.describe_attention_backward(backward_args_for(bench, problem)).source,
              KernelSource::memory);
  }
}

// Forward then backward, as training runs them: the runtime's forward writes O and the
// logsumexp into the backward's inputs, causal with more queries than keys (rows that see no
// key, lse = -inf) and grouped-query heads.
TEST(GpuAttentionRuntime, BackwardOfTheRuntimesOwnForwardMatchesTheReference) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("attention.db")});
  const Problem problem = attention_backward({2, 4, 2, 200, 150, 128}, {{"causal", "1"}});
  tuner::Workbench bench(find_family(problem.op), problem, driver::describe_device(0));
  bench.refresh_inputs(5);
  const AttentionBackwardArgs args = backward_args_for(bench, problem);
  runtime.attention(args.forward);  // over the bench's O and logsumexp
  runtime.attention_backward(args);
  TILESMITH_CU(driver::api().cuCtxSynchronize(), "running forward then backward");
  const tuner::Verification result = bench.check_output();
  EXPECT_TRUE(result.passed) << result.detail;
  EXPECT_EQ(result.nonfinite, 0u);
}

TEST(GpuAttentionRuntime, BackwardRefusesWhatItCannotTake) {
  TILESMITH_REQUIRE_GPU();
  TempDir dir;
  Runtime runtime({dir.file("attention.db")});
  const Problem problem = attention_backward({1, 2, 64, 64});
  tuner::Workbench bench(find_family(problem.op), problem, driver::describe_device(0));
  const AttentionBackwardArgs good = backward_args_for(bench, problem);
  auto expect_refused = [&](AttentionBackwardArgs args, const std::string& message) {
    testing::expect_invalid_argument([&] { runtime.attention_backward(args); }, message);
  };
  AttentionBackwardArgs args = good;
  args.forward.lse = nullptr;
  expect_refused(args, "attention_backward: lse (the forward's logsumexp) is a null pointer");
  args = good;
  args.d_o = nullptr;
  expect_refused(args, "dO is a null pointer");
  args = good;
  args.dk = static_cast<char*>(args.dk) + 8;
  expect_refused(args, "dK is not 16-byte aligned");
  args = good;
  args.dv_strides.row = 32;
  expect_refused(args, "dV's rows are 32 elements apart, less than the head dim 64");
  args = good;
  args.do_strides.batch = 12;
  expect_refused(args, "multiples of 8 elements");
  args = good;
  args.forward.head_dim = 1024;
  expect_refused(args, "head dim 1024 is not supported");
}

}  // namespace
}  // namespace tilesmith
