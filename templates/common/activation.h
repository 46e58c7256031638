// The activation codes of every family's fused epilogue (matmul's EPI bits 0-1, the norms'
// act option), shared by host descriptors and kernels.
#pragma once

namespace tilesmith {

enum ActivationCode {
  kActNone = 0,
  kActRelu = 1,
  kActGelu = 2,  // the exact (erf) GELU, torch's default
  kActSilu = 3,
  kActMask = 3,
};

}  // namespace tilesmith
