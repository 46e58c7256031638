// A tiny family for testing the tuner's failure handling: an f32 copy kernel whose `behavior`
// parameter makes it correct (0), fault with an illegal address (1), never finish (2), or
// compute the wrong answer (3).
#pragma once

namespace tilesmith::testing {

enum ProbeBehavior { kCorrect = 0, kFault = 1, kHang = 2, kWrong = 3 };

// Registers the "probe" family, and "probe_slow_default" (correct kernels only; the default
// config, slow = 1, takes seconds to compile, the others milliseconds), once; safe to call
// repeatedly.
void register_probe_family();

}  // namespace tilesmith::testing
