// The runtime's host cost per warm call, against a raw launch of the same kernel: 16x16x16 bf16
// matmul (the default config, so the comparison needs no tuning), 100k calls each, enqueued in
// batches of 500 (below the launch queue's depth, so the host never waits on the GPU) with the
// host clock around each batch's enqueueing only. "raw" is the driver stage's launch of the
// plan the runtime would build (ReadyKernel::run: cuLaunchKernel(Ex) per step), built once with
// its tensor maps encoded. "runtime, new output" writes to one of 16 outputs in turn, as a
// program whose allocator hands out a fresh buffer per call does: the plan is rebuilt each call.
//
//   dispatch_overhead [DATABASE]
//
// Prints microseconds per call for both and their difference (issue 16's bar: <= 1 us).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "driver/cuda_driver.hpp"
#include "driver/gpu_objects.hpp"
#include "generator/compiled_kernel.hpp"
#include "generator/rendered_source.hpp"
#include "templates/registry.hpp"
#include "tilesmith/runtime.hpp"
#include "tuner/workbench.hpp"

using namespace tilesmith;

int main(int argc, char** argv) {
  std::string why;
  if (!driver::gpu_available(&why)) {
    std::printf("dispatch_overhead: skipped: %s\n", why.c_str());
    return 0;
  }
  try {
    const std::string database = argc > 1 ? argv[1] : "dispatch_overhead.db";
    Runtime runtime({.database = database});
    const DeviceTarget device = driver::describe_device(0);
    const Family& family = find_family("matmul");
    const Problem problem{"matmul", DType::bf16, DType::bf16, {16, 16, 16}};
    tuner::Workbench bench(family, problem, device);
    bench.refresh_inputs(3);
    const auto& address = bench.tensor_addresses();
    MatmulArgs args;
    args.a = reinterpret_cast<const void*>(address[0]);
    args.b = reinterpret_cast<const void*>(address[1]);
    args.c = reinterpret_cast<void*>(address[2]);
    args.m = args.n = args.k = 16;
    const DispatchInfo info = runtime.describe_matmul(args);
    const Config config = Config::parse(info.config);
    const driver::Stream stream;
    LaunchPlan plan = bench.plan(config);
    driver::encode_tensor_maps(plan);  // raw: nothing left to do per launch but the launch
    const driver::ReadyKernel raw = driver::load_kernel(compile(render(family, config, problem), device.arch()),
                                                        plan, "raw");
    constexpr int kBatch = 500, kBatches = 200;
    auto per_call_us = [&](auto&& call) {
      for (int i = 0; i < 2000; ++i) call();  // warm
      stream.synchronize("warming up");
      std::vector<double> batches;
      for (int b = 0; b < kBatches; ++b) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < kBatch; ++i) call();
        const auto stop = std::chrono::steady_clock::now();
        batches.push_back(std::chrono::duration<double, std::micro>(stop - start).count() / kBatch);
        stream.synchronize("a batch");
      }
      std::sort(batches.begin(), batches.end());
      return batches[batches.size() / 2];  // the median batch
    };
    const double through_runtime = per_call_us([&] { runtime.matmul(args, stream.get()); });
    std::vector<driver::DeviceBuffer> outputs;
    for (int i = 0; i < 16; ++i) outputs.emplace_back(16 * 16 * 2, "a rotating output");
    int turn = 0;
    const double new_output = per_call_us([&] {
      MatmulArgs moved = args;
      moved.c = reinterpret_cast<void*>(outputs[static_cast<std::size_t>(turn++ % 16)].address());
      runtime.matmul(moved, stream.get());
    });
    const double direct = per_call_us([&] { raw.run(plan, stream.get()); });
    std::printf("config %s\n", info.config.c_str());
    std::printf("host us per call (median of %d batches of %d): runtime %.2f, raw launch %.2f, "
                "the runtime's own %.2f\n",
                kBatches, kBatch, through_runtime, direct, through_runtime - direct);
    std::printf("with a new output address every call: runtime %.2f, the runtime's own %.2f\n",
                new_output, new_output - direct);
    // Where a rebuilt plan's time goes: the family's plan() and the driver's tensor map encoding
    // (host work only, no launch).
    auto host_us = [](auto&& work) {
      constexpr int kCalls = 20000;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < kCalls; ++i) work();
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count() / kCalls;
    };
    int maps = 0;
    for (const LaunchStep& step : bench.plan(config).all()) maps += step.args.tensor_map_count;
    volatile int sink = 0;
    const double planning = host_us([&] { sink = sink + bench.plan(config).step_count; });
    const LaunchPlan recipe = bench.plan(config);
    const double encoding = host_us([&] {
      LaunchPlan encoded = recipe;
      driver::encode_tensor_maps(encoded);
      sink = sink + encoded.step_count;
    });
    std::printf("a rebuilt plan: the family's plan() %.2f us, copying and encoding its %d tensor "
                "maps %.2f us\n", planning, maps, encoding);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "dispatch_overhead: %s\n", error.what());
    return 2;
  }
}
