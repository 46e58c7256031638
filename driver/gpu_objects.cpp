#include "driver/gpu_objects.hpp"

#include <utility>

namespace tilesmith::driver {

DeviceBuffer::DeviceBuffer(std::size_t bytes, const std::string& what) : bytes_(bytes) {
  TILESMITH_CU(api().cuMemAlloc(&address_, bytes ? bytes : 1),
               "allocating " + std::to_string(bytes) + " bytes for " + what);
}

DeviceBuffer::~DeviceBuffer() {
  if (address_) api().cuMemFree(address_);  // a failure here has nowhere to go
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : address_(std::exchange(other.address_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (address_) api().cuMemFree(address_);
    address_ = std::exchange(other.address_, 0);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

CUresult LaunchableKernel::try_launch(const LaunchGeometry& geometry, const KernelArgs& args,
                                      CUstream stream) const {
  void* params[] = {const_cast<std::byte*>(args.bytes.data())};  // one Params struct
  return api().cuLaunchKernel(function_, geometry.grid[0], geometry.grid[1], geometry.grid[2],
                              geometry.block[0], geometry.block[1], geometry.block[2],
                              geometry.dynamic_smem_bytes, stream, params, nullptr);
}

void LaunchableKernel::launch(const LaunchGeometry& geometry, const KernelArgs& args,
                              CUstream stream) const {
  TILESMITH_CU(try_launch(geometry, args, stream), "launching " + description_);
}

void LaunchableKernel::allow_dynamic_smem(unsigned bytes) const {
  TILESMITH_CU(api().cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        static_cast<int>(bytes)),
               "allowing " + std::to_string(bytes) + " bytes of shared memory for " + description_);
}

int LaunchableKernel::registers() const {
  int value = 0;
  TILESMITH_CU(api().cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, function_),
               "reading registers of " + description_);
  return value;
}

LoadedModule::LoadedModule(const CompiledKernel& kernel) : lowered_name_(kernel.lowered_name) {
  description_ = kernel.lowered_name + " (" + kernel.arch + ", source " + kernel.source_hash + ")";
  TILESMITH_CU(api().cuModuleLoadData(&module_, kernel.cubin.bytes.data()),
               "loading the cubin of " + description_);
}

LoadedModule::~LoadedModule() {
  if (module_) api().cuModuleUnload(module_);
}

LaunchableKernel LoadedModule::kernel(const std::string& description) const {
  CUfunction function;
  TILESMITH_CU(api().cuModuleGetFunction(&function, module_, lowered_name_.c_str()),
               "finding " + description_);
  return LaunchableKernel(function, description);
}

Event::Event() { TILESMITH_CU(api().cuEventCreate(&event_, CU_EVENT_DEFAULT), "creating an event"); }
Event::~Event() {
  if (event_) api().cuEventDestroy(event_);
}
void Event::record(CUstream stream) const {
  TILESMITH_CU(api().cuEventRecord(event_, stream), "recording an event");
}
float Event::since(const Event& start) const {
  TILESMITH_CU(api().cuEventSynchronize(event_), "waiting for an event");
  float ms = 0;
  TILESMITH_CU(api().cuEventElapsedTime(&ms, start.event_, event_), "reading event time");
  return ms;
}

Stream::Stream() {
  TILESMITH_CU(api().cuStreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "creating a stream");
}
Stream::~Stream() {
  if (stream_) api().cuStreamDestroy(stream_);
}
void Stream::synchronize(const std::string& what) const {
  TILESMITH_CU(api().cuStreamSynchronize(stream_), what);
}

ReadyKernel load_kernel(const CompiledKernel& compiled, unsigned dynamic_smem_bytes,
                        const std::string& description) {
  ReadyKernel ready;
  ready.module = std::make_unique<LoadedModule>(compiled);
  ready.kernel = std::make_unique<LaunchableKernel>(ready.module->kernel(description));
  // Above 48 KB a block gets dynamic shared memory only after its limit is raised.
  if (dynamic_smem_bytes > 48 * 1024) ready.kernel->allow_dynamic_smem(dynamic_smem_bytes);
  return ready;
}

}  // namespace tilesmith::driver
