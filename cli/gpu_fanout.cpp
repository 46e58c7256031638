#include "cli/gpu_fanout.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <iostream>
#include <map>
#include <set>

#include "templates/problem.hpp"
#include "tilesmith/types.hpp"
#include "tuner/interrupt.hpp"
#include "tuner/worker_process.hpp"

namespace tilesmith::cli {

std::vector<int> parse_gpu_list(const std::string& text, int visible) {
  std::vector<int> gpus;
  if (text == "all") {
    for (int ordinal = 0; ordinal < visible; ++ordinal) gpus.push_back(ordinal);
    return gpus;
  }
  std::set<int> seen;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    int ordinal = -1;
    const char* first = text.data() + begin;
    const char* last = text.data() + end;
    auto [stop, ec] = std::from_chars(first, last, ordinal);
    if (ec != std::errc() || stop != last || first == last || ordinal < 0)
      throw InvalidArgument("bad --gpus " + quote_input(text) +
                            ": expected 'all' or GPU ordinals separated by commas, e.g. 0,1");
    if (ordinal >= visible)
      throw InvalidArgument("--gpus names GPU " + std::to_string(ordinal) + ", but " +
                            std::to_string(visible) + " GPU" + (visible == 1 ? " is" : "s are") +
                            " visible (ordinals 0 to " + std::to_string(visible - 1) + ")");
    if (!seen.insert(ordinal).second)
      throw InvalidArgument("--gpus names GPU " + std::to_string(ordinal) +
                            " twice: two sweeps on one GPU would time each other's kernels");
    gpus.push_back(ordinal);
    begin = end + 1;
  }
  return gpus;
}

std::vector<GpuChild> split_over_gpus(const std::vector<GpuOnHost>& gpus,
                                      const std::vector<std::string>& passed,
                                      const SharedSweep& shared) {
  std::map<std::string, std::vector<int>> by_model;  // the database keys results by model
  for (const GpuOnHost& gpu : gpus) by_model[gpu.model].push_back(gpu.ordinal);
  const int jobs = std::max(1, shared.compile_jobs / std::max(1, static_cast<int>(gpus.size())));
  std::vector<GpuChild> children;
  for (const auto& [model, members] : by_model) {
    const int group = static_cast<int>(members.size());
    for (int j = 0; j < group; ++j) {
      GpuChild child;
      child.ordinal = members[j];
      child.model = model;
      child.jobs = jobs;
      child.shards = shared.shard_count * group;
      child.shard = shared.shard_index + shared.shard_count * j;
      child.args = {"tune"};
      child.args.insert(child.args.end(), passed.begin(), passed.end());
      child.args.insert(child.args.end(), {"--device", std::to_string(child.ordinal), "--jobs",
                                           std::to_string(jobs)});
      if (child.shards > 1)
        child.args.insert(child.args.end(), {"--shard", std::to_string(child.shard) + "/" +
                                                            std::to_string(child.shards)});
      if (shared.max_candidates) {
        const int share =
            *shared.max_candidates / group + (j < *shared.max_candidates % group ? 1 : 0);
        if (share == 0) continue;
        child.args.insert(child.args.end(), {"--budget", std::to_string(share)});
      } else if (!shared.seconds_budget.empty()) {
        child.args.insert(child.args.end(), {"--budget", shared.seconds_budget});
      }
      children.push_back(std::move(child));
    }
  }
  return children;
}

