#include "cache/sweep_owner.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <fstream>
#include <sstream>

namespace tilesmith::cache {
namespace {

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown-host";
  return name;
}

std::string first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// Field 22 of /proc/PID/stat: clock ticks from boot to the process's start. The command name
// (field 2) may hold spaces and parentheses, so fields are counted after its last ')'.
std::string start_ticks(std::int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t name_end = stat.rfind(')');
  if (name_end == std::string::npos) return "";
  std::istringstream fields(stat.substr(name_end + 1));
  std::string field;
  for (int index = 3; fields >> field; ++index)
    if (index == 22) return field;
  return "";
}

std::string start_of_process(std::int64_t pid) {
  const std::string ticks = start_ticks(pid);
  if (ticks.empty()) return "";
  return first_line("/proc/sys/kernel/random/boot_id") + ":" + ticks;
}

}  // namespace

SweepOwner SweepOwner::current() {
  SweepOwner owner;
  owner.host = host_name();
  owner.pid = getpid();
  owner.process_start = start_of_process(owner.pid);
  return owner;
}

bool SweepOwner::alive(std::chrono::seconds heartbeat_age) const {
  if (host != host_name()) return heartbeat_age < kSweepLease;
  if (!process_start.empty()) return process_start == start_of_process(pid);
  // No /proc: the pid alone (EPERM: it exists, owned by someone else).
  return pid > 0 && pid <= INT_MAX && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace tilesmith::cache
