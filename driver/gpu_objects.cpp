#include "driver/gpu_objects.hpp"

#include <algorithm>
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

namespace {

CUtensorMapDataType tensor_map_type(DType dtype) {
  switch (dtype) {
    case DType::f16: return CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    case DType::bf16: return CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    case DType::f32: return CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
  }
  return CU_TENSOR_MAP_DATA_TYPE_UINT8;
}

CUtensorMapSwizzle tensor_map_swizzle(std::uint32_t bytes) {
  switch (bytes) {
    case 32: return CU_TENSOR_MAP_SWIZZLE_32B;
    case 64: return CU_TENSOR_MAP_SWIZZLE_64B;
    case 128: return CU_TENSOR_MAP_SWIZZLE_128B;
  }
  return CU_TENSOR_MAP_SWIZZLE_NONE;
}

CUtensorMapL2promotion tensor_map_l2_promotion(std::uint32_t bytes) {
  switch (bytes) {
    case 64: return CU_TENSOR_MAP_L2_PROMOTION_L2_64B;
    case 128: return CU_TENSOR_MAP_L2_PROMOTION_L2_128B;
    case 256: return CU_TENSOR_MAP_L2_PROMOTION_L2_256B;
  }
  return CU_TENSOR_MAP_L2_PROMOTION_NONE;
}

// Writes the CUtensorMap of `spec` into `bytes` at its offset.
CUresult encode_tensor_map(const TensorMapSpec& spec, std::byte* bytes) {
  static_assert(sizeof(CUtensorMap) == 128);
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], element_strides[5];
  for (std::uint32_t i = 0; i < spec.rank; ++i) {
    dims[i] = spec.dims[i];
    box[i] = spec.box[i];
    element_strides[i] = 1;
    if (i + 1 < spec.rank) strides[i] = spec.stride_bytes[i];
  }
  return api().cuTensorMapEncodeTiled(
      reinterpret_cast<CUtensorMap*>(bytes + spec.offset), tensor_map_type(spec.dtype), spec.rank,
      reinterpret_cast<void*>(spec.address), dims, strides, box, element_strides,
      CU_TENSOR_MAP_INTERLEAVE_NONE, tensor_map_swizzle(spec.swizzle_bytes),
      tensor_map_l2_promotion(spec.l2_promotion_bytes), CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

unsigned cluster_size(const LaunchGeometry& geometry) {
  return geometry.cluster[0] * geometry.cluster[1] * geometry.cluster[2];
}

// The driver's launch configuration of `geometry` on `stream`. Its attributes go into
// `attributes`, which the configuration points to: the cluster shape where there is one,
// programmatic stream serialization for an early start.
CUlaunchConfig launch_config(const LaunchGeometry& geometry, CUstream stream, Start start,
                             CUlaunchAttribute (&attributes)[3]) {
  unsigned count = 0;
  if (cluster_size(geometry) > 1) {
    attributes[count] = CUlaunchAttribute{};
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attributes[count].value.clusterDim.x = geometry.cluster[0];
    attributes[count].value.clusterDim.y = geometry.cluster[1];
    attributes[count].value.clusterDim.z = geometry.cluster[2];
    ++count;
  }
  if (start == Start::early) {
    attributes[count] = CUlaunchAttribute{};
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attributes[count].value.programmaticStreamSerializationAllowed = 1;
    ++count;
  }
  if (geometry.waiting_group > 1) {
    attributes[count] = CUlaunchAttribute{};
    attributes[count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attributes[count].value.cooperative = 1;
    ++count;
  }
  CUlaunchConfig config{};
  config.gridDimX = geometry.grid[0];
  config.gridDimY = geometry.grid[1];
  config.gridDimZ = geometry.grid[2];
  config.blockDimX = geometry.block[0];
  config.blockDimY = geometry.block[1];
  config.blockDimZ = geometry.block[2];
  config.sharedMemBytes = geometry.dynamic_smem_bytes;
  config.hStream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  return config;
}

}  // namespace

CUresult LaunchableKernel::resident_ctas(const LaunchGeometry& geometry, unsigned* ctas) const {
  const unsigned block = geometry.block[0] * geometry.block[1] * geometry.block[2];
  const unsigned cluster = cluster_size(geometry);
  const std::uint64_t key =
      ((block * 2654435761u) ^ (geometry.dynamic_smem_bytes * 40503u) ^ (cluster << 24)) | 1u;
  const std::uint64_t cached = resident_->load(std::memory_order_relaxed);
  if (cached >> 32 == key) {
    *ctas = static_cast<unsigned>(cached);
    return CUDA_SUCCESS;
  }
  int count = 0;
  if (cluster == 1) {
    int per_sm = 0, sms = 0;
    CUdevice device = 0;
    if (CUresult r = api().cuOccupancyMaxActiveBlocksPerMultiprocessor(
            &per_sm, function_, static_cast<int>(block), geometry.dynamic_smem_bytes);
        r != CUDA_SUCCESS)
      return r;
    if (CUresult r = api().cuCtxGetDevice(&device); r != CUDA_SUCCESS) return r;
    if (CUresult r = api().cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, device);
        r != CUDA_SUCCESS)
      return r;
    count = per_sm * sms;
  } else {
    CUlaunchAttribute attributes[3];
    const CUlaunchConfig config = launch_config(geometry, nullptr, Start::after_previous, attributes);
    if (CUresult r = api().cuOccupancyMaxActiveClusters(&count, function_, &config); r != CUDA_SUCCESS)
      return r;
    count *= static_cast<int>(cluster);
  }
  *ctas = static_cast<unsigned>(std::max(count, 0));
  resident_->store(key << 32 | *ctas, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

void encode_tensor_maps(LaunchPlan& plan) {
  for (int step = 0; step < plan.step_count; ++step) {
    KernelArgs& args = plan.steps[static_cast<std::size_t>(step)].args;
    for (int i = 0; i < args.tensor_map_count; ++i)
      TILESMITH_CU(encode_tensor_map(args.tensor_maps[static_cast<std::size_t>(i)], args.bytes.data()),
                   "encoding tensor map " + std::to_string(i) + " of launch " + std::to_string(step));
    args.tensor_map_count = 0;
  }
}

CUresult LaunchableKernel::try_launch(const LaunchGeometry& requested, const KernelArgs& args,
                                      CUstream stream, Start start) const {
  const KernelArgs* launched = &args;
  KernelArgs encoded;  // tensor maps are filled in a copy: the caller's arguments stay a recipe
  if (args.tensor_map_count > 0) {
    encoded = args;
    for (int i = 0; i < args.tensor_map_count; ++i)
      if (CUresult result = encode_tensor_map(args.tensor_maps[i], encoded.bytes.data());
          result != CUDA_SUCCESS)
        return result;
    launched = &encoded;
  }
  LaunchGeometry geometry = requested;
  if (geometry.persistent) {
    unsigned resident = 0;
    if (CUresult result = resident_ctas(geometry, &resident); result != CUDA_SUCCESS) return result;
    // None resident: the launch itself reports why (too much shared memory, ...).
    if (resident > 0) geometry.grid[0] = std::min(geometry.grid[0], resident);
    geometry.grid[0] -= geometry.grid[0] % std::max(geometry.waiting_group, 1u);
    // Fewer CTAs fit at once than one group of waiting CTAs holds.
    if (geometry.grid[0] == 0) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  void* params[] = {const_cast<std::byte*>(launched->bytes.data())};  // one Params struct
  if (cluster_size(geometry) == 1 && start == Start::after_previous && geometry.waiting_group <= 1)
    return api().cuLaunchKernel(function_, geometry.grid[0], geometry.grid[1], geometry.grid[2],
                                geometry.block[0], geometry.block[1], geometry.block[2],
                                geometry.dynamic_smem_bytes, stream, params, nullptr);
  CUlaunchAttribute attributes[3];
  const CUlaunchConfig config = launch_config(geometry, stream, start, attributes);
  return api().cuLaunchKernelEx(&config, function_, params, nullptr);
}

void LaunchableKernel::launch(const LaunchGeometry& geometry, const KernelArgs& args,
                              CUstream stream, Start start) const {
  TILESMITH_CU(try_launch(geometry, args, stream, start), "launching " + description_);
}

void LaunchableKernel::allow_dynamic_smem(unsigned bytes) const {
  TILESMITH_CU(api().cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                        static_cast<int>(bytes)),
               "allowing " + std::to_string(bytes) + " bytes of shared memory for " + description_);
}

void LaunchableKernel::allow_non_portable_clusters() const {
  TILESMITH_CU(api().cuFuncSetAttribute(function_, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
               "allowing clusters of more than " + std::to_string(kPortableClusterSize) + " CTAs for " +
                   description_);
}

int LaunchableKernel::registers() const {
  int value = 0;
  TILESMITH_CU(api().cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NUM_REGS, function_),
               "reading registers of " + description_);
  return value;
}

LoadedModule::LoadedModule(const CompiledKernel& kernel) : lowered_names_(kernel.lowered_names) {
  if (lowered_names_.empty())
    throw Error("loading the cubin of source " + kernel.source_hash + ": it names no kernel");
  description_ = lowered_names_.front() + " (" + kernel.arch + ", source " + kernel.source_hash + ")";
  TILESMITH_CU(api().cuModuleLoadData(&module_, kernel.cubin.bytes.data()),
               "loading the cubin of " + description_);
}

LoadedModule::~LoadedModule() {
  if (module_) api().cuModuleUnload(module_);
}

LaunchableKernel LoadedModule::kernel(std::size_t index, const std::string& description) const {
  CUfunction function;
  TILESMITH_CU(api().cuModuleGetFunction(&function, module_, lowered_names_.at(index).c_str()),
               "finding " + lowered_names_.at(index) + " in " + description_);
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

void ReadyKernel::run(const LaunchPlan& plan, CUstream stream) const {
  bool after_zero_fill = false;
  for (const LaunchStep& step : plan.all()) {
    if (step.kernel == LaunchStep::kZeroFill) {
      TILESMITH_CU(api().cuMemsetD32Async(step.zero_address, 0, step.zero_bytes / 4, stream),
                   "clearing " + std::to_string(step.zero_bytes) + " bytes of workspace for " +
                       first().description());
      after_zero_fill = true;
      continue;
    }
    if (step.kernel < 0 || static_cast<std::size_t>(step.kernel) >= kernels.size())
      throw Error("a launch plan names kernel " + std::to_string(step.kernel) + " of " +
                  std::to_string(kernels.size()) + " (" + first().description() + ")");
    // Behind a kernel, every launch starts early where the device can (every tilesmith kernel
    // waits for the previous launch before it touches memory); a memset lets nothing start
    // before it ends, and a cooperative launch is not combined with an early one.
    const bool early = starts_early && !after_zero_fill && step.geometry.waiting_group <= 1;
    kernels[static_cast<std::size_t>(step.kernel)].launch(
        step.geometry, step.args, stream, early ? Start::early : Start::after_previous);
    after_zero_fill = false;
  }
}

ReadyKernel load_kernel(const CompiledKernel& compiled, const LaunchPlan& plan,
                        const std::string& description) {
  ReadyKernel ready;
  ready.module = std::make_unique<LoadedModule>(compiled);
  CUdevice device = 0;
  int cc_major = 0;
  TILESMITH_CU(api().cuCtxGetDevice(&device), "finding the device of " + description);
  TILESMITH_CU(api().cuDeviceGetAttribute(&cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device),
               "reading the compute capability for " + description);
  ready.starts_early = cc_major >= 9;
  for (std::size_t i = 0; i < ready.module->kernel_count(); ++i) {
    const std::string name =
        ready.module->kernel_count() == 1 ? description : description + " #" + std::to_string(i);
    ready.kernels.push_back(ready.module->kernel(i, name));
    unsigned smem = 0, cluster = 1;
    for (const LaunchStep& step : plan.all())
      if (static_cast<std::size_t>(step.kernel) == i) {
        smem = std::max(smem, step.geometry.dynamic_smem_bytes);
        cluster = std::max(cluster, cluster_size(step.geometry));
      }
    // A block gets more than 48 KB of shared memory, static and dynamic together, only after
    // its dynamic limit is raised: raised for any dynamic size, since the static part adds on.
    if (smem > 0) ready.kernels.back().allow_dynamic_smem(smem);
    if (cluster > kPortableClusterSize) ready.kernels.back().allow_non_portable_clusters();
  }
  return ready;
}

ReadyKernel load_kernel(const CompiledKernel& compiled, unsigned dynamic_smem_bytes,
                        const std::string& description) {
  LaunchPlan plan;
  LaunchGeometry geometry;
  geometry.dynamic_smem_bytes = dynamic_smem_bytes;
  plan.add(0, geometry, KernelArgs{});
  return load_kernel(compiled, plan, description);
}

}  // namespace tilesmith::driver
