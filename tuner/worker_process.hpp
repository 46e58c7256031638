// Child processes of the tuner and the framed messages they exchange over pipes. Workers are
// started by re-executing /proc/self/exe with a role flag, so a worker has a fresh CUDA state
// (fork after cuInit is unsupported) and the same registered families as its parent.
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tilesmith::tuner {

// One message: a JSON header and an optional binary payload (a cubin).
struct Message {
  nlohmann::json header;
  std::string payload;
};

// Blocking I/O on a file descriptor. `read_message` returns nothing at end of file (the other
// side died or closed); it throws Error on a malformed frame.
void write_message(int fd, const Message& message);
std::optional<Message> read_message(int fd);
// Waits up to `seconds` for `fd` to become readable; false on timeout.
bool wait_readable(int fd, double seconds);

// Starts /proc/self/exe with `argv` (argv[0] included) in a process group of its own, so a
// terminal's Ctrl-C reaches the caller alone, which decides what its children do; each pair of
// `dup2s` makes the child's descriptor `second` a copy of the caller's `first`. Returns
// posix_spawn's error number (0: started, the child's id in `pid`).
int spawn_self(const std::vector<std::string>& argv, const std::vector<std::pair<int, int>>& dup2s,
               pid_t* pid);

class WorkerProcess {
 public:
  // Starts `/proc/self/exe --tilesmith-worker ROLE IN_FD OUT_FD ARG`.
  WorkerProcess(const std::string& role, const std::string& argument);
  ~WorkerProcess();  // kills and reaps
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  void send(const Message& message) { write_message(to_child_, message); }
  // Nothing when the child closed its pipe (it exited or crashed) or `timeout_s` passed
  // (`timed_out` says which).
  std::optional<Message> receive(double timeout_s, bool* timed_out = nullptr);
  void kill();
  // How the child ended ("exited with status 3", "killed by signal 11 (Segmentation fault)").
  std::string exit_description();

 private:
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::optional<int> wait_status_;
};

// The worker side: argv as passed by WorkerProcess. Returns false when not a worker.
struct WorkerArgs {
  std::string role;
  int in_fd = -1, out_fd = -1;
  std::string argument;
};
std::optional<WorkerArgs> parse_worker_args(int argc, char** argv);

}  // namespace tilesmith::tuner
