#include "core/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace mnist {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file";
}

}  // namespace

InputFile::InputFile(const std::string& path, const char* what) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd_ < 0) {
    const int err = errno;
    if (err == ENOENT) MNIST_THROW(DataError, "{} not found: '{}'", what, path);
    MNIST_THROW(DataError, "cannot open the {} '{}': {}", what, path, std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t mode = st.st_mode;
    ::close(fd_);
    fd_ = -1;
    MNIST_THROW(DataError, "'{}' is {}; the {} must be a regular file", path, kind_of(mode), what);
  }
  // Regular files never block; the flag only guarded the open itself.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::size_t InputFile::read(void* dst, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    const ssize_t r = ::read(fd_, static_cast<char*>(dst) + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) MNIST_THROW(DataError, "cannot read '{}': {}", path_, std::strerror(errno));
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  return got;
}

std::string read_regular_file(const std::string& path, uint64_t max_bytes, const char* what) {
  InputFile file(path, what);
  if (file.size() > max_bytes)
    MNIST_THROW(DataError, "'{}' is {} bytes; a {} may be at most {} bytes", path, file.size(),
                what, max_bytes);
  // Read to the end, not to the size seen at open: a file that grew since is capped too.
  std::string text;
  char chunk[65536];
  while (const std::size_t got = file.read(chunk, sizeof chunk)) {
    if (text.size() + got > max_bytes)
      MNIST_THROW(DataError, "'{}' holds more than {} bytes; a {} may be at most {} bytes", path,
                  max_bytes, what, max_bytes);
    text.append(chunk, got);
  }
  return text;
}

void require_regular_or_absent(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) return;
  MNIST_THROW(ConfigError, "{}: '{}' is {}; remove it (the tool writes a regular file there)", what,
              path, kind_of(st.st_mode));
}

}  // namespace mnist
