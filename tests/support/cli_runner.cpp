#include "support/cli_runner.hpp"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>

extern char** environ;

namespace tilesmith::testing {

namespace fs = std::filesystem;

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

void expect_error_line(const CliRun& run, const std::string& part) {
  EXPECT_NE(run.status, 0) << run.out;
  EXPECT_EQ(run.err.rfind("tilesmith: error: ", 0), 0u) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  EXPECT_TRUE(contains(run.err, part)) << "expected '" << part << "' in: " << run.err;
}

bool running_as_root() { return geteuid() == 0; }

CliProcess::CliProcess(const std::vector<std::string>& args, const fs::path& dir,
                       const CliOptions& options)
    : out_(options.stdout_path.empty() ? dir / "cli.stdout" : fs::path(options.stdout_path)),
      err_(dir / "cli.stderr"),
      captured_out_(options.stdout_path.empty()) {
  static const std::string cli =
      (fs::read_symlink("/proc/self/exe").parent_path() / TILESMITH_CLI_FROM_TESTS).string();
  std::vector<std::string> strings = {cli};
  strings.insert(strings.end(), args.begin(), args.end());
  std::vector<std::string> env = {"TILESMITH_DB=" + (dir / "env-default.db").string()};
  for (char** entry = environ; *entry; ++entry)
    if (std::string(*entry).rfind("TILESMITH_DB=", 0) != 0) env.push_back(*entry);
  env.insert(env.end(), options.env.begin(), options.env.end());
  auto pointers = [](std::vector<std::string>& from) {
    std::vector<char*> to;
    for (std::string& s : from) to.push_back(s.data());
    to.push_back(nullptr);
    return to;
  };
  std::vector<char*> argv = pointers(strings), envp = pointers(env);
  const bool drop = options.unprivileged && running_as_root();
  const int out_flags = captured_out_ ? O_WRONLY | O_CREAT | O_TRUNC : O_WRONLY;
  // Everything the child needs is prepared above: after fork it only makes system calls.
  pid_ = fork();
  if (pid_ == 0) {
    const int in = open("/dev/null", O_RDONLY);
    const int out = open(out_.c_str(), out_flags, 0644);
    const int err = open(err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (in < 0 || out < 0 || err < 0) _exit(126);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    if (drop && (setgroups(0, nullptr) != 0 || setgid(65534) != 0 || setuid(65534) != 0))
      _exit(125);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  if (pid_ < 0) ADD_FAILURE() << "cannot fork: " << std::strerror(errno);
}

CliProcess::~CliProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string CliProcess::out_so_far() const { return read_bytes(out_); }

CliRun CliProcess::wait() {
  CliRun run;
  if (pid_ <= 0) return run;
  int wait_status = 0;
  while (waitpid(pid_, &wait_status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  run.status = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status) : 128 + WTERMSIG(wait_status);
  if (captured_out_) {
    run.out = read_bytes(out_);
    fs::remove(out_);
  }
  run.err = read_bytes(err_);
  fs::remove(err_);
  return run;
}

CliRun run_cli(const std::vector<std::string>& args, const fs::path& dir,
               const CliOptions& options) {
  return CliProcess(args, dir, options).wait();
}

}  // namespace tilesmith::testing
