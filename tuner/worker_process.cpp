#include "tuner/worker_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "tilesmith/types.hpp"
#include "tuner/interrupt.hpp"

extern char** environ;

namespace tilesmith::tuner {
namespace {

void write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    ssize_t written = ::write(fd, data, size);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) throw Error(std::string("writing to a worker pipe: ") + std::strerror(errno));
    data += written;
    size -= static_cast<std::size_t>(written);
  }
}

// False at end of file before the first byte; throws on a frame cut short.
bool read_all(int fd, char* data, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    ssize_t got = ::read(fd, data + done, size - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw Error(std::string("reading a worker pipe: ") + std::strerror(errno));
    if (got == 0) {
      if (done == 0) return false;
      throw Error("a worker pipe closed in the middle of a message");
    }
    done += static_cast<std::size_t>(got);
  }
  return true;
}

}  // namespace

void write_message(int fd, const Message& message) {
  std::string header = message.header.dump();
  std::uint64_t sizes[2] = {header.size(), message.payload.size()};
  write_all(fd, reinterpret_cast<const char*>(sizes), sizeof sizes);
  write_all(fd, header.data(), header.size());
  write_all(fd, message.payload.data(), message.payload.size());
}

std::optional<Message> read_message(int fd) {
  std::uint64_t sizes[2];
  if (!read_all(fd, reinterpret_cast<char*>(sizes), sizeof sizes)) return std::nullopt;
  if (sizes[0] > (64u << 20) || sizes[1] > (1u << 30)) throw Error("malformed worker message");
  std::string header(sizes[0], '\0');
  Message message;
  message.payload.resize(sizes[1]);
  if (!read_all(fd, header.data(), header.size()) ||
      !read_all(fd, message.payload.data(), message.payload.size()))
    throw Error("a worker pipe closed in the middle of a message");
  message.header = nlohmann::json::parse(header);
  return message;
}

bool wait_readable(int fd, double seconds) {
  // The second entry wakes the wait when SIGINT or SIGTERM arrives (ignored when fd is -1).
  pollfd entries[2] = {{fd, POLLIN, 0}, {interrupt_fd(), POLLIN, 0}};
  int timeout_ms = seconds < 0 ? -1 : static_cast<int>(seconds * 1000);
  for (;;) {
    throw_if_interrupted();
    int ready = ::poll(entries, 2, timeout_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) throw Error(std::string("poll on a worker pipe: ") + std::strerror(errno));
    throw_if_interrupted();
    return ready > 0;
  }
}

int spawn_self(const std::vector<std::string>& argv, const std::vector<std::pair<int, int>>& dup2s,
               pid_t* pid) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (const auto& [from, to] : dup2s) posix_spawn_file_actions_adddup2(&actions, from, to);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  std::vector<char*> words;
  for (const std::string& word : argv) words.push_back(const_cast<char*>(word.c_str()));
  words.push_back(nullptr);
  const int result =
      posix_spawn(pid, "/proc/self/exe", &actions, &attributes, words.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  return result;
}

WorkerProcess::WorkerProcess(const std::string& role, const std::string& argument) {
  int down[2], up[2];  // parent -> child, child -> parent
  if (::pipe2(down, O_CLOEXEC) != 0 || ::pipe2(up, O_CLOEXEC) != 0)
    throw Error(std::string("creating worker pipes: ") + std::strerror(errno));
  // The child's ends must survive exec: dup them to descriptors without close-on-exec.
  const int child_in = 100, child_out = 101;
  // Ctrl-C on a terminal reaches the tuner alone, which stops its workers itself after
  // recording what they did.
  const int result = spawn_self({"tilesmith-worker", "--tilesmith-worker", role,
                                 std::to_string(child_in), std::to_string(child_out), argument},
                                {{down[0], child_in}, {up[1], child_out}}, &pid_);
  ::close(down[0]);
  ::close(up[1]);
  to_child_ = down[1];
  from_child_ = up[0];
  if (result != 0) {
    ::close(to_child_);
    ::close(from_child_);
    throw Error("starting a " + role + " worker: " + std::strerror(result));
  }
  // A dead worker must surface as an error on write, not kill the tuner.
  ::signal(SIGPIPE, SIG_IGN);
}

WorkerProcess::~WorkerProcess() {
  kill();
  if (to_child_ >= 0) ::close(to_child_);
  if (from_child_ >= 0) ::close(from_child_);
}

std::optional<Message> WorkerProcess::receive(double timeout_s, bool* timed_out) {
  if (timed_out) *timed_out = false;
  if (!wait_readable(from_child_, timeout_s)) {
    if (timed_out) *timed_out = true;
    return std::nullopt;
  }
  return read_message(from_child_);
}

void WorkerProcess::kill() {
  if (pid_ <= 0 || wait_status_) return;
  ::kill(pid_, SIGKILL);
  exit_description();
}

std::string WorkerProcess::exit_description() {
  if (pid_ <= 0) return "not started";
  if (!wait_status_) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    wait_status_ = status;
  }
  int status = *wait_status_;
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "ended";
}

std::optional<WorkerArgs> parse_worker_args(int argc, char** argv) {
  if (argc != 6 || std::strcmp(argv[1], "--tilesmith-worker") != 0) return std::nullopt;
  WorkerArgs args;
  args.role = argv[2];
  args.in_fd = std::atoi(argv[3]);
  args.out_fd = std::atoi(argv[4]);
  args.argument = argv[5];
  return args;
}

}  // namespace tilesmith::tuner
