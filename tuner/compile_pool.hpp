// NVRTC in a pool of processes. Measured on the GPU machine: NVRTC in threads of one process
// stalls at ~13 compiles/s however many threads; 16 processes reached 54/s. Each pool thread
// feeds one compile worker process, so compiling overlaps the GPU worker's timing.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "generator/compiled_kernel.hpp"
#include "tuner/worker_process.hpp"

namespace tilesmith::tuner {

struct CompileJob {
  std::size_t id = 0;
  RenderedSource source;
  std::string arch;
};

struct CompileOutcome {
  std::size_t id = 0;
  std::optional<CompiledKernel> kernel;  // empty when compilation failed
  std::string error;                     // the NVRTC log and context
};

// What `processes` 0 means: one per core, at most 16.
int default_compile_processes();

class CompilePool {
 public:
  // `processes` 0: default_compile_processes().
  explicit CompilePool(int processes);
  ~CompilePool();
  CompilePool(const CompilePool&) = delete;
  CompilePool& operator=(const CompilePool&) = delete;

  int processes() const { return static_cast<int>(threads_.size()); }
  void submit(CompileJob job);
  // Blocks until some submitted job finishes. Throws Error when nothing is pending.
  CompileOutcome next();
  std::size_t pending() const;

 private:
  void serve();
  void stop_and_join();

  mutable std::mutex mutex_;
  std::condition_variable work_ready_, result_ready_;
  std::deque<CompileJob> jobs_;
  std::deque<CompileOutcome> results_;
  std::size_t in_flight_ = 0;  // submitted, not yet taken by next()
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// The compile worker's main loop (in the child process).
int compile_worker_main(const WorkerArgs& args);

}  // namespace tilesmith::tuner
