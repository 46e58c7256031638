// The driver's tensor map (CUtensorMap) as an opaque blob of the same size and alignment, so
// parameter structs shared by host (g++, no CUDA headers) and device (NVRTC) can embed one.
// The host fills it with cuTensorMapEncodeTiled and copies the 128 bytes in unchanged.
#pragma once

namespace tilesmith {

struct alignas(64) TensorMap {
  unsigned long long opaque[16];
};
static_assert(sizeof(TensorMap) == 128, "CUtensorMap is 128 bytes");

}  // namespace tilesmith
