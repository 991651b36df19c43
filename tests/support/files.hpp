#pragma once
// Files for the tests that drive the real binary: a file's text, a scratch folder removed at the
// end, a shell-quoted argument, and the check that the small data set the runs train on is there.

#include <filesystem>
#include <string>

#include <catch2/catch.hpp>

namespace mnist::test {

// The whole file as bytes; "" when it cannot be read (the caller's assertions then say what).
std::string read_text(const std::filesystem::path& path);

// A fresh, empty folder under the temp directory ("mnist-train-PREFIX-NAME-PID"), removed when the
// test ends, passed or failed.
struct TempDir {
  std::filesystem::path path;
  TempDir(const std::string& prefix, const std::string& name);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path operator/(const std::string& name) const { return path / name; }
};

// `arg` in single quotes for /bin/sh, its own single quotes escaped.
std::string shell_quote(const std::string& arg);

// Fails the test (not skips: the data comes with scripts/fetch_data.sh) when data/mnist-small is
// missing from the source tree. Inline: MNIST_SOURCE_DIR is the integration tests' definition.
#ifdef MNIST_SOURCE_DIR
inline void require_mnist_small() {
  const std::filesystem::path images =
      std::filesystem::path(MNIST_SOURCE_DIR) / "data/mnist-small/train-images-idx3-ubyte";
  if (!std::filesystem::exists(images) && !std::filesystem::exists(images.string() + ".gz"))
    FAIL("these tests train on data/mnist-small: run scripts/fetch_data.sh mnist-small first");
}
#endif

}  // namespace mnist::test
