// The test binary's main: the tuner re-executes this binary as its worker processes, so the
// probe family must be registered before the worker dispatch, exactly as in the parent.
#include <execinfo.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include "support/probe_family.hpp"
#include "tuner/sweep.hpp"

namespace {
// A crash in a test prints where it happened before the process dies.
void print_backtrace(int signal_number) {
  void* frames[64];
  int count = backtrace(frames, 64);
  const char header[] = "\n*** fatal signal in the test binary; backtrace:\n";
  (void)!write(STDERR_FILENO, header, sizeof header - 1);
  backtrace_symbols_fd(frames, count, STDERR_FILENO);
  ::signal(signal_number, SIG_DFL);
  ::raise(signal_number);
}
}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGSEGV, print_backtrace);
  ::signal(SIGABRT, print_backtrace);
  tilesmith::testing::register_probe_family();
  if (tilesmith::tuner::run_worker_if_requested(argc, argv)) return 0;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
