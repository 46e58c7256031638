#include "cli/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>

#include "tilesmith/types.hpp"

namespace tilesmith::cli {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void fail(const std::string& what, const fs::path& path, int error) {
  throw Error("cannot " + what + " " + path.string() + ": " + std::strerror(error));
}

void write_all(int fd, const std::string& text, const fs::path& path) {
  const char* data = text.data();
  std::size_t left = text.size();
  while (left > 0) {
    const ssize_t written = ::write(fd, data, left);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) fail("write", path, written < 0 ? errno : ENOSPC);
    data += written;
    left -= static_cast<std::size_t>(written);
  }
}

// The file a path ends at once every symlink is followed, also a link to a file not made yet.
fs::path final_target(const fs::path& path) {
  fs::path target = path;
  for (int links = 0; links < 40; ++links) {
    std::error_code error;
    if (!fs::is_symlink(fs::symlink_status(target, error))) return target;
    const fs::path next = fs::read_symlink(target, error);
    if (error) fail("follow the symlink", target, error.value());
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  fail("follow the symlinks of", path, ELOOP);
}

bool same_file(const fs::path& a, const fs::path& b) {
  std::error_code error;
  return fs::equivalent(a, b, error);
}

// The first 16 bytes of every SQLite 3 database file.
bool is_sqlite_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return false;
  char header[16] = {};
  const ssize_t got = ::read(fd, header, sizeof header);
  ::close(fd);
  return got == sizeof header && std::memcmp(header, "SQLite format 3", 16) == 0;
}

void refuse_databases(const fs::path& target, const fs::path& named, const OutputGuard& guard) {
  if (!guard.database.empty()) {
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
      fs::path part = guard.database;
      part += suffix;
      if (same_file(target, part))
        throw Error("refusing to write " + named.string() + ": it is " +
                    (*suffix ? "a file of " : "") + "the database being read (" +
                    guard.database.string() + ")");
    }
  }
  if (!guard.force && is_sqlite_file(target))
    throw Error("refusing to overwrite " + named.string() +
                ": it is an SQLite database (a tilesmith database?); give another file, or "
                "--force to replace it");
}

void write_through(const fs::path& target, const std::string& text) {
  const int fd = ::open(target.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) fail("open", target, errno);
  try {
    write_all(fd, text, target);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail("write", target, errno);
}

void replace_atomically(const fs::path& target, const std::string& text,
                        const struct stat* existing) {
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string name = ".";  // hidden, beside the target: rename() needs the same file system
  name.append(target.filename().string()).append(".tmp-XXXXXX");
  std::string pattern = (folder / name).string();
  const int fd = ::mkstemp(pattern.data());  // O_CREAT | O_EXCL: never follows a planted link
  if (fd < 0) fail("create a temporary file in", folder, errno);
  const fs::path temporary = pattern;
  auto discard = [&] {
    std::error_code ignored;  // the cause reported is the write's, not the cleanup's
    fs::remove(temporary, ignored);
  };
  try {
    // The replaced file keeps its permissions; a new one gets the usual 0666 less the umask.
    mode_t mode = 0;
    if (existing) {
      mode = existing->st_mode & 07777;
    } else {
      const mode_t mask = ::umask(0);
      ::umask(mask);
      mode = 0666 & ~mask;
    }
    if (::fchmod(fd, mode) != 0) fail("set the permissions of", temporary, errno);
    write_all(fd, text, target);
    if (::fsync(fd) != 0) fail("write", target, errno);
  } catch (...) {
    ::close(fd);
    discard();
    throw;
  }
  if (::close(fd) != 0) {
    const int error = errno;
    discard();
    fail("write", target, error);
  }
  if (::rename(temporary.c_str(), target.c_str()) != 0) {
    const int error = errno;
    discard();
    fail("replace", target, error);
  }
}

}  // namespace

void write_output_file(const fs::path& path, const std::string& text, const OutputGuard& guard) {
  if (path.empty()) throw Error("--out needs a file name (leave --out out to write to stdout)");
  const fs::path target = final_target(path);
  struct stat info {};
  if (::stat(target.c_str(), &info) != 0) {
    if (errno != ENOENT) fail("inspect", target, errno);
    replace_atomically(target, text, nullptr);
    return;
  }
  if (S_ISDIR(info.st_mode)) fail("write", path, EISDIR);
  if (!S_ISREG(info.st_mode)) {  // a device, FIFO or socket: written through, never replaced
    write_through(target, text);
    return;
  }
  refuse_databases(target, path, guard);
  replace_atomically(target, text, &info);
}

class CheckedStandardOutput::Buffer : public std::streambuf {
 public:
  Buffer() { setp(data_, data_ + sizeof data_); }
  int first_error() const { return first_error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    const char* next = pbase();
    while (next < pptr()) {
      const ssize_t written = ::write(STDOUT_FILENO, next, static_cast<std::size_t>(pptr() - next));
      if (written < 0 && errno == EINTR) continue;
      if (written <= 0) {
        if (!first_error_) first_error_ = written < 0 ? errno : ENOSPC;
        setp(data_, data_ + sizeof data_);  // dropped: the run fails at finish()
        return false;
      }
      next += written;
    }
    setp(data_, data_ + sizeof data_);
    return true;
  }

  char data_[1 << 16];
  int first_error_ = 0;
};

CheckedStandardOutput::CheckedStandardOutput()
    : buffer_(std::make_unique<Buffer>()), previous_(std::cout.rdbuf(buffer_.get())) {}

CheckedStandardOutput::~CheckedStandardOutput() {
  std::cout.flush();
  std::cout.rdbuf(previous_);
}

void CheckedStandardOutput::finish() {
  std::cout.flush();
  if (const int error = buffer_->first_error())
    throw Error(std::string("cannot write to standard output: ") + std::strerror(error));
}

}  // namespace tilesmith::cli