namespace {

// A started child and the two pipes its stdout and stderr come back through.
struct Running {
  int ordinal = 0;
  pid_t pid = -1;
  int fds[2] = {-1, -1};   // stdout, stderr
  std::string partial[2];  // a line not yet ended
};

Running start(const GpuChild& child) {
  Running running;
  running.ordinal = child.ordinal;
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0)
    throw Error(std::string("creating a pipe: ") + std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    throw Error(std::string("creating a pipe: ") + std::strerror(errno));
  }
  // A terminal's Ctrl-C reaches this process alone (spawn_self), which passes it on to each
  // child once.
  std::vector<std::string> argv = {"tilesmith"};
  argv.insert(argv.end(), child.args.begin(), child.args.end());
  const int result =
      tuner::spawn_self(argv, {{out[1], STDOUT_FILENO}, {err[1], STDERR_FILENO}}, &running.pid);
  ::close(out[1]);
  ::close(err[1]);
  running.fds[0] = out[0];
  running.fds[1] = err[0];
  if (result != 0) {
    ::close(out[0]);
    ::close(err[0]);
    throw Error("starting the sweep on GPU " + std::to_string(child.ordinal) + ": " +
                std::strerror(result));
  }
  return running;
}

// Passes on each whole line of `text`, led by the GPU; keeps the unended rest.
void pass_lines(Running& child, int stream, const char* text, std::size_t size) {
  std::string& partial = child.partial[stream];
  partial.append(text, size);
  std::ostream& to = stream == 0 ? std::cout : std::cerr;
  std::size_t begin = 0, end;
  while ((end = partial.find('\n', begin)) != std::string::npos) {
    to << "[gpu " << child.ordinal << "] "
       << std::string_view(partial).substr(begin, end - begin + 1);
    begin = end + 1;
  }
  partial.erase(0, begin);
  to.flush();
}

int exit_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace

int run_children(const std::vector<GpuChild>& children) {
  tuner::InterruptScope interrupts;
  // A child that dies must not take this process down with a write to its pipe.
  ::signal(SIGPIPE, SIG_IGN);
  std::vector<Running> running;
  try {
    for (const GpuChild& child : children) running.push_back(start(child));
  } catch (...) {
    for (Running& r : running) {
      ::kill(r.pid, SIGTERM);
      ::waitpid(r.pid, nullptr, 0);
    }
    throw;
  }
  bool passed_on = false;
  for (;;) {
    std::vector<pollfd> polled;
    std::vector<std::pair<std::size_t, int>> owners;  // child, stream
    for (std::size_t c = 0; c < running.size(); ++c)
      for (int stream = 0; stream < 2; ++stream)
        if (running[c].fds[stream] >= 0) {
          polled.push_back({running[c].fds[stream], POLLIN, 0});
          owners.emplace_back(c, stream);
        }
    if (polled.empty()) break;
    // Until the signal is passed on: the wake-up descriptor stays readable after a signal.
    if (!passed_on) polled.push_back({tuner::interrupt_fd(), POLLIN, 0});
    if (::poll(polled.data(), polled.size(), -1) < 0 && errno != EINTR)
      throw Error(std::string("waiting for the sweeps' output: ") + std::strerror(errno));
    if (const int signal = tuner::interrupt_signal(); signal != 0 && !passed_on) {
      for (const Running& r : running) ::kill(r.pid, signal);
      passed_on = true;
    }
    for (std::size_t i = 0; i < owners.size(); ++i) {
      if ((polled[i].revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
      auto [c, stream] = owners[i];
      char buffer[4096];
      const ssize_t got = ::read(running[c].fds[stream], buffer, sizeof buffer);
      if (got > 0) {
        pass_lines(running[c], stream, buffer, static_cast<std::size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        if (!running[c].partial[stream].empty()) pass_lines(running[c], stream, "\n", 1);
        ::close(running[c].fds[stream]);
        running[c].fds[stream] = -1;
      }
    }
  }
  int status = 0;
  for (const Running& r : running) {
    int wait_status = 0;
    while (::waitpid(r.pid, &wait_status, 0) < 0 && errno == EINTR) {
    }
    const int child_status = exit_status(wait_status);
    if (child_status != 0 && status == 0) status = child_status;
  }
  if (const int signal = tuner::interrupt_signal()) return 128 + signal;
  return status;
}

}  // namespace tilesmith::cli
