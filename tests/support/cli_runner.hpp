// Running the built `tilesmith` binary as a user would: in a child process, with its own
// TILESMITH_DB inside the test's folder (no test can reach the user's cache), its stdout and
// stderr captured in files (a chatty command never blocks on a full pipe), optionally as an
// unprivileged user, with stdout on a device, or signalled while it runs.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>
#include <vector>

namespace tilesmith::testing {

struct CliRun {
  int status = -1;  // the exit code; 128 + the signal when killed by one
  std::string out, err;
};

struct CliOptions {
  std::string stdout_path;        // empty: captured into CliRun::out
  bool unprivileged = false;      // when root: run as nobody (uid and gid 65534)
  std::vector<std::string> env;   // extra NAME=VALUE entries
};

// A started `tilesmith` process; killed and reaped if never waited for.
class CliProcess {
 public:
  CliProcess(const std::vector<std::string>& args, const std::filesystem::path& dir,
             const CliOptions& options = {});
  ~CliProcess();
  CliProcess(const CliProcess&) = delete;
  CliProcess& operator=(const CliProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The output so far (for waiting until a sweep reached some point).
  std::string out_so_far() const;
  CliRun wait();

 private:
  pid_t pid_ = -1;
  std::filesystem::path out_, err_;
  bool captured_out_ = true;
};

CliRun run_cli(const std::vector<std::string>& args, const std::filesystem::path& dir,
               const CliOptions& options = {});

std::string read_bytes(const std::filesystem::path& path);
bool contains(const std::string& text, const std::string& part);
// The README's promise for every failure: a non-zero exit and one line on stderr.
void expect_error_line(const CliRun& run, const std::string& part);
// Whether this process is root (file permissions do not stop it: tests run the CLI as nobody).
bool running_as_root();

}  // namespace tilesmith::testing
