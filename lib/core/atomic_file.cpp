#include "core/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace mnist {

namespace {
[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  MNIST_THROW(RuntimeError, "cannot {} '{}': {}", what, path, std::strerror(err));
}

// Hidden and named after the target and the writer, so a directory reader (CheckpointDirectory)
// can recognise and clean up what a crashed writer left behind.
std::string temp_name(const std::filesystem::path& dir, const std::filesystem::path& target) {
  return (dir / fmt::format(".{}.tmp.{}", target.filename().string(), ::getpid())).string();
}
}  // namespace

void write_file_atomically(const std::string& path, const void* data, std::size_t size) {
  const std::filesystem::path target(path);
  const std::filesystem::path dir = target.has_parent_path() ? target.parent_path() : ".";
  const std::string tmp = temp_name(dir, target);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("create the temporary file", tmp, errno);
  const char* bytes = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, bytes + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(fmt::format("write ({} of {} bytes written)", done, size), tmp, err);
    }
    done += static_cast<std::size_t>(n);
  }
  // The data must be on disk before the name points at it, or a crash could leave the final name
  // on an empty or partial file.
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("fsync", tmp, err);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail("close", tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    MNIST_THROW(RuntimeError, "cannot rename '{}' to '{}': {}", tmp, path, std::strerror(err));
  }
  // The rename itself lives in the directory; without this a crash could forget it.
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) fail("open the directory", dir.string(), errno);
  const int rc = ::fsync(dfd);
  const int err = errno;
  ::close(dfd);
  if (rc != 0) fail("fsync the directory", dir.string(), err);
}

}  // namespace mnist
