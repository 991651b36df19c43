#pragma once
// Test helper: writes IDX files (raw or gzip) from vectors, and a scratch directory to put them in.
//
// Written independently of lib/data's writer so that reader tests do not check the library against
// itself. The *_bytes functions return the exact file contents, so a test can corrupt them (cut,
// append, patch a header field) before writing them with write_bytes.

#include <cstdint>
#include <string>
#include <vector>

namespace mnist::test {

enum class Compression { none, gzip };

// IDX images file contents: magic 0x00000803, count, rows, cols (big-endian), then pixels.
// pixels: [count, rows * cols]; not checked against the dims, so tests can build inconsistent
// files.
std::vector<uint8_t> idx_images_bytes(uint32_t count, uint32_t rows, uint32_t cols,
                                      const std::vector<uint8_t>& pixels);
// IDX labels file contents: magic 0x00000801, count (= labels.size()), then labels.
std::vector<uint8_t> idx_labels_bytes(const std::vector<uint8_t>& labels);

// Writes `bytes` to `path`, gzip-compressed when asked (zlib, default level). Creates or truncates.
void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes,
                 Compression compression = Compression::none);
// Gzip compression of `bytes` in memory (a complete .gz file's contents).
std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& bytes);

// Shorthands: a valid images / labels file.
void write_idx_images(const std::string& path, uint32_t count, uint32_t rows, uint32_t cols,
                      const std::vector<uint8_t>& pixels,
                      Compression compression = Compression::none);
void write_idx_labels(const std::string& path, const std::vector<uint8_t>& labels,
                      Compression compression = Compression::none);

// A fresh, empty directory under the system temp dir, removed with its contents on destruction.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  // path() + "/" + name
  std::string file(const std::string& name) const;

 private:
  std::string path_;
};

}  // namespace mnist::test
