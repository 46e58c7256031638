// Ctrl-C and SIGTERM during a sweep. The handler only records the signal and wakes every wait of
// the tuner on its workers; the sweep then stops between two database writes: the trial in
// progress is withdrawn (the next sweep runs it again), the others stay, the winner is refreshed.
#pragma once

#include "tilesmith/types.hpp"

namespace tilesmith::tuner {

// Thrown out of a wait on a worker once SIGINT or SIGTERM arrived.
class Interrupted : public Error {
 public:
  explicit Interrupted(int signal);
  int signal() const { return signal_; }

 private:
  int signal_;
};

// While one exists, SIGINT and SIGTERM interrupt the tuner's waits instead of killing the
// process; the previous handlers come back when it is destroyed. One at a time.
class InterruptScope {
 public:
  InterruptScope();
  ~InterruptScope();
  InterruptScope(const InterruptScope&) = delete;
  InterruptScope& operator=(const InterruptScope&) = delete;
};

// The signal received inside the current InterruptScope, or 0.
int interrupt_signal();
// Throws Interrupted when a signal was received.
void throw_if_interrupted();
// A descriptor that becomes readable when a signal arrives, for poll(); -1 outside a scope.
int interrupt_fd();

}  // namespace tilesmith::tuner
