// The GPU side of a trial, in the calling process: fresh random inputs, poisoned outputs, the
// candidate checked against the family's reference, then timed. The one verification routine
// and the one timing routine of tilesmith.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/gpu_objects.hpp"
#include "templates/family.hpp"

namespace tilesmith::tuner {

// Every output tensor is compared with the reference under its own tolerance; the figures are
// those of the output furthest past (or closest to) its bound.
struct Verification {
  bool passed = false;
  double rel_error = 0;        // ||out - ref|| / ||ref||
  std::uint64_t nonfinite = 0;  // NaN/Inf outputs, including unwritten (poisoned) elements
  double tolerance = 0;
  std::string detail;
};

struct TimingOptions {
  int warmup = 2;
  int min_repetitions = 10;
  int max_repetitions = 200;
  double target_ms = 150;  // aim for about this much timed work per candidate
  // Stop after the first few repetitions when slower than give_up_factor x best_ms.
  double best_ms = 0;
  double give_up_factor = 0;  // 0: never
};

struct Timing {
  double median_ms = 0, min_ms = 0, p10_ms = 0, p90_ms = 0;
  double spread = 0;  // (p90 - p10) / median
  int repetitions = 0;
  bool stopped_early = false;
};

// Buffers and support kernels for one problem on the current GPU.
class Workbench {
 public:
  // `device` is the current GPU (the support kernels are compiled for its architecture).
  Workbench(const Family& family, const Problem& problem, const DeviceTarget& device);
  ~Workbench();
  Workbench(const Workbench&) = delete;
  Workbench& operator=(const Workbench&) = delete;

  const Problem& problem() const { return problem_; }
  const std::vector<std::uint64_t>& tensor_addresses() const { return addresses_; }

  // Fills the inputs with fresh normal values from `seed` and poisons the outputs (NaN).
  void refresh_inputs(std::uint64_t seed);
  // What one call of `config` runs on this bench's tensors and workspace (grown to what the
  // config needs).
  LaunchPlan plan(const Config& config);
  // The workspace as the last plan() grew it (for tests running a plan of their own).
  std::uint64_t workspace() const { return workspace_.bytes() ? workspace_.address() : 0; }
  // Runs `kernel`'s plan for `config` once on the current inputs and compares the output with
  // the reference. Launch or execution errors propagate as Error (the caller classifies them).
  Verification verify(const driver::ReadyKernel& kernel, const Config& config);
  // Compares the output tensor as it is now (written by anyone, e.g. the runtime) with the
  // reference of the current inputs.
  Verification check_output();
  // Times one call of `config` (every launch of its plan, padding copies and reductions
  // included): CUDA events around each call, L2 flushed before each one (a read of a buffer
  // twice the L2's size, as the benchmarks flush), warm-up, median of repetitions.
  Timing time(const driver::ReadyKernel& kernel, const Config& config,
              const TimingOptions& options);

  // The reference outputs (fp32) of the current inputs, each output tensor's in turn, for tests.
  std::vector<float> reference_output();
  // Host copies of tensor `index` converted to double, for tests and CPU references.
  std::vector<double> download(std::size_t index);

 private:
  void run_reference();

  const Family& family_;
  Problem problem_;
  DeviceTarget device_;
  driver::DeviceBuffer workspace_;
  std::vector<TensorSpec> specs_;
  std::vector<driver::DeviceBuffer> buffers_;
  std::vector<std::uint64_t> addresses_;
  driver::DeviceBuffer reference_out_, totals_, l2_flush_;
  struct Output {
    std::size_t tensor;            // index into specs_
    std::size_t reference_offset;  // of its first element in reference_out_
  };
  std::vector<Output> outputs_;
  driver::Stream stream_;
  struct Kernels;
  std::unique_ptr<Kernels> kernels_;
};

}  // namespace tilesmith::tuner
