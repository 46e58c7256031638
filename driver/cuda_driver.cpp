#include "driver/cuda_driver.hpp"

#include <dlfcn.h>

#include <mutex>
#include <vector>

namespace tilesmith::driver {
namespace {

struct Loaded {
  DriverApi api;
  std::string failure;  // empty when loaded and initialised
};

Loaded load() {
  Loaded loaded;
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    loaded.failure = std::string("no CUDA driver/GPU found: cannot load libcuda.so.1 (") + dlerror() + ")";
    return loaded;
  }
  auto get_proc = reinterpret_cast<decltype(&::cuGetProcAddress)>(dlsym(library, "cuGetProcAddress_v2"));
  if (!get_proc) {
    loaded.failure = "no usable CUDA driver: libcuda.so.1 has no cuGetProcAddress_v2 (driver too old for CUDA 12+)";
    return loaded;
  }
// `symbol` is the name as written, stringified before cuda.h's macros rename it (cuMemAlloc, not
// cuMemAlloc_v2): cuGetProcAddress takes the base name and a version.
#define TILESMITH_RESOLVE_AT(name, symbol, version)                                                \
  {                                                                                                \
    void* pointer = nullptr;                                                                       \
    CUdriverProcAddressQueryResult found;                                                          \
    if (get_proc(symbol, &pointer, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) !=                \
            CUDA_SUCCESS ||                                                                        \
        !pointer) {                                                                                \
      loaded.failure = std::string("no usable CUDA driver: it lacks ") + symbol + " for CUDA " +    \
                       std::to_string(CUDA_VERSION / 1000) + "." +                                 \
                       std::to_string(CUDA_VERSION % 1000 / 10) + " (driver too old?)";            \
      return loaded;                                                                               \
    }                                                                                              \
    loaded.api.name = reinterpret_cast<decltype(loaded.api.name)>(pointer);                        \
  }
#define TILESMITH_RESOLVE(name) TILESMITH_RESOLVE_AT(name, #name, CUDA_VERSION)
#define TILESMITH_RESOLVE_PINNED(name, version) TILESMITH_RESOLVE_AT(name, #name, version)
  TILESMITH_DRIVER_FUNCTIONS(TILESMITH_RESOLVE)
  TILESMITH_DRIVER_FUNCTIONS_PINNED(TILESMITH_RESOLVE_PINNED)
#undef TILESMITH_RESOLVE_PINNED
#undef TILESMITH_RESOLVE
#undef TILESMITH_RESOLVE_AT
  CUresult init = loaded.api.cuInit(0);
  if (init != CUDA_SUCCESS) {
    const char* name = "?";
    loaded.api.cuGetErrorName(init, &name);
    loaded.failure = std::string("no CUDA driver/GPU found: cuInit failed with ") + name;
    return loaded;
  }
  int count = 0;
  if (loaded.api.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0)
    loaded.failure = "no CUDA driver/GPU found: the driver sees no GPU";
  return loaded;
}

const Loaded& loaded() {
  static const Loaded instance = load();
  return instance;
}

}  // namespace

const DriverApi& api() {
  const Loaded& state = loaded();
  if (!state.failure.empty()) throw Error(state.failure);
  return state.api;
}

bool gpu_available(std::string* why) {
  const Loaded& state = loaded();
  if (why) *why = state.failure;
  return state.failure.empty();
}

void check(CUresult result, const char* call, const std::string& what) {
  if (result == CUDA_SUCCESS) return;
  const char* name = "unknown";
  const char* description = "";
  const DriverApi& driver = loaded().api;
  if (driver.cuGetErrorName) driver.cuGetErrorName(result, &name);
  if (driver.cuGetErrorString) driver.cuGetErrorString(result, &description);
  throw Error(what + ": " + call + " failed: " + name + " (" + description + ")");
}

bool is_sticky(CUresult result) {
  switch (result) {
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_UNKNOWN:
      return true;
    default:
      return false;
  }
}

int device_count() {
  int count = 0;
  TILESMITH_CU(api().cuDeviceGetCount(&count), "counting GPUs");
  return count;
}

std::string driver_version() {
  int version = 0;
  TILESMITH_CU(api().cuDriverGetVersion(&version), "reading the driver version");
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

DeviceTarget describe_device(int ordinal) {
  const DriverApi& driver = api();
  std::string what = "describing GPU " + std::to_string(ordinal);
  CUdevice device;
  TILESMITH_CU(driver.cuDeviceGet(&device, ordinal), what);
  char name[256] = {};
  TILESMITH_CU(driver.cuDeviceGetName(name, sizeof name, device), what);
  auto attribute = [&](CUdevice_attribute which) {
    int value = 0;
    TILESMITH_CU(driver.cuDeviceGetAttribute(&value, which, device), what);
    return value;
  };
  DeviceTarget target;
  target.name = name;
  target.cc_major = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
  target.cc_minor = attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  target.sm_count = attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  target.max_threads_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  target.max_smem_per_block_optin = attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
  target.regs_per_block = attribute(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
  target.l2_bytes = attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE);
  return target;
}

CUcontext primary_context(int ordinal) {
  const DriverApi& driver = api();
  static std::mutex mutex;
  static std::vector<CUcontext> primary;  // retained once per device, for the process's life
  std::lock_guard lock(mutex);
  if (primary.empty()) primary.resize(device_count(), nullptr);
  if (ordinal < 0 || ordinal >= static_cast<int>(primary.size()))
    throw Error("GPU " + std::to_string(ordinal) + " does not exist (" +
                std::to_string(primary.size()) + " visible)");
  if (!primary[ordinal]) {
    CUdevice device;
    TILESMITH_CU(driver.cuDeviceGet(&device, ordinal), "opening GPU " + std::to_string(ordinal));
    TILESMITH_CU(driver.cuDevicePrimaryCtxRetain(&primary[ordinal], device),
                 "retaining the primary context of GPU " + std::to_string(ordinal));
  }
  return primary[ordinal];
}

void make_current(CUcontext context) {
  const DriverApi& driver = api();
  CUcontext current = nullptr;
  driver.cuCtxGetCurrent(&current);
  if (current != context) TILESMITH_CU(driver.cuCtxSetCurrent(context), "making a GPU context current");
}

void make_current(int ordinal) { make_current(primary_context(ordinal)); }

}  // namespace tilesmith::driver
