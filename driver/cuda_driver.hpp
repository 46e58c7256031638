// The one loader of the CUDA driver. libcuda.so.1 is opened at run time, so every tilesmith
// binary starts on a machine without a GPU and says so plainly instead of failing to load.
#pragma once

#include <cuda.h>

#include <string>

#include "templates/problem.hpp"

namespace tilesmith::driver {

#define TILESMITH_DRIVER_FUNCTIONS(X)                                                          \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)    \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)         \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxGetCurrent)                            \
  X(cuModuleLoadData) X(cuModuleUnload) X(cuModuleGetFunction) X(cuFuncSetAttribute)            \
  X(cuFuncGetAttribute) X(cuLaunchKernel) X(cuMemAlloc) X(cuMemFree) X(cuMemcpyHtoD)            \
  X(cuMemcpyDtoH) X(cuMemsetD32Async) X(cuMemsetD8Async) X(cuStreamCreate) X(cuStreamDestroy)   \
  X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                    \
  X(cuEventSynchronize) X(cuEventElapsedTime) X(cuPointerGetAttribute) X(cuLaunchKernelEx)      \
  X(cuTensorMapEncodeTiled) X(cuOccupancyMaxActiveBlocksPerMultiprocessor)                    \
  X(cuOccupancyMaxActiveClusters)

// Entry points whose plain name cuGetProcAddress resolves, at CUDA_VERSION, to a newer ABI than
// cuda.h's prototype of that name: they are asked for at the prototype's version. CUDA 13 added
// cuCtxSynchronize_v2(CUcontext); asking for "cuCtxSynchronize" at 13000 returns it, and calling
// it as the argument-less prototype crashed (seen on the H100). cuCtxGetDevice_v2 likewise.
#define TILESMITH_DRIVER_FUNCTIONS_PINNED(X) X(cuCtxSynchronize, 2000) X(cuCtxGetDevice, 2000)

// The driver's entry points, resolved through cuGetProcAddress for the ABI of the cuda.h we
// were built against. Members carry the functions' own names.
struct DriverApi {
#define TILESMITH_DECLARE(name) decltype(&::name) name = nullptr;
#define TILESMITH_DECLARE_PINNED(name, version) TILESMITH_DECLARE(name)
  TILESMITH_DRIVER_FUNCTIONS(TILESMITH_DECLARE)
  TILESMITH_DRIVER_FUNCTIONS_PINNED(TILESMITH_DECLARE_PINNED)
#undef TILESMITH_DECLARE_PINNED
#undef TILESMITH_DECLARE
};

// The loaded, initialised driver. Throws Error("no CUDA driver/GPU found: ...") when
// libcuda.so.1 is missing, cuInit fails, or no device is visible.
const DriverApi& api();

// Whether a driver and at least one GPU are present; `why` gets the reason when not.
bool gpu_available(std::string* why = nullptr);

// Throws Error "<what>: <call> failed: <CUDA_ERROR_NAME> (<description>)".
void check(CUresult result, const char* call, const std::string& what);
#define TILESMITH_CU(call, what) ::tilesmith::driver::check((call), #call, (what))

int device_count();
DeviceTarget describe_device(int ordinal);
std::string driver_version();  // "13.0"

// The device's primary context (shared with the CUDA runtime, so tilesmith and cuBLAS/torch see
// the same memory), retained once for the life of the process.
CUcontext primary_context(int ordinal);
// Makes `context` current on the calling thread. Lock-free and cheap when already current: the
// runtime calls it on every launch.
void make_current(CUcontext context);
void make_current(int ordinal);  // make_current(primary_context(ordinal))

// An error that leaves the context unusable (illegal address, misaligned access, launch
// timeout, ...): the process must be restarted to use the GPU again.
bool is_sticky(CUresult result);

}  // namespace tilesmith::driver
