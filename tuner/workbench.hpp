// The GPU side of a trial, in the calling process: fresh random inputs, poisoned outputs, the
// candidate checked against the family's reference, then timed. The one verification routine
// and the one timing routine of tilesmith.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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

// Repetitions go in batches until the decision is made: the median is known to within
// `precision` (the half-width of its 95% interval, from the order statistics, over the median),
// or the candidate cannot beat best_ms (the interval's lower end is above best_ms x (1 +
// precision)), or max_repetitions or target_ms of timed work are spent.
struct TimingOptions {
  int warmup = 2;
  int min_repetitions = 10;
  int max_repetitions = 200;
  double target_ms = 150;    // at most about this much timed work per candidate
  double precision = 0.01;   // 0: always run to max_repetitions / target_ms
  // Stop after the first few repetitions when slower than give_up_factor x best_ms.
  double best_ms = 0;
  double give_up_factor = 0;  // 0: never
};

// What the repetitions so far decide under `options`: time more; stop, the median being known to
// options.precision (the half-width of its 95% interval from the order statistics, ranks
// n/2 -+ 0.98 sqrt(n), over the median); or stop, the candidate being unable to beat
// options.best_ms (the interval's lower end above best_ms x (1 + precision)). With a precision
// of 0: always more.
enum class TimingVerdict { more, precise, cannot_win };
TimingVerdict judge_samples(std::vector<float> samples, const TimingOptions& options);

struct Timing {
  double median_ms = 0, min_ms = 0, p10_ms = 0, p90_ms = 0;
  double spread = 0;  // (p90 - p10) / median
  int repetitions = 0;
  bool stopped_early = false;  // given up: slower than give_up_factor x the best
  bool cannot_win = false;     // stopped once its median's interval lay above the best
  double kernel_ms = 0;        // the timed calls' event time, summed (flushes not included)
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

  // Fills the inputs with normal values from `seed` and poisons the outputs (NaN). The inputs
  // are only what this writes: the reference is computed once per seed and reused, so a sweep
  // pays for it once per problem while every candidate still starts from freshly written
  // inputs (one that scribbled on them cannot mislead the next).
  void refresh_inputs(std::uint64_t seed);
  // What one call of `config` runs on this bench's tensors and workspace (grown to what the
  // config needs).
  LaunchPlan plan(const Config& config);
  // The workspace as the last plan() grew it (for tests running a plan of their own).
  std::uint64_t workspace() const { return workspace_.bytes() ? workspace_.address() : 0; }
  std::size_t workspace_bytes() const { return workspace_.bytes(); }
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
  // Times several candidates together, one call of each in turn per round (L2 flushed before
  // every call), so a drift of the clocks or the memory moves them alike and cannot reorder
  // them: rounds in batches of 10 until every median is known to options.precision or
  // options.max_repetitions rounds ran. The tuner's finalists.
  std::vector<Timing> time_together(const std::vector<const driver::ReadyKernel*>& kernels,
                                    const std::vector<Config>& configs, const TimingOptions& options);

  // The reference outputs (fp32) of the current inputs, each output tensor's in turn, for tests.
  std::vector<float> reference_output();
  // Host copies of tensor `index` converted to double, for tests and CPU references.
  std::vector<double> download(std::size_t index);

 private:
  void run_reference();
  // Evicts L2 by reading a buffer twice its size, as the benchmarks do.
  void flush_l2(CUstream stream);
  // Keeps the GPU busy for ~100 ms of its own time before this workbench's first timing: a GPU
  // at rest runs its SMs at a low clock (345 MHz on the H100 here) and takes milliseconds to
  // ramp up, and the first candidate timed would otherwise come out slower than the rest.
  void bring_clocks_up(CUstream stream);
  bool clocks_up_ = false;

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
  std::optional<std::uint64_t> inputs_seed_, reference_seed_;
  struct Kernels;
  std::unique_ptr<Kernels> kernels_;
};

}  // namespace tilesmith::tuner
