// The activations in fp64, for every family's CPU reference (codes of common/activation.h).
#pragma once

#include <algorithm>
#include <cmath>

#include "templates/common/activation.h"

namespace tilesmith {

inline double activate_reference(int code, double x) {
  switch (code & kActMask) {
    case kActRelu: return std::max(x, 0.0);
    case kActGelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
    case kActSilu: return x / (1 + std::exp(-x));
  }
  return x;
}

}  // namespace tilesmith
