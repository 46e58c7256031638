// Who runs a sweep, so that another sweep can tell a live one from one that is gone. A trial left
// `running` is only abandoned when its sweep is gone: two sweeps of one problem at once must not
// abandon each other's live trials.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tilesmith::cache {

// How long a sweep on another host stays alive without a heartbeat. Sweeps write one every
// kHeartbeatInterval; this allows several missed beats (a busy database, a paused VM).
constexpr std::chrono::seconds kHeartbeatInterval{15};
constexpr std::chrono::seconds kSweepLease{120};

struct SweepOwner {
  std::string host;           // gethostname()
  std::int64_t pid = 0;
  // The boot and the process's start time (/proc/PID/stat), so that a pid reused by another
  // process after a crash or a reboot is not taken for the sweep. "" where /proc is missing.
  std::string process_start;

  static SweepOwner current();

  // Whether the process is still running: on this host by its pid and start time; on another
  // host (which cannot be asked) by its last heartbeat, `heartbeat_age` old.
  bool alive(std::chrono::seconds heartbeat_age) const;
};

}  // namespace tilesmith::cache
