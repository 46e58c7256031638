// The GPU worker: one long-lived child process per GPU that loads, verifies and times
// candidates (a worker's start costs 0.2-0.3 s, so it is reused). A candidate that faults
// takes the worker's CUDA context down with it, and one that hangs is killed by the watchdog;
// either way the candidate is recorded as failed and a fresh worker takes the next one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cache/database.hpp"
#include "generator/compiled_kernel.hpp"
#include "templates/family.hpp"
#include "tuner/workbench.hpp"
#include "tuner/worker_process.hpp"

namespace tilesmith::tuner {

// Where a trial's time went in the GPU worker, in seconds of its wall time (the sweep's
// closing report adds them up).
struct TrialSeconds {
  double load = 0;    // the cubin into a module
  double verify = 0;  // inputs written, the candidate run once, the reference (once per
                      // problem) and the comparison
  double timing = 0;  // warm-up, flushes and timed calls
  double kernels = 0;  // of `timing`: the timed calls' own event time
};

struct GpuTrialResult {
  cache::TrialStatus status = cache::TrialStatus::fault;
  std::string detail;
  Verification verification;
  Timing timing;
  TrialSeconds seconds;
};

class GpuWorker {
 public:
  // Starts the worker. Without a usable GPU, `available()` is false and `unavailable_reason()`
  // says why; nothing else may be called.
  GpuWorker(int device_ordinal, double candidate_timeout_s);
  ~GpuWorker();

  bool available() const { return device_.has_value(); }
  const std::string& unavailable_reason() const { return unavailable_reason_; }
  const DeviceTarget& device() const { return *device_; }
  const std::string& driver_version() const { return driver_version_; }
  int restarts() const { return restarts_; }

  GpuTrialResult evaluate(const Family& family, const Problem& problem, const Config& config,
                          const CompiledKernel& kernel, std::uint64_t seed,
                          const TimingOptions& timing);
  // Verifies and times verified candidates again, together and interleaved
  // (Workbench::time_together): their timings in order, or an Error saying why not (the worker
  // is then restarted for the next call).
  std::vector<Timing> retime(const Family& family, const Problem& problem,
                             const std::vector<std::pair<Config, CompiledKernel>>& candidates,
                             std::uint64_t seed, const TimingOptions& timing);

 private:
  void start();

  int device_ordinal_;
  double timeout_s_;
  std::unique_ptr<WorkerProcess> process_;
  std::optional<DeviceTarget> device_;
  std::string driver_version_, unavailable_reason_;
  int restarts_ = 0;
};

// The worker's main loop (in the child process).
int gpu_worker_main(const WorkerArgs& args);

}  // namespace tilesmith::tuner
