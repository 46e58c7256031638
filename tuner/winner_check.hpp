// Winners checked again on this GPU (`tilesmith verify`): each one's kernel verified against the
// reference on fresh random inputs and timed again, and judged against what its sweep recorded:
// still correct, and no slower than its recorded median beyond its recorded spread (a driver,
// clock or firmware change shows up here). Faults and hangs are caught by the GPU worker, as in a
// sweep; the database is only read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/database.hpp"

namespace tilesmith::tuner {

struct WinnerCheckOptions {
  int device_ordinal = 0;
  double candidate_timeout_s = 30;
  std::uint64_t seed = 1;  // the inputs' random draw
  // A winner is slower when its median now exceeds the recorded one by more than the larger of
  // its recorded spread and this fraction.
  double tolerance = 0.05;
};

struct WinnerCheck {
  cache::Winner winner;
  // "ok", "slower", "wrong", "fault", "timeout", "compile failed", "rejected", "older templates"
  std::string verdict;
  bool passed = false;  // ok, or not checkable here for a reason that is no regression (older templates)
  double median_ms = 0;  // timed now (0 when it did not run)
  double allowed_ms = 0;  // the recorded median x (1 + max(spread, tolerance))
  double rel_error = 0;
  std::string detail;
};

// Checks `winners` (of the local GPU's model) one by one, in order. Throws Error when there is no
// usable GPU. The kernel is the database's cubin for this NVRTC where it has one, else compiled.
std::vector<WinnerCheck> check_winners(const cache::Database& database,
                                       const std::vector<cache::Winner>& winners,
                                       const WinnerCheckOptions& options);

}  // namespace tilesmith::tuner
