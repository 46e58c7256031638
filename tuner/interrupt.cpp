#include "tuner/interrupt.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

namespace tilesmith::tuner {
namespace {

std::atomic<int> received{0};
// A self-pipe: a signal that arrives just before a poll() must still wake it.
int wake_pipe[2] = {-1, -1};
struct sigaction previous_int, previous_term;

extern "C" void on_signal(int signal) {
  const int saved_errno = errno;
  int expected = 0;
  received.compare_exchange_strong(expected, signal);
  if (wake_pipe[1] >= 0) {
    const char byte = 1;
    [[maybe_unused]] ssize_t ignored = ::write(wake_pipe[1], &byte, 1);
  }
  errno = saved_errno;
}

}  // namespace

Interrupted::Interrupted(int signal)
    : Error(std::string("interrupted by ") + (signal == SIGINT ? "SIGINT" : "SIGTERM")),
      signal_(signal) {}

InterruptScope::InterruptScope() {
  if (wake_pipe[0] >= 0) throw Error("an InterruptScope is already active");
  if (::pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw Error(std::string("creating the interrupt pipe: ") + std::strerror(errno));
  received = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;  // no SA_RESTART: a blocking call returns EINTR and looks again
  ::sigaction(SIGINT, &action, &previous_int);
  ::sigaction(SIGTERM, &action, &previous_term);
}

InterruptScope::~InterruptScope() {
  ::sigaction(SIGINT, &previous_int, nullptr);
  ::sigaction(SIGTERM, &previous_term, nullptr);
  ::close(wake_pipe[0]);
  ::close(wake_pipe[1]);
  wake_pipe[0] = wake_pipe[1] = -1;
}

int interrupt_signal() { return received.load(); }

void throw_if_interrupted() {
  if (int signal = received.load()) throw Interrupted(signal);
}

int interrupt_fd() { return wake_pipe[0]; }

}  // namespace tilesmith::tuner
