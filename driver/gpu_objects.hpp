// Owned driver objects: device memory, a loaded module (stage 3 of the flow: a cubin in the
// driver) and a launchable kernel (stage 4), events and streams. Each frees itself; none throws
// from its destructor.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "driver/cuda_driver.hpp"
#include "generator/compiled_kernel.hpp"
#include "templates/family.hpp"

namespace tilesmith::driver {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, const std::string& what);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  CUdeviceptr address() const { return address_; }
  std::size_t bytes() const { return bytes_; }

 private:
  CUdeviceptr address_ = 0;
  std::size_t bytes_ = 0;
};

// Whether a launch waits for the stream's previous work to finish before it starts (the default),
// or, as a programmatic dependent launch (sm_90+), may start once each CTA of the previous kernel
// has called allow_next_launch() or exited, so that its launch latency and set-up hide behind
// that kernel's tail. A kernel started early calls wait_for_previous_launch() before it reads or
// writes global memory (templates/common/tile_primitives.cuh).
enum class Start { after_previous, early };

// A kernel ready to launch: its function in a loaded module, with the dynamic shared memory
// limit raised as far as the launch rule needs. A launch encodes the arguments' tensor maps
// (cuTensorMapEncodeTiled), uses cuLaunchKernelEx for a cluster or an early start, and shrinks
// a persistent grid to what the device holds at once.
class LaunchableKernel {
 public:
  LaunchableKernel(CUfunction function, std::string description)
      : function_(function),
        description_(std::move(description)),
        resident_(std::make_shared<std::atomic<std::uint64_t>>(0)) {}
  // Throws Error naming the kernel on any launch error (sticky or not), or on a tensor map the
  // driver cannot encode.
  void launch(const LaunchGeometry& geometry, const KernelArgs& args, CUstream stream,
              Start start = Start::after_previous) const;
  // Returns the driver's result instead of throwing (the tuner classifies failures).
  CUresult try_launch(const LaunchGeometry& geometry, const KernelArgs& args, CUstream stream,
                      Start start = Start::after_previous) const;
  void allow_dynamic_smem(unsigned bytes) const;
  // Clusters over kPortableClusterSize CTAs (sm_90: up to 16) launch only after this.
  void allow_non_portable_clusters() const;
  int registers() const;  // as loaded: tests check the cubin's count against it
  const std::string& description() const { return description_; }

 private:
  // The CTAs of `geometry`'s shape (block, shared memory, cluster) the device runs at once, by
  // the driver's occupancy calculator; asked once per shape.
  CUresult resident_ctas(const LaunchGeometry& geometry, unsigned* ctas) const;

  CUfunction function_;
  std::string description_;
  // The last answer of resident_ctas: (the shape's 32-bit key << 32) | CTAs. Atomic: the
  // runtime launches one kernel from many threads.
  std::shared_ptr<std::atomic<std::uint64_t>> resident_;
};

class LoadedModule {
 public:
  // Loads the cubin into the current context (cuModuleLoadData: ~0.1 ms).
  explicit LoadedModule(const CompiledKernel& kernel);
  ~LoadedModule();
  LoadedModule(const LoadedModule&) = delete;
  LoadedModule& operator=(const LoadedModule&) = delete;

  // The kernel of lowered_names[index].
  LaunchableKernel kernel(std::size_t index, const std::string& description) const;
  std::size_t kernel_count() const { return lowered_names_.size(); }

 private:
  CUmodule module_ = nullptr;
  std::vector<std::string> lowered_names_;
  std::string description_;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  CUevent get() const { return event_; }
  void record(CUstream stream) const;
  // Milliseconds from `start` to this event, after this event completed.
  float since(const Event& start) const;

 private:
  CUevent event_ = nullptr;
};

class Stream {
 public:
  Stream();
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  CUstream get() const { return stream_; }
  void synchronize(const std::string& what) const;

 private:
  CUstream stream_ = nullptr;
};

// Encodes the tensor maps `plan`'s arguments ask for into the arguments themselves, so its
// launches skip the encoding (~1 us a map): for a plan launched again with the same tensors.
// Throws Error naming the map the driver refused.
void encode_tensor_maps(LaunchPlan& plan);

// A compiled config loaded into the current context: one launchable kernel per name expression,
// each with its dynamic shared memory limit raised as far as a plan needs. Shared by the
// tuner's GPU worker and the runtime.
struct ReadyKernel {
  std::unique_ptr<LoadedModule> module;
  std::vector<LaunchableKernel> kernels;

  // sm_90+: the plan's kernels start early (Start::early) behind a kernel.
  bool starts_early = false;

  const LaunchableKernel& first() const { return kernels.at(0); }
  // Launches every step of `plan` on `stream`, in order; throws Error naming the kernel.
  void run(const LaunchPlan& plan, CUstream stream) const;
};
// `plan` gives each kernel's dynamic shared memory (its largest step); its arguments are unused.
ReadyKernel load_kernel(const CompiledKernel& compiled, const LaunchPlan& plan,
                        const std::string& description);
// A single-kernel program (support and reference kernels) launched with `dynamic_smem_bytes`.
ReadyKernel load_kernel(const CompiledKernel& compiled, unsigned dynamic_smem_bytes,
                        const std::string& description);

}  // namespace tilesmith::driver
