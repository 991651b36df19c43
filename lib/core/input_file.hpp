#pragma once
// Input files opened as regular files only. A FIFO, a device (/dev/zero), a socket or a directory
// given where the tool expects a file is refused by name instead of read: opening one may block
// forever (a FIFO with no writer) or read without end (/dev/zero).

#include <cstddef>
#include <cstdint>
#include <string>

namespace mnist {

// An open regular file, read sequentially. The constructor opens without blocking (O_NONBLOCK, so
// a FIFO cannot hold it up), then refuses anything but a regular file; it throws DataError naming
// `what` ("data file", "config file") and the path: missing, unreadable or not a regular file.
class InputFile {
 public:
  InputFile(const std::string& path, const char* what);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }  // at open time
  // Reads up to `n` bytes into `dst`; returns how many (0 at the end). Throws DataError on a read
  // error.
  std::size_t read(void* dst, std::size_t n);

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole file as text, refused (DataError naming `what`, the path, its size and the cap) when
// it is larger than `max_bytes` or not a regular file.
std::string read_regular_file(const std::string& path, uint64_t max_bytes, const char* what);

// For a file the tool is about to append to or overwrite in place: throws ConfigError naming
// `what` when `path` exists and is not a regular file (a FIFO left there would block the writer
// until some reader came, a device would swallow the output). stat() never blocks, even on a FIFO.
void require_regular_or_absent(const std::string& path, const std::string& what);

}  // namespace mnist
