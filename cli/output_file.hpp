// Writing a file a user named with --out, the way they mean it, losing nothing:
// - a regular file (or a new one) is replaced atomically: the text goes to a temporary file
//   created exclusively (mkstemp) in the same folder, then renamed over it, so a reader sees the
//   old file or the new one and a planted symlink at a predictable name cannot redirect it;
// - a symlink is followed: its target is written, the link stays a link;
// - a device, FIFO or socket (/dev/stdout, /dev/full, a pipe) is written through, never
//   replaced;
// - an SQLite database is never overwritten unless `force`, and the database being read never.
// Every failure throws Error naming the file and the system's reason.
#pragma once

#include <filesystem>
#include <memory>
#include <streambuf>
#include <string>

namespace tilesmith::cli {

struct OutputGuard {
  std::filesystem::path database;  // the database the command reads: never written
  bool force = false;              // --force: overwrite another SQLite file
};

void write_output_file(const std::filesystem::path& path, const std::string& text,
                       const OutputGuard& guard);

// std::cout through write(2) on descriptor 1, remembering the first failure's errno: by the time
// a command ends, stdio's errno for a failed flush in the middle of its output is long gone.
// main() installs one for the whole run.
class CheckedStandardOutput {
 public:
  CheckedStandardOutput();
  ~CheckedStandardOutput();
  CheckedStandardOutput(const CheckedStandardOutput&) = delete;
  CheckedStandardOutput& operator=(const CheckedStandardOutput&) = delete;

  // Flushes; throws Error when any write failed ("No space left on device"), so a full disk or
  // a closed pipe is an error and a truncated export never reports success.
  void finish();

 private:
  class Buffer;
  std::unique_ptr<Buffer> buffer_;
  std::streambuf* previous_;
};

}  // namespace tilesmith::cli
