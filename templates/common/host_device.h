// Functions of the parameter headers that both the host descriptor and the kernels (NVRTC)
// call, so the two sides compute a size or a rule once.
#pragma once

#if defined(__CUDACC__)
#define TILESMITH_HOST_DEVICE __host__ __device__
#else
#define TILESMITH_HOST_DEVICE
#endif
